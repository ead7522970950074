//! team-labels in Rust: labels every pod with the team named in the settings.
//!
//! Settings: `{"team": "ml"}`; `{}` labels nothing. A team that is empty or not a label value
//! (as the API server checks one) is refused. The same policy is written in Python and
//! JavaScript beside this crate, and one suite (`../suite.yaml`) holds all three to the same
//! behaviour.

use serde::Deserialize;
use tfjob_policy_sdk::logic::names::check_label_value;
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{convert, log, pod};

#[derive(Debug, Default, Deserialize)]
// Unknown keys are errors, so that a misspelt setting is refused instead of ignored.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
    team: Option<String>,
}

impl PolicySettings for Settings {
    fn validate(&self) -> Result<(), String> {
        match self.team.as_deref() {
            // A label value may be empty, but a team may not: `{}` is how to label nothing.
            Some("") => Err("team: must not be empty".to_owned()),
            Some(team) => check_label_value(team).map_err(|e| format!("team: {e}")),
            None => Ok(()),
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
        let mut decorated = convert::pod_from_json(&pod)?;
        if let Some(team) = settings.team {
            log::info("labelling pod", &[("job", &ctx.job_name), ("team", &team)]);
            pod::set_label(&mut decorated, "team", &team)?;
        }
        convert::pod_to_json(&decorated)
    }
}
