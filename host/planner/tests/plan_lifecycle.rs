//! Scenario tests of the planner: what a job produces, job status, success and failure rules,
//! scaling, completed indexes, dynamic workers, validation, managedBy and warning events.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use pretty_assertions::assert_eq;
use tfjob_api::ConditionStatus::{False, True};
use tfjob_api::JobConditionType::{Created, Failed, Running, Succeeded};
use tfjob_api::PodRestarts;
use tfjob_planner::{DeletionCause, EventType, Plan, Settings, Skip, Transition};

const OPERATOR: &str = "training.kubeflow.org/operator-name";
const JOB_NAME: &str = "training.kubeflow.org/job-name";
const TYPE: &str = "training.kubeflow.org/replica-type";
const INDEX: &str = "training.kubeflow.org/replica-index";
const ROLE: &str = "training.kubeflow.org/job-role";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn replica_labels(rtype: &str, index: &str) -> BTreeMap<String, String> {
    labels(&[
        (OPERATOR, "tfjob-controller"),
        (JOB_NAME, NAME),
        (TYPE, rtype),
        (INDEX, index),
    ])
}

fn env(pod: &k8s_openapi::api::core::v1::Pod, container: usize) -> Vec<(String, String)> {
    pod.spec.as_ref().unwrap().containers[container]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn chief_and_workers(workers: i32) -> Cluster {
    running_cluster(tfjob(&[("Chief", 1, ""), ("Worker", workers, "")], &[]))
}

fn chiefless(workers: i32, extra: &[&str]) -> Cluster {
    running_cluster(tfjob(&[("Worker", workers, "")], extra))
}

#[test]
fn first_reconcile_creates_every_pod_and_service_the_created_condition_and_start_time() {
    let job = tfjob(&[("Chief", 1, ""), ("PS", 1, ""), ("Worker", 2, "")], &[]);
    let plan = run(&job, &[], &[], t0());

    let all = [
        "mnist-chief-0",
        "mnist-ps-0",
        "mnist-worker-0",
        "mnist-worker-1",
    ];
    assert_eq!(plan.skip, None);
    assert_eq!(pod_names(&plan.create_pods), all);
    assert_eq!(service_names(&plan.create_services), all);
    assert!(plan.delete_pods.is_empty());
    assert!(plan.delete_services.is_empty());
    assert!(plan.events.is_empty(), "{:?}", plan.events);
    assert_eq!(plan.transitions, vec![Transition::Created]);
    assert!(!plan.delete_job);
    assert_eq!(plan.requeue_after, None);

    let status = new_status(&plan);
    assert_eq!(shape(status), vec![c(Created, True, "TFJobCreated")]);
    assert_eq!(message(status, Created), "TFJob mnist is created.");
    let created = status.condition(Created).unwrap();
    assert_eq!(created.last_transition_time, Some(Time(t0())));
    assert_eq!(created.last_update_time, Some(Time(t0())));
    assert_eq!(status.start_time, Some(Time(t0())));
    assert_eq!(status.completion_time, None);
    assert_eq!(status.last_reconcile_time, Some(Time(t0())));
    assert_eq!(
        status.replica_statuses.keys().collect::<Vec<_>>(),
        ["Chief", "PS", "Worker"]
    );
    for rtype in ["Chief", "PS", "Worker"] {
        assert_eq!(counts(status, rtype), (0, 0, 0), "{rtype}");
    }
    assert_eq!(status.restart_count, None);
    assert!(status.pod_restarts.is_empty());
    assert!(status.completed_indexes.is_empty());
}

#[test]
fn pods_and_services_carry_labels_owner_restart_policy_ports_and_tf_config() {
    let job = job(r#"
metadata: {name: mnist, namespace: ml}
spec:
  tfReplicaSpecs:
    Chief:
      restartPolicy: ExitCode
      template:
        metadata:
          labels: {team: vision, training.kubeflow.org/replica-index: "9"}
          annotations: {note: keep}
        spec:
          restartPolicy: Always
          containers:
          - {name: tensorflow, image: "tf:2", ports: [{name: metrics, containerPort: 9090}]}
    worker:
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: sidecar, image: side}, {name: tensorflow, image: "tf:2"}]
"#);
    let plan = run(&job, &[], &[], t0());
    assert_eq!(
        pod_names(&plan.create_pods),
        ["mnist-chief-0", "mnist-worker-0"]
    );
    let (chief, worker) = (&plan.create_pods[0], &plan.create_pods[1]);

    // Template labels are kept, the operator's win; the chief is the master role.
    let mut expected = replica_labels("chief", "0");
    expected.insert("team".into(), "vision".into());
    expected.insert(ROLE.into(), "master".into());
    assert_eq!(chief.metadata.labels.as_ref(), Some(&expected));
    assert_eq!(chief.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(
        chief.metadata.annotations.as_ref(),
        Some(&labels(&[("note", "keep")]))
    );
    assert_eq!(
        worker.metadata.labels.as_ref(),
        Some(&replica_labels("worker", "0")),
        "with a chief, worker 0 is not the master role"
    );
    for pod in [chief, worker] {
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[..];
        assert_eq!(owner.len(), 1);
        let owner = &owner[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("kubeflow.org/v1", "TFJob", NAME, JOB_UID)
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    // ExitCode pods never restart in place; the template's policy is overwritten with a warning.
    let policy = |p: &k8s_openapi::api::core::v1::Pod| {
        p.spec.as_ref().unwrap().restart_policy.clone().unwrap()
    };
    assert_eq!(policy(chief), "Never");
    assert_eq!(policy(worker), "OnFailure");
    assert_eq!(
        events(&plan),
        vec![ev(
            EventType::Warning,
            "SetPodTemplateRestartPolicy",
            Some("job-uid-1/Chief/SetPodTemplateRestartPolicy")
        )]
    );

    // TF_CONFIG goes to the tensorflow container, not the first one.
    let cluster = r#""cluster":{"chief":["mnist-chief-0.ml.svc:2222"],"worker":["mnist-worker-0.ml.svc:2222"]}"#;
    assert_eq!(
        env(chief, 0),
        vec![(
            "TF_CONFIG".to_owned(),
            format!(r#"{{{cluster},"task":{{"type":"chief","index":0}},"environment":"cloud"}}"#)
        )]
    );
    assert_eq!(env(worker, 0), vec![]);
    assert_eq!(
        env(worker, 1),
        vec![(
            "TF_CONFIG".to_owned(),
            format!(r#"{{{cluster},"task":{{"type":"worker","index":0}},"environment":"cloud"}}"#)
        )]
    );

    // Headless services select the four replica labels and expose the tensorflow ports.
    let svc = &plan.create_services[0];
    assert_eq!(svc.metadata.name.as_deref(), Some("mnist-chief-0"));
    assert_eq!(
        svc.metadata.labels.as_ref(),
        Some(&replica_labels("chief", "0"))
    );
    assert_eq!(
        svc.metadata.owner_references.as_ref().unwrap()[0].uid,
        JOB_UID
    );
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.selector.as_ref(), Some(&replica_labels("chief", "0")));
    let ports: Vec<_> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.port))
        .collect();
    assert_eq!(
        ports,
        vec![
            ("metrics".to_owned(), 9090),
            ("tfjob-port".to_owned(), 2222)
        ]
    );
}

#[test]
fn a_single_replica_job_is_local_and_its_worker_zero_is_the_master_role() {
    let job = tfjob(&[("Worker", 1, "")], &[]);
    let plan = run(&job, &[], &[], t0());
    let pod = &plan.create_pods[0];
    let mut expected = replica_labels("worker", "0");
    expected.insert(ROLE.into(), "master".into());
    assert_eq!(pod.metadata.labels.as_ref(), Some(&expected));
    assert_eq!(env(pod, 0), vec![], "no TF_CONFIG for a local job");
}

#[test]
fn tf_config_uses_the_tfjob_port_and_the_cluster_domain() {
    let job = job(r#"
metadata: {name: mnist, namespace: ml}
spec:
  tfReplicaSpecs:
    PS:
      template:
        spec:
          containers: [{name: tensorflow, image: "tf:2", ports: [{name: tfjob-port, containerPort: 3333}]}]
    Worker: {template: {spec: {containers: [{name: tensorflow, image: "tf:2"}]}}}
"#);
    let settings = Settings {
        cluster_domain: Some("cluster.local".into()),
        ..Settings::default()
    };
    let plan = run_with(&settings, &job, &[], &[], t0());
    assert_eq!(
        pod_names(&plan.create_pods),
        ["mnist-ps-0", "mnist-worker-0"]
    );
    assert_eq!(
        env(&plan.create_pods[1], 0)[0].1,
        r#"{"cluster":{"ps":["mnist-ps-0.ml.svc.cluster.local:3333"],"worker":["mnist-worker-0.ml.svc.cluster.local:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}"#
    );
    let ports: Vec<_> = plan.create_services[0]
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.port))
        .collect();
    assert_eq!(ports, vec![("tfjob-port".to_owned(), 3333)]);
}

#[test]
fn steady_state_is_idempotent_and_missing_services_are_recreated() {
    let mut cluster = Cluster::new(tfjob(&[("Chief", 1, ""), ("Worker", 2, "")], &[]));
    cluster.reconcile(t0());
    assert_eq!(cluster.pod_names().len(), 3);

    // The pods exist, none has a status yet: nothing to create, nothing to write, look again soon.
    let plan = cluster.plan(at(5));
    assert_eq!(
        plan,
        Plan {
            requeue_after: Some(secs(15)),
            ..Plan::default()
        }
    );

    // A service deleted by someone else comes back; the pods are left alone.
    cluster
        .services
        .retain(|s| s.metadata.name.as_deref() != Some("mnist-worker-1"));
    let plan = cluster.plan(at(6));
    assert_eq!(service_names(&plan.create_services), ["mnist-worker-1"]);
    assert!(plan.create_pods.is_empty());
    assert_eq!(plan.status, None);
}

#[test]
fn running_needs_the_chief_when_there_is_one() {
    let mut cluster = Cluster::new(tfjob(&[("Chief", 1, ""), ("Worker", 2, "")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-worker-0", running());
    cluster.set("mnist-worker-1", running());
    let plan = cluster.reconcile(at(5));
    let status = new_status(&plan);
    assert_eq!(shape(status), vec![c(Created, True, "TFJobCreated")]);
    assert_eq!(counts(status, "Worker"), (2, 0, 0));
    assert_eq!(counts(status, "Chief"), (0, 0, 0));

    cluster.set("mnist-chief-0", running());
    let plan = cluster.reconcile(at(6));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    assert_eq!(message(status, Running), "TFJob ml/mnist is running.");
    assert_eq!(counts(status, "Chief"), (1, 0, 0));
    assert!(plan.events.is_empty());
    assert!(plan.transitions.is_empty());
    assert_eq!(plan.requeue_after, None);
    assert_eq!(status.start_time, Some(Time(t0())), "startTime is kept");

    // Nothing changed: the condition is not touched again.
    assert_eq!(cluster.plan(at(60)), Plan::default());
}

#[test]
fn a_chiefless_job_runs_when_any_worker_runs() {
    let mut cluster = Cluster::new(tfjob(&[("PS", 1, ""), ("Worker", 2, "")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-ps-0", unschedulable(at(1)));
    cluster.set("mnist-worker-0", running());
    let plan = cluster.reconcile(at(5));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    assert_eq!(counts(status, "PS"), (0, 0, 0));
    assert_eq!(counts(status, "Worker"), (1, 0, 0));
    // The pending PS keeps the job under watch.
    assert_eq!(plan.requeue_after, Some(secs(15)));
}

#[test]
fn a_chiefless_job_with_only_a_ps_running_is_not_running() {
    let mut cluster = Cluster::new(tfjob(&[("PS", 1, ""), ("Worker", 2, "")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-ps-0", running());
    let plan = cluster.reconcile(at(5));
    assert_eq!(
        shape(new_status(&plan)),
        vec![c(Created, True, "TFJobCreated")]
    );
}

#[test]
fn replica_statuses_count_pods_and_carry_selectors() {
    let mut cluster = Cluster::new(tfjob(
        &[("Chief", 1, ""), ("PS", 2, ""), ("Worker", 3, "")],
        &[],
    ));
    cluster.reconcile(t0());
    cluster.set("mnist-chief-0", running());
    cluster.set("mnist-ps-0", running());
    cluster.set("mnist-worker-0", succeeded());
    cluster.set("mnist-worker-1", running());
    cluster.set("mnist-worker-2", waiting("ContainerCreating", "", at(1)));
    let plan = cluster.reconcile(at(5));
    let status = new_status(&plan);
    assert_eq!(counts(status, "Chief"), (1, 0, 0));
    assert_eq!(counts(status, "PS"), (1, 0, 0));
    assert_eq!(counts(status, "Worker"), (1, 1, 0));
    assert_eq!(
        status.completed_indexes,
        BTreeMap::from([("Worker".to_owned(), vec![0])])
    );
    let worker = &status.replica_statuses["Worker"];
    assert_eq!(
        worker.label_selector,
        Some(LabelSelector {
            match_labels: Some(labels(&[
                (OPERATOR, "tfjob-controller"),
                (JOB_NAME, NAME),
                (TYPE, "worker"),
            ])),
            ..LabelSelector::default()
        })
    );
    assert_eq!(
        worker.selector.as_deref(),
        Some(
            "training.kubeflow.org/job-name=mnist,training.kubeflow.org/operator-name=tfjob-controller,training.kubeflow.org/replica-type=worker"
        )
    );
    assert_eq!(
        status.replica_statuses["PS"].selector.as_deref(),
        Some(
            "training.kubeflow.org/job-name=mnist,training.kubeflow.org/operator-name=tfjob-controller,training.kubeflow.org/replica-type=ps"
        )
    );
    // worker 0 succeeding does not complete a job that has a chief.
    assert!(!status.is_finished());
}

#[test]
fn the_chief_succeeding_completes_the_job() {
    let mut cluster = chief_and_workers(2);
    cluster.set("mnist-chief-0", succeeded());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Succeeded, True, "TFJobSucceeded"),
        ]
    );
    let text = "TFJob ml/mnist successfully completed.";
    assert_eq!(message(status, Succeeded), text);
    assert_eq!(status.completion_time, Some(Time(at(20))));
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "TFJobSucceeded", None)]
    );
    assert_eq!(event_message(&plan, "TFJobSucceeded"), text);
    assert_eq!(plan.transitions, vec![Transition::Succeeded]);
    assert_eq!(counts(status, "Chief"), (0, 1, 0));
    assert_eq!(counts(status, "Worker"), (2, 0, 0));
    assert!(plan.create_pods.is_empty());
    assert!(plan.delete_pods.is_empty());

    // Finished: later reconciles report the still-active pods as succeeded and never fail.
    cluster.set("mnist-worker-1", failed(1));
    let plan = cluster.reconcile(at(30));
    let status = new_status(&plan);
    assert_eq!(counts(status, "Worker"), (0, 2, 0));
    assert_eq!(status.completion_time, Some(Time(at(20))));
    assert_eq!(shape(status).len(), 3);
    assert!(plan.events.is_empty() && plan.transitions.is_empty());
}

#[test]
fn a_master_replaces_the_chief() {
    let mut cluster = running_cluster(tfjob(&[("Master", 1, ""), ("Worker", 1, "")], &[]));
    assert!(cluster.status().is_true(Running));
    cluster.set("mnist-worker-0", succeeded());
    let plan = cluster.reconcile(at(20));
    assert!(!new_status(&plan).is_finished());
    cluster.set("mnist-master-0", succeeded());
    let plan = cluster.reconcile(at(30));
    assert!(new_status(&plan).is_true(Succeeded));
}

#[test]
fn with_a_chief_all_workers_succeeding_is_not_enough() {
    let mut cluster = chief_and_workers(2);
    cluster.set("mnist-worker-0", succeeded());
    cluster.set("mnist-worker-1", succeeded());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    assert_eq!(counts(status, "Worker"), (0, 2, 0));
}

#[test]
fn without_a_chief_worker_zero_succeeding_completes_the_job() {
    let mut cluster = chiefless(3, &[]);
    // Another worker finishing first changes nothing.
    cluster.set("mnist-worker-1", succeeded());
    let plan = cluster.reconcile(at(20));
    assert!(!new_status(&plan).is_finished());
    assert!(cluster.status().is_true(Running));

    cluster.set("mnist-worker-0", succeeded());
    let plan = cluster.reconcile(at(30));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, False, "TFJobRunning"),
            c(Succeeded, True, "TFJobSucceeded"),
        ]
    );
    assert_eq!(counts(status, "Worker"), (1, 2, 0));
    assert_eq!(plan.transitions, vec![Transition::Succeeded]);
}

#[test]
fn all_workers_success_policy_needs_every_worker() {
    let mut cluster = chiefless(3, &["successPolicy: AllWorkers"]);
    cluster.set("mnist-worker-0", succeeded());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(!status.is_finished());
    assert!(status.is_true(Running));
    assert_eq!(counts(status, "Worker"), (2, 1, 0));

    cluster.set("mnist-worker-1", succeeded());
    let plan = cluster.reconcile(at(30));
    assert!(!new_status(&plan).is_finished());

    cluster.set("mnist-worker-2", succeeded());
    let plan = cluster.reconcile(at(40));
    let status = new_status(&plan);
    assert!(status.is_true(Succeeded));
    assert_eq!(counts(status, "Worker"), (0, 3, 0));
}

#[test]
fn success_wins_over_failure_in_the_same_reconcile() {
    let mut cluster = chief_and_workers(2);
    cluster.set("mnist-chief-0", succeeded());
    cluster.set("mnist-worker-1", failed(1));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(status.is_true(Succeeded));
    assert!(status.condition(Failed).is_none());
    assert_eq!(plan.transitions, vec![Transition::Succeeded]);
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Normal, "TFJobSucceeded", None)]
    );

    // Chief-less: worker 0 succeeds while worker 1 fails permanently.
    let mut cluster = chiefless(2, &[]);
    cluster.set("mnist-worker-0", succeeded());
    cluster.set("mnist-worker-1", failed(2));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert!(status.is_true(Succeeded));
    assert!(!status.is_true(Failed));
    // And it stays that way.
    let plan = cluster.reconcile(at(30));
    assert!(!cluster.status().is_true(Failed));
    assert!(plan.transitions.is_empty());
}

