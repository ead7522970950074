//! Gang scheduling scenarios: the PodGroup each backend gets for different replica mixes, how
//! pods join it, Volcano's creation delay, edits of the job, and the group's deletion when the
//! job finishes or is suspended.

use crate::common;

use common::*;
use serde_json::{Value, json};
use tfjob_api::labels::{
    SCHEDULER_PLUGINS_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION, VOLCANO_TASK_ANNOTATION,
};
use tfjob_planner::gang::{GangScheduler, PodGroupChange};
use tfjob_planner::{EventType, Settings};

fn settings(scheduler: &str) -> Settings {
    Settings {
        gang_scheduler: Some(GangScheduler::from_name(scheduler)),
        ..Settings::default()
    }
}

fn gang_cluster(scheduler: &str, job: tfjob_api::TFJob) -> Cluster {
    let mut cluster = Cluster::new(job);
    cluster.settings = settings(scheduler);
    cluster
}

fn created_group(plan: &tfjob_planner::Plan) -> &Value {
    match &plan.pod_group {
        Some(PodGroupChange::Create(object)) => object,
        other => panic!("expected a PodGroup to be created, got {other:?}"),
    }
}

/// Volcano admits the group (what its controller and scheduler do on a real cluster).
fn admit(cluster: &mut Cluster, phase: &str) {
    cluster.pod_group.as_mut().expect("a PodGroup").phase = Some(phase.into());
}

#[test]
fn every_replica_mix_gets_a_group_of_all_its_replicas_by_default() {
    let mixes: [&[(&str, i32, &str)]; 4] = [
        &[("Worker", 4, "")],
        &[("Chief", 1, ""), ("Worker", 2, "")],
        &[("PS", 2, ""), ("Worker", 3, ""), ("Evaluator", 1, "")],
        &[("Master", 1, ""), ("PS", 1, ""), ("Worker", 0, "")],
    ];
    for mix in mixes {
        let total: i32 = mix.iter().map(|(_, n, _)| n).sum();
        for scheduler in ["volcano", "scheduler-plugins-scheduler"] {
            let mut cluster = gang_cluster(scheduler, tfjob(mix, &[]));
            let plan = cluster.reconcile(t0());
            let group = created_group(&plan);
            assert_eq!(group["spec"]["minMember"], total, "{mix:?} on {scheduler}");
            assert_eq!(group["metadata"]["name"], NAME);
            assert_eq!(group["metadata"]["ownerReferences"][0]["uid"], JOB_UID);
            if scheduler == "volcano" {
                assert_eq!(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
                assert_eq!(group["spec"]["queue"], "default");
                // No requests in these templates: an empty minResources, as 1.9 wrote it.
                assert_eq!(group["spec"]["minResources"], json!({}));
            } else {
                assert_eq!(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
                assert_eq!(group["spec"].get("queue"), None);
                assert_eq!(group["spec"].get("minResources"), None);
            }
        }
    }
}

#[test]
fn min_available_queue_priority_timeout_and_resources_reach_the_group() {
    let extra = [
        "runPolicy: {schedulingPolicy: {minAvailable: 3, queue: research, priorityClass: batch-high, scheduleTimeoutSeconds: 120, minResources: {cpu: '12', nvidia.com/gpu: '3'}}}",
    ];
    let job = tfjob(&[("PS", 1, ""), ("Worker", 4, "")], &extra);
    let mut volcano = gang_cluster("volcano", job.clone());
    let plan = volcano.reconcile(t0());
    assert_eq!(
        created_group(&plan)["spec"],
        json!({"minMember": 3, "queue": "research", "priorityClassName": "batch-high",
               "minResources": {"cpu": "12", "nvidia.com/gpu": "3"}})
    );
    let mut plugins = gang_cluster("scheduler-plugins-scheduler", job);
    let plan = plugins.reconcile(t0());
    assert_eq!(
        created_group(&plan)["spec"],
        json!({"minMember": 3, "minResources": {"cpu": "12", "nvidia.com/gpu": "3"},
               "scheduleTimeoutSeconds": 120})
    );
}

#[test]
fn computed_min_resources_count_the_first_min_available_pods() {
    let yaml = format!(
        "metadata: {{name: {NAME}, namespace: {NS}}}
spec:
  runPolicy: {{schedulingPolicy: {{minAvailable: 2}}}}
  tfReplicaSpecs:
    PS:
      replicas: 2
      template: {{spec: {{containers: [{{name: tensorflow, image: tf, resources: {{requests: {{cpu: '2', memory: 4Gi}}}}}}]}}}}
    Worker:
      replicas: 4
      template: {{spec: {{containers: [{{name: tensorflow, image: tf, resources: {{limits: {{nvidia.com/gpu: '1'}}}}}}]}}}}
"
    );
    let mut cluster = gang_cluster("volcano", job(&yaml));
    let plan = cluster.reconcile(t0());
    // Both PS pods come first (equal priority: processing order).
    assert_eq!(
        created_group(&plan)["spec"]["minResources"],
        json!({"cpu": "4", "memory": "8Gi"})
    );
}

#[test]
fn volcano_creates_no_pod_until_the_group_is_admitted() {
    let mut cluster = gang_cluster("volcano", tfjob(&[("PS", 1, ""), ("Worker", 2, "")], &[]));
    let plan = cluster.reconcile(t0());
    created_group(&plan);
    assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
    // The first reconcile only creates the group: nothing to explain yet.
    assert!(plan.events.iter().all(|e| e.reason != "PodGroupPending"));

    // No phase yet, then Pending: still nothing, and the job says why.
    let plan = cluster.reconcile(at(1));
    assert!(plan.create_pods.is_empty());
    assert!(event_message(&plan, "PodGroupPending").contains("has no phase yet"));
    admit(&mut cluster, "Pending");
    let plan = cluster.reconcile(at(2));
    assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
    let why = event_message(&plan, "PodGroupPending");
    assert!(
        why.contains("PodGroup ml/mnist is Pending in queue \"default\""),
        "{why}"
    );
    assert!(cluster.pod_names().is_empty());

    admit(&mut cluster, "Inqueue");
    let plan = cluster.reconcile(at(3));
    assert_eq!(plan.create_pods.len(), 3);
    assert_eq!(plan.create_services.len(), 3);
    assert_eq!(plan.pod_group, None, "an admitted group is left alone");
    for pod in &plan.create_pods {
        let name = pod.metadata.name.as_deref().unwrap();
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("volcano"),
            "{name}"
        );
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[VOLCANO_GROUP_ANNOTATION], NAME);
        let task = if name.contains("-ps-") {
            "ps"
        } else {
            "worker"
        };
        assert_eq!(annotations[VOLCANO_TASK_ANNOTATION], task);
    }
}

