//! The object store behind the embedded API server: every object as JSON, one global
//! resourceVersion counter, a bounded history of changes per resource type for watches (as the
//! API server's watch cache keeps one per resource, so one busy type never pushes another's
//! watchers out), and the server-side rules
//! clients rely on: uid and creationTimestamp on create, `AlreadyExists`, optimistic concurrency
//! (`Conflict` on a stale resourceVersion), spec/status isolation with a status subresource,
//! `metadata.generation` bumped on spec changes, finalizers and deletionTimestamp, and
//! ownerReference garbage collection with background, foreground and orphan propagation (done
//! synchronously under the store's lock, where a real cluster's garbage collector works
//! asynchronously; watchers see the same sequence of events).
//!
//! Objects are stored as `Arc<Value>` and never changed in place: a write stores a new value,
//! and a get, a list, the history and every watcher share the stored one instead of copying it
//! (at thousands of pods, deep copies of JSON maps were most of the simulator's time). Owner
//! and uid lookups (garbage collection, foreground deletion) go through indexes kept beside the
//! objects, not a scan of every object.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::admission::cel::SchemaRules;
use crate::admission::defaults;
use crate::error::{ApiError, StatusCause};
use crate::storage::allocations::Allocations;
use crate::storage::apply_conflicts;

/// A served resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Whether `status` is a subresource (and ignored by updates of the main resource).
    pub status: bool,
    /// `additionalPrinterColumns` of a CRD, for `kubectl get` tables.
    pub printer_columns: Vec<Value>,
    /// The CRD's OpenAPI schema, if any.
    pub schema: Option<Value>,
}

impl ResourceType {
    /// A resource type of the core or a named group with no printer columns or schema.
    pub fn new(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status: bool,
    ) -> ResourceType {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            namespaced,
            status,
            printer_columns: Vec::new(),
            schema: None,
        }
    }

    /// The group and plural, as defaulting reads them.
    pub fn kind_of(&self) -> defaults::Kind<'_> {
        defaults::Kind {
            group: &self.group,
            plural: &self.plural,
        }
    }

    /// Whether the type is one of the built-in kinds (not served for a CRD), whose Go types
    /// give strategic merge patches their merge keys.
    pub fn is_builtin(&self) -> bool {
        builtin_types()
            .iter()
            .any(|b| b.group == self.group && b.plural == self.plural)
    }

    /// The type with a short name, as kubectl accepts it (`cm` for configmaps).
    pub fn short(mut self, name: &str) -> ResourceType {
        self.short_names.push(name.to_owned());
        self
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store's key for the type: `group/plural`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    /// `Kind.group` (`Kind` in the core group), as error messages name the type.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// The built-in resource types.
pub fn builtin_types() -> Vec<ResourceType> {
    vec![
        ResourceType::new("", "v1", "Namespace", "namespaces", false, true).short("ns"),
        ResourceType::new("", "v1", "Node", "nodes", false, true).short("no"),
        ResourceType::new("", "v1", "Pod", "pods", true, true).short("po"),
        ResourceType::new("", "v1", "Service", "services", true, true).short("svc"),
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true, false).short("cm"),
        ResourceType::new("", "v1", "Secret", "secrets", true, false),
        ResourceType::new("", "v1", "ServiceAccount", "serviceaccounts", true, false).short("sa"),
        ResourceType::new("", "v1", "Event", "events", true, false).short("ev"),
        ResourceType::new("events.k8s.io", "v1", "Event", "events", true, false).short("ev"),
        ResourceType::new("coordination.k8s.io", "v1", "Lease", "leases", true, false),
        // What an install (`kubectl apply -k deploy/...`) creates besides the operator's own
        // kinds: the Deployment, its disruption budget and the RBAC objects.
        ResourceType::new("apps", "v1", "Deployment", "deployments", true, true).short("deploy"),
        ResourceType::new(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
        )
        .short("pdb"),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            false,
        ),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            false,
        ),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            false,
        ),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            false,
        ),
        // Read by a gang-scheduling operator to order a computed PodGroup minResources.
        ResourceType::new(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            false,
            false,
        )
        .short("pc"),
        ResourceType::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        ),
    ]
}

/// Kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as a watch reports it.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub rv: u64,
    /// `group/plural` of the object.
    pub resource: String,
    pub namespace: String,
    pub type_: EventType,
    pub object: Arc<Value>,
    /// The event as a JSON watch line, encoded by the first watcher that sends it and shared
    /// by the others, as the API server's watch cache serialises an event once.
    line: Arc<OnceLock<Bytes>>,
}

impl WatchEvent {
    pub fn new(
        rv: u64,
        resource: String,
        namespace: String,
        type_: EventType,
        object: Arc<Value>,
    ) -> WatchEvent {
        WatchEvent {
            rv,
            resource,
            namespace,
            type_,
            object,
            line: Arc::default(),
        }
    }

    /// `{"type":...,"object":...}` and a newline, as a JSON watch stream sends the event.
    pub fn json_line(&self) -> Bytes {
        self.line
            .get_or_init(|| {
                let mut line = Vec::with_capacity(256);
                line.extend_from_slice(b"{\"type\":\"");
                line.extend_from_slice(self.type_.as_str().as_bytes());
                line.extend_from_slice(b"\",\"object\":");
                // Writing a `Value` into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut line, &*self.object);
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            })
            .clone()
    }
}

/// Admission check of a resource type: `Err(message)` rejects a create or update as `Invalid`.
pub type Validator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// A mutating admission webhook of a resource type, as a controller installs one on a real
/// cluster (Kueue's job defaulting and validation, for instance). It runs on every create (`old`
/// is `None`) and whole-object update (`old` is the stored object) after the defaults and
/// before the schema's rules and the validator, so what it sets is validated like what the
/// client sent. It may change the object, or refuse the write with the failing fields, which the
/// store answers as `Invalid` (422). It runs under the store's lock: it must not call the store.
pub type Webhook =
    Arc<dyn Fn(&mut Value, Option<&Value>) -> Result<(), Vec<StatusCause>> + Send + Sync>;

/// How a patch is applied.
#[derive(Clone, Debug)]
pub enum Patch {
    /// JSON merge patch (RFC 7386).
    Merge(Value),
    /// Strategic merge patch of a built-in kind ([`crate::storage::strategic_merge`]).
    Strategic(Value),
    /// JSON patch (RFC 6902).
    Json(json_patch::Patch),
    /// Server-side apply: merge semantics, the field manager recorded, creates when missing;
    /// a field another applier owns is refused with a conflict unless `force` takes it over.
    Apply {
        body: Value,
        manager: String,
        force: bool,
    },
}

/// What happens to an object's dependents (the objects whose ownerReferences name its uid)
/// when it is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The owner goes at once; its dependents are garbage-collected after it.
    #[default]
    Background,
    /// The owner stays, with `deletionTimestamp` and the `foregroundDeletion` finalizer, until
    /// its dependents that block owner deletion are gone.
    Foreground,
    /// The dependents lose their reference to the owner and stay.
    Orphan,
}

impl std::str::FromStr for Propagation {
    type Err = ApiError;

    fn from_str(s: &str) -> Result<Propagation, ApiError> {
        match s {
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            "Orphan" => Ok(Propagation::Orphan),
            other => Err(ApiError::invalid(format!(
                "DeleteOptions.propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))),
        }
    }
}

/// Delete options.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Propagation,
    /// `dryRun=All`: answer with what the deletion would leave, change nothing.
    pub dry_run: bool,
}

/// Whether a write is stored or only answered (`dryRun=All`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Commit {
    #[default]
    Store,
    /// Everything a write does up to storing: defaults, admission, conflicts; then the answer.
    DryRun,
}

/// The part of an object an update writes: the whole object (its status kept as stored, for
/// types with a status subresource), or only its status (the `status` subresource).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Whole,
    Status,
}

/// Whether an update must name the stored resourceVersion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Precondition {
    /// Refuse a body whose resourceVersion is set and not the stored one (`PUT`, and patches
    /// that carry one).
    ResourceVersion,
    /// Apply to whatever is stored (patches without a resourceVersion).
    None,
}

/// How an update is checked and committed.
#[derive(Clone, Copy, Debug)]
struct Check {
    precondition: Precondition,
    commit: Commit,
}

/// What a deletion of `current` would answer, without deleting: the object marked for
/// deletion when finalizers (or a foreground deletion) hold it, else the object as it was.
fn would_delete(current: Arc<Value>, propagation: Propagation) -> Arc<Value> {
    if current.pointer("/metadata/deletionTimestamp").is_some() {
        return current;
    }
    let foreground = propagation == Propagation::Foreground;
    if !foreground && !has_finalizers(&current) {
        return current;
    }
    let mut marked = Arc::unwrap_or_clone(current);
    let m = meta_mut(&mut marked);
    m.insert("deletionTimestamp".into(), json!(now()));
    if foreground {
        let list = m.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut()
            && !list.iter().any(|x| x == FOREGROUND_FINALIZER)
        {
            list.push(json!(FOREGROUND_FINALIZER));
        }
    }
    Arc::new(marked)
}

