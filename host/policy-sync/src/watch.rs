//! The IO side: watches the policy ConfigMaps of the policy namespaces, loads changed ones off
//! the async executor, swaps the registry snapshot, and writes each ConfigMap's status
//! annotation and events.
//!
//! The sync also reports the circuit breakers of the versions it serves: when one trips or
//! closes, the ConfigMap's status says so (its `breaker` field) and an event marks the change.
//!
//! Level-based: every change re-reads the whole set of ConfigMaps from the watch caches and
//! compares it with what was loaded, so a missed or reordered event cannot leave a stale policy
//! serving; only content that changed is loaded again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures::{FutureExt as _, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tfjob_planner::call_watch::CallWatch;
use tfjob_policy_engine::breaker::{BreakerKey, Breakers, TrippedPolicy};
use tfjob_policy_engine::configmap::{
    self, BreakerStatus, POLICY_LABEL, PolicyState, STATUS_ANNOTATION,
};
use tfjob_policy_engine::loaded_budget::LoadedBudget;
use tfjob_policy_engine::signature::{KeyId, TrustedKeys};
use tfjob_policy_engine::{
    ActivePolicy, CompiledPolicy, PolicyEngine, PolicyManifest, PolicySet, Registry, defaults,
};
use tokio::sync::watch;

use crate::metrics::SyncMetrics;
use crate::pulls::{PullState, Puller, Wanted};
use crate::scope::Scope;
use crate::sources::{self, Attempt, SourceKey, Sources};

/// What the sync watches and what it composes with.
pub struct SyncConfig {
    /// Namespaces whose labelled ConfigMaps are policies; others are ignored.
    pub namespaces: Vec<String>,
    /// The built-in policies (defaults and local ones); a ConfigMap policy of the same name
    /// replaces one.
    pub defaults: Vec<Arc<ActivePolicy>>,
    /// Name of this operator instance in events.
    pub instance: Option<String>,
    /// When not empty, only modules signed by one of these keys are loaded.
    pub trusted_keys: Arc<TrustedKeys>,
    /// Policy namespaces whose ConfigMaps reach the whole cluster; the others reach their own
    /// namespace only (see [`crate::scope`]).
    pub cluster_namespaces: BTreeSet<String>,
    /// Policy ConfigMaps loaded per namespace at most; the newest beyond it are `Rejected`.
    pub max_per_namespace: usize,
    /// Longest wait for one ConfigMap to load (compilation included).
    pub load_bound: std::time::Duration,
    /// True while this operator instance leads (always, without leader election). A standby
    /// loads and serves policies like the leader, so a takeover finds them compiled, but
    /// writes no status annotation or event; it brings them up to date when it takes over.
    pub leading: watch::Receiver<bool>,
    /// The policies' circuit breakers, shared with the seam that calls the policies: a tripped
    /// one is reported on the ConfigMap of the version it is about.
    pub breakers: Breakers,
    /// Pulls the modules ConfigMaps name by reference (`data` key `module`); without one such
    /// ConfigMaps are refused.
    pub puller: Option<Arc<Puller>>,
    /// What loaded ConfigMap policies may hold, per policy namespace: a version that would pass
    /// its namespace's share is `Rejected` naming it, and the serving one stays.
    pub loaded_budget: Arc<LoadedBudget>,
    /// Compile the CEL evaluator every CEL policy runs on when the sync starts, in the
    /// background, and keep it: the first CEL ConfigMap then waits for its own document only,
    /// not for the evaluator's compilation (about 10 s of one core).
    pub warm_cel_evaluator: bool,
}

/// The default of [`SyncConfig::max_per_namespace`].
pub const MAX_PER_NAMESPACE: usize = 64;
/// The default of [`SyncConfig::load_bound`]. A load compiles twice (the module, then the copy
/// pre-initialised for its settings): a Python or JavaScript policy (12-18 MB, a language
/// runtime inside) takes about 20 s on two idle cores, and several times that while the
/// operator is busy reconciling.
pub const LOAD_BOUND: std::time::Duration = std::time::Duration::from_secs(120);

