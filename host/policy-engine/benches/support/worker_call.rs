//! The inputs of a decoration the benches share: a worker of a four-worker job, and its pod as
//! the operator builds it (1.4 KB, asking for a GPU).

use tfjob_policy_engine::bindings::JobContext;

/// The context of the pod's worker: index 0 of four, first attempt.
pub fn context() -> JobContext {
    JobContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "5f0c1a2e-0000-4000-8000-000000000001".into(),
        job_labels: vec![("team".into(), "vision".into())],
        job_annotations: vec![],
        replica_type: "Worker".into(),
        replica_index: 0,
        replica_count: 4,
        attempt: 0,
    }
}

/// A worker pod as the operator builds it.
pub const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"mnist-worker-0","namespace":"ml","labels":{"training.kubeflow.org/job-name":"mnist","training.kubeflow.org/replica-type":"worker","training.kubeflow.org/replica-index":"0","training.kubeflow.org/operator-name":"tfjob-controller"},"annotations":{"sidecar.istio.io/inject":"false"},"ownerReferences":[{"apiVersion":"kubeflow.org/v1","kind":"TFJob","name":"mnist","uid":"5f0c1a2e-0000-4000-8000-000000000001","controller":true,"blockOwnerDeletion":true}]},"spec":{"restartPolicy":"Never","containers":[{"name":"tensorflow","image":"tensorflow/tensorflow:2.15.0","command":["python","/opt/mnist.py","--epochs","10"],"env":[{"name":"TF_CONFIG","value":"{\"cluster\":{\"worker\":[\"mnist-worker-0.ml.svc:2222\",\"mnist-worker-1.ml.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":0}}"}],"ports":[{"name":"tfjob-port","containerPort":2222}],"resources":{"limits":{"cpu":"4","memory":"16Gi","nvidia.com/gpu":"1"},"requests":{"cpu":"2","memory":"8Gi"}},"volumeMounts":[{"name":"data","mountPath":"/data"}]}],"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"mnist-data"}}]}}"#;
