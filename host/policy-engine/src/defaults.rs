//! The default policies, built from `guest-policies/` and embedded in the operator.
//!
//! They are ordinary policies: loaded through the same activation path (compile, export
//! check, settings validation) and run in the same sandbox as any platform team's policy. A
//! `--policy-config` file overrides their settings, failure policy and order; a configured
//! policy with a default's name replaces that default.

use std::sync::LazyLock;

use sha2::{Digest as _, Sha256};

use crate::builtin;
use crate::capabilities::Capabilities;
use crate::cluster_reads::ReadDeclaration;
use crate::engine::{Hook, PolicyEngine};
use crate::error::{Category, EvalError};
use crate::local::PolicyConfig;
use crate::registry::{ActivePolicy, PolicyManifest, activate};

/// One embedded default policy.
#[derive(Clone, Copy, Debug)]
pub struct DefaultPolicy {
    pub name: &'static str,
    pub hook: Hook,
    pub wasm: &'static [u8],
}

/// The default policies, in evaluation order.
pub const DEFAULTS: [DefaultPolicy; 3] = [
    DefaultPolicy {
        name: "default-decorate",
        hook: Hook::Decorate,
        wasm: builtin::DEFAULT_DECORATE_WASM,
    },
    DefaultPolicy {
        name: "default-resources",
        hook: Hook::Resources,
        wasm: builtin::DEFAULT_RESOURCES_WASM,
    },
    DefaultPolicy {
        name: "default-classify",
        hook: Hook::Classify,
        wasm: builtin::DEFAULT_CLASSIFY_WASM,
    },
];

/// A policy built only to test the sandbox: its settings `{"mode": ...}` pick a hostile
/// behaviour (infinite loop, memory bomb, oversized output, panic, file/env/network access,
/// forbidden pod changes). Never loaded by the operator.
#[doc(hidden)]
pub const HOSTILE_POLICY_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_hostile_policy.wasm"));

pub use crate::builtin::CEL_POLICY_WASM;

/// The sha256 (lower-case hex) of [`CEL_POLICY_WASM`], computed once: every CEL policy read
/// from a ConfigMap names it.
pub fn cel_policy_digest() -> &'static str {
    static DIGEST: LazyLock<String> =
        LazyLock::new(|| hex::encode(Sha256::digest(CEL_POLICY_WASM)));
    &DIGEST
}

/// The default policy of that name.
pub fn find(name: &str) -> Option<&'static DefaultPolicy> {
    DEFAULTS.iter().find(|d| d.name == name)
}

/// The default policy for a hook.
pub fn for_hook(hook: Hook) -> &'static DefaultPolicy {
    DEFAULTS
        .iter()
        .find(|d| d.hook == hook)
        .expect("every hook has a default")
}

/// The host directory with the NVIDIA driver on GPU nodes (GKE's layout), mounted into GPU
/// containers by the default decoration (held with the limits that allow mounting it).
pub use crate::config::NVIDIA_DRIVER_HOST_PATH;

