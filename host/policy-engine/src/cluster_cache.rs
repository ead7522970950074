//! The cluster objects policies read, held in memory: one [`ResourceCache`] per resource, shared
//! by every policy that reads it, fed by one watch (the operator's) or by a suite's fixtures.
//!
//! Objects are trimmed to the field mask ([`crate::cluster_objects::trim`]) as they enter and
//! kept as JSON text, so an answer is a copy of text, not a re-encoding; selectors are matched
//! in memory on their labels, found in that text ([`crate::object_text`]), not copied. A cache holds at most its cap of objects:
//! past it, it drops everything and answers `unavailable` until a list fits again, so a cluster
//! bigger than the operator planned for costs a refusal, never the operator's memory.
//!
//! Nothing here does IO: the watch that feeds a cache calls [`ResourceCache::begin_list`],
//! [`ResourceCache::listed`], [`ResourceCache::end_list`], [`ResourceCache::apply`] and
//! [`ResourceCache::delete`] as its events arrive.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;
use tfjob_policy_logic::label_selector::LabelSelector;

use crate::cluster_objects;
use crate::cluster_reads::Resource;
use crate::object_text::{ObjectLabels, Span};

/// Objects one resource's cache holds unless configured otherwise.
pub const DEFAULT_OBJECT_CAP: usize = 20_000;

/// How current an answer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// False while the cache lists again after losing its watch: answers are what it held.
    pub synced: bool,
    /// The newest resourceVersion the cache has seen.
    pub resource_version: String,
}

/// Where a cache stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheState {
    /// Its first list has not completed: it answers nothing.
    Starting,
    /// Its list completed and its watch is current.
    Synced,
    /// It lists again after losing its watch; it answers from what it held, as not synced.
    Relisting,
    /// More objects exist than its cap: it holds none and answers nothing until a list fits.
    OverCap { objects: usize },
}

/// Why a cache cannot answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unanswerable {
    #[error("the operator's cache of {0} has not synced yet")]
    NotSynced(Resource),
    #[error(
        "the operator's cache of {resource} is over its cap of {cap} objects ({objects} seen); \
         it answers again once a list fits"
    )]
    OverCap {
        resource: Resource,
        cap: usize,
        objects: usize,
    },
    #[error("no cache of {0} is running: no active policy declared it")]
    NotRunning(Resource),
}

#[derive(Debug)]
struct Entry {
    /// Spans of `json`, most often: the labels are not kept twice.
    labels: ObjectLabels,
    /// Where `json` says the object's resourceVersion.
    version: Option<Span>,
    json: Arc<str>,
}

/// An object a cache holds: its trimmed JSON and its own resourceVersion (empty if it had
/// none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    pub json: Arc<str>,
    pub resource_version: String,
}

/// Key of an object: namespace (empty when cluster-scoped) and name.
type Key = (String, String);

/// The trimmed objects of one resource.
#[derive(Debug)]
pub struct ResourceCache {
    resource: Resource,
    cap: usize,
    state: CacheState,
    objects: BTreeMap<Key, Entry>,
    /// Objects of a list in progress; they replace `objects` when it ends.
    incoming: Option<BTreeMap<Key, Entry>>,
    resource_version: String,
    bytes: usize,
    /// How many times it went over its cap.
    overflows: u64,
}

impl ResourceCache {
    /// An empty cache of `resource` holding at most `cap` objects.
    pub fn new(resource: Resource, cap: usize) -> ResourceCache {
        ResourceCache {
            resource,
            cap,
            state: CacheState::Starting,
            objects: BTreeMap::new(),
            incoming: None,
            resource_version: String::new(),
            bytes: 0,
            overflows: 0,
        }
    }

