//! End to end, scenario by scenario: every class of the reconcile contract
//! (`tfjob-semantics`) observed through the API of the embedded cluster, with the real operator
//! and its default Wasm policies, the simulated kubelet running the pods as their
//! `sim.tfjob.dev/*` annotations script them.
//!
//! One cluster serves the test functions below (each in its own namespace); the policy verdict
//! test starts a second one whose classification policy has a shortened image pull grace
//! period. Every test function submits its jobs at once and follows each to its expected state
//! concurrently. A watch on the namespace records every version of every job, so condition
//! sequences are checked as the API published them. Waits poll with a generous timeout and
//! assertions never depend on how long something took; where a scenario checks that something
//! does *not* happen, it first waits for a later event that proves the operator has looked.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::{LocalBoxFuture, join_all};
use futures::{FutureExt, StreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_api::ConditionStatus::{self, False, True};
use tfjob_api::JobConditionType::{
    self, Created, Failed, Restarting, Running, Succeeded, Suspended,
};
use tfjob_api::{JobCondition, PodRestarts, TFJob, TFJobStatus};
use tfjob_operator::embedded::ClusterOptions;
use tokio::sync::oneshot;

use common::{Background, IMAGE, env, is_true, main_status, phase, replica};
use tfjob_conformance::{JOB_NAME, JOB_ROLE, OPERATOR_NAME, REPLICA_INDEX, REPLICA_TYPE};

/// Longest wait for any single expected state.
const WAIT: Duration = Duration::from_secs(120);
/// Interval between two looks at the API.
const POLL: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------------------------------------
// Clusters

/// Where the scenarios of a test run: `up`'s embedded cluster or the real control plane, both
/// with the operator in this process.
enum Target {
    Up(Box<Background>),
    Real(Box<common::real::RealCluster>),
}

impl Target {
    fn client(&self) -> Client {
        match self {
            Target::Up(up) => up.cluster.client(),
            Target::Real(real) => real.client.clone(),
        }
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        match self {
            Target::Up(up) => &up.runtime,
            Target::Real(real) => &real.runtime,
        }
    }
}

/// Starts a cluster with these policies and room for every pod of every scenario at once.
fn start(policies: Arc<tfjob_operator::policy_setup::Policies>) -> Target {
    let mut options = ClusterOptions::new(policies);
    options.kubelet = common::roomy_kubelet();
    Target::Up(Box::new(Background::start(options)))
}

/// The real control plane with these policies, its four nodes as roomy as `up`'s.
fn start_real(policies: Arc<tfjob_operator::policy_setup::Policies>) -> Target {
    Target::Real(Box::new(common::real::RealCluster::start(policies)))
}

/// The cluster shared by the test functions that use the default policies.
fn shared() -> &'static Target {
    static SHARED: OnceLock<Target> = OnceLock::new();
    SHARED.get_or_init(|| start(common::default_policies()))
}

/// Test bodies `fn name(cluster: &Target)` as a test on each cluster: `on_up::name` on the
/// shared embedded cluster and `on_real_control_plane::name` on a real control plane of its own,
/// both with the default policies.
macro_rules! on_both_clusters {
    ($($name:ident),* $(,)?) => {
        mod on_up {
            $(
                #[test]
                fn $name() {
                    super::$name(super::shared());
                }
            )*
        }
        mod on_real_control_plane {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::start_real(crate::common::default_policies()));
                }
            )*
        }
    };
}

on_both_clusters! {
    local_ps_worker_and_chief_jobs_run_to_success,
    success_policies_decide_when_a_job_completes,
    a_replica_failing_under_never_fails_the_job,
    restart_policies_restart_failed_replicas_within_the_backoff_limit,
    run_policy_deadline_ttl_and_clean_pod_policy,
    suspend_resume_and_managed_by,
    scaling_workers_up_and_down_on_a_running_job,
}

/// One scenario: what it checks, the jobs it submits and its body.
struct Scenario<'a> {
    label: String,
    jobs: Vec<String>,
    body: LocalBoxFuture<'a, ()>,
}

fn scenario<'a>(
    label: impl Into<String>,
    jobs: &[&str],
    body: impl Future<Output = ()> + 'a,
) -> Scenario<'a> {
    Scenario {
        label: label.into(),
        jobs: jobs.iter().map(|j| (*j).to_owned()).collect(),
        body: body.boxed_local(),
    }
}

