//! The simulated scheduler and kubelet on a bare store: pods created with `sim.tfjob.dev/*`
//! annotations go through the statuses a real node reports (scheduled, created, running,
//! terminated, restarted in place), fail the ways their script says, wait for GPUs, and stay
//! stuck on image pulls. Waits poll the store with generous timeouts; what happened on the way
//! is checked in the store's watch history rather than caught in the act, so nothing depends on
//! timing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tfjob_cluster::kubelet::script::{
    DURATION, EXIT_CODE, FAIL_TIMES, JOB_NAME_LABEL, PENDING_REASON, POD_REASON,
    REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL, TERMINATED_REASON,
};
use tfjob_cluster::kubelet::{self, KubeletConfig};
use tfjob_cluster::storage::store::DeleteOptions;
use tfjob_cluster::{ResourceType, Store};

const NS: &str = "ml";

struct Cluster {
    store: Arc<Store>,
    pods: ResourceType,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kubelet.abort();
    }
}

fn config() -> KubeletConfig {
    KubeletConfig {
        default_duration: Duration::from_millis(200),
        startup: Duration::from_millis(20),
        ..KubeletConfig::default()
    }
}

fn cluster(config: KubeletConfig) -> Cluster {
    let store = Store::new();
    let pods = store.resource("", "pods").unwrap();
    let kubelet = kubelet::spawn(Arc::clone(&store), config);
    Cluster {
        store,
        pods,
        kubelet,
    }
}

/// A pod as the operator builds it, with a `tensorflow` container.
fn pod(name: &str, policy: &str, annotations: Value) -> Value {
    json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"restartPolicy": policy, "containers": [{"name": "tensorflow", "image": "tf:2"}]}
    })
}

/// A replica of job `job` (worker `index`).
fn replica(job: &str, index: u32, policy: &str, annotations: Value) -> Value {
    let mut p = pod(&format!("{job}-worker-{index}"), policy, annotations);
    p["metadata"]["labels"] = json!({
        JOB_NAME_LABEL: job, REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: index.to_string(),
    });
    p
}

fn with_gpus(mut p: Value, gpus: u32) -> Value {
    p["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": gpus}});
    p
}

impl Cluster {
    fn create(&self, pod: Value) -> String {
        let created = self.store.create(&self.pods, Some(NS), pod).unwrap();
        created["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    fn get(&self, name: &str) -> Option<Value> {
        self.store
            .get(&self.pods, Some(NS), name)
            .ok()
            .map(Arc::unwrap_or_clone)
    }

    fn delete(&self, name: &str) {
        self.store
            .delete(&self.pods, Some(NS), name, &DeleteOptions::default())
            .unwrap();
    }

    /// Waits for pod `name` to reach a terminal phase.
    async fn finished(&self, name: &str) -> Value {
        eventually(&format!("{name} finished"), || {
            let p = self.get(name)?;
            matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
        })
        .await
    }

    /// Every stored version of pod `name` so far, oldest first.
    fn history(&self, name: &str) -> Vec<Value> {
        let (events, _) = self.store.watch("/pods", Some(NS), 1).unwrap();
        events
            .into_iter()
            .filter(|e| e.object["metadata"]["name"] == name)
            .map(|e| (*e.object).clone())
            .collect()
    }
}

/// Polls `check` until it returns `Some`, or fails after a generous timeout.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn main_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

fn terminated(pod: &Value) -> &Value {
    &main_status(pod)["state"]["terminated"]
}

fn condition<'a>(pod: &'a Value, type_: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn condition_is(pod: &Value, type_: &str, status: &str) -> bool {
    condition(pod, type_).is_some_and(|c| c["status"] == status)
}

#[tokio::test]
async fn a_pod_runs_through_creation_and_running_to_succeeded() {
    let c = cluster(config());
    let nodes = c.store.resource("", "nodes").unwrap();
    eventually("the nodes", || {
        let (n, _) = c.store.list(&nodes, None);
        (n.len() == 2).then_some(())
    })
    .await;
    let node = c.store.get(&nodes, None, "sim-node-1").unwrap();
    assert_eq!(node["status"]["allocatable"]["nvidia.com/gpu"], "2");
    assert_eq!(
        node["status"]["allocatable"]["memory"].as_str(),
        Some("34359738368")
    );

    c.create(pod("mnist", "Never", json!({DURATION: "300ms"})));
    let done = c.finished("mnist").await;
    assert_eq!(phase(&done), "Succeeded");
    assert!(
        done["spec"]["nodeName"]
            .as_str()
            .unwrap()
            .starts_with("sim-node-")
    );
    let t = terminated(&done);
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    assert!(t["startedAt"].is_string() && t["finishedAt"].is_string());
    assert_eq!(main_status(&done)["restartCount"], 0);
    assert!(condition_is(&done, "PodScheduled", "True"));
    assert_eq!(condition(&done, "Ready").unwrap()["reason"], "PodCompleted");

    let history = c.history("mnist");
    assert!(
        history.iter().any(|p| phase(p) == "Pending"
            && main_status(p)["state"]["waiting"]["reason"] == "ContainerCreating"
            && condition_is(p, "PodScheduled", "True")),
        "created first: {history:#?}"
    );
    let running = history
        .iter()
        .find(|p| phase(p) == "Running")
        .expect("running before finishing");
    assert_eq!(main_status(running)["ready"], true);
    assert!(main_status(running)["state"]["running"]["startedAt"].is_string());
    for t in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        let cond = condition(running, t).unwrap();
        assert_eq!(cond["status"], "True", "{t}");
        assert!(cond["lastTransitionTime"].is_string(), "{t}");
    }
    assert!(running["status"]["podIP"].is_string());
}

