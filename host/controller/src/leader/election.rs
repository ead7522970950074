//! The decisions of leader election, free of IO and of wall clocks, so every case is a unit test.
//!
//! The algorithm is client-go's (and so controller-runtime's and training-operator's): a
//! `coordination.k8s.io/v1` Lease names its holder and how long a claim lasts. A candidate never
//! compares the holder's timestamps with its own clock (the nodes' clocks may disagree); it
//! notes *when it saw the record change* on its own monotonic clock, and considers the lease
//! expired once `leaseDurationSeconds` have passed since then without a change. Every write is
//! an update carrying the observed `resourceVersion`, so of two candidates taking an expired
//! lease at once exactly one succeeds and the other gets a conflict.
//!
//! The holder renews every retry period and gives up leadership itself once it has failed to
//! renew for the renew deadline, which is shorter than the lease duration: it has stopped
//! writing before any standby can consider the lease expired.

use std::time::{Duration, Instant};

/// How long claims last and how often they are renewed, as controller-runtime's flags name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a standby waits, since the lease last changed, before taking it.
    pub lease_duration: Duration,
    /// How long the leader keeps leading while its renewals fail.
    pub renew_deadline: Duration,
    /// How often candidates try to take the lease and the leader renews it.
    pub retry_period: Duration,
}

impl Default for Timings {
    /// controller-runtime's defaults, which training-operator 1.9 ran with.
    fn default() -> Timings {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Timings that cannot work: each message names the flags involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error("--leader-election-{0} must be more than 0")]
    Zero(&'static str),
    #[error(
        "--leader-election-lease-duration ({lease:?}) must be longer than \
         --leader-election-renew-deadline ({renew:?}): a leader must give up before a standby may take over"
    )]
    LeaseNotLongerThanRenew { lease: Duration, renew: Duration },
    #[error(
        "--leader-election-renew-deadline ({renew:?}) must be longer than \
         --leader-election-retry-period ({retry:?}): a leader needs more than one try to renew"
    )]
    RenewNotLongerThanRetry { renew: Duration, retry: Duration },
}

