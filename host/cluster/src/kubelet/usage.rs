//! What the pods bound to each node use, kept up to date as pods change.
//!
//! The scheduler needs every node's used resources and pod count, and every PodGroup's bound
//! requests, on each pass. Recounting them meant listing every pod of the cluster per pass, and
//! a pass runs after nearly every event while pods wait: at thousands of pods that listing was
//! most of the simulator's time. Here each pod's share (its node, its group, its requests) is
//! recorded when the pod is seen, and replaced or removed when it changes, so a pass reads
//! totals. [`Usage::recount`] builds the same totals from a list, for a resync and for tests
//! that hold the running totals against a full recount.

use std::collections::HashMap;

use serde_json::Value;

use super::schedule::{self, Resources};

/// A PodGroup: namespace and name.
pub type GroupKey = (String, String);

/// What one pod holds: the node it is bound to and the scheduler's view of its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    pub node: String,
    pub group: Option<GroupKey>,
    pub requests: Resources,
}

impl Share {
    /// The share of `pod` in group `group`: none unless it is bound and not finished. A pod
    /// being deleted still holds its share until it is gone from the store, as kube-scheduler
    /// counts a terminating pod: its containers may still be running out their grace period.
    pub fn of(pod: &Value, group: Option<GroupKey>) -> Option<Share> {
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())?;
        if finished(pod) {
            return None;
        }
        Some(Share {
            node: node.to_owned(),
            group,
            requests: schedule::pod_requests(pod),
        })
    }
}

/// Done: `Succeeded` or `Failed`. Being deleted is not done.
pub fn finished(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// The requests and number of the pods bound to one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTotal {
    pub used: Resources,
    pub pods: i128,
}

/// Running totals, by pod uid.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Usage {
    shares: HashMap<String, Share>,
    nodes: HashMap<String, NodeTotal>,
    /// Per group, per node, the members' requests and how many members: a group's usage
    /// counts only the nodes the caller serves.
    groups: HashMap<GroupKey, HashMap<String, NodeTotal>>,
}

impl Usage {
    /// The totals of `pods`, each with its group, counted from scratch.
    pub fn recount<'a>(
        pods: impl IntoIterator<Item = &'a Value>,
        group_of: impl Fn(&str) -> Option<GroupKey>,
    ) -> Usage {
        let mut usage = Usage::default();
        for pod in pods {
            let uid = pod
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            usage.set(uid, Share::of(pod, group_of(uid)));
        }
        usage
    }

    /// Records what the pod `uid` holds now (`None`: nothing), in place of what it held.
    pub fn set(&mut self, uid: &str, share: Option<Share>) {
        if self.shares.get(uid) == share.as_ref() {
            return;
        }
        if let Some(old) = self.shares.remove(uid) {
            self.apply(&old, -1);
        }
        if let Some(new) = share {
            self.apply(&new, 1);
            self.shares.insert(uid.to_owned(), new);
        }
    }

    /// What the pods bound to `node` use.
    pub fn node(&self, node: &str) -> Option<&NodeTotal> {
        self.nodes.get(node)
    }

    /// What each group's bound pods use on the nodes `counts` accepts.
    pub fn groups(&self, counts: impl Fn(&str) -> bool) -> HashMap<GroupKey, Resources> {
        let mut out = HashMap::new();
        for (key, per_node) in &self.groups {
            let mut served = per_node.iter().filter(|(n, _)| counts(n)).peekable();
            if served.peek().is_none() {
                continue;
            }
            let mut total = Resources::new();
            for (_, on_node) in served {
                add(&mut total, &on_node.used, 1);
            }
            out.insert(key.clone(), total);
        }
        out
    }

    fn apply(&mut self, share: &Share, sign: i128) {
        // Emptied entries go, so running totals equal a recount exactly.
        if count(&mut self.nodes, &share.node, &share.requests, sign) {
            self.nodes.remove(&share.node);
        }
        if let Some(key) = &share.group {
            let per_node = self.groups.entry(key.clone()).or_default();
            if count(per_node, &share.node, &share.requests, sign) {
                per_node.remove(&share.node);
            }
            if per_node.is_empty() {
                self.groups.remove(key);
            }
        }
    }
}

/// Adds (`sign` 1) or removes (-1) one pod's requests on `node`; true when no pod is left.
fn count(
    totals: &mut HashMap<String, NodeTotal>,
    node: &str,
    requests: &Resources,
    sign: i128,
) -> bool {
    let total = totals.entry(node.to_owned()).or_default();
    add(&mut total.used, requests, sign);
    total.pods += sign;
    total.pods == 0
}

