//! controller-runtime's controller metrics, under its names, types, labels and buckets, so
//! dashboards and alerts made for Go operators work unchanged: `controller_runtime_reconcile_total`
//! by `result`, `controller_runtime_reconcile_errors_total`,
//! `controller_runtime_reconcile_time_seconds`, `controller_runtime_active_workers` and
//! `controller_runtime_max_concurrent_reconciles`, all with `controller="tfjob"`.
//!
//! As controller-runtime does when a controller starts, every series exists from the start (at
//! zero), so a rate over a quiet operator is 0, not "no data".

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::outcome::Outcome;

/// The `controller` label of every standard metric (controller-runtime names a controller after
/// the kind it reconciles, lower case).
pub const CONTROLLER: &str = "tfjob";

/// controller-runtime's reconcile time buckets (seconds).
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// controller-runtime's `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// The reconcile returned an error (retried with the per-job backoff).
    Error,
    /// Not done without an error, retried soon (controller-runtime's `Requeue: true`).
    Requeue,
    /// Done, looked at again after a delay (controller-runtime's `RequeueAfter`).
    RequeueAfter,
    /// Done.
    Success,
}

impl ReconcileResult {
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Error,
        ReconcileResult::Requeue,
        ReconcileResult::RequeueAfter,
        ReconcileResult::Success,
    ];

    /// The result of a finished reconcile.
    pub fn of<E>(result: &Result<Outcome, E>) -> ReconcileResult {
        match result {
            Err(_) => ReconcileResult::Error,
            Ok(Outcome::Retry(_)) => ReconcileResult::Requeue,
            Ok(Outcome::RecheckAfter(_)) => ReconcileResult::RequeueAfter,
            Ok(Outcome::Done) => ReconcileResult::Success,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Success => "success",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The controller metrics.
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    total: Family<ResultLabels, Counter>,
    errors: Counter,
    time: Histogram,
    active_workers: Gauge,
    max_concurrent: Gauge,
}

impl RuntimeMetrics {
    /// Creates the metrics and registers them in `registry` with `controller="tfjob"`.
    pub fn register(registry: &mut Registry) -> RuntimeMetrics {
        let m = RuntimeMetrics {
            total: Family::default(),
            errors: Counter::default(),
            time: Histogram::new(RECONCILE_TIME_BUCKETS),
            active_workers: Gauge::default(),
            max_concurrent: Gauge::default(),
        };
        for result in ReconcileResult::ALL {
            // Creating the series is the point; the guard is dropped at once.
            drop(m.total.get_or_create(&ResultLabels {
                result: result.label(),
            }));
        }
        let registry = registry.sub_registry_with_label(("controller".into(), CONTROLLER.into()));
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active_workers.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent.clone(),
        );
        m
    }

    /// Sets the worker count the controller was started with (`--threads`).
    pub fn set_max_concurrent(&self, threads: u16) {
        self.max_concurrent.set(i64::from(threads));
    }

    pub(crate) fn worker_started(&self) {
        self.active_workers.inc();
    }

    pub(crate) fn worker_stopped(&self) {
        self.active_workers.dec();
    }

    /// Counts a finished reconcile that took `seconds`.
    pub(crate) fn reconciled(&self, result: ReconcileResult, seconds: f64) {
        self.total
            .get_or_create(&ResultLabels {
                result: result.label(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.errors.inc();
        }
        self.time.observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn results_are_labelled_as_controller_runtime_labels_them() {
        let second = Duration::from_secs(1);
        let labels: Vec<&str> = [
            Err(()),
            Ok(Outcome::Retry(second)),
            Ok(Outcome::RecheckAfter(second)),
            Ok(Outcome::Done),
        ]
        .iter()
        .map(|r| ReconcileResult::of(r).label())
        .collect();
        assert_eq!(labels, ["error", "requeue", "requeue_after", "success"]);
    }

    #[test]
    fn every_series_exists_from_the_start_and_counts_with_the_controller_label() {
        let mut registry = Registry::default();
        let m = RuntimeMetrics::register(&mut registry);
        m.set_max_concurrent(4);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for result in ["success", "error", "requeue", "requeue_after"] {
            assert!(
                text.contains(&format!(
                    "controller_runtime_reconcile_total{{controller=\"tfjob\",result=\"{result}\"}} 0\n"
                )),
                "{text}"
            );
        }
        assert!(
            text.contains("controller_runtime_max_concurrent_reconciles{controller=\"tfjob\"} 4\n")
        );
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"tfjob\"} 0\n")
        );

        m.worker_started();
        m.reconciled(ReconcileResult::Error, 0.007);
        m.reconciled(ReconcileResult::Success, 0.2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("controller_runtime_reconcile_errors_total{controller=\"tfjob\"} 1\n")
        );
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"tfjob\",result=\"success\"} 1\n"
        ));
        assert!(text.contains("controller_runtime_active_workers{controller=\"tfjob\"} 1\n"));
        assert!(
            text.contains(
                "controller_runtime_reconcile_time_seconds_bucket{controller=\"tfjob\",le=\"0.01\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"tfjob\",le=\"60.0\"} 2\n"
        ));
    }
}
