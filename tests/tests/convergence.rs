//! Convergence: with a misbehaving API server (injected 500, 409 and 429 answers, latency, watch
//! streams cut every few seconds) and with an operator that is stopped and started again while
//! its jobs run, every job still reaches the outcome its pods script, each pod is created exactly
//! once plus once per restart its script needs, no two pods of one replica ever exist at once,
//! and no restart is counted twice.
//!
//! Each test starts its own embedded cluster (API server, simulated kubelet, the real operator
//! with the default Wasm policies), so fault settings never leak from one test into another.
//! Jobs are followed through the API (errors while faults are on only mean "look again"); the
//! audits read the store's kept history of changes, which holds every version of every pod
//! since the jobs were submitted. Waits poll with a generous timeout; nothing asserts on how
//! long something took.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_api::JobConditionType::{self, Failed, Succeeded};
use tfjob_api::TFJob;
use tfjob_cluster::Store;
use tfjob_cluster::faults::{ErrorRule, FaultConfig, FaultCounts, FaultStatus};
use tfjob_cluster::http::requests::Verb;
use tfjob_cluster::storage::store::EventType;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};

use common::{MAIN, is_true, phase, replica};
use tfjob_conformance::{JOB_NAME, REPLICA_INDEX, REPLICA_TYPE};

/// Longest wait for any single expected state. Under faults a reconcile that met an API error
/// is retried after 100 ms, doubling while it keeps failing; this is generous.
const WAIT: Duration = Duration::from_secs(150);
/// Interval between two looks at the API.
const POLL: Duration = Duration::from_millis(100);
/// How long a stopping operator may finish the reconciles in flight.
const GRACE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The cluster

/// Starts a cluster with the default policies and room for every pod of a test at once,
/// injecting `faults` from the start (so every watch the operator opens is subject to them);
/// creates namespace `ns` and submits the `expected` jobs there. Returns the cluster and the
/// resourceVersion the audits read the history from.
async fn submit(faults: FaultConfig, ns: &str, expected: &[Expected]) -> (EmbeddedCluster, u64) {
    let policies = tokio::task::spawn_blocking(common::default_policies)
        .await
        .expect("the policy loading task");
    let mut options = ClusterOptions::new(policies);
    options.kubelet = common::roomy_kubelet();
    options.faults = faults;
    let cluster = common::start_cluster(options).await;
    let namespaces = Api::all(cluster.client());
    create(&namespaces, &common::namespace(ns)).await;
    let since = cluster.store().resource_version();
    let api: Api<TFJob> = Api::namespaced(cluster.client(), ns);
    let jobs: Vec<TFJob> = expected
        .iter()
        .map(|e| common::tfjob(e.name, e.spec.clone()))
        .collect();
    join_all(jobs.iter().map(|job| create(&api, job))).await;
    (cluster, since)
}

/// Roughly one request in ten fails, spread over 500, 409 and 429 (with `Retry-After: 1`), on
/// every verb and resource; every request is a little late; every watch ends within
/// `cut_watches_ms`.
fn unreliable(seed: u64, cut_watches_ms: u64) -> FaultConfig {
    let rule = |rate: f64, status: FaultStatus, retry_after_seconds: Option<u64>| ErrorRule {
        verbs: Vec::new(),
        resources: Vec::new(),
        rate,
        status,
        retry_after_seconds,
    };
    // The first rule that matches and hits decides, so each later rate is scaled up by what the
    // earlier ones left: 4 % + 3 % + 3 % of all requests, 10 % in all.
    FaultConfig {
        errors: vec![
            rule(0.04, FaultStatus::InternalError, None),
            rule(0.03 / 0.96, FaultStatus::Conflict, None),
            rule(0.03 / 0.93, FaultStatus::TooManyRequests, Some(1)),
        ],
        latency_ms: 2,
        latency_jitter_ms: 15,
        drop_watches_after_ms: Some(cut_watches_ms),
        seed,
    }
}

