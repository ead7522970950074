//! The TFJob controller's work queue as client-go has it, around kube-runtime's scheduler: a
//! trigger for a job whose request already waits is absorbed, and client-go's work queue metrics
//! (`workqueue_*{name="tfjob",controller="tfjob"}`) are kept from the same events.
//!
//! kube-runtime keeps its requests inside the controller: a scheduler that holds one slot per
//! job (an earlier request replaces a later one; a request for a job being reconciled waits
//! until that reconcile ends) feeding a runner of `--threads` workers. Nothing of it is visible.
//! What is visible are the same events that drive it: the watch events that pass the trigger
//! streams (each names the job it wakes, by kube-runtime's own owner mapping), the requeues the
//! reconciles and the error policy ask for, the start and end of every reconcile, and the
//! requests the controller drops because their job no longer exists. [`QueueModel`] replays
//! those events under the scheduler's rules, so its depth is the number of jobs with a request
//! waiting for a worker, as client-go's queue depth is.
//!
//! The model also decides which triggers reach the scheduler. A request that waits for its
//! worker (here, for its seat) reads the job, its pods and its services from the caches once it
//! starts, and every cache is written before its watch event becomes a trigger; so a second
//! trigger for that job would only make it run twice. client-go drops such an add; kube-runtime,
//! whose runner counts a request waiting for a seat as running, would keep it as pending and scan
//! every pending request on each poll, which grows with the square of the jobs waiting. Here it is
//! dropped before it gets there.
//!
//! What differs from client-go (the README lists it too): a request is counted when its watch
//! event passes the trigger stream, a moment before kube-runtime's scheduler receives it; a
//! requeue is added when it comes due, noticed at the next event for that job or the next scrape;
//! and a request for a job that was deleted stays in the depth until the controller reports it
//! not found.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, TryStreamExt, future};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tfjob_api::TFJob;

use crate::runtime_metrics::CONTROLLER;

/// One item of the TFJob controller's output stream.
type ControllerResult<E1, E2> =
    Result<(ObjectRef<DeserializeGuard<TFJob>>, Action), ControllerError<E1, E2>>;