impl Timings {
    /// Checks the relations client-go requires: lease > renew deadline > retry period > 0.
    pub fn validate(&self) -> Result<(), TimingError> {
        for (name, value) in [
            ("lease-duration", self.lease_duration),
            ("renew-deadline", self.renew_deadline),
            ("retry-period", self.retry_period),
        ] {
            if value.is_zero() {
                return Err(TimingError::Zero(name));
            }
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingError::LeaseNotLongerThanRenew {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period {
            return Err(TimingError::RenewNotLongerThanRetry {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }
}

/// What the election reads of a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `spec.holderIdentity`; `None` or empty when released.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`, as the holder wrote it.
    pub lease_duration: Duration,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion`: changes with every write, renewals included.
    pub resource_version: Option<String>,
}

impl Record {
    /// The holder, if the lease is held at all.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// The last record seen, and when it was first seen in that form.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    last: Option<(Record, Instant)>,
}

impl Observer {
    /// Notes the record read at `now`; the clock restarts only when the record changed.
    pub fn observe(&mut self, record: Option<Record>, now: Instant) {
        self.last = match (record, self.last.take()) {
            (None, _) => None,
            (Some(record), Some((seen, at))) if seen == record => Some((seen, at)),
            (Some(record), _) => Some((record, now)),
        };
    }

    /// The record last observed.
    pub fn record(&self) -> Option<&Record> {
        self.last.as_ref().map(|(r, _)| r)
    }

    /// What `me` should do at `now`.
    pub fn decide(&self, me: &str, now: Instant) -> Decision {
        let Some((record, seen_at)) = &self.last else {
            return Decision::Create;
        };
        match record.holder() {
            Some(holder) if holder == me => Decision::Renew,
            Some(holder) => {
                let expires = *seen_at + record.lease_duration;
                if now < expires {
                    Decision::Wait {
                        holder: holder.to_owned(),
                        expires,
                    }
                } else {
                    Decision::Take
                }
            }
            None => Decision::Take,
        }
    }
}

/// The next step of a candidate or leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it, held by us.
    Create,
    /// Released, or not renewed for its duration: take it over (one more transition).
    Take,
    /// Ours: renew it.
    Renew,
    /// Another holds it until at least `expires`, unless it renews.
    Wait { holder: String, expires: Instant },
}

/// Whether a leader whose last successful renewal was at `last_renewed` must step down at `now`.
pub fn renew_deadline_passed(timings: &Timings, last_renewed: Instant, now: Instant) -> bool {
    now.saturating_duration_since(last_renewed) >= timings.renew_deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(by: &str, rv: &str) -> Option<Record> {
        Some(Record {
            holder: Some(by.into()),
            lease_duration: Duration::from_secs(15),
            transitions: 0,
            resource_version: Some(rv.into()),
        })
    }

    #[test]
    fn a_missing_lease_is_created() {
        assert_eq!(
            Observer::default().decide("a", Instant::now()),
            Decision::Create
        );
    }

    #[test]
    fn a_lease_held_by_another_is_waited_for_until_it_has_not_changed_for_its_duration() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        o.observe(held("b", "1"), t0);
        let expires = t0 + Duration::from_secs(15);
        assert_eq!(
            o.decide("a", t0 + Duration::from_secs(14)),
            Decision::Wait {
                holder: "b".into(),
                expires
            }
        );
        // The same record read again does not restart the clock...
        o.observe(held("b", "1"), t0 + Duration::from_secs(10));
        assert_eq!(o.decide("a", expires), Decision::Take);
        // ...a renewal (a new resourceVersion) does.
        o.observe(held("b", "2"), t0 + Duration::from_secs(16));
        assert!(matches!(
            o.decide("a", t0 + Duration::from_secs(30)),
            Decision::Wait { .. }
        ));
        assert_eq!(o.decide("a", t0 + Duration::from_secs(31)), Decision::Take);
    }

    #[test]
    fn the_holders_own_clock_is_never_trusted() {
        // A record first seen late counts from when it was seen, however old it claims to be.
        let t0 = Instant::now();
        let mut o = Observer::default();
        o.observe(held("b", "7"), t0 + Duration::from_secs(100));
        assert!(matches!(
            o.decide("a", t0 + Duration::from_secs(101)),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let mut o = Observer::default();
        let now = Instant::now();
        for holder in [None, Some(String::new())] {
            o.observe(
                Some(Record {
                    holder,
                    lease_duration: Duration::from_secs(1),
                    transitions: 3,
                    resource_version: Some("9".into()),
                }),
                now,
            );
            assert_eq!(o.decide("a", now), Decision::Take);
        }
    }

    #[test]
    fn our_own_lease_is_renewed_and_a_deleted_one_recreated() {
        let now = Instant::now();
        let mut o = Observer::default();
        o.observe(held("a", "1"), now);
        assert_eq!(o.decide("a", now), Decision::Renew);
        o.observe(None, now);
        assert_eq!(o.decide("a", now), Decision::Create);
        assert!(o.record().is_none());
    }

    #[test]
    fn a_leader_steps_down_once_renewals_failed_for_the_renew_deadline() {
        let t = Timings::default();
        let last = Instant::now();
        assert!(!renew_deadline_passed(
            &t,
            last,
            last + Duration::from_secs(9)
        ));
        assert!(renew_deadline_passed(
            &t,
            last,
            last + Duration::from_secs(10)
        ));
    }

    #[test]
    fn timings_must_let_a_leader_give_up_before_a_standby_takes_over() {
        assert_eq!(Timings::default().validate(), Ok(()));
        let secs = Duration::from_secs;
        let bad = |lease, renew, retry| {
            Timings {
                lease_duration: secs(lease),
                renew_deadline: secs(renew),
                retry_period: secs(retry),
            }
            .validate()
            .unwrap_err()
            .to_string()
        };
        assert!(bad(10, 10, 2).contains("--leader-election-lease-duration"));
        assert!(bad(15, 2, 2).contains("--leader-election-retry-period"));
        assert!(bad(15, 10, 0).contains("retry-period must be more than 0"));
    }
}
