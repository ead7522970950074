//! The owned pods and services of each job: a watch cache that finds a job's objects without
//! scanning, and keeps each object compact.
//!
//! A reconcile needs the objects its job controls. A cache that is a map by name would have to
//! be filtered whole on every reconcile, so that a reconcile's cost grew with the cluster, not
//! with its job. [`OwnedCache`] also maps the uid of each controller owner (the ownerReference
//! with `controller: true`; Kubernetes allows one per object) to the objects it controls, and a
//! reconcile reads only those.
//!
//! Each object is kept as its JSON text, not as a typed value. A typed `Pod` is mostly empty
//! `Option`s of large structs, and every string, list and map in it is an allocation of its
//! own: the typed pod and service caches were about 70 MiB of the operator's heap at 1,000
//! jobs, three to four times their JSON. A reconcile decodes only its own job's objects, a few
//! at a time, which costs about what cloning the typed objects out of the cache cost.
//!
//! Objects and index are one structure under one lock, written by one writer in the order of
//! the watch events, so a reader never sees an object under an owner it has left.
//!
//! A relist is applied in place, as client-go's informers apply one: each listed object
//! replaces its cached state as it arrives, marked with the listing's number, and when the
//! listing is complete the objects it did not mark (deleted while the watch was down) are
//! swept out and passed on as deletions, so their jobs wake too. kube-runtime's reflector
//! instead builds the relist aside and swaps it in: at 50,000 pods that is a second whole cache
//! beside the live one at the moment memory is most needed. In place, a reader during a relist
//! sees each object in its state from before the relist or its latest one, and a deleted object
//! until the sweep: states it could have read before the relist began. Jobs are woken by a
//! relist only after the sweep (see [`reflector`]).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

/// The cached objects, with their controller owners.
struct Entries<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    objects: HashMap<ObjectRef<K>, Stored>,
    by_owner: HashMap<String, HashSet<ObjectRef<K>>>,
    /// The number of the latest listing; every object written since it began carries it.
    listing: u32,
}

/// One cached object: its controller owner's uid, its JSON text (shared with readers decoding
/// it) and the number of the listing current when it was last written.
struct Stored {
    owner: Option<Box<str>>,
    json: Arc<[u8]>,
    listing: u32,
}

impl<K: Resource> Default for Entries<K>
where
    K::DynamicType: Eq + Hash,
{
    fn default() -> Self {
        Entries {
            objects: HashMap::new(),
            by_owner: HashMap::new(),
            listing: 0,
        }
    }
}

impl<K: Resource + Serialize> Entries<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Stores `obj` under its controller owner, out of any other owner's entry; an object
    /// without a controller owner is cached but under no owner.
    fn apply(&mut self, obj: &K) {
        let json = match serde_json::to_vec(obj) {
            Ok(json) => Arc::from(json),
            // Typed Kubernetes objects always serialise; should one not, the cache keeps
            // its previous state of the object rather than a half one.
            Err(error) => {
                tracing::error!(%error, "an object from the watch could not be cached");
                return;
            }
        };
        let key = ObjectRef::from_obj(obj);
        let owner: Option<Box<str>> = controller_uid(obj).map(Box::from);
        if let Some(owner) = &owner {
            self.by_owner
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
        }
        let stored = Stored {
            owner: owner.clone(),
            json,
            listing: self.listing,
        };
        if let Some(previous) = self.objects.insert(key.clone(), stored)
            && previous.owner != owner
        {
            self.leave(&key, previous.owner.as_deref());
        }
    }

    fn remove(&mut self, key: &ObjectRef<K>) {
        if let Some(previous) = self.objects.remove(key) {
            self.leave(key, previous.owner.as_deref());
        }
    }

    /// Begins a listing: objects written from now on are marked as listed by it.
    fn begin_listing(&mut self) {
        // Wrapping is harmless: only equality with the current listing is ever asked.
        self.listing = self.listing.wrapping_add(1);
    }

    /// Ends a listing: removes every object it did not list and returns their texts.
    fn sweep_unlisted(&mut self) -> Vec<Arc<[u8]>> {
        let listing = self.listing;
        let unlisted: Vec<ObjectRef<K>> = self
            .objects
            .iter()
            .filter(|(_, stored)| stored.listing != listing)
            .map(|(key, _)| key.clone())
            .collect();
        unlisted
            .iter()
            .filter_map(|key| {
                let stored = self.objects.remove(key)?;
                self.leave(key, stored.owner.as_deref());
                Some(stored.json)
            })
            .collect()
    }

    /// Takes `key` out of the entry of `owner`.
    fn leave(&mut self, key: &ObjectRef<K>, owner: Option<&str>) {
        let Some(owner) = owner else { return };
        if let Some(refs) = self.by_owner.get_mut(owner) {
            refs.remove(key);
            // Jobs come and go; an entry per job ever seen would grow without bound.
            if refs.is_empty() {
                self.by_owner.remove(owner);
            }
        }
    }

    /// The JSON texts of the objects whose controller owner has `uid`.
    fn owned_by(&self, uid: &str) -> Vec<Arc<[u8]>> {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|key| self.objects.get(key))
            .map(|stored| Arc::clone(&stored.json))
            .collect()
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

