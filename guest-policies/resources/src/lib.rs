//! The default resource policy: `default-policies.md` "Resource overrides" as a Wasm component
//! (world `resource-policy`).
//!
//! The decisions live in `tfjob_policy_logic::resources`, shared with the operator's native
//! reference; this crate decodes the settings and one container's requirements, applies the
//! overrides and encodes the result. The settings are kept as `ResourceRules`, their quantities
//! parsed once per document. An unparsable quantity in the requirements is
//! `invalid-input` naming the container and the resource. Settings are `ResourceSettings` (see
//! `guest-policies/README.md`); `{}` or an empty document mean the defaults.

use tfjob_policy_sdk::logic::resources::{ResourceRules, ResourceSettings, override_resources};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{convert, settings};

/// The component's implementation.
struct DefaultResources;

tfjob_policy_sdk::export_policy!(world: "resource-policy", path: "../../wit", policy: DefaultResources);

impl bindings::exports::tfjob::policy::settings::Guest for DefaultResources {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate_as::<ResourceSettings, ResourceRules>(&settings)
    }
}

impl bindings::exports::tfjob::policy::resources::Guest for DefaultResources {
    fn override_resources(
        _ctx: JobContext,
        settings: String,
        container_name: String,
        resources: String,
    ) -> Result<String, PolicyError> {
        let rules = settings::cached_as::<ResourceSettings, ResourceRules>(&settings)?;
        let resources = convert::resources_from_json(&resources)?;
        let resources = override_resources(&rules, &container_name, resources)
            .map_err(PolicyError::InvalidInput)?;
        convert::resources_to_json(&resources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::tfjob::policy::resources::Guest as _;
    use bindings::exports::tfjob::policy::settings::Guest as _;
    use tfjob_policy_sdk::serde_json::{self, Value, json};

    fn ctx() -> JobContext {
        JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "u-1".into(),
            job_labels: vec![],
            job_annotations: vec![],
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }

    fn run(settings: &str, resources: &str) -> Result<Value, PolicyError> {
        DefaultResources::override_resources(
            ctx(),
            settings.into(),
            "tensorflow".into(),
            resources.into(),
        )
        .map(|out| serde_json::from_str(&out).unwrap())
    }

    #[test]
    fn defaults_with_empty_settings_and_requirements() {
        for (settings, resources) in [("{}", "{}"), ("", ""), ("{}", "")] {
            assert_eq!(
                run(settings, resources).unwrap(),
                json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}})
            );
        }
    }

    #[test]
    fn gpu_rename_and_caps() {
        let out = run(
            r#"{"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}"#,
            r#"{"limits": {"gpu": "2", "cpu": "4"}, "requests": {"cpu": "3"}}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
                   "requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}})
        );
    }

    #[test]
    fn errors_name_container_resource_and_settings_field() {
        let err = run("{}", r#"{"requests": {"memory": "lots"}}"#).unwrap_err();
        assert_eq!(
            err,
            PolicyError::InvalidInput(
                "container \"tensorflow\": resources.requests.memory: invalid quantity \"lots\": expected a number"
                    .into()
            )
        );
        let err = run("{}", r#"{"requests": []}"#).unwrap_err();
        assert!(
            matches!(&err, PolicyError::InvalidInput(m) if m.starts_with("resources.requests: invalid type")),
            "{err:?}"
        );
        let err = run(r#"{"limits": {"cpu": "x"}}"#, "{}").unwrap_err();
        assert!(matches!(&err, PolicyError::InvalidSettings(m) if m.starts_with("limits.cpu: ")));
        assert!(DefaultResources::validate_settings(r#"{"limit": {}}"#.into()).is_err());
        assert_eq!(DefaultResources::validate_settings("".into()), Ok(()));
    }
}
