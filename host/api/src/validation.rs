//! Defaults and validation: from a raw [`TFJob`] to a [`ValidJob`] the planner can trust.
//!
//! Defaults are applied in memory on every reconcile and never written back into the spec, as
//! training-operator did: replica type keys re-cased, `replicas` 1, `restartPolicy` `Never`,
//! `cleanPodPolicy` `None`, and a `tfjob-port` (2222) appended to the `tensorflow` container.
//! Validation collects every problem, each with its field path, so a user fixes a manifest in
//! one round trip.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ContainerPort, PodTemplateSpec};

use crate::labels::{
    DEFAULT_CONTAINER_NAME, DEFAULT_PORT, DEFAULT_PORT_NAME, MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_TRAINING_OPERATOR,
};
use crate::{
    CleanPodPolicy, ReplicaSpec, ReplicaType, RestartPolicy, RunPolicy, SchedulingPolicy,
    SuccessPolicy, TFJob,
};

/// One problem with a job, located by its field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path in Kubernetes notation, e.g. `spec.tfReplicaSpecs[Worker].replicas`.
    pub path: String,
    /// What is wrong, e.g. `must be greater than or equal to 0`.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a job. Never empty.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

/// One replica type after defaulting.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidReplica {
    pub replicas: i32,
    pub restart_policy: RestartPolicy,
    /// The template with the default port appended to the `tensorflow` container.
    pub template: PodTemplateSpec,
}

/// The run policy after defaulting.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ValidRunPolicy {
    pub clean_pod_policy: CleanPodPolicy,
    pub ttl_seconds_after_finished: Option<i32>,
    pub active_deadline_seconds: Option<i64>,
    pub backoff_limit: Option<i32>,
    pub suspend: bool,
    /// Gang-scheduling hints, as given (empty when the job names none).
    pub scheduling: SchedulingPolicy,
}

/// A job whose spec passed validation, with every default applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidJob {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// Replica types in processing order.
    pub replicas: BTreeMap<ReplicaType, ValidReplica>,
    pub run_policy: ValidRunPolicy,
    pub success_policy: SuccessPolicy,
    pub enable_dynamic_worker: bool,
}

impl ValidJob {
    /// Whether the job has a Chief or Master, whose success then decides the job's.
    pub fn has_chief_or_master(&self) -> bool {
        self.replicas.keys().any(|t| t.is_chief_or_master())
    }

    /// A job is distributed (and gets `TF_CONFIG`) unless it has exactly one replica in total.
    pub fn is_distributed(&self) -> bool {
        self.replicas
            .values()
            .map(|r| i64::from(r.replicas))
            .sum::<i64>()
            != 1
    }
}

/// Whether `managedBy` hands the job to another controller, so this operator must not touch it.
pub fn managed_elsewhere(job: &TFJob) -> bool {
    job.spec
        .run_policy
        .managed_by
        .as_deref()
        .is_some_and(|m| m != MANAGED_BY_TRAINING_OPERATOR)
}

/// Applies the defaults and checks every rule; returns all problems at once.
pub fn validate(job: &TFJob) -> Result<ValidJob, ValidationErrors> {
    let mut problems = Problems::default();
    let name = job.metadata.name.clone().unwrap_or_default();
    if let Some(problem) = dns1035_problem(&name) {
        problems.push("metadata.name".into(), &problem);
    }
    let run = &job.spec.run_policy;
    check_run_policy(run, &mut problems);
    let replicas = replica_specs(&job.spec.tf_replica_specs, &mut problems);
    if !problems.0.is_empty() {
        return Err(ValidationErrors(problems.0));
    }
    Ok(ValidJob {
        name,
        namespace: job
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        replicas,
        run_policy: ValidRunPolicy {
            clean_pod_policy: run.clean_pod_policy.unwrap_or_default(),
            ttl_seconds_after_finished: run.ttl_seconds_after_finished,
            active_deadline_seconds: run.active_deadline_seconds,
            backoff_limit: run.backoff_limit,
            suspend: run.suspend.unwrap_or(false),
            scheduling: run.scheduling_policy.clone().unwrap_or_default(),
        },
        success_policy: job.spec.success_policy.unwrap_or_default(),
        enable_dynamic_worker: job.spec.enable_dynamic_worker.unwrap_or(false),
    })
}

