//! Objects this operator created that its watch caches may not show yet.
//!
//! A reconcile reads pods and services from reflector caches, which trail the API server. When
//! a job is reconciled again before the watch has delivered the pods its last reconcile created,
//! the planner would see them missing and create them again: harmless (the names are fixed, the
//! second create gets `AlreadyExists`) but a wasted write per pod, which at a thousand jobs was
//! one write in seven. So each created object is remembered, by owner, from the API's answer
//! until the cache shows that name, or for a bounded time (a pod deleted before the watch ever
//! showed it must not be believed in forever).
//!
//! Each object is kept as its JSON text, as the owner caches keep theirs
//! ([`crate::owner_index`]): at a thousand jobs created at once, the typed pods waiting here for
//! the watch were about 20 MiB of the operator's heap. A reconcile decodes only its own job's
//! few objects the cache does not show yet.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How long a created object is believed in without the cache showing it.
pub const BELIEVE_FOR: Duration = Duration::from_secs(30);

/// Recently created objects of one kind, by the uid of their owner.
pub struct RecentlyCreated<K> {
    believe_for: Duration,
    state: Mutex<State>,
    kind: std::marker::PhantomData<fn(K) -> K>,
}

/// One remembered object: its name, its JSON text and when it was created.
struct Remembered {
    name: Box<str>,
    json: Arc<[u8]>,
    at: Instant,
}

struct State {
    /// Each owner's objects, oldest first.
    by_owner: HashMap<String, VecDeque<Remembered>>,
    /// Every remembered object's owner and time, oldest first: expiry looks only at the front,
    /// so remembering costs O(1) amortised however many owners have objects outstanding (at
    /// 10,000 jobs created at once, a scan of every owner per create took half the operator's
    /// CPU).
    expiry: VecDeque<(Instant, String)>,
}

impl<K: ResourceExt + Serialize + DeserializeOwned> RecentlyCreated<K> {
    pub fn new(believe_for: Duration) -> RecentlyCreated<K> {
        RecentlyCreated {
            believe_for,
            state: Mutex::new(State {
                by_owner: HashMap::new(),
                expiry: VecDeque::new(),
            }),
            kind: std::marker::PhantomData,
        }
    }

    /// Remembers `created`, as the API returned it, for the owner `owner_uid`.
    pub fn remember(&self, owner_uid: &str, created: &K) {
        self.remember_at(owner_uid, created, Instant::now());
    }

    /// `cached` plus the objects created for `owner_uid` that the cache does not show yet (by
    /// name). What the cache shows, or what is too old, is forgotten.
    pub fn merge(&self, owner_uid: &str, cached: Vec<K>) -> Vec<K> {
        self.merge_at(owner_uid, cached, Instant::now())
    }

    /// How many objects are remembered, for all owners.
    #[cfg(test)]
    fn len(&self) -> usize {
        let state = self.state.lock().expect("recently created lock");
        state.by_owner.values().map(VecDeque::len).sum()
    }

    fn remember_at(&self, owner_uid: &str, created: &K, now: Instant) {
        let json = match serde_json::to_vec(created) {
            Ok(json) => Arc::from(json),
            // Typed Kubernetes objects always serialise; should one not, it is not remembered
            // and at worst created again (`AlreadyExists`).
            Err(error) => {
                tracing::error!(%error, "a created object could not be remembered");
                return;
            }
        };
        let remembered = Remembered {
            name: created.name_any().into_boxed_str(),
            json,
            at: now,
        };
        let mut state = self.state.lock().expect("recently created lock");
        // Owners that went away are not reconciled again; expire their entries here.
        state.expire(now, self.believe_for);
        state
            .by_owner
            .entry(owner_uid.to_owned())
            .or_default()
            .push_back(remembered);
        state.expiry.push_back((now, owner_uid.to_owned()));
    }

