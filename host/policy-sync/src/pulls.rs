//! Modules that policy ConfigMaps name by reference, pulled in the background.
//!
//! The sync asks [`Puller::state`] for each reference it sees and never waits: the first ask
//! starts a pull, and until it is done the ConfigMap is `Pending` with the reason (its previous
//! version, if any, serving). When a pull ends the puller signals the sync, which loads the
//! module like any other. Failed pulls are retried with exponential backoff; a tag is resolved
//! again every refresh interval, and a moved tag pulls the digest it now names. A pinned
//! reference found in the on-disk cache is served from it without asking the registry, so a
//! restart does not need the registry.
//!
//! Credentials come from the `kubernetes.io/dockerconfigjson` Secret the ConfigMap names, read
//! in the ConfigMap's own namespace at each pull: a team's policy reaches its own Secrets only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_oci::{
    ArtifactCache, Credentials, ModuleRef, PullError, Pulled, RegistryClient, RegistryError,
};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument as _;

/// The Secret type of registry credentials.
const DOCKER_CONFIG_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// Its data key.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// How the puller reaches registries and how often it tries.
pub struct PullSettings {
    pub client: Arc<RegistryClient>,
    /// Pulled modules on disk; none keeps them in memory only.
    pub cache: Option<ArtifactCache>,
    pub keys: Arc<TrustedKeys>,
    /// How often a tag is resolved again.
    pub refresh: Duration,
    /// The first retry's delay; each failure doubles it, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

/// One reference as one namespace asks for it (credentials differ by namespace and Secret).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Wanted {
    pub namespace: String,
    /// As written in the ConfigMap.
    pub reference: String,
    pub pull_secret: Option<String>,
}

/// Where a reference stands. A module that is in the on-disk cache is not held in memory: a
/// `Ready` state's `module` is then empty and [`Puller::module`] reads it back.
#[derive(Clone, Debug)]
pub enum PullState {
    /// Not pulled yet: what is awaited.
    Pending(String),
    /// Pulled and verified (the latest digest a tag named).
    Ready(Arc<Pulled>),
    /// Refused for a reason retrying the same content will not change (a wrong digest, a
    /// missing signature, the wrong layout); retried all the same, in case it is fixed.
    Failed { error: String, step: &'static str },
}

struct Entry {
    state: PullState,
    running: bool,
    failures: u32,
    /// When the next attempt (a retry, or a tag's refresh) is due; none: never (pinned, done).
    due: Option<Instant>,
}

/// The background puller; shared by the sync and its pull tasks.
pub struct Puller {
    settings: PullSettings,
    kube: kube::Client,
    entries: Mutex<BTreeMap<Wanted, Entry>>,
    changed: watch::Sender<u64>,
}

impl Puller {
    pub fn new(settings: PullSettings, kube: kube::Client) -> Arc<Puller> {
        Arc::new(Puller {
            settings,
            kube,
            entries: Mutex::new(BTreeMap::new()),
            changed: watch::channel(0).0,
        })
    }

    /// Signals each time a pull ends (whether or not it changed a reference's state).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The state of `wanted`; starts a pull when none has run or the next one is due.
    pub fn state(self: &Arc<Self>, wanted: &Wanted) -> PullState {
        let mut entries = self.entries.lock().expect("pull entries");
        let entry = entries.entry(wanted.clone()).or_insert_with(|| Entry {
            state: PullState::Pending(format!("pulling {}", wanted.reference)),
            running: false,
            failures: 0,
            due: Some(Instant::now()),
        });
        if !entry.running && entry.due.is_some_and(|due| due <= Instant::now()) {
            entry.running = true;
            let current = match &entry.state {
                PullState::Ready(pulled) => Some(Arc::clone(pulled)),
                _ => None,
            };
            tokio::spawn(Arc::clone(self).attempt(wanted.clone(), current));
        }
        entry.state.clone()
    }

