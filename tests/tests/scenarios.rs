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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::{LocalBoxFuture, join_all};
use futures::{FutureExt, StreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ContainerStatus, Namespace, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_api::ConditionStatus::{self, False, True};
use tfjob_api::JobConditionType::{
    self, Created, Failed, Restarting, Running, Succeeded, Suspended,
};
use tfjob_api::{JobCondition, TFJob, TFJobStatus};
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_operator::policy_setup::{Policies, PolicyArgs};
use tfjob_policy_engine::SandboxLimits;
use tokio::sync::oneshot;

/// Longest wait for any single expected state.
const WAIT: Duration = Duration::from_secs(120);
/// Interval between two looks at the API.
const POLL: Duration = Duration::from_millis(100);

const OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
const JOB_NAME: &str = "training.kubeflow.org/job-name";
const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
const JOB_ROLE: &str = "training.kubeflow.org/job-role";
const IMAGE: &str = "kubeflow/tf-dist-mnist-test:1.0";

// ---------------------------------------------------------------------------------------------
// Clusters

/// A whole cluster on its own runtime, which outlives every test that uses it.
struct Cluster {
    // Dropped before the runtime it runs on (never, for the shared one).
    cluster: EmbeddedCluster,
    runtime: tokio::runtime::Runtime,
    _dir: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Starts a cluster with the default policies, or with a `--policy-config` document.
    fn start(policy_config: Option<&str>) -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a Tokio runtime");
        let mut args = PolicyArgs::default();
        let dir = policy_config.map(|text| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("policy-config.yaml");
            std::fs::write(&path, text).expect("the policy config is written");
            args.policy_config = Some(path);
            dir
        });
        let policies =
            Policies::load(&args, SandboxLimits::default()).expect("the default policies load");
        let mut options = ClusterOptions::new(std::sync::Arc::new(policies));
        // Room for every pod of every scenario at once (each container requests 1 cpu, 1Gi).
        options.kubelet = KubeletConfig {
            nodes: 4,
            cpu: "64".into(),
            memory: "256Gi".into(),
            gpus_per_node: 0,
            default_duration: Duration::from_secs(1),
            startup: Duration::from_millis(50),
        };
        let cluster = runtime
            .block_on(EmbeddedCluster::start(options))
            .expect("the embedded cluster starts");
        Cluster {
            cluster,
            runtime,
            _dir: dir,
        }
    }

    /// Runs one test body against namespace `namespace` of this cluster.
    fn run<F, Fut>(&self, namespace: &str, body: F)
    where
        F: FnOnce(Ns) -> Fut,
        Fut: Future<Output = ()>,
    {
        let client = self.cluster.client();
        self.runtime.block_on(async move {
            let ns = Ns::new(client, namespace).await;
            body(ns).await;
        });
    }
}

/// The cluster shared by the test functions that use the default policies.
fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(None))
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

/// Runs scenarios concurrently and reports every one that failed, not just the first, each
/// with the state of its jobs (status, condition history, pods, services, events).
async fn scenarios(ns: &Ns, list: Vec<Scenario<'_>>) {
    let results = join_all(list.into_iter().map(|s| async move {
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
            text.push_str(&format!(
                "TFJob {}/{job} now:\n{}",
                ns.name,
                ns.report(&job).await
            ));
        }
        failed.push(text);
    }
    assert!(
        failed.is_empty(),
        "{} scenario(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
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
    jobs: Api<TFJob>,
    pods: Api<Pod>,
    services: Api<Service>,
    events: Api<Event>,
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
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
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
            events: Api::namespaced(client, name),
            seen,
            watch,
        }
    }

    async fn create(&self, job: TFJob) {
        let name = job.name_any();
        if let Err(e) = self.jobs.create(&PostParams::default(), &job).await {
            panic!("creating TFJob {}/{name}: {e}", self.name);
        }
    }

    async fn patch(&self, job: &str, patch: Value) {
        if let Err(e) = self
            .jobs
            .patch(job, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            panic!("patching TFJob {}/{job} with {patch}: {e}", self.name);
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
        let list = self.events.list(&ListParams::default()).await.map_or_else(
            |e| panic!("listing events of {}: {e}", self.name),
            |l| l.items,
        );
        list.into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("TFJob") && r.name.as_deref() == Some(job)
                })
            })
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
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
        let services: Vec<String> = self
            .services_of(job)
            .await
            .iter()
            .map(|s| s.name_any())
            .collect();
        out.push_str(&format!("services: {services:?}\nevents:\n"));
        for (t, reason, note) in self.events_of(job).await {
            out.push_str(&format!("  {t} {reason}: {note}\n"));
        }
        out
    }

    /// Polls `check` until it gives a value; on timeout fails naming the scenario, what was
    /// awaited and the job's state.
    async fn until<T, F, Fut>(&self, scenario: &str, job: &str, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "[{scenario}] timed out after {WAIT:?} waiting for {what} of TFJob {}/{job}\n{}",
                    self.name,
                    self.report(job).await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the watched job satisfies `done`, and returns that version.
    async fn until_job(
        &self,
        scenario: &str,
        job: &str,
        what: &str,
        done: impl Fn(&TFJob) -> bool,
    ) -> TFJob {
        self.until(scenario, job, what, || {
            let o = self.observed(job);
            let found = o.last.filter(|j| !o.deleted && done(j));
            async move { found }
        })
        .await
    }

    /// Waits until the job has the condition `type_` with status True.
    async fn until_true(&self, scenario: &str, job: &str, type_: JobConditionType) -> TFJob {
        self.until_job(scenario, job, &format!("condition {type_:?}=True"), |j| {
            is_true(j, type_)
        })
        .await
    }

    /// Waits until the job is deleted; returns its last version.
    async fn until_gone(&self, scenario: &str, job: &str) -> TFJob {
        self.until(scenario, job, "the job's deletion", || async {
            let o = self.observed(job);
            let gone = matches!(self.jobs.get_opt(job).await, Ok(None));
            if o.deleted && gone { o.last } else { None }
        })
        .await
    }

    /// Waits until the job's pods satisfy `done`; returns them sorted by name.
    async fn until_pods(
        &self,
        scenario: &str,
        job: &str,
        what: &str,
        done: impl Fn(&[Pod]) -> bool,
    ) -> Vec<Pod> {
        self.until(scenario, job, what, || async {
            let pods = self.pods_of(job).await;
            done(&pods).then_some(pods)
        })
        .await
    }

    /// Waits until the job's pods and services are exactly `names`.
    async fn until_objects(&self, scenario: &str, job: &str, names: &[String]) {
        let what = format!("pods and services {names:?}");
        self.until(scenario, job, &what, || async {
            let pods = self.pods_of(job).await;
            let services = self.services_of(job).await;
            (pod_names(&pods) == names && service_names(&services) == names).then_some(())
        })
        .await;
    }

    /// Waits for an event about the job with `reason` whose note contains `text`; returns the
    /// note.
    async fn until_event(&self, scenario: &str, job: &str, reason: &str, text: &str) -> String {
        let what = format!("an event {reason} containing {text:?}");
        self.until(scenario, job, &what, || async {
            self.events_of(job)
                .await
                .into_iter()
                .find(|(_, r, note)| r == reason && note.contains(text))
                .map(|(_, _, note)| note)
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// Building jobs and reading objects

/// A TFJob with this spec.
fn tfjob(name: &str, spec: Value) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("TFJob {name} is well formed: {e}"))
}

/// One replica spec: `replicas` pods under restart policy `policy` (empty: the default),
/// scripted by `sim` (`("duration", "1s")` is the annotation `sim.tfjob.dev/duration`).
fn replica(replicas: i32, policy: &str, sim: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = sim
        .iter()
        .map(|(k, v)| (format!("sim.tfjob.dev/{k}"), json!(v)))
        .collect();
    let mut spec = json!({
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "tensorflow", "image": IMAGE}]},
        },
    });
    if !policy.is_empty() {
        spec["restartPolicy"] = json!(policy);
    }
    spec
}

