//! The planner's policy seam implemented with Wasm policies.
//!
//! `shape_pod` runs the decoration policies (each checked by the guard against its allowed
//! paths), then the resource policies on every container, then records which policies shaped
//! the pod. `classify` asks the classification policies in order, and
//! checks each verdict against the pod ([`crate::verdict_guard`]). Each call is one of
//! [`crate::hook_call`]'s, as `policy test` makes it; this module adds what a running operator
//! needs around the calls. Only `Enforce` policies whose
//! selector matches the job take part, each call within the policy's own deadline and memory
//! cap. A failing policy follows its failure policy: `Fail` stops the reconcile, `Ignore` skips
//! it for that pod; a configured policy that never loaded is treated the same way.
//!
//! `Shadow` policies run beside the enforced ones on the same inputs (the input their enforced
//! namesake saw, or the final pod when there is none) and never change the pod or the verdict;
//! every difference becomes a note (an event on the job) and a metric.
//!
//! Every call goes through the policy's circuit breaker ([`crate::breaker`]): a policy that
//! failed again and again is not called until its open period ends, and the refusal is a
//! failure of category `tripped` under the policy's failure policy, with a `PolicyTripped` note
//! for the job.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use tfjob_planner::native::NativePolicies;
use tfjob_planner::{
    Classified, PodContext, PodPolicies, PolicyError, PolicyNote, ShapedPod, Verdict,
};
use tfjob_policy_logic::text;

