//! Active policies: manifests, activation (compile, check hooks, validate settings) and the
//! registry, an immutable snapshot swapped atomically while reconciles run.
//!
//! Order of evaluation: ascending `order`, then name. Decoration policies run first, each on
//! the previous one's output; then resource policies, each container in order; the first
//! classification policy that answers decides. Only `Enforce` policies whose selector matches
//! the job take part; `Shadow` policies are left to the caller to evaluate on the side.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::capabilities::Capabilities;
use crate::cluster_reads::{ReadCeiling, ReadDeclaration, ReadGrant};
use crate::config::{CallLimits, LimitError};
use crate::engine::{CompiledPolicy, Hook, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::guard::AllowedPaths;
use crate::loaded_budget::Reservation;
use crate::settings_uses::SettingsUse;

/// What happens to a pod when a policy fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// The reconcile fails and is retried with backoff (an event says why).
    #[default]
    Fail,
    /// The policy is skipped for that pod (an event and a log line say so).
    Ignore,
}

/// Whether a policy's decisions are applied.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum PolicyMode {
    /// Its decisions shape and classify pods.
    #[default]
    Enforce,
    /// It is evaluated next to the enforced policies and its decisions are only reported, so a
    /// new policy can be watched on real jobs before it is trusted.
    Shadow,
}

/// How a label expression compares a job's label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// The label is set to one of the values.
    In,
    /// The label is not set, or set to none of the values.
    NotIn,
    /// The label is set.
    Exists,
    /// The label is not set.
    DoesNotExist,
}

/// One requirement on a job's labels, as in a Kubernetes label selector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelExpression {
    pub key: String,
    pub operator: SelectorOperator,
    /// Non-empty for `In` and `NotIn`, empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelExpression {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Which jobs a policy applies to. Every part must match; an empty selector matches every job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobSelector {
    /// Namespaces of the jobs; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Labels the job must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelExpression>,
}

impl JobSelector {
    /// Whether a job in `namespace` with `labels` is selected.
    pub fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        *self == JobSelector::default()
    }

    /// Refuses expressions Kubernetes would refuse, naming the field: a selector that can never
    /// match (or always matches) by mistake would silently switch a policy off (or on).
    pub fn validate(&self) -> Result<(), ManifestError> {
        let field = |path: String, message: &str| ManifestError {
            field: format!("selector.{path}"),
            message: message.to_owned(),
        };
        for (i, n) in self.namespaces.iter().enumerate() {
            if n.is_empty() {
                return Err(field(format!("namespaces[{i}]"), "must not be empty"));
            }
        }
        for (i, e) in self.match_expressions.iter().enumerate() {
            if e.key.is_empty() {
                return Err(field(format!("matchExpressions[{i}].key"), "must be set"));
            }
            let needs_values = matches!(e.operator, SelectorOperator::In | SelectorOperator::NotIn);
            if needs_values && e.values.is_empty() {
                return Err(field(
                    format!("matchExpressions[{i}].values"),
                    "must be non-empty for In and NotIn",
                ));
            }
            if !needs_values && !e.values.is_empty() {
                return Err(field(
                    format!("matchExpressions[{i}].values"),
                    "must be empty for Exists and DoesNotExist",
                ));
            }
        }
        Ok(())
    }
}

/// How a policy is configured: the `policy.yaml` next to a `.wasm`, or in a policy ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyManifest {
    pub name: String,
    /// Hooks to run it for; each must be exported by the component.
    pub hooks: Vec<Hook>,
    #[serde(default)]
    pub order: i32,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    #[serde(default)]
    pub mode: PolicyMode,
    /// The jobs it applies to [default: all].
    #[serde(default, skip_serializing_if = "JobSelector::is_empty")]
    pub selector: JobSelector,
    /// The settings document handed to every call (JSON or YAML in the manifest).
    #[serde(default)]
    pub settings: serde_json::Value,
    /// Paths the policy may change beyond the default ones (e.g. `spec.topologySpreadConstraints`).
    #[serde(default)]
    pub allowed_paths: Vec<String>,
    /// What it may add beyond plain decoration (secrets, tokens, host paths, external volumes);
    /// granted only within the operator's ceiling.
    #[serde(default, skip_serializing_if = "Capabilities::is_empty")]
    pub capabilities: Capabilities,
    /// The cluster objects it reads (see `cluster_reads.rs`); granted only within the
    /// operator's read ceiling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<ReadDeclaration>,
    /// Its own deadline per call, at most the operator's [default: the operator's].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Its own memory cap per call, at most the operator's [default: the operator's].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// The sha256 (hex) the module must have; anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The policy namespace whose share of the engine its calls draw on, set when a policy
    /// from a namespace is confined to it; never read from the manifest itself, so no policy
    /// can claim another team's share or the cluster-wide policies' reserve.
    #[serde(skip)]
    pub tenant: Option<String>,
}