/// The problems found so far, in the order they were found.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn push(&mut self, path: String, message: &str) {
        self.0.push(FieldError {
            path,
            message: message.to_owned(),
        });
    }
}

/// `spec.runPolicy`: a manager this operator knows, and no negative counts or durations.
fn check_run_policy(run: &RunPolicy, problems: &mut Problems) {
    if let Some(m) = run.managed_by.as_deref()
        && m != MANAGED_BY_TRAINING_OPERATOR
        && m != MANAGED_BY_MULTIKUEUE
    {
        problems.push(
            "spec.runPolicy.managedBy".into(),
            &format!(
                "unsupported value {m:?}: must be {MANAGED_BY_TRAINING_OPERATOR:?} or {MANAGED_BY_MULTIKUEUE:?}"
            ),
        );
    }
    let scheduling = run.scheduling_policy.as_ref();
    for (field, value) in [
        (
            "ttlSecondsAfterFinished",
            run.ttl_seconds_after_finished.map(i64::from),
        ),
        ("activeDeadlineSeconds", run.active_deadline_seconds),
        ("backoffLimit", run.backoff_limit.map(i64::from)),
        (
            "schedulingPolicy.minAvailable",
            scheduling.and_then(|s| s.min_available).map(i64::from),
        ),
        (
            "schedulingPolicy.scheduleTimeoutSeconds",
            scheduling
                .and_then(|s| s.schedule_timeout_seconds)
                .map(i64::from),
        ),
    ] {
        if value.is_some_and(|v| v < 0) {
            problems.push(
                format!("spec.runPolicy.{field}"),
                "must be greater than or equal to 0",
            );
        }
    }
}

/// `spec.tfReplicaSpecs`: known replica types, each once, with counts TensorFlow accepts and
/// templates the operator can run; returns the replicas with their defaults.
fn replica_specs(
    specs: &BTreeMap<String, ReplicaSpec>,
    problems: &mut Problems,
) -> BTreeMap<ReplicaType, ValidReplica> {
    if specs.is_empty() {
        problems.push(
            "spec.tfReplicaSpecs".into(),
            "must contain at least one replica spec",
        );
    }
    let mut replicas = BTreeMap::new();
    let mut seen_keys: BTreeMap<ReplicaType, &str> = BTreeMap::new();
    for (key, replica) in specs {
        let base = format!("spec.tfReplicaSpecs[{key}]");
        let Some(rtype) = ReplicaType::parse_loose(key) else {
            problems.push(
                base,
                "unknown replica type: must be one of Chief, Master, PS, Worker, Evaluator",
            );
            continue;
        };
        if let Some(other) = seen_keys.insert(rtype, key) {
            problems.push(
                base.clone(),
                &format!("duplicate replica type: {other:?} and {key:?} both mean {rtype}"),
            );
        }
        let count = replica.replicas.unwrap_or(1);
        check_replica_count(&base, rtype, count, problems);
        check_template(&base, &replica.template, problems);
        replicas.insert(
            rtype,
            ValidReplica {
                replicas: count,
                restart_policy: replica.restart_policy.unwrap_or_default(),
                template: with_default_port(&replica.template),
            },
        );
    }
    if replicas.contains_key(&ReplicaType::Chief) && replicas.contains_key(&ReplicaType::Master) {
        problems.push(
            "spec.tfReplicaSpecs".into(),
            "must not contain both Chief and Master",
        );
    }
    replicas
}

