//! The default policies, built from `guest-policies/` and embedded in the operator.
//!
//! They are ordinary policies: loaded through the same activation path (compile, export
//! check, settings validation) and run in the same sandbox as any platform team's policy. A
//! `--policy-config` file overrides their settings, failure policy and order; a configured
//! policy with a default's name replaces that default.

use crate::capabilities::Capabilities;
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
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_decorate.wasm")),
    },
    DefaultPolicy {
        name: "default-resources",
        hook: Hook::Resources,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_resources.wasm")),
    },
    DefaultPolicy {
        name: "default-classify",
        hook: Hook::Classify,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_classify.wasm")),
    },
];

/// A policy built only to test the sandbox: its settings `{"mode": ...}` pick a hostile
/// behaviour (infinite loop, memory bomb, oversized output, panic, file/env/network access,
/// forbidden pod changes). Never loaded by the operator.
#[doc(hidden)]
pub const HOSTILE_POLICY_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_hostile_policy.wasm"));

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
/// containers by the default decoration.
pub const NVIDIA_DRIVER_HOST_PATH: &str = "/home/kubernetes/bin/nvidia";

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
