//! Gang scheduling IO: the caches of PodGroups and PriorityClasses the planner reads (the
//! planner's [`PodGroupChange`] is carried out by [`crate::pod_group`]).
//!
//! Only present when the operator runs with a gang scheduler. PodGroups are read as dynamic
//! objects of the backend's group and version (Volcano's or scheduler-plugins'), so neither
//! backend's types are compiled in; the planner sees them through
//! [`ObservedPodGroup`]. A PodGroup change runs after the status write and before any pod is
//! created, as 1.9 synced the group first: a scheduler-plugins pod must find its group.

use std::collections::BTreeMap;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tfjob_api::TFJob;
use tfjob_planner::gang::{GangScheduler, ObservedPodGroup, POD_GROUP_KIND, POD_GROUP_PLURAL};

/// The caches gang scheduling reads.
pub struct GangCaches {
    /// The PodGroup resource of the chosen backend.
    pub resource: ApiResource,
    pub pod_groups: Store<DynamicObject>,
    pub priority_classes: Store<PriorityClass>,
}

/// The API resource of `scheduler`'s PodGroups.
pub fn pod_group_resource(scheduler: &GangScheduler) -> ApiResource {
    let gvk = GroupVersionKind::gvk(scheduler.group(), scheduler.version(), POD_GROUP_KIND);
    ApiResource::from_gvk_with_plural(&gvk, POD_GROUP_PLURAL)
}

/// The PodGroup watch (to be polled by the controller as a trigger: a group's phase change
/// wakes its job) and the caches. The PriorityClass watch runs on its own task.
pub fn watch(
    client: &Client,
    scheduler: &GangScheduler,
    namespace: Option<&str>,
) -> (
    GangCaches,
    impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
) {
    let resource = pod_group_resource(scheduler);
    let groups: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let writer = reflector::store::Writer::new(resource.clone());
    let pod_groups = writer.as_reader();
    let group_stream = reflector(writer, watcher(groups, watcher::Config::default()))
        .default_backoff()
        .touched_objects();

    let priority_classes = crate::priority_classes::watch(client);
    (
        GangCaches {
            resource,
            pod_groups,
            priority_classes,
        },
        group_stream,
    )
}

impl GangCaches {
    /// The PodGroup named after `job`, as the planner sees it.
    pub fn observed(&self, job: &TFJob) -> Option<ObservedPodGroup> {
        let key = ObjectRef::new_with(&job.name_any(), self.resource.clone())
            .within(&job.namespace().unwrap_or_default());
        let object = self.pod_groups.get(&key)?;
        serde_json::to_value(object.as_ref())
            .ok()
            .map(|v| ObservedPodGroup::from_object(&v))
    }

    /// Values of the cluster's priority classes by name.
    pub fn priority_values(&self) -> BTreeMap<String, i32> {
        crate::priority_classes::values(&self.priority_classes)
    }
}
