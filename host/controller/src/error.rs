//! The controller's error type, with a low-cardinality category for events and metrics.

use tfjob_planner::PlanError;

/// Why a reconcile failed. Every variant is retried with the per-job backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed (network, server error, forbidden, ...).
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A policy with failure policy `Fail` could not decide.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A policy call inside the planner ran past the bound derived from the sandbox's deadline;
    /// the reconcile stopped waiting for it.
    #[error(
        "a policy call has not returned after {running:?} (the bound is {bound:?}); gave up waiting"
    )]
    PolicyStuck {
        running: std::time::Duration,
        bound: std::time::Duration,
    },
    /// The planner task did not finish (it panicked or was cancelled).
    #[error("planner task failed: {0}")]
    PlannerTask(String),
    /// An object the operator built could not be encoded (a bug, reported instead of panicking).
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Every value [`Error::category`] takes.
    pub const CATEGORIES: [&'static str; 3] = ["api", "policy", "internal"];

    /// Metric label and event wording: `api`, `policy` or `internal`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "api",
            Error::Plan(_) | Error::PolicyStuck { .. } => "policy",
            Error::PlannerTask(_) | Error::Internal(_) => "internal",
        }
    }

    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            action: action.into(),
            source,
        }
    }
}
