//! Resource overrides: defaults, GPU renaming and platform caps for one container's
//! requirements.
//!
//! The rules are Flyte's `ApplyResourceOverrides` (flyteplugins >= v0.7, `container_helper.go`),
//! as `default-policies.md` states them:
//!
//! 1. A resource named `gpu` is renamed to `gpuResourceName` (default `nvidia.com/gpu`) in
//!    requests and limits, the `gpu` key removed; when both keys are present the `gpu` value
//!    wins, as upstream.
//! 2. A missing request takes the limit if there is one, else `defaults.requests`.
//! 3. A missing limit takes the request.
//! 4. Both are capped at the platform limit (`limits`), then the request is lowered to the limit.
//! 5. cpu and memory are always handled; ephemeral-storage and the GPU only when the container
//!    requests or limits them. Handled resources are written back in canonical quantity
//!    spelling; every other resource is passed through untouched.
//!
//! As upstream (`resource.Quantity.IsZero`), a zero quantity counts as unset: a `0` request is
//! replaced like a missing one, and a `0` platform cap means "no cap". Comparisons are exact
//! (see [`crate::quantity`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::{Deserialize, Deserializer, Serialize};

use crate::names::{check_qualified_name, key_path};
use crate::quantity::Quantity;
use crate::settings::PolicySettings;

/// The GPU resource name when settings do not choose one.
pub const DEFAULT_GPU_RESOURCE_NAME: &str = "nvidia.com/gpu";
/// The short name users write and rule 1 renames.
pub const GPU_ALIAS: &str = "gpu";
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Default cpu request (Flyte's `DefaultCPURequest`).
pub const DEFAULT_CPU_REQUEST: &str = "1000m";
/// Default memory request (Flyte's `DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: &str = "1024Mi";

/// Settings of the resource policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ResourceSettings {
    /// The extended resource GPUs are requested as; `gpu` is renamed to it.
    pub gpu_resource_name: String,
    /// Values for requests a container leaves unset.
    pub defaults: ResourceDefaults,
    /// Platform caps by resource name (`cpu`, `memory`, `ephemeral-storage` or the GPU
    /// resource name); a resource without an entry is not capped.
    pub limits: BTreeMap<String, String>,
}

/// Default requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ResourceDefaults {
    /// Default requests for `cpu` and `memory`. Entries given in a settings document replace
    /// the built-in defaults (cpu `1000m`, memory `1024Mi`) one by one, so setting only cpu
    /// keeps the memory default. Other resources have no defaults: ephemeral-storage and the
    /// GPU are only handled when a container sets them, and then a limit or request exists.
    #[serde(deserialize_with = "merge_over_builtin_requests")]
    pub requests: BTreeMap<String, String>,
}

impl Default for ResourceSettings {
    fn default() -> Self {
        ResourceSettings {
            gpu_resource_name: DEFAULT_GPU_RESOURCE_NAME.to_owned(),
            defaults: ResourceDefaults::default(),
            limits: BTreeMap::new(),
        }
    }
}

impl Default for ResourceDefaults {
    fn default() -> Self {
        ResourceDefaults {
            requests: builtin_requests(),
        }
    }
}

fn builtin_requests() -> BTreeMap<String, String> {
    BTreeMap::from([
        (CPU.to_owned(), DEFAULT_CPU_REQUEST.to_owned()),
        (MEMORY.to_owned(), DEFAULT_MEMORY_REQUEST.to_owned()),
    ])
}

fn merge_over_builtin_requests<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let given = BTreeMap::<String, String>::deserialize(deserializer)?;
    let mut requests = builtin_requests();
    requests.extend(given);
    Ok(requests)
}

impl PolicySettings for ResourceSettings {
    fn validate(&self) -> Result<(), String> {
        self.checked().map(|_| ())
    }
}

