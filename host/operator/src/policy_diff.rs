//! `tfjob-operator policy diff`: what a candidate policy would change on a live cluster, before
//! it ships.
//!
//! Shadow mode answers that only once the policy is live, and only for new pods. Here the
//! cluster is read, never written: its TFJobs, their pods and services, and the policy
//! ConfigMaps the operator reports `Active`. The current policy set is rebuilt from those (with
//! the same loader, and confined to each ConfigMap's namespace as the operator confines it),
//! the candidate set is the same with the candidate in place (replacing a policy of its name and
//! mode, as a newer ConfigMap would), and for every job the candidate selects the real planner
//! runs twice, once per set: on the job with no pods, for the pods it would create next (a
//! restart, a new replica), and on the job as observed, for the verdict on each existing pod.
//! Nothing the planner decides is executed. A candidate the operator would refuse (it does not
//! load, a guard rejects its pod, its verdict contradicts a pod) is reported as refused, with
//! the operator's reason, because it is the same engine and the same guard.
//!
//! Policies that read the cluster read it here too, from caches filled by one list per
//! resource that either set was granted (trimmed and bounded as the operator's), so a reading
//! candidate is judged on the objects it would see; what each read shows in the report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow};
use clap::{Args, ValueEnum};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::error_boundary::DeserializeGuard;
use serde::Serialize;
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_planner::{
    Classified, PlanInput, PodContext, PodPolicies, PolicyError, Settings, ShapedPod, Verdict, plan,
};
use tfjob_policy_engine::cluster_cache::{ClusterCache, DEFAULT_OBJECT_CAP, ResourceCache};
use tfjob_policy_engine::cluster_reads::Resource;
use tfjob_policy_engine::configmap::{self, PolicyState, PolicyStatus};
use tfjob_policy_engine::field_diff;
use tfjob_policy_engine::policies::APPLIED_ANNOTATION;
use tfjob_policy_engine::read_provenance::READS_ANNOTATION;
use tfjob_policy_engine::{
    ActivePolicy, Breakers, PolicyEngine, PolicyManifest, PolicySet, Registry, WasmPolicies,
    activate,
};
use tfjob_policy_sync::read_caches;

use crate::shared::ClusterScope;

/// Differences reported per pod at most; the count says if there were more.
const MAX_FIELDS: usize = 200;

#[derive(Debug, Args)]
#[command(mut_arg("namespace", |a| a
    .required(false)
    .default_value("default")
    .help("Look at the TFJobs of this namespace")))]
#[command(mut_arg("all_namespaces", |a| a.help("Look at the TFJobs of every namespace")))]
pub struct DiffArgs {
    /// The candidate's `.wasm` component (with `--configmap`, replaces the ConfigMap's module).
    #[arg(long, value_name = "NEW.wasm", required_unless_present = "configmap")]
    pub policy: Option<PathBuf>,
    /// The candidate's manifest (`policy.yaml`) [default: named after the file, every hook it
    /// exports, `Enforce`].
    #[arg(long, value_name = "FILE", conflicts_with = "configmap")]
    pub manifest: Option<PathBuf>,
    /// A policy ConfigMap (as `policy pack` prints it) holding the candidate's manifest and,
    /// without `--policy`, its module.
    #[arg(long, value_name = "FILE")]
    pub configmap: Option<PathBuf>,
    /// The namespace the candidate's ConfigMap would be applied in: a cluster-wide policy
    /// namespace, or a team namespace whose jobs alone it may select.
    #[arg(long, default_value = "tfjob-system", value_name = "NS")]
    pub policy_namespace: String,
    /// Namespaces whose policy ConfigMaps apply to every namespace (as the operator's
    /// `--policy-cluster-namespace`) [default: tfjob-system].
    #[arg(long = "policy-cluster-namespace", value_name = "NS")]
    pub cluster_namespaces: Vec<String>,
    #[command(flatten)]
    pub scope: ClusterScope,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: DiffFormat,
}

/// Output formats of `policy diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Table,
    Json,
}

/// What the cluster holds, as read.
pub struct Observed {
    pub jobs: Vec<TFJob>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub configmaps: Vec<ConfigMap>,
    /// The objects the policies of either set may read, for their reads.
    pub cluster: Arc<ClusterCache>,
}

/// The whole answer.
#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub candidate: String,
    pub summary: Summary,
    pub jobs: Vec<JobDiff>,
}

