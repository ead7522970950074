//! What a policy knows about the pod's job and replica: the WIT `job-context` record as a
//! plain Rust struct.
//!
//! The Wasm guests convert the WIT record into this type, and the operator builds it from the
//! TFJob, so the decision functions in this crate take one type whichever side calls them. The
//! JSON form (camelCase) is the one the operator's `PodContext` uses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The job annotation that marks a TFJob as interruptible (its pods may run on preemptible
/// capacity). Only the exact value `"true"` counts, so a typo never silently moves a job onto
/// spot nodes.
pub const INTERRUPTIBLE_ANNOTATION: &str = "policy.tfjob.dev/interruptible";

/// The job and replica a pod belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobContext {
    /// `metadata.name` of the TFJob.
    pub job_name: String,
    /// Namespace of the TFJob and its pods.
    pub namespace: String,
    /// `metadata.uid` of the TFJob.
    pub job_uid: String,
    /// Labels of the TFJob.
    #[serde(default)]
    pub job_labels: BTreeMap<String, String>,
    /// Annotations of the TFJob.
    #[serde(default)]
    pub job_annotations: BTreeMap<String, String>,
    /// Replica type as spelled in `tfReplicaSpecs` (`Chief`, `Master`, `PS`, `Worker`,
    /// `Evaluator`).
    pub replica_type: String,
    /// Index of this replica within its type, from 0.
    pub replica_index: i32,
    /// Number of replicas of this type.
    pub replica_count: i32,
    /// How many times the operator has restarted this replica index (0 on the first run).
    pub attempt: i32,
}

impl JobContext {
    /// Whether the job asked for interruptible capacity (see [`INTERRUPTIBLE_ANNOTATION`]).
    pub fn is_interruptible(&self) -> bool {
        self.job_annotations
            .get(INTERRUPTIBLE_ANNOTATION)
            .is_some_and(|v| v == "true")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_form_is_camel_case_and_round_trips() {
        let ctx: JobContext = serde_json::from_value(json!({
            "jobName": "mnist", "namespace": "ml", "jobUid": "u-1",
            "jobLabels": {"team": "a"}, "jobAnnotations": {},
            "replicaType": "Worker", "replicaIndex": 2, "replicaCount": 4, "attempt": 1
        }))
        .unwrap();
        assert_eq!(ctx.job_name, "mnist");
        assert_eq!(ctx.replica_index, 2);
        assert_eq!(ctx.job_labels["team"], "a");
        let back = serde_json::to_value(&ctx).unwrap();
        assert_eq!(back["replicaCount"], 4);
        assert_eq!(back["jobUid"], "u-1");
    }

    #[test]
    fn interruptible_only_with_the_exact_true_value() {
        let mut ctx = JobContext::default();
        assert!(!ctx.is_interruptible());
        ctx.job_annotations
            .insert(INTERRUPTIBLE_ANNOTATION.into(), "True".into());
        assert!(!ctx.is_interruptible());
        ctx.job_annotations
            .insert(INTERRUPTIBLE_ANNOTATION.into(), "true".into());
        assert!(ctx.is_interruptible());
    }
}