/// `replicas`: not negative, and at most one coordinator or evaluator.
fn check_replica_count(base: &str, rtype: ReplicaType, count: i32, problems: &mut Problems) {
    if count < 0 {
        problems.push(
            format!("{base}.replicas"),
            "must be greater than or equal to 0",
        );
    }
    // TensorFlow's cluster resolver knows one chief (Master is its old name) and one
    // evaluator; a second one would never join the cluster.
    if count > 1
        && matches!(
            rtype,
            ReplicaType::Chief | ReplicaType::Master | ReplicaType::Evaluator
        )
    {
        problems.push(
            format!("{base}.replicas"),
            &format!("must be at most 1 for {rtype}"),
        );
    }
}

/// `template`: containers with names and images, valid port names, and a `tensorflow`
/// container.
fn check_template(base: &str, template: &PodTemplateSpec, problems: &mut Problems) {
    let containers = template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    if containers.is_empty() {
        problems.push(
            format!("{base}.template.spec.containers"),
            "must contain at least one container",
        );
    }
    for (i, c) in containers.iter().enumerate() {
        if c.name.is_empty() {
            problems.push(
                format!("{base}.template.spec.containers[{i}].name"),
                "must be set",
            );
        }
        if c.image.as_deref().is_none_or(str::is_empty) {
            problems.push(
                format!("{base}.template.spec.containers[{i}].image"),
                "must be set",
            );
        }
        for (j, port) in c.ports.iter().flatten().enumerate() {
            if let Some(problem) = port.name.as_deref().and_then(port_name_problem) {
                problems.push(
                    format!("{base}.template.spec.containers[{i}].ports[{j}].name"),
                    &problem,
                );
            }
        }
    }
    if !containers.is_empty() && !containers.iter().any(|c| c.name == DEFAULT_CONTAINER_NAME) {
        problems.push(
            format!("{base}.template.spec.containers"),
            &format!("must contain a container named {DEFAULT_CONTAINER_NAME:?}"),
        );
    }
}

/// Admission check of a TFJob as JSON (what an API server's validation hook sees): rejects
/// what [`validate`] rejects, and objects that are not TFJobs at all, as training-operator's
/// webhook did.
pub fn admit(object: &serde_json::Value) -> Result<(), String> {
    let job: TFJob = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    validate(&job).map(|_| ()).map_err(|e| e.to_string())
}

/// The index of the container that carries `TF_CONFIG` and the job port: the one named
/// `tensorflow`, else the first.
pub fn default_container_index(template: &PodTemplateSpec) -> usize {
    template
        .spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .position(|c| c.name == DEFAULT_CONTAINER_NAME)
        })
        .unwrap_or(0)
}

