//! Tenant isolation benchmark: how long one team waits for its pods while another team attacks
//! the operator, against the same wait with nobody attacking.
//!
//! The scenario of the tenant-isolation issue, on the embedded cluster with its operator in
//! this process, as `tfjob-operator up --nodes 40 --policy-namespace tfjob-system
//! --policy-namespace team-a` runs it (four reconcile threads, the default Wasm policies).
//! Team-b, with no policies of its own, submits 5 TFJobs of 4 workers and the bench measures
//! the time until its 20 pods exist. Each run starts a fresh cluster:
//! - `alone`: nothing else happens;
//! - `looping policies`: team-a first ships 8 decoration policies that loop until their 50 ms
//!   deadline (`failurePolicy: Ignore`) and submits 60 TFJobs of 8 workers;
//! - `job flood`: team-a first submits 400 TFJobs of one worker, with no policies of its own.
//!
//! Printed per run: team-b's time to its pods, team-a's time to its own pods, and for the
//! attacks the ratio to `alone` against the target (1.5x). Jobs are written straight
//! into the store, as the scale bench writes them, so the wait measured is the operator's and
//! the simulated kubelet's, not a client's.
//!
//! `cargo bench -p tfjob-operator --bench tenants` (`TFJOB_TENANT_RUNS` repeats each run, default
//! 3; the median is judged).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_cluster::http::requests::Verb;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::Policies;
use tfjob_policy_engine::configmap::{self, STATUS_ANNOTATION};
use tfjob_policy_engine::{FailurePolicy, Hook, PolicyManifest, SandboxLimits, defaults};

const HOSTILE: &str = "team-a";
const QUIET: &str = "team-b";
/// The target: team-b's time to its pods under attack, against its time alone.
const TARGET_RATIO: f64 = 1.5;
/// The longest a bench waits for any state.
const LIMIT: Duration = Duration::from_secs(300);

/// What team-a does before team-b submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    None,
    LoopingPolicies,
    JobFlood,
}

impl Attack {
    fn label(self) -> &'static str {
        match self {
            Attack::None => "alone",
            Attack::LoopingPolicies => "looping policies",
            Attack::JobFlood => "job flood",
        }
    }
}

fn job(namespace: &str, name: &str, workers: usize) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": workers,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": {"sim.tfjob.dev/duration": "60s"}},
                "spec": {"containers": [{
                    "name": "tensorflow",
                    "image": "kubeflow/tf-dist-mnist-test:1.0",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}
                }]}
            }
        }}}
    })
}

/// Writes `count` jobs `<prefix>-<i>` of `workers` workers into `namespace`; returns their pods.
fn submit(store: &Store, namespace: &str, prefix: &str, count: usize, workers: usize) -> usize {
    let tfjobs = store
        .resource("kubeflow.org", "tfjobs")
        .expect("served type");
    for i in 0..count {
        let name = format!("{prefix}-{i:03}");
        store
            .create(&tfjobs, Some(namespace), job(namespace, &name, workers))
            .expect("the job is stored");
    }
    count * workers
}

fn looping_policy(i: usize) -> Value {
    let manifest = PolicyManifest {
        name: format!("hostile-{i}"),
        hooks: vec![Hook::Decorate],
        failure_policy: FailurePolicy::Ignore,
        settings: json!({"mode": "loop"}),
        ..PolicyManifest::default()
    };
    let cm = configmap::pack(manifest, defaults::HOSTILE_POLICY_WASM, HOSTILE, true)
        .expect("the policy packs");
    serde_json::to_value(cm).expect("a ConfigMap is JSON")
}

fn pods(store: &Store, namespace: &str) -> usize {
    let t = store.resource("", "pods").expect("served type");
    store.count(&t, Some(namespace), |_| true)
}