impl ResourceSettings {
    /// Validates the settings and returns their quantities, parsed: `defaults.requests` and
    /// `limits`, zeros left out (zero counts as unset, and a zero cap means no cap, as
    /// upstream). The error names the field.
    fn checked(&self) -> Result<(Quantities, Quantities), String> {
        let gpu = self.gpu_resource_name.as_str();
        check_qualified_name(gpu).map_err(|e| format!("gpuResourceName: {e}"))?;
        if [CPU, MEMORY, EPHEMERAL_STORAGE, GPU_ALIAS].contains(&gpu) {
            return Err(format!(
                "gpuResourceName: {gpu:?} is not an extended resource name"
            ));
        }
        // Field names are spelt out only for an error.
        let mut default_requests = Quantities::new();
        for (name, value) in &self.defaults.requests {
            let field = || key_path("defaults.requests", name);
            if name != CPU && name != MEMORY {
                return Err(format!(
                    "{}: only cpu and memory have default requests",
                    field()
                ));
            }
            keep_nonzero(
                &mut default_requests,
                name,
                check_settings_quantity(field, value)?,
            );
        }
        let mut caps = Quantities::new();
        for (name, value) in &self.limits {
            let field = || key_path("limits", name);
            if ![CPU, MEMORY, EPHEMERAL_STORAGE, gpu].contains(&name.as_str()) {
                return Err(format!(
                    "{}: only cpu, memory, {EPHEMERAL_STORAGE} and the GPU resource {gpu:?} can be capped",
                    field()
                ));
            }
            keep_nonzero(&mut caps, name, check_settings_quantity(field, value)?);
        }
        Ok((default_requests, caps))
    }
}

/// Parsed settings quantities by resource name.
type Quantities = BTreeMap<String, Quantity>;

fn keep_nonzero(quantities: &mut Quantities, name: &str, quantity: Quantity) {
    if !quantity.is_zero() {
        quantities.insert(name.to_owned(), quantity);
    }
}

/// Parses a settings quantity; `field` names it in the error.
fn check_settings_quantity(
    field: impl FnOnce() -> String,
    value: &str,
) -> Result<Quantity, String> {
    match Quantity::parse(value) {
        Ok(q) if q.is_negative() => Err(format!("{}: {value:?} must not be negative", field())),
        Ok(q) => Ok(q),
        Err(e) => Err(format!("{}: {e}", field())),
    }
}

/// [`ResourceSettings`] with every quantity parsed: what a call applies. Built once per settings
/// document (the guest keeps it between calls, see `tfjob_policy_sdk::settings::cached_as`), so
/// a call parses only the container's own quantities. The fields are private: the parsed
/// values cannot drift from the document they were parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRules {
    gpu_resource_name: String,
    /// `defaults.requests`, zeros left out (see [`ResourceSettings::checked`]).
    default_requests: Quantities,
    /// `limits`, zeros left out.
    caps: Quantities,
}

impl TryFrom<ResourceSettings> for ResourceRules {
    type Error = String;

    /// Validates `settings` (the error names the field, as [`PolicySettings::validate`]) and
    /// keeps its quantities parsed.
    fn try_from(settings: ResourceSettings) -> Result<ResourceRules, String> {
        let (default_requests, caps) = settings.checked()?;
        Ok(ResourceRules {
            gpu_resource_name: settings.gpu_resource_name,
            default_requests,
            caps,
        })
    }
}

impl Default for ResourceRules {
    /// The rules of the default settings.
    fn default() -> Self {
        ResourceRules::try_from(ResourceSettings::default())
            .expect("the built-in resource settings are valid")
    }
}

impl ResourceRules {
    /// The extended resource `gpu` is renamed to.
    pub fn gpu_resource_name(&self) -> &str {
        &self.gpu_resource_name
    }
}

