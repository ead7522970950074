//! Fault injection for tests: API errors, latency and cut watch streams, configured when the
//! server starts and changed while it runs.
//!
//! A controller that only ever meets a perfect API server is not tested for the failures a real
//! one produces under load: `500` from a struggling etcd, `409` from a concurrent writer, `429`
//! from priority and fairness, slow answers, and watches that the server ends early. A
//! [`FaultConfig`] describes which requests fail and how; the server's middleware asks the
//! shared [`Faults`] handle for a [`Decision`] before a request reaches the store, so an injected
//! error never has an effect. The random draws come from one generator seeded by
//! [`FaultConfig::seed`], so a run with the same requests in the same order makes the same
//! decisions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::http::requests::{RequestInfo, Verb};

/// Which requests fail, how slow every request is, and when watches are cut. The default injects
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultConfig {
    /// Error rules; the first rule that matches a request and whose draw hits decides its error.
    #[serde(default)]
    pub errors: Vec<ErrorRule>,
    /// Added to every resource request before it is handled.
    #[serde(default)]
    pub latency_ms: u64,
    /// A random extra delay of up to this much on top of `latency_ms`.
    #[serde(default)]
    pub latency_jitter_ms: u64,
    /// Every watch stream ends (cleanly, as when a real server's watch timeout expires) after a
    /// random duration between 1 ms and this bound, so clients must watch again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_watches_after_ms: Option<u64>,
    /// Seed of the random draws.
    #[serde(default)]
    pub seed: u64,
}

/// Fails a share of the matching requests with one status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorRule {
    /// The verbs it applies to; empty for all.
    #[serde(default)]
    pub verbs: Vec<Verb>,
    /// The resources it applies to, by plural (`pods`, `tfjobs`); empty for all. A plural also
    /// matches its subresources (`tfjobs` matches `tfjobs/status`); `tfjobs/status` matches the
    /// subresource alone.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Share of the matching requests that fail, from 0.0 to 1.0.
    pub rate: f64,
    /// The answer: 500, 409 or 429.
    pub status: FaultStatus,
    /// The `Retry-After` of a 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

impl ErrorRule {
    /// A rule failing every matching request with `status`.
    pub fn always(status: FaultStatus, verbs: &[Verb], resources: &[&str]) -> ErrorRule {
        ErrorRule {
            verbs: verbs.to_vec(),
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
            rate: 1.0,
            status,
            retry_after_seconds: None,
        }
    }

    fn matches(&self, info: &RequestInfo) -> bool {
        (self.verbs.is_empty() || self.verbs.contains(&info.verb))
            && (self.resources.is_empty()
                || self
                    .resources
                    .iter()
                    .any(|r| *r == info.resource || r == info.plural()))
    }
}

/// A status that can be injected: the failures a real API server answers with under stress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum FaultStatus {
    /// 500 `InternalError`.
    InternalError,
    /// 409 `Conflict`.
    Conflict,
    /// 429 `TooManyRequests`.
    TooManyRequests,
}

impl FaultStatus {
    pub fn code(self) -> u16 {
        match self {
            FaultStatus::InternalError => 500,
            FaultStatus::Conflict => 409,
            FaultStatus::TooManyRequests => 429,
        }
    }

    /// The `reason` of the `Status` answered.
    pub fn reason(self) -> &'static str {
        match self {
            FaultStatus::InternalError => "InternalError",
            FaultStatus::Conflict => "Conflict",
            FaultStatus::TooManyRequests => "TooManyRequests",
        }
    }
}

impl TryFrom<u16> for FaultStatus {
    type Error = String;

    fn try_from(code: u16) -> Result<FaultStatus, String> {
        match code {
            500 => Ok(FaultStatus::InternalError),
            409 => Ok(FaultStatus::Conflict),
            429 => Ok(FaultStatus::TooManyRequests),
            other => Err(format!(
                "{other} cannot be injected: the status must be 500, 409 or 429"
            )),
        }
    }
}

impl From<FaultStatus> for u16 {
    fn from(s: FaultStatus) -> u16 {
        s.code()
    }
}

/// A fault configuration that cannot be used, naming the field (`errors[0].status`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FaultConfigError {
    pub field: String,
    pub message: String,
}

