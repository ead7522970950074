//! The planner's policy seam implemented with Wasm policies.
//!
//! `shape_pod` runs the decoration policies (each checked by the guard against its allowed
//! paths), then the resource policies on every container, then records which policies shaped
//! the pod. `classify` asks the classification policies in order. Only `Enforce` policies whose
//! selector matches the job take part, each call within the policy's own deadline and memory
//! cap. A failing policy follows its failure policy: `Fail` stops the reconcile, `Ignore` skips
//! it for that pod.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use tfjob_planner::native::NativePolicies;
use tfjob_planner::policy::{FailureKind, VerdictPhase};
use tfjob_planner::{PodContext, PodPolicies, PolicyError, ShapedPod, Verdict};

use crate::bindings;
use crate::engine::{Hook, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::guard;
use crate::registry::{ActivePolicy, FailurePolicy, Registry};

/// Annotation listing the policies (`name@short-digest`, comma-separated) that shaped a pod.
pub const APPLIED_ANNOTATION: &str = "policy.tfjob.dev/policies";

/// Wasm policies behind the planner's seam.
pub struct WasmPolicies {
    engine: Arc<PolicyEngine>,
    registry: Arc<Registry>,
    /// Used only when every classification policy failed under `Ignore`, so a pod is never
    /// left unclassified.
    fallback: NativePolicies,
}

impl WasmPolicies {
    pub fn new(engine: Arc<PolicyEngine>, registry: Arc<Registry>) -> WasmPolicies {
        WasmPolicies {
            engine,
            registry,
            fallback: NativePolicies::default(),
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }
}

/// The WIT job context of a planner context.
pub fn job_context(ctx: &PodContext) -> bindings::JobContext {
    bindings::JobContext {
        job_name: ctx.job_name.clone(),
        namespace: ctx.namespace.clone(),
        job_uid: ctx.job_uid.clone(),
        job_labels: ctx.job_labels.clone().into_iter().collect(),
        job_annotations: ctx.job_annotations.clone().into_iter().collect(),
        replica_type: ctx.replica_type.clone(),
        replica_index: ctx.replica_index,
        replica_count: ctx.replica_count,
        attempt: ctx.attempt,
    }
}

/// Converts a WIT verdict, attributing it to `policy`.
pub fn verdict_from(v: bindings::Verdict, policy: &str) -> Result<Verdict, EvalError> {
    let occurred_at = match v.occurred_at {
        Some(t) => Some(t.parse::<Timestamp>().map_err(|e| {
            EvalError::new(
                Category::InvalidOutput,
                format!("verdict occurred-at {t:?} is not RFC 3339: {e}"),
            )
        })?),
        None => None,
    };
    Ok(Verdict {
        phase: match v.phase {
            bindings::Phase::Undefined => VerdictPhase::Undefined,
            bindings::Phase::Queued => VerdictPhase::Queued,
            bindings::Phase::WaitingForResources => VerdictPhase::WaitingForResources,
            bindings::Phase::Initializing => VerdictPhase::Initializing,
            bindings::Phase::Running => VerdictPhase::Running,
            bindings::Phase::Succeeded => VerdictPhase::Succeeded,
            bindings::Phase::RetryableFailure => VerdictPhase::RetryableFailure,
            bindings::Phase::PermanentFailure => VerdictPhase::PermanentFailure,
        },
        reason: v.reason,
        message: v.message,
        kind: v.kind.map(|k| match k {
            bindings::FailureKind::User => FailureKind::User,
            bindings::FailureKind::System => FailureKind::System,
        }),
        occurred_at,
        policy: policy.to_owned(),
    })
}

impl WasmPolicies {
    fn decorate_step(
        &self,
        p: &ActivePolicy,
        ctx: &bindings::JobContext,
        input: &serde_json::Value,
    ) -> Result<serde_json::Value, EvalError> {
        let text = self.engine.limited(p.limits).decorate(
            &p.compiled,
            p.name(),
            ctx,
            &p.settings,
            &input.to_string(),
        )?;
        let output: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            EvalError::new(
                Category::InvalidOutput,
                format!("decorated pod is not JSON: {e}"),
            )
        })?;
        guard::check(input, &output, &p.allowed).map_err(|path| {
            EvalError::new(
                Category::GuardViolation,
                format!("policy {} may not change {path}", p.name()),
            )
        })?;
        Ok(output)
    }

    fn resources_step(
        &self,
        p: &ActivePolicy,
        ctx: &bindings::JobContext,
        pod: &mut serde_json::Value,
    ) -> Result<(), EvalError> {
        for list in ["initContainers", "containers"] {
            let Some(containers) = pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(|c| c.as_array_mut())
            else {
                continue;
            };
            for container in containers {
                let name = container
                    .get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or_default()
                    .to_owned();
                let current = container
                    .get("resources")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({}));
                let text = self.engine.limited(p.limits).override_resources(
                    &p.compiled,
                    p.name(),
                    ctx,
                    &p.settings,
                    &name,
                    &current.to_string(),
                )?;
                let parsed: ResourceRequirements = serde_json::from_str(&text).map_err(|e| {
                    EvalError::new(
                        Category::InvalidOutput,
                        format!("resources of container {name} are not ResourceRequirements: {e}"),
                    )
                })?;
                container["resources"] = serde_json::to_value(parsed)
                    .map_err(|e| EvalError::new(Category::InvalidOutput, e.to_string()))?;
            }
        }
        Ok(())
    }
}