/// Appends `tfjob-port: 2222` to the default container unless a port of that name exists.
fn with_default_port(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut template = template.clone();
    let index = default_container_index(&template);
    if let Some(container) = template
        .spec
        .as_mut()
        .and_then(|s| s.containers.get_mut(index))
    {
        let ports = container.ports.get_or_insert_with(Vec::new);
        if !ports
            .iter()
            .any(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
        {
            ports.push(ContainerPort {
                name: Some(DEFAULT_PORT_NAME.into()),
                container_port: DEFAULT_PORT,
                ..ContainerPort::default()
            });
        }
    }
    template
}

/// Why a container port's `name` is not an IANA service name (what Kubernetes requires of a
/// named port), if it is not one. An empty name is no name.
fn port_name_problem(name: &str) -> Option<String> {
    const RULE: &str = "must be an IANA service name: at most 15 lower-case alphanumeric characters or '-', with at least one letter, no '--', starting and ending with an alphanumeric character";
    let bytes = name.as_bytes();
    let ok = name.is_empty()
        || (bytes.len() <= 15
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes.iter().any(u8::is_ascii_lowercase)
            && !name.starts_with('-')
            && !name.ends_with('-')
            && !name.contains("--"));
    (!ok).then(|| format!("{name:?} {RULE}"))
}

/// Why `name` is not a DNS-1035 label, if it is not one.
fn dns1035_problem(name: &str) -> Option<String> {
    const RULE: &str = "must be a DNS-1035 label: at most 63 lower-case alphanumeric characters or '-', starting with a letter and ending with an alphanumeric character";
    if name.is_empty() {
        return Some("must be set".into());
    }
    let bytes = name.as_bytes();
    let ok = bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    (!ok).then(|| format!("{name:?} {RULE}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_tfjob_yaml;

    const VALID: &str = r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: ml}
spec:
  tfReplicaSpecs:
    WORKER:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf:2
            ports: [{name: metrics, containerPort: 9090}]
    ps:
      template:
        spec:
          containers: [{name: tensorflow, image: tf:2, ports: [{name: tfjob-port, containerPort: 3333}]}]
"#;

    fn job(yaml: &str) -> TFJob {
        parse_tfjob_yaml(yaml).expect("test job parses")
    }

    fn paths(yaml: &str) -> Vec<String> {
        validate(&job(yaml))
            .expect_err("job must be invalid")
            .0
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn defaults_recase_keys_and_fill_replicas_restart_policy_and_ports() {
        let v = validate(&job(VALID)).unwrap();
        assert_eq!(
            v.replicas.keys().copied().collect::<Vec<_>>(),
            vec![ReplicaType::PS, ReplicaType::Worker]
        );
        let worker = &v.replicas[&ReplicaType::Worker];
        assert_eq!(worker.replicas, 2);
        assert_eq!(worker.restart_policy, RestartPolicy::Never);
        let ports = worker.template.spec.as_ref().unwrap().containers[0]
            .ports
            .clone()
            .unwrap();
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0].name.as_deref(), Some("metrics"));
        assert_eq!(ports[1].name.as_deref(), Some("tfjob-port"));
        assert_eq!(ports[1].container_port, 2222);
        // An existing tfjob-port is kept, not duplicated.
        let ps = &v.replicas[&ReplicaType::PS];
        assert_eq!(ps.replicas, 1);
        let ps_ports = ps.template.spec.as_ref().unwrap().containers[0]
            .ports
            .clone()
            .unwrap();
        assert_eq!(ps_ports.len(), 1);
        assert_eq!(ps_ports[0].container_port, 3333);
        assert_eq!(v.run_policy.clean_pod_policy, CleanPodPolicy::None);
        assert_eq!(v.success_policy, SuccessPolicy::Default);
        assert!(v.is_distributed());
    }

    #[test]
    fn defaults_are_not_written_into_the_spec() {
        let j = job(VALID);
        let before = j.spec.clone();
        validate(&j).unwrap();
        assert_eq!(j.spec, before);
    }

    #[test]
    fn port_goes_to_the_tensorflow_container_not_the_first() {
        let v = validate(&job(r#"
metadata: {name: a}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers: [{name: sidecar, image: s}, {name: tensorflow, image: t}]
"#))
        .unwrap();
        let cs = &v.replicas[&ReplicaType::Worker]
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers;
        assert!(cs[0].ports.is_none());
        assert_eq!(cs[1].ports.as_ref().unwrap()[0].container_port, 2222);
        assert!(!v.is_distributed());
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let p = paths(
            r#"
metadata: {name: Bad_Name}
spec:
  runPolicy: {managedBy: someone/else, backoffLimit: -1, ttlSecondsAfterFinished: -5, activeDeadlineSeconds: -2, schedulingPolicy: {minAvailable: -3, scheduleTimeoutSeconds: -1}}
  tfReplicaSpecs:
    Chief:
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
    master:
      replicas: -1
      template: {spec: {containers: [{name: main}]}}
    Launcher:
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
    Worker:
      template: {spec: {containers: []}}
"#,
        );
        assert_eq!(
            p,
            vec![
                "metadata.name",
                "spec.runPolicy.managedBy",
                "spec.runPolicy.ttlSecondsAfterFinished",
                "spec.runPolicy.activeDeadlineSeconds",
                "spec.runPolicy.backoffLimit",
                "spec.runPolicy.schedulingPolicy.minAvailable",
                "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
                "spec.tfReplicaSpecs[Launcher]",
                "spec.tfReplicaSpecs[Worker].template.spec.containers",
                "spec.tfReplicaSpecs[master].replicas",
                "spec.tfReplicaSpecs[master].template.spec.containers[0].image",
                "spec.tfReplicaSpecs[master].template.spec.containers",
                "spec.tfReplicaSpecs",
            ]
        );
    }

    #[test]
    fn missing_replica_specs_is_invalid() {
        assert_eq!(
            paths("metadata: {name: a}\nspec: {}\n"),
            vec!["spec.tfReplicaSpecs"]
        );
    }

    #[test]
    fn duplicate_keys_after_recasing_are_invalid() {
        let p = paths(
            r#"
metadata: {name: a}
spec:
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    worker: {template: {spec: {containers: [{name: tensorflow, image: t}]}}}
"#,
        );
        assert_eq!(p, vec!["spec.tfReplicaSpecs[worker]"]);
    }

    #[test]
    fn multikueue_is_a_valid_manager_and_marks_the_job_as_managed_elsewhere() {
        let mut j = job(VALID);
        j.spec.run_policy.managed_by = Some(MANAGED_BY_MULTIKUEUE.into());
        assert!(validate(&j).is_ok());
        assert!(managed_elsewhere(&j));
        j.spec.run_policy.managed_by = Some(MANAGED_BY_TRAINING_OPERATOR.into());
        assert!(!managed_elsewhere(&j));
        j.spec.run_policy.managed_by = None;
        assert!(!managed_elsewhere(&j));
    }

    #[test]
    fn admission_rejects_invalid_jobs_naming_the_field() {
        let ok = serde_json::to_value(job(VALID)).unwrap();
        assert_eq!(admit(&ok), Ok(()));
        let mut bad = ok.clone();
        bad["spec"]["tfReplicaSpecs"]["WORKER"]["replicas"] = serde_json::json!(-1);
        let err = admit(&bad).unwrap_err();
        assert!(
            err.contains("spec.tfReplicaSpecs[WORKER].replicas"),
            "{err}"
        );
        assert!(admit(&serde_json::json!({"spec": 5})).is_err());
    }

    #[test]
    fn coordinators_and_evaluators_have_at_most_one_replica() {
        let p = paths(
            r#"
metadata: {name: a}
spec:
  tfReplicaSpecs:
    chief: {replicas: 2, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    Evaluator: {replicas: 3, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    Worker: {replicas: 8, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
"#,
        );
        assert_eq!(
            p,
            vec![
                "spec.tfReplicaSpecs[Evaluator].replicas",
                "spec.tfReplicaSpecs[chief].replicas"
            ]
        );
    }

    #[test]
    fn port_names_are_iana_service_names() {
        for good in ["", "tfjob-port", "http", "a1", "x-2-y", &"p".repeat(15)] {
            assert!(port_name_problem(good).is_none(), "{good:?}");
        }
        for bad in ["Port", "1234", "-a", "a-", "a--b", "a_b", &"p".repeat(16)] {
            assert!(port_name_problem(bad).is_some(), "{bad:?}");
        }
        let p = paths(
            r#"
metadata: {name: a}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - {name: tensorflow, image: t, ports: [{name: ok, containerPort: 1}, {name: Bad_Name, containerPort: 2}]}
"#,
        );
        assert_eq!(
            p,
            vec!["spec.tfReplicaSpecs[Worker].template.spec.containers[0].ports[1].name"]
        );
    }

    #[test]
    fn dns1035_rules() {
        assert!(dns1035_problem("mnist-1").is_none());
        assert!(dns1035_problem("1mnist").is_some());
        assert!(dns1035_problem("mnist-").is_some());
        assert!(dns1035_problem("Mnist").is_some());
        assert!(dns1035_problem(&"a".repeat(64)).is_some());
        assert!(dns1035_problem(&"a".repeat(63)).is_none());
    }
}
