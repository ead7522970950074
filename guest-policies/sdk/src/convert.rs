//! Conversions between what crosses the WIT boundary and what policy code works with.
//!
//! Kubernetes objects cross as JSON text; policies want k8s-openapi types. Decoding errors
//! become `policy-error::invalid-input` with the field path first (`pod.spec.containers[0].
//! image: invalid type: integer `5`, expected a string at line 1 column 70`), so the operator's
//! event tells the platform team exactly what the policy could not read. Encoding a k8s-openapi
//! value cannot fail in practice; if it does, the error is `failed`.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tfjob_policy_logic::context::JobContext;
use tfjob_policy_logic::verdict::{
    Classification, FailureKind as LogicFailureKind, Phase as LogicPhase,
};

use crate::wit;

/// Decodes input `name` (`pod`, `resources`, ...) from JSON; errors name the field.
pub fn from_json<T: DeserializeOwned>(name: &str, json: &str) -> Result<T, wit::PolicyError> {
    tfjob_policy_logic::json::from_json(name, json).map_err(wit::PolicyError::InvalidInput)
}

/// Encodes an output value as JSON.
pub fn to_json<T: Serialize>(name: &str, value: &T) -> Result<String, wit::PolicyError> {
    serde_json::to_string(value)
        .map_err(|e| wit::PolicyError::Failed(format!("encoding {name} as JSON: {e}")))
}

/// Decodes the `pod` argument (a core/v1 Pod).
pub fn pod_from_json(json: &str) -> Result<Pod, wit::PolicyError> {
    from_json("pod", json)
}

/// Decodes an observed pod's `metadata` and `status`, skipping its `spec` (and anything else).
///
/// A classifier judges a pod by its status; decoding the spec as well (volumes, affinity,
/// probes, ...) costs a classifier component about 200 KiB of code for fields it never reads.
/// The pod returned has `spec: None`.
pub fn observed_pod_from_json(json: &str) -> Result<Pod, wit::PolicyError> {
    /// The parts of a pod a classification reads; serde skips the other fields unparsed.
    #[derive(Deserialize)]
    struct ObservedPod {
        #[serde(default)]
        metadata: ObjectMeta,
        #[serde(default)]
        status: Option<PodStatus>,
    }
    let observed: ObservedPod = from_json("pod", json)?;
    Ok(Pod {
        metadata: observed.metadata,
        spec: None,
        status: observed.status,
    })
}

/// Encodes a pod for `decorate-pod`'s result.
pub fn pod_to_json(pod: &Pod) -> Result<String, wit::PolicyError> {
    to_json("pod", pod)
}

/// Decodes the `resources` argument (a core/v1 ResourceRequirements). The operator passes `{}`
/// for a container without requirements; an empty string is read the same way.
pub fn resources_from_json(json: &str) -> Result<ResourceRequirements, wit::PolicyError> {
    if json.trim().is_empty() {
        return Ok(ResourceRequirements::default());
    }
    from_json("resources", json)
}

/// Encodes requirements for `override-resources`' result.
pub fn resources_to_json(resources: &ResourceRequirements) -> Result<String, wit::PolicyError> {
    to_json("resources", resources)
}

/// Parses an RFC 3339 timestamp argument (`now`); the error names the argument.
pub fn timestamp_from_rfc3339(name: &str, text: &str) -> Result<Timestamp, wit::PolicyError> {
    text.parse().map_err(|e| {
        wit::PolicyError::InvalidInput(format!(
            "{name}: {text:?} is not an RFC 3339 timestamp: {e}"
        ))
    })
}

/// Formats a timestamp as RFC 3339 in UTC (`2026-01-01T00:03:00Z`).
pub fn timestamp_to_rfc3339(timestamp: Timestamp) -> String {
    timestamp.to_string()
}

impl From<wit::JobContext> for JobContext {
    fn from(ctx: wit::JobContext) -> JobContext {
        JobContext {
            job_name: ctx.job_name,
            namespace: ctx.namespace,
            job_uid: ctx.job_uid,
            job_labels: ctx.job_labels.into_iter().collect(),
            job_annotations: ctx.job_annotations.into_iter().collect(),
            replica_type: ctx.replica_type,
            replica_index: ctx.replica_index,
            replica_count: ctx.replica_count,
            attempt: ctx.attempt,
        }
    }
}

