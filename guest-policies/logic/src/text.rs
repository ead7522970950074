//! Cutting text to a byte budget without splitting a character.
//!
//! Every text the operator shows but did not write (a policy's error or log message, an API
//! server's reason) is bounded before it is stored in an event, a condition or a log line.
//! `String::truncate` panics when the cut falls inside a multi-byte character, and guests choose
//! their bytes freely, so every crate cuts through this one module.

/// The longest prefix of `text` of at most `max` bytes.
pub fn prefix(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// Cuts `text` in place to at most `max` bytes.
pub fn truncate(text: &mut String, max: usize) {
    let end = text.floor_char_boundary(max);
    text.truncate(end);
}

/// `text` cut to at most `max` bytes, with `…` appended when something was cut (the ellipsis
/// is not counted in `max`), so a reader knows the text goes on.
pub fn elided(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", prefix(text, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_never_split_a_character() {
        // One-, two-, three- and four-byte characters at every cut position.
        let text = "aé€😀aé€😀";
        for max in 0..=text.len() + 2 {
            let p = prefix(text, max);
            assert!(p.len() <= max, "{max}");
            assert!(text.starts_with(p));
            // The cut is the longest possible: one more character would not fit.
            let next = text[p.len()..].chars().next().map_or(0, char::len_utf8);
            assert!(p.len() == text.len() || p.len() + next > max, "{max}");
            let mut owned = text.to_owned();
            truncate(&mut owned, max);
            assert_eq!(owned, p);
        }
    }

    #[test]
    fn elided_marks_a_cut_only() {
        assert_eq!(elided("short", 10), "short");
        assert_eq!(elided("exactly", 7), "exactly");
        assert_eq!(elided("ééé", 3), "é…");
        assert_eq!(elided("😀", 3), "…");
    }
}
