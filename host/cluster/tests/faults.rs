//! Fault injection and request accounting, seen from real clients over HTTPS: kube-rs gets
//! injected errors as ordinary API errors and the store is left untouched, `429` carries
//! `Retry-After`, rules are scoped by verb and resource, the configuration changes at run time
//! through `/debug/faults`, cut watches are resumed by kube's watcher, latency is applied, and
//! requests are counted by verb and client. Waits poll with generous timeouts; timing is only
//! ever checked from below.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_cluster::faults::{ErrorRule, FaultConfig, FaultStatus, Faults};
use tfjob_cluster::http::requests::Verb;
use tfjob_cluster::http::server::ServerOptions;

struct Env {
    store: Arc<Store>,
    server: common::Serving,
    /// The administrator's client configuration, from the kubeconfig `up` writes.
    config: Config,
}

async fn start(config: FaultConfig) -> Env {
    let store = Store::new();
    let options = ServerOptions {
        faults: Faults::new(config).unwrap(),
        ..ServerOptions::default()
    };
    let server = common::serve(Arc::clone(&store), options).await;
    let config = server.config().await;
    Env {
        store,
        server,
        config,
    }
}

impl Env {
    /// A client naming itself `agent`; `retry` keeps kube's default retries of 429/503/504.
    fn client_as(&self, agent: &str, retry: bool) -> Client {
        let mut config = self.config.clone();
        config.default_retry = retry;
        config
            .headers
            .push((header::USER_AGENT, agent.parse().unwrap()));
        Client::try_from(config).unwrap()
    }

    fn client(&self) -> Client {
        self.client_as("faults-test/1.0", false)
    }

    fn pods_in_store(&self) -> usize {
        let pods = self.store.resource("", "pods").unwrap();
        self.store.list(&pods, None).0.len()
    }
}

/// Polls `check` until it holds, or fails after a generous timeout.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rule(status: FaultStatus, verbs: &[Verb], resources: &[&str]) -> FaultConfig {
    FaultConfig {
        errors: vec![ErrorRule::always(status, verbs, resources)],
        ..FaultConfig::default()
    }
}

