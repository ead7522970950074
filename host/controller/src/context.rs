//! Shared state of the reconcile loop: API client, caches of owned pods and services, event
//! recorder, metrics, policies, the gang-scheduling caches, and the per-job error backoff.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::Client;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder};
use kube::runtime::reflector::Store;
use tfjob_planner::{EventType, JobEvent, PodPolicies, Settings};

use crate::gang::GangCaches;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::recent::{BELIEVE_FOR, RecentlyCreated};

/// First delay after a failed reconcile; doubled per consecutive failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest delay between retries of a failing job.
pub const BACKOFF_MAX: Duration = Duration::from_secs(360);
/// Once-keys remembered before the set is cleared (bounds memory on long runs).
const MAX_ONCE_KEYS: usize = 100_000;

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub settings: Settings,
    pub policies: Arc<dyn PodPolicies>,
    failures: Mutex<HashMap<(String, String), u32>>,
    published_once: Mutex<HashSet<String>>,
    /// Pods and services created by this operator that the caches may not show yet.
    pub created_pods: RecentlyCreated<Pod>,
    pub created_services: RecentlyCreated<Service>,
    /// Reconciles in flight, for `/healthz`.
    pub progress: Arc<Progress>,
    /// PodGroups and priority classes, when jobs are gang-scheduled.
    pub gang: Option<GangCaches>,
    /// Whether this instance leads; a standby reconciles nothing.
    pub leadership: Leadership,
}

impl Context {
    pub fn new(
        client: Client,
        pods: Store<Pod>,
        services: Store<Service>,
        recorder: Recorder,
        metrics: Metrics,
        settings: Settings,
        policies: Arc<dyn PodPolicies>,
    ) -> Context {
        Context {
            client,
            pods,
            services,
            recorder,
            metrics,
            settings,
            policies,
            failures: Mutex::default(),
            published_once: Mutex::default(),
            created_pods: RecentlyCreated::new(BELIEVE_FOR),
            created_services: RecentlyCreated::new(BELIEVE_FOR),
            progress: Arc::default(),
            gang: None,
            leadership: Leadership::always(),
        }
    }

    /// The same context, reconciling only while `leadership` says this instance leads.
    pub fn with_leadership(mut self, leadership: Leadership) -> Context {
        self.leadership = leadership;
        self
    }

    /// The same context, gang-scheduling jobs with these caches.
    pub fn with_gang(mut self, gang: GangCaches) -> Context {
        self.gang = Some(gang);
        self
    }

    /// Pods whose controller owner is the job with `uid`, with those created but not cached yet.
    pub fn pods_of(&self, uid: &str) -> Vec<Pod> {
        let cached = owned(&self.pods, uid, |p: &Pod| &p.metadata);
        self.created_pods.merge(uid, cached)
    }

    /// Services whose controller owner is the job with `uid`, with those created but not cached
    /// yet.
    pub fn services_of(&self, uid: &str) -> Vec<Service> {
        let cached = owned(&self.services, uid, |s: &Service| &s.metadata);
        self.created_services.merge(uid, cached)
    }

    /// Publishes an event on the job, once per once-key. Event failures are logged, never fatal:
    /// an event is information, not state.
    pub async fn publish(&self, regarding: &ObjectReference, event: &JobEvent) {
        if let Some(key) = &event.once_key {
            let mut seen = self.published_once.lock().expect("once-key lock");
            if seen.len() >= MAX_ONCE_KEYS {
                seen.clear();
            }
            if !seen.insert(key.clone()) {
                return;
            }
        }
        let kube_event = Event {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.clone(),
            note: Some(tfjob_api::text::elided(&event.message, 1024)),
            action: "Reconcile".into(),
            secondary: event.related.as_ref().map(|(kind, name)| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some(kind.clone()),
                name: Some(name.clone()),
                namespace: regarding.namespace.clone(),
                ..ObjectReference::default()
            }),
        };
        if let Err(e) = self.recorder.publish(&kube_event, regarding).await {
            tracing::warn!(reason = %event.reason, error = %e, "could not publish event");
        }
    }

    /// The delay before retrying a job whose reconcile failed, doubling from 10 s to 360 s.
    pub fn next_backoff(&self, key: (String, String)) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        backoff_for(*n)
    }

    /// Forgets a job's failures after a successful reconcile.
    pub fn reset_backoff(&self, key: &(String, String)) {
        self.failures.lock().expect("backoff lock").remove(key);
    }
}

/// Exponential backoff: 10 s, 20 s, 40 s, ... capped at 360 s.
pub fn backoff_for(consecutive_failures: u32) -> Duration {
    let exp = consecutive_failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

fn owned<K>(
    store: &Store<K>,
    uid: &str,
    meta: impl Fn(&K) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .filter(|o| {
            meta(o)
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
        .map(|o| (**o).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_ten_seconds_to_six_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff_for(n).as_secs()).collect();
        assert_eq!(secs, vec![10, 20, 40, 80, 160, 320, 360, 360]);
        assert_eq!(backoff_for(u32::MAX), BACKOFF_MAX);
    }
}