use crate::bindings;
use crate::breaker::Breakers;
use crate::cluster_access::ReadJournal;
use crate::cluster_cache::ClusterCache;
use crate::engine::{Hook, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::field_diff::{self, FieldDifference};
use crate::hook_call::{self, Caller, Observed};
use crate::metrics::PolicyMetrics;
use crate::read_provenance::{self, PolicyReads};
use crate::registry::{ActivePolicy, FailurePolicy, PolicyMode, PolicySet, Registry};
use crate::verdict_cache::{VerdictCache, VerdictKey};

/// Annotation listing the policies (`name@short-digest`, comma-separated) that shaped a pod.
pub const APPLIED_ANNOTATION: &str = "policy.tfjob.dev/policies";

/// Wasm policies behind the planner's seam.
pub struct WasmPolicies {
    engine: Arc<PolicyEngine>,
    registry: Arc<Registry>,
    metrics: Option<PolicyMetrics>,
    /// Used only when every classification policy failed under `Ignore`, so a pod is never
    /// left unclassified.
    fallback: NativePolicies,
    /// Verdicts of unchanged pods, shared by every pinned view of these policies.
    verdicts: Arc<Mutex<VerdictCache>>,
    /// The policies' circuit breakers, shared by every pinned view too: a failure counts
    /// whichever reconcile saw it.
    breakers: Breakers,
    /// The cluster objects policies that declared reads are answered from.
    cluster: Arc<ClusterCache>,
}

/// What `p` read, from the journal of its call, if anything.
fn policy_reads(p: &ActivePolicy, journal: &ReadJournal) -> Option<PolicyReads> {
    let records = std::mem::take(&mut *journal.lock().unwrap_or_else(|e| e.into_inner()));
    (!records.is_empty()).then(|| PolicyReads {
        policy: p.label(),
        reads: records,
    })
}

/// Event reason of the note a job gets when a policy was not called because it is tripped.
pub const TRIPPED_REASON: &str = "PolicyTripped";

impl WasmPolicies {
    pub fn new(engine: Arc<PolicyEngine>, registry: Arc<Registry>) -> WasmPolicies {
        WasmPolicies {
            engine,
            registry,
            metrics: None,
            fallback: NativePolicies::default(),
            verdicts: Arc::default(),
            breakers: Breakers::default(),
            cluster: Arc::default(),
        }
    }

    /// Uses `breakers` (shared with whoever else holds a clone, e.g. the policy sync reporting
    /// them) instead of breakers of its own with the default settings.
    /// Answers the cluster reads of policies from `cluster` (the operator's shared caches).
    pub fn with_cluster(mut self, cluster: Arc<ClusterCache>) -> WasmPolicies {
        self.cluster = cluster;
        self
    }

    /// Where the policies' calls run.
    fn caller(&self) -> Caller<'_> {
        Caller::new(&self.engine, &self.cluster)
    }

    /// The caller for `p`, writing what it reads into `journal` when it may read.
    fn recording<'a>(&'a self, p: &ActivePolicy, journal: &'a ReadJournal) -> Caller<'a> {
        Caller {
            journal: (!p.reads.is_empty()).then_some(journal),
            ..self.caller()
        }
    }

    pub fn with_breakers(mut self, breakers: Breakers) -> WasmPolicies {
        if let Some(m) = &self.metrics {
            breakers.set_metrics(m.clone());
        }
        self.breakers = breakers;
        self
    }

    pub fn breakers(&self) -> &Breakers {
        &self.breakers
    }

    /// How many verdicts the cache holds.
    pub fn cached_verdicts(&self) -> usize {
        self.cache().len()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, VerdictCache> {
        // A panic while holding it cannot leave a half-written entry: keep serving.
        self.verdicts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records every evaluation in `metrics`.
    pub fn with_metrics(mut self, metrics: PolicyMetrics) -> WasmPolicies {
        self.breakers.set_metrics(metrics.clone());
        self.metrics = Some(metrics);
        self
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }
}

/// The enforced pipeline's input and output at one policy, for comparing a shadow of the same
/// name on the same input.
struct Step {
    name: String,
    input: serde_json::Value,
    output: serde_json::Value,
}

impl WasmPolicies {
    /// Runs one evaluation of `p` if its breaker lets it, recording its metrics and its
    /// outcome in the breaker.
    fn measured<T>(
        &self,
        p: &ActivePolicy,
        hook: Hook,
        eval: impl FnOnce() -> Result<T, EvalError>,
    ) -> Result<T, EvalError> {
        let ticket = match self.breakers.admit(p) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                if let Some(m) = &self.metrics {
                    m.refused(p.name(), hook, p.manifest.mode);
                }
                let retry_at = self.breakers.wall(refusal.retry_at);
                return Err(EvalError::new(
                    Category::Tripped,
                    refusal.message(&p.label(), retry_at),
                ));
            }
        };
        // The first calls of a policy version run from its plain component while the copy
        // pre-initialised for its settings is made; later calls run from the copy.
        self.engine
            .prepare_in_background(&p.compiled, p.name(), &p.settings, p.limits.clone());
        let started = Instant::now();
        let result = eval();
        let error = result.as_ref().err().map(|e| e.category);
        if let Some(m) = &self.metrics {
            m.evaluated(p.name(), hook, p.manifest.mode, started.elapsed(), error);
        }
        self.breakers.record(p, &ticket, error);
        result
    }

    /// Fails (under `Fail`) or notes (under `Ignore`) the configured policies that never loaded
    /// and would run for `hook` on this job.
    fn check_unavailable(
        &self,
        set: &PolicySet,
        hook: Hook,
        ctx: &PodContext,
        notes: &mut Vec<PolicyNote>,
    ) -> Result<(), PolicyError> {
        for u in set.unavailable_for(hook, &ctx.namespace, &ctx.job_labels) {
            if let Some(m) = &self.metrics {
                m.unavailable(&u.manifest.name, hook);
            }
            let message = format!(
                "policy {} from {} is configured but not loaded: {}",
                u.manifest.name, u.source, u.error
            );
            if u.manifest.failure_policy == FailurePolicy::Fail {
                return Err(PolicyError {
                    policy: u.manifest.name.clone(),
                    category: Category::Unavailable,
                    message: format!("{message}; waiting for a version that loads"),
                });
            }
            notes.push(PolicyNote {
                policy: u.manifest.name.clone(),
                reason: "PolicyNotLoaded".into(),
                message: format!("{message}; ignored as configured"),
                warning: true,
                key: format!("unavailable/{hook}"),
            });
        }
        Ok(())
    }

    /// Evaluates the shadow policies of a shaping hook on the inputs their enforced namesakes
    /// saw (or, without one, on the final pod) and notes every difference.
    fn shadow_shaping(
        &self,
        set: &PolicySet,
        hook: Hook,
        (ctx, wit_ctx): (&PodContext, &bindings::JobContext),
        steps: &[Step],
        current: &serde_json::Value,
        notes: &mut Vec<PolicyNote>,
    ) {
        for p in set.shadowing(hook, &ctx.namespace, &ctx.job_labels) {
            let (input, expected) = match steps.iter().find(|s| s.name == p.name()) {
                Some(step) => (&step.input, &step.output),
                None => (current, current),
            };
            let result = self.measured(p, hook, || match hook {
                Hook::Decorate => hook_call::decorate(self.caller(), p, wit_ctx, input),
                _ => {
                    let mut candidate = input.clone();
                    hook_call::resources_of_pod(self.caller(), p, wit_ctx, &mut candidate)
                        .map(|()| candidate)
                }
            });
            let key = format!("shadow/{hook}/{}", ctx.replica_type);
            match result {
                Ok(output) => {
                    // The first few places: an event message is one line.
                    let diffs = field_diff::differences(expected, &output, 5);
                    if diffs.is_empty() {
                        continue;
                    }
                    if let Some(m) = &self.metrics {
                        m.disagreed(p.name(), hook);
                    }
                    notes.push(PolicyNote {
                        policy: p.label(),
                        reason: "PolicyShadowDisagreement".into(),
                        message: format!(
                            "shadow policy {} would shape {} pods differently at {} (enforced: {}; shadow: {})",
                            p.label(),
                            ctx.replica_type,
                            join(&diffs, |d| d.path.clone()),
                            join(&diffs, |d| compact(&d.a)),
                            join(&diffs, |d| compact(&d.b)),
                        ),
                        warning: false,
                        key,
                    });
                }
                Err(e) if e.category == Category::Tripped => notes.push(tripped_note(p, &e)),
                Err(e) => notes.push(PolicyNote {
                    policy: p.label(),
                    reason: "PolicyShadowFailed".into(),
                    message: format!("shadow policy {} failed: {e}", p.label()),
                    warning: true,
                    key,
                }),
            }
        }
    }
}

