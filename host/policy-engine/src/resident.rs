//! How much of a range of the operator's address space is resident in memory, read from
//! `/proc/self/smaps`: what a mapped compiled policy costs now, as opposed to its size.
//!
//! A compiled policy mapped from a file is resident only where calls have touched it. The
//! kernel reports residency per mapping; wasmtime maps one image as one region (split by the
//! protection of its sections), so the mappings inside an image's range add up to it.

use std::ops::Range;

/// The resident bytes of the mappings of `smaps` (the text of `/proc/PID/smaps`) inside
/// `range`; a mapping that straddles its edge counts in proportion to its overlap.
pub fn resident_in(smaps: &str, range: Range<usize>) -> u64 {
    let mut total = 0u64;
    let mut mapping: Option<Range<usize>> = None;
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Rss:") {
            let Some(m) = mapping.take() else { continue };
            let kib: u64 = kib
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            let len = (m.end - m.start) as u64;
            let overlap = range
                .end
                .min(m.end)
                .saturating_sub(range.start.max(m.start)) as u64;
            if len > 0 && overlap > 0 {
                let bytes = kib.saturating_mul(1024);
                total = total.saturating_add(bytes.saturating_mul(overlap.min(len)) / len);
            }
        } else if let Some(range) = header(line) {
            mapping = Some(range);
        }
    }
    total
}

/// The address range of a mapping's header line (`7f00-7f10 r-xp ...`), if it is one.
fn header(line: &str) -> Option<Range<usize>> {
    let (start, end) = line.split(' ').next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    (start <= end).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
10000-14000 r--p 00000000 fd:01 42 /cache/a.cwasm
Size:                 16 kB
Rss:                   8 kB
Pss:                   8 kB
14000-18000 r-xp 00004000 fd:01 42 /cache/a.cwasm
Size:                 16 kB
Rss:                  12 kB
20000-28000 rw-p 00000000 00:00 0
Size:                 32 kB
Rss:                  32 kB
VmFlags: rd wr mr mw me ac sd
";

    #[test]
    fn mappings_inside_the_range_add_up_and_others_do_not_count() {
        assert_eq!(resident_in(SMAPS, 0x10000..0x18000), 20 << 10);
        assert_eq!(resident_in(SMAPS, 0x20000..0x28000), 32 << 10);
        assert_eq!(resident_in(SMAPS, 0x30000..0x40000), 0);
        assert_eq!(resident_in(SMAPS, 0x50000..0x50000), 0);
    }

    #[test]
    fn a_straddling_mapping_counts_in_proportion() {
        // Half of the 32 kB anonymous mapping.
        assert_eq!(resident_in(SMAPS, 0x24000..0x30000), 16 << 10);
    }

    #[test]
    fn malformed_text_counts_nothing() {
        let bad = "zz-yy r--p\nRss: lots kB\n1000-0 r--p\nRss: 4 kB\nRss: 4 kB\n";
        assert_eq!(resident_in(bad, 0..usize::MAX), 0);
    }

    #[test]
    fn this_process_has_resident_memory() {
        // Written, so resident. (It may share a mapping with other allocations, counted in
        // proportion, so only its presence is certain.)
        let block = vec![1u8; 4 << 20];
        let at = block.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let bytes = resident_in(&smaps, at..at + block.len());
        assert!(bytes > 0 && bytes <= 4 << 20, "{bytes}");
    }
}
