//! Conformance of the real Kubeflow TFJob examples in `data/kubeflow/`.
//!
//! Each manifest is parsed with `tfjob_api::parse::parse_tfjob_documents`, validated, and
//! planned by `tfjob_planner::plan` with the native policies. The first reconcile must create
//! exactly what training-operator 1.9 created (checked rule by rule by
//! [`tfjob_conformance::fresh_plan_violations`]); later reconciles must be idempotent and move
//! the job through Running to Succeeded as its pods do.

use pretty_assertions::assert_eq;
use tfjob_api::parse::parse_tfjob_documents;
use tfjob_api::validation::validate;
use tfjob_api::{JobConditionType, TFJob};
use tfjob_conformance::{
    Example, fresh_plan_violations, kubeflow_examples, observe, parse_example, plan_fresh,
    plan_with, with_status,
};
use tfjob_planner::{Settings, Transition};

fn examples() -> Vec<Example> {
    let examples = kubeflow_examples();
    assert_eq!(
        examples.iter().map(|e| e.file.as_str()).collect::<Vec<_>>(),
        [
            "dist-mnist.yaml",
            "estimator-distributed.yaml",
            "keras-multi-worker.yaml",
            "mnist-with-summaries.yaml",
            "simple.yaml",
        ],
        "the example set changed: review these tests"
    );
    examples
}

fn settings(domain: Option<&str>) -> Settings {
    Settings {
        cluster_domain: domain.map(str::to_owned),
        ..Settings::default()
    }
}

fn assert_conforms(example: &Example, job: &TFJob, domain: Option<&str>) {
    let plan = plan_fresh(job, &settings(domain));
    let violations = fresh_plan_violations(job, &plan, domain);
    assert!(
        violations.is_empty(),
        "{} (cluster domain {domain:?}):\n{}",
        example.file,
        violations.join("\n")
    );
    assert_eq!(plan.transitions, [Transition::Created], "{}", example.file);
}

#[test]
fn every_example_parses_to_one_valid_tfjob() {
    for example in examples() {
        let documents = parse_tfjob_documents(&example.text);
        assert_eq!(documents.len(), 1, "{}", example.file);
        let job = documents
            .into_iter()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("{} parses", example.file));
        let valid = validate(&job).unwrap_or_else(|e| panic!("{}: {e}", example.file));
        assert_eq!(Some(valid.name.as_str()), job.metadata.name.as_deref());
        assert!(!valid.replicas.is_empty(), "{}", example.file);
        assert!(job.status.is_none(), "{}", example.file);
    }
}

