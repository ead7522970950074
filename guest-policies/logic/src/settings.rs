//! Loading a policy's settings document: JSON, defaults for an empty document, validation.
//!
//! The operator passes `{}` when no settings are configured, but a hand-written policy
//! configuration may also hold an empty string or `null`; all three mean "the defaults", so
//! every default policy behaves the same whichever the platform team wrote.

use serde::de::DeserializeOwned;

use crate::json::from_json;

/// A settings document of one policy.
pub trait PolicySettings: DeserializeOwned + Default {
    /// Checks what serde cannot (quantities parse, paths are absolute, names are valid). The
    /// error names the offending field, e.g. `accelerators["nvidia.com/gpu"].volumes[0].name:
    /// must not be empty`.
    fn validate(&self) -> Result<(), String>;
}

/// Parses and validates a settings document; empty text, whitespace and `null` give the
/// defaults.
pub fn settings_from_json<T: PolicySettings>(text: &str) -> Result<T, String> {
    let trimmed = text.trim();
    let settings = if trimmed.is_empty() || trimmed == "null" {
        T::default()
    } else {
        from_json("", trimmed)?
    };
    settings.validate()?;
    Ok(settings)
}