    /// A synced cache of `objects`, as a suite's fixtures or a benchmark build it.
    pub fn of(resource: Resource, cap: usize, objects: impl IntoIterator<Item = Value>) -> Self {
        let mut cache = ResourceCache::new(resource, cap);
        cache.begin_list();
        for object in objects {
            cache.listed(object);
        }
        cache.end_list();
        cache
    }

    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// The most objects it holds.
    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn state(&self) -> &CacheState {
        &self.state
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The JSON text held, in bytes (keys and label spans come on top).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many times it went over its cap and dropped everything.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// A list starts (the first, or again after the watch was lost).
    pub fn begin_list(&mut self) {
        if self.state == CacheState::Synced {
            self.state = CacheState::Relisting;
        }
        self.incoming = Some(BTreeMap::new());
    }

    /// One object of the list in progress.
    pub fn listed(&mut self, object: Value) {
        let Some(incoming) = self.incoming.as_mut() else {
            return;
        };
        if let Some((key, entry)) = entry(self.resource, object, &mut self.resource_version) {
            incoming.insert(key, entry);
        }
        if incoming.len() > self.cap {
            self.overflow(incoming_len(&self.incoming));
        }
    }

    /// The list in progress ended: its objects replace what the cache held.
    pub fn end_list(&mut self) {
        let Some(incoming) = self.incoming.take() else {
            return;
        };
        self.bytes = incoming.values().map(|e| e.json.len()).sum();
        self.objects = incoming;
        self.state = CacheState::Synced;
    }

    /// An object was added or changed.
    pub fn apply(&mut self, object: Value) {
        if matches!(self.state, CacheState::OverCap { .. }) {
            return;
        }
        let Some((key, entry)) = entry(self.resource, object, &mut self.resource_version) else {
            return;
        };
        self.bytes += entry.json.len();
        if let Some(old) = self.objects.insert(key, entry) {
            self.bytes -= old.json.len();
        }
        if self.objects.len() > self.cap {
            let seen = self.objects.len();
            self.overflow(seen);
        }
    }

    /// An object was deleted (`object` as the watch last saw it).
    pub fn delete(&mut self, object: &Value) {
        let key = key(object);
        if let Some(rv) = resource_version(object) {
            self.resource_version = rv.to_owned();
        }
        if let Some(old) = self.objects.remove(&key) {
            self.bytes -= old.json.len();
        }
    }

    /// Drops every object: more exist than the cap allows.
    fn overflow(&mut self, seen: usize) {
        tracing::warn!(
            resource = %self.resource,
            cap = self.cap,
            seen,
            "a policy read cache went over its object cap; reads of it answer unavailable"
        );
        self.objects = BTreeMap::new();
        self.incoming = None;
        self.bytes = 0;
        self.overflows += 1;
        self.state = CacheState::OverCap { objects: seen };
    }

    fn freshness(&self) -> Result<Freshness, Unanswerable> {
        match self.state {
            CacheState::Starting => Err(Unanswerable::NotSynced(self.resource)),
            CacheState::OverCap { objects } => Err(Unanswerable::OverCap {
                resource: self.resource,
                cap: self.cap,
                objects,
            }),
            CacheState::Synced | CacheState::Relisting => Ok(Freshness {
                synced: self.state == CacheState::Synced,
                resource_version: self.resource_version.clone(),
            }),
        }
    }

    /// The object `name` of `namespace` (empty for a cluster-scoped resource).
    pub fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(Option<Cached>, Freshness), Unanswerable> {
        let freshness = self.freshness()?;
        let found = self
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|e| Cached {
                json: Arc::clone(&e.json),
                resource_version: e
                    .version
                    .map_or_else(String::new, |v| v.read(&e.json).to_owned()),
            });
        Ok((found, freshness))
    }

