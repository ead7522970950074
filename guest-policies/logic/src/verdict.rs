//! The classification result, shaped like the WIT `verdict` record.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A classification's phase, from waiting in the queue to a final outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Undefined,
    Queued,
    WaitingForResources,
    Initializing,
    Running,
    Succeeded,
    RetryableFailure,
    PermanentFailure,
}

impl Phase {
    /// A failure the operator must act on.
    pub fn is_failure(self) -> bool {
        matches!(self, Phase::RetryableFailure | Phase::PermanentFailure)
    }

    /// Still on the way to running.
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            Phase::Undefined | Phase::Queued | Phase::WaitingForResources | Phase::Initializing
        )
    }
}

/// Whose fault a failure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    User,
    System,
}

/// A classification of one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Classification {
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Set on failures only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// When the deciding condition began, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<Timestamp>,
    /// When time alone may change this classification (a grace period or timeout ending);
    /// `None`: only a change of the pod can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_at: Option<Timestamp>,
}

impl Classification {
    /// A classification with no reason or message.
    pub fn bare(phase: Phase) -> Classification {
        Classification {
            phase,
            reason: String::new(),
            message: String::new(),
            kind: None,
            occurred_at: None,
            recheck_at: None,
        }
    }
}
