//! Shared helpers of the conformance tests: real Kubeflow TFJob manifests through the API crate
//! and the planner, checked against the reconcile contract.
//!
//! The manifests live in `data/kubeflow/` (byte-for-byte copies of training-operator's
//! examples). [`fresh_plan_violations`] derives what the first reconcile of a job must create
//! straight from the raw spec, independently of the planner's own code path, and compares it with
//! a [`Plan`]: one pod and one headless service per replica index, their names, labels,
//! owner references, restart policies, ports and `TF_CONFIG`. Violations are returned as text so
//! that a failing test lists every broken rule at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, Pod, PodSpec, PodStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tfjob_api::parse::parse_tfjob_documents;
use tfjob_api::{ConditionStatus, JobConditionType, ReplicaType, RestartPolicy, TFJob};
use tfjob_planner::native::NativePolicies;
use tfjob_planner::{Plan, PlanError, PlanInput, Settings, plan};

/// The label keys every object of a job carries (values: operator name, job name, lower-case
/// replica type, replica index).
pub const OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
pub const JOB_NAME: &str = "training.kubeflow.org/job-name";
pub const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
pub const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// `master` on the pod whose success decides the job's.
pub const JOB_ROLE: &str = "training.kubeflow.org/job-role";

/// One manifest file of `data/kubeflow/`.
#[derive(Clone, Debug)]
pub struct Example {
    /// File name, e.g. `dist-mnist.yaml`.
    pub file: String,
    pub text: String,
}

/// The folder of the Kubeflow example manifests.
pub fn kubeflow_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/kubeflow")
}

/// Every manifest (`.yaml`, `.yml`, `.json`) of `data/kubeflow/`, sorted by file name.
pub fn kubeflow_examples() -> Vec<Example> {
    let mut examples: Vec<Example> = std::fs::read_dir(kubeflow_dir())
        .expect("data/kubeflow is readable")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .map(|path| Example {
            file: path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("UTF-8 file name")
                .to_owned(),
            text: std::fs::read_to_string(&path).expect("manifest is readable"),
        })
        .collect();
    examples.sort_by(|a, b| a.file.cmp(&b.file));
    examples
}

/// The single TFJob of `example`, with a uid as the API server would have assigned.
pub fn parse_example(example: &Example) -> TFJob {
    let mut documents = parse_tfjob_documents(&example.text);
    assert_eq!(documents.len(), 1, "{}: one document", example.file);
    let mut job = documents
        .remove(0)
        .unwrap_or_else(|e| panic!("{}: {e}", example.file));
    let name = job.metadata.name.clone().unwrap_or_default();
    job.metadata.uid = Some(format!("uid-{name}"));
    job
}

/// The fixed clock of the tests.
pub fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("a valid timestamp")
}

/// Plans one reconcile of `job` with the native policies, observing `pods` and `services`.
pub fn plan_with(
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    settings: &Settings,
) -> Result<Plan, PlanError> {
    let policies = NativePolicies::default();
    plan(&PlanInput {
        job,
        pods,
        services,
        now: now(),
        settings,
        policies: &policies,
        pod_group: None,
        priority_classes: &Default::default(),
        kueue: None,
    })
}

/// Plans the first reconcile of `job`: nothing observed yet.
pub fn plan_fresh(job: &TFJob, settings: &Settings) -> Plan {
    plan_with(job, &[], &[], settings).expect("native policies never fail")
}

/// The pods of `plan` as the cluster would report them once created: with a uid and `phase`.
pub fn observe(pods: &[Pod], phase: &str) -> Vec<Pod> {
    pods.iter()
        .map(|p| {
            let mut p = p.clone();
            let name = p.metadata.name.clone().unwrap_or_default();
            p.metadata.uid = Some(format!("pod-uid-{name}"));
            p.status = Some(PodStatus {
                phase: Some(phase.to_owned()),
                ..PodStatus::default()
            });
            p
        })
        .collect()
}

