//! Host bindings generated from `wit/policy.wit` (contract 0.3.0), and from the frozen 0.2.0 and
//! 0.1.0 contracts (`wit/compat/`) for components built before it.
//!
//! One world with every hook is generated per version; a component that implements only some
//! hooks is still usable because each exported interface is looked up on its own (see
//! [`crate::engine::CompiledPolicy`]). 0.2.0 has the same types as 0.3.0 (0.3.0 only added the
//! `cluster` import), so [`v0_2`] shares them; 0.1.0 lacks `recheck-at` in the verdict record,
//! and [`v0_1`] converts its types into the current ones, so the rest of the engine knows one
//! set of types.

wasmtime::component::bindgen!({
    world: "full-policy",
    path: "../../wit",
    // A read may trap: one made after the call's deadline ends the call as `timeout`.
    imports: { "tfjob:policy/cluster": trappable },
});

pub use exports::tfjob::policy::{classify, decorate, resources, settings};
pub use tfjob::policy::cluster::{Freshness, Got, Listed, ReadError};
pub use tfjob::policy::types::{FailureKind, JobContext, Phase, PolicyError, Verdict};

/// The contract as released at 0.2.0: the current types, without the `cluster` import.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "full-policy",
        path: "../../wit/compat/policy-0.2.0.wit",
        with: {
            "tfjob:policy/types": super::tfjob::policy::types,
        },
    });

    pub use exports::tfjob::policy::{classify, decorate, resources, settings};

    impl From<tfjob::policy::log::Level> for super::tfjob::policy::log::Level {
        fn from(l: tfjob::policy::log::Level) -> super::tfjob::policy::log::Level {
            use super::tfjob::policy::log::Level as Current;
            use tfjob::policy::log::Level as L;
            match l {
                L::Trace => Current::Trace,
                L::Debug => Current::Debug,
                L::Info => Current::Info,
                L::Warn => Current::Warn,
                L::Error => Current::Error,
            }
        }
    }
}

/// The contract as released at 0.1.0.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        world: "full-policy",
        path: "../../wit/compat/policy-0.1.0.wit",
    });

    pub use exports::tfjob::policy::{classify, decorate, resources, settings};
    use tfjob::policy::types as old;

    use super::tfjob::policy::{log as current_log, types as current};

    impl From<&current::JobContext> for old::JobContext {
        fn from(c: &current::JobContext) -> old::JobContext {
            old::JobContext {
                job_name: c.job_name.clone(),
                namespace: c.namespace.clone(),
                job_uid: c.job_uid.clone(),
                job_labels: c.job_labels.clone(),
                job_annotations: c.job_annotations.clone(),
                replica_type: c.replica_type.clone(),
                replica_index: c.replica_index,
                replica_count: c.replica_count,
                attempt: c.attempt,
            }
        }
    }

    impl From<old::PolicyError> for current::PolicyError {
        fn from(e: old::PolicyError) -> current::PolicyError {
            match e {
                old::PolicyError::InvalidInput(m) => current::PolicyError::InvalidInput(m),
                old::PolicyError::InvalidSettings(m) => current::PolicyError::InvalidSettings(m),
                old::PolicyError::Failed(m) => current::PolicyError::Failed(m),
            }
        }
    }

    /// A 0.1.0 verdict, given at `now`: it cannot say when to look again, so `recheck-at` is
    /// `now` and the verdict is never reused (that contract made no promise that would allow
    /// it).
    pub fn verdict_at(v: old::Verdict, now: &str) -> current::Verdict {
        {
            current::Verdict {
                phase: match v.phase {
                    old::Phase::Undefined => current::Phase::Undefined,
                    old::Phase::Queued => current::Phase::Queued,
                    old::Phase::WaitingForResources => current::Phase::WaitingForResources,
                    old::Phase::Initializing => current::Phase::Initializing,
                    old::Phase::Running => current::Phase::Running,
                    old::Phase::Succeeded => current::Phase::Succeeded,
                    old::Phase::RetryableFailure => current::Phase::RetryableFailure,
                    old::Phase::PermanentFailure => current::Phase::PermanentFailure,
                },
                reason: v.reason,
                message: v.message,
                kind: v.kind.map(|k| match k {
                    old::FailureKind::User => current::FailureKind::User,
                    old::FailureKind::System => current::FailureKind::System,
                }),
                occurred_at: v.occurred_at,
                recheck_at: Some(now.to_owned()),
            }
        }
    }

    impl From<tfjob::policy::log::Level> for current_log::Level {
        fn from(l: tfjob::policy::log::Level) -> current_log::Level {
            use tfjob::policy::log::Level as L;
            match l {
                L::Trace => current_log::Level::Trace,
                L::Debug => current_log::Level::Debug,
                L::Info => current_log::Level::Info,
                L::Warn => current_log::Level::Warn,
                L::Error => current_log::Level::Error,
            }
        }
    }
}
