//! Reconcile against a mocked Kubernetes API: the exact requests, in order, of a fresh job's
//! create path, a restart, and a status write that loses an optimistic-concurrency race.
//!
//! The mock is a `tower-test` service handed to `kube::Client`; each scenario answers the
//! requests it expects and fails on any other.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::client::Body;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_api::parse::parse_tfjob_yaml;
use tfjob_controller::Context;
use tfjob_controller::event_recorder::EventRecorder;
use tfjob_controller::metrics::Metrics;
use tfjob_controller::owner_index::{self, OwnedWriter};
use tfjob_controller::reconcile::reconcile;
use tfjob_planner::Settings;
use tfjob_planner::native::NativePolicies;
use tower_test::mock::{Handle, SendResponse};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

struct Fixture {
    ctx: Arc<Context>,
    handle: ApiHandle,
    pods: OwnedWriter<Pod>,
    services: OwnedWriter<Service>,
}

fn fixture() -> Fixture {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (pod_store, pods) = owner_index::cache();
    let (service_store, services) = owner_index::cache();
    let mut registry = Registry::default();
    let ctx = Context::new(
        client.clone(),
        pod_store,
        service_store,
        EventRecorder::new(
            client,
            Reporter {
                controller: "tfjob-controller".into(),
                instance: None,
            },
        ),
        Metrics::register(&mut registry),
        Settings::default(),
        Arc::new(NativePolicies::default()),
    );
    Fixture {
        ctx: Arc::new(ctx),
        handle,
        pods,
        services,
    }
}

fn job(yaml: &str) -> TFJob {
    let mut job = parse_tfjob_yaml(yaml).unwrap();
    job.metadata.uid = Some("job-uid".into());
    job.metadata.resource_version = Some("7".into());
    job
}

const LOCAL: &str = r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: ml}
spec:
  tfReplicaSpecs:
    Worker:
      restartPolicy: ExitCode
      template: {spec: {containers: [{name: tensorflow, image: tf:2}]}}
"#;

/// Receives the next request and checks its method and path.
async fn expect(
    handle: &mut ApiHandle,
    method: Method,
    path: &str,
) -> (Value, SendResponse<Response<Body>>) {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {method} {path}"))
        .expect("client dropped");
    assert_eq!(
        (request.method(), request.uri().path()),
        (&method, path),
        "unexpected request {} {}",
        request.method(),
        request.uri()
    );
    let query = request.uri().query().unwrap_or_default().to_owned();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let mut body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    if !query.is_empty() && body.is_null() {
        body = json!({ "query": query });
    }
    (body, send)
}

fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

/// Answers an event creation and returns its reason.
async fn expect_event(handle: &mut ApiHandle, namespace: &str) -> String {
    let (body, send) = expect(
        handle,
        Method::POST,
        &format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events"),
    )
    .await;
    respond(send, StatusCode::CREATED, &body);
    body["reason"].as_str().unwrap().to_owned()
}

fn reconcile_in_background(
    f: &Fixture,
    job: TFJob,
) -> tokio::task::JoinHandle<Result<Action, tfjob_controller::Error>> {
    let ctx = Arc::clone(&f.ctx);
    tokio::spawn(async move { reconcile(Arc::new(DeserializeGuard(Ok(job))), ctx).await })
}

