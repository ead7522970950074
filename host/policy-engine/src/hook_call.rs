//! One hook of one activated policy, called the way every caller runs it.
//!
//! The operator's pipeline ([`crate::policies::WasmPolicies`]), `policy test`, its suites and
//! `policy diff` all reach a policy through these three functions, so a hook's steps are written
//! once: the call within the policy's own limits and with the cluster reads it was granted, the
//! decoding of its output, and the check of that output (the mutation guard after decoration, the verdict guard after classification).
//! Every failure carries the category the operator reports. Breakers, metrics and notes belong
//! to the pipeline around a call and live in [`crate::policies`].

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde_json::Value;
use tfjob_api::labels::KUEUE_QUEUE_NAME;
use tfjob_planner::policy::{FailureKind, VerdictPhase};
use tfjob_planner::{PodContext, Verdict};
use tfjob_policy_logic::text;

use std::sync::Arc;

use crate::bindings::{self, JobContext};
use crate::cluster_access::{ReadBounds, ReadJournal, Reader};
use crate::cluster_cache::ClusterCache;
use crate::engine::{LimitedEngine, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::registry::ActivePolicy;
use crate::{guard, verdict_guard};

/// The longest verdict reason kept; a condition reason is a short code.
pub const MAX_VERDICT_REASON: usize = 256;
/// The longest verdict message kept (a pod's termination messages are 4 KiB per container).
pub const MAX_VERDICT_MESSAGE: usize = 16 << 10;

/// The WIT job context of a planner context.
pub fn job_context(ctx: &PodContext) -> JobContext {
    JobContext {
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

/// Where a policy call runs: the engine, and the cluster objects policies read.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    pub engine: &'a PolicyEngine,
    pub cluster: &'a Arc<ClusterCache>,
    /// Where the calls' reads are written down too, if anywhere.
    pub journal: Option<&'a ReadJournal>,
}

impl<'a> Caller<'a> {
    /// Calls through `engine` reading from `cluster`.
    pub fn new(engine: &'a PolicyEngine, cluster: &'a Arc<ClusterCache>) -> Caller<'a> {
        Caller {
            engine,
            cluster,
            journal: None,
        }
    }
}

impl<'a> Caller<'a> {
    /// The engine within `p`'s limits, reading what `p` was granted for the job of `ctx`.
    fn limited(self, p: &ActivePolicy, ctx: &JobContext) -> LimitedEngine<'a> {
        let limited = self.engine.limited(p.limits.clone());
        if p.reads.is_empty() {
            return limited;
        }
        limited.reading(Reader {
            grants: Arc::clone(&p.reads),
            job_namespace: ctx.namespace.clone(),
            job_name: ctx.job_name.clone(),
            policy_namespace: p.manifest.tenant.clone(),
            cache: Arc::clone(self.cluster),
            bounds: ReadBounds::default(),
            journal: self.journal.cloned(),
        })
    }
}

/// Calls `decorate-pod` on `pod` and returns the decorated pod, as the guard accepted it
/// against the policy's allowed paths.
pub fn decorate(
    caller: Caller<'_>,
    p: &ActivePolicy,
    ctx: &JobContext,
    pod: &Value,
) -> Result<Value, EvalError> {
    let text = caller.limited(p, ctx).about_pod(pod_name(pod)).decorate(
        &p.compiled,
        p.name(),
        ctx,
        &p.settings,
        &pod.to_string(),
    )?;
    let decorated: Value = serde_json::from_str(&text).map_err(|e| {
        EvalError::new(
            Category::InvalidOutput,
            format!("decorated pod is not JSON: {e}"),
        )
    })?;
    let queued = ctx.job_labels.iter().any(|(k, _)| k == KUEUE_QUEUE_NAME);
    guard::check(pod, &decorated, &p.allowed)
        .and_then(|()| {
            if queued {
                guard::check_queued_placement(pod, &decorated)
            } else {
                Ok(())
            }
        })
        .map_err(|path| {
            EvalError::new(
                Category::GuardViolation,
                format!("policy {} may not change {path}", p.name()),
            )
        })?;
    Ok(decorated)
}

