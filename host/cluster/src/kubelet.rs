//! A simulated scheduler and kubelet working directly on the [`Store`].
//!
//! With no container runtime on the development and CI machines, pods created by the operator
//! would stay without status forever, and every test would have to play kubelet by hand. This
//! module does it instead: it registers simulated nodes (`sim-node-<i>` with cpu, memory and
//! `nvidia.com/gpu`), binds pending pods to a node they fit on (or reports them `Unschedulable`
//! with kube-scheduler's message, retrying when resources free up), and moves bound pods
//! through realistic statuses: containers created, running, terminated, restarted in place
//! under `OnFailure`/`Always`. What each pod does is scripted by `sim.tfjob.dev/*` annotations
//! ([`script`]). Containers print a start line, the lines of their `sim.tfjob.dev/log` script
//! ([`log_script`]) and an exit line into the store's [`PodLogs`](crate::kubelet::logs::PodLogs).
//!
//! The pure parts (annotation parsing, scheduling arithmetic, status rendering) live in the
//! submodules; this file is the event loop: a watch on pods, one timer per pod, and writes
//! through the store's status subresource. All per-pod state is keyed by uid, so a deleted or
//! recreated pod takes its timer with it.
//!
//! Capacity can grow while it runs: a Node object created through the API with a
//! `status.allocatable` is counted by the scheduler (and its pods run) like a simulated one.
//! With [`KubeletConfig::gang_scheduler`] set, it also stands in for that gang scheduler
//! (Volcano or the scheduler-plugins coscheduling plugin, [`gang`]): it serves the scheduler's
//! PodGroup CRD, keeps the groups' status, and binds a group's pods all together or not at all.
//! Pods naming a scheduler the cluster does not run stay `Pending` untouched.

pub mod gang;
pub mod log_script;
pub mod logs;
pub mod schedule;
pub mod script;
pub mod status;
pub mod usage;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::storage::crd::podgroups;
use crate::storage::events::{self, Note};
use crate::storage::store::{EventType, Part, Patch, ResourceType, Store, WatchEvent};
use gang::{Decision, Family, GroupSpec, Members, Scheduling};
use log_script::{LogEvent, LogScript};
use schedule::{GPU, NodeView, Resources};
use script::{PendingReason, Script};
use status::{Ending, PodSim};
use usage::{GroupKey, Share, Usage};

/// Who the simulation's writes and events come from.
pub const COMPONENT: &str = "sim-kubelet";

/// The message of pods scripted to be `Unschedulable`, in kube-scheduler's words.
fn scripted_unschedulable(nodes: usize) -> String {
    format!(
        "0/{nodes} nodes are available: {nodes} node(s) had untolerated taint {{sim.tfjob.dev/unschedulable: }}."
    )
}

/// The shortest timer: a run of `0s` under `Always` must not spin the loop.
const MIN_TIMER: Duration = Duration::from_millis(10);

/// The simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletConfig {
    /// How many nodes (`sim-node-0` ...).
    pub nodes: usize,
    /// Allocatable cpu of each node, as a quantity (`8`, `7500m`).
    pub cpu: String,
    /// Allocatable memory of each node, as a quantity (`32Gi`).
    pub memory: String,
    /// `nvidia.com/gpu` of each node.
    pub gpus_per_node: u32,
    /// How long containers run when no `sim.tfjob.dev/duration` says otherwise.
    pub default_duration: Duration,
    /// How long containers stay `ContainerCreating` after binding.
    pub startup: Duration,
    /// The gang scheduler simulated besides `default-scheduler`: pods whose `schedulerName`
    /// is this are scheduled by PodGroup. `volcano` simulates Volcano
    /// (`scheduling.volcano.sh/v1beta1`), any other name the scheduler-plugins coscheduling
    /// plugin (`scheduling.x-k8s.io/v1alpha1`); that PodGroup CRD is served while it is set.
    /// `None` (the default): no gang scheduler, and pods naming one stay `Pending`.
    pub gang_scheduler: Option<String>,
}

impl Default for KubeletConfig {
    fn default() -> KubeletConfig {
        KubeletConfig {
            nodes: 2,
            cpu: "8".into(),
            memory: "32Gi".into(),
            gpus_per_node: 2,
            default_duration: Duration::from_secs(3),
            startup: Duration::from_millis(100),
            gang_scheduler: None,
        }
    }
}

/// Runs the simulation in the background until the handle is aborted. All its state and
/// timers live in the task, so aborting leaves nothing behind; [`run`] takes a shutdown signal
/// instead.
pub fn spawn(store: Arc<Store>, config: KubeletConfig) -> tokio::task::JoinHandle<()> {
    // Before the task starts, so a client creating PodGroups right after finds them served.
    if let Err(e) = install_gang_crd(&store, &config) {
        tracing::error!(error = %e, "cannot serve the PodGroup CRD");
    }
    tokio::spawn(run(store, config, std::future::pending()))
}

/// The gang scheduler of the configuration, if one is set (`default-scheduler` is not one).
fn gang_scheduler(config: &KubeletConfig) -> Option<&str> {
    config
        .gang_scheduler
        .as_deref()
        .filter(|n| !n.is_empty() && *n != gang::DEFAULT_SCHEDULER)
}

/// Serves the PodGroup CRD of the configured gang scheduler, as installing that scheduler
/// does on a real cluster: stored (so kubectl and persistence see it) and Established. Nothing
/// happens without a gang scheduler or when the CRD is served already.
pub fn install_gang_crd(store: &Store, config: &KubeletConfig) -> Result<(), ApiError> {
    let Some(name) = gang_scheduler(config) else {
        return Ok(());
    };
    let crd = podgroups::crd_for(name);
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    if store.resource(group, podgroups::PLURAL).is_some() {
        return Ok(());
    }
    crate::storage::crd::install(store, crd).map(|_| ())
}

/// Runs the simulation until `shutdown` resolves.
pub async fn run(store: Arc<Store>, config: KubeletConfig, shutdown: impl Future<Output = ()>) {
    // However the loop ends (shutdown, or the task aborted), followers of a container's log
    // must not wait for lines that will never come: the server would hold their requests open.
    struct CloseLogs(Arc<Store>);
    impl Drop for CloseLogs {
        fn drop(&mut self) {
            self.0.logs().close_all();
        }
    }
    let _close_logs = CloseLogs(Arc::clone(&store));
    if let Err(e) = install_gang_crd(&store, &config) {
        tracing::error!(error = %e, "cannot serve the PodGroup CRD");
    }
    let Some(mut k) = Kubelet::new(store, config) else {
        tracing::error!("the store serves no pods or nodes; the simulated kubelet stops");
        return;
    };
    k.register_nodes();
    let mut follow = k.resync();
    tokio::pin!(shutdown);
    loop {
        k.sync_groups();
        k.schedule();
        let deadline = k.next_deadline();
        let (kind, event) = tokio::select! {
            () = &mut shutdown => break,
            event = follow.pods.rx.recv() => (Followed::Pods, event),
            event = follow.nodes.rx.recv() => (Followed::Nodes, event),
            event = next_group_event(&mut follow.groups) => (Followed::Groups, event),
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                k.fire(Instant::now());
                continue;
            }
        };
        match k.deliver(&mut follow, kind, event) {
            Flow::Going => {}
            Flow::Relist => follow = k.resync(),
            Flow::Closed => break,
        }
    }
}

/// The types the kubelet follows, each with a watch of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Followed {
    Pods,
    Nodes,
    /// The gang scheduler's PodGroups.
    Groups,
}

/// One followed type's watch, and the last of its changes applied: where a watch that fell
/// behind goes on from the type's history.
struct Feed {
    resource: String,
    rx: tokio::sync::broadcast::Receiver<WatchEvent>,
    seen: u64,
}

/// The kubelet's watches: of pods, of nodes, and of PodGroups when a gang scheduler is
/// simulated.
struct Follow {
    pods: Feed,
    nodes: Feed,
    groups: Option<Feed>,
}

