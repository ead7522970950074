//! Scenario tests of the planner: restart policies, exit codes, restart accounting under a stale
//! cache, and the backoff limit.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use tfjob_api::ConditionStatus::{False, True};
use tfjob_api::JobConditionType::{Created, Failed, Restarting, Running};
use tfjob_api::PodRestarts;
use tfjob_planner::{DeletionCause, EventType, Plan, Transition};

const BACKOFF: &str = "Job mnist has failed because it has reached the specified backoff limit";

/// A running job with a Never chief and two workers under `policy`.
fn job_with_workers(policy: &str, extra: &[&str]) -> Cluster {
    running_cluster(tfjob(&[("Chief", 1, ""), ("Worker", 2, policy)], extra))
}

fn restarts(entries: &[(&str, i32, &str)]) -> BTreeMap<String, PodRestarts> {
    entries
        .iter()
        .map(|(name, count, uid)| {
            (
                (*name).to_owned(),
                PodRestarts {
                    count: *count,
                    last_deleted_uid: (*uid).to_owned(),
                },
            )
        })
        .collect()
}

#[test]
fn never_a_failed_pod_stays_and_fails_the_job() {
    let mut cluster = job_with_workers("", &[]);
    cluster.set("mnist-worker-0", failed(137));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Failed, True, "TFJobFailed"),
        ]
    );
    let text = "TFJob ml/mnist has failed because 1 Worker replica(s) failed.";
    assert_eq!(message(status, Failed), text);
    assert_eq!(status.completion_time, Some(Time(at(20))));
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
    assert_eq!(counts(status, "Chief"), (1, 0, 0));
    assert_eq!(status.restart_count, None);
    assert!(status.pod_restarts.is_empty());
    assert!(plan.delete_pods.is_empty(), "the failed pod stays");
    assert!(plan.create_pods.is_empty());
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Warning, "TFJobFailed", None)]
    );
    assert_eq!(event_message(&plan, "TFJobFailed"), text);
    assert_eq!(plan.transitions, vec![Transition::Failed]);

    // Failed is final: the pod is never restarted and nothing else happens.
    let plan = cluster.reconcile(at(30));
    assert_eq!(plan, Plan::default());
    assert!(cluster.pod_names().contains(&"mnist-worker-0".to_owned()));
}

#[test]
fn never_counts_every_failed_replica_and_names_a_permanent_failure() {
    let mut cluster = job_with_workers("Never", &[]);
    cluster.set("mnist-worker-0", failed(1));
    cluster.set("mnist-worker-1", failed(137));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    let text = message(status, Failed);
    assert!(
        text.starts_with(
            "TFJob ml/mnist has failed because 2 Worker replica(s) failed. \
             Pod mnist-worker-0: UnknownError (policy builtin): "
        ),
        "{text}"
    );
    assert!(
        text.contains("[tensorflow] terminated with exit code (1)"),
        "{text}"
    );
    assert_eq!(counts(status, "Worker"), (0, 0, 2));
    assert!(plan.delete_pods.is_empty());
}

