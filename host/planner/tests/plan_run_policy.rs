//! Scenario tests of the planner: the run policy (cleanPodPolicy, ttlSecondsAfterFinished,
//! activeDeadlineSeconds, suspend and resume).

use crate::common;

use common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use tfjob_api::ConditionStatus::{False, True};
use tfjob_api::JobConditionType::{Created, Failed, Running, Succeeded, Suspended};
use tfjob_planner::{DeletionCause, EventType, Plan, Transition};

const DEADLINE: &str = "Job mnist has failed because it was active longer than specified deadline";

/// A job that succeeded at `at(20)` with its chief succeeded, the PS running, worker 0 pending
/// and worker 1 failed.
fn succeeded_job(clean_pod_policy: &str) -> Cluster {
    let extra = format!("runPolicy: {{cleanPodPolicy: {clean_pod_policy}}}");
    let mut cluster = running_cluster(tfjob(
        &[("Chief", 1, ""), ("PS", 1, ""), ("Worker", 2, "")],
        &[&extra],
    ));
    cluster.set("mnist-chief-0", succeeded());
    cluster.set("mnist-worker-0", waiting("ContainerCreating", "", at(15)));
    cluster.set("mnist-worker-1", failed(1));
    let plan = cluster.reconcile(at(20));
    assert!(new_status(&plan).is_true(Succeeded));
    assert!(
        plan.delete_pods.is_empty(),
        "cleanup comes with the next reconcile"
    );
    cluster
}

#[test]
fn clean_pod_policy_decides_which_pods_of_a_finished_job_go() {
    let all = [
        "mnist-chief-0",
        "mnist-ps-0",
        "mnist-worker-0",
        "mnist-worker-1",
    ];
    for (policy, deleted) in [
        ("All", &all[..]),
        ("Running", &["mnist-ps-0", "mnist-worker-0"][..]),
        ("None", &[][..]),
    ] {
        let mut cluster = succeeded_job(policy);
        let plan = cluster.plan(at(30));
        let expected: Vec<_> = deleted
            .iter()
            .map(|n| del(n, &cluster.uid(n), DeletionCause::CleanPodPolicy))
            .collect();
        assert_eq!(deletions(&plan.delete_pods), expected, "{policy}");
        let expected: Vec<_> = deleted
            .iter()
            .map(|n| del_svc(n, DeletionCause::CleanPodPolicy))
            .collect();
        assert_eq!(deletions(&plan.delete_services), expected, "{policy}");
        assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
        assert!(plan.events.is_empty() && plan.transitions.is_empty());
        assert!(!plan.delete_job);
        assert_eq!(plan.requeue_after, None);

        // A succeeded job reports its still-active pods as succeeded.
        let status = new_status(&plan);
        assert_eq!(counts(status, "PS"), (0, 1, 0), "{policy}");
        assert_eq!(counts(status, "Chief"), (0, 1, 0), "{policy}");
        assert_eq!(counts(status, "Worker"), (0, 0, 1), "{policy}");
        assert!(status.is_true(Succeeded) && !status.is_true(Failed));

        // Once the deletions went through, nothing is left to do.
        cluster.apply(&plan, at(30));
        let left: Vec<String> = all
            .iter()
            .filter(|n| !deleted.contains(n))
            .map(|n| (*n).to_owned())
            .collect();
        assert_eq!(cluster.pod_names(), left, "{policy}");
        assert_eq!(cluster.service_names(), left, "{policy}");
        assert_eq!(cluster.plan(at(40)), Plan::default(), "{policy}");
    }
}

#[test]
fn clean_pod_policy_skips_pods_already_being_deleted() {
    let mut cluster = succeeded_job("All");
    cluster.pod_mut("mnist-ps-0").metadata.deletion_timestamp = Some(Time(at(25)));
    let plan = cluster.plan(at(30));
    assert_eq!(
        pod_names_of(&plan),
        ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    );
}

fn pod_names_of(plan: &Plan) -> Vec<String> {
    plan.delete_pods.iter().map(|d| d.name.clone()).collect()
}

#[test]
fn clean_pod_policy_applies_to_failed_jobs_too() {
    let mut cluster = running_cluster(tfjob(
        &[("Chief", 1, ""), ("Worker", 2, "")],
        &["runPolicy: {cleanPodPolicy: Running}"],
    ));
    cluster.set("mnist-worker-1", failed(1));
    let plan = cluster.reconcile(at(20));
    assert!(new_status(&plan).is_true(Failed));
    let plan = cluster.plan(at(30));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del(
                "mnist-chief-0",
                &cluster.uid("mnist-chief-0"),
                DeletionCause::CleanPodPolicy
            ),
            del(
                "mnist-worker-0",
                &cluster.uid("mnist-worker-0"),
                DeletionCause::CleanPodPolicy
            ),
        ]
    );
    assert_eq!(plan.status, None, "a failed job keeps its counts");
}

