//! Kueue IO for Workload mode (`--kueue-workloads`): the caches of Workloads, ResourceFlavors and
//! PriorityClasses the planner reads (its Workload change is carried out by
//! [`crate::workload`]).
//!
//! Workloads and ResourceFlavors are read as dynamic objects of `kueue.x-k8s.io/v1beta2`, so
//! Kueue's types are not compiled in; the planner sees them through
//! [`ObservedWorkload`] and [`Flavor`].

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tfjob_api::TFJob;
use tfjob_planner::kueue::{
    Flavor, GROUP, ObservedWorkload, RESOURCE_FLAVOR_KIND, RESOURCE_FLAVOR_PLURAL, VERSION,
    WORKLOAD_KIND, WORKLOAD_PLURAL, workload_name,
};

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