/// Which job a request is for: kube-runtime tells requests apart by namespace and name alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl QueueKey {
    /// The key of the object with `meta`.
    pub fn of(meta: &ObjectMeta) -> QueueKey {
        QueueKey {
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    fn from_ref<K: kube::runtime::reflector::Lookup + ?Sized>(r: &ObjectRef<K>) -> QueueKey {
        QueueKey {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// One job's place in the queue.
#[derive(Debug, Default)]
struct Entry {
    /// A request waits for a worker since then.
    queued_since: Option<Instant>,
    /// A requeue comes due then (not yet waiting).
    due: Option<Instant>,
    /// A reconcile of the job runs since then.
    processing_since: Option<Instant>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.queued_since.is_none() && self.due.is_none() && self.processing_since.is_none()
    }

    /// A requeue that has come due becomes a waiting request; true if it did.
    fn promote(&mut self, now: Instant) -> bool {
        match self.due {
            Some(due) if due <= now && self.queued_since.is_none() => {
                self.queued_since = Some(due);
                self.due = None;
                true
            }
            _ => false,
        }
    }
}

/// The queue replayed from the controller's events, with client-go's counts. Time is passed
/// in, so the rules are tested without waiting.
#[derive(Debug, Default)]
pub struct QueueModel {
    entries: HashMap<QueueKey, Entry>,
    adds: u64,
    retries: u64,
}

impl QueueModel {
    /// A trigger for `key` at `now`. Returns false when it joins a request already waiting (as
    /// client-go does, a duplicate is not an add): that request reads the caches when it starts,
    /// so the trigger need not go on.
    pub fn add(&mut self, key: QueueKey, now: Instant) -> bool {
        let entry = self.entries.entry(key).or_default();
        if entry.promote(now) {
            self.adds += 1;
        }
        if entry.queued_since.is_some() {
            return false;
        }
        // The scheduler keeps the earlier of two requests: this one replaces a later requeue.
        entry.queued_since = Some(now);
        entry.due = None;
        self.adds += 1;
        true
    }

    /// A requeue of `key` after `delay`, asked at `now`; `retry` when the error policy or a
    /// reconcile that did not finish asks for it (client-go's rate-limited add).
    pub fn requeue(&mut self, key: QueueKey, delay: Duration, now: Instant, retry: bool) {
        if retry {
            self.retries += 1;
        }
        let entry = self.entries.entry(key).or_default();
        if entry.queued_since.is_some() {
            // A request already waits and runs first; the scheduler drops this one.
            return;
        }
        let due = now.checked_add(delay).unwrap_or(now);
        entry.due = Some(entry.due.map_or(due, |d| d.min(due)));
        if entry.promote(now) {
            self.adds += 1;
        }
    }

    /// A reconcile of `key` starts at `now`; returns how long its request waited.
    pub fn start(&mut self, key: QueueKey, now: Instant) -> Option<Duration> {
        let entry = self.entries.entry(key).or_default();
        if entry.promote(now) {
            self.adds += 1;
        }
        // The scheduler gives up the job's slot when it hands the request out.
        entry.due = None;
        entry.processing_since = Some(now);
        entry
            .queued_since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }

    /// The reconcile of `key` ends at `now`; returns how long it ran.
    pub fn finish(&mut self, key: &QueueKey, now: Instant) -> Option<Duration> {
        let entry = self.entries.get_mut(key)?;
        let ran = entry
            .processing_since
            .take()
            .map(|since| now.saturating_duration_since(since));
        if entry.is_empty() {
            self.entries.remove(key);
        }
        ran
    }

    /// The controller dropped the request for `key`: its job is gone from the cache.
    pub fn forget(&mut self, key: &QueueKey) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.queued_since = None;
            entry.due = None;
            if entry.is_empty() {
                self.entries.remove(key);
            }
        }
    }

    /// Counts the requeues that have come due by `now` as adds.
    pub fn promote_all(&mut self, now: Instant) {
        for entry in self.entries.values_mut() {
            if entry.promote(now) {
                self.adds += 1;
            }
        }
    }

    /// Requests waiting for a worker.
    pub fn depth(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.queued_since.is_some())
            .count()
    }

    pub fn adds(&self) -> u64 {
        self.adds
    }

    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Seconds of work in progress, summed, and of the longest running reconcile, at `now`.
    pub fn in_progress(&self, now: Instant) -> (f64, f64) {
        self.entries
            .values()
            .filter_map(|e| e.processing_since)
            .map(|since| now.saturating_duration_since(since).as_secs_f64())
            .fold((0.0, 0.0), |(sum, max), s| (sum + s, f64::max(max, s)))
    }
}

/// The work queue metrics of the TFJob controller: the model behind a lock, and the two
/// histograms. Cheap to clone; every clone is the same queue.
#[derive(Clone, Debug)]
pub struct WorkQueue {
    model: Arc<Mutex<QueueModel>>,
    queue_duration: Histogram,
    work_duration: Histogram,
}

impl WorkQueue {
    /// Creates the queue and registers its metrics in `registry` with client-go's names and
    /// controller-runtime's labels (`name` and `controller`, both the controller's name).
    pub fn register(registry: &mut Registry) -> WorkQueue {
        // client-go's buckets: 10 ns to 1000 s, ten per decade.
        let buckets = || Histogram::new(exponential_buckets(10e-9, 10.0, 12));
        let queue = WorkQueue {
            model: Arc::default(),
            queue_duration: buckets(),
            work_duration: buckets(),
        };
        registry
            .sub_registry_with_labels(
                [
                    ("name".into(), CONTROLLER.into()),
                    ("controller".into(), CONTROLLER.into()),
                ]
                .into_iter(),
            )
            .register_collector(Box::new(queue.clone()));
        queue
    }

