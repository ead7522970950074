//! The memory loaded policies may hold, and each policy namespace's share of it.
//!
//! The shares in [`crate::tenants`] bound what a namespace's *calls* hold while they run; this
//! bounds what its *loaded versions* hold for as long as they serve: compiled code, the copies
//! pre-initialised for their settings, what is kept of their modules. A Python policy costs
//! tens of MiB loaded, so without a bound one team allowed 64 policy ConfigMaps could take the
//! operator past its memory limit, and since the operator loads the same policies at every
//! start, keep it down for every team.
//!
//! Every version that serves holds a [`Reservation`] of what it was measured to cost when it
//! loaded, made of the compiled parts it uses (its module's component and its pre-initialised
//! copy). A version is admitted only if
//! - the namespace's versions together stay within its share (each charged in full for every
//!   part it uses, even one another namespace loaded too: no team's room depends on what
//!   another team loads or unloads);
//! - all namespaced versions stay within the budget less the reserve kept for cluster-wide
//!   policies, which every job runs;
//! - all loaded parts, each counted once however many versions share it, stay within the budget.
//!
//! A version is checked as the replacement of the one its source serves now: the old one's
//! reservation does not count against it (it is dropped once the new one is swapped in and the
//! calls in flight end). The built-in policies are part of the operator's base size, not
//! charged here. This module only counts; what a part costs is measured by the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

/// How much loaded policies may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadedLimits {
    /// All loaded policies together, in bytes.
    pub total: u64,
    /// One policy namespace's confined policies together.
    pub per_namespace: u64,
    /// What namespaced policies together may never take: room for cluster-wide policies.
    pub cluster_reserve: u64,
}

impl Default for LoadedLimits {
    /// Sized for the shipped Deployment's 512 MiB limit (`docs/deploy.md`, "Sizing"): the
    /// operator's own base and caches, the calls' budget, and 160 MiB of loaded policies, of
    /// which 48 MiB only cluster-wide ones may use and 64 MiB is one namespace's most.
    fn default() -> Self {
        LoadedLimits {
            total: 160 << 20,
            per_namespace: 64 << 20,
            cluster_reserve: 48 << 20,
        }
    }
}

/// A compiled part of a loaded version and what it was measured to cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The module's digest, or the key of a pre-initialised copy: two versions with the same
    /// id share the part.
    pub id: String,
    pub bytes: u64,
}

/// Why a version does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "loaded, it would hold {cost} bytes, taking the policies of namespace {tenant} to \
         {after} bytes; their share of the memory for loaded policies is {share} bytes \
         (--policy-loaded-memory-per-namespace-mib)"
    )]
    Namespace {
        tenant: String,
        cost: u64,
        after: u64,
        share: u64,
    },
    #[error(
        "loaded, it would hold {cost} bytes, taking the policies of all policy namespaces to \
         {after} bytes; they may hold {limit} bytes (--policy-loaded-memory-mib less \
         --policy-loaded-memory-cluster-reserve-mib)"
    )]
    Namespaced { cost: u64, after: u64, limit: u64 },
    #[error(
        "loaded, it would hold {cost} bytes, taking all loaded policies to {after} bytes; the \
         budget is {limit} bytes (--policy-loaded-memory-mib)"
    )]
    Total { cost: u64, after: u64, limit: u64 },
}

/// What loaded policies hold now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every loaded part counted once.
    pub total: u64,
    /// What each policy namespace is charged; cluster-wide policies under no key.
    pub namespaces: BTreeMap<String, u64>,
    /// Versions holding a reservation.
    pub versions: usize,
}

/// The budget of loaded policies, shared by every load.
#[derive(Debug)]
pub struct LoadedBudget {
    limits: LoadedLimits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    holdings: BTreeMap<u64, Holding>,
}

#[derive(Debug)]
struct Holding {
    holder: String,
    tenant: Option<String>,
    parts: Vec<Part>,
}

impl Holding {
    fn cost(&self) -> u64 {
        sum(&self.parts)
    }
}

/// What a serving version holds of the budget; dropping it gives it back.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<LoadedBudget>,
    id: u64,
    /// The bytes the version was charged.
    pub charged: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.state().holdings.remove(&self.id);
    }
}

