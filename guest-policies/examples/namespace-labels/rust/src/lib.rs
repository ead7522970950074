//! namespace-labels in Rust: copies the listed labels of the job's Namespace onto its pods.
//!
//! Settings: `{"labels": ["team", "cost-center"]}`. The manifest declares what it reads:
//! `reads: [{resource: namespaces}]`; the Namespace comes from the operator's cache, so a pod
//! carries its namespace's `team` without the job author writing it. A label the Namespace does
//! not carry is left off, and so is every label of a Namespace that is gone. The same policy is
//! written in Python and JavaScript beside this crate, and one suite (`../suite.yaml`, with the
//! Namespaces as `cluster:` fixtures) holds all three to the same behaviour.

use serde::Deserialize;
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{cluster, convert, log};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
    labels: Vec<String>,
}

impl PolicySettings for Settings {
    fn validate(&self) -> Result<(), String> {
        match self.labels.iter().position(String::is_empty) {
            Some(i) => Err(format!("labels[{i}]: a label key may not be empty")),
            None => Ok(()),
        }
    }
}

struct NamespaceLabels;

tfjob_policy_sdk::export_policy!(world: "decorator", path: "../../../../wit", policy: NamespaceLabels);

impl bindings::exports::tfjob::policy::settings::Guest for NamespaceLabels {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<Settings>(&settings)
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for NamespaceLabels {
    fn decorate_pod(ctx: JobContext, settings: String, pod: String) -> Result<String, PolicyError> {
        let settings: Settings = settings::load(&settings)?;
        let mut pod = convert::pod_from_json(&pod)?;
        if settings.labels.is_empty() {
            return convert::pod_to_json(&pod);
        }
        let Some(namespace) = cluster::namespace(&ctx.namespace)? else {
            log::warn(
                "the job's namespace is gone",
                &[("namespace", &ctx.namespace)],
            );
            return convert::pod_to_json(&pod);
        };
        let from = namespace.metadata.labels.unwrap_or_default();
        let labels = pod.metadata.labels.get_or_insert_with(Default::default);
        for key in &settings.labels {
            if let Some(value) = from.get(key) {
                labels.insert(key.clone(), value.clone());
            }
        }
        convert::pod_to_json(&pod)
    }
}
