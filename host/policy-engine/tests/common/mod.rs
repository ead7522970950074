//! Fixtures shared by the policy engine's integration tests.

use serde_json::{Value, json};

/// A pod as the operator builds it: its labels, owner and `TF_CONFIG`.
pub fn operator_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "mnist-worker-0", "namespace": "ml",
            "labels": {
                "training.kubeflow.org/job-name": "mnist",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": "0",
                "training.kubeflow.org/operator-name": "tfjob-controller"
            },
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "uid", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "tensorflow", "image": "tf:2",
                "env": [{"name": "TF_CONFIG", "value": "{}"}],
                "ports": [{"name": "tfjob-port", "containerPort": 2222}]
            }]
        }
    })
}