/// A manifest field that is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("manifest field {field}: {message}")]
pub struct ManifestError {
    /// The field's path, e.g. `selector.matchExpressions[0].values`; `.` for the whole document.
    pub field: String,
    pub message: String,
}

impl PolicyManifest {
    /// Parses a YAML (or JSON) manifest; `default_name` fills a missing `name`. Errors name the
    /// field's path.
    pub fn from_yaml(text: &str, default_name: &str) -> Result<PolicyManifest, ManifestError> {
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| ManifestError {
                field: ".".into(),
                message: format!("not valid YAML: {e}"),
            })?;
        PolicyManifest::from_value(value, default_name)
    }

    /// [`PolicyManifest::from_yaml`] of a document already parsed.
    pub fn from_value(
        mut value: serde_yaml_ng::Value,
        default_name: &str,
    ) -> Result<PolicyManifest, ManifestError> {
        if let serde_yaml_ng::Value::Mapping(m) = &mut value {
            let key = serde_yaml_ng::Value::from("name");
            if !m.contains_key(&key) {
                m.insert(key, serde_yaml_ng::Value::from(default_name));
            }
        }
        serde_path_to_error::deserialize::<_, PolicyManifest>(value).map_err(|e| ManifestError {
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }

    /// The fields that need no module to check: name, hooks, selector, allowed paths, the
    /// capabilities against the operator's `ceiling` and the shape of `sha256`. Returns what
    /// the policy may change.
    pub fn validate(&self, ceiling: &Capabilities) -> Result<AllowedPaths, ManifestError> {
        let field = |field: &str, message: String| ManifestError {
            field: field.into(),
            message,
        };
        if self.name.trim().is_empty() {
            return Err(field("name", "must be set".into()));
        }
        if self.hooks.is_empty() {
            return Err(field("hooks", "must name at least one hook".into()));
        }
        if let Some(expected) = &self.sha256
            && (expected.len() != 64 || !expected.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(field(
                "sha256",
                format!("{expected:?} is not a sha256 digest (64 hex digits)"),
            ));
        }
        self.selector.validate()?;
        let grants = self
            .capabilities
            .grant(ceiling)
            .map_err(|(at, e)| field(&format!("capabilities.{at}"), e))?;
        Ok(
            AllowedPaths::with_extra(self.allowed_paths.iter().map(String::as_str))
                .map_err(|e| field("allowedPaths", e))?
                .granting(grants),
        )
    }

    /// The cluster reads it declares, granted within `ceiling`: as a cluster-wide policy, or
    /// confined to its namespace when it has a tenant. The error names the entry.
    pub fn grant_reads(&self, ceiling: &ReadCeiling) -> Result<Vec<ReadGrant>, ManifestError> {
        ceiling
            .grant(&self.reads, self.tenant.as_deref())
            .map_err(|(field, message)| ManifestError { field, message })
    }
}

/// Why a policy could not be activated, by step.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActivationError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Limits(#[from] LimitError),
    #[error("manifest field sha256: expected {expected} but the module's digest is {actual}")]
    Digest { expected: String, actual: String },
    /// Not a component, or it imports what the sandbox does not provide.
    #[error("the module does not load: {0}")]
    Compile(EvalError),
    #[error(
        "manifest field hooks: declares {hook} but the module does not export {}",
        hook.interface()
    )]
    Hooks { hook: Hook },
    /// `validate-settings` refused the settings, or failed.
    #[error("manifest field settings: {0}")]
    Settings(EvalError),
}