#[test]
fn retryable_failures_restart_the_pod_under_on_failure_always_and_exit_code() {
    for (policy, pod_status, reason, pod_policy) in [
        ("OnFailure", failed(137), "Interrupted", "OnFailure"),
        ("Always", evicted(), "Interrupted", "Always"),
        ("ExitCode", failed(143), "UnknownError", "Never"),
        ("ExitCode", failed(137), "Interrupted", "Never"),
    ] {
        let mut cluster = job_with_workers(policy, &[]);
        cluster.set("mnist-worker-0", pod_status);
        let uid = cluster.uid("mnist-worker-0");
        let plan = cluster.reconcile(at(20));

        assert_eq!(
            deletions(&plan.delete_pods),
            vec![del("mnist-worker-0", &uid, DeletionCause::Restart)],
            "{policy}"
        );
        assert!(
            plan.delete_services.is_empty(),
            "{policy}: the service stays"
        );
        assert!(plan.create_pods.is_empty(), "{policy}");
        let status = new_status(&plan);
        assert_eq!(
            shape(status),
            vec![
                c(Created, True, "TFJobCreated"),
                c(Restarting, True, "TFJobRestarting")
            ],
            "{policy}"
        );
        let restarting = "job mnist is restarting because Worker replica(s) failed.";
        assert_eq!(message(status, Restarting), restarting, "{policy}");
        assert_eq!(status.restart_count, Some(1), "{policy}");
        assert_eq!(
            status.pod_restarts,
            restarts(&[("mnist-worker-0", 1, &uid)]),
            "{policy}"
        );
        assert_eq!(counts(status, "Worker"), (1, 0, 1), "{policy}");
        assert_eq!(status.completion_time, None, "{policy}");
        assert_eq!(plan.transitions, vec![Transition::Restarted], "{policy}");

        let mut expected = Vec::new();
        if policy == "ExitCode" {
            expected.push(ev(
                EventType::Normal,
                "ExitedWithCode",
                Some(&format!("{uid}/ExitedWithCode")),
            ));
        }
        expected.push(ev(
            EventType::Warning,
            "TFJobRestarting",
            Some(&format!("{uid}/TFJobRestarting")),
        ));
        assert_eq!(events(&plan), expected, "{policy}");
        let event = event_message(&plan, "TFJobRestarting");
        let prefix = format!("{restarting} Pod mnist-worker-0: {reason} (policy builtin): ");
        assert!(event.starts_with(&prefix), "{policy}: {event}");
        if policy == "ExitCode" {
            let code = if reason == "Interrupted" { 137 } else { 143 };
            assert_eq!(
                event_message(&plan, "ExitedWithCode"),
                format!("Pod: ml.mnist-worker-0 exited with code {code}")
            );
        }

        // The pod is gone: it comes back under the same name, with the pod restart policy.
        let plan = cluster.reconcile(at(21));
        assert_eq!(pod_names(&plan.create_pods), ["mnist-worker-0"], "{policy}");
        assert!(plan.create_services.is_empty(), "{policy}");
        let pod = &plan.create_pods[0];
        assert_eq!(
            pod.spec.as_ref().unwrap().restart_policy.as_deref(),
            Some(pod_policy)
        );
        let status = new_status(&plan);
        assert_eq!(counts(status, "Worker"), (1, 0, 0), "{policy}");
        // The chief runs, so the job is running again: Running replaces Restarting.
        assert_eq!(
            shape(status),
            vec![
                c(Created, True, "TFJobCreated"),
                c(Running, True, "TFJobRunning")
            ],
            "{policy}"
        );
        assert!(plan.events.is_empty(), "{policy}");
        assert!(plan.transitions.is_empty(), "{policy}");
        assert_ne!(cluster.uid("mnist-worker-0"), uid);

        // The accounting stays.
        cluster.set("mnist-worker-0", running());
        let plan = cluster.reconcile(at(30));
        let status = new_status(&plan);
        assert_eq!(counts(status, "Worker"), (2, 0, 0), "{policy}");
        assert_eq!(status.restart_count, Some(1));
        assert_eq!(
            status.pod_restarts,
            restarts(&[("mnist-worker-0", 1, &uid)])
        );

        // A second failure of the same index is counted on the same record.
        cluster.set("mnist-worker-0", failed(137));
        let uid2 = cluster.uid("mnist-worker-0");
        let plan = cluster.reconcile(at(40));
        let status = new_status(&plan);
        assert_eq!(status.restart_count, Some(2), "{policy}");
        assert_eq!(
            status.pod_restarts,
            restarts(&[("mnist-worker-0", 2, &uid2)]),
            "{policy}"
        );
    }
}