impl Follow {
    fn feed(&mut self, kind: Followed) -> Option<&mut Feed> {
        match kind {
            Followed::Pods => Some(&mut self.pods),
            Followed::Nodes => Some(&mut self.nodes),
            Followed::Groups => self.groups.as_mut(),
        }
    }
}

/// What the loop does after a change was delivered.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Going,
    /// A watch fell behind further than its type's history reaches: list everything again.
    Relist,
    /// The store is gone.
    Closed,
}

/// The next PodGroup change, or never without a gang scheduler.
async fn next_group_event(groups: &mut Option<Feed>) -> Result<WatchEvent, RecvError> {
    match groups {
        Some(feed) => feed.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the next timer of a bound pod does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Containers created: start them.
    Start,
    /// The run is over: terminate (and maybe restart) the containers.
    Finish,
}

#[derive(Debug)]
enum Stage {
    /// Waiting for the scheduler.
    Unscheduled,
    /// Scripted never to be scheduled.
    NeverScheduled,
    /// On one of our nodes.
    Bound {
        sim: Box<PodSim>,
        timer: Option<(Instant, Step)>,
    },
    /// Finished, deleting, or on a node that is not ours: nothing more to do.
    Done,
}

/// The replica a pod runs, for counting runs across restarts and recreations.
type RunKey = (String, String, String, String);

#[derive(Debug)]
struct Tracked {
    namespace: String,
    name: String,
    /// Arrival order, for first-come-first-served scheduling.
    seq: u64,
    replica: RunKey,
    script: Script,
    /// The script of the current run (clean once past `fail-times`).
    run: Script,
    stage: Stage,
    /// Who schedules it.
    scheduling: Scheduling,
    /// `status.phase` as last seen, for its group's counters.
    phase: String,
    /// Bound to a node, as last seen.
    bound: bool,
    /// Being deleted: no longer a member of its group.
    deleting: bool,
    /// What the containers print.
    log: LogPlan,
}

/// Whether a scheduling pass should try to place `t`: unscheduled, and scheduled here.
fn waits_for_a_node(t: &Tracked) -> bool {
    matches!(t.stage, Stage::Unscheduled) && t.scheduling != Scheduling::Unserved
}

impl Tracked {
    /// The pod's group, namespace first.
    fn group(&self) -> Option<GroupKey> {
        match &self.scheduling {
            Scheduling::Group(g) => Some((self.namespace.clone(), g.clone())),
            _ => None,
        }
    }
}

/// The simulated gang scheduler: what it knows of PodGroups and their members.
struct Gang {
    /// The scheduler name pods ask for.
    name: String,
    family: Family,
    groups_t: ResourceType,
    /// Every PodGroup, by namespace and name.
    groups: HashMap<GroupKey, GroupEntry>,
    /// The uids of each group's member pods, including groups not created (yet): kept as pods
    /// come and go, so counting a group's members never lists pods.
    members: HashMap<GroupKey, HashSet<String>>,
    /// Groups whose status may be out of date.
    stale: HashSet<GroupKey>,
    /// When to try again a status write that failed (kept conflicting, or the store refused
    /// it): the group is marked stale again, and admission runs again, at that time, even if
    /// no event comes to wake the loop.
    retry_at: Option<Instant>,
}

/// How long a failed podgroup status write waits before it is tried again.
const GROUP_STATUS_RETRY: Duration = Duration::from_millis(200);

struct GroupEntry {
    /// The PodGroup as last seen (or written).
    object: Arc<Value>,
    /// Arrival order, for first-come-first-served admission.
    seq: u64,
    /// How long members wait at permit (coscheduling).
    timeout: Duration,
    /// Coscheduling: since when the members have been waiting at permit for siblings that do
    /// not fit; restarted at each timeout, as the plugin retries the rejected pods.
    waiting_since: Option<Instant>,
    /// Coscheduling: the current wait has timed out at least once.
    timed_out: bool,
}

impl Gang {
    fn upsert(&mut self, key: GroupKey, object: Arc<Value>, seq: u64) -> bool {
        let timeout = GroupSpec::of(&object)
            .timeout
            .unwrap_or(gang::DEFAULT_SCHEDULE_TIMEOUT);
        self.stale.insert(key.clone());
        match self.groups.get_mut(&key) {
            Some(entry) if entry.object["metadata"]["uid"] == object["metadata"]["uid"] => {
                // A new spec (minMember lowered) or phase can change what may be bound.
                let changed = entry.object.get("spec") != object.get("spec")
                    || entry.object.pointer("/status/phase") != object.pointer("/status/phase");
                entry.object = object;
                entry.timeout = timeout;
                changed
            }
            _ => {
                self.groups.insert(
                    key,
                    GroupEntry {
                        object,
                        seq,
                        timeout,
                        waiting_since: None,
                        timed_out: false,
                    },
                );
                true
            }
        }
    }
}

/// The log lines of a pod's containers, decided when the pod is first seen.
#[derive(Debug, Default)]
struct LogPlan {
    /// The start line of each container.
    starts: HashMap<String, String>,
    /// The main container's task (`worker:1`), for `{task}`.
    task: String,
    script: LogScript,
    /// When the main container prints its next scripted line, that line's number, and the
    /// run it belongs to.
    tick: Option<(Instant, u32, u32)>,
}

impl LogPlan {
    fn of(pod: &Value) -> (LogPlan, Vec<String>) {
        let list = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let text = |c: &Value, k: &str| {
            c.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut task = String::new();
        let starts = list
            .iter()
            .map(|c| {
                let name = text(c, "name");
                let tf = log_script::tf_config(pod, &name);
                if let Some((t, _)) = tf.as_deref().and_then(log_script::task) {
                    task = t;
                }
                let line = log_script::start_line(&name, &text(c, "image"), tf.as_deref());
                (name, line)
            })
            .collect();
        let (script, problems) = LogScript::parse(pod.get("metadata"));
        let plan = LogPlan {
            starts,
            task,
            script,
            tick: None,
        };
        (plan, problems)
    }
}

struct Node {
    view: NodeView,
    ip: String,
    next_pod_ip: u32,
}

struct Kubelet {
    store: Arc<Store>,
    config: KubeletConfig,
    pods_t: ResourceType,
    nodes_t: ResourceType,
    nodes: Vec<Node>,
    /// Every pod seen, by uid.
    pods: HashMap<String, Tracked>,
    /// The pods a scheduling pass looks at, in arrival order (seq, uid): every pod tracked as
    /// unscheduled by a scheduler served here is in it (a pod never goes back to that stage);
    /// one that left it is dropped by the next pass. So a pass costs O(waiting), not a walk of
    /// every pod seen (50,000 at 10,000 jobs).
    unscheduled: BTreeSet<(u64, String)>,
    /// Runs started per replica, across container restarts and pod recreations.
    runs: HashMap<RunKey, u32>,
    seq: u64,
    /// Something that can change a scheduling verdict happened since the last pass.
    dirty: bool,
    /// What the pods bound to each node use, kept as pods change (no listing per pass).
    usage: Usage,
    /// When some pod's timer or log tick may be due, earliest first. An entry is only a
    /// wake-up: the pod's own state says what is due, so a stale entry costs one look.
    wakeups: BinaryHeap<Reverse<(Instant, String)>>,
    /// The gang scheduler, when one is simulated.
    gang: Option<Gang>,
}

fn meta<'a>(pod: &'a Value, field: &str) -> &'a str {
    pod.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn label(pod: &Value, key: &str) -> Option<String> {
    pod.pointer("/metadata/labels")?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

fn node_name(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// The phase, binding and deletion of a pod, as its group counts it.
fn facts(pod: &Value) -> (String, bool, bool) {
    (
        pod.pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        node_name(pod).is_some(),
        pod.pointer("/metadata/deletionTimestamp").is_some(),
    )
}

fn group_phase(group: &Value) -> &str {
    group
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn finished(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) || pod.pointer("/metadata/deletionTimestamp").is_some()
}

fn quantity_or(value: &str, what: &str, default: &str) -> i128 {
    schedule::parse_quantity(value).unwrap_or_else(|| {
        tracing::error!(
            value,
            "invalid {what} quantity for the simulated nodes; using {default}"
        );
        schedule::parse_quantity(default).unwrap_or_default()
    })
}

impl Kubelet {
    fn new(store: Arc<Store>, config: KubeletConfig) -> Option<Kubelet> {
        let pods_t = store.resource("", "pods")?;
        let nodes_t = store.resource("", "nodes")?;
        let cpu = quantity_or(&config.cpu, "cpu", "8");
        let memory = quantity_or(&config.memory, "memory", "32Gi");
        let nodes = (0..config.nodes)
            .map(|i| {
                let name = format!("sim-node-{i}");
                let mut labels = BTreeMap::from([
                    ("kubernetes.io/hostname".to_owned(), name.clone()),
                    ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                    ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
                    (
                        "node.kubernetes.io/instance-type".to_owned(),
                        "sim".to_owned(),
                    ),
                ]);
                if config.gpus_per_node > 0 {
                    labels.insert("nvidia.com/gpu.present".into(), "true".into());
                }
                let allocatable = Resources::from([
                    ("cpu".to_owned(), cpu),
                    ("memory".to_owned(), memory),
                    (GPU.to_owned(), i128::from(config.gpus_per_node) * 1000),
                    ("pods".to_owned(), 110_000),
                    ("ephemeral-storage".to_owned(), 100 * (1 << 30) * 1000),
                ]);
                Node {
                    view: NodeView {
                        name,
                        labels,
                        allocatable,
                        used: Resources::new(),
                        pods: 0,
                    },
                    ip: format!("10.0.{}.{}", i / 250, i % 250 + 1),
                    next_pod_ip: 0,
                }
            })
            .collect();
        let gang = gang_scheduler(&config).and_then(|name| {
            let family = Family::of(name);
            let group = match family {
                Family::Volcano => podgroups::VOLCANO_GROUP,
                Family::Coscheduling => podgroups::COSCHEDULING_GROUP,
            };
            let Some(groups_t) = store.resource(group, podgroups::PLURAL) else {
                tracing::error!(
                    scheduler = name,
                    "the PodGroup CRD is not served; gang scheduling is off"
                );
                return None;
            };
            Some(Gang {
                name: name.to_owned(),
                family,
                groups_t,
                groups: HashMap::new(),
                members: HashMap::new(),
                stale: HashSet::new(),
                retry_at: None,
            })
        });
        Some(Kubelet {
            gang,
            store,
            config,
            pods_t,
            nodes_t,
            nodes,
            pods: HashMap::new(),
            unscheduled: BTreeSet::new(),
            runs: HashMap::new(),
            seq: 0,
            dirty: false,
            usage: Usage::default(),
            wakeups: BinaryHeap::new(),
        })
    }

    /// Creates the Node objects; ones left by an earlier run are kept.
    fn register_nodes(&self) {
        let now = Timestamp::now().to_string();
        for (i, node) in self.nodes.iter().enumerate() {
            let resources: serde_json::Map<String, Value> = node
                .view
                .allocatable
                .iter()
                .map(|(k, v)| (k.clone(), json!(schedule::format_quantity(*v))))
                .collect();
            let condition = |t: &str, ok: bool, reason: &str, message: &str| {
                json!({"type": t, "status": if ok { "True" } else { "False" }, "reason": reason,
                    "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now})
            };
            let obj = json!({
                "metadata": {"name": node.view.name, "labels": node.view.labels},
                "spec": {"podCIDR": format!("10.244.{}.0/24", i % 256)},
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        condition("MemoryPressure", false, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        condition("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                        condition("Ready", true, "KubeletReady", "kubelet is posting ready status"),
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": node.ip},
                        {"type": "Hostname", "address": node.view.name},
                    ],
                    "nodeInfo": {
                        "kubeletVersion": "v1.33.0-sim", "kubeProxyVersion": "v1.33.0-sim",
                        "containerRuntimeVersion": "containerd://1.7.0-sim", "operatingSystem": "linux",
                        "architecture": "amd64", "osImage": "Simulated", "kernelVersion": "6.0.0-sim",
                        "machineID": "", "systemUUID": "", "bootID": ""
                    },
                },
            });
            match self.store.create(&self.nodes_t, None, obj) {
                Ok(_) => tracing::info!(node = node.view.name, "simulated node registered"),
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => {
                    tracing::error!(node = node.view.name, error = %e, "cannot register node")
                }
            }
        }
    }

    /// Applies a change received for `kind`; after falling behind, catches up from the type's
    /// history and goes on, or asks for a relist when the history has moved past it.
    fn deliver(
        &mut self,
        follow: &mut Follow,
        kind: Followed,
        event: Result<WatchEvent, RecvError>,
    ) -> Flow {
        let Some(feed) = follow.feed(kind) else {
            return Flow::Going;
        };
        match event {
            Ok(e) => {
                feed.seen = e.rv;
                self.apply(kind, &e);
                Flow::Going
            }
            Err(RecvError::Lagged(missed)) => {
                match self.store.watch(&feed.resource, None, feed.seen) {
                    Ok((past, rx)) => {
                        feed.rx = rx;
                        if let Some(last) = past.last() {
                            feed.seen = last.rv;
                        }
                        for e in &past {
                            self.apply(kind, e);
                        }
                        Flow::Going
                    }
                    Err(e) => {
                        tracing::warn!(missed, resource = %feed.resource, error = %e,
                            "the simulated kubelet fell behind its watch's history; relisting");
                        Flow::Relist
                    }
                }
            }
            Err(RecvError::Closed) => Flow::Closed,
        }
    }

    fn apply(&mut self, kind: Followed, e: &WatchEvent) {
        match kind {
            Followed::Pods => self.on_event(e),
            Followed::Nodes => self.on_node_event(e),
            Followed::Groups => self.on_group_event(e),
        }
    }

    /// Lists every node, PodGroup and pod and watches each type from its list on, forgetting
    /// pods that are gone. Used at start, and when a watch fell behind further than its type's
    /// history reaches.
    fn resync(&mut self) -> Follow {
        self.store.count_kubelet_list();
        loop {
            // Nodes and groups first: their changes since are replayed below, and a change
            // seen twice (replayed and received) is harmless, as both are handled by state.
            let (nodes, nodes_rv) = self.store.list(&self.nodes_t, None);
            let groups = self
                .gang
                .as_ref()
                .map(|g| (g.groups_t.clone(), self.store.list(&g.groups_t, None)));
            let (items, rv) = self.store.list(&self.pods_t, None);
            let watched = self.follow_from(&self.pods_t.key(), rv).and_then(|pods| {
                let nodes = self.follow_from(&self.nodes_t.key(), nodes_rv)?;
                let groups = match &groups {
                    Some((t, (_, groups_rv))) => Some(self.follow_from(&t.key(), *groups_rv)?),
                    None => None,
                };
                Ok((pods, nodes, groups))
            });
            let ((pods, pods_past), (nodes_feed, nodes_past), groups_feed) = match watched {
                Ok(w) => w,
                Err(e) => {
                    // Cannot happen right after a list, but a relist is always safe.
                    tracing::warn!(error = %e, "watch after list refused; relisting");
                    continue;
                }
            };
            for node in &nodes {
                self.on_node(node);
            }
            for e in &nodes_past {
                self.on_node_event(e);
            }
            let mut groups_followed = None;
            if let (Some((_, (groups, _))), Some((feed, past))) = (groups, groups_feed) {
                let alive: HashSet<GroupKey> = groups
                    .iter()
                    .map(|g| (meta(g, "namespace").to_owned(), meta(g, "name").to_owned()))
                    .collect();
                if let Some(gang) = &mut self.gang {
                    gang.groups.retain(|key, _| alive.contains(key));
                }
                for group in groups {
                    self.on_group(group);
                }
                for e in &past {
                    self.on_group_event(e);
                }
                groups_followed = Some(feed);
            }
            let alive: HashSet<&str> = items.iter().map(|p| meta(p, "uid")).collect();
            let gone: Vec<String> = self
                .pods
                .keys()
                .filter(|uid| !alive.contains(uid.as_str()))
                .cloned()
                .collect();
            for uid in gone {
                self.forget(&uid);
            }
            // Logs of pods this kubelet never tracked go too.
            self.store.logs().retain_pods(|uid| alive.contains(uid));
            for pod in &items {
                self.observe(pod);
            }
            self.usage = Usage::recount(items.iter().map(|p| &**p), |uid| {
                self.pods.get(uid).and_then(Tracked::group)
            });
            for e in &pods_past {
                self.on_event(e);
            }
            self.dirty = true;
            return Follow {
                pods,
                nodes: nodes_feed,
                groups: groups_followed,
            };
        }
    }

    /// A watch of `resource` from `rv` (a list's resourceVersion), and the changes since.
    fn follow_from(&self, resource: &str, rv: u64) -> Result<(Feed, Vec<WatchEvent>), ApiError> {
        let (past, rx) = self.store.watch(resource, None, rv)?;
        let seen = past.last().map_or(rv, |e| e.rv);
        let feed = Feed {
            resource: resource.to_owned(),
            rx,
            seen,
        };
        Ok((feed, past))
    }

    fn on_event(&mut self, e: &WatchEvent) {
        let uid = meta(&e.object, "uid");
        if e.type_ == EventType::Deleted {
            // Whatever it held is free now.
            self.forget(uid);
            return;
        }
        // The event may be older than our own later writes: act on the current object.
        let (ns, name) = (meta(&e.object, "namespace"), meta(&e.object, "name"));
        match self.store.get(&self.pods_t, Some(ns), name) {
            Ok(pod) => {
                if meta(&pod, "uid") != uid {
                    self.forget(uid);
                }
                self.observe(&pod);
                self.account(&pod);
            }
            Err(_) => self.forget(uid),
        }
    }

    /// Records what a pod just read or written holds, for the scheduler's totals.
    fn account(&mut self, pod: &Value) {
        let uid = meta(pod, "uid");
        let group = self.pods.get(uid).and_then(Tracked::group);
        self.usage.set(uid, Share::of(pod, group));
    }

    /// Makes sure the loop wakes when the pod's timer or next log line is due.
    fn arm(&mut self, uid: &str) {
        let Some(t) = self.pods.get(uid) else {
            return;
        };
        let step = match &t.stage {
            Stage::Bound {
                timer: Some((at, _)),
                ..
            } => Some(*at),
            _ => None,
        };
        for at in [step, t.log.tick.map(|(at, _, _)| at)]
            .into_iter()
            .flatten()
        {
            self.wakeups.push(Reverse((at, uid.to_owned())));
        }
    }

    /// Drops a pod (gone, or replaced by one of another uid): its place is free, its group
    /// has one member less, its logs go.
    fn forget(&mut self, uid: &str) {
        self.store.logs().remove_pod(uid);
        self.usage.set(uid, None);
        let Some(t) = self.pods.remove(uid) else {
            return;
        };
        self.dirty = true;
        if let (Some(key), Some(gang)) = (t.group(), &mut self.gang) {
            if let Some(members) = gang.members.get_mut(&key) {
                members.remove(uid);
                if members.is_empty() {
                    gang.members.remove(&key);
                }
            }
            gang.stale.insert(key);
        }
    }

    /// Starts tracking a pod, as a member of its group if it has one.
    fn insert(&mut self, uid: String, t: Tracked) {
        if let (Some(key), Some(gang)) = (t.group(), &mut self.gang) {
            gang.members
                .entry(key.clone())
                .or_default()
                .insert(uid.clone());
            gang.stale.insert(key);
        }
        if waits_for_a_node(&t) {
            self.unscheduled.insert((t.seq, uid.clone()));
        }
        self.pods.insert(uid, t);
    }

    /// A Node changed. The simulated nodes keep the capacity of the configuration (a node
    /// object left by an earlier run with other sizes does not override it); any other node
    /// counts with the allocatable resources it reports.
    fn on_node_event(&mut self, e: &WatchEvent) {
        if e.type_ == EventType::Deleted {
            let name = meta(&e.object, "name");
            if let Some(i) = self.is_ours(name).filter(|i| *i >= self.config.nodes) {
                self.nodes.remove(i);
                self.dirty = true;
            }
            return;
        }
        let (nodes_t, name) = (self.nodes_t.clone(), meta(&e.object, "name"));
        match self.store.get(&nodes_t, None, name) {
            Ok(node) => self.on_node(&node),
            Err(_) => {
                if let Some(i) = self.is_ours(name).filter(|i| *i >= self.config.nodes) {
                    self.nodes.remove(i);
                    self.dirty = true;
                }
            }
        }
    }

    fn on_node(&mut self, node: &Value) {
        let name = meta(node, "name");
        if self.nodes[..self.config.nodes.min(self.nodes.len())]
            .iter()
            .any(|n| n.view.name == name)
        {
            return;
        }
        let position = self.is_ours(name);
        match (schedule::node_view(node), position) {
            (Some(view), Some(i)) => {
                if self.nodes[i].view.allocatable != view.allocatable
                    || self.nodes[i].view.labels != view.labels
                {
                    self.nodes[i].view.allocatable = view.allocatable;
                    self.nodes[i].view.labels = view.labels;
                    self.dirty = true;
                }
            }
            (Some(view), None) => {
                let i = self.nodes.len();
                let ip = node
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
                    .and_then(|a| a["address"].as_str())
                    .map_or_else(
                        || format!("10.0.{}.{}", i / 250, i % 250 + 1),
                        str::to_owned,
                    );
                tracing::info!(node = name, "node added to the simulated cluster");
                self.nodes.push(Node {
                    view,
                    ip,
                    next_pod_ip: 0,
                });
                self.dirty = true;
            }
            // Cordoned, or reporting no resources: nothing goes there any more.
            (None, Some(i)) => {
                self.nodes.remove(i);
                self.dirty = true;
            }
            (None, None) => {}
        }
    }

    /// A PodGroup changed.
    fn on_group_event(&mut self, e: &WatchEvent) {
        let Some(gang) = &mut self.gang else {
            return;
        };
        let key = (
            meta(&e.object, "namespace").to_owned(),
            meta(&e.object, "name").to_owned(),
        );
        if e.type_ == EventType::Deleted {
            if gang
                .groups
                .get(&key)
                .is_some_and(|g| g.object["metadata"]["uid"] == e.object["metadata"]["uid"])
            {
                gang.groups.remove(&key);
                self.dirty = true;
            }
            return;
        }
        // As for pods, act on the current object rather than an old event.
        match self.store.get(&gang.groups_t, Some(&key.0), &key.1) {
            Ok(group) => self.on_group(group),
            Err(_) => {
                if gang.groups.remove(&key).is_some() {
                    self.dirty = true;
                }
            }
        }
    }

    fn on_group(&mut self, group: Arc<Value>) {
        self.seq += 1;
        let seq = self.seq;
        let Some(gang) = &mut self.gang else {
            return;
        };
        let key = (
            meta(&group, "namespace").to_owned(),
            meta(&group, "name").to_owned(),
        );
        if gang.upsert(key, group, seq) {
            self.dirty = true;
        }
    }

    fn is_ours(&self, node: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.view.name == node)
    }

    /// Takes note of the current state of a pod.
    fn observe(&mut self, pod: &Value) {
        let uid = meta(pod, "uid").to_owned();
        if let Some(t) = self.pods.get_mut(&uid) {
            let (phase, bound, deleting) = facts(pod);
            if (&t.phase, t.bound, t.deleting) != (&phase, bound, deleting) {
                (t.phase, t.bound, t.deleting) = (phase, bound, deleting);
                if let (Some(key), Some(gang)) = (t.group(), &mut self.gang) {
                    gang.stale.insert(key);
                }
            }
            match t.stage {
                Stage::Done => {}
                _ if finished(pod) => {
                    // Finished or deleted by someone else (a test playing kubelet, a
                    // finalizer holding a deleted pod): stop simulating it, free its place.
                    t.stage = Stage::Done;
                    t.log.tick = None;
                    self.store.logs().close_pod(&uid);
                    self.dirty = true;
                }
                Stage::Unscheduled | Stage::NeverScheduled => {
                    // Bound by someone else: run it if the node is ours.
                    if let Some(node) = node_name(pod) {
                        match self.is_ours(node) {
                            Some(i) => self.start(&uid, pod, i),
                            None => {
                                if let Some(t) = self.pods.get_mut(&uid) {
                                    t.stage = Stage::Done;
                                }
                            }
                        }
                    }
                }
                Stage::Bound { .. } => {}
            }
            return;
        }
        if finished(pod) {
            let t = self.tracked(pod, Script::clean(Duration::ZERO), Stage::Done);
            self.insert(uid, t);
            return;
        }
        let ours = match node_name(pod) {
            Some(node) => match self.is_ours(node) {
                Some(i) => Some(i),
                None => {
                    let t = self.tracked(pod, Script::clean(Duration::ZERO), Stage::Done);
                    self.insert(uid, t);
                    return;
                }
            },
            None => None,
        };
        let index = script::replica_index(pod.get("metadata"));
        let (script, problems) =
            Script::parse(pod.get("metadata"), index, self.config.default_duration);
        let (log, log_problems) = LogPlan::of(pod);
        let problems = [problems, log_problems].concat();
        if !problems.is_empty() {
            self.warn_script(pod, &problems);
        }
        let t = self.tracked(pod, script, Stage::Unscheduled);
        let run = self.next_run(&t.replica);
        let mut t = Tracked {
            run: t.script.for_run(run),
            log,
            ..t
        };
        match ours {
            Some(i) => {
                self.insert(uid.clone(), t);
                self.start(&uid, pod, i);
            }
            // No scheduler serves the pod: nobody would say why it waits.
            None if t.run.pending_reason == Some(PendingReason::Unschedulable)
                && t.scheduling != Scheduling::Unserved =>
            {
                t.stage = Stage::NeverScheduled;
                let message = scripted_unschedulable(self.nodes.len());
                self.insert(uid.clone(), t);
                self.write_status(&uid, |prev| {
                    status::unschedulable_status(prev, &message, Timestamp::now())
                });
            }
            None => {
                self.insert(uid, t);
                self.dirty = true;
            }
        }
    }

    fn tracked(&mut self, pod: &Value, script: Script, stage: Stage) -> Tracked {
        self.seq += 1;
        let (ns, name) = (meta(pod, "namespace"), meta(pod, "name"));
        let replica = (
            ns.to_owned(),
            label(pod, script::JOB_NAME_LABEL).unwrap_or_default(),
            label(pod, script::REPLICA_TYPE_LABEL).unwrap_or_default(),
            // Pods outside a job count their runs by name.
            label(pod, script::REPLICA_INDEX_LABEL).unwrap_or_else(|| name.to_owned()),
        );
        let gang = self.gang.as_ref().map(|g| (g.name.as_str(), g.family));
        let (phase, bound, deleting) = facts(pod);
        Tracked {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            seq: self.seq,
            replica,
            run: script.clone(),
            script,
            stage,
            log: LogPlan::default(),
            scheduling: gang::scheduling_of(pod, gang),
            phase,
            bound,
            deleting,
        }
    }

    /// Counts a new run of the replica; 1 for its first.
    fn next_run(&mut self, replica: &RunKey) -> u32 {
        let n = self.runs.entry(replica.clone()).or_default();
        *n += 1;
        *n
    }

    /// Records a Warning event on the pod: its script has values that were ignored.
    fn warn_script(&self, pod: &Value, problems: &[String]) {
        let message = problems.join("; ");
        tracing::warn!(
            pod = meta(pod, "name"),
            namespace = meta(pod, "namespace"),
            %message,
            "ignoring malformed simulation annotations"
        );
        let involved = json!({
            "apiVersion": "v1", "kind": "Pod", "namespace": meta(pod, "namespace"),
            "name": meta(pod, "name"), "uid": meta(pod, "uid"),
        });
        let note = Note {
            warning: true,
            reason: "InvalidSimulationScript",
            message: &message,
        };
        events::record(&self.store, COMPONENT, involved, note);
    }

    /// The pod just landed on node `node`: containers being created, or stuck as scripted.
    fn start(&mut self, uid: &str, pod: &Value, node: usize) {
        let n = &mut self.nodes[node];
        n.next_pod_ip += 1;
        let pod_ip = format!("10.244.{}.{}", node % 256, n.next_pod_ip % 250 + 2);
        let now = Timestamp::now();
        let mut sim = PodSim::new(pod, &n.view.name, &n.ip, &pod_ip, now);
        let created = sim.containers.clone();
        let Some(t) = self.pods.get_mut(uid) else {
            return;
        };
        let timer = match &t.run.pending_reason {
            Some(PendingReason::Waiting(reason)) => {
                sim.stuck(reason, now);
                None
            }
            // Running before this kubelet saw it: a fresh run from here, without recreating.
            _ if pod.get("status").is_some_and(|s| sim.adopt(s)) => {
                Some((Instant::now() + t.run.duration.max(MIN_TIMER), Step::Finish))
            }
            // Bound by someone else despite the script: the scheduler had no say.
            Some(PendingReason::Unschedulable) | None => Some((
                Instant::now() + self.config.startup.max(MIN_TIMER),
                Step::Start,
            )),
        };
        tracing::debug!(pod = t.name, node = n.view.name, "pod bound");
        let events = log_script::transitions(&created, &sim.containers);
        t.stage = Stage::Bound {
            sim: Box::new(sim),
            timer,
        };
        self.write_logs(uid, &events);
        self.write_sim(uid);
        self.arm(uid);
    }

    /// The earliest timer of any pod, or of a coscheduled group's wait at permit.
    fn next_deadline(&self) -> Option<Instant> {
        let pods = self.wakeups.peek().map(|Reverse((at, _))| *at);
        let retry = self.gang.as_ref().and_then(|g| g.retry_at);
        pods.into_iter()
            .chain(retry)
            .chain(self.permit_deadlines())
            .min()
    }

    /// When each coscheduled group waiting at permit times out.
    fn permit_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.gang
            .iter()
            .flat_map(|g| g.groups.values())
            .filter_map(|e| Some(e.waiting_since? + e.timeout))
    }

    /// Runs every timer due by `now`.
    fn fire(&mut self, now: Instant) {
        // A due status retry needs nothing here: the loop syncs and admits groups after this.
        if let Some(g) = &mut self.gang
            && g.retry_at.is_some_and(|at| at <= now)
        {
            g.retry_at = None;
        }
        let mut woken = Vec::new();
        while let Some(Reverse((at, _))) = self.wakeups.peek()
            && *at <= now
        {
            if let Some(Reverse((_, uid))) = self.wakeups.pop() {
                woken.push(uid);
            }
        }
        woken.sort();
        woken.dedup();
        // Steps first, then log lines, as before: a run that ends takes its ticks along.
        for uid in &woken {
            if self.pods.get(uid).is_some_and(
                |t| matches!(&t.stage, Stage::Bound { timer: Some((at, _)), .. } if *at <= now),
            ) {
                self.step(uid);
            }
        }
        for uid in &woken {
            if self
                .pods
                .get(uid)
                .is_some_and(|t| t.log.tick.is_some_and(|(at, _, _)| at <= now))
            {
                self.tick_log(uid);
            }
            self.arm(uid);
        }
        // A wait at permit ran out: the next pass rejects the group's members.
        if self.permit_deadlines().any(|at| at <= now) {
            self.dirty = true;
        }
    }

    fn step(&mut self, uid: &str) {
        let Some(t) = self.pods.get_mut(uid) else {
            return;
        };
        let Stage::Bound { sim, timer } = &mut t.stage else {
            return;
        };
        let Some((_, step)) = timer.take() else {
            return;
        };
        let before = sim.containers.clone();
        let now = Timestamp::now();
        match step {
            Step::Start => {
                sim.start(now);
                *timer = Some((Instant::now() + t.run.duration.max(MIN_TIMER), Step::Finish));
            }
            Step::Finish => {
                let ending = Ending {
                    exit_code: t.run.exit_code,
                    reason: t.run.terminated_reason.clone(),
                    pod_reason: t.run.pod_reason.clone(),
                };
                if sim.finish(&ending, now) {
                    let n = self.runs.entry(t.replica.clone()).or_default();
                    *n += 1;
                    t.run = t.script.for_run(*n);
                    *timer = Some((Instant::now() + t.run.duration.max(MIN_TIMER), Step::Finish));
                }
            }
        }
        let events = log_script::transitions(&before, &sim.containers);
        // Lines reach the log before the status that announces them, so a client that saw
        // the container running or ended finds its start or exit line.
        self.write_logs(uid, &events);
        self.write_sim(uid);
        if let Some(t) = self.pods.get_mut(uid)
            && let Stage::Bound { sim, .. } = &t.stage
            && sim.is_terminal()
        {
            t.stage = Stage::Done;
            t.log.tick = None;
            self.dirty = true;
        }
    }

    /// Writes what the containers print as their runs begin and end, and arms the main
    /// container's scripted lines.
    fn write_logs(&mut self, uid: &str, events: &[LogEvent]) {
        let Some(t) = self.pods.get_mut(uid) else {
            return;
        };
        let Stage::Bound { sim, .. } = &t.stage else {
            return;
        };
        let main = sim.containers.get(sim.main).map(|c| c.name.clone());
        let logs = self.store.logs();
        let now = Timestamp::now();
        for event in events {
            match event {
                LogEvent::Exit {
                    container,
                    exit_code,
                    reason,
                } => {
                    if let Some(run) = logs.current(uid, container) {
                        run.push(now, &log_script::exit_line(*exit_code, reason));
                        run.close();
                    }
                    if main.as_ref() == Some(container) {
                        t.log.tick = None;
                    }
                }
                LogEvent::Start { container, run } => {
                    let log = logs.start_run(uid, container);
                    if let Some(line) = t.log.starts.get(container) {
                        log.push(now, line);
                    }
                    if main.as_ref() != Some(container) {
                        continue;
                    }
                    match &t.log.script {
                        LogScript::Literal(lines) => {
                            for line in lines {
                                log.push(now, line);
                            }
                        }
                        LogScript::Steps {
                            every: None,
                            lines,
                            text,
                        } => {
                            for i in 1..=*lines {
                                log.push(now, &log_script::render_step(text, i, *run, &t.log.task));
                            }
                        }
                        LogScript::Steps {
                            every: Some(every),
                            lines,
                            ..
                        } if *lines > 0 => {
                            t.log.tick = Some((Instant::now() + *every, 1, *run));
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The main container prints its next scripted line.
    fn tick_log(&mut self, uid: &str) {
        let Some(t) = self.pods.get_mut(uid) else {
            return;
        };
        let Some((at, i, run)) = t.log.tick.take() else {
            return;
        };
        let (
            Stage::Bound { sim, .. },
            LogScript::Steps {
                every: Some(every),
                lines,
                text,
            },
        ) = (&t.stage, &t.log.script)
        else {
            return;
        };
        let Some(main) = sim.containers.get(sim.main) else {
            return;
        };
        if let Some(log) = self.store.logs().current(uid, &main.name) {
            log.push(
                Timestamp::now(),
                &log_script::render_step(text, i, run, &t.log.task),
            );
        }
        if i < *lines {
            // From the planned time, not from now, so a busy loop does not stretch the script.
            t.log.tick = Some((at + *every, i + 1, run));
        }
    }

    /// Writes the status of a bound pod.
    fn write_sim(&mut self, uid: &str) {
        let Some(Tracked {
            stage: Stage::Bound { sim, .. },
            ..
        }) = self.pods.get(uid)
        else {
            return;
        };
        let sim = sim.clone();
        self.write_status(uid, |prev| sim.status(prev));
    }

    /// Writes a status computed from the stored one, retrying on conflicts. A pod that is gone
    /// (or replaced by one with another uid) is forgotten.
    fn write_status(&mut self, uid: &str, render: impl Fn(Option<&Value>) -> Value) {
        let Some(t) = self.pods.get(uid) else {
            return;
        };
        let (ns, name) = (t.namespace.clone(), t.name.clone());
        for _ in 0..5 {
            let current = match self.store.get(&self.pods_t, Some(&ns), &name) {
                Ok(p) if meta(&p, "uid") == uid => p,
                _ => {
                    self.forget(uid);
                    return;
                }
            };
            // A status write reads the body's status and resourceVersion alone: no copy of
            // the pod.
            let body = json!({
                "metadata": {"name": name, "resourceVersion": meta(&current, "resourceVersion")},
                "status": render(current.get("status")),
            });
            match self
                .store
                .replace(&self.pods_t, Some(&ns), &name, body, Part::Status)
            {
                Ok(written) => {
                    self.account(&written);
                    return;
                }
                Err(e) if e.reason == "Conflict" => continue,
                Err(e) => {
                    tracing::warn!(pod = name, namespace = ns, error = %e, "cannot write pod status");
                    return;
                }
            }
        }
        tracing::warn!(
            pod = name,
            namespace = ns,
            "pod status kept conflicting; giving up"
        );
    }

    /// One scheduling pass over the pods waiting for a node, first come first served, if
    /// anything changed since the last. A pod of a gang group is taken with the rest of its
    /// group when its turn comes; pods no scheduler here serves are passed over.
    fn schedule(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let visited = self.schedule_pass();
        // A group not tried in this pass has no member waiting: it waits at permit no more.
        if let Some(gang) = &mut self.gang {
            for (key, entry) in &mut gang.groups {
                if !visited.contains(key) {
                    entry.waiting_since = None;
                    entry.timed_out = false;
                }
            }
        }
    }

    /// The pass itself; returns the groups whose waiting members it tried.
    fn schedule_pass(&mut self) -> HashSet<GroupKey> {
        let mut visited = HashSet::new();
        let pods = &self.pods;
        // A uid tracked again (a relist) has a new seq: its old entry goes too.
        self.unscheduled.retain(|(seq, uid)| {
            pods.get(uid)
                .is_some_and(|t| t.seq == *seq && waits_for_a_node(t))
        });
        let waiting: Vec<(u64, String)> = self.unscheduled.iter().cloned().collect();
        let admitting = self.gang.as_ref().is_some_and(|g| {
            g.family == Family::Volcano
                && g.groups
                    .values()
                    .any(|e| !gang::volcano_admitted(group_phase(&e.object)))
        });
        if waiting.is_empty() && !admitting {
            return visited;
        }
        let mut views: Vec<NodeView> = self
            .nodes
            .iter()
            .map(|n| {
                let mut view = n.view.clone();
                if let Some(total) = self.usage.node(&view.name) {
                    view.used.clone_from(&total.used);
                    view.pods = total.pods;
                }
                view
            })
            .collect();
        // What each group's bound pods use on the nodes served here, for Volcano's
        // reservations and the coscheduling resource check.
        let group_usage = self.usage.groups(|node| self.is_ours(node).is_some());
        if admitting {
            self.admit(&views, &group_usage);
        }
        for (_, uid) in waiting {
            let Some(t) = self.pods.get(&uid) else {
                continue;
            };
            if let Some(key) = t.group() {
                if visited.insert(key.clone()) {
                    self.schedule_group(&key, &mut views, &group_usage);
                }
                continue;
            }
            self.schedule_one(&uid, &mut views);
        }
        visited
    }

    /// Schedules one pod on its own, as the default scheduler does.
    fn schedule_one(&mut self, uid: &str, views: &mut [NodeView]) {
        let Some(pod) = self.waiting_pod(uid) else {
            return;
        };
        match schedule::choose_node(&pod, views) {
            Ok(i) => self.bind_and_start(uid, &pod, i, views),
            Err(message) => {
                tracing::debug!(pod = meta(&pod, "name"), %message, "pod unschedulable");
                self.write_status(uid, |prev| {
                    status::unschedulable_status(prev, &message, Timestamp::now())
                });
            }
        }
    }

    /// The stored pod of a tracked uid, if it still waits for a node. Gone, replaced or bound
    /// meanwhile: its own event says what to do.
    fn waiting_pod(&self, uid: &str) -> Option<Arc<Value>> {
        let t = self.pods.get(uid)?;
        self.store
            .get(&self.pods_t, Some(&t.namespace), &t.name)
            .ok()
            .filter(|p| meta(p, "uid") == uid && node_name(p).is_none())
    }

    /// Binds a pod to node `i` and starts it there.
    fn bind_and_start(&mut self, uid: &str, pod: &Value, i: usize, views: &mut [NodeView]) {
        if let Err(e) = self.bind(pod, &views[i].name) {
            tracing::warn!(pod = meta(pod, "name"), error = %e, "binding failed; retrying later");
            self.dirty = true;
            return;
        }
        schedule::add_usage(&mut views[i], &schedule::pod_requests(pod));
        // Bind changed the object: start from the stored one, which the totals count from
        // now on (its event comes later).
        let bound = match self.store.get(
            &self.pods_t,
            Some(meta(pod, "namespace")),
            meta(pod, "name"),
        ) {
            Ok(bound) => bound,
            Err(_) => return,
        };
        self.account(&bound);
        self.start(uid, &bound, i);
    }

    /// Volcano's enqueue step: `Pending` groups, oldest first, become `Inqueue` while their
    /// `minResources` fit the idle resources left by bound pods and by the reservations of
    /// groups admitted earlier.
    fn admit(&mut self, views: &[NodeView], group_usage: &HashMap<GroupKey, Resources>) {
        let Some(gang) = &self.gang else {
            return;
        };
        let none = Resources::new();
        let mut free = gang::idle(views);
        let mut candidates = Vec::new();
        for (key, entry) in &gang.groups {
            let spec = GroupSpec::of(&entry.object);
            match group_phase(&entry.object) {
                "Inqueue" => gang::subtract(
                    &mut free,
                    &gang::reservation(&spec.min_resources, group_usage.get(key).unwrap_or(&none)),
                ),
                "" | "Pending" => candidates.push((entry.seq, key.clone(), spec)),
                _ => {}
            }
        }
        candidates.sort_by_key(|(seq, _, _)| *seq);
        for (_, key, spec) in candidates {
            if !gang::admits(&spec.min_resources, &free) {
                continue;
            }
            gang::subtract(&mut free, &spec.min_resources);
            tracing::debug!(group = key.1, namespace = key.0, "podgroup Inqueue");
            // A write that fails is retried by the next pass, which `retry_at` brings about.
            self.write_group_status(&key, |prev| {
                let mut status = prev.cloned().unwrap_or_else(|| json!({}));
                status["phase"] = json!("Inqueue");
                status
            });
        }
    }

    /// Schedules the waiting members of a group: all of them at once, or none, with the
    /// scheduler's message on each.
    fn schedule_group(
        &mut self,
        key: &GroupKey,
        views: &mut [NodeView],
        group_usage: &HashMap<GroupKey, Resources>,
    ) {
        let Some(g) = &self.gang else {
            return;
        };
        let family = g.family;
        let mut uids: Vec<(u64, String)> = g
            .members
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| {
                let t = self.pods.get(uid)?;
                matches!(t.stage, Stage::Unscheduled).then(|| (t.seq, uid.clone()))
            })
            .collect();
        uids.sort();
        let waiting: Vec<(String, Arc<Value>)> = uids
            .into_iter()
            .filter_map(|(_, uid)| Some((uid.clone(), self.waiting_pod(&uid)?)))
            .collect();
        if waiting.is_empty() {
            return;
        }
        let members = self.members_of(key);
        let name = format!("{}/{}", key.0, key.1);
        let Some(entry) = g.groups.get(key) else {
            // Volcano leaves pods of a missing group alone; the coscheduling permit rejects them.
            if family == Family::Coscheduling {
                let message = gang::message(
                    family,
                    &name,
                    "",
                    &gang::Blocked::GroupMissing,
                    &GroupSpec::default(),
                    members,
                    views.len(),
                );
                for (uid, pod) in &waiting {
                    self.report_unschedulable(uid, pod, &message);
                }
            }
            return;
        };
        let spec = GroupSpec::of(&entry.object);
        let phase = group_phase(&entry.object).to_owned();
        let none = Resources::new();
        let group = gang::Group {
            family,
            spec: &spec,
            phase: &phase,
            members,
            own_usage: group_usage.get(key).unwrap_or(&none),
        };
        let pods: Vec<&Value> = waiting.iter().map(|(_, p)| &**p).collect();
        let decision = gang::decide(&group, &pods, views);
        let blocked = match decision {
            Decision::Together(placement) => {
                tracing::debug!(group = name, pods = waiting.len(), "gang bound");
                self.stop_waiting(key);
                for ((uid, pod), i) in waiting.iter().zip(placement) {
                    self.bind_and_start(uid, pod, i, views);
                }
                return;
            }
            Decision::Individually => {
                self.stop_waiting(key);
                for (uid, _) in &waiting {
                    self.schedule_one(uid, views);
                }
                return;
            }
            Decision::Wait(blocked) => blocked,
        };
        // Coscheduled members that passed pre-filter wait at permit for their siblings; after
        // the group's timeout they are rejected with the plugin's message and tried again.
        let timed_out = match (
            &blocked,
            self.gang.as_mut().and_then(|g| g.groups.get_mut(key)),
        ) {
            (gang::Blocked::NoFit { .. }, Some(entry)) if family == Family::Coscheduling => {
                let now = Instant::now();
                let since = *entry.waiting_since.get_or_insert(now);
                if now.duration_since(since) >= entry.timeout {
                    entry.timed_out = true;
                    entry.waiting_since = Some(now);
                }
                entry.timed_out.then_some(entry.timeout)
            }
            (_, Some(entry)) => {
                entry.waiting_since = None;
                entry.timed_out = false;
                None
            }
            (_, None) => None,
        };
        for (uid, pod) in &waiting {
            let message = match timed_out {
                Some(timeout) => gang::timeout_message(timeout),
                None => gang::message(
                    family,
                    &name,
                    meta(pod, "name"),
                    &blocked,
                    &spec,
                    members,
                    views.len(),
                ),
            };
            self.report_unschedulable(uid, pod, &message);
        }
    }

    /// The group's members no longer wait at permit.
    fn stop_waiting(&mut self, key: &GroupKey) {
        if let Some(entry) = self.gang.as_mut().and_then(|g| g.groups.get_mut(key)) {
            entry.waiting_since = None;
            entry.timed_out = false;
        }
    }

    /// Sets `PodScheduled=False` with `message`, unless the pod says so already: a gang waits
    /// through many passes, and rewriting the same condition would only wake every watcher.
    fn report_unschedulable(&mut self, uid: &str, pod: &Value, message: &str) {
        let current = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"));
        if current.is_some_and(|c| {
            c["status"] == "False" && c["reason"] == "Unschedulable" && c["message"] == message
        }) {
            return;
        }
        tracing::debug!(pod = meta(pod, "name"), %message, "gang member unschedulable");
        self.write_status(uid, |prev| {
            status::unschedulable_status(prev, message, Timestamp::now())
        });
    }

    /// The members of a group by where they stand, from the pods tracked (no listing).
    fn members_of(&self, key: &GroupKey) -> Members {
        let mut members = Members::default();
        let Some(uids) = self.gang.as_ref().and_then(|g| g.members.get(key)) else {
            return members;
        };
        for t in uids.iter().filter_map(|uid| self.pods.get(uid)) {
            if !t.deleting {
                members.add(&t.phase, t.bound);
            }
        }
        members
    }

    /// Brings the status of every group whose members or spec changed up to date.
    fn sync_groups(&mut self) {
        let Some(g) = &mut self.gang else {
            return;
        };
        if g.stale.is_empty() {
            return;
        }
        let family = g.family;
        let stale: Vec<GroupKey> = g.stale.drain().collect();
        let now = Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| Timestamp::now())
            .to_string();
        for key in stale {
            let Some(entry) = self.gang.as_ref().and_then(|g| g.groups.get(&key)) else {
                continue;
            };
            let min = GroupSpec::of(&entry.object).min_member;
            let previous = entry.object.get("status").cloned();
            let members = self.members_of(&key);
            let status = match family {
                Family::Volcano => gang::volcano_status(previous.as_ref(), min, members),
                Family::Coscheduling => {
                    // Only read on the way out of Pending: the pods are fetched then alone.
                    let owners = (group_phase(&entry.object) == "Pending")
                        .then(|| self.member_pods(&key))
                        .map(|pods| gang::occupied_by(pods.iter().map(|p| &**p)));
                    gang::coscheduling_status(
                        previous.as_ref(),
                        min,
                        members,
                        owners.as_deref(),
                        &now,
                    )
                }
            };
            if previous.as_ref() != Some(&status)
                && !self.write_group_status(&key, |_| status.clone())
                && let Some(g) = &mut self.gang
            {
                g.stale.insert(key);
            }
        }
    }

    /// The stored member pods of a group.
    fn member_pods(&self, key: &GroupKey) -> Vec<Arc<Value>> {
        let Some(uids) = self.gang.as_ref().and_then(|g| g.members.get(key)) else {
            return Vec::new();
        };
        uids.iter()
            .filter_map(|uid| {
                let t = self.pods.get(uid)?;
                self.store
                    .get(&self.pods_t, Some(&t.namespace), &t.name)
                    .ok()
            })
            .collect()
    }

    /// Writes a group's status through the status subresource, computed from the stored one,
    /// retrying on conflicts; the cached group follows, and a new phase triggers a pass.
    /// Returns false when the write did not happen and the group still exists: then a retry is
    /// due in [`GROUP_STATUS_RETRY`] (see `Gang::retry_at`).
    fn write_group_status(
        &mut self,
        key: &GroupKey,
        render: impl Fn(Option<&Value>) -> Value,
    ) -> bool {
        let Some(groups_t) = self.gang.as_ref().map(|g| g.groups_t.clone()) else {
            return true;
        };
        for _ in 0..5 {
            let current = match self.store.get(&groups_t, Some(&key.0), &key.1) {
                Ok(current) => current,
                // Deleted meanwhile: nothing left to write.
                Err(e) if e.reason == "NotFound" => return true,
                Err(e) => {
                    tracing::warn!(group = key.1, namespace = key.0, error = %e, "cannot read podgroup");
                    return self.retry_group_status_later();
                }
            };
            let body = json!({
                "metadata": {"name": key.1, "resourceVersion": meta(&current, "resourceVersion")},
                "status": render(current.get("status")),
            });
            match self
                .store
                .replace(&groups_t, Some(&key.0), &key.1, body, Part::Status)
            {
                Ok(written) => {
                    self.on_group(written);
                    return true;
                }
                Err(e) if e.reason == "Conflict" => continue,
                Err(e) if e.reason == "NotFound" => return true,
                Err(e) => {
                    tracing::warn!(group = key.1, namespace = key.0, error = %e, "cannot write podgroup status");
                    return self.retry_group_status_later();
                }
            }
        }
        tracing::warn!(
            group = key.1,
            namespace = key.0,
            "podgroup status kept conflicting; trying again shortly"
        );
        self.retry_group_status_later()
    }

    /// Sets the retry time of failed group status writes; returns false, for the caller to
    /// return.
    fn retry_group_status_later(&mut self) -> bool {
        if let Some(g) = &mut self.gang {
            let at = Instant::now() + GROUP_STATUS_RETRY;
            g.retry_at = Some(g.retry_at.map_or(at, |t| t.min(at)));
        }
        false
    }

    /// Sets `spec.nodeName`, as the binding subresource does.
    fn bind(&self, pod: &Value, node: &str) -> Result<Arc<Value>, ApiError> {
        self.store.patch(
            &self.pods_t,
            Some(meta(pod, "namespace")),
            meta(pod, "name"),
            Patch::Merge(json!({"spec": {"nodeName": node}})),
            Part::Whole,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::store::DeleteOptions;

    /// Hands every event received so far to the kubelet and runs a scheduling pass, as its
    /// loop does.
    fn drain(k: &mut Kubelet, rx: &mut tokio::sync::broadcast::Receiver<WatchEvent>) {
        while let Ok(e) = rx.try_recv() {
            if e.resource == k.pods_t.key() {
                k.on_event(&e);
            }
            k.schedule();
        }
    }

    fn recount(k: &Kubelet) -> Usage {
        let (pods, _) = k.store.list(&k.pods_t, None);
        Usage::recount(pods.iter().map(|p| &**p), |uid| {
            k.pods.get(uid).and_then(Tracked::group)
        })
    }

    fn pod(name: &str, cpu: &str) -> Value {
        json!({
            "metadata": {"name": name, "annotations": {"sim.tfjob.dev/duration": "1h"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        })
    }

    #[tokio::test]
    async fn the_schedulers_running_totals_match_a_full_recount() {
        let store = Store::new();
        let config = KubeletConfig {
            nodes: 2,
            cpu: "4".into(),
            ..KubeletConfig::default()
        };
        let mut k = Kubelet::new(Arc::clone(&store), config).unwrap();
        k.register_nodes();
        let mut follow = k.resync();
        let rx = &mut follow.pods.rx;
        let pods_t = k.pods_t.clone();
        for i in 0..12 {
            store
                .create(
                    &pods_t,
                    Some("ns"),
                    pod(&format!("p{i}"), ["1", "1500m", "500m"][i % 3]),
                )
                .unwrap();
            drain(&mut k, rx);
            assert_eq!(k.usage, recount(&k), "after creating p{i}");
        }
        let bound = store.count(&pods_t, None, |p| node_name(p).is_some());
        assert!(
            (4..12).contains(&bound),
            "some fit, some wait: {bound} bound"
        );
        // Finishing and deleting pods frees their share; waiting pods take it.
        for name in ["p0", "p1"] {
            let current = store.get(&pods_t, Some("ns"), name).unwrap();
            let mut done = (*current).clone();
            done["status"]["phase"] = json!("Succeeded");
            store
                .replace(&pods_t, Some("ns"), name, done, Part::Status)
                .unwrap();
            drain(&mut k, rx);
            assert_eq!(k.usage, recount(&k), "after {name} finished");
        }
        for name in ["p2", "p3", "p11"] {
            store
                .delete(&pods_t, Some("ns"), name, &DeleteOptions::default())
                .unwrap();
            drain(&mut k, rx);
            assert_eq!(k.usage, recount(&k), "after deleting {name}");
        }
        assert!(
            store.count(&pods_t, None, |p| node_name(p).is_some()) > bound - 3,
            "freed places were given to waiting pods"
        );
        // A relist rebuilds the same totals.
        let before = std::mem::take(&mut k.usage);
        let _follow = k.resync();
        assert_eq!(k.usage, before);
    }

    /// A watch that falls behind (more changes than it buffers before the kubelet reads them)
    /// goes on from the type's history: every pod is tracked, and nothing is listed again.
    #[tokio::test]
    async fn a_watch_that_fell_behind_catches_up_without_listing() {
        let store = Store::new();
        let config = KubeletConfig {
            nodes: 1,
            cpu: "1000000".into(),
            memory: "1000Ti".into(),
            ..KubeletConfig::default()
        };
        let mut k = Kubelet::new(Arc::clone(&store), config).unwrap();
        k.register_nodes();
        let mut follow = k.resync();
        assert_eq!(store.kubelet_lists(), 1);
        let pods_t = k.pods_t.clone();
        let created = 17_000;
        for i in 0..created {
            store
                .create(&pods_t, Some("ns"), pod(&format!("p{i}"), "1m"))
                .unwrap();
        }
        let event = follow.pods.rx.recv().await;
        assert!(matches!(event, Err(RecvError::Lagged(_))), "{event:?}");
        assert_eq!(k.deliver(&mut follow, Followed::Pods, event), Flow::Going);
        assert_eq!(k.pods.len(), created);
        assert_eq!(store.kubelet_lists(), 1, "caught up without listing");
        // The next change comes through the new receiver.
        store
            .create(&pods_t, Some("ns"), pod("last", "1m"))
            .unwrap();
        let event = follow.pods.rx.recv().await;
        assert_eq!(k.deliver(&mut follow, Followed::Pods, event), Flow::Going);
        assert_eq!(k.pods.len(), created + 1);
    }
}