impl From<ActivationError> for EvalError {
    fn from(e: ActivationError) -> EvalError {
        let category = match &e {
            ActivationError::Manifest(_) | ActivationError::Limits(_) => Category::Settings,
            ActivationError::Digest { .. } | ActivationError::Hooks { .. } => Category::Link,
            ActivationError::Compile(inner) | ActivationError::Settings(inner) => inner.category,
        };
        let message = match e {
            ActivationError::Compile(inner) | ActivationError::Settings(inner) => inner.message,
            other => other.to_string(),
        };
        EvalError::new(category, message)
    }
}

/// A policy ready to run.
#[derive(Clone, Debug)]
pub struct ActivePolicy {
    pub manifest: PolicyManifest,
    /// `manifest.settings` as JSON text, as the guest receives it.
    pub settings: String,
    pub allowed: AllowedPaths,
    /// Its deadline and memory cap per call: the operator's, or the manifest's smaller ones.
    pub limits: CallLimits,
    pub compiled: Arc<CompiledPolicy>,
    /// The cluster reads it was granted (none unless its manifest declares `reads`).
    pub reads: Arc<[ReadGrant]>,
    /// [`ActivePolicy::fingerprint`], hashed once: every call asks for it (its breaker, the
    /// verdict cache).
    fingerprint: String,
    /// What it holds of the budget of loaded policies while it serves (none: not charged, as
    /// the built-in policies are not); given back when the last copy of it is dropped.
    reservation: Option<Arc<Reservation>>,
    /// Keeps the module's copy pre-initialised for `settings` while it lives.
    _settings_use: Arc<SettingsUse>,
}

impl ActivePolicy {
    /// A policy of `compiled` with `settings` (the manifest's, as JSON text).
    pub fn new(
        manifest: PolicyManifest,
        settings: String,
        allowed: AllowedPaths,
        limits: CallLimits,
        compiled: Arc<CompiledPolicy>,
    ) -> ActivePolicy {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(compiled.digest.as_bytes());
        h.update([0]);
        h.update(settings.as_bytes());
        let settings_use = Arc::new(compiled.use_settings(&settings));
        ActivePolicy {
            manifest,
            settings,
            allowed,
            limits,
            compiled,
            reads: Arc::from([]),
            fingerprint: hex::encode(h.finalize()),
            reservation: None,
            _settings_use: settings_use,
        }
    }

    /// This version, holding `reservation` of the budget of loaded policies while it serves.
    pub fn holding(mut self, reservation: Reservation) -> ActivePolicy {
        self.reservation = Some(Arc::new(reservation));
        self
    }

    /// The bytes it was charged when it loaded, if it is charged.
    pub fn charged_bytes(&self) -> Option<u64> {
        self.reservation.as_ref().map(|r| r.charged)
    }

    /// `name@short-digest`, as recorded on pods and in messages.
    pub fn label(&self) -> String {
        format!("{}@{}", self.manifest.name, self.compiled.short_digest())
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// What its decisions depend on besides their inputs: the module and the settings, as a
    /// hex sha256. Two activations of the same module with the same settings decide alike.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn runs(&self, hook: Hook) -> bool {
        self.manifest.hooks.contains(&hook)
    }

    /// Whether its decisions are applied to a job in `namespace` with `labels`.
    pub fn enforced_for(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.manifest.mode == PolicyMode::Enforce
            && self.manifest.selector.matches(namespace, labels)
    }
}

/// Compiles `wasm`, checks it exports the declared hooks, checks the allowed paths and runs
/// `validate-settings`. Any failure leaves nothing activated.
pub fn activate(
    engine: &PolicyEngine,
    manifest: PolicyManifest,
    wasm: &[u8],
) -> Result<ActivePolicy, EvalError> {
    activate_checked(engine, manifest, wasm).map_err(EvalError::from)
}