/// The note a job gets when `p` was not called because its breaker is open: once per job and
/// policy version (the planner keys notes by both), not once per pod. The key differs from
/// the `<policy>/<category>` the planner gives the `PolicyIgnored` event of the same refusal,
/// so neither event hides the other.
fn tripped_note(p: &ActivePolicy, e: &EvalError) -> PolicyNote {
    PolicyNote {
        policy: p.label(),
        reason: TRIPPED_REASON.into(),
        message: match p.manifest.mode {
            PolicyMode::Enforce => format!("{}; skipped as its failure policy says", e.message),
            PolicyMode::Shadow => format!("shadow {}", e.message),
        },
        warning: true,
        key: match p.manifest.mode {
            PolicyMode::Enforce => "breaker-open".into(),
            PolicyMode::Shadow => "shadow/breaker-open".into(),
        },
    }
}

fn join(diffs: &[FieldDifference], part: impl Fn(&FieldDifference) -> String) -> String {
    diffs.iter().map(part).collect::<Vec<_>>().join(", ")
}

/// A JSON value in at most 120 characters, for an event message.
fn compact(value: &serde_json::Value) -> String {
    let text = value.to_string();
    if text.len() > 120 {
        format!("{}...", text::prefix(&text, 117))
    } else {
        text
    }
}

/// A verdict as a short text for comparing and reporting.
fn verdict_text(v: &Verdict) -> String {
    let mut text = format!("{:?}", v.phase);
    if !v.reason.is_empty() {
        text.push('/');
        text.push_str(&v.reason);
    }
    if let Some(kind) = v.kind {
        text.push_str(&format!(" ({kind:?})"));
    }
    text
}

impl PodPolicies for WasmPolicies {
    fn call_bound(&self) -> Option<std::time::Duration> {
        Some(self.engine.limits().call_bound())
    }

    fn pinned(&self) -> Option<Box<dyn PodPolicies>> {
        Some(Box::new(WasmPolicies {
            engine: Arc::clone(&self.engine),
            registry: Arc::new(Registry::fixed(self.registry.snapshot())),
            metrics: self.metrics.clone(),
            fallback: NativePolicies::default(),
            verdicts: Arc::clone(&self.verdicts),
            breakers: self.breakers.clone(),
            cluster: Arc::clone(&self.cluster),
        }))
    }

