//! Kueue end to end, through kubectl, in both modes the operator supports:
//! - Kueue's built-in TFJob integration (the simulated Kueue suspends labelled jobs, creates
//!   their Workloads, resumes them on admission), the operator doing only what Kueue expects of
//!   a job's suspend;
//! - Workloads the operator owns (`--kueue-workloads`), the simulated Kueue leaving TFJobs alone.
//!
//! Kueue's own sample manifests run unchanged. More jobs than the quota admits wait with a
//! message naming the queue and start as others finish, the admitted requests never exceeding
//! the quota at any observed instant; draining the ClusterQueue stops a running job, which
//! completes after its return without a restart counted; a flavor's node labels and tolerations
//! reach the pods; a queue that does not exist or has no quota keeps jobs waiting, saying so;
//! a running job's queue label change is refused (the integration) or moves the job to a new
//! Workload (the operator's); a policy that moves pods off their flavor is refused, saying why.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::ClusterOptions;
use tfjob_policy_engine::configmap;
use tfjob_policy_engine::{Hook, JobSelector, PolicyManifest, defaults};

use common::kubectl::{Cluster, cluster_with, repo};

/// Which side creates the Workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Integration,
    OperatorWorkloads,
}

fn kueue_cluster(mode: Mode) -> Cluster {
    let mut options = ClusterOptions::new(common::default_policies());
    options.simulate_kueue = true;
    options.kueue_workloads = mode == Mode::OperatorWorkloads;
    options.kubelet = KubeletConfig {
        nodes: 2,
        cpu: "16".into(),
        memory: "64Gi".into(),
        gpus_per_node: 0,
        default_duration: Duration::from_secs(2),
        startup: Duration::from_millis(50),
        ..KubeletConfig::default()
    };
    cluster_with(options)
}

fn apply(c: &Cluster, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, yaml).unwrap();
    c.ok(&["apply", "-f", file.to_str().unwrap()]);
}

fn sample(file: &str) -> String {
    repo(&format!("../shared/reference/kueue/examples/{file}"))
        .display()
        .to_string()
}

/// Kueue's sample job (1 PS and 2 workers, 1 cpu each) under another name and queue, running
/// `seconds`.
fn queued_job(name: &str, queue: &str, seconds: u32) -> String {
    let text = std::fs::read_to_string(sample("sample-tfjob.yaml")).unwrap();
    let mut job: Value = serde_yaml_ng::from_str(&text).unwrap();
    job["metadata"]["name"] = name.into();
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue.into();
    for rtype in ["PS", "Worker"] {
        job["spec"]["tfReplicaSpecs"][rtype]["template"]["metadata"] =
            serde_json::json!({"annotations": {"sim.tfjob.dev/duration": format!("{seconds}s")}});
    }
    serde_json::to_string(&job).unwrap()
}

/// `kubectl get pods` of one job, printed as `output` (`json`, `name`).
fn pods_of(c: &Cluster, job: &str, output: &str, done: impl Fn(&str) -> bool) -> String {
    let selector = format!("training.kubeflow.org/job-name={job}");
    c.until(&["get", "pods", "-l", &selector, "-o", output], done)
}

/// Sets the ClusterQueue's `stopPolicy` (`HoldAndDrain` evicts what it admitted).
fn stop_policy(c: &Cluster, queue: &str, policy: &str) {
    let patch = format!(r#"{{"spec":{{"stopPolicy":"{policy}"}}}}"#);
    c.ok(&["patch", "clusterqueue", queue, "--type=merge", "-p", &patch]);
}

/// Whether `kubectl get pods -o json` shows `n` pods, all running.
fn all_running(n: usize) -> impl Fn(&str) -> bool {
    move |out| {
        let pods: Value = serde_json::from_str(out).unwrap_or_default();
        pods["items"]
            .as_array()
            .is_some_and(|p| p.len() == n && p.iter().all(|p| p["status"]["phase"] == "Running"))
    }
}

/// Ships a decoration policy for jobs queued in `pool-a` that sets their pods' `pool` node
/// selector to `b`, moving them off the flavor Kueue admitted them to; waits until it is
/// active.
fn fight_kueue(c: &Cluster) {
    let manifest = PolicyManifest {
        name: "fights-kueue".into(),
        hooks: vec![Hook::Decorate],
        selector: JobSelector {
            match_labels: [("kueue.x-k8s.io/queue-name".to_owned(), "pool-a".to_owned())].into(),
            ..JobSelector::default()
        },
        settings: serde_json::json!({"mode": "edit", "path": "/spec/nodeSelector/pool", "value": "b"}),
        ..PolicyManifest::default()
    };
    let cm = configmap::pack(
        manifest,
        defaults::HOSTILE_POLICY_WASM,
        "tfjob-system",
        false,
    )
    .expect("the policy packs");
    let name = cm.metadata.name.clone().expect("pack names the ConfigMap");
    // The operator's policy namespace, made as a platform team's installation makes it.
    let _ = c.run(&["create", "namespace", "tfjob-system"]);
    apply(c, &serde_json::to_string(&cm).unwrap());
    c.until(
        &[
            "get",
            "configmap",
            "-n",
            "tfjob-system",
            &name,
            "-o",
            "json",
        ],
        |out| {
            let cm: Value = serde_json::from_str(out).unwrap_or_default();
            cm["metadata"]["annotations"][configmap::STATUS_ANNOTATION]
                .as_str()
                .is_some_and(|s| s.contains("Active"))
        },
    );
}

fn job(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["get", "tfjob", name, "-o", "json"])).unwrap()
}