/// `job` with the status `plan` wrote, as the next reconcile reads it.
pub fn with_status(job: &TFJob, plan: &Plan) -> TFJob {
    let mut job = job.clone();
    if let Some(status) = &plan.status {
        job.status = Some(status.clone());
    }
    job
}

/// The value of the `TF_CONFIG` variable of a pod's containers, and how many there are.
pub fn tf_config_values(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.env.iter().flatten())
        .filter(|e| e.name == "TF_CONFIG")
        .map(|e| e.value.as_deref().unwrap_or_default())
        .collect()
}

/// What one replica type of the raw spec must produce, derived without the planner.
struct Expected {
    /// Lower-case type, as in names, labels and `TF_CONFIG`.
    lower: String,
    count: i32,
    pod_restart_policy: &'static str,
    /// Index of the container named `tensorflow`, else 0.
    tf_container: usize,
    /// Ports of that container after defaulting.
    ports: Vec<ContainerPort>,
    /// `containerPort` of `tfjob-port`.
    port: i32,
    template_spec: PodSpec,
    template_labels: BTreeMap<String, String>,
    template_annotations: Option<BTreeMap<String, String>>,
}

fn expected_replicas(job: &TFJob) -> Vec<Expected> {
    let mut out: Vec<(ReplicaType, Expected)> = job
        .spec
        .tf_replica_specs
        .iter()
        .map(|(key, spec)| {
            let rtype = ReplicaType::parse_loose(key).expect("a known replica type");
            let template_spec = spec.template.spec.clone().unwrap_or_default();
            let tf_container = template_spec
                .containers
                .iter()
                .position(|c| c.name == "tensorflow")
                .unwrap_or(0);
            let mut ports = template_spec
                .containers
                .get(tf_container)
                .and_then(|c| c.ports.clone())
                .unwrap_or_default();
            if !ports
                .iter()
                .any(|p| p.name.as_deref() == Some("tfjob-port"))
            {
                ports.push(ContainerPort {
                    name: Some("tfjob-port".into()),
                    container_port: 2222,
                    ..ContainerPort::default()
                });
            }
            let port = ports
                .iter()
                .find(|p| p.name.as_deref() == Some("tfjob-port"))
                .map_or(2222, |p| p.container_port);
            let meta = spec.template.metadata.clone().unwrap_or_default();
            let expected = Expected {
                lower: key.to_ascii_lowercase(),
                count: spec.replicas.unwrap_or(1),
                pod_restart_policy: match spec.restart_policy.unwrap_or(RestartPolicy::Never) {
                    RestartPolicy::Always => "Always",
                    RestartPolicy::OnFailure => "OnFailure",
                    RestartPolicy::Never | RestartPolicy::ExitCode => "Never",
                },
                tf_container,
                ports,
                port,
                template_spec,
                template_labels: meta.labels.unwrap_or_default(),
                template_annotations: meta.annotations,
            };
            (rtype, expected)
        })
        .collect();
    // The planner's processing order: Chief, Master, PS, Worker, Evaluator.
    out.sort_by_key(|(t, _)| *t);
    out.into_iter().map(|(_, e)| e).collect()
}

