//! Prometheus metrics: training-operator's job and PodGroup counters plus the controller's own
//! reconcile count, errors by category and duration; and the standard controller metrics of
//! controller-runtime ([`crate::runtime_metrics`]) and client-go's work queue
//! ([`crate::workqueue`]), updated together by a [`Worker`] per reconcile.

use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use tfjob_planner::Transition;

use crate::outcome::Outcome;
use crate::runtime_metrics::{ReconcileResult, RuntimeMetrics};
use crate::workqueue::{QueueKey, WorkQueue};

/// Labels of the job counters, as training-operator named them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job_namespace: String,
    pub framework: String,
}

/// The exemplar of a reconcile-duration bucket: the trace of one reconcile that fell in it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: String,
}

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

/// Every metric the controller updates.
#[derive(Clone)]
pub struct Metrics {
    jobs_created: Family<JobLabels, Counter>,
    jobs_deleted: Family<JobLabels, Counter>,
    jobs_successful: Family<JobLabels, Counter>,
    jobs_failed: Family<JobLabels, Counter>,
    jobs_restarted: Family<JobLabels, Counter>,
    reconciles: Counter,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: HistogramWithExemplars<TraceExemplar>,
    pod_groups_created: Counter,
    pod_groups_deleted: Counter,
    /// controller-runtime's controller metrics.
    pub runtime: RuntimeMetrics,
    /// client-go's work queue metrics, replayed from the controller's events.
    pub queue: WorkQueue,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            jobs_created: Family::default(),
            jobs_deleted: Family::default(),
            jobs_successful: Family::default(),
            jobs_failed: Family::default(),
            jobs_restarted: Family::default(),
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: HistogramWithExemplars::new(exponential_buckets(0.0005, 2.0, 14)),
            pod_groups_created: Counter::default(),
            pod_groups_deleted: Counter::default(),
            runtime: RuntimeMetrics::register(registry),
            queue: WorkQueue::register(registry),
        };
        // Every category is served from the start, at zero, so an error rate is 0 rather than
        // missing while nothing fails.
        for category in crate::error::Error::CATEGORIES {
            m.reconcile_failed_by(category, 0);
        }
        // prometheus-client appends `_total` to counters.
        for (name, help, family) in [
            (
                "training_operator_jobs_created",
                "Number of TFJobs created",
                &m.jobs_created,
            ),
            (
                "training_operator_jobs_deleted",
                "Number of TFJobs deleted",
                &m.jobs_deleted,
            ),
            (
                "training_operator_jobs_successful",
                "Number of TFJobs that succeeded",
                &m.jobs_successful,
            ),
            (
                "training_operator_jobs_failed",
                "Number of TFJobs that failed",
                &m.jobs_failed,
            ),
            (
                "training_operator_jobs_restarted",
                "Number of TFJob replica restarts",
                &m.jobs_restarted,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        // training-operator's PodGroup counters, under its names (no prefix, no labels).
        registry.register(
            "created_pod_groups",
            "The total number of created pod groups",
            m.pod_groups_created.clone(),
        );
        registry.register(
            "deleted_pod_groups",
            "The total number of deleted pod groups",
            m.pod_groups_deleted.clone(),
        );
        registry.register(
            "tfjob_operator_reconciles",
            "Reconciles started",
            m.reconciles.clone(),
        );
        registry.register(
            "tfjob_operator_reconcile_errors",
            "Reconciles that failed, by error category",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "tfjob_operator_reconcile_duration_seconds",
            "Time spent in one reconcile",
            m.reconcile_duration.clone(),
        );
        m
    }

    pub fn pod_group_created(&self) {
        self.pod_groups_created.inc();
    }

    pub fn pod_group_deleted(&self) {
        self.pod_groups_deleted.inc();
    }

    pub fn reconcile_started(&self) {
        self.reconciles.inc();
    }

    /// Observes one reconcile's duration; `trace_id`, when the reconcile was traced, becomes
    /// its bucket's exemplar (the OpenMetrics exposition shows it), so that a slow bucket leads
    /// to a trace of a reconcile that was that slow.
    pub fn reconcile_finished(&self, took: Duration, trace_id: Option<String>) {
        self.reconcile_duration.observe(
            took.as_secs_f64(),
            trace_id.map(|trace_id| TraceExemplar { trace_id }),
            None,
        );
    }

    pub fn reconcile_failed(&self, category: &str) {
        self.reconcile_failed_by(category, 1);
    }

    fn reconcile_failed_by(&self, category: &str, n: u64) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                category: category.to_owned(),
            })
            .inc_by(n);
    }

    /// A reconcile of the job with `key` starts: counted as an active worker, its request leaves
    /// the queue.
    pub fn worker(&self, key: QueueKey) -> Worker<'_> {
        let started = Instant::now();
        self.runtime.worker_started();
        self.queue.started(key.clone(), started);
        Worker {
            metrics: self,
            key,
            started,
            finished: false,
        }
    }

    /// Counts a job transition the planner reported.
    pub fn transition(&self, namespace: &str, transition: Transition) {
        let family = match transition {
            Transition::Created => &self.jobs_created,
            Transition::Deleted => &self.jobs_deleted,
            Transition::Succeeded => &self.jobs_successful,
            Transition::Failed => &self.jobs_failed,
            Transition::Restarted => &self.jobs_restarted,
        };
        family
            .get_or_create(&JobLabels {
                job_namespace: namespace.to_owned(),
                framework: "tensorflow".to_owned(),
            })
            .inc();
    }
}