    fn model(&self) -> std::sync::MutexGuard<'_, QueueModel> {
        // The model holds counts only; one poisoned by a panic elsewhere is still usable.
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wraps the TFJob watch stream: each object it yields wakes that job, and goes on to the
    /// scheduler unless a request for the job already waits.
    pub fn job_triggers<S>(&self, stream: S) -> impl Stream<Item = S::Item> + Send + 'static
    where
        S: Stream<Item = Result<DeserializeGuard<TFJob>, kube::runtime::watcher::Error>>
            + Send
            + 'static,
    {
        let queue = self.clone();
        stream.try_filter(move |job| {
            future::ready(queue.model().add(QueueKey::of(job.meta()), Instant::now()))
        })
    }

    /// Wraps an owned kind's watch stream: each object it yields wakes the TFJobs among its
    /// owners, found by the same rule kube-runtime's `owns_stream` applies, and goes on to the
    /// scheduler when it wakes one whose request is not already waiting.
    pub fn owner_triggers<S, C>(&self, stream: S) -> impl Stream<Item = S::Item> + Send + 'static
    where
        S: Stream<Item = Result<C, kube::runtime::watcher::Error>> + Send + 'static,
        C: Resource + Send + 'static,
    {
        let queue = self.clone();
        stream.try_filter(move |child| future::ready(queue.add_owners(child.meta())))
    }

    /// Adds a trigger for every TFJob owning the object with `meta`; true if one of them was
    /// not already waiting.
    fn add_owners(&self, meta: &ObjectMeta) -> bool {
        let now = Instant::now();
        let mut model = self.model();
        let mut woken = false;
        for owner in meta.owner_references.iter().flatten() {
            let job = ObjectRef::<DeserializeGuard<TFJob>>::from_owner_ref(
                meta.namespace.as_deref(),
                owner,
                (),
            );
            if let Some(job) = job {
                woken |= model.add(QueueKey::from_ref(&job), now);
            }
        }
        woken
    }

    /// Looks at one result of the controller's stream: a request whose job is no longer in the
    /// cache was dropped without a reconcile.
    pub fn settle<E1, E2>(&self, result: &ControllerResult<E1, E2>) {
        if let Err(ControllerError::ObjectNotFound(job)) = result {
            self.model().forget(&QueueKey::from_ref(job.as_ref()));
        }
    }

    /// A reconcile of the job with `meta` starts.
    pub(crate) fn started(&self, key: QueueKey, now: Instant) {
        let waited = self.model().start(key, now);
        if let Some(waited) = waited {
            self.queue_duration.observe(waited.as_secs_f64());
        }
    }

    /// The reconcile of `key` ended; it asked for a requeue after `requeue`, a retry if `retry`.
    pub(crate) fn finished(&self, key: &QueueKey, requeue: Option<(Duration, bool)>, now: Instant) {
        let mut model = self.model();
        if let Some(ran) = model.finish(key, now) {
            self.work_duration.observe(ran.as_secs_f64());
        }
        if let Some((delay, retry)) = requeue {
            model.requeue(key.clone(), delay, now, retry);
        }
    }

    /// The error policy retries the job with `meta` after `delay`.
    pub fn retry_after(&self, meta: &ObjectMeta, delay: Duration) {
        self.model()
            .requeue(QueueKey::of(meta), delay, Instant::now(), true);
    }
}