#[test]
fn exit_code_with_a_permanent_exit_code_fails_the_job() {
    let mut cluster = job_with_workers("ExitCode", &[]);
    cluster.set("mnist-worker-1", failed(1));
    let uid = cluster.uid("mnist-worker-1");
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Failed, True, "TFJobFailed"),
        ]
    );
    let text = message(status, Failed);
    assert!(
        text.starts_with(
            "job \"mnist\" is failing because \"Worker\" replica(s) failed. \
             Pod mnist-worker-1: UnknownError (policy builtin): "
        ),
        "{text}"
    );
    assert!(
        text.contains("[tensorflow] terminated with exit code (1). Reason [Error]."),
        "{text}"
    );
    assert!(
        plan.delete_pods.is_empty(),
        "a permanent failure is not restarted"
    );
    assert_eq!(status.restart_count, None);
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
    assert_eq!(
        events(&plan),
        vec![
            ev(
                EventType::Normal,
                "ExitedWithCode",
                Some(&format!("{uid}/ExitedWithCode"))
            ),
            ev(EventType::Warning, "TFJobFailed", None),
        ]
    );
    assert_eq!(event_message(&plan, "TFJobFailed"), text);
    assert_eq!(plan.transitions, vec![Transition::Failed]);
}

#[test]
fn a_permanent_failure_fails_the_job_whatever_the_restart_policy() {
    for policy in ["OnFailure", "Always"] {
        let mut cluster = job_with_workers(policy, &[]);
        cluster.set("mnist-worker-0", failed(2));
        let plan = cluster.reconcile(at(20));
        let status = new_status(&plan);
        assert!(status.is_true(Failed), "{policy}");
        assert!(
            message(status, Failed).starts_with(
                "TFJob ml/mnist has failed because 1 Worker replica(s) failed. Pod mnist-worker-0: "
            ),
            "{policy}"
        );
        assert!(plan.delete_pods.is_empty(), "{policy}");
    }
}

#[test]
fn a_stale_cache_neither_counts_a_restart_twice_nor_fails_the_job() {
    let mut cluster = job_with_workers("OnFailure", &["runPolicy: {backoffLimit: 1}"]);
    cluster.set("mnist-worker-0", failed(137));
    let old = cluster.uid("mnist-worker-0");

    // The restart is planned and its status written, but the cache still shows the old pod.
    let plan = cluster.plan(at(20));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![del("mnist-worker-0", &old, DeletionCause::Restart)]
    );
    cluster.job.status = plan.status.clone();
    assert_eq!(cluster.status().restart_count, Some(1));

    for terminating in [false, true] {
        if terminating {
            cluster
                .pod_mut("mnist-worker-0")
                .metadata
                .deletion_timestamp = Some(Time(at(21)));
        }
        let plan = cluster.plan(at(22));
        assert_eq!(
            deletions(&plan.delete_pods),
            vec![del("mnist-worker-0", &old, DeletionCause::Restart)],
            "the deletion is asked for again (terminating: {terminating})"
        );
        assert!(plan.create_pods.is_empty(), "no duplicate pod");
        assert!(plan.events.is_empty(), "{:?}", plan.events);
        assert!(plan.transitions.is_empty());
        let status = plan.status.as_ref().unwrap_or(cluster.status());
        assert_eq!(status.restart_count, Some(1), "counted once");
        assert_eq!(
            status.pod_restarts,
            restarts(&[("mnist-worker-0", 1, &old)])
        );
        assert!(!status.is_finished(), "{:?}", shape(status));
        assert_eq!(counts(status, "Worker"), (1, 0, 1));
    }
    assert_eq!(cluster.status().restart_count, Some(1));
    assert_eq!(
        cluster.status().pod_restarts,
        restarts(&[("mnist-worker-0", 1, &old)])
    );
    assert!(!cluster.status().is_finished());

    // The cache catches up: the pod is recreated once.
    cluster.remove_pod("mnist-worker-0");
    let plan = cluster.reconcile(at(30));
    assert_eq!(pod_names(&plan.create_pods), ["mnist-worker-0"]);

    // A cache that shows both the new pod and the deleted one: the new one is the replica.
    let mut stale = plan.create_pods[0].clone();
    stale.metadata.uid = Some(old.clone());
    stale.status = Some(failed(137));
    cluster.pods.push(stale);
    cluster.set("mnist-worker-0", running());
    let plan = cluster.plan(at(31));
    assert!(plan.create_pods.is_empty());
    assert!(plan.delete_pods.is_empty(), "{:?}", plan.delete_pods);
    assert!(new_status(&plan).is_true(Running));
    assert_eq!(counts(new_status(&plan), "Worker"), (2, 0, 0));
    cluster
        .pods
        .retain(|p| p.metadata.uid.as_deref() != Some(&old));

    // The next real failure reaches the backoff limit of 1.
    cluster.set("mnist-worker-0", failed(137));
    let plan = cluster.reconcile(at(40));
    let status = new_status(&plan);
    assert!(status.is_true(Failed));
    assert_eq!(message(status, Failed), BACKOFF);
    assert_eq!(status.restart_count, Some(1));
}