/// Runs the scenarios `list` makes in namespace `namespace` of `cluster`, concurrently, and
/// reports every one that failed, not just the first, each with the state of its jobs (status,
/// condition history, pods, services, events).
fn run(cluster: &Target, namespace: &str, list: for<'a> fn(&'a Ns) -> Vec<Scenario<'a>>) {
    let client = cluster.client();
    cluster.runtime().block_on(async move {
        let ns = Ns::new(client, namespace).await;
        let results = join_all(list(&ns).into_iter().map(|s| async move {
            let result = AssertUnwindSafe(s.body).catch_unwind().await;
            (s.label, s.jobs, result)
        }))
        .await;
        let mut failed = Vec::new();
        for (label, jobs, result) in results {
            let Err(panic) = result else { continue };
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            let mut text = format!("--- {label}:\n{message}\n");
            for job in jobs {
                let report = ns.report(&job).await;
                text.push_str(&format!("TFJob {}/{job} now:\n{report}", ns.name));
            }
            failed.push(text);
        }
        assert!(
            failed.is_empty(),
            "{} scenario(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    });
}

// ---------------------------------------------------------------------------------------------
// A namespace, its API handles, and the recorded versions of its jobs

/// Everything the watch saw of one job.
#[derive(Clone, Default)]
struct Observed {
    /// The latest version (the last one before deletion, once deleted).
    last: Option<TFJob>,
    /// Each distinct list of conditions, in the order the API published them.
    history: Vec<Vec<JobCondition>>,
    deleted: bool,
}

type Seen = Arc<Mutex<HashMap<String, Observed>>>;

struct Ns {
    name: String,
    client: Client,
    jobs: Api<TFJob>,
    pods: Api<Pod>,
    services: Api<Service>,
    seen: Seen,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Ns {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

fn remember(seen: &Seen, job: TFJob, deleted: bool) {
    let mut seen = seen.lock().expect("the record lock");
    let o = seen.entry(job.name_any()).or_default();
    let conditions = job
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let changed = o.history.last().map(|c| shape(c)) != Some(shape(&conditions));
    if !conditions.is_empty() && changed {
        o.history.push(conditions);
    }
    o.last = Some(job);
    o.deleted = deleted;
}

/// Records every version of every TFJob of the namespace; `ready` fires once the initial list
/// is done, so nothing created afterwards is missed.
async fn record(api: Api<TFJob>, seen: Seen, ready: oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) => {
                remember(&seen, job, false);
            }
            Ok(watcher::Event::Delete(job)) => remember(&seen, job, true),
            Ok(watcher::Event::InitDone) => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            Ok(watcher::Event::Init) => {}
            Err(e) => eprintln!("TFJob watch error (retrying): {e}"),
        }
    }
}

impl Ns {
    async fn new(client: Client, name: &str) -> Ns {
        common::ensure_namespace(&client, name).await;
        let jobs: Api<TFJob> = Api::namespaced(client.clone(), name);
        let seen = Seen::default();
        let (tx, rx) = oneshot::channel();
        let watch = tokio::spawn(record(jobs.clone(), Arc::clone(&seen), tx));
        tokio::time::timeout(WAIT, rx)
            .await
            .expect("the TFJob watch starts in time")
            .expect("the TFJob watch starts");
        Ns {
            name: name.to_owned(),
            jobs,
            pods: Api::namespaced(client.clone(), name),
            services: Api::namespaced(client.clone(), name),
            client,
            seen,
            watch,
        }
    }

    /// Submits the job `name` of scenario `s`.
    async fn submit<'a>(&'a self, s: &'a str, name: &str, spec: Value) -> Case<'a> {
        let job = common::tfjob(name, spec);
        if let Err(e) = self.jobs.create(&PostParams::default(), &job).await {
            panic!("creating TFJob {}/{name}: {e}", self.name);
        }
        Case {
            s,
            ns: self,
            name: name.to_owned(),
        }
    }

    fn observed(&self, job: &str) -> Observed {
        self.seen
            .lock()
            .expect("the record lock")
            .get(job)
            .cloned()
            .unwrap_or_default()
    }

    /// The condition lists the API published for `job`, as (type, status, reason).
    fn history(&self, job: &str) -> Vec<Vec<Shape>> {
        self.observed(job)
            .history
            .iter()
            .map(|c| shape(c))
            .collect()
    }

    async fn pods_of(&self, job: &str) -> Vec<Pod> {
        let params = ListParams::default().labels(&format!("{JOB_NAME}={job}"));
        let mut pods = self.pods.list(&params).await.map_or_else(
            |e| panic!("listing pods of {}/{job}: {e}", self.name),
            |l| l.items,
        );
        pods.sort_by_key(|p| p.name_any());
        pods
    }

    async fn services_of(&self, job: &str) -> Vec<Service> {
        let params = ListParams::default().labels(&format!("{JOB_NAME}={job}"));
        let mut services = self.services.list(&params).await.map_or_else(
            |e| panic!("listing services of {}/{job}: {e}", self.name),
            |l| l.items,
        );
        services.sort_by_key(|s| s.name_any());
        services
    }

    /// `(type, reason, note)` of every event about the TFJob `job`.
    async fn events_of(&self, job: &str) -> Vec<(String, String, String)> {
        common::events_about(&self.client, &self.name, "TFJob")
            .await
            .into_iter()
            .filter(|(about, _)| about == job)
            .map(|(_, e)| common::summary(e))
            .collect()
    }

    /// Everything about a job, for failure messages.
    async fn report(&self, job: &str) -> String {
        let mut out = String::new();
        match self.jobs.get_opt(job).await {
            Ok(Some(j)) => out.push_str(&format!("status: {}\n", show(&j))),
            Ok(None) => out.push_str("the job does not exist (any more)\n"),
            Err(e) => out.push_str(&format!("reading the job failed: {e}\n")),
        }
        out.push_str(&format!("condition history: {:?}\n", self.history(job)));
        out.push_str("pods:\n");
        for p in self.pods_of(job).await {
            let main = main_status(&p);
            out.push_str(&format!(
                "  {} uid={} phase={} restarts={} deleting={} state={}\n",
                p.name_any(),
                p.uid().unwrap_or_default(),
                phase(&p),
                main.map_or(0, |c| c.restart_count),
                p.metadata.deletion_timestamp.is_some(),
                main.and_then(|c| serde_json::to_string(&c.state).ok())
                    .unwrap_or_default(),
            ));
        }
        let services = service_names(&self.services_of(job).await);
        out.push_str(&format!("services: {services:?}\nevents:\n"));
        for (t, reason, note) in self.events_of(job).await {
            out.push_str(&format!("  {t} {reason}: {note}\n"));
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// One job of one scenario: waits and assertions that name the scenario

/// A submitted job, with the scenario it belongs to (named by every failure about it).
struct Case<'a> {
    s: &'a str,
    ns: &'a Ns,
    name: String,
}

impl Case<'_> {
    /// Polls `check` until it gives a value; on timeout fails naming the scenario, what was
    /// awaited and the job's state.
    async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let found = common::poll(WAIT, POLL, || {
            let next = check();
            async move { next.await.ok_or(()) }
        })
        .await;
        match found {
            Ok(v) => v,
            Err(()) => panic!(
                "[{}] timed out after {WAIT:?} waiting for {what} of TFJob {}/{}\n{}",
                self.s,
                self.ns.name,
                self.name,
                self.ns.report(&self.name).await
            ),
        }
    }

    /// Waits until the watched job satisfies `done`, and returns that version.
    async fn until_job(&self, what: &str, done: impl Fn(&TFJob) -> bool) -> TFJob {
        self.until(what, || {
            let o = self.observed();
            let found = o.last.filter(|j| !o.deleted && done(j));
            async move { found }
        })
        .await
    }

    /// Waits until the job has the condition `type_` with status True.
    async fn until_true(&self, type_: JobConditionType) -> TFJob {
        self.until_job(&format!("condition {type_:?}=True"), |j| is_true(j, type_))
            .await
    }

    /// Waits until `replicaStatuses` counts `(active, succeeded, failed)` of each replica type.
    async fn until_counts(&self, want: &[(&str, (i32, i32, i32))]) -> TFJob {
        let what: Vec<String> = want
            .iter()
            .map(|(rtype, (a, s, f))| format!("{rtype} {a}/{s}/{f}"))
            .collect();
        let what = format!("replicaStatuses {}", what.join(", "));
        self.until_job(&what, |j| {
            want.iter()
                .all(|(rtype, counts)| replica_counts(j, rtype) == Some(*counts))
        })
        .await
    }

    /// Waits until the job is deleted; returns its last version.
    async fn until_gone(&self) -> TFJob {
        self.until("the job's deletion", || async {
            let o = self.observed();
            let gone = matches!(self.ns.jobs.get_opt(&self.name).await, Ok(None));
            if o.deleted && gone { o.last } else { None }
        })
        .await
    }

    /// Waits until the job's pods satisfy `done`; returns them sorted by name.
    async fn until_pods(&self, what: &str, done: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
        self.until(what, || async {
            let pods = self.pods().await;
            done(&pods).then_some(pods)
        })
        .await
    }

    /// Waits until the job has `n` pods, all running.
    async fn until_running(&self, what: &str, n: usize) -> Vec<Pod> {
        self.until_pods(what, |p| {
            p.len() == n && p.iter().all(|p| phase(p) == "Running")
        })
        .await
    }

    /// Waits until the job's pods and services are exactly `names`.
    async fn until_objects(&self, names: &[String]) {
        let what = format!("pods and services {names:?}");
        self.until(&what, || async {
            let pods = self.pods().await;
            let services = self.services().await;
            (pod_names(&pods) == names && service_names(&services) == names).then_some(())
        })
        .await;
    }

    /// Waits for an event about the job with `reason` whose note contains `text`; returns the
    /// note.
    async fn until_event(&self, reason: &str, text: &str) -> String {
        let what = format!("an event {reason} containing {text:?}");
        self.until(&what, || async {
            self.events()
                .await
                .into_iter()
                .find(|(_, r, note)| r == reason && note.contains(text))
                .map(|(_, _, note)| note)
        })
        .await
    }

    /// [`until_event`](Case::until_event) for each `(reason, text)`, in turn.
    async fn until_events(&self, events: &[(&str, &str)]) {
        for (reason, text) in events {
            self.until_event(reason, text).await;
        }
    }

    fn observed(&self) -> Observed {
        self.ns.observed(&self.name)
    }

    fn history(&self) -> Vec<Vec<Shape>> {
        self.ns.history(&self.name)
    }

    async fn pods(&self) -> Vec<Pod> {
        self.ns.pods_of(&self.name).await
    }

    async fn services(&self) -> Vec<Service> {
        self.ns.services_of(&self.name).await
    }

    async fn events(&self) -> Vec<(String, String, String)> {
        self.ns.events_of(&self.name).await
    }

    async fn patch(&self, patch: Value) {
        if let Err(e) = self
            .ns
            .jobs
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            panic!(
                "patching TFJob {}/{} with {patch}: {e}",
                self.ns.name, self.name
            );
        }
    }

    /// Deletes the job and waits until its pods and services have gone with it.
    async fn delete(&self) {
        self.ns
            .jobs
            .delete(&self.name, &DeleteParams::background())
            .await
            .unwrap_or_else(|e| panic!("[{}] deleting the job: {e}", self.s));
        self.until_objects(&[]).await;
    }

    /// The job's pods, which must be exactly `names`.
    async fn pods_named(&self, names: &[&str]) -> Vec<Pod> {
        let pods = self.pods().await;
        assert_eq!(pod_names(&pods), names, "[{}]", self.s);
        pods
    }

    /// The job's services, which must be exactly `names`.
    async fn services_named(&self, names: &[&str]) -> Vec<Service> {
        let services = self.services().await;
        assert_eq!(service_names(&services), names, "[{}]", self.s);
        services
    }

    fn assert_history(&self, job: &TFJob, want: Vec<Vec<Shape>>) {
        assert_eq!(
            self.history(),
            want,
            "[{}] condition sequence; status: {}",
            self.s,
            show(job)
        );
    }

    /// Some published version of the conditions held `cond`.
    fn assert_published(&self, cond: Cond) {
        let history = self.history();
        assert!(
            history.iter().any(|h| h.contains(&c(cond))),
            "[{}] {:?} was published: {history:?}",
            self.s,
            cond.0
        );
    }

    fn assert_message(&self, job: &TFJob, type_: JobConditionType, want: &str) {
        assert_eq!(message(job, type_), want, "[{}]", self.s);
    }

    /// `(active, succeeded, failed)` of replica type `rtype`.
    fn assert_counts(&self, job: &TFJob, rtype: &str, want: (i32, i32, i32)) {
        assert_eq!(
            replica_counts(job, rtype),
            Some(want),
            "[{}] replicaStatuses of {rtype}: {}",
            self.s,
            show(job)
        );
    }

    fn assert_restart_count(&self, job: &TFJob, want: Option<i32>) {
        assert_eq!(
            status(job).restart_count,
            want,
            "[{}] {}",
            self.s,
            show(job)
        );
    }

    /// The job's restart record of pod `pod`.
    fn restarts_of<'j>(&self, job: &'j TFJob, pod: &str) -> &'j PodRestarts {
        status(job)
            .pod_restarts
            .get(pod)
            .unwrap_or_else(|| panic!("[{}] a restart record of {pod}: {}", self.s, show(job)))
    }

    /// The operator recreated pod `pod` exactly `count` times.
    fn assert_recreated(&self, job: &TFJob, pod: &str, count: i32) {
        let record = self.restarts_of(job, pod);
        assert_eq!(record.count, count, "[{}] {}", self.s, show(job));
    }

    /// `pod` is not the incarnation the operator deleted last.
    fn assert_new_incarnation(&self, job: &TFJob, pod: &Pod) {
        let record = self.restarts_of(job, &pod.name_any());
        assert_ne!(
            pod.uid().as_deref(),
            Some(record.last_deleted_uid.as_str()),
            "[{}] {} is a new incarnation",
            self.s,
            pod.name_any()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Reading objects

/// A condition as (type, status, reason).
type Shape = (JobConditionType, ConditionStatus, String);
/// A [`Shape`] to expect.
type Cond = (JobConditionType, ConditionStatus, &'static str);

const CREATED: Cond = (Created, True, "TFJobCreated");
const RUNNING: Cond = (Running, True, "TFJobRunning");
const SUCCEEDED: Cond = (Succeeded, True, "TFJobSucceeded");
const FAILED: Cond = (Failed, True, "TFJobFailed");
const RESTARTING: Cond = (Restarting, True, "TFJobRestarting");

fn c((type_, status, reason): Cond) -> Shape {
    (type_, status, reason.to_owned())
}

fn shapes(conds: &[Cond]) -> Vec<Shape> {
    conds.iter().copied().map(c).collect()
}

/// A condition history: one list of conditions a version.
fn sequence(versions: &[&[Cond]]) -> Vec<Vec<Shape>> {
    versions.iter().map(|v| shapes(v)).collect()
}

fn shape(conditions: &[JobCondition]) -> Vec<Shape> {
    conditions
        .iter()
        .map(|c| (c.type_, c.status, c.reason.clone()))
        .collect()
}

/// The job's status as JSON, for assertion messages.
fn show(job: &TFJob) -> String {
    serde_json::to_string_pretty(&job.status).unwrap_or_default()
}

fn status(job: &TFJob) -> &TFJobStatus {
    job.status
        .as_ref()
        .unwrap_or_else(|| panic!("TFJob {} has a status", job.name_any()))
}

fn conditions(job: &TFJob) -> Vec<Shape> {
    job.status
        .as_ref()
        .map(|s| shape(&s.conditions))
        .unwrap_or_default()
}

fn message(job: &TFJob, type_: JobConditionType) -> String {
    status(job)
        .condition(type_)
        .map(|c| c.message.clone())
        .unwrap_or_else(|| panic!("TFJob {} has no {type_:?} condition", job.name_any()))
}

/// `(active, succeeded, failed)` of one replica type.
fn replica_counts(job: &TFJob, rtype: &str) -> Option<(i32, i32, i32)> {
    let rs = job.status.as_ref()?.replica_statuses.get(rtype)?;
    Some((rs.active, rs.succeeded, rs.failed))
}

fn time(t: &Option<Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

fn start_time(job: &TFJob) -> Timestamp {
    time(&status(job).start_time).expect("startTime")
}

fn completion_time(job: &TFJob) -> Timestamp {
    time(&status(job).completion_time).expect("completionTime")
}

/// When the `tensorflow` container of a finished pod ended.
fn finished_at(pod: &Pod) -> Timestamp {
    main_status(pod)
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(|| panic!("pod {} has terminated", pod.name_any()))
}

fn pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

fn service_names(services: &[Service]) -> Vec<String> {
    services.iter().map(|s| s.name_any()).collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn find<'a>(pods: &'a [Pod], name: &str) -> &'a Pod {
    pods.iter()
        .find(|p| p.name_any() == name)
        .unwrap_or_else(|| panic!("pod {name} in {:?}", pod_names(pods)))
}

fn replica_labels(job: &str, rtype: &str, index: i32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (OPERATOR_NAME.to_owned(), "tfjob-controller".to_owned()),
        (JOB_NAME.to_owned(), job.to_owned()),
        (REPLICA_TYPE.to_owned(), rtype.to_owned()),
        (REPLICA_INDEX.to_owned(), index.to_string()),
    ])
}

/// A replica: lower-case type, index, and whether its pod has the master role.
type Replica = (&'static str, i32, bool);

/// The pod of replica `rtype` `index` of `job`: name, labels (with the master role when
/// `master`), controller owner, restart policy, template annotations kept, policies named.
fn check_pod(s: &str, job: &TFJob, pod: &Pod, (rtype, index, master): Replica, policy: &str) {
    let name = job.name_any();
    assert_eq!(pod.name_any(), format!("{name}-{rtype}-{index}"), "[{s}]");
    let mut labels = replica_labels(&name, rtype, index);
    if master {
        labels.insert(JOB_ROLE.into(), "master".into());
    }
    assert_eq!(
        pod.metadata.labels.as_ref(),
        Some(&labels),
        "[{s}] labels of pod {}",
        pod.name_any()
    );
    check_owner(s, job, &pod.metadata);
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()),
        Some(policy),
        "[{s}] restartPolicy of pod {}",
        pod.name_any()
    );
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations.contains_key("sim.tfjob.dev/duration"),
        "[{s}] template annotations are copied to pod {}: {annotations:?}",
        pod.name_any()
    );
    assert!(
        annotations
            .get("policy.tfjob.dev/policies")
            .is_some_and(|p| p.contains("default-decorate@") && p.contains("default-resources@")),
        "[{s}] the default policies shaped pod {}: {annotations:?}",
        pod.name_any()
    );
}