impl From<&JobContext> for wit::JobContext {
    /// The WIT record, labels and annotations sorted by key (as the contract says), for tests
    /// that call a policy's `Guest` implementation directly.
    fn from(ctx: &JobContext) -> wit::JobContext {
        let pairs = |m: &std::collections::BTreeMap<String, String>| {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        wit::JobContext {
            job_name: ctx.job_name.clone(),
            namespace: ctx.namespace.clone(),
            job_uid: ctx.job_uid.clone(),
            job_labels: pairs(&ctx.job_labels),
            job_annotations: pairs(&ctx.job_annotations),
            replica_type: ctx.replica_type.clone(),
            replica_index: ctx.replica_index,
            replica_count: ctx.replica_count,
            attempt: ctx.attempt,
        }
    }
}

impl From<LogicPhase> for wit::Phase {
    fn from(phase: LogicPhase) -> wit::Phase {
        match phase {
            LogicPhase::Undefined => wit::Phase::Undefined,
            LogicPhase::Queued => wit::Phase::Queued,
            LogicPhase::WaitingForResources => wit::Phase::WaitingForResources,
            LogicPhase::Initializing => wit::Phase::Initializing,
            LogicPhase::Running => wit::Phase::Running,
            LogicPhase::Succeeded => wit::Phase::Succeeded,
            LogicPhase::RetryableFailure => wit::Phase::RetryableFailure,
            LogicPhase::PermanentFailure => wit::Phase::PermanentFailure,
        }
    }
}

impl From<LogicFailureKind> for wit::FailureKind {
    fn from(kind: LogicFailureKind) -> wit::FailureKind {
        match kind {
            LogicFailureKind::User => wit::FailureKind::User,
            LogicFailureKind::System => wit::FailureKind::System,
        }
    }
}

impl From<Classification> for wit::Verdict {
    /// The WIT verdict; `occurred-at` and `recheck-at` in RFC 3339.
    fn from(c: Classification) -> wit::Verdict {
        wit::Verdict {
            phase: c.phase.into(),
            reason: c.reason,
            message: c.message,
            kind: c.kind.map(Into::into),
            occurred_at: c.occurred_at.map(timestamp_to_rfc3339),
            recheck_at: c.recheck_at.map(timestamp_to_rfc3339),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_errors_name_the_field() {
        let err =
            pod_from_json(r#"{"spec": {"containers": [{"name": "tf", "image": 5}]}}"#).unwrap_err();
        match err {
            wit::PolicyError::InvalidInput(m) => {
                assert!(
                    m.starts_with("pod.spec.containers[0].image: invalid type"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn observed_pods_skip_the_spec() {
        let pod = observed_pod_from_json(
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": "not even a list"}, "status": {"phase": "Running"}}"#,
        )
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert!(pod.spec.is_none());
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
        let err =
            observed_pod_from_json(r#"{"status": {"conditions": [{"type": 5}]}}"#).unwrap_err();
        assert!(
            err.message()
                .starts_with("pod.status.conditions[0].type: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn resources_round_trip_and_empty_means_unset() {
        assert_eq!(
            resources_from_json("").unwrap(),
            ResourceRequirements::default()
        );
        assert_eq!(
            resources_from_json("{}").unwrap(),
            ResourceRequirements::default()
        );
        let r = resources_from_json(r#"{"limits": {"cpu": "2"}}"#).unwrap();
        assert_eq!(resources_to_json(&r).unwrap(), r#"{"limits":{"cpu":"2"}}"#);
        let err = resources_from_json(r#"{"limits": {"cpu": [2]}}"#).unwrap_err();
        assert!(err.message().starts_with("resources.limits.cpu: "), "{err}");
    }

    #[test]
    fn timestamps() {
        let t = timestamp_from_rfc3339("now", "2026-01-01T01:00:00+01:00").unwrap();
        assert_eq!(timestamp_to_rfc3339(t), "2026-01-01T00:00:00Z");
        let err = timestamp_from_rfc3339("now", "yesterday").unwrap_err();
        assert!(
            matches!(&err, wit::PolicyError::InvalidInput(m) if m.starts_with("now: \"yesterday\""))
        );
    }

    #[test]
    fn job_context_round_trip() {
        let wit_ctx = wit::JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "u".into(),
            job_labels: vec![("a".into(), "1".into())],
            job_annotations: vec![("policy.tfjob.dev/interruptible".into(), "true".into())],
            replica_type: "PS".into(),
            replica_index: 1,
            replica_count: 2,
            attempt: 3,
        };
        let ctx = JobContext::from(wit_ctx.clone());
        assert!(ctx.is_interruptible());
        assert_eq!(ctx.job_labels["a"], "1");
        assert_eq!(wit::JobContext::from(&ctx), wit_ctx);
    }

    #[test]
    fn verdicts() {
        let c = Classification {
            phase: LogicPhase::RetryableFailure,
            reason: "OOMKilled".into(),
            message: "m".into(),
            kind: Some(LogicFailureKind::User),
            occurred_at: Some("2026-01-01T00:00:00Z".parse().unwrap()),
            recheck_at: Some("2026-01-01T00:03:00Z".parse().unwrap()),
        };
        let v = wit::Verdict::from(c);
        assert_eq!(v.recheck_at.as_deref(), Some("2026-01-01T00:03:00Z"));
        assert_eq!(v.phase, wit::Phase::RetryableFailure);
        assert_eq!(v.kind, Some(wit::FailureKind::User));
        assert_eq!(v.occurred_at.as_deref(), Some("2026-01-01T00:00:00Z"));
    }
}