/// Load steps that fail before (or at) the signature check.
const UNVERIFIED_STEPS: [&str; 5] = ["size", "missing", "ambiguous", "decompress", "signature"];

fn source_key(cm: &ConfigMap) -> SourceKey {
    SourceKey {
        namespace: cm.namespace().unwrap_or_default(),
        name: cm.name_any(),
    }
}

/// Keeps `registry` equal to the defaults composed with the policy ConfigMaps.
pub struct PolicySync {
    client: Client,
    engine: Arc<PolicyEngine>,
    registry: Arc<Registry>,
    config: SyncConfig,
    metrics: SyncMetrics,
    sources: Sources,
    /// The state and error each ConfigMap was last reported with, so events mark changes only.
    reported: BTreeMap<SourceKey, (PolicyState, Option<String>)>,
    /// The statuses of the last composition: a ConfigMap whose annotation differs (a write
    /// that failed, an annotation edited by hand) is written again on the next change seen.
    statuses: BTreeMap<SourceKey, configmap::PolicyStatus>,
    /// The key that verified the version each ConfigMap serves (absent: no trusted keys).
    signers: BTreeMap<SourceKey, KeyId>,
    /// The pinned reference the version each ConfigMap serves was pulled by (absent: the
    /// module is in the ConfigMap).
    modules: BTreeMap<SourceKey, String>,
    /// The ConfigMaps whose policy serves, with the version: whose breaker each reports.
    serving: BTreeMap<SourceKey, Arc<ActivePolicy>>,
    /// Whether each ConfigMap was last reported with a tripped breaker, so events mark changes.
    breaker_reported: BTreeMap<SourceKey, bool>,
    /// Loads that may run at once: one per core.
    load_slots: Arc<tokio::sync::Semaphore>,
    /// The CEL evaluator compiled at start ([`SyncConfig::warm_cel_evaluator`]), held so that
    /// it stays compiled while no CEL policy serves.
    cel_evaluator: Arc<OnceLock<Arc<CompiledPolicy>>>,
}

