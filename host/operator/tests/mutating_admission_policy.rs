//! The CEL examples against the real thing: each example of `deploy/examples/cel` that a
//! MutatingAdmissionPolicy can express (no `job`, `resource.*` or verdicts: `gpu-placement` and
//! `namespace-labels`) is installed on the real kube-apiserver (v1.37, where the API is GA) as
//! one, bound to one namespace, and as the operator's CEL policy, selecting the jobs of another
//! namespace labelled alike. The same GPU job in each: the operator's pod, decorated by its
//! policy, and the pod the real server's admission mutated carry the same labels, tolerations
//! and node selector (same document, same mutation).

use crate::common;

use serde_json::{Value, json};
use tfjob_control_plane::{ControlPlane, NodeSpec, Options};

use common::real::{WAIT, installed_with, kubectl, kubectl_with, operator};
use common::{eventually_within, repo};

/// The namespace whose jobs the operator's CEL policies select.
const BY_OPERATOR: &str = "cel-operator";
/// The namespace the MutatingAdmissionPolicies are bound to.
const BY_SERVER: &str = "cel-admission";
/// The examples a MutatingAdmissionPolicy can express.
const EXAMPLES: [&str; 2] = ["gpu-placement", "namespace-labels"];

/// The CEL document of example `name` (its ConfigMap's `policy.cel.yaml`), and the ConfigMap.
fn example(name: &str) -> (Value, Value) {
    let path = repo(&format!("deploy/examples/cel/policies/{name}.yaml"));
    let configmap: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cel: Value =
        serde_yaml_ng::from_str(configmap["data"]["policy.cel.yaml"].as_str().unwrap()).unwrap();
    (cel, configmap)
}

/// The example as the operator's policy, selecting the jobs of [`BY_OPERATOR`] alone.
fn operator_policy(name: &str, order: usize) -> String {
    let (_, mut configmap) = example(name);
    configmap["data"]["policy.yaml"] = json!(format!(
        "order: {}\nselector: {{namespaces: [{BY_OPERATOR}]}}\n",
        10 + order
    ));
    configmap.to_string()
}

/// The example as a MutatingAdmissionPolicy on pod creation, and its binding to [`BY_SERVER`].
fn admission_policy(name: &str) -> String {
    let (cel, _) = example(name);
    let mut spec = json!({
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
        }]},
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
    });
    for key in ["matchConditions", "variables", "mutations"] {
        if let Some(value) = cel.get(key) {
            spec[key] = value.clone();
        }
    }
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec,
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": BY_SERVER}}}},
    });
    format!("{policy}\n---\n{binding}")
}

fn gpu_job(namespace: &str) -> String {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": "tensorflow",
                "image": "kubeflow/tf-dist-mnist-test:latest",
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}},
    })
    .to_string()
}

/// What the policies decide of the worker pod of namespace `namespace`'s job.
fn decided(plane: &ControlPlane, namespace: &str) -> Value {
    let events = || {
        plane
            .kubectl_run(&[
                "get",
                "events",
                "-n",
                namespace,
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .unwrap_or_default()
    };
    let pod = eventually_within(WAIT, &format!("the worker pod in {namespace}"), || {
        let pod = plane
            .kubectl_run(&["get", "pod", "gpu-worker-0", "-n", namespace, "-o", "json"])
            .ok();
        if pod.is_none() && events().contains("Error creating") {
            panic!("the pod could not be created in {namespace}: {}", events());
        }
        pod
    });
    let pod: Value = serde_json::from_str(&pod).unwrap();
    json!({
        "labels": pod["metadata"]["labels"],
        "tolerations": pod["spec"]["tolerations"],
        "nodeSelector": pod["spec"]["nodeSelector"],
    })
}

#[test]
fn the_cel_examples_mutate_pods_as_the_real_servers_mutating_admission_policies_do() {
    let plane = installed_with(Options {
        nodes: vec![NodeSpec {
            gpus: 2,
            ..NodeSpec::default()
        }],
        ..Options::default()
    });
    for namespace in [BY_OPERATOR, BY_SERVER] {
        kubectl(&plane, &["create", "namespace", namespace]);
        kubectl(
            &plane,
            &[
                "label",
                "namespace",
                namespace,
                "team=vision",
                "cost-center=cc-42",
            ],
        );
    }
    for name in EXAMPLES {
        let (ok, err) = kubectl_with(
            &plane,
            &["apply", "--server-side", "-f", "-"],
            &admission_policy(name),
        );
        assert!(
            ok,
            "the real server refused {name} as a MutatingAdmissionPolicy: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (_operator, _) = operator(&plane, dir.path(), &[]);
    for (order, name) in EXAMPLES.iter().enumerate() {
        let (ok, err) = kubectl_with(
            &plane,
            &["apply", "--server-side", "-f", "-"],
            &operator_policy(name, order),
        );
        assert!(ok, "{err}");
        eventually_within(WAIT, &format!("{name} active in the operator"), || {
            plane
                .kubectl_run(&[
                    "get",
                    "configmap",
                    &format!("tfjob-policy-{name}"),
                    "-n",
                    "tfjob-system",
                    "-o",
                    "jsonpath={.metadata.annotations.policy\\.tfjob\\.dev/status}",
                ])
                .ok()
                .filter(|status| status.contains(r#""state":"Active""#))
        });
    }
    // Admission policies take effect within a second of being created; pods come later still.
    for namespace in [BY_OPERATOR, BY_SERVER] {
        let (ok, err) = kubectl_with(&plane, &["apply", "-f", "-"], &gpu_job(namespace));
        assert!(ok, "{err}");
    }
    let by_operator = decided(&plane, BY_OPERATOR);
    let by_server = decided(&plane, BY_SERVER);
    // Each side did decorate: without the policies neither would carry these.
    assert_eq!(by_server["labels"]["team"], "vision", "{by_server}");
    assert_eq!(
        by_server["nodeSelector"]["nvidia.com/gpu.present"], "true",
        "{by_server}"
    );
    pretty_assertions::assert_eq!(
        by_operator,
        by_server,
        "left: the operator's CEL policies, right: the real server's MutatingAdmissionPolicies"
    );
}
