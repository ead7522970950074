//! End to end with the real kubectl: the embedded API server, the simulated kubelet, the
//! default Wasm policies and the operator run in this process, and kubectl (a separate process,
//! as a user would run it) applies jobs, reads them, waits on their conditions, describes them,
//! watches them and deletes them. Waits use kubectl's own timeouts or poll; nothing asserts on
//! timing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tfjob_operator::embedded::ClusterOptions;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

struct Cluster {
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    _cluster: common::Background,
}

/// Starts the whole cluster with the default Wasm policies on a background runtime and writes
/// a kubeconfig for it.
fn cluster() -> Cluster {
    let cluster = common::Background::start(ClusterOptions::new(common::default_policies()));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.cluster.write_kubeconfig(&kubeconfig).unwrap();
    Cluster {
        kubeconfig,
        _dir: dir,
        _cluster: cluster,
    }
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.kubectl(args)
            .output()
            .expect("kubectl runs (install it: apt-get install kubernetes-client)")
    }

    /// Runs kubectl and returns its stdout, failing the test on a non-zero exit.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Polls `kubectl args` until its output satisfies `done`.
    fn until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        for _ in 0..600 {
            let out = self.run(args);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && done(&text) {
                return text;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("kubectl {args:?} never reached the expected state");
    }
}

/// A background kubectl that is always stopped and reaped, even when an assertion fails.
struct Background(Option<std::process::Child>);

impl Background {
    /// Stops the process and returns what it printed.
    fn finish(mut self) -> String {
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

fn example(name: &str) -> String {
    repo(&format!("deploy/examples/{name}"))
        .display()
        .to_string()
}

#[test]
fn kubectl_drives_a_job_through_restart_to_success_and_deletion() {
    let c = cluster();
    let version = c.ok(&["version", "-o", "json"]);
    assert!(version.contains("serverVersion"), "{version}");

    c.ok(&["apply", "-f", &example("demo-retry.yaml")]);
    let listed = c.ok(&["get", "tfjobs"]);
    assert!(
        listed.lines().next().unwrap().contains("STATE"),
        "printer columns: {listed}"
    );
    assert!(listed.contains("demo-retry"), "{listed}");

    c.ok(&[
        "wait",
        "--for=condition=Succeeded",
        "tfjob/demo-retry",
        "--timeout=120s",
    ]);
    let state = c.ok(&[
        "get",
        "tfjob",
        "demo-retry",
        "-o",
        "jsonpath={.status.conditions[-1:].type} {.status.restartCount}",
    ]);
    assert_eq!(state, "Succeeded 1");

    let described = c.ok(&["describe", "tfjob", "demo-retry"]);
    for expected in [
        "TFJobRestarting",
        "ExitedWithCode",
        "TFJobSucceeded",
        "Created pod: demo-retry-worker-1",
    ] {
        assert!(
            described.contains(expected),
            "describe shows {expected}:\n{described}"
        );
    }
    let pods = c.ok(&[
        "get",
        "pods",
        "-l",
        "training.kubeflow.org/job-name=demo-retry",
        "-o",
        "name",
    ]);
    assert_eq!(pods.lines().count(), 2, "{pods}");
    let annotations = c.ok(&[
        "get",
        "pod",
        "demo-retry-worker-0",
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    assert!(
        annotations.contains("default-decorate@"),
        "the default policies shaped the pod: {annotations}"
    );

    c.ok(&["delete", "tfjob", "demo-retry"]);
    c.until(
        &[
            "get",
            "pods,services",
            "-l",
            "training.kubeflow.org/job-name=demo-retry",
            "-o",
            "name",
        ],
        |out| out.trim().is_empty(),
    );
}

#[test]
fn kubectl_sees_policy_failures_admission_errors_and_watch_updates() {
    let c = cluster();
    // `get -w` sees the job appear and change.
    let watch = Background(Some(
        c.kubectl(&["get", "tfjobs", "-w", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    c.ok(&["create", "-f", &example("demo-bad-image.yaml")]);
    c.ok(&[
        "wait",
        "--for=condition=Failed",
        "tfjob/demo-bad-image",
        "--timeout=120s",
    ]);
    let message = c.ok(&[
        "get",
        "tfjob",
        "demo-bad-image",
        "-o",
        "jsonpath={.status.conditions[-1:].message}",
    ]);
    assert!(message.contains("Pod demo-bad-image-worker-0: ContainersNotReady|InvalidImageName (policy default-classify@"), "{message}");
    std::thread::sleep(Duration::from_millis(500));
    let seen = watch.finish();
    assert!(
        seen.contains("ADDED") && seen.contains("demo-bad-image"),
        "{seen}"
    );
    assert!(
        seen.contains("Failed"),
        "the watch saw the job fail: {seen}"
    );

    // The operator's validation rejects a bad job at admission, naming the field.
    let bad = repo("target").join("kubectl-e2e-invalid.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: bad-job}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      template: {spec: {containers: [{name: tensorflow}]}}\n",
    )
    .unwrap();
    let out = c.run(&["create", "-f", &bad.display().to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.tfReplicaSpecs[Worker].template.spec.containers[0].image"),
        "{err}"
    );
    let _ = std::fs::remove_file(bad);
    assert!(Path::new(&example("demo-retry.yaml")).exists());
}