/// [`check_pod`] of each pod, against the replica of the same position.
fn check_pods(s: &str, job: &TFJob, pods: &[Pod], replicas: &[Replica], policy: &str) {
    for (pod, replica) in pods.iter().zip(replicas) {
        check_pod(s, job, pod, *replica, policy);
    }
}

fn check_owner(s: &str, job: &TFJob, meta: &ObjectMeta) {
    let owners = meta.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owners.len(),
        1,
        "[{s}] one owner of {:?}: {owners:?}",
        meta.name
    );
    let o = &owners[0];
    assert_eq!(
        (
            o.api_version.as_str(),
            o.kind.as_str(),
            o.name.as_str(),
            Some(o.uid.as_str()),
            o.controller,
            o.block_owner_deletion
        ),
        (
            "kubeflow.org/v1",
            "TFJob",
            job.name_any().as_str(),
            job.uid().as_deref(),
            Some(true),
            Some(true)
        ),
        "[{s}] controller owner of {:?}",
        meta.name
    );
}

/// The headless service of replica `rtype` `index` of `job`.
fn check_service(s: &str, job: &TFJob, svc: &Service, rtype: &str, index: i32) {
    let name = job.name_any();
    let labels = replica_labels(&name, rtype, index);
    assert_eq!(svc.name_any(), format!("{name}-{rtype}-{index}"), "[{s}]");
    assert_eq!(
        svc.metadata.labels.as_ref(),
        Some(&labels),
        "[{s}] labels of service {}",
        svc.name_any()
    );
    check_owner(s, job, &svc.metadata);
    let spec = svc.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.cluster_ip.as_deref(),
        Some("None"),
        "[{s}] service {} is headless",
        svc.name_any()
    );
    assert_eq!(
        spec.selector.as_ref(),
        Some(&labels),
        "[{s}] selector of service {}",
        svc.name_any()
    );
    let ports: Vec<(Option<String>, i32)> = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.name, p.port))
        .collect();
    assert_eq!(
        ports,
        vec![(Some("tfjob-port".to_owned()), 2222)],
        "[{s}] ports of service {}",
        svc.name_any()
    );
}

/// [`check_service`] of each service, against the replica of the same position.
fn check_services(s: &str, job: &TFJob, services: &[Service], replicas: &[Replica]) {
    for (svc, (rtype, index, _)) in services.iter().zip(replicas) {
        check_service(s, job, svc, rtype, *index);
    }
}

/// `TF_CONFIG` of task `rtype` `index`, given the `"cluster":{…}` part.
fn tf_config(cluster: &str, rtype: &str, index: i32) -> String {
    format!(r#"{{{cluster},"task":{{"type":"{rtype}","index":{index}}},"environment":"cloud"}}"#)
}

/// The string form of a replica type's selector in `replicaStatuses`.
fn selector(job: &str, rtype: &str) -> String {
    format!("{JOB_NAME}={job},{OPERATOR_NAME}=tfjob-controller,{REPLICA_TYPE}={rtype}")
}

fn backoff_message(job: &str) -> String {
    format!("Job {job} has failed because it has reached the specified backoff limit")
}

fn deadline_message(job: &str) -> String {
    format!("Job {job} has failed because it was active longer than specified deadline")
}

/// The typical sequence of a job that ran to success.
fn ran_to_success() -> Vec<Vec<Shape>> {
    sequence(&[
        &[CREATED],
        &[CREATED, RUNNING],
        &[CREATED, (Running, False, "TFJobRunning"), SUCCEEDED],
    ])
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

// ---------------------------------------------------------------------------------------------
// Normal path

fn local_ps_worker_and_chief_jobs_run_to_success(cluster: &Target) {
    run(cluster, "normal", |ns| {
        vec![
            scenario("normal path: local job", &["local"], local_job(ns)),
            scenario("normal path: PS/Worker job", &["psw"], ps_worker_job(ns)),
            scenario("normal path: Chief job", &["chief"], chief_job(ns)),
        ]
    });
}

/// A single worker: not distributed, no TF_CONFIG; worker 0 is the master role.
async fn local_job(ns: &Ns) {
    const S: &str = "normal path: local job";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "3s")])}});
    let j = ns.submit(S, "local", spec).await;
    let job = j.until_true(Succeeded).await;
    let st = status(&job);
    j.assert_history(&job, ran_to_success());
    let running = &j.observed().history[1];
    assert_eq!(
        running[1].message, "TFJob normal/local is running.",
        "[{S}]"
    );
    j.assert_message(&job, Created, "TFJob local is created.");
    j.assert_message(
        &job,
        Succeeded,
        "TFJob normal/local successfully completed.",
    );
    let (start, done) = (time(&st.start_time), time(&st.completion_time));
    assert!(
        start.is_some() && done.is_some() && start <= done,
        "[{S}] startTime and completionTime: {}",
        show(&job)
    );
    j.assert_counts(&job, "Worker", (0, 1, 0));
    let worker = &st.replica_statuses["Worker"];
    assert_eq!(
        worker.selector.as_deref(),
        Some(selector("local", "worker").as_str()),
        "[{S}]"
    );
    j.assert_restart_count(&job, None);

    let pods = j.pods_named(&["local-worker-0"]).await;
    check_pod(S, &job, &pods[0], ("worker", 0, true), "Never");
    assert_eq!(phase(&pods[0]), "Succeeded", "[{S}]");
    assert_eq!(
        env(&pods[0], "TF_CONFIG"),
        None,
        "[{S}] a local job has no TF_CONFIG"
    );
    assert_eq!(
        env(&pods[0], "TFJOB_NAME").as_deref(),
        Some("local"),
        "[{S}] the default decoration sets TFJOB_* variables"
    );
    let services = j.services_named(&["local-worker-0"]).await;
    check_service(S, &job, &services[0], "worker", 0);

    j.until_events(&[
        ("SuccessfulCreatePod", "Created pod: local-worker-0"),
        ("SuccessfulCreateService", "Created service: local-worker-0"),
        (
            "TFJobSucceeded",
            "TFJob normal/local successfully completed.",
        ),
    ])
    .await;
}

