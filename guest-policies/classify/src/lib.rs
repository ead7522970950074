//! The default classification policy: `default-policies.md` "Classification" as a Wasm
//! component (world `classifier`).
//!
//! The decisions live in `tfjob_policy_logic::classify`, shared with the operator's native
//! reference; this crate decodes the settings (`ClassifySettingsDoc`: Go duration strings), the
//! pod and `now` (RFC 3339), classifies, and returns the verdict with `occurred-at` in RFC 3339.
//! `{}` or an empty settings document mean the defaults. Only the pod's metadata and status
//! are decoded (see `tfjob_policy_sdk::convert::observed_pod_from_json`), which keeps the
//! component small; the classification rules never read the spec.
//!
//! With `failUnschedulable` set, a pod the scheduler has found no room for since longer than
//! the grace period is compared with the nodes (read from the cluster; the operator grants the
//! read for those settings) and the declared node pools: one that fits none fails for good
//! (`tfjob_policy_logic::never_fits`). Only then are the pod's resources and node selector
//! decoded, and the nodes as small shapes of what the comparison reads.

use tfjob_policy_sdk::logic::classify::classify_pod;
use tfjob_policy_sdk::logic::classify_settings::ClassifySettingsDoc;
use tfjob_policy_sdk::logic::never_fits::{self, Due, FailUnschedulable};
use tfjob_policy_sdk::logic::verdict::Classification;
use tfjob_policy_sdk::wit::{JobContext, PolicyError, Verdict};
use tfjob_policy_sdk::{cluster, convert, serde_json, settings};

/// The component's implementation.
struct DefaultClassify;

tfjob_policy_sdk::export_policy!(world: "classifier", path: "../../wit", policy: DefaultClassify);

impl bindings::exports::tfjob::policy::settings::Guest for DefaultClassify {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<ClassifySettingsDoc>(&settings)
    }
}

impl bindings::exports::tfjob::policy::classify::Guest for DefaultClassify {
    fn classify_pod(
        _ctx: JobContext,
        settings: String,
        pod: String,
        now: String,
    ) -> Result<Verdict, PolicyError> {
        let doc = settings::cached::<ClassifySettingsDoc>(&settings)?;
        let settings = doc.to_settings().map_err(PolicyError::InvalidSettings)?;
        // Metadata and status only: classification never reads the spec.
        let observed = convert::observed_pod_from_json(&pod)?;
        let now = convert::timestamp_from_rfc3339("now", &now)?;
        let verdict = classify_pod(&settings, &observed, now);
        match &settings.fail_unschedulable {
            Some(rule) => judge_unschedulable(rule, verdict, &pod, now).map(Into::into),
            None => Ok(verdict.into()),
        }
    }
}

