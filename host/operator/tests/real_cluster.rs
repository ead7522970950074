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
//!   run; the server answering 429 past its in-flight limit while a proxy cuts the operator's
//!   connections (watches included) every two seconds: every job ending as it would have, and
//!   the operator's metrics counting what failed.

use crate::common;

use common::real::{
    NS, OPERATOR_USER, WAIT, finished, installed, installed_with, job, job_field, kubectl,
    kubectl_with, operator, operator_through,
};
use common::{eventually_within, http_get};
use tfjob_control_plane::{CuttingProxy, NodeSpec, Options};

/// A job of two workers under `Never` whose pods carry `annotations`.
fn two_workers(name: &str, annotations: serde_json::Value) -> String {
    job(name, 2, "Never", annotations, serde_json::json!({}))
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
        &two_workers("fine", serde_json::json!({"sim.tfjob.dev/duration": "2s"})),
    );
    assert!(ok, "{err}");
    let (ok, err) = kubectl_with(
        &plane,
        &["apply", "-f", "-"],
        &two_workers(
            "oom",
            serde_json::json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/exit-code": "0=137,*=0"}),
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
    let misspelt = two_workers("misspelt", serde_json::json!({}))
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
    let wrong = two_workers("wrong", serde_json::json!({}))
        .replace("\"name\":\"tensorflow\"", "\"name\":\"trainer\"");
    let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &wrong);
    assert!(!ok, "a job without a tensorflow container was accepted");
    assert!(err.contains("tensorflow"), "{err}");
}

/// The sum of `family`'s samples whose labels contain `label` on the `/metrics` at `addr`.
fn metric_sum(addr: std::net::SocketAddr, family: &str, label: &str) -> f64 {
    let Some((200, body)) = http_get(addr, "/metrics") else {
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
    let names: Vec<String> = (0..tfjob_test_support::rounds(50, 12))
        .map(|i| format!("restart-{i}"))
        .collect();
    let manifests: String = names
        .iter()
        .map(|name| two_workers(name, serde_json::json!({"sim.tfjob.dev/duration": "4s"})) + "\n")
        .collect();
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
    assert_succeeded_once(&plane, &names, log);
    // The requests the outage failed were counted.
    let failed = metric_sum(metrics, "rest_client_requests_total", "code=\"<error>\"");
    assert!(
        failed > 0.0,
        "no failed request counted; operator log:\n{}",
        log()
    );
}

/// Each of `names` ended `Succeeded` having run once: exactly its two pods (under `Never`, a pod
/// made twice would have meant a lost one, and a failed job) and its conditions whole
/// (`Running` is there unless the pods both started and ended while the operator could not
/// see them; nothing failed or restarted).
fn assert_succeeded_once(
    plane: &tfjob_control_plane::ControlPlane,
    names: &[String],
    log: impl Fn() -> String,
) {
    for name in names {
        assert_eq!(
            finished(plane, name),
            "Succeeded",
            "{name}; operator log:\n{}",
            log()
        );
        let conditions = job_field(plane, name, "{.status.conditions[*].type}");
        assert!(
            matches!(
                conditions.as_str(),
                "Created Running Succeeded" | "Created Succeeded"
            ),
            "{name}: {conditions}"
        );
        let pods = kubectl(
            plane,
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
}

/// The API server answering 429 past one request in flight (priority and fairness off, as a
/// server past its limit answers), and every connection between the operator and the server
/// cut every two seconds by a proxy, watches mid-stream and requests in flight (kube's watcher
/// asks for 290-s watches, which `--min-request-timeout` does not shorten): every job ends as
/// it would have, none run twice; the operator's request metrics count the 429s and the failed
/// requests, and the audit log shows its watches of pods and jobs opened again and again.
#[test]
fn jobs_end_as_they_would_through_429s_and_cut_connections() {
    let plane = installed_with(Options {
        nodes: vec![NodeSpec::default(); 3],
        max_requests_inflight: Some(1),
        audit_users: vec![OPERATOR_USER.to_owned()],
        ..Options::default()
    });
    let upstream: std::net::SocketAddr = plane
        .server()
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    let proxy = CuttingProxy::start(upstream).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let (_operator, metrics) = operator_through(
        &plane,
        &format!("https://{}", proxy.addr()),
        dir.path(),
        &[],
    );
    let names: Vec<String> = (0..tfjob_test_support::rounds(30, 12))
        .map(|i| format!("throttled-{i}"))
        .collect();
    let manifests: String = names
        .iter()
        .map(|name| two_workers(name, serde_json::json!({"sim.tfjob.dev/duration": "3s"})) + "\n")
        .collect();
    let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &manifests);
    assert!(ok, "{err}");
    let log = || std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();
    let cutting = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while cutting.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_secs(2));
                proxy.cut_all();
            }
        });
        // Stops the cutting however the checks end.
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = Stop(&cutting);
        assert_succeeded_once(&plane, &names, log);
    });
    assert!(proxy.cuts() >= 3, "cut {} times", proxy.cuts());

    let requests = plane.audited().unwrap_or_else(|e| panic!("{e}"));
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for r in requests.iter().filter(|r| r.user == OPERATOR_USER) {
        *codes.entry(r.code).or_default() += 1;
    }
    let throttled = metric_sum(metrics, "rest_client_requests_total", "code=\"429\"");
    assert!(
        throttled > 0.0,
        "no 429 counted; the server answered the operator {codes:?}; operator log:\n{}",
        log()
    );
    let failed = metric_sum(metrics, "rest_client_requests_total", "code=\"<error>\"");
    assert!(
        failed > 0.0,
        "no cut request counted; operator log:\n{}",
        log()
    );
    for resource in ["pods", "tfjobs"] {
        let watches = requests
            .iter()
            .filter(|r| {
                r.user == OPERATOR_USER
                    && r.verb == "watch"
                    && r.resource == resource
                    && !r.forbidden()
            })
            .count();
        assert!(
            watches >= 3,
            "the watch of {resource} was opened {watches} times through {} cuts",
            proxy.cuts()
        );
    }
}