#[test]
fn a_succeeded_pod_that_was_oom_killed_is_restarted() {
    let mut cluster = running_cluster(tfjob(&[("Worker", 2, "OnFailure")], &[]));
    cluster.set("mnist-worker-0", succeeded_oom_killed());
    let uid = cluster.uid("mnist-worker-0");
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(!status.is_finished(), "worker 0 did not really succeed");
    assert!(status.completed_indexes.is_empty());
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![del("mnist-worker-0", &uid, DeletionCause::Restart)]
    );
    assert_eq!(
        events(&plan),
        vec![
            ev(
                EventType::Warning,
                "OOMKilled",
                Some(&format!("{uid}/OOMKilled"))
            ),
            ev(
                EventType::Warning,
                "TFJobRestarting",
                Some(&format!("{uid}/TFJobRestarting"))
            ),
        ]
    );
    assert_eq!(
        event_message(&plan, "TFJobRestarting"),
        "job mnist is restarting because Worker replica(s) failed. Pod mnist-worker-0: \
         OOMKilled (policy builtin): Pod reported success despite being OOMKilled"
    );
    assert_eq!(
        event_message(&plan, "OOMKilled"),
        "Pod ml/mnist-worker-0 container tensorflow was OOMKilled"
    );
    assert!(status.is_true(Restarting));
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
}

#[test]
fn a_pod_being_deleted_by_someone_else_counts_as_failed() {
    // Under OnFailure it is restarted.
    let mut cluster = job_with_workers("OnFailure", &[]);
    let uid = cluster.uid("mnist-worker-1");
    cluster
        .pod_mut("mnist-worker-1")
        .metadata
        .deletion_timestamp = Some(Time(at(15)));
    let plan = cluster.reconcile(at(20));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![del("mnist-worker-1", &uid, DeletionCause::Restart)]
    );
    let status = new_status(&plan);
    assert!(status.is_true(Restarting));
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
    assert!(event_message(&plan, "TFJobRestarting").ends_with(
        "Pod mnist-worker-1: Terminating (policy builtin): pod mnist-worker-1 is being deleted"
    ));

    // Under Never it has failed, and so has the job.
    let mut cluster = job_with_workers("Never", &[]);
    cluster
        .pod_mut("mnist-worker-1")
        .metadata
        .deletion_timestamp = Some(Time(at(15)));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
    assert_eq!(
        message(status, Failed),
        "TFJob ml/mnist has failed because 1 Worker replica(s) failed."
    );
    assert!(plan.delete_pods.is_empty());
}

#[test]
fn an_image_pull_back_off_past_its_grace_period_is_a_retryable_failure() {
    for (policy, restarted) in [("OnFailure", true), ("Never", false)] {
        let mut cluster = job_with_workers(policy, &[]);
        cluster.set(
            "mnist-worker-1",
            waiting("ImagePullBackOff", "Back-off pulling image", at(12)),
        );
        let uid = cluster.uid("mnist-worker-1");
        let plan = cluster.reconcile(at(12 + 179));
        assert!(
            plan.delete_pods.is_empty(),
            "{policy}: inside the grace period"
        );
        assert!(!new_status(&plan).is_finished());

        let plan = cluster.reconcile(at(12 + 180));
        if restarted {
            assert_eq!(
                deletions(&plan.delete_pods),
                vec![del("mnist-worker-1", &uid, DeletionCause::Restart)]
            );
            assert!(cluster.status().is_true(Restarting));
        } else {
            assert!(plan.delete_pods.is_empty());
            assert_eq!(
                message(cluster.status(), Failed),
                "TFJob ml/mnist has failed because 1 Worker replica(s) failed."
            );
        }
    }
}

