//! Circuit breakers: a policy whose calls keep failing is not called for a while.
//!
//! A policy that loops until its deadline, traps or runs out of memory on every call costs its
//! full deadline on every pod of every job it selects, and that CPU is taken from every other
//! reconcile. After `threshold` consecutive failures of the same kind (timeout, trap, memory or
//! invalid output) its breaker opens ("trips"): calls are refused without entering the guest, and
//! the policy's failure policy decides what a refusal means, as for any failure. When the open
//! period has passed, one trial call goes through (half-open): a success closes the breaker, a
//! failure opens it again for twice as long, up to a maximum. Failures that say nothing about
//! the cost of a call (a guard violation, a settings error) neither count nor reset the count.
//!
//! A breaker belongs to one version of one policy (its name, mode and
//! [`ActivePolicy::fingerprint`]): a new version starts closed. [`Breaker`] is the pure state
//! machine, with time passed in, and [`Breakers`] the table every reconcile thread shares, which
//! also keeps the breaker metrics and tells an async watcher (the policy sync, for the
//! ConfigMap's status) when a breaker trips or closes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

use crate::error::Category;
use crate::metrics::PolicyMetrics;
use crate::registry::{ActivePolicy, PolicyMode, PolicySet};

/// Consecutive failures that trip a breaker, by default.
pub const DEFAULT_THRESHOLD: u32 = 5;
/// How long a breaker first stays open, by default.
pub const DEFAULT_FIRST_OPEN: Duration = Duration::from_secs(10);
/// The longest a breaker stays open, by default.
pub const DEFAULT_MAX_OPEN: Duration = Duration::from_secs(300);

/// When breakers trip and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures of one kind that trip a breaker; 0 turns breakers off.
    pub threshold: u32,
    /// How long a breaker stays open after it trips.
    pub first_open: Duration,
    /// The longest it stays open after failed trials (each doubles the period).
    pub max_open: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            threshold: DEFAULT_THRESHOLD,
            first_open: DEFAULT_FIRST_OPEN,
            max_open: DEFAULT_MAX_OPEN,
        }
    }
}

impl BreakerConfig {
    /// Breakers that never trip.
    pub fn disabled() -> BreakerConfig {
        BreakerConfig {
            threshold: 0,
            ..BreakerConfig::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.threshold > 0
    }

    /// The period after `previous`: twice as long, within the cap (never below the first
    /// period, whatever the cap says).
    fn doubled(&self, previous: Duration) -> Duration {
        previous
            .saturating_mul(2)
            .min(self.max_open.max(self.first_open))
    }
}

/// Whether a failure of `category` counts toward tripping: the kinds that cost a call its
/// whole budget or say the policy is broken, not the ones about its configuration or output
/// rules.
pub fn counts(category: Category) -> bool {
    matches!(
        category,
        Category::Timeout | Category::Trap | Category::Memory | Category::InvalidOutput
    )
}

/// Where a breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Calls go through.
    Closed,
    /// Calls are refused until `until`; from then on the next call is a trial (half-open).
    Open { until: Instant },
    /// Half-open with trial `id` in flight since `started`; other calls are refused.
    Trial { id: u64, started: Instant },
}

/// What changed in a breaker, for metrics and watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// It opened after a run of failures.
    Tripped,
    /// A trial failed (or never came back): it opened again, for longer.
    Reopened,
    /// A trial succeeded: calls go through again.
    Closed,
    /// A new version of the policy replaced a tripped one: the breaker starts closed.
    Reset,
}

/// Permission to call a policy; handed back with the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The version called (empty when breakers are off).
    fingerprint: String,
    /// The trial this call is, when the breaker is half-open.
    trial: Option<u64>,
}

impl Ticket {
    /// Whether this call is the one trial of a half-open breaker.
    pub fn is_trial(&self) -> bool {
        self.trial.is_some()
    }
}