/// Whether an API error is one the fault injection produces (and a client retries).
fn injected(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) if s.is_already_exists() => None,
        kube::Error::Api(s) if matches!(s.code, 409 | 429 | 500) => {
            let after = s.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            Some(Duration::from_secs(u64::from(after)).max(Duration::from_millis(100)))
        }
        _ => None,
    }
}

/// Creates an object as a client would through an unreliable server: injected errors are
/// retried; AlreadyExists after a failed attempt means that attempt took effect after all.
async fn create<K>(api: &Api<K>, obj: &K)
where
    K: kube::Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    let mut failures = 0u32;
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if failures > 0 && s.is_already_exists() => return,
            Err(e) => match injected(&e) {
                Some(wait) if failures < 40 => {
                    failures += 1;
                    tokio::time::sleep(wait).await;
                }
                _ => panic!("creating {name} (after {failures} failed attempts): {e}"),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs and what they must end as

/// One pod of a job over its whole life.
#[derive(Clone, Debug)]
struct PodPlan {
    /// `worker-0`: the pod is `<job>-worker-0`.
    slot: String,
    /// How often the operator creates it: once, plus once per restart it performs.
    created: u32,
    /// Container restarts the kubelet performs in place in its last incarnation.
    in_place: u32,
}

fn pod(slot: impl Into<String>) -> PodPlan {
    PodPlan {
        slot: slot.into(),
        created: 1,
        in_place: 0,
    }
}

/// Pods `worker-0` (planned as `first`) to `worker-<n - 1>`, the others created once.
fn worker_pods(first: PodPlan, n: i32) -> Vec<PodPlan> {
    let mut pods = vec![first];
    pods.extend((1..n).map(|i| pod(format!("worker-{i}"))));
    pods
}

impl PodPlan {
    fn recreated(mut self, restarts: u32) -> PodPlan {
        self.created = 1 + restarts;
        self
    }

    fn restarted_in_place(mut self, restarts: u32) -> PodPlan {
        self.in_place = restarts;
        self
    }
}

/// A job to submit and everything it must end with.
struct Expected {
    name: &'static str,
    spec: Value,
    outcome: JobConditionType,
    /// Text the outcome condition's message contains.
    message: String,
    /// Every pod the job ever has.
    pods: Vec<PodPlan>,
}

impl Expected {
    /// A job of namespace `ns` that must succeed.
    fn succeeds(ns: &str, name: &'static str, spec: Value) -> Expected {
        Expected {
            name,
            spec,
            outcome: Succeeded,
            message: format!("TFJob {ns}/{name} successfully completed."),
            pods: Vec::new(),
        }
    }

    /// A job that must fail with a message containing `message`.
    fn fails(name: &'static str, spec: Value, message: impl Into<String>) -> Expected {
        Expected {
            name,
            spec,
            outcome: Failed,
            message: message.into(),
            pods: Vec::new(),
        }
    }

    fn pods(mut self, pods: impl IntoIterator<Item = PodPlan>) -> Expected {
        self.pods = pods.into_iter().collect();
        self
    }

    fn pod_name(&self, slot: &str) -> String {
        format!("{}-{slot}", self.name)
    }

    /// `status.podRestarts` as it must end: pod name to the operator's restarts of it.
    fn pod_restarts(&self) -> BTreeMap<String, i32> {
        self.pods
            .iter()
            .filter(|p| p.created > 1)
            .map(|p| (self.pod_name(&p.slot), (p.created - 1) as i32))
            .collect()
    }

    /// `status.restartCount` as it must end.
    fn restart_count(&self) -> i32 {
        self.pod_restarts().values().sum()
    }
}

/// `n` workers under restart policy `policy`, scripted by `sim`.
fn workers_spec(n: i32, policy: &str, sim: &[(&str, &str)]) -> Value {
    json!({"tfReplicaSpecs": {"Worker": replica(n, policy, sim)}})
}

// The classes of job the tests submit, each with the durations that suit its test.

/// A PS and two workers under Never, all succeeding: worker 0 decides.
fn ps_worker(ns: &str, ps: &str, workers: &str) -> Expected {
    let spec = json!({"tfReplicaSpecs": {
        "PS": replica(1, "Never", &[("duration", ps)]),
        "Worker": replica(2, "Never", &[("duration", workers)]),
    }});
    Expected::succeeds(ns, "ps-worker", spec).pods([pod("ps-0"), pod("worker-0"), pod("worker-1")])
}

/// A chief and `n` workers under Never, all succeeding: the chief decides.
fn chief(ns: &str, chief: &str, n: i32, workers: &str) -> Expected {
    let spec = json!({"tfReplicaSpecs": {
        "Chief": replica(1, "Never", &[("duration", chief)]),
        "Worker": replica(n, "Never", &[("duration", workers)]),
    }});
    Expected::succeeds(ns, "chief", spec)
        .pods(std::iter::once(pod("chief-0")).chain(worker_pods(pod("worker-0"), n)))
}

/// `n` workers under Never with success policy `AllWorkers`.
fn all_workers(ns: &str, n: i32, durations: &str) -> Expected {
    let mut spec = workers_spec(n, "Never", &[("duration", durations)]);
    spec["successPolicy"] = json!("AllWorkers");
    Expected::succeeds(ns, "all-workers", spec).pods(worker_pods(pod("worker-0"), n))
}

/// `n` workers under `policy` (ExitCode or OnFailure): worker 0 exits with `codes` `fail`
/// times, then succeeds. Under ExitCode the operator recreates the pod each time; under
/// OnFailure the kubelet restarts its container in place.
fn worker_zero_retried(
    ns: &str,
    name: &'static str,
    policy: &str,
    n: i32,
    duration: &str,
    codes: &str,
    fail: u32,
) -> Expected {
    let sim = [
        ("duration", duration),
        ("exit-code", codes),
        ("fail-times", &fail.to_string()),
    ];
    let first = match policy {
        "ExitCode" => pod("worker-0").recreated(fail),
        _ => pod("worker-0").restarted_in_place(fail),
    };
    Expected::succeeds(ns, name, workers_spec(n, policy, &sim)).pods(worker_pods(first, n))
}

/// One worker under Never that exits 1: the job fails.
fn never_fails(ns: &str, duration: &str) -> Expected {
    let spec = workers_spec(1, "Never", &[("duration", duration), ("exit-code", "1")]);
    let message = format!("TFJob {ns}/never-fails has failed because 1 Worker replica(s) failed.");
    Expected::fails("never-fails", spec, message).pods([pod("worker-0")])
}

/// One worker under ExitCode that always exits with the retryable `code`: recreated `limit`
/// times, then the job fails at its backoff limit.
fn backoff(name: &'static str, limit: u32, duration: &str, code: &str) -> Expected {
    let sim = [("duration", duration), ("exit-code", code)];
    let mut spec = workers_spec(1, "ExitCode", &sim);
    spec["runPolicy"] = json!({"backoffLimit": limit});
    let message =
        format!("Job {name} has failed because it has reached the specified backoff limit");
    Expected::fails(name, spec, message).pods([pod("worker-0").recreated(limit)])
}

// ---------------------------------------------------------------------------------------------
// Looking at the cluster

/// The jobs and pods of a namespace at one moment, read through the API.
struct View {
    jobs: BTreeMap<String, TFJob>,
    pods: BTreeMap<String, Pod>,
}

impl View {
    /// `None` when a request failed (faults may be on): look again later.
    async fn fetch(client: &Client, ns: &str) -> Option<View> {
        let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let jobs = jobs.list(&ListParams::default()).await.ok()?.items;
        let pods = pods.list(&ListParams::default()).await.ok()?.items;
        Some(View {
            jobs: jobs.into_iter().map(|j| (j.name_any(), j)).collect(),
            pods: pods.into_iter().map(|p| (p.name_any(), p)).collect(),
        })
    }

    fn finished(&self, job: &str) -> bool {
        self.jobs.get(job).is_some_and(is_finished)
    }

    fn restart_count(&self, job: &str) -> Option<i32> {
        self.jobs
            .get(job)?
            .status
            .as_ref()
            .and_then(|s| s.restart_count)
    }

    fn phase(&self, pod: &str) -> Option<&str> {
        self.pods.get(pod).map(phase)
    }

    fn uid(&self, pod: &str) -> Option<String> {
        self.pods.get(pod).and_then(|p| p.uid())
    }
}

fn is_finished(job: &TFJob) -> bool {
    is_true(job, Succeeded) || is_true(job, Failed)
}

/// In-place restarts of the main container, from a pod as JSON.
fn container_restarts(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().find(|c| c["name"] == MAIN))
        .and_then(|c| c["restartCount"].as_i64())
        .unwrap_or(0)
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Everything about the namespace, read from the store (never through the faults), for
/// failure messages.
fn report(store: &Store, ns: &str) -> String {
    let mut out = String::new();
    let jobs_t = store
        .resource("kubeflow.org", "tfjobs")
        .expect("TFJobs are served");
    let pods_t = store.resource("", "pods").expect("pods are served");
    for job in store.list(&jobs_t, Some(ns)).0 {
        let status = job.get("status").cloned().unwrap_or(Value::Null);
        let conditions: Vec<String> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{}={} ({})",
                    text(c, "/type"),
                    text(c, "/status"),
                    text(c, "/message")
                )
            })
            .collect();
        out.push_str(&format!(
            "TFJob {}: conditions {conditions:?} restartCount {} podRestarts {} replicaStatuses {}\n",
            text(&job, "/metadata/name"),
            status["restartCount"],
            status["podRestarts"],
            status["replicaStatuses"],
        ));
    }
    for pod in store.list(&pods_t, Some(ns)).0 {
        out.push_str(&format!(
            "  pod {} uid={} phase={} restarts={} deleting={}\n",
            text(&pod, "/metadata/name"),
            text(&pod, "/metadata/uid"),
            text(&pod, "/status/phase"),
            container_restarts(&pod),
            pod.pointer("/metadata/deletionTimestamp").is_some(),
        ));
    }
    out
}

