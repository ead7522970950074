//! The embedded cluster without its own operator, for tests that run `tfjob-operator run`
//! against it as a child process, and the checks such tests share: jobs submitted and their
//! state, free loopback addresses, HTTP status of the operator's endpoints, waiting.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tfjob_api::TFJob;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::{Policies, PolicyArgs};
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::SandboxLimits;

/// The embedded cluster without its operator, serving Volcano's PodGroups.
pub struct Cluster {
    pub runtime: tokio::runtime::Runtime,
    pub cluster: EmbeddedCluster,
    /// Written in `dir`.
    pub kubeconfig: std::path::PathBuf,
    /// A temporary directory for the test's files.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
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
            dir,
        }
    }

    pub fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Submits a one-worker job in `namespace`.
    pub fn submit(&self, namespace: &str, name: &str) {
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
    pub fn state(&self, namespace: &str, name: &str) -> Option<String> {
        let jobs: Api<TFJob> = Api::namespaced(self.client(), namespace);
        let job = self.runtime.block_on(jobs.get(name)).unwrap();
        let conditions = job.status?.conditions;
        conditions.last().map(|c| format!("{:?}", c.type_))
    }
}

/// A loopback address with a free port.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The status code of `GET path`, or `None` while nothing listens.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