/// A PS and two workers without a chief: worker 0 decides, every pod gets TF_CONFIG.
async fn ps_worker_job(ns: &Ns) {
    const S: &str = "normal path: PS/Worker job";
    const REPLICAS: [Replica; 3] = [("ps", 0, false), ("worker", 0, true), ("worker", 1, false)];
    let spec = json!({"tfReplicaSpecs": {
        "PS": replica(1, "", &[("duration", "60s")]),
        "Worker": replica(2, "", &[("duration", "3s")]),
    }});
    let j = ns.submit(S, "psw", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_history(&job, ran_to_success());
    // A succeeded job reports its still-running PS as succeeded.
    let job = j
        .until_counts(&[("PS", (0, 1, 0)), ("Worker", (0, 2, 0))])
        .await;
    assert!(time(&status(&job).completion_time).is_some(), "[{S}]");

    let all = ["psw-ps-0", "psw-worker-0", "psw-worker-1"];
    let pods = j.pods_named(&all).await;
    check_pods(S, &job, &pods, &REPLICAS, "Never");
    assert_eq!(
        phase(&pods[0]),
        "Running",
        "[{S}] cleanPodPolicy defaults to None: the PS keeps running"
    );
    let cluster = r#""cluster":{"ps":["psw-ps-0.normal.svc:2222"],"worker":["psw-worker-0.normal.svc:2222","psw-worker-1.normal.svc:2222"]}"#;
    for (pod, (rtype, index, _)) in pods.iter().zip(REPLICAS) {
        assert_eq!(
            env(pod, "TF_CONFIG"),
            Some(tf_config(cluster, rtype, index)),
            "[{S}] TF_CONFIG of {}",
            pod.name_any()
        );
    }
    let services = j.services_named(&all).await;
    check_services(S, &job, &services, &REPLICAS);
}

/// A chief and two workers: the chief is the master role and decides; workers finishing
/// first do not complete the job.
async fn chief_job(ns: &Ns) {
    const S: &str = "normal path: Chief job";
    let spec = json!({"tfReplicaSpecs": {
        "Chief": replica(1, "", &[("duration", "4s")]),
        "Worker": replica(2, "", &[("duration", "1s")]),
    }});
    let j = ns.submit(S, "chief", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_history(&job, ran_to_success());
    j.assert_message(
        &job,
        Succeeded,
        "TFJob normal/chief successfully completed.",
    );
    let job = j
        .until_counts(&[("Chief", (0, 1, 0)), ("Worker", (0, 2, 0))])
        .await;
    let pods = j
        .pods_named(&["chief-chief-0", "chief-worker-0", "chief-worker-1"])
        .await;
    let replicas = [
        ("chief", 0, true),
        ("worker", 0, false),
        ("worker", 1, false),
    ];
    check_pods(S, &job, &pods, &replicas, "Never");
    let cluster = r#""cluster":{"chief":["chief-chief-0.normal.svc:2222"],"worker":["chief-worker-0.normal.svc:2222","chief-worker-1.normal.svc:2222"]}"#;
    assert_eq!(
        env(&pods[0], "TF_CONFIG"),
        Some(tf_config(cluster, "chief", 0)),
        "[{S}] TF_CONFIG of the chief"
    );
    assert_eq!(
        env(&pods[2], "TF_CONFIG"),
        Some(tf_config(cluster, "worker", 1)),
        "[{S}] TF_CONFIG of worker 1"
    );
    // The workers were done well before the chief; the job completed with the chief.
    let chief_done = finished_at(&pods[0]);
    let completion = completion_time(&job);
    for worker in &pods[1..] {
        assert!(
            finished_at(worker) < chief_done,
            "[{S}] {} finished before the chief",
            worker.name_any()
        );
    }
    assert!(
        completion >= chief_done,
        "[{S}] the job completed ({completion}) only once the chief had ({chief_done})"
    );
    let services = j.services().await;
    assert_eq!(service_names(&services), pod_names(&pods), "[{S}]");
    check_service(S, &job, &services[0], "chief", 0);
}

// ---------------------------------------------------------------------------------------------
// Success policies

fn success_policies_decide_when_a_job_completes(cluster: &Target) {
    run(cluster, "success", |ns| {
        vec![
            scenario(
                "worker 0 decides",
                &["worker-zero"],
                worker_zero_decides(ns),
            ),
            scenario(
                "another worker first",
                &["worker-one-first"],
                another_worker_first(ns),
            ),
            scenario("AllWorkers", &["all-workers"], all_workers(ns)),
        ]
    });
}

/// Without a chief, worker 0 succeeding completes the job while the others still run.
async fn worker_zero_decides(ns: &Ns) {
    const S: &str = "success policy default: worker 0 decides";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(3, "", &[("duration", "0=2s,*=60s")])}});
    let j = ns.submit(S, "worker-zero", spec).await;
    let job = j.until_true(Succeeded).await;
    let pods = j.pods().await;
    let phases: Vec<&str> = pods.iter().map(phase).collect();
    assert_eq!(
        phases,
        ["Succeeded", "Running", "Running"],
        "[{S}] the job completed while workers 1 and 2 still ran; status: {}",
        show(&job)
    );
    assert_eq!(
        status(&job).completed_indexes.get("Worker"),
        Some(&vec![0]),
        "[{S}] {}",
        show(&job)
    );
    assert!(!is_true(&job, Failed), "[{S}] {}", show(&job));
}

/// Without a chief, another worker succeeding first changes nothing: worker 0 decides.
async fn another_worker_first(ns: &Ns) {
    const S: &str = "success policy default: another worker succeeds first";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "0=4s,1=1s")])}});
    let j = ns.submit(S, "worker-one-first", spec).await;
    let job = j.until_true(Succeeded).await;
    let pods = j.pods().await;
    let (w0, w1) = (finished_at(&pods[0]), finished_at(&pods[1]));
    let completion = completion_time(&job);
    assert!(w1 < w0, "[{S}] worker 1 finished first ({w1} < {w0})");
    assert!(
        completion >= w0,
        "[{S}] the job completed ({completion}) only once worker 0 had ({w0}); status: {}",
        show(&job)
    );
}

/// `AllWorkers`: worker 0 succeeding is not enough, every worker must.
async fn all_workers(ns: &Ns) {
    const S: &str = "success policy AllWorkers";
    let spec = json!({"successPolicy": "AllWorkers", "tfReplicaSpecs": {
        "Worker": replica(3, "", &[("duration", "0=1s,1=2s,2=4s")]),
    }});
    let j = ns.submit(S, "all-workers", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_counts(&job, "Worker", (0, 3, 0));
    let pods = j.pods().await;
    let (first, last) = (finished_at(&pods[0]), finished_at(&pods[2]));
    let completion = completion_time(&job);
    assert!(
        first < last,
        "[{S}] worker 0 finished first ({first} < {last})"
    );
    assert!(
        completion >= last,
        "[{S}] the job completed ({completion}) only once the last worker had ({last}); status: {}",
        show(&job)
    );
    assert_eq!(j.history(), ran_to_success(), "[{S}] {}", show(&job));
}

// ---------------------------------------------------------------------------------------------
// Failure per replica type

fn a_replica_failing_under_never_fails_the_job(cluster: &Target) {
    run(cluster, "failure", |ns| {
        vec![
            scenario("PS fails", &["ps-fails"], ps_fails(ns)),
            scenario("Worker fails", &["worker-fails"], worker_fails(ns)),
            scenario("Chief fails", &["chief-fails"], chief_fails(ns)),
        ]
    });
}

/// The job failed, the failed pod was kept as it is, nothing was restarted. Returns the job and
/// its Failed message.
async fn check_failed(j: &Case<'_>, pod: &str) -> (TFJob, String) {
    let s = j.s;
    let job = j.until_true(Failed).await;
    let shapes = conditions(&job);
    assert_eq!(shapes.first(), Some(&c(CREATED)), "[{s}] {}", show(&job));
    assert_eq!(shapes.last(), Some(&c(FAILED)), "[{s}] {}", show(&job));
    assert!(
        !shapes
            .iter()
            .any(|(t, st, _)| *st == True && *t != Created && *t != Failed),
        "[{s}] nothing but Created and Failed is True: {}",
        show(&job)
    );
    let st = status(&job);
    assert!(time(&st.completion_time).is_some(), "[{s}] {}", show(&job));
    assert_eq!(st.restart_count, None, "[{s}] {}", show(&job));
    assert!(st.pod_restarts.is_empty(), "[{s}] {}", show(&job));
    assert!(
        !j.history()
            .iter()
            .flatten()
            .any(|(t, _, _)| *t == Restarting || *t == Succeeded),
        "[{s}] never Restarting nor Succeeded: {:?}",
        j.history()
    );
    let pods = j.pods().await;
    assert_eq!(
        phase(find(&pods, pod)),
        "Failed",
        "[{s}] the failed pod {pod} stays"
    );
    let text = message(&job, Failed);
    j.until_event("TFJobFailed", &text).await;
    (job, text)
}

async fn ps_fails(ns: &Ns) {
    let spec = json!({"tfReplicaSpecs": {
        "PS": replica(1, "", &[("duration", "1s"), ("exit-code", "1")]),
        "Worker": replica(2, "", &[("duration", "30s")]),
    }});
    let detail = "[tensorflow] terminated with exit code (1). Reason [Error].";
    sole_replica_fails(ns, "failure: PS fails under Never", "PS", spec, detail).await;
}

async fn worker_fails(ns: &Ns) {
    const S: &str = "failure: Worker fails under Never";
    // Worker 1 is killed (137): retryable, but Never restarts nothing.
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(2, "Never", &[
        ("duration", "1=1s,*=30s"), ("exit-code", "1=137,*=0"),
    ])}});
    let j = ns.submit(S, "worker-fails", spec).await;
    let (job, text) = check_failed(&j, "worker-fails-worker-1").await;
    assert_eq!(
        text, "TFJob failure/worker-fails has failed because 1 Worker replica(s) failed.",
        "[{S}]"
    );
    j.assert_counts(&job, "Worker", (1, 0, 1));
}

