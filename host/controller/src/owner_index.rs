//! The owned pods and services of each job, found without scanning the whole watch cache.
//!
//! A reconcile needs the objects its job controls. The reflector cache is a map by name, so
//! finding them meant filtering every cached pod of the cluster on every reconcile: a
//! reconcile cost grew with the size of the cluster, not of its job. [`OwnerIndex`] maps the
//! uid of each controller owner (the ownerReference with `controller: true`; Kubernetes allows
//! one per object) to the objects it controls, and a reconcile reads only those from the cache.
//!
//! The index is only right if it sees exactly the events the cache sees, in the same order. So
//! neither is written on its own: [`cache`] makes the pair and [`reflector`] (or
//! [`OwnedWriter::apply_watcher_event`]) applies each watch event to the cache, then to the
//! index, the way kube-runtime's `Writer` applies it: a relist is built aside and swapped in
//! whole when it is complete, so that objects deleted while the watch was down disappear and
//! readers never see a half-listed index.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use futures::{Stream, TryStreamExt};
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

/// Objects of kind `K` by the uid of their controller owner. Cheap to clone: clones share the
/// index, which its [`OwnedWriter`] keeps up to date.
pub struct OwnerIndex<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    entries: Arc<RwLock<Entries<K>>>,
}

impl<K: Resource> Clone for OwnerIndex<K>
where
    K::DynamicType: Eq + Hash,
{
    fn clone(&self) -> Self {
        OwnerIndex {
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<K: Resource> OwnerIndex<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The objects whose controller owner has `uid`, in no particular order.
    pub fn owned_by(&self, uid: &str) -> Vec<ObjectRef<K>> {
        let entries = self.entries.read().expect("owner index lock");
        entries
            .by_owner
            .get(uid)
            .map(|refs| refs.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Entries<K>> {
        self.entries.write().expect("owner index lock")
    }
}

/// The index proper, in both directions: the reverse map finds the entry an object leaves when
/// its controller owner changes or it is deleted, without trusting the owner named in the event.
struct Entries<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    by_owner: HashMap<String, HashSet<ObjectRef<K>>>,
    owner_of: HashMap<ObjectRef<K>, String>,
}

impl<K: Resource> Default for Entries<K>
where
    K::DynamicType: Eq + Hash,
{
    fn default() -> Self {
        Entries {
            by_owner: HashMap::new(),
            owner_of: HashMap::new(),
        }
    }
}

impl<K: Resource> Entries<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Files `obj` under its controller owner, out of any other owner's entry; an object
    /// without a controller owner is in no entry.
    fn apply(&mut self, obj: &K) {
        let key = ObjectRef::from_obj(obj);
        let owner = controller_uid(obj);
        if self.owner_of.get(&key).map(String::as_str) == owner {
            return;
        }
        self.remove(&key);
        if let Some(owner) = owner {
            self.by_owner
                .entry(owner.to_owned())
                .or_default()
                .insert(key.clone());
            self.owner_of.insert(key, owner.to_owned());
        }
    }

    fn remove(&mut self, key: &ObjectRef<K>) {
        let Some(owner) = self.owner_of.remove(key) else {
            return;
        };
        if let Some(refs) = self.by_owner.get_mut(&owner) {
            refs.remove(key);
            // Jobs come and go; an entry per job ever seen would grow without bound.
            if refs.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
    }
}

/// The uid of the ownerReference with `controller: true`, if any. Other owners do not make an
/// object part of a job: the planner acts only on what the job controls.
fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The writing side of an [`OwnerIndex`], with the relist being built.
struct IndexWriter<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    live: OwnerIndex<K>,
    relist: Entries<K>,
}

impl<K: Resource> IndexWriter<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn new() -> Self {
        IndexWriter {
            live: OwnerIndex {
                entries: Arc::default(),
            },
            relist: Entries::default(),
        }
    }

    /// Applies one watch event as kube-runtime's `Writer` applies it to its cache.
    fn apply_watcher_event(&mut self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => self.live.write().apply(obj),
            watcher::Event::Delete(obj) => self.live.write().remove(&ObjectRef::from_obj(obj)),
            // A relist starts from nothing; readers keep the previous index until it is done.
            watcher::Event::Init => self.relist = Entries::default(),
            watcher::Event::InitApply(obj) => self.relist.apply(obj),
            watcher::Event::InitDone => {
                let previous = {
                    let mut live = self.live.write();
                    std::mem::replace(&mut *live, std::mem::take(&mut self.relist))
                };
                // Freed after the lock is released: readers do not wait on the deallocation.
                drop(previous);
            }
        }
    }
}