/// The finalizer that holds an owner deleted in the foreground until its dependents are gone.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The store's key of the core services type.
const SERVICES: &str = "/services";

/// Changes of one resource type kept for watches that resume from an older resourceVersion.
const HISTORY: usize = 50_000;

/// Changes of one resource type a watcher may fall behind by before it has to catch up from the
/// history (and then lists again only if the history has moved past it).
const WATCH_BUFFER: usize = 16_384;

/// The changes of one resource type: what its watches replay and where new ones are sent.
struct TypeChanges {
    history: VecDeque<WatchEvent>,
    /// The oldest resourceVersion a watch of this type may resume from.
    compacted: u64,
    /// Made at the type's first watch: a type nobody watches pays for no channel.
    tx: Option<broadcast::Sender<WatchEvent>>,
}

/// Where an object is stored. Ordered by type first, so one type's objects are one range.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    /// [`ResourceType::key`].
    resource: String,
    /// Empty for cluster-scoped objects.
    namespace: String,
    name: String,
}

struct Inner {
    rv: u64,
    types: BTreeMap<String, ResourceType>,
    /// Only [`Inner::put`] and [`Inner::take`] change it, so the indexes below stay exact.
    objects: BTreeMap<Key, Arc<Value>>,
    /// Where the object with a uid is stored. Both indexes are B-trees, not hash maps: at about
    /// 115,000 objects (pods, services, jobs and events of a 10,000-job run), a hash map's
    /// doubling rehashed every uid in one insert, under the store's lock, and stalled every
    /// request for up to 300 ms; a B-tree grows a node at a time.
    by_uid: BTreeMap<String, Key>,
    /// The objects whose ownerReferences name a uid (the owner may be gone already).
    dependents: BTreeMap<String, BTreeSet<Key>>,
    /// Each resource type's changes, by [`ResourceType::key`].
    changes: HashMap<String, TypeChanges>,
    /// The oldest resourceVersion any watch may resume from (raised by a restore, whose
    /// objects come with no history).
    compacted: u64,
    validators: HashMap<String, Validator>,
    /// The webhooks of each type, by name, run in the order they were added.
    webhooks: HashMap<String, Vec<(String, Webhook)>>,
    /// The compiled CEL rules and bounds of each CRD-served type's schema.
    admission: HashMap<String, Arc<SchemaRules>>,
    /// The cluster IPs and node ports the stored services hold.
    allocations: Allocations,
    /// Where every change is also written to be durable (`up --state`), in order.
    journal: Option<Arc<dyn Journal>>,
}

impl Inner {
    /// Stores `obj` under `key`, replacing what was there, and indexes it.
    fn put(&mut self, key: Key, obj: Arc<Value>) {
        self.unindex(&key);
        if key.resource == SERVICES {
            self.allocations.hold(&obj);
        }
        if let Some(uid) = meta(&obj, "uid") {
            self.by_uid.insert(uid, key.clone());
        }
        for owner in owner_uids(&obj) {
            self.dependents
                .entry(owner)
                .or_default()
                .insert(key.clone());
        }
        self.objects.insert(key, obj);
    }

    /// Removes the object under `key`, with its index entries.
    fn take(&mut self, key: &Key) -> Option<Arc<Value>> {
        self.unindex(key);
        self.objects.remove(key)
    }

