//! The embedded API server over HTTPS reading a request's query as a real one does: a watch
//! however the boolean is spelled, kube-rs' streaming lists (`sendInitialEvents`, ended by the
//! `k8s.io/initial-events-end` bookmark), server-side dry runs that store nothing, and the
//! `400`/`422` Status a bad value gets, with the parameter named, and paged lists that read one
//! snapshot, so a reflector listing in pages while objects change misses nothing.

use crate::common;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_cluster::Store;

async fn server() -> Client {
    common::serve(Store::new(), Default::default())
        .await
        .client()
        .await
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

/// The status code and body text of a raw request.
async fn raw_text(client: &Client, method: &str, path: &str, body: Value) -> (u16, String) {
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(response.into_body()), usize::MAX)
        .await
        .unwrap();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

/// The status code and JSON body of a raw request.
async fn raw(client: &Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, text) = raw_text(client, method, path, body).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn every_spelling_of_true_starts_a_watch() {
    let client = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("a"))
        .await
        .unwrap();
    for spelling in ["true", "True", "1", "yes", ""] {
        // A watch of at most a second answers with the current object as ADDED, then ends.
        let (code, text) = raw_text(
            &client,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?watch={spelling}&timeoutSeconds=1"),
            Value::Null,
        )
        .await;
        assert_eq!(code, 200, "watch={spelling}: {text}");
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["type"], "ADDED", "watch={spelling}: {text}");
        assert_eq!(first["object"]["metadata"]["name"], "a");
    }
    for spelling in ["false", "FALSE", "0"] {
        let (code, listed) = raw(
            &client,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?watch={spelling}"),
            Value::Null,
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(listed["kind"], "ConfigMapList", "watch={spelling}");
    }
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_objects_with_a_bookmark() {
    let client = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for name in ["a", "b"] {
        cms.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    // kube-rs' watch-list: one watch with sendInitialEvents, no list request.
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(cms.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.try_next())
            .await
            .expect("the initial objects end")
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(cm) => initial.push(cm.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("before the initial objects ended: {other:?}"),
        }
    }
    assert_eq!(initial, ["a", "b"]);
    cms.create(&PostParams::default(), &configmap("c"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(30), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(next, watcher::Event::Apply(cm) if cm.name_any() == "c"));
}

#[tokio::test]
async fn a_dry_run_stores_nothing() {
    let client = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = cms.create(&dry, &configmap("ghost")).await.unwrap();
    assert_eq!(answered.name_any(), "ghost");
    assert!(cms.get_opt("ghost").await.unwrap().is_none());

    cms.create(&PostParams::default(), &configmap("real"))
        .await
        .unwrap();
    let before = cms.get("real").await.unwrap();
    let patched = cms
        .patch(
            "real",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "changed");
    let deleted = cms
        .delete(
            "real",
            &DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    assert!(deleted.is_left());
    assert_eq!(cms.get("real").await.unwrap(), before, "unchanged");

    // kubectl's spelling of a server-side dry run of anything else is refused, by name.
    let (code, status) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=Client",
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(status["details"]["kind"], "CreateOptions");
    assert_eq!(status["details"]["causes"][0]["field"], "dryRun");
    assert!(cms.get_opt("x").await.unwrap().is_none());
}

#[tokio::test]
async fn bad_values_get_the_status_a_real_server_sends() {
    let client = server().await;
    for (path, code, names) in [
        (
            "/api/v1/namespaces/default/configmaps?limit=ten",
            400,
            "limit",
        ),
        (
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=99999999999999999999",
            400,
            "timeoutSeconds",
        ),
        (
            "/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact",
            422,
            "resourceVersionMatch",
        ),
        (
            "/api/v1/namespaces/default/configmaps?sendInitialEvents=true",
            422,
            "sendInitialEvents",
        ),
        (
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc",
            400,
            "resourceVersion",
        ),
    ] {
        let (got, status) = raw(&client, "GET", path, Value::Null).await;
        assert_eq!(got, code, "{path}: {status}");
        assert_eq!(status["kind"], "Status", "{path}");
        assert!(
            status["message"].as_str().unwrap().contains(names),
            "{path}: {status}"
        );
    }
    let (code, status) = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/a?propagationPolicy=Sideways",
        Value::Null,
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["kind"], "DeleteOptions");
}

async fn create_all(cms: &Api<ConfigMap>, names: impl Iterator<Item = String>) {
    for name in names {
        cms.create(&PostParams::default(), &configmap(&name))
            .await
            .unwrap();
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_paged_list_is_one_snapshot_and_a_watch_from_its_version_sees_every_later_change() {
    let client = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_all(&cms, (0..10).map(|i| format!("c{i:02}"))).await;
    let base = "/api/v1/namespaces/default/configmaps";
    let (_, first) = raw(&client, "GET", &format!("{base}?limit=3"), Value::Null).await;
    let version = first["metadata"]["resourceVersion"].clone();
    assert_eq!(names(&first), ["c00", "c01", "c02"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 7);

    // Between the pages: one listed object changed, one listed and one not yet listed deleted,
    // one created.
    let changed: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c00"}, "data": {"k": "changed"}}))
            .unwrap();
    cms.replace("c00", &PostParams::default(), &changed)
        .await
        .unwrap();
    for gone in ["c01", "c04"] {
        cms.delete(gone, &DeleteParams::default()).await.unwrap();
    }
    cms.create(&PostParams::default(), &configmap("c10"))
        .await
        .unwrap();

    // Every page is the first one's snapshot, at its version: nothing shifted, nothing skipped.
    let mut listed = names(&first);
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    loop {
        let (code, page) = raw(
            &client,
            "GET",
            &format!("{base}?limit=3&continue={token}"),
            Value::Null,
        )
        .await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"], version);
        listed.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    let expected: Vec<String> = (0..10).map(|i| format!("c{i:02}")).collect();
    assert_eq!(listed, expected);

    // The watch from that version brings every change made since, in order.
    let (_, text) = raw_text(
        &client,
        "GET",
        &format!(
            "{base}?watch=1&timeoutSeconds=1&resourceVersion={}",
            version.as_str().unwrap()
        ),
        Value::Null,
    )
    .await;
    let events: Vec<(String, String)> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] != "BOOKMARK")
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("MODIFIED", "c00"),
        ("DELETED", "c01"),
        ("DELETED", "c04"),
        ("ADDED", "c10"),
    ]
    .map(|(t, n)| (t.to_owned(), n.to_owned()));
    assert_eq!(events, expected);

    // A token is for its own list only, and a finished list's token has expired.
    let (code, status) = raw(
        &client,
        "GET",
        &format!("{base}?limit=3&labelSelector=a%3Db&continue={token}"),
        Value::Null,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (410, Some("Expired")),
        "{status}"
    );
    let (_, again) = raw(&client, "GET", &format!("{base}?limit=2"), Value::Null).await;
    let other = again["metadata"]["continue"].as_str().unwrap();
    let (code, status) = raw(
        &client,
        "GET",
        &format!("{base}?limit=2&labelSelector=a%3Db&continue={other}"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(status["message"].as_str().unwrap().contains("continue"));
}

/// A reflector listing one object per page while another client deletes, replaces and creates
/// objects ends with exactly the server's objects. With pages cut from the live store, deleting
/// listed objects shifted the rest and some were never listed nor ever seen again.
#[tokio::test]
async fn a_reflector_listing_in_small_pages_during_changes_ends_with_the_servers_objects() {
    let client = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_all(&cms, (0..150).map(|i| format!("c{i:03}"))).await;
    let writer = {
        let cms = cms.clone();
        tokio::spawn(async move {
            for i in 0..100 {
                cms.delete(&format!("c{i:03}"), &DeleteParams::default())
                    .await
                    .unwrap();
                let changed: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("c{:03}", 149 - i % 50)},
                    "data": {"k": format!("v{i}")}
                }))
                .unwrap();
                cms.replace(&changed.name_any(), &PostParams::default(), &changed)
                    .await
                    .unwrap();
                cms.create(&PostParams::default(), &configmap(&format!("n{i:03}")))
                    .await
                    .unwrap();
            }
        })
    };
    let (reader, writer_half) = kube::runtime::reflector::store::<ConfigMap>();
    let stream = kube::runtime::reflector(
        writer_half,
        watcher(cms.clone(), watcher::Config::default().page_size(1)),
    );
    let following = tokio::spawn(stream.for_each(|_| async {}));
    writer.await.unwrap();

    let server_side: Vec<(String, String)> = cms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| (c.name_any(), c.resource_version().unwrap()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut cached: Vec<(String, String)> = reader
            .state()
            .iter()
            .map(|c| (c.name_any(), c.resource_version().unwrap()))
            .collect();
        cached.sort();
        if cached == server_side {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reflector's objects never matched the server's: {} cached, {} on the server; \
             missing {:?}",
            cached.len(),
            server_side.len(),
            server_side
                .iter()
                .filter(|o| !cached.contains(o))
                .take(5)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    following.abort();
}

/// A watch from a version older than the kept history starts, and its one event is an ERROR
/// with the 410, as a real server sends it: kube-runtime's watcher relists on that event only
/// (an HTTP 410 made it retry the same version forever, its cache frozen).
#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_an_error_event_410() {
    let store = Store::new();
    let client = common::serve(std::sync::Arc::clone(&store), Default::default())
        .await
        .client()
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms
        .create(&PostParams::default(), &configmap("churn"))
        .await
        .unwrap();
    let old = first.resource_version().unwrap();
    // More changes than the server keeps: the first version is compacted away.
    let configmaps = store.resource("", "configmaps").unwrap();
    let mut object = serde_json::to_value(&first).unwrap();
    for i in 0..50_001 {
        object["data"]["k"] = json!(i.to_string());
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        object = (*store
            .replace(
                &configmaps,
                Some("default"),
                "churn",
                object.clone(),
                tfjob_cluster::Part::Whole,
            )
            .unwrap())
        .clone();
    }

    let (code, text) = raw_text(
        &client,
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{text}");
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 1, "{text}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");

    // What kube-runtime's watcher reads to decide to list again.
    let mut stream = cms
        .watch(&kube::api::WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(kube::api::WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected an ERROR event with 410, got {other:?}"),
    }
}