#[test]
fn backoff_limit_zero_fails_the_job_at_the_first_needed_restart() {
    let mut cluster = running_cluster(tfjob(
        &[("Chief", 1, ""), ("PS", 1, ""), ("Worker", 2, "OnFailure")],
        &["runPolicy: {backoffLimit: 0}"],
    ));
    cluster.set("mnist-ps-0", succeeded());
    cluster.set("mnist-worker-1", waiting("ContainerCreating", "", at(15)));
    cluster.set("mnist-worker-0", failed(137));
    let chief = cluster.uid("mnist-chief-0");
    let pending = cluster.uid("mnist-worker-1");
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Failed, True, "TFJobFailed"),
        ]
    );
    assert_eq!(message(status, Failed), BACKOFF);
    assert_eq!(status.completion_time, Some(Time(at(20))));
    assert_eq!(status.restart_count, None, "no restart happened");
    // Running and pending pods are freed; the failed and the succeeded pod stay for their logs.
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del("mnist-chief-0", &chief, DeletionCause::JobFailed),
            del("mnist-worker-1", &pending, DeletionCause::JobFailed),
        ]
    );
    assert_eq!(
        deletions(&plan.delete_services),
        vec![
            del_svc("mnist-chief-0", DeletionCause::JobFailed),
            del_svc("mnist-worker-1", DeletionCause::JobFailed),
        ]
    );
    assert_eq!(counts(status, "Chief"), (0, 0, 0));
    assert_eq!(counts(status, "PS"), (0, 1, 0));
    assert_eq!(counts(status, "Worker"), (0, 0, 1));
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Warning, "TFJobFailed", None)]
    );
    assert_eq!(event_message(&plan, "TFJobFailed"), BACKOFF);
    assert_eq!(plan.transitions, vec![Transition::Failed]);
    assert!(plan.create_pods.is_empty());
}

#[test]
fn backoff_limit_two_allows_two_restarts() {
    for policy in ["OnFailure", "ExitCode"] {
        let mut cluster = job_with_workers(policy, &["runPolicy: {backoffLimit: 2}"]);
        for round in 1..=2 {
            let now = 100 * i64::from(round);
            cluster.set("mnist-worker-0", failed(137));
            let uid = cluster.uid("mnist-worker-0");
            let plan = cluster.reconcile(at(now));
            assert_eq!(
                deletions(&plan.delete_pods),
                vec![del("mnist-worker-0", &uid, DeletionCause::Restart)],
                "{policy} round {round}"
            );
            assert_eq!(cluster.status().restart_count, Some(round));
            assert!(!cluster.status().is_finished());
            let plan = cluster.reconcile(at(now + 1));
            assert_eq!(pod_names(&plan.create_pods), ["mnist-worker-0"]);
            cluster.set("mnist-worker-0", running());
            cluster.reconcile(at(now + 2));
            assert!(cluster.status().is_true(Running));
        }
        cluster.set("mnist-worker-0", failed(137));
        let plan = cluster.reconcile(at(300));
        assert!(
            !deletions(&plan.delete_pods)
                .iter()
                .any(|d| d.2 == DeletionCause::Restart),
            "{policy}: no third restart"
        );
        let status = cluster.status();
        assert_eq!(message(status, Failed), BACKOFF, "{policy}");
        assert_eq!(status.restart_count, Some(2));
    }
}

#[test]
fn restarts_needed_together_must_fit_within_the_backoff_limit() {
    let mut cluster = job_with_workers("OnFailure", &["runPolicy: {backoffLimit: 1}"]);
    cluster.set("mnist-worker-0", failed(137));
    cluster.set("mnist-worker-1", failed(137));
    let chief = cluster.uid("mnist-chief-0");
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(message(status, Failed), BACKOFF);
    assert_eq!(status.restart_count, None);
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![del("mnist-chief-0", &chief, DeletionCause::JobFailed)],
        "no pod is deleted for a restart the job cannot afford"
    );
    assert_eq!(counts(status, "Worker"), (0, 0, 2));
}