fn active_policies(store: &Store) -> usize {
    let t = store.resource("", "configmaps").expect("served type");
    store.count(&t, Some(HOSTILE), |cm| {
        cm.pointer("/metadata/annotations")
            .and_then(|a| a.get(STATUS_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|s| s.contains("\"state\":\"Active\""))
    })
}

/// Polls `done` every 10 ms; how long it took, or `None` past [`LIMIT`].
fn wait(since: Instant, done: impl Fn() -> bool) -> Option<Duration> {
    while since.elapsed() < LIMIT {
        if done() {
            return Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// One run on a fresh cluster: team-b's and team-a's times to all their pods.
fn run(runtime: &tokio::runtime::Runtime, attack: Attack) -> (Option<Duration>, Option<Duration>) {
    let policies = Arc::new(Policies::load(&Default::default(), SandboxLimits::default()).unwrap());
    let mut options = ClusterOptions::new(policies);
    options.policy_namespaces = vec!["tfjob-system".to_owned(), HOSTILE.to_owned()];
    options.kubelet = KubeletConfig {
        nodes: 40,
        cpu: "1000".into(),
        memory: "4Ti".into(),
        gpus_per_node: 0,
        ..KubeletConfig::default()
    };
    let cluster = runtime.block_on(EmbeddedCluster::start(options)).unwrap();
    let store = Arc::clone(cluster.store());
    let started = Instant::now();
    wait(started, || {
        cluster.requests().snapshot().count(Verb::Watch, "tfjobs") > 0
    })
    .expect("the operator watches TFJobs");
    // Team-a's time runs from its first job.
    let mut attack_started = Instant::now();
    let hostile_pods = match attack {
        Attack::None => 0,
        Attack::LoopingPolicies => {
            let configmaps = store.resource("", "configmaps").unwrap();
            for i in 0..8 {
                store
                    .create(&configmaps, Some(HOSTILE), looping_policy(i))
                    .unwrap();
            }
            wait(Instant::now(), || active_policies(&store) == 8)
                .expect("the looping policies serve");
            attack_started = Instant::now();
            submit(&store, HOSTILE, "attack", 60, 8)
        }
        Attack::JobFlood => submit(&store, HOSTILE, "flood", 400, 1),
    };
    let submitted = Instant::now();
    let quiet_pods = submit(&store, QUIET, "quiet", 5, 4);
    let quiet = wait(submitted, || pods(&store, QUIET) == quiet_pods);
    let hostile = wait(attack_started, || pods(&store, HOSTILE) == hostile_pods);
    drop(cluster);
    (quiet, hostile)
}

fn median(mut times: Vec<Duration>) -> Option<Duration> {
    times.sort();
    times.get(times.len() / 2).copied()
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("not reached".to_owned(), |d| {
        format!("{:.2} s", d.as_secs_f64())
    })
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runs: usize = std::env::var("TFJOB_TENANT_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
        .max(1);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut alone = None;
    for attack in [Attack::None, Attack::LoopingPolicies, Attack::JobFlood] {
        let mut quiet_times = Vec::new();
        for n in 1..=runs {
            let (quiet, hostile) = run(&runtime, attack);
            println!(
                "{:>16} run {n}: team-b's 20 pods after {}; team-a's pods after {}",
                attack.label(),
                secs(quiet),
                if attack == Attack::None {
                    "-".to_owned()
                } else {
                    secs(hostile)
                }
            );
            quiet_times.extend(quiet);
        }
        let Some(m) = median(quiet_times) else {
            println!("{:>16}: team-b never got its pods", attack.label());
            continue;
        };
        match alone {
            None => {
                println!("{:>16}: median {:.2} s", attack.label(), m.as_secs_f64());
                alone = Some(m);
            }
            Some(base) => {
                let ratio = m.as_secs_f64() / base.as_secs_f64();
                println!(
                    "{:>16}: median {:.2} s, {ratio:.2}x alone (target <= {TARGET_RATIO}x: {})",
                    attack.label(),
                    m.as_secs_f64(),
                    if ratio <= TARGET_RATIO {
                        "met"
                    } else {
                        "NOT MET"
                    }
                );
            }
        }
    }
}