#[tokio::test]
async fn a_non_zero_exit_code_fails_the_pod() {
    let c = cluster(config());
    c.create(pod("bad", "Never", json!({EXIT_CODE: "1"})));
    let done = c.finished("bad").await;
    assert_eq!(phase(&done), "Failed");
    assert_eq!(terminated(&done)["exitCode"], 1);
    assert_eq!(terminated(&done)["reason"], "Error");
}

#[tokio::test]
async fn on_failure_restarts_the_container_in_place_until_fail_times_runs() {
    let c = cluster(config());
    let uid = c.create(pod(
        "flaky",
        "OnFailure",
        json!({EXIT_CODE: "1", FAIL_TIMES: "2", DURATION: "150ms"}),
    ));
    let done = c.finished("flaky").await;
    assert_eq!(phase(&done), "Succeeded");
    assert_eq!(
        done["metadata"]["uid"],
        uid.as_str(),
        "the same pod throughout"
    );
    let status = main_status(&done);
    assert_eq!(status["restartCount"], 2);
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(status["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(terminated(&done)["exitCode"], 0);

    let history = c.history("flaky");
    assert!(
        history.iter().all(|p| phase(p) != "Failed"),
        "restarts keep the pod alive"
    );
    assert!(history.iter().any(|p| phase(p) == "Running"
        && main_status(p)["restartCount"] == 1
        && main_status(p)["state"]["running"].is_object()
        && main_status(p)["lastState"]["terminated"]["exitCode"] == 1));
}

#[tokio::test]
async fn always_restarts_after_success_too() {
    let c = cluster(config());
    c.create(pod("server", "Always", json!({DURATION: "50ms"})));
    let restarted = eventually("a restart", || {
        let p = c.get("server")?;
        (main_status(&p)["restartCount"].as_u64() >= Some(1)).then_some(p)
    })
    .await;
    assert_eq!(
        main_status(&restarted)["lastState"]["terminated"]["reason"],
        "Completed"
    );
    assert!(
        c.history("server")
            .iter()
            .all(|p| !matches!(phase(p), "Succeeded" | "Failed"))
    );
}

#[tokio::test]
async fn gpu_pods_wait_as_unschedulable_until_gpus_free_up() {
    let c = cluster(KubeletConfig {
        nodes: 2,
        gpus_per_node: 1,
        ..config()
    });
    for name in ["a", "b"] {
        c.create(with_gpus(pod(name, "Never", json!({DURATION: "2s"})), 1));
    }
    eventually("both GPUs taken", || {
        let bound = ["a", "b"]
            .iter()
            .filter_map(|n| c.get(n))
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count();
        (bound == 2).then_some(())
    })
    .await;
    assert_ne!(
        c.get("a").unwrap()["spec"]["nodeName"],
        c.get("b").unwrap()["spec"]["nodeName"]
    );
    c.create(with_gpus(
        pod("waiting", "Never", json!({DURATION: "100ms"})),
        1,
    ));
    c.create(with_gpus(pod("huge", "Never", json!({})), 4));

    let done = c.finished("waiting").await;
    assert_eq!(phase(&done), "Succeeded");
    let message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.";
    let history = c.history("waiting");
    let unschedulable = history
        .iter()
        .position(|p| {
            condition(p, "PodScheduled").is_some_and(|c| {
                c["status"] == "False" && c["reason"] == "Unschedulable" && c["message"] == message
            })
        })
        .unwrap_or_else(|| panic!("reported unschedulable first: {history:#?}"));
    assert!(
        history[..unschedulable]
            .iter()
            .all(|p| p["spec"]["nodeName"].is_null())
    );
    for name in ["a", "b"] {
        assert_eq!(phase(&c.finished(name).await), "Succeeded");
    }
    // A pod bigger than any node never fits.
    let huge = c.get("huge").unwrap();
    assert_eq!(phase(&huge), "Pending");
    assert!(huge["spec"]["nodeName"].is_null());
    let cond = condition(&huge, "PodScheduled").unwrap();
    assert_eq!(cond["reason"], "Unschedulable");
    assert_eq!(cond["message"], message);
}

#[tokio::test]
async fn an_image_pull_back_off_keeps_the_pod_pending() {
    let c = cluster(config());
    c.create(pod(
        "pull",
        "Never",
        json!({PENDING_REASON: "ImagePullBackOff"}),
    ));
    c.create(pod(
        "unplaced",
        "Never",
        json!({PENDING_REASON: "Unschedulable"}),
    ));
    let stuck = eventually("the waiting reason", || {
        let p = c.get("pull")?;
        (main_status(&p)["state"]["waiting"]["reason"] == "ImagePullBackOff").then_some(p)
    })
    .await;
    // Pods created later run to the end while it stays stuck.
    c.create(pod("later", "Never", json!({DURATION: "300ms"})));
    assert_eq!(phase(&c.finished("later").await), "Succeeded");

    let pull = c.get("pull").unwrap();
    assert_eq!(pull, stuck, "nothing changed");
    assert_eq!(phase(&pull), "Pending");
    assert!(pull["spec"]["nodeName"].is_string());
    assert_eq!(
        main_status(&pull)["state"]["waiting"]["message"],
        "Back-off pulling image \"tf:2\""
    );
    for t in ["Ready", "ContainersReady"] {
        let cond = condition(&pull, t).unwrap();
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "ContainersNotReady");
        assert!(cond["lastTransitionTime"].is_string());
    }
    assert!(condition_is(&pull, "PodScheduled", "True"));

    let unplaced = c.get("unplaced").unwrap();
    assert!(unplaced["spec"]["nodeName"].is_null());
    let cond = condition(&unplaced, "PodScheduled").unwrap();
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("Unschedulable"))
    );
}