    fn unindex(&mut self, key: &Key) {
        let Some(old) = self.objects.get(key) else {
            return;
        };
        if key.resource == SERVICES {
            self.allocations.release(old);
        }
        if let Some(uid) = meta(old, "uid")
            && self.by_uid.get(&uid) == Some(key)
        {
            self.by_uid.remove(&uid);
        }
        for owner in owner_uids(old) {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }
}

/// Where the store writes every change to keep it ([`crate::storage::durable::Durable`]).
pub trait Journal: Send + Sync {
    /// Takes a change, in resourceVersion order: the store calls it under its lock.
    fn append(&self, event: WatchEvent);
    /// Waits until every change taken so far is durable, for at most `timeout`.
    fn settle(
        &self,
        timeout: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// The object store. Every mutation happens under one lock and is broadcast while the lock is
/// held, so watchers see changes in resourceVersion order with no gaps.
pub struct Store {
    inner: Mutex<Inner>,
    /// Every change of every type, for the controllers here that follow several types and only
    /// need to know that something changed ([`Store::subscribe_all`]).
    all: broadcast::Sender<WatchEvent>,
    /// Container logs, written by the simulated kubelet and read by `pods/log`; kept here
    /// because both hold the store.
    logs: crate::kubelet::logs::PodLogs,
    /// How many times the simulated kubelet listed every pod (its start, and each time a watch
    /// fell behind its type's history): what a scale run counts as the kubelet's relists.
    kubelet_lists: std::sync::atomic::AtomicU64,
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

fn meta(obj: &Value, field: &str) -> Option<String> {
    obj.get("metadata")?.get(field)?.as_str().map(str::to_owned)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

/// Everything but metadata and status: a change here bumps `metadata.generation`.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

impl Store {
    /// A store serving the built-in types.
    pub fn new() -> Arc<Store> {
        let (all, _) = broadcast::channel(WATCH_BUFFER);
        let store = Store {
            inner: Mutex::new(Inner {
                rv: 1,
                types: BTreeMap::new(),
                objects: BTreeMap::new(),
                by_uid: BTreeMap::new(),
                dependents: BTreeMap::new(),
                changes: HashMap::new(),
                compacted: 1,
                validators: HashMap::new(),
                webhooks: HashMap::new(),
                admission: HashMap::new(),
                allocations: Allocations::default(),
                journal: None,
            }),
            all,
            logs: crate::kubelet::logs::PodLogs::new(),
            kubelet_lists: std::sync::atomic::AtomicU64::new(0),
        };
        for t in builtin_types() {
            store.register(t);
        }
        // The RBAC kinds are read by the authorizer: refuse what it could not read.
        for (plural, kind) in [
            ("roles", "Role"),
            ("clusterroles", "ClusterRole"),
            ("rolebindings", "RoleBinding"),
            ("clusterrolebindings", "ClusterRoleBinding"),
        ] {
            store.set_validator(
                "rbac.authorization.k8s.io",
                plural,
                Arc::new(move |obj| crate::auth::rbac::validate(kind, obj)),
            );
        }
        Arc::new(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Serves a resource type (as applying a CRD does), with the admission rules of its schema
    /// compiled once here.
    pub fn register(&self, t: ResourceType) {
        let rules = t.schema.as_ref().and_then(|schema| {
            SchemaRules::compile(schema)
                .inspect_err(|e| {
                    // Applying a CRD whose rules do not compile is refused (see `validate`);
                    // only a state file written before that check could bring one here.
                    tracing::warn!(resource = %t.key(), error = %e, "serving without admission rules");
                })
                .ok()
        });
        let mut inner = self.lock();
        match rules {
            Some(r) => inner.admission.insert(t.key(), Arc::new(r)),
            None => inner.admission.remove(&t.key()),
        };
        inner.types.insert(t.key(), t);
    }

    /// Installs the admission check of a resource type.
    pub fn set_validator(&self, group: &str, plural: &str, v: Validator) {
        self.lock()
            .validators
            .insert(format!("{group}/{plural}"), v);
    }

    /// Installs (or, under the same name, replaces) a webhook of the type `group`/`plural`; the
    /// type need not be served yet.
    pub fn add_webhook(&self, group: &str, plural: &str, name: &str, hook: Webhook) {
        let mut inner = self.lock();
        let hooks = inner
            .webhooks
            .entry(format!("{group}/{plural}"))
            .or_default();
        match hooks.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = hook,
            None => hooks.push((name.to_owned(), hook)),
        }
    }

    /// Runs the webhooks of `t` on `obj`: the first refusal wins.
    fn run_webhooks(
        inner: &Inner,
        t: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for (_, hook) in inner.webhooks.get(&t.key()).into_iter().flatten() {
            hook(obj, old).map_err(|causes| {
                let name = meta(obj, "name").unwrap_or_default();
                ApiError::invalid_fields(&t.qualified_kind(), &t.group, &t.kind, &name, causes)
            })?;
        }
        Ok(())
    }

    /// The served type of `group`/`plural`.
    pub fn resource(&self, group: &str, plural: &str) -> Option<ResourceType> {
        self.lock().types.get(&format!("{group}/{plural}")).cloned()
    }

    /// Every served type.
    pub fn types(&self) -> Vec<ResourceType> {
        self.lock().types.values().cloned().collect()
    }

    /// The containers' logs.
    pub fn logs(&self) -> &crate::kubelet::logs::PodLogs {
        &self.logs
    }

    /// How many times the simulated kubelet has listed every pod: once at its start, and once
    /// more each time one of its watches fell behind further than the type's history reaches.
    pub fn kubelet_lists(&self) -> u64 {
        self.kubelet_lists
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_kubelet_list(&self) {
        self.kubelet_lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    fn record(
        &self,
        inner: &mut Inner,
        t: &ResourceType,
        ns: &str,
        type_: EventType,
        object: Arc<Value>,
    ) {
        let event = WatchEvent::new(inner.rv, t.key(), ns.to_owned(), type_, object);
        if let Some(journal) = &inner.journal {
            journal.append(event.clone());
        }
        let floor = inner.compacted;
        let changes = inner.changes.entry(t.key()).or_insert_with(|| TypeChanges {
            history: VecDeque::new(),
            compacted: floor,
            tx: None,
        });
        changes.history.push_back(event.clone());
        while changes.history.len() > HISTORY {
            if let Some(old) = changes.history.pop_front() {
                changes.compacted = old.rv;
            }
        }
        // No receiver is not an error: nobody is watching.
        if let Some(tx) = &changes.tx {
            let _ = tx.send(event.clone());
        }
        let _ = self.all.send(event);
    }

    /// Writes every change from now on to `journal` too (after a restore, which it holds).
    pub fn set_journal(&self, journal: Arc<dyn Journal>) {
        self.lock().journal = Some(journal);
    }

    /// Waits until every change made so far is durable (at once without a journal), for at
    /// most `timeout`: the API server answers a write only then. The error says why not.
    pub async fn durable(&self, timeout: std::time::Duration) -> Result<(), String> {
        let journal = self.lock().journal.clone();
        match journal {
            Some(j) => j.settle(timeout).await,
            None => Ok(()),
        }
    }

    fn key(t: &ResourceType, ns: Option<&str>, name: &str) -> Key {
        let ns = if t.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        Key {
            resource: t.key(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Admission of a create (`old` none) or update: a CRD's rules must compile, an object
    /// must pass its schema's rules and the type's validator.
    fn validate(
        inner: &Inner,
        t: &ResourceType,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let name = meta(obj, "name").unwrap_or_default();
        let invalid = |causes| {
            ApiError::invalid_fields(&t.qualified_kind(), &t.group, &t.kind, &name, causes)
        };
        if t.group == "apiextensions.k8s.io" && t.plural == "customresourcedefinitions" {
            crate::admission::cel::check_crd(obj).map_err(|c| invalid(vec![c]))?;
        }
        if let Some(rules) = inner.admission.get(&t.key()) {
            let causes = rules.validate(obj, old);
            if !causes.is_empty() {
                return Err(invalid(causes));
            }
        }
        match inner.validators.get(&t.key()) {
            Some(v) => v(obj).map_err(|m| {
                ApiError::invalid(format!("{} \"{name}\" is invalid: {m}", t.qualified_kind()))
            }),
            None => Ok(()),
        }
    }

    /// Creates an object.
    pub fn create(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_with(t, ns, obj, Commit::Store)
    }

    /// Creates an object, or with [`Commit::DryRun`] answers with the object it would store:
    /// defaulted, admitted and given its uid, but not stored, seen by no watch, holding no
    /// address.
    pub fn create_with(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        commit: Commit,
    ) -> Result<Arc<Value>, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let mut inner = self.lock();
        let name = match meta(&obj, "name").filter(|n| !n.is_empty()) {
            Some(n) => n,
            None => match meta(&obj, "generateName") {
                Some(prefix) => format!(
                    "{prefix}{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..5]
                ),
                None => {
                    return Err(ApiError::invalid(format!(
                        "{}: metadata.name: Required value",
                        t.kind
                    )));
                }
            },
        };
        let key = Self::key(t, ns, &name);
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&t.plural, &name));
        }
        // Rules read the name, generated ones included.
        meta_mut(&mut obj).insert("name".into(), json!(name));
        // A real server defaults what it decodes before admission sees it.
        defaults::on_write(t.kind_of(), &mut obj);
        defaults::on_create(t.kind_of(), &mut obj);
        Self::run_webhooks(&inner, t, &mut obj, None)?;
        Self::validate(&inner, t, &obj, None)?;
        if key.resource == SERVICES {
            Self::allocate(&mut inner, t, &name, &mut obj)?;
            if commit == Commit::DryRun {
                inner.allocations.release(&obj);
            }
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.kind);
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if t.namespaced {
            m.insert("namespace".into(), json!(key.namespace));
        } else {
            m.remove("namespace");
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now()));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("resourceVersion");
        if commit == Commit::DryRun {
            return Ok(Arc::new(obj));
        }
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let obj = Arc::new(obj);
        inner.put(key.clone(), Arc::clone(&obj));
        self.record(
            &mut inner,
            t,
            &key.namespace,
            EventType::Added,
            Arc::clone(&obj),
        );
        // The garbage collector's rule for a dependent whose owners are all gone already (a
        // controller acting on a stale cache created it after the owner's deletion): it is
        // collected at once, so nothing outlives its owner.
        // An owner in foreground deletion does not count: it waits for its dependents to go.
        let owners: Vec<&Value> = owner_references(&obj).collect();
        if !owners.is_empty()
            && owners
                .iter()
                .all(|r| !owner_standing(&inner, &key.namespace, r))
        {
            // Removing it also lets an owner waiting in foreground deletion go.
            self.delete_locked(&mut inner, &key, Arc::clone(&obj), Propagation::Background);
        }
        Ok(obj)
    }

    /// Gives a new service the cluster IP and node ports it leaves to the server, refusing
    /// ones it names that another service holds.
    fn allocate(
        inner: &mut Inner,
        t: &ResourceType,
        name: &str,
        svc: &mut Value,
    ) -> Result<(), ApiError> {
        let spec = svc.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(taken) = inner.allocations.taken(&spec) {
            return Err(ApiError::invalid(format!(
                "{} \"{name}\" is invalid: {taken}",
                t.qualified_kind()
            )));
        }
        let full = |what: &str| {
            ApiError::new(
                500,
                "InternalError",
                format!("Internal error occurred: failed to allocate a {what}: range is full"),
            )
        };
        if defaults::wants_cluster_ip(&spec) {
            let ip = inner
                .allocations
                .take_cluster_ip()
                .ok_or_else(|| full("serviceIP"))?;
            svc["spec"]["clusterIP"] = json!(ip.to_string());
        }
        for port in defaults::wanting_node_ports(&spec) {
            let Some(number) = inner.allocations.take_node_port() else {
                // What was taken above is released: the service is not stored.
                inner.allocations.release(svc);
                return Err(full("nodePort"));
            };
            svc["spec"]["ports"][port]["nodePort"] = json!(number);
        }
        defaults::on_write(t.kind_of(), svc);
        Ok(())
    }

    /// Reads an object.
    pub fn get(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.lock()
            .objects
            .get(&Self::key(t, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.plural, name))
    }

    /// Lists objects of a type (in one namespace, or all), with the list's resourceVersion.
    pub fn list(&self, t: &ResourceType, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = Self::of_type(&inner, t, ns).map(Arc::clone).collect();
        (items, inner.rv)
    }

    /// How many objects of `t` (in `ns`, or all) satisfy `which`, without copying any.
    pub fn count(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        which: impl Fn(&Value) -> bool,
    ) -> usize {
        let inner = self.lock();
        Self::of_type(&inner, t, ns).filter(|v| which(v)).count()
    }

    /// The objects of `t` (in `ns`, or all): a range of the ordered map, not a scan of every
    /// object of every type (events alone can be tens of thousands).
    fn of_type<'a>(
        inner: &'a Inner,
        t: &ResourceType,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let tk = t.key();
        let namespaced = t.namespaced;
        let start = Key {
            resource: tk.clone(),
            namespace: String::new(),
            name: String::new(),
        };
        inner
            .objects
            .range(start..)
            .take_while(move |(k, _)| k.resource == tk)
            .filter(move |(k, _)| ns.is_none() || !namespaced || ns == Some(k.namespace.as_str()))
            .map(|(_, v)| v)
    }

    /// Replaces an object (`PUT`), or only its status.
    pub fn replace(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
    ) -> Result<Arc<Value>, ApiError> {
        self.replace_with(t, ns, name, body, part, Commit::Store)
    }

    /// Replaces an object, or with [`Commit::DryRun`] answers with what it would store.
    pub fn replace_with(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
        commit: Commit,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let check = Check {
            precondition: Precondition::ResourceVersion,
            commit,
        };
        self.replace_locked(&mut inner, t, ns, name, body, part, check)
    }

    #[allow(clippy::too_many_arguments)]
    fn replace_locked(
        &self,
        inner: &mut Inner,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
        check: Check,
    ) -> Result<Arc<Value>, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let key = Self::key(t, ns, name);
        let current = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.plural, name))?;
        if let Some(body_name) = meta(&body, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name in the URL ({name})"
            )));
        }
        let current_rv = meta(&current, "resourceVersion").unwrap_or_default();
        if check.precondition == Precondition::ResourceVersion
            && let Some(rv) = meta(&body, "resourceVersion").filter(|rv| !rv.is_empty())
            && rv != current_rv
        {
            return Err(ApiError::conflict(format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                t.plural
            )));
        }
        let mut next = if part == Part::Status {
            let mut next = (*current).clone();
            next["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            next
        } else {
            let mut next = body;
            if t.status {
                match current.get("status") {
                    Some(s) => next["status"] = s.clone(),
                    None => {
                        if let Some(m) = next.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            next
        };
        if part == Part::Whole {
            defaults::keep_allocations(t.kind_of(), &current, &mut next);
            defaults::on_write(t.kind_of(), &mut next);
            Self::run_webhooks(inner, t, &mut next, Some(&current))?;
            Self::validate(inner, t, &next, Some(&current))?;
        }
        // Server-owned metadata survives any update.
        let generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bump = part == Part::Whole && spec_part(&current) != spec_part(&next);
        {
            let m = meta_mut(&mut next);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
            ] {
                match current.get("metadata").and_then(|cm| cm.get(field)) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
            m.insert("generation".into(), json!(generation + i64::from(bump)));
        }
        next["apiVersion"] = json!(t.api_version());
        next["kind"] = json!(t.kind);
        if same_but_resource_version(&current, &next) {
            // A no-op update does not move the resourceVersion, as on a real server.
            return Ok(current);
        }
        if check.commit == Commit::DryRun {
            meta_mut(&mut next).insert("resourceVersion".into(), json!(current_rv));
            return Ok(Arc::new(next));
        }
        // The last finalizer of an object being deleted is gone: the object goes.
        if next.pointer("/metadata/deletionTimestamp").is_some() && !has_finalizers(&next) {
            return Ok(self.remove(inner, &key, next));
        }
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut next).insert("resourceVersion".into(), json!(rv.to_string()));
        let next = Arc::new(next);
        inner.put(key.clone(), Arc::clone(&next));
        self.record(
            inner,
            t,
            &key.namespace,
            EventType::Modified,
            Arc::clone(&next),
        );
        // A dependent that no longer blocks (or names) an owner in foreground deletion may be
        // the last thing the owner waited for.
        if current.pointer("/metadata/ownerReferences") != next.pointer("/metadata/ownerReferences")
        {
            for owner in owner_uids(&current) {
                if let Some(owner_key) = key_of_uid(inner, &owner) {
                    self.finish_foreground(inner, &owner_key);
                }
            }
        }
        Ok(next)
    }

    /// Patches an object (or its status).
    pub fn patch(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        patch: Patch,
        part: Part,
    ) -> Result<Arc<Value>, ApiError> {
        self.patch_with(t, ns, name, patch, part, Commit::Store)
    }

    /// Patches an object, or with [`Commit::DryRun`] answers with what it would store.
    pub fn patch_with(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        patch: Patch,
        part: Part,
        commit: Commit,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let key = Self::key(t, ns, name);
        let Some(current) = inner.objects.get(&key).cloned() else {
            if let Patch::Apply { body, manager, .. } = patch {
                drop(inner);
                let mut body = with_manager(body.clone(), &manager, &body);
                meta_mut(&mut body).insert("name".into(), json!(name));
                return self.create_with(t, ns, body, commit);
            }
            return Err(ApiError::not_found(&t.plural, name));
        };
        let mut next = (*current).clone();
        let names_version = |p: &Value| match p.pointer("/metadata/resourceVersion") {
            Some(_) => Precondition::ResourceVersion,
            None => Precondition::None,
        };
        let precondition = match patch {
            Patch::Merge(p) => {
                let check = names_version(&p);
                json_patch::merge(&mut next, &p);
                check
            }
            Patch::Strategic(p) => {
                let check = names_version(&p);
                let (group, plural) = (t.group.as_str(), t.plural.as_str());
                crate::storage::strategic_merge::apply(&mut next, &p, &|path: &[&str]| {
                    crate::storage::strategic_merge::list_rule(group, plural, path)
                })
                .map_err(|e| ApiError::invalid(format!("strategic merge patch: {e}")))?;
                check
            }
            Patch::Json(p) => {
                json_patch::patch(&mut next, &p)
                    .map_err(|e| ApiError::invalid(format!("json patch: {e}")))?;
                Precondition::None
            }
            Patch::Apply {
                body,
                manager,
                force,
            } => {
                let conflicts = apply_conflicts::conflicts(&next, &body, &manager);
                if !conflicts.is_empty() {
                    if !force {
                        return Err(apply_conflicts::refusal(
                            &conflicts, &t.plural, &t.group, name,
                        ));
                    }
                    apply_conflicts::take_over(&mut next, &conflicts);
                }
                json_patch::merge(&mut next, &body);
                next = with_manager(next, &manager, &body);
                Precondition::None
            }
        };
        let check = Check {
            precondition,
            commit,
        };
        self.replace_locked(&mut inner, t, ns, name, next, part, check)
    }

    /// Deletes an object as a real API server and its garbage collector do together: at once,
    /// or by setting deletionTimestamp while finalizers remain; dependents follow
    /// `opts.propagation`. Returns the object's last state: gone, or marked for deletion.
    pub fn delete(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let key = Self::key(t, ns, name);
        let current = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.plural, name))?;
        if let Some(uid) = &opts.uid
            && meta(&current, "uid").as_ref() != Some(uid)
        {
            return Err(ApiError::conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta(&current, "uid").unwrap_or_default()
            )));
        }
        if let Some(rv) = &opts.resource_version
            && meta(&current, "resourceVersion").as_ref() != Some(rv)
        {
            return Err(ApiError::conflict(
                "Precondition failed: resourceVersion mismatch",
            ));
        }
        if opts.dry_run {
            return Ok(would_delete(current, opts.propagation));
        }
        Ok(self.delete_locked(&mut inner, &key, current, opts.propagation))
    }

    /// Deletes `current`, stored under `key`, and handles its dependents by `propagation`.
    fn delete_locked(
        &self,
        inner: &mut Inner,
        key: &Key,
        current: Arc<Value>,
        propagation: Propagation,
    ) -> Arc<Value> {
        // Deleting what is already being deleted changes nothing, as on a real server.
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return current;
        }
        let uid = meta(&current, "uid").unwrap_or_default();
        match propagation {
            Propagation::Foreground => {
                let marked = self.mark_deleted(inner, key, current, Some(FOREGROUND_FINALIZER));
                for dependent in dependents(inner, &uid) {
                    self.collect(inner, &dependent, &uid, Propagation::Foreground);
                }
                // With nothing left to wait for, the owner goes now.
                self.finish_foreground(inner, key);
                marked
            }
            Propagation::Orphan | Propagation::Background => {
                if propagation == Propagation::Orphan {
                    self.orphan_dependents(inner, &uid);
                }
                if has_finalizers(&current) {
                    self.mark_deleted(inner, key, current, None)
                } else {
                    self.remove(inner, key, Arc::unwrap_or_clone(current))
                }
            }
        }
    }

    /// Sets deletionTimestamp (and `finalizer`, if given) on an object that stays for now.
    fn mark_deleted(
        &self,
        inner: &mut Inner,
        key: &Key,
        obj: Arc<Value>,
        finalizer: Option<&str>,
    ) -> Arc<Value> {
        let mut obj = Arc::unwrap_or_clone(obj);
        inner.rv += 1;
        let rv = inner.rv;
        let m = meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), json!(now()));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        if let Some(f) = finalizer {
            let list = m.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut()
                && !list.iter().any(|x| x == f)
            {
                list.push(json!(f));
            }
        }
        let obj = Arc::new(obj);
        self.store_modified(inner, key, Arc::clone(&obj));
        obj
    }

    /// Stores a changed object and tells the watchers.
    fn store_modified(&self, inner: &mut Inner, key: &Key, obj: Arc<Value>) {
        let Some(t) = inner.types.get(&key.resource).cloned() else {
            return;
        };
        inner.put(key.clone(), Arc::clone(&obj));
        self.record(inner, &t, &key.namespace, EventType::Modified, obj);
    }

    /// Removes an object now (its last state is `last`), garbage-collects its dependents in
    /// the background, and lets owners waiting for it in foreground deletion go.
    fn remove(&self, inner: &mut Inner, key: &Key, mut last: Value) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        inner.take(key);
        let last = Arc::new(last);
        if let Some(t) = inner.types.get(&key.resource).cloned() {
            self.record(
                inner,
                &t,
                &key.namespace,
                EventType::Deleted,
                Arc::clone(&last),
            );
        }
        let uid = meta(&last, "uid").unwrap_or_default();
        for dependent in dependents(inner, &uid) {
            self.collect(inner, &dependent, &uid, Propagation::Background);
        }
        for owner in owner_uids(&last) {
            if let Some(owner_key) = key_of_uid(inner, &owner) {
                self.finish_foreground(inner, &owner_key);
            }
        }
        last
    }

    /// Garbage collection of one dependent of `owner_uid` (gone or being deleted in the
    /// foreground): deleted with `propagation`, unless another owner still stands, in which
    /// case it only loses the reference.
    fn collect(&self, inner: &mut Inner, key: &Key, owner_uid: &str, propagation: Propagation) {
        let Some(obj) = inner.objects.get(key).cloned() else {
            return;
        };
        let standing = owner_uids(&obj).into_iter().any(|uid| {
            uid != owner_uid
                && key_of_uid(inner, &uid).is_some_and(|k| {
                    inner.objects.get(&k).is_some_and(|o| {
                        o.pointer("/metadata/deletionTimestamp").is_none()
                            || !has_finalizer(o, FOREGROUND_FINALIZER)
                    })
                })
        });
        if standing {
            self.drop_owner_reference(inner, key, obj, owner_uid);
        } else {
            self.delete_locked(inner, key, obj, propagation);
        }
    }

    /// Removes the owner's reference from every dependent (orphan deletion).
    fn orphan_dependents(&self, inner: &mut Inner, owner_uid: &str) {
        for key in dependents(inner, owner_uid) {
            if let Some(obj) = inner.objects.get(&key).cloned() {
                self.drop_owner_reference(inner, &key, obj, owner_uid);
            }
        }
    }

    fn drop_owner_reference(&self, inner: &mut Inner, key: &Key, obj: Arc<Value>, owner_uid: &str) {
        let mut obj = Arc::unwrap_or_clone(obj);
        inner.rv += 1;
        let rv = inner.rv;
        let m = meta_mut(&mut obj);
        if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
            if refs.is_empty() {
                m.remove("ownerReferences");
            }
        }
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        self.store_modified(inner, key, Arc::new(obj));
    }

    /// An owner in foreground deletion goes once no dependent blocks it: the
    /// `foregroundDeletion` finalizer is removed, and with it the object unless other
    /// finalizers remain.
    fn finish_foreground(&self, inner: &mut Inner, key: &Key) {
        let Some(owner) = inner.objects.get(key).cloned() else {
            return;
        };
        if owner.pointer("/metadata/deletionTimestamp").is_none()
            || !has_finalizer(&owner, FOREGROUND_FINALIZER)
        {
            return;
        }
        let uid = meta(&owner, "uid").unwrap_or_default();
        let blocked = dependents(inner, &uid).iter().any(|k| {
            inner.objects.get(k).is_some_and(|o| {
                owner_references(o).any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                        && r.get("blockOwnerDeletion") == Some(&Value::Bool(true))
                })
            })
        });
        if blocked {
            return;
        }
        let mut next = Arc::unwrap_or_clone(owner);
        if let Some(list) = next
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != FOREGROUND_FINALIZER);
        }
        if has_finalizers(&next) {
            inner.rv += 1;
            let rv = inner.rv;
            meta_mut(&mut next).insert("resourceVersion".into(), json!(rv.to_string()));
            self.store_modified(inner, key, Arc::new(next));
        } else {
            self.remove(inner, key, next);
        }
    }

    /// Changes of `resource` (in `ns`, or all) after `since`, and a receiver for that type's
    /// later ones. `Gone` when `since` is older than the type's kept history.
    pub fn watch(
        &self,
        resource: &str,
        ns: Option<&str>,
        since: u64,
    ) -> Result<(Vec<WatchEvent>, broadcast::Receiver<WatchEvent>), ApiError> {
        let mut inner = self.lock();
        let floor = inner.compacted;
        let changes = inner
            .changes
            .entry(resource.to_owned())
            .or_insert_with(|| TypeChanges {
                history: VecDeque::new(),
                compacted: floor,
                tx: None,
            });
        if since < changes.compacted {
            return Err(ApiError::gone(format!(
                "too old resource version: {since} ({})",
                changes.compacted
            )));
        }
        let rx = changes
            .tx
            .get_or_insert_with(|| broadcast::channel(WATCH_BUFFER).0)
            .subscribe();
        // The history is in resourceVersion order: skip to the first change after `since`.
        let first = changes.history.partition_point(|e| e.rv <= since);
        let past = changes
            .history
            .range(first..)
            .filter(|e| ns.is_none_or(|n| n == e.namespace))
            .cloned()
            .collect();
        Ok((past, rx))
    }

    /// A receiver of every change of every type from now on, for a controller that follows
    /// several types and reads the store anew when something changed (falling behind only
    /// means reading it anew).
    pub fn subscribe_all(&self) -> broadcast::Receiver<WatchEvent> {
        self.all.subscribe()
    }

    /// Every object of every type (for persistence).
    pub fn snapshot(&self) -> (u64, Vec<(String, Value)>) {
        let inner = self.lock();
        (
            inner.rv,
            inner
                .objects
                .iter()
                .map(|(k, v)| (k.resource.clone(), (**v).clone()))
                .collect(),
        )
    }

    /// Restores objects saved by [`Store::snapshot`] (types must be registered first).
    pub fn restore(&self, rv: u64, objects: Vec<(String, Value)>) {
        let mut inner = self.lock();
        for (tk, obj) in objects {
            let Some(t) = inner.types.get(&tk).cloned() else {
                continue;
            };
            let name = meta(&obj, "name").unwrap_or_default();
            let ns = meta(&obj, "namespace");
            inner.put(Self::key(&t, ns.as_deref(), &name), Arc::new(obj));
        }
        inner.rv = inner.rv.max(rv);
        inner.compacted = inner.rv;
        // The restored objects come with no history: no watch resumes from before them.
        let floor = inner.compacted;
        for changes in inner.changes.values_mut() {
            changes.history.clear();
            changes.compacted = floor;
        }
    }
}

