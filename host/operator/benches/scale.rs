//! Scale benchmark: N TFJobs of 1 PS + 4 workers submitted at once against the embedded cluster.
//!
//! The operator runs as its own process (`tfjob-operator run`, default Wasm policies), so its
//! peak memory is its own (`VmHWM`). The jobs are written straight into the store, not over
//! HTTP, so every request the API server counts is the operator's. Reported:
//! - time until every pod exists, and until every job has succeeded;
//! - the operator's write requests per job, against the minimum the work needs: 5 pods and 5
//!   services created and 3 status writes (Created, Running, Succeeded) = 13 (cleanPodPolicy
//!   defaults to `None`: nothing to delete); events are counted apart;
//! - the operator's peak resident memory.
//!
//! A one-shot run of a minute is not what criterion's sampling is for, so this bench has its
//! own `main`: `cargo bench -p tfjob-operator --bench scale` (`TFJOB_SCALE_JOBS` sets N,
//! default 1000).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_cluster::requests::{RequestSnapshot, Verb};
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::Policies;
use tfjob_policy_engine::SandboxLimits;

const NAMESPACE: &str = "bench";

fn job(i: usize) -> Value {
    let template = |duration: &str| {
        json!({
            "metadata": {"annotations": {"sim.tfjob.dev/duration": duration}},
            "spec": {"containers": [{
                "name": "tensorflow",
                "image": "kubeflow/tf-dist-mnist-test:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}
            }]}
        })
    };
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": format!("scale-{i:05}"), "namespace": NAMESPACE},
        "spec": {"tfReplicaSpecs": {
            "PS": {"replicas": 1, "restartPolicy": "Never", "template": template("20s")},
            "Worker": {"replicas": 4, "restartPolicy": "Never", "template": template("2s")}
        }}
    })
}

/// Kills the operator process when the bench ends, however it ends.
struct OperatorProcess(Child);

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl OperatorProcess {
    /// Peak resident set size in KiB (`VmHWM`).
    fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).ok()?;
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }
}

/// Counts in place: copying thousands of objects every poll would load the very server the
/// bench measures.
fn count(store: &Store, plural: &str, done: impl Fn(&Value) -> bool) -> usize {
    let group = if plural == "tfjobs" {
        "kubeflow.org"
    } else {
        ""
    };
    let t = store.resource(group, plural).expect("served type");
    store.count(&t, Some(NAMESPACE), done)
}

fn succeeded(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
        })
}

fn writes(s: &RequestSnapshot, resource: &str) -> u64 {
    [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete]
        .into_iter()
        .map(|v| s.count(v, resource))
        .sum()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let jobs: usize = std::env::var("TFJOB_SCALE_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let policies = Arc::new(Policies::load(&Default::default(), SandboxLimits::default()).unwrap());
    let mut options = ClusterOptions::new(policies);
    options.run_operator = false;
    options.kubelet = KubeletConfig {
        nodes: 50,
        cpu: "1000".into(),
        memory: "4Ti".into(),
        gpus_per_node: 0,
        ..KubeletConfig::default()
    };
    let cluster = runtime.block_on(EmbeddedCluster::start(options)).unwrap();
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let store = Arc::clone(cluster.store());

    let operator = OperatorProcess(
        Command::new(env!("CARGO_BIN_EXE_tfjob-operator"))
            .args([
                "run",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--threads",
                "8",
            ])
            .args(["--health-probe-bind-address", "0"])
            // The bench measures the operator, not the client-side rate limit (20 per second
            // by default, as training-operator's).
            .args(["--kube-api-qps", "1000000", "--kube-api-burst", "1000000"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tfjob-operator runs"),
    );
    // Wait until the operator has listed everything (its first list and watch requests).
    let ready = Instant::now();
    while cluster.requests().snapshot().count(Verb::Watch, "tfjobs") == 0 {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "the operator never started watching"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = cluster.requests().snapshot();
    let tfjobs = store.resource("kubeflow.org", "tfjobs").unwrap();

    println!("submitting {jobs} TFJobs of 1 PS + 4 workers");
    let started = Instant::now();
    for i in 0..jobs {
        store.create(&tfjobs, Some(NAMESPACE), job(i)).unwrap();
    }
    let submitted = started.elapsed();
    let pods_wanted = jobs * 5;
    let mut all_pods = None;
    let mut all_done = None;
    let mut peak = 0;
    let limit = Duration::from_secs(600);
    while all_done.is_none() && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(200));
        peak = peak.max(operator.peak_rss_kib().unwrap_or(0));
        if all_pods.is_none() && count(&store, "pods", |_| true) >= pods_wanted {
            all_pods = Some(started.elapsed());
        }
        if all_pods.is_some() && count(&store, "tfjobs", succeeded) == jobs {
            all_done = Some(started.elapsed());
        }
    }
    let after = cluster.requests().snapshot();
    let delta = |resource: &str| writes(&after, resource) - writes(&before, resource);
    let (pods, services, status, jobs_writes, events) = (
        delta("pods"),
        delta("services"),
        delta("tfjobs/status"),
        delta("tfjobs"),
        delta("events"),
    );
    let work = pods + services + status + jobs_writes;
    let minimum = (jobs * 13) as f64;
    let fmt = |d: Option<Duration>| {
        d.map_or("not reached".to_owned(), |d| {
            format!("{:.1} s", d.as_secs_f64())
        })
    };
    println!("submitted in {:.2} s", submitted.as_secs_f64());
    println!("all {pods_wanted} pods created after {}", fmt(all_pods));
    println!("all {jobs} jobs succeeded after {}", fmt(all_done));
    println!(
        "operator writes: pods {pods}, services {services}, status {status}, tfjobs {jobs_writes}, events {events}"
    );
    println!(
        "write amplification (pods + services + job writes) / (13 per job): {:.3}",
        work as f64 / minimum
    );
    println!(
        "operator writes per job: {:.2} (events {:.2})",
        work as f64 / jobs as f64,
        events as f64 / jobs as f64
    );
    println!("operator peak RSS: {:.1} MiB", peak as f64 / 1024.0);
    drop(operator);
    drop(cluster);
}