/// Polls `check` on the namespace until it gives a value; on timeout fails naming what was
/// awaited, with the state of every job and pod.
async fn until<T>(
    cluster: &EmbeddedCluster,
    ns: &str,
    what: &str,
    check: impl Fn(&View) -> Option<T>,
) -> T {
    let client = cluster.client();
    let found = common::poll(WAIT, POLL, || async {
        View::fetch(&client, ns)
            .await
            .and_then(|view| check(&view))
            .ok_or(())
    })
    .await;
    found.unwrap_or_else(|()| {
        panic!(
            "timed out after {WAIT:?} waiting for {what} in namespace {ns}\n{}",
            report(cluster.store(), ns)
        )
    })
}

/// Waits until every expected job has finished; returns the final versions.
async fn until_finished(
    cluster: &EmbeddedCluster,
    ns: &str,
    expected: &[Expected],
) -> BTreeMap<String, TFJob> {
    until(cluster, ns, "every job to finish", |view| {
        expected
            .iter()
            .all(|e| view.finished(e.name))
            .then(|| view.jobs.clone())
    })
    .await
}

/// Retries a read until it works (faults may still be answering requests decided earlier).
async fn eventually<T, Fut: Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> Fut,
) -> T {
    let found = common::poll(WAIT, POLL, || {
        let next = f();
        async move { next.await.ok_or(()) }
    })
    .await;
    found.unwrap_or_else(|()| panic!("timed out waiting for {what}"))
}

