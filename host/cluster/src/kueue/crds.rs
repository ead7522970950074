//! The project's own CustomResourceDefinitions of the Kueue kinds the simulation serves:
//! Workload, ClusterQueue, LocalQueue and ResourceFlavor, `kueue.x-k8s.io/v1beta2`.
//!
//! Names, short names, scopes, status subresources and printer columns are Kueue's, so
//! `kubectl get cq`, `kubectl get queues` and `kubectl get workloads` show what they show on a
//! real cluster. The schemas are compact: they describe the fields the simulation reads and
//! writes, and keep everything else (`x-kubernetes-preserve-unknown-fields`), so manifests
//! written for real Kueue (cohorts, preemption, admission checks, ...) are stored unchanged even
//! where the simulation ignores them. Pod templates embedded in Workloads are kept whole for
//! the same reason. A cluster may serve Kueue's real CRDs instead; the simulation reads the
//! same fields from either.

use serde_json::{Value, json};

use super::{GROUP, VERSION};

/// A Kubernetes quantity in a schema: an integer or a string.
fn quantity() -> Value {
    json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true})
}

/// A map from resource name to quantity.
fn quantities(description: &str) -> Value {
    json!({"type": "object", "description": description, "additionalProperties": quantity()})
}

/// An object whose other fields are kept as written.
fn open_object(description: &str, properties: Value) -> Value {
    json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn count(description: &str) -> Value {
    json!({"type": "integer", "format": "int32", "minimum": 0, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "description": description, "additionalProperties": {"type": "string"}})
}

/// `metav1.Condition`, with the fields a real server requires.
fn conditions() -> Value {
    json!({
        "type": "array",
        "maxItems": 16,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "reason", "message", "lastTransitionTime"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string", "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            },
        },
    })
}

/// `stopPolicy` of ClusterQueues and LocalQueues.
fn stop_policy() -> Value {
    json!({
        "type": "string",
        "enum": ["None", "Hold", "HoldAndDrain"],
        "description": "Hold stops admitting; HoldAndDrain also evicts the admitted workloads.",
    })
}

/// Per flavor, the quantity of each resource: `flavorsReservation` and `flavorsUsage`.
fn flavors_usage(description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {
            "type": "object",
            "required": ["name", "resources"],
            "properties": {
                "name": {"type": "string"},
                "resources": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "total": quantity(),
                            "borrowed": quantity(),
                        },
                    },
                },
            },
        },
    })
}

/// A node taint or a toleration, kept as written.
fn list_of_objects(description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

fn column(name: &str, type_: &str, path: &str, description: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path, "description": description})
}

/// The queues' `Pending Workloads` column.
fn pending_column() -> Value {
    column(
        "Pending Workloads",
        "integer",
        ".status.pendingWorkloads",
        "Number of pending workloads",
    )
}

/// The queues' `Admitted Workloads` column.
fn admitted_column() -> Value {
    column(
        "Admitted Workloads",
        "integer",
        ".status.admittedWorkloads",
        "Number of admitted workloads that haven't finished yet",
    )
}

fn crd(
    plural: &str,
    kind: &str,
    short_names: &[&str],
    namespaced: bool,
    columns: Vec<Value>,
    spec: Value,
    status: Option<Value>,
) -> Value {
    let mut properties = json!({
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    });
    let mut version = json!({
        "name": VERSION,
        "served": true,
        "storage": true,
        "additionalPrinterColumns": columns,
    });
    if let Some(status) = status {
        properties["status"] = status;
        version["subresources"] = json!({"status": {}});
    }
    version["schema"] = json!({"openAPIV3Schema": {"type": "object", "properties": properties}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_ascii_lowercase(),
                "shortNames": short_names,
            },
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [version],
        },
    })
}

