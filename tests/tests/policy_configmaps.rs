//! Policies shipped as ConfigMaps, end to end: the embedded cluster with the real operator,
//! ConfigMaps written through the API with kube-rs, and the effect read off the pods, the
//! `policy.tfjob.dev/status` annotation and the events.
//!
//! Every test starts its own cluster (the compiled default policies are shared), so each may
//! replace the default policies freely. The hot-swap test measures a latency, so it runs alone;
//! the others may run beside each other. Waits poll with a generous timeout; where a test checks
//! that something does *not* happen, it first makes the policy sync prove it has looked (a probe
//! ConfigMap created afterwards in the same namespace has been loaded).

use crate::common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_api::JobConditionType::Succeeded;
use tfjob_api::TFJob;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_policy_engine::cluster_reads::{ReadDeclaration, ReadScope};
use tfjob_policy_engine::configmap::{self, PolicyState, PolicyStatus, STATUS_ANNOTATION};
use tfjob_policy_engine::signature::{SigningKey, TrustedKeys};
use tfjob_policy_engine::{
    APPLIED_ANNOTATION, BreakerConfig, FailurePolicy, Hook, JobSelector, PolicyManifest,
    PolicyMode, defaults,
};

use common::replica;
use tfjob_conformance::JOB_NAME;

/// Longest wait for any single expected state.
const WAIT: Duration = Duration::from_secs(60);
/// Interval between two looks at the API.
const POLL: Duration = Duration::from_millis(50);
/// What the issue allows between updating a policy ConfigMap and new pods showing it.
const SWAP_LIMIT: Duration = Duration::from_secs(2);
/// The namespace the operator takes policy ConfigMaps from (the embedded cluster's default).
const POLICY_NS: &str = "tfjob-system";
const DECORATE: &str = "default-decorate";
const RESOURCES: &str = "default-resources";

// ---------------------------------------------------------------------------------------------
// Clusters

/// Tests that measure time take this exclusively; the others share it.
fn turns() -> &'static RwLock<()> {
    static TURNS: RwLock<()> = RwLock::new(());
    &TURNS
}