type Shape = (JobConditionType, ConditionStatus, String);

fn c(type_: JobConditionType, status: ConditionStatus, reason: &str) -> Shape {
    (type_, status, reason.to_owned())
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

fn is_true(job: &TFJob, type_: JobConditionType) -> bool {
    job.status.as_ref().is_some_and(|s| s.is_true(type_))
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
fn counts(job: &TFJob, rtype: &str) -> Option<(i32, i32, i32)> {
    let rs = job.status.as_ref()?.replica_statuses.get(rtype)?;
    Some((rs.active, rs.succeeded, rs.failed))
}

fn time(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into())
}

fn main_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "tensorflow")
}

/// When the `tensorflow` container of a finished pod ended.
fn finished_at(pod: &Pod) -> Timestamp {
    main_status(pod)
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(|| panic!("pod {} has terminated", pod.name_any()))
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "tensorflow")?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
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

/// The pod of replica `rtype` `index` of `job`: name, labels (with the master role when
/// `master`), controller owner, restart policy, template annotations kept, policies named.
fn check_pod(s: &str, job: &TFJob, pod: &Pod, rtype: &str, index: i32, master: bool, policy: &str) {
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

fn check_owner(
    s: &str,
    job: &TFJob,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
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
    vec![
        vec![c(Created, True, "TFJobCreated")],
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning"),
        ],
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Succeeded, True, "TFJobSucceeded"),
        ],
    ]
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

// ---------------------------------------------------------------------------------------------
// Normal path

#[test]
fn local_ps_worker_and_chief_jobs_run_to_success() {
    shared().run("normal", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario("normal path: local job", &["local"], local_job(&ns)),
                scenario("normal path: PS/Worker job", &["psw"], ps_worker_job(&ns)),
                scenario("normal path: Chief job", &["chief"], chief_job(&ns)),
            ],
        )
        .await;
    });
}

/// A single worker: not distributed, no TF_CONFIG; worker 0 is the master role.
async fn local_job(ns: &Ns) {
    const S: &str = "normal path: local job";
    let name = "local";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "3s")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert_eq!(
        ns.history(name),
        ran_to_success(),
        "[{S}] condition sequence; status: {}",
        show(&job)
    );
    let running = &ns.observed(name).history[1];
    assert_eq!(
        running[1].message, "TFJob normal/local is running.",
        "[{S}]"
    );
    assert_eq!(message(&job, Created), "TFJob local is created.", "[{S}]");
    assert_eq!(
        message(&job, Succeeded),
        "TFJob normal/local successfully completed.",
        "[{S}]"
    );
    let (start, done) = (time(&st.start_time), time(&st.completion_time));
    assert!(
        start.is_some() && done.is_some() && start <= done,
        "[{S}] startTime and completionTime: {}",
        show(&job)
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 1, 0)),
        "[{S}] replicaStatuses: {}",
        show(&job)
    );
    let worker = &st.replica_statuses["Worker"];
    assert_eq!(
        worker.selector.as_deref(),
        Some(selector(name, "worker").as_str()),
        "[{S}]"
    );
    assert_eq!(st.restart_count, None, "[{S}] {}", show(&job));

    let pods = ns.pods_of(name).await;
    assert_eq!(pod_names(&pods), names(&["local-worker-0"]), "[{S}]");
    check_pod(S, &job, &pods[0], "worker", 0, true, "Never");
    assert_eq!(phase(&pods[0]), "Succeeded", "[{S}]");
    assert_eq!(
        env(&pods[0], "TF_CONFIG"),
        None,
        "[{S}] a local job has no TF_CONFIG"
    );
    assert_eq!(
        env(&pods[0], "TFJOB_NAME").as_deref(),
        Some(name),
        "[{S}] the default decoration sets TFJOB_* variables"
    );
    let services = ns.services_of(name).await;
    assert_eq!(
        service_names(&services),
        names(&["local-worker-0"]),
        "[{S}]"
    );
    check_service(S, &job, &services[0], "worker", 0);

    ns.until_event(
        S,
        name,
        "SuccessfulCreatePod",
        "Created pod: local-worker-0",
    )
    .await;
    ns.until_event(
        S,
        name,
        "SuccessfulCreateService",
        "Created service: local-worker-0",
    )
    .await;
    ns.until_event(
        S,
        name,
        "TFJobSucceeded",
        "TFJob normal/local successfully completed.",
    )
    .await;
}

