//! A queued job in Workload mode: no pods until its Workload is admitted, pods on the admitted
//! flavor, stopped on eviction with the reason on the job, started again on re-admission with
//! `startTime` reset, and the Workload marked finished when the job ends.

use crate::common;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tfjob_api::{ConditionStatus, JobConditionType};
use tfjob_planner::kueue::{Flavor, KueueView, ObservedWorkload, WorkloadChange, workload_name};
use tfjob_planner::native::NativePolicies;
use tfjob_planner::{Plan, PlanInput, Settings, plan};

use common::*;

fn queued() -> tfjob_api::TFJob {
    let mut j = tfjob(&[("PS", 1, ""), ("Worker", 2, "")], &[]);
    j.metadata.labels = Some(BTreeMap::from([(
        "kueue.x-k8s.io/queue-name".into(),
        "user-queue".into(),
    )]));
    j
}

fn run_queued(
    job: &tfjob_api::TFJob,
    pods: &[k8s_openapi::api::core::v1::Pod],
    workload: Option<&ObservedWorkload>,
    now: jiff::Timestamp,
) -> Plan {
    let flavors = BTreeMap::from([(
        "spot".to_owned(),
        Flavor::from_object(&json!({"spec": {
            "nodeLabels": {"instance-type": "spot"},
            "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
        }})),
    )]);
    plan(&PlanInput {
        job,
        pods,
        services: &[],
        now,
        settings: &Settings {
            kueue_workloads: true,
            ..Settings::default()
        },
        policies: &NativePolicies::default(),
        pod_group: None,
        priority_classes: &Default::default(),
        kueue: Some(KueueView {
            workload,
            flavors: &flavors,
        }),
    })
    .expect("native policies never fail")
}

fn with_status(mut workload: Value, status: Value) -> ObservedWorkload {
    workload["metadata"]["uid"] = json!("w-1");
    workload["status"] = status;
    ObservedWorkload::from_object(&workload)
}

fn admitted(workload: &Value) -> ObservedWorkload {
    with_status(
        workload.clone(),
        json!({
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "ps", "flavors": {"cpu": "spot"}},
                {"name": "worker", "flavors": {"cpu": "spot"}}
            ]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                {"type": "Admitted", "status": "True", "reason": "Admitted"}
            ]
        }),
    )
}

fn suspended(p: &Plan) -> (String, String) {
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.condition(JobConditionType::Suspended))
        .expect("a Suspended condition");
    assert_eq!(c.status, ConditionStatus::True);
    (c.reason.clone(), c.message.clone())
}

