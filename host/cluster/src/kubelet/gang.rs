//! Gang scheduling decisions: which scheduler serves a pod, whether a group's pods may be bound
//! (all together or none), Volcano's admission of a group to `Inqueue`, the PodGroup status
//! each scheduler keeps, and the `PodScheduled=False` messages in the schedulers' own words.
//!
//! Two families are simulated, chosen by the gang scheduler's name as the operator chooses the
//! PodGroup kind: `volcano` (pods annotated `scheduling.k8s.io/group-name`, groups admitted
//! by their `minResources` before any member is placed) and every other name as the
//! scheduler-plugins coscheduling plugin (pods labelled `scheduling.x-k8s.io/pod-group`, groups
//! rejected at pre-filter while members are missing and at permit after
//! `scheduleTimeoutSeconds`). Pure and clock-free: callers pass what they observed and the
//! node views [`schedule`](super::schedule) works with.

use std::collections::BTreeMap;
use std::time::Duration;

use tfjob_policy_logic::duration::format_go;

use serde_json::{Map, Value, json};

use super::schedule::{self, NodeView, Resources};
use crate::storage::crd::podgroups::VOLCANO_SCHEDULER;

/// The annotation naming a pod's Volcano PodGroup.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";

/// The label naming a pod's scheduler-plugins PodGroup.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// The scheduler of pods that name none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// How long coscheduled pods wait at permit when their group sets no `scheduleTimeoutSeconds`:
/// the plugin's default `permitWaitingTimeSeconds`.
pub const DEFAULT_SCHEDULE_TIMEOUT: Duration = Duration::from_secs(60);

/// The coscheduling plugin's name, as rejections cite it.
const COSCHEDULING_PLUGIN: &str = "Coscheduling";

/// Which gang scheduler is simulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Volcano: `scheduling.volcano.sh/v1beta1` PodGroups.
    Volcano,
    /// The scheduler-plugins coscheduling plugin: `scheduling.x-k8s.io/v1alpha1` PodGroups.
    Coscheduling,
}

impl Family {
    /// The family a gang scheduler name stands for.
    pub fn of(scheduler: &str) -> Family {
        if scheduler == VOLCANO_SCHEDULER {
            Family::Volcano
        } else {
            Family::Coscheduling
        }
    }

    /// The PodGroup a pod names, by the family's annotation or label.
    pub fn group_of(self, pod: &Value) -> Option<String> {
        let field = match self {
            Family::Volcano => "annotations",
            Family::Coscheduling => "labels",
        };
        let key = match self {
            Family::Volcano => GROUP_NAME_ANNOTATION,
            Family::Coscheduling => POD_GROUP_LABEL,
        };
        pod.pointer(&format!("/metadata/{field}"))?
            .get(key)?
            .as_str()
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
    }
}

/// Who schedules a pod on the simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheduling {
    /// One by one, as the default scheduler does: pods of `default-scheduler` (or none), and
    /// pods of the gang scheduler that name no group (Volcano gives those a group of one).
    Alone,
    /// By the gang scheduler, with the other members of the named group (same namespace).
    Group(String),
    /// By nobody: no scheduler on the cluster has the pod's `schedulerName`. A real cluster
    /// leaves such a pod `Pending` without any condition.
    Unserved,
}

/// Who schedules `pod`, given the gang scheduler the cluster runs (if any).
pub fn scheduling_of(pod: &Value, gang: Option<(&str, Family)>) -> Scheduling {
    let name = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_SCHEDULER);
    if name == DEFAULT_SCHEDULER {
        return Scheduling::Alone;
    }
    match gang {
        Some((gang, family)) if gang == name => match family.group_of(pod) {
            Some(group) => Scheduling::Group(group),
            None => Scheduling::Alone,
        },
        _ => Scheduling::Unserved,
    }
}

/// What a PodGroup asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupSpec {
    /// `spec.minMember`, at least 1 (an unset or zero minimum gangs nothing).
    pub min_member: u32,
    /// `spec.minResources`, in thousandths.
    pub min_resources: Resources,
    /// `spec.scheduleTimeoutSeconds` (coscheduling only).
    pub timeout: Option<Duration>,
}

impl GroupSpec {
    /// The spec of a PodGroup object; malformed quantities are left out.
    pub fn of(group: &Value) -> GroupSpec {
        let spec = group.get("spec");
        let min_member = spec
            .and_then(|s| s.get("minMember"))
            .and_then(Value::as_u64)
            .map_or(1, |m| u32::try_from(m).unwrap_or(u32::MAX).max(1));
        let min_resources = spec
            .and_then(|s| s.get("minResources"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(name, q)| Some((name.clone(), quantity(q)?)))
                    .collect()
            })
            .unwrap_or_default();
        let timeout = spec
            .and_then(|s| s.get("scheduleTimeoutSeconds"))
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        GroupSpec {
            min_member,
            min_resources,
            timeout,
        }
    }
}

