//! The cluster's PriorityClasses, cached for the planner: gang scheduling computes a
//! PodGroup's `minResources` by them and a Kueue Workload carries its class's value.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

/// A cache of every PriorityClass, filled by a watch on a task of its own.
pub fn watch(client: &Client) -> Store<PriorityClass> {
    let (store, writer) = reflector::store();
    let classes: Api<PriorityClass> = Api::all(client.clone());
    tokio::spawn(
        reflector(writer, watcher(classes, watcher::Config::default()))
            .default_backoff()
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::debug!(error = %e, "priority class watch");
                }
            }),
    );
    store
}

/// Values of the cached priority classes by name.
pub fn values(store: &Store<PriorityClass>) -> BTreeMap<String, i32> {
    store
        .state()
        .iter()
        .map(|pc| (pc.name_any(), pc.value))
        .collect()
}