impl PodPolicies for WasmPolicies {
    fn shape_pod(&self, ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError> {
        let set = self.registry.snapshot();
        let wit_ctx = job_context(ctx);
        let mut current = serde_json::to_value(&pod).map_err(|e| PolicyError {
            policy: "operator".into(),
            category: Category::InvalidOutput,
            message: format!("pod does not serialise: {e}"),
        })?;
        let mut applied = Vec::new();
        let mut skipped = Vec::new();
        let mut outcome = |p: &ActivePolicy,
                           result: Result<(), EvalError>|
         -> Result<(), PolicyError> {
            match result {
                Ok(()) => {
                    applied.push(p.label());
                    Ok(())
                }
                Err(e) if p.manifest.failure_policy == FailurePolicy::Ignore => {
                    tracing::warn!(policy = %p.label(), error = %e, "policy failed; ignored as configured");
                    skipped.push(e.for_policy(&p.label()));
                    Ok(())
                }
                Err(e) => Err(e.for_policy(&p.label())),
            }
        };
        for p in set.enforced(Hook::Decorate, &ctx.namespace, &ctx.job_labels) {
            let result = self
                .decorate_step(p, &wit_ctx, &current)
                .map(|out| current = out);
            outcome(p, result)?;
        }
        for p in set.enforced(Hook::Resources, &ctx.namespace, &ctx.job_labels) {
            let mut candidate = current.clone();
            let result = self
                .resources_step(p, &wit_ctx, &mut candidate)
                .map(|()| current = candidate);
            outcome(p, result)?;
        }
        let mut shaped: Pod = serde_json::from_value(current).map_err(|e| PolicyError {
            policy: applied.join(","),
            category: Category::InvalidOutput,
            message: format!("the policies' pod is not a valid Pod: {e}"),
        })?;
        if !applied.is_empty() {
            shaped
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(APPLIED_ANNOTATION.to_owned(), applied.join(","));
        }
        Ok(ShapedPod {
            pod: shaped,
            applied,
            skipped,
            notes: Vec::new(),
        })
    }

    fn classify(
        &self,
        ctx: &PodContext,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<Verdict, PolicyError> {
        let set = self.registry.snapshot();
        let wit_ctx = job_context(ctx);
        let pod_json = serde_json::to_string(pod).map_err(|e| PolicyError {
            policy: "operator".into(),
            category: Category::InvalidOutput,
            message: format!("pod does not serialise: {e}"),
        })?;
        let now_text = now.to_string();
        for p in set.enforced(Hook::Classify, &ctx.namespace, &ctx.job_labels) {
            let result = self
                .engine
                .limited(p.limits)
                .classify(
                    &p.compiled,
                    p.name(),
                    &wit_ctx,
                    &p.settings,
                    &pod_json,
                    &now_text,
                )
                .and_then(|v| verdict_from(v, &p.label()));
            match result {
                Ok(v) => return Ok(v),
                Err(e) if p.manifest.failure_policy == FailurePolicy::Ignore => {
                    tracing::warn!(policy = %p.label(), error = %e, "classification policy failed; ignored as configured");
                }
                Err(e) => return Err(e.for_policy(&p.label())),
            }
        }
        self.fallback.classify(ctx, pod, now)
    }
}
