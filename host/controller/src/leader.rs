//! Leader election on a `coordination.k8s.io/v1` Lease, for running the operator with hot
//! standbys (`run --leader-elect`). The decisions are in [`election`]; this module reads and
//! writes the Lease and publishes the outcome as a [`Leadership`].
//!
//! Standbys run everything but the writes: their caches stay filled and their policies
//! compiled, so a takeover costs only the wait for the lease. The [`Leadership`] handle is
//! what the rest of the operator consults: reconciles skip while it is false, the policy sync
//! writes no status, and the operator's API client refuses every write (the backstop for a
//! reconcile that was in flight when leadership was lost). It turns false *before* anything
//! else happens after the loss is known, so nothing is written after that.
//!
//! A leader that stops gracefully releases the lease (holder cleared, duration one second);
//! standbys watch the Lease, so the next one takes it at once instead of waiting out the
//! lease duration, and a rolling update hands over in about a second.

pub mod election;

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use election::{Decision, Observer, Record, Timings, renew_deadline_passed};

/// Whether this instance may write: a cheap handle, cloned wherever a write is decided.
#[derive(Clone, Debug)]
pub struct Leadership(watch::Receiver<bool>);

impl Leadership {
    /// Always leading: the operator runs without leader election.
    pub fn always() -> Leadership {
        let (_, rx) = watch::channel(true);
        Leadership(rx)
    }

    /// Follows a channel that some other elector drives.
    pub fn from_receiver(rx: watch::Receiver<bool>) -> Leadership {
        Leadership(rx)
    }

    /// Whether this instance leads now.
    pub fn is_leading(&self) -> bool {
        *self.0.borrow()
    }

    /// The underlying channel, for parts that know nothing of this crate.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.0.clone()
    }

    /// Yields each time this instance becomes the leader after the stream was made.
    pub fn gains(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut rx = self.0.clone();
        rx.mark_unchanged();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                rx.changed().await.ok()?;
                if *rx.borrow_and_update() {
                    return Some(((), rx));
                }
            }
        })
    }
}

/// Which Lease, and who this instance is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    /// The Lease's name (`--leader-election-id`).
    pub name: String,
    /// This instance's identity in `holderIdentity`: unique per process.
    pub identity: String,
    pub timings: Timings,
}

/// Campaigns for the Lease until stopped.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    leading: watch::Sender<bool>,
    observer: Observer,
    /// When the lease was last written by us; `Some` exactly while leading.
    renewed: Option<Instant>,
}

