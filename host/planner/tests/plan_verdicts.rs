//! Each verdict a classification policy can return, and its effect on the job, with a policy
//! that answers the same verdict for every pod. Also policy errors: a failing policy stops the
//! reconcile, an ignored one is reported.

use crate::common;

use common::*;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use pretty_assertions::assert_eq;
use tfjob_api::JobConditionType::{Failed, Restarting, Running, Succeeded};
use tfjob_planner::policy::{FailureKind, PolicyErrorCategory, VerdictPhase};
use tfjob_planner::{
    Classified, DeletionCause, Plan, PlanError, PlanInput, PodContext, PodPolicies, PolicyError,
    PolicyNote, Settings, ShapedPod, Verdict, plan,
};

/// A classification policy that answers one verdict, or fails.
struct Fixed {
    verdict: Result<Verdict, PolicyError>,
    shape_error: Option<PolicyError>,
    skipped: Vec<PolicyError>,
    /// Notes returned with every shaped pod and every classification.
    notes: Vec<PolicyNote>,
}

impl Fixed {
    fn verdict(phase: VerdictPhase, reason: &str) -> Fixed {
        Fixed {
            verdict: Ok(Verdict {
                phase,
                reason: reason.into(),
                message: format!("{reason} happened"),
                kind: phase.is_failure().then_some(FailureKind::User),
                occurred_at: None,
                recheck_at: None,
                policy: "site-classify@0123456789ab".into(),
            }),
            shape_error: None,
            skipped: Vec::new(),
            notes: Vec::new(),
        }
    }
}

fn error(category: PolicyErrorCategory) -> PolicyError {
    PolicyError {
        policy: "broken@0123456789ab".into(),
        category,
        message: "it broke".into(),
    }
}