fn owner_references(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn owner_uids(obj: &Value) -> Vec<String> {
    owner_references(obj)
        .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Whether the owner an ownerReference names (by kind, name and uid, in the dependent's
/// namespace or cluster-wide) exists and is not being deleted in the foreground. Looked up by
/// key rather than by scanning for the uid.
fn owner_standing(inner: &Inner, namespace: &str, reference: &Value) -> bool {
    let field = |f: &str| reference.get(f).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind, name, uid) = (
        field("apiVersion"),
        field("kind"),
        field("name"),
        field("uid"),
    );
    inner
        .types
        .values()
        .filter(|t| t.kind == kind && t.api_version() == api_version)
        .any(|t| {
            inner
                .objects
                .get(&Store::key(t, Some(namespace), name))
                .is_some_and(|o| {
                    o.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
                        && !(o.pointer("/metadata/deletionTimestamp").is_some()
                            && has_finalizer(o, FOREGROUND_FINALIZER))
                })
        })
}

/// The objects whose ownerReferences name `uid`, in key order.
fn dependents(inner: &Inner, uid: &str) -> Vec<Key> {
    if uid.is_empty() {
        return Vec::new();
    }
    inner
        .dependents
        .get(uid)
        .map(|set| set.iter().cloned().collect())
        .unwrap_or_default()
}

/// Where the object with `uid` is stored, if it still is.
fn key_of_uid(inner: &Inner, uid: &str) -> Option<Key> {
    inner.by_uid.get(uid).cloned()
}

/// Whether `next` equals `current` but for `metadata.resourceVersion` (a no-op update),
/// compared without copying either.
fn same_but_resource_version(current: &Value, next: &Value) -> bool {
    let (Some(c), Some(n)) = (current.as_object(), next.as_object()) else {
        return current == next;
    };
    if c.len() != n.len() {
        return false;
    }
    c.iter().all(|(k, cv)| match (k.as_str(), n.get(k)) {
        ("metadata", Some(nv)) => match (cv.as_object(), nv.as_object()) {
            (Some(cm), Some(nm)) => {
                let others = |m: &'_ Map<String, Value>| {
                    m.iter().filter(|(k, _)| *k != "resourceVersion").count()
                };
                // Without a resourceVersion the body is not the stored object read back:
                // treated as a change, as before this comparison avoided the copy.
                nm.contains_key("resourceVersion")
                    && others(cm) == others(nm)
                    && cm
                        .iter()
                        .filter(|(k, _)| *k != "resourceVersion")
                        .all(|(k, v)| nm.get(k) == Some(v))
            }
            _ => cv == nv,
        },
        (_, Some(nv)) => cv == nv,
        (_, None) => false,
    })
}

/// Records `manager` as the owner of the fields of its applied configuration.
fn with_manager(mut obj: Value, manager: &str, applied: &Value) -> Value {
    let api_version = obj.get("apiVersion").cloned().unwrap_or(json!("v1"));
    // kubectl reads the field sets of Apply entries (to take over client-side apply's
    // annotation) and fails on an entry without one.
    let entry = json!({"manager": manager, "operation": "Apply", "apiVersion": api_version,
        "time": now(), "fieldsType": "FieldsV1", "fieldsV1": applied_fields(applied)});
    let m = meta_mut(&mut obj);
    let fields = m.entry("managedFields").or_insert_with(|| json!([]));
    if let Some(list) = fields.as_array_mut() {
        list.retain(|f| f.get("manager").and_then(Value::as_str) != Some(manager));
        list.push(entry);
    }
    obj
}

/// The fields an applied configuration sets, as a `FieldsV1` set (`{"f:spec": {"f:replicas":
/// {}}}`). Lists count as one field each: the store knows no list keys, and for a client an
/// atomic list is a valid reading.
fn applied_fields(applied: &Value) -> Value {
    const SERVER_OWNED: [&str; 7] = [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ];
    fn set(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (format!("f:{k}"), set(v))).collect())
            }
            _ => json!({}),
        }
    }
    let mut fields = Map::new();
    for (k, v) in applied.as_object().into_iter().flatten() {
        let value = match k.as_str() {
            "apiVersion" | "kind" => continue,
            "metadata" => {
                let mut meta = v.clone();
                if let Some(m) = meta.as_object_mut() {
                    m.retain(|k, _| !SERVER_OWNED.contains(&k.as_str()));
                }
                set(&meta)
            }
            _ => set(v),
        };
        fields.insert(format!("f:{k}"), value);
    }
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(store: &Store) -> ResourceType {
        store.resource("", "pods").unwrap()
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    #[test]
    fn create_sets_server_fields_and_refuses_duplicates() {
        let s = Store::new();
        let t = pods(&s);
        let p = s.create(&t, Some("ns"), pod("a")).unwrap();
        assert_eq!(p["metadata"]["namespace"], "ns");
        assert_eq!(p["kind"], "Pod");
        assert!(p["metadata"]["uid"].is_string());
        assert_eq!(p["metadata"]["generation"], 1);
        assert_eq!(
            s.create(&t, Some("ns"), pod("a")).unwrap_err().reason,
            "AlreadyExists"
        );
        assert_eq!(s.get(&t, Some("other"), "a").unwrap_err().code, 404);
    }

    #[test]
    fn a_dry_run_answers_as_the_write_would_and_changes_nothing() {
        let s = Store::new();
        let t = pods(&s);
        let services = s.resource("", "services").unwrap();
        let (_, mut events) = s.watch(&t.key(), None, s.resource_version()).unwrap();
        let rv = s.resource_version();

        let would = s
            .create_with(&t, Some("ns"), pod("a"), Commit::DryRun)
            .unwrap();
        assert_eq!(
            would["status"]["phase"], "Pending",
            "defaulted as if stored"
        );
        assert!(would["metadata"]["uid"].is_string());
        assert!(would["metadata"].get("resourceVersion").is_none());
        assert_eq!(s.get(&t, Some("ns"), "a").unwrap_err().code, 404);
        let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        let ip = s
            .create_with(&services, Some("ns"), svc.clone(), Commit::DryRun)
            .unwrap()["spec"]["clusterIP"]
            .clone();
        // The address a dry run showed is not held: a service may still ask for it.
        let mut asking = svc;
        asking["spec"]["clusterIP"] = ip.clone();
        let stored = s.create(&services, Some("ns"), asking).unwrap();
        assert_eq!(stored["spec"]["clusterIP"], ip);
        let rv = rv + 1;
        assert_eq!(s.resource_version(), rv);

        let a = s.create(&t, Some("ns"), pod("a")).unwrap();
        let mut changed = (*a).clone();
        changed["metadata"]["labels"] = json!({"x": "1"});
        let would = s
            .replace_with(&t, Some("ns"), "a", changed, Part::Whole, Commit::DryRun)
            .unwrap();
        assert_eq!(would["metadata"]["labels"]["x"], "1");
        let would = s
            .patch_with(
                &t,
                Some("ns"),
                "a",
                Patch::Merge(json!({"metadata": {"labels": {"y": "2"}}})),
                Part::Whole,
                Commit::DryRun,
            )
            .unwrap();
        assert_eq!(would["metadata"]["labels"]["y"], "2");
        let dry_delete = DeleteOptions {
            dry_run: true,
            propagation: Propagation::Foreground,
            ..DeleteOptions::default()
        };
        let would = s.delete(&t, Some("ns"), "a", &dry_delete).unwrap();
        assert!(would["metadata"]["deletionTimestamp"].is_string());
        // Only the real create moved anything.
        assert_eq!(s.get(&t, Some("ns"), "a").unwrap(), a);
        assert_eq!(s.resource_version(), rv + 1);
        let mut seen = Vec::new();
        while let Ok(e) = events.try_recv() {
            if e.resource == t.key() {
                seen.push(e.type_);
            }
        }
        assert_eq!(seen, [EventType::Added]);
    }

    #[test]
    fn stale_resource_versions_conflict_and_status_is_isolated() {
        let s = Store::new();
        let t = pods(&s);
        let p = s.create(&t, Some("ns"), pod("a")).unwrap();
        let mut status = (*p).clone();
        status["status"] = json!({"phase": "Running"});
        status["spec"]["containers"][0]["image"] = json!("ignored");
        let after = s
            .replace(&t, Some("ns"), "a", status, Part::Status)
            .unwrap();
        assert_eq!(after["status"]["phase"], "Running");
        assert_eq!(
            after["spec"]["containers"][0]["image"], "i",
            "status writes leave the spec"
        );
        assert_eq!(after["metadata"]["generation"], 1);
        // The original resourceVersion is stale now.
        let mut update = (*p).clone();
        update["spec"]["containers"][0]["image"] = json!("j");
        assert_eq!(
            s.replace(&t, Some("ns"), "a", update.clone(), Part::Whole)
                .unwrap_err()
                .reason,
            "Conflict"
        );
        update["metadata"]["resourceVersion"] = after["metadata"]["resourceVersion"].clone();
        update["status"] = json!({"phase": "Failed"});
        let updated = s.replace(&t, Some("ns"), "a", update, Part::Whole).unwrap();
        assert_eq!(
            updated["metadata"]["generation"], 2,
            "spec change bumps generation"
        );
        assert_eq!(
            updated["status"]["phase"], "Running",
            "updates leave the status"
        );
    }

    #[test]
    fn finalizers_hold_deletion_and_owners_take_dependents_along() {
        let s = Store::new();
        let t = pods(&s);
        let cm = s.resource("", "configmaps").unwrap();
        let owner = s
            .create(
                &cm,
                Some("ns"),
                json!({"metadata": {"name": "owner", "finalizers": ["x"]}}),
            )
            .unwrap();
        let uid = owner["metadata"]["uid"].as_str().unwrap().to_owned();
        let mut child = pod("child");
        child["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]);
        s.create(&t, Some("ns"), child).unwrap();
        let held = s
            .delete(&cm, Some("ns"), "owner", &DeleteOptions::default())
            .unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        assert!(s.get(&t, Some("ns"), "child").is_ok(), "owner not gone yet");
        s.patch(
            &cm,
            Some("ns"),
            "owner",
            Patch::Merge(json!({"metadata": {"finalizers": null}})),
            Part::Whole,
        )
        .unwrap();
        assert_eq!(s.get(&cm, Some("ns"), "owner").unwrap_err().code, 404);
        assert_eq!(
            s.get(&t, Some("ns"), "child").unwrap_err().code,
            404,
            "garbage collected"
        );
    }

    #[test]
    fn delete_preconditions_and_watch_history() {
        let s = Store::new();
        let t = pods(&s);
        let start = s.resource_version();
        s.create(&t, Some("ns"), pod("a")).unwrap();
        let opts = DeleteOptions {
            uid: Some("someone-else".into()),
            ..DeleteOptions::default()
        };
        assert_eq!(s.delete(&t, Some("ns"), "a", &opts).unwrap_err().code, 409);
        s.delete(&t, Some("ns"), "a", &DeleteOptions::default())
            .unwrap();
        let (events, _) = s.watch(&t.key(), Some("ns"), start).unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.type_).collect();
        assert_eq!(kinds, vec![EventType::Added, EventType::Deleted]);
        assert!(
            s.watch(&t.key(), None, 0).is_err(),
            "older than the history"
        );
    }

    /// One busy type compacts its own history only: a watch of another type resumes from the
    /// same resourceVersion, and sees exactly its own changes.
    #[test]
    fn each_type_keeps_its_own_watch_history() {
        let s = Store::new();
        let t = pods(&s);
        let configmaps = s.resource("", "configmaps").unwrap();
        s.create(&t, Some("ns"), pod("before")).unwrap();
        let since = s.resource_version();
        let mut all = s.subscribe_all();
        for i in 0..=HISTORY {
            s.create(
                &configmaps,
                Some("ns"),
                json!({"metadata": {"name": format!("cm-{i}")}}),
            )
            .unwrap();
        }
        s.create(&t, Some("ns"), pod("after")).unwrap();
        let (events, _) = s.watch(&t.key(), None, since).unwrap();
        let names: Vec<_> = events.iter().map(|e| meta(&e.object, "name")).collect();
        assert_eq!(names, [Some("after".to_owned())]);
        let err = s.watch(&configmaps.key(), None, since).unwrap_err();
        assert_eq!(err.code, 410, "the busy type's history has moved on");
        // Later changes of a type reach its own watchers, and every watcher of all types.
        let (_, mut pods_rx) = s.watch(&t.key(), None, s.resource_version()).unwrap();
        s.create(
            &configmaps,
            Some("ns"),
            json!({"metadata": {"name": "late"}}),
        )
        .unwrap();
        s.create(&t, Some("ns"), pod("late")).unwrap();
        let next = pods_rx.try_recv().unwrap();
        assert_eq!(next.resource, t.key());
        assert!(pods_rx.try_recv().is_err(), "nothing of other types");
        assert!(matches!(
            all.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        let kinds: std::collections::BTreeSet<_> = std::iter::from_fn(|| all.try_recv().ok())
            .map(|e| e.resource)
            .collect();
        assert!(kinds.contains(&t.key()) && kinds.contains(&configmaps.key()));
    }

    /// Creates a pod owned by `owners` (each with its blockOwnerDeletion) holding `finalizers`.
    fn owned(s: &Store, name: &str, owners: &[(&Value, bool)], finalizers: &[&str]) -> Value {
        let mut p = pod(name);
        p["metadata"]["ownerReferences"] = owners
            .iter()
            .map(|(o, block)| {
                json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
                    "uid": o["metadata"]["uid"], "blockOwnerDeletion": block})
            })
            .collect();
        p["metadata"]["finalizers"] = json!(finalizers);
        Arc::unwrap_or_clone(s.create(&pods(s), Some("ns"), p).unwrap())
    }

    fn config_map(s: &Store, name: &str) -> Value {
        let cm = s.resource("", "configmaps").unwrap();
        Arc::unwrap_or_clone(
            s.create(&cm, Some("ns"), json!({"metadata": {"name": name}}))
                .unwrap(),
        )
    }

    fn exists(s: &Store, plural: &str, name: &str) -> bool {
        s.get(&s.resource("", plural).unwrap(), Some("ns"), name)
            .is_ok()
    }

    fn delete_with(s: &Store, name: &str, propagation: Propagation) -> Value {
        let cm = s.resource("", "configmaps").unwrap();
        let opts = DeleteOptions {
            propagation,
            ..DeleteOptions::default()
        };
        Arc::unwrap_or_clone(s.delete(&cm, Some("ns"), name, &opts).unwrap())
    }

    #[test]
    fn foreground_deletion_waits_for_blocking_dependents() {
        let s = Store::new();
        let t = pods(&s);
        let owner = config_map(&s, "owner");
        owned(&s, "held", &[(&owner, true)], &["hold"]);
        let child = owned(&s, "child", &[(&owner, true)], &[]);
        owned(&s, "grandchild", &[(&child, true)], &[]);
        let start = s.resource_version();

        let marked = delete_with(&s, "owner", Propagation::Foreground);
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(
            marked["metadata"]["finalizers"],
            json!([FOREGROUND_FINALIZER])
        );
        assert!(
            exists(&s, "configmaps", "owner"),
            "a blocking dependent remains"
        );
        assert!(!exists(&s, "pods", "child") && !exists(&s, "pods", "grandchild"));
        let held = s.get(&t, Some("ns"), "held").unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());

        s.patch(
            &t,
            Some("ns"),
            "held",
            Patch::Merge(json!({"metadata": {"finalizers": null}})),
            Part::Whole,
        )
        .unwrap();
        assert!(!exists(&s, "pods", "held"));
        assert!(!exists(&s, "configmaps", "owner"), "the last blocker went");

        let cm = s.resource("", "configmaps").unwrap();
        let (events, _) = s.watch(&cm.key(), Some("ns"), start).unwrap();
        let seen: Vec<_> = events.iter().map(|e| e.type_).collect();
        assert_eq!(seen, vec![EventType::Modified, EventType::Deleted]);
        assert!(events[0].object["metadata"]["deletionTimestamp"].is_string());
    }

    #[test]
    fn a_dependent_that_stops_blocking_releases_its_owner() {
        let s = Store::new();
        let owner = config_map(&s, "owner");
        owned(&s, "held", &[(&owner, true)], &["hold"]);
        delete_with(&s, "owner", Propagation::Foreground);
        assert!(exists(&s, "configmaps", "owner"));
        s.patch(
            &pods(&s),
            Some("ns"),
            "held",
            Patch::Json(
                serde_json::from_value(json!([{"op": "replace",
                    "path": "/metadata/ownerReferences/0/blockOwnerDeletion", "value": false}]))
                .unwrap(),
            ),
            Part::Whole,
        )
        .unwrap();
        assert!(!exists(&s, "configmaps", "owner"));
        assert!(
            exists(&s, "pods", "held"),
            "its own finalizer still holds it"
        );
    }

    /// The indexes as a scan of every object would compute them.
    fn assert_indexes_match_a_scan(s: &Store) {
        let inner = s.lock();
        let mut by_uid = BTreeMap::new();
        let mut dependents: BTreeMap<String, BTreeSet<Key>> = BTreeMap::new();
        for (key, obj) in &inner.objects {
            if let Some(uid) = meta(obj, "uid") {
                by_uid.insert(uid, key.clone());
            }
            for owner in owner_uids(obj) {
                dependents.entry(owner).or_default().insert(key.clone());
            }
        }
        assert_eq!(inner.by_uid, by_uid, "uid index");
        assert_eq!(inner.dependents, dependents, "owner index");
    }

    #[test]
    fn owner_and_uid_indexes_follow_every_change() {
        let s = Store::new();
        let t = pods(&s);
        let a = config_map(&s, "a");
        let b = config_map(&s, "b");
        owned(&s, "p1", &[(&a, true)], &[]);
        owned(&s, "p2", &[(&a, true), (&b, false)], &["hold"]);
        owned(&s, "p3", &[(&b, true)], &[]);
        assert_indexes_match_a_scan(&s);
        // A new owner list: p1 moves from a to b.
        let mut p1 = (*s.get(&t, Some("ns"), "p1").unwrap()).clone();
        p1["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "b", "uid": b["metadata"]["uid"]}]);
        s.replace(&t, Some("ns"), "p1", p1, Part::Whole).unwrap();
        assert_indexes_match_a_scan(&s);
        // Owners removed by patch.
        s.patch(
            &t,
            Some("ns"),
            "p3",
            Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
            Part::Whole,
        )
        .unwrap();
        assert_indexes_match_a_scan(&s);
        // Background deletion of b collects p1, leaves p2 (a stands) without b's reference.
        delete_with(&s, "b", Propagation::Background);
        assert!(!exists(&s, "pods", "p1"));
        assert!(exists(&s, "pods", "p2"));
        assert_indexes_match_a_scan(&s);
        // Foreground deletion of a waits on p2's finalizer, then both go.
        delete_with(&s, "a", Propagation::Foreground);
        assert_indexes_match_a_scan(&s);
        s.patch(
            &t,
            Some("ns"),
            "p2",
            Patch::Merge(json!({"metadata": {"finalizers": []}})),
            Part::Whole,
        )
        .unwrap();
        assert!(!exists(&s, "pods", "p2"));
        assert!(!exists(&s, "configmaps", "a"));
        assert_indexes_match_a_scan(&s);
        // A recreated name gets a new uid; the old one is gone from the index.
        let again = config_map(&s, "a");
        assert_ne!(again["metadata"]["uid"], a["metadata"]["uid"]);
        assert_indexes_match_a_scan(&s);
        // A restore indexes what it brings back.
        let (rv, objects) = s.snapshot();
        let restored = Store::new();
        restored.restore(rv, objects);
        assert_indexes_match_a_scan(&restored);
        assert_eq!(restored.lock().by_uid.len(), s.lock().by_uid.len());
    }

    #[test]
    fn watchers_and_readers_share_the_stored_object() {
        let s = Store::new();
        let t = pods(&s);
        let (_, mut rx) = s.watch(&t.key(), None, s.resource_version()).unwrap();
        let created = s.create(&t, Some("ns"), pod("a")).unwrap();
        let event = rx.try_recv().unwrap();
        let got = s.get(&t, Some("ns"), "a").unwrap();
        let (listed, _) = s.list(&t, Some("ns"));
        assert!(Arc::ptr_eq(&created, &event.object));
        assert!(Arc::ptr_eq(&created, &got));
        assert!(Arc::ptr_eq(&created, &listed[0]));
        // The watch line is encoded once and is the event as JSON.
        let line = event.json_line();
        assert!(line.ends_with(b"\n"));
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed, json!({"type": "ADDED", "object": *created}));
        assert_eq!(event.clone().json_line().as_ptr(), line.as_ptr());
    }

    #[test]
    fn an_update_equal_to_the_stored_object_is_a_no_op() {
        let s = Store::new();
        let t = pods(&s);
        let created = s.create(&t, Some("ns"), pod("a")).unwrap();
        let rv = s.resource_version();
        let same = s
            .replace(&t, Some("ns"), "a", (*created).clone(), Part::Whole)
            .unwrap();
        assert_eq!(s.resource_version(), rv, "no new resourceVersion");
        assert!(Arc::ptr_eq(&created, &same));
        let mut changed = (*created).clone();
        changed["metadata"]["labels"] = json!({"x": "y"});
        let after = s
            .replace(&t, Some("ns"), "a", changed, Part::Whole)
            .unwrap();
        assert_ne!(
            after["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
    }

    #[test]
    fn foreground_deletion_without_blockers_ends_at_once() {
        let s = Store::new();
        let owner = config_map(&s, "owner");
        owned(&s, "loose", &[(&owner, false)], &["hold"]);
        owned(&s, "gone", &[(&owner, true)], &[]);
        let second = config_map(&s, "second");
        delete_with(&s, "owner", Propagation::Foreground);
        assert!(!exists(&s, "configmaps", "owner"));
        assert!(!exists(&s, "pods", "gone"));
        let loose = s.get(&pods(&s), Some("ns"), "loose").unwrap();
        assert!(
            loose["metadata"]["deletionTimestamp"].is_string(),
            "non-blocking dependents are deleted too, without holding the owner"
        );
        // No dependents at all: the owner goes right away.
        delete_with(&s, "second", Propagation::Foreground);
        assert!(!exists(&s, "configmaps", "second"));
        assert!(second["metadata"]["uid"].is_string());
    }

    #[test]
    fn orphan_deletion_keeps_dependents_without_the_reference() {
        let s = Store::new();
        let t = pods(&s);
        let owner = config_map(&s, "owner");
        let other = config_map(&s, "other");
        owned(&s, "only", &[(&owner, true)], &[]);
        owned(&s, "shared", &[(&owner, true), (&other, false)], &[]);
        delete_with(&s, "owner", Propagation::Orphan);
        assert!(!exists(&s, "configmaps", "owner"));
        let only = s.get(&t, Some("ns"), "only").unwrap();
        assert!(only["metadata"].get("ownerReferences").is_none(), "{only}");
        let shared = s.get(&t, Some("ns"), "shared").unwrap();
        assert_eq!(shared["metadata"]["ownerReferences"][0]["name"], "other");
        assert_eq!(
            shared["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_dependent_created_while_its_owner_waits_in_foreground_deletion_does_not_hold_it() {
        let store = Store::new();
        let (cms, pods) = (
            store.resource("", "configmaps").unwrap(),
            store.resource("", "pods").unwrap(),
        );
        let owner = store
            .create(&cms, Some("ns"), json!({"metadata": {"name": "owner"}}))
            .unwrap();
        let reference = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]);
        // A dependent whose finalizer keeps the owner in foreground deletion for now.
        store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "held",
                "ownerReferences": reference, "finalizers": ["test/hold"]}}),
            )
            .unwrap();
        let options = DeleteOptions {
            propagation: Propagation::Foreground,
            ..DeleteOptions::default()
        };
        store.delete(&cms, Some("ns"), "owner", &options).unwrap();
        assert!(
            store.get(&cms, Some("ns"), "owner").is_ok(),
            "waits for `held`"
        );
        // Created late by a controller with a stale cache: collected, not waited for.
        store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "late", "ownerReferences": reference}}),
            )
            .unwrap();
        assert!(store.get(&pods, Some("ns"), "late").is_err());
        // Once the finalizer goes, so do the dependent and then the owner.
        store
            .patch(
                &pods,
                Some("ns"),
                "held",
                Patch::Merge(json!({"metadata": {"finalizers": null}})),
                Part::Whole,
            )
            .unwrap();
        assert!(store.get(&pods, Some("ns"), "held").is_err());
        assert!(
            store.get(&cms, Some("ns"), "owner").is_err(),
            "the owner went last"
        );
    }

    #[test]
    fn a_dependent_created_after_its_owner_is_gone_is_collected_at_once() {
        let store = Store::new();
        let (cms, pods) = (
            store.resource("", "configmaps").unwrap(),
            store.resource("", "pods").unwrap(),
        );
        let owner = store
            .create(&cms, Some("ns"), json!({"metadata": {"name": "owner"}}))
            .unwrap();
        let reference = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"], "controller": true}]);
        store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "kept", "ownerReferences": reference}}),
            )
            .unwrap();
        store
            .delete(&cms, Some("ns"), "owner", &DeleteOptions::default())
            .unwrap();
        assert!(
            store.get(&pods, Some("ns"), "kept").is_err(),
            "collected with its owner"
        );
        // Created late, naming the deleted owner: accepted, then collected.
        let since = store.resource_version();
        let late = store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "late", "ownerReferences": reference}}),
            )
            .unwrap();
        assert_eq!(late["metadata"]["name"], "late");
        assert!(store.get(&pods, Some("ns"), "late").is_err());
        let (events, _) = store.watch("/pods", Some("ns"), since).unwrap();
        let late_events: Vec<&str> = events
            .iter()
            .filter(|e| e.object["metadata"]["name"] == "late")
            .map(|e| e.type_.as_str())
            .collect();
        assert_eq!(late_events, ["ADDED", "DELETED"]);
        // An owner of the same name but another uid is not the owner.
        store
            .create(&cms, Some("ns"), json!({"metadata": {"name": "owner"}}))
            .unwrap();
        store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "stale", "ownerReferences": reference}}),
            )
            .unwrap();
        assert!(store.get(&pods, Some("ns"), "stale").is_err());
        // A live owner keeps it.
        let live = store.get(&cms, Some("ns"), "owner").unwrap();
        let live_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": live["metadata"]["uid"]}]);
        store
            .create(
                &pods,
                Some("ns"),
                json!({"metadata": {"name": "owned", "ownerReferences": live_ref}}),
            )
            .unwrap();
        assert!(store.get(&pods, Some("ns"), "owned").is_ok());
    }

    #[test]
    fn background_deletion_spares_dependents_with_another_owner() {
        let s = Store::new();
        let t = pods(&s);
        let a = config_map(&s, "a");
        let b = config_map(&s, "b");
        owned(&s, "shared", &[(&a, true), (&b, true)], &[]);
        owned(&s, "held", &[(&a, true)], &["hold"]);
        delete_with(&s, "a", Propagation::Background);
        assert!(!exists(&s, "configmaps", "a"), "the owner goes first");
        let shared = s.get(&t, Some("ns"), "shared").unwrap();
        assert_eq!(shared["metadata"]["ownerReferences"][0]["name"], "b");
        let held = s.get(&t, Some("ns"), "held").unwrap();
        assert!(
            held["metadata"]["deletionTimestamp"].is_string(),
            "garbage collection respects the dependent's finalizers"
        );
        delete_with(&s, "b", Propagation::Background);
        assert!(!exists(&s, "pods", "shared"));
    }

    #[test]
    fn propagation_policies_parse_by_their_api_names() {
        assert_eq!(
            "Orphan".parse::<Propagation>().unwrap(),
            Propagation::Orphan
        );
        assert_eq!(
            "Foreground".parse::<Propagation>().unwrap(),
            Propagation::Foreground
        );
        assert_eq!("orphan".parse::<Propagation>().unwrap_err().code, 422);
    }
}