#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// TFJobs the candidate selects.
    pub jobs_selected: usize,
    /// Of those, jobs with any difference.
    pub jobs_changed: usize,
    /// Pods to be created that the candidate shapes differently.
    pub pods_changed: usize,
    /// Existing pods the candidate classifies differently.
    pub verdicts_changed: usize,
    /// Places where the candidate would be refused (or the current set fails).
    pub refused: usize,
}

#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobDiff {
    pub namespace: String,
    pub name: String,
    pub pods: Vec<PodDiff>,
    pub verdicts: Vec<VerdictDiff>,
    pub refused: Vec<Refusal>,
}

/// A pod the operator would create, shaped by each set.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodDiff {
    pub pod: String,
    /// The policies that would shape it (`name@digest`), when they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<(String, String)>,
    /// What the policies that shaped it read (`policy.tfjob.dev/reads`), when it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<(Value, Value)>,
    pub fields: Vec<Field>,
    /// More differences than reported.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    pub path: String,
    pub current: Value,
    pub candidate: Value,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VerdictDiff {
    pub pod: String,
    pub current: Value,
    pub candidate: Value,
}

/// Something one of the sets could not decide, as the operator would report it.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// `current` or `candidate`.
    pub set: String,
    /// `shape` (the pods to create) or `classify` (the existing pods).
    pub step: String,
    pub policy: String,
    pub category: String,
    pub message: String,
}

/// Runs the subcommand: reads the cluster, compares, returns the text to print.
pub fn main(args: &DiffArgs) -> anyhow::Result<String> {
    let engine = Arc::new(PolicyEngine::new(
        tfjob_operator::policy_setup::operator_limits(),
    )?);
    let cluster_wide = cluster_namespaces(args);
    let candidate = candidate(&engine, args, &cluster_wide)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut observed = runtime.block_on(read_cluster(args))?;
    let builtin: Vec<Arc<ActivePolicy>> =
        tfjob_policy_engine::defaults::load_defaults(&engine, &Default::default())
            .context("loading the default policies")?
            .into_iter()
            .map(Arc::new)
            .collect();
    let current = current_set(&engine, &builtin, &observed.configmaps, &cluster_wide);
    let mut read = read_caches::needed(&current);
    read.extend(candidate.reads.iter().map(|g| g.resource));
    observed.cluster = runtime.block_on(read_objects(args, &read))?;
    let report = compare(&engine, current, &candidate, &observed, Timestamp::now());
    Ok(match args.output {
        DiffFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&report).expect("a report serialises")
        ),
        DiffFormat::Table => render(&report),
    })
}

fn cluster_namespaces(args: &DiffArgs) -> BTreeSet<String> {
    if args.cluster_namespaces.is_empty() {
        BTreeSet::from([tfjob_operator::operator::default_policy_namespace()])
    } else {
        args.cluster_namespaces.iter().cloned().collect()
    }
}

/// The candidate, activated as the operator would activate its ConfigMap in
/// `--policy-namespace` (confined to that namespace when it is not cluster-wide).
fn candidate(
    engine: &PolicyEngine,
    args: &DiffArgs,
    cluster_wide: &BTreeSet<String>,
) -> anyhow::Result<ActivePolicy> {
    let module = |path: &Path| {
        std::fs::read(path).with_context(|| format!("--policy: reading {}", path.display()))
    };
    let (wasm, mut manifest) = match &args.configmap {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--configmap: reading {}", file.display()))?;
            let cm: ConfigMap = serde_yaml_ng::from_str(&text)
                .with_context(|| format!("--configmap: {} is not a ConfigMap", file.display()))?;
            let source = configmap::read_configmap(&cm)
                .map_err(|e| anyhow!("--configmap: {}: {e}", file.display()))?;
            let wasm = match &args.policy {
                Some(path) => module(path)?,
                None => source.wasm.into_owned(),
            };
            let mut manifest = source.manifest;
            // A new module under the ConfigMap's manifest: its pin is the old module's.
            if args.policy.is_some() {
                manifest.sha256 = None;
            }
            (wasm, manifest)
        }
        None => {
            let path = args.policy.as_deref().expect("clap requires --policy here");
            let wasm = module(path)?;
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("candidate");
            let manifest = match &args.manifest {
                Some(file) => {
                    let text = std::fs::read_to_string(file)
                        .with_context(|| format!("--manifest: reading {}", file.display()))?;
                    PolicyManifest::from_yaml(&text, name)
                        .map_err(|e| anyhow!("--manifest: {}: {e}", file.display()))?
                }
                None => {
                    let compiled = engine
                        .compile(&wasm)
                        .map_err(|e| anyhow!("--policy: {}: {e}", path.display()))?;
                    PolicyManifest {
                        name: name.to_owned(),
                        hooks: compiled.hooks(),
                        ..PolicyManifest::default()
                    }
                }
            };
            (wasm, manifest)
        }
    };
    let scope = tfjob_policy_sync::scope::Scope::of(&args.policy_namespace, cluster_wide);
    let builtin = tfjob_policy_engine::defaults::DEFAULTS.map(|d| d.name);
    scope
        .confine(&mut manifest, builtin, cluster_wide)
        .map_err(|e| {
            anyhow!(
                "the candidate would be refused in {}: {e}",
                args.policy_namespace
            )
        })?;
    activate(engine, manifest, &wasm).map_err(|e| anyhow!("the candidate would be refused: {e}"))
}