#[test]
fn managed_by_another_controller_is_left_alone() {
    let mut cluster = Cluster::new(tfjob(
        &[("Worker", 2, "")],
        &["runPolicy: {managedBy: kueue.x-k8s.io/multikueue}"],
    ));
    let plan = cluster.reconcile(t0());
    assert_eq!(
        plan,
        Plan {
            skip: Some(Skip::ManagedElsewhere("kueue.x-k8s.io/multikueue".into())),
            ..Plan::default()
        }
    );
    assert!(cluster.job.status.is_none());

    // Even pods that look like ours, failing, change nothing.
    let ours = run(&tfjob(&[("Worker", 2, "")], &[]), &[], &[], t0());
    cluster.pods = ours.create_pods;
    for (i, pod) in cluster.pods.iter_mut().enumerate() {
        pod.metadata.uid = Some(format!("u{i}"));
        pod.status = Some(failed(1));
    }
    let plan = cluster.plan(at(10));
    assert_eq!(plan.status, None);
    assert!(plan.delete_pods.is_empty() && plan.events.is_empty());

    // The training operator's own name means "this operator".
    let job = tfjob(
        &[("Worker", 2, "")],
        &["runPolicy: {managedBy: kubeflow.org/training-operator}"],
    );
    let plan = run(&job, &[], &[], t0());
    assert_eq!(plan.skip, None);
    assert_eq!(plan.create_pods.len(), 2);
}

