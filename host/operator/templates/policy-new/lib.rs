//! The `{{name}}` policy for the TFJob operator: a WebAssembly component (`wasm32-wasip2`)
//! implementing the `tfjob:policy@0.3.0` contract for the hooks {{hooks}}.
//!
{{#decorate}}
//! - decorate: puts the labels named in the settings (`labels`) on every pod.
{{#reads}}
//!   It also copies the labels of the job's Namespace that the settings list
//!   (`namespaceLabels`), read from the operator's cache: the manifest declares
//!   `reads: [{resource: namespaces}]` (`policy pack --read namespaces`).
{{/reads}}
{{/decorate}}
{{#resources}}
//! - resources: gives containers that ask for no memory the request named in the settings
//!   (`defaultMemoryRequest`).
{{/resources}}
{{#classify}}
//! - classify: classifies pods as the operator's default classifier does, except that failures
//!   with a reason named in the settings (`permanentReasons`) are permanent: running the pod
//!   again would not help.
{{/classify}}
//!
//! The operator checks the settings once with `validate-settings` before it activates the
//! policy, and hands the same document to every call. Each call runs in a fresh sandbox: keep
//! no state between calls.

{{#decorate}}
use std::collections::BTreeMap;

{{/decorate}}
use serde::Deserialize;
{{#reads}}
use tfjob_policy_sdk::cluster;
{{/reads}}
{{#decorate}}
use tfjob_policy_sdk::logic::names::{check_label_value, check_qualified_name};
use tfjob_policy_sdk::pod;
{{/decorate}}
use tfjob_policy_sdk::settings::{self, PolicySettings};
{{#classify}}
use tfjob_policy_sdk::wit::Verdict;
{{/classify}}
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{convert, log};

/// The settings document, e.g. `{{settings_example}}`; `{}` (or none) changes nothing.
#[derive(Debug, Default, Deserialize)]
// Unknown keys are errors, so that a misspelt setting is refused instead of ignored.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
{{#decorate}}
    /// The labels put on every pod, replacing the values a pod had.
    labels: BTreeMap<String, String>,
{{/decorate}}
{{#reads}}
    /// Labels of the job's Namespace copied onto its pods.
    namespace_labels: Vec<String>,
{{/reads}}
{{#resources}}
    /// The memory request of containers that set neither a memory request nor a limit.
    default_memory_request: Option<String>,
{{/resources}}
{{#classify}}
    /// Failure reasons (`OOMKilled`, ...) that running the pod again will not fix.
    permanent_reasons: Vec<String>,
{{/classify}}
}

impl PolicySettings for Settings {
    fn validate(&self) -> Result<(), String> {
{{#decorate}}
        for (key, value) in &self.labels {
            check_qualified_name(key)
                .and_then(|()| check_label_value(value))
                .map_err(|e| format!("labels[{key:?}]: {e}"))?;
        }
{{/decorate}}
{{#reads}}
        if let Some(i) = self.namespace_labels.iter().position(String::is_empty) {
            return Err(format!("namespaceLabels[{i}]: a label key may not be empty"));
        }
{{/reads}}
{{#resources}}
        if let Some(request) = &self.default_memory_request {
            tfjob_policy_sdk::quantity::Quantity::parse(request)
                .map_err(|e| format!("defaultMemoryRequest: {e}"))?;
        }
{{/resources}}
{{#classify}}
        if let Some(i) = self.permanent_reasons.iter().position(|r| r.is_empty()) {
            return Err(format!("permanentReasons[{i}]: must not be empty"));
        }
{{/classify}}
        Ok(())
    }
}

/// The component's implementation.
struct {{type}};

tfjob_policy_sdk::export_policy!(world: "policy", path: "wit", policy: {{type}});

impl bindings::exports::tfjob::policy::settings::Guest for {{type}} {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<Settings>(&settings)
    }
}
{{#decorate}}

impl bindings::exports::tfjob::policy::decorate::Guest for {{type}} {
    fn decorate_pod(ctx: JobContext, settings: String, pod: String) -> Result<String, PolicyError> {
        let settings: Settings = settings::load(&settings)?;
        let mut decorated = convert::pod_from_json(&pod)?;
        for (key, value) in &settings.labels {
            log::debug("labelling pod", &[("job", &ctx.job_name), ("label", key)]);
            pod::set_label(&mut decorated, key, value)?;
        }
{{#reads}}
        if !settings.namespace_labels.is_empty() {
            // A failed read (not granted, the cache not synced) fails the call with its
            // category, and the manifest's failurePolicy decides; a Namespace that is gone
            // leaves the pod as it is.
            if let Some(namespace) = cluster::namespace(&ctx.namespace)? {
                let from = namespace.metadata.labels.unwrap_or_default();
                for key in &settings.namespace_labels {
                    if let Some(value) = from.get(key) {
                        pod::set_label(&mut decorated, key, value)?;
                    }
                }
            }
        }
{{/reads}}
        convert::pod_to_json(&decorated)
    }
}
{{/decorate}}
{{#resources}}

impl bindings::exports::tfjob::policy::resources::Guest for {{type}} {
    fn override_resources(
        _ctx: JobContext,
        settings: String,
        container_name: String,
        resources: String,
    ) -> Result<String, PolicyError> {
        let settings: Settings = settings::load(&settings)?;
        let mut resources = convert::resources_from_json(&resources)?;
        let sets_memory = |list: &Option<std::collections::BTreeMap<String, _>>| {
            list.as_ref().is_some_and(|l| l.contains_key("memory"))
        };
        if let Some(request) = settings.default_memory_request
            && !sets_memory(&resources.requests)
            && !sets_memory(&resources.limits)
        {
            log::info("default memory request", &[("container", &container_name)]);
            resources.requests.get_or_insert_with(Default::default).insert(
                "memory".into(),
                tfjob_policy_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity(request),
            );
        }
        convert::resources_to_json(&resources)
    }
}
{{/resources}}
{{#classify}}

impl bindings::exports::tfjob::policy::classify::Guest for {{type}} {
    fn classify_pod(
        _ctx: JobContext,
        settings: String,
        pod: String,
        now: String,
    ) -> Result<Verdict, PolicyError> {
        use tfjob_policy_sdk::logic::classify::{ClassifySettings, classify_pod};
        use tfjob_policy_sdk::logic::verdict::Phase;

        let settings: Settings = settings::load(&settings)?;
        // Metadata and status only: classification never reads the spec.
        let pod = convert::observed_pod_from_json(&pod)?;
        let now = convert::timestamp_from_rfc3339("now", &now)?;
        let mut verdict = classify_pod(&ClassifySettings::default(), &pod, now);
        if verdict.phase == Phase::RetryableFailure
            && settings.permanent_reasons.contains(&verdict.reason)
        {
            verdict.phase = Phase::PermanentFailure;
            verdict.message = format!("{} is permanent here|{}", verdict.reason, verdict.message);
        }
        Ok(verdict.into())
    }
}
{{/classify}}

#[cfg(test)]
mod tests {
    //! The `Guest` traits are plain Rust: call them natively (`cargo test`); the suite in
    //! `tests/suite.yaml` runs the built component in the operator's sandbox.

    use super::*;
{{#classify}}
    use bindings::exports::tfjob::policy::classify::Guest as _;
{{/classify}}
{{#decorate}}
    use bindings::exports::tfjob::policy::decorate::Guest as _;
{{/decorate}}
{{#resources}}
    use bindings::exports::tfjob::policy::resources::Guest as _;
{{/resources}}
    use bindings::exports::tfjob::policy::settings::Guest as _;
    use tfjob_policy_sdk::serde_json::{self, Value, json};

    fn ctx() -> JobContext {
        JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "00000000-0000-0000-0000-000000000000".into(),
            job_labels: vec![],
            job_annotations: vec![],
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }

    #[test]
    fn settings_are_checked_field_by_field() {
        assert_eq!({{type}}::validate_settings("{}".into()), Ok(()));
        assert_eq!({{type}}::validate_settings("".into()), Ok(()));
        let err = {{type}}::validate_settings(r#"{"unknown": 1}"#.into()).unwrap_err();
        assert!(err.starts_with("unknown: unknown field"), "{err}");
{{#decorate}}
        let not_a_value = r#"{"labels": {"team": "not a label"}}"#;
        let err = {{type}}::validate_settings(not_a_value.into()).unwrap_err();
        assert!(err.starts_with(r#"labels["team"]: "#), "{err}");
        let not_a_key = r#"{"labels": {"not a key": "ml"}}"#;
        let err = {{type}}::validate_settings(not_a_key.into()).unwrap_err();
        assert!(err.starts_with(r#"labels["not a key"]: "#), "{err}");
{{/decorate}}
{{#resources}}
        let err = {{type}}::validate_settings(r#"{"defaultMemoryRequest": "lots"}"#.into())
            .unwrap_err();
        assert!(err.starts_with("defaultMemoryRequest: "), "{err}");
{{/resources}}
{{#classify}}
        let err = {{type}}::validate_settings(r#"{"permanentReasons": [""]}"#.into()).unwrap_err();
        assert!(err.starts_with("permanentReasons[0]: "), "{err}");
{{/classify}}
    }
{{#decorate}}

    #[test]
    fn pods_get_the_labels_of_the_settings() {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "w-0"},
            "spec": {"containers": [{"name": "tf", "image": "tf"}]}
        });
        let settings = r#"{"labels": {"team": "ml", "example.com/tier": "gold"}}"#;
        let out = {{type}}::decorate_pod(ctx(), settings.into(), pod.to_string()).unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        let labels = json!({"team": "ml", "example.com/tier": "gold"});
        assert_eq!(out["metadata"]["labels"], labels);
        let out = {{type}}::decorate_pod(ctx(), "{}".into(), pod.to_string()).unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out, pod);
    }
{{/decorate}}
{{#resources}}

    #[test]
    fn containers_without_memory_get_the_default_request() {
        let settings = r#"{"defaultMemoryRequest": "512Mi"}"#;
        let run = |resources: Value| -> Value {
            let out = {{type}}::override_resources(ctx(), settings.into(), "tf".into(), resources.to_string())
                .unwrap();
            serde_json::from_str(&out).unwrap()
        };
        assert_eq!(run(json!({})), json!({"requests": {"memory": "512Mi"}}));
        let own = json!({"limits": {"memory": "2Gi"}});
        assert_eq!(run(own.clone()), own);
    }
{{/resources}}
{{#classify}}

    #[test]
    fn failures_with_a_permanent_reason_are_permanent() {
        let pod = json!({
            "metadata": {"name": "w-0"},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "tensorflow", "ready": false, "restartCount": 0, "image": "tf", "imageID": "",
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        });
        let classify = |settings: &str| {
            {{type}}::classify_pod(ctx(), settings.into(), pod.to_string(), "2026-01-01T00:00:00Z".into()).unwrap()
        };
        let default = classify("{}");
        assert_eq!(default.reason, "OOMKilled");
        assert_eq!(default.phase, tfjob_policy_sdk::wit::Phase::RetryableFailure);
        let permanent = classify(r#"{"permanentReasons": ["OOMKilled"]}"#);
        assert_eq!(permanent.phase, tfjob_policy_sdk::wit::Phase::PermanentFailure);
        assert!(permanent.message.starts_with("OOMKilled is permanent here|"), "{}", permanent.message);
    }
{{/classify}}
}
