//! Settings documents: decoding, defaults and validation, for `validate-settings` and the hooks.
//!
//! The operator validates a policy's settings once, through the `settings` export, before it
//! activates the policy, and then passes the same document to every hook call. A hook still
//! decodes and checks it (it cannot keep state between calls: every call runs in a fresh
//! instance), and reports a bad document as `policy-error::invalid-settings`.
//!
//! A settings type implements [`PolicySettings`]: serde decoding (use `deny_unknown_fields` so
//! misspelt keys are errors) plus `validate` for what serde cannot check. Empty text, `{}` and
//! `null` all mean the defaults.

pub use tfjob_policy_logic::settings::PolicySettings;

use crate::wit::PolicyError;

/// Implements `validate-settings`: `Ok` or the reason, naming the field.
pub fn validate<T: PolicySettings>(json: &str) -> Result<(), String> {
    tfjob_policy_logic::settings::settings_from_json::<T>(json).map(|_| ())
}

/// Decodes and validates the settings a hook receives.
pub fn load<T: PolicySettings>(json: &str) -> Result<T, PolicyError> {
    tfjob_policy_logic::settings::settings_from_json(json).map_err(PolicyError::InvalidSettings)
}