fn quantity(q: &Value) -> Option<i128> {
    match q {
        Value::String(s) => schedule::parse_quantity(s),
        Value::Number(n) => n.as_u64().map(|n| i128::from(n) * 1000),
        _ => None,
    }
}

/// The members of a group by where they stand (deleted pods are not members).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// Not bound to a node yet.
    pub pending: u32,
    /// Bound, containers not running yet.
    pub bound: u32,
    pub running: u32,
    pub succeeded: u32,
    pub failed: u32,
}

impl Members {
    /// Counts a member by its pod's phase and whether it is bound.
    pub fn add(&mut self, phase: &str, bound: bool) {
        match phase {
            "Succeeded" => self.succeeded += 1,
            "Failed" => self.failed += 1,
            "Running" => self.running += 1,
            _ if bound => self.bound += 1,
            _ => self.pending += 1,
        }
    }

    pub fn total(self) -> u32 {
        self.pending + self.bound + self.running + self.succeeded + self.failed
    }

    /// Members that count as placed towards `minMember`: bound and unfinished, and for Volcano
    /// also succeeded (its "ready" tasks); the coscheduling plugin only sees unfinished pods.
    pub fn placed(self, family: Family) -> u32 {
        let done = match family {
            Family::Volcano => self.succeeded,
            Family::Coscheduling => 0,
        };
        self.bound + self.running + done
    }

    /// Members that can make up the gang: the placed ones and those waiting for a node.
    pub fn present(self, family: Family) -> u32 {
        self.placed(family) + self.pending
    }
}

/// Why none of a group's waiting pods is bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// No PodGroup of that name exists.
    GroupMissing,
    /// A Volcano group not admitted yet: its `minResources` do not fit the idle resources.
    NotInqueue,
    /// Fewer members exist than `minMember`.
    TooFewPods { present: u32 },
    /// The coscheduling pre-filter check: `minResources` exceed what the nodes have free, by
    /// this much.
    ResourceGap(Resources),
    /// Pod `pod` fits no node once the group's pods before it are placed; `reasons` is
    /// kube-scheduler's `0/N nodes are available: ...` for it.
    NoFit { pod: String, reasons: String },
}

/// What the scheduler does with a group's waiting pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Bind every waiting pod, each to the node at the same index.
    Together(Vec<usize>),
    /// The group already has `minMember` members placed: newcomers (replacements, extra
    /// members) are scheduled one by one, as the default scheduler would.
    Individually,
    /// Bind none of them.
    Wait(Blocked),
}

/// A group as the scheduler sees it in one pass.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    pub family: Family,
    pub spec: &'a GroupSpec,
    /// `status.phase` of the PodGroup.
    pub phase: &'a str,
    pub members: Members,
    /// What the group's bound, unfinished pods request: the coscheduling pre-filter check
    /// counts it as free for the group itself.
    pub own_usage: &'a Resources,
}

/// Whether Volcano lets the scheduler place members of a group in `phase`.
pub fn volcano_admitted(phase: &str) -> bool {
    matches!(phase, "Inqueue" | "Running" | "Unknown" | "Completed")
}

/// Decides for the group's waiting pods (`waiting`, first come first), on `nodes` with the
/// usage of every bound pod already counted.
pub fn decide(group: &Group<'_>, waiting: &[&Value], nodes: &[NodeView]) -> Decision {
    let family = group.family;
    let min = group.spec.min_member;
    if family == Family::Volcano && !volcano_admitted(group.phase) {
        return Decision::Wait(Blocked::NotInqueue);
    }
    if group.members.placed(family) >= min {
        return Decision::Individually;
    }
    let present = group.members.present(family);
    if present < min {
        return Decision::Wait(Blocked::TooFewPods { present });
    }
    if family == Family::Coscheduling && !group.spec.min_resources.is_empty() {
        let mut free = idle(nodes);
        add(&mut free, group.own_usage);
        let gap = shortfall(&group.spec.min_resources, &free);
        if !gap.is_empty() {
            return Decision::Wait(Blocked::ResourceGap(gap));
        }
    }
    match place_together(waiting, nodes) {
        Ok(placement) => Decision::Together(placement),
        Err((i, reasons)) => Decision::Wait(Blocked::NoFit {
            pod: name(waiting[i]).to_owned(),
            reasons,
        }),
    }
}