fn condition(job: &Value, type_: &str) -> Option<Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn succeeded(c: &Cluster, name: &str) {
    c.until(&["get", "tfjob", name, "-o", "json"], |out| {
        let job: Value = serde_json::from_str(out).unwrap_or_default();
        condition(&job, "Succeeded").is_some_and(|c| c["status"] == "True")
    });
}

/// Every object of a kind in the store (read directly, to observe each instant without
/// kubectl's start-up time between looks).
fn stored(c: &Cluster, group: &str, plural: &str) -> Vec<Value> {
    let store = c.up().cluster.store();
    let rt = store
        .resource(group, plural)
        .unwrap_or_else(|| panic!("{plural} are served"));
    store
        .list(&rt, None)
        .0
        .into_iter()
        .map(|w| (*w).clone())
        .collect()
}

fn workloads(c: &Cluster) -> Vec<Value> {
    stored(c, "kueue.x-k8s.io", "workloads")
}

fn is_true(w: &Value, type_: &str) -> bool {
    w["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// CPUs that admitted, unfinished Workloads hold (each pod of these jobs asks for 1).
fn admitted_cpus(workloads: &[Value]) -> i64 {
    workloads
        .iter()
        .filter(|w| is_true(w, "QuotaReserved") && !is_true(w, "Finished"))
        .flat_map(|w| w["spec"]["podSets"].as_array().cloned().unwrap_or_default())
        .map(|s| s["count"].as_i64().unwrap_or(1))
        .sum()
}

fn workload_of<'w>(workloads: &'w [Value], job: &str) -> Option<&'w Value> {
    workloads.iter().find(|w| {
        w["metadata"]["ownerReferences"][0]["name"] == job
            && w["metadata"]["deletionTimestamp"].is_null()
    })
}