async fn read_cluster(args: &DiffArgs) -> anyhow::Result<Observed> {
    let client = crate::shared::client(args.scope.kubeconfig.as_deref()).await?;
    type Jobs = Api<DeserializeGuard<TFJob>>;
    let scoped = |client: kube::Client| -> (Jobs, Api<Pod>, Api<Service>) {
        if args.scope.all_namespaces {
            (
                Api::all(client.clone()),
                Api::all(client.clone()),
                Api::all(client),
            )
        } else {
            (
                Api::namespaced(client.clone(), &args.scope.namespace),
                Api::namespaced(client.clone(), &args.scope.namespace),
                Api::namespaced(client, &args.scope.namespace),
            )
        }
    };
    let (jobs, pods, services) = scoped(client.clone());
    let owned = ListParams::default().labels(&format!(
        "{}={}",
        tfjob_api::labels::OPERATOR_NAME,
        tfjob_api::labels::OPERATOR_NAME_VALUE
    ));
    let policies: Api<ConfigMap> = Api::all(client);
    Ok(Observed {
        // A TFJob that does not parse is left out, as the operator leaves it (it marks it
        // failed validation); it has no pods to shape.
        jobs: jobs
            .list(&ListParams::default())
            .await
            .context("listing TFJobs")?
            .items
            .into_iter()
            .filter_map(|g| g.0.ok())
            .collect(),
        pods: pods.list(&owned).await.context("listing pods")?.items,
        services: services
            .list(&owned)
            .await
            .context("listing services")?
            .items,
        configmaps: policies
            .list(&ListParams::default().labels(configmap::POLICY_SELECTOR))
            .await
            .context("listing policy ConfigMaps")?
            .items,
        cluster: Arc::default(),
    })
}

/// Caches of `resources`, each filled by one list, as the operator's watches fill theirs. A
/// resource this identity may not list (or a Kueue resource where Kueue is not installed) is
/// left without a cache: its reads answer `unavailable`, as they would in the operator.
async fn read_objects(
    args: &DiffArgs,
    resources: &BTreeSet<Resource>,
) -> anyhow::Result<Arc<ClusterCache>> {
    let cluster = Arc::new(ClusterCache::new());
    if resources.is_empty() {
        return Ok(cluster);
    }
    let client = crate::shared::client(args.scope.kubeconfig.as_deref()).await?;
    for &resource in resources {
        let api: Api<DynamicObject> =
            Api::all_with(client.clone(), &read_caches::api_resource(resource));
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let objects = list
                    .items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).unwrap_or_default());
                cluster.insert(ResourceCache::of(resource, DEFAULT_OBJECT_CAP, objects));
            }
            Err(e) => tracing::warn!(
                %resource,
                error = %e,
                "cannot list what policies read; their reads of it answer unavailable"
            ),
        }
    }
    Ok(cluster)
}