/// Waits until every job has finished, turns the faults off and audits the namespace, reading
/// the final jobs afresh (the last look under faults may have come before their last update).
/// Returns the faults injected.
async fn converge_and_audit(
    cluster: &EmbeddedCluster,
    ns: &str,
    since: u64,
    expected: &[Expected],
) -> FaultCounts {
    until_finished(cluster, ns, expected).await;
    let counts = cluster.faults().counts();
    cluster.faults().clear();
    eprintln!("[{ns}] faults injected: {counts:?}");
    eprintln!(
        "[{ns}] operator writes that failed: {}",
        failed_operator_writes(cluster)
    );
    let client = cluster.client();
    let jobs = eventually("the final jobs", || async {
        View::fetch(&client, ns).await.map(|v| v.jobs)
    })
    .await;
    audit(cluster, ns, since, expected, &jobs);
    counts
}

// ---------------------------------------------------------------------------------------------
// The audits

/// Checks the final jobs and the whole pod and service history of the namespace since
/// resourceVersion `since` against `expected`; fails listing every problem found.
fn audit(
    cluster: &EmbeddedCluster,
    ns: &str,
    since: u64,
    expected: &[Expected],
    jobs: &BTreeMap<String, TFJob>,
) {
    let mut problems = Vec::new();
    for e in expected {
        check_job(ns, e, jobs.get(e.name), &mut problems);
    }
    audit_pods(cluster.store(), ns, since, expected, &mut problems);
    audit_services(cluster.store(), ns, since, expected, &mut problems);
    assert!(
        problems.is_empty(),
        "{} problem(s) in namespace {ns}:\n  {}\nnow:\n{}",
        problems.len(),
        problems.join("\n  "),
        report(cluster.store(), ns)
    );
}