impl Elector {
    /// An elector and the handle that follows its outcome (false until the lease is won).
    /// `client` must not be the write-gated one: the elector writes while not leading.
    pub fn new(client: Client, config: LeaseConfig) -> (Elector, Leadership) {
        let (leading, rx) = watch::channel(false);
        let elector = Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            leading,
            observer: Observer::default(),
            renewed: None,
        };
        (elector, Leadership(rx))
    }

    /// Takes and renews the lease until `stop` resolves, then releases it if held. Resolve
    /// `stop` only once the work done under the lease has finished.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tracing::info!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            identity = %self.config.identity,
            "campaigning for leadership"
        );
        let selector = format!("metadata.name={}", self.config.name);
        let mut changes = watcher(
            self.api.clone(),
            watcher::Config::default().fields(&selector),
        )
        .default_backoff()
        .boxed();
        tokio::pin!(stop);
        loop {
            let wait = self.step().await;
            if let Some(renewed) = self.renewed
                && renew_deadline_passed(&self.config.timings, renewed, Instant::now())
            {
                self.step_down("the lease could not be renewed within the renew deadline");
            }
            let leading = self.renewed.is_some();
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(wait) => {}
                // A standby looks again as soon as the Lease changes (a release, above all).
                _ = changes.next(), if !leading => {}
            }
        }
        if self.renewed.is_some() {
            self.step_down("shutting down");
            self.release().await;
        }
    }

    /// One read and, if due, one write of the lease; returns how long to wait before the next.
    async fn step(&mut self) -> Duration {
        let retry = self.config.timings.retry_period;
        let lease = match self.api.get_opt(&self.config.name).await {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the leader election lease");
                return retry;
            }
        };
        self.observer
            .observe(lease.as_ref().map(record_of), Instant::now());
        match self.observer.decide(&self.config.identity, Instant::now()) {
            Decision::Create => {
                let lease = self.claimed(None, 0);
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => self.became_leader(),
                    Err(kube::Error::Api(s)) if s.is_already_exists() => return Duration::ZERO,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not create the leader election lease")
                    }
                }
                retry
            }
            Decision::Take => {
                let Some(current) = lease else { return retry };
                let transitions = self.observer.record().map_or(0, |r| r.transitions);
                let taken = self.claimed(Some(current), transitions.saturating_add(1));
                match self
                    .api
                    .replace(&self.config.name, &PostParams::default(), &taken)
                    .await
                {
                    Ok(_) => self.became_leader(),
                    // Another candidate was faster; its claim is read next time.
                    Err(kube::Error::Api(s)) if s.is_conflict() => return Duration::ZERO,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not take the leader election lease")
                    }
                }
                retry
            }
            Decision::Renew => {
                let Some(mut current) = lease else {
                    return retry;
                };
                if self.renewed.is_none() {
                    // Ours from an earlier term of this process (a step-down after failed
                    // renewals): take it back as a new term.
                    let transitions = self.observer.record().map_or(0, |r| r.transitions);
                    current = self.claimed(Some(current), transitions.saturating_add(1));
                } else if let Some(spec) = current.spec.as_mut() {
                    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
                    spec.lease_duration_seconds = Some(seconds(self.config.timings.lease_duration));
                }
                match self
                    .api
                    .replace(&self.config.name, &PostParams::default(), &current)
                    .await
                {
                    Ok(_) if self.renewed.is_none() => self.became_leader(),
                    Ok(_) => self.renewed = Some(Instant::now()),
                    // Someone wrote the lease since we read it: read it again at once.
                    Err(kube::Error::Api(s)) if s.is_conflict() => return Duration::ZERO,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not renew the leader election lease")
                    }
                }
                retry
            }
            Decision::Wait { holder, expires } => {
                if self.renewed.is_some() {
                    self.step_down(&format!("the lease is held by {holder}"));
                }
                // Wake when the holder's claim would run out, or at the next retry.
                retry.min(expires.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// The lease claimed by this instance now, built on `current` (keeping its metadata and
    /// `resourceVersion`, so the write fails if anyone wrote in between).
    fn claimed(&self, current: Option<Lease>, transitions: i32) -> Lease {
        let now = MicroTime(jiff::Timestamp::now());
        let mut lease = current.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds(self.config.timings.lease_duration)),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        });
        lease
    }

    fn became_leader(&mut self) {
        self.renewed = Some(Instant::now());
        self.leading.send_replace(true);
        tracing::info!(identity = %self.config.identity, "became the leader");
    }

    /// Stops every write at once; the elector goes on as a candidate.
    fn step_down(&mut self, why: &str) {
        self.leading.send_replace(false);
        self.renewed = None;
        tracing::warn!(identity = %self.config.identity, reason = why, "no longer the leader; writes stopped");
    }

    /// Clears the holder so a standby takes over without waiting out the lease.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        }
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("leader election lease released"),
            Err(e) => tracing::warn!(error = %e, "could not release the leader election lease"),
        }
    }
}

/// What the election reads of a Lease.
fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity,
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        transitions: spec.lease_transitions.unwrap_or(0),
        resource_version: lease.resource_version(),
    }
}

/// Whole seconds, rounded up (a lease never claims less than it means).
fn seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs).unwrap_or(i32::MAX)
}
