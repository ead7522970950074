//! `TF_CONFIG`: the cluster description every distributed TensorFlow process reads.
//!
//! The value is byte-identical to what training-operator 1.9 produced with Go's `encoding/json`:
//! compact, `cluster` keys sorted, fields in the order `cluster`, `task`, `environment`; or, for
//! dynamic workers, 1.9's sparse form with its quirks kept, because scripts written for it parse
//! exactly that: the cluster under `sparseCluster` (not `cluster`), a worker seeing all PS
//! addresses and itself, a PS seeing itself, every other type (Chief, Master, Evaluator) seeing
//! an empty cluster, and `"ps":null` for a worker of a job without PS (Go's nil slice).

use std::collections::BTreeMap;

use serde::Serialize;
use tfjob_api::ReplicaType;
use tfjob_api::labels::{DEFAULT_PORT, DEFAULT_PORT_NAME};
use tfjob_api::validation::{ValidJob, default_container_index};

use crate::names::object_name;

#[derive(Serialize)]
struct Task<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    index: i32,
}

#[derive(Serialize)]
struct DenseConfig<'a> {
    cluster: BTreeMap<&'a str, Vec<String>>,
    task: Task<'a>,
    environment: &'a str,
}

#[derive(Serialize)]
struct SparseCluster {
    worker: BTreeMap<String, String>,
    /// `None` is written as `null`, as Go wrote a nil slice.
    ps: Option<Vec<String>>,
}

#[derive(Serialize)]
struct SparseConfig<'a> {
    #[serde(rename = "sparseCluster")]
    cluster: SparseCluster,
    task: Task<'a>,
}

/// The `TF_CONFIG` value for replica `rtype` index `index`; `cluster_domain` adds
/// `.svc.<domain>` host names.
pub fn tf_config(
    job: &ValidJob,
    rtype: ReplicaType,
    index: i32,
    cluster_domain: Option<&str>,
) -> String {
    let task = Task {
        type_: rtype.lower(),
        index,
    };
    let json = if job.enable_dynamic_worker {
        let worker = match rtype {
            ReplicaType::Worker => BTreeMap::from([(
                index.to_string(),
                address(job, rtype, index, cluster_domain),
            )]),
            _ => BTreeMap::new(),
        };
        let ps = match rtype {
            ReplicaType::PS => Some(vec![address(job, rtype, index, cluster_domain)]),
            // A job without PS has no `ps` entry in 1.9's cluster map: a nil slice.
            ReplicaType::Worker => job
                .replicas
                .contains_key(&ReplicaType::PS)
                .then(|| addresses(job, ReplicaType::PS, cluster_domain)),
            _ => Some(Vec::new()),
        };
        serde_json::to_string(&SparseConfig {
            cluster: SparseCluster { worker, ps },
            task,
        })
    } else {
        let cluster = job
            .replicas
            .keys()
            .map(|t| (t.lower(), addresses(job, *t, cluster_domain)))
            .collect();
        serde_json::to_string(&DenseConfig {
            cluster,
            task,
            environment: "cloud",
        })
    };
    json.expect("TF_CONFIG is plain strings and numbers")
}

fn addresses(job: &ValidJob, rtype: ReplicaType, cluster_domain: Option<&str>) -> Vec<String> {
    let count = job.replicas.get(&rtype).map_or(0, |r| r.replicas);
    (0..count)
        .map(|i| address(job, rtype, i, cluster_domain))
        .collect()
}

fn address(job: &ValidJob, rtype: ReplicaType, index: i32, cluster_domain: Option<&str>) -> String {
    let host = object_name(&job.name, rtype, index);
    let port = port_of(job, rtype);
    match cluster_domain.filter(|d| !d.is_empty()) {
        Some(domain) => format!("{host}.{}.svc.{domain}:{port}", job.namespace),
        None => format!("{host}.{}.svc:{port}", job.namespace),
    }
}