    /// The objects of `namespace` (every namespace when `None`) whose labels match `selector`
    /// and `keep` accepts (by namespace and name), in namespace then name order, at most
    /// `most` of them, and whether more matched.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
        keep: impl Fn(&str, &str) -> bool,
        most: usize,
    ) -> Result<(Vec<Arc<str>>, bool, Freshness), Unanswerable> {
        let freshness = self.freshness()?;
        let in_scope: Box<dyn Iterator<Item = (&Key, &Entry)>> = match namespace {
            Some(ns) => Box::new(
                self.objects
                    .range((ns.to_owned(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns),
            ),
            None => Box::new(self.objects.iter()),
        };
        let mut matched = in_scope
            .filter(|((ns, name), e)| {
                keep(ns, name) && selector.matches(|k| e.labels.get(&e.json, k))
            })
            .map(|(_, e)| Arc::clone(&e.json));
        let items: Vec<Arc<str>> = matched.by_ref().take(most).collect();
        let more = matched.next().is_some();
        Ok((items, more, freshness))
    }
}

fn incoming_len(incoming: &Option<BTreeMap<Key, Entry>>) -> usize {
    incoming.as_ref().map_or(0, BTreeMap::len)
}

/// An object's namespace (empty when cluster-scoped) and name, empty when absent.
pub fn key(object: &Value) -> (String, String) {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (text("/metadata/namespace"), text("/metadata/name"))
}

fn resource_version(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

/// The cache entry of `object`, trimmed; none for an object without a name.
fn entry(resource: Resource, mut object: Value, newest: &mut String) -> Option<(Key, Entry)> {
    let key = key(&object);
    if key.1.is_empty() {
        return None;
    }
    if let Some(rv) = resource_version(&object) {
        newest.clear();
        newest.push_str(rv);
    }
    cluster_objects::trim(resource, &mut object);
    let labels = tfjob_policy_logic::label_selector::labels(&object);
    let json: Arc<str> = Arc::from(object.to_string());
    let version =
        resource_version(&object).and_then(|rv| Span::of_field(&json, "resourceVersion", rv));
    Some((
        key,
        Entry {
            labels: ObjectLabels::index(&json, labels),
            version,
            json,
        },
    ))
}

/// Every resource's cache: what the host reads from during calls, and what the watches feed.
#[derive(Debug, Default)]
pub struct ClusterCache {
    resources: RwLock<BTreeMap<Resource, Arc<RwLock<ResourceCache>>>>,
}

impl ClusterCache {
    pub fn new() -> ClusterCache {
        ClusterCache::default()
    }

    /// A cache of every resource in `caches`, e.g. a suite's fixtures.
    pub fn of(caches: impl IntoIterator<Item = ResourceCache>) -> ClusterCache {
        let cache = ClusterCache::new();
        for c in caches {
            cache.insert(c);
        }
        cache
    }

    /// Serves `cache` for its resource, replacing any other.
    pub fn insert(&self, cache: ResourceCache) -> Arc<RwLock<ResourceCache>> {
        let shared = Arc::new(RwLock::new(cache));
        let resource = read(&shared).resource;
        write_map(&self.resources).insert(resource, Arc::clone(&shared));
        shared
    }

    /// Stops serving `resource`: no active policy reads it any more.
    pub fn remove(&self, resource: Resource) {
        write_map(&self.resources).remove(&resource);
    }

    /// The resources served.
    pub fn resources(&self) -> Vec<Resource> {
        read_map(&self.resources).keys().copied().collect()
    }

    /// The cache of `resource`, if one runs.
    pub fn resource(&self, resource: Resource) -> Result<Arc<RwLock<ResourceCache>>, Unanswerable> {
        read_map(&self.resources)
            .get(&resource)
            .cloned()
            .ok_or(Unanswerable::NotRunning(resource))
    }
}

/// Reads a cache. A lock poisoned by a panicking writer still holds a consistent map (writers
/// only insert and remove whole entries), so its data is used.
pub fn read(cache: &RwLock<ResourceCache>) -> std::sync::RwLockReadGuard<'_, ResourceCache> {
    cache.read().unwrap_or_else(|e| e.into_inner())
}

/// Writes a cache (see [`read`] on poisoning).
pub fn write(cache: &RwLock<ResourceCache>) -> std::sync::RwLockWriteGuard<'_, ResourceCache> {
    cache.write().unwrap_or_else(|e| e.into_inner())
}

type Caches = BTreeMap<Resource, Arc<RwLock<ResourceCache>>>;

fn read_map(map: &RwLock<Caches>) -> std::sync::RwLockReadGuard<'_, Caches> {
    map.read().unwrap_or_else(|e| e.into_inner())
}

