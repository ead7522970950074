//! Go durations (`time.Duration`), as Kubernetes components take and print them: settings
//! and flags (`90s`, `1h30m`) are parsed by [`parse_go`], messages that quote a duration the
//! way kube-scheduler does use [`format_go`].

use std::time::Duration;

/// Parses a Go duration string (`time.ParseDuration`): a sequence of decimal numbers, each with
/// an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), or a bare `0`.
/// Negative durations are rejected: every duration in these settings is a length of time.
pub fn parse_go(text: &str) -> Result<Duration, String> {
    let invalid = |why: &str| format!("invalid duration {text:?}: {why}");
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(invalid("must not be negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid("expected a number and a unit, e.g. \"3m\""));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after) = rest.split_at(int_len);
        rest = after;
        let mut frac_digits = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid("expected a number"));
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        rest = after;
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(invalid("missing unit")),
            other => return Err(invalid(&format!("unknown unit {other:?}"))),
        };
        let whole: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| invalid("out of range"))?
        };
        // Like Go, the fraction is truncated to whole nanoseconds; digits past 19 cannot change it.
        let frac_digits = &frac_digits[..frac_digits.len().min(19)];
        let fraction = if frac_digits.is_empty() {
            0
        } else {
            let scaled: u128 = frac_digits.parse().map_err(|_| invalid("out of range"))?;
            scaled * unit_nanos / 10u128.pow(frac_digits.len() as u32)
        };
        total = whole
            .checked_mul(unit_nanos)
            .and_then(|n| n.checked_add(fraction))
            .and_then(|n| n.checked_add(total))
            .filter(|n| *n <= i64::MAX as u128)
            .ok_or_else(|| invalid("out of range"))?;
    }
    Ok(Duration::from_nanos(total as u64))
}

/// A duration as Go's `time.Duration` prints it: `500ms`, `10s`, `1.5s`, `1m30s`, `1h0m0s`.
pub fn format_go(d: Duration) -> String {
    let millis = d.as_millis();
    if millis == 0 {
        return "0s".into();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let secs = d.as_secs();
    let frac = d.subsec_millis();
    let seconds = if frac == 0 {
        format!("{}s", secs % 60)
    } else {
        let mut f = format!("{frac:03}");
        while f.ends_with('0') {
            f.pop();
        }
        format!("{}.{f}s", secs % 60)
    };
    match (secs / 3600, secs / 60 % 60) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn go_durations() {
        for (text, expected) in [
            ("3m", secs(180)),
            ("90s", secs(90)),
            ("1h30m", secs(5400)),
            ("0s", Duration::ZERO),
            ("0", Duration::ZERO),
            ("+5s", secs(5)),
            ("1.5h", secs(5400)),
            (".5s", Duration::from_millis(500)),
            ("1.s", secs(1)),
            ("250ms", Duration::from_millis(250)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h1m1s1ms", Duration::from_millis(3_661_001)),
            (
                "0.3333333333333333333333s",
                Duration::from_nanos(333_333_333),
            ),
        ] {
            assert_eq!(parse_go(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn bad_go_durations_quote_the_text() {
        for bad in [
            "",
            "3",
            "3 m",
            "-1m",
            "1d",
            "m",
            ".s",
            "1.5.5s",
            "3M",
            "99999999999999999999h",
        ] {
            let err = parse_go(bad).expect_err(bad);
            assert!(
                err.starts_with(&format!("invalid duration {bad:?}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn formatted_as_go_prints_them() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(500), "500ms"),
            (secs(10), "10s"),
            (Duration::from_millis(1500), "1.5s"),
            (secs(90), "1m30s"),
            (secs(3600), "1h0m0s"),
        ] {
            assert_eq!(format_go(d), text);
            assert_eq!(parse_go(text), Ok(d), "{text} reads back");
        }
    }
}