impl PodPolicies for Fixed {
    fn shape_pod(&self, _ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError> {
        match &self.shape_error {
            Some(e) => Err(e.clone()),
            None => Ok(ShapedPod {
                pod,
                applied: vec![],
                skipped: self.skipped.clone(),
                notes: self.notes.clone(),
            }),
        }
    }

    fn classify(
        &self,
        _ctx: &PodContext,
        _pod: &Pod,
        _now: Timestamp,
    ) -> Result<Classified, PolicyError> {
        Ok(Classified {
            verdict: self.verdict.clone()?,
            notes: self.notes.clone(),
        })
    }
}

fn plan_with(cluster: &Cluster, policies: &Fixed) -> Result<Plan, PlanError> {
    plan(&PlanInput {
        job: &cluster.job,
        pods: &cluster.pods,
        services: &cluster.services,
        now: at(30),
        settings: &Settings::default(),
        policies,
        pod_group: None,
        priority_classes: &Default::default(),
        kueue: None,
    })
}

/// A job whose pods all exist (and report Running to Kubernetes), under `policy`.
fn cluster(policy: &str) -> Cluster {
    running_cluster(tfjob(&[("Worker", 2, policy)], &[]))
}

#[test]
fn running_verdicts_keep_the_job_running() {
    let c = cluster("OnFailure");
    let p = plan_with(&c, &Fixed::verdict(VerdictPhase::Running, "")).unwrap();
    assert!(p.status.is_none_or(|s| s.is_true(Running)));
    assert!(p.delete_pods.is_empty());
}

#[test]
fn succeeded_verdicts_complete_the_job() {
    let c = cluster("OnFailure");
    let p = plan_with(&c, &Fixed::verdict(VerdictPhase::Succeeded, "")).unwrap();
    assert!(new_status(&p).is_true(Succeeded));
}

#[test]
fn a_verdict_that_time_will_change_brings_the_job_back_at_that_moment() {
    let c = cluster("OnFailure");
    // Decided at 30 s; a grace period ends 5 s later.
    let mut policies = Fixed::verdict(
        VerdictPhase::Initializing,
        "ContainersNotReady|ImagePullBackOff",
    );
    if let Ok(v) = &mut policies.verdict {
        v.recheck_at = Some(at(35));
    }
    let p = plan_with(&c, &policies).unwrap();
    assert_eq!(p.requeue_after, Some(std::time::Duration::from_secs(5)));
    // A recheck time already past (a 0.1.0 policy's "now") adds no requeue of its own.
    if let Ok(v) = &mut policies.verdict {
        v.recheck_at = Some(at(30));
    }
    let p = plan_with(&c, &policies).unwrap();
    assert_eq!(p.requeue_after, Some(tfjob_planner::plan::PENDING_RECHECK));
}

#[test]
fn pending_verdicts_change_nothing_and_look_again_soon() {
    for phase in [
        VerdictPhase::Queued,
        VerdictPhase::Initializing,
        VerdictPhase::WaitingForResources,
    ] {
        let c = cluster("OnFailure");
        let p = plan_with(&c, &Fixed::verdict(phase, "Waiting")).unwrap();
        assert!(p.delete_pods.is_empty(), "{phase:?}");
        assert!(
            !p.status.as_ref().is_some_and(|s| s.is_finished()),
            "{phase:?}"
        );
        assert_eq!(
            p.requeue_after,
            Some(tfjob_planner::plan::PENDING_RECHECK),
            "{phase:?}"
        );
    }
}

#[test]
fn retryable_verdicts_restart_under_restarting_policies_and_fail_under_never() {
    for policy in ["OnFailure", "Always", "ExitCode"] {
        let c = cluster(policy);
        let p = plan_with(
            &c,
            &Fixed::verdict(VerdictPhase::RetryableFailure, "Evicted"),
        )
        .unwrap();
        assert!(new_status(&p).is_true(Restarting), "{policy}");
        assert!(
            p.delete_pods
                .iter()
                .all(|d| d.cause == DeletionCause::Restart),
            "{policy}"
        );
        assert_eq!(p.delete_pods.len(), 2, "{policy}");
        let restarting: Vec<&str> = p
            .events
            .iter()
            .filter(|e| e.reason == "TFJobRestarting")
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(restarting.len(), 2, "one event per restarted pod");
        assert!(
            restarting[0].ends_with(
                "Pod mnist-worker-0: Evicted (policy site-classify@0123456789ab): Evicted happened"
            ),
            "{restarting:?}"
        );
    }
    let c = cluster("Never");
    let p = plan_with(
        &c,
        &Fixed::verdict(VerdictPhase::RetryableFailure, "Evicted"),
    )
    .unwrap();
    let status = new_status(&p);
    assert!(status.is_true(Failed));
    assert_eq!(
        message(status, Failed),
        "TFJob ml/mnist has failed because 2 Worker replica(s) failed."
    );
    assert!(p.delete_pods.is_empty());
}

#[test]
fn permanent_verdicts_fail_the_job_whatever_the_restart_policy() {
    for policy in ["OnFailure", "Always", "ExitCode", "Never"] {
        let c = cluster(policy);
        let p = plan_with(
            &c,
            &Fixed::verdict(VerdictPhase::PermanentFailure, "InvalidImageName"),
        )
        .unwrap();
        let status = new_status(&p);
        assert!(status.is_true(Failed), "{policy}");
        let text = message(status, Failed);
        assert!(
            text.ends_with("Pod mnist-worker-0: InvalidImageName (policy site-classify@0123456789ab): InvalidImageName happened"),
            "{policy}: {text}"
        );
        assert!(
            p.delete_pods.is_empty(),
            "{policy}: failed pods stay for their logs"
        );
    }
}

#[test]
fn a_failing_classification_policy_fails_the_reconcile() {
    let c = cluster("OnFailure");
    let policies = Fixed {
        verdict: Err(error(PolicyErrorCategory::Timeout)),
        shape_error: None,
        skipped: vec![],
        notes: vec![],
    };
    let err = plan_with(&c, &policies).unwrap_err();
    let PlanError::Policy(e) = err;
    assert_eq!(e.category, PolicyErrorCategory::Timeout);
    assert_eq!(e.policy, "broken@0123456789ab");
}

#[test]
fn a_failing_shaping_policy_creates_no_pod_and_an_ignored_one_is_reported() {
    let job = tfjob(&[("Worker", 1, "")], &[]);
    let c = Cluster::new(job);
    let failing = Fixed {
        shape_error: Some(error(PolicyErrorCategory::GuardViolation)),
        ..Fixed::verdict(VerdictPhase::Running, "")
    };
    assert!(plan_with(&c, &failing).is_err());

    let ignoring = Fixed {
        skipped: vec![error(PolicyErrorCategory::Trap)],
        ..Fixed::verdict(VerdictPhase::Running, "")
    };
    let p = plan_with(&c, &ignoring).unwrap();
    assert_eq!(p.create_pods.len(), 1);
    let text = event_message(&p, "PolicyIgnored");
    assert!(
        text.contains("policy broken@0123456789ab failed (trap): it broke"),
        "{text}"
    );
    assert!(text.contains("mnist-worker-0"), "{text}");
}

fn note(reason: &str, key: &str) -> PolicyNote {
    PolicyNote {
        policy: "team-decorate@0123456789ab".into(),
        reason: reason.into(),
        message: format!("{reason} about {key}"),
        warning: true,
        key: key.into(),
    }
}

#[test]
fn policy_notes_become_events_recorded_once_per_job_and_key() {
    // Shaping: the pod is created and the note is an event keyed by job, policy and note key.
    let c = Cluster::new(tfjob(&[("Worker", 1, "")], &[]));
    let noting = Fixed {
        notes: vec![note("PolicyShadowDisagreement", "decorate/Worker")],
        ..Fixed::verdict(VerdictPhase::Running, "")
    };
    let p = plan_with(&c, &noting).unwrap();
    assert_eq!(p.create_pods.len(), 1);
    assert_eq!(
        event_message(&p, "PolicyShadowDisagreement"),
        "PolicyShadowDisagreement about decorate/Worker"
    );
    let keys: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "PolicyShadowDisagreement")
        .map(|e| e.once_key.clone())
        .collect();
    assert_eq!(
        keys,
        vec![Some(format!(
            "{}/team-decorate@0123456789ab/decorate/Worker",
            c.job.metadata.uid.clone().unwrap()
        ))]
    );

    // Classification: notes of an observed pod's verdict are recorded too.
    let running = cluster("OnFailure");
    let classifying = Fixed {
        notes: vec![note("PolicyNotLoaded", "classify")],
        ..Fixed::verdict(VerdictPhase::Running, "")
    };
    let p = plan_with(&running, &classifying).unwrap();
    assert_eq!(
        event_message(&p, "PolicyNotLoaded"),
        "PolicyNotLoaded about classify"
    );
}