/// The job ended with its outcome (and not the other one), its message, and exactly its
/// restarts, each counted once.
fn check_job(ns: &str, e: &Expected, job: Option<&TFJob>, problems: &mut Vec<String>) {
    let Some(status) = job.and_then(|j| j.status.as_ref()) else {
        problems.push(format!("TFJob {} has no status", e.name));
        return;
    };
    let other = if e.outcome == Succeeded {
        Failed
    } else {
        Succeeded
    };
    match status.condition(e.outcome) {
        Some(c) if status.is_true(e.outcome) => {
            if !c.message.contains(&e.message) {
                problems.push(format!(
                    "TFJob {}: the {:?} message {:?} does not contain {:?}",
                    e.name, e.outcome, c.message, e.message
                ));
            }
        }
        _ => problems.push(format!(
            "TFJob {}/{} did not end {:?}: {:?}",
            ns, e.name, e.outcome, status.conditions
        )),
    }
    if status.is_true(other) {
        problems.push(format!(
            "TFJob {} is both {:?} and {other:?}",
            e.name, e.outcome
        ));
    }
    let restarts = status.restart_count.unwrap_or(0);
    if restarts != e.restart_count() {
        problems.push(format!(
            "TFJob {}: status.restartCount is {restarts}, the scripted restarts are {}",
            e.name,
            e.restart_count()
        ));
    }
    let recorded: BTreeMap<String, i32> = status
        .pod_restarts
        .iter()
        .map(|(name, r)| (name.clone(), r.count))
        .collect();
    if recorded != e.pod_restarts() {
        problems.push(format!(
            "TFJob {}: status.podRestarts counts {recorded:?}, the scripted restarts are {:?}",
            e.name,
            e.pod_restarts()
        ));
    }
}