/// `total += sign * amounts`, dropping amounts that reach zero.
fn add(total: &mut Resources, amounts: &Resources, sign: i128) {
    for (name, amount) in amounts {
        let entry = total.entry(name.clone()).or_default();
        *entry += sign * amount;
        if *entry == 0 {
            total.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, node: Option<&str>, cpu: &str, phase: &str) -> Value {
        let mut p = json!({
            "metadata": {"uid": uid, "name": uid},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase},
        });
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    fn group_of(uid: &str) -> Option<GroupKey> {
        // Every third pod belongs to a group.
        uid.trim_start_matches('p')
            .parse::<u32>()
            .ok()
            .filter(|n| n % 3 == 0)
            .map(|n| ("ns".to_owned(), format!("g{}", n % 2)))
    }

    #[test]
    fn running_totals_equal_a_recount_after_any_sequence_of_changes() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut pods: HashMap<String, Value> = HashMap::new();
        let mut usage = Usage::default();
        let nodes = ["n0", "n1", "n2"];
        let phases = ["Pending", "Running", "Succeeded", "Failed"];
        for step in 0..3_000 {
            let uid = format!("p{}", rng.u32(0..60));
            if rng.u8(0..10) == 0 {
                pods.remove(&uid);
                usage.set(&uid, None);
            } else {
                let node = (rng.u8(0..4) > 0).then(|| nodes[rng.usize(0..nodes.len())]);
                let cpu = ["0", "100m", "1", "2500m"][rng.usize(0..4)];
                let mut p = pod(&uid, node, cpu, phases[rng.usize(0..phases.len())]);
                if rng.u8(0..8) == 0 {
                    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                }
                usage.set(&uid, Share::of(&p, group_of(&uid)));
                pods.insert(uid, p);
            }
            if step % 100 == 0 {
                assert_eq!(
                    usage,
                    Usage::recount(pods.values(), group_of),
                    "step {step}"
                );
            }
        }
        assert_eq!(usage, Usage::recount(pods.values(), group_of));
        for uid in pods.keys().cloned().collect::<Vec<_>>() {
            usage.set(&uid, None);
        }
        assert_eq!(
            usage,
            Usage::default(),
            "nothing left once every pod is gone"
        );
    }

    #[test]
    fn finished_and_unbound_pods_hold_nothing() {
        assert!(Share::of(&pod("a", None, "1", "Pending"), None).is_none());
        assert!(Share::of(&pod("a", Some("n"), "1", "Succeeded"), None).is_none());
        assert!(Share::of(&pod("a", Some("n"), "1", "Failed"), None).is_none());
        let running = Share::of(&pod("a", Some("n"), "1500m", "Running"), None).unwrap();
        assert_eq!(running.node, "n");
        assert_eq!(running.requests.get("cpu"), Some(&1500));
    }

    #[test]
    fn a_terminating_pod_holds_its_share_until_it_is_gone() {
        let g = Some(("ns".to_owned(), "g".to_owned()));
        let mut usage = Usage::default();
        let mut pods: HashMap<String, Value> = HashMap::new();
        let check = |usage: &Usage, pods: &HashMap<String, Value>, when: &str| {
            let group_of = |uid: &str| (uid == "a").then(|| ("ns".to_owned(), "g".to_owned()));
            assert_eq!(*usage, Usage::recount(pods.values(), group_of), "{when}");
        };
        // Bound.
        let bound = pod("a", Some("n"), "2", "Running");
        usage.set("a", Share::of(&bound, g.clone()));
        pods.insert("a".into(), bound.clone());
        check(&usage, &pods, "bound");
        assert_eq!(usage.node("n").unwrap().used.get("cpu"), Some(&2000));
        // Deletion requested: a finalizer or a grace period keeps the object.
        let mut terminating = bound;
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        usage.set("a", Share::of(&terminating, g.clone()));
        pods.insert("a".into(), terminating);
        check(&usage, &pods, "terminating");
        assert_eq!(
            usage.node("n").unwrap().used.get("cpu"),
            Some(&2000),
            "still held"
        );
        assert_eq!(
            usage.groups(|_| true)[&g.clone().unwrap()].get("cpu"),
            Some(&2000)
        );
        // Gone from the store: freed.
        usage.set("a", None);
        pods.remove("a");
        check(&usage, &pods, "gone");
        assert!(usage.node("n").is_none());
        assert!(usage.groups(|_| true).is_empty());
    }

    #[test]
    fn a_group_counts_only_the_nodes_asked_for() {
        let mut usage = Usage::default();
        let g = Some(("ns".to_owned(), "g".to_owned()));
        usage.set(
            "a",
            Share::of(&pod("a", Some("ours"), "1", "Running"), g.clone()),
        );
        usage.set(
            "b",
            Share::of(&pod("b", Some("foreign"), "2", "Running"), g.clone()),
        );
        let groups = usage.groups(|n| n == "ours");
        assert_eq!(groups[&g.clone().unwrap()].get("cpu"), Some(&1000));
        assert!(usage.groups(|n| n == "elsewhere").is_empty());
        assert_eq!(usage.node("foreign").map(|t| t.pods), Some(1));
    }
}
