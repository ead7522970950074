//! The simulated lifecycle of one pod and the `status` a kubelet would report for it.
//!
//! A [`PodSim`] holds what a kubelet knows about a pod it runs (per container: state, last
//! termination, restart count; per pod: when it was scheduled, became ready, failed) and moves
//! through the same steps as a real node: containers created, running, terminated, restarted
//! in place under `OnFailure`/`Always`. [`PodSim::status`] renders it in the shape the API
//! server reports, which is what the operator and its policies read. Pure and clock-free: every
//! step is told the time.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

/// The container the scripted behaviour applies to, as the operator names it.
pub const MAIN_CONTAINER: &str = "tensorflow";

/// The pod's `spec.restartPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The policy of a pod; `Always` when unset, the API server's default.
    pub fn of(pod: &Value) -> RestartPolicy {
        match pod.pointer("/spec/restartPolicy").and_then(Value::as_str) {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }

    fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// A finished container run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub reason: String,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
}

/// The state of one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerState {
    Waiting { reason: String, message: String },
    Running { started_at: Timestamp },
    Terminated(Terminated),
}

/// One container of the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSim {
    pub name: String,
    pub image: String,
    pub state: ContainerState,
    pub last: Option<Terminated>,
    pub restarts: u32,
}

/// How a run of the main container ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    pub exit_code: i32,
    /// The terminated reason; `Completed` or `Error` by exit code when `None`.
    pub reason: Option<String>,
    /// The pod fails as a whole with this `status.reason` (an eviction, a node shutdown).
    pub pod_reason: Option<String>,
}

/// What a kubelet knows about a pod it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSim {
    pub name: String,
    pub namespace: String,
    pub node: String,
    pub host_ip: String,
    pub pod_ip: String,
    pub policy: RestartPolicy,
    pub scheduled_at: Timestamp,
    /// Since when the containers are (not) ready: the conditions' lastTransitionTime.
    pub ready_changed_at: Timestamp,
    pub init: Vec<(String, String)>,
    pub containers: Vec<ContainerSim>,
    /// Index of the container the script drives.
    pub main: usize,
    /// `(reason, message)` of a pod that failed as a whole.
    pub pod_failure: Option<(String, String)>,
}

