//! The policy ConfigMaps seen so far, what each last loaded, and how they compose with the
//! built-in defaults into one registry snapshot and one status per ConfigMap.
//!
//! Pure and synchronous: the watcher feeds it load results and applies what it computes.
//!
//! The rules:
//! - **Last-known-good.** A ConfigMap whose update fails to load keeps serving the version it
//!   loaded before; its status says `Rejected` with the error and the digest still serving.
//! - **One version per name and mode.** When several ConfigMaps carry a policy of the same name
//!   (and mode), the most recently created one serves and the others are `Superseded`; deleting
//!   it brings the previous one back. A rollout is "apply a new ConfigMap"; a rollback is
//!   "delete it".
//! - **Defaults.** An enforced ConfigMap policy with a default policy's name replaces that
//!   default; when it goes away the default serves again.
//! - **Never loaded.** A policy that never loaded is not applied. If its manifest could be read
//!   and nothing else serves its name, it is listed as unavailable so that the jobs it selects
//!   hear about it (and, under `Fail`, wait for it).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use jiff::Timestamp;
use tfjob_policy_engine::configmap::{PolicyState, PolicyStatus};
use tfjob_policy_engine::registry::{PolicyMode, UnavailablePolicy};
use tfjob_policy_engine::{ActivePolicy, PolicyManifest};

/// A ConfigMap's identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The outcome of loading one version of a ConfigMap.
pub enum Attempt {
    Loaded(Arc<ActivePolicy>),
    Failed {
        /// The manifest, when it could be read (so the failure can be tied to a policy name).
        manifest: Option<Box<PolicyManifest>>,
        error: String,
    },
    /// The module is not at hand yet: it is being pulled from a registry. Like a failure, the
    /// previous version (if any) keeps serving; unlike one, the status says `Pending`.
    Pending {
        manifest: Option<Box<PolicyManifest>>,
        reason: String,
    },
}

/// A version that loaded and can serve.
#[derive(Clone)]
struct Serving {
    policy: Arc<ActivePolicy>,
    loaded_at: Timestamp,
}

struct Source {
    /// Fingerprint of the content last attempted; updates that do not change it (our own
    /// status annotation, labels) cause no reload.
    fingerprint: String,
    /// The ConfigMap's creation time: the newest of several ConfigMaps of one policy serves.
    created: Option<Timestamp>,
    serving: Option<Serving>,
    /// Why the latest version failed to load, if it did (or what it waits for, when pending).
    failure: Option<String>,
    /// The latest version waits for its module rather than having failed.
    pending: bool,
    /// The latest readable manifest.
    declared: Option<PolicyManifest>,
    /// `resourceVersion` of the ConfigMap version last attempted (the status is about it).
    version: Option<String>,
}

/// What the ConfigMaps add up to.
pub struct Composition {
    /// The policies to serve: defaults not replaced, plus each serving ConfigMap policy.
    pub active: Vec<Arc<ActivePolicy>>,
    /// Policies that never loaded and that nothing else serves.
    pub unavailable: Vec<UnavailablePolicy>,
    /// The status each ConfigMap should carry.
    pub statuses: BTreeMap<SourceKey, PolicyStatus>,
    /// The ConfigMaps whose policy serves, with the version serving: a breaker of that version
    /// (its name, mode and fingerprint) is reported on that ConfigMap.
    pub serving: BTreeMap<SourceKey, Arc<ActivePolicy>>,
}

/// The ConfigMaps beyond `max` in their namespace: each namespace keeps its `max` oldest
/// (by creation, then name), so a flood of new ConfigMaps cannot push out what already serves.
pub fn over_cap(
    observed: &[(SourceKey, Option<Timestamp>)],
    max: usize,
) -> std::collections::BTreeSet<SourceKey> {
    let mut by_namespace: BTreeMap<&str, Vec<(Option<Timestamp>, &SourceKey)>> = BTreeMap::new();
    for (key, created) in observed {
        by_namespace
            .entry(key.namespace.as_str())
            .or_default()
            .push((*created, key));
    }
    by_namespace
        .into_values()
        .flat_map(|mut keys| {
            keys.sort();
            keys.into_iter().skip(max).map(|(_, k)| k.clone())
        })
        .collect()
}

/// Every policy ConfigMap seen, with its serving and latest versions.
#[derive(Default)]
pub struct Sources {
    sources: BTreeMap<SourceKey, Source>,
}

impl Sources {
    pub fn new() -> Sources {
        Sources::default()
    }

    /// Whether this content was already attempted (nothing to load).
    pub fn is_current(&self, key: &SourceKey, fingerprint: &str) -> bool {
        self.sources
            .get(key)
            .is_some_and(|s| s.fingerprint == fingerprint)
    }

