//! `tfjob-operator up --state` keeps every acknowledged write, checked the hard way: the server
//! process is killed with SIGKILL at random moments of a write storm through the HTTP API
//! (ConfigMaps created, updated and deleted, TFJob status written) and started again on the same
//! database, many times over (`TFJOB_CRASH_ITERATIONS`, else 50, or 12 in the everyday run:
//! `tfjob_test_support::rounds`). After each restart:
//! - every acknowledged write is there: an object holds the value of its last acknowledged
//!   write, or of the one write to it that was in flight when the process died;
//! - nothing appears half written: each write sets two fields to the same value, and they must
//!   agree; no object exists that no write made;
//! - resourceVersions only grow: the restarted server's version is past every version seen
//!   before the kill, and so are the versions of new writes.
//!
//! And the scenario of the issue, as a user ran it with kubectl: ten ConfigMaps created, the
//! server killed, all ten back after the restart.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_api::TFJob;

use common::Kubectl as _;
use common::up::Up;

const NAMESPACE: &str = "default";
/// Writers at once, each with its own objects (so at most one write per object is in flight).
const WRITERS: usize = 6;
/// ConfigMaps per writer.
const KEYS: usize = 4;

/// `up --state` without its operator, on the database at `state`.
fn serve_state(state: &Path, dir: &Path) -> Up {
    let state = state.to_str().expect("a UTF-8 path");
    Up::start(&["--no-operator", "--state", state], dir)
}

/// What the test knows of one object: the value of its last acknowledged write (`None`:
/// deleted or never created) and the value the write in flight at the kill would have left.
#[derive(Clone, Debug, Default)]
struct Known {
    acked: Option<String>,
    in_flight: Option<Option<String>>,
}

impl Known {
    fn allows(&self, seen: &Option<String>) -> bool {
        *seen == self.acked || self.in_flight.as_ref() == Some(seen)
    }
}

/// The model of every object the storm touches, by name.
type Model = Arc<Mutex<BTreeMap<String, Known>>>;

fn cm_name(writer: usize, key: usize) -> String {
    format!("w{writer}-k{key}")
}

fn job_name(writer: usize) -> String {
    format!("job-{writer}")
}

fn tfjob(name: &str) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"runPolicy": {"suspend": true}, "tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
    }))
    .unwrap()
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One writer's storm until its requests fail (the server was killed): each step picks one of
/// its objects and writes it, recording the write as in flight first and as acknowledged once
/// answered. Returns the highest resourceVersion it was answered with and how many writes were
/// acknowledged.
async fn storm(client: Client, writer: usize, model: Model, seed: u64) -> (u64, usize) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let jobs: Api<TFJob> = Api::namespaced(client, NAMESPACE);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut highest = 0;
    let mut acknowledged = 0;
    for step in 0u64.. {
        let value = format!("{writer}.{seed}.{step}");
        let key = rng.usize(0..=KEYS);
        let (name, intended) = if key == KEYS {
            (job_name(writer), Some(value.clone()))
        } else {
            let name = cm_name(writer, key);
            let exists = model.lock().unwrap()[&name].acked.is_some();
            let intended = if exists && rng.u8(0..4) == 0 {
                None
            } else {
                Some(value.clone())
            };
            (name, intended)
        };
        model.lock().unwrap().get_mut(&name).unwrap().in_flight = Some(intended.clone());
        let answered: Result<u64, kube::Error> = if key == KEYS {
            // The value twice, in two conditions, which a torn write would tell apart (fields
            // the CRD's status schema declares: anything else is pruned, as on a real server).
            let status = json!({"status": {"conditions": [
                {"type": "Created", "status": "True", "reason": "Storm", "message": value},
                {"type": "Running", "status": "True", "reason": "Storm", "message": value}
            ], "startTime": "2026-01-01T00:00:00Z", "lastReconcileTime": "2026-01-01T00:00:00Z",
               "replicaStatuses": {}, "completedIndexes": {}}});
            jobs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map(|j| rv_of(&j.metadata))
        } else {
            let exists = model.lock().unwrap()[&name].acked.is_some();
            match (&intended, exists) {
                (None, _) => cms.delete(&name, &DeleteParams::default()).await.map(|_| 0),
                (Some(v), false) => {
                    let cm: ConfigMap = serde_json::from_value(json!({
                        "metadata": {"name": name}, "data": {"a": v, "b": v}
                    }))
                    .unwrap();
                    cms.create(&PostParams::default(), &cm)
                        .await
                        .map(|c| rv_of(&c.metadata))
                }
                (Some(v), true) => {
                    let patch = json!({"data": {"a": v, "b": v}});
                    cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|c| rv_of(&c.metadata))
                }
            }
        };
        match answered {
            Ok(rv) => {
                highest = highest.max(rv);
                acknowledged += 1;
                let mut model = model.lock().unwrap();
                let known = model.get_mut(&name).unwrap();
                known.acked = intended;
                known.in_flight = None;
            }
            Err(kube::Error::Api(s)) => panic!("writer {writer}: {name} refused: {s:?}"),
            // The server is gone: this write stays in flight.
            Err(_) => return (highest, acknowledged),
        }
    }
    (highest, acknowledged)
}

