//! Pod classification: pending, running, succeeded, retryable or permanent failure.
//!
//! The rules follow Flyte's pod "demystify" functions with the TFJob exit-code rule on top (see
//! `default-policies.md` in the project's reference material): pending pods are judged by their
//! scheduling and readiness conditions and their containers' waiting reasons, with grace periods
//! for reasons that may clear on their own; failed pods by their reason and their containers'
//! terminations.
//!
//! A verdict that time alone can change (a grace period or the pending timeout still running)
//! says when: `recheck_at`, the moment the rule would decide otherwise. Any other verdict
//! changes only with the pod, so the operator may reuse it until the pod changes.

use std::time::Duration;

use crate::DEFAULT_CONTAINER_NAME;
use crate::verdict::{Classification as Verdict, FailureKind, Phase as VerdictPhase};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod, PodCondition};

/// Knobs of the classification; the defaults match the default policy's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassifySettings {
    pub image_pull_backoff_grace_period: Duration,
    pub create_container_error_grace_period: Duration,
    pub create_container_config_error_grace_period: Duration,
    /// A pod pending (queued or initializing) longer than this fails retryably; `None` = never.
    pub pod_pending_timeout: Option<Duration>,
    pub oom_killed_is_permanent: bool,
    /// Fail a pod that can never be scheduled ([`crate::never_fits`]); `None` (the default):
    /// unschedulable pods wait, as in training-operator 1.9. The comparison needs the nodes,
    /// which the policy reads itself after [`classify_pod`].
    pub fail_unschedulable: Option<crate::never_fits::FailUnschedulable>,
}

impl Default for ClassifySettings {
    fn default() -> Self {
        ClassifySettings {
            image_pull_backoff_grace_period: Duration::from_secs(180),
            create_container_error_grace_period: Duration::from_secs(180),
            create_container_config_error_grace_period: Duration::ZERO,
            pod_pending_timeout: None,
            oom_killed_is_permanent: false,
            fail_unschedulable: None,
        }
    }
}

/// Pod reasons that mean the node went away or shut down, not that the workload failed.
const INTERRUPTED_POD_REASONS: [&str; 4] =
    ["Shutdown", "Terminated", "NodeShutdown", "NodeAffinity"];

/// Classifies `pod` at time `now`.
pub fn classify_pod(settings: &ClassifySettings, pod: &Pod, now: Timestamp) -> Verdict {
    let status = pod.status.clone().unwrap_or_default();
    match status.phase.as_deref().unwrap_or("Pending") {
        "Pending" => classify_pending(settings, pod, now),
        "Running" => Verdict::bare(VerdictPhase::Running),
        "Succeeded" => classify_succeeded(pod),
        "Failed" => classify_failed(settings, pod),
        _ => Verdict::bare(VerdictPhase::Undefined),
    }
}

fn classify_pending(settings: &ClassifySettings, pod: &Pod, now: Timestamp) -> Verdict {
    let mut verdict = demystify_pending(settings, pod, now);
    match (settings.pod_pending_timeout, verdict.occurred_at) {
        (Some(timeout), Some(since))
            if verdict.phase.is_pending() && elapsed(since, now) >= timeout =>
        {
            failure(
                VerdictPhase::RetryableFailure,
                FailureKind::System,
                "PodPendingTimeout".into(),
                format!(
                    "Pod pending for longer than {}: {}",
                    go_duration(timeout),
                    verdict.message
                ),
                Some(since),
            )
        }
        // Still within the timeout: it runs out at `since + timeout`.
        (Some(timeout), Some(since)) if verdict.phase.is_pending() => {
            verdict.recheck_at = earliest(verdict.recheck_at, after(since, timeout));
            verdict
        }
        _ => verdict,
    }
}

