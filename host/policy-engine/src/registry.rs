//! Active policies: manifests, activation (compile, check hooks, validate settings) and the
//! registry, an immutable snapshot swapped atomically while reconciles run.
//!
//! Order of evaluation: ascending `order`, then name. Decoration policies run first, each on
//! the previous one's output; then resource policies, each container in order; the first
//! classification policy that answers decides.

use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::engine::{CompiledPolicy, Hook, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::guard::AllowedPaths;

/// What happens to a pod when a policy fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// The reconcile fails and is retried with backoff (an event says why).
    #[default]
    Fail,
    /// The policy is skipped for that pod (an event and a log line say so).
    Ignore,
}

/// How a policy is configured: the `policy.yaml` next to a `.wasm`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyManifest {
    pub name: String,
    /// Hooks to run it for; each must be exported by the component.
    pub hooks: Vec<Hook>,
    #[serde(default)]
    pub order: i32,
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// The settings document handed to every call (JSON or YAML in the manifest).
    #[serde(default)]
    pub settings: serde_json::Value,
    /// Paths the policy may change beyond the default ones (e.g. `spec.volumes[*].hostPath`).
    #[serde(default)]
    pub allowed_paths: Vec<String>,
}

/// A policy ready to run.
#[derive(Debug)]
pub struct ActivePolicy {
    pub manifest: PolicyManifest,
    /// `manifest.settings` as JSON text, as the guest receives it.
    pub settings: String,
    pub allowed: AllowedPaths,
    pub compiled: Arc<CompiledPolicy>,
}

impl ActivePolicy {
    /// `name@short-digest`, as recorded on pods and in messages.
    pub fn label(&self) -> String {
        format!("{}@{}", self.manifest.name, self.compiled.short_digest())
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    pub fn runs(&self, hook: Hook) -> bool {
        self.manifest.hooks.contains(&hook)
    }
}

/// Compiles `wasm`, checks it exports the declared hooks, checks the allowed paths and runs
/// `validate-settings`. Any failure leaves nothing activated.
pub fn activate(
    engine: &PolicyEngine,
    manifest: PolicyManifest,
    wasm: &[u8],
) -> Result<ActivePolicy, EvalError> {
    if manifest.name.trim().is_empty() {
        return Err(EvalError::new(
            Category::Settings,
            "manifest field name: must be set",
        ));
    }
    if manifest.hooks.is_empty() {
        return Err(EvalError::new(
            Category::Settings,
            "manifest field hooks: must name at least one hook",
        ));
    }
    let compiled = engine.compile(wasm)?;
    let exported = compiled.hooks();
    for hook in &manifest.hooks {
        if !exported.contains(hook) {
            return Err(EvalError::new(
                Category::Link,
                format!(
                    "manifest declares hook {hook} but the module does not export {}",
                    hook.interface()
                ),
            ));
        }
    }
    let allowed = AllowedPaths::with_extra(manifest.allowed_paths.iter().map(String::as_str))
        .map_err(|e| {
            EvalError::new(
                Category::Settings,
                format!("manifest field allowedPaths: {e}"),
            )
        })?;
    let settings = match &manifest.settings {
        serde_json::Value::Null => "{}".to_owned(),
        other => other.to_string(),
    };
    engine.validate_settings(&compiled, &manifest.name, &settings)?;
    Ok(ActivePolicy {
        manifest,
        settings,
        allowed,
        compiled,
    })
}

/// An immutable set of active policies.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: Vec<Arc<ActivePolicy>>,
}

impl PolicySet {
    /// A set ordered by `order`, then name. A later policy with the name of an earlier one
    /// replaces it (so a configured policy can replace a default one).
    pub fn new(policies: impl IntoIterator<Item = ActivePolicy>) -> PolicySet {
        let mut list: Vec<Arc<ActivePolicy>> = Vec::new();
        for p in policies {
            list.retain(|q| q.name() != p.name());
            list.push(Arc::new(p));
        }
        list.sort_by(|a, b| (a.manifest.order, a.name()).cmp(&(b.manifest.order, b.name())));
        PolicySet { policies: list }
    }

    /// Policies that run for `hook`, in evaluation order.
    pub fn for_hook(&self, hook: Hook) -> impl Iterator<Item = &Arc<ActivePolicy>> {
        self.policies.iter().filter(move |p| p.runs(hook))
    }

    pub fn all(&self) -> &[Arc<ActivePolicy>] {
        &self.policies
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ActivePolicy>> {
        self.policies.iter().find(|p| p.name() == name)
    }
}

/// The current policy set. Readers take a snapshot and keep using it for a whole evaluation, so
/// a swap never mixes two versions within one pod.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<PolicySet>,
}

impl Registry {
    pub fn new(set: PolicySet) -> Registry {
        Registry {
            current: ArcSwap::from_pointee(set),
        }
    }

    pub fn snapshot(&self) -> Arc<PolicySet> {
        self.current.load_full()
    }

    /// Replaces the set; evaluations in flight finish with the one they started with.
    pub fn swap(&self, set: PolicySet) {
        self.current.store(Arc::new(set));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SandboxLimits;
    use crate::defaults::{DEFAULTS, manifest};

    fn active(engine: &PolicyEngine, name: &str, order: i32, hook_of: usize) -> ActivePolicy {
        let d = &DEFAULTS[hook_of];
        let mut m = manifest(d);
        m.name = name.into();
        m.order = order;
        activate(engine, m, d.wasm).unwrap()
    }

    #[test]
    fn sets_order_by_order_then_name_and_later_names_replace_earlier() {
        let engine = PolicyEngine::new(SandboxLimits::default()).unwrap();
        let set = PolicySet::new([
            active(&engine, "b", 5, 0),
            active(&engine, "a", 5, 0),
            active(&engine, "z", -1, 0),
            active(&engine, "a", 7, 0),
            active(&engine, "classify", 0, 2),
        ]);
        let decorate: Vec<(&str, i32)> = set
            .for_hook(Hook::Decorate)
            .map(|p| (p.name(), p.manifest.order))
            .collect();
        assert_eq!(decorate, vec![("z", -1), ("b", 5), ("a", 7)]);
        assert_eq!(set.for_hook(Hook::Classify).count(), 1);
        assert!(set.get("classify").is_some());
    }

    #[test]
    fn a_snapshot_outlives_a_swap() {
        let engine = PolicyEngine::new(SandboxLimits::default()).unwrap();
        let registry = Registry::new(PolicySet::new([active(&engine, "old", 0, 0)]));
        let before = registry.snapshot();
        registry.swap(PolicySet::new([active(&engine, "new", 0, 0)]));
        assert!(
            before.get("old").is_some(),
            "an evaluation in flight keeps its set"
        );
        let after = registry.snapshot();
        assert!(after.get("new").is_some() && after.get("old").is_none());
    }
}