/// [`activate`], with the step that failed: the manifest's own fields and limits first (no
/// need to compile a module whose manifest is wrong), then compilation (once per digest), the
/// digest pin, the exported hooks, and `validate-settings` within the policy's own limits.
pub fn activate_checked(
    engine: &PolicyEngine,
    manifest: PolicyManifest,
    wasm: &[u8],
) -> Result<ActivePolicy, ActivationError> {
    let allowed = manifest.validate(&engine.limits().ceiling)?;
    let reads = manifest.grant_reads(&engine.limits().reads)?;
    let mut limits = engine
        .limits()
        .narrow(manifest.deadline_ms, manifest.memory_mib)?;
    limits.tenant = manifest.tenant.as_deref().map(Arc::from);
    let compiled = engine.compile(wasm).map_err(ActivationError::Compile)?;
    if let Some(expected) = &manifest.sha256
        && !expected.eq_ignore_ascii_case(&compiled.digest)
    {
        return Err(ActivationError::Digest {
            expected: expected.clone(),
            actual: compiled.digest.clone(),
        });
    }
    let exported = compiled.hooks();
    if let Some(&hook) = manifest.hooks.iter().find(|h| !exported.contains(h)) {
        return Err(ActivationError::Hooks { hook });
    }
    let settings = match &manifest.settings {
        serde_json::Value::Null => "{}".to_owned(),
        other => other.to_string(),
    };
    engine
        .limited(limits.clone())
        .validate_settings(&compiled, &manifest.name, &settings)
        .map_err(ActivationError::Settings)?;
    let mut active = ActivePolicy::new(manifest, settings, allowed, limits, compiled);
    active.reads = reads.into();
    Ok(active)
}

/// A configured policy that never loaded: nothing serves its name, so the jobs it selects
/// must hear about it (and, under `Fail`, wait for it).
#[derive(Clone, Debug)]
pub struct UnavailablePolicy {
    pub manifest: PolicyManifest,
    /// Where it was configured, e.g. `namespace/configmap`.
    pub source: String,
    /// Why it did not load.
    pub error: String,
}

impl UnavailablePolicy {
    /// Whether it would have run for `hook` on a job in `namespace` with `labels`.
    pub fn selects(&self, hook: Hook, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.manifest.hooks.contains(&hook) && self.manifest.selector.matches(namespace, labels)
    }
}

/// An immutable set of active policies.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Arc<ActivePolicy>>,
    unavailable: Vec<UnavailablePolicy>,
}

impl PolicySet {
    /// A set ordered by `order`, then name. A later policy with the name and mode of an earlier
    /// one replaces it (so a configured policy can replace a default one); a `Shadow` policy
    /// sits beside the enforced one of its name.
    pub fn new(policies: impl IntoIterator<Item = ActivePolicy>) -> PolicySet {
        PolicySet::with_unavailable(policies.into_iter().map(Arc::new), Vec::new())
    }

    /// A set of shared policies, plus the configured policies that never loaded.
    pub fn with_unavailable(
        policies: impl IntoIterator<Item = Arc<ActivePolicy>>,
        unavailable: Vec<UnavailablePolicy>,
    ) -> PolicySet {
        let mut list: Vec<Arc<ActivePolicy>> = Vec::new();
        for p in policies {
            list.retain(|q| q.name() != p.name() || q.manifest.mode != p.manifest.mode);
            list.push(p);
        }
        list.sort_by(|a, b| (a.manifest.order, a.name()).cmp(&(b.manifest.order, b.name())));
        PolicySet {
            policies: list,
            unavailable,
        }
    }

    /// Configured policies that never loaded and would run for `hook` on this job.
    pub fn unavailable_for<'a>(
        &'a self,
        hook: Hook,
        namespace: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a UnavailablePolicy> {
        self.unavailable
            .iter()
            .filter(move |u| u.selects(hook, namespace, labels))
    }

    pub fn unavailable(&self) -> &[UnavailablePolicy] {
        &self.unavailable
    }

    /// Policies that run for `hook`, in evaluation order, whatever their mode and selector.
    pub fn for_hook(&self, hook: Hook) -> impl Iterator<Item = &Arc<ActivePolicy>> {
        self.policies.iter().filter(move |p| p.runs(hook))
    }