/// A PS and two workers without a chief: worker 0 decides, every pod gets TF_CONFIG.
async fn ps_worker_job(ns: &Ns) {
    const S: &str = "normal path: PS/Worker job";
    let name = "psw";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {
            "PS": replica(1, "", &[("duration", "60s")]),
            "Worker": replica(2, "", &[("duration", "3s")]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    assert_eq!(
        ns.history(name),
        ran_to_success(),
        "[{S}] condition sequence; status: {}",
        show(&job)
    );
    // A succeeded job reports its still-running PS as succeeded.
    let job = ns
        .until_job(S, name, "replicaStatuses PS 0/1/0, Worker 0/2/0", |j| {
            counts(j, "PS") == Some((0, 1, 0)) && counts(j, "Worker") == Some((0, 2, 0))
        })
        .await;
    assert!(time(&status(&job).completion_time).is_some(), "[{S}]");

    let all = names(&["psw-ps-0", "psw-worker-0", "psw-worker-1"]);
    let pods = ns.pods_of(name).await;
    assert_eq!(pod_names(&pods), all, "[{S}]");
    check_pod(S, &job, &pods[0], "ps", 0, false, "Never");
    check_pod(S, &job, &pods[1], "worker", 0, true, "Never");
    check_pod(S, &job, &pods[2], "worker", 1, false, "Never");
    assert_eq!(
        phase(&pods[0]),
        "Running",
        "[{S}] cleanPodPolicy defaults to None: the PS keeps running"
    );
    let cluster = r#""cluster":{"ps":["psw-ps-0.normal.svc:2222"],"worker":["psw-worker-0.normal.svc:2222","psw-worker-1.normal.svc:2222"]}"#;
    for (pod, task) in pods.iter().zip([("ps", 0), ("worker", 0), ("worker", 1)]) {
        assert_eq!(
            env(pod, "TF_CONFIG"),
            Some(format!(
                r#"{{{cluster},"task":{{"type":"{}","index":{}}},"environment":"cloud"}}"#,
                task.0, task.1
            )),
            "[{S}] TF_CONFIG of {}",
            pod.name_any()
        );
    }
    let services = ns.services_of(name).await;
    assert_eq!(service_names(&services), all, "[{S}]");
    check_service(S, &job, &services[0], "ps", 0);
    check_service(S, &job, &services[1], "worker", 0);
    check_service(S, &job, &services[2], "worker", 1);
}

/// A chief and two workers: the chief is the master role and decides; workers finishing
/// first do not complete the job.
async fn chief_job(ns: &Ns) {
    const S: &str = "normal path: Chief job";
    let name = "chief";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {
            "Chief": replica(1, "", &[("duration", "4s")]),
            "Worker": replica(2, "", &[("duration", "1s")]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    assert_eq!(
        ns.history(name),
        ran_to_success(),
        "[{S}] condition sequence; status: {}",
        show(&job)
    );
    assert_eq!(
        message(&job, Succeeded),
        "TFJob normal/chief successfully completed.",
        "[{S}]"
    );
    let job = ns
        .until_job(S, name, "replicaStatuses Chief 0/1/0, Worker 0/2/0", |j| {
            counts(j, "Chief") == Some((0, 1, 0)) && counts(j, "Worker") == Some((0, 2, 0))
        })
        .await;
    let pods = ns.pods_of(name).await;
    assert_eq!(
        pod_names(&pods),
        names(&["chief-chief-0", "chief-worker-0", "chief-worker-1"]),
        "[{S}]"
    );
    check_pod(S, &job, &pods[0], "chief", 0, true, "Never");
    check_pod(S, &job, &pods[1], "worker", 0, false, "Never");
    check_pod(S, &job, &pods[2], "worker", 1, false, "Never");
    let cluster = r#""cluster":{"chief":["chief-chief-0.normal.svc:2222"],"worker":["chief-worker-0.normal.svc:2222","chief-worker-1.normal.svc:2222"]}"#;
    assert_eq!(
        env(&pods[0], "TF_CONFIG"),
        Some(format!(
            r#"{{{cluster},"task":{{"type":"chief","index":0}},"environment":"cloud"}}"#
        )),
        "[{S}] TF_CONFIG of the chief"
    );
    assert_eq!(
        env(&pods[2], "TF_CONFIG"),
        Some(format!(
            r#"{{{cluster},"task":{{"type":"worker","index":1}},"environment":"cloud"}}"#
        )),
        "[{S}] TF_CONFIG of worker 1"
    );
    // The workers were done well before the chief; the job completed with the chief.
    let chief_done = finished_at(&pods[0]);
    let completion = time(&status(&job).completion_time).expect("completionTime");
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
    let services = ns.services_of(name).await;
    assert_eq!(service_names(&services), pod_names(&pods), "[{S}]");
    check_service(S, &job, &services[0], "chief", 0);
}

// ---------------------------------------------------------------------------------------------
// Success policies

#[test]
fn success_policies_decide_when_a_job_completes() {
    shared().run("success", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario(
                    "worker 0 decides",
                    &["worker-zero"],
                    worker_zero_decides(&ns),
                ),
                scenario(
                    "another worker first",
                    &["worker-one-first"],
                    another_worker_first(&ns),
                ),
                scenario("AllWorkers", &["all-workers"], all_workers(&ns)),
            ],
        )
        .await;
    });
}

/// Without a chief, worker 0 succeeding completes the job while the others still run.
async fn worker_zero_decides(ns: &Ns) {
    const S: &str = "success policy default: worker 0 decides";
    let name = "worker-zero";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(3, "", &[("duration", "0=2s,*=60s")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let pods = ns.pods_of(name).await;
    let phases: Vec<String> = pods.iter().map(phase).collect();
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
    let name = "worker-one-first";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "0=4s,1=1s")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let pods = ns.pods_of(name).await;
    let (w0, w1) = (finished_at(&pods[0]), finished_at(&pods[1]));
    let completion = time(&status(&job).completion_time).expect("completionTime");
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
    let name = "all-workers";
    ns.create(tfjob(
        name,
        json!({"successPolicy": "AllWorkers", "tfReplicaSpecs": {
            "Worker": replica(3, "", &[("duration", "0=1s,1=2s,2=4s")]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 3, 0)),
        "[{S}] {}",
        show(&job)
    );
    let pods = ns.pods_of(name).await;
    let (first, last) = (finished_at(&pods[0]), finished_at(&pods[2]));
    let completion = time(&status(&job).completion_time).expect("completionTime");
    assert!(
        first < last,
        "[{S}] worker 0 finished first ({first} < {last})"
    );
    assert!(
        completion >= last,
        "[{S}] the job completed ({completion}) only once the last worker had ({last}); status: {}",
        show(&job)
    );
    assert_eq!(ns.history(name), ran_to_success(), "[{S}] {}", show(&job));
}

// ---------------------------------------------------------------------------------------------
// Failure per replica type

#[test]
fn a_replica_failing_under_never_fails_the_job() {
    shared().run("failure", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario("PS fails", &["ps-fails"], ps_fails(&ns)),
                scenario("Worker fails", &["worker-fails"], worker_fails(&ns)),
                scenario("Chief fails", &["chief-fails"], chief_fails(&ns)),
            ],
        )
        .await;
    });
}

/// The job failed, the failed pod was kept as it is, nothing was restarted.
async fn check_failed(s: &str, ns: &Ns, name: &str, pod: &str) -> TFJob {
    let job = ns.until_true(s, name, Failed).await;
    let shapes = conditions(&job);
    assert_eq!(
        shapes.first(),
        Some(&c(Created, True, "TFJobCreated")),
        "[{s}] {}",
        show(&job)
    );
    assert_eq!(
        shapes.last(),
        Some(&c(Failed, True, "TFJobFailed")),
        "[{s}] {}",
        show(&job)
    );
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
        !ns.history(name)
            .iter()
            .flatten()
            .any(|(t, _, _)| *t == Restarting || *t == Succeeded),
        "[{s}] never Restarting nor Succeeded: {:?}",
        ns.history(name)
    );
    let pods = ns.pods_of(name).await;
    assert_eq!(
        phase(find(&pods, pod)),
        "Failed",
        "[{s}] the failed pod {pod} stays"
    );
    let text = message(&job, Failed);
    ns.until_event(s, name, "TFJobFailed", &text).await;
    job
}

async fn ps_fails(ns: &Ns) {
    const S: &str = "failure: PS fails under Never";
    let name = "ps-fails";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {
            "PS": replica(1, "", &[("duration", "1s"), ("exit-code", "1")]),
            "Worker": replica(2, "", &[("duration", "30s")]),
        }}),
    ))
    .await;
    let job = check_failed(S, ns, name, "ps-fails-ps-0").await;
    let text = message(&job, Failed);
    assert!(
        text.starts_with(
            "TFJob failure/ps-fails has failed because 1 PS replica(s) failed. \
             Pod ps-fails-ps-0: UnknownError (policy default-classify@"
        ),
        "[{S}] {text}"
    );
    assert!(
        text.contains("[tensorflow] terminated with exit code (1). Reason [Error]."),
        "[{S}] {text}"
    );
    assert_eq!(counts(&job, "PS"), Some((0, 0, 1)), "[{S}] {}", show(&job));
}