/// A watch cache of kind `K` with its index by controller owner. Cheap to clone: clones share
/// the cache, which its [`OwnedWriter`] keeps up to date.
pub struct OwnedCache<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    entries: Arc<RwLock<Entries<K>>>,
    listed: watch::Receiver<bool>,
}

impl<K: Resource> Clone for OwnedCache<K>
where
    K::DynamicType: Eq + Hash,
{
    fn clone(&self) -> Self {
        OwnedCache {
            entries: Arc::clone(&self.entries),
            listed: self.listed.clone(),
        }
    }
}

impl<K: Resource + Serialize + DeserializeOwned> OwnedCache<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// The cached objects whose controller owner has `uid`, in no particular order.
    pub fn owned_by(&self, uid: &str) -> Vec<K> {
        // Copied out under the lock, decoded after it: the watch is not held up by decoding.
        let texts = self.entries.read().expect("owned cache lock").owned_by(uid);
        texts.iter().filter_map(|json| decode(json)).collect()
    }

    /// How many objects the cache holds.
    pub fn len(&self) -> usize {
        self.entries.read().expect("owned cache lock").objects.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first listing is complete (at once if it already is).
    pub async fn wait_until_ready(&self) {
        let mut listed = self.listed.clone();
        // Fails only when the writer is gone, and then nothing will be listed.
        let _ = listed.wait_for(|listed| *listed).await;
    }
}

/// Writes an [`OwnedCache`].
pub struct OwnedWriter<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    live: Arc<RwLock<Entries<K>>>,
    listed: watch::Sender<bool>,
}

impl<K: Resource + Serialize + DeserializeOwned> OwnedWriter<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// Applies one watch event to the cache, a listing in place. Returns the objects the end of
    /// a listing swept out because it did not list them; empty for every other event.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<K>) -> Vec<K> {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => self.write().apply(obj),
            watcher::Event::Delete(obj) => self.write().remove(&ObjectRef::from_obj(obj)),
            watcher::Event::Init => self.write().begin_listing(),
            watcher::Event::InitDone => {
                let swept = self.write().sweep_unlisted();
                self.listed.send_replace(true);
                // Decoded after the lock is released: readers do not wait on it.
                return swept.iter().filter_map(|json| decode(json)).collect();
            }
        }
        Vec::new()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Entries<K>> {
        self.live.write().expect("owned cache lock")
    }
}

/// Decodes a cached text, which `apply` wrote from a typed object of the same kind.
fn decode<K: DeserializeOwned>(json: &[u8]) -> Option<K> {
    match serde_json::from_slice(json) {
        Ok(obj) => Some(obj),
        Err(error) => {
            tracing::error!(%error, "a cached object could not be decoded");
            None
        }
    }
}

/// An empty [`OwnedCache`] and its only writer.
pub fn cache<K: Resource>() -> (OwnedCache<K>, OwnedWriter<K>)
where
    K::DynamicType: Eq + Hash,
{
    let entries = Arc::new(RwLock::new(Entries::default()));
    let (listed_tx, listed) = watch::channel(false);
    let cache = OwnedCache {
        entries: Arc::clone(&entries),
        listed,
    };
    let writer = OwnedWriter {
        live: entries,
        listed: listed_tx,
    };
    (cache, writer)
}