/// A reconcile in flight, for the standard metrics. [`Worker::finished`] counts its result; a
/// reconcile dropped before it finished (the controller aborted) only leaves the worker count.
#[must_use = "the reconcile counts as running only while this lives"]
pub struct Worker<'a> {
    metrics: &'a Metrics,
    key: QueueKey,
    started: Instant,
    finished: bool,
}

impl Worker<'_> {
    /// The reconcile ended with `result`: counted by controller-runtime's result, timed, and its
    /// requeue scheduled in the queue (an error's retry is the error policy's to schedule).
    pub fn finished<E>(mut self, result: &Result<Outcome, E>) {
        let now = Instant::now();
        let result_label = ReconcileResult::of(result);
        self.metrics.runtime.reconciled(
            result_label,
            now.saturating_duration_since(self.started).as_secs_f64(),
        );
        let requeue = match result {
            Ok(outcome) => outcome
                .requeue()
                .map(|after| (after, result_label == ReconcileResult::Requeue)),
            Err(_) => None,
        };
        self.metrics.queue.finished(&self.key, requeue, now);
        self.metrics.runtime.worker_stopped();
        self.finished = true;
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics.runtime.worker_stopped();
            self.metrics.queue.finished(&self.key, None, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_exposed_with_kubeflow_names_and_labels() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.transition("ml", Transition::Created);
        m.transition("ml", Transition::Restarted);
        m.transition("ml", Transition::Restarted);
        m.reconcile_failed("api");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"training_operator_jobs_created_total{job_namespace="ml",framework="tensorflow"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"training_operator_jobs_restarted_total{job_namespace="ml",framework="tensorflow"} 2"#
        ));
        assert!(text.contains(r#"tfjob_operator_reconcile_errors_total{category="api"} 1"#));
        assert!(
            text.contains(r#"tfjob_operator_reconcile_errors_total{category="policy"} 0"#),
            "every category is served from the start"
        );
        assert!(text.contains("tfjob_operator_reconcile_duration_seconds_bucket"));
    }

    #[test]
    fn a_traced_reconcile_is_its_buckets_exemplar() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.reconcile_finished(Duration::from_millis(3), None);
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        m.reconcile_finished(Duration::from_millis(300), Some(trace.to_owned()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let exemplars: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tfjob_operator_reconcile_duration_seconds_bucket"))
            .filter(|l| l.contains(" # {"))
            .collect();
        assert_eq!(exemplars.len(), 1, "{text}");
        assert!(
            exemplars[0].contains(&format!(r#"# {{trace_id="{trace}"}} 0.3"#)),
            "{}",
            exemplars[0]
        );
        assert!(exemplars[0].contains(r#"le="0.512""#), "{}", exemplars[0]);
    }
}