async fn worker_fails(ns: &Ns) {
    const S: &str = "failure: Worker fails under Never";
    let name = "worker-fails";
    // Worker 1 is killed (137): retryable, but Never restarts nothing.
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(2, "Never", &[
            ("duration", "1=1s,*=30s"), ("exit-code", "1=137,*=0"),
        ])}}),
    ))
    .await;
    let job = check_failed(S, ns, name, "worker-fails-worker-1").await;
    assert_eq!(
        message(&job, Failed),
        "TFJob failure/worker-fails has failed because 1 Worker replica(s) failed.",
        "[{S}]"
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((1, 0, 1)),
        "[{S}] {}",
        show(&job)
    );
}

async fn chief_fails(ns: &Ns) {
    const S: &str = "failure: Chief fails under Never";
    let name = "chief-fails";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {
            "Chief": replica(1, "Never", &[("duration", "1s"), ("exit-code", "2")]),
            "Worker": replica(1, "", &[("duration", "30s")]),
        }}),
    ))
    .await;
    let job = check_failed(S, ns, name, "chief-fails-chief-0").await;
    let text = message(&job, Failed);
    assert!(
        text.starts_with(
            "TFJob failure/chief-fails has failed because 1 Chief replica(s) failed. \
             Pod chief-fails-chief-0: UnknownError (policy default-classify@"
        ),
        "[{S}] {text}"
    );
    assert!(text.contains("exit code (2)"), "[{S}] {text}");
    assert_eq!(
        counts(&job, "Chief"),
        Some((0, 0, 1)),
        "[{S}] {}",
        show(&job)
    );
}

// ---------------------------------------------------------------------------------------------
// Restarts and the backoff limit

#[test]
fn restart_policies_restart_failed_replicas_within_the_backoff_limit() {
    shared().run("restarts", |ns| async move {
        let mut list = vec![
            scenario("OnFailure in place", &["on-failure"], on_failure(&ns)),
            scenario(
                "OnFailure over the backoff limit",
                &["on-failure-backoff"],
                on_failure_backoff(&ns),
            ),
            scenario("Always", &["always"], always(&ns)),
            scenario(
                "ExitCode retryable 137/143",
                &["exit-retryable"],
                exit_code_retryable(&ns),
            ),
            scenario(
                "ExitCode over the backoff limit",
                &["exit-backoff"],
                exit_code_backoff(&ns),
            ),
            scenario("backoffLimit 0", &["backoff-zero"], backoff_zero(&ns)),
        ];
        for code in [1, 2, 126, 127] {
            list.push(scenario(
                format!("ExitCode permanent {code}"),
                &[format!("exit-{code}").as_str()],
                exit_code_permanent(&ns, code),
            ));
        }
        scenarios(&ns, list).await;
    });
}

/// OnFailure: the kubelet restarts the failed container in place; the job succeeds on the
/// second run of the same pod.
async fn on_failure(ns: &Ns) {
    const S: &str = "restarts: OnFailure restarts the container in place";
    let name = "on-failure";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
            ("duration", "500ms"), ("exit-code", "1"), ("fail-times", "1"),
        ])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert!(
        st.pod_restarts.is_empty(),
        "[{S}] the pod was not recreated: {}",
        show(&job)
    );
    let pods = ns.pods_of(name).await;
    assert_eq!(pod_names(&pods), names(&["on-failure-worker-0"]), "[{S}]");
    check_pod(S, &job, &pods[0], "worker", 0, true, "OnFailure");
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
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"backoffLimit": 2}, "tfReplicaSpecs": {
            "Worker": replica(1, "OnFailure", &[("duration", "300ms"), ("exit-code", "1")]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    assert_eq!(message(&job, Failed), backoff_message(name), "[{S}]");
    assert_eq!(
        conditions(&job).last(),
        Some(&c(Failed, True, "TFJobFailed")),
        "[{S}] {}",
        show(&job)
    );
    assert!(!is_true(&job, Succeeded), "[{S}] {}", show(&job));
    // The running pod is deleted to free its resources.
    ns.until_objects(S, name, &[]).await;
    ns.until_event(S, name, "TFJobFailed", &backoff_message(name))
        .await;
}

/// Always: a worker evicted (a pod-level failure) is recreated by the operator; the chief
/// decides the job.
async fn always(ns: &Ns) {
    const S: &str = "restarts: Always recreates an evicted worker";
    let name = "always";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {
            "Chief": replica(1, "", &[("duration", "8s")]),
            "Worker": replica(1, "Always", &[
                ("duration", "1s"), ("pod-reason", "Evicted"), ("fail-times", "1"),
            ]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert_eq!(st.restart_count, Some(1), "[{S}] {}", show(&job));
    let record = st
        .pod_restarts
        .get("always-worker-0")
        .unwrap_or_else(|| panic!("[{S}] a restart record: {}", show(&job)));
    assert_eq!(record.count, 1, "[{S}] {}", show(&job));
    let pods = ns.pods_of(name).await;
    let worker = find(&pods, "always-worker-0");
    assert_ne!(
        worker.uid().as_deref(),
        Some(record.last_deleted_uid.as_str()),
        "[{S}] the worker is a new incarnation"
    );
    check_pod(S, &job, worker, "worker", 0, false, "Always");
    assert!(
        main_status(worker).is_some_and(|c| c.restart_count >= 1),
        "[{S}] under Always the kubelet restarts even a successful container in place"
    );
    assert!(
        ns.history(name)
            .iter()
            .any(|h| h.contains(&c(Restarting, True, "TFJobRestarting"))),
        "[{S}] Restarting was published: {:?}",
        ns.history(name)
    );
    assert_eq!(
        conditions(&job).last(),
        Some(&c(Succeeded, True, "TFJobSucceeded")),
        "[{S}] {}",
        show(&job)
    );
    let note = ns
        .until_event(
            S,
            name,
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
    let name = "exit-retryable";
    ns.create(tfjob(
        name,
        json!({"successPolicy": "AllWorkers", "tfReplicaSpecs": {
            "Worker": replica(2, "ExitCode", &[
                ("duration", "500ms"), ("exit-code", "0=137,1=143"), ("fail-times", "1"),
            ]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert_eq!(st.restart_count, Some(2), "[{S}] {}", show(&job));
    let pods = ns.pods_of(name).await;
    for pod in &pods {
        let record = st.pod_restarts.get(&pod.name_any()).unwrap_or_else(|| {
            panic!(
                "[{S}] a restart record of {}: {}",
                pod.name_any(),
                show(&job)
            )
        });
        assert_eq!(record.count, 1, "[{S}] {}", show(&job));
        assert_ne!(
            pod.uid().as_deref(),
            Some(record.last_deleted_uid.as_str()),
            "[{S}] {} is a new incarnation",
            pod.name_any()
        );
        assert_eq!(phase(pod), "Succeeded", "[{S}] {}", pod.name_any());
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()),
            Some("Never"),
            "[{S}] ExitCode pods never restart in place"
        );
    }
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 2, 0)),
        "[{S}] {}",
        show(&job)
    );
    let restarting = ns
        .observed(name)
        .history
        .into_iter()
        .flatten()
        .find(|c| c.type_ == Restarting && c.status == True)
        .unwrap_or_else(|| panic!("[{S}] Restarting was published: {:?}", ns.history(name)));
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
        ns.until_event(
            S,
            name,
            "ExitedWithCode",
            &format!("Pod: restarts.{pod} exited with code {code}"),
        )
        .await;
        ns.until_event(
            S,
            name,
            "TFJobRestarting",
            &format!(
                "job exit-retryable is restarting because Worker replica(s) failed. \
                 Pod {pod}: {reason} (policy default-classify@"
            ),
        )
        .await;
    }
}

/// ExitCode: 1-127 are permanent; the job fails at once and nothing is restarted.
async fn exit_code_permanent(ns: &Ns, code: i32) {
    let s = format!("restarts: ExitCode with permanent exit code {code}");
    let s = s.as_str();
    let name = format!("exit-{code}");
    let pod = format!("{name}-worker-0");
    ns.create(tfjob(
        &name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "ExitCode", &[
            ("duration", "500ms"), ("exit-code", &code.to_string()),
        ])}}),
    ))
    .await;
    let job = check_failed(s, ns, &name, &pod).await;
    let text = message(&job, Failed);
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
    ns.until_event(
        s,
        &name,
        "ExitedWithCode",
        &format!("Pod: restarts.{pod} exited with code {code}"),
    )
    .await;
}