    /// Policies whose decisions are applied for `hook` to a job in `namespace` with `labels`,
    /// in evaluation order: `Enforce` policies whose selector matches.
    pub fn enforced<'a>(
        &'a self,
        hook: Hook,
        namespace: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Arc<ActivePolicy>> {
        self.for_hook(hook)
            .filter(move |p| p.enforced_for(namespace, labels))
    }

    /// `Shadow` policies for `hook` whose selector matches the job, in evaluation order.
    pub fn shadowing<'a>(
        &'a self,
        hook: Hook,
        namespace: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Arc<ActivePolicy>> {
        self.for_hook(hook).filter(move |p| {
            p.manifest.mode == PolicyMode::Shadow && p.manifest.selector.matches(namespace, labels)
        })
    }

    pub fn all(&self) -> &[Arc<ActivePolicy>] {
        &self.policies
    }

    /// The enforced policy called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Arc<ActivePolicy>> {
        self.policies
            .iter()
            .find(|p| p.name() == name && p.manifest.mode == PolicyMode::Enforce)
    }
}

/// The current policy set. Readers take a snapshot and keep using it for a whole evaluation, so
/// a swap never mixes two versions within one pod.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<PolicySet>,
    /// Told of every swap, for what follows the active set (the caches policies read).
    swapped: tokio::sync::watch::Sender<()>,
}

impl Registry {
    pub fn new(set: PolicySet) -> Registry {
        Registry::fixed(Arc::new(set))
    }

    /// A registry that keeps serving `set` (shared, not copied).
    pub fn fixed(set: Arc<PolicySet>) -> Registry {
        Registry {
            current: ArcSwap::new(set),
            swapped: tokio::sync::watch::Sender::new(()),
        }
    }

    pub fn snapshot(&self) -> Arc<PolicySet> {
        self.current.load_full()
    }

    /// Replaces the set; evaluations in flight finish with the one they started with.
    pub fn swap(&self, set: PolicySet) {
        self.current.store(Arc::new(set));
        self.swapped.send_replace(());
    }