/// A reflector cache of kind `K` with its [`OwnerIndex`]; clones share both.
pub struct OwnedCache<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash,
{
    store: Store<K>,
    owners: OwnerIndex<K>,
}

impl<K: Resource + 'static> Clone for OwnedCache<K>
where
    K::DynamicType: Eq + Hash,
{
    fn clone(&self) -> Self {
        OwnedCache {
            store: self.store.clone(),
            owners: self.owners.clone(),
        }
    }
}

impl<K: Resource + Clone + 'static> OwnedCache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The cache itself (e.g. to wait until it is filled).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The cached objects whose controller owner has `uid`, in no particular order.
    pub fn owned_by(&self, uid: &str) -> Vec<K> {
        self.owners
            .owned_by(uid)
            .iter()
            // The index may name an object a moment after the cache dropped it.
            .filter_map(|key| self.store.get(key))
            // The cache takes each event just before the index: for that moment it may hold an
            // object whose new controller owner the index does not know yet.
            .filter(|obj| controller_uid(obj.as_ref()) == Some(uid))
            .map(|obj| obj.as_ref().clone())
            .collect()
    }
}

/// Writes an [`OwnedCache`]: each watch event goes to the reflector cache, then to the index.
pub struct OwnedWriter<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Writer<K>,
    index: IndexWriter<K>,
}

impl<K: Resource + Clone + 'static> OwnedWriter<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Applies one watch event to the cache and the index.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<K>) {
        self.store.apply_watcher_event(event);
        self.index.apply_watcher_event(event);
    }
}

/// An empty [`OwnedCache`] and its only writer.
pub fn cache<K: Resource + Clone + 'static>() -> (OwnedCache<K>, OwnedWriter<K>)
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    // A plain (not shared) store: nothing subscribes to it, so applying events is all kube's
    // own `reflector` would do with it.
    let (store, store_writer) = reflector::store();
    let index = IndexWriter::new();
    let cache = OwnedCache {
        store,
        owners: index.live.clone(),
    };
    let writer = OwnedWriter {
        store: store_writer,
        index,
    };
    (cache, writer)
}

