//! Prometheus metrics: training-operator's job and PodGroup counters plus the controller's own
//! reconcile count, errors by category and duration.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tfjob_planner::Transition;

/// Labels of the job counters, as training-operator named them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job_namespace: String,
    pub framework: String,
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
    reconcile_duration: Histogram,
    pod_groups_created: Counter,
    pod_groups_deleted: Counter,
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
            reconcile_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            pod_groups_created: Counter::default(),
            pod_groups_deleted: Counter::default(),
        };
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

    pub fn reconcile_finished(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    pub fn reconcile_failed(&self, category: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                category: category.to_owned(),
            })
            .inc();
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
        assert!(text.contains("tfjob_operator_reconcile_duration_seconds_bucket"));
    }
}