fn name(pod: &Value) -> &str {
    pod.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Places `pods` one after another on copies of `nodes`, each taking its room before the next
/// is tried: the nodes for all of them, or the index of the first that fits nowhere and
/// kube-scheduler's message for it.
pub fn place_together(pods: &[&Value], nodes: &[NodeView]) -> Result<Vec<usize>, (usize, String)> {
    let mut views = nodes.to_vec();
    let mut placement = Vec::with_capacity(pods.len());
    for (i, pod) in pods.iter().enumerate() {
        let node = schedule::choose_node(pod, &views).map_err(|m| (i, m))?;
        schedule::add_usage(&mut views[node], &schedule::pod_requests(pod));
        placement.push(node);
    }
    Ok(placement)
}

/// The cluster's idle resources: allocatable less the requests of bound pods, over all nodes.
pub fn idle(nodes: &[NodeView]) -> Resources {
    let mut free = Resources::new();
    for node in nodes {
        for (name, amount) in &node.allocatable {
            let used = node.used.get(name).copied().unwrap_or(0);
            *free.entry(name.clone()).or_default() += amount - used;
        }
    }
    free
}

/// `a += b`, per resource.
pub fn add(a: &mut Resources, b: &Resources) {
    for (name, amount) in b {
        *a.entry(name.clone()).or_default() += amount;
    }
}

/// `a -= b`, per resource.
pub fn subtract(a: &mut Resources, b: &Resources) {
    for (name, amount) in b {
        *a.entry(name.clone()).or_default() -= amount;
    }
}

/// How much of `need` `free` lacks, per resource; empty when it fits.
pub fn shortfall(need: &Resources, free: &Resources) -> Resources {
    need.iter()
        .filter_map(|(name, amount)| {
            let lack = amount - free.get(name).copied().unwrap_or(0).max(0);
            (*amount > 0 && lack > 0).then(|| (name.clone(), lack))
        })
        .collect()
}

/// What an admitted (`Inqueue`) Volcano group still holds back for members not bound yet: its
/// `minResources` less what its bound members use. Two groups are thus never admitted on the
/// same idle resources, and a group's own pods do not count twice.
pub fn reservation(min_resources: &Resources, used: &Resources) -> Resources {
    min_resources
        .iter()
        .filter_map(|(name, amount)| {
            let left = amount - used.get(name).copied().unwrap_or(0);
            (left > 0).then(|| (name.clone(), left))
        })
        .collect()
}

/// Volcano's enqueue decision: whether a `Pending` group with `min_resources` fits `free`
/// (idle resources less every admitted group's reservation).
pub fn admits(min_resources: &Resources, free: &Resources) -> bool {
    shortfall(min_resources, free).is_empty()
}

/// The `PodScheduled=False` message of a waiting member `pod` of group `group`
/// (`namespace/name`) on a cluster of `nodes` nodes, in the words of the family's scheduler.
pub fn message(
    family: Family,
    group: &str,
    pod: &str,
    blocked: &Blocked,
    spec: &GroupSpec,
    members: Members,
    nodes: usize,
) -> String {
    match family {
        Family::Volcano => volcano_message(group, blocked, spec.min_member, members),
        Family::Coscheduling => coscheduling_message(group, pod, blocked, spec.min_member, nodes),
    }
}

/// Volcano's gang plugin message (`N/M tasks in gang unschedulable: pod group is not ready,
/// <tasks by status>, <min> minAvailable; Pending: <n> <reason>`), then the origin reason,
/// which names the group.
fn volcano_message(group: &str, blocked: &Blocked, min: u32, members: Members) -> String {
    let unready = min.saturating_sub(members.placed(Family::Volcano));
    let mut histogram: Vec<String> = [
        (members.pending, "Pending"),
        (members.bound, "Bound"),
        (members.running, "Running"),
        (members.succeeded, "Succeeded"),
        (members.failed, "Failed"),
        (min, "minAvailable"),
    ]
    .iter()
    .filter(|(n, label)| *n > 0 || *label == "minAvailable")
    .map(|(n, label)| format!("{n} {label}"))
    .collect();
    // Volcano sorts the "<count> <status>" strings themselves.
    histogram.sort();
    let pending_reason = match blocked {
        Blocked::NoFit { .. } => "Unschedulable",
        _ => "Undetermined",
    };
    let origin = match blocked {
        Blocked::GroupMissing => format!("podgroup {group} not found"),
        Blocked::NotInqueue | Blocked::ResourceGap(_) => format!(
            "podgroup {group} is Pending, not Inqueue: its minResources do not fit the idle resources"
        ),
        Blocked::TooFewPods { present } => format!(
            "podgroup {group}: Not enough valid tasks for gang-scheduling, valid: {present}, min: {min}"
        ),
        Blocked::NoFit { pod, reasons } => format!(
            "podgroup {group}: {pod}: {}",
            reasons.replacen("nodes are available", "nodes are unavailable", 1)
        ),
    };
    format!(
        "{unready}/{} tasks in gang unschedulable: pod group is not ready, {}; Pending: {} {pending_reason}. Origin reason is: {origin}",
        members.total(),
        histogram.join(", "),
        members.pending,
    )
}

/// kube-scheduler's fit error with the coscheduling plugin's pre-filter message, followed by
/// its post-filter rejection of the whole group.
fn coscheduling_message(
    group: &str,
    pod: &str,
    blocked: &Blocked,
    min: u32,
    nodes: usize,
) -> String {
    let rejected = |culprit: &str| {
        format!(
            "PodGroup {group} gets rejected due to Pod {culprit} is unschedulable even after PostFilter."
        )
    };
    match blocked {
        Blocked::GroupMissing => format!("PodGroup {group} not found"),
        Blocked::TooFewPods { present } => format!(
            "0/{nodes} nodes are available: pre-filter pod {pod} cannot find enough sibling pods, current pods number: {present}, minMember of group: {min}. {}",
            rejected(pod)
        ),
        Blocked::ResourceGap(gap) => {
            // Go prints the ResourceList map sorted by key.
            let gap: Vec<String> = gap
                .iter()
                .map(|(name, amount)| format!("{name}:{}", schedule::format_quantity(*amount)))
                .collect();
            format!(
                "0/{nodes} nodes are available: resource gap: map[{}]. {}",
                gap.join(" "),
                rejected(pod)
            )
        }
        // Volcano's admission; the plugin has none.
        Blocked::NotInqueue => rejected(pod),
        Blocked::NoFit {
            pod: culprit,
            reasons,
        } => format!("{reasons} {}", rejected(culprit)),
    }
}

/// The permit plugin's rejection of a pod that waited `timeout` for its siblings.
pub fn timeout_message(timeout: Duration) -> String {
    format!(
        "rejected due to timeout after waiting {} at plugin {COSCHEDULING_PLUGIN}",
        format_go(timeout)
    )
}

fn phase_of(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Sets (or, at zero, removes) a counter: the upstream types omit empty counters.
fn set_counter(status: &mut Map<String, Value>, field: &str, n: u32) {
    if n == 0 {
        status.remove(field);
    } else {
        status.insert(field.into(), json!(n));
    }
}

/// The status Volcano keeps on a PodGroup, from the previous one and its members:
/// `Pending` once seen, `Running` once `minMember` members are placed (bound, running or
/// succeeded), back to `Pending` when they drop below while not `Inqueue`, `Completed` when
/// every member is done and `minMember` succeeded. The move from `Pending` to `Inqueue` is
/// the scheduler's admission ([`admits`]), not made here.
pub fn volcano_status(previous: Option<&Value>, min: u32, members: Members) -> Value {
    let mut status = previous
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let placed = members.placed(Family::Volcano);
    let unfinished = members.pending + members.bound + members.running;
    let phase = match phase_of(previous) {
        "" => "Pending",
        _ if members.total() > 0 && unfinished == 0 && members.succeeded >= min => "Completed",
        _ if placed >= min => "Running",
        "Inqueue" => "Inqueue",
        "Completed" if unfinished == 0 => "Completed",
        _ => "Pending",
    };
    status.insert("phase".into(), json!(phase));
    set_counter(&mut status, "running", members.running);
    set_counter(&mut status, "succeeded", members.succeeded);
    set_counter(&mut status, "failed", members.failed);
    Value::Object(status)
}

/// The status the scheduler-plugins PodGroup controller keeps, from the previous one and the
/// members: `Pending` once seen, `PreScheduling` once `minMember` pods exist, `Scheduling`
/// when the first is bound, `Scheduled` at `minMember` bound, `Running` when `minMember` run
/// or succeeded, `Failed` when one failed and the rest of `minMember` ran, `Finished` when
/// `minMember` succeeded (both final). `occupied_by` names the members' owners; `now` stamps
/// `scheduleStartTime` when scheduling starts.
pub fn coscheduling_status(
    previous: Option<&Value>,
    min: u32,
    members: Members,
    occupied_by: Option<&str>,
    now: &str,
) -> Value {
    let mut status = previous
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut phase = phase_of(previous).to_owned();
    let total = members.total();
    match phase.as_str() {
        "Finished" | "Failed" => return Value::Object(status),
        "" => phase = "Pending".into(),
        "Pending" => {
            if total >= min {
                phase = "PreScheduling".into();
                if let Some(owners) = occupied_by.filter(|o| !o.is_empty()) {
                    status.insert("occupiedBy".into(), json!(owners));
                }
            }
        }
        _ => {
            let scheduled = members.bound + members.running + members.succeeded + members.failed;
            set_counter(&mut status, "scheduled", scheduled);
            set_counter(&mut status, "running", members.running);
            set_counter(&mut status, "succeeded", members.succeeded);
            set_counter(&mut status, "failed", members.failed);
            if total == 0 {
                phase = "Pending".into();
            } else {
                if phase == "PreScheduling" && scheduled > 0 {
                    phase = "Scheduling".into();
                    status
                        .entry("scheduleStartTime")
                        .or_insert_with(|| json!(now));
                }
                if phase == "Scheduling" && scheduled >= min {
                    phase = "Scheduled".into();
                }
                if phase == "Scheduled" && members.running + members.succeeded >= min {
                    phase = "Running".into();
                }
                if members.failed > 0 && members.failed + members.running + members.succeeded >= min
                {
                    phase = "Failed".into();
                }
                if members.succeeded >= min {
                    phase = "Finished".into();
                }
            }
        }
    }
    status.insert("phase".into(), json!(phase));
    Value::Object(status)
}

/// The owners of the given pods as the coscheduling controller records them in `occupiedBy`:
/// `namespace/owner`, sorted, comma-separated.
pub fn occupied_by<'a>(pods: impl IntoIterator<Item = &'a Value>) -> String {
    let mut owners: BTreeMap<String, ()> = BTreeMap::new();
    for pod in pods {
        let ns = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for r in pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(owner) = r.get("name").and_then(Value::as_str) {
                owners.insert(format!("{ns}/{owner}"), ());
            }
        }
    }
    owners.into_keys().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::schedule::GPU;

    fn node(name: &str, gpus: i128) -> NodeView {
        NodeView {
            name: name.into(),
            labels: BTreeMap::new(),
            allocatable: Resources::from([
                ("cpu".into(), 8000),
                (GPU.into(), gpus * 1000),
                ("pods".into(), 110_000),
            ]),
            used: Resources::new(),
            pods: 0,
        }
    }

    fn gpu_pod(name: &str, gpus: u32) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "tensorflow", "resources": {"limits": {GPU: gpus}}}]}})
    }

    fn members(pending: u32, bound: u32, running: u32) -> Members {
        Members {
            pending,
            bound,
            running,
            ..Members::default()
        }
    }

    fn spec(min: u32) -> GroupSpec {
        GroupSpec {
            min_member: min,
            ..GroupSpec::default()
        }
    }

    fn group<'a>(family: Family, spec: &'a GroupSpec, phase: &'a str, m: Members) -> Group<'a> {
        static NONE: std::sync::LazyLock<Resources> = std::sync::LazyLock::new(Resources::new);
        Group {
            family,
            spec,
            phase,
            members: m,
            own_usage: &NONE,
        }
    }

    #[test]
    fn the_scheduler_name_decides_who_schedules() {
        let pod = |scheduler: Option<&str>| {
            json!({"metadata": {"name": "p", "annotations": {GROUP_NAME_ANNOTATION: "job"},
                "labels": {POD_GROUP_LABEL: "job2"}}, "spec": {"schedulerName": scheduler}})
        };
        let volcano = Some(("volcano", Family::Volcano));
        let plugins = Some(("scheduler-plugins-scheduler", Family::Coscheduling));
        assert_eq!(scheduling_of(&pod(None), volcano), Scheduling::Alone);
        assert_eq!(
            scheduling_of(&pod(Some("default-scheduler")), None),
            Scheduling::Alone
        );
        assert_eq!(
            scheduling_of(&pod(Some("volcano")), volcano),
            Scheduling::Group("job".into())
        );
        assert_eq!(
            scheduling_of(&pod(Some("scheduler-plugins-scheduler")), plugins),
            Scheduling::Group("job2".into())
        );
        assert_eq!(
            scheduling_of(&pod(Some("volcano")), None),
            Scheduling::Unserved
        );
        assert_eq!(
            scheduling_of(&pod(Some("volcano")), plugins),
            Scheduling::Unserved
        );
        assert_eq!(
            scheduling_of(&pod(Some("kueue")), volcano),
            Scheduling::Unserved
        );
        let ungrouped = json!({"metadata": {"name": "p"}, "spec": {"schedulerName": "volcano"}});
        assert_eq!(scheduling_of(&ungrouped, volcano), Scheduling::Alone);
        assert_eq!(Family::of("volcano"), Family::Volcano);
        assert_eq!(Family::of("anything-else"), Family::Coscheduling);
    }

    #[test]
    fn specs_parse_quantities_and_default_the_minimum() {
        let s = GroupSpec::of(&json!({"spec": {"minMember": 3,
            "minResources": {"cpu": "1500m", GPU: 4, "memory": "bad"}, "scheduleTimeoutSeconds": 10}}));
        assert_eq!(s.min_member, 3);
        assert_eq!(
            s.min_resources,
            Resources::from([("cpu".into(), 1500), (GPU.into(), 4000)])
        );
        assert_eq!(s.timeout, Some(Duration::from_secs(10)));
        assert_eq!(GroupSpec::of(&json!({})).min_member, 1);
        assert_eq!(
            GroupSpec::of(&json!({"spec": {"minMember": 0}})).min_member,
            1
        );
    }

    #[test]
    fn a_group_binds_only_when_all_its_waiting_pods_fit_at_once() {
        let nodes = vec![node("a", 2), node("b", 2)];
        let pods: Vec<Value> = (0..3).map(|i| gpu_pod(&format!("w-{i}"), 1)).collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let s = spec(3);
        // Three one-GPU pods on two two-GPU nodes: all placed, spread by load.
        let d = decide(
            &group(Family::Coscheduling, &s, "PreScheduling", members(3, 0, 0)),
            &refs,
            &nodes,
        );
        assert_eq!(d, Decision::Together(vec![0, 1, 0]));
        // Five do not fit four GPUs: none is bound, and the fifth is the culprit.
        let pods: Vec<Value> = (0..5).map(|i| gpu_pod(&format!("w-{i}"), 1)).collect();
        let refs: Vec<&Value> = pods.iter().collect();
        let s = spec(5);
        assert_eq!(
            decide(
                &group(Family::Coscheduling, &s, "PreScheduling", members(5, 0, 0)),
                &refs,
                &nodes
            ),
            Decision::Wait(Blocked::NoFit {
                pod: "w-4".into(),
                reasons: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into()
            })
        );
    }

    #[test]
    fn too_few_members_wait_and_a_placed_gang_takes_newcomers_one_by_one() {
        let nodes = vec![node("a", 8)];
        let pods = [gpu_pod("w-0", 1), gpu_pod("w-1", 1)];
        let refs: Vec<&Value> = pods.iter().collect();
        let s = spec(3);
        assert_eq!(
            decide(
                &group(Family::Coscheduling, &s, "Pending", members(2, 0, 0)),
                &refs,
                &nodes
            ),
            Decision::Wait(Blocked::TooFewPods { present: 2 })
        );
        // Two waiting plus one already bound make three.
        assert_eq!(
            decide(
                &group(Family::Coscheduling, &s, "Scheduling", members(2, 1, 0)),
                &refs,
                &nodes
            ),
            Decision::Together(vec![0, 0])
        );
        assert_eq!(
            decide(
                &group(Family::Coscheduling, &s, "Running", members(1, 1, 2)),
                &refs[..1],
                &nodes
            ),
            Decision::Individually
        );
        // Succeeded members count for Volcano only.
        let done = Members {
            pending: 1,
            succeeded: 3,
            ..Members::default()
        };
        assert_eq!(
            decide(
                &group(Family::Volcano, &s, "Running", done),
                &refs[..1],
                &nodes
            ),
            Decision::Individually
        );
        assert_eq!(
            decide(
                &group(Family::Coscheduling, &s, "Running", done),
                &refs[..1],
                &nodes
            ),
            Decision::Wait(Blocked::TooFewPods { present: 1 })
        );
    }

    #[test]
    fn volcano_places_nothing_before_the_group_is_inqueue() {
        let nodes = vec![node("a", 8)];
        let pods = [gpu_pod("w-0", 1)];
        let refs: Vec<&Value> = pods.iter().collect();
        let s = spec(1);
        for phase in ["", "Pending"] {
            assert_eq!(
                decide(
                    &group(Family::Volcano, &s, phase, members(1, 0, 0)),
                    &refs,
                    &nodes
                ),
                Decision::Wait(Blocked::NotInqueue)
            );
        }
        assert_eq!(
            decide(
                &group(Family::Volcano, &s, "Inqueue", members(1, 0, 0)),
                &refs,
                &nodes
            ),
            Decision::Together(vec![0])
        );
    }

    #[test]
    fn coscheduling_checks_min_resources_against_free_capacity() {
        let mut busy = node("a", 4);
        busy.used.insert(GPU.into(), 3000);
        let nodes = vec![busy, node("b", 2)];
        let pods = [gpu_pod("w-0", 1)];
        let refs: Vec<&Value> = pods.iter().collect();
        let s = GroupSpec {
            min_member: 1,
            min_resources: Resources::from([(GPU.into(), 4000)]),
            timeout: None,
        };
        let d = decide(
            &group(Family::Coscheduling, &s, "PreScheduling", members(1, 0, 0)),
            &refs,
            &nodes,
        );
        assert_eq!(
            d,
            Decision::Wait(Blocked::ResourceGap(Resources::from([(GPU.into(), 1000)])))
        );
        // What the group's own bound pods use counts as free for it.
        let own = Resources::from([(GPU.into(), 1000)]);
        let g = Group {
            own_usage: &own,
            ..group(Family::Coscheduling, &s, "PreScheduling", members(1, 0, 0))
        };
        assert_eq!(decide(&g, &refs, &nodes), Decision::Together(vec![0]));
    }

    #[test]
    fn volcano_admission_keeps_reservations_apart() {
        let nodes = vec![node("a", 2), node("b", 2)];
        let need = Resources::from([(GPU.into(), 4000)]);
        let mut free = idle(&nodes);
        assert!(admits(&need, &free));
        // The first group is admitted and reserves its minResources...
        subtract(&mut free, &reservation(&need, &Resources::new()));
        // ...so the second, asking the same, is not.
        assert!(!admits(&need, &free));
        // Once the first group's pods are bound, their usage replaces the reservation.
        let used = Resources::from([(GPU.into(), 4000)]);
        assert!(reservation(&need, &used).is_empty());
        assert_eq!(
            reservation(&need, &Resources::from([(GPU.into(), 1000)])),
            Resources::from([(GPU.into(), 3000)])
        );
        // No minResources: admitted at once, as Volcano does.
        assert!(admits(&Resources::new(), &Resources::new()));
        assert_eq!(
            shortfall(&need, &Resources::from([(GPU.into(), -2000)])),
            need,
            "overcommitted resources lack all of it"
        );
    }

    #[test]
    fn volcano_messages_follow_its_gang_plugin() {
        let s = spec(3);
        let m = message(
            Family::Volcano,
            "ml/mnist",
            "mnist-worker-0",
            &Blocked::TooFewPods { present: 2 },
            &s,
            members(2, 0, 0),
            2,
        );
        assert_eq!(
            m,
            "3/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 3 minAvailable; \
             Pending: 2 Undetermined. Origin reason is: podgroup ml/mnist: Not enough valid tasks \
             for gang-scheduling, valid: 2, min: 3"
        );
        let m = message(
            Family::Volcano,
            "ml/mnist",
            "mnist-worker-0",
            &Blocked::NoFit {
                pod: "mnist-worker-2".into(),
                reasons: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into(),
            },
            &s,
            members(3, 0, 0),
            2,
        );
        assert_eq!(
            m,
            "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; \
             Pending: 3 Unschedulable. Origin reason is: podgroup ml/mnist: mnist-worker-2: \
             0/2 nodes are unavailable: 2 Insufficient nvidia.com/gpu."
        );
        let m = message(
            Family::Volcano,
            "ml/mnist",
            "p",
            &Blocked::NotInqueue,
            &s,
            members(3, 0, 0),
            2,
        );
        assert!(
            m.starts_with("3/3 tasks in gang unschedulable: pod group is not ready"),
            "{m}"
        );
        assert!(m.ends_with("podgroup ml/mnist is Pending, not Inqueue: its minResources do not fit the idle resources"), "{m}");
    }

    #[test]
    fn coscheduling_messages_follow_kube_scheduler_and_the_plugin() {
        let s = spec(3);
        let m = message(
            Family::Coscheduling,
            "ml/mnist",
            "mnist-worker-0",
            &Blocked::TooFewPods { present: 2 },
            &s,
            members(2, 0, 0),
            2,
        );
        assert_eq!(
            m,
            "0/2 nodes are available: pre-filter pod mnist-worker-0 cannot find enough sibling \
             pods, current pods number: 2, minMember of group: 3. PodGroup ml/mnist gets rejected \
             due to Pod mnist-worker-0 is unschedulable even after PostFilter."
        );
        let m = message(
            Family::Coscheduling,
            "ml/mnist",
            "mnist-worker-0",
            &Blocked::NoFit {
                pod: "mnist-worker-2".into(),
                reasons: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into(),
            },
            &s,
            members(3, 0, 0),
            2,
        );
        assert_eq!(
            m,
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. PodGroup ml/mnist gets \
             rejected due to Pod mnist-worker-2 is unschedulable even after PostFilter."
        );
        let gap = Blocked::ResourceGap(Resources::from([(GPU.into(), 2000), ("cpu".into(), 500)]));
        let m = message(
            Family::Coscheduling,
            "ml/g",
            "p",
            &gap,
            &s,
            members(3, 0, 0),
            1,
        );
        assert!(
            m.starts_with("0/1 nodes are available: resource gap: map[cpu:500m nvidia.com/gpu:2]. PodGroup ml/g"),
            "{m}"
        );
        assert_eq!(
            message(
                Family::Coscheduling,
                "ml/g",
                "p",
                &Blocked::GroupMissing,
                &s,
                members(1, 0, 0),
                1
            ),
            "PodGroup ml/g not found"
        );
        assert_eq!(
            timeout_message(Duration::from_secs(90)),
            "rejected due to timeout after waiting 1m30s at plugin Coscheduling"
        );
    }

    #[test]
    fn durations_print_as_go_does() {
        let d = |ms: u64| format_go(Duration::from_millis(ms));
        assert_eq!(d(0), "0s");
        assert_eq!(d(500), "500ms");
        assert_eq!(d(10_000), "10s");
        assert_eq!(d(1_500), "1.5s");
        assert_eq!(d(60_000), "1m0s");
        assert_eq!(d(3_600_000), "1h0m0s");
        assert_eq!(d(3_723_250), "1h2m3.25s");
    }

    #[test]
    fn volcano_phases_follow_the_members() {
        let s = |phase: &str| json!({"phase": phase});
        let phase = |v: Value| v["phase"].as_str().unwrap().to_owned();
        assert_eq!(
            phase(volcano_status(None, 2, Members::default())),
            "Pending"
        );
        assert_eq!(
            phase(volcano_status(Some(&s("Pending")), 2, members(2, 0, 0))),
            "Pending"
        );
        assert_eq!(
            phase(volcano_status(Some(&s("Inqueue")), 2, members(1, 1, 0))),
            "Inqueue"
        );
        let running = volcano_status(Some(&s("Inqueue")), 2, members(0, 1, 1));
        assert_eq!(phase(running.clone()), "Running");
        assert_eq!(running["running"], 1);
        assert!(
            running.get("failed").is_none(),
            "empty counters are omitted"
        );
        // Below minMember again while not Inqueue: back to Pending, to be admitted anew.
        assert_eq!(
            phase(volcano_status(Some(&s("Running")), 2, members(1, 0, 1))),
            "Pending"
        );
        let done = Members {
            succeeded: 2,
            ..Members::default()
        };
        let completed = volcano_status(Some(&s("Running")), 2, done);
        assert_eq!(phase(completed.clone()), "Completed");
        assert_eq!(completed["succeeded"], 2);
    }

    #[test]
    fn coscheduling_phases_follow_the_controller() {
        let now = "2026-01-01T00:00:00Z";
        let step =
            |prev: Option<&Value>, m: Members| coscheduling_status(prev, 2, m, Some("ml/job"), now);
        let pending = step(None, Members::default());
        assert_eq!(pending["phase"], "Pending");
        assert_eq!(step(Some(&pending), members(1, 0, 0))["phase"], "Pending");
        let pre = step(Some(&pending), members(2, 0, 0));
        assert_eq!(pre["phase"], "PreScheduling");
        assert_eq!(pre["occupiedBy"], "ml/job");
        let scheduling = step(Some(&pre), members(1, 1, 0));
        assert_eq!(scheduling["phase"], "Scheduling");
        assert_eq!(scheduling["scheduleStartTime"], now);
        assert_eq!(
            step(Some(&scheduling), members(0, 2, 0))["phase"],
            "Scheduled"
        );
        let scheduled = step(Some(&scheduling), members(0, 2, 0));
        let running = step(Some(&scheduled), members(0, 1, 1));
        assert_eq!(running["phase"], "Scheduled", "one of two runs");
        let running = step(Some(&scheduled), members(0, 0, 2));
        assert_eq!(running["phase"], "Running");
        assert_eq!(running["scheduled"], 2);
        let failed = step(
            Some(&running),
            Members {
                running: 1,
                failed: 1,
                ..Members::default()
            },
        );
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(
            step(Some(&failed), members(0, 0, 2))["phase"],
            "Failed",
            "final"
        );
        let finished = step(
            Some(&running),
            Members {
                succeeded: 2,
                ..Members::default()
            },
        );
        assert_eq!(finished["phase"], "Finished");
        assert_eq!(step(Some(&running), Members::default())["phase"], "Pending");
    }

    #[test]
    fn owners_are_listed_once_sorted() {
        let pod = |owner: &str| json!({"metadata": {"namespace": "ml", "ownerReferences": [{"name": owner}]}});
        let pods = [pod("b"), pod("a"), pod("b")];
        assert_eq!(occupied_by(&pods), "ml/a,ml/b");
    }
}