#[test]
fn a_job_being_deleted_is_left_alone() {
    let mut job = tfjob(&[("Worker", 1, "")], &[]);
    job.metadata.deletion_timestamp = Some(Time(t0()));
    let plan = run(&job, &[], &[], at(1));
    assert_eq!(
        plan,
        Plan {
            skip: Some(Skip::BeingDeleted),
            ..Plan::default()
        }
    );
}

#[test]
fn an_invalid_job_fails_validation_naming_every_field_and_creates_nothing() {
    let mut cluster = Cluster::new(job(r#"
metadata: {name: Bad_Name, namespace: ml}
spec:
  runPolicy: {backoffLimit: -1}
  tfReplicaSpecs:
    Chief: {template: {spec: {containers: [{name: tensorflow, image: "tf:2"}]}}}
    Master: {template: {spec: {containers: [{name: tensorflow, image: "tf:2"}]}}}
    Worker: {replicas: -1, template: {spec: {containers: [{name: main}]}}}
    Launcher: {template: {spec: {containers: [{name: tensorflow, image: "tf:2"}]}}}
"#));
    let plan = cluster.reconcile(t0());
    assert!(plan.create_pods.is_empty());
    assert!(plan.create_services.is_empty());
    assert!(plan.delete_pods.is_empty());
    assert_eq!(
        plan.transitions,
        vec![Transition::Created, Transition::Failed]
    );
    assert_eq!(
        events(&plan),
        vec![ev(EventType::Warning, "FailedValidation", None)]
    );
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Failed, True, "FailedValidation")
        ]
    );
    let text = message(status, Failed);
    assert_eq!(event_message(&plan, "FailedValidation"), text);
    assert!(
        text.starts_with("TFJob ml/Bad_Name is invalid: metadata.name: "),
        "{text}"
    );
    for path in [
        "metadata.name: ",
        "spec.runPolicy.backoffLimit: ",
        "spec.tfReplicaSpecs[Launcher]: ",
        "spec.tfReplicaSpecs[Worker].replicas: ",
        "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: ",
        "spec.tfReplicaSpecs[Worker].template.spec.containers: must contain a container named \"tensorflow\"",
        "spec.tfReplicaSpecs: must not contain both Chief and Master",
    ] {
        assert!(text.contains(path), "{path:?} missing from {text}");
    }
    assert_eq!(status.completion_time, Some(Time(t0())));
    assert_eq!(status.start_time, None);

    // Reported once: the next reconcile changes nothing.
    assert_eq!(cluster.plan(at(10)), Plan::default());
}

