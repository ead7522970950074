//! Fuzz target `guest_results`: whatever a policy can return, through the host's decoding, guard
//! and error paths.
//!
//! A guest controls every byte of its results: error texts, verdict fields (phase, reason,
//! message, kind, `occurred-at`), the decorated pod's JSON. The input is split at NUL bytes into
//! texts, and its first byte picks the phase, the failure kind, the capabilities granted and
//! the byte budgets. Each text goes through the guest-error path (cut to its budget), the
//! verdict path (conversion, then the check against the observed pod, which is itself one of
//! the texts when it parses as a Pod) and the guard (the decorated pod against the operator's
//! pod, under the chosen grants). Nothing may panic, and every cut text must fit its budget.

#![no_main]

use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tfjob_policy_logic::text;
use tfjob_policy_engine::bindings::{FailureKind, Phase, PolicyError, Verdict};
use tfjob_policy_engine::capabilities::Capabilities;
use tfjob_policy_engine::engine::{MAX_GUEST_TEXT, guest_error};
use tfjob_policy_engine::guard::{self, AllowedPaths};
use tfjob_policy_engine::hook_call::{MAX_VERDICT_MESSAGE, MAX_VERDICT_REASON, verdict_from};
use tfjob_policy_engine::verdict_guard;

const PHASES: [Phase; 8] = [
    Phase::Undefined,
    Phase::Queued,
    Phase::WaitingForResources,
    Phase::Initializing,
    Phase::Running,
    Phase::Succeeded,
    Phase::RetryableFailure,
    Phase::PermanentFailure,
];

/// The pod as the operator hands it to a decoration policy.
fn operator_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "mnist-worker-0", "namespace": "ml",
            "labels": {"training.kubeflow.org/replica-index": "0", "team": "a"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "u", "controller": true}]
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "tensorflow", "image": "tf", "env": [{"name": "TF_CONFIG", "value": "{}"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let texts: Vec<String> = rest
        .split(|&b| b == 0)
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    let part = |i: usize| texts.get(i).cloned().unwrap_or_default();

    // Cutting at any budget keeps a prefix on a character boundary.
    let budget = usize::from(control) * 17 % 300;
    for t in &texts {
        let cut = text::prefix(t, budget);
        assert!(cut.len() <= budget && t.starts_with(cut));
        assert!(text::elided(t, budget).len() <= budget + '…'.len_utf8());
    }

    // Guest errors, whatever their text.
    for error in [
        PolicyError::Failed(part(0)),
        PolicyError::InvalidInput(part(1)),
        PolicyError::InvalidSettings(part(2)),
    ] {
        let e = guest_error(error);
        assert!(e.message.len() <= MAX_GUEST_TEXT + 64, "{}", e.message.len());
    }

    // Verdicts, checked against an observed pod (one of the texts, when it is one).
    let verdict = Verdict {
        phase: PHASES[usize::from(control) % PHASES.len()],
        reason: part(0),
        message: part(1),
        kind: match control % 3 {
            0 => None,
            1 => Some(FailureKind::User),
            _ => Some(FailureKind::System),
        },
        occurred_at: (control & 0x10 != 0).then(|| part(2)),
        recheck_at: (control & 0x20 != 0).then(|| part(4)),
    };
    if let Ok(v) = verdict_from(verdict, "fuzz") {
        assert!(v.reason.len() <= MAX_VERDICT_REASON + 3);
        assert!(v.message.len() <= MAX_VERDICT_MESSAGE + 3);
        if let Ok(pod) = serde_json::from_str::<Pod>(&part(3)) {
            let _ = verdict_guard::check(&pod, &v);
        }
    }

    // A decorated pod: any JSON at all, against the operator's pod.
    if let Ok(after) = serde_json::from_str::<Value>(&part(4)) {
        let mut grants = Capabilities::default();
        grants.secrets = control & 0x01 != 0;
        grants.service_account_tokens = control & 0x02 != 0;
        grants.external_volumes = control & 0x04 != 0;
        if control & 0x08 != 0 {
            grants.host_paths = vec![part(5)];
        }
        let allowed = AllowedPaths::default().granting(grants);
        let before = operator_pod();
        let _ = guard::check(&before, &after, &allowed);
        // Unchanged is always allowed.
        assert_eq!(guard::check(&before, &before, &allowed), Ok(()));
    }
});