fn containers(pod: &Value, field: &str) -> Vec<(String, String)> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|c| {
                    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                    (s("name").to_owned(), s("image").to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn time(t: Timestamp) -> String {
    // The API server keeps whole seconds.
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// A stable fake digest, so image and container IDs look like a runtime's.
fn digest(parts: &[&str]) -> String {
    // FNV-1a, four lanes, for 64 hex digits without a hashing dependency.
    (0u64..4)
        .map(|lane| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ lane;
            for b in parts.join("/").bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            format!("{h:016x}")
        })
        .collect()
}

/// The message a kubelet gives with a container waiting reason.
pub fn waiting_message(reason: &str, image: &str, container: &str, pod: &str, ns: &str) -> String {
    match reason {
        "ErrImagePull" => format!(
            "rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/{image}\": not found"
        ),
        "ImagePullBackOff" => format!("Back-off pulling image \"{image}\""),
        "InvalidImageName" => format!(
            "Failed to apply default image tag \"{image}\": couldn't parse image name \"{image}\": invalid reference format"
        ),
        "CreateContainerConfigError" => format!("secret \"{pod}-sim-missing\" not found"),
        "CreateContainerError" => {
            format!("failed to reserve container name \"{container}_{pod}_{ns}\": name is reserved")
        }
        _ => String::new(),
    }
}

/// The message a kubelet gives with a pod-level failure reason.
pub fn pod_failure_message(reason: &str) -> String {
    match reason {
        "Evicted" => "The node was low on resource: memory. Threshold quantity: 100Mi, available: 56Mi. Container tensorflow was using 3Gi, request is 0, has larger consumption of memory.".into(),
        "Shutdown" | "NodeShutdown" => "Pod was rejected as the node is shutting down.".into(),
        "Terminated" => "Pod was terminated in response to imminent node shutdown.".into(),
        other => format!("Pod failed on the node: {other}"),
    }
}

impl PodSim {
    /// A pod just bound to `node`: its containers being created.
    pub fn new(pod: &Value, node: &str, host_ip: &str, pod_ip: &str, now: Timestamp) -> PodSim {
        let list = containers(pod, "containers");
        let main = list
            .iter()
            .position(|(n, _)| n == MAIN_CONTAINER)
            .unwrap_or(0);
        let meta = |k: &str| {
            pod.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        PodSim {
            name: meta("name"),
            namespace: meta("namespace"),
            node: node.into(),
            host_ip: host_ip.into(),
            pod_ip: pod_ip.into(),
            policy: RestartPolicy::of(pod),
            scheduled_at: now,
            ready_changed_at: now,
            init: containers(pod, "initContainers"),
            containers: list
                .into_iter()
                .map(|(name, image)| ContainerSim {
                    name,
                    image,
                    state: ContainerState::Waiting {
                        reason: "ContainerCreating".into(),
                        message: String::new(),
                    },
                    last: None,
                    restarts: 0,
                })
                .collect(),
            main,
            pod_failure: None,
        }
    }

    /// Takes over the containers a `Running` pod already reports (a kubelet restarted on a
    /// restored store): their start times, restart counts and last terminations. True when
    /// some container is running, so the pod resumes instead of being created again.
    pub fn adopt(&mut self, previous: &Value) -> bool {
        if previous.get("phase").and_then(Value::as_str) != Some("Running") {
            return false;
        }
        let reported = previous
            .get("containerStatuses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let ts = |v: &Value| v.as_str().and_then(|s| s.parse::<Timestamp>().ok());
        let terminated = |v: &Value| {
            Some(Terminated {
                exit_code: i32::try_from(v.get("exitCode")?.as_i64()?).ok()?,
                reason: v.get("reason")?.as_str()?.to_owned(),
                started_at: ts(v.get("startedAt")?)?,
                finished_at: ts(v.get("finishedAt")?)?,
            })
        };
        let mut running = false;
        for c in &mut self.containers {
            let Some(r) = reported.iter().find(|r| r["name"] == c.name.as_str()) else {
                continue;
            };
            c.restarts = r["restartCount"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0);
            c.last = terminated(&r["lastState"]["terminated"]);
            if let Some(started_at) = ts(&r["state"]["running"]["startedAt"]) {
                c.state = ContainerState::Running { started_at };
                running = true;
            } else if let Some(t) = terminated(&r["state"]["terminated"]) {
                c.state = ContainerState::Terminated(t);
            }
        }
        if let Some(since) = previous
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| ts(&c["lastTransitionTime"]))
        {
            self.ready_changed_at = since;
        }
        if let Some(start) = previous.get("startTime").and_then(ts) {
            self.scheduled_at = start;
        }
        running
    }

    /// The main container keeps waiting with `reason` (an image that cannot be pulled, ...):
    /// the pod stays `Pending`.
    pub fn stuck(&mut self, reason: &str, now: Timestamp) {
        let (pod, ns) = (self.name.clone(), self.namespace.clone());
        if let Some(c) = self.containers.get_mut(self.main) {
            c.state = ContainerState::Waiting {
                reason: reason.into(),
                message: waiting_message(reason, &c.image, &c.name, &pod, &ns),
            };
        }
        self.ready_changed_at = now;
    }

    /// Every container still waiting starts.
    pub fn start(&mut self, now: Timestamp) {
        for c in &mut self.containers {
            if matches!(c.state, ContainerState::Waiting { .. }) {
                c.state = ContainerState::Running { started_at: now };
            }
        }
        self.ready_changed_at = now;
    }

    /// The running containers end, the main one as `ending` says and the others with 0; the
    /// restart policy restarts some in place. True when a container restarted (a new run).
    pub fn finish(&mut self, ending: &Ending, now: Timestamp) -> bool {
        if let Some(reason) = &ending.pod_reason {
            // A pod-level failure kills every container and restarts nothing.
            for c in &mut self.containers {
                if let ContainerState::Running { started_at } = c.state {
                    c.state = ContainerState::Terminated(Terminated {
                        exit_code: ending.exit_code,
                        reason: "Error".into(),
                        started_at,
                        finished_at: now,
                    });
                }
            }
            self.pod_failure = Some((reason.clone(), pod_failure_message(reason)));
            self.ready_changed_at = now;
            return false;
        }
        let mut restarted = false;
        for (i, c) in self.containers.iter_mut().enumerate() {
            let ContainerState::Running { started_at } = c.state else {
                continue;
            };
            let (exit_code, reason) = if i == self.main {
                (ending.exit_code, ending.reason.clone())
            } else {
                (0, None)
            };
            let reason = reason
                .unwrap_or_else(|| if exit_code == 0 { "Completed" } else { "Error" }.to_owned());
            let done = Terminated {
                exit_code,
                reason,
                started_at,
                finished_at: now,
            };
            if self.policy.restarts(exit_code) {
                c.last = Some(done);
                c.restarts += 1;
                c.state = ContainerState::Running { started_at: now };
                restarted = true;
            } else {
                c.state = ContainerState::Terminated(done);
            }
        }
        self.ready_changed_at = now;
        restarted
    }

    /// `Pending`, `Running`, `Succeeded` or `Failed`, by the kubelet's rules.
    pub fn phase(&self) -> &'static str {
        if self.pod_failure.is_some() {
            return "Failed";
        }
        let states = || self.containers.iter().map(|c| &c.state);
        if states().any(|s| matches!(s, ContainerState::Waiting { .. })) {
            // Some container never started yet.
            if states().all(|s| matches!(s, ContainerState::Waiting { .. })) {
                return "Pending";
            }
            return "Running";
        }
        if states().any(|s| matches!(s, ContainerState::Running { .. })) {
            return "Running";
        }
        if states().all(|s| matches!(s, ContainerState::Terminated(t) if t.exit_code == 0)) {
            "Succeeded"
        } else {
            "Failed"
        }
    }

    /// Whether the pod is done for good.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    fn unready(&self) -> Vec<&str> {
        self.containers
            .iter()
            .filter(|c| !matches!(c.state, ContainerState::Running { .. }))
            .map(|c| c.name.as_str())
            .collect()
    }

    fn condition(type_: &str, ok: bool, reason: &str, message: &str, at: Timestamp) -> Value {
        let mut c = json!({
            "type": type_,
            "status": if ok { "True" } else { "False" },
            "lastProbeTime": null,
            "lastTransitionTime": time(at),
        });
        if !reason.is_empty() {
            c["reason"] = json!(reason);
        }
        if !message.is_empty() {
            c["message"] = json!(message);
        }
        c
    }

    /// A container ID per run, as a runtime creates a new container for each.
    fn container_id(&self, c: &ContainerSim, started_at: Timestamp) -> String {
        format!(
            "containerd://{}",
            digest(&[&self.namespace, &self.name, &c.name, &time(started_at)])
        )
    }

    fn container_status(&self, c: &ContainerSim) -> Value {
        let terminated = |t: &Terminated| {
            json!({"terminated": {
                "exitCode": t.exit_code,
                "reason": t.reason,
                "startedAt": time(t.started_at),
                "finishedAt": time(t.finished_at),
                "containerID": self.container_id(c, t.started_at),
            }})
        };
        let (state, started, container_id) = match &c.state {
            ContainerState::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if !message.is_empty() {
                    w["message"] = json!(message);
                }
                (json!({ "waiting": w }), false, None)
            }
            ContainerState::Running { started_at } => (
                json!({"running": {"startedAt": time(*started_at)}}),
                true,
                Some(self.container_id(c, *started_at)),
            ),
            ContainerState::Terminated(t) => (
                terminated(t),
                false,
                Some(self.container_id(c, t.started_at)),
            ),
        };
        // An image is pulled once a container of it was created.
        let image_id = if container_id.is_some() || c.restarts > 0 {
            format!("docker.io/{}@sha256:{}", c.image, digest(&[&c.image]))
        } else {
            String::new()
        };
        let mut s = json!({
            "name": c.name,
            "image": c.image,
            "imageID": image_id,
            "ready": started,
            "started": started,
            "restartCount": c.restarts,
            "state": state,
            "lastState": c.last.as_ref().map(terminated).unwrap_or_else(|| json!({})),
        });
        if let Some(id) = container_id {
            s["containerID"] = json!(id);
        }
        s
    }

    /// The pod's `status` as the kubelet reports it. `previous` (the stored status) keeps the
    /// fields and conditions it does not own, such as `qosClass` or readiness gates.
    pub fn status(&self, previous: Option<&Value>) -> Value {
        let phase = self.phase();
        let at = self.ready_changed_at;
        let sched = self.scheduled_at;
        let unready = self.unready();
        let (ready, ready_reason, ready_message) = match phase {
            "Succeeded" => (false, "PodCompleted", String::new()),
            "Failed" => (false, "PodFailed", String::new()),
            _ if unready.is_empty() => (true, "", String::new()),
            _ => (
                false,
                "ContainersNotReady",
                format!("containers with unready status: [{}]", unready.join(" ")),
            ),
        };
        let initialized_reason = if phase == "Succeeded" {
            "PodCompleted"
        } else {
            ""
        };
        let mut conditions = Vec::new();
        if let Some((reason, message)) = &self.pod_failure
            && reason == "Evicted"
        {
            conditions.push(Self::condition(
                "DisruptionTarget",
                true,
                "TerminationByKubelet",
                message,
                at,
            ));
        }
        conditions.extend([
            Self::condition("Initialized", true, initialized_reason, "", sched),
            Self::condition("Ready", ready, ready_reason, &ready_message, at),
            Self::condition("ContainersReady", ready, ready_reason, &ready_message, at),
            Self::condition("PodScheduled", true, "", "", sched),
        ]);
        let ours: Vec<String> = conditions
            .iter()
            .filter_map(|c| c["type"].as_str().map(str::to_owned))
            .collect();
        if let Some(old) = previous
            .and_then(|p| p.get("conditions"))
            .and_then(Value::as_array)
        {
            conditions.extend(
                old.iter()
                    .filter(|c| {
                        c["type"]
                            .as_str()
                            .is_some_and(|t| !ours.iter().any(|o| o == t))
                    })
                    .cloned(),
            );
        }
        let mut status: Map<String, Value> = previous
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for field in ["reason", "message"] {
            status.remove(field);
        }
        status.insert("phase".into(), json!(phase));
        status.insert("conditions".into(), Value::Array(conditions));
        status.insert("hostIP".into(), json!(self.host_ip));
        status.insert("hostIPs".into(), json!([{"ip": self.host_ip}]));
        status.insert("podIP".into(), json!(self.pod_ip));
        status.insert("podIPs".into(), json!([{"ip": self.pod_ip}]));
        status.insert("startTime".into(), json!(time(sched)));
        if !self.init.is_empty() {
            // Init containers are simulated as having completed at once.
            let init: Vec<Value> = self
                .init
                .iter()
                .map(|(name, image)| {
                    json!({
                        "name": name, "image": image,
                        "imageID": format!("docker.io/{image}@sha256:{}", digest(&[image])),
                        "containerID": format!("containerd://{}", digest(&[&self.name, name])),
                        "ready": true, "started": false, "restartCount": 0,
                        "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                            "startedAt": time(sched), "finishedAt": time(sched)}},
                        "lastState": {},
                    })
                })
                .collect();
            status.insert("initContainerStatuses".into(), Value::Array(init));
        }
        status.insert(
            "containerStatuses".into(),
            Value::Array(
                self.containers
                    .iter()
                    .map(|c| self.container_status(c))
                    .collect(),
            ),
        );
        if let Some((reason, message)) = &self.pod_failure {
            status.insert("reason".into(), json!(reason));
            status.insert("message".into(), json!(message));
        }
        Value::Object(status)
    }
}