#[test]
fn ttl_deletes_the_job_after_it_finished() {
    let mut cluster = running_cluster(tfjob(
        &[("Worker", 1, "")],
        &["runPolicy: {ttlSecondsAfterFinished: 100}"],
    ));
    cluster.set("mnist-worker-0", succeeded());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(status.is_true(Succeeded));
    assert_eq!(status.completion_time, Some(Time(at(20))));
    assert!(!plan.delete_job);

    let plan = cluster.plan(at(50));
    assert_eq!(
        plan,
        Plan {
            requeue_after: Some(secs(70)),
            ..Plan::default()
        }
    );
    assert_eq!(cluster.plan(at(119)).requeue_after, Some(secs(1)));

    let plan = cluster.plan(at(120));
    assert!(plan.delete_job);
    assert_eq!(plan.transitions, vec![Transition::Deleted]);
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "SuccessfulDeleteJob", None)]
    );
    assert_eq!(
        event_message(&plan, "SuccessfulDeleteJob"),
        "Deleted job: mnist"
    );
    assert_eq!(plan.requeue_after, None);
    assert_eq!(plan.status, None);
}

#[test]
fn ttl_applies_to_failed_jobs_and_zero_means_at_once() {
    let mut cluster = running_cluster(tfjob(
        &[("Worker", 2, "")],
        &["runPolicy: {ttlSecondsAfterFinished: 0}"],
    ));
    cluster.set("mnist-worker-1", failed(137));
    let plan = cluster.reconcile(at(20));
    assert!(new_status(&plan).is_true(Failed));
    assert!(!plan.delete_job);
    let plan = cluster.plan(at(20));
    assert!(plan.delete_job);
    assert_eq!(plan.transitions, vec![Transition::Deleted]);
}

#[test]
fn active_deadline_requeues_for_the_remaining_time_then_fails_the_job() {
    let mut cluster = Cluster::new(tfjob(
        &[("Chief", 1, ""), ("Worker", 2, "")],
        &["runPolicy: {activeDeadlineSeconds: 600}"],
    ));
    let plan = cluster.reconcile(t0());
    assert_eq!(plan.requeue_after, Some(secs(600)));
    assert_eq!(cluster.status().start_time, Some(Time(t0())));

    for name in cluster.pod_names() {
        cluster.set(&name, running());
    }
    let plan = cluster.reconcile(at(100));
    assert_eq!(plan.requeue_after, Some(secs(500)));
    assert!(cluster.status().is_true(Running));
    let plan = cluster.plan(at(599));
    assert_eq!(plan.requeue_after, Some(secs(1)));
    assert_eq!(plan.status, None);

    // Pending pods make the job look again sooner, never later than the deadline.
    cluster.set("mnist-worker-0", waiting("ContainerCreating", "", at(100)));
    assert_eq!(cluster.plan(at(200)).requeue_after, Some(secs(15)));
    assert_eq!(cluster.plan(at(590)).requeue_after, Some(secs(10)));

    cluster.set("mnist-worker-1", succeeded());
    let chief = cluster.uid("mnist-chief-0");
    let pending = cluster.uid("mnist-worker-0");
    let plan = cluster.reconcile(at(600));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Failed, True, "TFJobFailed"),
        ]
    );
    assert_eq!(message(status, Failed), DEADLINE);
    assert_eq!(status.completion_time, Some(Time(at(600))));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del("mnist-chief-0", &chief, DeletionCause::JobFailed),
            del("mnist-worker-0", &pending, DeletionCause::JobFailed),
        ],
        "running and pending pods are freed, the succeeded pod stays"
    );
    assert_eq!(
        deletions(&plan.delete_services),
        vec![
            del_svc("mnist-chief-0", DeletionCause::JobFailed),
            del_svc("mnist-worker-0", DeletionCause::JobFailed),
        ]
    );
    assert_eq!(counts(status, "Chief"), (0, 0, 0));
    assert_eq!(counts(status, "Worker"), (0, 1, 0));
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Warning, "TFJobFailed", None)]
    );
    assert_eq!(event_message(&plan, "TFJobFailed"), DEADLINE);
    assert_eq!(plan.transitions, vec![Transition::Failed]);
    assert_eq!(plan.requeue_after, None);
    assert!(plan.create_pods.is_empty());
    assert_eq!(cluster.pod_names(), ["mnist-worker-1"]);
}

