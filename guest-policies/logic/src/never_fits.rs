//! Telling a pod that can never be scheduled from one waiting its turn.
//!
//! A pending pod the scheduler calls `Unschedulable` may be waiting for room (other pods hold
//! the GPUs it needs) or may ask for more than any node has: 16 GPUs where the largest node
//! has 8. Training-operator 1.9 leaves both pending forever. Here a pod whose requests exceed
//! the allocatable of every node the classifier read, and of every node pool its settings
//! declare (autoscaled pools that may have no node right now), can never run: the verdict is a
//! permanent failure naming the resource, the request and the largest offer. A pod that fits
//! some node or pool stays pending.
//!
//! Requests are the pod's effective requests as the scheduler counts them: per resource the
//! larger of the containers' sum and the largest init container (a container's limit stands in
//! for a request it does not state, as the API server defaults it). Pods and nodes are read
//! through small shapes ([`PodShape`], [`NodeShape`]) of the fields the comparison uses. Only nodes that match the
//! pod's `nodeSelector` count, and, being read from a cache, only what the node says it can
//! allocate; taints, affinities and the room other pods take are the scheduler's business and
//! may only make the pod wait, never make it fit.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;
use crate::verdict::{Classification, FailureKind, Phase};

/// The scheduler's reason for a pod it found no room for.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// The rule, as the classification's settings configure it (`failUnschedulable`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailUnschedulable {
    /// How long a pod may be unschedulable before its requests are compared with the nodes:
    /// nodes come and go (a cluster autoscaler adding one takes minutes).
    pub grace_period: Duration,
    /// Node pools that count as offers whether or not they have nodes now.
    pub node_pools: Vec<Offer>,
}

/// What to do with a verdict under the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing: the pod is not waiting for room.
    No,
    /// Ask again at this time, when the grace period ends.
    At(Timestamp),
    /// Compare the pod's requests with the nodes now.
    Now,
}

/// Whether `verdict` (of the pod, at `now`) calls for the comparison.
pub fn due(rule: &FailUnschedulable, verdict: &Classification, now: Timestamp) -> Due {
    if !verdict.phase.is_pending() || verdict.reason != UNSCHEDULABLE {
        return Due::No;
    }
    let since = verdict.occurred_at.unwrap_or(now);
    let Some(end) = jiff::SignedDuration::try_from(rule.grace_period)
        .ok()
        .and_then(|d| since.checked_add(d).ok())
    else {
        return Due::No;
    };
    if now < end { Due::At(end) } else { Due::Now }
}

/// The verdict of a pod that can never run, for `why` ([`never_fits`]).
pub fn never_schedulable(verdict: Classification, why: &str) -> Classification {
    Classification {
        phase: Phase::PermanentFailure,
        reason: UNSCHEDULABLE.into(),
        message: format!("the pod can never be scheduled: {why}"),
        kind: Some(FailureKind::User),
        occurred_at: verdict.occurred_at,
        recheck_at: None,
    }
}