#[test]
fn scheduler_plugins_creates_pods_at_once_with_the_group_label() {
    let mut cluster = gang_cluster(
        "scheduler-plugins-scheduler",
        tfjob(&[("Chief", 1, ""), ("Worker", 2, "")], &[]),
    );
    let plan = cluster.reconcile(t0());
    created_group(&plan);
    assert_eq!(plan.create_pods.len(), 3);
    for pod in &plan.create_pods {
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("scheduler-plugins-scheduler")
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[SCHEDULER_PLUGINS_GROUP_LABEL],
            NAME
        );
        assert!(
            pod.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key(VOLCANO_GROUP_ANNOTATION))
        );
    }
}

#[test]
fn a_template_scheduler_is_kept_with_a_warning() {
    let yaml = format!(
        "metadata: {{name: {NAME}, namespace: {NS}}}
spec:
  tfReplicaSpecs:
    Worker: {{replicas: 2, template: {{spec: {{schedulerName: my-scheduler, containers: [{{name: tensorflow, image: tf}}]}}}}}}
"
    );
    let mut cluster = gang_cluster("scheduler-plugins-scheduler", job(&yaml));
    let plan = cluster.reconcile(t0());
    for pod in &plan.create_pods {
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("my-scheduler")
        );
    }
    let warnings: Vec<_> = events(&plan)
        .into_iter()
        .filter(|(_, reason, _)| reason == "SettedPodTemplateSchedulerName")
        .collect();
    assert_eq!(warnings.len(), 1, "once per job");
    assert_eq!(warnings[0].0, EventType::Warning);
}

