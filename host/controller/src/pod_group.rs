//! Carrying out the planner's [`PodGroupChange`] for a job: creating, updating or deleting its
//! PodGroup through the API, with the events 1.9 published. It runs after the status write and
//! before any pod is created, as 1.9 synced the group first: a scheduler-plugins pod must find
//! its group.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::reflector::ObjectRef;
use tfjob_api::TFJob;
use tfjob_planner::{EventType, JobEvent, gang::PodGroupChange};

use crate::context::Context;
use crate::error::Error;
use crate::gang::GangCaches;
use crate::owned_object::{self, Applied, CreateEvents};

/// Creates, updates or deletes the job's PodGroup, with events as 1.9 published them for
/// deletions (and the pod events' wording for creations).
pub async fn apply(
    ctx: &Context,
    gang: &GangCaches,
    job: &TFJob,
    reference: &ObjectReference,
    change: &PodGroupChange,
) -> Result<Applied, Error> {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &gang.resource);
    match change {
        PodGroupChange::Create(object) => {
            let events = CreateEvents {
                created: (
                    "SuccessfulCreatePodGroup",
                    format!("Created PodGroup: {name}"),
                ),
                failed: ("FailedCreatePodGroup", |e: &kube::Error| {
                    format!("Error creating: {e}")
                }),
            };
            let what = format!("PodGroup {namespace}/{name}");
            if owned_object::create(ctx, &api, reference, object, &what, events).await? {
                ctx.metrics.pod_group_created();
            }
        }
        PodGroupChange::UpdateSpec(spec) => {
            let key = ObjectRef::new_with(&name, gang.resource.clone()).within(&namespace);
            let Some(cached) = gang.pod_groups.get(&key) else {
                return Ok(Applied::Conflict);
            };
            let mut updated = (*cached).clone();
            updated.data["spec"] = spec.clone();
            match api.replace(&name, &PostParams::default(), &updated).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
                    return Ok(Applied::Conflict);
                }
                Err(e) => {
                    return Err(Error::kube(
                        format!("updating PodGroup {namespace}/{name}"),
                        e,
                    ));
                }
            }
        }
        PodGroupChange::Delete => match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.metrics.pod_group_deleted();
                let event = JobEvent::new(
                    EventType::Normal,
                    "SuccessfulDeletePodGroup",
                    format!("Deleted PodGroup: {name}"),
                    None,
                );
                ctx.publish(reference, &event).await;
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => {
                let event = JobEvent::new(
                    EventType::Warning,
                    "FailedDeletePodGroup",
                    format!("Error deleting: {e}"),
                    None,
                );
                ctx.publish(reference, &event).await;
                return Err(Error::kube(
                    format!("deleting PodGroup {namespace}/{name}"),
                    e,
                ));
            }
        },
    }
    Ok(Applied::Done)
}