/// The value an object holds as the test reads it, checking its two fields agree.
fn value_of_cm(cm: &ConfigMap) -> String {
    let data = cm.data.clone().unwrap_or_default();
    let (a, b) = (data.get("a"), data.get("b"));
    assert_eq!(a, b, "{:?} is half written", cm.metadata.name);
    a.cloned()
        .unwrap_or_else(|| panic!("{:?} holds no value", cm.metadata.name))
}

fn value_of_job(job: &Value) -> Option<String> {
    let status = &job["status"];
    let tag = status["conditions"][1]["message"]
        .as_str()
        .map(str::to_owned);
    let message = status["conditions"][0]["message"]
        .as_str()
        .map(str::to_owned);
    assert_eq!(tag, message, "{} is half written", job["metadata"]["name"]);
    tag
}

/// Checks the restarted server against the model; then the model takes what is there as the
/// acknowledged state. Returns the server's resourceVersion.
async fn check(client: &Client, model: &Model, seen_before: u64) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), NAMESPACE);
    let listed = cms.list(&ListParams::default()).await.unwrap();
    let list_rv: u64 = listed
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap();
    assert!(
        list_rv > seen_before,
        "the restarted server's version {list_rv} is not past {seen_before}, seen before the kill"
    );
    let mut found: BTreeMap<String, Option<String>> = BTreeMap::new();
    for cm in listed.items {
        let name = cm.metadata.name.clone().unwrap();
        if name == "kube-root-ca.crt" {
            continue;
        }
        found.insert(name, Some(value_of_cm(&cm)));
    }
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kube::api::ApiResource::erase::<TFJob>(&()),
    );
    for job in raw.list(&ListParams::default()).await.unwrap().items {
        let value = serde_json::to_value(&job).unwrap();
        found.insert(job.metadata.name.clone().unwrap(), value_of_job(&value));
    }
    drop(jobs);
    let mut model = model.lock().unwrap();
    for name in found.keys() {
        assert!(
            model.contains_key(name),
            "{name} exists but no write made it"
        );
    }
    for (name, known) in model.iter_mut() {
        let seen = found.get(name).cloned().flatten();
        assert!(
            known.allows(&seen),
            "{name}: found {seen:?}, acknowledged {:?}, in flight {:?}",
            known.acked,
            known.in_flight
        );
        known.acked = seen;
        known.in_flight = None;
    }
    list_rv
}

#[test]
fn acknowledged_writes_survive_sigkill_at_random_moments_of_a_write_storm() {
    let iterations: usize = std::env::var("TFJOB_CRASH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| tfjob_test_support::rounds(50, 12));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let model: Model = Arc::default();
    {
        let mut m = model.lock().unwrap();
        for w in 0..WRITERS {
            for k in 0..KEYS {
                m.insert(cm_name(w, k), Known::default());
            }
            m.insert(job_name(w), Known::default());
        }
    }
    let seed = std::env::var("TFJOB_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("seed {seed} (TFJOB_CRASH_SEED repeats this run)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut seen_before = 0;
    let mut acknowledged = 0usize;
    for iteration in 0..iterations {
        let mut server = serve_state(&state, dir.path());
        let client = runtime.block_on(server.client());
        seen_before = runtime.block_on(check(&client, &model, seen_before));
        if iteration == 0 {
            // The jobs whose status the storm writes; suspended, so nothing else writes them.
            let jobs: Api<TFJob> = Api::namespaced(client.clone(), NAMESPACE);
            for w in 0..WRITERS {
                let created = runtime
                    .block_on(jobs.create(&PostParams::default(), &tfjob(&job_name(w))))
                    .unwrap();
                seen_before = seen_before.max(rv_of(&created.metadata));
            }
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| runtime.spawn(storm(client.clone(), w, Arc::clone(&model), rng.u64(..))))
            .collect();
        std::thread::sleep(Duration::from_millis(rng.u64(50..600)));
        server.kill();
        for writer in writers {
            let (highest, acked) = runtime.block_on(writer).expect("a writer panicked");
            seen_before = seen_before.max(highest);
            acknowledged += acked;
        }
    }
    let mut server = serve_state(&state, dir.path());
    let client = runtime.block_on(server.client());
    runtime.block_on(check(&client, &model, seen_before));
    server.kill();
    eprintln!(
        "{iterations} kills; {acknowledged} acknowledged writes, every one checked after its restart"
    );
}

#[test]
fn ten_configmaps_created_with_kubectl_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let mut server = serve_state(&state, dir.path());
    for i in 0..10 {
        server.kubectl(&[
            "create",
            "configmap",
            &format!("c{i}"),
            &format!("--from-literal=k=v{i}"),
        ]);
    }
    server.kill();
    let server = serve_state(&state, dir.path());
    let names = server.kubectl(&["get", "configmaps", "-o", "name"]);
    for i in 0..10 {
        assert!(names.contains(&format!("configmap/c{i}\n")), "{names}");
    }
    let value = server.kubectl(&["get", "configmap", "c7", "-o", "jsonpath={.data.k}"]);
    assert_eq!(value, "v7");
}
