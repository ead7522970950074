//! The simulated Kueue end to end, behind the real HTTP API server, driven with the real
//! kubectl: Kueue's own samples applied unchanged queue the sample TFJob and admit it; quota
//! holds workloads back and frees as they finish, never over the nominal quota at any point of
//! the store's history; draining a ClusterQueue and deactivating a Workload evict, and undoing
//! it admits again; a flavor whose node labels no node carries is passed over until a node is
//! labelled; the same with Kueue's real CRDs (and their CEL rules) served; and inputs a real
//! cluster sees: a missing LocalQueue, zero quota, Workloads edited or deleted by others, a
//! queue label changed on a running job. There is no operator here: the TFJobs' specs and the
//! Workloads are what is checked. kubectl connects over HTTPS with the kubeconfig `up` writes.
//! CI installs kubectl; the test needs it on PATH.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_cluster::admission::cel::SchemaRules;
use tfjob_cluster::http::server::ServerOptions;
use tfjob_cluster::kubelet::{self, KubeletConfig};
use tfjob_cluster::kueue::objects::Workload;
use tfjob_cluster::kueue::{self, KueueConfig};
use tfjob_cluster::storage::crd;
use tfjob_cluster::storage::store::{DeleteOptions, Part, Patch};
use tfjob_cluster::{ResourceType, Store};

const KUEUE: &str = "kueue.x-k8s.io";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn reference(file: &str) -> PathBuf {
    repo().join("../shared/reference/kueue").join(file)
}

fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// Kueue's real CRDs, from the reference data.
fn real_crds() -> Vec<Value> {
    [
        "resourceflavors",
        "clusterqueues",
        "localqueues",
        "workloads",
    ]
    .iter()
    .flat_map(|p| yaml_documents(&reference(&format!("crds/kueue.x-k8s.io_{p}.yaml"))))
    .collect()
}

struct Cluster {
    store: Arc<Store>,
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: tempfile::TempDir,
    workloads: ResourceType,
    tfjobs: ResourceType,
    _server: common::Serving,
    _runtime: tokio::runtime::Runtime,
}