/// The replica a pod runs: job, replica type and index, from its labels.
fn slot_of(obj: &Value) -> (String, String, String) {
    let label = |key: &str| {
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (label(JOB_NAME), label(REPLICA_TYPE), label(REPLICA_INDEX))
}

/// Every change of `plural` (a core resource) in `ns` after `since`, from the store's history.
fn history(
    store: &Store,
    plural: &str,
    ns: &str,
    since: u64,
) -> Vec<tfjob_cluster::storage::store::WatchEvent> {
    store
        .watch(&format!("/{plural}"), Some(ns), since)
        .unwrap_or_else(|e| {
            panic!("the {plural} history since resourceVersion {since} is kept: {e}")
        })
        .0
}

/// Each pod was created exactly as often as its script needs, never while another pod of the
/// same replica existed, and its last incarnation restarted its container in place exactly as
/// scripted.
fn audit_pods(
    store: &Store,
    ns: &str,
    since: u64,
    expected: &[Expected],
    problems: &mut Vec<String>,
) {
    let mut created: BTreeMap<String, u32> = BTreeMap::new();
    let mut live: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for event in history(store, "pods", ns, since) {
        let name = text(&event.object, "/metadata/name").to_owned();
        let uid = text(&event.object, "/metadata/uid").to_owned();
        let slot = slot_of(&event.object);
        match event.type_ {
            EventType::Added => {
                *created.entry(name.clone()).or_default() += 1;
                let alive = live.entry(slot).or_default();
                if !alive.is_empty() {
                    problems.push(format!(
                        "pod {name} (uid {uid}) was created at resourceVersion {} while pod(s) \
                         {alive:?} of the same replica still existed",
                        event.rv
                    ));
                }
                alive.insert(uid);
            }
            EventType::Modified => {}
            EventType::Deleted => {
                live.entry(slot).or_default().remove(&uid);
            }
        }
        last.insert(name, (*event.object).clone());
    }
    let wanted: BTreeMap<String, u32> = expected
        .iter()
        .flat_map(|e| e.pods.iter().map(move |p| (e.pod_name(&p.slot), p.created)))
        .collect();
    if created != wanted {
        problems.push(format!(
            "pods created (name: times) {created:?}, expected {wanted:?}"
        ));
    }
    for e in expected {
        for p in &e.pods {
            let name = e.pod_name(&p.slot);
            let Some(pod) = last.get(&name) else { continue };
            let restarts = container_restarts(pod);
            if restarts != i64::from(p.in_place) {
                problems.push(format!(
                    "pod {name}: its container restarted {restarts} time(s) in place, scripted {}",
                    p.in_place
                ));
            }
        }
    }
}

/// No service was ever created twice: the operator never deletes one to restart a pod.
fn audit_services(
    store: &Store,
    ns: &str,
    since: u64,
    expected: &[Expected],
    problems: &mut Vec<String>,
) {
    let names: BTreeSet<String> = expected
        .iter()
        .flat_map(|e| e.pods.iter().map(move |p| e.pod_name(&p.slot)))
        .collect();
    let mut created: BTreeMap<String, u32> = BTreeMap::new();
    for event in history(store, "services", ns, since) {
        if event.type_ == EventType::Added {
            *created
                .entry(text(&event.object, "/metadata/name").to_owned())
                .or_default() += 1;
        }
    }
    for (name, times) in &created {
        if *times != 1 || !names.contains(name) {
            problems.push(format!("service {name} was created {times} time(s)"));
        }
    }
}

/// Operator writes (the test never writes these) answered with an error.
fn failed_operator_writes(cluster: &EmbeddedCluster) -> u64 {
    let snapshot = cluster.requests().snapshot();
    [
        (Verb::Create, "pods"),
        (Verb::Delete, "pods"),
        (Verb::Create, "services"),
        (Verb::Update, "tfjobs/status"),
        (Verb::Create, "events"),
    ]
    .iter()
    .flat_map(|(verb, resource)| {
        ["4xx", "5xx"].map(|class| snapshot.count_class(*verb, resource, class))
    })
    .sum()
}

// ---------------------------------------------------------------------------------------------
// The tests

/// Every class of job, submitted at once through a server that fails one request in ten and
/// cuts watches every few seconds: each converges to its outcome, each pod is created once
/// (plus once per scripted restart), and each restart is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_converges_under_api_errors_and_cut_watches() {
    let ns = "faults";
    let chief_retry = json!({"tfReplicaSpecs": {
        "Chief": replica(1, "ExitCode", &[
            ("duration", "1s"), ("exit-code", "137"), ("fail-times", "1"),
        ]),
        "Worker": replica(1, "ExitCode", &[("duration", "3s")]),
    }});
    let expected = vec![
        ps_worker(ns, "3s", "2s"),
        chief(ns, "2s", 2, "1s"),
        all_workers(ns, 4, "0=1s,1=2s,*=1500ms"),
        worker_zero_retried(ns, "exit-retry", "ExitCode", 2, "2s", "0=137,*=0", 1),
        worker_zero_retried(ns, "exit-retry-twice", "ExitCode", 1, "1s", "143", 2),
        Expected::succeeds(ns, "chief-retry", chief_retry)
            .pods([pod("chief-0").recreated(1), pod("worker-0")]),
        worker_zero_retried(ns, "on-failure", "OnFailure", 2, "1s", "0=1,*=0", 1),
        worker_zero_retried(ns, "on-failure-twice", "OnFailure", 1, "700ms", "2", 2),
        never_fails(ns, "1s"),
        Expected::fails(
            "never-killed",
            workers_spec(1, "Never", &[("duration", "1s"), ("exit-code", "137")]),
            "has failed because 1 Worker replica(s) failed.",
        )
        .pods([pod("worker-0")]),
        Expected::fails(
            "exit-permanent",
            workers_spec(1, "ExitCode", &[("duration", "1s"), ("exit-code", "1")]),
            "job \"exit-permanent\" is failing because \"Worker\" replica(s) failed.",
        )
        .pods([pod("worker-0")]),
        backoff("backoff", 1, "1s", "137"),
        backoff("backoff-two", 2, "700ms", "130"),
    ];

    let faults = unreliable(0x7f4a_1c3e_9b2d_0855, 2500);
    let (cluster, since) = submit(faults, ns, &expected).await;
    let counts = converge_and_audit(&cluster, ns, since, &expected).await;
    assert!(
        counts.internal_errors > 0
            && counts.conflicts > 0
            && counts.too_many_requests > 0
            && counts.watches_cut > 0
            && counts.delayed > 0,
        "every kind of fault was injected: {counts:?}"
    );
    assert!(
        failed_operator_writes(&cluster) > 0,
        "some of the operator's own writes met an injected error"
    );
}