#[test]
fn in_place_container_restarts_count_against_the_backoff_limit() {
    let mut cluster = job_with_workers("OnFailure", &["runPolicy: {backoffLimit: 2}"]);
    cluster.set("mnist-worker-0", running_restarted(2));
    let plan = cluster.reconcile(at(20));
    assert_eq!(plan, Plan::default(), "two restarts are within the limit");

    cluster.set("mnist-worker-0", running_restarted(3));
    let uids: Vec<String> = ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
        .iter()
        .map(|n| cluster.uid(n))
        .collect();
    let plan = cluster.reconcile(at(30));
    let status = new_status(&plan);
    assert_eq!(message(status, Failed), BACKOFF);
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del("mnist-chief-0", &uids[0], DeletionCause::JobFailed),
            del("mnist-worker-0", &uids[1], DeletionCause::JobFailed),
            del("mnist-worker-1", &uids[2], DeletionCause::JobFailed),
        ]
    );
    for rtype in ["Chief", "Worker"] {
        assert_eq!(counts(status, rtype), (0, 0, 0), "{rtype}");
    }
}

#[test]
fn in_place_and_operator_restarts_share_the_backoff_budget() {
    let mut cluster = job_with_workers("OnFailure", &["runPolicy: {backoffLimit: 2}"]);
    cluster.set("mnist-worker-1", running_restarted(1));
    cluster.set("mnist-worker-0", failed(137));
    let plan = cluster.reconcile(at(20));
    assert_eq!(plan.delete_pods.len(), 1, "1 + 1 restart fits a limit of 2");
    assert_eq!(cluster.status().restart_count, Some(1));
    cluster.reconcile(at(21));
    cluster.set("mnist-worker-0", running());
    cluster.reconcile(at(22));

    cluster.set("mnist-worker-0", failed(137));
    let plan = cluster.reconcile(at(30));
    assert_eq!(message(new_status(&plan), Failed), BACKOFF);
}

#[test]
fn in_place_restarts_of_a_restarted_pod_stay_counted() {
    let mut cluster = job_with_workers("OnFailure", &[]);
    cluster.set("mnist-worker-0", failed_restarted(137, 2));
    let plan = cluster.reconcile(at(20));
    assert_eq!(new_status(&plan).restart_count, Some(3));
    assert_eq!(
        new_status(&plan).pod_restarts["mnist-worker-0"].count,
        1,
        "the operator restarted the pod once"
    );
}

#[test]
fn restarting_lasts_until_something_runs_again() {
    let mut cluster = running_cluster(tfjob(&[("Worker", 1, "OnFailure")], &[]));
    assert!(cluster.status().is_true(Running));
    cluster.set("mnist-worker-0", failed(143));
    cluster.reconcile(at(20));
    let restarting = vec![
        c(Created, True, "TFJobCreated"),
        c(Restarting, True, "TFJobRestarting"),
    ];
    assert_eq!(shape(cluster.status()), restarting);

    let plan = cluster.reconcile(at(21));
    assert_eq!(pod_names(&plan.create_pods), ["mnist-worker-0"]);
    assert_eq!(shape(cluster.status()), restarting);
    let plan = cluster.reconcile(at(22));
    assert_eq!(plan.requeue_after, Some(secs(15)), "the new pod is pending");
    assert_eq!(shape(cluster.status()), restarting);

    cluster.set("mnist-worker-0", running());
    cluster.reconcile(at(30));
    assert_eq!(
        shape(cluster.status()),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
}

#[test]
fn a_replica_failing_for_good_fails_the_job_before_any_restart() {
    // The Chief runs under Never, the workers under OnFailure: the chief's failure decides the
    // job, so the worker that would be restarted is left alone and no Restarting appears.
    let mut cluster = job_with_workers("OnFailure", &[]);
    cluster.set("mnist-chief-0", failed(137));
    cluster.set("mnist-worker-1", evicted());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(status.is_true(Failed));
    assert!(status.condition(Restarting).is_none());
    assert!(plan.delete_pods.is_empty(), "{:?}", plan.delete_pods);
    assert_eq!(status.restart_count, None);
    assert!(!plan.transitions.contains(&Transition::Restarted));
}