#[test]
fn scaling_up_creates_the_missing_indexes() {
    let mut cluster = chief_and_workers(2);
    cluster.scale("Worker", 4);
    let plan = cluster.reconcile(at(20));
    assert_eq!(
        pod_names(&plan.create_pods),
        ["mnist-worker-2", "mnist-worker-3"]
    );
    assert_eq!(
        service_names(&plan.create_services),
        ["mnist-worker-2", "mnist-worker-3"]
    );
    assert!(plan.delete_pods.is_empty() && plan.delete_services.is_empty());
    let tf_config = &env(&plan.create_pods[1], 0)[0].1;
    assert!(
        tf_config.contains(r#""worker":["mnist-worker-0.ml.svc:2222","mnist-worker-1.ml.svc:2222","mnist-worker-2.ml.svc:2222","mnist-worker-3.ml.svc:2222"]"#),
        "{tf_config}"
    );
    assert_eq!(plan.status, None, "the counts are unchanged");
    assert_eq!(counts(cluster.status(), "Worker"), (2, 0, 0));
}

#[test]
fn scaling_down_deletes_indexes_beyond_the_replica_count() {
    let mut cluster = chief_and_workers(3);
    let mut status = cluster.status().clone();
    status.pod_restarts.insert(
        "mnist-worker-2".into(),
        PodRestarts {
            count: 1,
            last_deleted_uid: "old".into(),
        },
    );
    cluster.job.status = Some(status);
    let uid1 = cluster.uid("mnist-worker-1");
    let uid2 = cluster.uid("mnist-worker-2");

    cluster.scale("Worker", 1);
    let plan = cluster.reconcile(at(20));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![
            del("mnist-worker-1", &uid1, DeletionCause::ScaleDown),
            del("mnist-worker-2", &uid2, DeletionCause::ScaleDown),
        ]
    );
    assert_eq!(
        deletions(&plan.delete_services),
        vec![
            del_svc("mnist-worker-1", DeletionCause::ScaleDown),
            del_svc("mnist-worker-2", DeletionCause::ScaleDown),
        ]
    );
    assert!(plan.create_pods.is_empty() && plan.create_services.is_empty());
    let status = new_status(&plan);
    assert_eq!(counts(status, "Worker"), (1, 0, 0));
    assert!(status.pod_restarts.is_empty(), "{:?}", status.pod_restarts);
    assert!(status.is_true(Running));
    assert_eq!(cluster.pod_names(), ["mnist-chief-0", "mnist-worker-0"]);

    // A replica type removed from the spec goes entirely.
    cluster.job.spec.tf_replica_specs.remove("Worker");
    let uid0 = cluster.uid("mnist-worker-0");
    let plan = cluster.reconcile(at(30));
    assert_eq!(
        deletions(&plan.delete_pods),
        vec![del("mnist-worker-0", &uid0, DeletionCause::ScaleDown)]
    );
    assert_eq!(
        deletions(&plan.delete_services),
        vec![del_svc("mnist-worker-0", DeletionCause::ScaleDown)]
    );
}

