//! Building the pods and headless services a TFJob owns, exactly as training-operator 1.9 did:
//! names, labels, owner references, restart policies, ports and `TF_CONFIG`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use tfjob_api::labels::{
    JOB_NAME, JOB_ROLE, JOB_ROLE_MASTER, OPERATOR_NAME, OPERATOR_NAME_VALUE, REPLICA_INDEX,
    REPLICA_TYPE,
};
use tfjob_api::validation::{ValidJob, default_container_index};
use tfjob_api::{ReplicaType, RestartPolicy};

use crate::tf_config::tf_config;

pub use crate::names::object_name;

/// Labels that select every object of one job.
pub fn job_labels(job_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (OPERATOR_NAME.to_owned(), OPERATOR_NAME_VALUE.to_owned()),
        (JOB_NAME.to_owned(), job_name.replace('/', "-")),
    ])
}

/// Labels that select one replica type's objects.
pub fn replica_type_labels(job_name: &str, rtype: ReplicaType) -> BTreeMap<String, String> {
    let mut labels = job_labels(job_name);
    labels.insert(REPLICA_TYPE.to_owned(), rtype.lower().to_owned());
    labels
}

/// The four labels of one replica index; also the service selector.
pub fn replica_labels(job_name: &str, rtype: ReplicaType, index: i32) -> BTreeMap<String, String> {
    let mut labels = replica_type_labels(job_name, rtype);
    labels.insert(REPLICA_INDEX.to_owned(), index.to_string());
    labels
}

/// `status.replicaStatuses[T].labelSelector` and its string form.
pub fn replica_selector(job_name: &str, rtype: ReplicaType) -> (LabelSelector, String) {
    let labels = replica_type_labels(job_name, rtype);
    let text = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    (
        LabelSelector {
            match_labels: Some(labels),
            ..LabelSelector::default()
        },
        text,
    )
}

