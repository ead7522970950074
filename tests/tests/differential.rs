//! The same requests against both clusters, `up`'s embedded API server and the real
//! kube-apiserver with `deploy/` installed, and the answers compared: status codes and reasons
//! of creates, conflicting and stale writes, reads of what is not there, lists with selectors
//! and limits, deletes with preconditions and propagation, status writes with a stale
//! resourceVersion, and invalid jobs; then what users type to check access and health
//! (`kubectl auth can-i`, `kubectl auth whoami`, the API server's `/metrics`), which the suites
//! of clients do not cover.

use crate::common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use tfjob_api::TFJob;

use common::kubectl::{Cluster, cluster, real_cluster};

const NS: &str = "differential";

/// What one request got: `ok`, or the status code and reason of the refusal.
fn answer<T>(result: Result<T, kube::Error>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(kube::Error::Api(status)) => format!("{} {}", status.code, status.reason),
        Err(e) => format!("error: {e}"),
    }
}

fn configmap(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

fn tfjob(name: &str, image: Option<&str>) -> TFJob {
    let mut container = json!({"name": "tensorflow"});
    if let Some(image) = image {
        container["image"] = json!(image);
    }
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runPolicy": {"suspend": true},
                 "tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [container]}}}}},
    }))
    .unwrap()
}

/// Runs the requests against `client`'s cluster; each step named with what it got.
async fn probe(client: Client) -> BTreeMap<&'static str, String> {
    let mut got = BTreeMap::new();
    common::ensure_namespace(&client, NS).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), NS);
    let post = PostParams::default();

    got.insert(
        "create",
        answer(
            maps.create(&post, &configmap("a", json!({"app": "x"})))
                .await,
        ),
    );
    got.insert(
        "create again",
        answer(maps.create(&post, &configmap("a", json!({}))).await),
    );
    got.insert("get missing", answer(maps.get("missing").await));
    let current = maps.get("a").await.unwrap();
    let mut stale = current.clone();
    stale.metadata.resource_version = Some("1".into());
    got.insert(
        "replace stale",
        answer(maps.replace("a", &post, &stale).await),
    );
    got.insert(
        "replace without resourceVersion",
        answer(
            maps.replace("a", &post, &configmap("a", json!({"app": "x"})))
                .await,
        ),
    );
    got.insert(
        "merge patch",
        answer(
            maps.patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "w"}})),
            )
            .await,
        ),
    );
    let apply = PatchParams::apply("differential");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "b", "labels": {"app": "y"}}, "data": {"k": "v"}});
    got.insert(
        "apply new",
        answer(maps.patch("b", &apply, &Patch::Apply(&applied)).await),
    );
    let conflicting = json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "b"}, "data": {"k": "other"}});
    got.insert(
        "apply conflicting field",
        answer(
            maps.patch(
                "b",
                &PatchParams::apply("someone-else"),
                &Patch::Apply(&conflicting),
            )
            .await,
        ),
    );
    got.insert(
        "strategic patch of a custom resource",
        answer(
            jobs.patch(
                "missing",
                &PatchParams::default(),
                &Patch::Strategic(json!({})),
            )
            .await,
        ),
    );
    for name in ["c", "d"] {
        maps.create(&post, &configmap(name, json!({"app": "x"})))
            .await
            .unwrap();
    }
    let selected = maps.list(&ListParams::default().labels("app=x")).await;
    got.insert(
        "list by label",
        selected.map_or_else(
            |e| answer::<()>(Err(e)),
            |l| format!("{} items", l.items.len()),
        ),
    );
    let page = maps.list(&ListParams::default().limit(1)).await.unwrap();
    got.insert(
        "list limit 1",
        format!(
            "{} items, continue {}",
            page.items.len(),
            page.metadata
                .continue_
                .as_deref()
                .is_some_and(|c| !c.is_empty())
        ),
    );
    got.insert(
        "list bad selector",
        answer(maps.list(&ListParams::default().labels("app in (x")).await),
    );
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    got.insert(
        "delete wrong uid",
        answer(maps.delete("c", &wrong_uid).await),
    );
    got.insert(
        "delete missing",
        answer(maps.delete("missing", &DeleteParams::default()).await),
    );
    got.insert(
        "delete foreground",
        answer(maps.delete("d", &DeleteParams::foreground()).await),
    );

    got.insert(
        "create job",
        answer(jobs.create(&post, &tfjob("j", Some("tf:2"))).await),
    );
    got.insert(
        "create invalid job",
        answer(jobs.create(&post, &tfjob("bad", None)).await),
    );
    let job = jobs.get("j").await.unwrap();
    let mut stale = serde_json::to_value(&job).unwrap();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["status"] = json!({"conditions": []});
    let stale: TFJob = serde_json::from_value(stale).unwrap();
    got.insert(
        "status update stale",
        answer(jobs.replace_status("j", &post, &stale).await),
    );
    got.insert(
        "status of missing job",
        answer(jobs.get_status("missing").await),
    );
    got
}

fn probe_on(c: &Cluster) -> BTreeMap<&'static str, String> {
    let (client, runtime) = c.admin_client();
    runtime.block_on(probe(client))
}

#[test]
fn the_same_requests_get_the_same_answers_from_up_and_the_real_api_server() {
    let up = probe_on(&cluster());
    let real = probe_on(&real_cluster());
    pretty_assertions::assert_eq!(up, real, "left: up, right: the real API server");
    // And the answers are the ones Kubernetes documents, not merely equal.
    assert_eq!(real["create again"], "409 AlreadyExists");
    assert_eq!(real["replace stale"], "409 Conflict");
    assert_eq!(real["delete wrong uid"], "409 Conflict");
    assert_eq!(real["create invalid job"], "422 Invalid");
}

crate::on_both_clusters! {
    kubectl_answers_auth_can_i_whoami_and_serves_the_api_servers_metrics,
}

fn kubectl_answers_auth_can_i_whoami_and_serves_the_api_servers_metrics(c: &Cluster) {
    assert_eq!(
        c.ok(&["auth", "can-i", "create", "tfjobs.kubeflow.org"])
            .trim(),
        "yes"
    );
    let operator = "--as=system:serviceaccount:tfjob-system:tfjob-operator";
    if c.is_real() {
        // deploy/'s RBAC is installed there: the operator's account may watch jobs, not make them.
        assert_eq!(
            c.ok(&["auth", "can-i", "watch", "tfjobs.kubeflow.org", operator])
                .trim(),
            "yes"
        );
        let out = c.run(&["auth", "can-i", "create", "tfjobs.kubeflow.org", operator]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    }
    let me: Value = serde_json::from_str(&c.ok(&["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(me["kind"], "SelfSubjectReview");
    assert!(
        me["status"]["userInfo"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:masters"))),
        "{me}"
    );
    c.ok(&["get", "namespaces"]);
    let metrics = c.ok(&["get", "--raw", "/metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{")
                && l.contains(r#"resource="namespaces""#)
                && l.contains(r#"verb="LIST""#)
                && l.contains(r#"code="200""#)),
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
