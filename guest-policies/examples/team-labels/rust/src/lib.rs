//! team-labels in Rust: labels every pod with the team named in the settings.
//!
//! Settings: `{"team": "ml"}`; `{}` labels nothing. A team that is not a label value is
//! refused. The same policy is written in Python and JavaScript beside this crate, and one
//! suite (`../suite.yaml`) holds all three to the same behaviour.

use serde::Deserialize;
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{convert, log};

#[derive(Debug, Default, Deserialize)]
// Unknown keys are errors, so that a misspelt setting is refused instead of ignored.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
    team: Option<String>,
}

/// A label value: at most 63 characters, alphanumerics with `-`, `_`, `.` inside.
fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl PolicySettings for Settings {
    fn validate(&self) -> Result<(), String> {
        match &self.team {
            Some(team) if !is_label_value(team) => {
                Err(format!("team: {team:?} is not a label value"))
            }
            _ => Ok(()),
        }
    }
}

struct TeamLabels;

tfjob_policy_sdk::export_policy!(world: "decorator", path: "../../../../wit", policy: TeamLabels);

impl bindings::exports::tfjob::policy::settings::Guest for TeamLabels {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<Settings>(&settings)
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for TeamLabels {
    fn decorate_pod(ctx: JobContext, settings: String, pod: String) -> Result<String, PolicyError> {
        let settings: Settings = settings::load(&settings)?;
        let mut pod = convert::pod_from_json(&pod)?;
        if let Some(team) = settings.team {
            log::info("labelling pod", &[("job", &ctx.job_name), ("team", &team)]);
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("team".into(), team);
        }
        convert::pod_to_json(&pod)
    }
}
