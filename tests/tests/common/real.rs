//! The real Kubernetes control plane (`tfjob-control-plane`: etcd, kube-apiserver,
//! controller-manager, scheduler and kwok nodes) as the cluster of an end-to-end test, set up as
//! a cluster operator sets one up: `deploy/`'s TFJob CRD and standalone overlay applied by the
//! administrator, and the operator, with the default Wasm policies, running in this process as
//! the ServiceAccount `deploy/` binds, with a token the real server minted, under the real RBAC
//! authorizer. It is the other side of the switch in [`super::kubectl`]: a suite written once
//! runs on `up`'s embedded cluster and here.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use tfjob_control_plane::{ControlPlane, NodeSpec, Options};
use tfjob_operator::api_metrics::ApiMetrics;
use tfjob_operator::operator::OperatorConfig;
use tfjob_operator::policy_setup::Policies;

use super::kubectl::repo;

/// How long the CRD may take to be served.
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(60);

/// A control plane with `deploy/` installed and the operator running on it. Dropping it stops
/// the operator, then the control plane.
pub struct RealCluster {
    /// The administrator's client, on [`RealCluster::runtime`].
    pub client: kube::Client,
    // Dropped first among what holds processes: the operator's runtime, which ends its task.
    pub runtime: tokio::runtime::Runtime,
    stop: tokio::sync::watch::Sender<bool>,
    pub plane: ControlPlane,
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// kubectl as the administrator; its stdout, which must succeed.
fn admin(plane: &ControlPlane, args: &[&str]) -> String {
    plane.kubectl_run(args).unwrap_or_else(|e| panic!("{e}"))
}

impl RealCluster {
    /// Starts a control plane of four roomy nodes (64 cpus and 256 GiB each, as the embedded
    /// cluster's test kubelet), installs `deploy/` and starts the operator with `policies`.
    pub fn start(policies: Arc<Policies>) -> RealCluster {
        let plane = ControlPlane::start(Options {
            nodes: vec![
                NodeSpec {
                    cpu: "64".into(),
                    memory: "256Gi".into(),
                    ..NodeSpec::default()
                };
                4
            ],
            ..Options::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let crd = repo("deploy/crd/kubeflow.org_tfjobs.yaml");
        admin(
            &plane,
            &["apply", "--server-side", "-f", crd.to_str().unwrap()],
        );
        let overlay = repo("deploy/overlays/standalone");
        admin(
            &plane,
            &["apply", "--server-side", "-k", overlay.to_str().unwrap()],
        );
        wait_established(&plane, "tfjobs.kubeflow.org");
        let kubeconfig = service_account_kubeconfig(&plane);
        let runtime = super::runtime();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let client = runtime.block_on(async {
            let admin = Kubeconfig::read_from(plane.kubeconfig())
                .expect("the administrator's kubeconfig reads");
            let admin = kube::Config::from_custom_kubeconfig(admin, &KubeConfigOptions::default())
                .await
                .expect("the administrator's kubeconfig loads");
            let admin = kube::Client::try_from(admin).expect("the administrator's client");
            let config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .expect("the ServiceAccount's kubeconfig loads");
            let api_metrics = ApiMetrics::default();
            let client = tfjob_operator::api_client::build(config, None, &api_metrics)
                .expect("a client for the ServiceAccount");
            let config = OperatorConfig {
                instance: Some("real".into()),
                // As `up` runs it.
                threads: 4,
                policy_namespaces: vec!["tfjob-system".to_owned()],
                api_metrics,
                ..OperatorConfig::default()
            };
            tokio::spawn(async move {
                let result = tfjob_operator::operator::run(client, config, &policies, async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await;
                if let Err(e) = result {
                    eprintln!("the operator stopped with an error: {e}");
                }
            });
            admin
        });
        RealCluster {
            client,
            runtime,
            stop,
            plane,
        }
    }

    /// The administrator's kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        self.plane.kubeconfig()
    }
}

/// Polls until CRD `name` is established (`kubectl wait` fails at once while it has no
/// conditions yet).
fn wait_established(plane: &ControlPlane, name: &str) {
    let started = Instant::now();
    loop {
        let status = plane.kubectl_run(&[
            "get",
            "crd",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ]);
        if status.as_deref().is_ok_and(|s| s == "True") {
            return;
        }
        assert!(
            started.elapsed() < ESTABLISHED_WITHIN,
            "CRD {name} not established: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A kubeconfig for `deploy/`'s ServiceAccount, with a token the real server minted for it.
fn service_account_kubeconfig(plane: &ControlPlane) -> Kubeconfig {
    let text = plane
        .service_account_kubeconfig("tfjob-system", "tfjob-operator", 1, plane.server())
        .unwrap_or_else(|e| panic!("{e}"));
    Kubeconfig::from_yaml(&text).expect("a kubeconfig")
}