/// Runs `body` against a fresh cluster on its own runtime, with the jobs' namespace `ns`
/// created; alone when `exclusive`.
fn with_cluster<F, Fut>(exclusive: bool, ns: &'static str, body: F)
where
    F: FnOnce(Env, &'static str) -> Fut,
    Fut: Future<Output = ()>,
{
    with_cluster_configured(exclusive, ns, |_| {}, body);
}

/// [`with_cluster`], with the cluster's options changed by `configure` first.
fn with_cluster_configured<F, Fut>(
    exclusive: bool,
    ns: &'static str,
    configure: impl FnOnce(&mut ClusterOptions),
    body: F,
) where
    F: FnOnce(Env, &'static str) -> Fut,
    Fut: Future<Output = ()>,
{
    let lock = turns();
    let _alone = exclusive.then(|| lock.write().unwrap_or_else(PoisonError::into_inner));
    let _shared = (!exclusive).then(|| lock.read().unwrap_or_else(PoisonError::into_inner));
    common::runtime().block_on(async move {
        let mut options = ClusterOptions::new(common::default_policies());
        options.kubelet = KubeletConfig {
            nodes: 2,
            cpu: "128".into(),
            memory: "512Gi".into(),
            gpus_per_node: 0,
            default_duration: Duration::from_millis(300),
            startup: Duration::from_millis(20),
            ..KubeletConfig::default()
        };
        configure(&mut options);
        let namespaces: Vec<String> = options
            .policy_namespaces
            .iter()
            .cloned()
            .chain([ns.to_owned()])
            .collect();
        let cluster = common::start_cluster(options).await;
        let env = Env {
            client: cluster.client(),
            _cluster: cluster,
        };
        for namespace in &namespaces {
            common::ensure_namespace(&env.client, namespace).await;
        }
        body(env, ns).await;
    });
}

// ---------------------------------------------------------------------------------------------
// Policies as ConfigMaps

/// The bytes of the embedded default policy `name`.
fn module(name: &str) -> &'static [u8] {
    defaults::find(name)
        .unwrap_or_else(|| panic!("{name} is a default policy"))
        .wasm
}

/// The manifest the operator gives the default policy `name`, with `settings` merged over its
/// default settings.
fn default_manifest(name: &str, settings: Value) -> PolicyManifest {
    let d = defaults::find(name).unwrap_or_else(|| panic!("{name} is a default policy"));
    let mut manifest = defaults::manifest(d);
    if let (Value::Object(base), Value::Object(extra)) = (&mut manifest.settings, settings) {
        base.extend(extra);
    }
    manifest
}

/// The default decoration, plus `labels` on every pod.
fn decorate_with_labels(labels: Value) -> PolicyManifest {
    default_manifest(DECORATE, json!({"defaultLabels": labels}))
}

/// The ConfigMap of the default decoration in the policy namespace, with `policy-rev: rev` on
/// every pod.
fn revision(rev: &str) -> ConfigMap {
    pack(
        decorate_with_labels(json!({"policy-rev": rev})),
        module(DECORATE),
    )
}

/// A ConfigMap of `manifest` and `wasm` in `namespace`, as `policy pack` makes it.
fn pack_in(manifest: PolicyManifest, wasm: &[u8], namespace: &str, gzip: bool) -> ConfigMap {
    configmap::pack(manifest, wasm, namespace, gzip).expect("the policy packs")
}

fn pack(manifest: PolicyManifest, wasm: &[u8]) -> ConfigMap {
    pack_in(manifest, wasm, POLICY_NS, false)
}

/// `cm` under another ConfigMap name.
fn renamed(mut cm: ConfigMap, name: &str) -> ConfigMap {
    cm.metadata.name = Some(name.to_owned());
    cm
}

/// `cm` with its module (the `policy.wasm` key) replaced by `wasm`, the manifest untouched.
fn with_module(mut cm: ConfigMap, wasm: &[u8]) -> ConfigMap {
    cm.binary_data = Some(BTreeMap::from([(
        configmap::WASM_KEY.to_owned(),
        ByteString(wasm.to_vec()),
    )]));
    cm
}

/// sha256 (hex) of `wasm`, as the operator computes it.
fn digest(wasm: &[u8]) -> String {
    let cm = pack(
        PolicyManifest {
            name: "digest".into(),
            hooks: vec![Hook::Decorate],
            ..PolicyManifest::default()
        },
        wasm,
    );
    configmap::read_configmap(&cm)
        .expect("a packed ConfigMap reads back")
        .digest
}

/// Bytes that are no Wasm component at all.
const CORRUPT_MODULE: &[u8] = b"\0asm\x0d\0\x01\0 this is not a component, only its first bytes";

// ---------------------------------------------------------------------------------------------
// Jobs

/// A TFJob of one worker that runs briefly and succeeds, with `labels`.
fn tfjob(name: &str, labels: &[(&str, &str)]) -> TFJob {
    let spec = json!({"tfReplicaSpecs": {"Worker": replica(1, "Never", &[("duration", "300ms")])}});
    let mut job = common::tfjob(name, spec);
    job.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    job
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn cpu_request(pod: &Pod) -> Option<String> {
    common::main_container(pod)?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("cpu")
        .map(|q| q.0.clone())
}

fn applied(pod: &Pod) -> String {
    pod.annotations()
        .get(APPLIED_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The cluster as the tests see it: through the API

struct Env {
    client: Client,
    // Dropped last: aborts the operator, the kubelet and the server.
    _cluster: EmbeddedCluster,
}

/// Polls `check` every [`POLL`] until it gives a value, for at most `timeout`.
async fn until<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    common::poll(timeout, POLL, check)
        .await
        .unwrap_or_else(|last| {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
        })
}

/// Waits until `events` (reason and note of each) has one with `reason` whose note contains
/// `text`; returns the note.
async fn until_note<F, Fut>(what: &str, reason: &str, text: &str, mut events: F) -> String
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<(String, String)>>,
{
    until(what, WAIT, || {
        let events = events();
        async move {
            let events = events.await;
            events
                .iter()
                .find(|(r, note)| r == reason && note.contains(text))
                .map(|(_, note)| note.clone())
                .ok_or_else(|| format!("{events:?}"))
        }
    })
    .await
}

impl Env {
    fn configmaps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn jobs(&self, namespace: &str) -> Api<TFJob> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    // --- ConfigMaps -------------------------------------------------------------------------

    async fn create_cm(&self, cm: &ConfigMap) -> ConfigMap {
        let ns = cm.namespace().expect("packed ConfigMaps have a namespace");
        self.configmaps(&ns)
            .create(&PostParams::default(), cm)
            .await
            .unwrap_or_else(|e| panic!("creating ConfigMap {ns}/{}: {e}", cm.name_any()))
    }

    /// Creates the policy ConfigMap `cm` of module `wasm` and waits until it serves.
    async fn create_active(&self, cm: &ConfigMap, wasm: &[u8]) -> ConfigMap {
        let created = self.create_cm(cm).await;
        self.until_active(&created.name_any(), &digest(wasm)).await;
        created
    }

    /// Replaces the content (data and binaryData) of the existing ConfigMap of `cm`'s name.
    async fn update_cm(&self, cm: &ConfigMap) -> ConfigMap {
        let ns = cm.namespace().expect("packed ConfigMaps have a namespace");
        let patch = json!({"data": cm.data, "binaryData": cm.binary_data});
        self.configmaps(&ns)
            .patch(
                &cm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("updating ConfigMap {ns}/{}: {e}", cm.name_any()))
    }

    async fn delete_cm(&self, namespace: &str, name: &str) {
        self.configmaps(namespace)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting ConfigMap {namespace}/{name}: {e}"));
    }

    /// The status annotation of a ConfigMap: `None` without one.
    async fn status(&self, namespace: &str, name: &str) -> Option<PolicyStatus> {
        let cm = self
            .configmaps(namespace)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("reading ConfigMap {namespace}/{name}: {e}"));
        PolicyStatus::of(&cm).map(|s| {
            s.unwrap_or_else(|e| panic!("the status of {namespace}/{name} is not valid JSON: {e}"))
        })
    }

    /// Waits until the status of policy ConfigMap `name` satisfies `done`.
    async fn until_status(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&PolicyStatus) -> bool,
    ) -> PolicyStatus {
        self.until_status_in(POLICY_NS, name, what, done).await
    }

    /// [`Env::until_status`] for a ConfigMap in `namespace`.
    async fn until_status_in(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        done: impl Fn(&PolicyStatus) -> bool,
    ) -> PolicyStatus {
        until(
            &format!("{what} on ConfigMap {namespace}/{name}"),
            WAIT,
            || async {
                match self.status(namespace, name).await {
                    Some(s) if done(&s) => Ok(s),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
    }

    async fn until_active(&self, name: &str, digest: &str) -> PolicyStatus {
        let status = self
            .until_status(name, "state Active", |s| s.state == PolicyState::Active)
            .await;
        assert_eq!(status.digest.as_deref(), Some(digest), "{name}: {status:?}");
        assert_eq!(status.error, None, "{name}: {status:?}");
        assert!(status.loaded_at.is_some(), "{name}: {status:?}");
        status
    }

    /// `(reason, note, occurrences)` of the events about ConfigMap `namespace/name`.
    async fn cm_events(&self, namespace: &str, name: &str) -> Vec<(String, String, i32)> {
        common::events_about(&self.client, namespace, "ConfigMap")
            .await
            .into_iter()
            .filter(|(about, _)| about == name)
            .map(|(_, e)| {
                // A repeated event is one object with a series.
                let count = e.series.as_ref().map_or(1, |s| s.count);
                let (_, reason, note) = common::summary(e);
                (reason, note, count)
            })
            .collect()
    }

    /// Waits for an event about policy ConfigMap `name` with `reason` whose note contains
    /// `text`; returns the note.
    async fn until_cm_event(&self, name: &str, reason: &str, text: &str) -> String {
        let what = format!("event {reason} containing {text:?} on ConfigMap {name}");
        until_note(&what, reason, text, || async {
            let events = self.cm_events(POLICY_NS, name).await;
            events.into_iter().map(|(r, note, _)| (r, note)).collect()
        })
        .await
    }

    /// Proves the policy sync has handled every change made so far to the policy namespace: it
    /// handles them in order, so once a ConfigMap created now is loaded, every earlier change
    /// has been too. The probe selects no job.
    async fn settle(&self, probe: &str) {
        let manifest = PolicyManifest {
            name: probe.to_owned(),
            hooks: vec![Hook::Decorate],
            failure_policy: FailurePolicy::Ignore,
            selector: JobSelector {
                match_labels: BTreeMap::from([("probe".to_owned(), "never".to_owned())]),
                ..JobSelector::default()
            },
            ..PolicyManifest::default()
        };
        self.create_active(&pack(manifest, module(DECORATE)), module(DECORATE))
            .await;
    }

    // --- Jobs -------------------------------------------------------------------------------

    async fn submit(&self, namespace: &str, name: &str, labels: &[(&str, &str)]) {
        self.jobs(namespace)
            .create(&PostParams::default(), &tfjob(name, labels))
            .await
            .unwrap_or_else(|e| panic!("creating TFJob {namespace}/{name}: {e}"));
    }

    /// Submits a job and returns its worker pod once created.
    async fn run_job(&self, namespace: &str, name: &str) -> Pod {
        self.submit(namespace, name, &[]).await;
        self.until_pod(namespace, name).await
    }

    async fn until_pod(&self, namespace: &str, job: &str) -> Pod {
        let pod = format!("{job}-worker-0");
        until(&format!("pod {namespace}/{pod}"), WAIT, || async {
            match self.pods(namespace).get_opt(&pod).await {
                Ok(Some(p)) => Ok(p),
                Ok(None) => Err(self.job_report(namespace, job).await),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    async fn until_succeeded(&self, namespace: &str, job: &str) {
        until(
            &format!("TFJob {namespace}/{job} Succeeded"),
            WAIT,
            || async {
                match self.jobs(namespace).get(job).await {
                    Ok(j) if common::is_true(&j, Succeeded) => Ok(()),
                    _ => Err(self.job_report(namespace, job).await),
                }
            },
        )
        .await;
    }

    /// `(type, reason, note)` of the events about TFJobs in `namespace`, with the job's name.
    async fn job_events(&self, namespace: &str) -> Vec<(String, String, String, String)> {
        common::events_about(&self.client, namespace, "TFJob")
            .await
            .into_iter()
            .map(|(job, e)| {
                let (t, reason, note) = common::summary(e);
                (job, t, reason, note)
            })
            .collect()
    }

    async fn events_of(&self, namespace: &str, job: &str) -> Vec<(String, String, String)> {
        self.job_events(namespace)
            .await
            .into_iter()
            .filter(|(j, ..)| j == job)
            .map(|(_, t, r, n)| (t, r, n))
            .collect()
    }

    async fn until_job_event(&self, namespace: &str, job: &str, reason: &str) -> String {
        let what = format!("event {reason} on TFJob {namespace}/{job}");
        until_note(&what, reason, "", || async {
            let events = self.events_of(namespace, job).await;
            events.into_iter().map(|(_, r, note)| (r, note)).collect()
        })
        .await
    }

    /// The job's status and events, for failure messages.
    async fn job_report(&self, namespace: &str, job: &str) -> String {
        let status = match self.jobs(namespace).get_opt(job).await {
            Ok(Some(j)) => serde_json::to_string(&j.status).unwrap_or_default(),
            Ok(None) => "no such job".into(),
            Err(e) => format!("reading the job failed: {e}"),
        };
        let events = self.events_of(namespace, job).await;
        format!("status {status}; events {events:?}")
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

/// Updating a policy ConfigMap reaches newly created pods within two seconds, while jobs keep
/// arriving; no reconcile fails on the way and every job runs to success.
#[test]
fn an_updated_policy_decorates_new_pods_within_two_seconds_while_jobs_keep_arriving() {
    with_cluster(true, "swap", |env, ns| async move {
        let cm = env
            .create_active(&revision("v1"), module(DECORATE))
            .await
            .name_any();

        // Small jobs, one after the other, for the whole test.
        let stop = Arc::new(AtomicBool::new(false));
        let submitter = {
            let jobs = env.jobs(ns);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut names = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("load-{}", names.len());
                    if let Err(e) = jobs
                        .create(&PostParams::default(), &tfjob(&name, &[]))
                        .await
                    {
                        panic!("creating TFJob {ns}/{name}: {e}");
                    }
                    names.push(name);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                names
            })
        };
        let pods = env.pods(ns);
        let count = |selector: String| {
            let pods = pods.clone();
            async move {
                pods.list(&ListParams::default().labels(&selector))
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or_else(|e| panic!("listing pods {selector}: {e}"))
            }
        };
        // Waits until policy version `rev` has decorated a few pods.
        let served_a_few = async |rev: &str, what: &str| {
            until(what, WAIT, || async {
                let n = count(format!("policy-rev={rev}")).await;
                if n >= 5 {
                    Ok(())
                } else {
                    Err(format!("{n} pods"))
                }
            })
            .await;
        };
        served_a_few("v1", "pods of the first version").await;

        let mut latencies = Vec::new();
        // The first swap of this process also does what a process does once (preparing its
        // first settings document beside the compiled code): with one process per test that
        // falls inside this test, where it used to fall in earlier tests of the binary. It is
        // timed and printed, and the swaps after it are held to the limit.
        for rev in ["v2", "v3", "v4", "v5"] {
            let next = revision(rev);
            let selector = format!("policy-rev={rev}");
            let started = Instant::now();
            env.update_cm(&next).await;
            let latency = until(&format!("a pod decorated by {rev}"), WAIT, || async {
                if count(selector.clone()).await > 0 {
                    Ok(started.elapsed())
                } else {
                    Err("none yet".into())
                }
            })
            .await;
            println!("policy update to {rev}: first pod decorated by it after {latency:?}");
            if rev != "v2" {
                latencies.push((rev, latency));
            }
            // Let the new version serve a few pods before the next update.
            served_a_few(rev, &format!("pods of {rev}")).await;
            let status = env
                .until_status(&cm, "state Active", |s| s.state == PolicyState::Active)
                .await;
            assert_eq!(status.error, None, "{status:?}");
        }
        stop.store(true, Ordering::Relaxed);
        let submitted = submitter.await.expect("the submitter finishes");

        for job in &submitted {
            env.until_succeeded(ns, job).await;
        }
        let failures: Vec<_> = env
            .job_events(ns)
            .await
            .into_iter()
            .filter(|(_, t, reason, _)| t == "Warning" || reason == "PolicyFailed")
            .collect();
        assert!(failures.is_empty(), "reconciles failed: {failures:?}");
        // Every pod was decorated by one version or the next: never by none.
        let all = pods
            .list(&ListParams::default())
            .await
            .expect("listing pods")
            .items;
        assert_eq!(all.len(), submitted.len(), "one pod per job");
        for pod in &all {
            let rev = label(pod, "policy-rev");
            assert!(
                matches!(rev, Some("v1" | "v2" | "v3" | "v4" | "v5")),
                "pod {} has policy-rev {rev:?}",
                pod.name_any()
            );
            assert_eq!(
                common::env(pod, "TFJOB_NAME").as_deref(),
                label(pod, JOB_NAME),
                "pod {}",
                pod.name_any()
            );
        }
        println!("{} jobs submitted during the updates", submitted.len());
        for (rev, latency) in latencies {
            assert!(
                latency < SWAP_LIMIT,
                "the update to {rev} took {latency:?} to reach a new pod (limit {SWAP_LIMIT:?})"
            );
        }
    });
}

/// A corrupt module, a module without a declared hook, a digest that does not match the pin
/// and settings the policy refuses: each update is rejected with its cause on the ConfigMap
/// (annotation and event), and the previous version keeps serving. Each case has a ConfigMap
/// of its own, so that each rejection is the first event of its ConfigMap.
#[test]
fn rejected_updates_keep_the_previous_version_serving() {
    with_cluster(false, "keep", |env, ns| async move {
        let decorate_digest = digest(module(DECORATE));
        let resources_digest = digest(module(RESOURCES));
        // A decoration policy that labels pods `<name>: <value>`.
        let labelling = |name: &str, order: i32, value: &str| PolicyManifest {
            name: name.to_owned(),
            hooks: vec![Hook::Decorate],
            order,
            settings: json!({"defaultLabels": {name: value}}),
            ..PolicyManifest::default()
        };
        let resources = |cpu: &str| {
            default_manifest(RESOURCES, json!({"defaults": {"requests": {"cpu": cpu}}}))
        };
        let decorating = ["keep-corrupt", "keep-hook", "keep-digest", "keep-reads"];
        for (order, name) in (10..).zip(decorating) {
            let cm = pack(labelling(name, order, "good"), module(DECORATE));
            env.create_active(&cm, module(DECORATE)).await;
        }
        let cm = pack(resources("500m"), module(RESOURCES));
        env.create_active(&cm, module(RESOURCES)).await;
        let check_pod = |pod: &Pod, when: &str| {
            for name in decorating {
                assert_eq!(label(pod, name), Some("good"), "{when}: label {name}");
                assert!(
                    applied(pod).contains(&format!("{name}@{}", &decorate_digest[..12])),
                    "{when}: {}",
                    applied(pod)
                );
            }
            assert_eq!(cpu_request(pod).as_deref(), Some("500m"), "{when}: cpu");
            assert!(
                applied(pod).contains(&format!("{RESOURCES}@{}", &resources_digest[..12])),
                "{when}: {}",
                applied(pod)
            );
        };
        let pod = env.run_job(ns, "before").await;
        check_pod(&pod, "before the updates");

        let cases = [
            (
                pack(labelling("keep-corrupt", 10, "bad"), CORRUPT_MODULE),
                &decorate_digest,
                "the module does not load".to_owned(),
            ),
            (
                // The resources module declared as a decoration policy.
                pack(labelling("keep-hook", 11, "bad"), module(RESOURCES)),
                &decorate_digest,
                "manifest field hooks: declares decorate but the module does not export \
                 tfjob:policy/decorate@0.3.0"
                    .to_owned(),
            ),
            (
                // Pinned to the resources module's digest, shipping the decoration module.
                with_module(
                    pack(labelling("keep-digest", 12, "bad"), module(RESOURCES)),
                    module(DECORATE),
                ),
                &decorate_digest,
                format!(
                    "manifest field sha256: expected {resources_digest} but the module's \
                     digest is {decorate_digest}"
                ),
            ),
            (
                pack(resources("lots"), module(RESOURCES)),
                &resources_digest,
                "manifest field settings".to_owned(),
            ),
            (
                // Declares a read past the operator's default ceiling.
                pack(
                    PolicyManifest {
                        reads: vec![ReadDeclaration {
                            resource: "configmaps".into(),
                            scope: Some(ReadScope::JobNamespace),
                        }],
                        ..labelling("keep-reads", 13, "bad")
                    },
                    module(DECORATE),
                ),
                &decorate_digest,
                "manifest field reads[0].resource: configmaps is not readable by cluster-wide \
                 policies"
                    .to_owned(),
            ),
        ];
        for (update, serving, cause) in cases {
            let cm = update.name_any();
            let updated = env.update_cm(&update).await;
            let status = env
                .until_status(&cm, &format!("state Rejected naming {cause:?}"), |s| {
                    s.state == PolicyState::Rejected
                        && s.error.as_deref().is_some_and(|e| e.contains(&cause))
                })
                .await;
            let error = status.error.clone().unwrap_or_default();
            assert!(error.contains("still serves"), "[{cm}] {status:?}");
            assert_eq!(
                status.digest.as_deref(),
                Some(serving.as_str()),
                "[{cm}] the digest still serving: {status:?}"
            );
            let version: u64 = status
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("[{cm}] a resourceVersion: {status:?}"));
            let sent: u64 = updated.resource_version().unwrap().parse().unwrap();
            assert!(
                version >= sent,
                "[{cm}] status about {version}, update {sent}"
            );
            let note = env.until_cm_event(&cm, "PolicyRejected", &cause).await;
            assert!(note.contains("still serves"), "[{cm}] {note}");
        }
        // A second rejection of the same ConfigMap is an event of its own, naming its own cause
        // (not merged into the first one's series).
        let again = pack(labelling("keep-corrupt", 10, "worse"), module(RESOURCES));
        env.update_cm(&again).await;
        let note = env
            .until_cm_event(
                &again.name_any(),
                "PolicyRejected",
                "declares decorate but the module does not export",
            )
            .await;
        assert!(note.contains("still serves"), "{note}");

        // The settings error names the field the policy refused.
        let status = env
            .status(POLICY_NS, &configmap::configmap_name(RESOURCES))
            .await
            .unwrap();
        assert!(
            status
                .error
                .as_deref()
                .unwrap()
                .contains("defaults.requests"),
            "{status:?}"
        );

        let pod = env.run_job(ns, "after").await;
        check_pod(&pod, "after the rejected updates");
        env.until_succeeded(ns, "after").await;
    });
}

/// A shadow policy of the default decoration's name with other settings reports what it would
/// do differently on the job, and the pods stay as the enforced policy shapes them.
#[test]
fn a_shadow_policy_reports_disagreements_without_changing_pods() {
    with_cluster(false, "shadow", |env, ns| async move {
        let mut manifest = decorate_with_labels(
            json!({"shadow-rev": "candidate", "tfjob.dev/shadow": "prefixed"}),
        );
        manifest.mode = PolicyMode::Shadow;
        let shadow = renamed(
            pack(manifest, module(DECORATE)),
            "tfjob-policy-default-decorate-shadow",
        );
        env.create_active(&shadow, module(DECORATE)).await;

        let pod = env.run_job(ns, "watched").await;
        let note = env
            .until_job_event(ns, "watched", "PolicyShadowDisagreement")
            .await;
        for part in [
            "shadow policy default-decorate@",
            "Worker pods",
            "metadata.labels.shadow-rev",
            // A prefixed key is named whole, with its value.
            "metadata.labels[\"tfjob.dev/shadow\"]",
            "enforced: null, null",
            "shadow: \"candidate\", \"prefixed\"",
        ] {
            assert!(note.contains(part), "{part:?} in {note:?}");
        }
        assert_eq!(
            label(&pod, "shadow-rev"),
            None,
            "the shadow changed the pod"
        );
        assert_eq!(common::env(&pod, "TFJOB_NAME").as_deref(), Some("watched"));
        env.until_succeeded(ns, "watched").await;
        let pod = env.until_pod(ns, "watched").await;
        assert_eq!(label(&pod, "shadow-rev"), None);
    });
}

/// Deleting the ConfigMap that replaced a default policy brings the default back.
#[test]
fn deleting_a_replacement_restores_the_default_policy() {
    with_cluster(false, "restore", |env, ns| async move {
        let cm = env
            .create_active(&revision("replaced"), module(DECORATE))
            .await
            .name_any();
        let pod = env.run_job(ns, "replaced").await;
        assert_eq!(label(&pod, "policy-rev"), Some("replaced"));

        env.delete_cm(POLICY_NS, &cm).await;
        env.settle("probe-after-delete").await;
        let pod = env.run_job(ns, "restored").await;
        assert_eq!(label(&pod, "policy-rev"), None, "the default decorates");
        assert_eq!(common::env(&pod, "TFJOB_NAME").as_deref(), Some("restored"));
        assert!(
            applied(&pod).contains(&format!("{DECORATE}@")),
            "{}",
            applied(&pod)
        );
        env.until_succeeded(ns, "restored").await;
    });
}

/// A labelled policy ConfigMap outside the policy namespaces is not a policy: no status, no
/// effect.
#[test]
fn a_policy_configmap_outside_the_policy_namespaces_is_ignored() {
    with_cluster(false, "team-a", |env, ns| async move {
        let rogue = pack_in(
            decorate_with_labels(json!({"policy-rev": "rogue"})),
            module(DECORATE),
            ns,
            false,
        );
        let cm = env.create_cm(&rogue).await.name_any();
        env.settle("probe-after-rogue").await;

        let pod = env.run_job(ns, "plain").await;
        assert_eq!(label(&pod, "policy-rev"), None, "the rogue policy applied");
        assert_eq!(common::env(&pod, "TFJOB_NAME").as_deref(), Some("plain"));
        env.until_succeeded(ns, "plain").await;
        let annotations = env
            .configmaps(ns)
            .get(&cm)
            .await
            .expect("the ConfigMap exists")
            .annotations()
            .clone();
        assert!(
            !annotations.contains_key(STATUS_ANNOTATION),
            "status written on {ns}/{cm}: {annotations:?}"
        );
        let events = env.cm_events(ns, &cm).await;
        assert!(events.is_empty(), "events on {ns}/{cm}: {events:?}");
    });
}

/// Two ConfigMaps of one policy: the newer serves and the older is superseded; deleting the
/// newer rolls back to the older.
#[test]
fn the_newest_configmap_of_a_policy_serves_and_deleting_it_rolls_back() {
    with_cluster(false, "rollback", |env, ns| async move {
        let team = |rev: &str| PolicyManifest {
            name: "team-labels".into(),
            hooks: vec![Hook::Decorate],
            order: 10,
            settings: json!({"defaultLabels": {"team-rev": rev}}),
            ..PolicyManifest::default()
        };
        let wasm = module(DECORATE);
        // Named so that the name order is the opposite of the creation order.
        let older = renamed(pack_in(team("one"), wasm, POLICY_NS, true), "team-labels-b");
        let newer = renamed(pack_in(team("two"), wasm, POLICY_NS, true), "team-labels-a");

        let created = env.create_active(&older, wasm).await;
        let pod = env.run_job(ns, "first").await;
        assert_eq!(label(&pod, "team-rev"), Some("one"));
        assert_eq!(common::env(&pod, "TFJOB_NAME").as_deref(), Some("first"));

        // Creation times have a resolution of a second: make the newer one visibly newer.
        let at = created
            .metadata
            .creation_timestamp
            .expect("a creation timestamp")
            .0;
        until("the next second", WAIT, || async {
            let now = Timestamp::now();
            if now >= at + SignedDuration::from_millis(1100) {
                Ok(())
            } else {
                Err(format!("{now}"))
            }
        })
        .await;
        env.create_active(&newer, wasm).await;
        let superseded = env
            .until_status("team-labels-b", "state Superseded", |s| {
                s.state == PolicyState::Superseded
            })
            .await;
        assert!(
            superseded
                .error
                .as_deref()
                .is_some_and(|e| e.contains("tfjob-system/team-labels-a")),
            "{superseded:?}"
        );
        assert_eq!(superseded.digest.as_deref(), Some(digest(wasm).as_str()));
        env.until_cm_event("team-labels-b", "PolicySuperseded", "team-labels-a")
            .await;
        let pod = env.run_job(ns, "second").await;
        assert_eq!(label(&pod, "team-rev"), Some("two"));

        env.delete_cm(POLICY_NS, "team-labels-a").await;
        env.until_active("team-labels-b", &digest(wasm)).await;
        // Active, superseded, active again: the second PolicyActive repeats the first.
        until("PolicyActive twice on team-labels-b", WAIT, || async {
            let events = env.cm_events(POLICY_NS, "team-labels-b").await;
            let actives: i32 = events
                .iter()
                .filter(|(r, _, _)| r == "PolicyActive")
                .map(|(_, _, n)| n)
                .sum();
            if actives >= 2 {
                Ok(())
            } else {
                Err(format!("{events:?}"))
            }
        })
        .await;
        let pod = env.run_job(ns, "third").await;
        assert_eq!(label(&pod, "team-rev"), Some("one"));
        env.until_succeeded(ns, "third").await;
    });
}

/// A `Fail` policy that never loaded holds the jobs it selects (no pods, a `PolicyFailed`
/// event saying it is not loaded) while other jobs run; once a version loads they proceed.
#[test]
fn a_fail_policy_that_never_loaded_holds_its_jobs_until_it_loads() {
    with_cluster(false, "gate", |env, ns| async move {
        let gatekeeper = PolicyManifest {
            name: "gatekeeper".into(),
            hooks: vec![Hook::Decorate],
            order: 5,
            failure_policy: FailurePolicy::Fail,
            selector: JobSelector {
                match_labels: BTreeMap::from([("gated".to_owned(), "yes".to_owned())]),
                ..JobSelector::default()
            },
            settings: json!({"defaultLabels": {"gate": "passed"}}),
            ..PolicyManifest::default()
        };
        let broken = pack(gatekeeper.clone(), CORRUPT_MODULE);
        let cm = env.create_cm(&broken).await.name_any();
        let status = env
            .until_status(&cm, "state Rejected", |s| s.state == PolicyState::Rejected)
            .await;
        let error = status.error.clone().unwrap_or_default();
        assert!(error.contains("never loaded"), "{status:?}");
        assert!(error.contains("the module does not load"), "{status:?}");
        assert_eq!(status.digest, None, "{status:?}");
        env.until_cm_event(&cm, "PolicyRejected", "never loaded")
            .await;

        env.submit(ns, "gated", &[("gated", "yes")]).await;
        env.submit(ns, "free", &[]).await;
        let note = env.until_job_event(ns, "gated", "PolicyFailed").await;
        assert!(
            note.contains("gatekeeper") && note.contains("not loaded"),
            "{note}"
        );
        // The free job runs to the end; by then the gated one has been looked at too.
        env.until_succeeded(ns, "free").await;
        let pod = env.until_pod(ns, "free").await;
        assert_eq!(label(&pod, "gate"), None);
        let held = env
            .pods(ns)
            .list(&ListParams::default().labels(&format!("{JOB_NAME}=gated")))
            .await
            .expect("listing pods")
            .items;
        assert!(held.is_empty(), "the gated job has pods");
        let events = env.events_of(ns, "free").await;
        assert!(
            !events.iter().any(|(_, r, _)| r.starts_with("Policy")),
            "{events:?}"
        );

        let fixed_at = Instant::now();
        env.update_cm(&pack(gatekeeper, module(DECORATE))).await;
        env.until_active(&cm, &digest(module(DECORATE))).await;
        let pod = env.until_pod(ns, "gated").await;
        println!(
            "the gated job got its pod {:?} after the policy was fixed",
            fixed_at.elapsed()
        );
        assert_eq!(label(&pod, "gate"), Some("passed"));
        assert!(applied(&pod).contains("gatekeeper@"), "{}", applied(&pod));
        env.until_succeeded(ns, "gated").await;
    });
}

// ---------------------------------------------------------------------------------------------
// The sandbox against hostile ConfigMaps, and namespaced policies

/// A ConfigMap of the hostile test policy for `hooks` in `settings`.
fn hostile(
    name: &str,
    hooks: Vec<Hook>,
    failure_policy: FailurePolicy,
    settings: Value,
) -> ConfigMap {
    pack(
        PolicyManifest {
            name: name.to_owned(),
            hooks,
            failure_policy,
            settings,
            ..PolicyManifest::default()
        },
        defaults::HOSTILE_POLICY_WASM,
    )
}

/// A policy that declares reads of nodes and namespaces reads them through the operator: the
/// first activation starts one watch per resource, and the pod's decoration carries what the
/// policy read, from the embedded cluster's own nodes and the job's Namespace. A read of what it
/// did not declare fails the call, and under `Fail` the pod waits with the read's category.
#[test]
fn a_policy_reads_the_nodes_and_namespaces_it_declared_through_the_operator() {
    with_cluster(false, "readers", |env, ns| async move {
        let declared = |resource: &str| ReadDeclaration {
            resource: resource.into(),
            scope: None,
        };
        let mut manifest = PolicyManifest {
            name: "reader".into(),
            hooks: vec![Hook::Decorate],
            failure_policy: FailurePolicy::Fail,
            settings: json!({"mode": "read", "reads": [
                {"resource": "nodes"},
                {"resource": "namespaces", "name": ns},
            ]}),
            reads: vec![declared("nodes"), declared("namespaces")],
            ..PolicyManifest::default()
        };
        let cm = pack(manifest.clone(), defaults::HOSTILE_POLICY_WASM);
        env.create_active(&cm, defaults::HOSTILE_POLICY_WASM).await;
        let pod = env.run_job(ns, "reads").await;
        let answers: Value = serde_json::from_str(
            pod.annotations()
                .get("hostile/read")
                .expect("the decoration records what it read"),
        )
        .unwrap();
        assert_eq!(
            answers[0]["items"].as_array().map(Vec::len),
            Some(2),
            "{answers}"
        );
        assert_eq!(answers[0]["synced"], true, "{answers}");
        assert_eq!(answers[1]["object"], ns, "{answers}");
        env.until_succeeded(ns, "reads").await;

        // Another policy reads what it did not declare: refused at every call, even though it
        // ignores the error, and under `Fail` the job's pod is not created; the event says why.
        manifest.name = "denier".into();
        manifest.settings = json!({"mode": "read", "ignoreErrors": true,
                                   "reads": [{"resource": "priorityclasses", "name": "high"}]});
        let denier = renamed(pack(manifest, defaults::HOSTILE_POLICY_WASM), "denier");
        env.create_active(&denier, defaults::HOSTILE_POLICY_WASM)
            .await;
        env.submit(ns, "denied", &[]).await;
        let note = env.until_job_event(ns, "denied", "PolicyFailed").await;
        assert!(
            note.contains("priorityclasses is not among the policy's granted reads"),
            "{note}"
        );
    });
}

/// A decoration policy that sleeps in every call under `Ignore` does not stop or hold up pod
/// creation: each call ends at its deadline as a timeout, the policy is skipped with an event,
/// and every job runs to success.
#[test]
fn a_sleeping_ignored_decorator_does_not_stop_pod_creation() {
    with_cluster(false, "sleepy", |env, ns| async move {
        let cm = hostile(
            "sleepy",
            vec![Hook::Decorate],
            FailurePolicy::Ignore,
            json!({"mode": "sleep"}),
        );
        env.create_active(&cm, defaults::HOSTILE_POLICY_WASM).await;
        let jobs = ["s0", "s1", "s2", "s3", "s4", "s5"];
        for job in jobs {
            env.submit(ns, job, &[]).await;
        }
        for job in jobs {
            let pod = env.until_pod(ns, job).await;
            assert_eq!(
                common::env(&pod, "TFJOB_NAME").as_deref(),
                Some(job),
                "the defaults still decorate"
            );
            assert!(!applied(&pod).contains("sleepy@"), "{}", applied(&pod));
        }
        let note = env.until_job_event(ns, "s0", "PolicyIgnored").await;
        assert!(note.contains("timeout"), "{note}");
        for job in jobs {
            env.until_succeeded(ns, job).await;
        }
    });
}

/// A decoration policy that traps on every call trips its breaker after two pods: the next pod
/// is made without calling it (a `PolicyTripped` event on its job), and the ConfigMap's status
/// says `breaker` with a `PolicyTripped` event. A new version starts with a closed breaker:
/// the status drops `breaker` and a `PolicyRecovered` event marks it.
#[test]
fn a_policy_that_keeps_trapping_trips_and_its_configmap_says_so() {
    let tight_breakers = |o: &mut ClusterOptions| {
        let d = common::default_policies();
        o.policies = Arc::new(tfjob_operator::policy_setup::Policies {
            engine: Arc::clone(&d.engine),
            registry: Arc::clone(&d.registry),
            builtin: d.builtin.clone(),
            // Open for an hour: only a new version closes it within the test.
            breakers: BreakerConfig {
                threshold: 2,
                first_open: Duration::from_secs(3600),
                max_open: Duration::from_secs(3600),
            },
            cache_dir: None,
            loaded_budget: Arc::clone(&d.loaded_budget),
            read_cache_objects: d.read_cache_objects,
        });
    };
    with_cluster_configured(false, "tripping", tight_breakers, |env, ns| async move {
        let cm = hostile(
            "trapper",
            vec![Hook::Decorate],
            FailurePolicy::Ignore,
            json!({"mode": "panic"}),
        );
        let name = env
            .create_active(&cm, defaults::HOSTILE_POLICY_WASM)
            .await
            .name_any();
        // One job at a time, so exactly two calls trap before the third pod.
        for job in ["t0", "t1", "t2"] {
            env.submit(ns, job, &[]).await;
            let pod = env.until_pod(ns, job).await;
            assert!(!applied(&pod).contains("trapper@"), "{}", applied(&pod));
        }
        let ignored = env.until_job_event(ns, "t0", "PolicyIgnored").await;
        assert!(ignored.contains("trap"), "{ignored}");
        let note = env.until_job_event(ns, "t2", "PolicyTripped").await;
        assert!(
            note.contains("tripped after 2 consecutive trap failures"),
            "{note}"
        );
        let status = env
            .until_status(&name, "a tripped breaker", |s| s.breaker.is_some())
            .await;
        assert_eq!(status.state, PolicyState::Active);
        let breaker = status.breaker.expect("tripped");
        assert_eq!(
            (breaker.state.as_str(), breaker.category.as_str()),
            ("Tripped", "trap")
        );
        assert_eq!((breaker.failures, breaker.trips), (2, 1));
        breaker
            .retry_at
            .parse::<Timestamp>()
            .expect("retryAt is RFC 3339");
        let event = env.until_cm_event(&name, "PolicyTripped", "trap").await;
        assert!(event.contains("trapper@"), "{event}");

        // A fixed version: the same module with other settings.
        let fixed = hostile(
            "trapper",
            vec![Hook::Decorate],
            FailurePolicy::Ignore,
            json!({"mode": "ok"}),
        );
        env.update_cm(&fixed).await;
        env.until_status(&name, "no breaker", |s| s.breaker.is_none())
            .await;
        env.until_cm_event(&name, "PolicyRecovered", "closed").await;
        let pod = env.run_job(ns, "t3").await;
        assert!(applied(&pod).contains("trapper@"), "{}", applied(&pod));
    });
}

/// A policy whose `validate-settings` sleeps ends `Rejected` with a timeout, and a good policy
/// applied after it loads as usual. (Under `Ignore`: a `Fail` policy that never loaded would
/// hold the jobs it selects, as `a_fail_policy_that_never_loaded_holds_its_jobs_until_it_loads`
/// shows.)
#[test]
fn a_sleeping_validate_settings_is_rejected_and_the_next_policy_loads() {
    with_cluster(false, "settle", |env, ns| async move {
        let cm = hostile(
            "sleeps-in-settings",
            vec![Hook::Decorate],
            FailurePolicy::Ignore,
            json!({"mode": "sleep-in-settings"}),
        );
        let name = env.create_cm(&cm).await.name_any();
        let status = env
            .until_status(&name, "state Rejected", |s| {
                s.state == PolicyState::Rejected
            })
            .await;
        let error = status.error.unwrap_or_default();
        assert!(error.contains("timeout"), "{error}");
        assert!(error.contains("may not block past its deadline"), "{error}");
        let good = pack(
            decorate_with_labels(json!({"after": "sleeper"})),
            module(DECORATE),
        );
        env.create_active(&good, module(DECORATE)).await;
        let pod = env.run_job(ns, "after").await;
        assert_eq!(label(&pod, "after"), Some("sleeper"));
    });
}

/// A policy from a team's namespace shapes that team's jobs only: selecting another team's
/// namespace or replacing a built-in is refused with the reason, and its name carries the
/// namespace.
#[test]
fn a_team_namespace_policy_stays_in_its_namespace() {
    let team_a_too = |o: &mut ClusterOptions| o.policy_namespaces.push("team-a".to_owned());
    with_cluster_configured(false, "team-b", team_a_too, |env, team_b| async move {
        let team_a = "team-a";
        let labelling = |name: &str, namespaces: &[&str]| PolicyManifest {
            name: name.to_owned(),
            hooks: vec![Hook::Decorate],
            settings: json!({"defaultLabels": {"shaped-by": "team-a"}}),
            selector: JobSelector {
                namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
                ..JobSelector::default()
            },
            // Fail: a refused one must still hold no job of another namespace.
            failure_policy: FailurePolicy::Fail,
            ..PolicyManifest::default()
        };
        let own = pack_in(labelling("labels", &[]), module(DECORATE), team_a, false);
        let own = env.create_cm(&own).await.name_any();
        let status = env
            .until_status_in(team_a, &own, "state Active", |s| {
                s.state == PolicyState::Active
            })
            .await;
        assert_eq!(
            status.scope.as_deref(),
            Some("namespace:team-a"),
            "{status:?}"
        );

        // Reaching into team-b, and replacing the default decoration, are refused.
        let reaching = pack_in(
            labelling("reach", &[team_b]),
            module(DECORATE),
            team_a,
            false,
        );
        let reaching = env.create_cm(&reaching).await.name_any();
        let status = env
            .until_status_in(team_a, &reaching, "state Rejected", |s| {
                s.state == PolicyState::Rejected
            })
            .await;
        let error = status.error.unwrap_or_default();
        assert!(error.contains("selector.namespaces"), "{error}");
        assert!(error.contains("team-b"), "{error}");
        let replacing = pack_in(
            decorate_with_labels(json!({"shaped-by": "team-a-default"})),
            module(DECORATE),
            team_a,
            false,
        );
        let replacing = env.create_cm(&replacing).await.name_any();
        let status = env
            .until_status_in(team_a, &replacing, "state Rejected", |s| {
                s.state == PolicyState::Rejected
            })
            .await;
        let error = status.error.unwrap_or_default();
        assert!(error.contains("is a built-in policy"), "{error}");

        // Team a's job is shaped by its policy (and still by the defaults); team b's is not.
        let a_pod = env.run_job(team_a, "mine").await;
        assert_eq!(label(&a_pod, "shaped-by"), Some("team-a"));
        assert!(
            applied(&a_pod).contains("team-a/labels@"),
            "{}",
            applied(&a_pod)
        );
        assert_eq!(common::env(&a_pod, "TFJOB_NAME").as_deref(), Some("mine"));
        let b_pod = env.run_job(team_b, "theirs").await;
        assert_eq!(
            label(&b_pod, "shaped-by"),
            None,
            "team a's policy reached team b"
        );
        assert_eq!(common::env(&b_pod, "TFJOB_NAME").as_deref(), Some("theirs"));
        env.until_succeeded(team_a, "mine").await;
        env.until_succeeded(team_b, "theirs").await;
    });
}

/// A P-256 signing key made from `seed` (reproducible; no random source needed).
fn signing_key(seed: u8) -> SigningKey {
    use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
    let secret = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("a valid scalar");
    let pem = secret.to_pkcs8_pem(LineEnding::LF).expect("encodes");
    SigningKey::from_pem("test key", &pem).expect("a signing key")
}

/// `cm` with `policy.wasm.sig`: `key`'s signature of `wasm`.
fn signed(mut cm: ConfigMap, wasm: &[u8], key: &SigningKey) -> ConfigMap {
    configmap::set_signature(&mut cm, &key.sign(wasm));
    cm
}

/// An operator given a trusted key loads only what that key signed: a module altered after
/// signing, one signed by another key and an unsigned one are `Rejected` (an unsigned `Fail`
/// policy selecting every job holds none of them), the signed one serves and its status names
/// the key; an unsigned update of it keeps the signed version serving.
#[test]
fn with_a_trusted_key_only_policies_it_signed_load() {
    let key = signing_key(1);
    let stranger = signing_key(2);
    let mut trusted = TrustedKeys::none();
    trusted.insert(key.public_key().clone());
    let key_id = key.public_key().id().to_string();
    with_cluster_configured(
        false,
        "signed",
        move |options| options.trusted_keys = Arc::new(trusted),
        |env, ns| async move {
            let decorate = module(DECORATE);
            let good = signed(revision("signed"), decorate, &key);
            let status = env.create_active(&good, decorate).await;
            let status = env
                .until_active(&status.name_any(), &digest(decorate))
                .await;
            assert_eq!(status.signed_by.as_deref(), Some(key_id.as_str()));

            let labelling = |name: &str, failure_policy| PolicyManifest {
                name: name.to_owned(),
                hooks: vec![Hook::Decorate],
                failure_policy,
                settings: json!({"defaultLabels": {name: "applied"}}),
                ..PolicyManifest::default()
            };
            // Signed for the resources module (and pinned to it), shipping the decoration one.
            let tampered = with_module(
                signed(
                    pack(
                        labelling("tampered", FailurePolicy::Ignore),
                        module(RESOURCES),
                    ),
                    module(RESOURCES),
                    &key,
                ),
                decorate,
            );
            let foreign = signed(
                pack(labelling("foreign", FailurePolicy::Ignore), decorate),
                decorate,
                &stranger,
            );
            // Would hold every job, were an unsigned manifest heeded.
            let unsigned = pack(labelling("unsigned", FailurePolicy::Fail), decorate);
            let refused = [
                (
                    tampered,
                    "policy.wasm.sig: signature does not verify against any of 1 trusted key",
                ),
                (
                    foreign,
                    "policy.wasm.sig: signature does not verify against any of 1 trusted key",
                ),
                (unsigned, "unsigned: policy.wasm.sig is missing"),
            ];
            for (cm, cause) in &refused {
                let name = env.create_cm(cm).await.name_any();
                let status = env
                    .until_status(&name, &format!("state Rejected naming {cause:?}"), |s| {
                        s.state == PolicyState::Rejected
                    })
                    .await;
                let error = status.error.clone().unwrap_or_default();
                assert!(error.starts_with(cause), "[{name}] {status:?}");
                assert!(error.contains("never loaded"), "[{name}] {status:?}");
                assert_eq!(status.digest, None, "[{name}] {status:?}");
                assert_eq!(status.signed_by, None, "[{name}] {status:?}");
                env.until_cm_event(&name, "PolicyRejected", cause).await;
            }

            let pod = env.run_job(ns, "shaped").await;
            assert_eq!(label(&pod, "policy-rev"), Some("signed"));
            for name in ["tampered", "foreign", "unsigned"] {
                assert_eq!(label(&pod, name), None, "{name} applied");
            }
            env.until_succeeded(ns, "shaped").await;
            let events = env.events_of(ns, "shaped").await;
            assert!(
                !events.iter().any(|(_, r, _)| r.starts_with("Policy")),
                "{events:?}"
            );

            // An unsigned update of the signed policy is refused; the signed version serves on.
            let name = good.name_any();
            let manifest = &revision("unsigned-update").data.unwrap()[configmap::MANIFEST_KEY];
            // A merge patch keeps the keys it does not name: the signature is removed by name.
            let patch = json!({"data": {
                configmap::MANIFEST_KEY: manifest,
                configmap::SIGNATURE_KEY: null,
            }});
            env.configmaps(POLICY_NS)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("the signature is removed");
            let status = env
                .until_status(&name, "state Rejected", |s| {
                    s.state == PolicyState::Rejected
                })
                .await;
            let error = status.error.clone().unwrap_or_default();
            assert!(
                error.starts_with("unsigned: policy.wasm.sig is missing")
                    && error.contains("still serves"),
                "{status:?}"
            );
            assert_eq!(status.digest.as_deref(), Some(&*digest(decorate)));
            assert_eq!(status.signed_by.as_deref(), Some(key_id.as_str()));
            let pod = env.run_job(ns, "after-update").await;
            assert_eq!(label(&pod, "policy-rev"), Some("signed"));
        },
    );
}
