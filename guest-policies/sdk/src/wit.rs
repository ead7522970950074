//! The contract's shared types and the `log` and `cluster` imports, generated from
//! `wit/policy.wit`.
//!
//! These are generated from a world that only imports `tfjob:policy/types`, `tfjob:policy/log`
//! and `tfjob:policy/cluster`, so linking this crate never adds exports to a policy; the
//! policy's own world (see [`crate::export_policy!`]) maps these interfaces here.

#[allow(unsafe_code, dead_code, missing_docs, clippy::all)]
mod generated {
    wit_bindgen::generate!({
        inline: "
            package tfjob:policy-sdk;

            world shared {
                import tfjob:policy/types@0.3.0;
                import tfjob:policy/log@0.3.0;
                import tfjob:policy/cluster@0.3.0;
            }
        ",
        path: "../../wit",
        world: "tfjob:policy-sdk/shared",
        // `types` has no functions, so nothing here uses its types; generate them anyway.
        generate_unused_types: true,
        generate_all,
        additional_derives: [PartialEq, Eq],
    });
}

pub use generated::tfjob::policy::{cluster, log, types};
pub use types::{FailureKind, JobContext, Phase, PolicyError, Verdict};

// wit-bindgen implements `Display` (as `Debug`) and `Error` for `PolicyError` itself.

impl PolicyError {
    /// The input JSON is not what the policy expects; `message` names the field.
    pub fn invalid_input(message: impl Into<String>) -> PolicyError {
        PolicyError::InvalidInput(message.into())
    }

    /// The settings document is invalid; `message` names the field.
    pub fn invalid_settings(message: impl Into<String>) -> PolicyError {
        PolicyError::InvalidSettings(message.into())
    }

    /// Any other failure.
    pub fn failed(message: impl Into<String>) -> PolicyError {
        PolicyError::Failed(message.into())
    }

    /// The explanation, whatever the case.
    pub fn message(&self) -> &str {
        match self {
            PolicyError::InvalidInput(m)
            | PolicyError::InvalidSettings(m)
            | PolicyError::Failed(m) => m,
        }
    }
}