/// The server with the TFJob CRD, the simulated kubelet (for its nodes) and Kueue; with
/// `real_crds`, Kueue's own CRDs are served before the simulation starts.
fn start(integration: bool, real: bool) -> Cluster {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::new();
    for doc in yaml_documents(&repo().join("deploy/crd/kubeflow.org_tfjobs.yaml")) {
        crd::install(&store, doc).unwrap();
    }
    if real {
        for doc in real_crds() {
            crd::install(&store, doc).unwrap();
        }
    }
    let server = runtime.block_on(common::serve(Arc::clone(&store), ServerOptions::default()));
    {
        let _guard = runtime.enter();
        // Both run until the runtime is dropped with the test.
        drop(kubelet::spawn(Arc::clone(&store), KubeletConfig::default()));
        let config = KueueConfig {
            integration,
            ..KueueConfig::default()
        };
        drop(kueue::spawn(Arc::clone(&store), config));
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_admin_kubeconfig(dir.path(), "default");
    Cluster {
        _server: server,
        workloads: store.resource(KUEUE, "workloads").unwrap(),
        tfjobs: store.resource("kubeflow.org", "tfjobs").unwrap(),
        store,
        cache: dir.path().join("cache"),
        kubeconfig,
        dir,
        _runtime: runtime,
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn is_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == "True")
}

fn admitted(wl: &Value) -> bool {
    is_true(wl, "Admitted") && wl["status"]["admission"].is_object()
}

fn suspended(job: &Value) -> bool {
    job["spec"]["runPolicy"]["suspend"] == true
}

/// A Workload of `count` pods requesting `cpu` each.
fn workload(name: &str, queue: &str, count: u32, cpu: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"queueName": queue, "podSets": [{"name": "worker", "count": count, "template": {"spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        }}}]},
    })
}

/// A TFJob queued in `queue` with two workers of 1 cpu.
fn tfjob(name: &str, queue: &str) -> String {
    format!(
        r#"apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf:2
            resources: {{requests: {{cpu: 1}}}}
"#
    )
}

/// A ClusterQueue of `cpu` over `flavors`, and the LocalQueue `user-queue` feeding it.
fn queues(cq: &str, flavors: &[&str], cpu: &str) -> String {
    let flavors: String = flavors
        .iter()
        .map(|f| {
            format!(
                "    - name: {f}\n      resources:\n      - {{name: cpu, nominalQuota: {cpu}}}\n"
            )
        })
        .collect();
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: {cq}\nspec:\n  namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n{flavors}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: user-queue\nspec:\n  clusterQueue: {cq}\n"
    )
}

impl Cluster {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs (CI installs it; locally: apt-get install kubernetes-client)")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "kubectl {args:?} succeeded");
        String::from_utf8(out.stderr).unwrap()
    }

    /// `kubectl apply` of a manifest given as text.
    fn apply(&self, manifest: &str) -> String {
        let path = self
            .dir
            .path()
            .join(format!("m-{}.yaml", fastrand::u64(..)));
        std::fs::write(&path, manifest).unwrap();
        self.ok(&["apply", "-f", path.to_str().unwrap()])
    }

    /// `kubectl apply -f` of a file of the Kueue reference data.
    fn apply_reference(&self, file: &str) {
        self.ok(&["apply", "-f", reference(file).to_str().unwrap()]);
    }

    /// Sets a ClusterQueue's `stopPolicy` with `kubectl patch`.
    fn stop_policy(&self, cq: &str, policy: &str) {
        let patch = format!(r#"{{"spec":{{"stopPolicy":"{policy}"}}}}"#);
        self.ok(&["patch", "cq", cq, "--type=merge", "-p", &patch]);
    }

    fn create_workload(&self, wl: Value) {
        self.store
            .create(&self.workloads, Some("default"), wl)
            .unwrap();
    }

    fn get(&self, t: &ResourceType, name: &str) -> Option<Value> {
        let ns = t.namespaced.then_some("default");
        self.store.get(t, ns, name).ok().map(Arc::unwrap_or_clone)
    }

    fn kind(&self, plural: &str) -> ResourceType {
        self.store.resource(KUEUE, plural).unwrap()
    }

    /// Polls (up to 30 s) until `check` answers.
    fn eventually<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_workload(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.eventually(&format!("workload {name}: {what}"), || {
            self.get(&self.workloads, name).filter(|w| done(w))
        })
    }

    fn wait_job(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.eventually(&format!("tfjob {name}: {what}"), || {
            self.get(&self.tfjobs, name).filter(|j| done(j))
        })
    }

    /// The Workload of TFJob `job`, once created.
    fn job_workload(&self, job: &str) -> Value {
        let prefix = format!("tfjob-{job}-");
        self.eventually(&format!("the workload of {job}"), || {
            let (all, _) = self.store.list(&self.workloads, Some("default"));
            all.into_iter()
                .find(|w| {
                    w["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .map(Arc::unwrap_or_clone)
        })
    }

    fn patch(&self, t: &ResourceType, name: &str, patch: Value, part: Part) {
        let ns = t.namespaced.then_some("default");
        self.store
            .patch(t, ns, name, Patch::Merge(patch), part)
            .unwrap();
    }

    /// Marks a workload finished, as an integration does when its job ends.
    fn finish(&self, name: &str) {
        let wl = self.get(&self.workloads, name).unwrap();
        let mut conditions = wl["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.push(
            json!({"type": "Finished", "status": "True", "reason": "Succeeded",
            "message": "done", "lastTransitionTime": "2025-01-01T00:00:00Z"}),
        );
        self.patch(
            &self.workloads,
            name,
            json!({"status": {"conditions": conditions}}),
            Part::Status,
        );
    }

    /// Every stored version of the workloads, oldest first.
    fn workload_history(&self) -> Vec<Value> {
        let (events, _) = self.store.watch(&self.workloads.key(), None, 1).unwrap();
        events.into_iter().map(|e| (*e.object).clone()).collect()
    }

    /// Waits for an event about object `name` with `reason` (recorded just after the write it
    /// is about).
    fn wait_event(&self, kind: &str, name: &str, reason: &str) {
        self.eventually(&format!("a {reason} event about {kind} {name}"), || {
            (!self.events(kind, name, reason).is_empty()).then_some(())
        });
    }

    /// The events about object `name` with `reason`.
    fn events(&self, kind: &str, name: &str, reason: &str) -> Vec<Value> {
        let events = self.store.resource("", "events").unwrap();
        let (all, _) = self.store.list(&events, None);
        all.into_iter()
            .filter(|e| {
                e["involvedObject"]["kind"] == kind
                    && e["involvedObject"]["name"] == name
                    && e["reason"] == reason
            })
            .map(Arc::unwrap_or_clone)
            .collect()
    }
}

/// The cpu (in millicores) the admitted, unfinished workloads held at each point of the history.
fn cpu_held_over_time(history: &[Value]) -> Vec<i128> {
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    history
        .iter()
        .map(|wl| {
            latest.insert(
                wl["metadata"]["uid"].as_str().unwrap().to_owned(),
                wl.clone(),
            );
            latest
                .values()
                .map(Workload::parse)
                .filter(|w| !w.finished)
                .filter_map(|w| w.admission)
                .flat_map(|a| a.usage().into_iter())
                .filter(|((_, r), _)| r == "cpu")
                .map(|(_, v)| v)
                .sum()
        })
        .collect()
}

/// The sample TFJob of Kueue's documentation, through Kueue's single-ClusterQueue setup.
fn sample_tfjob_is_queued_and_admitted(c: &Cluster) -> Value {
    c.apply_reference("examples/single-clusterqueue-setup.yaml");
    c.apply_reference("examples/sample-tfjob.yaml");
    let job = "tensorflow-dist-mnist";

    let wl = c.job_workload(job);
    let name = wl["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(wl["spec"]["queueName"], "user-queue");
    let sets = wl["spec"]["podSets"].as_array().unwrap();
    assert_eq!(
        (sets[0]["name"].as_str(), sets[0]["count"].as_i64()),
        (Some("ps"), Some(1))
    );
    assert_eq!(
        (sets[1]["name"].as_str(), sets[1]["count"].as_i64()),
        (Some("worker"), Some(2))
    );
    let owner = &wl["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("TFJob"), Some(true))
    );
    assert_eq!(owner["blockOwnerDeletion"], true);

    let wl = c.wait_workload(&name, "admitted", admitted);
    let reserved = condition(&wl, "QuotaReserved").unwrap();
    assert_eq!(
        reserved["message"],
        "Quota reserved in ClusterQueue cluster-queue"
    );
    assert_eq!(
        condition(&wl, "Admitted").unwrap()["message"],
        "The workload is admitted"
    );
    let assignments = &wl["status"]["admission"]["podSetAssignments"];
    assert_eq!(
        assignments[1],
        json!({"name": "worker", "count": 2,
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
            "resourceUsage": {"cpu": "2", "memory": "400Mi"}})
    );

    // The job was suspended from its first stored version, and resumed by admission.
    let (history, _) = c.store.watch(&c.tfjobs.key(), None, 1).unwrap();
    let first = history
        .iter()
        .find(|e| e.object["metadata"]["name"] == job)
        .unwrap();
    assert!(
        suspended(&first.object),
        "created suspended: {:?}",
        first.object["spec"]
    );
    c.wait_job(job, "resumed", |j| {
        !suspended(j) && j["spec"]["runPolicy"]["suspend"] == false
    });
    c.wait_event("Workload", &name, "QuotaReserved");
    c.wait_event("TFJob", job, "Started");
    c.wait_event("TFJob", job, "CreatedWorkload");

    let cq = c.eventually("the ClusterQueue's counts", || {
        c.get(&c.kind("clusterqueues"), "cluster-queue")
            .filter(|cq| cq["status"]["admittedWorkloads"] == 1)
    });
    assert_eq!(
        cq["status"]["flavorsUsage"][0]["resources"][0],
        json!({"name": "cpu", "total": "3", "borrowed": "0"})
    );
    let shown = c.ok(&["get", "clusterqueues", "-o", "wide"]);
    assert!(
        shown.contains("PENDING WORKLOADS") && shown.contains("ADMITTED WORKLOADS"),
        "{shown}"
    );
    let shown = c.ok(&["get", "workloads"]);
    assert!(shown.contains("RESERVED IN"), "{shown}");
    assert!(
        shown.lines().any(|l| l.starts_with(&name)
            && l.contains("user-queue")
            && l.contains("cluster-queue")
            && l.contains("True")),
        "{shown}"
    );
    assert!(c.ok(&["get", "queues"]).contains("user-queue"));

    // The job ends: its workload finishes and its quota is free.
    c.patch(&c.tfjobs, job, json!({"status": {"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "TFJob default/tensorflow-dist-mnist successfully completed."}
    ]}}), Part::Status);
    let wl = c.wait_workload(&name, "finished", |w| is_true(w, "Finished"));
    assert_eq!(condition(&wl, "Finished").unwrap()["reason"], "Succeeded");
    c.eventually("the quota released", || {
        c.get(&c.kind("clusterqueues"), "cluster-queue")
            .filter(|cq| cq["status"]["admittedWorkloads"] == 0)
    });
    wl
}

#[test]
fn kueues_samples_queue_the_sample_tfjob_and_admit_it() {
    let c = start(true, false);
    sample_tfjob_is_queued_and_admitted(&c);
}

#[test]
fn quota_holds_workloads_back_until_others_finish_and_is_never_exceeded() {
    let c = start(false, false);
    c.apply_reference("examples/single-clusterqueue-setup.yaml");
    for i in 0..4 {
        c.create_workload(workload(&format!("w{i}"), "user-queue", 3, "1"));
    }
    let mut held = 0;
    for i in 0..4 {
        let name = format!("w{i}");
        let wl = c.wait_workload(&name, "decided", |w| {
            condition(w, "QuotaReserved").is_some()
        });
        if admitted(&wl) {
            held += 1;
        } else {
            let message = condition(&wl, "QuotaReserved").unwrap()["message"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                message.starts_with("couldn't assign flavors to pod set worker: insufficient quota for cpu in flavor default-flavor in ClusterQueue cluster-queue"),
                "{message}"
            );
            c.wait_event("Workload", &name, "Pending");
        }
    }
    assert_eq!(held, 3, "9 cpu hold three workloads of 3");
    let cq = c.eventually("the counts", || {
        c.get(&c.kind("clusterqueues"), "cluster-queue")
            .filter(|cq| {
                cq["status"]["pendingWorkloads"] == 1 && cq["status"]["admittedWorkloads"] == 3
            })
    });
    assert_eq!(
        cq["status"]["flavorsReservation"][0]["resources"][0]["total"],
        "9"
    );
    c.eventually("the LocalQueue's counts", || {
        c.get(&c.kind("localqueues"), "user-queue").filter(|lq| {
            lq["status"]["pendingWorkloads"] == 1 && lq["status"]["admittedWorkloads"] == 3
        })
    });
    let waiting = (0..4)
        .map(|i| format!("w{i}"))
        .find(|n| !admitted(&c.get(&c.workloads, n).unwrap()))
        .unwrap();
    let done = (0..4)
        .map(|i| format!("w{i}"))
        .find(|n| *n != waiting)
        .unwrap();
    c.finish(&done);
    c.wait_workload(&waiting, "admitted once quota is free", admitted);

    // More churn: new workloads wait until the ones before them finish.
    for i in 4..8 {
        c.create_workload(workload(&format!("w{i}"), "user-queue", 2, "1500m"));
    }
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    c.eventually("every workload admitted in turn", || {
        let mut all_admitted = true;
        for name in &names {
            let wl = c.get(&c.workloads, name).unwrap();
            if !admitted(&wl) {
                all_admitted = false;
            } else if !is_true(&wl, "Finished") {
                c.finish(name);
            }
        }
        all_admitted.then_some(())
    });
    let over: Vec<i128> = cpu_held_over_time(&c.workload_history())
        .into_iter()
        .filter(|cpu| *cpu > 9000)
        .collect();
    assert!(over.is_empty(), "over quota at some point: {over:?}");
}

#[test]
fn draining_a_queue_or_deactivating_a_workload_evicts_and_undoing_it_admits_again() {
    let c = start(false, false);
    c.apply_reference("examples/single-clusterqueue-setup.yaml");
    c.create_workload(workload("a", "user-queue", 2, "1"));
    c.create_workload(workload("b", "user-queue", 2, "1"));
    c.wait_workload("a", "admitted", admitted);
    c.wait_workload("b", "admitted", admitted);

    let cqs = c.kind("clusterqueues");
    c.stop_policy("cluster-queue", "HoldAndDrain");
    let evicted = c.wait_workload("a", "evicted", |w| is_true(w, "Evicted"));
    assert_eq!(
        condition(&evicted, "Evicted").unwrap()["reason"],
        "ClusterQueueStopped"
    );
    assert_eq!(
        condition(&evicted, "QuotaReserved").unwrap()["status"],
        "False"
    );
    assert_eq!(condition(&evicted, "Admitted").unwrap()["status"], "False");
    assert!(evicted["status"]["admission"].is_null());
    c.wait_workload("b", "evicted", |w| is_true(w, "Evicted"));
    c.create_workload(workload("c", "user-queue", 1, "1"));
    let held = c.wait_workload("c", "pending", |w| condition(w, "QuotaReserved").is_some());
    assert_eq!(
        condition(&held, "QuotaReserved").unwrap()["message"],
        "ClusterQueue cluster-queue is inactive"
    );
    let stopped = c.eventually("the queue inactive", || {
        c.get(&cqs, "cluster-queue")
            .filter(|q| condition(q, "Active").is_some_and(|a| a["status"] == "False"))
    });
    assert_eq!(stopped["status"]["admittedWorkloads"], 0);

    c.stop_policy("cluster-queue", "None");
    for name in ["a", "b", "c"] {
        c.wait_workload(name, "admitted again", admitted);
    }
    let again = c.get(&c.workloads, "a").unwrap();
    assert_eq!(condition(&again, "Evicted").unwrap()["status"], "False");
    assert_eq!(
        condition(&again, "Requeued").unwrap()["reason"],
        "ClusterQueueRestarted"
    );

    // Hold keeps what is admitted and admits nothing new.
    c.patch(
        &cqs,
        "cluster-queue",
        json!({"spec": {"stopPolicy": "Hold"}}),
        Part::Whole,
    );
    c.create_workload(workload("d", "user-queue", 1, "1"));
    c.wait_workload("d", "held", |w| {
        condition(w, "QuotaReserved")
            .is_some_and(|q| q["message"] == "ClusterQueue cluster-queue is inactive")
    });
    assert!(admitted(&c.get(&c.workloads, "a").unwrap()));
    c.patch(
        &cqs,
        "cluster-queue",
        json!({"spec": {"stopPolicy": "None"}}),
        Part::Whole,
    );
    c.wait_workload("d", "admitted", admitted);

    c.patch(
        &c.workloads,
        "a",
        json!({"spec": {"active": false}}),
        Part::Whole,
    );
    let off = c.wait_workload("a", "deactivated", |w| {
        is_true(w, "Evicted") && !admitted(w)
    });
    assert_eq!(condition(&off, "Evicted").unwrap()["reason"], "Deactivated");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !admitted(&c.get(&c.workloads, "a").unwrap()),
        "not admitted while inactive"
    );
    c.patch(
        &c.workloads,
        "a",
        json!({"spec": {"active": true}}),
        Part::Whole,
    );
    let back = c.wait_workload("a", "reactivated", admitted);
    assert_eq!(
        condition(&back, "Requeued").unwrap()["reason"],
        "Reactivated"
    );
}

#[test]
fn a_flavor_no_node_carries_is_passed_over_until_a_node_is_labelled() {
    let c = start(true, false);
    c.apply_reference("examples/resource-flavor-tolerations.yaml");
    c.apply(&queues("spot-queue", &["spot"], "8"));
    c.apply(&tfjob("spotty", "user-queue"));
    let wl = c.job_workload("spotty");
    let name = wl["metadata"]["name"].as_str().unwrap().to_owned();
    let waiting = c.wait_workload(&name, "pending", |w| {
        condition(w, "QuotaReserved").is_some()
    });
    let message = condition(&waiting, "QuotaReserved").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("flavor spot matches no node"), "{message}");
    assert!(suspended(&c.get(&c.tfjobs, "spotty").unwrap()));

    c.ok(&["label", "node", "sim-node-1", "instance-type=spot"]);
    c.wait_workload(&name, "admitted", admitted);
    let job = c.wait_job("spotty", "resumed", |j| !suspended(j));
    let spec = &job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"], json!({"instance-type": "spot"}));
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "spot-taint", "operator": "Exists", "effect": "NoSchedule"}])
    );

    // Drained: the job is suspended and its templates are as they were.
    c.stop_policy("spot-queue", "HoldAndDrain");
    let job = c.wait_job("spotty", "suspended again", suspended);
    let spec = &job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"];
    assert!(
        spec.get("nodeSelector").is_none() && spec.get("tolerations").is_none(),
        "{spec}"
    );
    c.wait_event("TFJob", "spotty", "Stopped");
    c.stop_policy("spot-queue", "None");
    c.wait_job("spotty", "resumed again", |j| !suspended(j));
}