/// The `containerPort` of the `tfjob-port` of the type's default container, else 2222.
pub fn port_of(job: &ValidJob, rtype: ReplicaType) -> i32 {
    job.replicas
        .get(&rtype)
        .and_then(|r| {
            let spec = r.template.spec.as_ref()?;
            let container = spec.containers.get(default_container_index(&r.template))?;
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
                .map(|p| p.container_port)
        })
        .unwrap_or(DEFAULT_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_api::parse::parse_tfjob_yaml;
    use tfjob_api::validation::validate;

    fn job(yaml: &str) -> ValidJob {
        validate(&parse_tfjob_yaml(yaml).unwrap()).unwrap()
    }

    const DIST: &str = r#"
metadata: {name: dist, namespace: kubeflow}
spec:
  tfReplicaSpecs:
    PS:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: t, ports: [{name: tfjob-port, containerPort: 3000}]}]}}
    Evaluator:
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
"#;

    #[test]
    fn dense_form_is_byte_identical() {
        let j = job(DIST);
        assert_eq!(
            tf_config(&j, ReplicaType::Worker, 1, None),
            r#"{"cluster":{"evaluator":["dist-evaluator-0.kubeflow.svc:2222"],"ps":["dist-ps-0.kubeflow.svc:2222","dist-ps-1.kubeflow.svc:2222"],"worker":["dist-worker-0.kubeflow.svc:3000","dist-worker-1.kubeflow.svc:3000"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
        );
    }

    #[test]
    fn cluster_domain_extends_host_names() {
        let j = job(DIST);
        let c = tf_config(&j, ReplicaType::PS, 0, Some("cluster.local"));
        assert!(
            c.contains(r#""ps":["dist-ps-0.kubeflow.svc.cluster.local:2222","#),
            "{c}"
        );
        assert!(c.ends_with(r#""task":{"type":"ps","index":0},"environment":"cloud"}"#));
    }

    /// The expected strings are what 1.9's `genTFConfigJSONStr` marshals for these jobs
    /// (`SparseTFConfig` with `convertClusterSpecToSparseClusterSpec`), worked out by hand.
    #[test]
    fn sparse_form_for_dynamic_workers_is_byte_identical() {
        let mut j = job(DIST);
        j.enable_dynamic_worker = true;
        assert_eq!(
            tf_config(&j, ReplicaType::PS, 1, None),
            r#"{"sparseCluster":{"worker":{},"ps":["dist-ps-1.kubeflow.svc:2222"]},"task":{"type":"ps","index":1}}"#
        );
        assert_eq!(
            tf_config(&j, ReplicaType::Worker, 1, None),
            r#"{"sparseCluster":{"worker":{"1":"dist-worker-1.kubeflow.svc:3000"},"ps":["dist-ps-0.kubeflow.svc:2222","dist-ps-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1}}"#
        );
        // Evaluator (and Chief, Master): an empty sparse cluster, PS not included.
        assert_eq!(
            tf_config(&j, ReplicaType::Evaluator, 0, None),
            r#"{"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}}"#
        );
    }

    #[test]
    fn sparse_form_of_chief_master_and_psless_workers() {
        let chief = r#"
metadata: {name: dyn, namespace: ml}
spec:
  enableDynamicWorker: true
  tfReplicaSpecs:
    Chief: {template: {spec: {containers: [{name: tensorflow, image: t}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: tensorflow, image: t}]}}}
"#;
        let j = job(chief);
        assert_eq!(
            tf_config(&j, ReplicaType::Chief, 0, Some("cluster.local")),
            r#"{"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}}"#
        );
        // No PS in the job: Go's nil slice.
        assert_eq!(
            tf_config(&j, ReplicaType::Worker, 2, Some("cluster.local")),
            r#"{"sparseCluster":{"worker":{"2":"dyn-worker-2.ml.svc.cluster.local:2222"},"ps":null},"task":{"type":"worker","index":2}}"#
        );
        let master = job(&chief.replace("Chief:", "Master:"));
        assert_eq!(
            tf_config(&master, ReplicaType::Master, 0, None),
            r#"{"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"master","index":0}}"#
        );
    }
}
