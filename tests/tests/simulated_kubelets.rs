//! The two simulated kubelets word what they simulate alike: kwok's stages on the real control
//! plane (`tfjob_control_plane::kwok`) and `up`'s kubelet (`tfjob_cluster::kubelet`), for every
//! waiting reason and pod-level failure a job's script can name. The operator's classification
//! and the suites read these messages, so a difference would make one cluster's tests pass on
//! words the other never says.

use tfjob_cluster::kubelet::status::{pod_failure_message, waiting_message};
use tfjob_control_plane::kwok::{POD_FAILURE_GENERIC, POD_FAILURE_MESSAGES, WAITING_MESSAGES};

#[test]
fn waiting_messages_are_worded_alike() {
    let (image, container, pod, ns) = ("kubeflow/tf:2", "tensorflow", "job-worker-0", "ml");
    for (reason, template) in WAITING_MESSAGES {
        let kwok = template
            .replace("{image}", image)
            .replace("{container}", container)
            .replace("{pod}", pod)
            .replace("{ns}", ns);
        assert_eq!(
            kwok,
            waiting_message(reason, image, container, pod, ns),
            "{reason}"
        );
    }
}

#[test]
fn pod_failure_messages_are_worded_alike() {
    for (reason, message) in POD_FAILURE_MESSAGES {
        assert_eq!(message, pod_failure_message(reason), "{reason}");
    }
    // Any other reason: the generic wording both use.
    assert_eq!(
        pod_failure_message("Preempted"),
        format!("{POD_FAILURE_GENERIC}Preempted")
    );
}