    /// The earliest time an entry is due again, for the sync to look then.
    pub fn next_due(&self) -> Option<Instant> {
        let entries = self.entries.lock().expect("pull entries");
        entries
            .values()
            .filter(|e| !e.running)
            .filter_map(|e| e.due)
            .min()
    }

    /// Forgets the references no ConfigMap names any more.
    pub fn retain(&self, wanted: &BTreeSet<Wanted>) {
        self.entries
            .lock()
            .expect("pull entries")
            .retain(|k, _| wanted.contains(k));
    }

    async fn attempt(self: Arc<Self>, wanted: Wanted, current: Option<Arc<Pulled>>) {
        let span = tracing::span!(
            target: tfjob_planner::SPAN_TARGET,
            tracing::Level::DEBUG,
            "policy pull",
            policy.reference = %wanted.reference,
            k8s.namespace.name = %wanted.namespace,
            policy.digest = tracing::field::Empty,
            outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let outcome = self
            .pull_once(&wanted, current.as_ref())
            .instrument(span.clone())
            .await;
        match &outcome {
            Ok(pulled) => span
                .record("policy.digest", pulled.pulled.digest.as_str())
                .record(
                    "outcome",
                    if pulled.provisional {
                        "cached-while-registry-away"
                    } else {
                        "ok"
                    },
                ),
            Err(error) => span
                .record("outcome", error.step())
                .record("otel.status_code", "ERROR"),
        };
        drop(span);
        let mut entries = self.entries.lock().expect("pull entries");
        let Some(entry) = entries.get_mut(&wanted) else {
            return;
        };
        entry.running = false;
        let before = describe(&entry.state);
        match outcome {
            Ok(pulled) if pulled.provisional => {
                entry.failures = entry.failures.saturating_add(1);
                entry.due = Some(Instant::now() + backoff(&self.settings, entry.failures));
                entry.state = PullState::Ready(pulled.kept());
            }
            Ok(pulled) => {
                entry.failures = 0;
                // A digest names the same bytes forever; a tag may move.
                entry.due =
                    (!pulled.pinned_by_digest).then(|| Instant::now() + self.settings.refresh);
                entry.state = PullState::Ready(pulled.kept());
            }
            Err(error) => {
                entry.failures = entry.failures.saturating_add(1);
                let delay = backoff(&self.settings, entry.failures);
                entry.due = Some(Instant::now() + delay);
                tracing::warn!(
                    reference = %wanted.reference,
                    namespace = %wanted.namespace,
                    error = %error,
                    retry_in = ?delay,
                    "policy module pull failed"
                );
                // A tag that resolved before keeps serving what it named while its registry
                // is away: a refresh failing is no reason to stop.
                if !matches!(entry.state, PullState::Ready(_)) || !error.is_transient() {
                    entry.state = if error.is_transient() {
                        PullState::Pending(format!(
                            "{error}; retrying in {}s",
                            delay.as_secs().max(1)
                        ))
                    } else {
                        PullState::Failed {
                            error: error.to_string(),
                            step: error.step(),
                        }
                    };
                }
            }
        }
        let changed = describe(&entry.state) != before;
        drop(entries);
        if changed {
            tracing::debug!(reference = %wanted.reference, "policy module pull changed its state");
        }
        // Also when nothing changed: the sync then learns when this entry is due next.
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    async fn pull_once(
        &self,
        wanted: &Wanted,
        current: Option<&Arc<Pulled>>,
    ) -> Result<Outcome, Failure> {
        let reference = wanted
            .reference
            .strip_prefix(tfjob_policy_engine::configmap::MODULE_SCHEME)
            .unwrap_or(&wanted.reference);
        let r = ModuleRef::parse(reference).map_err(|e| Failure::Permanent {
            message: e.to_string(),
            step: "reference",
        })?;
        let pinned_by_digest = r.digest.is_some();
        let max = self.settings.client.limits().max_module_bytes;
        if pinned_by_digest && let Some(pulled) = self.cached(&r, max) {
            return Ok(Outcome {
                pulled,
                pinned_by_digest,
                provisional: false,
                on_disk: true,
            });
        }
        let creds = self.credentials(wanted).await?;
        let pinned = match &r.digest {
            Some(_) => r.clone(),
            None => {
                let tag = r.tag.as_deref().expect("a reference has a tag or a digest");
                let digest = match self.settings.client.manifest(&r, &creds, tag).await {
                    Ok((_, digest)) => digest,
                    Err(e) => {
                        // Back from a restart with the registry away: what the tag named
                        // before serves until the tag can be resolved again.
                        if current.is_none()
                            && e.is_transient()
                            && let Some(pulled) = self.recalled(&r, max)
                        {
                            tracing::warn!(reference = %r, error = %e, digest = %pulled.digest, "the registry is away; the digest this tag named before serves from the cache");
                            return Ok(Outcome {
                                pulled,
                                pinned_by_digest,
                                provisional: true,
                                on_disk: true,
                            });
                        }
                        return Err(e.into());
                    }
                };
                if let Some(cache) = &self.settings.cache
                    && let Err(e) = cache.remember_tag(&r, &digest)
                {
                    tracing::warn!(error = %e, "policy module cache");
                }
                if let Some(current) = current.filter(|c| c.digest == digest) {
                    return Ok(Outcome {
                        pulled: Arc::clone(current),
                        pinned_by_digest,
                        provisional: false,
                        // Already as it is kept.
                        on_disk: false,
                    });
                }
                tracing::info!(reference = %r, %digest, "policy module tag resolved");
                r.at_digest(&digest)
            }
        };
        if let Some(pulled) = self.cached(&pinned, max) {
            return Ok(Outcome {
                pulled,
                pinned_by_digest,
                provisional: false,
                on_disk: true,
            });
        }
        let pulled =
            tfjob_policy_oci::pull(&self.settings.client, &pinned, &creds, &self.settings.keys)
                .await?;
        let on_disk = match &self.settings.cache {
            Some(cache) => cache
                .put(&pulled)
                .inspect_err(
                    |e| tracing::warn!(error = %e, "the pulled policy module could not be cached"),
                )
                .is_ok(),
            None => false,
        };
        Ok(Outcome {
            pulled: Arc::new(pulled),
            pinned_by_digest,
            provisional: false,
            on_disk,
        })
    }

    /// The bytes of the module `pulled` names: its own, or, when they are kept on disk only,
    /// read back from the cache and verified again. A module gone from the cache is pulled
    /// anew (the references naming it are due at once) and the error says so.
    pub fn module(&self, pulled: &Pulled) -> Result<Vec<u8>, String> {
        if !pulled.module.is_empty() {
            return Ok(pulled.module.clone());
        }
        let max = self.settings.client.limits().max_module_bytes;
        if let Some(found) = self.cached(&pulled.pinned, max)
            && found.digest == pulled.digest
        {
            return Ok(found.module.clone());
        }
        let mut entries = self.entries.lock().expect("pull entries");
        for entry in entries.values_mut() {
            if matches!(&entry.state, PullState::Ready(p) if p.digest == pulled.digest) {
                entry.state = PullState::Pending(format!("pulling {} again", pulled.pinned));
                entry.due = Some(Instant::now());
            }
        }
        drop(entries);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        Err(format!(
            "the module of {} is no longer in the cache; it is pulled again",
            pulled.pinned
        ))
    }

    /// The cached module `tagged`'s tag named when last resolved.
    fn recalled(&self, tagged: &ModuleRef, max: u64) -> Option<Arc<Pulled>> {
        let digest = self.settings.cache.as_ref()?.recall_tag(tagged)?;
        self.cached(&tagged.at_digest(&digest), max)
    }

    /// The cached module `pinned` names, verified; a damaged entry is reported and pulled anew.
    fn cached(&self, pinned: &ModuleRef, max: u64) -> Option<Arc<Pulled>> {
        let cache = self.settings.cache.as_ref()?;
        match cache.get(pinned, max, &self.settings.keys) {
            Ok(found) => found.map(Arc::new),
            Err(e) => {
                tracing::warn!(error = %e, "policy module cache");
                None
            }
        }
    }

    async fn credentials(&self, wanted: &Wanted) -> Result<Credentials, Failure> {
        let Some(name) = &wanted.pull_secret else {
            return Ok(Credentials::none());
        };
        let what = format!("Secret {}/{name}", wanted.namespace);
        let api: Api<Secret> = Api::namespaced(self.kube.clone(), &wanted.namespace);
        let secret = match api.get_opt(name).await {
            Ok(Some(secret)) => secret,
            Ok(None) => {
                return Err(Failure::Permanent {
                    message: format!("{what} (data key pullSecret) does not exist"),
                    step: "credentials",
                });
            }
            Err(e) => {
                return Err(Failure::Transient(format!("{what} could not be read: {e}")));
            }
        };
        if secret.type_.as_deref() != Some(DOCKER_CONFIG_TYPE) {
            return Err(Failure::Permanent {
                message: format!(
                    "{what} has type {:?}; registry credentials are a {DOCKER_CONFIG_TYPE} Secret",
                    secret.type_.unwrap_or_default()
                ),
                step: "credentials",
            });
        }
        let Some(config) = secret.data.as_ref().and_then(|d| d.get(DOCKER_CONFIG_KEY)) else {
            return Err(Failure::Permanent {
                message: format!("{what} has no {DOCKER_CONFIG_KEY}"),
                step: "credentials",
            });
        };
        Credentials::from_docker_config(&what, &config.0).map_err(|e| Failure::Permanent {
            message: e.to_string(),
            step: "credentials",
        })
    }
}

struct Outcome {
    pulled: Arc<Pulled>,
    pinned_by_digest: bool,
    /// Served from the cache while the tag could not be resolved: retried like a failure.
    provisional: bool,
    /// The module is in the on-disk cache, so its bytes need not be kept in memory.
    on_disk: bool,
}

impl Outcome {
    /// What the puller keeps of the pull: all of it, or, when the module is on disk, all but
    /// its bytes (a Python policy's are 18 MB), which [`Puller::module`] reads back.
    fn kept(self) -> Arc<Pulled> {
        if !self.on_disk || self.pulled.module.is_empty() {
            return self.pulled;
        }
        let pulled = Arc::unwrap_or_clone(self.pulled);
        Arc::new(Pulled {
            module: Vec::new(),
            ..pulled
        })
    }
}

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Pull(#[from] PullError),
    #[error("{message}")]
    Permanent { message: String, step: &'static str },
    #[error("{0}")]
    Transient(String),
}

impl From<RegistryError> for Failure {
    fn from(e: RegistryError) -> Failure {
        Failure::Pull(e.into())
    }
}

impl Failure {
    fn is_transient(&self) -> bool {
        match self {
            Failure::Pull(e) => e.is_transient(),
            Failure::Permanent { .. } => false,
            Failure::Transient(_) => true,
        }
    }

    fn step(&self) -> &'static str {
        match self {
            Failure::Pull(e) => e.step(),
            Failure::Permanent { step, .. } => step,
            Failure::Transient(_) => "registry",
        }
    }
}

/// The delay after `failures` failures in a row.
fn backoff(settings: &PullSettings, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    settings
        .backoff
        .saturating_mul(factor)
        .min(settings.max_backoff)
}

/// A state's text, to tell whether an attempt changed anything the sync would show.
fn describe(state: &PullState) -> String {
    match state {
        PullState::Pending(reason) => format!("pending:{reason}"),
        PullState::Ready(pulled) => format!("ready:{}", pulled.digest),
        PullState::Failed { error, .. } => format!("failed:{error}"),
    }
}