#[tokio::test]
async fn an_evicted_pod_fails_as_a_whole() {
    let c = cluster(config());
    c.create(pod("evicted", "OnFailure", json!({POD_REASON: "Evicted"})));
    let done = c.finished("evicted").await;
    assert_eq!(phase(&done), "Failed");
    assert_eq!(done["status"]["reason"], "Evicted");
    assert!(
        done["status"]["message"]
            .as_str()
            .unwrap()
            .contains("low on resource")
    );
    assert_eq!(terminated(&done)["exitCode"], 137);
    assert_eq!(main_status(&done)["restartCount"], 0, "no restart in place");
}

#[tokio::test]
async fn an_oom_kill_is_reported_as_such() {
    let c = cluster(config());
    c.create(pod(
        "oom",
        "Never",
        json!({EXIT_CODE: "137", TERMINATED_REASON: "OOMKilled"}),
    ));
    let done = c.finished("oom").await;
    assert_eq!(phase(&done), "Failed");
    assert_eq!(terminated(&done)["exitCode"], 137);
    assert_eq!(terminated(&done)["reason"], "OOMKilled");
}

#[tokio::test]
async fn per_index_values_script_each_replica() {
    let c = cluster(config());
    for i in 0..3 {
        c.create(replica("job", i, "Never", json!({EXIT_CODE: "0=137,*=0"})));
    }
    let zero = c.finished("job-worker-0").await;
    assert_eq!(phase(&zero), "Failed");
    assert_eq!(terminated(&zero)["exitCode"], 137);
    for name in ["job-worker-1", "job-worker-2"] {
        let p = c.finished(name).await;
        assert_eq!(phase(&p), "Succeeded", "{name}");
        assert_eq!(terminated(&p)["exitCode"], 0);
    }
}

