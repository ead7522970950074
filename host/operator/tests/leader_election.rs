//! `tfjob-operator run --leader-elect` with hot standbys, on the embedded cluster started
//! without its operator: two processes, one leads and reconciles while the other only keeps
//! its caches; a leader killed with SIGKILL is replaced within the lease duration and every
//! job finishes with each scripted restart counted once, before and after the failover; a
//! leader stopped with SIGTERM releases the lease and the standby leads within two seconds; a
//! leader whose lease is taken from it stops writing.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use common::cluster::{Cluster, http_status, metric};
use common::{Killed, eventually, free_addr};

/// Short timings, so a test waits seconds rather than controller-runtime's 15.
const LEASE: Duration = Duration::from_secs(3);
const LEASE_FLAGS: [&str; 7] = [
    "--leader-elect",
    "--leader-election-lease-duration",
    "3s",
    "--leader-election-renew-deadline",
    "2s",
    "--leader-election-retry-period",
    "500ms",
];
/// Where the Lease is, by default: the operator's own namespace.
const LEASE_NAMESPACE: &str = "tfjob-system";
const LEASE_NAME: &str = "tfjob-operator";
const NS: &str = "ha";

/// One scenario at a time: each runs two operator processes and asserts how fast one takes
/// over, which a machine busy with the others' start-up would distort.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One `run --leader-elect` process and its metrics address.
struct Replica {
    process: Killed,
    metrics: SocketAddr,
}

impl Replica {
    fn start(c: &Cluster) -> Replica {
        let metrics = free_addr();
        let metrics_text = metrics.to_string();
        let mut args = vec![
            "--metrics-bind-address",
            &metrics_text,
            "--health-probe-bind-address",
            "0",
        ];
        args.extend(LEASE_FLAGS);
        let process = c.operator(&args, &[]);
        let replica = Replica { process, metrics };
        eventually("the replica is ready", || {
            (http_status(replica.metrics, "/readyz") == Some(200)).then_some(())
        });
        replica
    }

    /// `tfjob_operator_is_leader`, once the replica serves it.
    fn is_leader(&self) -> Option<bool> {
        metric(self.metrics, "tfjob_operator_is_leader").map(|v| v == 1.0)
    }

    fn reconciles(&self) -> f64 {
        metric(self.metrics, "tfjob_operator_reconciles_total").unwrap_or(0.0)
    }

    fn kill(mut self) {
        self.process.0.kill().unwrap();
        self.process.0.wait().unwrap();
    }

    /// SIGTERM, as the kubelet stops a container.
    fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.process.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// Waits until exactly one of `replicas` leads; returns its index.
fn leader_of(replicas: &[&Replica]) -> usize {
    eventually("exactly one replica leads", || {
        let leading: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_leader() == Some(true))
            .map(|(i, _)| i)
            .collect();
        let all_known = replicas.iter().all(|r| r.is_leader().is_some());
        (all_known && leading.len() == 1).then(|| leading[0])
    })
}

/// Two replicas, once one of them leads: (leader, standby).
fn leader_and_standby(c: &Cluster) -> (Replica, Replica) {
    let a = Replica::start(c);
    let b = Replica::start(c);
    if leader_of(&[&a, &b]) == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// How long from now until `replica` leads.
fn until_leading(replica: &Replica) -> Duration {
    let from = Instant::now();
    eventually("the standby leads", || {
        (replica.is_leader() == Some(true)).then_some(())
    });
    from.elapsed()
}

/// A job whose two workers fail once with a retryable code (137, under `ExitCode`), then
/// succeed: exactly one restart per worker.
fn failing_once(name: &str, run: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": 2,
            "restartPolicy": "ExitCode",
            "template": {
                "metadata": {"annotations": {
                    "sim.tfjob.dev/duration": run,
                    "sim.tfjob.dev/exit-code": "137",
                    "sim.tfjob.dev/fail-times": "1",
                }},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
    })
}

