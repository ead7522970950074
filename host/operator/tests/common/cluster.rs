//! The embedded cluster started without its operator, or the real control plane with `deploy/`
//! installed, and `tfjob-operator run` processes against it: what the tests of `run`'s flags and
//! of leader election share.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::{Policies, PolicyArgs};
use tfjob_policy_engine::SandboxLimits;

use super::{Killed, http_get};

/// What a [`Cluster`] runs on.
enum Backend {
    Up(Box<EmbeddedCluster>),
    Real(Box<tfjob_control_plane::ControlPlane>),
}

/// A cluster without an operator, for `run` processes.
pub struct Cluster {
    client: Client,
    backend: Backend,
    pub runtime: tokio::runtime::Runtime,
    /// What the operator processes use: the administrator's on `up`, `deploy/`'s ServiceAccount
    /// on the real control plane.
    pub kubeconfig: std::path::PathBuf,
    /// A temporary directory for the test's files (the kubeconfig is written there).
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Started with `configure` applied to the options (the operator is off whatever it sets).
    pub fn start(configure: impl FnOnce(&mut ClusterOptions)) -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // Compiled once for every test process (tfjob_test_support::compiled_policies_dir).
        let args = PolicyArgs {
            policy_cache_dir: super::compiled_policies_dir(),
            ..PolicyArgs::default()
        };
        let policies = Policies::load(&args, SandboxLimits::default()).unwrap();
        let mut options = ClusterOptions::new(Arc::new(policies));
        configure(&mut options);
        options.run_operator = false;
        let cluster = runtime.block_on(EmbeddedCluster::start(options)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig).unwrap();
        Cluster {
            client: cluster.client(),
            backend: Backend::Up(Box::new(cluster)),
            runtime,
            kubeconfig,
            dir,
        }
    }

    /// The real control plane with `deploy/`'s CRD and standalone overlay installed; the
    /// operator processes run as `deploy/`'s ServiceAccount.
    pub fn start_real() -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let plane = super::real::installed();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig =
            super::real::service_account_kubeconfig(&plane, dir.path(), plane.server());
        let client = runtime.block_on(async {
            let admin = kube::config::Kubeconfig::read_from(plane.kubeconfig()).unwrap();
            let config = kube::Config::from_custom_kubeconfig(admin, &Default::default())
                .await
                .unwrap();
            Client::try_from(config).unwrap()
        });
        Cluster {
            client,
            backend: Backend::Real(Box::new(plane)),
            runtime,
            kubeconfig,
            dir,
        }
    }

    /// The embedded cluster, for a test that reaches into it.
    pub fn embedded(&self) -> &EmbeddedCluster {
        match &self.backend {
            Backend::Up(cluster) => cluster,
            Backend::Real(_) => panic!("this test runs on up's embedded cluster only"),
        }
    }

    /// The administrator's client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Creates the namespaces `names` (those that exist already stay as they are).
    pub fn create_namespaces(&self, names: &[&str]) {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(self.client());
        for name in names {
            let object =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            let _ = self
                .runtime
                .block_on(api.create(&kube::api::PostParams::default(), &object));
        }
    }

    /// Submits a TFJob (a full manifest) in its namespace, creating the namespace if needed.
    pub fn submit_manifest(&self, job: Value) {
        let job: TFJob = serde_json::from_value(job).unwrap();
        let namespace = job
            .metadata
            .namespace
            .clone()
            .expect("the job names its namespace");
        let jobs: Api<TFJob> = Api::namespaced(self.client(), &namespace);
        self.runtime.block_on(async {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client());
            let ns = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
            let _ = namespaces.create(&PostParams::default(), &ns).await;
            jobs.create(&PostParams::default(), &job).await.unwrap();
        });
    }

    /// Submits a one-worker job in `namespace`.
    pub fn submit(&self, namespace: &str, name: &str) {
        self.submit_manifest(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
        }));
    }

    /// A job as stored.
    pub fn job(&self, namespace: &str, name: &str) -> TFJob {
        let jobs: Api<TFJob> = Api::namespaced(self.client(), namespace);
        self.runtime.block_on(jobs.get(name)).unwrap()
    }

    /// The last condition of a job, if it has any.
    pub fn state(&self, namespace: &str, name: &str) -> Option<String> {
        let conditions = self.job(namespace, name).status?.conditions;
        conditions.last().map(|c| format!("{:?}", c.type_))
    }

    /// Runs the binary against this cluster. Its log goes to the test's own stderr (shown
    /// when a test fails), never to a pipe nobody reads, which would block it once full.
    pub fn operator(&self, args: &[&str], env: &[(&str, &str)]) -> Killed {
        // Its warnings and errors (the log is on standard output) reach the test's output, so a
        // child that never becomes ready says why.
        Killed(
            self.command(args, env)
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("tfjob-operator runs"),
        )
    }

    /// `tfjob-operator run` against this cluster.
    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
        let mut cmd = super::operator();
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
    pub fn operator_requests(&self) -> u64 {
        self.embedded()
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
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path).map(|(code, _)| code)
}

/// The value of the first sample of `metric` (a name with labels, as the text shows it) on
/// the `/metrics` at `addr`.
pub fn metric(addr: SocketAddr, metric: &str) -> Option<f64> {
    let (code, body) = http_get(addr, "/metrics")?;
    if code != 200 {
        return None;
    }
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(metric)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
