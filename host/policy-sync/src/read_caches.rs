//! The watches that fill the caches policies read the cluster from.
//!
//! One watch per resource that some active policy was granted (`reads` in its manifest),
//! however many policies read it: [`ReadCaches::follow`] looks at every snapshot the registry
//! swaps in, starts a watch for a resource when the first policy granted it activates, and stops
//! it (dropping its cache) when the last one goes. Each watch feeds a
//! [`tfjob_policy_engine::cluster_cache::ResourceCache`] through kube-runtime's watcher, whose
//! list pages stream into the cache, so a cluster bigger than the cache's cap costs the cap, not
//! the cluster: past it the cache holds nothing and answers `unavailable`, and the watch starts
//! over after [`OVER_CAP_RETRY`] to see whether the objects fit again.
//!
//! Going over the cap is said three ways: a warning in the log, the
//! `tfjob_policy_read_cache_over_cap` counter, and (when the operator knows its pod, from
//! `$POD_NAME` and `$POD_NAMESPACE`) a `PolicyReadCacheOverCap` event regarding that pod, so that
//! `kubectl describe pod` on the operator shows it.
//!
//! A namespaced resource is watched in every namespace (the job-namespace scope follows jobs
//! wherever they are); the operator's RBAC decides what can actually be listed, and a watch it
//! refuses leaves the cache unsynced, its reads `unavailable`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry as MetricsRegistry;
use tfjob_policy_engine::cluster_cache::{self, CacheState, ClusterCache, ResourceCache};
use tfjob_policy_engine::cluster_reads::Resource;
use tfjob_policy_engine::{PolicySet, Registry};
use tokio::task::JoinHandle;

/// How long a cache over its cap waits before its watch lists again.
pub const OVER_CAP_RETRY: Duration = Duration::from_secs(300);

/// The API resource a policy read names.
pub fn api_resource(resource: Resource) -> ApiResource {
    let (group, version, kind) = match resource {
        Resource::Namespaces => ("", "v1", "Namespace"),
        Resource::Nodes => ("", "v1", "Node"),
        Resource::PriorityClasses => ("scheduling.k8s.io", "v1", "PriorityClass"),
        Resource::ResourceQuotas => ("", "v1", "ResourceQuota"),
        Resource::LimitRanges => ("", "v1", "LimitRange"),
        Resource::ConfigMaps => ("", "v1", "ConfigMap"),
        Resource::LocalQueues => ("kueue.x-k8s.io", "v1beta2", "LocalQueue"),
        Resource::ClusterQueues => ("kueue.x-k8s.io", "v1beta2", "ClusterQueue"),
        Resource::ResourceFlavors => ("kueue.x-k8s.io", "v1beta2", "ResourceFlavor"),
        Resource::TfJobs => ("kubeflow.org", "v1", "TFJob"),
    };
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        resource.name(),
    )
}

/// The resources the policies of `set` were granted.
pub fn needed(set: &PolicySet) -> BTreeSet<Resource> {
    set.all()
        .iter()
        .flat_map(|p| p.reads.iter().map(|g| g.resource))
        .collect()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

/// What the caches hold, per resource.
#[derive(Clone, Default)]
pub struct ReadCacheMetrics {
    objects: Family<ResourceLabels, Gauge>,
    bytes: Family<ResourceLabels, Gauge>,
    over_cap: Family<ResourceLabels, Counter>,
}

impl ReadCacheMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> ReadCacheMetrics {
        let m = ReadCacheMetrics::default();
        registry.register(
            "tfjob_policy_read_cache_objects",
            "Objects held by the cache policies read a resource from",
            m.objects.clone(),
        );
        registry.register(
            "tfjob_policy_read_cache_bytes",
            "JSON bytes held by the cache policies read a resource from",
            m.bytes.clone(),
        );
        registry.register(
            "tfjob_policy_read_cache_over_cap",
            "Times a read cache found more objects than its cap and dropped them; its reads answer unavailable until a list fits",
            m.over_cap.clone(),
        );
        m
    }

    fn observe(&self, cache: &ResourceCache) {
        let labels = ResourceLabels {
            resource: cache.resource().name().to_owned(),
        };
        self.objects
            .get_or_create(&labels)
            .set(i64::try_from(cache.len()).unwrap_or(i64::MAX));
        self.bytes
            .get_or_create(&labels)
            .set(i64::try_from(cache.bytes()).unwrap_or(i64::MAX));
    }

    fn overflowed(&self, resource: Resource) {
        self.over_cap
            .get_or_create(&ResourceLabels {
                resource: resource.name().to_owned(),
            })
            .inc();
    }

    fn forget(&self, resource: Resource) {
        let labels = ResourceLabels {
            resource: resource.name().to_owned(),
        };
        self.objects.remove(&labels);
        self.bytes.remove(&labels);
    }
}

/// The events that say a cache went over its cap, regarding the operator's own pod.
#[derive(Clone)]
pub struct OverCapEvents {
    client: Client,
    pod: ObjectReference,
}

/// The event reason of a cache going over its cap.
pub const OVER_CAP_REASON: &str = "PolicyReadCacheOverCap";

impl OverCapEvents {
    /// Events regarding pod `namespace/name` (the operator's).
    pub fn regarding_pod(client: Client, namespace: &str, name: &str) -> OverCapEvents {
        OverCapEvents {
            client,
            pod: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
        }
    }