impl LoadedBudget {
    pub fn new(limits: LoadedLimits) -> Arc<LoadedBudget> {
        Arc::new(LoadedBudget {
            limits,
            state: Mutex::default(),
        })
    }

    pub fn limits(&self) -> LoadedLimits {
        self.limits
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is whole under the lock: still consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a version of `holder` (its source, e.g. `namespace/configmap`) confined to
    /// `tenant` (none: cluster-wide) made of `parts`, as the replacement of what `holder` holds
    /// now; or says which limit it would pass.
    pub fn admit(
        self: &Arc<Self>,
        holder: &str,
        tenant: Option<&str>,
        parts: Vec<Part>,
    ) -> Result<Reservation, BudgetError> {
        let mut state = self.state();
        let others = || state.holdings.values().filter(|h| h.holder != holder);
        let cost = sum(&parts);
        let added = |held: &BTreeSet<&str>| -> u64 {
            distinct(&parts)
                .filter(|p| !held.contains(p.id.as_str()))
                .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
        };
        if let Some(tenant) = tenant {
            let charged: u64 = others()
                .filter(|h| h.tenant.as_deref() == Some(tenant))
                .fold(0u64, |sum, h| sum.saturating_add(h.cost()));
            let after = charged.saturating_add(cost);
            if after > self.limits.per_namespace {
                return Err(BudgetError::Namespace {
                    tenant: tenant.to_owned(),
                    cost,
                    after,
                    share: self.limits.per_namespace,
                });
            }
            let namespaced = others().filter(|h| h.tenant.is_some());
            let (held, bytes) = parts_of(namespaced);
            let after = bytes.saturating_add(added(&held));
            let limit = self
                .limits
                .total
                .saturating_sub(self.limits.cluster_reserve);
            if after > limit {
                return Err(BudgetError::Namespaced { cost, after, limit });
            }
        }
        let (held, bytes) = parts_of(others());
        let after = bytes.saturating_add(added(&held));
        if after > self.limits.total {
            return Err(BudgetError::Total {
                cost,
                after,
                limit: self.limits.total,
            });
        }
        let id = state.next;
        state.next += 1;
        state.holdings.insert(
            id,
            Holding {
                holder: holder.to_owned(),
                tenant: tenant.map(str::to_owned),
                parts,
            },
        );
        Ok(Reservation {
            budget: Arc::clone(self),
            id,
            charged: cost,
        })
    }

    /// What loaded policies hold now.
    pub fn usage(&self) -> Usage {
        let state = self.state();
        let mut namespaces = BTreeMap::new();
        for h in state.holdings.values() {
            if let Some(tenant) = &h.tenant {
                let charged = namespaces.entry(tenant.clone()).or_insert(0u64);
                *charged = charged.saturating_add(h.cost());
            }
        }
        Usage {
            total: parts_of(state.holdings.values()).1,
            namespaces,
            versions: state.holdings.len(),
        }
    }
}

/// What `parts` cost together, each counted.
fn sum(parts: &[Part]) -> u64 {
    parts
        .iter()
        .fold(0u64, |sum, p| sum.saturating_add(p.bytes))
}

/// `parts` without repeats of an id (the first one counts).
fn distinct(parts: &[Part]) -> impl Iterator<Item = &Part> {
    let mut seen = BTreeSet::new();
    parts.iter().filter(move |p| seen.insert(p.id.as_str()))
}

/// The distinct parts `holdings` use, and their bytes counted once each.
fn parts_of<'a>(holdings: impl Iterator<Item = &'a Holding>) -> (BTreeSet<&'a str>, u64) {
    let mut held = BTreeSet::new();
    let mut bytes = 0u64;
    for part in holdings.flat_map(|h| h.parts.iter()) {
        if held.insert(part.id.as_str()) {
            bytes = bytes.saturating_add(part.bytes);
        }
    }
    (held, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &str, bytes: u64) -> Part {
        Part {
            id: id.into(),
            bytes,
        }
    }

    fn budget() -> Arc<LoadedBudget> {
        LoadedBudget::new(LoadedLimits {
            total: 100,
            per_namespace: 40,
            cluster_reserve: 25,
        })
    }

    #[test]
    fn a_team_loads_until_its_share_and_the_next_version_is_refused_naming_it() {
        let b = budget();
        let _one = b.admit("a/p1", Some("a"), vec![part("m1", 15)]).unwrap();
        let _two = b.admit("a/p2", Some("a"), vec![part("m2", 15)]).unwrap();
        let err = b
            .admit("a/p3", Some("a"), vec![part("m3", 15)])
            .unwrap_err();
        assert_eq!(
            err,
            BudgetError::Namespace {
                tenant: "a".into(),
                cost: 15,
                after: 45,
                share: 40
            }
        );
        assert!(
            err.to_string()
                .contains("--policy-loaded-memory-per-namespace-mib"),
            "{err}"
        );
        // Another team is untouched by it.
        let _other = b.admit("b/p1", Some("b"), vec![part("m4", 30)]).unwrap();
        assert_eq!(
            b.usage().namespaces,
            BTreeMap::from([("a".into(), 30), ("b".into(), 30)])
        );
    }

    #[test]
    fn a_new_version_replaces_its_source_s_and_dropping_gives_back() {
        let b = budget();
        let old = b.admit("a/p", Some("a"), vec![part("v1", 35)]).unwrap();
        // Checked as the replacement: 35 + 35 would pass the share, 35 alone does not.
        let new = b.admit("a/p", Some("a"), vec![part("v2", 35)]).unwrap();
        drop(old);
        assert_eq!(b.usage().total, 35);
        drop(new);
        assert_eq!(b.usage(), Usage::default());
    }

    #[test]
    fn a_part_two_teams_load_is_counted_once_in_all_and_in_full_for_each() {
        let b = budget();
        let _a = b
            .admit(
                "a/p",
                Some("a"),
                vec![part("python", 30), part("copy-a", 5)],
            )
            .unwrap();
        let _b = b
            .admit(
                "b/p",
                Some("b"),
                vec![part("python", 30), part("copy-b", 5)],
            )
            .unwrap();
        let usage = b.usage();
        assert_eq!(usage.total, 40, "the shared part once: 30 + 5 + 5");
        assert_eq!(usage.namespaces["a"], 35);
        assert_eq!(usage.namespaces["b"], 35);
    }

    #[test]
    fn shared_parts_count_once_against_the_whole_budget() {
        let b = LoadedBudget::new(LoadedLimits {
            total: 50,
            per_namespace: 40,
            cluster_reserve: 0,
        });
        let _a = b.admit("a/p", Some("a"), vec![part("python", 30)]).unwrap();
        // 30 + 30 would pass 50 if the shared part were counted twice.
        let _b = b
            .admit("b/p", Some("b"), vec![part("python", 30), part("copy", 10)])
            .unwrap();
        assert_eq!(b.usage().total, 40);
    }

    #[test]
    fn namespaced_policies_leave_the_reserve_to_cluster_wide_ones() {
        let b = budget();
        let _a = b.admit("a/p", Some("a"), vec![part("m1", 40)]).unwrap();
        let err = b.admit("b/p", Some("b"), vec![part("m2", 40)]).unwrap_err();
        assert!(
            matches!(
                err,
                BudgetError::Namespaced {
                    after: 80,
                    limit: 75,
                    ..
                }
            ),
            "{err:?}"
        );
        let _cluster = b.admit("sys/p", None, vec![part("m3", 55)]).unwrap();
        let err = b.admit("sys/q", None, vec![part("m4", 10)]).unwrap_err();
        assert!(
            matches!(
                err,
                BudgetError::Total {
                    after: 105,
                    limit: 100,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn huge_costs_do_not_overflow() {
        let b = budget();
        let err = b
            .admit("a/p", Some("a"), vec![part("m", u64::MAX), part("n", 1)])
            .unwrap_err();
        assert!(matches!(err, BudgetError::Namespace { .. }), "{err:?}");
        let err = b
            .admit("sys/p", None, vec![part("m", u64::MAX)])
            .unwrap_err();
        assert!(matches!(err, BudgetError::Total { .. }), "{err:?}");
    }
}
