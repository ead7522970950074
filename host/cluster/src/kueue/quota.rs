//! Kueue's admission decisions, pure: given everything the cluster holds (queues, flavors,
//! node labels, workloads), which workloads are evicted, which are admitted with which
//! flavors, why the others wait, and the counts each queue reports.
//!
//! The rules are Kueue's for a ClusterQueue without a cohort: each queue's pending workloads
//! are tried in order (higher `spec.priority` first, then older, then by name); a pod set
//! gets, for each resource group it touches, the first flavor (in the queue's order) that
//! exists, has nodes with its labels, whose taints the pods tolerate, and has unused nominal
//! quota for every covered resource the set asks for. Usage is what the admitted, unfinished
//! workloads of the queue hold. `BestEffortFIFO` lets a workload that does not fit be passed;
//! `StrictFIFO` makes the others wait behind it. Not modelled: cohorts and borrowing,
//! preemption, partial admission, admission checks, topology-aware scheduling, fair sharing.
//!
//! [`plan`] decides one pass from one consistent view; the caller writes the evictions before
//! the admissions, so the quota a workload releases is free before another takes it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::objects::{
    Admission, Assignment, ClusterQueue, Labels, LocalQueue, PodSet, ResourceFlavor, StopPolicy,
    Strategy, Taint, Workload, WorkloadKey, render,
};
use crate::kubelet::schedule::Resources;

/// Everything a pass decides from.
#[derive(Clone, Debug, Default)]
pub struct World {
    pub cluster_queues: BTreeMap<String, ClusterQueue>,
    /// By namespace and name.
    pub local_queues: BTreeMap<(String, String), LocalQueue>,
    pub flavors: BTreeMap<String, ResourceFlavor>,
    /// The labels of every stored Node.
    pub nodes: Vec<Labels>,
    /// The labels of every stored Namespace (a namespace not stored has only
    /// `kubernetes.io/metadata.name`).
    pub namespaces: BTreeMap<String, Labels>,
    pub workloads: Vec<Workload>,
}

/// Why an admitted workload loses its admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// `spec.active: false`.
    Deactivated,
    /// Its ClusterQueue's `stopPolicy` is `HoldAndDrain`.
    ClusterQueueStopped,
    /// Its LocalQueue's `stopPolicy` is `HoldAndDrain`.
    LocalQueueStopped,
}

impl Eviction {
    /// The reason of the `Evicted` condition, Kueue's.
    pub fn reason(self) -> &'static str {
        match self {
            Eviction::Deactivated => "Deactivated",
            Eviction::ClusterQueueStopped => "ClusterQueueStopped",
            Eviction::LocalQueueStopped => "LocalQueueStopped",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Eviction::Deactivated => "The workload is deactivated",
            Eviction::ClusterQueueStopped => "The ClusterQueue is stopped",
            Eviction::LocalQueueStopped => "The LocalQueue is stopped",
        }
    }
}

/// What happens to one workload in a pass. Workloads with no decision stay as they are
/// (admitted and kept, finished, deactivated while pending, being deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit(Admission),
    /// Not admitted, and why (the message of `QuotaReserved` False); `queued` when it waits
    /// in its ClusterQueue (rather than for a queue to exist or to be started).
    Pending {
        message: String,
        queued: bool,
    },
    Evict(Eviction),
}

/// What a queue reports in its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub pending: u32,
    /// Holding quota (admitted and unfinished), after the pass.
    pub reserving: u32,
    /// Quota held per flavor and resource.
    pub usage: BTreeMap<(String, String), i128>,
}

impl QueueCounts {
    fn hold(&mut self, usage: &BTreeMap<(String, String), i128>) {
        self.reserving += 1;
        for (k, v) in usage {
            *self.usage.entry(k.clone()).or_default() += v;
        }
    }
}

/// The outcome of a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub decisions: BTreeMap<WorkloadKey, Decision>,
    pub cluster_queues: BTreeMap<String, QueueCounts>,
    pub local_queues: BTreeMap<(String, String), QueueCounts>,
}