/// Applies the overrides to the requirements of container `container_name`. An unparsable
/// quantity is an error naming the container and the resource.
pub fn override_resources(
    rules: &ResourceRules,
    container_name: &str,
    resources: ResourceRequirements,
) -> Result<ResourceRequirements, String> {
    let ResourceRequirements {
        claims,
        limits,
        requests,
    } = resources;
    let mut requests = requests.unwrap_or_default();
    let mut limits = limits.unwrap_or_default();
    let gpu = rules.gpu_resource_name.as_str();

    // Rule 1: rename `gpu`.
    let mut gpu_present = requests.contains_key(gpu) || limits.contains_key(gpu);
    for list in [&mut requests, &mut limits] {
        if let Some(q) = list.remove(GPU_ALIAS) {
            list.insert(gpu.to_owned(), q);
            gpu_present = true;
        }
    }

    // Rule 5: which resources are handled.
    let ephemeral =
        requests.contains_key(EPHEMERAL_STORAGE) || limits.contains_key(EPHEMERAL_STORAGE);
    let handled = [
        Some(CPU),
        Some(MEMORY),
        ephemeral.then_some(EPHEMERAL_STORAGE),
        gpu_present.then_some(gpu),
    ];

    for resource in handled.into_iter().flatten() {
        let parse = |list: &BTreeMap<String, K8sQuantity>, which: &str| {
            list.get(resource)
                .map(|q| {
                    Quantity::from_k8s(q).map_err(|e| {
                        format!(
                            "container {container_name:?}: {}: {e}",
                            key_path(&format!("resources.{which}"), resource)
                        )
                    })
                })
                .transpose()
                .map(|q| q.filter(|q| !q.is_zero()))
        };
        let request = parse(&requests, "requests")?;
        let limit = parse(&limits, "limits")?;
        let default = rules.default_requests.get(resource).copied();
        let cap = rules.caps.get(resource).copied();

        // Rules 2 and 3.
        let request = request.or(limit).or(default);
        let limit = limit.or(request);
        // Rule 4.
        let limit = capped(limit, cap);
        let request = capped(capped(request, cap), limit);

        // Unset after all rules (no value and no default) is written as zero, as upstream.
        let spell = |q: Option<Quantity>| q.unwrap_or(Quantity::ZERO).to_k8s();
        requests.insert(resource.to_owned(), spell(request));
        limits.insert(resource.to_owned(), spell(limit));
    }

    Ok(ResourceRequirements {
        claims,
        limits: Some(limits),
        requests: Some(requests),
    })
}

