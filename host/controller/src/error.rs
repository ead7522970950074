//! The controller's error type, with a low-cardinality category for events and metrics.

use std::time::Duration;

use tfjob_planner::PlanError;

use crate::backoff::{API_FIRST_RETRY, FIRST_RETRY};

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

    /// The delay before the first retry of a job whose reconcile failed this way; each further
    /// consecutive failure doubles it. An API error is usually over in moments (a 500, a
    /// throttled or conflicting write, a dropped connection), and a job missing a pod whose
    /// create failed waits on the retry: it comes soon, as training-operator 1.9's work queue
    /// retried from 5 ms. A policy that could not decide, or an internal error, fails the same
    /// way until something changes, so it waits longer before the sandbox is asked again.
    pub fn first_retry(&self) -> Duration {
        match self {
            Error::Kube { .. } => API_FIRST_RETRY,
            _ => FIRST_RETRY,
        }
    }

    /// The wait the API server asked for (`Retry-After` on a 429 or 503), if it asked.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|&secs| secs > 0)
                .map(|secs| Duration::from_secs(u64::from(secs))),
            _ => None,
        }
    }

    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            action: action.into(),
            source,
        }
    }
}