async fn chief_fails(ns: &Ns) {
    let spec = json!({"tfReplicaSpecs": {
        "Chief": replica(1, "Never", &[("duration", "1s"), ("exit-code", "2")]),
        "Worker": replica(1, "", &[("duration", "30s")]),
    }});
    let s = "failure: Chief fails under Never";
    sole_replica_fails(ns, s, "Chief", spec, "exit code (2)").await;
}

/// The single replica of type `rtype` (job `<rtype>-fails`) exits with an error: the job fails
/// with a message naming the pod, the verdict of the default classification and `detail`.
async fn sole_replica_fails(ns: &Ns, s: &str, rtype: &str, spec: Value, detail: &str) {
    let name = format!("{}-fails", rtype.to_lowercase());
    let pod = format!("{name}-{}-0", rtype.to_lowercase());
    let j = ns.submit(s, &name, spec).await;
    let (job, text) = check_failed(&j, &pod).await;
    assert!(
        text.starts_with(&format!(
            "TFJob failure/{name} has failed because 1 {rtype} replica(s) failed. \
             Pod {pod}: UnknownError (policy default-classify@"
        )),
        "[{s}] {text}"
    );
    assert!(text.contains(detail), "[{s}] {text}");
    j.assert_counts(&job, rtype, (0, 0, 1));
}

// ---------------------------------------------------------------------------------------------
// Restarts and the backoff limit

fn restart_policies_restart_failed_replicas_within_the_backoff_limit(cluster: &Target) {
    run(cluster, "restarts", |ns| {
        let mut list = vec![
            scenario("OnFailure in place", &["on-failure"], on_failure(ns)),
            scenario(
                "OnFailure over the backoff limit",
                &["on-failure-backoff"],
                on_failure_backoff(ns),
            ),
            scenario("Always", &["always"], always(ns)),
            scenario(
                "ExitCode retryable 137/143",
                &["exit-retryable"],
                exit_code_retryable(ns),
            ),
            scenario(
                "ExitCode over the backoff limit",
                &["exit-backoff"],
                exit_code_backoff(ns),
            ),
            scenario("backoffLimit 0", &["backoff-zero"], backoff_zero(ns)),
        ];
        for code in [1, 2, 126, 127] {
            list.push(scenario(
                format!("ExitCode permanent {code}"),
                &[format!("exit-{code}").as_str()],
                exit_code_permanent(ns, code),
            ));
        }
        list
    });
}

/// OnFailure: the kubelet restarts the failed container in place; the job succeeds on the
/// second run of the same pod.
async fn on_failure(ns: &Ns) {
    const S: &str = "restarts: OnFailure restarts the container in place";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
        ("duration", "500ms"), ("exit-code", "1"), ("fail-times", "1"),
    ])}});
    let j = ns.submit(S, "on-failure", spec).await;
    let job = j.until_true(Succeeded).await;
    assert!(
        status(&job).pod_restarts.is_empty(),
        "[{S}] the pod was not recreated: {}",
        show(&job)
    );
    let pods = j.pods_named(&["on-failure-worker-0"]).await;
    check_pod(S, &job, &pods[0], ("worker", 0, true), "OnFailure");
    let main = main_status(&pods[0]).expect("container status");
    assert_eq!(main.restart_count, 1, "[{S}] one in-place restart");
    let last_exit = main
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(last_exit, Some(1), "[{S}] the first run exited 1");
    assert_eq!(phase(&pods[0]), "Succeeded", "[{S}]");
}

/// OnFailure in-place restarts count against `backoffLimit`: past it the job fails and its
/// running pod is freed.
async fn on_failure_backoff(ns: &Ns) {
    const S: &str = "restarts: OnFailure restarts reach backoffLimit";
    let name = "on-failure-backoff";
    let spec = json!({"runPolicy": {"backoffLimit": 2}, "tfReplicaSpecs": {
        "Worker": replica(1, "OnFailure", &[("duration", "300ms"), ("exit-code", "1")]),
    }});
    let j = ns.submit(S, name, spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(&job, Failed, &backoff_message(name));
    assert_eq!(
        conditions(&job).last(),
        Some(&c(FAILED)),
        "[{S}] {}",
        show(&job)
    );
    assert!(!is_true(&job, Succeeded), "[{S}] {}", show(&job));
    // The running pod is deleted to free its resources.
    j.until_objects(&[]).await;
    j.until_event("TFJobFailed", &backoff_message(name)).await;
}

/// Always: a worker evicted (a pod-level failure) is recreated by the operator; the chief
/// decides the job.
async fn always(ns: &Ns) {
    const S: &str = "restarts: Always recreates an evicted worker";
    let spec = json!({"tfReplicaSpecs": {
        "Chief": replica(1, "", &[("duration", "8s")]),
        "Worker": replica(1, "Always", &[
            ("duration", "1s"), ("pod-reason", "Evicted"), ("fail-times", "1"),
        ]),
    }});
    let j = ns.submit(S, "always", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_restart_count(&job, Some(1));
    j.assert_recreated(&job, "always-worker-0", 1);
    let pods = j.pods().await;
    let worker = find(&pods, "always-worker-0");
    j.assert_new_incarnation(&job, worker);
    check_pod(S, &job, worker, ("worker", 0, false), "Always");
    assert!(
        main_status(worker).is_some_and(|c| c.restart_count >= 1),
        "[{S}] under Always the kubelet restarts even a successful container in place"
    );
    j.assert_published(RESTARTING);
    assert_eq!(
        conditions(&job).last(),
        Some(&c(SUCCEEDED)),
        "[{S}] {}",
        show(&job)
    );
    let note = j
        .until_event(
            "TFJobRestarting",
            "job always is restarting because Worker replica(s) failed. \
             Pod always-worker-0: Interrupted (policy default-classify@",
        )
        .await;
    assert!(
        note.contains("The node was low on resource: memory."),
        "[{S}] {note}"
    );
}

/// ExitCode: 137 and 143 are retryable; each pod is recreated once and the job succeeds.
async fn exit_code_retryable(ns: &Ns) {
    const S: &str = "restarts: ExitCode with retryable exit codes";
    let spec = json!({"successPolicy": "AllWorkers", "tfReplicaSpecs": {
        "Worker": replica(2, "ExitCode", &[
            ("duration", "500ms"), ("exit-code", "0=137,1=143"), ("fail-times", "1"),
        ]),
    }});
    let j = ns.submit(S, "exit-retryable", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_restart_count(&job, Some(2));
    for pod in &j.pods().await {
        j.assert_recreated(&job, &pod.name_any(), 1);
        j.assert_new_incarnation(&job, pod);
        assert_eq!(phase(pod), "Succeeded", "[{S}] {}", pod.name_any());
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()),
            Some("Never"),
            "[{S}] ExitCode pods never restart in place"
        );
    }
    j.assert_counts(&job, "Worker", (0, 2, 0));
    let restarting = j
        .observed()
        .history
        .into_iter()
        .flatten()
        .find(|c| c.type_ == Restarting && c.status == True)
        .unwrap_or_else(|| panic!("[{S}] Restarting was published: {:?}", j.history()));
    assert_eq!(
        (restarting.reason.as_str(), restarting.message.as_str()),
        (
            "TFJobRestarting",
            "job exit-retryable is restarting because Worker replica(s) failed."
        ),
        "[{S}]"
    );
    for (pod, code, reason) in [(0, 137, "Interrupted"), (1, 143, "UnknownError")] {
        let pod = format!("exit-retryable-worker-{pod}");
        let exited = format!("Pod: restarts.{pod} exited with code {code}");
        let restarting = format!(
            "job exit-retryable is restarting because Worker replica(s) failed. \
             Pod {pod}: {reason} (policy default-classify@"
        );
        j.until_events(&[
            ("ExitedWithCode", &exited),
            ("TFJobRestarting", &restarting),
        ])
        .await;
    }
}

/// ExitCode: 1-127 are permanent; the job fails at once and nothing is restarted.
async fn exit_code_permanent(ns: &Ns, code: i32) {
    let s = format!("restarts: ExitCode with permanent exit code {code}");
    let s = s.as_str();
    let name = format!("exit-{code}");
    let pod = format!("{name}-worker-0");
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "ExitCode", &[
        ("duration", "500ms"), ("exit-code", &code.to_string()),
    ])}});
    let j = ns.submit(s, &name, spec).await;
    let (_, text) = check_failed(&j, &pod).await;
    assert!(
        text.starts_with(&format!(
            "job \"{name}\" is failing because \"Worker\" replica(s) failed. \
             Pod {pod}: UnknownError (policy default-classify@"
        )),
        "[{s}] {text}"
    );
    assert!(
        text.contains(&format!("terminated with exit code ({code})")),
        "[{s}] {text}"
    );
    j.until_event(
        "ExitedWithCode",
        &format!("Pod: restarts.{pod} exited with code {code}"),
    )
    .await;
}