/// The set the operator serves now: the built-in policies and the ConfigMaps it reports
/// `Active` (reloaded here, confined to their namespace), newest first per name and mode as the
/// operator composes them.
pub fn current_set(
    engine: &PolicyEngine,
    builtin: &[Arc<ActivePolicy>],
    configmaps: &[ConfigMap],
    cluster_wide: &BTreeSet<String>,
) -> PolicySet {
    let mut active: Vec<&ConfigMap> = configmaps
        .iter()
        .filter(|cm| {
            matches!(
                PolicyStatus::of(cm),
                Some(Ok(PolicyStatus {
                    state: PolicyState::Active,
                    ..
                }))
            )
        })
        .collect();
    active.sort_by_key(|cm| {
        (
            cm.metadata.creation_timestamp.clone().map(|t| t.0),
            cm.metadata.namespace.clone(),
            cm.metadata.name.clone(),
        )
    });
    let names = builtin
        .iter()
        .map(|p| p.name().to_owned())
        .collect::<Vec<_>>();
    let mut policies: Vec<Arc<ActivePolicy>> = builtin.to_vec();
    for cm in active {
        let ns = cm.metadata.namespace.clone().unwrap_or_default();
        let scope = tfjob_policy_sync::scope::Scope::of(&ns, cluster_wide);
        let loaded = configmap::read_configmap(cm)
            .map_err(|e| e.to_string())
            .and_then(|mut source| {
                scope.confine(
                    &mut source.manifest,
                    names.iter().map(String::as_str),
                    cluster_wide,
                )?;
                configmap::activate_source(engine, source).map_err(|e| e.to_string())
            });
        match loaded {
            // Later (newer) entries replace earlier ones of the same name and mode.
            Ok(p) => policies.push(Arc::new(p)),
            Err(e) => tracing::warn!(
                configmap = %format!("{ns}/{}", cm.metadata.name.as_deref().unwrap_or_default()),
                error = %e,
                "a ConfigMap the operator reports Active does not load here; left out"
            ),
        }
    }
    PolicySet::with_unavailable(policies, Vec::new())
}

/// Compares `current` with `current` plus `candidate` on every job the candidate selects.
pub fn compare(
    engine: &Arc<PolicyEngine>,
    current: PolicySet,
    candidate: &ActivePolicy,
    observed: &Observed,
    now: Timestamp,
) -> Report {
    let with_candidate = PolicySet::with_unavailable(
        current
            .all()
            .iter()
            .cloned()
            .chain([Arc::new(ActivePolicy::clone(candidate))]),
        current.unavailable().to_vec(),
    );
    // No breakers: every pod is evaluated, so a failing candidate is counted on each with its
    // own failure, not stopped after a few as in the operator.
    let seam = |set: PolicySet| {
        WasmPolicies::new(Arc::clone(engine), Arc::new(Registry::new(set)))
            .with_breakers(Breakers::disabled())
            .with_cluster(Arc::clone(&observed.cluster))
    };
    let (current, proposed) = (seam(current), seam(with_candidate));
    let mut report = Report {
        candidate: candidate.label(),
        ..Report::default()
    };
    let mut jobs: Vec<&TFJob> = observed
        .jobs
        .iter()
        .filter(|job| {
            let ns = job.metadata.namespace.clone().unwrap_or_default();
            let labels = job.metadata.labels.clone().unwrap_or_default();
            candidate.manifest.selector.matches(&ns, &labels)
        })
        .collect();
    jobs.sort_by_key(|j| (j.metadata.namespace.clone(), j.metadata.name.clone()));
    for job in jobs {
        report.summary.jobs_selected += 1;
        let diff = job_diff(job, observed, &current, &proposed, now);
        report.summary.pods_changed += diff.pods.len();
        report.summary.verdicts_changed += diff.verdicts.len();
        report.summary.refused += diff.refused.len();
        if !(diff.pods.is_empty() && diff.verdicts.is_empty() && diff.refused.is_empty()) {
            report.summary.jobs_changed += 1;
            report.jobs.push(diff);
        }
    }
    report
}

