//! Carrying out the planner's [`WorkloadChange`] for a job: creating, deleting or finishing its
//! Kueue Workload through the API, with an event for each. It runs after the job's status write
//! and before any pod is created: pods wait for the Workload, never the reverse.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::json;
use tfjob_api::TFJob;
use tfjob_planner::kueue::WorkloadChange;
use tfjob_planner::{EventType, JobEvent};

use crate::context::Context;
use crate::error::Error;
use crate::kueue::workload_resource;
use crate::owned_object::{self, Applied, CreateEvents};

/// Creates, deletes or finishes the job's Workload, with an event for each.
pub async fn apply(
    ctx: &Context,
    job: &TFJob,
    reference: &ObjectReference,
    change: &WorkloadChange,
) -> Result<Applied, Error> {
    let namespace = job.namespace().unwrap_or_else(|| "default".into());
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &workload_resource());
    match change {
        WorkloadChange::Create(object) => {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let events = CreateEvents {
                created: (
                    "CreatedWorkload",
                    format!("Created Workload: {namespace}/{name}"),
                ),
                failed: ("FailedCreateWorkload", |e: &kube::Error| {
                    format!("Error creating Workload {namespace}/{name}: {e}")
                }),
            };
            let what = format!("Workload {namespace}/{name}");
            owned_object::create(ctx, &api, reference, object, &what, events).await?;
        }
        WorkloadChange::Delete { name, uid } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match api.delete(name, &params).await {
                Ok(_) => {
                    let event = JobEvent::new(
                        EventType::Normal,
                        "DeletedWorkload",
                        format!(
                            "Deleted Workload {namespace}/{name}: it no longer matched the job"
                        ),
                        None,
                    );
                    ctx.publish(reference, &event).await;
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(kube::Error::Api(s)) if s.is_conflict() => return Ok(Applied::Conflict),
                Err(e) => {
                    return Err(Error::kube(
                        format!("deleting Workload {namespace}/{name}"),
                        e,
                    ));
                }
            }
        }
        WorkloadChange::Finish { name, conditions } => {
            let patch = json!({"status": {"conditions": conditions}});
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(kube::Error::Api(s)) if s.is_conflict() => return Ok(Applied::Conflict),
                Err(e) => {
                    return Err(Error::kube(
                        format!("finishing Workload {namespace}/{name}"),
                        e,
                    ));
                }
            }
        }
    }
    Ok(Applied::Done)
}
