//! Deletion propagation over HTTPS, as kube-rs and kubectl ask for it: foreground deletion keeps
//! the owner (marked, with the `foregroundDeletion` finalizer, seen by watchers) until its
//! blocking dependents are gone; orphan deletion keeps the dependents without the reference;
//! the policy is read from a `DeleteOptions` body or from the query. Waits poll with generous
//! timeouts.

use crate::common;

use std::time::Duration;

use axum::http::{Request, header};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tfjob_cluster::Store;

async fn client() -> Client {
    common::serve(Store::new(), Default::default())
        .await
        .client()
        .await
}

async fn owner(cms: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap()
}

async fn dependent(pods: &Api<Pod>, name: &str, owner: &ConfigMap, finalizers: &[&str]) -> Pod {
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": finalizers, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner.name_any(),
            "uid": owner.uid().unwrap(), "blockOwnerDeletion": true, "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

/// Polls until `name` is gone, or fails after a generous timeout.
async fn gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    tokio::time::timeout(Duration::from_secs(60), async {
        while api.get_opt(name).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} is never deleted"));
}

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

async fn next_event(events: &mut Events) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(60), events.try_next())
        .await
        .expect("a watch event")
        .unwrap()
        .expect("the watch goes on")
}

#[tokio::test]
async fn foreground_deletion_holds_the_owner_until_its_blockers_are_gone() {
    let client = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let job = owner(&cms, "job").await;
    dependent(&pods, "held", &job, &["example.com/hold"]).await;
    dependent(&pods, "free", &job, &[]).await;
    let since = job.resource_version().unwrap();
    let mut events: Events = cms
        .watch(&WatchParams::default(), &since)
        .await
        .unwrap()
        .boxed();

    let marked = cms
        .delete("job", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("the owner is returned, marked for deletion");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.finalizers(),
        ["foregroundDeletion".to_owned()].as_slice()
    );
    gone(&pods, "free").await;
    let still = cms.get("job").await.unwrap();
    assert!(
        still.metadata.deletion_timestamp.is_some(),
        "held by a blocker"
    );
    let held = pods.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());

    match next_event(&mut events).await {
        WatchEvent::Modified(cm) => {
            assert!(cm.metadata.deletion_timestamp.is_some());
            assert!(cm.finalizers().iter().any(|f| f == "foregroundDeletion"));
        }
        other => panic!("expected the owner marked for deletion, got {other:?}"),
    }

    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    gone(&cms, "job").await;
    match next_event(&mut events).await {
        WatchEvent::Deleted(cm) => assert_eq!(cm.name_any(), "job"),
        other => panic!("expected the owner deleted, got {other:?}"),
    }
}

#[tokio::test]
async fn orphan_deletion_keeps_the_dependents_without_the_reference() {
    let client = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let job = owner(&cms, "job").await;
    dependent(&pods, "kept", &job, &[]).await;
    cms.delete("job", &DeleteParams::orphan()).await.unwrap();
    gone(&cms, "job").await;
    let kept = pods.get("kept").await.unwrap();
    assert!(kept.owner_references().is_empty(), "{kept:?}");

    // Background (the default) takes the dependents along.
    let job = owner(&cms, "job2").await;
    dependent(&pods, "taken", &job, &[]).await;
    cms.delete("job2", &DeleteParams::default()).await.unwrap();
    gone(&pods, "taken").await;
}

/// Sends a raw DELETE and returns the status code.
async fn raw_delete(client: &Client, path: &str, body: Option<serde_json::Value>) -> u16 {
    let mut request = Request::delete(path);
    let body = match body {
        Some(b) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            b.to_string().into_bytes()
        }
        None => Vec::new(),
    };
    match client.request_text(request.body(body).unwrap()).await {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{path}: {e}"),
    }
}

#[tokio::test]
async fn the_policy_comes_from_a_body_or_the_query() {
    let client = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let base = "/api/v1/namespaces/default/configmaps";

    // The body kubectl sends for `kubectl delete --cascade=orphan`.
    let a = owner(&cms, "a").await;
    dependent(&pods, "of-a", &a, &[]).await;
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"});
    assert_eq!(
        raw_delete(&client, &format!("{base}/a"), Some(body)).await,
        200
    );
    assert!(
        pods.get("of-a")
            .await
            .unwrap()
            .owner_references()
            .is_empty()
    );

    let b = owner(&cms, "b").await;
    dependent(&pods, "of-b", &b, &["example.com/hold"]).await;
    let path = format!("{base}/b?propagationPolicy=Foreground");
    assert_eq!(raw_delete(&client, &path, None).await, 200);
    let b = cms.get("b").await.unwrap();
    assert!(b.finalizers().iter().any(|f| f == "foregroundDeletion"));

    let path = format!("{base}?propagationPolicy=Orphan");
    let c = owner(&cms, "c").await;
    dependent(&pods, "of-c", &c, &[]).await;
    assert_eq!(
        raw_delete(&client, &path, None).await,
        200,
        "deletecollection"
    );
    gone(&cms, "c").await;
    assert!(
        pods.get("of-c")
            .await
            .unwrap()
            .owner_references()
            .is_empty()
    );

    let bad = format!("{base}/whatever?propagationPolicy=Sideways");
    owner(&cms, "whatever").await;
    assert_eq!(raw_delete(&client, &bad, None).await, 422);
    assert!(
        cms.get("whatever").await.is_ok(),
        "a rejected delete deletes nothing"
    );
}
