//! The operator on a real Kubernetes control plane (`tfjob-control-plane`: etcd,
//! kube-apiserver, controller-manager, scheduler and kwok nodes, built from source at the
//! pinned release), installed from `deploy/` as a cluster operator installs it:
//! - the TFJob CRD from `deploy/crd/` on the real server: its structural schema and CEL rules
//!   refuse what `up` refuses, and kubectl's strict field validation names a misspelt field;
//! - `deploy/overlays/standalone` applied, and `tfjob-operator run` as the ServiceAccount it
//!   binds, with a token the real server minted, under the real RBAC authorizer: jobs run to
//!   `Succeeded` and to `Failed` on pods the real scheduler binds and kwok runs, and the
//!   operator is refused nothing;
//! - faults of the real thing: kube-apiserver and then etcd killed and started again while jobs
//!   run, every job ending as it would have.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Killed, eventually_within, repo};
use tfjob_control_plane::{ControlPlane, NodeSpec, Options};

const NS: &str = "ml";
const WAIT: Duration = Duration::from_secs(120);

/// kubectl against the control plane as the administrator; its stdout, which must succeed.
fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    plane.kubectl_run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// kubectl with `stdin`, as the administrator: its exit status and stderr.
fn kubectl_with(plane: &ControlPlane, args: &[&str], stdin: &str) -> (bool, String) {
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

/// A real control plane with `deploy/`'s CRD and standalone overlay installed.
fn installed() -> ControlPlane {
    let plane = ControlPlane::start(Options {
        nodes: vec![NodeSpec::default(); 3],
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let crd = repo("deploy/crd/kubeflow.org_tfjobs.yaml");
    kubectl(
        &plane,
        &["apply", "--server-side", "-f", crd.to_str().unwrap()],
    );
    // Polled rather than `kubectl wait`, which fails at once while the CRD has no conditions.
    eventually_within(WAIT, "the TFJob CRD established", || {
        plane
            .kubectl_run(&[
                "get",
                "crd",
                "tfjobs.kubeflow.org",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ])
            .ok()
            .filter(|status| status == "True")
            .map(drop)
    });
    let overlay = repo("deploy/overlays/standalone");
    kubectl(
        &plane,
        &["apply", "--server-side", "-k", overlay.to_str().unwrap()],
    );
    kubectl(&plane, &["create", "namespace", NS]);
    plane
}

/// A kubeconfig for `deploy/`'s ServiceAccount, with a token the real server minted for it.
fn service_account_kubeconfig(plane: &ControlPlane, dir: &Path) -> std::path::PathBuf {
    let token = kubectl(
        plane,
        &[
            "create",
            "token",
            "tfjob-operator",
            "-n",
            "tfjob-system",
            "--duration=1h",
        ],
    );
    let ca = kubectl(
        plane,
        &[
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority}",
        ],
    );
    let doc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "real", "cluster": {"server": plane.server(), "certificate-authority": ca}}],
        "users": [{"name": "tfjob-operator", "user": {"token": token.trim()}}],
        "contexts": [{"name": "operator", "context": {"cluster": "real", "user": "tfjob-operator"}}],
        "current-context": "operator",
    });
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

fn job(name: &str, worker_annotations: serde_json::Value, restart_policy: &str) -> String {
    serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": 2,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": worker_annotations},
                "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1",
                                          "resources": {"requests": {"cpu": "1"}}}]},
            },
        }}},
    })
    .to_string()
}

/// The job's last condition type, once it is `Succeeded` or `Failed`.
fn finished(plane: &ControlPlane, name: &str) -> String {
    eventually_within(WAIT, &format!("TFJob {name} finished"), || {
        let last = kubectl(
            plane,
            &[
                "get",
                "tfjob",
                name,
                "-n",
                NS,
                "-o",
                "jsonpath={.status.conditions[-1:].type}",
            ],
        );
        matches!(last.as_str(), "Succeeded" | "Failed").then_some(last)
    })
}

