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
//! ([`log_script`]) and an exit line into the store's [`PodLogs`](crate::logs::PodLogs).
//!
//! The pure parts (annotation parsing, scheduling arithmetic, status rendering) live in the
//! submodules; this file is the event loop: a watch on pods, one timer per pod, and writes
//! through the store's status subresource. All per-pod state is keyed by uid, so a deleted or
//! recreated pod takes its timer with it.

pub mod log_script;
pub mod schedule;
pub mod script;
pub mod status;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::store::{EventType, Patch, ResourceType, Store, WatchEvent};
use log_script::{LogEvent, LogScript};
use schedule::{GPU, NodeView, Resources};
use script::{PendingReason, Script};
use status::{Ending, PodSim};

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
        }
    }
}

/// Runs the simulation in the background until the handle is aborted. All its state and
/// timers live in the task, so aborting leaves nothing behind; [`run`] takes a shutdown signal
/// instead.
pub fn spawn(store: Arc<Store>, config: KubeletConfig) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store, config, std::future::pending()))
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
    let Some(mut k) = Kubelet::new(store, config) else {
        tracing::error!("the store serves no pods or nodes; the simulated kubelet stops");
        return;
    };
    k.register_nodes();
    let mut rx = k.resync();
    tokio::pin!(shutdown);
    loop {
        k.schedule();
        let deadline = k.next_deadline();
        tokio::select! {
            () = &mut shutdown => break,
            event = rx.recv() => match event {
                Ok(e) if e.resource == k.pods_t.key() => k.on_event(&e),
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "the simulated kubelet fell behind; relisting pods");
                    rx = k.resync();
                }
                Err(RecvError::Closed) => break,
            },
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                k.fire(Instant::now());
            }
        }
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
    /// What the containers print.
    log: LogPlan,
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
    events_t: Option<ResourceType>,
    nodes: Vec<Node>,
    /// Every pod seen, by uid.
    pods: HashMap<String, Tracked>,
    /// Runs started per replica, across container restarts and pod recreations.
    runs: HashMap<RunKey, u32>,
    seq: u64,
    /// Something that can change a scheduling verdict happened since the last pass.
    dirty: bool,
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
        let events_t = store.resource("", "events");
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
        Some(Kubelet {
            store,
            config,
            pods_t,
            nodes_t,
            events_t,
            nodes,
            pods: HashMap::new(),
            runs: HashMap::new(),
            seq: 0,
            dirty: false,
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

    /// Lists every pod and subscribes for later changes, forgetting pods that are gone. Used at
    /// start and after falling behind the watch.
    fn resync(&mut self) -> tokio::sync::broadcast::Receiver<WatchEvent> {
        loop {
            let (items, rv) = self.store.list(&self.pods_t, None);
            let (past, rx) = match self.store.watch(&self.pods_t.key(), None, rv) {
                Ok(w) => w,
                Err(e) => {
                    // Cannot happen right after a list, but a relist is always safe.
                    tracing::warn!(error = %e, "watch after list refused; relisting");
                    continue;
                }
            };
            let alive: std::collections::HashSet<&str> =
                items.iter().map(|p| meta(p, "uid")).collect();
            self.pods.retain(|uid, _| alive.contains(uid.as_str()));
            self.store.logs().retain_pods(|uid| alive.contains(uid));
            for pod in &items {
                self.observe(pod);
            }
            for e in &past {
                self.on_event(e);
            }
            self.dirty = true;
            return rx;
        }
    }

    fn on_event(&mut self, e: &WatchEvent) {
        let uid = meta(&e.object, "uid");
        if e.type_ == EventType::Deleted {
            self.store.logs().remove_pod(uid);
            if self.pods.remove(uid).is_some() {
                // Whatever it held is free now.
                self.dirty = true;
            }
            return;
        }
        // The event may be older than our own later writes: act on the current object.
        let (ns, name) = (meta(&e.object, "namespace"), meta(&e.object, "name"));
        match self.store.get(&self.pods_t, Some(ns), name) {
            Ok(pod) => {
                if meta(&pod, "uid") != uid {
                    self.store.logs().remove_pod(uid);
                    if self.pods.remove(uid).is_some() {
                        self.dirty = true;
                    }
                }
                self.observe(&pod);
            }
            Err(_) => {
                self.store.logs().remove_pod(uid);
                if self.pods.remove(uid).is_some() {
                    self.dirty = true;
                }
            }
        }
    }

    fn is_ours(&self, node: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.view.name == node)
    }

    /// Takes note of the current state of a pod.
    fn observe(&mut self, pod: &Value) {
        let uid = meta(pod, "uid").to_owned();
        if let Some(t) = self.pods.get_mut(&uid) {
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
            self.pods.insert(uid, t);
            return;
        }
        let ours = match node_name(pod) {
            Some(node) => match self.is_ours(node) {
                Some(i) => Some(i),
                None => {
                    let t = self.tracked(pod, Script::clean(Duration::ZERO), Stage::Done);
                    self.pods.insert(uid, t);
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
                self.pods.insert(uid.clone(), t);
                self.start(&uid, pod, i);
            }
            None if t.run.pending_reason == Some(PendingReason::Unschedulable) => {
                t.stage = Stage::NeverScheduled;
                let message = scripted_unschedulable(self.nodes.len());
                self.pods.insert(uid.clone(), t);
                self.write_status(&uid, |prev| {
                    status::unschedulable_status(prev, &message, Timestamp::now())
                });
            }
            None => {
                self.pods.insert(uid, t);
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
        Tracked {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            seq: self.seq,
            replica,
            run: script.clone(),
            script,
            stage,
            log: LogPlan::default(),
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
        let Some(events_t) = &self.events_t else {
            return;
        };
        let now = Timestamp::now().to_string();
        let ns = meta(pod, "namespace");
        let event = json!({
            "metadata": {
                "name": format!("{}.{}", meta(pod, "name"), uuid::Uuid::new_v4().simple()),
                "namespace": ns,
            },
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": ns,
                "name": meta(pod, "name"), "uid": meta(pod, "uid"),
            },
            "reason": "InvalidSimulationScript",
            "message": message,
            "type": "Warning",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let Err(e) = self.store.create(events_t, Some(ns), event) {
            tracing::debug!(error = %e, "cannot record the event");
        }
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
    }

    /// The earliest timer of any pod.
    fn next_deadline(&self) -> Option<Instant> {
        self.pods
            .values()
            .flat_map(|t| {
                let step = match &t.stage {
                    Stage::Bound {
                        timer: Some((at, _)),
                        ..
                    } => Some(*at),
                    _ => None,
                };
                [step, t.log.tick.map(|(at, _, _)| at)]
            })
            .flatten()
            .min()
    }

    /// Runs every timer due by `now`.
    fn fire(&mut self, now: Instant) {
        let due: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| {
                matches!(&t.stage, Stage::Bound { timer: Some((at, _)), .. } if *at <= now)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in due {
            self.step(&uid);
        }
        let ticks: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| t.log.tick.is_some_and(|(at, _, _)| at <= now))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in ticks {
            self.tick_log(&uid);
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
                    self.store.logs().remove_pod(uid);
                    self.pods.remove(uid);
                    self.dirty = true;
                    return;
                }
            };
            let mut body = current.clone();
            body["status"] = render(current.get("status"));
            match self
                .store
                .replace(&self.pods_t, Some(&ns), &name, body, true)
            {
                Ok(_) => return,
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
    /// anything changed since the last.
    fn schedule(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let mut waiting: Vec<(u64, String)> = self
            .pods
            .iter()
            .filter(|(_, t)| matches!(t.stage, Stage::Unscheduled))
            .map(|(uid, t)| (t.seq, uid.clone()))
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort();
        let mut views: Vec<NodeView> = self.nodes.iter().map(|n| n.view.clone()).collect();
        let (pods, _) = self.store.list(&self.pods_t, None);
        for pod in pods.iter().filter(|p| !finished(p)) {
            if let Some(i) = node_name(pod).and_then(|n| self.is_ours(n)) {
                schedule::add_usage(&mut views[i], &schedule::pod_requests(pod));
            }
        }
        for (_, uid) in waiting {
            let Some(t) = self.pods.get(&uid) else {
                continue;
            };
            let pod = match self.store.get(&self.pods_t, Some(&t.namespace), &t.name) {
                Ok(p) if meta(&p, "uid") == uid && node_name(&p).is_none() => p,
                // Gone, replaced or bound meanwhile: its own event says what to do.
                _ => continue,
            };
            match schedule::choose_node(&pod, &views) {
                Ok(i) => {
                    if let Err(e) = self.bind(&pod, &views[i].name) {
                        tracing::warn!(pod = t.name, error = %e, "binding failed; retrying later");
                        self.dirty = true;
                        continue;
                    }
                    schedule::add_usage(&mut views[i], &schedule::pod_requests(&pod));
                    // Bind changed the object: start from the stored one.
                    let bound = self
                        .store
                        .get(
                            &self.pods_t,
                            Some(meta(&pod, "namespace")),
                            meta(&pod, "name"),
                        )
                        .unwrap_or(pod);
                    self.start(&uid, &bound, i);
                }
                Err(message) => {
                    tracing::debug!(pod = t.name, %message, "pod unschedulable");
                    self.write_status(&uid, |prev| {
                        status::unschedulable_status(prev, &message, Timestamp::now())
                    });
                }
            }
        }
    }

    /// Sets `spec.nodeName`, as the binding subresource does.
    fn bind(&self, pod: &Value, node: &str) -> Result<Value, ApiError> {
        self.store.patch(
            &self.pods_t,
            Some(meta(pod, "namespace")),
            meta(pod, "name"),
            Patch::Merge(json!({"spec": {"nodeName": node}})),
            false,
        )
    }
}
