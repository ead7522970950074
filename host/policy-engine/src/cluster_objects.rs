//! The shape of the cluster objects policies read: each kind trimmed to what a decision can
//! use before it is kept, so that a cache of thousands of nodes holds what policies need and
//! not what the API server carries for its own bookkeeping.
//!
//! Dropped from every object: `metadata.managedFields` (server-side apply's field owners,
//! often the largest part of an object) and the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation (a second copy of the object as last applied). Dropped per kind:
//!
//! | resource | also dropped |
//! | --- | --- |
//! | `nodes` | `status.images` (every image on the node), `status.volumesInUse`, `status.volumesAttached`, `status.daemonEndpoints`, `status.config`, the conditions' `lastHeartbeatTime` (it changes at every heartbeat, decides nothing), `status.nodeInfo`'s `machineID`, `systemUUID` and `bootID` |
//! | `namespaces` | nothing else |
//! | `configmaps` | `binaryData` |
//! | `tfjobs` | `status.conditions[].message` longer than 1 KiB is cut |
//!
//! Labels, annotations (but the one above), `spec`, node `capacity` / `allocatable` /
//! `conditions` / `addresses` / the rest of `nodeInfo` (versions, OS, architecture) and every
//! field not named here stay.

use serde_json::Value;

use crate::cluster_reads::Resource;

/// The annotation `kubectl apply` keeps a copy of the applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Node status fields no policy decision reads.
const NODE_STATUS_DROPPED: [&str; 5] = [
    "images",
    "volumesInUse",
    "volumesAttached",
    "daemonEndpoints",
    "config",
];
/// Node identities no decision reads (`status.nodeInfo`).
const NODE_INFO_DROPPED: [&str; 3] = ["machineID", "systemUUID", "bootID"];
/// The longest TFJob condition message kept, in bytes.
const MAX_CONDITION_MESSAGE: usize = 1024;

/// Trims `object`, of `resource`, to what policies may read (see the module's table).
pub fn trim(resource: Resource, object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(LAST_APPLIED);
        }
    }
    match resource {
        Resource::Nodes => {
            if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
                for field in NODE_STATUS_DROPPED {
                    status.remove(field);
                }
                if let Some(info) = status.get_mut("nodeInfo").and_then(Value::as_object_mut) {
                    for field in NODE_INFO_DROPPED {
                        info.remove(field);
                    }
                }
                let conditions = status.get_mut("conditions").and_then(Value::as_array_mut);
                for condition in conditions.into_iter().flatten() {
                    if let Some(condition) = condition.as_object_mut() {
                        condition.remove("lastHeartbeatTime");
                    }
                }
            }
        }
        Resource::ConfigMaps => {
            if let Some(map) = object.as_object_mut() {
                map.remove("binaryData");
            }
        }
        Resource::TfJobs => {
            let conditions = object
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut);
            for condition in conditions.into_iter().flatten() {
                if let Some(Value::String(message)) = condition.get_mut("message")
                    && message.len() > MAX_CONDITION_MESSAGE
                {
                    *message = tfjob_policy_logic::text::elided(message, MAX_CONDITION_MESSAGE);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_keeps_what_scheduling_decisions_read_and_drops_its_images() {
        let mut node = json!({
            "metadata": {
                "name": "gpu-1",
                "labels": {"pool": "a100"},
                "annotations": {LAST_APPLIED: "{...}", "team": "ml"},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-11-20T08:00:00Z"}],
                "images": [{"names": ["tf:2.15"], "sizeBytes": 1}],
                "volumesInUse": ["v"],
                "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b", "kubeletVersion": "v1.31.4", "architecture": "amd64"},
            },
        });
        trim(Resource::Nodes, &mut node);
        assert_eq!(
            node,
            json!({
                "metadata": {
                    "name": "gpu-1",
                    "labels": {"pool": "a100"},
                    "annotations": {"team": "ml"},
                },
                "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T08:00:00Z"}],
                    "nodeInfo": {"kubeletVersion": "v1.31.4", "architecture": "amd64"},
                },
            })
        );
    }

    #[test]
    fn configmaps_lose_binary_data_and_tfjob_messages_are_cut_at_a_character() {
        let mut cm =
            json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": "AA=="}});
        trim(Resource::ConfigMaps, &mut cm);
        assert_eq!(cm, json!({"metadata": {"name": "c"}, "data": {"a": "1"}}));
        let long = "é".repeat(2000);
        let mut job = json!({"status": {"conditions": [{"type": "Failed", "message": long}]}});
        trim(Resource::TfJobs, &mut job);
        let kept = job["status"]["conditions"][0]["message"].as_str().unwrap();
        assert!(
            kept.len() <= MAX_CONDITION_MESSAGE + '…'.len_utf8(),
            "{}",
            kept.len()
        );
        assert!(kept.starts_with('é') && kept.ends_with('…'));
    }

    #[test]
    fn objects_of_other_shapes_are_left_as_they_are() {
        for mut odd in [
            json!(null),
            json!([1, 2]),
            json!({"metadata": "x", "status": 3}),
        ] {
            let before = odd.clone();
            trim(Resource::Nodes, &mut odd);
            assert_eq!(odd, before);
        }
    }
}