impl PolicySync {
    pub fn new(
        client: Client,
        engine: Arc<PolicyEngine>,
        registry: Arc<Registry>,
        config: SyncConfig,
        metrics: SyncMetrics,
    ) -> PolicySync {
        PolicySync {
            client,
            engine,
            registry,
            config,
            metrics,
            sources: Sources::new(),
            reported: BTreeMap::new(),
            statuses: BTreeMap::new(),
            signers: BTreeMap::new(),
            modules: BTreeMap::new(),
            serving: BTreeMap::new(),
            breaker_reported: BTreeMap::new(),
            load_slots: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, usize::from),
            )),
            cel_evaluator: Arc::default(),
        }
    }

    /// Compiles the CEL evaluator on a thread of its own (the compiler itself runs at low
    /// priority where the engine compiles in a child process) and keeps it.
    fn warm_cel_evaluator(&self) {
        let engine = Arc::clone(&self.engine);
        let slot = Arc::clone(&self.cel_evaluator);
        let spawned = std::thread::Builder::new()
            .name("cel-warmup".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                match engine.compile(defaults::CEL_POLICY_WASM) {
                    Ok(compiled) => {
                        tracing::info!(
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "the CEL evaluator is compiled"
                        );
                        let _ = slot.set(compiled);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the CEL evaluator did not compile; the first CEL policy will try again");
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start compiling the CEL evaluator");
        }
    }

    /// Watches until `shutdown` resolves. `ready` turns true once every policy namespace has
    /// been listed and its policies loaded, so the operator can hold its first reconcile until
    /// the configured policies serve.
    pub async fn run(
        mut self,
        ready: watch::Sender<bool>,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        if self.config.warm_cel_evaluator {
            self.warm_cel_evaluator();
        }
        let selector = format!("{POLICY_LABEL}=true");
        let mut stores = Vec::new();
        let mut streams = Vec::new();
        for ns in &self.config.namespaces {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
            let (store, writer) = reflector::store();
            let stream = reflector(
                writer,
                watcher(api, watcher::Config::default().labels(&selector)),
            )
            .default_backoff()
            .boxed();
            stores.push(store);
            streams.push(stream);
        }
        let mut events = futures::stream::select_all(streams);
        tokio::pin!(shutdown);
        let mut synced_once = false;
        let mut leading = self.config.leading.clone();
        let mut breakers = self.config.breakers.changes();
        let mut pulls = match &self.config.puller {
            Some(puller) => puller.changes(),
            None => watch::channel(0).1,
        };
        loop {
            // A pull to retry or a tag to resolve again is due then; the sync starts it.
            let due = self.config.puller.as_ref().and_then(|p| p.next_due());
            tokio::select! {
                () = &mut shutdown => return,
                // A pull ended: load what it brought, or show why it did not.
                Ok(()) = pulls.changed(), if synced_once => {
                    pulls.mark_unchanged();
                    self.sync(&stores).await;
                    continue;
                }
                () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if synced_once && due.is_some() => {
                    self.sync(&stores).await;
                    continue;
                }
                // A breaker tripped or closed: the statuses say so (nothing to load).
                Ok(()) = breakers.changed(), if synced_once => {
                    breakers.mark_unchanged();
                    if *self.config.leading.borrow() {
                        let observed: Vec<Arc<ConfigMap>> =
                            stores.iter().flat_map(|s| s.state()).collect();
                        self.report_all(&observed).await;
                    }
                    continue;
                }
                // Taking over: write the statuses a standby left alone.
                Ok(()) = leading.changed(), if synced_once => {
                    if *leading.borrow_and_update() {
                        self.sync(&stores).await;
                    }
                    continue;
                }
                next = events.next() => match next {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "policy ConfigMap watch failed; retrying");
                        continue;
                    }
                    None => return,
                },
            }
            // Wait until every namespace has been listed once before composing, so a policy
            // of a namespace not yet listed is not reported as gone.
            if !synced_once && !all_ready(&stores) {
                continue;
            }
            self.sync(&stores).await;
            if !synced_once {
                synced_once = true;
                let _ = ready.send(true);
                tracing::info!(
                    namespaces = ?self.config.namespaces,
                    policies = self.registry.snapshot().all().len(),
                    "policy ConfigMaps loaded"
                );
            }
        }
    }

    /// Loads what changed, swaps the snapshot, and brings every ConfigMap's status up to date.
    /// Changed ConfigMaps load concurrently, each swapped in as soon as it is done, so a slow
    /// one delays no other.
    async fn sync(&mut self, stores: &[Store<ConfigMap>]) {
        let observed: Vec<Arc<ConfigMap>> = stores.iter().flat_map(|s| s.state()).collect();
        let mut changed = false;
        let mut seen = BTreeSet::new();
        let keys: Vec<(SourceKey, Option<Timestamp>)> = observed
            .iter()
            .map(|cm| {
                (
                    source_key(cm),
                    cm.metadata.creation_timestamp.as_ref().map(|t| t.0),
                )
            })
            .collect();
        let over_cap = sources::over_cap(&keys, self.config.max_per_namespace);
        let mut wanted = BTreeSet::new();
        let mut loads = futures::stream::FuturesUnordered::new();
        for cm in &observed {
            let key = source_key(cm);
            seen.insert(key.clone());
            let created = cm.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let version = cm.metadata.resource_version.clone();
            if over_cap.contains(&key) {
                // Recorded under a fingerprint of its own, so the ConfigMap loads once the
                // namespace is back under the cap.
                let print = format!("over-cap:{}", fingerprint(cm));
                if !self.sources.is_current(&key, &print) {
                    let error = format!(
                        "namespace {} holds more than {} policy ConfigMaps; the newest ones are \
                         not loaded (--policy-max-per-namespace)",
                        key.namespace, self.config.max_per_namespace
                    );
                    tracing::warn!(configmap = %key, "{error}");
                    self.metrics.rejected("cap", std::time::Duration::ZERO);
                    // Not tied to its policy name: a ConfigMap past the cap must not hold the
                    // jobs its (unconfined, unverified) manifest would select.
                    let attempt = Attempt::Failed {
                        manifest: None,
                        error,
                    };
                    self.sources
                        .record(key, print, created, version, attempt, Timestamp::now());
                    changed = true;
                }
                continue;
            }
            let mut print = fingerprint(cm);
            let mut pulled = None;
            if let (Ok(Some(reference)), Some(puller)) =
                (configmap::module_reference(cm), &self.config.puller)
            {
                let want = Wanted {
                    namespace: key.namespace.clone(),
                    reference: reference.reference,
                    pull_secret: reference.pull_secret,
                };
                let state = puller.state(&want);
                wanted.insert(want);
                let (waiting, attempt) = match state {
                    PullState::Ready(ready) => {
                        // The same ConfigMap naming a tag that moved is new content.
                        print = format!("{print}:{}", ready.digest);
                        pulled = Some(ready);
                        (String::new(), None)
                    }
                    PullState::Pending(reason) => (
                        format!("pending:{print}:{reason}"),
                        Some(Attempt::Pending {
                            manifest: self.unverified_manifest(&key, cm),
                            reason,
                        }),
                    ),
                    PullState::Failed { error, step } => {
                        self.metrics.rejected(step, std::time::Duration::ZERO);
                        (
                            format!("failed:{print}:{error}"),
                            Some(Attempt::Failed {
                                manifest: self.unverified_manifest(&key, cm),
                                error,
                            }),
                        )
                    }
                };
                if let Some(attempt) = attempt {
                    if !self.sources.is_current(&key, &waiting) {
                        self.sources.record(
                            key,
                            waiting,
                            created,
                            version,
                            attempt,
                            Timestamp::now(),
                        );
                        changed = true;
                    }
                    continue;
                }
            }
            if self.sources.is_current(&key, &print) {
                continue;
            }
            let module = pulled.as_ref().map(|p| p.pinned.to_string());
            let load = self.load(key.clone(), Arc::clone(cm), pulled);
            loads.push(async move { (key, print, created, version, load.await, module) });
        }
        if let Some(puller) = &self.config.puller {
            puller.retain(&wanted);
        }
        let gone: Vec<SourceKey> = self
            .sources
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            tracing::info!(configmap = %key, "policy ConfigMap deleted");
            self.sources.remove(&key);
            self.reported.remove(&key);
            self.signers.remove(&key);
            self.modules.remove(&key);
            self.breaker_reported.remove(&key);
            changed = true;
        }
        if changed {
            self.swap();
        }
        while let Some((key, print, created, version, (attempt, signer), module)) =
            loads.next().await
        {
            // Only a version that loads replaces the serving one, and with it its signer and
            // where it was pulled from.
            if matches!(attempt, Attempt::Loaded(_)) {
                match signer {
                    Some(signer) => self.signers.insert(key.clone(), signer),
                    None => self.signers.remove(&key),
                };
                match module {
                    Some(module) => self.modules.insert(key.clone(), module),
                    None => self.modules.remove(&key),
                };
            }
            self.sources
                .record(key, print, created, version, attempt, Timestamp::now());
            self.swap();
        }
        if !*self.config.leading.borrow() {
            return;
        }
        self.report_all(&observed).await;
    }

    /// Brings every observed ConfigMap's status and events up to date, with the breakers as
    /// they are now.
    async fn report_all(&mut self, observed: &[Arc<ConfigMap>]) {
        let tripped = self.config.breakers.tripped();
        for cm in observed {
            let key = source_key(cm);
            if let Some(status) = self.statuses.get(&key).cloned() {
                let status = configmap::PolicyStatus {
                    breaker: self.breaker_of(&key, &tripped),
                    ..status
                };
                self.report(cm, &key, &status).await;
            }
        }
    }

    /// The breaker of the version `key` serves, if it is tripped.
    fn breaker_of(&self, key: &SourceKey, tripped: &[TrippedPolicy]) -> Option<BreakerStatus> {
        let policy = self.serving.get(key)?;
        let breaker = BreakerKey::of(policy);
        let fingerprint = policy.fingerprint();
        tripped
            .iter()
            .find(|t| t.key == breaker && t.fingerprint == fingerprint)
            .map(BreakerStatus::of)
    }

    /// Composes the sources into a new snapshot and swaps it in.
    fn swap(&mut self) {
        let composition = self.sources.compose(&self.config.defaults);
        self.registry.swap(PolicySet::with_unavailable(
            composition.active.iter().map(Arc::clone),
            composition.unavailable,
        ));
        let snapshot = self.registry.snapshot();
        self.metrics.swapped(&snapshot);
        // A replaced version's breaker goes with it: the new one starts closed.
        self.config.breakers.retain_serving(&snapshot);
        self.serving = composition.serving;
        // Modules that no version serves or could serve again (a deleted ConfigMap, a version
        // replaced by the next) leave the compile cache.
        let dropped = self.engine.evict_unused();
        if dropped > 0 {
            tracing::debug!(dropped, "compiled policies no longer used were dropped");
        }
        // Versions no source serves any more gave their reservations back with them (those
        // still running a call, once it ends).
        let budget = &self.config.loaded_budget;
        self.metrics.budget(&budget.usage(), budget.limits());
        self.statuses = composition.statuses;
        for (key, status) in &mut self.statuses {
            status.scope =
                Some(Scope::of(&key.namespace, &self.config.cluster_namespaces).to_string());
            // A status with a digest is about the version that serves.
            if status.digest.is_some() {
                status.signed_by = self.signers.get(key).map(KeyId::to_string);
                status.module = self.modules.get(key).cloned();
                status.memory_bytes = self.serving.get(key).and_then(|p| p.charged_bytes());
            }
        }
    }

    /// The manifest a pending or failed pull is tied to, confined to its namespace's scope; none
    /// with trusted keys, since the module it belongs to is not verified yet.
    fn unverified_manifest(&self, key: &SourceKey, cm: &ConfigMap) -> Option<Box<PolicyManifest>> {
        if !self.config.trusted_keys.is_empty() {
            return None;
        }
        let scope = Scope::of(&key.namespace, &self.config.cluster_namespaces);
        let builtin = self.config.defaults.iter().map(|d| d.name());
        let mut manifest = configmap::read_manifest(cm)?;
        scope
            .confine(&mut manifest, builtin, &self.config.cluster_namespaces)
            .ok()?;
        Some(Box::new(manifest))
    }

    /// Loads one ConfigMap on a blocking thread (decompressing and compiling are CPU work),
    /// confined to the scope of its namespace. The wait is bounded: by the engine's call bound
    /// while `validate-settings` runs, and by [`SyncConfig::load_bound`] for the whole load
    /// (a compiler child still running then is stopped at the same bound, see
    /// `Compiler::Process`; an in-process compilation cannot be interrupted, so its thread is
    /// left to finish and its result is discarded). Also returns the trusted key that verified it, when one did.
    fn load(
        &self,
        key: SourceKey,
        cm: Arc<ConfigMap>,
        pulled: Option<Arc<tfjob_policy_oci::Pulled>>,
    ) -> impl Future<Output = (Attempt, Option<KeyId>)> + use<> {
        let engine = Arc::clone(&self.engine);
        let keys = Arc::clone(&self.config.trusted_keys);
        let metrics = self.metrics.clone();
        let scope = Scope::of(&key.namespace, &self.config.cluster_namespaces);
        let builtin: Vec<String> = self
            .config
            .defaults
            .iter()
            .map(|d| d.name().to_owned())
            .collect();
        let cluster_wide = self.config.cluster_namespaces.clone();
        let load_bound = self.config.load_bound;
        let budget = Arc::clone(&self.config.loaded_budget);
        let holder = key.to_string();
        let puller = self.config.puller.clone();
        let slots = Arc::clone(&self.load_slots);
        let confine = Arc::new(move |manifest: &mut PolicyManifest| {
            scope.confine(manifest, builtin.iter().map(String::as_str), &cluster_wide)
        });
        async move {
            let call_bound = engine.limits().call_bound();
            // Loads compile on the blocking pool; one per core at a time, and the time bound
            // starts once a load has its turn, so a batch of ConfigMaps is not a timeout.
            let Ok(slot) = slots.acquire_owned().await else {
                return (
                    Attempt::Failed {
                        manifest: None,
                        error: "the policy sync is shutting down".into(),
                    },
                    None,
                );
            };
            let started = Instant::now();
            // The manifest a failure is tied to (so the jobs it selects hear of it) is the
            // confined one: a team's rejected policy must not hold another namespace's jobs.
            let manifest = configmap::read_manifest(&cm)
                .and_then(|mut m| confine(&mut m).ok().map(|()| Box::new(m)));
            let watch = CallWatch::new();
            let mut task = {
                let watch = watch.clone();
                let cm = Arc::clone(&cm);
                let keys = Arc::clone(&keys);
                tokio::task::spawn_blocking(move || {
                    // The slot is held until the thread is done, also when the wait for it was
                    // abandoned: an abandoned compile still uses its core.
                    let _slot = slot;
                    let activated = watch.attach(|| {
                        match read(&cm, &keys, pulled.as_deref(), puller.as_deref()) {
                            Err(e) => Err((e.step(), e.to_string())),
                            Ok(mut source) => match confine(&mut source.manifest) {
                                Err(e) => Err(("scope", e)),
                                Ok(()) => {
                                    let signed = source.signed.key().cloned();
                                    configmap::activate_source(&engine, source)
                                        .map(|policy| (policy, signed))
                                        .map_err(|e| (e.step(), e.to_string()))
                                }
                            },
                        }
                    });
                    // Outside the call watch: pre-initialisation is bounded by its own
                    // deadlines (the policy's for the validation it runs again, a longer one for
                    // reading the validated instance back, which runs no guest code).
                    activated.and_then(|(policy, signed)| {
                        admit(&engine, &budget, &holder, policy).map(|p| (p, signed))
                    })
                })
            };
            let mut check = tokio::time::interval(std::time::Duration::from_millis(100));
            let outcome = loop {
                tokio::select! {
                    done = &mut task => break done.map_err(|e| format!("loading failed unexpectedly: {e}")),
                    _ = check.tick() => {
                        let overdue = if let Some(running) = watch.overdue(call_bound) {
                            Some(format!("validate-settings has not returned after {running:?} (the bound is {call_bound:?})"))
                        } else {
                            (started.elapsed() > load_bound).then(|| {
                                format!("loading did not finish within {load_bound:?} (a module that takes this long to compile is refused)")
                            })
                        };
                        if let Some(why) = overdue {
                            break Ok(Err(("timeout", why)));
                        }
                    }
                }
            };
            let took = started.elapsed();
            match outcome {
                Ok(Ok((policy, signer))) => {
                    tracing::info!(
                        configmap = %key,
                        policy = %policy.label(),
                        signed_by = signer.as_ref().map(tracing::field::display),
                        ?took,
                        "policy loaded"
                    );
                    metrics.loaded(took);
                    (Attempt::Loaded(Arc::new(policy)), signer)
                }
                Ok(Err((step, error))) => {
                    tracing::warn!(configmap = %key, step, error = %error, "policy rejected");
                    metrics.rejected(step, took);
                    // With trusted keys, a manifest is bound only once its module's signature
                    // verified: anyone who can write a ConfigMap could otherwise make a policy
                    // that never loads hold every job it selects.
                    let manifest = if !keys.is_empty() && UNVERIFIED_STEPS.contains(&step) {
                        None
                    } else {
                        manifest
                    };
                    (Attempt::Failed { manifest, error }, None)
                }
                Err(error) => {
                    tracing::error!(configmap = %key, error = %error, "policy load task failed");
                    metrics.rejected("internal", took);
                    let attempt = Attempt::Failed {
                        manifest: None,
                        error,
                    };
                    (attempt, None)
                }
            }
        }
    }

    /// Writes the status annotation when it changed, and an event when the state or the
    /// breaker changed.
    async fn report(&mut self, cm: &ConfigMap, key: &SourceKey, status: &configmap::PolicyStatus) {
        let text = status.to_annotation();
        let current = cm.annotations().get(STATUS_ANNOTATION);
        if current != Some(&text) {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
            let patch = serde_json::json!({"metadata": {"annotations": {STATUS_ANNOTATION: text}}});
            if let Err(e) = api
                .patch_metadata(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(configmap = %key, error = %e, "could not write the policy status");
            }
        }
        self.report_breaker(cm, key, status.breaker.as_ref()).await;
        let now_reported = (status.state, status.error.clone());
        if self.reported.get(key) == Some(&now_reported) {
            return;
        }
        let (type_, reason, note) = match status.state {
            PolicyState::Active => (
                "Normal",
                "PolicyActive",
                format!(
                    "policy is active (digest {})",
                    status.digest.as_deref().unwrap_or("-")
                ),
            ),
            PolicyState::Superseded => (
                "Normal",
                "PolicySuperseded",
                status.error.clone().unwrap_or_default(),
            ),
            PolicyState::Rejected => (
                "Warning",
                "PolicyRejected",
                status.error.clone().unwrap_or_else(|| "rejected".into()),
            ),
            PolicyState::Pending => (
                "Normal",
                "PolicyPending",
                status.error.clone().unwrap_or_else(|| "pending".into()),
            ),
        };
        self.reported.insert(key.clone(), now_reported);
        self.publish(cm, key, ("LoadPolicy", type_, reason), &note)
            .await;
    }

    /// An event when the breaker of the version `key` serves tripped or closed.
    async fn report_breaker(
        &mut self,
        cm: &ConfigMap,
        key: &SourceKey,
        breaker: Option<&BreakerStatus>,
    ) {
        let was = self
            .breaker_reported
            .insert(key.clone(), breaker.is_some())
            .unwrap_or(false);
        let policy = self.serving.get(key).map(|p| p.label()).unwrap_or_default();
        let (type_, reason, note) = match (was, breaker) {
            (false, Some(b)) => (
                "Warning",
                "PolicyTripped",
                format!(
                    "policy {policy} failed {} times in a row ({}): its circuit breaker is \
                     open and it is not called until a trial call from {} on succeeds; its \
                     failure policy applies meanwhile",
                    b.failures, b.category, b.retry_at
                ),
            ),
            (true, None) => (
                "Normal",
                "PolicyRecovered",
                format!("the circuit breaker of policy {policy} closed: it is called again"),
            ),
            _ => return,
        };
        self.publish(cm, key, ("EvaluatePolicy", type_, reason), &note)
            .await;
    }

    /// Records an event on the ConfigMap. Each is its own object (no series): two rejections
    /// in a row usually have different causes, and each must be readable.
    async fn publish(
        &self,
        cm: &ConfigMap,
        key: &SourceKey,
        (action, type_, reason): (&str, &str, &str),
        note: &str,
    ) {
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", key.name, now.as_nanosecond())),
                namespace: Some(key.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(tfjob_policy_logic::text::prefix(note, 1024).to_owned()),
            type_: Some(type_.into()),
            regarding: Some(cm.object_ref(&())),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(
                self.config
                    .instance
                    .clone()
                    .unwrap_or_else(|| REPORTING_CONTROLLER.into()),
            ),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(configmap = %key, error = %e, "could not publish the policy event");
        }
    }
}

