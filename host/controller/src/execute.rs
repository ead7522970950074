//! Carrying out a [`Plan`] against the API, in the order that keeps it idempotent:
//! status first (optimistic concurrency on the job's resourceVersion, so a stale job cache
//! conflicts instead of counting a restart twice), then deletions (with uid preconditions), then
//! creations (AlreadyExists is success), then events, then the TTL deletion of the job. A
//! PodGroup change and a Kueue Workload change go between the status and the pods.

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tfjob_api::TFJob;
use tfjob_planner::{Deletion, EventType, JobEvent, Plan};

use crate::context::Context;
use crate::error::Error;
use crate::owned_object::Applied;
use crate::pod_group;
use crate::workload;

/// How soon a job is looked at again after its status write lost an optimistic-concurrency race.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(500);

/// What executing a plan led to.
#[derive(Debug, PartialEq, Eq)]
pub enum Executed {
    /// Everything was applied.
    Done,
    /// A write conflicted: the status (then nothing else was done), or a deletion whose
    /// precondition did not hold. Either way the job is looked at again shortly: a 409 on a
    /// deletion usually means the pod was replaced, but when it was not (an API server
    /// answering 409 for another reason), the pod is still there and no event would bring
    /// the job back.
    Conflict,
}

/// The object reference events about `job` point at.
pub fn job_reference(job: &TFJob) -> ObjectReference {
    job.object_ref(&())
}

/// Applies `plan` for `job`.
pub async fn execute(ctx: &Context, job: &TFJob, plan: Plan) -> Result<Executed, Error> {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let reference = job_reference(job);

    if let Some(status) = plan.status {
        let jobs: Api<TFJob> = Api::namespaced(ctx.client.clone(), &namespace);
        let mut updated = job.clone();
        updated.status = Some(status);
        match jobs
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_conflict() => return Ok(Executed::Conflict),
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(Executed::Done),
            Err(e) => {
                return Err(Error::kube(
                    format!("updating status of TFJob {namespace}/{name}"),
                    e,
                ));
            }
        }
    }

    // The group before any pod: a gang scheduler must find the group its pods name. A group
    // that cannot be written stops the reconcile here, as 1.9 created no pods then.
    if let (Some(change), Some(gang)) = (&plan.pod_group, &ctx.gang)
        && let Applied::Conflict = pod_group::apply(ctx, gang, job, &reference, change).await?
    {
        return Ok(Executed::Conflict);
    }

    // The Workload before any pod, for the same reason: pods run only for an admitted one.
    if let Some(change) = &plan.workload
        && ctx.kueue.is_some()
        && let Applied::Conflict = workload::apply(ctx, job, &reference, change).await?
    {
        return Ok(Executed::Conflict);
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut first_error = None;

    let results = join_all(plan.delete_pods.iter().map(|d| delete(&pods, d))).await;
    let mut conflicted = false;
    for (d, result) in plan.delete_pods.iter().zip(results) {
        conflicted |= matches!(result, Ok(Deleted::Conflict));
        let result = result.map(|deleted| deleted == Deleted::Done);
        report(
            ctx,
            &reference,
            "Pod",
            "pod",
            Verb::Delete,
            &d.name,
            result,
            &mut first_error,
        )
        .await;
    }
    let results = join_all(plan.delete_services.iter().map(|d| delete(&services, d))).await;
    for (d, result) in plan.delete_services.iter().zip(results) {
        conflicted |= matches!(result, Ok(Deleted::Conflict));
        let result = result.map(|deleted| deleted == Deleted::Done);
        report(
            ctx,
            &reference,
            "Service",
            "service",
            Verb::Delete,
            &d.name,
            result,
            &mut first_error,
        )
        .await;
    }
    let job_uid = job.uid().unwrap_or_default();
    let results = join_all(plan.create_services.iter().map(|s| create(&services, s))).await;
    for (s, result) in plan.create_services.iter().zip(results) {
        let result = result.map(|created| {
            created
                .map(|svc| ctx.created_services.remember(&job_uid, &svc))
                .is_some()
        });
        report(
            ctx,
            &reference,
            "Service",
            "service",
            Verb::Create,
            &s.name_any(),
            result,
            &mut first_error,
        )
        .await;
    }
    let results = join_all(plan.create_pods.iter().map(|p| create(&pods, p))).await;
    for (p, result) in plan.create_pods.iter().zip(results) {
        let result = result.map(|created| {
            created
                .map(|pod| ctx.created_pods.remember(&job_uid, &pod))
                .is_some()
        });
        report(
            ctx,
            &reference,
            "Pod",
            "pod",
            Verb::Create,
            &p.name_any(),
            result,
            &mut first_error,
        )
        .await;
    }

    for event in &plan.events {
        ctx.publish(&reference, event).await;
    }
    for transition in &plan.transitions {
        ctx.metrics.transition(&namespace, *transition);
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if plan.delete_job {
        let jobs: Api<TFJob> = Api::namespaced(ctx.client.clone(), &namespace);
        match jobs.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Error::kube(format!("deleting TFJob {namespace}/{name}"), e)),
        }
    }
    if conflicted {
        return Ok(Executed::Conflict);
    }
    Ok(Executed::Done)
}

/// What a deletion did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deleted {
    Done,
    /// Not found: gone already.
    Gone,
    /// 409: the uid precondition did not hold (a newer incarnation), or a conflict for
    /// another reason; the job is looked at again to tell which.
    Conflict,
}

#[derive(Clone, Copy)]
enum Verb {
    Create,
    Delete,
}

/// `Ok(true)`: done; `Ok(false)`: nothing to do (already there / already gone).
/// `Ok(Some(created))`: created; `Ok(None)`: it exists already.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(None),
        Err(e) => Err(e),
    }
}

async fn delete<K>(api: &Api<K>, d: &Deletion) -> Result<Deleted, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: d.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&d.name, &params).await {
        Ok(_) => Ok(Deleted::Done),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Deleted::Gone),
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Deleted::Conflict),
        Err(e) => Err(e),
    }
}

/// Publishes the upstream-compatible event for one create/delete and keeps the first error.
#[allow(clippy::too_many_arguments)]
async fn report(
    ctx: &Context,
    reference: &ObjectReference,
    kind: &str,
    noun: &str,
    verb: Verb,
    name: &str,
    result: Result<bool, kube::Error>,
    first_error: &mut Option<Error>,
) {
    let (reason, message, type_) = match (verb, &result) {
        (_, Ok(false)) => return,
        (Verb::Create, Ok(true)) => (
            format!("SuccessfulCreate{kind}"),
            format!("Created {noun}: {name}"),
            EventType::Normal,
        ),
        (Verb::Delete, Ok(true)) => (
            format!("SuccessfulDelete{kind}"),
            format!("Deleted {noun}: {name}"),
            EventType::Normal,
        ),
        (Verb::Create, Err(e)) => (
            format!("FailedCreate{kind}"),
            format!("Error creating: {e}"),
            EventType::Warning,
        ),
        (Verb::Delete, Err(e)) => (
            format!("FailedDelete{kind}"),
            format!("Error deleting: {e}"),
            EventType::Warning,
        ),
    };
    ctx.publish(
        reference,
        &JobEvent::new(type_, &reason, message, None).about(kind, name),
    )
    .await;
    if let Err(e) = result
        && first_error.is_none()
    {
        let action = match verb {
            Verb::Create => format!("creating {noun} {name}"),
            Verb::Delete => format!("deleting {noun} {name}"),
        };
        *first_error = Some(Error::kube(action, e));
    }
}