impl FaultConfigError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> FaultConfigError {
        FaultConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl FaultConfig {
    /// Parses and checks a configuration from JSON; errors name the offending field.
    pub fn from_json(body: &[u8]) -> Result<FaultConfig, FaultConfigError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let config: FaultConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            FaultConfigError::new(field, e.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what the types cannot: rates are shares, resources are named, 429 alone has a
    /// `Retry-After`, and a watch bound is positive.
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        for (i, rule) in self.errors.iter().enumerate() {
            if !(rule.rate.is_finite() && (0.0..=1.0).contains(&rule.rate)) {
                return Err(FaultConfigError::new(
                    format!("errors[{i}].rate"),
                    format!("{} is not a rate: must be from 0.0 to 1.0", rule.rate),
                ));
            }
            if let Some(j) = rule.resources.iter().position(|r| r.trim().is_empty()) {
                return Err(FaultConfigError::new(
                    format!("errors[{i}].resources[{j}]"),
                    "must name a resource (a plural such as pods)",
                ));
            }
            if rule.retry_after_seconds.is_some() && rule.status != FaultStatus::TooManyRequests {
                return Err(FaultConfigError::new(
                    format!("errors[{i}].retryAfterSeconds"),
                    "only a 429 rule sends Retry-After",
                ));
            }
        }
        if self.drop_watches_after_ms == Some(0) {
            return Err(FaultConfigError::new(
                "dropWatchesAfterMs",
                "must be at least 1 (leave it out to keep watches)",
            ));
        }
        Ok(())
    }
}

/// How many faults were injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounts {
    pub internal_errors: u64,
    pub conflicts: u64,
    pub too_many_requests: u64,
    /// Requests delayed by `latencyMs`/`latencyJitterMs`.
    pub delayed: u64,
    /// Watch streams ended by `dropWatchesAfterMs`.
    pub watches_cut: u64,
}

impl FaultCounts {
    /// Injected errors of every status.
    pub fn errors(&self) -> u64 {
        self.internal_errors + self.conflicts + self.too_many_requests
    }
}

#[derive(Debug)]
struct State {
    config: FaultConfig,
    rng: fastrand::Rng,
}

#[derive(Debug, Default)]
struct Counters {
    internal_errors: AtomicU64,
    conflicts: AtomicU64,
    too_many_requests: AtomicU64,
    delayed: AtomicU64,
    watches_cut: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    counters: Counters,
}

/// The fault configuration of a running server and its counters. Cheap to clone: clones share
/// the configuration, so a test keeps one and changes what the server does.
#[derive(Clone, Debug)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    config: FaultConfig::default(),
                    rng: fastrand::Rng::with_seed(0),
                }),
                counters: Counters::default(),
            }),
        }
    }
}

/// An error the middleware answers with instead of handling the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedError {
    pub status: FaultStatus,
    pub retry_after_seconds: Option<u64>,
    pub verb: Verb,
    pub resource: String,
}

impl InjectedError {
    /// The `Status` body, as a real API server words these failures.
    pub fn body(&self) -> Value {
        let what = format!("{} {}", self.verb, self.resource);
        let message = match self.status {
            FaultStatus::InternalError => {
                format!("Internal error occurred: injected fault on {what}")
            }
            FaultStatus::Conflict => format!(
                "Operation cannot be fulfilled on {}: injected conflict on {what}",
                self.resource
            ),
            FaultStatus::TooManyRequests => format!(
                "the server has received too many requests and has asked us to try again later (injected fault on {what})"
            ),
        };
        let mut body = ApiError::new(self.status.code(), self.status.reason(), message).status();
        if let Some(seconds) = self.retry_after_seconds {
            body["details"] = json!({"retryAfterSeconds": seconds});
        }
        body
    }
}

/// What happens to one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Wait this long first.
    pub delay: Option<Duration>,
    /// Answer with this error instead of handling the request.
    pub error: Option<InjectedError>,
    /// End the watch stream after this long.
    pub cut_watch_after: Option<Duration>,
}

impl Faults {
    /// A handle injecting `config`.
    pub fn new(config: FaultConfig) -> Result<Faults, FaultConfigError> {
        let faults = Faults::default();
        faults.set(config)?;
        Ok(faults)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is replaced whole, so a panic while it was held leaves it consistent.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the configuration and restarts the random draws from its seed.
    pub fn set(&self, config: FaultConfig) -> Result<(), FaultConfigError> {
        config.validate()?;
        let mut state = self.lock();
        state.rng = fastrand::Rng::with_seed(config.seed);
        state.config = config;
        Ok(())
    }

    /// The configuration in force.
    pub fn get(&self) -> FaultConfig {
        self.lock().config.clone()
    }

    /// Stops injecting faults.
    pub fn clear(&self) {
        let mut state = self.lock();
        state.config = FaultConfig::default();
    }

    /// Faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        let c = &self.shared.counters;
        FaultCounts {
            internal_errors: c.internal_errors.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            too_many_requests: c.too_many_requests.load(Ordering::Relaxed),
            delayed: c.delayed.load(Ordering::Relaxed),
            watches_cut: c.watches_cut.load(Ordering::Relaxed),
        }
    }