/// ExitCode restarts are bounded by `backoffLimit`: two restarts, then the job fails.
async fn exit_code_backoff(ns: &Ns) {
    const S: &str = "restarts: ExitCode restarts reach backoffLimit";
    let name = "exit-backoff";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"backoffLimit": 2}, "tfReplicaSpecs": {
            "Worker": replica(1, "ExitCode", &[("duration", "300ms"), ("exit-code", "137")]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    assert_eq!(message(&job, Failed), backoff_message(name), "[{S}]");
    let st = status(&job);
    assert_eq!(st.restart_count, Some(2), "[{S}] {}", show(&job));
    assert_eq!(
        st.pod_restarts
            .get("exit-backoff-worker-0")
            .map(|r| r.count),
        Some(2),
        "[{S}] {}",
        show(&job)
    );
    assert!(
        ns.history(name)
            .iter()
            .any(|h| h.contains(&c(Restarting, True, "TFJobRestarting"))),
        "[{S}] Restarting was published: {:?}",
        ns.history(name)
    );
    // The third incarnation failed and stays for its logs.
    let pods = ns.pods_of(name).await;
    let pod = find(&pods, "exit-backoff-worker-0");
    assert_eq!(phase(pod), "Failed", "[{S}]");
    assert_ne!(
        pod.uid().as_deref(),
        st.pod_restarts
            .get("exit-backoff-worker-0")
            .map(|r| r.last_deleted_uid.as_str()),
        "[{S}] the last incarnation was not deleted"
    );
    ns.until_event(S, name, "TFJobFailed", &backoff_message(name))
        .await;
}

/// `backoffLimit: 0`: the first restart the job would need fails it; the running worker is
/// freed, the failed one stays.
async fn backoff_zero(ns: &Ns) {
    const S: &str = "restarts: backoffLimit 0";
    let name = "backoff-zero";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"backoffLimit": 0}, "tfReplicaSpecs": {
            "Worker": replica(2, "ExitCode", &[
                ("duration", "0=60s,1=300ms"), ("exit-code", "1=137,*=0"),
            ]),
        }}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    assert_eq!(message(&job, Failed), backoff_message(name), "[{S}]");
    assert_eq!(
        status(&job).restart_count,
        None,
        "[{S}] no restart happened"
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 0, 1)),
        "[{S}] {}",
        show(&job)
    );
    ns.until_objects(S, name, &names(&["backoff-zero-worker-1"]))
        .await;
}

// ---------------------------------------------------------------------------------------------
// Run policy: deadline, TTL, cleanPodPolicy

#[test]
fn run_policy_deadline_ttl_and_clean_pod_policy() {
    shared().run("runpolicy", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario(
                    "deadline, cleanPodPolicy None",
                    &["deadline-none"],
                    deadline(&ns, "deadline-none", "None"),
                ),
                scenario(
                    "deadline, cleanPodPolicy All",
                    &["deadline-all"],
                    deadline(&ns, "deadline-all", "All"),
                ),
                scenario("TTL after success", &["ttl"], ttl_succeeded(&ns)),
                scenario("TTL 0 after failure", &["ttl-failed"], ttl_failed(&ns)),
                scenario(
                    "cleanPodPolicy All",
                    &["clean-all"],
                    clean_pod_policy(&ns, "All"),
                ),
                scenario(
                    "cleanPodPolicy Running",
                    &["clean-running"],
                    clean_pod_policy(&ns, "Running"),
                ),
                scenario(
                    "cleanPodPolicy None",
                    &["clean-none"],
                    clean_pod_policy(&ns, "None"),
                ),
            ],
        )
        .await;
    });
}