#[test]
fn active_deadline_fails_a_job_whose_pods_never_came_back() {
    let mut cluster = running_cluster(tfjob(
        &[("Worker", 2, "OnFailure")],
        &["runPolicy: {activeDeadlineSeconds: 60}"],
    ));
    cluster.remove_pod("mnist-worker-1");
    let plan = cluster.reconcile(at(61));
    assert_eq!(message(new_status(&plan), Failed), DEADLINE);
    assert!(plan.create_pods.is_empty(), "a failed job creates nothing");
}

#[test]
fn suspend_deletes_every_pod_and_service_and_resume_starts_over() {
    let mut cluster = running_cluster(tfjob(
        &[("Chief", 1, ""), ("Worker", 2, "")],
        &["runPolicy: {activeDeadlineSeconds: 1000}"],
    ));
    assert_eq!(
        shape(cluster.status()),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    let uids: Vec<String> = ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
        .iter()
        .map(|n| cluster.uid(n))
        .collect();

    cluster.suspend(true);
    let plan = cluster.reconcile(at(30));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del("mnist-chief-0", &uids[0], DeletionCause::Suspend),
            del("mnist-worker-0", &uids[1], DeletionCause::Suspend),
            del("mnist-worker-1", &uids[2], DeletionCause::Suspend),
        ]
    );
    assert_eq!(
        deletions(&plan.delete_services),
        vec![
            del_svc("mnist-chief-0", DeletionCause::Suspend),
            del_svc("mnist-worker-0", DeletionCause::Suspend),
            del_svc("mnist-worker-1", DeletionCause::Suspend),
        ]
    );
    assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobSuspended"),
            c(Suspended, True, "TFJobSuspended"),
        ]
    );
    assert_eq!(message(status, Running), "TFJob mnist is suspended.");
    assert_eq!(message(status, Suspended), "TFJob mnist is suspended.");
    assert_eq!(counts(status, "Chief"), (0, 0, 0));
    assert_eq!(counts(status, "Worker"), (0, 0, 0));
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "TFJobSuspended", None)]
    );
    assert_eq!(
        event_message(&plan, "TFJobSuspended"),
        "TFJob mnist is suspended."
    );
    assert!(plan.transitions.is_empty());
    assert_eq!(plan.requeue_after, None, "no deadline while suspended");
    assert!(cluster.pods.is_empty() && cluster.services.is_empty());

    // Suspended: nothing more happens, and the deadline does not run out.
    assert_eq!(cluster.plan(at(40)), Plan::default());
    assert_eq!(cluster.plan(at(5000)), Plan::default());

    cluster.suspend(false);
    let plan = cluster.reconcile(at(6000));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobSuspended"),
            c(Suspended, False, "TFJobResumed"),
        ]
    );
    assert_eq!(message(status, Suspended), "TFJob mnist is resumed.");
    assert_eq!(
        status.start_time,
        Some(Time(at(6000))),
        "startTime is reset"
    );
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "TFJobResumed", None)]
    );
    assert_eq!(
        event_message(&plan, "TFJobResumed"),
        "TFJob mnist is resumed."
    );
    let all = ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"];
    assert_eq!(pod_names(&plan.create_pods), all);
    assert_eq!(service_names(&plan.create_services), all);
    assert_eq!(
        plan.requeue_after,
        Some(secs(1000)),
        "the deadline counts from the resume"
    );

    for name in all {
        cluster.set(name, running());
    }
    let plan = cluster.reconcile(at(6010));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Suspended, False, "TFJobResumed"),
            c(Running, True, "TFJobRunning"),
        ]
    );
    assert_eq!(counts(status, "Worker"), (2, 0, 0));
    assert_eq!(plan.requeue_after, Some(secs(990)));
}

#[test]
fn a_job_created_suspended_creates_nothing_until_resumed() {
    let mut cluster = Cluster::new(tfjob(&[("Worker", 2, "")], &["runPolicy: {suspend: true}"]));
    let plan = cluster.reconcile(t0());
    assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Suspended, True, "TFJobSuspended"),
        ]
    );
    assert_eq!(status.start_time, None);
    assert_eq!(counts(status, "Worker"), (0, 0, 0));
    assert_eq!(plan.transitions, vec![Transition::Created]);
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "TFJobSuspended", None)]
    );

    cluster.suspend(false);
    let plan = cluster.reconcile(at(100));
    assert_eq!(plan.create_pods.len(), 2);
    let status = new_status(&plan);
    assert_eq!(status.start_time, Some(Time(at(100))));
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Suspended, False, "TFJobResumed"),
        ]
    );
}

#[test]
fn a_finished_job_is_not_suspended() {
    let mut cluster = succeeded_job("None");
    cluster.suspend(true);
    let plan = cluster.plan(at(30));
    assert!(plan.delete_pods.is_empty());
    let status = plan.status.as_ref().unwrap_or(cluster.status());
    assert!(status.condition(Suspended).is_none());
}
