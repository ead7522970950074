//! The IO side: watches the policy ConfigMaps of the policy namespaces, loads changed ones off
//! the async executor, swaps the registry snapshot, and writes each ConfigMap's status
//! annotation and events.
//!
//! Level-based: every change re-reads the whole set of ConfigMaps from the watch caches and
//! compares it with what was loaded, so a missed or reordered event cannot leave a stale policy
//! serving; only content that changed is loaded again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
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
use tfjob_policy_engine::configmap::{
    self, LoadError, POLICY_LABEL, PolicyState, STATUS_ANNOTATION,
};
use tfjob_policy_engine::signature::{KeyId, TrustedKeys};
use tfjob_policy_engine::{ActivePolicy, PolicyEngine, PolicySet, Registry};
use tokio::sync::watch;

use crate::metrics::SyncMetrics;
use crate::sources::{Attempt, SourceKey, Sources};

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
        loop {
            tokio::select! {
                () = &mut shutdown => return,
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
    async fn sync(&mut self, stores: &[Store<ConfigMap>]) {
        let observed: Vec<Arc<ConfigMap>> = stores.iter().flat_map(|s| s.state()).collect();
        let mut changed = false;
        let mut seen = BTreeSet::new();
        for cm in &observed {
            let key = SourceKey {
                namespace: cm.namespace().unwrap_or_default(),
                name: cm.name_any(),
            };
            seen.insert(key.clone());
            let print = fingerprint(cm);
            if self.sources.is_current(&key, &print) {
                continue;
            }
            let (attempt, signer) = self.load(&key, cm).await;
            // Only a version that loads replaces the serving one, and with it its signer.
            if matches!(attempt, Attempt::Loaded(_)) {
                match signer {
                    Some(signer) => self.signers.insert(key.clone(), signer),
                    None => self.signers.remove(&key),
                };
            }
            let created = cm.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let version = cm.metadata.resource_version.clone();
            self.sources
                .record(key, print, created, version, attempt, Timestamp::now());
            changed = true;
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
            changed = true;
        }
        if changed {
            self.swap();
        }
        for cm in &observed {
            let key = SourceKey {
                namespace: cm.namespace().unwrap_or_default(),
                name: cm.name_any(),
            };
            if let Some(status) = self.statuses.get(&key).cloned() {
                self.report(cm, &key, &status).await;
            }
        }
    }

    /// Composes the sources into a new snapshot and swaps it in.
    fn swap(&mut self) {
        let composition = self.sources.compose(&self.config.defaults);
        self.registry.swap(PolicySet::with_unavailable(
            composition.active.iter().map(Arc::clone),
            composition.unavailable,
        ));
        self.metrics.swapped(&self.registry.snapshot());
        // Modules that no version serves or could serve again (a deleted ConfigMap, a version
        // replaced by the next) leave the compile cache.
        let dropped = self.engine.evict_unused();
        if dropped > 0 {
            tracing::debug!(dropped, "compiled policies no longer used were dropped");
        }
        self.statuses = composition.statuses;
        // A status with a digest is about the version that serves.
        for (key, status) in &mut self.statuses {
            if status.digest.is_some() {
                status.signed_by = self.signers.get(key).map(KeyId::to_string);
            }
        }
    }

    /// Loads one ConfigMap on a blocking thread (decompressing and compiling are CPU work).
    /// Also returns the trusted key that verified it, when one did.
    async fn load(&self, key: &SourceKey, cm: &Arc<ConfigMap>) -> (Attempt, Option<KeyId>) {
        let engine = Arc::clone(&self.engine);
        let keys = Arc::clone(&self.config.trusted_keys);
        let cm = Arc::clone(cm);
        let started = Instant::now();
        let outcome = tokio::task::spawn_blocking(move || {
            let loaded = configmap::load_verified(&engine, &cm, &keys);
            // A refused signature leaves the manifest unread: anyone who can write a ConfigMap
            // could otherwise make a policy that never loads hold every job it selects.
            let manifest = match &loaded {
                Ok(_) | Err(LoadError::Signature(_)) => None,
                Err(_) => configmap::read_manifest(&cm).map(Box::new),
            };
            (loaded, manifest)
        })
        .await;
        let took = started.elapsed();
        match outcome {
            Ok((Ok((policy, signed)), _)) => {
                tracing::info!(
                    configmap = %key,
                    policy = %policy.label(),
                    signed_by = signed.key().map(tracing::field::display),
                    ?took,
                    "policy loaded"
                );
                self.metrics.loaded(took);
                (Attempt::Loaded(Arc::new(policy)), signed.key().cloned())
            }
            Ok((Err(e), manifest)) => {
                tracing::warn!(configmap = %key, step = e.step(), error = %e, "policy rejected");
                self.metrics.rejected(e.step(), took);
                let attempt = Attempt::Failed {
                    manifest,
                    error: e.to_string(),
                };
                (attempt, None)
            }
            Err(e) => {
                tracing::error!(configmap = %key, error = %e, "policy load task failed");
                self.metrics.rejected("internal", took);
                let attempt = Attempt::Failed {
                    manifest: None,
                    error: format!("loading failed unexpectedly: {e}"),
                };
                (attempt, None)
            }
        }
    }

    /// Writes the status annotation when it changed, and an event when the state changed.
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
        };
        self.reported.insert(key.clone(), now_reported);
        self.publish(cm, key, type_, reason, &note).await;
    }

    /// Records an event on the ConfigMap. Each is its own object (no series): two rejections
    /// in a row usually have different causes, and each must be readable.
    async fn publish(
        &self,
        cm: &ConfigMap,
        key: &SourceKey,
        type_: &str,
        reason: &str,
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
            action: Some("LoadPolicy".into()),
            reason: Some(reason.into()),
            note: Some(truncate(note, 1024)),
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

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
