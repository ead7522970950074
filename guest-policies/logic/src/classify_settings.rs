//! The classification policy's settings document, and Go duration strings.
//!
//! [`crate::classify::ClassifySettings`] holds `std::time::Duration`s; a settings document
//! spells them the way Flyte's configuration (and every Go tool) does: `3m`, `90s`, `1h30m`,
//! `0s`, `1.5h`, `250ms`. [`ClassifySettingsDoc`] is that document; it converts into the typed
//! settings, naming the field of a bad duration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::classify::ClassifySettings;
use crate::settings::PolicySettings;

/// Settings of the classification policy, as written in JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClassifySettingsDoc {
    /// How long `ImagePullBackOff` may last before the pod fails (retryably). Default `3m`.
    pub image_pull_backoff_grace_period: String,
    /// How long `CreateContainerError` may last before the pod fails (permanently). Default `3m`.
    pub create_container_error_grace_period: String,
    /// How long `CreateContainerConfigError` may last before the pod fails (permanently).
    /// Default `0s`: at once, as upstream, since a missing ConfigMap or Secret rarely appears.
    pub create_container_config_error_grace_period: String,
    /// A pod still pending after this long fails retryably; `0s` (the default) turns the
    /// timeout off, as Flyte's `PodPendingTimeout`.
    pub pod_pending_timeout: String,
    /// Treat `OOMKilled` as a permanent failure instead of a retryable one. Default `false`.
    pub oom_killed_is_permanent: bool,
}

impl Default for ClassifySettingsDoc {
    fn default() -> Self {
        ClassifySettingsDoc {
            image_pull_backoff_grace_period: "3m".into(),
            create_container_error_grace_period: "3m".into(),
            create_container_config_error_grace_period: "0s".into(),
            pod_pending_timeout: "0s".into(),
            oom_killed_is_permanent: false,
        }
    }
}

impl ClassifySettingsDoc {
    /// The typed settings; an unparsable duration is an error naming its field.
    pub fn to_settings(&self) -> Result<ClassifySettings, String> {
        let duration =
            |field: &str, text: &str| parse_go_duration(text).map_err(|e| format!("{field}: {e}"));
        let timeout = duration("podPendingTimeout", &self.pod_pending_timeout)?;
        Ok(ClassifySettings {
            image_pull_backoff_grace_period: duration(
                "imagePullBackoffGracePeriod",
                &self.image_pull_backoff_grace_period,
            )?,
            create_container_error_grace_period: duration(
                "createContainerErrorGracePeriod",
                &self.create_container_error_grace_period,
            )?,
            create_container_config_error_grace_period: duration(
                "createContainerConfigErrorGracePeriod",
                &self.create_container_config_error_grace_period,
            )?,
            pod_pending_timeout: (!timeout.is_zero()).then_some(timeout),
            oom_killed_is_permanent: self.oom_killed_is_permanent,
        })
    }
}

impl TryFrom<&ClassifySettingsDoc> for ClassifySettings {
    type Error = String;

    fn try_from(doc: &ClassifySettingsDoc) -> Result<Self, Self::Error> {
        doc.to_settings()
    }
}

impl PolicySettings for ClassifySettingsDoc {
    fn validate(&self) -> Result<(), String> {
        self.to_settings().map(|_| ())
    }
}

/// Parses a Go duration string (`time.ParseDuration`): a sequence of decimal numbers, each with
/// an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), or a bare `0`.
/// Negative durations are rejected: every duration in these settings is a length of time.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::settings_from_json;

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
            assert_eq!(parse_go_duration(text), Ok(expected), "{text}");
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
            let err = parse_go_duration(bad).expect_err(bad);
            assert!(
                err.starts_with(&format!("invalid duration {bad:?}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn defaults_match_the_typed_defaults() {
        let doc: ClassifySettingsDoc = settings_from_json("{}").unwrap();
        assert_eq!(doc.to_settings().unwrap(), ClassifySettings::default());
        let doc: ClassifySettingsDoc = settings_from_json("").unwrap();
        assert_eq!(
            ClassifySettings::try_from(&doc).unwrap(),
            ClassifySettings::default()
        );
    }

    #[test]
    fn documents_convert_and_errors_name_the_field() {
        let doc: ClassifySettingsDoc = settings_from_json(
            r#"{"imagePullBackoffGracePeriod": "90s", "createContainerErrorGracePeriod": "1h30m",
                "createContainerConfigErrorGracePeriod": "30s", "podPendingTimeout": "10m",
                "oomKilledIsPermanent": true}"#,
        )
        .unwrap();
        let s = doc.to_settings().unwrap();
        assert_eq!(s.image_pull_backoff_grace_period, secs(90));
        assert_eq!(s.create_container_error_grace_period, secs(5400));
        assert_eq!(s.create_container_config_error_grace_period, secs(30));
        assert_eq!(s.pod_pending_timeout, Some(secs(600)));
        assert!(s.oom_killed_is_permanent);

        let err =
            settings_from_json::<ClassifySettingsDoc>(r#"{"podPendingTimeout": "10 minutes"}"#)
                .unwrap_err();
        assert!(
            err.starts_with("podPendingTimeout: invalid duration \"10 minutes\""),
            "{err}"
        );
        let err =
            settings_from_json::<ClassifySettingsDoc>(r#"{"imagePullBackOffGracePeriod": "1m"}"#)
                .unwrap_err();
        assert!(
            err.starts_with(
                "imagePullBackOffGracePeriod: unknown field `imagePullBackOffGracePeriod`"
            ),
            "{err}"
        );
        let err = settings_from_json::<ClassifySettingsDoc>(r#"{"oomKilledIsPermanent": "yes"}"#)
            .unwrap_err();
        assert!(
            err.starts_with("oomKilledIsPermanent: invalid type"),
            "{err}"
        );
    }
}