/// `activeDeadlineSeconds` fires by itself (nothing else happens to the job meanwhile): the
/// running worker is freed, the succeeded one follows cleanPodPolicy.
async fn deadline(ns: &Ns, name: &str, clean: &str) {
    let s = format!("run policy: activeDeadlineSeconds, cleanPodPolicy {clean}");
    let s = s.as_str();
    ns.create(tfjob(
        name,
        json!({
            "runPolicy": {"activeDeadlineSeconds": 3, "cleanPodPolicy": clean},
            "tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "0=60s,1=500ms")])},
        }),
    ))
    .await;
    let job = ns.until_true(s, name, Failed).await;
    assert_eq!(message(&job, Failed), deadline_message(name), "[{s}]");
    assert_eq!(
        conditions(&job),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Failed, True, "TFJobFailed"),
        ],
        "[{s}] {}",
        show(&job)
    );
    let st = status(&job);
    let start = time(&st.start_time).expect("startTime");
    let done = time(&st.completion_time).expect("completionTime");
    assert!(
        done >= start + secs(3),
        "[{s}] failed at {done}, not before startTime {start} + 3s"
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 1, 0)),
        "[{s}] {}",
        show(&job)
    );
    ns.until_event(s, name, "TFJobFailed", &deadline_message(name))
        .await;
    let left = if clean == "All" {
        vec![]
    } else {
        vec![format!("{name}-worker-1")]
    };
    ns.until_objects(s, name, &left).await;
    if let Some(pod) = ns.pods_of(name).await.first() {
        assert_eq!(phase(pod), "Succeeded", "[{s}]");
    }
}

/// `ttlSecondsAfterFinished` deletes the job that long after it completed; its pods and
/// services go with it.
async fn ttl_succeeded(ns: &Ns) {
    const S: &str = "run policy: ttlSecondsAfterFinished after success";
    let name = "ttl";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"ttlSecondsAfterFinished": 2},
               "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}}),
    ))
    .await;
    let last = ns.until_gone(S, name).await;
    let now = Timestamp::now();
    assert!(is_true(&last, Succeeded), "[{S}] {}", show(&last));
    let done = time(&status(&last).completion_time).expect("completionTime");
    assert!(
        now >= done + secs(2),
        "[{S}] deleted by {now}, not before completionTime {done} + 2s"
    );
    ns.until_objects(S, name, &[]).await;
    ns.until_event(S, name, "SuccessfulDeleteJob", "Deleted job: ttl")
        .await;
}

async fn ttl_failed(ns: &Ns) {
    const S: &str = "run policy: ttlSecondsAfterFinished 0 after failure";
    let name = "ttl-failed";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"ttlSecondsAfterFinished": 0},
               "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms"), ("exit-code", "1")])}}),
    ))
    .await;
    let last = ns.until_gone(S, name).await;
    assert!(is_true(&last, Failed), "[{S}] {}", show(&last));
    ns.until_objects(S, name, &[]).await;
    ns.until_event(
        S,
        name,
        "TFJobFailed",
        "TFJob runpolicy/ttl-failed has failed",
    )
    .await;
    ns.until_event(S, name, "SuccessfulDeleteJob", "Deleted job: ttl-failed")
        .await;
}

/// After the chief succeeded: the PS still runs, worker 0 is still pending and worker 1 has
/// succeeded. `All` deletes every pod, `Running` the running and pending ones, `None` none;
/// each deleted pod's service goes too.
async fn clean_pod_policy(ns: &Ns, policy: &str) {
    let s = format!("run policy: cleanPodPolicy {policy}");
    let s = s.as_str();
    let name = format!("clean-{}", policy.to_lowercase());
    ns.create(tfjob(
        &name,
        json!({"runPolicy": {"cleanPodPolicy": policy}, "tfReplicaSpecs": {
            "Chief": replica(1, "", &[("duration", "3s")]),
            "PS": replica(1, "", &[("duration", "60s")]),
            "Worker": replica(2, "", &[("duration", "1s"), ("pending-reason", "0=ContainerCreating")]),
        }}),
    ))
    .await;
    ns.until_true(s, &name, Succeeded).await;
    // The reconcile after success reports the running PS as succeeded, and cleans up.
    let job = ns
        .until_job(s, &name, "replicaStatuses PS 0/1/0", |j| {
            counts(j, "PS") == Some((0, 1, 0))
        })
        .await;
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
    ns.until_objects(s, &name, &left).await;
    let pods = ns.pods_of(&name).await;
    for pod in &pods {
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

#[test]
fn suspend_resume_and_managed_by() {
    shared().run("suspend", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario(
                    "suspend and resume",
                    &["suspend-resume"],
                    suspend_resume(&ns),
                ),
                scenario(
                    "created suspended",
                    &["created-suspended"],
                    created_suspended(&ns),
                ),
                scenario(
                    "managedBy another controller",
                    &["managed-elsewhere", "managed-control"],
                    managed_elsewhere(&ns),
                ),
                scenario(
                    "managedBy this operator",
                    &["managed-here"],
                    managed_here(&ns),
                ),
            ],
        )
        .await;
    });
}

/// Suspending a running job deletes its pods and services; resuming recreates them and
/// restarts the clock.
async fn suspend_resume(ns: &Ns) {
    const S: &str = "suspend and resume a running job";
    let name = "suspend-resume";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "120s")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Running).await;
    let first_start = time(&status(&job).start_time).expect("startTime");
    let before = ns
        .until_pods(S, name, "two running pods", |p| {
            p.len() == 2 && p.iter().all(|p| phase(p) == "Running")
        })
        .await;
    let old_uids: Vec<String> = before.iter().filter_map(|p| p.uid()).collect();
    // startTime has whole seconds: resume at least a second later so a reset shows.
    while Timestamp::now() < first_start + secs(1) {
        tokio::time::sleep(POLL).await;
    }

    ns.patch(name, json!({"spec": {"runPolicy": {"suspend": true}}}))
        .await;
    let job = ns.until_true(S, name, Suspended).await;
    ns.until_objects(S, name, &[]).await;
    assert_eq!(
        conditions(&job),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobSuspended"),
            c(Suspended, True, "TFJobSuspended"),
        ],
        "[{S}] {}",
        show(&job)
    );
    assert_eq!(
        message(&job, Suspended),
        "TFJob suspend-resume is suspended.",
        "[{S}]"
    );
    assert_eq!(
        message(&job, Running),
        "TFJob suspend-resume is suspended.",
        "[{S}]"
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 0, 0)),
        "[{S}] {}",
        show(&job)
    );
    ns.until_event(
        S,
        name,
        "TFJobSuspended",
        "TFJob suspend-resume is suspended.",
    )
    .await;

    ns.patch(name, json!({"spec": {"runPolicy": {"suspend": false}}}))
        .await;
    let job = ns
        .until_job(S, name, "Suspended=False and Running=True", |j| {
            !is_true(j, Suspended) && is_true(j, Running)
        })
        .await;
    let after = ns
        .until_pods(S, name, "two new running pods", |p| {
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
        service_names(&ns.services_of(name).await),
        pod_names(&after),
        "[{S}] services are recreated"
    );
    assert_eq!(
        message(&job, Suspended),
        "TFJob suspend-resume is resumed.",
        "[{S}]"
    );
    let second_start = time(&status(&job).start_time).expect("startTime");
    assert!(
        second_start > first_start,
        "[{S}] startTime is reset on resume ({first_start} -> {second_start})"
    );
    assert_eq!(
        ns.history(name),
        vec![
            vec![c(Created, True, "TFJobCreated")],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Running, True, "TFJobRunning"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Running, False, "TFJobSuspended"),
                c(Suspended, True, "TFJobSuspended"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Running, False, "TFJobSuspended"),
                c(Suspended, False, "TFJobResumed"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Suspended, False, "TFJobResumed"),
                c(Running, True, "TFJobRunning"),
            ],
        ],
        "[{S}] condition sequence; status: {}",
        show(&job)
    );
    ns.until_event(S, name, "TFJobResumed", "TFJob suspend-resume is resumed.")
        .await;
    // Done with it: deleting the job takes its pods and services along.
    ns.jobs
        .delete(name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("[{S}] deleting the job: {e}"));
    ns.until_objects(S, name, &[]).await;
}

