//! The scheduler's arithmetic: resource quantities, what a pod requests, whether it fits a
//! node, and the `FailedScheduling` message when it fits none.
//!
//! Kept pure so the rules (requests falling back to limits, init containers taking the maximum,
//! the message format of kube-scheduler) are tested without a running loop.

use std::collections::BTreeMap;

use serde_json::Value;
use tfjob_policy_logic::quantity::Quantity;

/// Amounts per resource name, in thousandths of the unit (millicores for cpu), so `500m` and
/// `0.5` are exact and memory in bytes still fits comfortably in an `i128`.
pub type Resources = BTreeMap<String, i128>;

/// The extended resource of NVIDIA GPUs.
pub const GPU: &str = "nvidia.com/gpu";

/// A Kubernetes quantity (`500m`, `2`, `1.5`, `1Gi`, `64M`, `1e3`) in thousandths, rounded up
/// as the API server does for milli-values. `None` when malformed or negative. Parsed by the
/// workspace's one quantity parser ([`Quantity`]).
pub fn parse_quantity(s: &str) -> Option<i128> {
    let nanos = Quantity::parse(s.trim()).ok()?.nanos();
    (nanos >= 0).then(|| (nanos + NANOS_PER_MILLI - 1) / NANOS_PER_MILLI)
}

const NANOS_PER_MILLI: i128 = 1_000_000;

/// Renders thousandths back as a quantity, for node capacity.
pub fn format_quantity(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// What a container asks for: its requests, and its limits where it names no request (the
/// API server defaults a missing request to the limit).
fn container_requests(container: &Value) -> Resources {
    let mut out = Resources::new();
    let resources = container.get("resources");
    for kind in ["limits", "requests"] {
        let Some(map) = resources
            .and_then(|r| r.get(kind))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (name, q) in map {
            let amount = match q {
                Value::String(s) => parse_quantity(s),
                Value::Number(n) => n.as_f64().map(|f| (f * 1000.0).ceil() as i128),
                _ => None,
            };
            if let Some(amount) = amount {
                // Requests are read second and so win over limits.
                out.insert(name.clone(), amount);
            }
        }
    }
    out
}

/// What a pod asks the scheduler for: the sum over its containers, or the largest init
/// container where that is more (init containers run one at a time, before the others).
pub fn pod_requests(pod: &Value) -> Resources {
    let list = |field: &str| {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut total = Resources::new();
    for c in list("containers") {
        for (name, amount) in container_requests(&c) {
            *total.entry(name).or_default() += amount;
        }
    }
    for c in list("initContainers") {
        for (name, amount) in container_requests(&c) {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(amount);
        }
    }
    total
}

/// A node as the scheduler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    /// The requests of the pods bound to the node and not finished.
    pub used: Resources,
    /// How many such pods.
    pub pods: i128,
}

/// The scheduler's view of a Node object created through the API (not one of the simulated
/// nodes the kubelet registers itself): its labels and `status.allocatable`. `None` for a node
/// that reports no allocatable resources or is cordoned (`spec.unschedulable`), which the
/// scheduler would not place anything on.
pub fn node_view(node: &Value) -> Option<NodeView> {
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        return None;
    }
    let allocatable: Resources = node
        .pointer("/status/allocatable")
        .and_then(Value::as_object)?
        .iter()
        .filter_map(|(name, q)| {
            let amount = match q {
                Value::String(s) => parse_quantity(s),
                Value::Number(n) => n.as_u64().map(|n| i128::from(n) * 1000),
                _ => None,
            };
            Some((name.clone(), amount?))
        })
        .collect();
    let labels = crate::storage::selector::labels(node);
    Some(NodeView {
        name: node
            .pointer("/metadata/name")
            .and_then(Value::as_str)?
            .to_owned(),
        labels,
        allocatable,
        used: Resources::new(),
        pods: 0,
    })
}

/// Why `pod` does not fit `node`, kube-scheduler style; empty when it fits.
fn misfits(
    node: &NodeView,
    requests: &Resources,
    selector: &BTreeMap<String, String>,
) -> Vec<String> {
    if selector.iter().any(|(k, v)| node.labels.get(k) != Some(v)) {
        // The scheduler filters on the selector first and stops there.
        return vec!["node(s) didn't match Pod's node affinity/selector".into()];
    }
    let mut out = Vec::new();
    if let Some(max) = node.allocatable.get("pods")
        && (node.pods + 1) * 1000 > *max
    {
        out.push("Too many pods".into());
    }
    for (name, amount) in requests {
        if *amount <= 0 || name == "pods" {
            continue;
        }
        let free = node.allocatable.get(name).copied().unwrap_or(0)
            - node.used.get(name).copied().unwrap_or(0);
        if *amount > free {
            out.push(format!("Insufficient {name}"));
        }
    }
    out
}

/// The node a pod goes to: the fitting node with the fewest pods (spreading replicas as the
/// default scheduler's scoring tends to), ties broken by order. `Err` holds the message of the
/// `PodScheduled=False` condition, e.g. `0/2 nodes are available: 2 Insufficient nvidia.com/gpu.`
pub fn choose_node(pod: &Value, nodes: &[NodeView]) -> Result<usize, String> {
    let requests = pod_requests(pod);
    let selector: BTreeMap<String, String> = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    if nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<usize> = None;
    for (i, node) in nodes.iter().enumerate() {
        let why = misfits(node, &requests, &selector);
        if why.is_empty() {
            if best.is_none_or(|b| node.pods < nodes[b].pods) {
                best = Some(i);
            }
        } else {
            for reason in why {
                *histogram.entry(reason).or_default() += 1;
            }
        }
    }
    best.ok_or_else(|| {
        // kube-scheduler sorts the "<count> <reason>" strings themselves.
        let mut reasons: Vec<String> = histogram
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        reasons.sort();
        format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            reasons.join(", ")
        )
    })
}

