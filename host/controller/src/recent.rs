//! Objects this operator created that its watch caches may not show yet.
//!
//! A reconcile reads pods and services from reflector caches, which trail the API server. When
//! a job is reconciled again before the watch has delivered the pods its last reconcile created,
//! the planner would see them missing and create them again: harmless (the names are fixed, the
//! second create gets `AlreadyExists`) but a wasted write per pod, which at a thousand jobs was
//! one write in seven. So each created object is remembered, by owner, from the API's answer
//! until the cache shows that name, or for a bounded time (a pod deleted before the watch ever
//! showed it must not be believed in forever).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

/// How long a created object is believed in without the cache showing it.
pub const BELIEVE_FOR: Duration = Duration::from_secs(30);

/// Recently created objects of one kind, by the uid of their owner.
pub struct RecentlyCreated<K> {
    believe_for: Duration,
    by_owner: Mutex<HashMap<String, Vec<(K, Instant)>>>,
}

impl<K: ResourceExt + Clone> RecentlyCreated<K> {
    pub fn new(believe_for: Duration) -> RecentlyCreated<K> {
        RecentlyCreated {
            believe_for,
            by_owner: Mutex::default(),
        }
    }

    /// Remembers `created`, as the API returned it, for the owner `owner_uid`.
    pub fn remember(&self, owner_uid: &str, created: K) {
        let now = Instant::now();
        let mut map = self.by_owner.lock().expect("recently created lock");
        // Owners that went away are not reconciled again; expire their entries here.
        map.retain(|_, list| {
            list.retain(|(_, at)| now.duration_since(*at) < self.believe_for);
            !list.is_empty()
        });
        map.entry(owner_uid.to_owned())
            .or_default()
            .push((created, now));
    }

    /// `cached` plus the objects created for `owner_uid` that the cache does not show yet (by
    /// name). What the cache shows, or what is too old, is forgotten.
    pub fn merge(&self, owner_uid: &str, mut cached: Vec<K>) -> Vec<K> {
        let now = Instant::now();
        let mut map = self.by_owner.lock().expect("recently created lock");
        let Some(list) = map.get_mut(owner_uid) else {
            return cached;
        };
        list.retain(|(obj, at)| {
            let seen = cached.iter().any(|c| c.name_any() == obj.name_any());
            !seen && now.duration_since(*at) < self.believe_for
        });
        cached.extend(list.iter().map(|(obj, _)| obj.clone()));
        if list.is_empty() {
            map.remove(owner_uid);
        }
        cached
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
        recent.remember("job-1", pod("a", "uid-a"));
        recent.remember("job-1", pod("b", "uid-b"));
        recent.remember("job-2", pod("c", "uid-c"));
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
    fn created_objects_are_believed_in_for_a_bounded_time() {
        let recent = RecentlyCreated::new(Duration::ZERO);
        recent.remember("job-1", pod("a", "uid-a"));
        assert!(recent.merge("job-1", vec![]).is_empty());
    }
}
