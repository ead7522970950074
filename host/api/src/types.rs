//! Serde and schema types of `kubeflow.org/v1` TFJob.
//!
//! Field names, optionality and JSON spellings follow training-operator 1.9's Go types so that
//! every existing manifest deserialises unchanged. Pod templates are carried as k8s-openapi
//! `PodTemplateSpec` (unknown fields are ignored when reading) and published in the CRD as
//! objects that preserve unknown fields, so the API server never prunes a field a newer
//! Kubernetes adds to pods. Status gains three fields of this operator's own
//! (`restartCount`, `completedIndexes`, `podRestarts`); readers that do not know them keep working.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a TFJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "TFJob",
    plural = "tfjobs",
    singular = "tfjob",
    shortname = "tfjob",
    category = "kubeflow",
    namespaced,
    status = "TFJobStatus",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.conditions[-1:].type"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TFJobSpec {
    /// Policies that apply to the whole job: cleanup, TTL, deadline, backoff, scheduling, suspend.
    #[serde(default)]
    pub run_policy: RunPolicy,

    /// `""` (default rules) or `AllWorkers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,

    /// Replica type (`PS`, `Worker`, `Chief`, `Master`, `Evaluator`; matched case-insensitively)
    /// to its replica spec.
    #[serde(default)]
    pub tf_replica_specs: BTreeMap<String, ReplicaSpec>,

    /// Dynamic worker membership: sparse `TF_CONFIG`, worker failures do not fail the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_dynamic_worker: Option<bool>,
}

/// One replica type's pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of pods of this type; defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    // Boxed: k8s-openapi's template is about 1.8 KB inline, and each job's `tfReplicaSpecs`
    // map allocates room for eleven entries at once, so unboxed a cached TFJob carried about
    // 20 KB of empty map slots (heaptrack at 1,000 jobs: 19 MiB of the operator's heap). (A
    // plain comment: doc comments become the CRD's descriptions.)
    /// Template of every pod of this type.
    #[serde(default)]
    #[schemars(schema_with = "pod_template_schema")]
    pub template: Box<PodTemplateSpec>,

    /// `Always`, `OnFailure`, `Never` (default) or `ExitCode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

/// What happens to a failed pod of a replica.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    #[default]
    Never,
    /// Restart when the `tensorflow` container's failure is retryable (exit code 128-255 under
    /// the default classification policy); fail the job otherwise.
    ExitCode,
}

/// How the job's success is decided when it has no Chief or Master.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SuccessPolicy {
    /// Worker 0 succeeding with exit code 0 (or all workers succeeding) completes the job.
    #[default]
    #[serde(rename = "")]
    Default,
    /// Every worker must succeed.
    AllWorkers,
}

/// Which pods are deleted once the job has finished.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CleanPodPolicy {
    All,
    Running,
    #[default]
    None,
}

/// Job-wide run policy, shared by all Kubeflow job kinds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Pods deleted when the job finishes; defaults to `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,

    /// Seconds after completion before the TFJob itself is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// Seconds after `status.startTime` after which the job fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub active_deadline_seconds: Option<i64>,

    /// Number of restarts before the job fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,

    /// Gang-scheduling hints (PodGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,

    /// Suspend the job: delete its pods and services until it is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// The controller that manages this job; anything but `kubeflow.org/training-operator`
    /// makes this operator leave the job alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// Gang-scheduling hints carried over to the PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Observed state of a TFJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TFJobStatus {
    /// Condition history, in the order they were added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,

    /// Replica type to pod counts.
    #[serde(default)]
    pub replica_statuses: BTreeMap<String, ReplicaStatus>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,

    /// Restarts this operator has performed (pods deleted to be recreated). With the container
    /// restarts the kubelet performs in place it is what `backoffLimit` bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,

    /// Replica type to the indexes that have succeeded; they are never run again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub completed_indexes: BTreeMap<String, Vec<i32>>,

    /// Pod name to its restart record: how often the operator recreated it and the uid of the
    /// incarnation it deleted last, so a stale cache that still shows that pod neither counts the
    /// restart twice nor fails the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_restarts: BTreeMap<String, PodRestarts>,
}

/// Restart record of one replica index's pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRestarts {
    /// Times the operator deleted this pod to run it again.
    pub count: i32,
    /// uid of the incarnation deleted last.
    pub last_deleted_uid: String,
}

/// Condition types of a TFJob.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobConditionType {
    Created,
    Running,
    Restarting,
    Succeeded,
    Failed,
    Suspended,
}

/// `True`, `False` or `Unknown`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One entry of `status.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    #[serde(rename = "type")]
    pub type_: JobConditionType,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Pod counts of one replica type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Selector of this replica type's pods, as a label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// The same selector in string form (`k=v,k=v`), for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// The pod template's schema: k8s-openapi's `PodTemplateSpec`, whole, so a real API server
/// prunes and reports a misspelt field of a container (`imagePullPolicyy`) as it does in a Pod.
/// Its descriptions are left out (`kubectl explain pod` has them): with them the CRD would pass
/// the 256 KiB a client-side `kubectl apply` can keep in its last-applied annotation.
fn pod_template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<PodTemplateSpec>().to_value();
    strip_descriptions(&mut schema);
    schemars::Schema::try_from(schema).expect("a schema stays an object without descriptions")
}

/// Removes the `description` keywords of a schema, not properties of that name.
fn strip_descriptions(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(map) => {
            if map
                .get("description")
                .is_some_and(serde_json::Value::is_string)
            {
                map.remove("description");
            }
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

impl TFJobStatus {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: JobConditionType) -> Option<&JobCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether a condition of the given type is `True`.
    pub fn is_true(&self, type_: JobConditionType) -> bool {
        self.condition(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// Succeeded or Failed: the job will not run any more pods.
    pub fn is_finished(&self) -> bool {
        self.is_true(JobConditionType::Succeeded) || self.is_true(JobConditionType::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `tfReplicaSpecs` map allocates eleven value slots at once; an inline pod template
    /// made that about 20 KB per cached job.
    #[test]
    fn a_replica_spec_keeps_its_pod_template_out_of_line() {
        assert!(
            std::mem::size_of::<ReplicaSpec>() <= 64,
            "ReplicaSpec is {} bytes",
            std::mem::size_of::<ReplicaSpec>()
        );
    }
}
