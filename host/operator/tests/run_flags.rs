//! `tfjob-operator run` with training-operator 1.9's flag names and with this operator's older
//! names, against the embedded cluster started without its own operator: both reconcile, serve
//! metrics and probes where they are told, watch the namespace they are given (by flag or by
//! `$KUBEFLOW_NAMESPACE`), and hold to the client-side rate limit. A gang scheduler whose
//! PodGroup CRD is not installed stops the operator at start, as `--kueue-workloads` without
//! Kueue's Workload CRD does.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use tfjob_planner::gang::GangScheduler;

use common::cluster::{Cluster, http_status};
use common::{eventually, free_addr};

/// The embedded cluster without its operator, serving Volcano's PodGroups.
fn volcano_cluster() -> Cluster {
    Cluster::start(|options| options.gang_scheduler = Some(GangScheduler::Volcano))
}

/// The operator runs with `args`: metrics on the address given by `metrics_flag`, probes on
/// their own (given as `:PORT`), only the jobs of `watched` reconciled.
fn check_operator(
    c: &Cluster,
    metrics_flag: &str,
    args: &[&str],
    env: &[(&str, &str)],
    watched: &str,
    other: &str,
) {
    let metrics = free_addr();
    let probes = free_addr();
    let metrics_text = metrics.to_string();
    let probes_text = format!(":{}", probes.port());
    let mut all = vec![
        metrics_flag,
        &metrics_text,
        "--health-probe-bind-address",
        &probes_text,
    ];
    all.extend(args);
    let _operator = c.operator(&all, env);
    let probe_at = SocketAddr::from(([127, 0, 0, 1], probes.port()));
    eventually("ready on the probe address", || {
        (http_status(probe_at, "/readyz") == Some(200)).then_some(())
    });
    assert_eq!(http_status(probe_at, "/healthz"), Some(200));
    assert_eq!(http_status(probe_at, "/metrics"), Some(404));
    assert_eq!(http_status(metrics, "/metrics"), Some(200));

    c.submit(watched, "mine");
    c.submit(other, "theirs");
    eventually("the watched namespace's job succeeds", || {
        (c.state(watched, "mine").as_deref() == Some("Succeeded")).then_some(())
    });
    assert_eq!(
        c.state(other, "theirs"),
        None,
        "the other namespace is left alone"
    );
}

#[test]
fn training_operator_flag_names_work() {
    let c = volcano_cluster();
    check_operator(
        &c,
        "--metrics-bind-address",
        &[
            "--controller-threads",
            "2",
            "--kube-api-qps",
            "50",
            "--kube-api-burst",
            "60",
            "--gang-scheduler-name",
            "volcano",
            "--enable-scheme",
            "tfjob",
        ],
        &[("KUBEFLOW_NAMESPACE", "team-a")],
        "team-a",
        "team-b",
    );
    // Gang-scheduled: the job got its PodGroup (deleted again when it finished).
    let events: Api<Event> = Api::namespaced(c.client(), "team-a");
    let notes: Vec<String> = c
        .runtime
        .block_on(events.list(&Default::default()))
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes.iter().any(|n| n == "Created PodGroup: mine"),
        "{notes:?}"
    );
}

#[test]
fn the_older_flag_names_still_work() {
    let c = volcano_cluster();
    check_operator(
        &c,
        "--metrics-addr",
        &["--threads", "2", "--namespace", "team-b"],
        &[("KUBEFLOW_NAMESPACE", "team-a")],
        "team-b",
        "team-a",
    );
}

#[test]
fn the_client_side_rate_limit_holds() {
    let c = volcano_cluster();
    let before = c.operator_requests();
    let started = Instant::now();
    let _operator = c.operator(
        &[
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--kube-api-qps",
            "2",
            "--kube-api-burst",
            "3",
        ],
        &[],
    );
    // Start-up (policies compiled) may take seconds on a loaded machine: the window is
    // measured from the spawn, so waiting for the first request first keeps the bound exact.
    eventually("the operator sends requests", || {
        (c.operator_requests() > before).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let made = c.operator_requests() - before;
    let elapsed = started.elapsed().as_secs_f64();
    // A bucket of 3, refilled at 2 per second: never more than 3 + 2 * elapsed.
    let bound = 3.0 + 2.0 * elapsed;
    assert!(made > 0, "the operator made no request");
    assert!(
        (made as f64) <= bound,
        "{made} requests in {elapsed:.1}s, more than the limit allows ({bound:.1})"
    );
}

/// Runs the operator on `c` with `flags` and expects it to exit 1 at start, saying `expected`.
fn stops_at_start(c: &Cluster, flags: &[&str], expected: &[&str]) {
    let mut args = vec![
        "--metrics-bind-address",
        "0",
        "--health-probe-bind-address",
        "0",
    ];
    args.extend_from_slice(flags);
    let out = c.command(&args, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(expected.iter().all(|e| stderr.contains(e)), "{stderr}");
}

#[test]
fn a_gang_scheduler_without_its_crd_stops_the_operator_at_start() {
    stops_at_start(
        &volcano_cluster(),
        &["--gang-scheduler-name", "scheduler-plugins-scheduler"],
        &["scheduling.x-k8s.io/v1alpha1", "not installed"],
    );
}

#[test]
fn kueue_workloads_without_kueue_stop_the_operator_at_start() {
    stops_at_start(
        &Cluster::start(|_| {}),
        &["--kueue-workloads"],
        &["--kueue-workloads: the Workload CRD kueue.x-k8s.io/v1beta2 is not installed"],
    );
}

#[test]
fn the_deployments_arguments_are_accepted() {
    let text = std::fs::read_to_string(common::repo("deploy/operator/deployment.yaml")).unwrap();
    let deployment: serde_json::Value =
        serde_yaml_ng::from_str(text.split("\n---").next().unwrap()).unwrap();
    let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the operator container has args")
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "run");
    // Parsed in full, then stopped by the missing cluster (a usage error would exit 2).
    let out = common::operator()
        .args(&args)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("KUBEFLOW_NAMESPACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}