#[tokio::test]
async fn injected_errors_are_api_errors_and_change_nothing() {
    let env = start(rule(FaultStatus::InternalError, &[Verb::Create], &["pods"])).await;
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let (code, reason, message) = api_error(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (500, "InternalError"), "{message}");
    assert_eq!(env.pods_in_store(), 0, "the failed create stored nothing");

    env.server
        .running
        .faults()
        .set(rule(FaultStatus::Conflict, &[Verb::Create], &["pods"]))
        .unwrap();
    let (code, reason, _) = api_error(
        pods.create(&PostParams::default(), &pod("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(env.pods_in_store(), 0);

    let counts = env.server.running.faults().counts();
    assert_eq!((counts.internal_errors, counts.conflicts), (1, 1));
    env.server.running.faults().clear();
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    assert_eq!(env.pods_in_store(), 1);
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_and_kube_retries_it() {
    let mut config = rule(FaultStatus::TooManyRequests, &[Verb::List], &["configmaps"]);
    config.errors[0].retry_after_seconds = Some(1);
    let env = start(config).await;

    let raw = env
        .client()
        .send(
            Request::get("/api/v1/namespaces/default/configmaps")
                .body(kube::client::Body::from(Vec::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(raw.headers()[header::RETRY_AFTER], "1");

    let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let (code, reason, _) = api_error(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (429, "TooManyRequests"));

    // kube's default client retries a 429 after Retry-After: once the faults are gone, the same
    // call succeeds without the caller seeing the throttling.
    let retrying: Api<ConfigMap> = Api::namespaced(env.client_as("retrying/1", true), "default");
    let call = tokio::spawn(async move { retrying.list(&ListParams::default()).await });
    let before = env.server.running.faults().counts().too_many_requests;
    eventually("a throttled retry", || {
        env.server.running.faults().counts().too_many_requests > before
    })
    .await;
    env.server.running.faults().clear();
    let listed = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the retried list finishes")
        .unwrap()
        .unwrap();
    assert!(listed.items.is_empty());
}

#[tokio::test]
async fn rules_scoped_to_a_resource_spare_the_others_and_non_resource_paths() {
    let mut config = rule(FaultStatus::InternalError, &[], &["pods"]);
    config.errors.push(ErrorRule {
        rate: 0.0,
        ..ErrorRule::always(FaultStatus::InternalError, &[], &["configmaps"])
    });
    let env = start(config).await;
    let client = env.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        api_error(pods.list(&ListParams::default()).await.unwrap_err()).0,
        500
    );
    cms.create(&PostParams::default(), &config_map("spared"))
        .await
        .unwrap();
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Even a rule for everything leaves health, version, discovery and the hooks alone.
    env.server
        .running
        .faults()
        .set(rule(FaultStatus::InternalError, &[], &[]))
        .unwrap();
    assert!(cms.list(&ListParams::default()).await.is_err());
    assert_eq!(client.apiserver_version().await.unwrap().major, "1");
    client
        .list_api_group_resources("coordination.k8s.io/v1")
        .await
        .unwrap();
    client.list_core_api_resources("v1").await.unwrap();
    client.list_api_groups().await.unwrap();
    for path in [
        "/healthz",
        "/readyz",
        "/livez",
        "/debug/faults",
        "/debug/requests",
    ] {
        client
            .request_text(Request::get(path).body(Vec::new()).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

async fn put_faults(client: &Client, body: Value) -> Result<String, kube::Error> {
    client
        .request_text(
            Request::put("/debug/faults")
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_string().into_bytes())
                .unwrap(),
        )
        .await
}

#[tokio::test]
async fn faults_change_at_run_time_over_http() {
    let env = start(FaultConfig::default()).await;
    let client = env.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("before"))
        .await
        .unwrap();

    let config = json!({"errors": [{"verbs": ["create"], "resources": ["pods"], "rate": 1.0, "status": 500}], "seed": 3});
    put_faults(&client, config).await.unwrap();
    assert_eq!(
        api_error(
            pods.create(&PostParams::default(), &pod("during"))
                .await
                .unwrap_err()
        )
        .0,
        500
    );
    let shown: Value = serde_json::from_str(
        &client
            .request_text(Request::get("/debug/faults").body(Vec::new()).unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(shown["errors"][0]["status"], 500);
    assert_eq!(shown["seed"], 3);
    assert_eq!(env.server.running.faults().get().errors.len(), 1);

    for (bad, field) in [
        (
            json!({"errors": [{"rate": 1.0, "status": 404}]}),
            "errors[0].status",
        ),
        (
            json!({"errors": [{"rate": 2.0, "status": 500}]}),
            "errors[0].rate",
        ),
        (json!({"latencyMS": 10}), "latencyMS"),
    ] {
        let (code, reason, message) = api_error(put_faults(&client, bad).await.unwrap_err());
        assert_eq!((code, reason.as_str()), (400, "BadRequest"), "{message}");
        assert!(message.contains(field), "{message} names {field}");
    }
    assert_eq!(
        env.server.running.faults().get().errors.len(),
        1,
        "a rejected configuration changes nothing"
    );

    put_faults(&client, json!({})).await.unwrap();
    pods.create(&PostParams::default(), &pod("after"))
        .await
        .unwrap();
    assert_eq!(env.pods_in_store(), 2);
}

#[tokio::test]
async fn cut_watches_are_resumed_by_the_watcher() {
    let env = start(FaultConfig {
        drop_watches_after_ms: Some(150),
        seed: 11,
        ..FaultConfig::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&seen);
    let watch = tokio::spawn(
        watcher(cms.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |cm| {
                if let Ok(cm) = cm {
                    sink.lock()
                        .unwrap()
                        .push(cm.metadata.name.unwrap_or_default());
                }
                async {}
            }),
    );
    let seen_name = |name: &str| seen.lock().unwrap().iter().any(|n| n == name);

    cms.create(&PostParams::default(), &config_map("first"))
        .await
        .unwrap();
    eventually("the first config map", || seen_name("first")).await;
    eventually("two cut watches", || {
        env.server.running.faults().counts().watches_cut >= 2
    })
    .await;
    cms.create(&PostParams::default(), &config_map("later"))
        .await
        .unwrap();
    eventually("a config map created after the cuts", || seen_name("later")).await;
    assert!(
        env.server
            .running
            .requests()
            .snapshot()
            .count(Verb::Watch, "configmaps")
            >= 3,
        "the watcher watched again after each cut"
    );
    watch.abort();
}

#[tokio::test]
async fn latency_is_added_to_requests() {
    let env = start(FaultConfig {
        latency_ms: 200,
        latency_jitter_ms: 50,
        ..FaultConfig::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let started = Instant::now();
    pods.list(&ListParams::default()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(env.server.running.faults().counts().delayed, 1);
}

#[tokio::test]
async fn requests_are_counted_by_verb_resource_and_agent() {
    let env = start(FaultConfig::default()).await;
    let operator = env.client_as("bench-operator/0.1", false);
    let test = env.client_as("bench-test/0.1", false);
    let op_pods: Api<Pod> = Api::namespaced(operator.clone(), "default");
    let op_cms: Api<ConfigMap> = Api::namespaced(operator, "default");
    let test_pods: Api<Pod> = Api::namespaced(test, "default");

    test_pods
        .create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    op_cms
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    op_cms
        .create(&PostParams::default(), &config_map("b"))
        .await
        .unwrap();
    op_cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    op_pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    op_pods.get("missing").await.unwrap_err();
    test_pods.list(&ListParams::default()).await.unwrap();

    let snap = env.server.running.requests().snapshot();
    assert_eq!(snap.writes_by("bench-operator"), 4, "{snap:#?}");
    assert_eq!(snap.writes_by("bench-test"), 1);
    assert_eq!(snap.by_agent("bench-test", Verb::List), 1);
    assert_eq!(snap.count(Verb::Create, "configmaps"), 2);
    assert_eq!(snap.count(Verb::Patch, "pods/status"), 1);
    assert_eq!(snap.count_class(Verb::Get, "pods", "4xx"), 1);

    let served: Value = serde_json::from_str(
        &env.client()
            .request_text(Request::get("/debug/requests").body(Vec::new()).unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    let agents = served["agents"].as_array().unwrap();
    assert!(
        agents.iter().any(|a| a["agent"] == "bench-operator"
            && a["verb"] == "create"
            && a["resource"] == "configmaps"
            && a["count"] == 2),
        "{served}"
    );
    assert_eq!(served["faults"]["internalErrors"], 0);
}