/// `at + d`; `None` past the end of representable time, which no timer reaches anyway.
fn after(at: Timestamp, d: Duration) -> Option<Timestamp> {
    at.checked_add(jiff::SignedDuration::try_from(d).ok()?).ok()
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn demystify_pending(settings: &ClassifySettings, pod: &Pod, now: Timestamp) -> Verdict {
    let status = pod.status.clone().unwrap_or_default();
    let statuses: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    let mut first_seen = None;
    for c in status.conditions.iter().flatten() {
        let at = condition_time(c);
        first_seen = first_seen.or(at);
        if c.status != "False" {
            continue;
        }
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        if c.type_ == "PodScheduled" {
            return Verdict {
                phase: VerdictPhase::Queued,
                reason,
                message,
                kind: None,
                occurred_at: at,
                recheck_at: None,
            };
        }
        if c.type_ != "Ready" && c.type_ != "ContainersReady" {
            continue;
        }
        let waiting = statuses.iter().find_map(|cs| {
            if cs.ready {
                return None;
            }
            cs.state.as_ref()?.waiting.as_ref()
        });
        let Some(waiting) = waiting else { continue };
        let waiting_reason = waiting.reason.clone().unwrap_or_default();
        let code = format!("{reason}|{waiting_reason}");
        let text = format!("{message}|{}", waiting.message.clone().unwrap_or_default());
        let past = |grace: Duration| at.is_none_or(|t| elapsed(t, now) >= grace);
        let initializing = Verdict {
            phase: VerdictPhase::Initializing,
            reason: code.clone(),
            message: text.clone(),
            kind: None,
            occurred_at: at,
            recheck_at: None,
        };
        let graced = |grace: Duration, phase: VerdictPhase| {
            if past(grace) {
                failure(
                    phase,
                    FailureKind::User,
                    code.clone(),
                    format!("Grace period [{}] exceeded|{text}", go_duration(grace)),
                    at,
                )
            } else {
                // Not past the grace period, so `at` is known: the verdict changes at its end.
                Verdict {
                    recheck_at: at.and_then(|t| after(t, grace)),
                    ..initializing.clone()
                }
            }
        };
        return match waiting_reason.as_str() {
            "ErrImagePull" | "ContainerCreating" | "PodInitializing" => initializing,
            "ImagePullBackOff" => graced(
                settings.image_pull_backoff_grace_period,
                VerdictPhase::RetryableFailure,
            ),
            "CreateContainerError" => graced(
                settings.create_container_error_grace_period,
                VerdictPhase::PermanentFailure,
            ),
            "CreateContainerConfigError" => graced(
                settings.create_container_config_error_grace_period,
                VerdictPhase::PermanentFailure,
            ),
            "InvalidImageName" => failure(
                VerdictPhase::PermanentFailure,
                FailureKind::User,
                code,
                text,
                at,
            ),
            _ => failure(
                VerdictPhase::RetryableFailure,
                FailureKind::System,
                code,
                text,
                at,
            ),
        };
    }
    Verdict {
        occurred_at: first_seen.or_else(|| creation_time(pod)),
        ..Verdict::bare(VerdictPhase::Queued)
    }
}

fn classify_succeeded(pod: &Pod) -> Verdict {
    let oom = container_statuses(pod).any(|cs| {
        cs.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(is_oom_killed)
    });
    if oom {
        failure(
            VerdictPhase::RetryableFailure,
            FailureKind::User,
            "OOMKilled".into(),
            "Pod reported success despite being OOMKilled".into(),
            None,
        )
    } else {
        Verdict::bare(VerdictPhase::Succeeded)
    }
}

fn classify_failed(settings: &ClassifySettings, pod: &Pod) -> Verdict {
    let status = pod.status.clone().unwrap_or_default();
    let mut code = "UnknownError".to_owned();
    let mut message = "Pod failed. No message received from kubernetes.".to_owned();
    if let Some(r) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        code = r.to_owned();
    }
    if let Some(m) = status.message.as_deref().filter(|m| !m.is_empty()) {
        message = m.to_owned();
    }
    let pod_reason = code.clone();

    let mut any_terminated = false;
    let mut tensorflow_sigkill = false;
    let mut tensorflow_final: Option<&ContainerStateTerminated> = None;
    let statuses: Vec<&ContainerStatus> = container_statuses(pod).collect();
    for cs in &statuses {
        let previous = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let current = cs.state.as_ref().and_then(|s| s.terminated.as_ref());
        for term in [previous, current].into_iter().flatten() {
            any_terminated = true;
            if is_oom_killed(term) {
                code = "OOMKilled".into();
            } else if is_sigkill(term.exit_code) {
                code = "Interrupted".into();
            }
            message.push_str(&format!(
                "\r\n[{}] terminated with exit code ({}). Reason [{}]. Message: \n{}.",
                cs.name,
                term.exit_code,
                term.reason.as_deref().unwrap_or(""),
                term.message.as_deref().unwrap_or("")
            ));
        }
        if cs.name == DEFAULT_CONTAINER_NAME {
            tensorflow_final = current.or(previous);
            tensorflow_sigkill =
                tensorflow_final.is_some_and(|t| is_sigkill(t.exit_code) && !is_oom_killed(t));
        }
    }

    if INTERRUPTED_POD_REASONS.contains(&pod_reason.as_str())
        || tensorflow_sigkill
        || !any_terminated
    {
        return failure(
            VerdictPhase::RetryableFailure,
            FailureKind::System,
            "Interrupted".into(),
            message,
            None,
        );
    }
    if code == "OOMKilled" {
        let phase = if settings.oom_killed_is_permanent {
            VerdictPhase::PermanentFailure
        } else {
            VerdictPhase::RetryableFailure
        };
        return failure(phase, FailureKind::User, code, message, None);
    }
    // The TFJob exit-code rule: 128-255 (killed by a signal) may succeed when run again,
    // 1-127 is the program's own failure.
    let exit_code = tensorflow_final.map(|t| t.exit_code).unwrap_or(1);
    let phase = if (128..=255).contains(&exit_code) {
        VerdictPhase::RetryableFailure
    } else {
        VerdictPhase::PermanentFailure
    };
    failure(phase, FailureKind::User, code, message, None)
}

