//! Publishing Kubernetes events (`events.k8s.io/v1`) for jobs, a repeated one as a series.
//!
//! The first occurrence of an event key is created; a repetition within [`SERIES_TTL`] of the
//! last one patches that event with `series` (count, last observed time), as kube-runtime's
//! `Recorder` and client-go's event broadcaster do. The key is the type, action, reason,
//! reporter, the regarding and related objects (compared whole, resourceVersion included, as
//! kube-runtime compares them) and, unlike theirs, the note: training-operator 1.9's events went
//! through client-go's core/v1 correlator, which keeps events with another message apart, so
//! `kubectl describe` shows why a job waits now ("PodGroup ... is Pending in queue"), not only
//! the first reason it ever gave ("has no phase yet") counted up.
//!
//! Why not kube-runtime's `Recorder`: it sweeps its whole cache for expired entries on every
//! event, under one lock. At 10,000 jobs (110,000 events within the six minutes it remembers)
//! that sweep took 60% of the operator's CPU. Here the bookkeeping is [`SeriesCache`], pure and
//! synchronous: expiry pops from the front of a queue in time order, so publishing costs O(1)
//! amortised, and an entry keeps only what a later patch needs, not the whole event. The lock is
//! never held across a request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// How long after its last occurrence an event can still be continued as a series.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Publishes events on behalf of one reporter (controller and instance).
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<SeriesCache>,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> EventRecorder {
        EventRecorder {
            client,
            reporter,
            series: Mutex::new(SeriesCache::new(SERIES_TTL)),
        }
    }

    /// Creates `ev` regarding `regarding`, or continues the series of its last occurrence.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = EventKey::of(ev, regarding, &self.reporter);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let repeat = self
            .series
            .lock()
            .expect("event series lock")
            .repeat(&key, Instant::now());
        if let Some(Repeat { name, count }) = repeat {
            let patch = serde_json::json!({
                "series": EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                }
            });
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // The API server let the event expire (its TTL, an hour by default, is its
                // own): start a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.generate(ev, regarding);
        let name = event.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &event).await?;
        self.series
            .lock()
            .expect("event series lock")
            .created(key, name, Instant::now());
        Ok(())
    }

    fn generate(&self, ev: &Event, regarding: &ObjectReference) -> K8sEvent {
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                // The name client-go gives: the regarding object's, and the time in hex.
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            related: ev.secondary.clone(),
            ..K8sEvent::default()
        }
    }
}

/// Every field of an object reference, for comparing references whole.
type ReferenceKey = [Option<String>; 7];

fn reference_key(r: &ObjectReference) -> ReferenceKey {
    [
        r.api_version.clone(),
        r.field_path.clone(),
        r.kind.clone(),
        r.name.clone(),
        r.namespace.clone(),
        r.resource_version.clone(),
        r.uid.clone(),
    ]
}

/// What makes two events occurrences of one: all but the time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    warning: bool,
    action: String,
    reason: String,
    note: Option<String>,
    controller: String,
    instance: Option<String>,
    regarding: ReferenceKey,
    related: Option<ReferenceKey>,
}

impl EventKey {
    pub fn of(ev: &Event, regarding: &ObjectReference, reporter: &Reporter) -> EventKey {
        EventKey {
            warning: ev.type_ == EventType::Warning,
            action: ev.action.clone(),
            reason: ev.reason.clone(),
            note: ev.note.clone(),
            controller: reporter.controller.clone(),
            instance: reporter.instance.clone(),
            regarding: reference_key(regarding),
            related: ev.secondary.as_ref().map(reference_key),
        }
    }
}

/// A repetition to publish as a patch of the event `name`.
#[derive(Debug, PartialEq, Eq)]
pub struct Repeat {
    pub name: String,
    /// The series' count after this occurrence (2 for the first repetition).
    pub count: i32,
}

struct Occurrence {
    name: String,
    count: i32,
    last: Instant,
}

/// The events published in the last [`SERIES_TTL`], by key, with the queue that expires them.
pub struct SeriesCache {
    ttl: Duration,
    by_key: HashMap<Arc<EventKey>, Occurrence>,
    /// Each occurrence's time and key, oldest first; a key occurs once per occurrence, and an
    /// entry whose key occurred again later is skipped when it expires.
    expiry: VecDeque<(Instant, Arc<EventKey>)>,
}

impl SeriesCache {
    pub fn new(ttl: Duration) -> SeriesCache {
        SeriesCache {
            ttl,
            by_key: HashMap::new(),
            expiry: VecDeque::new(),
        }
    }

    /// An occurrence of `key` at `now`: a repetition of a live event, or `None` when it is to be
    /// created (see [`SeriesCache::created`]).
    pub fn repeat(&mut self, key: &EventKey, now: Instant) -> Option<Repeat> {
        self.expire(now);
        let shared = Arc::clone(self.by_key.get_key_value(key)?.0);
        let occurrence = self.by_key.get_mut(key)?;
        occurrence.count = occurrence.count.saturating_add(1);
        occurrence.last = now;
        let repeat = Repeat {
            name: occurrence.name.clone(),
            count: occurrence.count,
        };
        self.expiry.push_back((now, shared));
        Some(repeat)
    }