/// Where a pending workload goes, or why it cannot be queued.
fn route<'a>(world: &'a World, wl: &Workload) -> Result<&'a ClusterQueue, String> {
    let lq_key = (wl.namespace.clone(), wl.queue_name.clone());
    let lq = world
        .local_queues
        .get(&lq_key)
        .ok_or_else(|| format!("LocalQueue {} doesn't exist", wl.queue_name))?;
    if lq.stop.stopped() {
        return Err(format!("LocalQueue {} is inactive", lq.name));
    }
    let cq = world
        .cluster_queues
        .get(&lq.cluster_queue)
        .ok_or_else(|| format!("ClusterQueue {} doesn't exist", lq.cluster_queue))?;
    if cq.stop.stopped() {
        return Err(format!("ClusterQueue {} is inactive", cq.name));
    }
    let fallback = Labels::from([(
        "kubernetes.io/metadata.name".to_owned(),
        wl.namespace.clone(),
    )]);
    let labels = world.namespaces.get(&wl.namespace).unwrap_or(&fallback);
    if !selector_matches(cq.namespace_selector.as_ref(), labels) {
        return Err("Workload namespace doesn't match ClusterQueue selector".to_owned());
    }
    Ok(cq)
}

/// Whether an admitted workload must be evicted.
fn eviction(world: &World, wl: &Workload, admission: &Admission) -> Option<Eviction> {
    if !wl.active {
        return Some(Eviction::Deactivated);
    }
    let cq = world.cluster_queues.get(&admission.cluster_queue);
    if cq.is_some_and(|cq| cq.stop == StopPolicy::HoldAndDrain) {
        return Some(Eviction::ClusterQueueStopped);
    }
    let lq = world
        .local_queues
        .get(&(wl.namespace.clone(), wl.queue_name.clone()));
    if lq.is_some_and(|lq| lq.stop == StopPolicy::HoldAndDrain) {
        return Some(Eviction::LocalQueueStopped);
    }
    None
}

/// Decides one pass.
pub fn plan(world: &World) -> Plan {
    let mut out = Plan::default();
    let mut queued: BTreeMap<&str, Vec<&Workload>> = BTreeMap::new();
    for name in world.cluster_queues.keys() {
        out.cluster_queues
            .insert(name.clone(), QueueCounts::default());
    }
    for key in world.local_queues.keys() {
        out.local_queues.insert(key.clone(), QueueCounts::default());
    }
    let lq_key = |wl: &Workload| (wl.namespace.clone(), wl.queue_name.clone());
    for wl in &world.workloads {
        if wl.finished {
            continue;
        }
        if let Some(admission) = &wl.admission {
            match eviction(world, wl, admission) {
                Some(e) if !wl.deleting => {
                    out.decisions.insert(wl.key(), Decision::Evict(e));
                }
                _ => {
                    let usage = admission.usage();
                    out.cluster_queues
                        .entry(admission.cluster_queue.clone())
                        .or_default()
                        .hold(&usage);
                    if let Some(lq) = out.local_queues.get_mut(&lq_key(wl)) {
                        lq.hold(&usage);
                    }
                }
            }
            continue;
        }
        if !wl.active || wl.deleting {
            continue;
        }
        if let Some(lq) = out.local_queues.get_mut(&lq_key(wl)) {
            lq.pending += 1;
        }
        match route(world, wl) {
            Ok(cq) => queued.entry(&cq.name).or_default().push(wl),
            Err(message) => {
                let pending = Decision::Pending {
                    message,
                    queued: false,
                };
                out.decisions.insert(wl.key(), pending);
            }
        }
    }
    for (cq_name, mut waiting) in queued {
        let Some(cq) = world.cluster_queues.get(cq_name) else {
            continue;
        };
        waiting.sort_by(|a, b| {
            (b.priority, &a.created, &a.name).cmp(&(a.priority, &b.created, &b.name))
        });
        let counts = out.cluster_queues.entry(cq_name.to_owned()).or_default();
        let mut blocked_by: Option<&Workload> = None;
        for wl in waiting {
            if let Some(head) = blocked_by {
                counts.pending += 1;
                let message = format!(
                    "Workload {}/{} ahead of it in StrictFIFO ClusterQueue {} does not fit yet",
                    head.namespace, head.name, cq.name
                );
                let pending = Decision::Pending {
                    message,
                    queued: true,
                };
                out.decisions.insert(wl.key(), pending);
                continue;
            }
            match assign(cq, world, &counts.usage, &wl.pod_sets) {
                Ok(pod_sets) => {
                    let admission = Admission {
                        cluster_queue: cq.name.clone(),
                        pod_sets,
                    };
                    let usage = admission.usage();
                    counts.hold(&usage);
                    if let Some(lq) = out.local_queues.get_mut(&lq_key(wl)) {
                        lq.pending = lq.pending.saturating_sub(1);
                        lq.hold(&usage);
                    }
                    out.decisions.insert(wl.key(), Decision::Admit(admission));
                }
                Err(message) => {
                    counts.pending += 1;
                    if cq.strategy == Strategy::StrictFifo {
                        blocked_by = Some(wl);
                    }
                    let pending = Decision::Pending {
                        message,
                        queued: true,
                    };
                    out.decisions.insert(wl.key(), pending);
                }
            }
        }
    }
    out
}