/// Every way `plan`, the first reconcile of `job` (which must be valid and unsuspended), breaks
/// the contract of what a job produces; empty when it conforms.
pub fn fresh_plan_violations(
    job: &TFJob,
    plan: &Plan,
    cluster_domain: Option<&str>,
) -> Vec<String> {
    let mut v = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            v.push(what);
        }
    };
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let replicas = expected_replicas(job);
    let total: i64 = replicas.iter().map(|r| i64::from(r.count)).sum();
    let distributed = total != 1;
    let has_chief_or_master = replicas
        .iter()
        .any(|r| r.lower == "chief" || r.lower == "master");
    let owner = OwnerReference {
        api_version: "kubeflow.org/v1".into(),
        kind: "TFJob".into(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let object_name = |lower: &str, i: i32| format!("{name}-{lower}-{i}").replace('/', "-");
    let host = |lower: &str, i: i32, port: i32| match cluster_domain {
        Some(d) if !d.is_empty() => format!("{}.{namespace}.svc.{d}:{port}", object_name(lower, i)),
        _ => format!("{}.{namespace}.svc:{port}", object_name(lower, i)),
    };
    let cluster: BTreeMap<&str, Vec<String>> = replicas
        .iter()
        .map(|r| {
            let hosts = (0..r.count).map(|i| host(&r.lower, i, r.port)).collect();
            (r.lower.as_str(), hosts)
        })
        .collect();
    let cluster_json = serde_json::to_string(&cluster).expect("plain strings");

    check(plan.skip.is_none(), format!("skipped: {:?}", plan.skip));
    check(
        plan.delete_pods.is_empty() && plan.delete_services.is_empty() && !plan.delete_job,
        "a fresh job deletes nothing".into(),
    );
    check(
        plan.create_pods.len() as i64 == total,
        format!("{} pods for {total} replicas", plan.create_pods.len()),
    );
    check(
        plan.create_services.len() as i64 == total,
        format!(
            "{} services for {total} replicas",
            plan.create_services.len()
        ),
    );
    match &plan.status {
        None => check(false, "no status written".into()),
        Some(status) => {
            check(
                status.is_true(JobConditionType::Created),
                "condition Created=True".into(),
            );
            check(
                !status.is_finished(),
                format!("a fresh job is not finished: {:?}", status.conditions),
            );
            check(
                status
                    .conditions
                    .iter()
                    .all(|c| c.status == ConditionStatus::True),
                format!("only True conditions: {:?}", status.conditions),
            );
            check(
                status.start_time.is_some(),
                "startTime is set on the first reconcile".into(),
            );
        }
    }
    let pod_names: BTreeSet<_> = plan
        .create_pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    check(
        pod_names.len() == plan.create_pods.len(),
        "pod names are unique".into(),
    );

    for r in &replicas {
        for i in 0..r.count {
            let obj = object_name(&r.lower, i);
            let labels = BTreeMap::from([
                (OPERATOR_NAME.to_owned(), "tfjob-controller".to_owned()),
                (JOB_NAME.to_owned(), name.replace('/', "-")),
                (REPLICA_TYPE.to_owned(), r.lower.clone()),
                (REPLICA_INDEX.to_owned(), i.to_string()),
            ]);

            let pods: Vec<&Pod> = plan
                .create_pods
                .iter()
                .filter(|p| p.metadata.name.as_deref() == Some(obj.as_str()))
                .collect();
            check(
                pods.len() == 1,
                format!("one pod {obj}, found {}", pods.len()),
            );
            if let Some(pod) = pods.first() {
                let meta = &pod.metadata;
                check(
                    meta.namespace.as_deref() == Some(namespace.as_str()),
                    format!("pod {obj} namespace {:?}", meta.namespace),
                );
                let mut want_labels = r.template_labels.clone();
                want_labels.extend(labels.clone());
                let master = if has_chief_or_master {
                    r.lower == "chief" || r.lower == "master"
                } else {
                    r.lower == "worker" && i == 0
                };
                if master {
                    want_labels.insert(JOB_ROLE.to_owned(), "master".to_owned());
                }
                check(
                    meta.labels.as_ref() == Some(&want_labels),
                    format!("pod {obj} labels {:?}, want {want_labels:?}", meta.labels),
                );
                check(
                    meta.annotations == r.template_annotations,
                    format!("pod {obj} annotations {:?}", meta.annotations),
                );
                check(
                    meta.owner_references.as_deref() == Some(std::slice::from_ref(&owner)),
                    format!("pod {obj} owner references {:?}", meta.owner_references),
                );

                let configs = tf_config_values(pod);
                let mut want_spec = r.template_spec.clone();
                want_spec.restart_policy = Some(r.pod_restart_policy.to_owned());
                if let Some(c) = want_spec.containers.get_mut(r.tf_container) {
                    c.ports = Some(r.ports.clone());
                }
                if distributed {
                    let want = format!(
                        r#"{{"cluster":{cluster_json},"task":{{"type":"{}","index":{i}}},"environment":"cloud"}}"#,
                        r.lower
                    );
                    check(
                        configs == [want.as_str()],
                        format!("pod {obj} TF_CONFIG {configs:?}, want {want}"),
                    );
                    if let Some(c) = want_spec.containers.get_mut(r.tf_container) {
                        c.env.get_or_insert_with(Vec::new).push(EnvVar {
                            name: "TF_CONFIG".into(),
                            value: Some(want),
                            value_from: None,
                        });
                    }
                    if let Some(text) = configs.first() {
                        check_tf_config_json(text, &r.lower, i, &cluster, &mut check);
                    }
                } else {
                    check(
                        configs.is_empty(),
                        format!("pod {obj} of a local job has TF_CONFIG {configs:?}"),
                    );
                }
                check(
                    pod.spec.as_ref() == Some(&want_spec),
                    format!(
                        "pod {obj} spec {:?},\nwant {want_spec:?}",
                        pod.spec.as_ref()
                    ),
                );
                check(pod.status.is_none(), format!("pod {obj} has a status"));
            }

            let services: Vec<&Service> = plan
                .create_services
                .iter()
                .filter(|s| s.metadata.name.as_deref() == Some(obj.as_str()))
                .collect();
            check(
                services.len() == 1,
                format!("one service {obj}, found {}", services.len()),
            );
            if let Some(svc) = services.first() {
                let meta = &svc.metadata;
                check(
                    meta.namespace.as_deref() == Some(namespace.as_str()),
                    format!("service {obj} namespace {:?}", meta.namespace),
                );
                check(
                    meta.labels.as_ref() == Some(&labels),
                    format!("service {obj} labels {:?}", meta.labels),
                );
                check(
                    meta.owner_references.as_deref() == Some(std::slice::from_ref(&owner)),
                    format!("service {obj} owner references {:?}", meta.owner_references),
                );
                let want = ServiceSpec {
                    cluster_ip: Some("None".into()),
                    selector: Some(labels.clone()),
                    ports: Some(
                        r.ports
                            .iter()
                            .map(|p| ServicePort {
                                name: p.name.clone(),
                                port: p.container_port,
                                ..ServicePort::default()
                            })
                            .collect(),
                    ),
                    ..ServiceSpec::default()
                };
                check(
                    svc.spec.as_ref() == Some(&want),
                    format!("service {obj} spec {:?}, want {want:?}", svc.spec),
                );
            }
        }
    }
    v
}

/// Checks `TF_CONFIG` as a TensorFlow process reads it: JSON naming its own task and every
/// replica of the cluster.
fn check_tf_config_json(
    text: &str,
    lower: &str,
    index: i32,
    cluster: &BTreeMap<&str, Vec<String>>,
    check: &mut impl FnMut(bool, String),
) {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            check(false, format!("TF_CONFIG is not JSON: {e}: {text}"));
            return;
        }
    };
    check(
        value["task"]["type"] == lower && value["task"]["index"] == index,
        format!("TF_CONFIG task {} is not {lower} {index}", value["task"]),
    );
    check(
        value["environment"] == "cloud",
        format!("TF_CONFIG environment {}", value["environment"]),
    );
    let listed: BTreeMap<String, Vec<String>> =
        serde_json::from_value(value["cluster"].clone()).unwrap_or_default();
    let want: BTreeMap<String, Vec<String>> = cluster
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    check(
        listed == want,
        format!("TF_CONFIG cluster {listed:?}, want {want:?}"),
    );
}
