//! The `PodGroup` CustomResourceDefinitions of the two gang schedulers the operator can target:
//! Volcano's `scheduling.volcano.sh/v1beta1` and the scheduler-plugins coscheduling plugin's
//! `scheduling.x-k8s.io/v1alpha1`.
//!
//! On a real cluster these CRDs arrive with the scheduler's installation; the embedded cluster
//! serves the one of the scheduler its kubelet simulates (see
//! [`KubeletConfig::gang_scheduler`](crate::kubelet::KubeletConfig::gang_scheduler)), so a
//! client creating the other kind gets the same `404` it would get on a cluster without that
//! scheduler. Names, short names, printer columns and the fields of the schemas follow the
//! upstream API types; the status is a subresource, so a client updating a group's spec never
//! overwrites the status the simulated scheduler keeps.

use serde_json::{Value, json};

/// Volcano's scheduler name, and the name that selects the Volcano simulation.
pub const VOLCANO_SCHEDULER: &str = "volcano";

/// The API group of Volcano's PodGroup.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// The API group of the scheduler-plugins PodGroup.
pub const COSCHEDULING_GROUP: &str = "scheduling.x-k8s.io";

/// The plural both kinds are served under.
pub const PLURAL: &str = "podgroups";

/// A Kubernetes quantity in a schema: an integer or a string.
fn quantity_map(description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
        },
    })
}

fn counter(description: &str) -> Value {
    json!({"type": "integer", "format": "int32", "description": description})
}

fn crd(group: &str, version: &str, short_names: &[&str], columns: Value, schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": "PodGroup", "listKind": "PodGroupList", "plural": PLURAL,
                "singular": "podgroup", "shortNames": short_names,
            },
            "scope": "Namespaced",
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    })
}

/// The object around a spec and a status schema.
fn object_schema(description: &str, spec: Value, status: Value) -> Value {
    json!({
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    })
}

/// `podgroups.scheduling.volcano.sh`.
pub fn volcano_crd() -> Value {
    let spec = json!({
        "type": "object",
        "properties": {
            "minMember": counter("The fewest members that must be schedulable together before any is bound."),
            "minTaskMember": {
                "type": "object",
                "description": "The fewest pods per task (replica type) that must be schedulable together.",
                "additionalProperties": {"type": "integer", "format": "int32"},
            },
            "queue": {"type": "string", "description": "The queue the group takes its resources from."},
            "priorityClassName": {"type": "string", "description": "The group's priority class."},
            "minResources": quantity_map("The resources the group needs to be admitted (Inqueue)."),
        },
    });
    let status = json!({
        "type": "object",
        "properties": {
            "phase": {"type": "string", "description": "Pending, Inqueue, Running, Unknown or Completed."},
            "conditions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string"},
                        "status": {"type": "string"},
                        "transitionID": {"type": "string"},
                        "lastTransitionTime": {"type": "string", "format": "date-time"},
                        "reason": {"type": "string"},
                        "message": {"type": "string"},
                    },
                },
            },
            "running": counter("Members running."),
            "succeeded": counter("Members that succeeded."),
            "failed": counter("Members that failed."),
        },
    });
    crd(
        VOLCANO_GROUP,
        "v1beta1",
        &["pg", "podgroup-v1beta1"],
        json!([
            {"name": "STATUS", "type": "string", "jsonPath": ".status.phase"},
            {"name": "minMember", "type": "integer", "jsonPath": ".spec.minMember"},
            {"name": "RUNNINGS", "type": "integer", "jsonPath": ".status.running"},
            {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "QUEUE", "type": "string", "priority": 1, "jsonPath": ".spec.queue"},
        ]),
        object_schema(
            "A group of pods scheduled all together or not at all.",
            spec,
            status,
        ),
    )
}

/// `podgroups.scheduling.x-k8s.io`.
pub fn coscheduling_crd() -> Value {
    let spec = json!({
        "type": "object",
        "properties": {
            "minMember": counter("The fewest members that must be schedulable together before any is bound."),
            "minResources": quantity_map("The resources the cluster must have free for the group to be tried."),
            "scheduleTimeoutSeconds": counter("How long members wait at Permit for their siblings before being rejected."),
        },
    });
    let status = json!({
        "type": "object",
        "properties": {
            "phase": {"type": "string", "description": "Pending, PreScheduling, Scheduling, Scheduled, Running, Finished, Failed or Unknown."},
            "occupiedBy": {"type": "string", "description": "The owners of the members, namespace/name, comma-separated."},
            "scheduled": counter("Members bound to a node."),
            "running": counter("Members running."),
            "succeeded": counter("Members that succeeded."),
            "failed": counter("Members that failed."),
            "scheduleStartTime": {"type": "string", "format": "date-time"},
        },
    });
    crd(
        COSCHEDULING_GROUP,
        "v1alpha1",
        &["pg", "pgs"],
        json!([
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
            {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
            {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeeded"},
            {"name": "Failed", "type": "integer", "jsonPath": ".status.failed"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
        object_schema(
            "A group of pods scheduled all together or not at all.",
            spec,
            status,
        ),
    )
}

/// The PodGroup CRD of the gang scheduler named `scheduler`: Volcano's for `volcano`, the
/// coscheduling plugin's for any other name (as the operator decides which kind to create).
pub fn crd_for(scheduler: &str) -> Value {
    if scheduler == VOLCANO_SCHEDULER {
        volcano_crd()
    } else {
        coscheduling_crd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_crds_describe_namespaced_podgroups_with_a_status_subresource() {
        for (crd, group, version) in [
            (volcano_crd(), VOLCANO_GROUP, "v1beta1"),
            (coscheduling_crd(), COSCHEDULING_GROUP, "v1alpha1"),
        ] {
            let t = crate::storage::crd::resource_type(&crd).expect("a served version");
            assert_eq!((t.group.as_str(), t.version.as_str()), (group, version));
            assert_eq!(t.kind, "PodGroup");
            assert_eq!(t.plural, "podgroups");
            assert!(t.namespaced && t.status);
            assert!(t.short_names.iter().any(|s| s == "pg"));
            assert_eq!(
                crd["metadata"]["name"],
                format!("podgroups.{group}"),
                "CRD names are plural.group"
            );
            let spec = t.schema.unwrap();
            assert!(
                spec.pointer("/properties/spec/properties/minMember")
                    .is_some()
            );
            assert!(
                spec.pointer("/properties/spec/properties/minResources")
                    .is_some()
            );
        }
    }

    #[test]
    fn the_scheduler_name_picks_the_kind() {
        assert_eq!(crd_for("volcano")["spec"]["group"], VOLCANO_GROUP);
        assert_eq!(
            crd_for("scheduler-plugins-scheduler")["spec"]["group"],
            COSCHEDULING_GROUP
        );
        let columns = &volcano_crd()["spec"]["versions"][0]["additionalPrinterColumns"];
        assert_eq!(columns[4]["name"], "QUEUE");
        assert_eq!(columns[4]["priority"], 1, "shown with -o wide only");
    }
}
