//! A CEL policy live, through kubectl only, on both clusters (`up` and the real control plane
//! with `deploy/` installed): the example of `deploy/examples/cel` applied as a ConfigMap places
//! the next GPU pods on GPU nodes with the taint tolerated; edited, the edit serves the next
//! pods; a broken edit is `Rejected` naming the expression with a caret under the position, and
//! the version before it keeps serving.

use crate::common;

use std::time::Duration;

use common::real::{installed_with, operator};
use common::up::Up;
use common::{Kubectl, repo};
use tfjob_control_plane::{NodeSpec, Options};

/// How long a state may take to show (a liveness bound).
const STATE_WITHIN: Duration = Duration::from_secs(120);

/// A TFJob of one worker asking for a GPU, in `default`.
fn one_gpu_worker(name: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 1\n      restartPolicy: Never\n      \
         template:\n        spec:\n          containers:\n          - name: tensorflow\n            \
         image: kubeflow/tf-dist-mnist-test:latest\n            resources:\n              limits:\n                \
         nvidia.com/gpu: 1\n"
    )
}

/// `jsonpath` of the worker pod of job `name`, once the pod exists.
fn worker_pod(up: &impl Kubectl, name: &str, jsonpath: &str) -> String {
    let pod = format!("pod/{name}-worker-0");
    up.kubectl_until(STATE_WITHIN, &["get", &pod, "-o", "name"], |out| {
        out.trim() == pod
    });
    up.kubectl(&["get", &pod, "-o", &format!("jsonpath={jsonpath}")])
}

/// The state recorded on the CEL ConfigMap, once it is about the version `kubectl apply` made.
fn cel_status(up: &impl Kubectl, resource_version: &str) -> serde_json::Value {
    let status = up.kubectl_until(
        STATE_WITHIN,
        &[
            "-n",
            "tfjob-system",
            "get",
            "configmap",
            "tfjob-policy-gpu-placement",
            "-o",
            "jsonpath={.metadata.annotations.policy\\.tfjob\\.dev/status}",
        ],
        |text| {
            serde_json::from_str::<serde_json::Value>(text)
                .is_ok_and(|s| s["resourceVersion"] == resource_version)
        },
    );
    serde_json::from_str(&status).unwrap()
}

/// Applies `configmap` with kubectl; returns the version it made (the operator's status
/// annotation makes the next one).
fn apply_configmap(up: &impl Kubectl, configmap: &str) -> String {
    up.kubectl_with(
        &[
            "apply",
            "-f",
            "-",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
        Some(configmap),
    )
}

/// The CEL example of `deploy/examples/cel`, through kubectl only: applied, it places the next
/// GPU pods on GPU nodes with the taint tolerated; edited, the edit serves the next pods; a
/// broken edit is `Rejected` naming the expression with a caret under the position, and the
/// version before it keeps serving.
#[test]
fn a_cel_policy_applied_edited_and_broken_with_kubectl_on_up() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start_as_users_do(&["--nodes", "1", "--gpus-per-node", "2"], dir.path());
    a_cel_policy_applied_edited_and_broken_with_kubectl(&up);
}

/// The same on the real control plane, the operator as `deploy/`'s ServiceAccount.
#[test]
fn a_cel_policy_applied_edited_and_broken_with_kubectl_on_real_control_plane() {
    let plane = installed_with(Options {
        nodes: vec![NodeSpec {
            gpus: 2,
            ..NodeSpec::default()
        }],
        ..Options::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let (_operator, _) = operator(&plane, dir.path(), &[]);
    a_cel_policy_applied_edited_and_broken_with_kubectl(&plane);
}

fn a_cel_policy_applied_edited_and_broken_with_kubectl(up: &impl Kubectl) {
    let example =
        std::fs::read_to_string(repo("deploy/examples/cel/policies/gpu-placement.yaml")).unwrap();

    let started = std::time::Instant::now();
    let version = apply_configmap(up, &example);
    let status = cel_status(up, &version);
    println!(
        "the CEL policy was Active {:?} after kubectl apply",
        started.elapsed()
    );
    assert_eq!(status["state"], "Active", "{status}");
    up.kubectl_with(&["apply", "-f", "-"], Some(&one_gpu_worker("first")));
    let placement = worker_pod(up, "first", "{.spec.nodeSelector}{.spec.tolerations}");
    assert!(
        placement.contains(r#""nvidia.com/gpu.present":"true""#),
        "{placement}"
    );
    assert!(
        placement.contains(r#""key":"nvidia.com/gpu""#),
        "{placement}"
    );

    // An edit: one more mutation, appended to the configuration (the ConfigMap's last key),
    // labels the pods too.
    assert!(example.trim_end().ends_with("'true'}}]"), "{example}");
    let mutation = |expression: &str| {
        format!(
            "{}\n    - patchType: ApplyConfiguration\n      applyConfiguration:\n        expression: >-\n          {expression}\n",
            example.trim_end()
        )
    };
    let label_expression = "Object{metadata: Object.metadata{labels: {'placement': 'cel-v2'}}}";
    let started = std::time::Instant::now();
    let version = apply_configmap(up, &mutation(label_expression));
    let status = cel_status(up, &version);
    println!(
        "the edit was Active {:?} after kubectl apply",
        started.elapsed()
    );
    assert_eq!(status["state"], "Active", "{status}");
    up.kubectl_with(&["apply", "-f", "-"], Some(&one_gpu_worker("second")));
    let label = worker_pod(up, "second", "{.metadata.labels.placement}");
    assert_eq!(label, "cel-v2");

    // A broken edit: the brace that closes the configuration is missing.
    let broken = label_expression.trim_end_matches('}').to_owned() + "}}";
    let version = apply_configmap(up, &mutation(&broken));
    let status = cel_status(up, &version);
    assert_eq!(status["state"], "Rejected", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(error.starts_with("data key policy.cel.yaml: "), "{error}");
    assert!(
        error.contains("mutations[2].applyConfiguration.expression"),
        "{error}"
    );
    assert!(error.contains('^'), "{error}");
    let events = up.kubectl(&[
        "-n",
        "tfjob-system",
        "get",
        "events",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("PolicyRejected"), "{events}");
    up.kubectl_with(&["apply", "-f", "-"], Some(&one_gpu_worker("third")));
    let label = worker_pod(up, "third", "{.metadata.labels.placement}");
    assert_eq!(label, "cel-v2", "the version before the broken edit serves");
}
