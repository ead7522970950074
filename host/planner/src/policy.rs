//! The policy seam: the pod-level decisions the planner delegates.
//!
//! The planner builds the base pod exactly as training-operator would, then hands it to
//! [`PodPolicies::shape_pod`] (the [`Hook::Decorate`] and [`Hook::Resources`] hooks and the
//! mutation guard, in that order) and asks [`PodPolicies::classify`] ([`Hook::Classify`]) for a
//! [`Verdict`] on every observed pod. Both calls are synchronous and may block (a Wasm engine
//! runs guests inside them), so callers run the planner off the async executor. The built-in
//! [`crate::native::NativePolicies`] implements the default behaviour in Rust; the Wasm engine
//! implements the same trait.
//!
//! [`Hook`] is the one name of a hook everywhere: the WIT interface a policy exports, a policy
//! manifest's `hooks`, metric labels, and the seam's methods.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use tfjob_api::ReplicaType;

/// A policy hook: one pod-level decision a policy may make, exported as one WIT interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hook {
    /// Decorates a freshly built pod (`decorate-pod`).
    Decorate,
    /// Overrides one container's resource requirements (`override-resources`).
    Resources,
    /// Classifies an observed pod (`classify-pod`).
    Classify,
}

impl Hook {
    pub const ALL: [Hook; 3] = [Hook::Decorate, Hook::Resources, Hook::Classify];

    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Decorate => "decorate",
            Hook::Resources => "resources",
            Hook::Classify => "classify",
        }
    }

    /// The WIT interface a component exports for this hook (contract 0.3.0; a component of
    /// 0.2.0 or 0.1.0 exports the same name at its version).
    pub fn interface(self) -> &'static str {
        match self {
            Hook::Decorate => "tfjob:policy/decorate@0.3.0",
            Hook::Resources => "tfjob:policy/resources@0.3.0",
            Hook::Classify => "tfjob:policy/classify@0.3.0",
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Hook {
    type Err = String;
    fn from_str(s: &str) -> Result<Hook, String> {
        Hook::ALL
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| format!("unknown hook {s:?}: expected decorate, resources or classify"))
    }
}

/// What a policy knows about the pod's job and replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodContext {
    pub job_name: String,
    pub namespace: String,
    pub job_uid: String,
    pub job_labels: BTreeMap<String, String>,
    pub job_annotations: BTreeMap<String, String>,
    /// Replica type as spelled in `tfReplicaSpecs` (`Worker`, `PS`, ...).
    pub replica_type: String,
    pub replica_index: i32,
    /// Number of replicas of this type.
    pub replica_count: i32,
    /// How many times this replica index has been restarted by the operator (0 on first run).
    pub attempt: i32,
}

impl PodContext {
    /// Worker 0 of 1, on its first attempt, of job `namespace/job_name` (uid `uid`) with no
    /// labels or annotations: the simplest job's context, where tests and benchmarks start.
    pub fn single_worker(namespace: &str, job_name: &str) -> PodContext {
        PodContext {
            job_name: job_name.into(),
            namespace: namespace.into(),
            job_uid: "uid".into(),
            job_labels: BTreeMap::new(),
            job_annotations: BTreeMap::new(),
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }

    /// The replica type as an enum (the context carries it as text for policies).
    pub fn replica_type(&self) -> Option<ReplicaType> {
        ReplicaType::parse_loose(&self.replica_type)
    }
}

pub use tfjob_policy_logic::verdict::{FailureKind, Phase as VerdictPhase};

/// A classification of one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub phase: VerdictPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Set on failures only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// When the deciding condition started, if known.
    #[serde(
        rename = "occurredAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub occurred_at: Option<Timestamp>,
    /// When time alone may change the verdict (a grace period or timeout ending); until then
    /// the verdict holds while the pod is unchanged. `None`: only a change of the pod can.
    #[serde(rename = "recheckAt", default, skip_serializing_if = "Option::is_none")]
    pub recheck_at: Option<Timestamp>,
    /// The policy that decided, as `name` or `name@digest`; not part of the policy's output.
    #[serde(skip)]
    pub policy: String,
}

impl Verdict {
    /// Attributes a classification to the policy that made it.
    pub fn decided_by(c: tfjob_policy_logic::verdict::Classification, policy: &str) -> Verdict {
        Verdict {
            phase: c.phase,
            reason: c.reason,
            message: c.message,
            kind: c.kind,
            occurred_at: c.occurred_at,
            recheck_at: c.recheck_at,
            policy: policy.to_owned(),
        }
    }

    /// A verdict with no reason or message.
    pub fn bare(phase: VerdictPhase) -> Verdict {
        Verdict {
            phase,
            reason: String::new(),
            message: String::new(),
            kind: None,
            occurred_at: None,
            recheck_at: None,
            policy: String::new(),
        }
    }
}