fn job_diff(
    job: &TFJob,
    observed: &Observed,
    current: &dyn PodPolicies,
    proposed: &dyn PodPolicies,
    now: Timestamp,
) -> JobDiff {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let owned_by_job =
        |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        };
    let pods: Vec<Pod> = observed
        .pods
        .iter()
        .filter(|p| owned_by_job(&p.metadata.owner_references))
        .cloned()
        .collect();
    let services: Vec<Service> = observed
        .services
        .iter()
        .filter(|s| owned_by_job(&s.metadata.owner_references))
        .cloned()
        .collect();
    let mut diff = JobDiff {
        namespace: job.metadata.namespace.clone().unwrap_or_default(),
        name: job.metadata.name.clone().unwrap_or_default(),
        ..JobDiff::default()
    };
    // The pods it would create next: the planner on the job with nothing observed.
    let fresh = |policies: &dyn PodPolicies, set: &str, refused: &mut Vec<Refusal>| {
        let recorder = Recorder::new(policies);
        let _ = run_planner(job, &[], &[], &recorder, now, set, refused);
        recorder.shaped()
    };
    let mut refused = Vec::new();
    let before = fresh(current, "current", &mut refused);
    let after = fresh(proposed, "candidate", &mut refused);
    for (name, a) in &before {
        let Some(b) = after.get(name) else { continue };
        if let Some(pod) = pod_diff(name, a, b) {
            diff.pods.push(pod);
        }
    }
    // The verdicts on the pods that exist: the planner on the job as observed.
    let classified = |policies: &dyn PodPolicies, set: &str, refused: &mut Vec<Refusal>| {
        let recorder = Recorder::new(policies);
        let _ = run_planner(job, &pods, &services, &recorder, now, set, refused);
        recorder.verdicts()
    };
    let before = classified(current, "current", &mut refused);
    let after = classified(proposed, "candidate", &mut refused);
    for (pod, a) in &before {
        let Some(b) = after.get(pod) else { continue };
        let (a, b) = (verdict_json(a), verdict_json(b));
        if a != b {
            diff.verdicts.push(VerdictDiff {
                pod: pod.clone(),
                current: a,
                candidate: b,
            });
        }
    }
    // The same refusal seen by both runs of a set is one refusal.
    refused.dedup();
    diff.refused = refused;
    diff
}

fn run_planner(
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    policies: &dyn PodPolicies,
    now: Timestamp,
    set: &str,
    refused: &mut Vec<Refusal>,
) -> Option<tfjob_planner::Plan> {
    let input = PlanInput {
        job,
        pods,
        services,
        now,
        settings: &Settings::default(),
        policies,
        pod_group: None,
        priority_classes: &BTreeMap::new(),
        kueue: None,
    };
    match plan(&input) {
        Ok(p) => Some(p),
        Err(tfjob_planner::PlanError::Policy(e)) => {
            refused.push(refusal(set, &e, pods.is_empty()));
            None
        }
    }
}

fn refusal(set: &str, e: &PolicyError, shaping: bool) -> Refusal {
    Refusal {
        set: set.to_owned(),
        step: if shaping { "shape" } else { "classify" }.to_owned(),
        policy: e.policy.clone(),
        category: e.category.as_str().to_owned(),
        message: e.message.clone(),
    }
}

/// The differences between the pod shaped by the current set and by the candidate's, the
/// annotation naming the policies reported on its own.
fn pod_diff(name: &str, a: &ShapedPod, b: &ShapedPod) -> Option<PodDiff> {
    let reads_of = |p: &ShapedPod| {
        p.pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(READS_ANNOTATION))
            .map_or(Value::Null, |text| {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
            })
    };
    let strip = |p: &ShapedPod| {
        let mut v = serde_json::to_value(&p.pod).unwrap_or(Value::Null);
        if let Some(annotations) = v
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(APPLIED_ANNOTATION);
            annotations.remove(READS_ANNOTATION);
            if annotations.is_empty()
                && let Some(meta) = v.pointer_mut("/metadata").and_then(Value::as_object_mut)
            {
                meta.remove("annotations");
            }
        }
        v
    };
    let mut fields = field_diff::differences(&strip(a), &strip(b), MAX_FIELDS + 1);
    let truncated = fields.len() > MAX_FIELDS;
    fields.truncate(MAX_FIELDS);
    let policies = (a.applied != b.applied).then(|| (a.applied.join(","), b.applied.join(",")));
    let reads = Some((reads_of(a), reads_of(b))).filter(|(a, b)| a != b);
    if fields.is_empty() && policies.is_none() {
        return None;
    }
    Some(PodDiff {
        pod: name.to_owned(),
        policies,
        reads,
        fields: fields
            .into_iter()
            .map(|d| Field {
                path: d.path,
                current: d.a,
                candidate: d.b,
            })
            .collect(),
        truncated,
    })
}

fn verdict_json(v: &Verdict) -> Value {
    // Who decided is part of the answer; when to look again is not.
    let mut out = serde_json::to_value(v).unwrap_or(Value::Null);
    if let Some(m) = out.as_object_mut() {
        m.remove("recheckAt");
        m.insert("policy".into(), json!(v.policy));
    }
    out
}

