//! What the end-to-end tests of the embedded cluster share: starting a cluster with the default
//! Wasm policies, polling until an expected state shows, building TFJobs, and reading pods,
//! conditions and events back through the API.
//!
//! Every test file compiles this module on its own and uses a different subset of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod kubectl;
pub mod real;

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use tfjob_api::{JobConditionType, TFJob};
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::{Policies, PolicyArgs};
use tfjob_policy_engine::SandboxLimits;

/// The image of every test job; the simulated kubelet only names it.
pub const IMAGE: &str = "kubeflow/tf-dist-mnist-test:1.0";
/// The container of a TFJob pod that runs the training.
pub const MAIN: &str = "tensorflow";

// ---------------------------------------------------------------------------------------------
// Clusters

/// The default policies, compiled once per test binary: compiling takes seconds, and every
/// operator builds its own registry from them, so clusters never see each other's ConfigMaps.
pub fn default_policies() -> Arc<Policies> {
    static POLICIES: OnceLock<Arc<Policies>> = OnceLock::new();
    Arc::clone(POLICIES.get_or_init(|| Arc::new(load_policies(&PolicyArgs::default()))))
}

/// The default policies under a `--policy-config` document, loaded as the flag loads it (the
/// file is read once, while loading).
pub fn policies_with_config(config: &str) -> Arc<Policies> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("policy-config.yaml");
    std::fs::write(&path, config).expect("the policy config is written");
    let args = PolicyArgs {
        policy_config: Some(path),
        ..PolicyArgs::default()
    };
    Arc::new(load_policies(&args))
}

/// Loads `args`' policies, compiled once for every test process where no cache is named
/// (`tfjob_test_support::compiled_policies_dir`).
fn load_policies(args: &PolicyArgs) -> Policies {
    let args = PolicyArgs {
        policy_cache_dir: args
            .policy_cache_dir
            .clone()
            .or_else(tfjob_test_support::compiled_policies_dir),
        ..args.clone()
    };
    Policies::load(&args, SandboxLimits::default()).expect("the default policies load")
}

/// A kubelet with room for every pod of a test at once (each container requests 1 cpu, 1Gi).
pub fn roomy_kubelet() -> KubeletConfig {
    KubeletConfig {
        nodes: 4,
        cpu: "64".into(),
        memory: "256Gi".into(),
        gpus_per_node: 0,
        default_duration: Duration::from_secs(1),
        startup: Duration::from_millis(50),
        ..KubeletConfig::default()
    }
}

/// A runtime for tests that drive a cluster from synchronous code; two workers, as many as the
/// test machines have cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// Starts a cluster; must run inside a Tokio runtime.
pub async fn start_cluster(options: ClusterOptions) -> EmbeddedCluster {
    log_to_test_output();
    EmbeddedCluster::start(options)
        .await
        .expect("the embedded cluster starts")
}

/// Sends the operator's and the cluster's logs to the test's captured output, which is printed
/// when the test fails: warnings by default (failed writes, retries), more under `TEST_LOG`
/// (an `EnvFilter` directive such as `tfjob_controller=debug`).
fn log_to_test_output() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TEST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second cluster in the same binary finds the subscriber installed already.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A whole cluster on a runtime of its own, which outlives every test that uses it.
pub struct Background {
    // Dropped before the runtime it runs on.
    pub cluster: EmbeddedCluster,
    pub runtime: tokio::runtime::Runtime,
}

impl Background {
    pub fn start(options: ClusterOptions) -> Background {
        let runtime = runtime();
        let cluster = runtime.block_on(start_cluster(options));
        Background { cluster, runtime }
    }
}

/// A Namespace object named `name`.
pub fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace")
}

/// Creates namespace `name`; one that exists already is as good.
pub async fn ensure_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces
        .create(&PostParams::default(), &namespace(name))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Calls `check` every `interval` until it gives `Ok`, for at most `timeout`; on timeout returns
/// what the last call gave, so that the caller can fail saying what it saw.
pub async fn poll<T, E, F, Fut>(timeout: Duration, interval: Duration, mut check: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(interval).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs

/// A TFJob with this spec.
pub fn tfjob(name: &str, spec: Value) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("TFJob {name} is well formed: {e}"))
}

/// One replica spec: `replicas` pods under restart policy `policy` (empty: the default),
/// scripted by `sim` (`("duration", "1s")` is the annotation `sim.tfjob.dev/duration`).
pub fn replica(replicas: i32, policy: &str, sim: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = sim
        .iter()
        .map(|(k, v)| (format!("sim.tfjob.dev/{k}"), json!(v)))
        .collect();
    let mut spec = json!({
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": MAIN, "image": IMAGE}]},
        },
    });
    if !policy.is_empty() {
        spec["restartPolicy"] = json!(policy);
    }
    spec
}

/// Whether the job has the condition `type_` with status True.
pub fn is_true(job: &TFJob, type_: JobConditionType) -> bool {
    job.status.as_ref().is_some_and(|s| s.is_true(type_))
}

// ---------------------------------------------------------------------------------------------
// Pods

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

pub fn main_container(pod: &Pod) -> Option<&Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == MAIN)
}

pub fn main_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == MAIN)
}

/// The value of environment variable `name` of the main container.
pub fn env(pod: &Pod, name: &str) -> Option<String> {
    main_container(pod)?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

// ---------------------------------------------------------------------------------------------
// Events

/// Every event of `namespace` about an object of `kind`, with that object's name.
pub async fn events_about(client: &Client, namespace: &str, kind: &str) -> Vec<(String, Event)> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing events of {namespace}: {e}"));
    list.items
        .into_iter()
        .filter_map(|e| {
            let about = e.regarding.as_ref()?;
            if about.kind.as_deref() != Some(kind) {
                return None;
            }
            Some((about.name.clone().unwrap_or_default(), e))
        })
        .collect()
}

/// `(type, reason, note)` of an event.
pub fn summary(e: Event) -> (String, String, String) {
    (
        e.type_.unwrap_or_default(),
        e.reason.unwrap_or_default(),
        e.note.unwrap_or_default(),
    )
}