/// A job created suspended creates nothing and has no startTime until it is resumed.
async fn created_suspended(ns: &Ns) {
    const S: &str = "a job created suspended";
    let name = "created-suspended";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"suspend": true},
               "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "3s")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Suspended).await;
    assert_eq!(
        conditions(&job),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Suspended, True, "TFJobSuspended"),
        ],
        "[{S}] {}",
        show(&job)
    );
    assert_eq!(status(&job).start_time, None, "[{S}] {}", show(&job));
    assert!(
        ns.pods_of(name).await.is_empty(),
        "[{S}] no pod while suspended"
    );
    assert!(
        ns.services_of(name).await.is_empty(),
        "[{S}] no service while suspended"
    );

    ns.patch(name, json!({"spec": {"runPolicy": {"suspend": false}}}))
        .await;
    let job = ns.until_true(S, name, Succeeded).await;
    assert!(
        time(&status(&job).start_time).is_some(),
        "[{S}] {}",
        show(&job)
    );
    assert_eq!(
        ns.history(name),
        vec![
            vec![
                c(Created, True, "TFJobCreated"),
                c(Suspended, True, "TFJobSuspended"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Suspended, False, "TFJobResumed"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Suspended, False, "TFJobResumed"),
                c(Running, True, "TFJobRunning"),
            ],
            vec![
                c(Created, True, "TFJobCreated"),
                c(Suspended, False, "TFJobResumed"),
                c(Running, False, "TFJobRunning"),
                c(Succeeded, True, "TFJobSucceeded"),
            ],
        ],
        "[{S}] condition sequence; status: {}",
        show(&job)
    );
}

/// A job managed by another controller is left alone: no pods, no services, no status, no
/// events; a job submitted after it runs to success meanwhile.
async fn managed_elsewhere(ns: &Ns) {
    const S: &str = "managedBy another controller";
    let name = "managed-elsewhere";
    let control = "managed-control";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"},
               "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}}),
    ))
    .await;
    ns.create(tfjob(
        control,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}}),
    ))
    .await;
    ns.until_true(S, control, Succeeded).await;
    let job = ns
        .jobs
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("[{S}] reading the job: {e}"));
    assert_eq!(
        job.status,
        None,
        "[{S}] no status was written: {}",
        show(&job)
    );
    assert!(ns.history(name).is_empty(), "[{S}] {:?}", ns.history(name));
    assert!(ns.pods_of(name).await.is_empty(), "[{S}] no pods");
    assert!(ns.services_of(name).await.is_empty(), "[{S}] no services");
    let events = ns.events_of(name).await;
    assert!(events.is_empty(), "[{S}] no events: {events:?}");
}

/// `managedBy: kubeflow.org/training-operator` names this operator.
async fn managed_here(ns: &Ns) {
    const S: &str = "managedBy this operator";
    let name = "managed-here";
    ns.create(tfjob(
        name,
        json!({"runPolicy": {"managedBy": "kubeflow.org/training-operator"},
               "tfReplicaSpecs": {"Worker": replica(1, "", &[("duration", "500ms")])}}),
    ))
    .await;
    ns.until_true(S, name, Succeeded).await;
}

// ---------------------------------------------------------------------------------------------
// Scaling

#[test]
fn scaling_workers_up_and_down_on_a_running_job() {
    shared().run("scale", |ns| async move {
        scenarios(
            &ns,
            vec![scenario("scale up and down", &["scale"], scale(&ns))],
        )
        .await;
    });
}