/// A pod after the policies shaped it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapedPod {
    pub pod: Pod,
    /// Policies that were applied, as `name@short-digest` (recorded on the pod).
    pub applied: Vec<String>,
    /// Policies that failed and were skipped under failure policy `Ignore`.
    pub skipped: Vec<PolicyError>,
    /// What the policies want the job's users to know (shadow disagreements, policies that
    /// could not be applied); the planner turns each into an event on the job.
    pub notes: Vec<PolicyNote>,
}

/// A pod's classification with what the policies want recorded beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct Classified {
    pub verdict: Verdict,
    /// As [`ShapedPod::notes`]: each becomes an event on the job, once per key.
    pub notes: Vec<PolicyNote>,
}

impl Classified {
    /// A verdict with nothing to record.
    pub fn quietly(verdict: Verdict) -> Classified {
        Classified {
            verdict,
            notes: Vec::new(),
        }
    }
}

/// Something a policy evaluation wants recorded on the job as an event, beside its decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyNote {
    /// The policy it is about, as `name@short-digest`.
    pub policy: String,
    /// Event reason, e.g. `PolicyShadowDisagreement`.
    pub reason: String,
    pub message: String,
    /// A warning rather than a normal event.
    pub warning: bool,
    /// Notes with the same key are recorded once per job (classification runs on every
    /// reconcile; its notes must not repeat).
    pub key: String,
}

/// Low-cardinality failure categories, used in events and metric labels. Serialised as
/// [`PolicyErrorCategory::as_str`] names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyErrorCategory {
    Trap,
    Timeout,
    Memory,
    InvalidOutput,
    GuardViolation,
    Link,
    Settings,
    /// The policy is configured but never loaded (its ConfigMap was rejected).
    Unavailable,
    /// The policy was not called: it failed too often in a row and its circuit breaker is
    /// open until a trial call succeeds.
    Tripped,
    /// The policy read a cluster object it was not granted.
    ReadDenied,
    /// The policy's cluster reads went past a bound: reads per call, objects or bytes.
    ReadLimit,
    /// The policy asked for a malformed read (resource, namespace, name or label selector).
    ReadInvalid,
}

impl PolicyErrorCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyErrorCategory::Trap => "trap",
            PolicyErrorCategory::Timeout => "timeout",
            PolicyErrorCategory::Memory => "memory",
            PolicyErrorCategory::InvalidOutput => "invalid-output",
            PolicyErrorCategory::GuardViolation => "guard-violation",
            PolicyErrorCategory::Link => "link",
            PolicyErrorCategory::Settings => "settings",
            PolicyErrorCategory::Unavailable => "unavailable",
            PolicyErrorCategory::Tripped => "tripped",
            PolicyErrorCategory::ReadDenied => "read-denied",
            PolicyErrorCategory::ReadLimit => "read-limit",
            PolicyErrorCategory::ReadInvalid => "read-invalid",
        }
    }
}

impl fmt::Display for PolicyErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy that could not decide.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("policy {policy} failed ({category}): {message}")]
pub struct PolicyError {
    pub policy: String,
    pub category: PolicyErrorCategory,
    pub message: String,
}

/// The pod-level decisions the planner delegates. Implementations must be deterministic for the
/// same inputs and must not panic; a failing policy is an error, never a crash.
pub trait PodPolicies: Send + Sync {
    /// Decorates the freshly built pod ([`Hook::Decorate`]), overrides its containers'
    /// resources ([`Hook::Resources`]) and checks that only allowed fields changed.
    fn shape_pod(&self, ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError>;

    /// Classifies an observed pod (with status) at time `now` ([`Hook::Classify`]).
    fn classify(
        &self,
        ctx: &PodContext,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<Classified, PolicyError>;

    /// A view of these policies fixed to the versions serving now, for one whole plan, so a
    /// swap in the middle of a reconcile cannot shape two pods of a job with two versions.
    /// `None` when the policies never change.
    fn pinned(&self) -> Option<Box<dyn PodPolicies>> {
        None
    }

    /// How long one call into these policies may run before a caller waiting on it gives up
    /// (see [`crate::call_watch`]). `None` for policies that cannot block.
    fn call_bound(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::PolicyErrorCategory;

    #[test]
    fn categories_serialise_as_they_are_named() {
        for category in [
            PolicyErrorCategory::InvalidOutput,
            PolicyErrorCategory::GuardViolation,
            PolicyErrorCategory::Settings,
        ] {
            let json = serde_json::to_string(&category).unwrap();
            assert_eq!(json, format!("\"{}\"", category.as_str()));
            assert_eq!(
                serde_json::from_str::<PolicyErrorCategory>(&json).unwrap(),
                category
            );
        }
    }
}