/// The policies behind the planner, recording what they decided.
struct Recorder<'a> {
    inner: &'a dyn PodPolicies,
    shaped: Mutex<BTreeMap<String, ShapedPod>>,
    verdicts: Mutex<BTreeMap<String, Verdict>>,
}

impl<'a> Recorder<'a> {
    fn new(inner: &'a dyn PodPolicies) -> Recorder<'a> {
        Recorder {
            inner,
            shaped: Mutex::default(),
            verdicts: Mutex::default(),
        }
    }

    fn shaped(self) -> BTreeMap<String, ShapedPod> {
        self.shaped.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    fn verdicts(self) -> BTreeMap<String, Verdict> {
        self.verdicts
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl PodPolicies for Recorder<'_> {
    fn shape_pod(&self, ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError> {
        let shaped = self.inner.shape_pod(ctx, pod)?;
        let name = shaped.pod.metadata.name.clone().unwrap_or_default();
        self.shaped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, shaped.clone());
        Ok(shaped)
    }

    fn classify(
        &self,
        ctx: &PodContext,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<Classified, PolicyError> {
        let classified = self.inner.classify(ctx, pod, now)?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.verdicts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, classified.verdict.clone());
        Ok(classified)
    }
}

/// The report as text: the summary first, then each job.
pub fn render(report: &Report) -> String {
    let s = &report.summary;
    let mut out = format!(
        "candidate {}: {} jobs selected, {} would change: {} pods shaped differently, {} verdicts differ, {} refusals\n",
        report.candidate,
        s.jobs_selected,
        s.jobs_changed,
        s.pods_changed,
        s.verdicts_changed,
        s.refused
    );
    for job in &report.jobs {
        out.push_str(&format!("\n{}/{}\n", job.namespace, job.name));
        for pod in &job.pods {
            out.push_str(&format!("  pod {} (to be created)\n", pod.pod));
            if let Some((a, b)) = &pod.policies {
                out.push_str(&format!("    policies: {a} -> {b}\n"));
            }
            if let Some((a, b)) = &pod.reads {
                out.push_str(&format!("    reads: {a} -> {b}\n"));
            }
            for f in &pod.fields {
                out.push_str(&format!(
                    "    {}: {} -> {}\n",
                    f.path, f.current, f.candidate
                ));
            }
            if pod.truncated {
                out.push_str(&format!("    (more than {MAX_FIELDS} differences)\n"));
            }
        }
        for v in &job.verdicts {
            out.push_str(&format!(
                "  pod {} verdict: {} -> {}\n",
                v.pod,
                verdict_line(&v.current),
                verdict_line(&v.candidate)
            ));
        }
        for r in &job.refused {
            out.push_str(&format!(
                "  refused ({} set, {}): policy {} ({}): {}\n",
                r.set, r.step, r.policy, r.category, r.message
            ));
        }
    }
    out
}

fn verdict_line(v: &Value) -> String {
    let text = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut line = text("phase");
    for k in ["reason", "kind"] {
        if !text(k).is_empty() {
            line.push_str(&format!(" {}", text(k)));
        }
    }
    format!("{line} [{}]", text("policy"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_annotation_is_reported_apart_from_the_fields() {
        let pod = |labels: Value, applied: &str| ShapedPod {
            pod: serde_json::from_value(json!({"metadata": {"name": "w-0", "labels": labels,
                "annotations": {APPLIED_ANNOTATION: applied}}}))
            .unwrap(),
            applied: applied.split(',').map(str::to_owned).collect(),
            skipped: Vec::new(),
            notes: Vec::new(),
        };
        let a = pod(json!({"app": "x"}), "default-decorate@aaa");
        let b = pod(
            json!({"app": "x", "team": "vision"}),
            "default-decorate@aaa,what-if@bbb",
        );
        let d = pod_diff("w-0", &a, &b).unwrap();
        assert_eq!(
            d.policies,
            Some((
                "default-decorate@aaa".into(),
                "default-decorate@aaa,what-if@bbb".into()
            ))
        );
        assert_eq!(d.fields.len(), 1);
        assert_eq!(d.fields[0].path, "metadata.labels.team");
        assert_eq!(d.fields[0].candidate, json!("vision"));
        assert!(pod_diff("w-0", &a, &a).is_none());
    }
}