/// ExitCode restarts are bounded by `backoffLimit`: two restarts, then the job fails.
async fn exit_code_backoff(ns: &Ns) {
    const S: &str = "restarts: ExitCode restarts reach backoffLimit";
    let name = "exit-backoff";
    let spec = json!({"runPolicy": {"backoffLimit": 2}, "tfReplicaSpecs": {
        "Worker": replica(1, "ExitCode", &[("duration", "300ms"), ("exit-code", "137")]),
    }});
    let j = ns.submit(S, name, spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(&job, Failed, &backoff_message(name));
    j.assert_restart_count(&job, Some(2));
    j.assert_recreated(&job, "exit-backoff-worker-0", 2);
    j.assert_published(RESTARTING);
    // The third incarnation failed and stays for its logs.
    let pods = j.pods().await;
    let pod = find(&pods, "exit-backoff-worker-0");
    assert_eq!(phase(pod), "Failed", "[{S}]");
    assert_ne!(
        pod.uid().as_deref(),
        Some(
            j.restarts_of(&job, "exit-backoff-worker-0")
                .last_deleted_uid
                .as_str()
        ),
        "[{S}] the last incarnation was not deleted"
    );
    j.until_event("TFJobFailed", &backoff_message(name)).await;
}

/// `backoffLimit: 0`: the first restart the job would need fails it; the running worker is
/// freed, the failed one stays.
async fn backoff_zero(ns: &Ns) {
    const S: &str = "restarts: backoffLimit 0";
    let name = "backoff-zero";
    let spec = json!({"runPolicy": {"backoffLimit": 0}, "tfReplicaSpecs": {
        "Worker": replica(2, "ExitCode", &[
            ("duration", "0=60s,1=300ms"), ("exit-code", "1=137,*=0"),
        ]),
    }});
    let j = ns.submit(S, name, spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(&job, Failed, &backoff_message(name));
    assert_eq!(
        status(&job).restart_count,
        None,
        "[{S}] no restart happened"
    );
    j.assert_counts(&job, "Worker", (0, 0, 1));
    j.until_objects(&names(&["backoff-zero-worker-1"])).await;
}

// ---------------------------------------------------------------------------------------------
// Run policy: deadline, TTL, cleanPodPolicy

fn run_policy_deadline_ttl_and_clean_pod_policy(cluster: &Target) {
    run(cluster, "runpolicy", |ns| {
        let mut list = Vec::new();
        for clean in ["None", "All"] {
            let name = format!("deadline-{}", clean.to_lowercase());
            list.push(scenario(
                format!("deadline, cleanPodPolicy {clean}"),
                &[name.as_str()],
                deadline(ns, name.clone(), clean),
            ));
        }
        list.push(scenario("TTL after success", &["ttl"], ttl_succeeded(ns)));
        list.push(scenario(
            "TTL 0 after failure",
            &["ttl-failed"],
            ttl_failed(ns),
        ));
        for policy in ["All", "Running", "None"] {
            list.push(scenario(
                format!("cleanPodPolicy {policy}"),
                &[format!("clean-{}", policy.to_lowercase()).as_str()],
                clean_pod_policy(ns, policy),
            ));
        }
        list
    });
}

/// `activeDeadlineSeconds` fires by itself (nothing else happens to the job meanwhile): the
/// running worker is freed, the succeeded one follows cleanPodPolicy.
async fn deadline(ns: &Ns, name: String, clean: &str) {
    let s = format!("run policy: activeDeadlineSeconds, cleanPodPolicy {clean}");
    let s = s.as_str();
    let spec = json!({
        "runPolicy": {"activeDeadlineSeconds": 3, "cleanPodPolicy": clean},
        "tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "0=60s,1=500ms")])},
    });
    let j = ns.submit(s, &name, spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(&job, Failed, &deadline_message(&name));
    assert_eq!(
        conditions(&job),
        shapes(&[CREATED, (Running, False, "TFJobRunning"), FAILED]),
        "[{s}] {}",
        show(&job)
    );
    let start = start_time(&job);
    let done = completion_time(&job);
    assert!(
        done >= start + secs(3),
        "[{s}] failed at {done}, not before startTime {start} + 3s"
    );
    j.assert_counts(&job, "Worker", (0, 1, 0));
    j.until_event("TFJobFailed", &deadline_message(&name)).await;
    let left = if clean == "All" {
        vec![]
    } else {
        vec![format!("{name}-worker-1")]
    };
    j.until_objects(&left).await;
    if let Some(pod) = j.pods().await.first() {
        assert_eq!(phase(pod), "Succeeded", "[{s}]");
    }
}

/// `ttlSecondsAfterFinished` deletes the job that long after it completed; its pods and
/// services go with it.
async fn ttl_succeeded(ns: &Ns) {
    const S: &str = "run policy: ttlSecondsAfterFinished after success";
    let spec = json!({"runPolicy": {"ttlSecondsAfterFinished": 2},
                      "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}});
    let j = ns.submit(S, "ttl", spec).await;
    let last = j.until_gone().await;
    let now = Timestamp::now();
    assert!(is_true(&last, Succeeded), "[{S}] {}", show(&last));
    let done = completion_time(&last);
    assert!(
        now >= done + secs(2),
        "[{S}] deleted by {now}, not before completionTime {done} + 2s"
    );
    j.until_objects(&[]).await;
    j.until_event("SuccessfulDeleteJob", "Deleted job: ttl")
        .await;
}

async fn ttl_failed(ns: &Ns) {
    const S: &str = "run policy: ttlSecondsAfterFinished 0 after failure";
    let spec = json!({"runPolicy": {"ttlSecondsAfterFinished": 0},
                      "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms"), ("exit-code", "1")])}});
    let j = ns.submit(S, "ttl-failed", spec).await;
    let last = j.until_gone().await;
    assert!(is_true(&last, Failed), "[{S}] {}", show(&last));
    j.until_objects(&[]).await;
    j.until_events(&[
        ("TFJobFailed", "TFJob runpolicy/ttl-failed has failed"),
        ("SuccessfulDeleteJob", "Deleted job: ttl-failed"),
    ])
    .await;
}

/// After the chief succeeded: the PS still runs, worker 0 is still pending and worker 1 has
/// succeeded. `All` deletes every pod, `Running` the running and pending ones, `None` none;
/// each deleted pod's service goes too.
async fn clean_pod_policy(ns: &Ns, policy: &str) {
    let s = format!("run policy: cleanPodPolicy {policy}");
    let s = s.as_str();
    let name = format!("clean-{}", policy.to_lowercase());
    let spec = json!({"runPolicy": {"cleanPodPolicy": policy}, "tfReplicaSpecs": {
        "Chief": replica(1, "", &[("duration", "3s")]),
        "PS": replica(1, "", &[("duration", "60s")]),
        "Worker": replica(2, "", &[("duration", "1s"), ("pending-reason", "0=ContainerCreating")]),
    }});
    let j = ns.submit(s, &name, spec).await;
    j.until_true(Succeeded).await;
    // The reconcile after success reports the running PS as succeeded, and cleans up.
    let job = j.until_counts(&[("PS", (0, 1, 0))]).await;
    assert!(!is_true(&job, Failed), "[{s}] {}", show(&job));
    let every = vec![
        format!("{name}-chief-0"),
        format!("{name}-ps-0"),
        format!("{name}-worker-0"),
        format!("{name}-worker-1"),
    ];
    let left: Vec<String> = match policy {
        "All" => vec![],
        "Running" => vec![every[0].clone(), every[3].clone()],
        _ => every.clone(),
    };
    j.until_objects(&left).await;
    for pod in &j.pods().await {
        let expected = match pod.name_any() {
            n if n.ends_with("-ps-0") => "Running",
            n if n.ends_with("-worker-0") => "Pending",
            _ => "Succeeded",
        };
        assert_eq!(phase(pod), expected, "[{s}] {}", pod.name_any());
    }
}

// ---------------------------------------------------------------------------------------------
// Suspend, resume, managedBy

fn suspend_resume_and_managed_by(cluster: &Target) {
    run(cluster, "suspend", |ns| {
        vec![
            scenario(
                "suspend and resume",
                &["suspend-resume"],
                suspend_resume(ns),
            ),
            scenario(
                "created suspended",
                &["created-suspended"],
                created_suspended(ns),
            ),
            scenario(
                "managedBy another controller",
                &["managed-elsewhere", "managed-control"],
                managed_elsewhere(ns),
            ),
            scenario(
                "managedBy this operator",
                &["managed-here"],
                managed_here(ns),
            ),
        ]
    });
}

/// Suspending a running job deletes its pods and services; resuming recreates them and
/// restarts the clock.
async fn suspend_resume(ns: &Ns) {
    const S: &str = "suspend and resume a running job";
    const SUSPENDED: &str = "TFJob suspend-resume is suspended.";
    const RESUMED: &str = "TFJob suspend-resume is resumed.";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "120s")])}});
    let j = ns.submit(S, "suspend-resume", spec).await;
    let job = j.until_true(Running).await;
    let first_start = start_time(&job);
    let before = j.until_running("two running pods", 2).await;
    let old_uids: Vec<String> = before.iter().filter_map(|p| p.uid()).collect();
    // startTime has whole seconds: resume at least a second later so a reset shows.
    while Timestamp::now() < first_start + secs(1) {
        tokio::time::sleep(POLL).await;
    }

    j.patch(json!({"spec": {"runPolicy": {"suspend": true}}}))
        .await;
    let job = j.until_true(Suspended).await;
    j.until_objects(&[]).await;
    let suspended = [
        CREATED,
        (Running, False, "TFJobSuspended"),
        (Suspended, True, "TFJobSuspended"),
    ];
    assert_eq!(conditions(&job), shapes(&suspended), "[{S}] {}", show(&job));
    j.assert_message(&job, Suspended, SUSPENDED);
    j.assert_message(&job, Running, SUSPENDED);
    j.assert_counts(&job, "Worker", (0, 0, 0));
    j.until_event("TFJobSuspended", SUSPENDED).await;

    j.patch(json!({"spec": {"runPolicy": {"suspend": false}}}))
        .await;
    let job = j
        .until_job("Suspended=False and Running=True", |j| {
            !is_true(j, Suspended) && is_true(j, Running)
        })
        .await;
    let after = j
        .until_pods("two new running pods", |p| {
            p.len() == 2
                && p.iter().all(|p| {
                    phase(p) == "Running" && !old_uids.contains(&p.uid().unwrap_or_default())
                })
        })
        .await;
    assert_eq!(
        pod_names(&after),
        names(&["suspend-resume-worker-0", "suspend-resume-worker-1"]),
        "[{S}]"
    );
    assert_eq!(
        service_names(&j.services().await),
        pod_names(&after),
        "[{S}] services are recreated"
    );
    j.assert_message(&job, Suspended, RESUMED);
    let second_start = start_time(&job);
    assert!(
        second_start > first_start,
        "[{S}] startTime is reset on resume ({first_start} -> {second_start})"
    );
    j.assert_history(
        &job,
        sequence(&[
            &[CREATED],
            &[CREATED, RUNNING],
            &suspended,
            &[
                CREATED,
                (Running, False, "TFJobSuspended"),
                (Suspended, False, "TFJobResumed"),
            ],
            &[CREATED, (Suspended, False, "TFJobResumed"), RUNNING],
        ]),
    );
    j.until_event("TFJobResumed", RESUMED).await;
    // Done with it: deleting the job takes its pods and services along.
    j.delete().await;
}

