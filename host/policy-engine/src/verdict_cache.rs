//! Classifications reused while nothing they depend on has changed.
//!
//! Every reconcile of a job classifies each of its pods, and a job is reconciled whenever any
//! of its pods changes, so most classifications are of pods that did not change since the last
//! one. A verdict depends on the pod, the job context, the classification policies chosen for
//! the job (module and settings) and the time; so it is reused while the pod's
//! `resourceVersion`, the context and the policies' fingerprints are the same, and until the
//! `recheck-at` the policy gave with it (a grace period ending, a pending timeout). A policy
//! that gives none says only a change of its inputs can change its verdict. Policies of
//! contract 0.1.0 cannot say when to look again, so their verdicts are never reused.
//!
//! Only complete successes are kept: a verdict reached after a policy failed (and was ignored)
//! is computed again next time, as the failure may have been passing. Entries of pods that are
//! no longer classified are swept once the cache holds more than a bound.
//!
//! Pure and synchronous: the caller passes the time and holds the lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use jiff::{SignedDuration, Timestamp};
use tfjob_planner::{Classified, PodContext, PolicyNote, Verdict};

/// Entries kept before unused ones are swept.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// An entry not used for this long goes at the next sweep.
const IDLE: SignedDuration = SignedDuration::from_secs(600);

/// What a cached verdict was computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictKey {
    /// `metadata.resourceVersion` of the pod.
    pub resource_version: String,
    /// The classification policies' fingerprints, enforced then shadow, in evaluation order.
    pub policies: Vec<String>,
    /// A keyed hash of the job context (the hasher's keys are random per process, so a job
    /// author cannot aim a collision at another context).
    pub context: u64,
}

struct Entry {
    key: VerdictKey,
    verdict: Verdict,
    notes: Vec<PolicyNote>,
    /// Reuse ends here; `None`: never on time alone.
    recheck_at: Option<Timestamp>,
    last_used: Timestamp,
}

/// The cache, by pod uid.
pub struct VerdictCache {
    entries: HashMap<String, Entry>,
    capacity: usize,
    hasher: RandomState,
}

impl Default for VerdictCache {
    fn default() -> Self {
        VerdictCache::with_capacity(DEFAULT_CAPACITY)
    }
}

impl VerdictCache {
    /// A cache that sweeps idle entries once it holds more than `capacity`.
    pub fn with_capacity(capacity: usize) -> VerdictCache {
        VerdictCache {
            entries: HashMap::new(),
            capacity,
            hasher: RandomState::new(),
        }
    }

    /// The keyed hash of a job context, for [`VerdictKey::context`].
    pub fn context_hash(&self, ctx: &PodContext) -> u64 {
        let mut h = self.hasher.build_hasher();
        (
            &ctx.job_name,
            &ctx.namespace,
            &ctx.job_uid,
            &ctx.job_labels,
            &ctx.job_annotations,
            &ctx.replica_type,
        )
            .hash(&mut h);
        (ctx.replica_index, ctx.replica_count, ctx.attempt).hash(&mut h);
        h.finish()
    }

    /// The verdict and notes kept for pod `uid`, if computed from `key` and still current at
    /// `now`.
    pub fn get(&mut self, uid: &str, key: &VerdictKey, now: Timestamp) -> Option<Classified> {
        let entry = self.entries.get_mut(uid)?;
        if entry.key != *key || entry.recheck_at.is_some_and(|at| now >= at) {
            return None;
        }
        entry.last_used = now;
        Some(Classified {
            verdict: entry.verdict.clone(),
            notes: entry.notes.clone(),
        })
    }

