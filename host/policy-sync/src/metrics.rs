//! Metrics of the policy sync: loads by result and failing step, load time, swaps, and which
//! version of each policy serves (an info gauge, one series per serving policy).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tfjob_policy_engine::PolicySet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadLabels {
    result: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    policy: String,
    digest: String,
    mode: String,
}

/// Every metric the policy sync updates.
#[derive(Clone)]
pub struct SyncMetrics {
    loads: Family<LoadLabels, Counter>,
    load_duration: Histogram,
    swaps: Counter,
    serving: Family<InfoLabels, Gauge>,
}

impl SyncMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> SyncMetrics {
        let m = SyncMetrics {
            loads: Family::default(),
            load_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            swaps: Counter::default(),
            serving: Family::default(),
        };
        registry.register(
            "tfjob_policy_loads",
            "Policy ConfigMap versions loaded, by result and, when rejected, the failing step",
            m.loads.clone(),
        );
        registry.register(
            "tfjob_policy_load_duration_seconds",
            "Time to read, decompress, compile and validate one policy version",
            m.load_duration.clone(),
        );
        registry.register(
            "tfjob_policy_swaps",
            "Policy set snapshots swapped in",
            m.swaps.clone(),
        );
        registry.register(
            "tfjob_policy_info",
            "Serving policy versions (value 1), by policy name, digest and mode",
            m.serving.clone(),
        );
        m
    }

    pub fn loaded(&self, took: Duration) {
        self.load(took, "active", "");
    }

    pub fn rejected(&self, step: &str, took: Duration) {
        self.load(took, "rejected", step);
    }

    fn load(&self, took: Duration, result: &str, step: &str) {
        self.loads
            .get_or_create(&LoadLabels {
                result: result.to_owned(),
                step: step.to_owned(),
            })
            .inc();
        self.load_duration.observe(took.as_secs_f64());
    }

    /// Counts a swap and records which versions now serve.
    pub fn swapped(&self, set: &PolicySet) {
        self.swaps.inc();
        self.serving.clear();
        for p in set.all() {
            self.serving
                .get_or_create(&InfoLabels {
                    policy: p.name().to_owned(),
                    digest: p.compiled.digest.to_owned(),
                    mode: format!("{:?}", p.manifest.mode),
                })
                .set(1);
        }
    }
}