/// Flavors for every pod set of a workload against the queue's `usage`, or why there are none.
pub fn assign(
    cq: &ClusterQueue,
    world: &World,
    usage: &BTreeMap<(String, String), i128>,
    pod_sets: &[PodSet],
) -> Result<Vec<Assignment>, String> {
    // What earlier pod sets of the same workload take counts against the later ones.
    let mut taken = usage.clone();
    let mut out = Vec::with_capacity(pod_sets.len());
    for set in pod_sets {
        let total = set.total();
        let fail = |why: String| format!("couldn't assign flavors to pod set {}: {why}", set.name);
        let mut by_group: BTreeMap<usize, Resources> = BTreeMap::new();
        for (resource, amount) in &total {
            let group = cq.group_of(resource).ok_or_else(|| {
                fail(format!(
                    "resource {resource} unavailable in ClusterQueue {}",
                    cq.name
                ))
            })?;
            by_group
                .entry(group)
                .or_default()
                .insert(resource.clone(), *amount);
        }
        let mut flavors = BTreeMap::new();
        for (group, needed) in by_group {
            let mut reasons = Vec::new();
            let chosen = cq.groups[group].flavors.iter().find(|f| {
                match fits(cq, world, &taken, set, &needed, &f.name, &f.nominal) {
                    Ok(()) => true,
                    Err(why) => {
                        reasons.push(why);
                        false
                    }
                }
            });
            let Some(flavor) = chosen else {
                if reasons.is_empty() {
                    reasons.push(format!("no flavor in ClusterQueue {}", cq.name));
                }
                return Err(fail(reasons.join(", ")));
            };
            for (resource, amount) in needed {
                *taken
                    .entry((flavor.name.clone(), resource.clone()))
                    .or_default() += amount;
                flavors.insert(resource, flavor.name.clone());
            }
        }
        out.push(Assignment {
            name: set.name.clone(),
            flavors,
            usage: total,
            count: set.count,
        });
    }
    Ok(out)
}

/// Whether flavor `name` can take `needed` of pod set `set`.
fn fits(
    cq: &ClusterQueue,
    world: &World,
    taken: &BTreeMap<(String, String), i128>,
    set: &PodSet,
    needed: &Resources,
    name: &str,
    nominal: &Resources,
) -> Result<(), String> {
    let flavor = world
        .flavors
        .get(name)
        .ok_or_else(|| format!("flavor {name} not found"))?;
    matches_nodes(flavor, set, &world.nodes)?;
    for (resource, amount) in needed {
        let quota = nominal.get(resource).copied().unwrap_or(0);
        let used = taken
            .get(&(name.to_owned(), resource.clone()))
            .copied()
            .unwrap_or(0);
        if *amount > quota - used {
            return Err(format!(
                "insufficient quota for {resource} in flavor {name} in ClusterQueue {} ({} requested, {} of {} unused)",
                cq.name,
                render(resource, *amount),
                render(resource, (quota - used).max(0)),
                render(resource, quota),
            ));
        }
    }
    Ok(())
}