#[test]
fn editing_min_available_on_a_running_job_updates_the_group() {
    let mut cluster = gang_cluster("volcano", tfjob(&[("Worker", 4, "")], &[]));
    cluster.reconcile(t0());
    admit(&mut cluster, "Inqueue");
    cluster.reconcile(at(1));
    for name in cluster.pod_names() {
        cluster.set(&name, running());
    }
    admit(&mut cluster, "Running");
    let plan = cluster.reconcile(at(2));
    assert_eq!(plan.pod_group, None);

    cluster.job.spec.run_policy.scheduling_policy = Some(tfjob_api::SchedulingPolicy {
        min_available: Some(2),
        ..Default::default()
    });
    let plan = cluster.reconcile(at(3));
    let Some(PodGroupChange::UpdateSpec(spec)) = &plan.pod_group else {
        panic!("expected an update, got {:?}", plan.pod_group);
    };
    assert_eq!(spec["minMember"], 2);
    assert!(plan.create_pods.is_empty() && plan.delete_pods.is_empty());
    assert_eq!(cluster.reconcile(at(4)).pod_group, None, "settled");
}

#[test]
fn a_finished_job_deletes_its_group_once() {
    let mut cluster = gang_cluster(
        "scheduler-plugins-scheduler",
        tfjob(&[("Worker", 2, "")], &[]),
    );
    cluster.reconcile(t0());
    for name in cluster.pod_names() {
        cluster.set(&name, succeeded());
    }
    let plan = cluster.reconcile(at(5));
    assert_eq!(plan.pod_group, Some(PodGroupChange::Delete));
    assert!(plan.events.iter().any(|e| e.reason == "TFJobSucceeded"));
    assert_eq!(
        event_message(&plan, "JobTerminated"),
        "Job has been terminated. Deleting PodGroup"
    );
    assert!(cluster.pod_group.is_none());
    let plan = cluster.reconcile(at(6));
    assert_eq!(plan.pod_group, None);
    assert!(plan.events.iter().all(|e| e.reason != "JobTerminated"));
}

#[test]
fn a_failed_job_deletes_its_group() {
    let mut cluster = gang_cluster("volcano", tfjob(&[("Worker", 2, "Never")], &[]));
    cluster.reconcile(t0());
    admit(&mut cluster, "Inqueue");
    cluster.reconcile(at(1));
    cluster.set("mnist-worker-0", failed(1));
    let plan = cluster.reconcile(at(2));
    assert!(plan.events.iter().any(|e| e.reason == "TFJobFailed"));
    assert_eq!(plan.pod_group, Some(PodGroupChange::Delete));
}

#[test]
fn suspending_deletes_the_group_and_resuming_waits_for_a_new_one() {
    let mut cluster = gang_cluster("volcano", tfjob(&[("Worker", 2, "")], &[]));
    cluster.reconcile(t0());
    admit(&mut cluster, "Inqueue");
    cluster.reconcile(at(1));
    assert_eq!(cluster.pod_names().len(), 2);

    cluster.suspend(true);
    let plan = cluster.reconcile(at(2));
    assert_eq!(plan.pod_group, Some(PodGroupChange::Delete));
    assert_eq!(plan.delete_pods.len(), 2);
    assert!(cluster.pod_group.is_none());

    cluster.suspend(false);
    let plan = cluster.reconcile(at(3));
    created_group(&plan);
    assert!(
        plan.create_pods.is_empty(),
        "the new group is not admitted yet"
    );
    admit(&mut cluster, "Inqueue");
    assert_eq!(cluster.reconcile(at(4)).create_pods.len(), 2);
}

#[test]
fn without_a_gang_scheduler_nothing_changes() {
    let mut cluster = Cluster::new(tfjob(&[("Worker", 2, "")], &[]));
    let plan = cluster.reconcile(t0());
    assert_eq!(plan.pod_group, None);
    for pod in &plan.create_pods {
        assert_eq!(pod.spec.as_ref().unwrap().scheduler_name, None);
        assert!(pod.metadata.annotations.is_none());
    }
}