/// Why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The kind of the failures that tripped it.
    pub category: Category,
    /// Consecutive failures of that kind.
    pub failures: u32,
    /// Times it opened since it last closed.
    pub trips: u32,
    /// How long until a trial call may go through (zero while one is in flight).
    pub retry_in: Duration,
    /// When the open period ends (or ended, while a trial is in flight).
    pub retry_at: Instant,
    /// A trial call is in flight.
    pub trial_running: bool,
}

impl Refusal {
    /// The message of the evaluation error, with the retry time on the wall clock.
    pub fn message(&self, policy: &str, retry_at: Timestamp) -> String {
        let plural = if self.failures == 1 { "" } else { "s" };
        let when = if self.trial_running {
            "a trial call is in progress".to_owned()
        } else {
            format!(
                "it will be tried again at {} (in {}s)",
                retry_at.round(jiff::Unit::Second).unwrap_or(retry_at),
                self.retry_in.as_secs_f64().ceil()
            )
        };
        format!(
            "policy {policy} is tripped after {} consecutive {} failure{plural} and is not \
             called; {when}",
            self.failures, self.category
        )
    }
}

/// The breaker of one policy version. Pure: every method takes the time.
#[derive(Clone, Debug)]
pub struct Breaker {
    fingerprint: String,
    state: State,
    /// The kind of the current run of failures.
    category: Option<Category>,
    /// Its length.
    failures: u32,
    /// Times opened since it last closed (the first trip and each failed trial).
    trips: u32,
    /// The current (or last) open period.
    open_for: Duration,
    /// The id of the next trial.
    next_trial: u64,
    /// When the last open period ended (or ends).
    opened_until: Instant,
}