async fn scale(ns: &Ns) {
    const S: &str = "scale workers up and down";
    let name = "scale";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(2, "", &[("duration", "120s")])}}),
    ))
    .await;
    ns.until_true(S, name, Running).await;
    let before = ns
        .until_pods(S, name, "two running pods", |p| {
            p.len() == 2 && p.iter().all(|p| phase(p) == "Running")
        })
        .await;
    let worker0 = before[0].uid();

    ns.patch(
        name,
        json!({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}),
    )
    .await;
    let four: Vec<String> = (0..4).map(|i| format!("scale-worker-{i}")).collect();
    ns.until_objects(S, name, &four).await;
    let job = ns
        .until_job(S, name, "replicaStatuses Worker 4/0/0", |j| {
            counts(j, "Worker") == Some((4, 0, 0))
        })
        .await;
    let pods = ns.pods_of(name).await;
    for (old, new) in before.iter().zip(&pods) {
        assert_eq!(old.uid(), new.uid(), "[{S}] {} is kept", old.name_any());
    }
    let workers = r#""worker":["scale-worker-0.scale.svc:2222","scale-worker-1.scale.svc:2222","scale-worker-2.scale.svc:2222","scale-worker-3.scale.svc:2222"]"#;
    for (i, pod) in pods.iter().enumerate().skip(2) {
        check_pod(S, &job, pod, "worker", i as i32, false, "Never");
        let tf_config = env(pod, "TF_CONFIG").unwrap_or_default();
        assert!(
            tf_config.contains(workers)
                && tf_config.contains(&format!(r#""task":{{"type":"worker","index":{i}}}"#)),
            "[{S}] TF_CONFIG of {}: {tf_config}",
            pod.name_any()
        );
    }
    for svc in &ns.services_of(name).await[2..] {
        let index: i32 = svc.name_any()[name.len() + "-worker-".len()..]
            .parse()
            .expect("an index");
        check_service(S, &job, svc, "worker", index);
    }
    ns.until_event(
        S,
        name,
        "SuccessfulCreatePod",
        "Created pod: scale-worker-3",
    )
    .await;

    ns.patch(
        name,
        json!({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}),
    )
    .await;
    ns.until_objects(S, name, &names(&["scale-worker-0"])).await;
    let job = ns
        .until_job(S, name, "replicaStatuses Worker 1/0/0", |j| {
            counts(j, "Worker") == Some((1, 0, 0))
        })
        .await;
    assert_eq!(
        ns.pods_of(name).await[0].uid(),
        worker0,
        "[{S}] worker 0 is kept"
    );
    assert!(
        is_true(&job, Running) && !is_true(&job, Failed) && !is_true(&job, Restarting),
        "[{S}] scaling down is no failure: {}",
        show(&job)
    );
    for i in 1..4 {
        ns.until_event(
            S,
            name,
            "SuccessfulDeletePod",
            &format!("Deleted pod: scale-worker-{i}"),
        )
        .await;
        ns.until_event(
            S,
            name,
            "SuccessfulDeleteService",
            &format!("Deleted service: scale-worker-{i}"),
        )
        .await;
    }
    ns.jobs
        .delete(name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("[{S}] deleting the job: {e}"));
    ns.until_objects(S, name, &[]).await;
}

// ---------------------------------------------------------------------------------------------
// Policy verdicts

/// The image pull grace period of the default classification policy, shortened from its
/// default of 3m through the policy config (as `--policy-config` does).
const PULL_GRACE: &str = "2s";

#[test]
fn policy_verdicts_fail_or_restart_pods() {
    let config =
        format!("default-classify:\n  settings:\n    imagePullBackoffGracePeriod: {PULL_GRACE}\n");
    let cluster = Cluster::start(Some(&config));
    cluster.run("verdicts", |ns| async move {
        scenarios(
            &ns,
            vec![
                scenario(
                    "ImagePullBackOff under Never",
                    &["pull-never"],
                    pull_back_off_fails(&ns),
                ),
                scenario(
                    "ImagePullBackOff under OnFailure",
                    &["pull-retry"],
                    pull_back_off_restarts(&ns),
                ),
                scenario("InvalidImageName", &["bad-image"], invalid_image(&ns)),
                scenario("OOMKilled under ExitCode", &["oom"], oom_restarts(&ns)),
                scenario("OOMKilled under Never", &["oom-never"], oom_fails(&ns)),
                scenario(
                    "Evicted under OnFailure",
                    &["evicted"],
                    evicted_restarts(&ns),
                ),
            ],
        )
        .await;
    });
}

/// An image pull back-off is a retryable failure once past the grace period: under Never the
/// replica has failed, and so has the job.
async fn pull_back_off_fails(ns: &Ns) {
    const S: &str = "verdict: ImagePullBackOff past the grace period, Never";
    let name = "pull-never";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "", &[("pending-reason", "ImagePullBackOff")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    assert_eq!(
        message(&job, Failed),
        "TFJob verdicts/pull-never has failed because 1 Worker replica(s) failed.",
        "[{S}]"
    );
    assert_eq!(
        counts(&job, "Worker"),
        Some((0, 0, 1)),
        "[{S}] {}",
        show(&job)
    );
    let pods = ns.pods_of(name).await;
    assert_eq!(phase(&pods[0]), "Pending", "[{S}] the pod never started");
    let waiting_since = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| time(&c.last_transition_time))
        .expect("the Ready condition's lastTransitionTime");
    let done = time(&status(&job).completion_time).expect("completionTime");
    assert!(
        done >= waiting_since + secs(2),
        "[{S}] failed at {done}, not within the {PULL_GRACE} grace period from {waiting_since}"
    );
    ns.until_event(
        S,
        name,
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
    let name = "pull-retry";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
            ("pending-reason", "ImagePullBackOff"), ("fail-times", "1"), ("duration", "1s"),
        ])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    assert_eq!(status(&job).restart_count, Some(1), "[{S}] {}", show(&job));
    let note = ns
        .until_event(
            S,
            name,
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
    let name = "bad-image";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[("pending-reason", "InvalidImageName")])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    let text = message(&job, Failed);
    assert!(
        text.starts_with(
            "TFJob verdicts/bad-image has failed because 1 Worker replica(s) failed. \
             Pod bad-image-worker-0: ContainersNotReady|InvalidImageName (policy default-classify@"
        ),
        "[{S}] {text}"
    );
    assert_eq!(status(&job).restart_count, None, "[{S}] {}", show(&job));
    ns.until_event(S, name, "TFJobFailed", &text).await;
}

/// An OOM kill (137, terminated reason OOMKilled) is retryable: restarted under ExitCode.
async fn oom_restarts(ns: &Ns) {
    const S: &str = "verdict: OOMKilled under ExitCode";
    let name = "oom";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "ExitCode", &[
            ("duration", "500ms"), ("terminated-reason", "OOMKilled"), ("exit-code", "137"),
            ("fail-times", "1"),
        ])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert_eq!(st.restart_count, Some(1), "[{S}] {}", show(&job));
    assert_eq!(
        st.pod_restarts.get("oom-worker-0").map(|r| r.count),
        Some(1),
        "[{S}] {}",
        show(&job)
    );
    ns.until_event(
        S,
        name,
        "OOMKilled",
        "Pod verdicts/oom-worker-0 container tensorflow was OOMKilled",
    )
    .await;
    ns.until_event(
        S,
        name,
        "TFJobRestarting",
        "job oom is restarting because Worker replica(s) failed. \
         Pod oom-worker-0: OOMKilled (policy default-classify@",
    )
    .await;
    ns.until_event(
        S,
        name,
        "ExitedWithCode",
        "Pod: verdicts.oom-worker-0 exited with code 137",
    )
    .await;
}

/// The same verdict under Never fails the job.
async fn oom_fails(ns: &Ns) {
    const S: &str = "verdict: OOMKilled under Never";
    let name = "oom-never";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "Never", &[
            ("duration", "500ms"), ("terminated-reason", "OOMKilled"),
        ])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Failed).await;
    assert_eq!(
        message(&job, Failed),
        "TFJob verdicts/oom-never has failed because 1 Worker replica(s) failed.",
        "[{S}]"
    );
    assert_eq!(status(&job).restart_count, None, "[{S}] {}", show(&job));
    ns.until_event(
        S,
        name,
        "OOMKilled",
        "Pod verdicts/oom-never-worker-0 container tensorflow was OOMKilled",
    )
    .await;
}

/// An evicted pod is an interruption, retryable: recreated under OnFailure.
async fn evicted_restarts(ns: &Ns) {
    const S: &str = "verdict: Evicted under OnFailure";
    let name = "evicted";
    ns.create(tfjob(
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, "OnFailure", &[
            ("duration", "500ms"), ("pod-reason", "Evicted"), ("fail-times", "1"),
        ])}}),
    ))
    .await;
    let job = ns.until_true(S, name, Succeeded).await;
    let st = status(&job);
    assert_eq!(st.restart_count, Some(1), "[{S}] {}", show(&job));
    let record = st
        .pod_restarts
        .get("evicted-worker-0")
        .unwrap_or_else(|| panic!("[{S}] a restart record: {}", show(&job)));
    let pods = ns.pods_of(name).await;
    assert_ne!(
        pods[0].uid().as_deref(),
        Some(record.last_deleted_uid.as_str()),
        "[{S}] the pod is a new incarnation"
    );
    assert_eq!(phase(&pods[0]), "Succeeded", "[{S}]");
    let note = ns
        .until_event(
            S,
            name,
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
