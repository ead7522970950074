//! The standard process metrics of Prometheus client libraries (`process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from `/proc` at every scrape.
//!
//! Only Linux has `/proc`; elsewhere the collector serves nothing, and so does a scrape for a
//! file that cannot be read (each metric is left out alone, the scrape goes on). The parsing is
//! pure and tested on sample files; the reading is a thin shell around it.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Clock ticks per second of the times in `/proc/PID/stat`. The kernel reports them in
/// `USER_HZ`, which is 100 on every architecture Linux supports today, whatever its internal
/// tick rate; Prometheus' own `procfs` makes the same assumption, which spares a libc call.
const USER_HZ: f64 = 100.0;

/// Registers the process collector in `registry`.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// What one scrape found; `None` where a file could not be read or parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessSample {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// CPU time and start of the process, from `/proc/self/stat`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// User plus system time, in seconds.
    pub cpu_seconds: f64,
    /// Start time, in clock ticks after boot.
    pub start_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    // Fields from 3 (state) on; utime is field 14, stime 15, starttime 22.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let (utime, stime, start) = (field(14)?, field(15)?, field(22)?);
    Some(Stat {
        cpu_seconds: (utime + stime) as f64 / USER_HZ,
        start_ticks: start,
    })
}

/// Resident and virtual memory in bytes, from the `VmRSS` and `VmSize` lines of
/// `/proc/PID/status` (in kB there, which spares knowing the page size).
pub fn parse_status(text: &str) -> (Option<u64>, Option<u64>) {
    let kilobytes = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|value| value.trim().strip_suffix("kB"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .and_then(|kb| kb.checked_mul(1024))
    };
    (kilobytes("VmRSS"), kilobytes("VmSize"))
}

/// The soft limit of open files, from `/proc/PID/limits`; `None` when unlimited or unreadable.
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The boot time in seconds since the epoch, from the `btime` line of `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The collector registered in the registry; it holds nothing, every scrape reads afresh.
#[derive(Debug)]
pub struct ProcessCollector;

#[cfg(target_os = "linux")]
fn sample() -> ProcessSample {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
    let (resident_bytes, virtual_bytes) = read("/proc/self/status")
        .as_deref()
        .map(parse_status)
        .unwrap_or_default();
    let boot = read("/proc/stat").as_deref().and_then(parse_boot_time);
    ProcessSample {
        resident_bytes,
        virtual_bytes,
        cpu_seconds: stat.map(|s| s.cpu_seconds),
        // The directory handle of this listing is counted too, as client_golang counts it.
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64),
        max_fds: read("/proc/self/limits").as_deref().and_then(parse_max_fds),
        start_time_seconds: boot
            .zip(stat)
            .map(|(boot, s)| boot as f64 + s.start_ticks as f64 / USER_HZ),
    }
}

#[cfg(not(target_os = "linux"))]
fn sample() -> ProcessSample {
    ProcessSample::default()
}

fn gauge<T>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<T>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<T>: EncodeMetric,
{
    let Some(value) = value else { return Ok(()) };
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = sample();
        if let Some(seconds) = s.cpu_seconds {
            let counter = ConstCounter::new(seconds);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        let int = |v: Option<u64>| v.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            int(s.resident_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            int(s.virtual_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            int(s.open_fds),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            int(s.max_fds),
        )?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            s.start_time_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let text = "4242 (tfjob (op) x) S 1 4242 4242 0 -1 4194560 5311 0 12 0 250 75 0 0 20 0 \
                    9 0 123456 734003200 4321 18446744073709551615 1 1 0 0 0 0 0 4096 17670\n";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_seconds: 3.25,
                start_ticks: 123_456
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
    }

    #[test]
    fn memory_is_read_in_kilobytes_from_status() {
        let text = "Name:\ttfjob-operator\nVmPeak:\t  900000 kB\nVmSize:\t  716800 kB\n\
                    VmRSS:\t   40960 kB\nThreads:\t9\n";
        assert_eq!(
            parse_status(text),
            (Some(40_960 * 1024), Some(716_800 * 1024))
        );
        assert_eq!(parse_status("Name:\tkthreadd\n"), (None, None));
    }

    #[test]
    fn the_soft_open_files_limit_is_the_maximum() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max open files            1024                 1048576              files     \n";
        assert_eq!(parse_max_fds(text), Some(1024));
        let unlimited = text.replace("1024      ", "unlimited ");
        assert_eq!(parse_max_fds(&unlimited), None);
    }

    #[test]
    fn boot_time_comes_from_btime() {
        let text = "cpu  1 2 3 4\nintr 5\nbtime 1764600000\nprocesses 99\n";
        assert_eq!(parse_boot_time(text), Some(1_764_600_000));
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_measured_on_linux() {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            let prefix = format!("\n{name} ");
            let at = text
                .find(&prefix)
                .unwrap_or_else(|| panic!("{name} in {text}"));
            text[at + prefix.len()..]
                .lines()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 0.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(
            value("process_open_fds") >= 3.0,
            "stdin, stdout, stderr at least"
        );
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start}"
        );
    }
}