/// What the comparison reads of a pod: its containers' resources and its node selector. Only
/// these fields are decoded (decoding whole k8s-openapi pods and nodes would add more code to
/// the classifier than it has).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodShape {
    pub spec: PodShapeSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodShapeSpec {
    pub containers: Vec<ContainerShape>,
    pub init_containers: Vec<ContainerShape>,
    pub node_selector: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ContainerShape {
    pub resources: ResourcesShape,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResourcesShape {
    pub requests: BTreeMap<String, String>,
    pub limits: BTreeMap<String, String>,
}

/// What the comparison reads of a node.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeShape {
    pub metadata: NodeShapeMeta,
    pub status: NodeShapeStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeShapeMeta {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeShapeStatus {
    pub allocatable: BTreeMap<String, String>,
}

/// A node as an offer: its labels and what it can allocate (quantities that do not parse are
/// left out: an offer of nothing).
pub fn node_offer(node: &NodeShape) -> Offer {
    Offer {
        name: format!("node/{}", node.metadata.name),
        labels: node.metadata.labels.clone(),
        allocatable: parsed(&node.status.allocatable),
    }
}

fn parsed(quantities: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    quantities
        .iter()
        .filter_map(|(r, q)| Some((r.clone(), Quantity::parse(q).ok()?)))
        .collect()
}

/// The label selector text of a pod's `nodeSelector`, to list only the nodes it may use.
pub fn selector_text(node_selector: &BTreeMap<String, String>) -> String {
    pairs(node_selector)
}

/// Somewhere a pod could run: a node, or a node pool declared in settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    /// `node/NAME` or `pool/NAME`, as the message names it.
    pub name: String,
    /// Its labels, matched against the pod's `nodeSelector`.
    pub labels: BTreeMap<String, String>,
    /// What it can allocate, per resource.
    pub allocatable: BTreeMap<String, Quantity>,
}

/// A node pool declared in settings: nodes that may not exist now (an autoscaled pool at zero
/// nodes) but would be made for a pod that fits them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    pub name: String,
    /// The labels its nodes carry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// What one of its nodes can allocate, as quantities (`nvidia.com/gpu: "16"`).
    pub allocatable: BTreeMap<String, String>,
}

impl NodePool {
    /// The pool as an offer; an error names the field of a quantity that does not parse.
    pub fn offer(&self) -> Result<Offer, String> {
        let allocatable = self
            .allocatable
            .iter()
            .map(|(resource, q)| {
                Quantity::parse(q)
                    .map(|q| (resource.clone(), q))
                    .map_err(|e| format!("allocatable[{resource:?}]: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Offer {
            name: format!("pool/{}", self.name),
            labels: self.labels.clone(),
            allocatable,
        })
    }
}

/// The pod's effective requests, per resource (zero requests left out).
pub fn pod_requests(pod: &PodShape) -> BTreeMap<String, Quantity> {
    let mut sum: BTreeMap<String, Quantity> = BTreeMap::new();
    for container in &pod.spec.containers {
        for (resource, q) in container_requests(container) {
            let total = match sum.get(&resource) {
                Some(before) => before.checked_add(q).unwrap_or(q),
                None => q,
            };
            sum.insert(resource, total);
        }
    }
    for container in &pod.spec.init_containers {
        for (resource, q) in container_requests(container) {
            let entry = sum.entry(resource).or_insert(q);
            if q > *entry {
                *entry = q;
            }
        }
    }
    sum.retain(|_, q| !q.is_zero() && !q.is_negative());
    sum
}

/// A container's requests, its limits standing in for requests it does not state.
fn container_requests(container: &ContainerShape) -> BTreeMap<String, Quantity> {
    let mut requests = parsed(&container.resources.limits);
    requests.extend(parsed(&container.resources.requests));
    requests
}

/// Why a pod asking for `requests` and selecting nodes by `node_selector` fits none of
/// `offers`; `None` when it fits one (or asks for nothing).
pub fn never_fits(
    requests: &BTreeMap<String, Quantity>,
    node_selector: &BTreeMap<String, String>,
    offers: &[Offer],
) -> Option<String> {
    if requests.is_empty() {
        return None;
    }
    let eligible: Vec<&Offer> = offers
        .iter()
        .filter(|o| {
            node_selector
                .iter()
                .all(|(k, v)| o.labels.get(k) == Some(v))
        })
        .collect();
    if eligible.is_empty() {
        return Some(if node_selector.is_empty() {
            "no node exists and no node pool is declared".to_owned()
        } else {
            format!(
                "no node or node pool matches its node selector {}",
                pairs(node_selector)
            )
        });
    }
    let fits = |o: &Offer| {
        requests
            .iter()
            .all(|(r, q)| o.allocatable.get(r).is_some_and(|offered| offered >= q))
    };
    if eligible.iter().any(|o| fits(o)) {
        return None;
    }
    // The resource no offer has enough of, with the largest offer of it; else the first
    // resource the closest offer lacks.
    for (resource, q) in requests {
        let largest = eligible
            .iter()
            .filter_map(|o| o.allocatable.get(resource).map(|a| (a, &o.name)))
            .max_by(|a, b| a.0.cmp(b.0));
        match largest {
            None => {
                return Some(format!(
                    "it requests {resource} {q}, which no {} offers",
                    what(&eligible)
                ));
            }
            Some((offered, name)) if offered < q => {
                return Some(format!(
                    "it requests {resource} {q}; the largest {} offers {offered} ({name})",
                    what(&eligible)
                ));
            }
            Some(_) => {}
        }
    }
    Some(format!(
        "no single {} has room for all of its requests ({})",
        what(&eligible),
        requests
            .iter()
            .map(|(r, q)| format!("{r} {q}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn what(offers: &[&Offer]) -> &'static str {
    if offers.iter().any(|o| o.name.starts_with("pool/")) {
        "node or node pool"
    } else {
        "node"
    }
}

fn pairs(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_comparison_waits_for_the_grace_period_of_an_unschedulable_pod_only() {
        let rule = FailUnschedulable {
            grace_period: Duration::from_secs(30),
            node_pools: Vec::new(),
        };
        let waiting = Classification {
            phase: Phase::Queued,
            reason: UNSCHEDULABLE.into(),
            message: "0/2 nodes are available".into(),
            kind: None,
            occurred_at: Some(at("2026-01-01T00:00:00Z")),
            recheck_at: None,
        };
        assert_eq!(
            due(&rule, &waiting, at("2026-01-01T00:00:10Z")),
            Due::At(at("2026-01-01T00:00:30Z"))
        );
        assert_eq!(due(&rule, &waiting, at("2026-01-01T00:00:30Z")), Due::Now);
        let running = Classification::bare(Phase::Running);
        assert_eq!(due(&rule, &running, at("2026-01-01T01:00:00Z")), Due::No);
        let pulling = Classification {
            reason: "ContainersNotReady|ImagePullBackOff".into(),
            ..waiting.clone()
        };
        assert_eq!(due(&rule, &pulling, at("2026-01-01T01:00:00Z")), Due::No);
        let failed = never_schedulable(waiting, "it requests nvidia.com/gpu 16");
        assert_eq!(failed.phase, Phase::PermanentFailure);
        assert_eq!(failed.kind, Some(FailureKind::User));
        assert_eq!(
            failed.message,
            "the pod can never be scheduled: it requests nvidia.com/gpu 16"
        );
        assert_eq!(failed.occurred_at, Some(at("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn nodes_become_offers_of_what_they_can_allocate() {
        let node: NodeShape = serde_json::from_value(json!({
            "metadata": {"name": "gpu-1", "labels": {"pool": "gpu"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "63500m", "bad": "lots"}}
        }))
        .unwrap();
        let offer = node_offer(&node);
        assert_eq!(offer.name, "node/gpu-1");
        assert_eq!(offer.allocatable.len(), 2, "{offer:?}");
        assert_eq!(offer.allocatable["cpu"], q("63.5"));
        assert_eq!(
            selector_text(
                &[
                    ("pool".to_owned(), "gpu".to_owned()),
                    ("zone".to_owned(), "a".to_owned())
                ]
                .into()
            ),
            "pool=gpu,zone=a"
        );
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    fn pod(value: serde_json::Value) -> PodShape {
        serde_json::from_value(value).unwrap()
    }

    fn node(name: &str, labels: &[(&str, &str)], allocatable: &[(&str, &str)]) -> Offer {
        Offer {
            name: format!("node/{name}"),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            allocatable: allocatable
                .iter()
                .map(|(r, v)| ((*r).into(), q(v)))
                .collect(),
        }
    }

    fn requests(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs.iter().map(|(r, v)| ((*r).into(), q(v))).collect()
    }

    #[test]
    fn effective_requests_count_containers_together_and_init_containers_alone() {
        let p = pod(json!({"spec": {
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "6", "nvidia.com/gpu": "1"}}}],
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "8"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1500m", "memory": "0"}, "limits": {"nvidia.com/gpu": "8"}}}
        ]}}));
        assert_eq!(
            pod_requests(&p),
            requests(&[("cpu", "6"), ("nvidia.com/gpu", "16")])
        );
        assert!(pod_requests(&pod(json!({}))).is_empty());
    }

    #[test]
    fn a_pod_asking_more_than_the_largest_node_never_fits_naming_the_offer() {
        let nodes = [
            node("small", &[], &[("nvidia.com/gpu", "4"), ("cpu", "32")]),
            node("big", &[], &[("nvidia.com/gpu", "8"), ("cpu", "64")]),
        ];
        let why = never_fits(
            &requests(&[("nvidia.com/gpu", "16")]),
            &BTreeMap::new(),
            &nodes,
        );
        assert_eq!(
            why.as_deref(),
            Some("it requests nvidia.com/gpu 16; the largest node offers 8 (node/big)")
        );
        assert_eq!(
            never_fits(
                &requests(&[("nvidia.com/gpu", "8")]),
                &BTreeMap::new(),
                &nodes
            ),
            None,
            "fits the big node, even if it is busy now"
        );
        let why = never_fits(
            &requests(&[("example.com/fpga", "1")]),
            &BTreeMap::new(),
            &nodes,
        );
        assert_eq!(
            why.as_deref(),
            Some("it requests example.com/fpga 1, which no node offers")
        );
    }

    #[test]
    fn a_declared_pool_counts_as_a_node_that_may_come() {
        let nodes = [node("cpu-1", &[], &[("cpu", "32")])];
        let pool = NodePool {
            name: "a100".into(),
            labels: [("pool".to_owned(), "gpu".to_owned())].into(),
            allocatable: [("nvidia.com/gpu".to_owned(), "16".to_owned())].into(),
        };
        let offers = [nodes[0].clone(), pool.offer().unwrap()];
        assert_eq!(
            never_fits(
                &requests(&[("nvidia.com/gpu", "16")]),
                &BTreeMap::new(),
                &offers
            ),
            None
        );
        let why = never_fits(
            &requests(&[("nvidia.com/gpu", "32")]),
            &BTreeMap::new(),
            &offers,
        );
        assert_eq!(
            why.as_deref(),
            Some(
                "it requests nvidia.com/gpu 32; the largest node or node pool offers 16 (pool/a100)"
            )
        );
        let bad = NodePool {
            allocatable: [("cpu".to_owned(), "lots".to_owned())].into(),
            ..pool
        };
        assert!(bad.offer().unwrap_err().starts_with("allocatable[\"cpu\"]"));
    }

    #[test]
    fn only_nodes_matching_the_node_selector_count() {
        let nodes = [
            node("gpu", &[("pool", "gpu")], &[("nvidia.com/gpu", "8")]),
            node("cpu", &[("pool", "cpu")], &[("cpu", "64")]),
        ];
        let selector: BTreeMap<String, String> = [("pool".to_owned(), "cpu".to_owned())].into();
        let why = never_fits(&requests(&[("nvidia.com/gpu", "1")]), &selector, &nodes);
        assert_eq!(
            why.as_deref(),
            Some("it requests nvidia.com/gpu 1, which no node offers")
        );
        let nowhere: BTreeMap<String, String> = [("pool".to_owned(), "tpu".to_owned())].into();
        let why = never_fits(&requests(&[("cpu", "1")]), &nowhere, &nodes);
        assert_eq!(
            why.as_deref(),
            Some("no node or node pool matches its node selector pool=tpu")
        );
    }

    #[test]
    fn requests_that_fit_apart_but_not_together_say_so() {
        let nodes = [
            node("gpu", &[], &[("nvidia.com/gpu", "8"), ("cpu", "4")]),
            node("cpu", &[], &[("cpu", "64")]),
        ];
        let why = never_fits(
            &requests(&[("cpu", "32"), ("nvidia.com/gpu", "8")]),
            &BTreeMap::new(),
            &nodes,
        );
        assert_eq!(
            why.as_deref(),
            Some("no single node has room for all of its requests (cpu 32, nvidia.com/gpu 8)")
        );
        assert_eq!(never_fits(&BTreeMap::new(), &BTreeMap::new(), &[]), None);
        assert_eq!(
            never_fits(&requests(&[("cpu", "1")]), &BTreeMap::new(), &[]).as_deref(),
            Some("no node exists and no node pool is declared")
        );
    }
}