/// `workloads.kueue.x-k8s.io`.
pub fn workloads() -> Value {
    let pod_set = json!({
        "type": "object",
        "required": ["name", "template"],
        "properties": {
            "name": {"type": "string", "maxLength": 63},
            "count": count("How many pods of this template."),
            "minCount": count("The fewest pods the set can run with (partial admission)."),
            "template": open_object("The pods' template.", json!({})),
        },
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let spec = open_object(
        "What the workload asks for.",
        json!({
            "queueName": {"type": "string", "maxLength": 253, "description": "The LocalQueue, in the workload's namespace."},
            "active": {"type": "boolean", "description": "false deactivates the workload: evicted if admitted, never admitted."},
            "priority": {"type": "integer", "format": "int32"},
            "priorityClassRef": {
                "type": "object",
                "required": ["group", "kind", "name"],
                "properties": {"group": string(""), "kind": string(""), "name": string("")},
            },
            "podSets": {
                "type": "array",
                "minItems": 1,
                "maxItems": 18,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": pod_set,
            },
        }),
    );
    let assignment = json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "flavors": string_map("The flavor assigned to each resource."),
            "resourceUsage": quantities("What all the set's pods request together."),
            "count": count("The pods taken into account at admission."),
        },
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let status = open_object(
        "Where the workload is: pending, admitted, evicted, finished.",
        json!({
            "conditions": conditions(),
            "admission": {
                "type": "object",
                "required": ["clusterQueue", "podSetAssignments"],
                "properties": {
                    "clusterQueue": {"type": "string"},
                    "podSetAssignments": {"type": "array", "maxItems": 18, "items": assignment},
                },
            },
        }),
    );
    crd(
        "workloads",
        "Workload",
        &["kwl", "kueueworkload", "kueueworkloads"],
        true,
        vec![
            column(
                "Queue",
                "string",
                ".spec.queueName",
                "The LocalQueue the workload was submitted to",
            ),
            column(
                "Reserved in",
                "string",
                ".status.admission.clusterQueue",
                "The ClusterQueue where the workload reserves quota",
            ),
            column(
                "Admitted",
                "string",
                ".status.conditions[?(@.type=='Admitted')].status",
                "Admission status",
            ),
            column(
                "Finished",
                "string",
                ".status.conditions[?(@.type=='Finished')].status",
                "Workload finished",
            ),
            column(
                "Age",
                "date",
                ".metadata.creationTimestamp",
                "Time this workload was created",
            ),
        ],
        spec,
        Some(status),
    )
}

/// `clusterqueues.kueue.x-k8s.io`.
pub fn cluster_queues() -> Value {
    let resource = json!({
        "type": "object",
        "required": ["name", "nominalQuota"],
        "properties": {"name": {"type": "string"}, "nominalQuota": quantity()},
        "x-kubernetes-preserve-unknown-fields": true,
    });
    let flavor = json!({
        "type": "object",
        "required": ["name", "resources"],
        "properties": {
            "name": {"type": "string"},
            "resources": {"type": "array", "maxItems": 64, "items": resource},
        },
    });
    let group = json!({
        "type": "object",
        "required": ["coveredResources", "flavors"],
        "properties": {
            "coveredResources": {"type": "array", "maxItems": 64, "items": {"type": "string"}},
            "flavors": {"type": "array", "maxItems": 64, "items": flavor},
        },
    });
    let spec = open_object(
        "The quota of the queue, by resource group and flavor.",
        json!({
            "resourceGroups": {"type": "array", "maxItems": 16, "items": group},
            "queueingStrategy": {"type": "string", "enum": ["StrictFIFO", "BestEffortFIFO"]},
            "stopPolicy": stop_policy(),
            "namespaceSelector": open_object("The namespaces whose workloads may use the queue.", json!({})),
            "cohortName": {"type": "string"},
        }),
    );
    let status = open_object(
        "Counts and quota in use.",
        json!({
            "conditions": conditions(),
            "pendingWorkloads": count("Workloads waiting for admission."),
            "reservingWorkloads": count("Workloads holding quota."),
            "admittedWorkloads": count("Admitted workloads that have not finished."),
            "flavorsReservation": flavors_usage("Quota reserved, per flavor and resource."),
            "flavorsUsage": flavors_usage("Quota used by admitted workloads, per flavor and resource."),
        }),
    );
    crd(
        "clusterqueues",
        "ClusterQueue",
        &["cq"],
        false,
        vec![
            column(
                "Cohort",
                "string",
                ".spec.cohortName",
                "Cohort that this ClusterQueue belongs to",
            ),
            json!({"name": "Strategy", "type": "string", "priority": 1, "jsonPath": ".spec.queueingStrategy",
                "description": "The queueing strategy used to prioritize workloads"}),
            pending_column(),
            admitted_column(),
        ],
        spec,
        Some(status),
    )
}

/// `localqueues.kueue.x-k8s.io`.
pub fn local_queues() -> Value {
    let spec = open_object(
        "The ClusterQueue the namespace's workloads go to.",
        json!({"clusterQueue": {"type": "string", "maxLength": 253}, "stopPolicy": stop_policy()}),
    );
    let status = open_object(
        "Counts of the queue's workloads.",
        json!({
            "conditions": conditions(),
            "pendingWorkloads": count("Workloads waiting for admission."),
            "reservingWorkloads": count("Workloads holding quota."),
            "admittedWorkloads": count("Admitted workloads that have not finished."),
            "flavorsUsage": flavors_usage("Quota used by the queue's admitted workloads."),
        }),
    );
    crd(
        "localqueues",
        "LocalQueue",
        &["queue", "queues", "lq"],
        true,
        vec![
            column(
                "ClusterQueue",
                "string",
                ".spec.clusterQueue",
                "Backing ClusterQueue",
            ),
            pending_column(),
            admitted_column(),
        ],
        spec,
        Some(status),
    )
}

/// `resourceflavors.kueue.x-k8s.io`.
pub fn resource_flavors() -> Value {
    let spec = open_object(
        "The nodes a flavor stands for.",
        json!({
            "nodeLabels": string_map("Labels the flavor's nodes carry; admitted pods get them as node selector."),
            "nodeTaints": list_of_objects("Taints of the flavor's nodes: a pod set must tolerate them to get the flavor."),
            "tolerations": list_of_objects("Tolerations admitted pods get."),
        }),
    );
    crd(
        "resourceflavors",
        "ResourceFlavor",
        &["flavor", "flavors", "rf"],
        false,
        vec![column(
            "Age",
            "date",
            ".metadata.creationTimestamp",
            "Time this flavor was created",
        )],
        spec,
        None,
    )
}

/// Every CRD of the simulation, with its plural.
pub fn all() -> Vec<(&'static str, Value)> {
    vec![
        ("resourceflavors", resource_flavors()),
        ("clusterqueues", cluster_queues()),
        ("localqueues", local_queues()),
        ("workloads", workloads()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::cel::SchemaRules;
    use crate::storage::crd::resource_type;

    #[test]
    fn every_crd_serves_its_kind_with_kueues_names() {
        for (plural, crd) in all() {
            let t = resource_type(&crd).expect("a served version");
            assert_eq!(t.group, GROUP);
            assert_eq!(t.version, VERSION);
            assert_eq!(t.plural, plural);
            assert!(
                SchemaRules::compile(t.schema.as_ref().expect("a schema")).is_ok(),
                "{plural}"
            );
        }
        let cq = resource_type(&cluster_queues()).unwrap();
        assert!(!cq.namespaced && cq.status);
        assert_eq!(cq.short_names, ["cq"]);
        let wl = resource_type(&workloads()).unwrap();
        assert!(wl.namespaced && wl.status);
        let rf = resource_type(&resource_flavors()).unwrap();
        assert!(!rf.namespaced && !rf.status);
    }
}