fn pending_message(w: &Value) -> Option<String> {
    w["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "QuotaReserved" && c["status"] == "False")
        .and_then(|c| c["message"].as_str().map(str::to_owned))
}

fn run_scenario(mode: Mode) {
    let c = kueue_cluster(mode);
    // Kueue's samples, unchanged: a 9-cpu ClusterQueue, its LocalQueue, and the sample job.
    c.ok(&["apply", "-f", &sample("single-clusterqueue-setup.yaml")]);
    c.ok(&["apply", "-f", &sample("sample-tfjob.yaml")]);
    succeeded(&c, "tensorflow-dist-mnist");
    let done = job(&c, "tensorflow-dist-mnist");
    if mode == Mode::Integration {
        assert_eq!(done["spec"]["runPolicy"]["suspend"], false, "{mode:?}");
    }
    let wl = workloads(&c);
    let sample_workload = workload_of(&wl, "tensorflow-dist-mnist").expect("its Workload");
    assert!(
        is_true(sample_workload, "Finished"),
        "{mode:?}: {sample_workload}"
    );

    // Quota: five jobs of 3 cpus where 9 are admitted at once.
    // In one apply, so the five arrive together and two must wait however slowly kubectl runs
    // on a loaded machine (one apply each let the first jobs finish before the last came).
    let jobs: Vec<String> = (0..5)
        .map(|i| queued_job(&format!("q-{i}"), "user-queue", 2))
        .collect();
    apply(&c, &jobs.join("\n---\n"));
    let started = Instant::now();
    let mut most = 0;
    let mut waiting_said = None;
    let mut job_said = None;
    loop {
        let wl = workloads(&c);
        let held = admitted_cpus(&wl);
        assert!(
            held <= 9,
            "{mode:?}: {held} cpus admitted over a quota of 9"
        );
        most = most.max(held);
        for i in 0..5 {
            if let Some(message) = workload_of(&wl, &format!("q-{i}")).and_then(pending_message) {
                waiting_said.get_or_insert(message);
            }
        }
        for j in stored(&c, "kubeflow.org", "tfjobs") {
            if let Some(s) = condition(&j, "Suspended").filter(|s| s["status"] == "True") {
                job_said = s["message"].as_str().map(str::to_owned).or(job_said);
            }
        }
        let finished = (0..5)
            .filter(|i| workload_of(&wl, &format!("q-{i}")).is_some_and(|w| is_true(w, "Finished")))
            .count();
        if finished == 5 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{mode:?}: {finished} of 5 finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(most, 9, "{mode:?}: three jobs ran at once");
    let waiting = waiting_said.expect("a job waited");
    assert!(waiting.contains("cluster-queue"), "{mode:?}: {waiting}");
    if mode == Mode::OperatorWorkloads {
        let said = job_said.expect("a job said it waits");
        assert!(said.contains("in queue user-queue"), "{said}");
    }
    for i in 0..5 {
        succeeded(&c, &format!("q-{i}"));
    }

    // Draining the ClusterQueue stops a running job; it completes after the queue returns,
    // without a restart counted against it.
    apply(&c, &queued_job("evicted", "user-queue", 6));
    pods_of(&c, "evicted", "json", |out| {
        let pods: Value = serde_json::from_str(out).unwrap_or_default();
        pods["items"]
            .as_array()
            .is_some_and(|p| p.len() == 3 && p.iter().all(|p| p["status"]["phase"] == "Running"))
    });
    stop_policy(&c, "cluster-queue", "HoldAndDrain");
    pods_of(&c, "evicted", "name", |out| out.trim().is_empty());
    let stopped = job(&c, "evicted");
    let suspended = condition(&stopped, "Suspended").expect("suspended");
    assert_eq!(suspended["status"], "True", "{mode:?}: {stopped}");
    if mode == Mode::OperatorWorkloads {
        assert_eq!(suspended["reason"], "WorkloadEvicted", "{suspended}");
    }
    let active: i64 = stopped["status"]["replicaStatuses"]
        .as_object()
        .map(|m| m.values().map(|r| r["active"].as_i64().unwrap_or(0)).sum())
        .unwrap_or(0);
    assert_eq!(active, 0, "{mode:?}: {stopped}");
    stop_policy(&c, "cluster-queue", "None");
    succeeded(&c, "evicted");
    let done = job(&c, "evicted");
    assert!(
        condition(&done, "Restarting").is_none(),
        "{mode:?}: an eviction is not a restart: {done}"
    );

    // A flavor with node labels and tolerations, on a node that carries them.
    apply(
        &c,
        r#"
apiVersion: v1
kind: Node
metadata: {name: pool-a-0, labels: {pool: a}}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: pool-a}
spec:
  nodeLabels: {pool: a}
  tolerations: [{key: pool-a-only, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: pool-a-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: pool-a
      resources: [{name: cpu, nominalQuota: 8}, {name: memory, nominalQuota: 32Gi}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: pool-a, namespace: default}
spec: {clusterQueue: pool-a-queue}
"#,
    );
    apply(&c, &queued_job("flavored", "pool-a", 4));
    let out = pods_of(&c, "flavored", "json", |out| {
        let pods: Value = serde_json::from_str(out).unwrap_or_default();
        pods["items"]
            .as_array()
            .is_some_and(|p| p.len() == 3 && p.iter().all(|p| p["spec"]["nodeName"].is_string()))
    });
    let pods: Value = serde_json::from_str(&out).unwrap();
    for pod in pods["items"].as_array().unwrap() {
        assert_eq!(pod["spec"]["nodeSelector"]["pool"], "a", "{mode:?}: {pod}");
        assert_eq!(pod["spec"]["nodeName"], "pool-a-0", "{mode:?}");
        let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
        assert!(
            tolerations.iter().any(|t| t["key"] == "pool-a-only"),
            "{mode:?}: {tolerations:?}"
        );
    }
    succeeded(&c, "flavored");

    // A running job's queue label changed: Kueue's webhook refuses it (the integration); the
    // operator moves the job to a new Workload in the new queue, its pods stopped until that
    // one is admitted (Workloads it owns).
    apply(&c, &queued_job("moved", "pool-a", 30));
    pods_of(&c, "moved", "json", all_running(3));
    let relabel = c.run(&[
        "label",
        "tfjob",
        "moved",
        "kueue.x-k8s.io/queue-name=no-such-queue",
        "--overwrite",
    ]);
    match mode {
        Mode::Integration => {
            assert!(!relabel.status.success(), "{mode:?}: the change is refused");
            let stderr = String::from_utf8_lossy(&relabel.stderr);
            assert!(
                stderr.contains("metadata.labels[kueue.x-k8s.io/queue-name]"),
                "{stderr}"
            );
        }
        Mode::OperatorWorkloads => {
            assert!(relabel.status.success(), "{relabel:?}");
            pods_of(&c, "moved", "name", |out| out.trim().is_empty());
            let started = Instant::now();
            loop {
                let wl = workloads(&c);
                let moved = workload_of(&wl, "moved");
                if moved.is_some_and(|w| w["spec"]["queueName"] == "no-such-queue") {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(60), "{moved:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    c.ok(&["delete", "tfjob", "moved", "--wait=false"]);

    // A policy that moves pods off the flavor Kueue admitted them to is refused, and says so.
    fight_kueue(&c);
    apply(&c, &queued_job("fought", "pool-a", 1));
    c.until(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=fought",
            "-o",
            "json",
        ],
        |out| out.contains("spec.nodeSelector[pool] (Kueue placed it"),
    );
    let pods = c.ok(&[
        "get",
        "pods",
        "-l",
        "training.kubeflow.org/job-name=fought",
        "-o",
        "name",
    ]);
    assert!(pods.trim().is_empty(), "{mode:?}: {pods}");

    // Worst inputs: a queue that does not exist, a ClusterQueue with no quota.
    apply(
        &c,
        r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: empty-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 0}, {name: memory, nominalQuota: 0}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: empty, namespace: default}
spec: {clusterQueue: empty-queue}
"#,
    );
    apply(&c, &queued_job("nowhere", "no-such-queue", 1));
    apply(&c, &queued_job("no-quota", "empty", 1));
    let mut said: BTreeMap<&str, String> = BTreeMap::new();
    let started = Instant::now();
    while said.len() < 2 {
        let wl = workloads(&c);
        for name in ["nowhere", "no-quota"] {
            if let Some(m) = workload_of(&wl, name).and_then(pending_message) {
                said.insert(name, m);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{mode:?}: {said:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        said["nowhere"].contains("LocalQueue no-such-queue doesn't exist"),
        "{mode:?}: {}",
        said["nowhere"]
    );
    assert!(
        said["no-quota"].contains("empty-queue"),
        "{mode:?}: {}",
        said["no-quota"]
    );
    for name in ["nowhere", "no-quota"] {
        let pods = c.ok(&[
            "get",
            "pods",
            "-l",
            &format!("training.kubeflow.org/job-name={name}"),
            "-o",
            "name",
        ]);
        assert!(pods.trim().is_empty(), "{mode:?}: {name} has pods: {pods}");
        let j = job(&c, name);
        let s = condition(&j, "Suspended").expect("waits suspended");
        assert_eq!(s["status"], "True", "{mode:?}: {j}");
    }
}

#[test]
fn kueues_tfjob_integration_queues_admits_evicts_and_places_jobs() {
    run_scenario(Mode::Integration);
}

#[test]
fn workloads_the_operator_owns_queue_admit_evict_and_place_jobs() {
    run_scenario(Mode::OperatorWorkloads);
}

/// The interpreter with the Kubeflow SDK (`kubeflow-training` 1.9) installed, from
/// `TFJOB_PYTHON`, as `tests/run` sets it up; without one the SDK test says so and passes.
fn python_with_sdk() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("TFJOB_PYTHON").map(std::path::PathBuf::from)?;
    let has_sdk = std::process::Command::new(&python)
        .args(["-c", "import kubeflow.training"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_sdk {
        eprintln!(
            "SKIPPED: {} has no kubeflow-training; tests/run installs kubeflow-training==1.9.3",
            python.display()
        );
        return None;
    }
    Some(python)
}

/// The Kubeflow SDK submits four jobs of 3 cpus into Kueue's sample queue of 9 cpus and follows
/// them with its own calls: some wait (suspended, with a message), three at most run at once,
/// all succeed, none restarts.
fn sdk_scenario(python: &std::path::Path, mode: Mode) {
    let c = kueue_cluster(mode);
    c.ok(&["apply", "-f", &sample("single-clusterqueue-setup.yaml")]);
    let out = std::process::Command::new(python)
        .arg(repo("tests/python/kueue_sdk.py"))
        .arg(&c.kubeconfig)
        .args(["default", "user-queue", "4"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{mode:?}: the SDK script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["succeeded"], 4, "{mode:?}: {seen}");
    let most = seen["most_running"].as_u64().unwrap();
    assert!((1..=3).contains(&most), "{mode:?}: {seen}");
    let waiting = seen["waiting"].as_object().unwrap();
    assert!(!waiting.is_empty(), "{mode:?}: no job waited: {seen}");
    if mode == Mode::OperatorWorkloads {
        assert!(
            waiting.values().any(|m| m
                .as_str()
                .unwrap_or_default()
                .contains("in queue user-queue")),
            "{seen}"
        );
    }
}

#[test]
fn the_kubeflow_sdk_queues_jobs_through_kueue_in_both_modes() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    sdk_scenario(&python, Mode::Integration);
    sdk_scenario(&python, Mode::OperatorWorkloads);
}
