//! `tfjob-operator run` with training-operator 1.9's flag names and with this operator's older
//! names, against the embedded cluster started without its own operator: both reconcile, serve
//! metrics and probes where they are told, watch the namespace they are given (by flag or by
//! `$KUBEFLOW_NAMESPACE`), and hold to the client-side rate limit. A gang scheduler whose
//! PodGroup CRD is not installed stops the operator at start.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Killed, eventually, free_addr};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tfjob_api::TFJob;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::{Policies, PolicyArgs};
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::SandboxLimits;

/// The embedded cluster without its operator, serving Volcano's PodGroups.
struct Cluster {
    runtime: tokio::runtime::Runtime,
    cluster: EmbeddedCluster,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let policies = Policies::load(&PolicyArgs::default(), SandboxLimits::default()).unwrap();
        let mut options = ClusterOptions::new(Arc::new(policies));
        options.run_operator = false;
        options.gang_scheduler = Some(GangScheduler::Volcano);
        let cluster = runtime.block_on(EmbeddedCluster::start(options)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig).unwrap();
        Cluster {
            runtime,
            cluster,
            kubeconfig,
            _dir: dir,
        }
    }

    fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Submits a one-worker job in `namespace`.
    fn submit(&self, namespace: &str, name: &str) {
        let job: TFJob = serde_json::from_value(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
        }))
        .unwrap();
        let jobs: Api<TFJob> = Api::namespaced(self.client(), namespace);
        self.runtime.block_on(async {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client());
            let ns = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
            let _ = namespaces.create(&PostParams::default(), &ns).await;
            jobs.create(&PostParams::default(), &job).await.unwrap();
        });
    }

    /// The last condition of a job, if it has any.
    fn state(&self, namespace: &str, name: &str) -> Option<String> {
        let jobs: Api<TFJob> = Api::namespaced(self.client(), namespace);
        let job = self.runtime.block_on(jobs.get(name)).unwrap();
        let conditions = job.status?.conditions;
        conditions.last().map(|c| format!("{:?}", c.type_))
    }

    /// Runs the binary against this cluster.
    fn operator(&self, args: &[&str], env: &[(&str, &str)]) -> Killed {
        Killed(
            self.command(args, env)
                .spawn()
                .expect("tfjob-operator runs"),
        )
    }

    /// `tfjob-operator run` against this cluster.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
        let mut cmd = common::operator();
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("RUST_LOG", "warn")
            .env_remove("KUBEFLOW_NAMESPACE")
            .env_remove("POD_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Requests the operator's client made so far.
    fn operator_requests(&self) -> u64 {
        self.cluster
            .requests()
            .snapshot()
            .agents
            .iter()
            .filter(|c| c.agent == "tfjob-operator")
            .map(|c| c.count)
            .sum()
    }
}

/// The status code of `GET path`, or `None` while nothing listens.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    common::http_get(addr, path).map(|(status, _)| status)
}

/// The operator runs with `args`: metrics on the address given by `metrics_flag`, probes on
/// their own (given as `:PORT`), only the jobs of `watched` reconciled.
fn check_operator(
    c: &Cluster,
    metrics_flag: &str,
    args: &[&str],
    env: &[(&str, &str)],
    watched: &str,
    other: &str,
) {
    let metrics = free_addr();
    let probes = free_addr();
    let metrics_text = metrics.to_string();
    let probes_text = format!(":{}", probes.port());
    let mut all = vec![
        metrics_flag,
        &metrics_text,
        "--health-probe-bind-address",
        &probes_text,
    ];
    all.extend(args);
    let _operator = c.operator(&all, env);
    let probe_at = SocketAddr::from(([127, 0, 0, 1], probes.port()));
    eventually("ready on the probe address", || {
        (http_status(probe_at, "/readyz") == Some(200)).then_some(())
    });
    assert_eq!(http_status(probe_at, "/healthz"), Some(200));
    assert_eq!(http_status(probe_at, "/metrics"), Some(404));
    assert_eq!(http_status(metrics, "/metrics"), Some(200));

    c.submit(watched, "mine");
    c.submit(other, "theirs");
    eventually("the watched namespace's job succeeds", || {
        (c.state(watched, "mine").as_deref() == Some("Succeeded")).then_some(())
    });
    assert_eq!(
        c.state(other, "theirs"),
        None,
        "the other namespace is left alone"
    );
}

#[test]
fn training_operator_flag_names_work() {
    let c = Cluster::start();
    check_operator(
        &c,
        "--metrics-bind-address",
        &[
            "--controller-threads",
            "2",
            "--kube-api-qps",
            "50",
            "--kube-api-burst",
            "60",
            "--gang-scheduler-name",
            "volcano",
            "--enable-scheme",
            "tfjob",
        ],
        &[("KUBEFLOW_NAMESPACE", "team-a")],
        "team-a",
        "team-b",
    );
    // Gang-scheduled: the job got its PodGroup (deleted again when it finished).
    let events: Api<Event> = Api::namespaced(c.client(), "team-a");
    let notes: Vec<String> = c
        .runtime
        .block_on(events.list(&Default::default()))
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes.iter().any(|n| n == "Created PodGroup: mine"),
        "{notes:?}"
    );
}

#[test]
fn the_older_flag_names_still_work() {
    let c = Cluster::start();
    check_operator(
        &c,
        "--metrics-addr",
        &["--threads", "2", "--namespace", "team-b"],
        &[("KUBEFLOW_NAMESPACE", "team-a")],
        "team-b",
        "team-a",
    );
}

#[test]
fn the_client_side_rate_limit_holds() {
    let c = Cluster::start();
    let before = c.operator_requests();
    let started = Instant::now();
    let _operator = c.operator(
        &[
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--kube-api-qps",
            "2",
            "--kube-api-burst",
            "3",
        ],
        &[],
    );
    std::thread::sleep(Duration::from_secs(3));
    let made = c.operator_requests() - before;
    let elapsed = started.elapsed().as_secs_f64();
    // A bucket of 3, refilled at 2 per second: never more than 3 + 2 * elapsed.
    let bound = 3.0 + 2.0 * elapsed;
    assert!(made > 0, "the operator made no request");
    assert!(
        (made as f64) <= bound,
        "{made} requests in {elapsed:.1}s, more than the limit allows ({bound:.1})"
    );
}

#[test]
fn a_gang_scheduler_without_its_crd_stops_the_operator_at_start() {
    let c = Cluster::start();
    let out = c
        .command(
            &[
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                "0",
                "--gang-scheduler-name",
                "scheduler-plugins-scheduler",
            ],
            &[],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scheduling.x-k8s.io/v1alpha1") && stderr.contains("not installed"),
        "{stderr}"
    );
}

#[test]
fn the_deployments_arguments_are_accepted() {
    let text = std::fs::read_to_string(common::repo("deploy/operator/deployment.yaml")).unwrap();
    let deployment: serde_json::Value =
        serde_yaml_ng::from_str(text.split("\n---").next().unwrap()).unwrap();
    let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the operator container has args")
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "run");
    // Parsed in full, then stopped by the missing cluster (a usage error would exit 2).
    let out = common::operator()
        .args(&args)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("KUBEFLOW_NAMESPACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}
