//! Shared state of the reconcile loop: API client, caches of owned pods and services, event
//! recorder, metrics, policies, the gang-scheduling and Kueue caches, the reconcile seats, and the
//! per-job error backoff.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::Client;
use kube::Resource;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::events::{Event, EventType as KubeEventType};
use kube::runtime::reflector::Store;
use tfjob_api::TFJob;
use tfjob_planner::{EventType, JobEvent, PodPolicies, Settings};

use crate::backoff::backoff_for;
use crate::error::Error;
use crate::event_recorder::EventRecorder;
use crate::gang::GangCaches;
use crate::kueue::KueueCaches;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::owner_index::OwnedCache;
use crate::progress::Progress;
use crate::recent::{BELIEVE_FOR, RecentlyCreated};
use crate::seats::{SeatLimits, Seats};

/// Seats of a context built without a controller's configuration: the operator's default
/// `--controller-threads`.
const DEFAULT_SEATS: u16 = 4;

/// Once-keys remembered before the set is cleared (bounds memory on long runs).
const MAX_ONCE_KEYS: usize = 100_000;

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    /// Pods and services by their controller owner, read by each reconcile for its job.
    pub pods: OwnedCache<Pod>,
    pub services: OwnedCache<Service>,
    pub recorder: EventRecorder,
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
    /// Workloads, ResourceFlavors and priority classes, when the operator owns Kueue Workloads.
    pub kueue: Option<KueueCaches>,
    /// Whether this instance leads; a standby reconciles nothing.
    pub leadership: Leadership,
    /// The seats every reconcile takes before it runs, shared fairly among namespaces.
    pub seats: Seats,
    /// The jobs' cache, to read a job afresh once its reconcile has a seat (it may have waited
    /// for one); none in contexts built without a controller, which reconcile what they are
    /// given.
    pub jobs: Option<Store<DeserializeGuard<TFJob>>>,
}

impl Context {
    pub fn new(
        client: Client,
        pods: OwnedCache<Pod>,
        services: OwnedCache<Service>,
        recorder: EventRecorder,
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
            kueue: None,
            leadership: Leadership::always(),
            seats: Seats::new(SeatLimits::new(DEFAULT_SEATS)),
            jobs: None,
        }
    }

    /// The same context, reconciles taking these seats.
    pub fn with_seats(mut self, seats: Seats) -> Context {
        self.seats = seats;
        self
    }

    /// The same context, reading jobs afresh from this cache once seated.
    pub fn with_jobs(mut self, jobs: Store<DeserializeGuard<TFJob>>) -> Context {
        self.jobs = Some(jobs);
        self
    }

    /// The same context, reconciling only while `leadership` says this instance leads.
    pub fn with_leadership(mut self, leadership: Leadership) -> Context {
        self.leadership = leadership;
        self
    }

    /// The same context, gating queued jobs on Kueue Workloads read from these caches.
    pub fn with_kueue(mut self, kueue: KueueCaches) -> Context {
        self.kueue = Some(kueue);
        self
    }

    /// The same context, gang-scheduling jobs with these caches.
    pub fn with_gang(mut self, gang: GangCaches) -> Context {
        self.gang = Some(gang);
        self
    }

    /// Pods whose controller owner is the job with `uid`, with those created but not cached yet,
    /// by name.
    pub fn pods_of(&self, uid: &str) -> Vec<Pod> {
        by_name(self.created_pods.merge(uid, self.pods.owned_by(uid)))
    }

    /// Services whose controller owner is the job with `uid`, with those created but not cached
    /// yet, by name.
    pub fn services_of(&self, uid: &str) -> Vec<Service> {
        by_name(
            self.created_services
                .merge(uid, self.services.owned_by(uid)),
        )
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
            note: Some(tfjob_policy_logic::text::elided(&event.message, 1024)),
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

    /// The delay before retrying a job whose reconcile failed with `error`: see [`backoff_for`].
    pub fn next_backoff(&self, key: (String, String), error: &Error) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        backoff_for(error.first_retry(), *n, error.retry_after())
    }

    /// Forgets a job's failures after a successful reconcile.
    pub fn reset_backoff(&self, key: &(String, String)) {
        self.failures.lock().expect("backoff lock").remove(key);
    }
}

/// Sorted by name: the planner does not depend on the order of a job's objects, but a
/// deterministic one keeps its plans (the order of deletions, of events) reproducible.
fn by_name<K: Resource>(mut objects: Vec<K>) -> Vec<K> {
    objects.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    objects
}

#[cfg(test)]
impl Context {
    /// A context for unit tests whose client is never called (a call gets an error), with
    /// native policies and default settings.
    pub(crate) fn offline(pods: OwnedCache<Pod>, services: OwnedCache<Service>) -> Context {
        use http::{Request, Response};
        use kube::client::Body;
        use kube::runtime::events::Reporter;
        use prometheus_client::registry::Registry;
        use tfjob_planner::native::NativePolicies;

        let (service, _unanswered) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        Context::new(
            client.clone(),
            pods,
            services,
            EventRecorder::new(client, reporter),
            Metrics::register(&mut Registry::default()),
            Settings::default(),
            Arc::new(NativePolicies::default()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher;

    use crate::backoff::{API_FIRST_RETRY, FIRST_RETRY};
    use crate::owner_index;

    fn pod(name: &str, job_uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "kubeflow.org/v1".into(),
                    kind: "TFJob".into(),
                    name: job_uid.into(),
                    uid: job_uid.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    #[tokio::test]
    async fn pods_of_reads_the_jobs_own_pods_through_the_index() {
        // A lookup is no API request: the context's client is never called.
        let (pods, mut pod_writer) = owner_index::cache();
        let (services, _service_writer) = owner_index::cache();
        let ctx = Context::offline(pods, services);
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a-worker-1", "a")),
            watcher::Event::InitApply(pod("b-worker-0", "b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(pod("a-worker-0", "a")),
            watcher::Event::Apply(pod("b-worker-1", "b")),
            watcher::Event::Delete(pod("b-worker-0", "b")),
        ] {
            pod_writer.apply_watcher_event(&event);
        }
        // Created, not cached yet: counted, and sorted in with the cached ones.
        ctx.created_pods.remember("a", &pod("a-ps-0", "a"));
        assert_eq!(
            names(&ctx.pods_of("a")),
            ["a-ps-0", "a-worker-0", "a-worker-1"]
        );
        assert_eq!(names(&ctx.pods_of("b")), ["b-worker-1"]);
        assert!(ctx.pods_of("c").is_empty());
        assert!(ctx.services_of("a").is_empty());
    }

    fn api_error(code: u16, retry_after_seconds: u32) -> Error {
        // As the API server sends it.
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "reason": "TooManyRequests", "code": code,
            "details": {"retryAfterSeconds": retry_after_seconds},
        }))
        .expect("a Status");
        Error::kube(
            "creating pod a-worker-0",
            kube::Error::Api(Box::new(status)),
        )
    }

    #[test]
    fn the_error_decides_the_first_retry_and_the_servers_wait() {
        let throttled = api_error(429, 1);
        assert_eq!(throttled.first_retry(), API_FIRST_RETRY);
        assert_eq!(throttled.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(api_error(500, 0).retry_after(), None);
        let stuck = Error::PolicyStuck {
            running: Duration::from_secs(3),
            bound: Duration::from_secs(3),
        };
        assert_eq!(stuck.first_retry(), FIRST_RETRY);
        assert_eq!(stuck.retry_after(), None);
    }
}