/// Calls `override-resources` for the container `container` with its current `requirements`
/// and returns the new requirements, decoded as `ResourceRequirements` and encoded again (so
/// fields the type does not know are dropped, as the API server would).
pub fn resources(
    caller: Caller<'_>,
    p: &ActivePolicy,
    ctx: &JobContext,
    pod: Option<&str>,
    container: &str,
    requirements: &Value,
) -> Result<Value, EvalError> {
    let text = caller.limited(p, ctx).about_pod(pod).override_resources(
        &p.compiled,
        p.name(),
        ctx,
        &p.settings,
        container,
        &requirements.to_string(),
    )?;
    let parsed: ResourceRequirements = serde_json::from_str(&text).map_err(|e| {
        EvalError::new(
            Category::InvalidOutput,
            format!("resources of container {container} are not ResourceRequirements: {e}"),
        )
    })?;
    serde_json::to_value(parsed).map_err(|e| EvalError::new(Category::InvalidOutput, e.to_string()))
}

/// [`resources`] for every init and regular container of `pod`, in place.
pub fn resources_of_pod(
    caller: Caller<'_>,
    p: &ActivePolicy,
    ctx: &JobContext,
    pod: &mut Value,
) -> Result<(), EvalError> {
    let pod_name = pod_name(pod).map(str::to_owned);
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
            container["resources"] =
                resources(caller, p, ctx, pod_name.as_deref(), &name, &current)?;
        }
    }
    Ok(())
}

/// The name in a pod's JSON, if it has one.
fn pod_name(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/name").and_then(Value::as_str)
}

/// An observed pod as `classify-pod` is given it: the pod, its JSON (made once for every
/// policy asked) and the time of the question.
pub struct Observed<'a> {
    pub pod: &'a Pod,
    pub json: &'a str,
    pub now: Timestamp,
}

impl Observed<'_> {
    /// The pod's JSON for [`Observed::json`].
    pub fn encode(pod: &Pod) -> Result<String, EvalError> {
        serde_json::to_string(pod).map_err(|e| {
            EvalError::new(
                Category::InvalidOutput,
                format!("pod does not serialise: {e}"),
            )
        })
    }
}

/// Calls `classify-pod` and returns the verdict, attributed to the policy's label, as the
/// verdict guard accepted it against the pod.
pub fn classify(
    caller: Caller<'_>,
    p: &ActivePolicy,
    ctx: &JobContext,
    observed: &Observed<'_>,
) -> Result<Verdict, EvalError> {
    let verdict = caller
        .limited(p, ctx)
        .about_pod(observed.pod.metadata.name.as_deref())
        .classify(
            &p.compiled,
            p.name(),
            ctx,
            &p.settings,
            observed.json,
            &observed.now.to_string(),
        )?;
    let verdict = verdict_from(verdict, &p.label())?;
    verdict_guard::check(observed.pod, &verdict)
        .map_err(|contradiction| EvalError::new(Category::InvalidOutput, contradiction))?;
    Ok(verdict)
}

/// Converts a WIT verdict, attributing it to `policy`; its texts are cut to
/// [`MAX_VERDICT_REASON`] and [`MAX_VERDICT_MESSAGE`] at character boundaries.
pub fn verdict_from(v: bindings::Verdict, policy: &str) -> Result<Verdict, EvalError> {
    let time = |field: &str, t: Option<String>| match t {
        Some(t) => t.parse::<Timestamp>().map(Some).map_err(|e| {
            EvalError::new(
                Category::InvalidOutput,
                format!(
                    "verdict {field} {:?} is not RFC 3339: {e}",
                    text::elided(&t, 64)
                ),
            )
        }),
        None => Ok(None),
    };
    let occurred_at = time("occurred-at", v.occurred_at)?;
    let recheck_at = time("recheck-at", v.recheck_at)?;
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
        reason: text::elided(&v.reason, MAX_VERDICT_REASON),
        message: text::elided(&v.message, MAX_VERDICT_MESSAGE),
        kind: v.kind.map(|k| match k {
            bindings::FailureKind::User => FailureKind::User,
            bindings::FailureKind::System => FailureKind::System,
        }),
        occurred_at,
        recheck_at,
        policy: policy.to_owned(),
    })
}