#[test]
fn a_succeeded_index_whose_pod_disappeared_is_never_run_again() {
    let mut cluster = chief_and_workers(2);
    cluster.set("mnist-worker-1", succeeded());
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        status.completed_indexes,
        BTreeMap::from([("Worker".to_owned(), vec![1])])
    );
    assert_eq!(counts(status, "Worker"), (1, 1, 0));

    // The completed pod is garbage collected.
    cluster.remove_pod("mnist-worker-1");
    let plan = cluster.reconcile(at(30));
    assert!(
        plan.create_pods.is_empty(),
        "{:?}",
        pod_names(&plan.create_pods)
    );
    assert_eq!(plan.status, None, "still one active, one succeeded");
    assert_eq!(counts(cluster.status(), "Worker"), (1, 1, 0));

    // Even while suspended and resumed.
    cluster.suspend(true);
    cluster.reconcile(at(40));
    assert_eq!(counts(cluster.status(), "Worker"), (0, 1, 0));
    cluster.suspend(false);
    let plan = cluster.reconcile(at(50));
    assert_eq!(
        pod_names(&plan.create_pods),
        ["mnist-chief-0", "mnist-worker-0"]
    );
}

#[test]
fn a_completed_index_counts_towards_all_workers_success() {
    let mut cluster = chiefless(2, &["successPolicy: AllWorkers"]);
    cluster.set("mnist-worker-1", succeeded());
    cluster.reconcile(at(20));
    cluster.remove_pod("mnist-worker-1");
    cluster.reconcile(at(30));
    cluster.set("mnist-worker-0", succeeded());
    let plan = cluster.reconcile(at(40));
    let status = new_status(&plan);
    assert!(status.is_true(Succeeded));
    assert_eq!(counts(status, "Worker"), (0, 2, 0));
}