/// The operator is stopped twice while its jobs run: once with every first pod running (the
/// kubelet fails and finishes pods while it is away), once after it restarted the failed pods
/// (the new incarnations finish while it is away). Started again, it converges the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_restarted_mid_job_converges_the_same_way() {
    let ns = "restarted";
    let expected = vec![
        ps_worker(ns, "4s", "3s"),
        chief(ns, "3s", 1, "4s"),
        worker_zero_retried(ns, "exit-retry", "ExitCode", 2, "4s", "0=137,*=0", 1),
        backoff("backoff", 1, "4s", "137"),
        worker_zero_retried(ns, "on-failure", "OnFailure", 1, "2s", "1", 1),
        never_fails(ns, "3s"),
    ];
    let all_pods: Vec<String> = expected
        .iter()
        .flat_map(|e| e.pods.iter().map(|p| e.pod_name(&p.slot)))
        .collect();
    let restarted = ["exit-retry-worker-0", "backoff-worker-0"];

    let (mut cluster, since) = submit(FaultConfig::default(), ns, &expected).await;

    // First stop: every first pod runs.
    let first_uids: BTreeMap<&str, String> =
        until(&cluster, ns, "every first pod to run", |view| {
            let running = all_pods.iter().all(|p| view.phase(p) == Some("Running"));
            running.then(|| {
                restarted
                    .iter()
                    .map(|p| (*p, view.uid(p).unwrap_or_default()))
                    .collect()
            })
        })
        .await;
    cluster.stop_operator(GRACE).await;
    until(
        &cluster,
        ns,
        "the first runs to end while the operator is stopped",
        |view| {
            let failed = [
                "exit-retry-worker-0",
                "backoff-worker-0",
                "never-fails-worker-0",
            ]
            .iter()
            .all(|p| view.phase(p) == Some("Failed"));
            let done = ["ps-worker-worker-0", "chief-chief-0", "exit-retry-worker-1"]
                .iter()
                .all(|p| view.phase(p) == Some("Succeeded"));
            let in_place = view
                .pods
                .get("on-failure-worker-0")
                .and_then(|p| serde_json::to_value(p).ok())
                .is_some_and(|p| container_restarts(&p) >= 1);
            (failed && done && in_place).then_some(())
        },
    )
    .await;
    let client = cluster.client();
    let view = eventually("a look at the stopped cluster", || View::fetch(&client, ns)).await;
    for job in ["exit-retry", "backoff"] {
        assert_eq!(
            view.restart_count(job),
            None,
            "TFJob {job} restarted nothing while the operator was stopped\n{}",
            report(cluster.store(), ns)
        );
    }
    for (pod, uid) in &first_uids {
        assert_eq!(
            view.uid(pod).as_ref(),
            Some(uid),
            "pod {pod} was not replaced while the operator was stopped"
        );
    }
    cluster.start_operator();

    // Second stop: the failed pods were restarted once and their new incarnations run.
    until(&cluster, ns, "the restarted pods to run again", |view| {
        let restarted_once = ["exit-retry", "backoff"]
            .iter()
            .all(|job| view.restart_count(job) == Some(1));
        let running = first_uids.iter().all(|(pod, uid)| {
            view.phase(pod) == Some("Running") && view.uid(pod).as_ref() != Some(uid)
        });
        (restarted_once && running).then_some(())
    })
    .await;
    cluster.stop_operator(GRACE).await;
    until(
        &cluster,
        ns,
        "the restarted pods to end while the operator is stopped",
        |view| {
            (view.phase("exit-retry-worker-0") == Some("Succeeded")
                && view.phase("backoff-worker-0") == Some("Failed"))
            .then_some(())
        },
    )
    .await;
    cluster.start_operator();

    let jobs = until_finished(&cluster, ns, &expected).await;
    audit(&cluster, ns, since, &expected, &jobs);
}

