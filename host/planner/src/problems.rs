//! Warning events for pod problems a user should see on the TFJob: image pull failures, crash
//! loops, OOM kills, unschedulable pods.
//!
//! Each event carries a once-key of pod uid and reason, so it is published once per pod
//! incarnation rather than on every reconcile (upstream repeated them).

use k8s_openapi::api::core::v1::Pod;

use crate::events::{EventType, JobEvent};

/// Container waiting reasons worth a warning.
const WAITING_PROBLEMS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "CrashLoopBackOff",
    "InvalidImageName",
    "CreateContainerError",
    "CreateContainerConfigError",
];

/// The warning events `pod`'s status calls for.
pub fn pod_problem_events(pod: &Pod) -> Vec<JobEvent> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut events = Vec::new();
    let mut push = |reason: &str, message: String| {
        let once_key = Some(format!("{uid}/{reason}"));
        if events.iter().any(|e: &JobEvent| e.once_key == once_key) {
            return;
        }
        events
            .push(JobEvent::new(EventType::Warning, reason, message, once_key).about("Pod", name));
    };
    for c in status.conditions.iter().flatten() {
        if c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
        {
            push(
                "Unschedulable",
                format!(
                    "Pod {namespace}/{name} is unschedulable: {}",
                    c.message.as_deref().unwrap_or_default()
                ),
            );
        }
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in containers {
        if let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = waiting.reason.as_deref()
            && WAITING_PROBLEMS.contains(&reason)
        {
            push(
                reason,
                format!(
                    "Pod {namespace}/{name} container {}: {reason}: {}",
                    cs.name,
                    waiting.message.as_deref().unwrap_or_default()
                ),
            );
        }
        let terminations = [
            cs.state.as_ref().and_then(|s| s.terminated.as_ref()),
            cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()),
        ];
        if terminations
            .into_iter()
            .flatten()
            .any(|t| t.reason.as_deref().is_some_and(|r| r.contains("OOMKilled")))
        {
            push(
                "OOMKilled",
                format!("Pod {namespace}/{name} container {} was OOMKilled", cs.name),
            );
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_event_per_reason_keyed_by_pod_incarnation() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u1"},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no gpu"}],
                "containerStatuses": [
                    {"name": "tensorflow", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}},
                     "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
                    {"name": "side", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                    {"name": "ok", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                     "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]
            }
        }))
        .unwrap();
        let events = pod_problem_events(&pod);
        let summary: Vec<_> = events
            .iter()
            .map(|e| (e.reason.as_str(), e.once_key.as_deref().unwrap()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("Unschedulable", "u1/Unschedulable"),
                ("ImagePullBackOff", "u1/ImagePullBackOff"),
                ("OOMKilled", "u1/OOMKilled"),
            ]
        );
        assert!(events.iter().all(|e| e.type_ == EventType::Warning));
        assert_eq!(
            events[1].message,
            "Pod ns/j-worker-0 container tensorflow: ImagePullBackOff: back-off"
        );
    }
}
