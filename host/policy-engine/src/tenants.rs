//! Each policy namespace's share of the engine: how many of its calls run at once, and how much
//! linear memory they hold together.
//!
//! A team that may write ConfigMaps in its own namespace may ship policies that loop until
//! their deadline or fill their memory cap on every call. Confinement keeps those policies to
//! the team's own jobs; shares keep their cost there too. A namespace's calls beyond its
//! concurrency wait for one of its own calls to end (on the reconcile thread that made them,
//! which the controller's fair seats already bound per namespace), so they cannot take every
//! core; its calls' memory comes from its own share, and all namespaces' shares together leave
//! the cluster-wide policies a reserve of the engine's budget, so they cannot make another
//! team's calls, or the cluster-wide policies every job runs, fail with `memory`.
//! Cluster-wide policies and the operator's own run outside any share.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::config::TenantLimits;
use crate::sandbox::MemoryBudget;

/// The shares of every policy namespace that has made a call, made on first use.
pub struct Tenants {
    limits: TenantLimits,
    /// What all namespaced policies together may hold: the engine's budget less the reserve.
    namespaced: MemoryBudget,
    shares: Mutex<HashMap<Arc<str>, Arc<Share>>>,
}

impl Tenants {
    /// Shares of `engine`'s memory budget under `limits`.
    pub(crate) fn new(limits: TenantLimits, engine: &MemoryBudget) -> Tenants {
        let namespaced = engine.share(engine.total().saturating_sub(limits.cluster_reserve));
        Tenants {
            limits,
            namespaced,
            shares: Mutex::default(),
        }
    }

    /// The share of `tenant`. Tenants are policy namespaces the operator was told to watch, so
    /// the map stays as small as its configuration.
    pub(crate) fn share(&self, tenant: &Arc<str>) -> Arc<Share> {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        let share = shares.entry(Arc::clone(tenant)).or_insert_with(|| {
            Arc::new(Share {
                tenant: Arc::clone(tenant),
                memory: self.namespaced.share(self.limits.memory),
                slots: Slots::new(self.limits.concurrency.max(1)),
            })
        });
        Arc::clone(share)
    }
}

/// One policy namespace's share.
pub struct Share {
    pub(crate) tenant: Arc<str>,
    pub(crate) memory: MemoryBudget,
    slots: Slots,
}

impl Share {
    /// Waits until fewer than the namespace's concurrency of its calls run, and counts this one
    /// until the returned slot is dropped.
    pub(crate) fn enter(&self) -> Slot<'_> {
        self.slots.take()
    }

    /// Calls of the namespace running now.
    pub fn running(&self) -> u32 {
        self.slots.taken()
    }
}

/// A counting semaphore for blocking threads: policy calls run on the blocking pool, never on
/// the async executor.
struct Slots {
    free: Mutex<u32>,
    capacity: u32,
    freed: Condvar,
}

impl Slots {
    fn new(capacity: u32) -> Slots {
        Slots {
            free: Mutex::new(capacity),
            capacity,
            freed: Condvar::new(),
        }
    }

    fn free(&self) -> MutexGuard<'_, u32> {
        // A count, updated whole under the lock: still right after a panic elsewhere.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self) -> Slot<'_> {
        let mut free = self.free();
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot { slots: self }
    }

    fn taken(&self) -> u32 {
        self.capacity - *self.free()
    }
}

/// A running call of a namespace; dropping it lets the next one in.
pub(crate) struct Slot<'a> {
    slots: &'a Slots,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.slots.free() += 1;
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn tenants(concurrency: u32) -> Tenants {
        let limits = TenantLimits {
            concurrency,
            memory: 40,
            cluster_reserve: 25,
        };
        Tenants::new(limits, &MemoryBudget::new(100))
    }

    #[test]
    fn one_namespace_has_one_share_with_the_configured_memory() {
        let tenants = tenants(1);
        let a: Arc<str> = Arc::from("team-a");
        let share = tenants.share(&a);
        assert!(Arc::ptr_eq(&share, &tenants.share(&Arc::from("team-a"))));
        assert!(!Arc::ptr_eq(&share, &tenants.share(&Arc::from("team-b"))));
        assert_eq!(share.memory.total(), 40);
        assert_eq!(tenants.namespaced.total(), 75, "the reserve is left out");
    }

    #[test]
    fn a_namespace_past_its_concurrency_waits_for_its_own_calls_and_no_other() {
        let tenants = Arc::new(tenants(1));
        let team_a = tenants.share(&Arc::from("team-a"));
        let first = team_a.enter();
        assert_eq!(team_a.running(), 1);
        // Another namespace is not held up.
        let team_b = tenants.share(&Arc::from("team-b"));
        drop(team_b.enter());
        // A second call of team-a waits until the first ends.
        let (entered_tx, entered) = mpsc::channel();
        let waiter = {
            let team_a = Arc::clone(&team_a);
            std::thread::spawn(move || {
                let _slot = team_a.enter();
                entered_tx.send(()).unwrap();
            })
        };
        assert_eq!(
            entered.recv_timeout(Duration::from_millis(200)),
            Err(mpsc::RecvTimeoutError::Timeout),
            "the second call waits"
        );
        drop(first);
        entered.recv().unwrap();
        waiter.join().unwrap();
        assert_eq!(team_a.running(), 0);
    }
}