/// A job created suspended creates nothing and has no startTime until it is resumed.
async fn created_suspended(ns: &Ns) {
    const S: &str = "a job created suspended";
    const RESUMED: Cond = (Suspended, False, "TFJobResumed");
    let spec = json!({"runPolicy": {"suspend": true},
                      "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "3s")])}});
    let j = ns.submit(S, "created-suspended", spec).await;
    let job = j.until_true(Suspended).await;
    let suspended = [CREATED, (Suspended, True, "TFJobSuspended")];
    assert_eq!(conditions(&job), shapes(&suspended), "[{S}] {}", show(&job));
    assert_eq!(status(&job).start_time, None, "[{S}] {}", show(&job));
    assert!(j.pods().await.is_empty(), "[{S}] no pod while suspended");
    assert!(
        j.services().await.is_empty(),
        "[{S}] no service while suspended"
    );

    j.patch(json!({"spec": {"runPolicy": {"suspend": false}}}))
        .await;
    let job = j.until_true(Succeeded).await;
    assert!(
        time(&status(&job).start_time).is_some(),
        "[{S}] {}",
        show(&job)
    );
    j.assert_history(
        &job,
        sequence(&[
            &suspended,
            &[CREATED, RESUMED],
            &[CREATED, RESUMED, RUNNING],
            &[
                CREATED,
                RESUMED,
                (Running, False, "TFJobRunning"),
                SUCCEEDED,
            ],
        ]),
    );
}

/// A job managed by another controller is left alone: no pods, no services, no status, no
/// events; a job submitted after it runs to success meanwhile.
async fn managed_elsewhere(ns: &Ns) {
    const S: &str = "managedBy another controller";
    let spec = json!({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"},
                      "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}});
    let j = ns.submit(S, "managed-elsewhere", spec).await;
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}});
    let control = ns.submit(S, "managed-control", spec).await;
    control.until_true(Succeeded).await;
    let job = ns
        .jobs
        .get(&j.name)
        .await
        .unwrap_or_else(|e| panic!("[{S}] reading the job: {e}"));
    assert_eq!(
        job.status,
        None,
        "[{S}] no status was written: {}",
        show(&job)
    );
    assert!(j.history().is_empty(), "[{S}] {:?}", j.history());
    assert!(j.pods().await.is_empty(), "[{S}] no pods");
    assert!(j.services().await.is_empty(), "[{S}] no services");
    let events = j.events().await;
    assert!(events.is_empty(), "[{S}] no events: {events:?}");
}

/// `managedBy: kubeflow.org/training-operator` names this operator.
async fn managed_here(ns: &Ns) {
    const S: &str = "managedBy this operator";
    let spec = json!({"runPolicy": {"managedBy": "kubeflow.org/training-operator"},
                      "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}});
    let j = ns.submit(S, "managed-here", spec).await;
    j.until_true(Succeeded).await;
}

// ---------------------------------------------------------------------------------------------
// Scaling

fn scaling_workers_up_and_down_on_a_running_job(cluster: &Target) {
    run(cluster, "scale", |ns| {
        vec![scenario("scale up and down", &["scale"], scale(ns))]
    });
}

async fn scale(ns: &Ns) {
    const S: &str = "scale workers up and down";
    let name = "scale";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "120s")])}});
    let j = ns.submit(S, name, spec).await;
    j.until_true(Running).await;
    let before = j.until_running("two running pods", 2).await;
    let worker0 = before[0].uid();

    j.patch(json!({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}))
        .await;
    let four: Vec<String> = (0..4).map(|i| format!("scale-worker-{i}")).collect();
    j.until_objects(&four).await;
    let job = j.until_counts(&[("Worker", (4, 0, 0))]).await;
    let pods = j.pods().await;
    for (old, new) in before.iter().zip(&pods) {
        assert_eq!(old.uid(), new.uid(), "[{S}] {} is kept", old.name_any());
    }
    let workers = r#""worker":["scale-worker-0.scale.svc:2222","scale-worker-1.scale.svc:2222","scale-worker-2.scale.svc:2222","scale-worker-3.scale.svc:2222"]"#;
    for (i, pod) in pods.iter().enumerate().skip(2) {
        check_pod(S, &job, pod, ("worker", i as i32, false), "Never");
        let tf_config = env(pod, "TF_CONFIG").unwrap_or_default();
        assert!(
            tf_config.contains(workers)
                && tf_config.contains(&format!(r#""task":{{"type":"worker","index":{i}}}"#)),
            "[{S}] TF_CONFIG of {}: {tf_config}",
            pod.name_any()
        );
    }
    for svc in &j.services().await[2..] {
        let index: i32 = svc.name_any()[name.len() + "-worker-".len()..]
            .parse()
            .expect("an index");
        check_service(S, &job, svc, "worker", index);
    }
    j.until_event("SuccessfulCreatePod", "Created pod: scale-worker-3")
        .await;

    j.patch(json!({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}))
        .await;
    j.until_objects(&names(&["scale-worker-0"])).await;
    let job = j.until_counts(&[("Worker", (1, 0, 0))]).await;
    assert_eq!(j.pods().await[0].uid(), worker0, "[{S}] worker 0 is kept");
    assert!(
        is_true(&job, Running) && !is_true(&job, Failed) && !is_true(&job, Restarting),
        "[{S}] scaling down is no failure: {}",
        show(&job)
    );
    for i in 1..4 {
        j.until_events(&[
            (
                "SuccessfulDeletePod",
                &format!("Deleted pod: scale-worker-{i}"),
            ),
            (
                "SuccessfulDeleteService",
                &format!("Deleted service: scale-worker-{i}"),
            ),
        ])
        .await;
    }
    j.delete().await;
}

// ---------------------------------------------------------------------------------------------
// Policy verdicts

/// The image pull grace period of the default classification policy, shortened from its
/// default of 3m through the policy config (as `--policy-config` does).
const PULL_GRACE: &str = "2s";

/// The default policies with image pulls failing after a short grace period.
fn verdict_policies() -> Arc<tfjob_operator::policy_setup::Policies> {
    let config =
        format!("default-classify:\n  settings:\n    imagePullBackoffGracePeriod: {PULL_GRACE}\n");
    common::policies_with_config(&config)
}

#[test]
fn policy_verdicts_fail_or_restart_pods_on_up() {
    policy_verdicts_fail_or_restart_pods(&start(verdict_policies()));
}

#[test]
fn policy_verdicts_fail_or_restart_pods_on_real_control_plane() {
    policy_verdicts_fail_or_restart_pods(&start_real(verdict_policies()));
}

fn policy_verdicts_fail_or_restart_pods(cluster: &Target) {
    run(cluster, "verdicts", |ns| {
        vec![
            scenario(
                "ImagePullBackOff under Never",
                &["pull-never"],
                pull_back_off_fails(ns),
            ),
            scenario(
                "ImagePullBackOff under OnFailure",
                &["pull-retry"],
                pull_back_off_restarts(ns),
            ),
            scenario("InvalidImageName", &["bad-image"], invalid_image(ns)),
            scenario("OOMKilled under ExitCode", &["oom"], oom_restarts(ns)),
            scenario("OOMKilled under Never", &["oom-never"], oom_fails(ns)),
            scenario(
                "Evicted under OnFailure",
                &["evicted"],
                evicted_restarts(ns),
            ),
        ]
    });
}

/// How long the default classification lets a pod stay unschedulable before comparing it
/// with the nodes, shortened for the test.
const UNSCHEDULABLE_GRACE: &str = "2s";

#[test]
fn default_policies_that_read_the_cluster_on_up() {
    default_policies_that_read_the_cluster(&start(reading_policies()));
}

#[test]
fn default_policies_that_read_the_cluster_on_real_control_plane() {
    default_policies_that_read_the_cluster(&start_real(reading_policies()));
}

/// The default policies reading namespaces and nodes, as `--policy-config` turns them on.
fn reading_policies() -> Arc<tfjob_operator::policy_setup::Policies> {
    let config = format!(
        "default-decorate:\n  settings:\n    namespaceLabels: [team]\n\
         default-classify:\n  settings:\n    failUnschedulable:\n      gracePeriod: {UNSCHEDULABLE_GRACE}\n\
         \x20     nodePools:\n      - {{name: big-cpu, labels: {{pool: big}}, allocatable: {{cpu: \"256\", memory: 1Ti}}}}\n"
    );
    common::policies_with_config(&config)
}

/// The default policies reading the cluster: the decoration copies the namespace's `team` label
/// onto pods; the classification fails a pod that fits no node (64 cpus each here) and no
/// declared pool (256 cpus) past its grace period, and lets one wait that fits the pool.
fn default_policies_that_read_the_cluster(cluster: &Target) {
    run(cluster, "readers", |ns| {
        vec![
            scenario("too big for any node", &["too-big"], too_big_fails(ns)),
            scenario("fits a node", &["fits"], fitting_runs(ns)),
            scenario("fits a declared pool", &["pooled"], pooled_waits(ns)),
        ]
    });
}

/// A worker asking for `cpu` cpus, on nodes labelled `selector` if given.
fn asking(cpu: &str, selector: Option<Value>) -> Value {
    let mut worker = replica(1, "Never", &[("duration", "1s")]);
    worker["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
    if let Some(selector) = selector {
        worker["template"]["spec"]["nodeSelector"] = selector;
    }
    json!({"tfReplicaSpecs": {"Worker": worker}})
}

/// Labels the namespace `team=vision`; its resourceVersion after that.
async fn label_namespace(ns: &Ns) -> String {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ns.client.clone());
    let labelled = namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "vision"}}})),
        )
        .await
        .expect("the namespace is labelled");
    labelled
        .metadata
        .resource_version
        .expect("a resourceVersion")
}