#[tokio::test]
async fn fail_times_counts_pod_recreations() {
    let c = cluster(config());
    let script = json!({EXIT_CODE: "1", FAIL_TIMES: "1"});
    c.create(replica("rec", 0, "Never", script.clone()));
    assert_eq!(phase(&c.finished("rec-worker-0").await), "Failed");
    c.delete("rec-worker-0");
    c.create(replica("rec", 0, "Never", script));
    let second = c.finished("rec-worker-0").await;
    assert_eq!(phase(&second), "Succeeded", "the second run is clean");
}

#[tokio::test]
async fn a_deleted_pod_takes_its_timer_along() {
    let c = cluster(config());
    c.create(pod(
        "p",
        "Never",
        json!({EXIT_CODE: "1", DURATION: "300ms"}),
    ));
    eventually("running", || {
        (phase(&c.get("p")?) == "Running").then_some(())
    })
    .await;
    c.delete("p");
    let uid = c.create(pod(
        "p",
        "Never",
        json!({PENDING_REASON: "ContainerCreating"}),
    ));
    // Outlive the old pod's timer.
    c.create(pod("clock", "Never", json!({DURATION: "600ms"})));
    assert_eq!(phase(&c.finished("clock").await), "Succeeded");
    let p = c.get("p").unwrap();
    assert_eq!(p["metadata"]["uid"], uid.as_str());
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        main_status(&p)["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
}

#[tokio::test]
async fn a_malformed_annotation_is_reported_and_defaulted() {
    let c = cluster(config());
    c.create(pod(
        "typo",
        "Never",
        json!({DURATION: "soon", EXIT_CODE: "0"}),
    ));
    assert_eq!(phase(&c.finished("typo").await), "Succeeded");
    let events = c.store.resource("", "events").unwrap();
    let (list, _) = c.store.list(&events, Some(NS));
    let warning = list
        .iter()
        .find(|e| e["involvedObject"]["name"] == "typo")
        .expect("a warning event");
    assert_eq!(warning["type"], "Warning");
    assert!(warning["message"].as_str().unwrap().contains(DURATION));
}

#[tokio::test]
async fn a_pod_already_running_on_a_node_is_adopted() {
    let c = cluster(config());
    let mut p = pod("restored", "OnFailure", json!({DURATION: "100ms"}));
    p["spec"]["nodeName"] = json!("sim-node-1");
    p["status"] = json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
        "containerStatuses": [{"name": "tensorflow", "image": "tf:2", "restartCount": 3,
            "ready": true, "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}}}]});
    c.create(p);
    let done = c.finished("restored").await;
    assert_eq!(phase(&done), "Succeeded");
    assert_eq!(main_status(&done)["restartCount"], 3);
    assert_eq!(terminated(&done)["startedAt"], "2026-01-01T00:01:00Z");
    assert_eq!(done["spec"]["nodeName"], "sim-node-1");
    assert!(
        c.history("restored").iter().all(|p| phase(p) != "Pending"),
        "not created again"
    );
}

#[tokio::test]
async fn run_stops_on_shutdown() {
    let store = Store::new();
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        kubelet::run(store, config(), std::future::ready(())),
    )
    .await;
    assert!(done.is_ok());
}