/// Both at once: deleting pods fails every time, so the operator records a restart it cannot
/// carry out; it is stopped in that state and started again under one-in-ten faults. The
/// restart is carried out once and counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_left_half_done_by_a_stopped_operator_is_counted_once_under_faults() {
    let ns = "restarted-faulty";
    // Deleting a pod always fails; everything else fails one time in ten.
    let mut faults = unreliable(0x2c91_d07e_5a13_be44, 2000);
    faults.errors.insert(
        0,
        ErrorRule::always(FaultStatus::InternalError, &[Verb::Delete], &["pods"]),
    );
    let expected = vec![
        worker_zero_retried(ns, "exit-retry", "ExitCode", 1, "1s", "137", 1),
        backoff("backoff", 1, "1s", "137"),
        worker_zero_retried(ns, "on-failure", "OnFailure", 1, "1s", "1", 1),
        all_workers(ns, 2, "3s"),
    ];

    let (mut cluster, since) = submit(faults, ns, &expected).await;

    // The restarts are recorded, but the failed pods are still there: their deletion failed.
    until(
        &cluster,
        ns,
        "restarts recorded whose deletions failed",
        |view| {
            let half_done = ["exit-retry", "backoff"].iter().all(|job| {
                let pod = format!("{job}-worker-0");
                let last_deleted = view
                    .jobs
                    .get(*job)
                    .and_then(|j| j.status.as_ref())
                    .and_then(|s| s.pod_restarts.get(&pod))
                    .map(|r| r.last_deleted_uid.clone());
                view.restart_count(job) == Some(1)
                    && view.phase(&pod) == Some("Failed")
                    && last_deleted.is_some()
                    && last_deleted == view.uid(&pod)
            });
            let deletes_failed =
                cluster
                    .requests()
                    .snapshot()
                    .count_class(Verb::Delete, "pods", "5xx")
                    >= 2;
            (half_done && deletes_failed).then_some(())
        },
    )
    .await;
    cluster.stop_operator(GRACE).await;
    cluster
        .faults()
        .set(unreliable(0x5e3b_88a1_04cf_7d29, 2000))
        .expect("the fault configuration is valid");
    cluster.start_operator();

    let counts = converge_and_audit(&cluster, ns, since, &expected).await;
    assert!(
        counts.errors() > 0 && counts.watches_cut > 0,
        "faults were injected: {counts:?}"
    );
}