#[tokio::test]
async fn fresh_job_writes_status_then_creates_service_and_pod() {
    let mut f = fixture();
    let job = job(LOCAL);
    let task = reconcile_in_background(&f, job.clone());

    let (status, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    assert_eq!(
        status["metadata"]["resourceVersion"], "7",
        "status writes carry the resourceVersion"
    );
    assert_eq!(status["status"]["conditions"][0]["type"], "Created");
    assert_eq!(
        status["status"]["conditions"][0]["message"],
        "TFJob mnist is created."
    );
    assert!(status["status"]["startTime"].is_string());
    respond(send, StatusCode::OK, &status);

    let (svc, send) = expect(
        &mut f.handle,
        Method::POST,
        "/api/v1/namespaces/ml/services",
    )
    .await;
    assert_eq!(svc["metadata"]["name"], "mnist-worker-0");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], "job-uid");
    respond(send, StatusCode::CREATED, &svc);
    assert_eq!(
        expect_event(&mut f.handle, "ml").await,
        "SuccessfulCreateService"
    );

    let (pod, send) = expect(&mut f.handle, Method::POST, "/api/v1/namespaces/ml/pods").await;
    assert_eq!(pod["metadata"]["name"], "mnist-worker-0");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(
        pod["metadata"]["labels"]["training.kubeflow.org/job-role"],
        "master"
    );
    respond(send, StatusCode::CREATED, &pod);
    assert_eq!(
        expect_event(&mut f.handle, "ml").await,
        "SuccessfulCreatePod"
    );

    let action = task.await.unwrap().unwrap();
    assert_eq!(action, Action::await_change());
    drop(f.pods);
    drop(f.services);
}

#[tokio::test]
async fn already_existing_objects_count_as_created() {
    let mut f = fixture();
    let task = reconcile_in_background(&f, job(LOCAL));
    let (status, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    respond(send, StatusCode::OK, &status);
    let already = |kind: &str| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists",
               "code": 409, "message": format!("{kind} \"mnist-worker-0\" already exists")})
    };
    let (_, send) = expect(
        &mut f.handle,
        Method::POST,
        "/api/v1/namespaces/ml/services",
    )
    .await;
    respond(send, StatusCode::CONFLICT, &already("services"));
    // No event for an object that already existed; the pod comes next.
    let (_, send) = expect(&mut f.handle, Method::POST, "/api/v1/namespaces/ml/pods").await;
    respond(send, StatusCode::CONFLICT, &already("pods"));
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
}

/// The job after its first reconcile, with a failed pod (exit 137) and its service in the caches.
fn restart_fixture() -> (Fixture, TFJob) {
    let mut f = fixture();
    let mut job = job(LOCAL);
    job.status = Some(serde_json::from_value(json!({
        "conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "TFJob mnist is created."}],
        "replicaStatuses": {},
        "startTime": "2026-01-01T00:00:00Z"
    })).unwrap());
    let owner = json!([{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist", "uid": "job-uid", "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"training.kubeflow.org/operator-name": "tfjob-controller", "training.kubeflow.org/job-name": "mnist",
                        "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "0"});
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "mnist-worker-0", "namespace": "ml", "uid": "pod-uid-1", "labels": labels, "ownerReferences": owner},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "tensorflow", "ready": false, "restartCount": 0,
            "image": "tf:2", "imageID": "", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}
    })).unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "mnist-worker-0", "namespace": "ml", "labels": labels, "ownerReferences": owner},
        "spec": {"clusterIP": "None"}
    })).unwrap();
    f.pods.apply_watcher_event(&watcher::Event::Apply(pod));
    f.services.apply_watcher_event(&watcher::Event::Apply(svc));
    (f, job)
}

#[tokio::test]
async fn retryable_failure_records_the_restart_then_deletes_with_a_uid_precondition() {
    let (mut f, job) = restart_fixture();
    let task = reconcile_in_background(&f, job);

    let (status, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    assert_eq!(status["status"]["restartCount"], 1);
    assert_eq!(
        status["status"]["podRestarts"]["mnist-worker-0"],
        json!({"count": 1, "lastDeletedUid": "pod-uid-1"})
    );
    let last = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["type"].as_str(), last["reason"].as_str()),
        (Some("Restarting"), Some("TFJobRestarting"))
    );
    respond(send, StatusCode::OK, &status);

    let (delete, send) = expect(
        &mut f.handle,
        Method::DELETE,
        "/api/v1/namespaces/ml/pods/mnist-worker-0",
    )
    .await;
    assert_eq!(delete["preconditions"]["uid"], "pod-uid-1");
    assert_eq!(delete["propagationPolicy"], "Background");
    respond(
        send,
        StatusCode::OK,
        &json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "mnist-worker-0"}}),
    );

    assert_eq!(
        expect_event(&mut f.handle, "ml").await,
        "SuccessfulDeletePod"
    );
    assert_eq!(expect_event(&mut f.handle, "ml").await, "ExitedWithCode");
    assert_eq!(expect_event(&mut f.handle, "ml").await, "TFJobRestarting");
    assert!(task.await.unwrap().is_ok());
}