fn write_map(map: &RwLock<Caches>) -> std::sync::RwLockWriteGuard<'_, Caches> {
    map.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, pool: &str, rv: u32) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"pool": pool}, "resourceVersion": rv.to_string(),
                         "managedFields": [{"manager": "kubelet"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": [{"names": ["x"]}]}
        })
    }

    fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    #[test]
    fn nothing_is_answered_before_the_first_list_ends() {
        let mut cache = ResourceCache::new(Resource::Nodes, 10);
        assert_eq!(
            cache.get("", "a").unwrap_err(),
            Unanswerable::NotSynced(Resource::Nodes)
        );
        cache.begin_list();
        cache.listed(node("a", "gpu", 5));
        assert!(
            cache.get("", "a").is_err(),
            "a list in progress is not an answer"
        );
        cache.end_list();
        let (found, freshness) = cache.get("", "a").unwrap();
        assert_eq!(
            freshness,
            Freshness {
                synced: true,
                resource_version: "5".into()
            }
        );
        let found = found.unwrap();
        assert_eq!(found.resource_version, "5", "the object's own version");
        let found: Value = serde_json::from_str(&found.json).unwrap();
        assert!(
            found.pointer("/metadata/managedFields").is_none(),
            "trimmed"
        );
        assert!(found.pointer("/status/images").is_none(), "trimmed");
        assert_eq!(found["status"]["allocatable"]["nvidia.com/gpu"], "8");
    }

    #[test]
    fn a_relist_answers_what_it_held_as_not_synced_then_replaces_it() {
        let mut cache = ResourceCache::of(Resource::Nodes, 10, [node("a", "gpu", 1)]);
        cache.begin_list();
        cache.listed(node("b", "cpu", 7));
        let (found, freshness) = cache.get("", "a").unwrap();
        assert!(found.is_some() && !freshness.synced);
        cache.end_list();
        assert!(
            cache.get("", "a").unwrap().0.is_none(),
            "gone after the list"
        );
        assert!(cache.get("", "b").unwrap().1.synced);
    }

    #[test]
    fn watch_events_change_and_delete_objects_and_advance_the_version() {
        let mut cache = ResourceCache::of(Resource::Nodes, 10, [node("a", "gpu", 1)]);
        let before = cache.bytes();
        cache.apply(node("a", "cpu-and-more", 2));
        assert!(
            cache.bytes() > before,
            "the changed object replaced the old"
        );
        let (items, _, _) = cache
            .list(
                None,
                &LabelSelector::parse("pool=gpu").unwrap(),
                |_, _| true,
                10,
            )
            .unwrap();
        assert!(items.is_empty(), "labels follow the change");
        cache.delete(&node("a", "cpu-and-more", 3));
        assert!(cache.get("", "a").unwrap().0.is_none());
        assert_eq!(cache.get("", "a").unwrap().1.resource_version, "3");
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    #[test]
    fn lists_match_selectors_in_memory_in_order_and_say_when_more_matched() {
        let nodes =
            (0..5).map(|i| node(&format!("n{i}"), if i % 2 == 0 { "gpu" } else { "cpu" }, i));
        let cache = ResourceCache::of(Resource::Nodes, 10, nodes);
        let gpu = LabelSelector::parse("pool=gpu").unwrap();
        let (items, more, _) = cache.list(None, &gpu, |_, _| true, 10).unwrap();
        let names: Vec<String> = items
            .iter()
            .map(|j| {
                serde_json::from_str::<Value>(j).unwrap()["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, ["n0", "n2", "n4"]);
        assert!(!more);
        let (items, more, _) = cache.list(None, &gpu, |_, _| true, 2).unwrap();
        assert_eq!((items.len(), more), (2, true));
        let (items, _, _) = cache
            .list(None, &everything(), |_, name| name == "n3", 10)
            .unwrap();
        assert_eq!(items.len(), 1);
    }

    #[test]
    fn namespaced_lists_stay_in_their_namespace() {
        let cm = |ns: &str, name: &str| json!({"metadata": {"namespace": ns, "name": name}});
        let cache = ResourceCache::of(
            Resource::ConfigMaps,
            10,
            [
                cm("a", "x"),
                cm("team", "x"),
                cm("team", "y"),
                cm("teams", "z"),
            ],
        );
        let (items, _, _) = cache
            .list(Some("team"), &everything(), |_, _| true, 10)
            .unwrap();
        assert_eq!(items.len(), 2);
        assert!(cache.get("team", "y").unwrap().0.is_some());
        assert!(cache.get("a", "y").unwrap().0.is_none());
    }

    #[test]
    fn past_its_cap_a_cache_holds_nothing_and_answers_unavailable_until_a_list_fits() {
        let mut cache = ResourceCache::of(
            Resource::Nodes,
            3,
            (0..3).map(|i| node(&format!("n{i}"), "gpu", i)),
        );
        cache.apply(node("n3", "gpu", 9));
        assert_eq!(cache.state(), &CacheState::OverCap { objects: 4 });
        assert_eq!(cache.overflows(), 1);
        assert_eq!((cache.len(), cache.bytes()), (0, 0), "memory given back");
        let err = cache.get("", "n0").unwrap_err().to_string();
        assert!(err.contains("over its cap of 3 objects (4 seen)"), "{err}");
        cache.apply(node("n4", "gpu", 10));
        assert_eq!(cache.len(), 0, "nothing is kept while over the cap");
        // A list that is itself too long stops as soon as it passes the cap.
        cache.begin_list();
        for i in 0..10 {
            cache.listed(node(&format!("m{i}"), "gpu", i));
        }
        cache.end_list();
        assert!(matches!(cache.state(), CacheState::OverCap { objects: 4 }));
        // One that fits brings it back.
        cache.begin_list();
        cache.listed(node("m0", "gpu", 20));
        cache.end_list();
        assert_eq!(cache.state(), &CacheState::Synced);
        assert!(cache.get("", "m0").unwrap().0.is_some());
    }

    #[test]
    fn objects_without_a_name_are_not_kept() {
        let cache = ResourceCache::of(
            Resource::Nodes,
            10,
            [json!({"metadata": {}}), json!("text")],
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn caches_are_served_per_resource_and_stopped() {
        let all = ClusterCache::of([ResourceCache::of(
            Resource::Nodes,
            10,
            [node("a", "gpu", 1)],
        )]);
        assert!(all.resource(Resource::Nodes).is_ok());
        assert_eq!(
            all.resource(Resource::Namespaces).unwrap_err(),
            Unanswerable::NotRunning(Resource::Namespaces)
        );
        all.remove(Resource::Nodes);
        assert!(all.resources().is_empty());
    }
}