#[test]
fn the_operator_runs_jobs_as_deploys_service_account_on_a_real_control_plane() {
    let plane = installed();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("operator.log");
    let _operator = operator(&plane, dir.path(), &["--leader-elect"]);

    let (ok, err) = kubectl_with(
        &plane,
        &["apply", "-f", "-"],
        &job(
            "fine",
            serde_json::json!({"sim.tfjob.dev/duration": "2s"}),
            "Never",
        ),
    );
    assert!(ok, "{err}");
    let (ok, err) = kubectl_with(
        &plane,
        &["apply", "-f", "-"],
        &job(
            "oom",
            serde_json::json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/exit-code": "0=137,*=0"}),
            "Never",
        ),
    );
    assert!(ok, "{err}");
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let fine = finished(&plane, "fine");
    assert_eq!(fine, "Succeeded", "operator log:\n{}", logs());
    let oom = finished(&plane, "oom");
    assert_eq!(oom, "Failed", "operator log:\n{}", logs());
    // The pods were bound by the real scheduler to kwok's nodes.
    let nodes = kubectl(
        &plane,
        &[
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            "training.kubeflow.org/job-name=fine",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
    );
    assert!(
        nodes.split(' ').all(|n| n.starts_with("kwok-node-")),
        "{nodes}"
    );
    // Under the real RBAC authorizer, nothing the operator asked was refused.
    let text = logs();
    assert!(
        !text.contains("forbidden") && !text.contains("Forbidden"),
        "the operator was refused something:\n{text}"
    );
    assert!(
        kubectl(
            &plane,
            &["get", "lease", "-n", "tfjob-system", "-o", "name"]
        )
        .contains("lease.coordination.k8s.io/tfjob-operator"),
        "the operator leads through deploy/'s Lease"
    );
}

#[test]
fn deploys_crd_validates_and_prunes_on_the_real_server_as_on_up() {
    let plane = installed();
    // A misspelt container field: strict field validation names it.
    let misspelt = job("misspelt", serde_json::json!({}), "Never")
        .replace("\"image\":", "\"imagee\":\"typo\",\"image\":");
    let (ok, err) = kubectl_with(
        &plane,
        &["apply", "--validate=strict", "-f", "-"],
        &misspelt,
    );
    assert!(!ok, "a misspelt field was accepted");
    assert!(err.contains("unknown field"), "{err}");
    assert!(err.contains("imagee"), "{err}");
    // Without strict validation it is pruned, and the job is stored without it.
    let (ok, err) = kubectl_with(
        &plane,
        &["create", "--validate=false", "-f", "-"],
        &misspelt,
    );
    assert!(ok, "{err}");
    let stored = kubectl(
        &plane,
        &["get", "tfjob", "misspelt", "-n", NS, "-o", "json"],
    );
    assert!(!stored.contains("imagee"), "{stored}");
    // The CRD's CEL rules: a job without a `tensorflow` container is refused at admission.
    let wrong = job("wrong", serde_json::json!({}), "Never")
        .replace("\"name\":\"tensorflow\"", "\"name\":\"trainer\"");
    let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &wrong);
    assert!(!ok, "a job without a tensorflow container was accepted");
    assert!(err.contains("tensorflow"), "{err}");
}

/// The operator as `deploy/`'s ServiceAccount against `plane`, with `args` and its log in
/// `dir/operator.log`; its metrics address.
fn operator(plane: &ControlPlane, dir: &Path, args: &[&str]) -> (Killed, std::net::SocketAddr) {
    let kubeconfig = service_account_kubeconfig(plane, dir);
    let metrics = common::free_addr();
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

/// The sum of `family`'s samples whose labels contain `label` on the `/metrics` at `addr`.
fn metric_sum(addr: std::net::SocketAddr, family: &str, label: &str) -> f64 {
    let Some((200, body)) = common::http_get(addr, "/metrics") else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with(family) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// kube-apiserver killed and started again while jobs run, then etcd: every job ends as it
/// would have, each with exactly its pods (none made twice: under `Never` a pod made again
/// would have meant a lost one, and a failed job), its conditions whole, and the operator's
/// request metrics counting the requests that failed meanwhile.
#[test]
fn jobs_end_as_they_would_across_restarts_of_the_api_server_and_etcd() {
    let mut plane = installed();
    let dir = tempfile::tempdir().unwrap();
    let (_operator, metrics) = operator(&plane, dir.path(), &[]);
    let count = tfjob_test_support::rounds(50, 12);
    let mut manifests = String::new();
    for i in 0..count {
        manifests.push_str(&job(
            &format!("restart-{i}"),
            serde_json::json!({"sim.tfjob.dev/duration": "4s"}),
            "Never",
        ));
        manifests.push('\n');
    }
    let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &manifests);
    assert!(ok, "{err}");
    // Some pods exist: the operator is mid-way.
    eventually_within(WAIT, "the first pods", || {
        let pods = kubectl(&plane, &["get", "pods", "-n", NS, "-o", "name"]);
        (pods.lines().count() >= 2).then_some(())
    });
    plane
        .restart(tfjob_control_plane::Part::ApiServer, WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    plane
        .restart(tfjob_control_plane::Part::Etcd, WAIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let log = || std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();
    for i in 0..count {
        let name = format!("restart-{i}");
        assert_eq!(
            finished(&plane, &name),
            "Succeeded",
            "{name}; operator log:\n{}",
            log()
        );
        let conditions = kubectl(
            &plane,
            &[
                "get",
                "tfjob",
                &name,
                "-n",
                NS,
                "-o",
                "jsonpath={.status.conditions[*].type}",
            ],
        );
        // `Running` is there unless the pods both started and ended while the operator could
        // not see them; nothing failed or restarted.
        assert!(
            matches!(
                conditions.as_str(),
                "Created Running Succeeded" | "Created Succeeded"
            ),
            "{name}: {conditions}"
        );
        let pods = kubectl(
            &plane,
            &[
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                &format!("training.kubeflow.org/job-name={name}"),
                "-o",
                "name",
            ],
        );
        assert_eq!(pods.lines().count(), 2, "{name}: {pods}");
    }
    // The requests the outage failed were counted.
    let failed = metric_sum(metrics, "rest_client_requests_total", "code=\"<error>\"");
    assert!(
        failed > 0.0,
        "no failed request counted; operator log:\n{}",
        log()
    );
}