/// `min(value, cap)`, where no value stays no value and no cap leaves the value alone.
fn capped(value: Option<Quantity>, cap: Option<Quantity>) -> Option<Quantity> {
    match (value, cap) {
        (Some(v), Some(c)) => Some(v.min(c)),
        (v, _) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::settings_from_json;
    use serde_json::json;

    fn reqs(value: serde_json::Value) -> ResourceRequirements {
        serde_json::from_value(value).unwrap()
    }

    fn apply(rules: &ResourceRules, value: serde_json::Value) -> serde_json::Value {
        let out = override_resources(rules, "tensorflow", reqs(value)).unwrap();
        serde_json::to_value(out).unwrap()
    }

    fn settings(value: serde_json::Value) -> ResourceSettings {
        settings_from_json(&value.to_string()).unwrap()
    }

    fn rules(value: serde_json::Value) -> ResourceRules {
        ResourceRules::try_from(settings(value)).unwrap()
    }

    #[test]
    fn empty_requirements_get_the_default_requests_and_equal_limits() {
        let out = apply(&ResourceRules::default(), json!({}));
        assert_eq!(
            out,
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        );
    }

    #[test]
    fn missing_request_takes_the_limit_and_missing_limit_the_request() {
        let out = apply(
            &ResourceRules::default(),
            json!({"limits": {"cpu": "2"}, "requests": {"memory": "512Mi"}}),
        );
        assert_eq!(out["requests"], json!({"cpu": "2", "memory": "512Mi"}));
        assert_eq!(out["limits"], json!({"cpu": "2", "memory": "512Mi"}));
    }

    #[test]
    fn gpu_is_renamed_and_handled_only_when_present() {
        let out = apply(&ResourceRules::default(), json!({"limits": {"gpu": "1"}}));
        assert_eq!(out["requests"]["nvidia.com/gpu"], "1");
        assert_eq!(out["limits"]["nvidia.com/gpu"], "1");
        assert!(out["limits"].get("gpu").is_none());
        assert!(out["requests"].get("gpu").is_none());
        let out = apply(&ResourceRules::default(), json!({}));
        assert!(out["limits"].get("nvidia.com/gpu").is_none());
        // `gpu` wins over the full name, as upstream.
        let out = apply(
            &ResourceRules::default(),
            json!({"requests": {"gpu": "2", "nvidia.com/gpu": "1"}}),
        );
        assert_eq!(out["requests"]["nvidia.com/gpu"], "2");
        // A custom GPU resource name.
        let out = apply(
            &rules(json!({"gpuResourceName": "amd.com/gpu"})),
            json!({"requests": {"gpu": "1"}}),
        );
        assert_eq!(out["limits"]["amd.com/gpu"], "1");
    }

    #[test]
    fn ephemeral_storage_only_when_present() {
        let out = apply(&ResourceRules::default(), json!({}));
        assert!(out["limits"].get(EPHEMERAL_STORAGE).is_none());
        let out = apply(
            &ResourceRules::default(),
            json!({"limits": {"ephemeral-storage": "10240Mi"}}),
        );
        assert_eq!(out["requests"][EPHEMERAL_STORAGE], "10Gi");
        assert_eq!(out["limits"][EPHEMERAL_STORAGE], "10Gi");
    }

    #[test]
    fn platform_caps_apply_to_both_then_request_is_at_most_limit() {
        let caps = rules(json!({"limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}}));
        let out = apply(
            &caps,
            json!({"requests": {"cpu": "6", "memory": "16Gi", "gpu": "4"}, "limits": {"cpu": "8"}}),
        );
        assert_eq!(
            out["requests"],
            json!({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"})
        );
        assert_eq!(
            out["limits"],
            json!({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"})
        );
        // Request above the container's own limit is lowered to it.
        let out = apply(
            &ResourceRules::default(),
            json!({"requests": {"cpu": "3"}, "limits": {"cpu": "2500m"}}),
        );
        assert_eq!(out["requests"]["cpu"], "2500m");
        // The default request is capped too.
        let out = apply(&rules(json!({"limits": {"memory": "512Mi"}})), json!({}));
        assert_eq!(out["requests"]["memory"], "512Mi");
    }

    #[test]
    fn comparisons_are_exact_and_output_canonical() {
        let out = apply(
            &rules(json!({"limits": {"memory": "1G"}})),
            json!({"requests": {"memory": "1Gi", "cpu": "0.5"}}),
        );
        // 1Gi > 1G, so the cap applies; 0.5 is spelled 500m.
        assert_eq!(out["requests"]["memory"], "1G");
        assert_eq!(out["requests"]["cpu"], "500m");
        assert_eq!(out["limits"]["cpu"], "500m");
    }

    #[test]
    fn zero_counts_as_unset() {
        let out = apply(
            &rules(json!({"limits": {"cpu": "0"}})),
            json!({"requests": {"cpu": "0"}, "limits": {"cpu": "3"}}),
        );
        assert_eq!(out["requests"]["cpu"], "3");
        assert_eq!(out["limits"]["cpu"], "3");
        let out = apply(
            &ResourceRules::default(),
            json!({"limits": {"nvidia.com/gpu": "0"}}),
        );
        assert_eq!(out["requests"]["nvidia.com/gpu"], "0");
        assert_eq!(out["limits"]["nvidia.com/gpu"], "0");
    }

    #[test]
    fn other_resources_and_claims_pass_through() {
        let out = apply(
            &ResourceRules::default(),
            json!({"limits": {"hugepages-2Mi": "2048Ki"}, "claims": [{"name": "gpu-claim"}]}),
        );
        assert_eq!(out["limits"]["hugepages-2Mi"], "2048Ki");
        assert!(out["requests"].get("hugepages-2Mi").is_none());
        assert_eq!(out["claims"], json!([{"name": "gpu-claim"}]));
    }

    #[test]
    fn unparsable_quantities_name_container_and_resource() {
        let err = override_resources(
            &ResourceRules::default(),
            "tensorflow",
            reqs(json!({"limits": {"nvidia.com/gpu": "one"}})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "container \"tensorflow\": resources.limits[\"nvidia.com/gpu\"]: invalid quantity \"one\": expected a number"
        );
        let err = override_resources(
            &ResourceRules::default(),
            "ps",
            reqs(json!({"requests": {"cpu": "1 core"}})),
        )
        .unwrap_err();
        assert!(
            err.starts_with(
                "container \"ps\": resources.requests.cpu: invalid quantity \"1 core\""
            ),
            "{err}"
        );
    }

    #[test]
    fn rules_refuse_what_validation_refuses() {
        for bad in [
            json!({"limits": {"cpu": "lots"}}),
            json!({"defaults": {"requests": {"memory": "-1Gi"}}}),
            json!({"gpuResourceName": "cpu"}),
        ] {
            let bad: ResourceSettings = serde_json::from_value(bad).unwrap();
            assert_eq!(
                ResourceRules::try_from(bad.clone()).unwrap_err(),
                bad.validate().unwrap_err()
            );
        }
        let custom = rules(json!({"gpuResourceName": "amd.com/gpu"}));
        assert_eq!(custom.gpu_resource_name(), "amd.com/gpu");
    }

    #[test]
    fn settings_defaults_merge_and_validation_names_fields() {
        let s = settings(json!({"defaults": {"requests": {"cpu": "500m"}}}));
        assert_eq!(s.defaults.requests["cpu"], "500m");
        assert_eq!(s.defaults.requests["memory"], DEFAULT_MEMORY_REQUEST);
        assert_eq!(s.gpu_resource_name, DEFAULT_GPU_RESOURCE_NAME);
        assert_eq!(
            settings_from_json::<ResourceSettings>("").unwrap(),
            ResourceSettings::default()
        );
        assert_eq!(
            settings_from_json::<ResourceSettings>("{}").unwrap(),
            ResourceSettings::default()
        );

        let err = |v: serde_json::Value| {
            settings_from_json::<ResourceSettings>(&v.to_string()).unwrap_err()
        };
        assert_eq!(
            err(json!({"limits": {"memory": "lots"}})),
            "limits.memory: invalid quantity \"lots\": expected a number"
        );
        assert!(
            err(json!({"defaults": {"requests": {"cpu": "-1"}}}))
                .starts_with("defaults.requests.cpu: ")
        );
        assert!(
            err(json!({"defaults": {"requests": {"nvidia.com/gpu": "1"}}}))
                .starts_with("defaults.requests[\"nvidia.com/gpu\"]: only cpu and memory")
        );
        assert!(
            err(json!({"limits": {"example.com/fpga": "1"}}))
                .starts_with("limits[\"example.com/fpga\"]: ")
        );
        assert!(err(json!({"gpuResourceName": ""})).starts_with("gpuResourceName: "));
        assert!(err(json!({"gpuResourceName": "cpu"})).starts_with("gpuResourceName: "));
        assert!(
            err(json!({"gpuResourceNames": "x"}))
                .starts_with("gpuResourceNames: unknown field `gpuResourceNames`")
        );
        assert!(
            err(json!({"defaults": {"request": {}}}))
                .starts_with("defaults.request: unknown field `request`")
        );
        assert!(err(json!({"limits": {"cpu": 4}})).starts_with("limits.cpu: invalid type"));
        // A custom GPU name may be capped under its own name.
        assert!(
            settings_from_json::<ResourceSettings>(
                &json!({"gpuResourceName": "amd.com/gpu", "limits": {"amd.com/gpu": "1"}})
                    .to_string()
            )
            .is_ok()
        );
    }
}
