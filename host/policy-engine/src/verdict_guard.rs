//! The verdict guard: a classification must not contradict the pod it classifies.
//!
//! A classifier decides how to read a pod, not what the pod did. Two verdicts would let a policy
//! rewrite facts, and both are refused as `invalid-output` (which then follows the policy's
//! `failurePolicy`):
//! - `succeeded` for a pod that has not finished successfully: neither the pod's phase is
//!   `Succeeded` nor its main container (`tensorflow`, else the first) has terminated with exit
//!   code 0. Otherwise a policy could end a job whose training is still running.
//! - a non-terminal phase (`undefined`, `queued`, `waiting-for-resources`, `initializing`,
//!   `running`) for a pod whose phase is `Succeeded` or `Failed`: such a pod never changes
//!   again, so the job would wait for it for ever.
//!
//! Failures stay the policy's call on any pod: reading a running pod as failed (a pending
//! timeout, a pull back-off) or a succeeded one as failed (OOMKilled despite exit 0) is what
//! classifiers are for, and the operator's restart rules still have the last word.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tfjob_api::labels::DEFAULT_CONTAINER_NAME;
use tfjob_planner::{Verdict, VerdictPhase};

/// Checks `verdict` against the observed `pod`; the error says what contradicts what.
pub fn check(pod: &Pod, verdict: &Verdict) -> Result<(), String> {
    let pod_phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let terminal_pod = matches!(pod_phase, "Succeeded" | "Failed");
    match verdict.phase {
        VerdictPhase::Succeeded if pod_phase != "Succeeded" && !main_container_succeeded(pod) => {
            Err(format!(
                "verdict succeeded contradicts the pod: phase {}, and its main container has not \
                 terminated with exit code 0",
                if pod_phase.is_empty() {
                    "<none>"
                } else {
                    pod_phase
                }
            ))
        }
        VerdictPhase::Undefined
        | VerdictPhase::Queued
        | VerdictPhase::WaitingForResources
        | VerdictPhase::Initializing
        | VerdictPhase::Running
            if terminal_pod =>
        {
            Err(format!(
                "verdict {} contradicts the pod: phase {pod_phase} is final",
                phase_name(verdict.phase)
            ))
        }
        _ => Ok(()),
    }
}

/// Whether the main container's current state is terminated with exit code 0.
fn main_container_succeeded(pod: &Pod) -> bool {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
    else {
        return false;
    };
    let main = pod
        .spec
        .as_ref()
        .map(|spec| {
            spec.containers
                .iter()
                .find(|c| c.name == DEFAULT_CONTAINER_NAME)
                .or(spec.containers.first())
                .map_or(DEFAULT_CONTAINER_NAME, |c| c.name.as_str())
        })
        .unwrap_or(DEFAULT_CONTAINER_NAME);
    statuses
        .iter()
        .find(|s| s.name == main)
        .is_some_and(terminated_cleanly)
}

fn terminated_cleanly(status: &ContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

/// The phase as the contract spells it (`waiting-for-resources`): its serde name.
fn phase_name(phase: VerdictPhase) -> String {
    serde_json::to_value(phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{phase:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "sidecar", "image": "s"},
                {"name": "tensorflow", "image": "tf"}
            ]},
            "status": {"phase": phase, "containerStatuses": containers}
        }))
        .unwrap()
    }

    fn container(name: &str, state: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "ready": false, "restartCount": 0, "image": "", "imageID": "", "state": state})
    }

    fn verdict(phase: VerdictPhase) -> Verdict {
        Verdict::bare(phase)
    }

    const ALL: [VerdictPhase; 8] = [
        VerdictPhase::Undefined,
        VerdictPhase::Queued,
        VerdictPhase::WaitingForResources,
        VerdictPhase::Initializing,
        VerdictPhase::Running,
        VerdictPhase::Succeeded,
        VerdictPhase::RetryableFailure,
        VerdictPhase::PermanentFailure,
    ];

    #[test]
    fn succeeded_needs_a_finished_pod_or_main_container() {
        let running = container("tensorflow", json!({"running": {}}));
        let exit0 = container("tensorflow", json!({"terminated": {"exitCode": 0}}));
        let exit1 = container("tensorflow", json!({"terminated": {"exitCode": 1}}));
        let sidecar_exit0 = container("sidecar", json!({"terminated": {"exitCode": 0}}));
        let ok = verdict(VerdictPhase::Succeeded);
        assert_eq!(check(&pod("Succeeded", json!([])), &ok), Ok(()));
        // The main container finished; a sidecar keeps the pod Running.
        assert_eq!(
            check(&pod("Running", json!([exit0, sidecar_exit0.clone()])), &ok),
            Ok(())
        );
        for (phase, statuses) in [
            ("Running", json!([running])),
            ("Running", json!([exit1])),
            ("Running", json!([sidecar_exit0])),
            ("Pending", json!([])),
            ("Failed", json!([])),
            ("", json!(null)),
        ] {
            let err = check(&pod(phase, statuses), &ok).unwrap_err();
            assert!(
                err.starts_with("verdict succeeded contradicts the pod"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_finished_pod_cannot_be_read_as_unfinished() {
        for pod_phase in ["Succeeded", "Failed"] {
            let p = pod(pod_phase, json!([]));
            for phase in ALL {
                let result = check(&p, &verdict(phase));
                let final_verdict = matches!(
                    phase,
                    VerdictPhase::Succeeded
                        | VerdictPhase::RetryableFailure
                        | VerdictPhase::PermanentFailure
                );
                if final_verdict && !(pod_phase == "Failed" && phase == VerdictPhase::Succeeded) {
                    assert_eq!(result, Ok(()), "{pod_phase} {phase:?}");
                } else {
                    assert!(result.is_err(), "{pod_phase} {phase:?}");
                }
            }
        }
    }

    #[test]
    fn failures_and_progress_are_the_policys_call_on_a_live_pod() {
        for pod_phase in ["Pending", "Running", "Unknown"] {
            let p = pod(pod_phase, json!([]));
            for phase in ALL.into_iter().filter(|&p| p != VerdictPhase::Succeeded) {
                assert_eq!(check(&p, &verdict(phase)), Ok(()), "{pod_phase} {phase:?}");
            }
        }
    }
}