/// `verdict` under the `failUnschedulable` rule: a pod waiting for room past the grace period
/// that fits no node (of those its node selector allows) and no declared pool fails for good.
fn judge_unschedulable(
    rule: &FailUnschedulable,
    mut verdict: Classification,
    pod: &str,
    now: tfjob_policy_sdk::jiff::Timestamp,
) -> Result<Classification, PolicyError> {
    match never_fits::due(rule, &verdict, now) {
        Due::No => Ok(verdict),
        Due::At(end) => {
            verdict.recheck_at = Some(verdict.recheck_at.map_or(end, |t| t.min(end)));
            Ok(verdict)
        }
        Due::Now => {
            // Shapes of a few fields, every one defaulted: serde's own errors name enough.
            let pod: never_fits::PodShape = serde_json::from_str(pod)
                .map_err(|e| PolicyError::InvalidInput(format!("pod: {e}")))?;
            let selector = &pod.spec.node_selector;
            let listed = cluster::list("nodes", "", &never_fits::selector_text(selector), 0)
                .map_err(|e| {
                    PolicyError::Failed(format!("reading nodes: {}", cluster::message(&e)))
                })?;
            let mut offers = Vec::with_capacity(listed.items.len() + rule.node_pools.len());
            for item in &listed.items {
                let node: never_fits::NodeShape = serde_json::from_str(item)
                    .map_err(|e| PolicyError::InvalidInput(format!("node: {e}")))?;
                offers.push(never_fits::node_offer(&node));
            }
            offers.extend(rule.node_pools.iter().cloned());
            let requests = never_fits::pod_requests(&pod);
            Ok(match never_fits::never_fits(&requests, selector, &offers) {
                Some(why) => never_fits::never_schedulable(verdict, &why),
                None => verdict,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::tfjob::policy::classify::Guest as _;
    use bindings::exports::tfjob::policy::settings::Guest as _;
    use tfjob_policy_sdk::serde_json::json;
    use tfjob_policy_sdk::wit::{FailureKind, Phase};

    fn ctx() -> JobContext {
        JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "u-1".into(),
            job_labels: vec![],
            job_annotations: vec![],
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }

    fn image_pull_backoff() -> String {
        json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                    "message": "not ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "tensorflow", "ready": false, "restartCount": 0,
                    "image": "x", "imageID": "", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}}]
            }
        })
        .to_string()
    }

    #[test]
    fn grace_period_from_settings_and_rfc3339_times() {
        let v = DefaultClassify::classify_pod(
            ctx(),
            "".into(),
            image_pull_backoff(),
            "2026-01-01T00:02:00Z".into(),
        )
        .unwrap();
        assert_eq!(v.phase, Phase::Initializing);
        assert_eq!(v.occurred_at.as_deref(), Some("2026-01-01T00:00:00Z"));
        let v = DefaultClassify::classify_pod(
            ctx(),
            r#"{"imagePullBackoffGracePeriod": "90s"}"#.into(),
            image_pull_backoff(),
            "2026-01-01T01:02:00+01:00".into(),
        )
        .unwrap();
        assert_eq!(v.phase, Phase::RetryableFailure);
        assert_eq!(v.kind, Some(FailureKind::User));
        assert_eq!(v.reason, "ContainersNotReady|ImagePullBackOff");
        assert!(
            v.message.starts_with("Grace period [1m30s] exceeded|"),
            "{}",
            v.message
        );
    }

    #[test]
    fn running_pods() {
        let pod = r#"{"metadata": {"name": "p"}, "status": {"phase": "Running"}}"#;
        let v = DefaultClassify::classify_pod(
            ctx(),
            "{}".into(),
            pod.into(),
            "2026-01-01T00:00:00Z".into(),
        )
        .unwrap();
        assert_eq!(
            v,
            Verdict {
                phase: Phase::Running,
                reason: String::new(),
                message: String::new(),
                kind: None,
                occurred_at: None,
                recheck_at: None,
            }
        );
    }

    #[test]
    fn errors_name_the_field() {
        let pod = r#"{"status": {"phase": 3}}"#;
        let err = DefaultClassify::classify_pod(
            ctx(),
            "{}".into(),
            pod.into(),
            "2026-01-01T00:00:00Z".into(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, PolicyError::InvalidInput(m) if m.starts_with("pod.status.phase: ")),
            "{err:?}"
        );
        let err =
            DefaultClassify::classify_pod(ctx(), "{}".into(), image_pull_backoff(), "soon".into())
                .unwrap_err();
        assert!(
            matches!(&err, PolicyError::InvalidInput(m) if m.starts_with("now: ")),
            "{err:?}"
        );
        let err = DefaultClassify::classify_pod(
            ctx(),
            r#"{"podPendingTimeout": "ten"}"#.into(),
            image_pull_backoff(),
            "2026-01-01T00:00:00Z".into(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, PolicyError::InvalidSettings(m) if m.starts_with("podPendingTimeout: ")),
            "{err:?}"
        );
        assert!(
            DefaultClassify::validate_settings(r#"{"mode": "x"}"#.into())
                .unwrap_err()
                .starts_with("mode: unknown field")
        );
        assert_eq!(DefaultClassify::validate_settings("{}".into()), Ok(()));
    }
}