impl Breaker {
    /// A closed breaker for the version with `fingerprint`.
    pub fn new(fingerprint: &str, config: &BreakerConfig, now: Instant) -> Breaker {
        Breaker {
            opened_until: now,
            fingerprint: fingerprint.to_owned(),
            state: State::Closed,
            category: None,
            failures: 0,
            trips: 0,
            open_for: config.first_open,
            next_trial: 0,
        }
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Open or half-open: calls are (mostly) refused.
    pub fn is_tripped(&self) -> bool {
        self.state != State::Closed
    }

    /// Whether a call may go through at `now`. A trial in flight for longer than the open
    /// period is taken as failed (its thread was abandoned, or is wedged): otherwise a result
    /// that never comes back would keep the breaker half-open, refusing every call, for ever.
    pub fn admit(
        &mut self,
        config: &BreakerConfig,
        now: Instant,
    ) -> (Result<Ticket, Refusal>, Option<Change>) {
        match self.state {
            State::Closed => (Ok(self.ticket(None)), None),
            State::Open { until } if now >= until => {
                let id = self.next_trial;
                self.next_trial += 1;
                self.state = State::Trial { id, started: now };
                (Ok(self.ticket(Some(id))), None)
            }
            State::Open { until } => (Err(self.refusal(until - now, false)), None),
            State::Trial { started, .. }
                if now.saturating_duration_since(started) >= self.open_for =>
            {
                self.failures = self.failures.saturating_add(1);
                let until = self.reopen(config, now);
                (
                    Err(self.refusal(until - now, false)),
                    Some(Change::Reopened),
                )
            }
            State::Trial { .. } => (Err(self.refusal(Duration::ZERO, true)), None),
        }
    }

    /// Records the outcome of a call admitted with `ticket`: `None` for a success, else the
    /// category of its failure. Outcomes of calls admitted before the breaker opened are not
    /// counted while it is open: only the trial decides.
    pub fn record(
        &mut self,
        config: &BreakerConfig,
        ticket: &Ticket,
        outcome: Option<Category>,
        now: Instant,
    ) -> Option<Change> {
        if ticket.fingerprint != self.fingerprint {
            return None;
        }
        match self.state {
            State::Closed => match outcome {
                None => {
                    self.category = None;
                    self.failures = 0;
                    None
                }
                Some(c) if counts(c) => {
                    self.count(c);
                    if self.failures >= config.threshold {
                        self.trips = 1;
                        self.open_for = config.first_open;
                        self.opened_until = now + self.open_for;
                        self.state = State::Open {
                            until: self.opened_until,
                        };
                        Some(Change::Tripped)
                    } else {
                        None
                    }
                }
                Some(_) => None,
            },
            State::Trial { id, .. } if ticket.trial == Some(id) => match outcome {
                None => {
                    let fingerprint = std::mem::take(&mut self.fingerprint);
                    *self = Breaker::new(&fingerprint, config, now);
                    Some(Change::Closed)
                }
                Some(c) if counts(c) => {
                    self.count(c);
                    self.reopen(config, now);
                    Some(Change::Reopened)
                }
                // The trial says nothing either way: the next call is a trial again.
                Some(_) => {
                    self.state = State::Open { until: now };
                    None
                }
            },
            State::Open { .. } | State::Trial { .. } => None,
        }
    }

    /// What a status report shows of it while it is tripped at `now`, with the end of its
    /// (last) open period: a time that does not move while nothing happens, so a report made
    /// again says the same.
    pub fn view(&self, now: Instant) -> Option<(Refusal, Instant)> {
        match self.state {
            State::Closed => None,
            State::Open { until } => Some((
                self.refusal(until.saturating_duration_since(now), false),
                until,
            )),
            State::Trial { .. } => Some((self.refusal(Duration::ZERO, true), self.opened_until)),
        }
    }

    fn ticket(&self, trial: Option<u64>) -> Ticket {
        Ticket {
            fingerprint: self.fingerprint.clone(),
            trial,
        }
    }

    fn refusal(&self, retry_in: Duration, trial_running: bool) -> Refusal {
        Refusal {
            retry_at: self.opened_until,
            // Only a breaker that tripped refuses, and tripping takes a counted failure.
            category: self.category.unwrap_or(Category::Timeout),
            failures: self.failures,
            trips: self.trips,
            retry_in,
            trial_running,
        }
    }

    /// Counts a failure of `c`: one more of the same kind, or the first of a new run.
    fn count(&mut self, c: Category) {
        if self.category == Some(c) {
            self.failures = self.failures.saturating_add(1);
        } else {
            self.category = Some(c);
            self.failures = 1;
        }
    }

    /// Opens it again for twice as long; returns until when.
    fn reopen(&mut self, config: &BreakerConfig, now: Instant) -> Instant {
        self.trips = self.trips.saturating_add(1);
        self.open_for = config.doubled(self.open_for);
        self.opened_until = now + self.open_for;
        self.state = State::Open {
            until: self.opened_until,
        };
        self.opened_until
    }
}

/// `at` plus `d`, saturating at the end of time.
fn wall_after(at: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| at.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Which breaker: a policy's name and mode (a shadow policy may share its name with the
/// enforced one, and its failures are its own).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BreakerKey {
    pub name: String,
    pub mode: PolicyMode,
}

impl BreakerKey {
    pub fn of(p: &ActivePolicy) -> BreakerKey {
        BreakerKey {
            name: p.name().to_owned(),
            mode: p.manifest.mode,
        }
    }
}

impl fmt::Display for BreakerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            PolicyMode::Enforce => f.write_str(&self.name),
            PolicyMode::Shadow => write!(f, "{} (shadow)", self.name),
        }
    }
}

/// A tripped breaker, for status reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrippedPolicy {
    pub key: BreakerKey,
    /// The version it is about ([`ActivePolicy::fingerprint`]).
    pub fingerprint: String,
    pub category: Category,
    pub failures: u32,
    pub trips: u32,
    /// When a trial call may go through (now or past while one is in flight).
    pub retry_at: Timestamp,
    pub trial_running: bool,
}

/// The breakers of every policy, shared by every reconcile thread and every pinned view of
/// the policies. Cheap to clone; clones share the table.
#[derive(Clone)]
pub struct Breakers {
    shared: Arc<Shared>,
}