#[tokio::test]
async fn a_conflicting_status_write_stops_the_reconcile_and_retries_soon() {
    let (mut f, job) = restart_fixture();
    let task = reconcile_in_background(&f, job);
    let (_, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    respond(
        send,
        StatusCode::CONFLICT,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                "message": "the object has been modified"}),
    );
    let action = task.await.unwrap().unwrap();
    assert_eq!(
        action,
        Action::requeue(tfjob_controller::execute::CONFLICT_RETRY)
    );
    // Nothing else was sent: the pod was not deleted and no restart was counted.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), f.handle.next_request())
            .await
            .is_err(),
        "no request may follow a conflicting status write"
    );
}

#[tokio::test]
async fn a_deletion_answered_409_is_looked_at_again_soon() {
    // The restart is recorded, then the API server answers the deletion 409. Whether the pod
    // was replaced or the 409 had another cause, the job must come back: a pod left in place
    // sends no event.
    let (mut f, job) = restart_fixture();
    let task = reconcile_in_background(&f, job);
    let (status, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    respond(send, StatusCode::OK, &status);
    let (_, send) = expect(
        &mut f.handle,
        Method::DELETE,
        "/api/v1/namespaces/ml/pods/mnist-worker-0",
    )
    .await;
    respond(
        send,
        StatusCode::CONFLICT,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                "message": "Operation cannot be fulfilled"}),
    );
    assert_eq!(expect_event(&mut f.handle, "ml").await, "ExitedWithCode");
    assert_eq!(expect_event(&mut f.handle, "ml").await, "TFJobRestarting");
    let action = task.await.unwrap().unwrap();
    assert_eq!(
        action,
        Action::requeue(tfjob_controller::execute::CONFLICT_RETRY)
    );
}

#[tokio::test]
async fn api_errors_fail_the_reconcile_with_the_api_category() {
    let (mut f, job) = restart_fixture();
    let task = reconcile_in_background(&f, job);
    let (_, send) = expect(
        &mut f.handle,
        Method::PUT,
        "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
    )
    .await;
    respond(
        send,
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "InternalError", "code": 500, "message": "boom"}),
    );
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.category(), "api");
    assert!(
        err.to_string()
            .contains("updating status of TFJob ml/mnist"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreadable_job_is_reported_once_and_skipped() {
    use kube::core::error_boundary::InvalidObject;
    let mut f = fixture();
    let invalid = InvalidObject {
        error: "spec.tfReplicaSpecs.Worker.restartPolicy: unknown variant `Sometimes`".into(),
        metadata: serde_json::from_value(json!({
            "name": "broken", "namespace": "ml", "uid": "u-1", "resourceVersion": "3"
        }))
        .unwrap(),
    };
    let guard = Arc::new(DeserializeGuard::<TFJob>(Err(invalid)));
    let ctx = Arc::clone(&f.ctx);
    let first = tokio::spawn({
        let guard = Arc::clone(&guard);
        let ctx = Arc::clone(&ctx);
        async move { reconcile(guard, ctx).await }
    });
    let (event, send) = expect(
        &mut f.handle,
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ml/events",
    )
    .await;
    assert_eq!(event["reason"], "InvalidTFJob");
    assert_eq!(event["regarding"]["name"], "broken");
    assert!(
        event["note"].as_str().unwrap().contains("restartPolicy"),
        "{event}"
    );
    respond(send, StatusCode::CREATED, &event);
    assert_eq!(first.await.unwrap().unwrap(), Action::await_change());

    // The same version again: nothing is sent, the watch goes on.
    let again = reconcile(guard, ctx).await.unwrap();
    assert_eq!(again, Action::await_change());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), f.handle.next_request())
            .await
            .is_err(),
        "the same unreadable version is reported once"
    );
}