#[test]
fn completed_indexes_beyond_a_scale_down_do_not_count() {
    let mut cluster = chiefless(3, &["successPolicy: AllWorkers"]);
    cluster.set("mnist-worker-1", succeeded());
    cluster.set("mnist-worker-2", succeeded());
    let plan = cluster.reconcile(at(20));
    assert_eq!(
        new_status(&plan).completed_indexes,
        BTreeMap::from([("Worker".to_owned(), vec![1, 2])])
    );

    // Two replicas remain: worker 0 is still running, so the job has not succeeded.
    cluster.scale("Worker", 2);
    let plan = cluster.reconcile(at(30));
    let status = new_status(&plan);
    assert!(!status.is_finished(), "{:?}", shape(status));
    assert!(status.is_true(Running));
    assert_eq!(counts(status, "Worker"), (1, 1, 0));
    assert_eq!(
        status.completed_indexes,
        BTreeMap::from([("Worker".to_owned(), vec![1])])
    );
    assert_eq!(
        pod_names(&cluster.pods),
        ["mnist-worker-0", "mnist-worker-1"]
    );
}

#[test]
fn dynamic_worker_failures_do_not_fail_the_job() {
    let mut cluster = running_cluster(tfjob(
        &[("Chief", 1, ""), ("PS", 1, ""), ("Worker", 2, "")],
        &["enableDynamicWorker: true"],
    ));
    // The sparse TF_CONFIG form.
    let plan = run(&cluster.job, &[], &[], t0());
    assert_eq!(
        env(&plan.create_pods[3], 0)[0].1,
        r#"{"sparseCluster":{"worker":{"1":"mnist-worker-1.ml.svc:2222"},"ps":["mnist-ps-0.ml.svc:2222"]},"task":{"type":"worker","index":1}}"#
    );

    cluster.set("mnist-worker-1", failed(1));
    cluster.set("mnist-worker-0", failed(137));
    let plan = cluster.reconcile(at(20));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    assert_eq!(counts(status, "Worker"), (0, 0, 2));
    assert!(plan.transitions.is_empty());
    assert!(plan.delete_pods.is_empty() && plan.create_pods.is_empty());

    // Other replica types still fail the job.
    cluster.set("mnist-ps-0", failed(137));
    let plan = cluster.reconcile(at(30));
    let status = new_status(&plan);
    assert!(status.is_true(Failed));
    assert_eq!(
        message(status, Failed),
        "TFJob ml/mnist has failed because 1 PS replica(s) failed."
    );
}

