//! Kueue IO for Workload mode (`--kueue-workloads`): the caches of Workloads, ResourceFlavors and
//! PriorityClasses the planner reads, and carrying out its [`WorkloadChange`].
//!
//! Workloads and ResourceFlavors are read as dynamic objects of `kueue.x-k8s.io/v1beta2`, so
//! Kueue's types are not compiled in; the planner sees them through
//! [`ObservedWorkload`] and [`Flavor`]. A Workload change runs after the job's status write and
//! before any pod is created: pods wait for the Workload, never the reverse.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tfjob_api::TFJob;
use tfjob_planner::kueue::{
    Flavor, GROUP, ObservedWorkload, RESOURCE_FLAVOR_KIND, RESOURCE_FLAVOR_PLURAL, VERSION,
    WORKLOAD_KIND, WORKLOAD_PLURAL, WorkloadChange, workload_name,
};
use tfjob_planner::{EventType, JobEvent};

use crate::context::Context;
use crate::error::Error;

/// The caches Workload mode reads.
pub struct KueueCaches {
    pub workloads: Store<DynamicObject>,
    pub flavors: Store<DynamicObject>,
    pub priority_classes: Store<PriorityClass>,
}

/// The Workload API resource.
pub fn workload_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, WORKLOAD_KIND);
    ApiResource::from_gvk_with_plural(&gvk, WORKLOAD_PLURAL)
}

fn flavor_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(GROUP, VERSION, RESOURCE_FLAVOR_KIND);
    ApiResource::from_gvk_with_plural(&gvk, RESOURCE_FLAVOR_PLURAL)
}

/// The Workload watch (polled by the controller as a trigger: an admission or eviction wakes
/// the Workload's job) and the caches. The ResourceFlavor and PriorityClass watches run on
/// tasks of their own.
pub fn watch(
    client: &Client,
    namespace: Option<&str>,
) -> (
    KueueCaches,
    impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
) {
    let resource = workload_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let writer = reflector::store::Writer::new(resource);
    let workloads = writer.as_reader();
    let workload_stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();

    let resource = flavor_resource();
    let writer = reflector::store::Writer::new(resource.clone());
    let flavors = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    tokio::spawn(drain(
        "resource flavor",
        reflector(writer, watcher(api, watcher::Config::default())).default_backoff(),
    ));

    let priority_classes = crate::priority_classes::watch(client);
    (
        KueueCaches {
            workloads,
            flavors,
            priority_classes,
        },
        workload_stream,
    )
}

/// Polls a cache-filling watch for ever, logging its errors (the backoff retries them).
async fn drain<T>(
    what: &'static str,
    stream: impl futures::Stream<Item = Result<T, watcher::Error>>,
) {
    stream
        .for_each(|event| async move {
            if let Err(e) = event {
                tracing::debug!(error = %e, "{what} watch");
            }
        })
        .await;
}

impl KueueCaches {
    /// The job's Workload, as the planner sees it.
    pub fn observed(&self, job: &TFJob) -> Option<ObservedWorkload> {
        let name = workload_name(&job.name_any(), &job.uid().unwrap_or_default());
        let key = ObjectRef::new_with(&name, workload_resource())
            .within(&job.namespace().unwrap_or_default());
        let object = self.workloads.get(&key)?;
        serde_json::to_value(object.as_ref())
            .ok()
            .map(|v| ObservedWorkload::from_object(&v))
    }

    /// ResourceFlavors by name.
    pub fn flavors(&self) -> BTreeMap<String, Flavor> {
        self.flavors
            .state()
            .iter()
            .filter_map(|f| {
                let value = serde_json::to_value(f.as_ref()).ok()?;
                Some((f.name_any(), Flavor::from_object(&value)))
            })
            .collect()
    }

    /// Values of the cluster's priority classes by name.
    pub fn priority_values(&self) -> BTreeMap<String, i32> {
        crate::priority_classes::values(&self.priority_classes)
    }
}

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