    pub fn keys(&self) -> impl Iterator<Item = &SourceKey> {
        self.sources.keys()
    }

    /// Records the result of loading a new version of `key`.
    pub fn record(
        &mut self,
        key: SourceKey,
        fingerprint: String,
        created: Option<Timestamp>,
        version: Option<String>,
        attempt: Attempt,
        now: Timestamp,
    ) {
        let source = self.sources.entry(key).or_insert_with(|| Source {
            fingerprint: String::new(),
            created,
            serving: None,
            failure: None,
            pending: false,
            declared: None,
            version: None,
        });
        source.fingerprint = fingerprint;
        source.version = version;
        source.created = created;
        match attempt {
            Attempt::Loaded(policy) => {
                source.declared = Some(policy.manifest.clone());
                source.serving = Some(Serving {
                    policy,
                    loaded_at: now,
                });
                source.failure = None;
                source.pending = false;
            }
            Attempt::Failed { manifest, error } => {
                if let Some(manifest) = manifest {
                    source.declared = Some(*manifest);
                }
                source.failure = Some(error);
                source.pending = false;
            }
            Attempt::Pending { manifest, reason } => {
                if let Some(manifest) = manifest {
                    source.declared = Some(*manifest);
                }
                source.failure = Some(reason);
                source.pending = true;
            }
        }
    }

    /// Forgets a deleted ConfigMap; true if it was known.
    pub fn remove(&mut self, key: &SourceKey) -> bool {
        self.sources.remove(key).is_some()
    }