/// Adds a pod's requests to a node's usage.
pub fn add_usage(node: &mut NodeView, requests: &Resources) {
    for (name, amount) in requests {
        *node.used.entry(name.clone()).or_default() += amount;
    }
    node.pods += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_parse_to_thousandths() {
        let q = |s| parse_quantity(s);
        assert_eq!(q("500m"), Some(500));
        assert_eq!(q("0.5"), Some(500));
        assert_eq!(q("2"), Some(2000));
        assert_eq!(q("1Ki"), Some(1024 * 1000));
        assert_eq!(q("1Gi"), Some(1024 * 1024 * 1024 * 1000));
        assert_eq!(q("64M"), Some(64_000_000_000));
        assert_eq!(q("1e3"), Some(1_000_000));
        assert_eq!(q("1.5Gi"), Some(1536 * 1024 * 1024 * 1000));
        assert_eq!(q("1n"), Some(1), "rounded up");
        assert_eq!(q("+1"), Some(1000));
        for bad in ["", "abc", "1x", "-1", ".", "1.2.3", "1Gi2"] {
            assert_eq!(q(bad), None, "{bad:?}");
        }
        assert_eq!(format_quantity(8000), "8");
        assert_eq!(format_quantity(500), "500m");
    }

    fn pod(resources: Value) -> Value {
        json!({"spec": {"containers": [{"name": "tensorflow", "resources": resources}]}})
    }

    #[test]
    fn requests_fall_back_to_limits_and_init_containers_take_the_max() {
        let p = json!({"spec": {
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "4", GPU: "2"}}},
                {"name": "b", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "c", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "d"}
            ]
        }});
        let r = pod_requests(&p);
        assert_eq!(r["cpu"], 3000, "the init container needs more than 1.5");
        assert_eq!(r[GPU], 2000);
        assert_eq!(r["memory"], 1024 * 1024 * 1024 * 1000);
        assert_eq!(pod_requests(&json!({})), Resources::new());
    }

    fn node(name: &str, gpus: i128) -> NodeView {
        NodeView {
            name: name.into(),
            labels: BTreeMap::from([("kubernetes.io/hostname".into(), name.into())]),
            allocatable: Resources::from([
                ("cpu".into(), 8000),
                (GPU.into(), gpus * 1000),
                ("pods".into(), 110_000),
            ]),
            used: Resources::new(),
            pods: 0,
        }
    }

    #[test]
    fn pods_go_to_the_least_loaded_fitting_node() {
        let mut nodes = vec![node("a", 1), node("b", 1)];
        let p = pod(json!({"limits": {GPU: 1}}));
        assert_eq!(choose_node(&p, &nodes), Ok(0));
        add_usage(&mut nodes[0], &pod_requests(&p));
        assert_eq!(choose_node(&p, &nodes), Ok(1));
        add_usage(&mut nodes[1], &pod_requests(&p));
        assert_eq!(
            choose_node(&p, &nodes),
            Err("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into())
        );
        // Pods without GPUs still fit.
        assert_eq!(choose_node(&pod(json!({})), &nodes), Ok(0));
    }

    #[test]
    fn the_message_counts_each_reason_over_nodes() {
        let mut busy = node("a", 4);
        busy.used.insert("cpu".into(), 7500);
        let nodes = vec![busy, node("b", 0)];
        let p = pod(json!({"requests": {"cpu": "1", GPU: "1"}}));
        assert_eq!(
            choose_node(&p, &nodes),
            Err(
                "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
                    .into()
            )
        );
        let unknown = pod(json!({"requests": {"example.com/fpga": "1"}}));
        assert_eq!(
            choose_node(&unknown, &nodes),
            Err("0/2 nodes are available: 2 Insufficient example.com/fpga.".into())
        );
        let selected =
            json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "b"}, "containers": []}});
        assert_eq!(choose_node(&selected, &nodes), Ok(1));
        let nowhere = json!({"spec": {"nodeSelector": {"pool": "tpu"}, "containers": []}});
        assert_eq!(
            choose_node(&nowhere, &nodes),
            Err(
                "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
                    .into()
            )
        );
        assert!(choose_node(&p, &[]).is_err());
    }

    #[test]
    fn nodes_created_through_the_api_are_read_from_their_status() {
        let n = json!({"metadata": {"name": "extra", "labels": {"pool": "gpu"}},
            "status": {"allocatable": {"cpu": "4", GPU: "2", "pods": 110}}});
        let view = node_view(&n).unwrap();
        assert_eq!(view.name, "extra");
        assert_eq!(view.labels["pool"], "gpu");
        assert_eq!(view.allocatable[GPU], 2000);
        assert_eq!(view.allocatable["pods"], 110_000);
        assert!(node_view(&json!({"metadata": {"name": "bare"}})).is_none());
        let mut cordoned = n.clone();
        cordoned["spec"] = json!({"unschedulable": true});
        assert!(node_view(&cordoned).is_none());
    }

    #[test]
    fn a_full_node_has_too_many_pods() {
        let mut full = node("a", 0);
        full.allocatable.insert("pods".into(), 1000);
        add_usage(&mut full, &Resources::new());
        assert_eq!(
            choose_node(&pod(json!({})), &[full]),
            Err("0/1 nodes are available: 1 Too many pods.".into())
        );
    }
}
