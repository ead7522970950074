//! The real operator (kube-runtime controller, planner, native policies) against the embedded
//! API server over HTTPS, through the kubeconfig `up` writes: the CRD applied through the API, a TFJob created with kube-rs, pods and
//! services created by the operator, pod phases driven by the test as a kubelet would, the
//! job's conditions following, a restart under `ExitCode`, and garbage collection on delete;
//! and a job whose pods the simulated kubelet runs through a scripted retry.
//! Every wait polls with a generous timeout; nothing asserts on timing.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tfjob_api::{JobConditionType, TFJob};
use tfjob_cluster::Store;
use tfjob_planner::native::NativePolicies;
use tokio::sync::oneshot;

struct Env {
    client: Client,
    store: Arc<Store>,
    stop: Option<oneshot::Sender<()>>,
    operator: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Env {
    let store = Store::new();
    let client = common::serve(Arc::clone(&store), Default::default())
        .await
        .client()
        .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &tfjob_api::crd::tfjob_crd())
        .await
        .unwrap();
    let established = crds.get("tfjobs.kubeflow.org").await.unwrap();
    assert!(
        established
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Established"),
        "the CRD is established when applied"
    );
    let (tx, rx) = oneshot::channel::<()>();
    let config = tfjob_controller::Config {
        namespace: None,
        threads: 2,
        per_namespace: None,
        metrics_addr: None,
        probe_addr: None,
        stall_after: tfjob_controller::STALL_AFTER,
        settings: Default::default(),
        policies: Arc::new(NativePolicies::default()),
        instance: None,
        metrics: Default::default(),
        leadership: tfjob_controller::Leadership::always(),
    };
    let operator = tokio::spawn(tfjob_controller::run(client.clone(), config, async {
        let _ = rx.await;
    }));
    Env {
        client,
        store,
        stop: Some(tx),
        operator,
    }
}

impl Env {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), self.operator)
            .await
            .expect("the operator shuts down")
            .unwrap()
            .unwrap();
    }
}

/// Polls `check` until it returns `Some`, or fails after a generous timeout.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn job(name: &str, policy: &str) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
    }))
    .unwrap()
}

async fn set_phase(pods: &Api<Pod>, name: &str, phase: &str, exit_code: Option<i32>) {
    let mut status = json!({"phase": phase});
    if let Some(code) = exit_code {
        status["containerStatuses"] = json!([{"name": "tensorflow", "ready": false, "restartCount": 0,
            "image": "tf:2", "imageID": "", "state": {"terminated": {"exitCode": code, "reason": "Error"}}}]);
    }
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
}