/// Whether the flavor's nodes can run the pod set: some node carries its labels, the set's own
/// node selector does not contradict them, and the set tolerates its taints.
pub fn matches_nodes(
    flavor: &ResourceFlavor,
    set: &PodSet,
    nodes: &[Labels],
) -> Result<(), String> {
    let name = &flavor.name;
    for (key, value) in &flavor.node_labels {
        if let Some(own) = set.node_selector.get(key)
            && own != value
        {
            return Err(format!(
                "flavor {name} doesn't match the pod set's nodeSelector {key}={own}"
            ));
        }
    }
    if !flavor.node_labels.is_empty()
        && !nodes.iter().any(|labels| {
            flavor
                .node_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
    {
        let wanted: Vec<String> = flavor
            .node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return Err(format!(
            "flavor {name} matches no node (no node has the labels {})",
            wanted.join(",")
        ));
    }
    for taint in &flavor.node_taints {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !set.tolerations.iter().any(|t| tolerates(t, taint))
        {
            return Err(format!(
                "untolerated taint {{{}: {}, effect: {}}} in flavor {name}",
                taint.key, taint.value, taint.effect
            ));
        }
    }
    Ok(())
}

/// Whether a pod toleration tolerates a taint, by the scheduler's rules.
pub fn tolerates(toleration: &Value, taint: &Taint) -> bool {
    let field = |k: &str| {
        toleration
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let effect = field("effect");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = field("key");
    match field("operator") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => key == taint.key && field("value") == taint.value,
    }
}

/// Whether a `metav1.LabelSelector` matches `labels`; no selector matches everything.
pub fn selector_matches(selector: Option<&Value>, labels: &Labels) -> bool {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return true;
    };
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| {
            v.as_str()
                .is_some_and(|v| labels.get(k).map(String::as_str) == Some(v))
        });
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: BTreeSet<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let value = labels.get(key).map(String::as_str);
            match e.get("operator").and_then(Value::as_str) {
                Some("In") => value.is_some_and(|v| values.contains(v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => false,
            }
        });
    match_labels && expressions
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn flavor(name: &str) -> ResourceFlavor {
        ResourceFlavor::parse(&json!({"metadata": {"name": name}}))
    }

    fn cluster_queue(name: &str, flavors: &[(&str, &str)]) -> ClusterQueue {
        let flavors: Vec<Value> = flavors
            .iter()
            .map(|(f, cpu)| json!({"name": f, "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "36Gi"}]}))
            .collect();
        ClusterQueue::parse(&json!({
            "metadata": {"name": name},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": flavors}]},
        }))
    }

    fn workload(name: &str, created: &str, sets: &[(&str, i64, &str)]) -> Workload {
        let sets: Vec<Value> = sets
            .iter()
            .map(|(n, count, cpu)| {
                json!({"name": n, "count": count, "template": {"spec": {"containers": [
                    {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "200Mi"}}}
                ]}}})
            })
            .collect();
        Workload::parse(&json!({
            "metadata": {"namespace": "default", "name": name, "creationTimestamp": created},
            "spec": {"queueName": "user-queue", "podSets": sets},
        }))
    }

    fn world(cq: ClusterQueue, workloads: Vec<Workload>) -> World {
        World {
            local_queues: BTreeMap::from([(
                ("default".into(), "user-queue".into()),
                LocalQueue::parse(
                    &json!({"metadata": {"namespace": "default", "name": "user-queue"},
                    "spec": {"clusterQueue": cq.name}}),
                ),
            )]),
            cluster_queues: BTreeMap::from([(cq.name.clone(), cq)]),
            flavors: BTreeMap::from([
                ("default-flavor".into(), flavor("default-flavor")),
                ("spare".into(), flavor("spare")),
            ]),
            nodes: vec![Labels::from([(
                "kubernetes.io/hostname".into(),
                "sim-node-0".into(),
            )])],
            namespaces: BTreeMap::new(),
            workloads,
        }
    }

    fn admitted(plan: &Plan) -> Vec<&str> {
        plan.decisions
            .iter()
            .filter(|(_, d)| matches!(d, Decision::Admit(_)))
            .map(|((_, n), _)| n.as_str())
            .collect()
    }

    fn pending<'a>(plan: &'a Plan, name: &str) -> &'a str {
        match plan.decisions.get(&("default".into(), name.into())) {
            Some(Decision::Pending { message, .. }) => message,
            other => panic!("{name} is not pending: {other:?}"),
        }
    }

    /// Marks a workload admitted with the plan's decision, as the loop's write would.
    fn admit(w: &mut World, plan: &Plan) {
        for wl in &mut w.workloads {
            if let Some(Decision::Admit(a)) = plan.decisions.get(&wl.key()) {
                wl.admission = Some(a.clone());
            }
        }
    }

    #[test]
    fn the_quota_admits_in_order_and_the_sample_tfjob_fits() {
        let cq = cluster_queue("cluster-queue", &[("default-flavor", "9")]);
        let wls = vec![
            workload(
                "b",
                "2025-01-01T00:00:01Z",
                &[("ps", 1, "1"), ("worker", 2, "1")],
            ),
            workload(
                "a",
                "2025-01-01T00:00:01Z",
                &[("ps", 1, "1"), ("worker", 2, "1")],
            ),
            workload("c", "2025-01-01T00:00:00Z", &[("worker", 4, "1")]),
        ];
        let mut w = world(cq, wls);
        let plan = plan(&w);
        // c (oldest, 4) then a (3, the name breaks the tie): 7 of 9; b's 3 does not fit.
        assert_eq!(admitted(&plan), ["a", "c"]);
        assert_eq!(
            pending(&plan, "b"),
            // Its ps takes 1 of the 2 left; its workers' 2 no longer fit.
            "couldn't assign flavors to pod set worker: insufficient quota for cpu in flavor default-flavor in ClusterQueue cluster-queue (2 requested, 1 of 9 unused)",
        );
        let Some(Decision::Admit(a)) = plan.decisions.get(&("default".into(), "a".into())) else {
            panic!("a is admitted");
        };
        assert_eq!(a.pod_sets.len(), 2);
        assert_eq!(a.pod_sets[1].usage["cpu"], 2000);
        assert_eq!(a.pod_sets[1].flavors["memory"], "default-flavor");
        let counts = &plan.cluster_queues["cluster-queue"];
        assert_eq!((counts.pending, counts.reserving), (1, 2));
        assert_eq!(counts.usage[&("default-flavor".into(), "cpu".into())], 7000);
        assert_eq!(
            plan.local_queues[&("default".into(), "user-queue".into())].pending,
            1
        );

        // Once they hold their quota, nothing more is admitted; when c finishes, b is.
        admit(&mut w, &plan);
        let again = super::plan(&w);
        assert!(admitted(&again).is_empty());
        w.workloads[2].finished = true;
        assert_eq!(admitted(&super::plan(&w)), ["b"]);
    }

    #[test]
    fn strict_fifo_blocks_behind_the_head_and_best_effort_does_not() {
        let mut cq = cluster_queue("cq", &[("default-flavor", "4")]);
        let wls = vec![
            workload("big", "2025-01-01T00:00:00Z", &[("worker", 5, "1")]),
            workload("small", "2025-01-01T00:00:01Z", &[("worker", 1, "1")]),
        ];
        let best_effort = plan(&world(cq.clone(), wls.clone()));
        assert_eq!(admitted(&best_effort), ["small"]);
        cq.strategy = Strategy::StrictFifo;
        let strict = plan(&world(cq, wls));
        assert!(admitted(&strict).is_empty());
        assert!(pending(&strict, "small").contains("default/big ahead of it"));
    }

    #[test]
    fn the_next_flavor_takes_what_the_first_cannot() {
        let cq = cluster_queue("cq", &[("default-flavor", "2"), ("spare", "8")]);
        let wls = vec![workload(
            "w",
            "2025-01-01T00:00:00Z",
            &[("ps", 1, "1"), ("worker", 2, "1")],
        )];
        let plan = plan(&world(cq, wls));
        let Some(Decision::Admit(a)) = plan.decisions.values().next() else {
            panic!("admitted: {plan:?}");
        };
        // The ps takes 1 of default-flavor's 2; the workers' 2 no longer fit there.
        assert_eq!(a.pod_sets[0].flavors["cpu"], "default-flavor");
        assert_eq!(a.pod_sets[1].flavors["cpu"], "spare");
        assert_eq!(
            a.pod_sets[1].flavors["memory"], "spare",
            "one flavor per group"
        );
    }

    #[test]
    fn zero_quota_missing_queues_and_uncovered_resources_keep_workloads_pending() {
        let cq = cluster_queue("cq", &[("default-flavor", "0")]);
        let mut wls = vec![workload("w", "2025-01-01T00:00:00Z", &[("worker", 1, "1")])];
        let plan = plan(&world(cq.clone(), wls.clone()));
        assert!(
            pending(&plan, "w").contains("insufficient quota for cpu in flavor default-flavor")
        );

        wls[0].queue_name = "nowhere".into();
        let plan = super::plan(&world(cq.clone(), wls.clone()));
        assert_eq!(pending(&plan, "w"), "LocalQueue nowhere doesn't exist");

        let mut gpu = workload("g", "2025-01-01T00:00:00Z", &[("worker", 1, "1")]);
        gpu.pod_sets[0]
            .requests
            .insert("nvidia.com/gpu".into(), 1000);
        let plan = super::plan(&world(
            cluster_queue("cq", &[("default-flavor", "9")]),
            vec![gpu],
        ));
        assert_eq!(
            pending(&plan, "g"),
            "couldn't assign flavors to pod set worker: resource nvidia.com/gpu unavailable in ClusterQueue cq"
        );

        let mut w = world(cq, vec![]);
        w.cluster_queues.clear();
        w.workloads = vec![workload("w", "2025-01-01T00:00:00Z", &[("worker", 1, "1")])];
        assert_eq!(
            pending(&super::plan(&w), "w"),
            "ClusterQueue cq doesn't exist"
        );
    }

    #[test]
    fn stop_policies_and_deactivation_evict_or_hold() {
        let cq = cluster_queue("cq", &[("default-flavor", "9")]);
        let mut w = world(
            cq,
            vec![
                workload("old", "2025-01-01T00:00:00Z", &[("worker", 1, "1")]),
                workload("new", "2025-01-01T00:00:01Z", &[("worker", 1, "1")]),
            ],
        );
        let first = plan(&w);
        assert_eq!(admitted(&first), ["new", "old"]);
        admit(&mut w, &first);
        w.workloads.push(workload(
            "later",
            "2025-01-01T00:00:02Z",
            &[("worker", 1, "1")],
        ));

        let stop = |w: &mut World, policy| {
            w.cluster_queues
                .values_mut()
                .for_each(|cq| cq.stop = policy);
        };
        stop(&mut w, StopPolicy::Hold);
        let held = plan(&w);
        assert_eq!(held.decisions.len(), 1, "the admitted stay: {held:?}");
        assert_eq!(pending(&held, "later"), "ClusterQueue cq is inactive");

        stop(&mut w, StopPolicy::HoldAndDrain);
        let drained = plan(&w);
        assert_eq!(
            drained.decisions.get(&("default".into(), "old".into())),
            Some(&Decision::Evict(Eviction::ClusterQueueStopped))
        );
        assert_eq!(drained.cluster_queues["cq"].reserving, 0);

        stop(&mut w, StopPolicy::None);
        w.workloads[0].active = false;
        let deactivated = plan(&w);
        assert_eq!(
            deactivated.decisions.get(&("default".into(), "old".into())),
            Some(&Decision::Evict(Eviction::Deactivated))
        );
        assert_eq!(
            admitted(&deactivated),
            ["later"],
            "old's quota is free in the same pass"
        );
        w.workloads[0].admission = None;
        assert!(
            !plan(&w)
                .decisions
                .contains_key(&("default".into(), "old".into())),
            "not re-admitted while inactive"
        );
    }

    #[test]
    fn flavors_need_nodes_with_their_labels_and_tolerated_taints() {
        let spot = ResourceFlavor::parse(&json!({"metadata": {"name": "spot"}, "spec": {
            "nodeLabels": {"instance-type": "spot"},
            "nodeTaints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
        }}));
        let set = |selector: Value, tolerations: Value| {
            PodSet::parse(&json!({"name": "worker", "template": {"spec": {
                "nodeSelector": selector, "tolerations": tolerations, "containers": [],
            }}}))
        };
        let plain = vec![Labels::new()];
        let labelled = vec![Labels::from([("instance-type".into(), "spot".into())])];
        let tolerating =
            json!([{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
        assert!(
            matches_nodes(&spot, &set(json!({}), tolerating.clone()), &plain)
                .unwrap_err()
                .contains("matches no node")
        );
        assert!(matches_nodes(&spot, &set(json!({}), tolerating.clone()), &labelled).is_ok());
        assert!(
            matches_nodes(
                &spot,
                &set(json!({"instance-type": "od"}), tolerating),
                &labelled
            )
            .unwrap_err()
            .contains("nodeSelector")
        );
        assert!(
            matches_nodes(&spot, &set(json!({}), json!([])), &labelled)
                .unwrap_err()
                .starts_with("untolerated taint")
        );
        assert!(
            matches_nodes(
                &spot,
                &set(json!({}), json!([{"operator": "Exists"}])),
                &labelled
            )
            .is_ok()
        );
    }

    #[test]
    fn namespace_selectors_match_labels_and_expressions() {
        let labels = Labels::from([("team".into(), "a".into())]);
        assert!(selector_matches(None, &labels));
        assert!(selector_matches(Some(&json!({})), &labels));
        assert!(selector_matches(
            Some(&json!({"matchLabels": {"team": "a"}})),
            &labels
        ));
        assert!(!selector_matches(
            Some(&json!({"matchLabels": {"team": "b"}})),
            &labels
        ));
        let expr = |op: &str| json!({"matchExpressions": [{"key": "team", "operator": op, "values": ["a"]}]});
        assert!(selector_matches(Some(&expr("In")), &labels));
        assert!(!selector_matches(Some(&expr("NotIn")), &labels));
        assert!(selector_matches(Some(&expr("Exists")), &labels));
        assert!(!selector_matches(Some(&expr("DoesNotExist")), &labels));
    }
}