fn restart_count(c: &Cluster, name: &str) -> i64 {
    let job = serde_json::to_value(c.job(NS, name)).unwrap();
    job["status"]["restartCount"].as_i64().unwrap_or(0)
}

fn pods_of(c: &Cluster, name: &str) -> usize {
    let pods: Api<Pod> = Api::namespaced(c.client(), NS);
    let selector = format!("training.kubeflow.org/job-name={name}");
    c.runtime
        .block_on(pods.list(&ListParams::default().labels(&selector)))
        .unwrap()
        .items
        .len()
}

fn succeeded(c: &Cluster, names: &[String]) {
    for name in names {
        eventually(&format!("{name} succeeds"), || {
            (c.state(NS, name).as_deref() == Some("Succeeded")).then_some(())
        });
    }
}

#[test]
fn only_the_leader_reconciles_and_a_killed_leader_is_replaced_within_the_lease_duration_on_up() {
    let _serial = serial();
    only_the_leader_reconciles_and_a_killed_leader_is_replaced(&Cluster::start(|_| {}));
}

/// The same on the real control plane, the replicas running as `deploy/`'s ServiceAccount.
#[test]
fn only_the_leader_reconciles_and_a_killed_leader_is_replaced_within_the_lease_duration_on_real_control_plane()
 {
    let _serial = serial();
    only_the_leader_reconciles_and_a_killed_leader_is_replaced(&Cluster::start_real());
}

fn only_the_leader_reconciles_and_a_killed_leader_is_replaced(c: &Cluster) {
    let (leader, standby) = leader_and_standby(c);

    // Restarts under the first leader: each job's workers fail once and are recreated.
    let before: Vec<String> = (0..3).map(|i| format!("before-{i}")).collect();
    for name in &before {
        c.submit_manifest(failing_once(name, "500ms"));
    }
    succeeded(c, &before);
    assert_eq!(
        standby.reconciles(),
        0.0,
        "the standby reconciled while another replica led"
    );
    assert_eq!(http_status(standby.metrics, "/readyz"), Some(200));

    // Jobs whose failures come after the failover: the leader dies as they start.
    let after: Vec<String> = (0..3).map(|i| format!("after-{i}")).collect();
    for name in &after {
        c.submit_manifest(failing_once(name, "3s"));
    }
    for name in &after {
        eventually(&format!("{name} has its pods"), || {
            (pods_of(c, name) == 2).then_some(())
        });
    }
    leader.kill();
    let takeover = until_leading(&standby);
    // The standby counts the lease duration from the last renewal it saw, at most a retry
    // period before the kill; a second more covers this test's polling and process start-up.
    assert!(
        takeover <= LEASE + Duration::from_secs(1),
        "the standby took {takeover:?} to lead after the leader was killed (lease {LEASE:?})"
    );
    succeeded(c, &after);
    for name in before.iter().chain(&after) {
        assert_eq!(
            restart_count(c, name),
            2,
            "{name}: each of its two workers restarted once, counted once"
        );
    }
    assert!(standby.reconciles() > 0.0);
}

#[test]
fn a_graceful_stop_hands_over_within_two_seconds_on_up() {
    let _serial = serial();
    a_graceful_stop_hands_over_within_two_seconds(&Cluster::start(|_| {}));
}

#[test]
fn a_graceful_stop_hands_over_within_two_seconds_on_real_control_plane() {
    let _serial = serial();
    a_graceful_stop_hands_over_within_two_seconds(&Cluster::start_real());
}

fn a_graceful_stop_hands_over_within_two_seconds(c: &Cluster) {
    let (leader, standby) = leader_and_standby(c);
    c.submit(NS, "first");
    succeeded(c, &["first".to_owned()]);

    leader.terminate();
    let handover = until_leading(&standby);
    assert!(
        handover <= Duration::from_secs(2),
        "a graceful stop took {handover:?} to hand over"
    );
    c.submit(NS, "second");
    succeeded(c, &["second".to_owned()]);
}