fn failure(
    phase: VerdictPhase,
    kind: FailureKind,
    reason: String,
    message: String,
    occurred_at: Option<Timestamp>,
) -> Verdict {
    Verdict {
        phase,
        reason,
        message,
        kind: Some(kind),
        occurred_at,
        recheck_at: None,
    }
}

fn container_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
}

fn is_oom_killed(term: &ContainerStateTerminated) -> bool {
    term.reason
        .as_deref()
        .is_some_and(|r| r.contains("OOMKilled"))
}

/// 137 is 128 + SIGKILL; 247 is how some runtimes report the same kill.
fn is_sigkill(exit_code: i32) -> bool {
    exit_code == 137 || exit_code == 247
}

fn condition_time(c: &PodCondition) -> Option<Timestamp> {
    c.last_transition_time.as_ref().map(|t| t.0)
}

fn creation_time(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

/// Formats a duration the way Go's `time.Duration.String` does for whole seconds (`3m0s`,
/// `1h2m3s`, `0s`), so messages match what Flyte users know.
pub fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": status,
        }))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn classify(status: serde_json::Value, now: &str) -> Verdict {
        classify_pod(&ClassifySettings::default(), &pod(status), at(now))
    }

    fn waiting(reason: &str) -> serde_json::Value {
        json!({
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "message": "containers with unready status: [tensorflow]",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
            "containerStatuses": [{
                "name": "tensorflow", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                "state": {"waiting": {"reason": reason, "message": "details"}}
            }]
        })
    }

    fn failed(containers: serde_json::Value) -> serde_json::Value {
        json!({"phase": "Failed", "containerStatuses": containers})
    }

    fn terminated(name: &str, exit: i32, reason: &str) -> serde_json::Value {
        json!({"name": name, "ready": false, "restartCount": 0, "image": "x", "imageID": "",
               "state": {"terminated": {"exitCode": exit, "reason": reason}}})
    }

    #[test]
    fn unscheduled_pods_are_queued_with_the_condition_reason() {
        let v = classify(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            "2026-01-01T01:00:00Z",
        );
        assert_eq!(v.phase, VerdictPhase::Queued);
        assert_eq!(v.reason, "Unschedulable");
        assert_eq!(v.message, "0/3 nodes are available");
        assert_eq!(v.occurred_at, Some(at("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn a_verdict_that_time_can_change_says_when() {
        // Inside the image pull grace period (180 s from the condition's transition): waiting
        // now, a failure once it ends, so look again then.
        let v = classify(waiting("ImagePullBackOff"), "2026-01-01T00:01:00Z");
        assert_eq!(v.phase, VerdictPhase::Initializing);
        assert_eq!(v.recheck_at, Some(at("2026-01-01T00:03:00Z")));
        // At the end of it the verdict is final: nothing more to wait for.
        let v = classify(waiting("ImagePullBackOff"), "2026-01-01T00:03:00Z");
        assert_eq!(v.phase, VerdictPhase::RetryableFailure);
        assert_eq!(v.recheck_at, None);
        // The pending timeout ends earlier than a grace period: the earlier time wins.
        let settings = ClassifySettings {
            pod_pending_timeout: Some(Duration::from_secs(60)),
            ..ClassifySettings::default()
        };
        let pending = pod(waiting("ImagePullBackOff"));
        let v = classify_pod(&settings, &pending, at("2026-01-01T00:00:30Z"));
        assert_eq!(v.recheck_at, Some(at("2026-01-01T00:01:00Z")));
        let v = classify_pod(&settings, &pending, at("2026-01-01T00:01:00Z"));
        assert_eq!(v.reason, "PodPendingTimeout");
        assert_eq!(v.recheck_at, None);
        // A queued pod under a pending timeout.
        let queued = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        let v = classify_pod(&settings, &queued, at("2026-01-01T00:00:10Z"));
        assert_eq!(v.recheck_at, Some(at("2026-01-01T00:01:00Z")));
        // Verdicts only the pod can change.
        for (status, now) in [
            (waiting("ContainerCreating"), "2026-01-01T00:00:10Z"),
            (json!({"phase": "Running"}), "2026-01-01T00:00:10Z"),
            (json!({"phase": "Succeeded"}), "2026-01-01T00:00:10Z"),
            (
                failed(json!([terminated("tensorflow", 1, "Error")])),
                "2026-01-01T00:00:10Z",
            ),
        ] {
            assert_eq!(classify(status.clone(), now).recheck_at, None, "{status}");
        }
        // Without a pending timeout, a queued pod waits on the scheduler, not on time.
        assert_eq!(
            classify_pod(
                &ClassifySettings::default(),
                &queued,
                at("2026-01-01T00:00:10Z")
            )
            .recheck_at,
            None
        );
    }

    #[test]
    fn benign_waiting_reasons_are_initializing() {
        for reason in ["ErrImagePull", "ContainerCreating", "PodInitializing"] {
            let v = classify(waiting(reason), "2026-01-02T00:00:00Z");
            assert_eq!(v.phase, VerdictPhase::Initializing, "{reason}");
            assert_eq!(v.reason, format!("ContainersNotReady|{reason}"));
            assert_eq!(
                v.message,
                "containers with unready status: [tensorflow]|details"
            );
        }
    }

    #[test]
    fn image_pull_backoff_is_retryable_after_its_grace_period() {
        let before = classify(waiting("ImagePullBackOff"), "2026-01-01T00:02:59Z");
        assert_eq!(before.phase, VerdictPhase::Initializing);
        let after = classify(waiting("ImagePullBackOff"), "2026-01-01T00:03:00Z");
        assert_eq!(after.phase, VerdictPhase::RetryableFailure);
        assert_eq!(after.kind, Some(FailureKind::User));
        assert!(
            after.message.starts_with("Grace period [3m0s] exceeded|"),
            "{}",
            after.message
        );
    }

    #[test]
    fn create_container_errors_are_permanent_after_their_grace_periods() {
        let before = classify(waiting("CreateContainerError"), "2026-01-01T00:01:00Z");
        assert_eq!(before.phase, VerdictPhase::Initializing);
        let after = classify(waiting("CreateContainerError"), "2026-01-01T00:03:00Z");
        assert_eq!(after.phase, VerdictPhase::PermanentFailure);
        // Config errors have no grace period by default.
        let config = classify(
            waiting("CreateContainerConfigError"),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(config.phase, VerdictPhase::PermanentFailure);
        assert_eq!(config.kind, Some(FailureKind::User));
        assert!(config.message.starts_with("Grace period [0s] exceeded|"));
    }

    #[test]
    fn invalid_image_name_is_permanent_at_once_and_unknown_reasons_are_system_retryable() {
        let v = classify(waiting("InvalidImageName"), "2026-01-01T00:00:00Z");
        assert_eq!(v.phase, VerdictPhase::PermanentFailure);
        assert_eq!(v.kind, Some(FailureKind::User));
        let v = classify(waiting("SomethingNew"), "2026-01-01T00:00:00Z");
        assert_eq!(v.phase, VerdictPhase::RetryableFailure);
        assert_eq!(v.kind, Some(FailureKind::System));
    }

    #[test]
    fn pending_timeout_turns_waiting_into_retryable_failure() {
        let settings = ClassifySettings {
            pod_pending_timeout: Some(Duration::from_secs(600)),
            ..ClassifySettings::default()
        };
        let p = pod(json!({"phase": "Pending"}));
        let v = classify_pod(&settings, &p, at("2026-01-01T00:09:59Z"));
        assert_eq!(v.phase, VerdictPhase::Queued);
        let v = classify_pod(&settings, &p, at("2026-01-01T00:10:00Z"));
        assert_eq!(v.phase, VerdictPhase::RetryableFailure);
        assert_eq!(v.reason, "PodPendingTimeout");
    }

    #[test]
    fn succeeded_pods_that_were_oom_killed_are_failures() {
        let ok = classify(
            json!({"phase": "Succeeded", "containerStatuses": [terminated("tensorflow", 0, "Completed")]}),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(ok.phase, VerdictPhase::Succeeded);
        let oom = classify(
            json!({"phase": "Succeeded", "containerStatuses": [terminated("tensorflow", 0, "OOMKilled")]}),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(oom.phase, VerdictPhase::RetryableFailure);
        assert_eq!(oom.reason, "OOMKilled");
        assert_eq!(oom.message, "Pod reported success despite being OOMKilled");
    }

    #[test]
    fn exit_code_classes() {
        for (code, phase) in [
            (1, VerdictPhase::PermanentFailure),
            (127, VerdictPhase::PermanentFailure),
            (128, VerdictPhase::RetryableFailure),
            (143, VerdictPhase::RetryableFailure),
            (255, VerdictPhase::RetryableFailure),
        ] {
            let v = classify(
                failed(json!([terminated("tensorflow", code, "Error")])),
                "2026-01-01T00:00:00Z",
            );
            assert_eq!(v.phase, phase, "exit code {code}");
            assert_eq!(v.kind, Some(FailureKind::User));
            assert!(
                v.message.ends_with(&format!(
                    "\r\n[tensorflow] terminated with exit code ({code}). Reason [Error]. Message: \n."
                )),
                "{:?}",
                v.message
            );
        }
    }

    #[test]
    fn sigkill_of_tensorflow_and_node_shutdown_are_system_interruptions() {
        let v = classify(
            failed(json!([terminated("tensorflow", 137, "Error")])),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            (v.phase, v.kind, v.reason.as_str()),
            (
                VerdictPhase::RetryableFailure,
                Some(FailureKind::System),
                "Interrupted"
            )
        );
        let mut status = failed(json!([terminated("tensorflow", 1, "Error")]));
        status["reason"] = json!("NodeShutdown");
        status["message"] = json!("node is shutting down");
        let v = classify(status, "2026-01-01T00:00:00Z");
        assert_eq!(v.phase, VerdictPhase::RetryableFailure);
        assert_eq!(v.kind, Some(FailureKind::System));
        assert!(v.message.starts_with("node is shutting down"));
        // No termination recorded at all: the node is likely gone.
        let v = classify(json!({"phase": "Failed"}), "2026-01-01T00:00:00Z");
        assert_eq!(v.phase, VerdictPhase::RetryableFailure);
        assert_eq!(
            v.message,
            "Pod failed. No message received from kubernetes."
        );
    }

    #[test]
    fn oom_killed_failures_are_retryable_unless_configured_permanent() {
        let status = failed(json!([terminated("tensorflow", 137, "OOMKilled")]));
        let v = classify(status.clone(), "2026-01-01T00:00:00Z");
        assert_eq!(
            (v.phase, v.kind, v.reason.as_str()),
            (
                VerdictPhase::RetryableFailure,
                Some(FailureKind::User),
                "OOMKilled"
            )
        );
        let settings = ClassifySettings {
            oom_killed_is_permanent: true,
            ..ClassifySettings::default()
        };
        let v = classify_pod(&settings, &pod(status), at("2026-01-01T00:00:00Z"));
        assert_eq!(v.phase, VerdictPhase::PermanentFailure);
    }

    #[test]
    fn running_and_unknown_phases() {
        assert_eq!(
            classify(json!({"phase": "Running"}), "2026-01-01T00:00:00Z").phase,
            VerdictPhase::Running
        );
        assert_eq!(
            classify(json!({"phase": "Unknown"}), "2026-01-01T00:00:00Z").phase,
            VerdictPhase::Undefined
        );
    }

    #[test]
    fn go_duration_formatting() {
        assert_eq!(go_duration(Duration::from_secs(180)), "3m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_secs(3723)), "1h2m3s");
    }
}
