//! Metrics of the policy sync: loads by result and failing step, load time, swaps, which
//! version of each policy serves (an info gauge, one series per serving policy), what each
//! serving version was charged of the memory for loaded policies, and what all of them and each
//! policy namespace hold of it.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tfjob_policy_engine::PolicySet;
use tfjob_policy_engine::loaded_budget::{LoadedLimits, Usage};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadLabels {
    result: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
    digest: String,
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
    charged: Family<PolicyLabels, Gauge>,
    loaded: Gauge,
    loaded_by_namespace: Family<NamespaceLabels, Gauge>,
    loaded_limit: Gauge,
    namespace_limit: Gauge,
}

impl SyncMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> SyncMetrics {
        let m = SyncMetrics {
            loads: Family::default(),
            load_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            swaps: Counter::default(),
            serving: Family::default(),
            charged: Family::default(),
            loaded: Gauge::default(),
            loaded_by_namespace: Family::default(),
            loaded_limit: Gauge::default(),
            namespace_limit: Gauge::default(),
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
        registry.register(
            "tfjob_policy_loaded_memory_bytes",
            "Memory a serving policy ConfigMap version was charged when it loaded: compiled \
             code as far as it was resident, its pre-initialised copy, module bytes kept in memory",
            m.charged.clone(),
        );
        registry.register(
            "tfjob_policy_loaded_memory_total_bytes",
            "Memory all loaded policy ConfigMap versions hold, each shared part counted once",
            m.loaded.clone(),
        );
        registry.register(
            "tfjob_policy_loaded_memory_namespace_bytes",
            "Memory the loaded policies of a policy namespace are charged",
            m.loaded_by_namespace.clone(),
        );
        registry.register(
            "tfjob_policy_loaded_memory_limit_bytes",
            "Memory all loaded policy ConfigMap versions may hold (--policy-loaded-memory-mib)",
            m.loaded_limit.clone(),
        );
        registry.register(
            "tfjob_policy_loaded_memory_namespace_limit_bytes",
            "Memory the loaded policies of one policy namespace may hold",
            m.namespace_limit.clone(),
        );
        m
    }

    /// Records what loaded versions hold of the budget now.
    pub fn budget(&self, usage: &Usage, limits: LoadedLimits) {
        let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        self.loaded.set(gauge(usage.total));
        self.loaded_limit.set(gauge(limits.total));
        self.namespace_limit.set(gauge(limits.per_namespace));
        self.loaded_by_namespace.clear();
        for (namespace, bytes) in &usage.namespaces {
            self.loaded_by_namespace
                .get_or_create(&NamespaceLabels {
                    namespace: namespace.clone(),
                })
                .set(gauge(*bytes));
        }
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
        self.charged.clear();
        for p in set.all() {
            if let Some(bytes) = p.charged_bytes() {
                self.charged
                    .get_or_create(&PolicyLabels {
                        policy: p.name().to_owned(),
                        digest: p.compiled.digest.to_owned(),
                    })
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
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