#[test]
fn a_leader_whose_lease_is_taken_stops_writing_and_leads_again_once_it_is_free() {
    let _serial = serial();
    let c = Cluster::start(|_| {});
    let only = Replica::start(&c);
    leader_of(&[&only]);

    // Someone else claims the lease for a minute (as a replica on the other side of a
    // partition would after the lease ran out).
    let leases: Api<Lease> = Api::namespaced(c.client(), LEASE_NAMESPACE);
    let mut lease = c.runtime.block_on(leases.get(LEASE_NAME)).unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(60);
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    let stolen = c
        .runtime
        .block_on(leases.replace(LEASE_NAME, &PostParams::default(), &lease))
        .unwrap();
    eventually("the replica steps down", || {
        (only.is_leader() == Some(false)).then_some(())
    });
    let reconciles = only.reconciles();
    c.submit(NS, "waiting");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        pods_of(&c, "waiting"),
        0,
        "a replica that lost the lease wrote"
    );
    assert_eq!(
        c.state(NS, "waiting"),
        None,
        "a replica that lost the lease wrote"
    );
    assert_eq!(
        only.reconciles(),
        reconciles,
        "it reconciled without the lease"
    );

    // The intruder releases the lease: the replica takes it at once and catches up.
    let mut released = stolen;
    released.spec.as_mut().unwrap().holder_identity = None;
    c.runtime
        .block_on(leases.replace(LEASE_NAME, &PostParams::default(), &released))
        .unwrap();
    eventually("the replica leads again", || {
        (only.is_leader() == Some(true)).then_some(())
    });
    succeeded(&c, &["waiting".to_owned()]);
    let lease = c.runtime.block_on(leases.get(LEASE_NAME)).unwrap();
    let spec = lease.spec.unwrap();
    assert_ne!(spec.holder_identity.as_deref(), Some("intruder"));
    assert!(
        spec.lease_transitions.unwrap_or(0) >= 1,
        "taking a lease back counts a transition"
    );
}

/// The binary with `args` and then `path`, its output discarded.
fn quiet(args: &[&str], path: &std::path::Path) -> Killed {
    Killed(
        common::operator()
            .args(args)
            .arg(path)
            .env_remove("KUBEFLOW_NAMESPACE")
            .env_remove("POD_NAMESPACE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `up --no-operator`, as a person trying several operators runs it: the cluster alone, then a
/// `run` process started against the kubeconfig it wrote.
#[test]
fn up_without_its_operator_serves_run_processes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let up = quiet(
        &["up", "--no-operator", "--port", "0", "--kubeconfig-out"],
        &kubeconfig,
    );
    let kubectl = |args: &[&str], stdin: Option<&str>| -> String {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&kubeconfig).args(args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(text) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    eventually("the cluster answers", || {
        (kubeconfig.exists() && kubectl(&["get", "tfjobs", "-A"], None).contains("No resources"))
            .then_some(())
    });
    let job = r#"{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "alone", "namespace": "default"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}}"#;
    let applied = kubectl(&["apply", "-f", "-"], Some(job));
    assert!(applied.contains("created"), "{applied}");
    let state = || {
        kubectl(
            &[
                "get",
                "tfjob",
                "alone",
                "-o",
                "jsonpath={.status.conditions[-1:].type}",
            ],
            None,
        )
    };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(), "", "no operator runs inside `up --no-operator`");

    let _run = quiet(
        &[
            "run",
            "--no-cel-warmup",
            "--leader-elect",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--kubeconfig",
        ],
        &kubeconfig,
    );
    eventually("the job succeeds under the run process", || {
        (state() == "Succeeded").then_some(())
    });
    let holder = kubectl(
        &[
            "get",
            "lease",
            "tfjob-operator",
            "-n",
            "tfjob-system",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    assert!(
        holder.starts_with("tfjob-operator_") || !holder.is_empty(),
        "{holder}"
    );
    drop(up);
}