#[test]
fn kueues_real_crds_serve_the_simulation_and_accept_what_it_writes() {
    let c = start(true, true);
    // The real CRDs stay served: kueue did not replace them.
    let crds = c
        .store
        .resource("apiextensions.k8s.io", "customresourcedefinitions")
        .unwrap();
    let served = c.get(&crds, "workloads.kueue.x-k8s.io").unwrap();
    assert_eq!(served["spec"]["versions"].as_array().unwrap().len(), 2);

    let finished = sample_tfjob_is_queued_and_admitted(&c);
    c.apply_reference("examples/resource-flavor-tolerations.yaml");
    c.apply(&queues("spot-queue", &["spot"], "4").replace("user-queue", "spot-user"));
    c.ok(&["label", "node", "sim-node-0", "instance-type=spot"]);
    c.apply(&tfjob("one", "spot-user"));
    c.apply(&tfjob("two", "spot-user"));
    c.apply(&tfjob("three", "spot-user"));
    for job in ["one", "two", "three"] {
        c.job_workload(job);
    }
    c.eventually("two admitted, one pending", || {
        let (all, _) = c.store.list(&c.workloads, Some("default"));
        let n = all
            .iter()
            .filter(|w| admitted(w) && !is_true(w, "Finished"))
            .count();
        (n == 2).then_some(())
    });
    c.stop_policy("spot-queue", "HoldAndDrain");
    c.eventually("all evicted", || {
        let (all, _) = c.store.list(&c.workloads, Some("default"));
        all.iter()
            .all(|w| !admitted(w) || is_true(w, "Finished"))
            .then_some(())
    });

    // Every version the simulation stored passes Kueue's own rules, transitions included.
    let schemas: BTreeMap<String, SchemaRules> = real_crds()
        .iter()
        .map(|crd| {
            let version = crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "v1beta2")
                .unwrap();
            let rules = SchemaRules::compile(&version["schema"]["openAPIV3Schema"]).unwrap();
            (
                crd["spec"]["names"]["plural"].as_str().unwrap().to_owned(),
                rules,
            )
        })
        .collect();
    for plural in ["workloads", "clusterqueues", "localqueues"] {
        let t = c.kind(plural);
        let (events, _) = c.store.watch(&t.key(), None, 1).unwrap();
        let mut last: BTreeMap<String, Value> = BTreeMap::new();
        for e in events {
            let uid = e.object["metadata"]["uid"].as_str().unwrap().to_owned();
            let causes = schemas[plural].validate(&e.object, last.get(&uid));
            assert!(causes.is_empty(), "{plural}: {causes:?} in {}", e.object);
            last.insert(uid, (*e.object).clone());
        }
    }
    assert!(is_true(&finished, "Finished"));
}