/// The `PodScheduled=False` condition of a pod the scheduler cannot place, keeping the
/// transition time of an identical earlier verdict so repeated attempts do not churn.
pub fn unschedulable_status(previous: Option<&Value>, message: &str, now: Timestamp) -> Value {
    let mut status: Map<String, Value> = previous
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let old = conditions.iter().position(|c| c["type"] == "PodScheduled");
    let since = old
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == "False" && c["reason"] == "Unschedulable")
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_owned))
        .unwrap_or_else(|| time(now));
    let condition = json!({
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": message, "lastProbeTime": null, "lastTransitionTime": since,
    });
    match old {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    status.insert("phase".into(), json!("Pending"));
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn pod(policy: &str) -> Value {
        json!({
            "metadata": {"name": "mnist-worker-0", "namespace": "ml"},
            "spec": {"restartPolicy": policy, "containers": [
                {"name": "log-shipper", "image": "fluent-bit:3"},
                {"name": "tensorflow", "image": "tf:2"},
            ]}
        })
    }

    fn sim(policy: &str) -> PodSim {
        PodSim::new(&pod(policy), "sim-node-0", "10.0.0.1", "10.244.0.1", at(0))
    }

    fn ending(code: i32) -> Ending {
        Ending {
            exit_code: code,
            reason: None,
            pod_reason: None,
        }
    }

    fn condition<'a>(status: &'a Value, t: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap_or_else(|| panic!("no {t} in {status}"))
    }

    fn main(status: &Value) -> &Value {
        &status["containerStatuses"][1]
    }

    #[test]
    fn a_new_pod_is_pending_with_containers_being_created() {
        let s = sim("Never");
        assert_eq!(s.main, 1, "the tensorflow container, wherever it is");
        let status = s.status(None);
        assert_eq!(status["phase"], "Pending");
        assert_eq!(
            main(&status)["state"]["waiting"]["reason"],
            "ContainerCreating"
        );
        assert_eq!(main(&status)["imageID"], "");
        let ready = condition(&status, "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(
            ready["message"],
            "containers with unready status: [log-shipper tensorflow]"
        );
        assert_eq!(condition(&status, "PodScheduled")["status"], "True");
        assert_eq!(status["startTime"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn a_run_goes_from_running_to_succeeded() {
        let mut s = sim("Never");
        s.start(at(1));
        let running = s.status(None);
        assert_eq!(running["phase"], "Running");
        assert_eq!(
            main(&running)["state"]["running"]["startedAt"],
            "2026-01-01T00:00:01Z"
        );
        assert_eq!(main(&running)["ready"], true);
        for t in ["Initialized", "Ready", "ContainersReady", "PodScheduled"] {
            assert_eq!(condition(&running, t)["status"], "True", "{t}");
        }
        assert_eq!(
            condition(&running, "Ready")["lastTransitionTime"],
            "2026-01-01T00:00:01Z"
        );
        assert!(!s.finish(&ending(0), at(4)));
        let done = s.status(Some(&running));
        assert_eq!(done["phase"], "Succeeded");
        let t = &main(&done)["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(0), Some("Completed"))
        );
        assert_eq!(t["finishedAt"], "2026-01-01T00:00:04Z");
        assert_eq!(condition(&done, "Ready")["reason"], "PodCompleted");
        assert!(s.is_terminal());
    }

    #[test]
    fn failures_end_the_pod_under_never() {
        let mut s = sim("Never");
        s.start(at(1));
        s.finish(
            &Ending {
                exit_code: 137,
                reason: Some("OOMKilled".into()),
                pod_reason: None,
            },
            at(2),
        );
        let status = s.status(None);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(main(&status)["state"]["terminated"]["reason"], "OOMKilled");
        assert_eq!(
            status["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
            "the sidecar exits cleanly"
        );
        assert_eq!(condition(&status, "Ready")["reason"], "PodFailed");
        let mut error = sim("Never");
        error.start(at(1));
        error.finish(&ending(1), at(2));
        assert_eq!(
            main(&error.status(None))["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn on_failure_restarts_the_failed_container_in_place() {
        let mut s = sim("OnFailure");
        s.start(at(1));
        assert!(s.finish(&ending(1), at(3)), "restarted");
        let status = s.status(None);
        assert_eq!(status["phase"], "Running");
        let c = main(&status);
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(c["state"]["running"]["startedAt"], "2026-01-01T00:00:03Z");
        assert_eq!(
            status["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
            "the sidecar succeeded and is not restarted"
        );
        assert!(!s.finish(&ending(0), at(5)), "success is final");
        let done = s.status(None);
        assert_eq!(done["phase"], "Succeeded");
        assert_eq!(main(&done)["restartCount"], 1);
        assert_eq!(main(&done)["lastState"]["terminated"]["exitCode"], 1);
    }

    #[test]
    fn always_restarts_after_success_too() {
        let mut s = sim("Always");
        s.start(at(1));
        assert!(s.finish(&ending(0), at(2)));
        assert_eq!(s.phase(), "Running");
        assert_eq!(s.containers[0].restarts, 1);
        assert_eq!(s.containers[1].last.as_ref().unwrap().reason, "Completed");
        assert_eq!(RestartPolicy::of(&json!({})), RestartPolicy::Always);
    }

    #[test]
    fn a_stuck_container_keeps_the_pod_pending() {
        let mut s = sim("Never");
        s.stuck("ImagePullBackOff", at(7));
        let status = s.status(None);
        assert_eq!(status["phase"], "Pending");
        let w = &main(&status)["state"]["waiting"];
        assert_eq!(w["reason"], "ImagePullBackOff");
        assert_eq!(w["message"], "Back-off pulling image \"tf:2\"");
        let ready = condition(&status, "ContainersReady");
        assert_eq!(ready["reason"], "ContainersNotReady");
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:07Z");
        assert_eq!(main(&status)["started"], false);
    }

    #[test]
    fn a_pod_level_failure_kills_every_container() {
        let mut s = sim("OnFailure");
        s.start(at(1));
        let evicted = Ending {
            exit_code: 137,
            reason: None,
            pod_reason: Some("Evicted".into()),
        };
        assert!(!s.finish(&evicted, at(2)), "nothing restarts");
        let status = s.status(None);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(status["reason"], "Evicted");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("The node was low on resource")
        );
        for c in status["containerStatuses"].as_array().unwrap() {
            assert_eq!(c["state"]["terminated"]["exitCode"], 137);
        }
        assert_eq!(condition(&status, "DisruptionTarget")["status"], "True");
    }

    #[test]
    fn foreign_fields_and_conditions_survive() {
        let mut s = sim("Never");
        s.start(at(1));
        let previous = json!({"qosClass": "BestEffort", "reason": "stale", "conditions": [
            {"type": "example.com/gate", "status": "True"},
            {"type": "Ready", "status": "False"},
        ]});
        let status = s.status(Some(&previous));
        assert_eq!(status["qosClass"], "BestEffort");
        assert!(status.get("reason").is_none());
        assert_eq!(condition(&status, "example.com/gate")["status"], "True");
        assert_eq!(condition(&status, "Ready")["status"], "True");
    }

    #[test]
    fn a_running_pod_is_adopted_where_it_was() {
        let mut before = sim("OnFailure");
        before.start(at(1));
        before.finish(&ending(1), at(5));
        let reported = before.status(None);
        let mut after = sim("OnFailure");
        assert!(after.adopt(&reported));
        assert_eq!(after.status(None), reported);
        assert!(!sim("Never").adopt(&json!({"phase": "Pending"})));
    }

    #[test]
    fn init_containers_are_reported_completed() {
        let mut p = pod("Never");
        p["spec"]["initContainers"] = json!([{"name": "fetch", "image": "busybox"}]);
        let s = PodSim::new(&p, "n", "h", "i", at(0));
        let status = s.status(None);
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    #[test]
    fn unschedulable_keeps_its_transition_time() {
        let first =
            unschedulable_status(None, "0/1 nodes are available: 1 Insufficient cpu.", at(1));
        let again = unschedulable_status(
            Some(&first),
            "0/2 nodes are available: 2 Insufficient cpu.",
            at(9),
        );
        assert_eq!(again["phase"], "Pending");
        let c = condition(&again, "PodScheduled");
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:01Z");
        assert_eq!(c["message"], "0/2 nodes are available: 2 Insufficient cpu.");
        assert_eq!(again["conditions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn waiting_messages_name_the_image_or_container() {
        assert!(waiting_message("ErrImagePull", "tf:2", "c", "p", "n").contains("docker.io/tf:2"));
        assert!(waiting_message("CreateContainerError", "tf:2", "c", "p", "n").contains("c_p_n"));
        assert_eq!(
            waiting_message("ContainerCreating", "tf:2", "c", "p", "n"),
            ""
        );
        assert_eq!(
            pod_failure_message("NodeShutdown"),
            "Pod was rejected as the node is shutting down."
        );
    }
}