/// The settings the operator runs a default policy with when `--policy-config` gives none:
/// GPU containers get the driver mount and the GPU toleration; everything else uses the
/// policy's own defaults. A `--policy-config` entry replaces the whole document.
///
/// Decoration reads resources as written, before `default-resources` renames the `gpu` alias
/// to `nvidia.com/gpu`, so the alias gets the same entries: a container asking for `gpu` is a
/// GPU container too.
pub fn default_settings(d: &DefaultPolicy) -> serde_json::Value {
    match d.hook {
        Hook::Decorate => {
            let driver = serde_json::json!({
                "volumes": [{
                    "name": "nvidia-driver",
                    "hostPath": NVIDIA_DRIVER_HOST_PATH,
                    "mountPath": "/usr/local/nvidia"
                }],
                "envVars": {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
            });
            let toleration = serde_json::json!([
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ]);
            serde_json::json!({
                "accelerators": {"nvidia.com/gpu": driver, "gpu": driver},
                "resourceTolerations": {"nvidia.com/gpu": toleration, "gpu": toleration}
            })
        }
        Hook::Resources | Hook::Classify => serde_json::json!({}),
    }
}

/// The default manifest of `d`: its own hook, order 0, failure policy `Fail`, the default
/// settings and exactly the capabilities those settings use.
pub fn manifest(d: &DefaultPolicy) -> PolicyManifest {
    let settings = default_settings(d);
    PolicyManifest {
        name: d.name.to_owned(),
        hooks: vec![d.hook],
        capabilities: capabilities_used(&settings),
        settings,
        ..PolicyManifest::default()
    }
}

/// What the default decoration needs for `settings`: the host paths of its accelerator volumes
/// (read-only mounts of driver directories), nothing else. The other defaults need nothing.
pub fn capabilities_used(settings: &serde_json::Value) -> Capabilities {
    let mut host_paths: Vec<String> = settings
        .get("accelerators")
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flat_map(|accelerators| accelerators.values())
        .filter_map(|a| a.get("volumes").and_then(serde_json::Value::as_array))
        .flatten()
        .filter_map(|v| v.get("hostPath").and_then(serde_json::Value::as_str))
        .map(str::to_owned)
        .collect();
    host_paths.sort();
    host_paths.dedup();
    Capabilities {
        host_paths,
        ..Capabilities::default()
    }
}

/// The cluster reads a default needs for `settings`: the decoration's `namespaceLabels` read
/// the job's Namespace, the classification's `failUnschedulable` the nodes; nothing else, so a
/// default that does not use them starts no watch.
pub fn reads_used(hook: Hook, settings: &serde_json::Value) -> Vec<ReadDeclaration> {
    let set = |key: &str| {
        settings.get(key).is_some_and(|v| match v {
            serde_json::Value::Null => false,
            serde_json::Value::Array(items) => !items.is_empty(),
            _ => true,
        })
    };
    let resource = match hook {
        Hook::Decorate if set("namespaceLabels") => "namespaces",
        Hook::Classify if set("failUnschedulable") => "nodes",
        _ => return Vec::new(),
    };
    vec![ReadDeclaration {
        resource: resource.into(),
        scope: None,
    }]
}

/// Activates every default policy with `config` applied. An override for a name that is not a
/// default policy is an error naming it.
pub fn load_defaults(
    engine: &PolicyEngine,
    config: &PolicyConfig,
) -> Result<Vec<ActivePolicy>, EvalError> {
    if let Some(unknown) = config.keys().find(|k| find(k).is_none()) {
        let names: Vec<&str> = DEFAULTS.iter().map(|d| d.name).collect();
        return Err(EvalError::new(
            Category::Settings,
            format!(
                "policy config names {unknown:?}, which is not a default policy ({})",
                names.join(", ")
            ),
        ));
    }
    DEFAULTS
        .iter()
        .map(|d| {
            let mut m = manifest(d);
            if let Some(o) = config.get(d.name) {
                if let Some(settings) = &o.settings {
                    m.settings = settings.clone();
                    m.capabilities = capabilities_used(settings);
                    m.reads = reads_used(d.hook, settings);
                }
                if let Some(fp) = o.failure_policy {
                    m.failure_policy = fp;
                }
                if let Some(order) = o.order {
                    m.order = order;
                }
            }
            activate(engine, m, d.wasm)
                .map_err(|e| EvalError::new(e.category, format!("{}: {}", d.name, e.message)))
        })
        .collect()
}

/// The registry's ordering, selection and swapping, with the default policies as the real
/// components they are.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::SandboxLimits;
    use crate::registry::{PolicyMode, PolicySet, Registry};

    #[test]
    fn the_default_policies_pass_the_module_shape_check() {
        for d in DEFAULTS {
            assert_eq!(crate::structure::check(d.wasm), Ok(()), "{}", d.name);
        }
    }

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
    fn only_enforced_policies_with_a_matching_selector_are_enforced() {
        let engine = PolicyEngine::new(SandboxLimits::default()).unwrap();
        let mut shadow = active(&engine, "shadow", 0, 0);
        shadow.manifest.mode = PolicyMode::Shadow;
        let mut vision = active(&engine, "vision", 1, 0);
        vision.manifest.selector.namespaces = vec!["vision".into()];
        let set = PolicySet::new([shadow, vision, active(&engine, "all", 2, 0)]);
        let no_labels = BTreeMap::new();
        let names = |ns: &str| -> Vec<String> {
            set.enforced(Hook::Decorate, ns, &no_labels)
                .map(|p| p.name().to_owned())
                .collect()
        };
        assert_eq!(names("ml"), vec!["all"]);
        assert_eq!(names("vision"), vec!["vision", "all"]);
        let shadows: Vec<&str> = set
            .shadowing(Hook::Decorate, "ml", &no_labels)
            .map(|p| p.name())
            .collect();
        assert_eq!(shadows, vec!["shadow"]);
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