    fn shape_pod(&self, ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError> {
        let set = self.registry.snapshot();
        let wit_ctx = hook_call::job_context(ctx);
        let mut notes = Vec::new();
        self.check_unavailable(&set, Hook::Decorate, ctx, &mut notes)?;
        self.check_unavailable(&set, Hook::Resources, ctx, &mut notes)?;
        let mut current = serde_json::to_value(&pod).map_err(|e| PolicyError {
            policy: "operator".into(),
            category: Category::InvalidOutput,
            message: format!("pod does not serialise: {e}"),
        })?;
        let mut applied = Vec::new();
        let mut skipped = Vec::new();
        // Notes of enforced policies not called because they are tripped; added after the
        // shadows' notes (which the closure below cannot share).
        let mut tripped = Vec::new();
        let mut outcome = |p: &ActivePolicy,
                           result: Result<(), EvalError>|
         -> Result<(), PolicyError> {
            match result {
                Ok(()) => {
                    applied.push(p.label());
                    Ok(())
                }
                Err(e) if p.manifest.failure_policy == FailurePolicy::Ignore => {
                    if e.category == Category::Tripped {
                        tripped.push(tripped_note(p, &e));
                    } else {
                        tracing::warn!(policy = %p.label(), error = %e, "policy failed; ignored as configured");
                    }
                    skipped.push(e.for_policy(&p.label()));
                    Ok(())
                }
                Err(e) => Err(e.for_policy(&p.label())),
            }
        };
        let shadows = |hook| {
            set.shadowing(hook, &ctx.namespace, &ctx.job_labels)
                .next()
                .is_some()
        };
        // The enforced steps are kept only when a shadow policy needs them for comparison.
        let (keep_decorate, keep_resources) = (shadows(Hook::Decorate), shadows(Hook::Resources));
        let mut steps = Vec::new();
        // What the policies that shaped the pod read, for its provenance.
        let mut reads = Vec::new();
        for p in set.enforced(Hook::Decorate, &ctx.namespace, &ctx.job_labels) {
            let journal = ReadJournal::default();
            let result = self.measured(p, Hook::Decorate, || {
                hook_call::decorate(self.recording(p, &journal), p, &wit_ctx, &current)
            });
            if result.is_ok() {
                reads.extend(policy_reads(p, &journal));
            }
            let result = result.map(|out| {
                if keep_decorate {
                    steps.push(Step {
                        name: p.name().to_owned(),
                        input: current.clone(),
                        output: out.clone(),
                    });
                }
                current = out;
            });
            outcome(p, result)?;
        }
        if keep_decorate {
            self.shadow_shaping(
                &set,
                Hook::Decorate,
                (ctx, &wit_ctx),
                &steps,
                &current,
                &mut notes,
            );
            steps.clear();
        }
        for p in set.enforced(Hook::Resources, &ctx.namespace, &ctx.job_labels) {
            let mut candidate = current.clone();
            let journal = ReadJournal::default();
            let result = self.measured(p, Hook::Resources, || {
                hook_call::resources_of_pod(
                    self.recording(p, &journal),
                    p,
                    &wit_ctx,
                    &mut candidate,
                )
            });
            if result.is_ok() {
                reads.extend(policy_reads(p, &journal));
            }
            let result = result.map(|()| {
                if keep_resources {
                    steps.push(Step {
                        name: p.name().to_owned(),
                        input: current.clone(),
                        output: candidate.clone(),
                    });
                }
                current = candidate;
            });
            outcome(p, result)?;
        }
        if keep_resources {
            self.shadow_shaping(
                &set,
                Hook::Resources,
                (ctx, &wit_ctx),
                &steps,
                &current,
                &mut notes,
            );
        }
        notes.append(&mut tripped);
        let mut shaped: Pod = serde_json::from_value(current).map_err(|e| PolicyError {
            policy: applied.join(","),
            category: Category::InvalidOutput,
            message: format!("the policies' pod is not a valid Pod: {e}"),
        })?;
        // Only the operator says what was read: a template's copy of the annotation goes.
        if let Some(annotations) = &mut shaped.metadata.annotations {
            annotations.remove(read_provenance::READS_ANNOTATION);
        }
        if !applied.is_empty() {
            let annotations = shaped
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            annotations.insert(APPLIED_ANNOTATION.to_owned(), applied.join(","));
            if let Some(text) = read_provenance::annotation(&reads) {
                annotations.insert(read_provenance::READS_ANNOTATION.to_owned(), text);
            }
        }
        Ok(ShapedPod {
            pod: shaped,
            applied,
            skipped,
            notes,
        })
    }

    fn classify(
        &self,
        ctx: &PodContext,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<Classified, PolicyError> {
        let set = self.registry.snapshot();
        let mut notes = Vec::new();
        self.check_unavailable(&set, Hook::Classify, ctx, &mut notes)?;
        // A configured policy that never loaded has something to say every time, and a policy
        // that reads the cluster decides on objects the pod's version does not cover: no reuse.
        let mut reusable = notes.is_empty()
            && set
                .enforced(Hook::Classify, &ctx.namespace, &ctx.job_labels)
                .chain(set.shadowing(Hook::Classify, &ctx.namespace, &ctx.job_labels))
                .all(|p| p.reads.is_empty());
        let key = match (&pod.metadata.uid, &pod.metadata.resource_version) {
            (Some(uid), Some(rv)) if reusable => {
                let policies = set
                    .enforced(Hook::Classify, &ctx.namespace, &ctx.job_labels)
                    .chain(set.shadowing(Hook::Classify, &ctx.namespace, &ctx.job_labels))
                    .map(|p| p.fingerprint().to_owned())
                    .collect();
                let mut cache = self.cache();
                let key = VerdictKey {
                    resource_version: rv.clone(),
                    policies,
                    context: cache.context_hash(ctx),
                };
                if let Some(hit) = cache.get(uid, &key, now) {
                    if let Some(m) = &self.metrics {
                        m.reused();
                    }
                    // No policy is called: the trace says so in the reconcile's span.
                    let pod_name = pod.metadata.name.as_deref();
                    tracing::event!(
                        target: tfjob_planner::SPAN_TARGET,
                        tracing::Level::DEBUG,
                        k8s.pod.name = pod_name,
                        cache_hit = true,
                        "classification reused: the pod and its policies are unchanged"
                    );
                    return Ok(hit);
                }
                Some((uid.clone(), key))
            }
            _ => None,
        };
        let wit_ctx = hook_call::job_context(ctx);
        let json = Observed::encode(pod).map_err(|e| e.for_policy("operator"))?;
        let observed = Observed {
            pod,
            json: &json,
            now,
        };
        let run = |p: &ActivePolicy| {
            self.measured(p, Hook::Classify, || {
                hook_call::classify(self.caller(), p, &wit_ctx, &observed)
            })
        };
        let mut decided = None;
        for p in set.enforced(Hook::Classify, &ctx.namespace, &ctx.job_labels) {
            match run(p) {
                Ok(v) => {
                    decided = Some(v);
                    break;
                }
                Err(e) if p.manifest.failure_policy == FailurePolicy::Ignore => {
                    if e.category == Category::Tripped {
                        notes.push(tripped_note(p, &e));
                    } else {
                        tracing::warn!(policy = %p.label(), error = %e, "classification policy failed; ignored as configured");
                    }
                    // The failure may pass (a timeout under load, a breaker closing): decide
                    // afresh next time.
                    reusable = false;
                }
                Err(e) => return Err(e.for_policy(&p.label())),
            }
        }
        let verdict = match decided {
            Some(v) => v,
            None => self.fallback.classify(ctx, pod, now)?.verdict,
        };
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for p in set.shadowing(Hook::Classify, &ctx.namespace, &ctx.job_labels) {
            match run(p) {
                Ok(shadow) => {
                    let (enforced_text, shadow_text) =
                        (verdict_text(&verdict), verdict_text(&shadow));
                    if enforced_text == shadow_text {
                        continue;
                    }
                    if let Some(m) = &self.metrics {
                        m.disagreed(p.name(), Hook::Classify);
                    }
                    notes.push(PolicyNote {
                        policy: p.label(),
                        reason: "PolicyShadowDisagreement".into(),
                        message: format!(
                            "shadow policy {} classifies pod {pod_name} as {shadow_text}; enforced {}: {enforced_text}",
                            p.label(),
                            if verdict.policy.is_empty() { "decision" } else { verdict.policy.as_str() },
                        ),
                        warning: false,
                        key: format!("shadow/classify/{pod_name}/{enforced_text}/{shadow_text}"),
                    });
                }
                Err(e) if e.category == Category::Tripped => {
                    reusable = false;
                    notes.push(tripped_note(p, &e));
                }
                Err(e) => {
                    reusable = false;
                    notes.push(PolicyNote {
                        policy: p.label(),
                        reason: "PolicyShadowFailed".into(),
                        message: format!(
                            "shadow policy {} failed on pod {pod_name}: {e}",
                            p.label()
                        ),
                        warning: true,
                        key: format!("shadow/classify/{pod_name}/failed"),
                    });
                }
            }
        }
        if let Some((uid, key)) = key.filter(|_| reusable) {
            self.cache().put(&uid, key, &verdict, &notes, now);
        }
        Ok(Classified { verdict, notes })
    }
}
