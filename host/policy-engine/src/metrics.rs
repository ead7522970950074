//! Per-policy metrics of evaluations: count by hook and mode, errors by category, latency,
//! disagreements of shadow policies with the enforced decision, and the circuit breakers
//! (which are open, how often they tripped). A call a breaker refused is an error of category
//! `tripped`, not an evaluation: nothing was evaluated.
//!
//! Labels carry the policy name, never the digest, so a new version keeps its series; which
//! digest serves is the policy sync's info metric.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::engine::Hook;
use crate::error::Category;
use crate::registry::PolicyMode;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvalLabels {
    policy: String,
    hook: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    policy: String,
    hook: String,
    mode: String,
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    policy: String,
    hook: String,
    mode: String,
}

fn mode_label(mode: PolicyMode) -> String {
    match mode {
        PolicyMode::Enforce => "Enforce",
        PolicyMode::Shadow => "Shadow",
    }
    .to_owned()
}

fn histogram() -> Histogram {
    // 20 µs to about 0.3 s: default policies take tens of microseconds, a deadline ends at 50 ms.
    Histogram::new(exponential_buckets(0.000_02, 2.0, 15))
}

/// Every metric of policy evaluations.
#[derive(Clone)]
pub struct PolicyMetrics {
    evaluations: Family<EvalLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Family<HookLabels, Histogram>,
    disagreements: Family<DisagreementLabels, Counter>,
    reused: Counter,
    breaker_open: Family<BreakerLabels, Gauge>,
    breaker_trips: Family<BreakerLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    policy: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DisagreementLabels {
    policy: String,
    hook: String,
}

impl PolicyMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> PolicyMetrics {
        let m = PolicyMetrics {
            evaluations: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(histogram),
            disagreements: Family::default(),
            reused: Counter::default(),
            breaker_open: Family::default(),
            breaker_trips: Family::default(),
        };
        registry.register(
            "tfjob_policy_evaluations",
            "Policy evaluations, by policy, hook and mode",
            m.evaluations.clone(),
        );
        registry.register(
            "tfjob_policy_errors",
            "Policy evaluations that failed, by policy, hook and category",
            m.errors.clone(),
        );
        registry.register(
            "tfjob_policy_evaluation_duration_seconds",
            "Time of one policy evaluation (a resources evaluation covers every container)",
            m.latency.clone(),
        );
        registry.register(
            "tfjob_policy_verdicts_reused",
            "Classifications answered from the verdict cache instead of calling the policies",
            m.reused.clone(),
        );
        registry.register(
            "tfjob_policy_shadow_disagreements",
            "Evaluations where a shadow policy decided differently from the enforced one",
            m.disagreements.clone(),
        );
        registry.register(
            "tfjob_policy_breaker_open",
            "Whether the policy's circuit breaker is open or half-open (1): its calls are refused",
            m.breaker_open.clone(),
        );
        registry.register(
            "tfjob_policy_breaker_trips",
            "Times a policy's circuit breaker opened (tripped, or a trial call failed)",
            m.breaker_trips.clone(),
        );
        m
    }

    /// Records one evaluation.
    pub fn evaluated(
        &self,
        policy: &str,
        hook: Hook,
        mode: PolicyMode,
        took: Duration,
        error: Option<Category>,
    ) {
        let (hook, mode) = (hook.to_string(), mode_label(mode));
        self.evaluations
            .get_or_create(&EvalLabels {
                policy: policy.to_owned(),
                hook: hook.clone(),
                mode: mode.clone(),
            })
            .inc();
        if let Some(category) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    policy: policy.to_owned(),
                    hook: hook.clone(),
                    mode: mode.clone(),
                    category: category.as_str().to_owned(),
                })
                .inc();
        }
        self.latency
            .get_or_create(&HookLabels {
                policy: policy.to_owned(),
                hook,
                mode,
            })
            .observe(took.as_secs_f64());
    }

    /// Records a configured policy that could not run because it never loaded.
    pub fn unavailable(&self, policy: &str, hook: Hook) {
        self.errors
            .get_or_create(&ErrorLabels {
                policy: policy.to_owned(),
                hook: hook.to_string(),
                mode: mode_label(PolicyMode::Enforce),
                category: Category::Unavailable.as_str().to_owned(),
            })
            .inc();
    }

    /// Records a call its breaker refused.
    pub fn refused(&self, policy: &str, hook: Hook, mode: PolicyMode) {
        self.errors
            .get_or_create(&ErrorLabels {
                policy: policy.to_owned(),
                hook: hook.to_string(),
                mode: mode_label(mode),
                category: Category::Tripped.as_str().to_owned(),
            })
            .inc();
    }

    /// Records a breaker opening (`open`, counted as a trip) or closing.
    pub fn breaker_set(&self, policy: &str, mode: PolicyMode, open: bool) {
        let labels = BreakerLabels {
            policy: policy.to_owned(),
            mode: mode_label(mode),
        };
        self.breaker_open
            .get_or_create(&labels)
            .set(i64::from(open));
        if open {
            self.breaker_trips.get_or_create(&labels).inc();
        }
    }

    /// Records a classification answered from the verdict cache.
    pub fn reused(&self) {
        self.reused.inc();
    }

    /// Records a shadow decision that differed from the enforced one.
    pub fn disagreed(&self, policy: &str, hook: Hook) {
        self.disagreements
            .get_or_create(&DisagreementLabels {
                policy: policy.to_owned(),
                hook: hook.to_string(),
            })
            .inc();
    }
}