fn has(job: &TFJob, t: JobConditionType) -> bool {
    job.status.as_ref().is_some_and(|s| s.is_true(t))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_to_success_and_its_objects_are_collected() {
    let env = start().await;
    let jobs: Api<TFJob> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let services: Api<Service> = Api::namespaced(env.client.clone(), "default");
    jobs.create(&PostParams::default(), &job("mnist", "Never"))
        .await
        .unwrap();

    let names = eventually("two pods and two services", || async {
        let p = pods.list(&ListParams::default()).await.ok()?;
        let s = services.list(&ListParams::default()).await.ok()?;
        (p.items.len() == 2 && s.items.len() == 2).then(|| {
            let mut n: Vec<String> = p
                .items
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect();
            n.sort();
            n
        })
    })
    .await;
    assert_eq!(names, vec!["mnist-worker-0", "mnist-worker-1"]);
    let created = jobs.get("mnist").await.unwrap();
    assert!(has(&created, JobConditionType::Created));

    for n in &names {
        set_phase(&pods, n, "Running", None).await;
    }
    eventually("Running", || async {
        has(&jobs.get("mnist").await.ok()?, JobConditionType::Running).then_some(())
    })
    .await;

    set_phase(&pods, "mnist-worker-0", "Succeeded", Some(0)).await;
    let done = eventually("Succeeded", || async {
        let j = jobs.get("mnist").await.ok()?;
        has(&j, JobConditionType::Succeeded).then_some(j)
    })
    .await;
    let status = done.status.unwrap();
    assert!(status.completion_time.is_some());
    assert!(!status.is_true(JobConditionType::Failed));

    jobs.delete("mnist", &DeleteParams::background())
        .await
        .unwrap();
    eventually("pods and services garbage collected", || async {
        let p = pods.list(&ListParams::default()).await.ok()?;
        let s = services.list(&ListParams::default()).await.ok()?;
        (p.items.is_empty() && s.items.is_empty()).then_some(())
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_exit_code_recreates_the_pod_once() {
    let env = start().await;
    let jobs: Api<TFJob> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    jobs.create(&PostParams::default(), &job("retry", "ExitCode"))
        .await
        .unwrap();
    let first_uid = eventually("worker 1", || async {
        pods.get("retry-worker-1").await.ok()?.metadata.uid
    })
    .await;
    set_phase(&pods, "retry-worker-1", "Failed", Some(137)).await;
    let second_uid = eventually("a new incarnation of worker 1", || async {
        let uid = pods.get("retry-worker-1").await.ok()?.metadata.uid?;
        (uid != first_uid).then_some(uid)
    })
    .await;
    assert_ne!(first_uid, second_uid);
    let status = eventually("the restart recorded", || async {
        let s = jobs.get("retry").await.ok()?.status?;
        (s.restart_count == Some(1)).then_some(s)
    })
    .await;
    assert_eq!(status.pod_restarts["retry-worker-1"].count, 1);
    assert_eq!(
        status.pod_restarts["retry-worker-1"].last_deleted_uid,
        first_uid
    );
    // Exit code 1 is permanent: the job fails and names the pod.
    set_phase(&pods, "retry-worker-0", "Failed", Some(1)).await;
    let failed = eventually("Failed", || async {
        let j = jobs.get("retry").await.ok()?;
        has(&j, JobConditionType::Failed).then_some(j)
    })
    .await;
    let message = failed
        .status
        .unwrap()
        .conditions
        .last()
        .unwrap()
        .message
        .clone();
    assert!(
        message.starts_with("job \"retry\" is failing because \"Worker\" replica(s) failed."),
        "{message}"
    );
    assert!(message.contains("retry-worker-0"), "{message}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_kubelet_runs_a_job_through_a_scripted_retry() {
    let env = start().await;
    let kubelet = tfjob_cluster::kubelet::spawn(
        Arc::clone(&env.store),
        tfjob_cluster::kubelet::KubeletConfig {
            startup: Duration::from_millis(20),
            ..Default::default()
        },
    );
    let jobs: Api<TFJob> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    // Worker 1 is killed (137, retryable under ExitCode) on its first run only.
    let job: TFJob = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "sim", "namespace": "default"},
        "spec": {"successPolicy": "AllWorkers", "tfReplicaSpecs": {"Worker": {
            "replicas": 2, "restartPolicy": "ExitCode",
            "template": {
                "metadata": {"annotations": {
                    "sim.tfjob.dev/duration": "300ms",
                    "sim.tfjob.dev/exit-code": "1=137,*=0",
                    "sim.tfjob.dev/fail-times": "1",
                }},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}
            }}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let done = eventually("Succeeded", || async {
        let j = jobs.get("sim").await.ok()?;
        has(&j, JobConditionType::Succeeded).then_some(j)
    })
    .await;
    let status = done.status.unwrap();
    assert!(!status.is_true(JobConditionType::Failed));
    assert_eq!(status.restart_count, Some(1), "worker 1 was recreated once");
    for name in ["sim-worker-0", "sim-worker-1"] {
        let pod = pods.get(name).await.unwrap();
        let state = pod.status.unwrap();
        assert_eq!(state.phase.as_deref(), Some("Succeeded"), "{name}");
        let exit = state.container_statuses.unwrap()[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        assert_eq!(exit, Some(0), "{name}");
        assert!(
            pod.spec
                .unwrap()
                .node_name
                .unwrap()
                .starts_with("sim-node-")
        );
    }
    kubelet.abort();
    env.stop().await;
}