struct Shared {
    config: BreakerConfig,
    /// One moment on both clocks: breakers keep monotonic time, reports and messages show
    /// wall-clock time, and converting through a fixed pair gives the same wall time for the
    /// same instant every time.
    anchor: (Instant, Timestamp),
    table: Mutex<BTreeMap<BreakerKey, Breaker>>,
    /// A generation counter bumped whenever a breaker trips, reopens or closes.
    changes: watch::Sender<u64>,
    metrics: OnceLock<PolicyMetrics>,
}

impl Default for Breakers {
    fn default() -> Self {
        Breakers::new(BreakerConfig::default())
    }
}

impl fmt::Debug for Breakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breakers")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Breakers {
    pub fn new(config: BreakerConfig) -> Breakers {
        Breakers {
            shared: Arc::new(Shared {
                config,
                anchor: (Instant::now(), Timestamp::now()),
                table: Mutex::new(BTreeMap::new()),
                changes: watch::Sender::new(0),
                metrics: OnceLock::new(),
            }),
        }
    }

    /// Breakers that never trip.
    pub fn disabled() -> Breakers {
        Breakers::new(BreakerConfig::disabled())
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.shared.config
    }

    /// Keeps the breaker metrics in `metrics` (the first metrics given win).
    pub fn set_metrics(&self, metrics: PolicyMetrics) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// A receiver that sees a new value whenever a breaker trips, reopens or closes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<BreakerKey, Breaker>> {
        // Every update leaves a breaker whole: a panic elsewhere while holding it changes
        // nothing that needs repairing.
        self.shared.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `p` may be called now.
    pub fn admit(&self, p: &ActivePolicy) -> Result<Ticket, Refusal> {
        if !self.shared.config.enabled() {
            // Not even the fingerprint: breakers that are off cost a call nothing.
            return Ok(Ticket {
                fingerprint: String::new(),
                trial: None,
            });
        }
        self.admit_at(BreakerKey::of(p), p.fingerprint(), Instant::now())
    }

    /// Records the outcome of a call of `p` admitted with `ticket`: `None` for a success.
    pub fn record(&self, p: &ActivePolicy, ticket: &Ticket, outcome: Option<Category>) {
        if !self.shared.config.enabled() {
            return;
        }
        self.record_at(&BreakerKey::of(p), ticket, outcome, Instant::now());
    }

    /// [`Breakers::admit`] at `now`, for the version with `fingerprint`. A version other than
    /// the one the breaker knows starts a fresh breaker.
    pub fn admit_at(
        &self,
        key: BreakerKey,
        fingerprint: &str,
        now: Instant,
    ) -> Result<Ticket, Refusal> {
        let config = self.shared.config;
        if !config.enabled() {
            return Ok(Ticket {
                fingerprint: String::new(),
                trial: None,
            });
        }
        let mut table = self.table();
        let mut changes = Vec::new();
        let breaker = table
            .entry(key.clone())
            .or_insert_with(|| Breaker::new(fingerprint, &config, now));
        if breaker.fingerprint != fingerprint {
            if breaker.is_tripped() {
                changes.push(Change::Reset);
            }
            *breaker = Breaker::new(fingerprint, &config, now);
        }
        let (admission, change) = breaker.admit(&config, now);
        changes.extend(change);
        drop(table);
        for change in changes {
            self.changed(&key, change);
        }
        admission
    }

    /// [`Breakers::record`] at `now`.
    pub fn record_at(
        &self,
        key: &BreakerKey,
        ticket: &Ticket,
        outcome: Option<Category>,
        now: Instant,
    ) {
        let config = self.shared.config;
        if !config.enabled() {
            return;
        }
        let change = self
            .table()
            .get_mut(key)
            .and_then(|b| b.record(&config, ticket, outcome, now));
        if let Some(change) = change {
            self.changed(key, change);
        }
    }

    /// Forgets the breakers of versions `set` no longer serves, so a replaced policy's breaker
    /// neither lingers in reports nor holds memory.
    pub fn retain_serving(&self, set: &PolicySet) {
        let serving: BTreeMap<BreakerKey, String> = set
            .all()
            .iter()
            .map(|p| (BreakerKey::of(p), p.fingerprint().to_owned()))
            .collect();
        let mut reset = Vec::new();
        self.table().retain(|key, breaker| {
            let keep = serving.get(key) == Some(&breaker.fingerprint);
            if !keep && breaker.is_tripped() {
                reset.push(key.clone());
            }
            keep
        });
        for key in reset {
            self.changed(&key, Change::Reset);
        }
    }

    /// The tripped breakers now.
    pub fn tripped(&self) -> Vec<TrippedPolicy> {
        self.tripped_at(Instant::now())
    }

    /// The tripped breakers at `now`.
    pub fn tripped_at(&self, now: Instant) -> Vec<TrippedPolicy> {
        self.table()
            .iter()
            .filter_map(|(key, b)| {
                let (r, retry_at) = b.view(now)?;
                Some(TrippedPolicy {
                    key: key.clone(),
                    fingerprint: b.fingerprint.clone(),
                    category: r.category,
                    failures: r.failures,
                    trips: r.trips,
                    retry_at: self.wall(retry_at),
                    trial_running: r.trial_running,
                })
            })
            .collect()
    }

    /// `at` on the wall clock.
    pub fn wall(&self, at: Instant) -> Timestamp {
        let (instant, wall) = self.shared.anchor;
        match at.checked_duration_since(instant) {
            Some(after) => wall_after(wall, after),
            None => {
                let before = instant.duration_since(at);
                SignedDuration::try_from(before)
                    .ok()
                    .and_then(|d| wall.checked_sub(d).ok())
                    .unwrap_or(Timestamp::MIN)
            }
        }
    }

    fn changed(&self, key: &BreakerKey, change: Change) {
        match change {
            Change::Tripped | Change::Reopened => {
                tracing::warn!(policy = %key, ?change, "policy breaker opened; calls are refused until a trial succeeds");
            }
            Change::Closed | Change::Reset => {
                tracing::info!(policy = %key, ?change, "policy breaker closed");
            }
        }
        if let Some(m) = self.shared.metrics.get() {
            let open = matches!(change, Change::Tripped | Change::Reopened);
            m.breaker_set(&key.name, key.mode, open);
        }
        self.shared
            .changes
            .send_modify(|generation| *generation += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn config() -> BreakerConfig {
        BreakerConfig {
            threshold: 3,
            first_open: 10 * S,
            max_open: 35 * S,
        }
    }

    /// Admits and records one call at `now`.
    fn call(b: &mut Breaker, now: Instant, outcome: Option<Category>) -> Option<Change> {
        let (ticket, _) = b.admit(&config(), now);
        let ticket = ticket.expect("admitted");
        b.record(&config(), &ticket, outcome, now)
    }

    fn refused(b: &mut Breaker, now: Instant) -> Refusal {
        b.admit(&config(), now).0.expect_err("refused")
    }

    /// A breaker tripped at `t0` by three timeouts.
    fn tripped(t0: Instant) -> Breaker {
        let mut b = Breaker::new("v1", &config(), t0);
        for _ in 0..2 {
            assert_eq!(call(&mut b, t0, Some(Category::Timeout)), None);
        }
        assert_eq!(
            call(&mut b, t0, Some(Category::Timeout)),
            Some(Change::Tripped)
        );
        b
    }

    #[test]
    fn trips_after_threshold_failures_of_one_kind_and_refuses_until_the_period_ends() {
        let t0 = Instant::now();
        let mut b = tripped(t0);
        assert!(b.is_tripped());
        let r = refused(&mut b, t0 + S);
        assert_eq!(
            (r.category, r.failures, r.trips, r.retry_in, r.trial_running),
            (Category::Timeout, 3, 1, 9 * S, false)
        );
        let message = r.message("p@abc", Timestamp::UNIX_EPOCH);
        assert!(
            message.contains("p@abc is tripped after 3 consecutive timeout failures"),
            "{message}"
        );
        assert!(message.contains("1970-01-01T00:00:00Z"), "{message}");
        assert!(refused(&mut b, t0 + 9 * S).retry_in <= S);
    }

    #[test]
    fn only_consecutive_failures_of_the_same_counted_kind_trip() {
        let t0 = Instant::now();
        let mut b = Breaker::new("v1", &config(), t0);
        for outcome in [
            Some(Category::Timeout),
            Some(Category::Timeout),
            // Another counted kind starts a new run.
            Some(Category::Trap),
            Some(Category::Trap),
            // Kinds that do not count neither count nor reset.
            Some(Category::GuardViolation),
            Some(Category::Settings),
            Some(Category::Link),
            Some(Category::Unavailable),
        ] {
            assert_eq!(call(&mut b, t0, outcome), None, "{outcome:?}");
        }
        assert_eq!(
            call(&mut b, t0, Some(Category::Trap)),
            Some(Change::Tripped),
            "the third trap in a row"
        );
        assert_eq!(refused(&mut b, t0).category, Category::Trap);
    }

    #[test]
    fn a_success_resets_the_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new("v1", &config(), t0);
        for _ in 0..5 {
            assert_eq!(call(&mut b, t0, Some(Category::Memory)), None);
            assert_eq!(call(&mut b, t0, Some(Category::Memory)), None);
            assert_eq!(call(&mut b, t0, None), None);
        }
        assert!(!b.is_tripped());
        for c in [Category::InvalidOutput, Category::InvalidOutput] {
            assert_eq!(call(&mut b, t0, Some(c)), None);
        }
        assert_eq!(
            call(&mut b, t0, Some(Category::InvalidOutput)),
            Some(Change::Tripped)
        );
    }

    #[test]
    fn half_open_lets_one_trial_through_and_a_success_closes() {
        let t0 = Instant::now();
        let mut b = tripped(t0);
        let later = t0 + 10 * S;
        let (trial, _) = b.admit(&config(), later);
        let trial = trial.expect("the trial goes through");
        assert!(trial.is_trial());
        let r = refused(&mut b, later + S);
        assert!(r.trial_running, "{r:?}");
        assert_eq!(r.retry_in, Duration::ZERO);
        // A call admitted before the trip comes back meanwhile: it decides nothing.
        let stale = Ticket {
            fingerprint: "v1".into(),
            trial: None,
        };
        assert_eq!(b.record(&config(), &stale, None, later + S), None);
        assert!(b.is_tripped());
        assert_eq!(
            b.record(&config(), &trial, None, later + S),
            Some(Change::Closed)
        );
        assert!(!b.is_tripped());
        assert!(b.view(later).is_none());
        // Closed means counting from zero, and the first period again.
        let mut again = b.clone();
        for _ in 0..2 {
            assert_eq!(call(&mut again, later, Some(Category::Timeout)), None);
        }
        assert_eq!(
            call(&mut again, later, Some(Category::Timeout)),
            Some(Change::Tripped)
        );
        assert_eq!(refused(&mut again, later).retry_in, 10 * S);
    }

    #[test]
    fn failed_trials_double_the_period_up_to_the_cap() {
        let t0 = Instant::now();
        let mut b = tripped(t0);
        let mut now = t0 + 10 * S;
        for (expected, trips) in [(20 * S, 2), (35 * S, 3), (35 * S, 4)] {
            assert!(refused(&mut b, now - S).retry_in <= S);
            assert_eq!(
                call(&mut b, now, Some(Category::Timeout)),
                Some(Change::Reopened)
            );
            let r = refused(&mut b, now);
            assert_eq!((r.retry_in, r.trips), (expected, trips));
            now += expected;
        }
    }

    #[test]
    fn a_trial_that_never_returns_counts_as_failed() {
        let t0 = Instant::now();
        let mut b = tripped(t0);
        let started = t0 + 10 * S;
        let (abandoned, _) = b.admit(&config(), started);
        let abandoned = abandoned.expect("the trial");
        assert!(abandoned.is_trial());
        assert!(refused(&mut b, started + 9 * S).trial_running);
        // As old as the open period: taken as failed, and the breaker opens again for longer.
        let (admission, change) = b.admit(&config(), started + 10 * S);
        assert_eq!(change, Some(Change::Reopened));
        let r = admission.expect_err("reopened");
        assert_eq!((r.retry_in, r.trips, r.trial_running), (20 * S, 2, false));
        // Then another trial may start; the abandoned one's late result changes nothing.
        let (next, _) = b.admit(&config(), started + 30 * S);
        let next = next.expect("a new trial");
        assert!(next.is_trial());
        assert_eq!(
            b.record(&config(), &abandoned, None, started + 31 * S),
            None,
            "not this trial"
        );
        assert_eq!(
            b.record(&config(), &next, None, started + 31 * S),
            Some(Change::Closed)
        );
    }

    #[test]
    fn a_trial_failing_in_a_way_that_does_not_count_lets_the_next_call_try() {
        let t0 = Instant::now();
        let mut b = tripped(t0);
        let now = t0 + 10 * S;
        assert_eq!(call(&mut b, now, Some(Category::GuardViolation)), None);
        assert!(b.is_tripped());
        let (next, _) = b.admit(&config(), now);
        assert!(next.expect("another trial").is_trial());
    }

    #[test]
    fn a_new_version_starts_closed_and_old_outcomes_do_not_count() {
        let t0 = Instant::now();
        let breakers = Breakers::new(config());
        let key = BreakerKey {
            name: "p".into(),
            mode: PolicyMode::Enforce,
        };
        let mut changes = breakers.changes();
        let mut old = Vec::new();
        for _ in 0..3 {
            let ticket = breakers.admit_at(key.clone(), "v1", t0).expect("closed");
            breakers.record_at(&key, &ticket, Some(Category::Timeout), t0);
            old.push(ticket);
        }
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert!(breakers.admit_at(key.clone(), "v1", t0).is_err());
        let tripped = breakers.tripped_at(t0);
        assert_eq!(tripped.len(), 1);
        assert_eq!(
            (tripped[0].failures, tripped[0].trips, tripped[0].category),
            (3, 1, Category::Timeout)
        );
        assert_eq!(tripped[0].retry_at, breakers.wall(t0 + 10 * S));
        assert_eq!(
            breakers.tripped_at(t0 + 5 * S),
            tripped,
            "the same report while nothing happens"
        );
        // The shadow of the same name has a breaker of its own.
        let shadow = BreakerKey {
            name: "p".into(),
            mode: PolicyMode::Shadow,
        };
        assert!(breakers.admit_at(shadow, "v1", t0).is_ok());

        let ticket = breakers
            .admit_at(key.clone(), "v2", t0)
            .expect("a new version");
        assert!(
            changes.has_changed().unwrap(),
            "the tripped version is gone"
        );
        assert!(breakers.tripped_at(t0).is_empty());
        // Late results of the old version are not the new one's.
        for stale in &old {
            breakers.record_at(&key, stale, Some(Category::Timeout), t0);
        }
        breakers.record_at(&key, &ticket, Some(Category::Timeout), t0);
        assert!(
            breakers.admit_at(key, "v2", t0).is_ok(),
            "one failure of v2"
        );
    }

    #[test]
    fn threshold_zero_never_trips() {
        let breakers = Breakers::new(BreakerConfig::disabled());
        let key = BreakerKey {
            name: "p".into(),
            mode: PolicyMode::Enforce,
        };
        let t0 = Instant::now();
        assert!(!breakers.config().enabled());
        for _ in 0..100 {
            let ticket = breakers
                .admit_at(key.clone(), "v1", t0)
                .expect("never refused");
            breakers.record_at(&key, &ticket, Some(Category::Timeout), t0);
        }
        assert!(breakers.tripped_at(t0).is_empty());
    }
}
