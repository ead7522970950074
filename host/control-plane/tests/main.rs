//! The control plane against itself: it starts from the pinned binaries, the real scheduler
//! binds a pod to a kwok node, and kwok runs it for its scripted duration to its scripted exit
//! code; bad input (a port taken, a program missing or damaged, a component that exits at
//! start) is an error naming it, with nothing left running.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use tfjob_control_plane::{Binaries, ControlPlane, Error, NodeSpec, Options, Versions};

fn real_binaries() -> Binaries {
    let versions = Versions::read(&tfjob_control_plane::versions_file()).unwrap();
    Binaries::located(&versions).unwrap_or_else(|e| {
        panic!("{e}\n(tests/run builds the control plane; alone: tests/control-plane/build)")
    })
}

/// A started control plane; a failure to start panics with its message (the components' logs).
fn started(options: Options) -> ControlPlane {
    ControlPlane::start(options).unwrap_or_else(|e| panic!("{e}"))
}

/// kubectl's stdout, which must succeed.
fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    plane.kubectl_run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` until it gives a value; after `within`, fails with `what` and `context()`.
fn eventually(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<String>,
    context: impl Fn() -> String,
) -> String {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            started.elapsed() < within,
            "{what} within {within:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod(name: &str, annotations: serde_json::Value, labels: serde_json::Value) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1",
                            "resources": {"requests": {"cpu": "1"}}}],
        },
    })
    .to_string()
}

#[test]
fn pods_are_scheduled_by_the_real_scheduler_and_end_as_scripted_on_kwok_nodes() {
    let plane = started(Options {
        nodes: vec![
            NodeSpec::default(),
            NodeSpec {
                gpus: 2,
                ..NodeSpec::default()
            },
        ],
        binaries: Some(real_binaries()),
        ..Options::default()
    });
    // The API server is the real one, at the pinned release.
    let version: serde_json::Value =
        serde_json::from_str(&kubectl(&plane, &["get", "--raw", "/version"])).unwrap();
    let pinned = Versions::read(&tfjob_control_plane::versions_file()).unwrap();
    assert_eq!(version["gitVersion"], pinned.kubernetes.as_str());
    let gpus = kubectl(
        &plane,
        &[
            "get",
            "node",
            "kwok-node-1",
            "-o",
            "jsonpath={.status.allocatable.nvidia\\.com/gpu}",
        ],
    );
    assert_eq!(gpus, "2");

    plane
        .kubectl_apply(&pod(
            "ok",
            serde_json::json!({"sim.tfjob.dev/duration": "1s"}),
            serde_json::json!({}),
        ))
        .unwrap();
    plane
        .kubectl_apply(&pod(
            "oom",
            serde_json::json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/exit-code": "0=137,*=1",
                               "sim.tfjob.dev/terminated-reason": "OOMKilled"}),
            serde_json::json!({"training.kubeflow.org/replica-index": "0"}),
        ))
        .unwrap();
    plane
        .kubectl_apply(&pod(
            "other-index",
            serde_json::json!({"sim.tfjob.dev/duration": "0=90s, *=1s", "sim.tfjob.dev/exit-code": "0=137,*=1"}),
            serde_json::json!({"training.kubeflow.org/replica-index": "3"}),
        ))
        .unwrap();
    plane
        .kubectl_apply(&pod(
            "bad-image",
            serde_json::json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/pending-reason": "InvalidImageName"}),
            serde_json::json!({}),
        ))
        .unwrap();
    // Durations per replica index: this one runs 90 s, past every other pod here.
    plane
        .kubectl_apply(&pod(
            "slow",
            serde_json::json!({"sim.tfjob.dev/duration": "5=90s,*=1s"}),
            serde_json::json!({"training.kubeflow.org/replica-index": "5"}),
        ))
        .unwrap();
    let ended = |name: &str| {
        let name = name.to_owned();
        eventually(
            &format!("pod {name} ended"),
            Duration::from_secs(60),
            || {
                let out = kubectl(
                    &plane,
                    &[
                        "get",
                        "pod",
                        &name,
                        "-o",
                        "jsonpath={.spec.nodeName} {.status.phase} {.status.containerStatuses[0].state.terminated.exitCode} {.status.containerStatuses[0].state.terminated.reason}",
                    ],
                );
                (out.contains("Succeeded") || out.contains("Failed")).then_some(out)
            },
            || {
                let pod = plane
                    .kubectl(&["get", "pod", &name, "-o", "yaml"])
                    .output()
                    .unwrap();
                format!("{}\n{}", String::from_utf8_lossy(&pod.stdout), plane.logs())
            },
        )
    };
    let ok = ended("ok");
    assert!(ok.starts_with("kwok-node-"), "{ok}");
    assert!(ok.ends_with(" Succeeded 0 Completed"), "{ok}");
    assert!(ended("oom").ends_with(" Failed 137 OOMKilled"));
    assert!(ended("other-index").ends_with(" Failed 1 Error"));
    // `fail-times`: the first run of a replica fails, the second (a pod of the same name made
    // again, as an operator restarts a replica) succeeds.
    let retried = || {
        pod(
            "retried",
            serde_json::json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/exit-code": "137",
                               "sim.tfjob.dev/fail-times": "1"}),
            serde_json::json!({}),
        )
    };
    plane.kubectl_apply(&retried()).unwrap();
    assert!(ended("retried").ends_with(" Failed 137 Error"));
    kubectl(&plane, &["delete", "pod", "retried", "--wait=true"]);
    plane.kubectl_apply(&retried()).unwrap();
    assert!(ended("retried").ends_with(" Succeeded 0 Completed"));
    let slow = kubectl(
        &plane,
        &["get", "pod", "slow", "-o", "jsonpath={.status.phase}"],
    );
    assert_eq!(slow, "Running", "its index's duration, not another's");
    // A pod scripted to wait stays Pending with its containers waiting for that reason, while
    // the others have run and ended.
    let waiting = kubectl(
        &plane,
        &[
            "get",
            "pod",
            "bad-image",
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}",
        ],
    );
    assert_eq!(
        waiting,
        "Pending InvalidImageName: Failed to apply default image tag \"tensorflow/tensorflow:2.16.1\": couldn't parse image name \"tensorflow/tensorflow:2.16.1\": invalid reference format"
    );
    // The scheduler's own event says where it bound the pod.
    let events = kubectl(
        &plane,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=ok,reason=Scheduled",
            "-o",
            "name",
        ],
    );
    assert!(!events.trim().is_empty(), "no Scheduled event");
}

/// A directory of stand-in programs that answer `--version` (so the check passes) and
/// otherwise run `body`.
fn stand_ins(dir: &Path, body: &str) -> Binaries {
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "kwok",
    ] {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\ncase \"$1\" in --version|version) exit 0;; esac\n{body}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Binaries::in_dir(dir).unwrap()
}

#[test]
fn a_component_that_exits_at_start_is_named_with_its_last_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let binaries = stand_ins(
        dir.path(),
        "echo \"flag provided but not defined: $1\" >&2\nexit 2",
    );
    let started = Instant::now();
    let e = ControlPlane::start(Options {
        binaries: Some(binaries),
        ..Options::default()
    })
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Exited { name: "etcd", .. }), "{text}");
    assert!(text.starts_with("etcd exited (exit status: 2)"), "{text}");
    assert!(
        text.contains("flag provided but not defined: --name=default"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "found at once");
}

#[test]
fn a_component_that_never_gets_ready_fails_within_its_bound_and_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let binaries = stand_ins(
        dir.path(),
        &format!(
            "echo $$ > {}\necho waiting forever\nexec sleep 600",
            pid_file.display()
        ),
    );
    let e = ControlPlane::start(Options {
        binaries: Some(binaries),
        ready_within: Duration::from_secs(2),
        ..Options::default()
    })
    .unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("etcd answering /health within"), "{text}");
    assert!(text.contains("--- etcd ---\nwaiting forever"), "{text}");
    // The stand-in was killed when the failed start was dropped.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let alive = Path::new(&format!("/proc/{}", pid.trim())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "process {pid} left running");
}

#[test]
fn a_port_taken_is_named_before_anything_starts() {
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let binaries = stand_ins(dir.path(), "exec sleep 600");
    let e = ControlPlane::start(Options {
        binaries: Some(binaries),
        apiserver_port: Some(port),
        ..Options::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("kube-apiserver: port {port} on 127.0.0.1 is taken")
    );
}

#[test]
fn a_missing_or_damaged_program_is_named() {
    let dir = tempfile::tempdir().unwrap();
    stand_ins(dir.path(), "exit 0");
    std::fs::remove_file(dir.path().join("kube-scheduler")).unwrap();
    let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
    assert!(e.starts_with("kube-scheduler at "), "{e}");
    std::fs::write(dir.path().join("kube-scheduler"), b"\x7fELF garbage").unwrap();
    std::fs::set_permissions(
        dir.path().join("kube-scheduler"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
    assert!(e.starts_with("kube-scheduler at "), "{e}");
    assert!(e.contains("does not run") || e.contains("damaged"), "{e}");
}
