//! oom-permanent in Rust: a failed pod whose container ended for a reason listed in the
//! settings (e.g. `OOMKilled`) fails permanently; running it again would not help. Other pods
//! are read from their phase.
//!
//! Settings: `{"permanentReasons": ["OOMKilled"]}`. The same policy is written in Python and
//! JavaScript beside this crate, and one suite (`../suite.yaml`) holds all three to the same
//! behaviour.

use serde::Deserialize;
use tfjob_policy_sdk::convert;
use tfjob_policy_sdk::k8s_openapi::api::core::v1::Pod;
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{FailureKind, JobContext, Phase, PolicyError, Verdict};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
    permanent_reasons: Vec<String>,
}

impl PolicySettings for Settings {
    fn validate(&self) -> Result<(), String> {
        match self.permanent_reasons.iter().position(String::is_empty) {
            Some(i) => Err(format!("permanentReasons[{i}]: must not be empty")),
            None => Ok(()),
        }
    }
}

/// The reason of the first container that terminated with a non-zero exit code.
fn terminated_reason(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|status| {
        let terminated = status.state.as_ref()?.terminated.as_ref()?;
        (terminated.exit_code != 0).then(|| terminated.reason.clone().unwrap_or("Error".into()))
    })
}

struct OomPermanent;

tfjob_policy_sdk::export_policy!(world: "classifier", path: "../../../../wit", policy: OomPermanent);

impl bindings::exports::tfjob::policy::settings::Guest for OomPermanent {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<Settings>(&settings)
    }
}

impl bindings::exports::tfjob::policy::classify::Guest for OomPermanent {
    fn classify_pod(
        _ctx: JobContext,
        settings: String,
        pod: String,
        _now: String,
    ) -> Result<Verdict, PolicyError> {
        let settings: Settings = settings::load(&settings)?;
        let pod = convert::observed_pod_from_json(&pod)?;
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or("Unknown".into());
        let reason = (phase == "Failed")
            .then(|| terminated_reason(&pod))
            .flatten();
        let verdict = |phase, reason: String, message: String, kind| Verdict {
            phase,
            reason,
            message,
            kind,
            occurred_at: None,
            recheck_at: None,
        };
        Ok(match reason {
            Some(reason) if settings.permanent_reasons.contains(&reason) => verdict(
                Phase::PermanentFailure,
                reason.clone(),
                format!("a container ended with {reason}; running it again would not help"),
                Some(FailureKind::User),
            ),
            reason => {
                let (plain, kind) = match phase.as_str() {
                    "Pending" => (Phase::Queued, None),
                    "Running" => (Phase::Running, None),
                    "Succeeded" => (Phase::Succeeded, None),
                    "Failed" => (Phase::RetryableFailure, Some(FailureKind::User)),
                    _ => (Phase::Undefined, None),
                };
                verdict(plain, reason.unwrap_or(phase), String::new(), kind)
            }
        })
    }
}