    async fn publish(&self, note: String) {
        let now = Timestamp::now();
        let namespace = self.pod.namespace.clone().unwrap_or_default();
        let name = self.pod.name.clone().unwrap_or_default();
        let event = KubeEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some("WatchPolicyReads".into()),
            reason: Some(OVER_CAP_REASON.into()),
            note: Some(note),
            type_: Some("Warning".into()),
            regarding: Some(self.pod.clone()),
            reporting_controller: Some("tfjob-operator-policies".into()),
            reporting_instance: Some(name),
            ..KubeEvent::default()
        };
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(error = %e, "could not publish the event of a read cache over its cap");
        }
    }
}

/// The running watches and the caches they fill.
pub struct ReadCaches {
    client: Client,
    cluster: Arc<ClusterCache>,
    cap: usize,
    metrics: ReadCacheMetrics,
    events: Option<OverCapEvents>,
    running: BTreeMap<Resource, JoinHandle<()>>,
}

impl ReadCaches {
    /// Caches of at most `cap` objects each, served from `cluster`.
    pub fn new(
        client: Client,
        cluster: Arc<ClusterCache>,
        cap: usize,
        metrics: ReadCacheMetrics,
    ) -> ReadCaches {
        ReadCaches {
            client,
            cluster,
            cap,
            metrics,
            events: None,
            running: BTreeMap::new(),
        }
    }

    /// Says with `events` when a cache goes over its cap (besides the log and the metric).
    pub fn with_events(mut self, events: Option<OverCapEvents>) -> ReadCaches {
        self.events = events;
        self
    }

    /// The resources watched now.
    pub fn watched(&self) -> BTreeSet<Resource> {
        self.running.keys().copied().collect()
    }

    /// Starts and stops watches so that exactly `needed` run.
    pub fn update(&mut self, needed: &BTreeSet<Resource>) {
        let stale: Vec<Resource> = self
            .running
            .keys()
            .filter(|r| !needed.contains(r))
            .copied()
            .collect();
        for resource in stale {
            if let Some(task) = self.running.remove(&resource) {
                task.abort();
            }
            self.cluster.remove(resource);
            self.metrics.forget(resource);
            tracing::info!(%resource, "no active policy reads this resource any more; its cache stopped");
        }
        for &resource in needed {
            if self.running.contains_key(&resource) {
                continue;
            }
            let cache = self.cluster.insert(ResourceCache::new(resource, self.cap));
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &api_resource(resource));
            let task = tokio::spawn(feed(api, cache, self.metrics.clone(), self.events.clone()));
            self.running.insert(resource, task);
            tracing::info!(%resource, cap = self.cap, "an active policy reads this resource; its cache started");
        }
    }

    /// Follows the registry until `shutdown`: every snapshot swapped in updates the watches.
    pub async fn follow(
        mut self,
        registry: Arc<Registry>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let mut changes = registry.changes();
        tokio::pin!(shutdown);
        loop {
            changes.borrow_and_update();
            self.update(&needed(&registry.snapshot()));
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                () = &mut shutdown => break,
            }
        }
        self.update(&BTreeSet::new());
    }
}

impl Drop for ReadCaches {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// Feeds `cache` from a watch of `api` until aborted; over the cap, waits and lists again.
async fn feed(
    api: Api<DynamicObject>,
    cache: Arc<RwLock<ResourceCache>>,
    metrics: ReadCacheMetrics,
    reporter: Option<OverCapEvents>,
) {
    let resource = cluster_cache::read(&cache).resource();
    loop {
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(%resource, error = %e, "the watch of a policy read cache failed; retrying");
                    continue;
                }
            };
            let over_cap = {
                let mut held = cluster_cache::write(&cache);
                let overflows = held.overflows();
                match event {
                    Event::Init => held.begin_list(),
                    Event::InitApply(o) => held.listed(to_json(o)),
                    Event::InitDone => held.end_list(),
                    Event::Apply(o) => held.apply(to_json(o)),
                    Event::Delete(o) => held.delete(&to_json(o)),
                }
                metrics.observe(&held);
                (held.overflows() != overflows).then(|| over_cap_note(&held))
            };
            if let Some(note) = over_cap {
                // The cache dropped everything: stop watching a resource it cannot hold.
                metrics.overflowed(resource);
                if let Some(reporter) = &reporter {
                    reporter.publish(note).await;
                }
                break;
            }
        }
        tokio::time::sleep(OVER_CAP_RETRY).await;
    }
}

/// What the event of a cache over its cap says.
fn over_cap_note(cache: &ResourceCache) -> String {
    let seen = match cache.state() {
        CacheState::OverCap { objects } => *objects,
        _ => cache.len(),
    };
    let resource = cache.resource();
    format!(
        "the cache of {resource} that policies read holds at most {} objects and more exist \
         ({seen} seen when it stopped): reads of {resource} answer unavailable (their \
         policies' failurePolicy applies) until a list fits, tried again every {} s; raise \
         --policy-read-cache-objects, or have fewer policies read {resource}",
        cache.cap(),
        OVER_CAP_RETRY.as_secs()
    )
}

fn to_json(object: DynamicObject) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_policy_engine::cluster_reads::RESOURCES;

    /// CEL's `resource.Get(apiVersion, ...)` refuses a version other than the one read here.
    #[test]
    fn cel_reads_each_resource_at_the_version_the_caches_watch() {
        for resource in RESOURCES {
            let api = api_resource(resource);
            assert_eq!(
                tfjob_policy_cel::reads::api_version(resource.name()),
                Some(api.api_version.as_str()),
                "{}",
                resource.name()
            );
        }
    }
}
