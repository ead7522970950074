//! Carrying out the planner's [`WorkloadChange`] for a job: creating, deleting or finishing its
//! Kueue Workload through the API, with an event for each. It runs after the job's status write
//! and before any pod is created: pods wait for the Workload, never the reverse.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;
use tfjob_api::TFJob;
use tfjob_planner::kueue::WorkloadChange;
use tfjob_planner::{EventType, JobEvent};

use crate::context::Context;
use crate::error::Error;
use crate::kueue::workload_resource;

/// What applying a Workload change led to.
pub enum Applied {
    Done,
    /// The stored Workload changed since it was cached; look again shortly.
    Conflict,
}

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
            let object: DynamicObject = serde_json::from_value(object.clone())
                .map_err(|e| Error::Internal(format!("Workload {namespace}/{name}: {e}")))?;
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {
                    let event = JobEvent::new(
                        EventType::Normal,
                        "CreatedWorkload",
                        format!("Created Workload: {namespace}/{name}"),
                        None,
                    );
                    ctx.publish(reference, &event).await;
                }
                // Created by an earlier reconcile whose result the cache does not show yet.
                Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                Err(e) => {
                    // Kueue's own validation (its CRD's rules) speaks here: say it on the job.
                    let event = JobEvent::new(
                        EventType::Warning,
                        "FailedCreateWorkload",
                        format!("Error creating Workload {namespace}/{name}: {e}"),
                        None,
                    );
                    ctx.publish(reference, &event).await;
                    return Err(Error::kube(
                        format!("creating Workload {namespace}/{name}"),
                        e,
                    ));
                }
            }
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