    /// Changes once per [`Registry::swap`] (a receiver sees at least the latest).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.swapped.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expression(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelExpression {
        LabelExpression {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    #[test]
    fn selectors_match_like_kubernetes_label_selectors() {
        let all = JobSelector::default();
        assert!(all.matches("any", &labels(&[])));
        let selector = JobSelector {
            namespaces: vec!["ml".into(), "vision".into()],
            match_labels: labels(&[("team", "cv")]),
            match_expressions: vec![
                expression("tier", SelectorOperator::In, &["gold", "silver"]),
                expression("legacy", SelectorOperator::DoesNotExist, &[]),
            ],
        };
        let job = labels(&[("team", "cv"), ("tier", "gold")]);
        assert!(selector.matches("ml", &job));
        assert!(selector.matches("vision", &job));
        assert!(!selector.matches("default", &job), "namespace");
        assert!(
            !selector.matches("ml", &labels(&[("tier", "gold")])),
            "matchLabels"
        );
        assert!(
            !selector.matches("ml", &labels(&[("team", "cv"), ("tier", "bronze")])),
            "In"
        );
        assert!(
            !selector.matches("ml", &labels(&[("team", "cv")])),
            "In needs the label"
        );
        let mut legacy = job.clone();
        legacy.insert("legacy".into(), "".into());
        assert!(!selector.matches("ml", &legacy), "DoesNotExist");

        let not_in = JobSelector {
            match_expressions: vec![
                expression("tier", SelectorOperator::NotIn, &["bronze"]),
                expression("team", SelectorOperator::Exists, &[]),
            ],
            ..JobSelector::default()
        };
        assert!(
            not_in.matches("x", &labels(&[("team", "a")])),
            "NotIn holds without the label"
        );
        assert!(not_in.matches("x", &labels(&[("team", "a"), ("tier", "gold")])));
        assert!(!not_in.matches("x", &labels(&[("team", "a"), ("tier", "bronze")])));
        assert!(!not_in.matches("x", &labels(&[("tier", "gold")])), "Exists");
    }

    #[test]
    fn no_manifest_can_name_the_share_it_draws_on() {
        let err = PolicyManifest::from_yaml("hooks: [decorate]\ntenant: team-b\n", "p")
            .expect_err("the tenant is the operator's to set");
        assert!(err.to_string().contains("tenant"), "{err}");
    }

    #[test]
    fn manifests_read_the_new_fields_in_camel_case() {
        let m = PolicyManifest::from_yaml(
            "hooks: [classify]\nmode: Shadow\ndeadlineMs: 20\nmemoryMib: 16\n\
             selector:\n  namespaces: [ml]\n  matchLabels: {team: cv}\n  \
             matchExpressions: [{key: tier, operator: NotIn, values: [bronze]}]\n",
            "p",
        )
        .unwrap();
        assert_eq!(m.mode, PolicyMode::Shadow);
        assert_eq!((m.deadline_ms, m.memory_mib), (Some(20), Some(16)));
        assert_eq!(m.selector.namespaces, vec!["ml"]);
        assert_eq!(m.selector.match_labels, labels(&[("team", "cv")]));
        assert_eq!(
            m.selector.match_expressions,
            vec![expression("tier", SelectorOperator::NotIn, &["bronze"])]
        );
        // Serialised back, empty optional fields stay out and the rest reads back the same.
        let text = serde_yaml_ng::to_string(&m).unwrap();
        assert!(!text.contains("sha256"), "{text}");
        assert_eq!(PolicyManifest::from_yaml(&text, "other").unwrap(), m);
        let plain =
            serde_yaml_ng::to_string(&PolicyManifest::from_yaml("hooks: [decorate]", "p").unwrap())
                .unwrap();
        assert!(!plain.contains("selector"), "{plain}");

        let err = PolicyManifest::from_yaml(
            "hooks: [classify]\nselector: {matchExpressions: [{key: a, operator: Maybe}]}\n",
            "p",
        )
        .unwrap_err();
        assert_eq!(err.field, "selector.matchExpressions[0].operator", "{err}");
        let m = PolicyManifest::from_yaml(
            "hooks: [classify]\nselector: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}\n",
            "p",
        )
        .unwrap();
        assert_eq!(
            m.validate(&Capabilities::everything()).unwrap_err().field,
            "selector.matchExpressions[0].values"
        );
    }

    #[test]
    fn reads_are_refused_at_activation_naming_the_entry_before_anything_compiles() {
        let engine = PolicyEngine::new(crate::SandboxLimits::default()).unwrap();
        let read = |yaml: &str, tenant: Option<&str>| {
            let mut m = PolicyManifest::from_yaml(yaml, "p").unwrap();
            m.tenant = tenant.map(str::to_owned);
            match activate_checked(&engine, m, b"not a module") {
                Err(ActivationError::Manifest(e)) => e.to_string(),
                Err(other) => panic!("{yaml}: refused later, at {other}"),
                Ok(_) => panic!("{yaml}: activated"),
            }
        };
        assert_eq!(
            read("hooks: [decorate]\nreads: [{resource: secrets}]", None),
            "manifest field reads[0].resource: \"secrets\" is never readable by policies (it \
             holds credentials)"
        );
        // Within the default ceiling the manifest passes, and the module is what fails.
        let m = PolicyManifest::from_yaml(
            "hooks: [decorate]\nreads: [{resource: namespaces}, {resource: nodes}]",
            "p",
        )
        .unwrap();
        assert!(matches!(
            activate_checked(&engine, m, b"not a module"),
            Err(ActivationError::Compile(_))
        ));
        assert!(
            read(
                "hooks: [decorate]\nreads: [{resource: nodes}]",
                Some("team-a")
            )
            .contains("--policy-allow-read-in-namespaces")
        );
        assert!(
            read(
                "hooks: [decorate]\nreads: [{resource: configmaps, scope: job-namespace}]",
                None
            )
            .contains("(--policy-allow-read)")
        );
        let err = PolicyManifest::from_yaml(
            "hooks: [decorate]\nreads: [{resource: nodes, scope: everywhere}]",
            "p",
        )
        .unwrap_err();
        assert_eq!(err.field, "reads[0].scope", "{err}");
    }
}
