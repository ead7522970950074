//! A real control plane (`tfjob-control-plane`) with `deploy/` installed as a cluster operator
//! installs it, and the built operator run on it as `deploy/`'s ServiceAccount with a token the
//! real server minted: what the tests of the operator on the real thing share.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tfjob_control_plane::{ControlPlane, NodeSpec, Options};

use super::{Killed, eventually_within, repo};

/// The namespace the tests' jobs run in.
pub const NS: &str = "ml";
/// How long a job or the control plane may take to reach a state (a liveness bound).
pub const WAIT: Duration = Duration::from_secs(120);
/// The user `deploy/`'s ServiceAccount authenticates as.
pub const OPERATOR_USER: &str = "system:serviceaccount:tfjob-system:tfjob-operator";

/// kubectl against the control plane as the administrator; its stdout, which must succeed.
pub fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    plane.kubectl_run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// kubectl with `stdin`, as the administrator: its exit status and stderr.
pub fn kubectl_with(plane: &ControlPlane, args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = plane
        .kubectl(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Applies the repository file `path` server-side and waits until every CRD in it is
/// established (polled: `kubectl wait` fails at once while a CRD has no conditions yet).
pub fn install_crds(plane: &ControlPlane, path: &str) {
    let file = repo(path);
    let applied = kubectl(
        plane,
        &[
            "apply",
            "--server-side",
            "-o",
            "name",
            "-f",
            file.to_str().unwrap(),
        ],
    );
    for crd in applied.lines().filter(|l| !l.is_empty()) {
        eventually_within(WAIT, &format!("{crd} established"), || {
            plane
                .kubectl_run(&[
                    "get",
                    crd,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                ])
                .ok()
                .filter(|status| status == "True")
                .map(drop)
        });
    }
}

/// A real control plane started with `options`, with `deploy/`'s TFJob CRD and standalone
/// overlay installed and namespace [`NS`] made.
pub fn installed_with(options: Options) -> ControlPlane {
    let plane = ControlPlane::start(options).unwrap_or_else(|e| panic!("{e}"));
    install_crds(&plane, "deploy/crd/kubeflow.org_tfjobs.yaml");
    let overlay = repo("deploy/overlays/standalone");
    kubectl(
        &plane,
        &["apply", "--server-side", "-k", overlay.to_str().unwrap()],
    );
    kubectl(&plane, &["create", "namespace", NS]);
    plane
}

/// [`installed_with`] three default nodes.
pub fn installed() -> ControlPlane {
    installed_with(Options {
        nodes: vec![NodeSpec::default(); 3],
        ..Options::default()
    })
}

/// A kubeconfig for `deploy/`'s ServiceAccount, with a token the real server minted for it,
/// reaching the API server at `server`.
pub fn service_account_kubeconfig(plane: &ControlPlane, dir: &Path, server: &str) -> PathBuf {
    let text = plane
        .service_account_kubeconfig("tfjob-system", "tfjob-operator", 1, server)
        .unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// The operator as `deploy/`'s ServiceAccount against `plane`, with `args` and its log in
/// `dir/operator.log`; its metrics address.
pub fn operator(plane: &ControlPlane, dir: &Path, args: &[&str]) -> (Killed, std::net::SocketAddr) {
    operator_through(plane, plane.server(), dir, args)
}

/// [`operator`], reaching the API server at `server` (a proxy in front of it).
pub fn operator_through(
    plane: &ControlPlane,
    server: &str,
    dir: &Path,
    args: &[&str],
) -> (Killed, std::net::SocketAddr) {
    let kubeconfig = service_account_kubeconfig(plane, dir, server);
    let metrics = super::free_addr();
    let log = std::fs::File::create(dir.join("operator.log")).unwrap();
    let process = Killed(
        Command::new(env!("CARGO_BIN_EXE_tfjob-operator"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(format!("--metrics-bind-address={metrics}"))
            .arg("--health-probe-bind-address=0")
            .args(args)
            .env("POD_NAMESPACE", "tfjob-system")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    (process, metrics)
}

/// A TFJob in [`NS`] of `replicas` workers under `restart_policy`, whose pod template carries
/// `annotations` (the kwok stages read `sim.tfjob.dev/*`) and merges `spec` into the job's.
pub fn job(
    name: &str,
    replicas: i32,
    restart_policy: &str,
    annotations: serde_json::Value,
    spec: serde_json::Value,
) -> String {
    let mut job = serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": replicas,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1",
                                          "resources": {"requests": {"cpu": "1"}}}]},
            },
        }}},
    });
    if let (Some(into), Some(from)) = (job["spec"].as_object_mut(), spec.as_object()) {
        into.extend(from.clone());
    }
    job.to_string()
}

/// `jsonpath` of TFJob `name` in [`NS`], as kubectl prints it.
pub fn job_field(plane: &ControlPlane, name: &str, jsonpath: &str) -> String {
    kubectl(
        plane,
        &[
            "get",
            "tfjob",
            name,
            "-n",
            NS,
            "-o",
            &format!("jsonpath={jsonpath}"),
        ],
    )
}

/// Merges `spec` into TFJob `name`'s spec, as the administrator.
pub fn patch_job_spec(plane: &ControlPlane, name: &str, spec: serde_json::Value) {
    let patch = serde_json::json!({ "spec": spec }).to_string();
    kubectl(
        plane,
        &[
            "patch",
            "tfjob",
            name,
            "-n",
            NS,
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

/// The job's last condition type, once it is `Succeeded` or `Failed`.
pub fn finished(plane: &ControlPlane, name: &str) -> String {
    eventually_within(WAIT, &format!("TFJob {name} finished"), || {
        let last = job_field(plane, name, "{.status.conditions[-1:].type}");
        matches!(last.as_str(), "Succeeded" | "Failed").then_some(last)
    })
}

impl super::Kubectl for ControlPlane {
    fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        super::run(self.kubectl(args), stdin, Duration::from_secs(60))
    }
}