/// The controller owner reference every object of the job carries.
pub fn owner_reference(job: &ValidJob) -> OwnerReference {
    OwnerReference {
        api_version: "kubeflow.org/v1".into(),
        kind: "TFJob".into(),
        name: job.name.clone(),
        uid: job.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether this replica's pod carries `job-role: master`: the Chief/Master, or worker 0 when the
/// job has neither.
fn is_master_role(job: &ValidJob, rtype: ReplicaType, index: i32) -> bool {
    if job.has_chief_or_master() {
        rtype.is_chief_or_master()
    } else {
        rtype == ReplicaType::Worker && index == 0
    }
}

/// The pod restart policy for a replica restart policy (`ExitCode` pods never restart in place:
/// the operator decides).
pub fn pod_restart_policy(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        RestartPolicy::Never | RestartPolicy::ExitCode => "Never",
    }
}

/// The base pod of replica `rtype` index `index`, before policies.
pub fn build_pod(
    job: &ValidJob,
    rtype: ReplicaType,
    index: i32,
    cluster_domain: Option<&str>,
) -> Pod {
    let replica = &job.replicas[&rtype];
    let template = &replica.template;
    let name = object_name(&job.name, rtype, index);

    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.extend(replica_labels(&job.name, rtype, index));
    if is_master_role(job, rtype, index) {
        labels.insert(JOB_ROLE.to_owned(), JOB_ROLE_MASTER.to_owned());
    }
    let annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone());

    let mut spec = template.spec.clone().unwrap_or_default();
    spec.restart_policy = Some(pod_restart_policy(replica.restart_policy).to_owned());
    if job.is_distributed() {
        let value = tf_config(job, rtype, index, cluster_domain);
        let at = default_container_index(template);
        if let Some(container) = spec.containers.get_mut(at) {
            container.env.get_or_insert_with(Vec::new).push(EnvVar {
                name: "TF_CONFIG".into(),
                value: Some(value),
                value_from: None,
            });
        }
    }

    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(job.namespace.clone()),
            labels: Some(labels),
            annotations,
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The headless service of replica `rtype` index `index`.
pub fn build_service(job: &ValidJob, rtype: ReplicaType, index: i32) -> Service {
    let replica = &job.replicas[&rtype];
    let labels = replica_labels(&job.name, rtype, index);
    let ports = replica
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.get(default_container_index(&replica.template)))
        .and_then(|c| c.ports.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|p| ServicePort {
            name: p.name,
            port: p.container_port,
            ..ServicePort::default()
        })
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(object_name(&job.name, rtype, index)),
            namespace: Some(job.namespace.clone()),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The replica type and index an object's labels name, if it is one of ours.
pub fn replica_of(meta: &ObjectMeta) -> Option<(ReplicaType, i32)> {
    let labels = meta.labels.as_ref()?;
    let rtype = ReplicaType::from_label(labels.get(REPLICA_TYPE)?)?;
    let index = labels.get(REPLICA_INDEX)?.parse().ok()?;
    Some((rtype, index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_api::parse::parse_tfjob_yaml;
    use tfjob_api::validation::validate;

    fn job(yaml: &str) -> ValidJob {
        let mut j = parse_tfjob_yaml(yaml).unwrap();
        j.metadata.uid = Some("uid-1".into());
        validate(&j).unwrap()
    }

    const JOB: &str = r#"
metadata: {name: mnist, namespace: ml}
spec:
  tfReplicaSpecs:
    Chief:
      restartPolicy: ExitCode
      template:
        metadata: {labels: {team: a, training.kubeflow.org/job-name: spoofed}, annotations: {note: x}}
        spec:
          restartPolicy: Always
          containers: [{name: tensorflow, image: t, ports: [{name: metrics, containerPort: 9090}]}]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
"#;

    #[test]
    fn pod_metadata_labels_annotations_and_owner() {
        let j = job(JOB);
        let pod = build_pod(&j, ReplicaType::Chief, 0, None);
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("mnist-chief-0"));
        assert_eq!(meta.namespace.as_deref(), Some("ml"));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(
            labels[JOB_NAME], "mnist",
            "operator labels win over the template's"
        );
        assert_eq!(labels[OPERATOR_NAME], "tfjob-controller");
        assert_eq!(labels[REPLICA_TYPE], "chief");
        assert_eq!(labels[REPLICA_INDEX], "0");
        assert_eq!(labels[JOB_ROLE], "master");
        assert_eq!(meta.annotations.as_ref().unwrap()["note"], "x");
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("TFJob", "mnist", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        // With a chief, worker 0 is not the master.
        let worker = build_pod(&j, ReplicaType::Worker, 0, None);
        assert!(!worker.metadata.labels.unwrap().contains_key(JOB_ROLE));
    }

    #[test]
    fn worker_zero_is_master_without_chief() {
        let j = job(
            "metadata: {name: w}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n      template: {spec: {containers: [{name: tensorflow, image: t}]}}\n",
        );
        let w0 = build_pod(&j, ReplicaType::Worker, 0, None);
        let w1 = build_pod(&j, ReplicaType::Worker, 1, None);
        assert_eq!(w0.metadata.labels.unwrap()[JOB_ROLE], "master");
        assert!(!w1.metadata.labels.unwrap().contains_key(JOB_ROLE));
    }

    #[test]
    fn restart_policies_map_to_pod_restart_policies() {
        let j = job(JOB);
        let chief = build_pod(&j, ReplicaType::Chief, 0, None);
        assert_eq!(chief.spec.unwrap().restart_policy.as_deref(), Some("Never"));
        let worker = build_pod(&j, ReplicaType::Worker, 1, None);
        assert_eq!(
            worker.spec.unwrap().restart_policy.as_deref(),
            Some("OnFailure")
        );
        assert_eq!(pod_restart_policy(RestartPolicy::Always), "Always");
        assert_eq!(pod_restart_policy(RestartPolicy::Never), "Never");
    }

    #[test]
    fn tf_config_is_appended_to_the_tensorflow_container_when_distributed() {
        let j = job(JOB);
        let pod = build_pod(&j, ReplicaType::Worker, 1, None);
        let env = pod.spec.unwrap().containers[0].env.clone().unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].name, "TF_CONFIG");
        assert!(
            env[0]
                .value
                .as_ref()
                .unwrap()
                .contains(r#""task":{"type":"worker","index":1}"#)
        );
        // A single-replica job is local: no TF_CONFIG.
        let local = job(
            "metadata: {name: l}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      template: {spec: {containers: [{name: tensorflow, image: t}]}}\n",
        );
        let pod = build_pod(&local, ReplicaType::Worker, 0, None);
        assert!(pod.spec.unwrap().containers[0].env.is_none());
    }

    #[test]
    fn service_is_headless_with_the_tensorflow_ports() {
        let j = job(JOB);
        let svc = build_service(&j, ReplicaType::Chief, 0);
        assert_eq!(svc.metadata.name.as_deref(), Some("mnist-chief-0"));
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        let selector = spec.selector.unwrap();
        assert_eq!(selector.len(), 4);
        assert!(!selector.contains_key(JOB_ROLE));
        let ports: Vec<_> = spec
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap(), p.port))
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
    fn names_replace_slashes() {
        assert_eq!(object_name("a/b", ReplicaType::PS, 3), "a-b-ps-3");
    }

    #[test]
    fn replica_selector_string_is_sorted() {
        let (_, text) = replica_selector("j", ReplicaType::Worker);
        assert_eq!(
            text,
            "training.kubeflow.org/job-name=j,training.kubeflow.org/operator-name=tfjob-controller,training.kubeflow.org/replica-type=worker"
        );
    }
}