/// The default policies reading the real cluster, as `--policy-config` turns them on: the
/// decoration copies the namespace's `team` label onto pods; a worker asking 300 cpus, which the
/// real scheduler marks `Unschedulable` on nodes of 8, and which no declared pool (256) could
/// hold either, fails its job past the grace period, naming resource, request and largest
/// offer; a worker asking 2 runs, labelled.
#[test]
fn default_policies_read_the_real_cluster_and_fail_a_pod_no_node_can_hold() {
    let plane = installed();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policy-config.yaml");
    std::fs::write(
        &config,
        "default-decorate:\n  settings:\n    namespaceLabels: [team]\n\
         default-classify:\n  settings:\n    failUnschedulable:\n      gracePeriod: 2s\n\
         \x20     nodePools:\n      - {name: big-cpu, labels: {pool: big}, allocatable: {cpu: \"256\", memory: 1Ti}}\n",
    )
    .unwrap();
    let (_operator, _) = operator(
        &plane,
        dir.path(),
        &[&format!("--policy-config={}", config.display())],
    );
    kubectl(&plane, &["label", "namespace", NS, "team=vision"]);
    let asking = |name: &str, cpu: &str| {
        let mut job: serde_json::Value = serde_json::from_str(&job(
            name,
            1,
            "Never",
            serde_json::json!({"sim.tfjob.dev/duration": "1s"}),
            serde_json::json!({}),
        ))
        .unwrap();
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] =
            serde_json::json!({"requests": {"cpu": cpu}});
        job.to_string()
    };
    for (name, cpu) in [("too-big", "300"), ("fits", "2")] {
        let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &asking(name, cpu));
        assert!(ok, "{err}");
    }
    let log = || std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();

    assert_eq!(
        finished(&plane, "too-big"),
        "Failed",
        "operator log:\n{}",
        log()
    );
    let why = "the pod can never be scheduled: it requests cpu 300; the largest node or node pool \
               offers 256 (pool/big-cpu)";
    let notes = kubectl(
        &plane,
        &[
            "get",
            "events",
            "-n",
            NS,
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(notes.contains(why), "{notes}");
    let scheduled = kubectl(
        &plane,
        &[
            "get",
            "pod",
            "too-big-worker-0",
            "-n",
            NS,
            "-o",
            "jsonpath={.status.phase} {.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ],
    );
    assert_eq!(
        scheduled, "Pending Unschedulable",
        "the real scheduler's verdict"
    );

    assert_eq!(
        finished(&plane, "fits"),
        "Succeeded",
        "operator log:\n{}",
        log()
    );
    let team = kubectl(
        &plane,
        &[
            "get",
            "pod",
            "fits-worker-0",
            "-n",
            NS,
            "-o",
            "jsonpath={.metadata.labels.team}",
        ],
    );
    assert_eq!(team, "vision");
}