async fn too_big_fails(ns: &Ns) {
    const S: &str = "a worker asking 300 cpus of nodes with 64 and a pool with 256 fails for good";
    let j = ns.submit(S, "too-big", asking("300", None)).await;
    let job = j.until_true(Failed).await;
    // The classifier's reason reaches the job's events (as `kubectl describe` shows them).
    let why = "the pod can never be scheduled: it requests cpu 300; the largest node or node pool \
               offers 256 (pool/big-cpu)";
    let events = j.events().await;
    assert!(
        events.iter().any(|(_, _, note)| note.contains(why)),
        "[{S}] {events:?}; Failed: {}",
        message(&job, Failed)
    );
    let pods = j.pods().await;
    assert_eq!(phase(&pods[0]), "Pending", "[{S}] the pod never ran");
}

async fn fitting_runs(ns: &Ns) {
    const S: &str =
        "a worker that fits runs, labelled with its namespace's team, saying what was read";
    let version = label_namespace(ns).await;
    let mut spec = asking("2", None);
    // A job author's copy of the provenance is not kept.
    spec["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["policy.tfjob.dev/reads"] =
        json!("[{\"forged\":true}]");
    let j = ns.submit(S, "fits", spec).await;
    j.until_true(Succeeded).await;
    let pods = j.pods().await;
    let labels = pods[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("vision"),
        "[{S}] {labels:?}"
    );
    let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
    let reads: Value = serde_json::from_str(&annotations["policy.tfjob.dev/reads"])
        .unwrap_or_else(|e| panic!("[{S}] {e}: {annotations:?}"));
    assert_eq!(reads.as_array().map(Vec::len), Some(1), "[{S}] {reads}");
    assert!(
        reads[0]["policy"]
            .as_str()
            .is_some_and(|p| p.starts_with("default-decorate@")),
        "[{S}] {reads}"
    );
    assert_eq!(
        reads[0]["reads"],
        json!([{"resource": "namespaces", "what": ns.name, "objects": 1, "resourceVersion": version}]),
        "[{S}] the namespace as labelled"
    );
}

async fn pooled_waits(ns: &Ns) {
    const S: &str = "a worker that fits only a declared pool waits";
    let j = ns
        .submit(S, "pooled", asking("200", Some(json!({"pool": "big"}))))
        .await;
    let pods = j.until_pods("a pending pod", |pods| !pods.is_empty()).await;
    let since = tokio::time::Instant::now();
    // Well past the grace period, and classified again and again meanwhile, it still waits.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let job = ns.jobs.get("pooled").await.expect("the job");
    assert!(
        !is_true(&job, Failed),
        "[{S}] failed after {:?}: {:?}",
        since.elapsed(),
        job.status
    );
    assert_eq!(phase(&j.pods().await[0]), "Pending", "[{S}] {pods:?}");
}

/// An image pull back-off is a retryable failure once past the grace period: under Never the
/// replica has failed, and so has the job.
async fn pull_back_off_fails(ns: &Ns) {
    const S: &str = "verdict: ImagePullBackOff past the grace period, Never";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("pending-reason", "ImagePullBackOff")])}});
    let j = ns.submit(S, "pull-never", spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(
        &job,
        Failed,
        "TFJob verdicts/pull-never has failed because 1 Worker replica(s) failed.",
    );
    j.assert_counts(&job, "Worker", (0, 0, 1));
    let pods = j.pods().await;
    assert_eq!(phase(&pods[0]), "Pending", "[{S}] the pod never started");
    let waiting_since = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| time(&c.last_transition_time))
        .expect("the Ready condition's lastTransitionTime");
    let done = completion_time(&job);
    assert!(
        done >= waiting_since + secs(2),
        "[{S}] failed at {done}, not within the {PULL_GRACE} grace period from {waiting_since}"
    );
    j.until_event(
        "ImagePullBackOff",
        &format!(
            "Pod verdicts/pull-never-worker-0 container tensorflow: ImagePullBackOff: \
             Back-off pulling image \"{IMAGE}\""
        ),
    )
    .await;
}

/// Under OnFailure the same verdict restarts the pod; the second one pulls and runs.
async fn pull_back_off_restarts(ns: &Ns) {
    const S: &str = "verdict: ImagePullBackOff past the grace period, OnFailure";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
        ("pending-reason", "ImagePullBackOff"), ("fail-times", "1"), ("duration", "1s"),
    ])}});
    let j = ns.submit(S, "pull-retry", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_restart_count(&job, Some(1));
    let note = j
        .until_event(
            "TFJobRestarting",
            "Pod pull-retry-worker-0: ContainersNotReady|ImagePullBackOff (policy default-classify@",
        )
        .await;
    assert!(
        note.contains(&format!("Grace period [{PULL_GRACE}] exceeded")),
        "[{S}] {note}"
    );
}

/// An invalid image name is permanent: the job fails from Pending, whatever the restart
/// policy, naming the pod, the reason and the policy.
async fn invalid_image(ns: &Ns) {
    const S: &str = "verdict: InvalidImageName";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[("pending-reason", "InvalidImageName")])}});
    let j = ns.submit(S, "bad-image", spec).await;
    let job = j.until_true(Failed).await;
    let text = message(&job, Failed);
    assert!(
        text.starts_with(
            "TFJob verdicts/bad-image has failed because 1 Worker replica(s) failed. \
             Pod bad-image-worker-0: ContainersNotReady|InvalidImageName (policy default-classify@"
        ),
        "[{S}] {text}"
    );
    j.assert_restart_count(&job, None);
    j.until_event("TFJobFailed", &text).await;
}

/// An OOM kill (137, terminated reason OOMKilled) is retryable: restarted under ExitCode.
async fn oom_restarts(ns: &Ns) {
    const S: &str = "verdict: OOMKilled under ExitCode";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "ExitCode", &[
        ("duration", "500ms"), ("terminated-reason", "OOMKilled"), ("exit-code", "137"),
        ("fail-times", "1"),
    ])}});
    let j = ns.submit(S, "oom", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_restart_count(&job, Some(1));
    j.assert_recreated(&job, "oom-worker-0", 1);
    j.until_events(&[
        (
            "OOMKilled",
            "Pod verdicts/oom-worker-0 container tensorflow was OOMKilled",
        ),
        (
            "TFJobRestarting",
            "job oom is restarting because Worker replica(s) failed. \
             Pod oom-worker-0: OOMKilled (policy default-classify@",
        ),
        (
            "ExitedWithCode",
            "Pod: verdicts.oom-worker-0 exited with code 137",
        ),
    ])
    .await;
}

/// The same verdict under Never fails the job.
async fn oom_fails(ns: &Ns) {
    const S: &str = "verdict: OOMKilled under Never";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "Never", &[
        ("duration", "500ms"), ("terminated-reason", "OOMKilled"),
    ])}});
    let j = ns.submit(S, "oom-never", spec).await;
    let job = j.until_true(Failed).await;
    j.assert_message(
        &job,
        Failed,
        "TFJob verdicts/oom-never has failed because 1 Worker replica(s) failed.",
    );
    j.assert_restart_count(&job, None);
    j.until_event(
        "OOMKilled",
        "Pod verdicts/oom-never-worker-0 container tensorflow was OOMKilled",
    )
    .await;
}

/// An evicted pod is an interruption, retryable: recreated under OnFailure.
async fn evicted_restarts(ns: &Ns) {
    const S: &str = "verdict: Evicted under OnFailure";
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
        ("duration", "500ms"), ("pod-reason", "Evicted"), ("fail-times", "1"),
    ])}});
    let j = ns.submit(S, "evicted", spec).await;
    let job = j.until_true(Succeeded).await;
    j.assert_restart_count(&job, Some(1));
    let pods = j.pods().await;
    j.assert_new_incarnation(&job, &pods[0]);
    assert_eq!(phase(&pods[0]), "Succeeded", "[{S}]");
    let note = j
        .until_event(
            "TFJobRestarting",
            "job evicted is restarting because Worker replica(s) failed. \
             Pod evicted-worker-0: Interrupted (policy default-classify@",
        )
        .await;
    assert!(
        note.contains("The node was low on resource: memory."),
        "[{S}] {note}"
    );
}
