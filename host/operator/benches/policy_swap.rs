//! Policy swap latency: from the update of a policy ConfigMap to the first decision by the new
//! version, while jobs keep being reconciled.
//!
//! The embedded cluster runs the operator; a steady stream of small TFJobs (one every 100 ms)
//! keeps it reconciling. Each round replaces the `default-decorate` policy with a new version:
//! the default module with a custom section naming the round (so the digest changes and the
//! module is really compiled, not found in the cache) and a label `policy-version: vN` in its
//! settings. Measured per round:
//! - activation: until the ConfigMap's status annotation says `Active` with the new digest (the
//!   registry is swapped just before the annotation is written);
//! - first decision: until a pod created by the operator carries the new label (bounded below
//!   by the 100 ms between steady jobs).
//!
//! With `TFJOB_SWAP_POLICY=cel`, each round is a new version of a CEL policy ConfigMap instead
//! (a document labelling pods `policy-version: vN`): nothing new to compile before it serves
//! (the version's copy of the evaluator, pre-initialised for its document, is made in the
//! background while its first calls run from the plain evaluator).
//!
//! The first version (v0) serves before the rounds start, so no round pays for compiling it.
//!
//! `cargo bench -p tfjob-operator --bench policy_swap` (`TFJOB_SWAP_ROUNDS`, default 40).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tfjob_cluster::Part;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;
use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::Policies;
use tfjob_policy_engine::configmap::{self, PolicyState, PolicyStatus};
use tfjob_policy_engine::{PolicyManifest, defaults};

const POLICY_NS: &str = "tfjob-system";
const JOBS_NS: &str = "steady";

/// `wasm` with a custom section `tfjob-bench-round` holding `round`: same behaviour, new digest.
fn with_round(wasm: &[u8], round: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"tfjob-bench-round";
    let payload = round.to_le_bytes();
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = wasm.to_vec();
    out.push(0); // custom section id
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// What each round's ConfigMap carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The default decoration module, recompiled every round.
    Module,
    /// A CEL document.
    Cel,
}

fn policy_configmap(kind: Kind, round: usize) -> ConfigMap {
    let version = format!("v{round}");
    match kind {
        Kind::Module => {
            let d = defaults::find("default-decorate").expect("the default decorate policy");
            let mut manifest = defaults::manifest(d);
            manifest.settings["defaultLabels"] = json!({"policy-version": version});
            let wasm = with_round(d.wasm, round);
            configmap::pack(manifest, &wasm, POLICY_NS, true).expect("packs")
        }
        Kind::Cel => {
            let manifest = PolicyManifest {
                name: "cel-swap".into(),
                ..PolicyManifest::default()
            };
            let document = format!(
                "mutations:\n- patchType: ApplyConfiguration\n  applyConfiguration:\n    \
                 expression: \"Object{{metadata: Object.metadata{{labels: {{'policy-version': \
                 '{version}'}}}}}}\"\n"
            );
            configmap::pack_cel(&manifest, &document, POLICY_NS).expect("packs")
        }
    }
}

fn steady_job(i: usize) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": format!("steady-{i:05}"), "namespace": JOBS_NS},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {
            "metadata": {"annotations": {"sim.tfjob.dev/duration": "1s"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:1.0"}]}
        }}}}
    })
}

/// The version of the ConfigMap its `Active` status is about.
fn active_version(store: &Store, name: &str) -> Option<String> {
    let t = store.resource("", "configmaps")?;
    let cm = store.get(&t, Some(POLICY_NS), name).ok()?;
    let cm = ConfigMap::deserialize(&*cm).ok()?;
    match PolicyStatus::of(&cm)? {
        Ok(PolicyStatus {
            state: PolicyState::Active,
            resource_version,
            ..
        }) => resource_version,
        _ => None,
    }
}

fn labelled_pod_exists(store: &Store, version: &str) -> bool {
    let t = store.resource("", "pods").expect("pods are served");
    let (pods, _) = store.list(&t, Some(JOBS_NS));
    pods.iter().any(|p| {
        p.pointer("/metadata/labels/policy-version")
            .and_then(Value::as_str)
            == Some(version)
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} rounds)",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}

fn main() {
    let rounds: usize = std::env::var("TFJOB_SWAP_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(40);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let kind = match std::env::var("TFJOB_SWAP_POLICY").as_deref() {
        Ok("cel") => Kind::Cel,
        _ => Kind::Module,
    };
    // The operator's own limits: the CEL evaluator's pre-initialised copy is larger than the
    // library's default module limit.
    let policies = Arc::new(
        Policies::load(
            &Default::default(),
            tfjob_operator::policy_setup::operator_limits(),
        )
        .unwrap(),
    );
    let mut options = ClusterOptions::new(policies);
    options.kubelet.nodes = 20;
    options.kubelet.cpu = "1000".into();
    options.kubelet.memory = "4Ti".into();
    let cluster = runtime.block_on(EmbeddedCluster::start(options)).unwrap();
    let store = Arc::clone(cluster.store());
    let configmaps = store.resource("", "configmaps").unwrap();
    let tfjobs = store.resource("kubeflow.org", "tfjobs").unwrap();

    // Steady reconciles: a job every 100 ms for the whole run.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let steady = {
        let (store, stop, tfjobs) = (Arc::clone(&store), Arc::clone(&stop), tfjobs.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                store.create(&tfjobs, Some(JOBS_NS), steady_job(i)).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            i
        })
    };

    let first = policy_configmap(kind, 0);
    let name = first.metadata.name.clone().unwrap();
    let module_kib = first
        .binary_data
        .as_ref()
        .and_then(|b| b.values().next())
        .map_or(0, |v| v.0.len() / 1024);
    store
        .create(
            &configmaps,
            Some(POLICY_NS),
            serde_json::to_value(&first).unwrap(),
        )
        .unwrap();
    match kind {
        Kind::Module => println!(
            "policy module: {} KiB ({module_kib} KiB gzip in the ConfigMap)",
            defaults::find("default-decorate").unwrap().wasm.len() / 1024
        ),
        Kind::Cel => println!(
            "CEL policy: the evaluator ({} KiB) runs a document of one mutation",
            defaults::CEL_POLICY_WASM.len() / 1024
        ),
    }
    // The first version serves before the rounds start: what is measured is a swap, not the
    // compilation of the first module (or of the CEL evaluator).
    let started = Instant::now();
    while !labelled_pod_exists(&store, "v0") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the first version never served"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut activation = Vec::new();
    let mut decision = Vec::new();
    for round in 1..=rounds {
        let cm = policy_configmap(kind, round);
        let version = format!("v{round}");
        let mut value = serde_json::to_value(&cm).unwrap();
        let current = store.get(&configmaps, Some(POLICY_NS), &name).unwrap();
        value["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let started = Instant::now();
        let replaced = store
            .replace(&configmaps, Some(POLICY_NS), &name, value, Part::Whole)
            .unwrap();
        let written = replaced["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        let (mut active, mut decided) = (None, None);
        while active.is_none() || decided.is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "round {round}: the new version never served"
            );
            if active.is_none() && active_version(&store, &name) == written {
                active = Some(started.elapsed());
            }
            if decided.is_none() && labelled_pod_exists(&store, &version) {
                decided = Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        activation.push(active.unwrap());
        decision.push(decided.unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let submitted = steady.join().unwrap();
    println!("steady jobs submitted meanwhile: {submitted}");
    report(
        "activation (status Active about the new version)",
        activation,
    );
    report("first decision by the new version", decision);
    drop(cluster);
    drop(runtime);
}