impl Collector for WorkQueue {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let (depth, adds, retries, (unfinished, longest)) = {
            let mut model = self.model();
            model.promote_all(now);
            (
                model.depth(),
                model.adds(),
                model.retries(),
                model.in_progress(now),
            )
        };
        let depth = ConstGauge::new(depth as i64);
        depth.encode(encoder.encode_descriptor(
            "workqueue_depth",
            "Current depth of workqueue",
            None,
            depth.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                adds,
            ),
            (
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                retries,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        for (name, help, histogram) in [
            (
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                &self.queue_duration,
            ),
            (
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                &self.work_duration,
            ),
        ] {
            histogram.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                histogram.metric_type(),
            )?)?;
        }
        for (name, help, value) in [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been \
                 observed by work_duration",
                unfinished,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                longest,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use futures::{FutureExt, StreamExt};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn key(name: &str) -> QueueKey {
        QueueKey {
            namespace: Some("ml".into()),
            name: name.into(),
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn duplicate_triggers_are_one_request_and_its_wait_runs_from_the_first() {
        let t0 = Instant::now();
        let mut q = QueueModel::default();
        assert!(q.add(key("a"), t0));
        assert!(!q.add(key("a"), t0 + MS), "a duplicate is not an add");
        assert!(q.add(key("b"), t0 + MS));
        assert_eq!((q.depth(), q.adds()), (2, 2));
        assert_eq!(q.start(key("a"), t0 + 5 * MS), Some(5 * MS));
        assert_eq!(q.depth(), 1);
        assert_eq!(q.finish(&key("a"), t0 + 8 * MS), Some(3 * MS));
        assert_eq!(q.start(key("b"), t0 + 9 * MS), Some(8 * MS));
        assert_eq!(q.finish(&key("b"), t0 + 9 * MS), Some(Duration::ZERO));
        assert_eq!(q.depth(), 0);
        assert!(q.entries.is_empty(), "finished jobs leave no entry");
    }

    #[test]
    fn a_trigger_during_a_reconcile_waits_for_it_and_then_runs_again() {
        let t0 = Instant::now();
        let mut q = QueueModel::default();
        q.add(key("a"), t0);
        q.start(key("a"), t0);
        assert!(
            q.add(key("a"), t0 + MS),
            "a change during the reconcile is new"
        );
        assert_eq!(q.depth(), 1);
        assert_eq!(q.in_progress(t0 + 4 * MS), (0.004, 0.004));
        // Its own requeue is dropped: the waiting request runs first.
        q.finish(&key("a"), t0 + 2 * MS);
        q.requeue(key("a"), Duration::from_secs(30), t0 + 2 * MS, false);
        assert_eq!(q.start(key("a"), t0 + 3 * MS), Some(2 * MS));
        q.finish(&key("a"), t0 + 3 * MS);
        q.promote_all(t0 + Duration::from_secs(60));
        assert_eq!((q.depth(), q.adds()), (0, 2));
    }

    #[test]
    fn a_requeue_is_added_when_it_comes_due_and_an_earlier_trigger_replaces_it() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut q = QueueModel::default();
        q.requeue(key("a"), 10 * second, t0, true);
        assert_eq!((q.depth(), q.adds(), q.retries()), (0, 0, 1));
        q.promote_all(t0 + 9 * second);
        assert_eq!(q.depth(), 0, "not due yet");
        q.promote_all(t0 + 11 * second);
        assert_eq!((q.depth(), q.adds()), (1, 1));
        assert_eq!(q.start(key("a"), t0 + 12 * second), Some(2 * second));
        q.finish(&key("a"), t0 + 12 * second);

        q.requeue(key("b"), 10 * second, t0, false);
        q.requeue(key("b"), 20 * second, t0, false);
        assert!(
            q.add(key("b"), t0 + second),
            "a trigger before the requeue runs now"
        );
        q.start(key("b"), t0 + second);
        q.finish(&key("b"), t0 + second);
        q.promote_all(t0 + 30 * second);
        assert_eq!(q.depth(), 0, "the replaced requeue never comes");
        assert_eq!((q.adds(), q.retries()), (2, 1));
    }

    #[test]
    fn a_request_for_a_deleted_job_leaves_when_the_controller_drops_it() {
        let t0 = Instant::now();
        let mut q = QueueModel::default();
        q.add(key("gone"), t0);
        assert_eq!(q.depth(), 1);
        q.forget(&key("gone"));
        assert_eq!(q.depth(), 0);
        assert!(q.entries.is_empty());
    }

    /// A pod owned by the TFJob `job` in namespace `ml`.
    fn pod_of(job: &str) -> Result<Pod, kube::runtime::watcher::Error> {
        Ok(Pod {
            metadata: ObjectMeta {
                namespace: Some("ml".into()),
                name: Some(format!("{job}-worker-0")),
                owner_references: Some(vec![OwnerReference {
                    api_version: "kubeflow.org/v1".into(),
                    kind: "TFJob".into(),
                    name: job.into(),
                    uid: format!("uid-{job}"),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        })
    }

    #[tokio::test]
    async fn a_trigger_for_a_job_whose_request_waits_does_not_reach_the_scheduler() {
        let queue = WorkQueue::register(&mut Registry::default());
        let (tx, rx) = mpsc::unbounded();
        let mut triggers = Box::pin(queue.owner_triggers(rx));
        // What reaches the scheduler after `pod` comes: the pod, or nothing.
        let mut passes = |pod: Result<Pod, kube::runtime::watcher::Error>| {
            tx.unbounded_send(pod).unwrap();
            triggers.next().now_or_never().is_some()
        };

        assert!(passes(pod_of("a")), "the first trigger of an idle job");
        assert!(!passes(pod_of("a")), "its request waits: absorbed");
        assert!(passes(pod_of("b")), "another job is woken");
        assert!(
            !passes(Ok(Pod::default())),
            "an object owned by no TFJob wakes nothing"
        );

        // Once the reconcile started, it may have read the caches before this change.
        queue.started(key("a"), Instant::now());
        assert!(passes(pod_of("a")), "a change during the reconcile goes on");
        assert!(!passes(pod_of("a")), "one rerun already waits: absorbed");
        queue.finished(&key("a"), None, Instant::now());
        assert!(!passes(pod_of("a")), "the rerun still waits: absorbed");
        queue.started(key("a"), Instant::now());
        queue.finished(&key("a"), None, Instant::now());
        assert!(passes(pod_of("a")), "idle again: woken");
        assert_eq!(queue.model().adds(), 4);
    }

    #[tokio::test]
    async fn a_job_change_while_its_request_waits_does_not_reach_the_scheduler() {
        let queue = WorkQueue::register(&mut Registry::default());
        let job = |name: &str| {
            let mut job = TFJob::new(name, Default::default());
            job.metadata.namespace = Some("ml".into());
            Ok(DeserializeGuard(Ok(job)))
        };
        let mut triggers =
            Box::pin(queue.job_triggers(futures::stream::iter([job("a"), job("a"), job("b")])));
        let mut passed = Vec::new();
        while let Some(Ok(DeserializeGuard(Ok(job)))) = triggers.next().await {
            passed.push(job.metadata.name.unwrap());
        }
        assert_eq!(passed, ["a", "b"]);
    }

    #[test]
    fn the_collector_serves_client_go_names_with_both_labels() {
        let mut registry = Registry::default();
        let queue = WorkQueue::register(&mut registry);
        let job = ObjectMeta {
            namespace: Some("ml".into()),
            name: Some("mnist".into()),
            ..ObjectMeta::default()
        };
        queue.model().add(QueueKey::of(&job), Instant::now());
        queue.retry_after(&job, Duration::from_secs(10));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "workqueue_depth{name=\"tfjob\",controller=\"tfjob\"} 1\n",
            "workqueue_adds_total{name=\"tfjob\",controller=\"tfjob\"} 1\n",
            "workqueue_retries_total{name=\"tfjob\",controller=\"tfjob\"} 1\n",
            "workqueue_queue_duration_seconds_count{name=\"tfjob\",controller=\"tfjob\"} 0\n",
            "workqueue_work_duration_seconds_count{name=\"tfjob\",controller=\"tfjob\"} 0\n",
            "workqueue_unfinished_work_seconds{name=\"tfjob\",controller=\"tfjob\"} 0.0\n",
            "workqueue_longest_running_processor_seconds{name=\"tfjob\",controller=\"tfjob\"} 0.0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