/// Reads a ConfigMap up to its compilation: with the module pulled from the reference it names
/// (read back from the cache where the puller keeps it on disk only), or from its own bytes.
fn read(
    cm: &ConfigMap,
    keys: &TrustedKeys,
    pulled: Option<&tfjob_policy_oci::Pulled>,
    puller: Option<&Puller>,
) -> Result<configmap::PolicySource, configmap::LoadError> {
    match (configmap::module_reference(cm)?, pulled, puller) {
        (None, _, _) => configmap::read_verified(cm, keys),
        (Some(_), Some(pulled), Some(puller)) => {
            let signed = match &pulled.signed_by {
                Some(key) => configmap::Signed::By(key.clone()),
                None => configmap::Signed::No,
            };
            let module = puller
                .module(pulled)
                .map_err(configmap::LoadError::Reference)?;
            configmap::read_referenced(cm, module, signed)
        }
        (Some(_), _, _) => Err(configmap::LoadError::Reference(
            "this operator pulls no modules from registries".into(),
        )),
    }
}

/// Readies a version that activated as it will serve (pre-initialised for its settings; a
/// version that cannot be serves from its plain component), measures what it holds, and admits
/// it within the budget of loaded policies as the replacement of what `holder` serves now.
///
/// A CEL document is the exception: the evaluator every CEL policy runs is compiled already,
/// and the copy for a new document (a compilation of its own, 1-2 s) is made in the
/// background while the version serves from the plain evaluator (a few milliseconds per call
/// until it is ready), so that an edit serves in a fraction of a second. Its charge counts the
/// copy ahead.
fn admit(
    engine: &Arc<PolicyEngine>,
    budget: &Arc<LoadedBudget>,
    holder: &str,
    policy: ActivePolicy,
) -> Result<ActivePolicy, (&'static str, String)> {
    let (compiled, name, settings) = (&policy.compiled, policy.name(), &policy.settings);
    let parts = if compiled.digest == defaults::cel_policy_digest() {
        engine.prepare_in_background(compiled, name, settings, policy.limits.clone());
        compiled.parts_ahead_of_copy(settings)
    } else {
        if let Err(error) = engine.prepare_now(compiled, name, settings, policy.limits.clone()) {
            tracing::info!(policy = %policy.label(), %error, "not pre-initialised; its calls run from the plain component");
        }
        compiled.parts_for(settings)
    };
    match budget.admit(holder, policy.manifest.tenant.as_deref(), parts) {
        Ok(reservation) => Ok(policy.holding(reservation)),
        Err(refused) => Err(("budget", refused.to_string())),
    }
}

/// Who reports the policy events.
const REPORTING_CONTROLLER: &str = "tfjob-operator-policies";

fn all_ready(stores: &[Store<ConfigMap>]) -> bool {
    // A reflector store is ready once its first list has been applied.
    stores
        .iter()
        .all(|s| s.wait_until_ready().now_or_never().is_some())
}

/// A digest of what a ConfigMap says (data and binaryData) and of its identity (uid: a
/// ConfigMap deleted and created again is a new source), not of the rest of its metadata.
pub fn fingerprint(cm: &ConfigMap) -> String {
    let mut hasher = Sha256::new();
    hasher.update(cm.metadata.uid.as_deref().unwrap_or_default().as_bytes());
    hasher.update([0]);
    for (k, v) in cm.data.iter().flatten() {
        hasher.update(b"d");
        hasher.update(k.as_bytes());
        hasher.update([0]);
        hasher.update(v.as_bytes());
        hasher.update([0]);
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        hasher.update(b"b");
        hasher.update(k.as_bytes());
        hasher.update([0]);
        hasher.update(&v.0);
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}