    /// Keeps a verdict computed from `key` at `now`, in place of any older one of the pod.
    pub fn put(
        &mut self,
        uid: &str,
        key: VerdictKey,
        verdict: &Verdict,
        notes: &[PolicyNote],
        now: Timestamp,
    ) {
        // A verdict due for a recheck already (a 0.1.0 policy's) is not worth keeping.
        if uid.is_empty() || verdict.recheck_at.is_some_and(|at| at <= now) {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(uid) {
            self.sweep(now);
        }
        self.entries.insert(
            uid.to_owned(),
            Entry {
                key,
                recheck_at: verdict.recheck_at,
                verdict: verdict.clone(),
                notes: notes.to_vec(),
                last_used: now,
            },
        );
    }

    /// How many verdicts are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops entries idle for [`IDLE`]; if that frees less than a quarter, the least recently
    /// used go until a quarter is free, so a burst of new pods cannot grow the cache unbounded.
    fn sweep(&mut self, now: Timestamp) {
        let cutoff = now - IDLE;
        self.entries.retain(|_, e| e.last_used > cutoff);
        let target = self.capacity - self.capacity / 4;
        if self.entries.len() > target {
            let mut ages: Vec<Timestamp> = self.entries.values().map(|e| e.last_used).collect();
            ages.sort_unstable();
            let threshold = ages[self.entries.len() - target];
            self.entries.retain(|_, e| e.last_used >= threshold);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_planner::VerdictPhase;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn ctx() -> PodContext {
        PodContext {
            job_name: "j".into(),
            namespace: "ns".into(),
            job_uid: "u".into(),
            job_labels: Default::default(),
            job_annotations: Default::default(),
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 2,
            attempt: 0,
        }
    }

    fn key(cache: &VerdictCache, rv: &str, policy: &str, ctx: &PodContext) -> VerdictKey {
        VerdictKey {
            resource_version: rv.into(),
            policies: vec![policy.into()],
            context: cache.context_hash(ctx),
        }
    }

    fn verdict(recheck_at: Option<&str>) -> Verdict {
        let mut v = Verdict::bare(VerdictPhase::Initializing);
        v.recheck_at = recheck_at.map(at);
        v
    }

    #[test]
    fn a_verdict_is_reused_only_while_pod_policies_context_and_time_allow() {
        let mut cache = VerdictCache::default();
        let c = ctx();
        let now = at("2026-01-01T00:00:00Z");
        let k = key(&cache, "10", "p@aaaa", &c);
        cache.put(
            "pod",
            k.clone(),
            &verdict(Some("2026-01-01T00:03:00Z")),
            &[],
            now,
        );
        // Nothing changed: reused, before the recheck time.
        assert!(cache.get("pod", &k, at("2026-01-01T00:02:59Z")).is_some());
        // The pod changed.
        assert!(
            cache
                .get("pod", &key(&cache, "11", "p@aaaa", &c), now)
                .is_none()
        );
        // A new policy version (or settings: another fingerprint).
        assert!(
            cache
                .get("pod", &key(&cache, "10", "p@bbbb", &c), now)
                .is_none()
        );
        // Another context (the replica was restarted).
        let mut restarted = c.clone();
        restarted.attempt = 1;
        assert!(
            cache
                .get("pod", &key(&cache, "10", "p@aaaa", &restarted), now)
                .is_none()
        );
        // The recheck time has come.
        assert!(cache.get("pod", &k, at("2026-01-01T00:03:00Z")).is_none());
        // Another pod.
        assert!(cache.get("other", &k, now).is_none());
    }

    #[test]
    fn without_a_recheck_time_only_a_change_of_inputs_ends_reuse() {
        let mut cache = VerdictCache::default();
        let c = ctx();
        let k = key(&cache, "10", "p@aaaa", &c);
        cache.put(
            "pod",
            k.clone(),
            &verdict(None),
            &[],
            at("2026-01-01T00:00:00Z"),
        );
        assert!(cache.get("pod", &k, at("2030-01-01T00:00:00Z")).is_some());
        // A newer verdict of the same pod replaces it.
        let k2 = key(&cache, "11", "p@aaaa", &c);
        cache.put(
            "pod",
            k2.clone(),
            &verdict(None),
            &[],
            at("2026-01-01T00:00:01Z"),
        );
        assert!(cache.get("pod", &k, at("2026-01-01T00:00:02Z")).is_none());
        assert!(cache.get("pod", &k2, at("2026-01-01T00:00:02Z")).is_some());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_cache_stays_bounded_keeping_what_is_in_use() {
        let mut cache = VerdictCache::with_capacity(100);
        let c = ctx();
        let k = key(&cache, "1", "p@aaaa", &c);
        let start = at("2026-01-01T00:00:00Z");
        for i in 0..1_000i64 {
            let now = start + SignedDuration::from_secs(i);
            cache.put(&format!("pod-{i}"), k.clone(), &verdict(None), &[], now);
            // One pod is classified all along.
            cache.put("busy", k.clone(), &verdict(None), &[], now);
            assert!(cache.len() <= 100, "{} entries", cache.len());
        }
        let end = start + SignedDuration::from_secs(1_000);
        assert!(cache.get("busy", &k, end).is_some(), "the pod in use stays");
        assert!(cache.get("pod-0", &k, end).is_none(), "old ones went");
        assert!(cache.get("pod-999", &k, end).is_some(), "the newest stay");
    }
}