    /// Composes the defaults and the ConfigMaps.
    pub fn compose(&self, defaults: &[Arc<ActivePolicy>]) -> Composition {
        // The winner of each (policy name, mode): the newest ConfigMap with a serving version.
        let mut winners: BTreeMap<(String, PolicyMode), (&SourceKey, &Source)> = BTreeMap::new();
        for (key, source) in &self.sources {
            let Some(serving) = &source.serving else {
                continue;
            };
            let slot = (
                serving.policy.name().to_owned(),
                serving.policy.manifest.mode,
            );
            let newer = winners
                .get(&slot)
                .is_none_or(|(k, s)| (source.created, key) > (s.created, *k));
            if newer {
                winners.insert(slot, (key, source));
            }
        }

        let mut statuses = BTreeMap::new();
        let mut unavailable = Vec::new();
        for (key, source) in &self.sources {
            let status = match &source.serving {
                Some(serving) => {
                    let slot = (
                        serving.policy.name().to_owned(),
                        serving.policy.manifest.mode,
                    );
                    let (winner, _) = winners[&slot];
                    let digest = serving.policy.compiled.digest.as_str();
                    if winner != key {
                        PolicyStatus::superseded(digest, &winner.to_string(), serving.loaded_at)
                    } else if let Some(error) = &source.failure {
                        PolicyStatus {
                            state: if source.pending {
                                PolicyState::Pending
                            } else {
                                PolicyState::Rejected
                            },
                            error: Some(format!(
                                "{error} (the previous version {} still serves)",
                                serving.policy.label()
                            )),
                            ..PolicyStatus::active(digest, serving.loaded_at)
                        }
                    } else {
                        PolicyStatus::active(digest, serving.loaded_at)
                    }
                }
                None => {
                    let error = source.failure.clone().unwrap_or_default();
                    if let Some(manifest) = &source.declared {
                        let served = winners.contains_key(&(manifest.name.clone(), manifest.mode))
                            || (manifest.mode == PolicyMode::Enforce
                                && defaults.iter().any(|d| d.name() == manifest.name));
                        if !served && manifest.mode == PolicyMode::Enforce {
                            unavailable.push(UnavailablePolicy {
                                manifest: manifest.clone(),
                                source: key.to_string(),
                                error: error.clone(),
                            });
                        }
                    }
                    let (state, consequence) = if source.pending {
                        (PolicyState::Pending, "not applied until it is pulled")
                    } else {
                        (
                            PolicyState::Rejected,
                            "never loaded: the policy is not applied",
                        )
                    };
                    PolicyStatus {
                        state,
                        digest: None,
                        loaded_at: None,
                        error: Some(format!("{error} ({consequence})")),
                        resource_version: None,
                        scope: None,
                        granted: None,
                        signed_by: None,
                        breaker: None,
                        module: None,
                        memory_bytes: None,
                    }
                }
            };
            let granted = source
                .serving
                .as_ref()
                .map(|s| s.policy.allowed.grants().clone())
                .filter(|g| !g.is_empty());
            let status = PolicyStatus {
                resource_version: source.version.clone(),
                granted,
                ..status
            };
            statuses.insert(key.clone(), status);
        }

        let mut active: Vec<Arc<ActivePolicy>> = defaults
            .iter()
            .filter(|d| !winners.contains_key(&(d.name().to_owned(), PolicyMode::Enforce)))
            .cloned()
            .collect();
        let serving: BTreeMap<SourceKey, Arc<ActivePolicy>> = winners
            .values()
            .filter_map(|(k, s)| Some(((*k).clone(), Arc::clone(&s.serving.as_ref()?.policy))))
            .collect();
        active.extend(
            winners
                .values()
                .filter_map(|(_, s)| Some(Arc::clone(&s.serving.as_ref()?.policy))),
        );
        Composition {
            active,
            unavailable,
            statuses,
            serving,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_policy_engine::{PolicyEngine, SandboxLimits, defaults};

    /// The default policies, compiled once for all tests of this module.
    fn defaults() -> Vec<Arc<ActivePolicy>> {
        static DEFAULTS: std::sync::OnceLock<Vec<Arc<ActivePolicy>>> = std::sync::OnceLock::new();
        DEFAULTS
            .get_or_init(|| {
                let engine = PolicyEngine::new(SandboxLimits::default()).unwrap();
                defaults::load_defaults(&engine, &Default::default())
                    .unwrap()
                    .into_iter()
                    .map(Arc::new)
                    .collect()
            })
            .clone()
    }

    /// A ConfigMap policy: a default policy's module under another name and mode.
    fn policy(name: &str, mode: PolicyMode) -> Arc<ActivePolicy> {
        let base = &defaults()[0];
        let mut manifest = base.manifest.clone();
        manifest.name = name.to_owned();
        manifest.mode = mode;
        let mut policy = ActivePolicy::clone(base);
        policy.manifest = manifest;
        Arc::new(policy)
    }

    #[test]
    fn each_namespace_keeps_its_oldest_configmaps_up_to_the_cap() {
        let k = |ns: &str, name: &str| SourceKey {
            namespace: ns.into(),
            name: name.into(),
        };
        let observed = vec![
            (k("a", "new"), Some(at(30))),
            (k("a", "old"), Some(at(10))),
            (k("a", "mid"), Some(at(20))),
            (k("b", "only"), Some(at(40))),
        ];
        assert_eq!(
            over_cap(&observed, 2),
            std::collections::BTreeSet::from([k("a", "new")])
        );
        assert!(over_cap(&observed, 3).is_empty());
        assert_eq!(over_cap(&observed, 0).len(), 4);
    }

    fn key(name: &str) -> SourceKey {
        SourceKey {
            namespace: "tfjob-system".into(),
            name: name.into(),
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn loaded(sources: &mut Sources, cm: &str, created: i64, p: Arc<ActivePolicy>) {
        let print = format!("{cm}-{}", p.name());
        sources.record(
            key(cm),
            print,
            Some(at(created)),
            Some("1".into()),
            Attempt::Loaded(p),
            at(100),
        );
    }

    fn failed(sources: &mut Sources, cm: &str, manifest: Option<PolicyManifest>) {
        sources.record(
            key(cm),
            format!("{cm}-broken"),
            Some(at(0)),
            Some("2".into()),
            Attempt::Failed {
                manifest: manifest.map(Box::new),
                error: "module does not compile".into(),
            },
            at(200),
        );
    }

    fn names(c: &Composition) -> Vec<String> {
        let mut v: Vec<String> = c
            .active
            .iter()
            .map(|p| format!("{}:{:?}", p.name(), p.manifest.mode))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_configmap_policy_replaces_the_default_of_its_name_until_deleted() {
        let defaults = defaults();
        let default_name = defaults[0].name().to_owned();
        let mut sources = Sources::new();
        loaded(
            &mut sources,
            "cm-a",
            0,
            policy(&default_name, PolicyMode::Enforce),
        );
        let c = sources.compose(&defaults);
        assert_eq!(c.active.len(), defaults.len());
        let serving = c.active.iter().find(|p| p.name() == default_name).unwrap();
        assert!(
            !Arc::ptr_eq(serving, &defaults[0]),
            "the ConfigMap version serves"
        );
        assert_eq!(c.statuses[&key("cm-a")].state, PolicyState::Active);

        sources.remove(&key("cm-a"));
        let c = sources.compose(&defaults);
        let serving = c.active.iter().find(|p| p.name() == default_name).unwrap();
        assert!(Arc::ptr_eq(serving, &defaults[0]), "the default is back");
    }

    #[test]
    fn a_failed_update_keeps_the_last_good_version_and_says_rejected() {
        let mut sources = Sources::new();
        let good = policy("team-labels", PolicyMode::Enforce);
        loaded(&mut sources, "cm-a", 0, Arc::clone(&good));
        failed(&mut sources, "cm-a", Some(good.manifest.clone()));
        let c = sources.compose(&[]);
        assert!(Arc::ptr_eq(&c.active[0], &good));
        let status = &c.statuses[&key("cm-a")];
        assert_eq!(status.state, PolicyState::Rejected);
        assert_eq!(
            status.digest.as_deref(),
            Some(good.compiled.digest.as_str())
        );
        let error = status.error.as_deref().unwrap();
        assert!(error.contains("module does not compile"), "{error}");
        assert!(error.contains("still serves"), "{error}");
        assert!(c.unavailable.is_empty());
        assert_eq!(status.resource_version.as_deref(), Some("2"));
    }

    #[test]
    fn the_newest_configmap_of_a_policy_serves_and_the_others_are_superseded() {
        let mut sources = Sources::new();
        let old = policy("team-labels", PolicyMode::Enforce);
        let new = policy("team-labels", PolicyMode::Enforce);
        loaded(&mut sources, "v1", 0, Arc::clone(&old));
        loaded(&mut sources, "v2", 10, Arc::clone(&new));
        let c = sources.compose(&[]);
        assert_eq!(c.active.len(), 1);
        assert!(Arc::ptr_eq(&c.active[0], &new));
        assert_eq!(c.statuses[&key("v2")].state, PolicyState::Active);
        assert_eq!(
            c.serving.keys().collect::<Vec<_>>(),
            vec![&key("v2")],
            "only the serving ConfigMap reports the breaker"
        );
        let superseded = &c.statuses[&key("v1")];
        assert_eq!(superseded.state, PolicyState::Superseded);
        assert!(
            superseded
                .error
                .as_deref()
                .unwrap()
                .contains("tfjob-system/v2"),
            "{superseded:?}"
        );
        // Rolling back is deleting the newer one.
        sources.remove(&key("v2"));
        let c = sources.compose(&[]);
        assert!(Arc::ptr_eq(&c.active[0], &old));
        assert_eq!(c.statuses[&key("v1")].state, PolicyState::Active);
    }

    #[test]
    fn a_shadow_policy_serves_beside_the_enforced_one_of_the_same_name() {
        let defaults = defaults();
        let default_name = defaults[0].name().to_owned();
        let mut sources = Sources::new();
        loaded(
            &mut sources,
            "shadow",
            0,
            policy(&default_name, PolicyMode::Shadow),
        );
        let c = sources.compose(&defaults);
        assert_eq!(c.active.len(), defaults.len() + 1);
        assert!(names(&c).contains(&format!("{default_name}:Shadow")));
        assert!(names(&c).contains(&format!("{default_name}:Enforce")));
    }

    #[test]
    fn a_policy_that_never_loaded_is_unavailable_unless_something_serves_its_name() {
        let defaults = defaults();
        let mut sources = Sources::new();
        let manifest = policy("team-labels", PolicyMode::Enforce).manifest.clone();
        failed(&mut sources, "cm-new", Some(manifest));
        failed(&mut sources, "cm-unreadable", None);
        let mut replaces_default = defaults[0].manifest.clone();
        replaces_default.mode = PolicyMode::Enforce;
        failed(&mut sources, "cm-default", Some(replaces_default));
        let c = sources.compose(&defaults);
        assert_eq!(c.active.len(), defaults.len(), "{:?}", names(&c));
        let unavailable: Vec<_> = c
            .unavailable
            .iter()
            .map(|u| u.manifest.name.clone())
            .collect();
        assert_eq!(unavailable, vec!["team-labels".to_owned()]);
        assert_eq!(c.unavailable[0].source, "tfjob-system/cm-new");
        for cm in ["cm-new", "cm-unreadable", "cm-default"] {
            let status = &c.statuses[&key(cm)];
            assert_eq!(status.state, PolicyState::Rejected, "{cm}");
            assert!(status.digest.is_none());
            assert!(status.error.as_deref().unwrap().contains("never loaded"));
        }
    }

    #[test]
    fn content_already_attempted_is_not_loaded_again() {
        let mut sources = Sources::new();
        loaded(&mut sources, "cm-a", 0, policy("p", PolicyMode::Enforce));
        assert!(sources.is_current(&key("cm-a"), "cm-a-p"));
        assert!(!sources.is_current(&key("cm-a"), "other"));
        assert!(!sources.is_current(&key("cm-b"), "cm-a-p"));
    }
}