    fn merge_at(&self, owner_uid: &str, mut cached: Vec<K>, now: Instant) -> Vec<K> {
        let mut state = self.state.lock().expect("recently created lock");
        let Some(list) = state.by_owner.get_mut(owner_uid) else {
            return cached;
        };
        // A set of the cached names: a job of a thousand workers created in one reconcile
        // would otherwise compare every remembered name with every cached one.
        let shown: HashSet<&str> = cached
            .iter()
            .filter_map(|c| c.meta().name.as_deref())
            .collect();
        list.retain(|r| !shown.contains(&*r.name) && now.duration_since(r.at) < self.believe_for);
        let unseen: Vec<(Box<str>, Arc<[u8]>)> = list
            .iter()
            .map(|r| (r.name.clone(), Arc::clone(&r.json)))
            .collect();
        if list.is_empty() {
            state.by_owner.remove(owner_uid);
        }
        // The expiry queue may still name this owner; `expire` skips what is gone already.
        drop(state);
        // Decoded outside the lock: other reconciles remember and merge meanwhile.
        let unseen = unseen
            .iter()
            .filter_map(|(name, json)| match serde_json::from_slice::<K>(json) {
                Ok(obj) => Some(obj),
                // The text was written from a `K` above; should it not read back, the
                // reconcile goes on as if the object were not created.
                Err(error) => {
                    tracing::error!(%error, name = &**name, "a remembered object could not be read");
                    None
                }
            });
        cached.extend(unseen);
        cached
    }
}

impl State {
    /// Forgets every object older than `believe_for`, oldest first.
    fn expire(&mut self, now: Instant, believe_for: Duration) {
        while let Some((at, _)) = self.expiry.front()
            && now.duration_since(*at) >= believe_for
        {
            let (_, owner) = self.expiry.pop_front().expect("a front entry");
            if let Some(list) = self.by_owner.get_mut(&owner) {
                while list
                    .front()
                    .is_some_and(|r| now.duration_since(r.at) >= believe_for)
                {
                    list.pop_front();
                }
                if list.is_empty() {
                    self.by_owner.remove(&owner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(name: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn created_objects_count_until_the_cache_shows_them() {
        let recent = RecentlyCreated::new(BELIEVE_FOR);
        recent.remember("job-1", &pod("a", "uid-a"));
        recent.remember("job-1", &pod("b", "uid-b"));
        recent.remember("job-2", &pod("c", "uid-c"));
        // The cache shows nothing yet: both created pods are there for job-1 only.
        assert_eq!(names(&recent.merge("job-1", vec![])), ["a", "b"]);
        // The cache caught up with `a` (the cached object wins, and `a` is forgotten).
        let merged = recent.merge("job-1", vec![pod("a", "uid-a-cached")]);
        assert_eq!(names(&merged), ["a", "b"]);
        assert_eq!(merged[0].uid().as_deref(), Some("uid-a-cached"));
        // Once forgotten, `a` is not brought back when the cache loses it (deleted).
        assert_eq!(names(&recent.merge("job-1", vec![])), ["b"]);
        assert_eq!(names(&recent.merge("job-2", vec![])), ["c"]);
    }

    #[test]
    fn objects_of_owners_never_reconciled_again_are_forgotten() {
        let recent = RecentlyCreated::new(BELIEVE_FOR);
        let start = Instant::now();
        for i in 0..1000 {
            let at = start + Duration::from_millis(i);
            recent.remember_at(&format!("job-{i}"), &pod("a", &format!("uid-{i}")), at);
        }
        assert_eq!(recent.len(), 1000);
        // One more create after the first 500 ran out of belief: they are gone, the rest stay.
        let later = start + BELIEVE_FOR + Duration::from_millis(500);
        recent.remember_at("job-new", &pod("b", "uid-new"), later);
        assert_eq!(recent.len(), 500);
        assert!(recent.merge_at("job-10", vec![], later).is_empty());
        assert_eq!(names(&recent.merge_at("job-900", vec![], later)), ["a"]);
        // An owner merged (and so removed) before its entries expire leaves a stale queue
        // entry behind, which expiry skips; a later object of the same owner is kept.
        recent.merge_at("job-new", vec![pod("b", "uid-new")], later);
        let again = later + Duration::from_millis(1);
        recent.remember_at("job-new", &pod("c", "uid-c"), again);
        let end = again + BELIEVE_FOR - Duration::from_millis(1);
        recent.remember_at("job-other", &pod("d", "uid-d"), end);
        assert_eq!(names(&recent.merge_at("job-new", vec![], end)), ["c"]);
        let past = end + BELIEVE_FOR;
        recent.remember_at("job-last", &pod("e", "uid-e"), past);
        assert_eq!(recent.len(), 1);
    }

    #[test]
    fn created_objects_are_believed_in_for_a_bounded_time() {
        let recent = RecentlyCreated::new(Duration::ZERO);
        recent.remember("job-1", &pod("a", "uid-a"));
        assert!(recent.merge("job-1", vec![]).is_empty());
    }
}