/// kubectl's copy of the configuration it last applied, kept in an annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from an owned object what no reconcile reads before it is cached: the field managers a
/// real API server records on every write (often a large part of a pod or service) and kubectl's
/// copy of the last applied configuration. Passed to the watch's `modify`.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// kube-runtime's `reflector` for an [`OwnedCache`]: applies each event of `stream` to the
/// cache before passing it on.
///
/// A relist's objects are passed on only once it is complete and swept, as one touch (an
/// object holding only its name, namespace and owner references) per set of owners, followed
/// by a deletion for each object the sweep removed. Passed on as they were listed, they woke
/// their jobs before the cache was complete: at 10,000 jobs a pod watch that fell behind
/// relisted 50,000 pods, and hundreds of jobs whose pods had all completed stayed `Created` for
/// good. The deletions wake the jobs whose objects went while the watch was down, which a
/// relist alone never names.
pub fn reflector<K, W>(mut writer: OwnedWriter<K>, stream: W) -> impl Stream<Item = W::Item>
where
    K: Resource + Serialize + DeserializeOwned + Default,
    K::DynamicType: Eq + Hash + Clone + Default,
    W: Stream<Item = watcher::Result<watcher::Event<K>>>,
{
    let mut relisted: HashMap<(Option<String>, Vec<String>), K> = HashMap::new();
    stream.flat_map(move |item| {
        let passed: Vec<W::Item> = match item {
            Ok(event) => {
                let swept = writer.apply_watcher_event(&event);
                match event {
                    watcher::Event::Init => {
                        relisted.clear();
                        vec![Ok(watcher::Event::Init)]
                    }
                    watcher::Event::InitApply(obj) => {
                        remember_owners(&mut relisted, &obj);
                        Vec::new()
                    }
                    watcher::Event::InitDone => relisted
                        .drain()
                        .map(|(_, touch)| Ok(watcher::Event::Apply(touch)))
                        .chain(swept.into_iter().map(|obj| Ok(watcher::Event::Delete(obj))))
                        .chain([Ok(watcher::Event::InitDone)])
                        .collect(),
                    event => vec![Ok(event)],
                }
            }
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(passed)
    })
}

/// Keeps one touch for the owners of `obj` (none when it has no owner: it wakes nobody).
fn remember_owners<K: Resource + Default>(
    relisted: &mut HashMap<(Option<String>, Vec<String>), K>,
    obj: &K,
) {
    let meta = obj.meta();
    let Some(owners) = meta.owner_references.as_ref().filter(|o| !o.is_empty()) else {
        return;
    };
    let mut uids: Vec<String> = owners.iter().map(|o| o.uid.clone()).collect();
    uids.sort();
    relisted
        .entry((meta.namespace.clone(), uids))
        .or_insert_with(|| {
            let mut touch = K::default();
            let touched = touch.meta_mut();
            touched.name.clone_from(&meta.name);
            touched.namespace.clone_from(&meta.namespace);
            touched.owner_references = Some(owners.clone());
            touch
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_objects_lose_their_field_managers_and_last_applied_copy_only() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "w-0",
                "labels": {"team": "ml"},
                "annotations": {LAST_APPLIED: "{\"big\": true}", "sim.tfjob.dev/duration": "2s"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                    "name": "j", "uid": "u", "controller": true}]
            },
            "spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}
        }))
        .unwrap();
        let mut expected = pod.clone();
        expected.metadata.managed_fields = None;
        expected.metadata.annotations =
            Some([("sim.tfjob.dev/duration".to_owned(), "2s".to_owned())].into());
        trim(&mut pod);
        assert_eq!(pod, expected);
        // Nothing left to drop: no empty annotation map is left behind either.
        let mut applied: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "annotations": {LAST_APPLIED: "{}"}}
        }))
        .unwrap();
        trim(&mut applied);
        assert_eq!(applied.metadata.annotations, None);
    }
    use futures::{FutureExt, StreamExt};
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
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

    /// The names of the cached objects `uid` controls, decoded from the cache.
    fn cached(cache: &OwnedCache<Pod>, uid: &str) -> Vec<String> {
        let mut names: Vec<String> = cache
            .owned_by(uid)
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    }

    fn apply_all(w: &mut OwnedWriter<Pod>, events: Vec<watcher::Event<Pod>>) {
        for event in &events {
            w.apply_watcher_event(event);
        }
    }

    #[test]
    fn applied_objects_are_filed_under_their_controller_owner() {
        let (cache, mut w) = cache::<Pod>();
        apply_all(
            &mut w,
            vec![
                watcher::Event::Apply(controlled("a-0", "a")),
                watcher::Event::Apply(controlled("a-1", "a")),
                watcher::Event::Apply(controlled("b-0", "b")),
                // An update under the same owner keeps one entry.
                watcher::Event::Apply(controlled("a-0", "a")),
            ],
        );
        assert_eq!(cached(&cache, "a"), ["a-0", "a-1"]);
        assert_eq!(cached(&cache, "b"), ["b-0"]);
        assert!(cached(&cache, "c").is_empty());
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn an_object_whose_controller_changes_or_goes_leaves_its_old_entry() {
        let (cache, mut w) = cache::<Pod>();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "b")));
        assert!(cached(&cache, "a").is_empty());
        assert_eq!(cached(&cache, "b"), ["p"]);
        // Orphaned (the controller reference removed, another owner kept): cached, under no
        // owner.
        w.apply_watcher_event(&watcher::Event::Apply(pod("p", vec![owner("b", false)])));
        assert!(cached(&cache, "b").is_empty());
        assert!(cache.entries.read().unwrap().by_owner.is_empty());
        assert_eq!(cache.len(), 1);
        // Adopted again.
        w.apply_watcher_event(&watcher::Event::Apply(controlled("p", "a")));
        assert_eq!(cached(&cache, "a"), ["p"]);
    }

    #[test]
    fn deleted_objects_leave_the_cache_and_the_index() {
        let (cache, mut w) = cache::<Pod>();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-1", "a")));
        w.apply_watcher_event(&watcher::Event::Delete(controlled("a-0", "a")));
        assert_eq!(cached(&cache, "a"), ["a-1"]);
        // The entry goes by name, whatever owner the deleted object's last state names.
        w.apply_watcher_event(&watcher::Event::Delete(pod("a-1", vec![])));
        assert!(cached(&cache, "a").is_empty());
        let entries = cache.entries.read().unwrap();
        assert!(entries.by_owner.is_empty() && entries.objects.is_empty());
    }

    #[test]
    fn only_the_controller_reference_counts() {
        let (cache, mut w) = cache::<Pod>();
        w.apply_watcher_event(&watcher::Event::Apply(pod("x", vec![owner("a", false)])));
        w.apply_watcher_event(&watcher::Event::Apply(pod(
            "y",
            vec![owner("a", false), owner("b", true)],
        )));
        assert!(cached(&cache, "a").is_empty());
        assert_eq!(cached(&cache, "b"), ["y"]);
    }

    #[test]
    fn a_relist_is_applied_in_place_and_sweeps_what_it_did_not_list() {
        let (cache, mut w) = cache::<Pod>();
        for name in ["a-0", "a-1", "a-2"] {
            w.apply_watcher_event(&watcher::Event::Apply(controlled(name, "a")));
        }
        w.apply_watcher_event(&watcher::Event::Apply(controlled("b-0", "b")));
        // The watch was down while a-1 and b-0 were deleted, a-2 changed owner and c-0 came.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-0", "a")));
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-2", "c")));
        // Mid-listing, each object is in its state from before the relist or its latest one;
        // the deleted ones stay until the listing is complete. One copy of each, no second
        // cache.
        assert_eq!(cached(&cache, "a"), ["a-0", "a-1"]);
        assert_eq!(cached(&cache, "b"), ["b-0"]);
        assert_eq!(cached(&cache, "c"), ["a-2"]);
        assert_eq!(cache.len(), 4);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("c-0", "c")));
        let mut swept: Vec<String> = w
            .apply_watcher_event(&watcher::Event::InitDone)
            .into_iter()
            .map(|p| p.metadata.name.unwrap_or_default())
            .collect();
        swept.sort();
        assert_eq!(
            swept,
            ["a-1", "b-0"],
            "the unlisted objects come back whole"
        );
        assert_eq!(cached(&cache, "a"), ["a-0"]);
        assert!(cached(&cache, "b").is_empty());
        assert_eq!(cached(&cache, "c"), ["a-2", "c-0"]);
        assert_eq!(cache.len(), 3);
        assert!(!cache.entries.read().unwrap().by_owner.contains_key("b"));
        // Objects applied between listings are kept by the next listing only if it lists them.
        w.apply_watcher_event(&watcher::Event::Apply(controlled("d-0", "d")));
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("c-0", "c")));
        assert_eq!(w.apply_watcher_event(&watcher::Event::InitDone).len(), 3);
        assert!(cached(&cache, "a").is_empty());
        assert!(cached(&cache, "d").is_empty());
        assert_eq!(cached(&cache, "c"), ["c-0"]);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_listing_cut_short_leaves_nothing_behind_once_the_next_one_completes() {
        let (cache, mut w) = cache::<Pod>();
        w.apply_watcher_event(&watcher::Event::Apply(controlled("a-0", "a")));
        // A listing that errors out part-way, then starts again from the beginning.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("b-0", "b")));
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-0", "a")));
        let swept = w.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(swept.len(), 1);
        assert_eq!(cached(&cache, "a"), ["a-0"]);
        assert!(cached(&cache, "b").is_empty());
        // An empty listing empties the cache.
        w.apply_watcher_event(&watcher::Event::Init);
        assert_eq!(w.apply_watcher_event(&watcher::Event::InitDone).len(), 1);
        assert!(cache.is_empty());
        assert!(cache.entries.read().unwrap().by_owner.is_empty());
    }

    #[test]
    fn a_cached_object_reads_back_as_its_latest_state_exactly() {
        let (cache, mut w) = cache::<Pod>();
        let mut full = controlled("a-0", "a");
        full.metadata.labels = Some([("role".to_string(), "worker".to_string())].into());
        full.metadata.resource_version = Some("7".into());
        full.spec = Some(PodSpec {
            containers: vec![Container {
                name: "tensorflow".into(),
                image: Some("tf:2".into()),
                ..Container::default()
            }],
            restart_policy: Some("Never".into()),
            ..PodSpec::default()
        });
        w.apply_watcher_event(&watcher::Event::Apply(full.clone()));
        assert_eq!(cache.owned_by("a"), [full.clone()]);
        // A later state replaces it whole.
        full.metadata.resource_version = Some("8".into());
        full.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        });
        w.apply_watcher_event(&watcher::Event::Apply(full.clone()));
        assert_eq!(cache.owned_by("a"), [full]);
    }

    #[test]
    fn the_cache_is_ready_once_its_first_listing_is_complete() {
        let (cache, mut w) = cache::<Pod>();
        let reader = cache.clone();
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(controlled("a-0", "a")));
        assert!(reader.wait_until_ready().now_or_never().is_none());
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert!(reader.wait_until_ready().now_or_never().is_some());
        // Every clone sees it, and stays ready through later relists.
        w.apply_watcher_event(&watcher::Event::Init);
        assert!(cache.wait_until_ready().now_or_never().is_some());
    }

    #[tokio::test]
    async fn the_reflector_feeds_the_cache_from_its_stream() {
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
    }

    #[tokio::test]
    async fn a_relist_wakes_each_owner_once_and_only_after_the_cache_holds_it() {
        let (cache, mut w) = cache::<Pod>();
        // Deleted while the watch was down: the relist does not list it.
        w.apply_watcher_event(&watcher::Event::Apply(controlled("gone-0", "gone")));
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(controlled("a-0", "a"))),
            Ok(watcher::Event::InitApply(controlled("a-1", "a"))),
            Ok(watcher::Event::InitApply(pod("free", vec![]))),
            Ok(watcher::Event::InitApply(controlled("b-0", "b"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(controlled("b-1", "b"))),
        ]);
        let mut seen = Vec::new();
        let mut stream = std::pin::pin!(reflector(w, events));
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                watcher::Event::Apply(touch) => {
                    let owner = touch.metadata.owner_references.as_ref().unwrap()[0]
                        .uid
                        .clone();
                    // When a job is woken, the cache already shows it its relisted objects.
                    seen.push((owner.clone(), cached(&cache, &owner)));
                }
                // The swept object, whole, so that its owner wakes to find it gone.
                watcher::Event::Delete(gone) => {
                    let owner = gone.metadata.owner_references.as_ref().unwrap()[0]
                        .uid
                        .clone();
                    assert_eq!(gone.metadata.name.as_deref(), Some("gone-0"));
                    seen.push((owner.clone(), cached(&cache, &owner)));
                }
                watcher::Event::InitApply(_) => panic!("a relisted object passed before the sweep"),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                ("a".to_owned(), vec!["a-0".to_owned(), "a-1".to_owned()]),
                ("b".to_owned(), vec!["b-0".to_owned()]),
                ("b".to_owned(), vec!["b-0".to_owned(), "b-1".to_owned()]),
                ("gone".to_owned(), vec![]),
            ]
        );
    }
}