#[test]
fn missing_queues_zero_quota_and_meddling_are_handled() {
    let c = start(true, false);
    c.apply_reference("examples/single-clusterqueue-setup.yaml");
    c.create_workload(workload("lost", "nowhere", 1, "1"));
    let lost = c.wait_workload("lost", "pending", |w| {
        condition(w, "QuotaReserved").is_some()
    });
    assert_eq!(
        condition(&lost, "QuotaReserved").unwrap()["message"],
        "LocalQueue nowhere doesn't exist"
    );
    assert_eq!(
        condition(&lost, "QuotaReserved").unwrap()["reason"],
        "Pending"
    );
    let before = lost["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_millis(300));
    let after = c.get(&c.workloads, "lost").unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"], before,
        "no write while nothing changes"
    );

    c.apply(&queues("empty", &["default-flavor"], "0").replace("user-queue", "empty-queue"));
    c.create_workload(workload("starved", "empty-queue", 1, "100m"));
    let starved = c.wait_workload("starved", "pending", |w| {
        condition(w, "QuotaReserved").is_some()
    });
    let message = condition(&starved, "QuotaReserved").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message
            .contains("insufficient quota for cpu in flavor default-flavor in ClusterQueue empty"),
        "{message}"
    );

    // A running job's Workload deleted by someone: the job is suspended, gets a new one, runs.
    c.apply(&tfjob("victim", "user-queue"));
    let first = c.job_workload("victim");
    let name = first["metadata"]["name"].as_str().unwrap().to_owned();
    c.wait_workload(&name, "admitted", admitted);
    c.wait_job("victim", "running", |j| !suspended(j));
    c.store
        .delete(
            &c.workloads,
            Some("default"),
            &name,
            &DeleteOptions::default(),
        )
        .unwrap();
    let uid = first["metadata"]["uid"].clone();
    c.wait_workload(&name, "recreated and admitted", |w| {
        w["metadata"]["uid"] != uid && admitted(w)
    });
    let suspensions = c
        .store
        .watch(&c.tfjobs.key(), None, 1)
        .unwrap()
        .0
        .iter()
        .filter(|e| e.object["metadata"]["name"] == "victim" && suspended(&e.object))
        .count();
    assert!(
        suspensions >= 2,
        "suspended at creation and again without its workload"
    );
    c.wait_job("victim", "running again", |j| !suspended(j));

    // Its status wiped by someone: it lost its admission, so the job stops until readmitted.
    c.patch(
        &c.workloads,
        &name,
        json!({"status": {"admission": null, "conditions": null}}),
        Part::Status,
    );
    c.wait_workload(&name, "admitted again", admitted);
    c.wait_job("victim", "running", |j| !suspended(j));

    // Its queue label cannot change while it runs.
    let refused = c.fails(&[
        "label",
        "tfjob",
        "victim",
        "kueue.x-k8s.io/queue-name=empty-queue",
        "--overwrite",
    ]);
    assert!(
        refused.contains("metadata.labels[kueue.x-k8s.io/queue-name]")
            && refused.contains("immutable"),
        "{refused}"
    );
    let refused = c.fails(&["label", "tfjob", "victim", "kueue.x-k8s.io/queue-name-"]);
    assert!(
        refused.contains("metadata.labels[kueue.x-k8s.io/queue-name]"),
        "{refused}"
    );

    // While suspended it can: the Workload follows the label.
    c.apply(&tfjob("mover", "nowhere"));
    let moving = c.job_workload("mover");
    let moving_name = moving["metadata"]["name"].as_str().unwrap().to_owned();
    c.wait_workload(&moving_name, "pending", |w| {
        condition(w, "QuotaReserved").is_some()
    });
    c.ok(&[
        "label",
        "tfjob",
        "mover",
        "kueue.x-k8s.io/queue-name=user-queue",
        "--overwrite",
    ]);
    let moved = c.wait_workload(&moving_name, "admitted in its new queue", admitted);
    assert_eq!(moved["spec"]["queueName"], "user-queue");

    // A job MultiKueue runs elsewhere is left alone.
    let elsewhere = tfjob("remote", "user-queue").replace(
        "spec:\n  tfReplicaSpecs:",
        "spec:\n  runPolicy: {managedBy: kueue.x-k8s.io/multikueue}\n  tfReplicaSpecs:",
    );
    c.apply(&elsewhere);
    std::thread::sleep(Duration::from_millis(300));
    let remote = c.get(&c.tfjobs, "remote").unwrap();
    assert!(!suspended(&remote));
    let (all, _) = c.store.list(&c.workloads, Some("default"));
    assert!(!all.iter().any(|w| {
        w["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("tfjob-remote-")
    }));
}