#[test]
fn a_queued_job_runs_only_while_its_workload_is_admitted() {
    let mut job = queued();
    let name = workload_name(NAME, JOB_UID);

    // No Workload yet: it is created, and nothing else.
    let p = run_queued(&job, &[], None, t0());
    let Some(WorkloadChange::Create(workload)) = p.workload.clone() else {
        panic!("creates the Workload: {:?}", p.workload)
    };
    assert_eq!(workload["metadata"]["name"], name.as_str());
    assert!(p.create_pods.is_empty() && p.create_services.is_empty());
    let (reason, message) = suspended(&p);
    assert_eq!(reason, "WorkloadCreated");
    assert!(message.contains("in queue user-queue"), "{message}");
    job.status = p.status.clone();

    // Pending, with Kueue's word for why.
    let pending = with_status(
        workload.clone(),
        json!({"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
            "message": "couldn't assign flavors to pod set worker: insufficient quota for cpu"}]}),
    );
    let p = run_queued(&job, &[], Some(&pending), at(1));
    assert_eq!(p.workload, None);
    assert!(p.create_pods.is_empty());
    let (reason, message) = suspended(&p);
    assert_eq!(reason, "WorkloadPending");
    assert!(message.ends_with("insufficient quota for cpu"), "{message}");
    job.status = p.status.clone();

    // Admitted: pods on the flavor, the job resumed with a fresh start time.
    let p = run_queued(&job, &[], Some(&admitted(&workload)), at(2));
    assert_eq!(p.create_pods.len(), 3);
    for pod in &p.create_pods {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_selector.as_ref().unwrap()["instance-type"],
            "spot"
        );
        assert_eq!(
            spec.tolerations.as_ref().unwrap()[0].key.as_deref(),
            Some("spot")
        );
    }
    let status = p.status.clone().unwrap();
    let c = status.condition(JobConditionType::Suspended).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, "TFJobResumed")
    );
    assert_eq!(status.start_time.as_ref().unwrap().0, at(2));
    job.status = Some(status);
    let pods: Vec<_> = p
        .create_pods
        .iter()
        .cloned()
        .map(|mut pod| {
            pod.metadata.uid = Some(format!("uid-{}", pod.metadata.name.clone().unwrap()));
            pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            });
            pod
        })
        .collect();

    // Evicted: every pod goes, the job says why.
    let evicted = with_status(
        workload.clone(),
        json!({"conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "stopped"},
            {"type": "Evicted", "status": "True", "reason": "ClusterQueueStopped",
             "message": "The ClusterQueue is stopped"}
        ]}),
    );
    let p = run_queued(&job, &pods, Some(&evicted), at(3));
    assert_eq!(p.delete_pods.len(), 3);
    assert!(p.create_pods.is_empty());
    let (reason, message) = suspended(&p);
    assert_eq!(reason, "WorkloadEvicted");
    assert!(message.contains("ClusterQueueStopped"), "{message}");
    let status = p.status.clone().unwrap();
    assert!(status.replica_statuses.values().all(|r| r.active == 0));
    job.status = Some(status);

    // Admitted again: pods again, start time reset.
    let p = run_queued(&job, &[], Some(&admitted(&workload)), at(4));
    assert_eq!(p.create_pods.len(), 3);
    assert_eq!(p.status.unwrap().start_time.unwrap().0, at(4));
}

#[test]
fn a_job_without_a_queue_label_is_not_gated_and_a_finished_one_finishes_its_workload() {
    let plain = tfjob(&[("Worker", 1, "")], &[]);
    let p = run_queued(&plain, &[], None, t0());
    assert_eq!(p.workload, None);
    assert_eq!(p.create_pods.len(), 1);

    let mut job = queued();
    let workload = run_queued(&job, &[], None, t0()).workload;
    let Some(WorkloadChange::Create(workload)) = workload else {
        panic!("creates")
    };
    let mut status = tfjob_api::TFJobStatus::default();
    status.conditions.push(tfjob_api::JobCondition {
        type_: JobConditionType::Succeeded,
        status: ConditionStatus::True,
        reason: "TFJobSucceeded".into(),
        message: "TFJob ml/mnist successfully completed.".into(),
        last_update_time: None,
        last_transition_time: None,
    });
    job.status = Some(status);
    let p = run_queued(&job, &[], Some(&admitted(&workload)), at(9));
    let Some(WorkloadChange::Finish { conditions, .. }) = p.workload else {
        panic!("finishes: {:?}", p.workload)
    };
    let finished = conditions.iter().find(|c| c["type"] == "Finished").unwrap();
    assert_eq!(finished["reason"], "Succeeded");
    assert_eq!(
        finished["message"],
        "TFJob ml/mnist successfully completed."
    );
}

#[test]
fn a_missing_priority_class_holds_the_workload_back() {
    let mut job = queued();
    job.spec.run_policy.scheduling_policy = Some(tfjob_api::SchedulingPolicy {
        priority_class: Some("urgent".into()),
        ..Default::default()
    });
    let p = run_queued(&job, &[], None, t0());
    assert_eq!(p.workload, None);
    assert!(p.create_pods.is_empty());
    let (reason, message) = suspended(&p);
    assert_eq!(reason, "WorkloadPending");
    assert!(
        message.contains("PriorityClass urgent is not found"),
        "{message}"
    );
}