    /// Decides the fate of one request (and counts the faults decided on). The draws happen in
    /// a fixed order under one lock, so equal request sequences get equal decisions.
    pub fn decide(&self, info: &RequestInfo) -> Decision {
        let mut guard = self.lock();
        let State { config, rng } = &mut *guard;
        let mut decision = Decision::default();
        let jitter = match config.latency_jitter_ms {
            0 => 0,
            j => rng.u64(0..=j),
        };
        let delay = config.latency_ms.saturating_add(jitter);
        if delay > 0 {
            decision.delay = Some(Duration::from_millis(delay));
        }
        for rule in config.errors.iter().filter(|r| r.matches(info)) {
            let hit = rule.rate >= 1.0 || (rule.rate > 0.0 && rng.f64() < rule.rate);
            if hit {
                decision.error = Some(InjectedError {
                    status: rule.status,
                    retry_after_seconds: rule.retry_after_seconds,
                    verb: info.verb,
                    resource: info.resource.clone(),
                });
                break;
            }
        }
        if info.verb == Verb::Watch
            && decision.error.is_none()
            && let Some(bound) = config.drop_watches_after_ms
        {
            decision.cut_watch_after = Some(Duration::from_millis(rng.u64(1..=bound.max(1))));
        }
        drop(guard);
        let c = &self.shared.counters;
        if decision.delay.is_some() {
            c.delayed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(e) = &decision.error {
            let counter = match e.status {
                FaultStatus::InternalError => &c.internal_errors,
                FaultStatus::Conflict => &c.conflicts,
                FaultStatus::TooManyRequests => &c.too_many_requests,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        decision
    }

    /// Counts a watch stream ended by the fault configuration.
    pub fn watch_cut(&self) {
        self.shared
            .counters
            .watches_cut
            .fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(verb: Verb, resource: &str) -> RequestInfo {
        RequestInfo {
            verb,
            group: String::new(),
            resource: resource.into(),
            namespace: None,
            name: None,
        }
    }

    #[test]
    fn bad_configurations_name_the_field() {
        let err = |json: &str| FaultConfig::from_json(json.as_bytes()).unwrap_err();
        let e = err(r#"{"errors": [{"rate": 1, "status": 404}]}"#);
        assert_eq!(e.field, "errors[0].status");
        assert!(e.message.contains("500, 409 or 429"), "{e}");
        assert_eq!(
            err(r#"{"errors": [{"rate": 1.5, "status": 500}]}"#).field,
            "errors[0].rate"
        );
        assert_eq!(
            err(r#"{"errors": [{"rate": 1, "status": 500, "verbs": ["get", "poke"]}]}"#).field,
            "errors[0].verbs[1]"
        );
        assert_eq!(
            err(r#"{"errors": [{"rate": 1, "status": 500, "retryAfterSeconds": 1}]}"#).field,
            "errors[0].retryAfterSeconds"
        );
        assert!(err(r#"{"latencyMS": 5}"#).to_string().contains("latencyMS"));
        assert_eq!(
            err(r#"{"dropWatchesAfterMs": 0}"#).field,
            "dropWatchesAfterMs"
        );
        assert_eq!(err("[").field, "body");
    }

    #[test]
    fn configurations_round_trip_and_default_to_nothing() {
        let json = r#"{"errors": [{"verbs": ["create", "deletecollection"], "resources": ["pods"], "rate": 0.5, "status": 429, "retryAfterSeconds": 2}],
            "latencyMs": 10, "latencyJitterMs": 5, "dropWatchesAfterMs": 100, "seed": 7}"#;
        let config = FaultConfig::from_json(json.as_bytes()).unwrap();
        assert_eq!(config.errors[0].status, FaultStatus::TooManyRequests);
        assert_eq!(config.errors[0].verbs[1], Verb::Deletecollection);
        let again = serde_json::to_vec(&config).unwrap();
        assert_eq!(FaultConfig::from_json(&again).unwrap(), config);
        assert_eq!(
            FaultConfig::from_json(b"{}").unwrap(),
            FaultConfig::default()
        );
        let faults = Faults::default();
        assert_eq!(
            faults.decide(&req(Verb::Watch, "pods")),
            Decision::default()
        );
    }

    #[test]
    fn rules_match_by_verb_and_resource() {
        let faults = Faults::new(FaultConfig {
            errors: vec![ErrorRule::always(
                FaultStatus::Conflict,
                &[Verb::Update],
                &["tfjobs"],
            )],
            ..FaultConfig::default()
        })
        .unwrap();
        assert!(faults.decide(&req(Verb::Update, "tfjobs")).error.is_some());
        assert!(
            faults
                .decide(&req(Verb::Update, "tfjobs/status"))
                .error
                .is_some()
        );
        assert!(faults.decide(&req(Verb::Update, "pods")).error.is_none());
        assert!(faults.decide(&req(Verb::Patch, "tfjobs")).error.is_none());
        assert_eq!(faults.counts().conflicts, 2);
    }

    #[test]
    fn the_seed_makes_runs_reproducible() {
        let config = FaultConfig {
            errors: vec![ErrorRule {
                rate: 0.5,
                ..ErrorRule::always(FaultStatus::InternalError, &[], &[])
            }],
            latency_jitter_ms: 50,
            drop_watches_after_ms: Some(1000),
            seed: 42,
            ..FaultConfig::default()
        };
        let run = || {
            let faults = Faults::new(config.clone()).unwrap();
            (0..200)
                .map(|i| {
                    faults.decide(&req(
                        if i % 2 == 0 { Verb::Watch } else { Verb::Get },
                        "pods",
                    ))
                })
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        let failed = first.iter().filter(|d| d.error.is_some()).count();
        assert!(
            (50..150).contains(&failed),
            "about half of 200 requests fail: {failed}"
        );
        assert!(first.iter().all(|d| {
            d.cut_watch_after
                .is_none_or(|c| c >= Duration::from_millis(1) && c <= Duration::from_millis(1000))
        }));
    }
}