    /// `key`'s event was created as `name` at `now`: its series starts.
    pub fn created(&mut self, key: EventKey, name: String, now: Instant) {
        self.expire(now);
        let key = Arc::new(key);
        self.by_key.insert(
            Arc::clone(&key),
            Occurrence {
                name,
                count: 1,
                last: now,
            },
        );
        self.expiry.push_back((now, key));
    }

    /// Events remembered.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Forgets every event whose last occurrence is `ttl` or more before `now`.
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.expiry.front()
            && now.duration_since(*at) >= self.ttl
        {
            let (_, key) = self.expiry.pop_front().expect("a front entry");
            if self
                .by_key
                .get(&key)
                .is_some_and(|o| now.duration_since(o.last) >= self.ttl)
            {
                self.by_key.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reporter() -> Reporter {
        Reporter {
            controller: "tfjob-controller".into(),
            instance: Some("pod-1".into()),
        }
    }

    fn job(name: &str, resource_version: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("kubeflow.org/v1".into()),
            kind: Some("TFJob".into()),
            name: Some(name.into()),
            namespace: Some("ml".into()),
            resource_version: Some(resource_version.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn key(reason: &str, note: &str, regarding: &ObjectReference) -> EventKey {
        EventKey::of(&event(reason, note), regarding, &reporter())
    }

    #[test]
    fn a_repetition_continues_the_series_of_the_first_occurrence() {
        let mut cache = SeriesCache::new(SERIES_TTL);
        let t0 = Instant::now();
        let a = key("SuccessfulCreatePod", "Created pod: a", &job("mnist", "7"));
        assert_eq!(cache.repeat(&a, t0), None);
        cache.created(a.clone(), "mnist.1".into(), t0);
        for count in 2..=4 {
            let at = t0 + Duration::from_secs(count as u64);
            let repeat = cache.repeat(&a, at);
            assert_eq!(
                repeat,
                Some(Repeat {
                    name: "mnist.1".into(),
                    count
                })
            );
        }
        // The note, the reason, the type and the regarding object (compared whole: another
        // resourceVersion is another key) are all part of the key.
        for other in [
            key("SuccessfulCreatePod", "Created pod: b", &job("mnist", "7")),
            key(
                "SuccessfulCreateService",
                "Created pod: a",
                &job("mnist", "7"),
            ),
            key("SuccessfulCreatePod", "Created pod: a", &job("mnist", "8")),
            key("SuccessfulCreatePod", "Created pod: a", &job("other", "7")),
        ] {
            assert_eq!(cache.repeat(&other, t0), None, "{other:?}");
        }
        let mut warning = event("SuccessfulCreatePod", "Created pod: a");
        warning.type_ = EventType::Warning;
        let warning = EventKey::of(&warning, &job("mnist", "7"), &reporter());
        assert_eq!(cache.repeat(&warning, t0), None);
    }

    #[test]
    fn an_event_expires_six_minutes_after_its_last_occurrence() {
        let mut cache = SeriesCache::new(SERIES_TTL);
        let t0 = Instant::now();
        let a = key("Reason", "a", &job("a", "1"));
        cache.created(a.clone(), "a.1".into(), t0);
        // Repeated after five minutes: alive until eleven.
        let five = t0 + Duration::from_secs(300);
        assert_eq!(cache.repeat(&a, five).map(|r| r.count), Some(2));
        let ten = t0 + Duration::from_secs(600);
        assert_eq!(cache.repeat(&a, ten).map(|r| r.count), Some(3));
        let past = ten + SERIES_TTL;
        assert_eq!(cache.repeat(&a, past), None);
        assert!(cache.is_empty());
    }

    #[test]
    fn expiry_keeps_memory_bounded_by_the_events_of_the_last_six_minutes() {
        let mut cache = SeriesCache::new(SERIES_TTL);
        let t0 = Instant::now();
        for i in 0..10_000u64 {
            let at = t0 + Duration::from_millis(100 * i);
            let k = key("SuccessfulCreatePod", "n", &job(&format!("job-{i}"), "1"));
            cache.created(k, format!("job-{i}.1"), at);
        }
        // 1,000 s of events, one per 100 ms: the last 360 s of them are remembered.
        assert_eq!(cache.len(), 3600);
        assert!(cache.expiry.len() <= 3601, "{}", cache.expiry.len());
        let old = key("SuccessfulCreatePod", "n", &job("job-10", "1"));
        let end = t0 + Duration::from_millis(100 * 9_999);
        assert_eq!(cache.repeat(&old, end), None);
        let recent = key("SuccessfulCreatePod", "n", &job("job-9999", "1"));
        assert_eq!(cache.repeat(&recent, end).map(|r| r.count), Some(2));
    }
}
