//! Driving a cluster with the real kubectl, a separate process as a user runs it: `up`'s
//! embedded cluster on a background runtime with a kubeconfig written for it, or the real
//! control plane with `deploy/` installed ([`super::real`]), behind one [`Cluster`]; kubectl
//! commands that must succeed, polling a command until its output shows a state, and kubectl
//! processes left running in the background (watches, follows) that are always reaped.
//!
//! [`on_both_clusters!`] turns test bodies written once against a [`Cluster`] into a test on
//! each: `<module>::on_up::<name>` and `<module>::on_real_control_plane::<name>`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tfjob_operator::embedded::ClusterOptions;

use super::Background as ClusterThread;

/// A path of the repository.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// A file of `deploy/examples/`, as a kubectl argument.
pub fn example(name: &str) -> String {
    repo(&format!("deploy/examples/{name}"))
        .display()
        .to_string()
}

/// What a [`Cluster`] runs on.
pub enum Backend {
    /// `up`'s embedded API server, kubelet and operator.
    Up(Box<ClusterThread>),
    /// The real control plane, with the operator in this process.
    Real(Box<super::real::RealCluster>),
}

/// A running cluster and the kubeconfig kubectl uses for it.
pub struct Cluster {
    pub kubeconfig: PathBuf,
    /// kubectl's discovery and OpenAPI cache for this cluster alone: the default one under
    /// `$HOME` is keyed by host and port, and a port reused by a later cluster of another
    /// test (another PodGroup CRD, other resources) would be answered from the old one.
    cache: PathBuf,
    _dir: tempfile::TempDir,
    pub backend: Backend,
}

/// Starts the whole cluster with the default Wasm policies on a background runtime and writes
/// a kubeconfig for it.
pub fn cluster() -> Cluster {
    cluster_with(ClusterOptions::new(super::default_policies()))
}

/// Starts the whole cluster with `options` and writes a kubeconfig for it.
pub fn cluster_with(options: ClusterOptions) -> Cluster {
    let background = ClusterThread::start(options);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    background.cluster.write_kubeconfig(&kubeconfig).unwrap();
    Cluster {
        kubeconfig,
        cache: dir.path().join("cache"),
        _dir: dir,
        backend: Backend::Up(Box::new(background)),
    }
}

/// Starts the real control plane with `deploy/` installed and the operator with the default
/// Wasm policies running as `deploy/`'s ServiceAccount.
pub fn real_cluster() -> Cluster {
    let real = super::real::RealCluster::start(super::default_policies());
    let dir = tempfile::tempdir().unwrap();
    Cluster {
        kubeconfig: real.kubeconfig().to_owned(),
        cache: dir.path().join("cache"),
        _dir: dir,
        backend: Backend::Real(Box::new(real)),
    }
}

/// Test bodies `fn name(c: &Cluster)` of the calling module as tests on both clusters:
/// `on_up::name` and `on_real_control_plane::name`.
#[macro_export]
macro_rules! on_both_clusters {
    ($($name:ident),* $(,)?) => {
        mod on_up {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::common::kubectl::cluster());
                }
            )*
        }
        mod on_real_control_plane {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::common::kubectl::real_cluster());
                }
            )*
        }
    };
}

impl Cluster {
    /// The embedded cluster, for a test that reaches into it; a test on the real control plane
    /// has no such thing.
    pub fn up(&self) -> &ClusterThread {
        match &self.backend {
            Backend::Up(background) => background,
            Backend::Real(_) => panic!("this test runs on up's embedded cluster only"),
        }
    }

    /// A client as the administrator, and the runtime to drive it on.
    pub fn admin_client(&self) -> (kube::Client, &tokio::runtime::Runtime) {
        match &self.backend {
            Backend::Up(up) => (up.cluster.client(), &up.runtime),
            Backend::Real(real) => (real.client.clone(), &real.runtime),
        }
    }

    /// Whether this is the real control plane.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real(_))
    }

    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.kubectl(args)
            .output()
            .expect("kubectl runs (install it: apt-get install kubernetes-client)")
    }

    /// Runs kubectl and returns its stdout, failing the test on a non-zero exit.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Polls `kubectl args` until its output satisfies `done` (for a minute at most).
    /// A test that fails here says what kubectl printed last, so a flake can be told apart
    /// from a kubectl error.
    pub fn until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let mut last = None;
        for _ in 0..600 {
            let out = self.run(args);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && done(&text) {
                return text;
            }
            last = Some(out);
            std::thread::sleep(Duration::from_millis(100));
        }
        let last = last.expect("polled at least once");
        panic!(
            "kubectl {args:?} never reached the expected state; last it exited with {} and printed:\n{}{}",
            last.status,
            String::from_utf8_lossy(&last.stdout),
            String::from_utf8_lossy(&last.stderr)
        );
    }
}

/// A background kubectl that is always stopped and reaped, even when an assertion fails.
pub struct Background(pub Option<std::process::Child>);

impl Background {
    /// Stops the process and returns what it printed.
    pub fn finish(mut self) -> String {
        let mut child = self.0.take().expect("not finished yet");
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