#[test]
fn a_pending_pod_with_an_invalid_image_name_fails_the_job() {
    let mut cluster = Cluster::new(tfjob(&[("Worker", 2, "OnFailure")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-worker-0", running());
    cluster.set(
        "mnist-worker-1",
        waiting(
            "InvalidImageName",
            "Failed to apply default image tag \"tf::2\": couldn't parse image name",
            at(1),
        ),
    );
    let uid = cluster.uid("mnist-worker-1");
    let plan = cluster.reconcile(at(5));
    let status = new_status(&plan);
    assert_eq!(
        shape(status),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Failed, True, "TFJobFailed")
        ]
    );
    let text = "TFJob ml/mnist has failed because 1 Worker replica(s) failed. \
                Pod mnist-worker-1: ContainersNotReady|InvalidImageName (policy builtin): \
                containers with unready status: [tensorflow]|\
                Failed to apply default image tag \"tf::2\": couldn't parse image name";
    assert_eq!(message(status, Failed), text);
    assert_eq!(status.completion_time, Some(Time(at(5))));
    assert_eq!(counts(status, "Worker"), (1, 0, 1));
    assert_eq!(
        events(&plan),
        vec![
            ev(
                EventType::Warning,
                "InvalidImageName",
                Some(&format!("{uid}/InvalidImageName"))
            ),
            ev(EventType::Warning, "TFJobFailed", None),
        ]
    );
    assert_eq!(event_message(&plan, "TFJobFailed"), text);
    assert_eq!(plan.transitions, vec![Transition::Failed]);
    assert!(
        plan.delete_pods.is_empty(),
        "permanent failures are not restarted"
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn warning_events_are_keyed_by_pod_incarnation_and_reason() {
    let mut cluster = Cluster::new(tfjob(&[("Worker", 2, "OnFailure")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-worker-0", unschedulable(at(1)));
    cluster.set(
        "mnist-worker-1",
        waiting("ImagePullBackOff", "Back-off pulling image \"tf:2\"", at(1)),
    );
    let (uid0, uid1) = (cluster.uid("mnist-worker-0"), cluster.uid("mnist-worker-1"));
    let expected = vec![
        ev(
            EventType::Warning,
            "Unschedulable",
            Some(&format!("{uid0}/Unschedulable")),
        ),
        ev(
            EventType::Warning,
            "ImagePullBackOff",
            Some(&format!("{uid1}/ImagePullBackOff")),
        ),
    ];
    let plan = cluster.reconcile(at(10));
    assert_eq!(events(&plan), expected);
    assert_eq!(
        event_message(&plan, "Unschedulable"),
        "Pod ml/mnist-worker-0 is unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    );
    assert_eq!(
        event_message(&plan, "ImagePullBackOff"),
        "Pod ml/mnist-worker-1 container tensorflow: ImagePullBackOff: Back-off pulling image \"tf:2\""
    );
    // Inside the pull grace period nothing fails; the job is looked at again soon.
    assert_eq!(plan.requeue_after, Some(secs(15)));
    assert!(!cluster.status().is_finished());

    // The same situation later carries the same keys, so it is published once.
    let plan = cluster.plan(at(60));
    assert_eq!(events(&plan), expected);

    // A crash-looping container of a running pod is reported too.
    let mut crash = running_restarted(4);
    crash.container_statuses.as_mut().unwrap()[0].state = Some(
        serde_json::from_value(serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}))
            .unwrap(),
    );
    cluster.set("mnist-worker-0", crash);
    let plan = cluster.plan(at(70));
    assert_eq!(
        events(&plan)[0],
        ev(
            EventType::Warning,
            "CrashLoopBackOff",
            Some(&format!("{uid0}/CrashLoopBackOff"))
        )
    );
}

#[test]
fn a_pending_pod_missing_its_config_map_fails_the_job() {
    let mut cluster = Cluster::new(tfjob(&[("Chief", 1, "ExitCode"), ("Worker", 1, "")], &[]));
    cluster.reconcile(t0());
    cluster.set("mnist-chief-0", running());
    cluster.set(
        "mnist-worker-0",
        waiting(
            "CreateContainerConfigError",
            "configmap \"settings\" not found",
            at(2),
        ),
    );
    let plan = cluster.reconcile(at(5));
    let status = new_status(&plan);
    assert!(status.is_true(Failed));
    assert_eq!(
        message(status, Failed),
        "TFJob ml/mnist has failed because 1 Worker replica(s) failed. \
         Pod mnist-worker-0: ContainersNotReady|CreateContainerConfigError (policy builtin): \
         Grace period [0s] exceeded|containers with unready status: [tensorflow]|\
         configmap \"settings\" not found"
    );
    assert_eq!(plan.transitions, vec![Transition::Failed]);
}

fn at_ms(ms: i64) -> jiff::Timestamp {
    t0() + jiff::SignedDuration::from_millis(ms)
}

#[test]
fn replica_count_changes_alone_wait_for_the_batch_window_but_conditions_do_not() {
    let mut cluster = Cluster::new(tfjob(&[("Worker", 3, "")], &[]));
    cluster.reconcile(t0());
    // The Running condition is written at once, 300 ms after the previous write.
    cluster.set("mnist-worker-0", running());
    let plan = cluster.reconcile(at_ms(300));
    assert_eq!(
        shape(new_status(&plan)),
        vec![
            c(Created, True, "TFJobCreated"),
            c(Running, True, "TFJobRunning")
        ]
    );
    // A second worker running only moves the counts: held back until the window (1 s after
    // the last write) ends, and the job is looked at again then.
    cluster.set("mnist-worker-1", running());
    let plan = cluster.reconcile(at_ms(600));
    assert!(plan.status.is_none(), "{:?}", plan.status);
    assert_eq!(
        plan.requeue_after,
        Some(std::time::Duration::from_millis(700))
    );
    let plan = cluster.reconcile(at_ms(1300));
    assert_eq!(counts(new_status(&plan), "Worker"), (2, 0, 0));

    // A zero window writes every change.
    cluster.set("mnist-worker-2", running());
    let settings = Settings {
        status_batch: std::time::Duration::ZERO,
        ..Settings::default()
    };
    let plan = run_with(
        &settings,
        &cluster.job,
        &cluster.pods,
        &cluster.services,
        at_ms(1400),
    );
    assert_eq!(counts(new_status(&plan), "Worker"), (3, 0, 0));
    // The default window holds the same change back.
    assert!(cluster.plan(at_ms(1400)).status.is_none());
    // A last write stamped in the future (another instance's clock) holds nothing back.
    cluster.job.status.as_mut().unwrap().last_reconcile_time = Some(Time(at_ms(60_000)));
    let plan = cluster.plan(at_ms(1400));
    assert_eq!(counts(new_status(&plan), "Worker"), (3, 0, 0));
}