#[test]
fn all_examples_in_one_stream_parse_in_order() {
    let examples = examples();
    let stream = examples
        .iter()
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join("---\n");
    let names: Vec<String> = parse_tfjob_documents(&stream)
        .into_iter()
        .map(|d| d.expect("every document parses").metadata.name.unwrap())
        .collect();
    let expected: Vec<String> = examples
        .iter()
        .map(|e| parse_example(e).metadata.name.unwrap())
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn first_reconcile_creates_one_pod_and_service_per_replica() {
    for example in examples() {
        let job = parse_example(&example);
        assert_conforms(&example, &job, None);
        assert_conforms(&example, &job, Some("cluster.local"));
        // An empty domain is no domain.
        let plain = plan_fresh(&job, &settings(None));
        let empty = plan_fresh(&job, &settings(Some("")));
        assert_eq!(plain, empty, "{}", example.file);
    }
}

#[test]
fn an_invalid_example_creates_nothing_and_fails_validation() {
    for example in examples() {
        let mut job = parse_example(&example);
        job.metadata.name = Some("team/MNIST".into());
        let plan = plan_fresh(&job, &settings(None));
        assert!(plan.create_pods.is_empty(), "{}", example.file);
        assert!(plan.create_services.is_empty(), "{}", example.file);
        let status = plan.status.expect("a status");
        let failed = status
            .condition(JobConditionType::Failed)
            .expect("an invalid job fails");
        assert_eq!(failed.reason, "FailedValidation");
        assert!(
            failed.message.contains("metadata.name"),
            "{}",
            failed.message
        );
        assert_eq!(
            plan.transitions,
            [Transition::Created, Transition::Failed],
            "{}",
            example.file
        );
    }
}

#[test]
fn replica_type_keys_are_matched_case_insensitively() {
    for example in examples() {
        let mut job = parse_example(&example);
        job.spec.tf_replica_specs = job
            .spec
            .tf_replica_specs
            .into_iter()
            .map(|(k, v)| (k.to_ascii_uppercase(), v))
            .collect();
        assert_conforms(&example, &job, None);
    }
}

#[test]
fn the_json_the_api_server_stores_plans_the_same() {
    for example in examples() {
        let job = parse_example(&example);
        let json = serde_json::to_string(&job).expect("a TFJob serialises");
        let mut again = parse_tfjob_documents(&json);
        assert_eq!(again.len(), 1, "{}", example.file);
        let again = again.remove(0).expect("the JSON parses");
        assert_eq!(again.metadata, job.metadata, "{}", example.file);
        assert_eq!(again.spec, job.spec, "{}", example.file);
        assert_eq!(
            plan_fresh(&again, &settings(None)),
            plan_fresh(&job, &settings(None)),
            "{}",
            example.file
        );
    }
}

#[test]
fn second_reconcile_with_the_created_objects_creates_nothing() {
    for example in examples() {
        let job = parse_example(&example);
        let first = plan_fresh(&job, &settings(None));
        let pods = observe(&first.create_pods, "Pending");
        let job = with_status(&job, &first);
        let second = plan_with(&job, &pods, &first.create_services, &settings(None))
            .expect("native policies never fail");
        assert!(second.skip.is_none(), "{}", example.file);
        assert!(second.create_pods.is_empty(), "{}", example.file);
        assert!(second.create_services.is_empty(), "{}", example.file);
        assert!(second.delete_pods.is_empty(), "{}", example.file);
        assert!(second.delete_services.is_empty(), "{}", example.file);
        assert!(second.transitions.is_empty(), "{}", example.file);
        assert!(
            second.requeue_after.is_some(),
            "{}: pending pods are looked at again",
            example.file
        );
    }
}

#[test]
fn running_pods_run_the_job_and_succeeded_pods_complete_it() {
    for example in examples() {
        let job = parse_example(&example);
        let first = plan_fresh(&job, &settings(None));
        let job = with_status(&job, &first);

        let running = observe(&first.create_pods, "Running");
        let plan = plan_with(&job, &running, &first.create_services, &settings(None))
            .expect("native policies never fail");
        let status = plan.status.clone().expect("status changes to Running");
        assert!(
            status.is_true(JobConditionType::Running),
            "{}: {:?}",
            example.file,
            status.conditions
        );
        let active: i32 = status.replica_statuses.values().map(|r| r.active).sum();
        assert_eq!(active as usize, first.create_pods.len(), "{}", example.file);
        assert!(plan.create_pods.is_empty() && plan.delete_pods.is_empty());

        let job = with_status(&job, &plan);
        let done = observe(&first.create_pods, "Succeeded");
        let plan = plan_with(&job, &done, &first.create_services, &settings(None))
            .expect("native policies never fail");
        let status = plan.status.expect("status changes to Succeeded");
        assert!(
            status.is_true(JobConditionType::Succeeded),
            "{}: {:?}",
            example.file,
            status.conditions
        );
        assert!(
            !status.is_true(JobConditionType::Running),
            "{}",
            example.file
        );
        assert!(status.completion_time.is_some(), "{}", example.file);
        assert_eq!(
            plan.transitions,
            [Transition::Succeeded],
            "{}",
            example.file
        );
        // cleanPodPolicy None (explicit or default) keeps the pods for their logs.
        assert!(plan.delete_pods.is_empty(), "{}", example.file);
    }
}

#[test]
fn the_checker_rejects_broken_plans() {
    let example = examples()
        .into_iter()
        .find(|e| e.file == "dist-mnist.yaml")
        .expect("dist-mnist example");
    let job = parse_example(&example);
    let good = plan_fresh(&job, &settings(None));
    assert!(fresh_plan_violations(&job, &good, None).is_empty());
    // The right plan checked against another cluster domain is wrong.
    assert!(!fresh_plan_violations(&job, &good, Some("cluster.local")).is_empty());

    type Breakage = fn(&mut tfjob_planner::Plan);
    let breakages: [(&str, Breakage); 8] = [
        ("no job-role on worker 0", |p| {
            let labels = p.create_pods[2].metadata.labels.as_mut().unwrap();
            labels.remove("training.kubeflow.org/job-role");
        }),
        ("job-role on worker 1", |p| {
            let labels = p.create_pods[3].metadata.labels.as_mut().unwrap();
            labels.insert("training.kubeflow.org/job-role".into(), "master".into());
        }),
        ("wrong TF_CONFIG index", |p| {
            let env = p.create_pods[3].spec.as_mut().unwrap().containers[0]
                .env
                .as_mut()
                .unwrap();
            let value = env[0].value.take().unwrap();
            env[0].value = Some(value.replace(r#""index":1"#, r#""index":2"#));
        }),
        ("a service missing", |p| {
            p.create_services.pop();
        }),
        ("an extra pod", |p| {
            let pod = p.create_pods[0].clone();
            p.create_pods.push(pod);
        }),
        ("service without owner", |p| {
            p.create_services[1].metadata.owner_references = None;
        }),
        ("pod restart policy changed", |p| {
            p.create_pods[0].spec.as_mut().unwrap().restart_policy = Some("Always".into());
        }),
        ("service port changed", |p| {
            let ports = p.create_services[0]
                .spec
                .as_mut()
                .unwrap()
                .ports
                .as_mut()
                .unwrap();
            ports[0].port = 2223;
        }),
    ];
    for (what, breakage) in breakages {
        let mut bad = good.clone();
        breakage(&mut bad);
        assert!(
            !fresh_plan_violations(&job, &bad, None).is_empty(),
            "not caught: {what}"
        );
    }
}