/// kube-runtime's `reflector` for an [`OwnedCache`]: applies each event of `stream` to the
/// cache and its index before passing it on.
pub fn reflector<K, W>(mut writer: OwnedWriter<K>, stream: W) -> impl Stream<Item = W::Item>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
    W: Stream<Item = watcher::Result<watcher::Event<K>>>,
{
    stream.inspect_ok(move |event| writer.apply_watcher_event(event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn owner(uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "kubeflow.org/v1".into(),
            kind: "TFJob".into(),
            name: format!("job-{uid}"),
            uid: uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    fn pod(name: &str, owners: Vec<OwnerReference>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                owner_references: Some(owners),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn controlled(name: &str, uid: &str) -> Pod {
        pod(name, vec![owner(uid, true)])
    }

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort();
        names
    }

    fn indexed(index: &OwnerIndex<Pod>, uid: &str) -> Vec<String> {
        sorted(index.owned_by(uid).into_iter().map(|r| r.name).collect())
    }

    fn cached(cache: &OwnedCache<Pod>, uid: &str) -> Vec<String> {
        sorted(
            cache
                .owned_by(uid)
                .iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect(),
        )
    }

    fn writer() -> (OwnerIndex<Pod>, IndexWriter<Pod>) {
        let writer = IndexWriter::new();
        (writer.live.clone(), writer)
    }

    #[test]
    fn applied_objects_are_filed_under_their_controller_owner() {
        let (index, mut w) = writer();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-1", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("b-0", "b")));
        // An update under the same owner keeps one entry.
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        assert_eq!(indexed(&index, "a"), ["a-0", "a-1"]);
        assert_eq!(indexed(&index, "b"), ["b-0"]);
        assert!(indexed(&index, "c").is_empty());
    }

    #[test]
    fn an_object_whose_controller_changes_or_goes_leaves_its_old_entry() {
        let (index, mut w) = writer();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "b")));
        assert!(indexed(&index, "a").is_empty());
        assert_eq!(indexed(&index, "b"), ["p"]);
        // Orphaned (the controller reference removed, another owner kept): in no entry.
        w.apply_watcher_event(&watcher::Event::Apply(pod("p", vec![owner("b", false)])));
        assert!(indexed(&index, "b").is_empty());
        assert!(index.entries.read().unwrap().owner_of.is_empty());
        // Adopted again.
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "a")));
        assert_eq!(indexed(&index, "a"), ["p"]);
    }

    #[test]
    fn deleted_objects_leave_the_index() {
        let (index, mut w) = writer();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-1", "a")));
        w.apply_watcher_event(&watcher::Event::Delete(controlled("a-0", "a")));
        assert_eq!(indexed(&index, "a"), ["a-1"]);
        // The entry goes by name, whatever owner the deleted object's last state names.
        w.apply_watcher_event(&watcher::Event::Delete(pod("a-1", vec![])));
        assert!(indexed(&index, "a").is_empty());
        let entries = index.entries.read().unwrap();
        assert!(entries.by_owner.is_empty() && entries.owner_of.is_empty());
    }

    #[test]
    fn only_the_controller_reference_counts() {
        let (index, mut w) = writer();
        w.apply_watcher_event(&watcher::Event::Apply(pod("x", vec![owner("a", false)])));
        w.apply_watcher_event(&watcher::Event::Apply(pod(
            "y",
            vec![owner("a", false), owner("b", true)],
        )));
        assert!(indexed(&index, "a").is_empty());
        assert_eq!(indexed(&index, "b"), ["y"]);
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_is_done() {
        let (index, mut w) = writer();
        for name in ["a-0", "a-1", "a-2"] {
            w.apply_watcher_event(&watcher::Event::Apply(controlled(name, "a")));
        }
        w.apply_watcher_event(&watcher::Event::Apply(controlled("b-0", "b")));
        // The watch was down while a-1 and b-0 were deleted, a-2 changed owner and c-0 came.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-2", "c")));
        // Until the relist is complete, readers see the index as it was.
        assert_eq!(indexed(&index, "a"), ["a-0", "a-1", "a-2"]);
        assert_eq!(indexed(&index, "b"), ["b-0"]);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("c-0", "c")));
        assert!(indexed(&index, "c").is_empty());
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(indexed(&index, "a"), ["a-0"]);
        assert!(indexed(&index, "b").is_empty());
        assert_eq!(indexed(&index, "c"), ["a-2", "c-0"]);
        // The next relist starts empty, not from the previous one's leftovers.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("c-0", "c")));
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert!(indexed(&index, "a").is_empty());
        assert_eq!(indexed(&index, "c"), ["c-0"]);
    }

    #[test]
    fn the_cache_answers_for_the_objects_the_index_names() {
        let (cache, mut w) = cache::<Pod>();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(controlled("a-0", "a")),
            watcher::Event::InitApply(controlled("b-0", "b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(controlled("a-1", "a")),
            watcher::Event::Apply(pod("stray", vec![owner("a", false)])),
        ] {
            w.apply_watcher_event(&event);
        }
        assert_eq!(cached(&cache, "a"), ["a-0", "a-1"]);
        assert_eq!(cached(&cache, "b"), ["b-0"]);
        assert_eq!(cache.store().state().len(), 4);
        let a0 = &cache.owned_by("a")[0];
        assert_eq!(a0.metadata.namespace.as_deref(), Some("ml"));
    }

    #[test]
    fn objects_the_cache_no_longer_holds_or_no_longer_owned_are_skipped() {
        let (cache, mut w) = cache::<Pod>();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-1", "a")));
        // The cache is ahead of the index (the moment between the two writes of one event):
        // a-0 is gone from the cache, a-1 has a new controller.
        w.store
            .apply_watcher_event(&watcher::Event::Delete(controlled("a-0", "a")));
        w.store
            .apply_watcher_event(&watcher::Event::Apply(controlled("a-1", "b")));
        assert_eq!(indexed(&cache.owners, "a"), ["a-0", "a-1"]);
        assert!(cached(&cache, "a").is_empty());
    }

    #[tokio::test]
    async fn the_reflector_feeds_cache_and_index_from_one_stream() {
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(controlled("a-0", "a"))),
            Ok(watcher::Event::Apply(controlled("a-1", "a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Delete(controlled("a-0", "a"))),
        ]);
        let (cache, w) = cache::<Pod>();
        let passed: Vec<_> = reflector(w, events).collect::<Vec<_>>().await;
        assert_eq!(passed.len(), 4, "every event and error is passed on");
        assert_eq!(cached(&cache, "a"), ["a-1"]);
        assert_eq!(indexed(&cache.owners, "a"), ["a-1"]);
    }
}
