//! `deploy/operator/rbac.yaml` is exactly what the operator needs, proven on an API server that
//! enforces RBAC. The embedded cluster authorizes every request (`ClusterOptions::authorize`);
//! `deploy/overlays/standalone/namespace.yaml` and `rbac.yaml` are applied as the administrator, a token
//! is minted for the service account they bind, and the operator runs with a kubeconfig for
//! that token through jobs that make it use every kind of request it has: creating and
//! deleting pods and services (whose owner references block the job's deletion, so the job's
//! `finalizers` are checked too), restarts, suspension, the TTL deletion of a job, status
//! writes, events and their series, gang scheduling (PodGroups created, updated and deleted,
//! priority classes read) and a policy ConfigMap whose status annotation it writes. Not one
//! request may be refused. Then each rule of the file is removed in turn, and the operator must
//! be refused something that rule allows: a rule nothing needs fails the test as surely as a
//! missing one. Rules added to the file later are picked up by both. The same holds for
//! `deploy/overlays/kueue-workloads/rbac.yaml` with an operator that owns Kueue Workloads.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_cluster::auth::rbac::{Attributes, PolicyRule, ResourceAttributes};
use tfjob_cluster::http::requests::Denial;
use tfjob_controller::leader::LeaseConfig;
use tfjob_controller::leader::election::Timings;
use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster};
use tfjob_planner::gang::GangScheduler;

use common::kubectl::repo;
use common::{Background, IMAGE, ensure_namespace, is_true, poll};

const NS: &str = "rbac";
const WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);
/// The service account `deploy/operator/rbac.yaml` binds its roles to.
const ACCOUNT: (&str, &str) = ("tfjob-system", "tfjob-operator");

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The documents of the operator's RBAC file.
fn deployed_documents() -> Vec<Value> {
    documents(&read("deploy/operator/rbac.yaml"))
}

/// The YAML documents of an RBAC file.
fn documents(text: &str) -> Vec<Value> {
    text.split("\n---")
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn to_yaml(documents: &[Value]) -> String {
    documents
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Which of deploy/'s operator setups a test holds to its RBAC.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Gang-scheduled with Volcano, policies from ConfigMaps and a registry.
    Standalone,
    /// `--kueue-workloads` on a cluster simulating Kueue.
    KueueWorkloads,
}

/// A cluster that authorizes, with deploy/'s namespace and `rbac` applied and the operator
/// running as deploy/'s service account.
fn start(rbac: &str, setup: Setup) -> Background {
    let mut options = ClusterOptions::new(common::default_policies());
    options.kubelet = common::roomy_kubelet();
    match setup {
        Setup::Standalone => options.gang_scheduler = Some(GangScheduler::Volcano),
        Setup::KueueWorkloads => {
            options.simulate_kueue = true;
            options.kueue_workloads = true;
        }
    }
    options.authorize = true;
    options.run_operator = false;
    // With leader election, as deploy/ runs it: the Lease rules are exercised too.
    options.leader_election = Some(LeaseConfig {
        namespace: "tfjob-system".to_owned(),
        name: "tfjob-operator".to_owned(),
        identity: "rbac-test".to_owned(),
        timings: Timings::default(),
    });
    let mut background = Background::start(options);
    let cluster = &mut background.cluster;
    cluster
        .apply_manifests(&read("deploy/overlays/standalone/namespace.yaml"))
        .unwrap();
    cluster.apply_manifests(rbac).unwrap();
    background
        .runtime
        .block_on(cluster.run_operator_as(ACCOUNT.0, ACCOUNT.1))
        .unwrap();
    let _entered = background.runtime.enter();
    cluster.start_operator();
    drop(_entered);
    background
}

fn job(name: &str, spec: Value) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap()
}

fn worker(replicas: i32, policy: &str, annotations: Value) -> Value {
    json!({"replicas": replicas, "restartPolicy": policy, "template": {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "tensorflow", "image": IMAGE,
                                 "resources": {"requests": {"cpu": "1"}}}]}}})
}

/// Drives the operator through every kind of request it makes, as the administrator.
async fn scenario(cluster: &EmbeddedCluster, client: &Client) {
    ensure_namespace(client, NS).await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), NS);
    let create = |j: TFJob| {
        let jobs = jobs.clone();
        async move { jobs.create(&PostParams::default(), &j).await.unwrap() }
    };
    // A restart (a pod deleted and recreated), then success; deleted by its TTL.
    create(job(
        "retry",
        json!({"runPolicy": {"ttlSecondsAfterFinished": 0},
               "tfReplicaSpecs": {"Worker": worker(1, "ExitCode", json!({
                   "sim.tfjob.dev/duration": "1s",
                   "sim.tfjob.dev/exit-code": "1=137,*=0",
                   "sim.tfjob.dev/fail-times": "1"}))}}),
    ))
    .await;
    // Runs long enough to be suspended, and to have its minAvailable edited first.
    create(job(
        "long",
        json!({"tfReplicaSpecs": {"Worker": worker(2, "Never", json!({
            "sim.tfjob.dev/duration": "600s"}))}}),
    ))
    .await;
    // A policy ConfigMap the operator must read and annotate (its content is refused).
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ACCOUNT.0);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "not-a-policy", "labels": {"policy.tfjob.dev/policy": "true"}},
        "data": {"policy.yaml": "this is not a manifest"}
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    // A policy whose module is in a registry, with credentials in a Secret of the namespace:
    // the operator reads the Secret (the registry is not there; the status says so).
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), ACCOUNT.0);
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "registry-credentials"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "eyJhdXRocyI6IHt9fQ=="}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // A policy that reads namespaces and nodes (the default ceiling): the operator watches
    // both while it is active. It selects no job, so it is never called.
    let reader = tfjob_policy_engine::configmap::pack(
        tfjob_policy_engine::PolicyManifest {
            name: "reader".into(),
            hooks: vec![tfjob_policy_engine::Hook::Decorate],
            failure_policy: tfjob_policy_engine::FailurePolicy::Ignore,
            selector: tfjob_policy_engine::JobSelector {
                match_labels: [("reads".to_owned(), "cluster".to_owned())].into(),
                ..tfjob_policy_engine::JobSelector::default()
            },
            reads: ["namespaces", "nodes"]
                .map(
                    |resource| tfjob_policy_engine::cluster_reads::ReadDeclaration {
                        resource: resource.into(),
                        scope: None,
                    },
                )
                .into(),
            ..tfjob_policy_engine::PolicyManifest::default()
        },
        tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM,
        ACCOUNT.0,
        false,
    )
    .unwrap();
    configmaps
        .create(&PostParams::default(), &reader)
        .await
        .unwrap();
    let referenced: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "referenced", "labels": {"policy.tfjob.dev/policy": "true"}},
        "data": {"policy.yaml": "name: referenced\nhooks: [decorate]\nfailurePolicy: Ignore\n",
                 "module": "oci://127.0.0.1:9/none/policy:v1",
                 "pullSecret": "registry-credentials"}
    }))
    .unwrap();
    configmaps
        .create(&PostParams::default(), &referenced)
        .await
        .unwrap();

    poll(WAIT, POLL, || async {
        let long = jobs.get("long").await.unwrap();
        if is_true(&long, tfjob_api::JobConditionType::Running) {
            Ok(())
        } else {
            Err("long is not running")
        }
    })
    .await
    .unwrap();
    let patch = |spec: Value| {
        let jobs = jobs.clone();
        async move {
            jobs.patch(
                "long",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .unwrap();
        }
    };
    patch(json!({"runPolicy": {"schedulingPolicy": {"minAvailable": 1}}})).await;
    let requests = cluster.requests();
    poll(WAIT, POLL, || async {
        let updated = requests.snapshot().agents.iter().any(|c| {
            c.agent == "tfjob-operator" && c.resource == "podgroups" && c.verb.as_str() == "update"
        });
        updated.then_some(()).ok_or("the PodGroup was not updated")
    })
    .await
    .unwrap();
    patch(json!({"runPolicy": {"suspend": true}})).await;
    // The reading policy's caches listed and watched what it reads.
    poll(WAIT, POLL, || async {
        let made = requests.snapshot();
        let watched = |resource: &str| {
            ["list", "watch"].iter().all(|verb| {
                made.agents.iter().any(|c| {
                    c.agent == "tfjob-operator"
                        && c.resource == resource
                        && c.verb.as_str() == *verb
                })
            })
        };
        (watched("nodes") && watched("namespaces"))
            .then_some(())
            .ok_or("nodes and namespaces are not watched")
    })
    .await
    .unwrap();

    // The retry job ran, restarted, succeeded and was deleted by its TTL; the suspended job
    // lost its pods; the ConfigMap got its status.
    poll(WAIT, POLL, || async {
        let gone = matches!(jobs.get("retry").await, Err(kube::Error::Api(s)) if s.is_not_found());
        let mut annotated = true;
        for name in ["not-a-policy", "referenced"] {
            let cm = configmaps.get(name).await.unwrap();
            annotated &= cm
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("policy.tfjob.dev/status"));
        }
        let long = jobs.get("long").await.unwrap();
        let suspended = is_true(&long, tfjob_api::JobConditionType::Suspended);
        if gone && annotated && suspended {
            Ok(())
        } else {
            Err(format!(
                "retry deleted {gone}, annotated {annotated}, suspended {suspended}"
            ))
        }
    })
    .await
    .unwrap();
}

/// Waits until the server has refused some request.
async fn first_denial(cluster: &EmbeddedCluster) {
    while cluster.requests().denied() == 0 {
        tokio::time::sleep(POLL).await;
    }
}

/// Runs the scenario of `setup` with the operator held to `rbac`, until it ends or the
/// operator is first refused something (then there is no point in going on).
fn run_until_refused(rbac: &str, setup: Setup) -> Background {
    let background = start(rbac, setup);
    let cluster = &background.cluster;
    let client = cluster.client();
    background.runtime.block_on(async {
        tokio::select! {
            () = async {
                match setup {
                    Setup::Standalone => scenario(cluster, &client).await,
                    Setup::KueueWorkloads => kueue_scenario(&client).await,
                }
            } => {}
            () = first_denial(cluster) => {}
        }
    });
    background
}

/// The requests of `tfjob-operator`'s client, as (verb, group, resource).
fn used_by_operator(cluster: &EmbeddedCluster) -> BTreeSet<(String, String, String)> {
    cluster
        .requests()
        .snapshot()
        .agents
        .iter()
        .filter(|c| c.agent == "tfjob-operator")
        .map(|c| {
            (
                c.verb.as_str().to_owned(),
                c.group.clone(),
                c.resource.clone(),
            )
        })
        .collect()
}

/// Fails unless the operator made each of `expected` (verb, group, resource): the scenario
/// reached every kind of request the rules are there for.
fn assert_made(cluster: &EmbeddedCluster, expected: &[(&str, &str, &str)]) {
    let used = used_by_operator(cluster);
    for (verb, group, resource) in expected {
        let key = (
            (*verb).to_owned(),
            (*group).to_owned(),
            (*resource).to_owned(),
        );
        assert!(
            used.contains(&key),
            "the scenario never made {key:?}: {used:?}"
        );
    }
}

/// Runs the scenario of `setup` once without each rule of `documents` (the whole RBAC given
/// to the operator being `render` of what is left) and returns the rules whose removal got the
/// operator refused nothing they allow.
fn unneeded_rules(
    documents: &[Value],
    render: impl Fn(&[Value]) -> String,
    setup: Setup,
) -> Vec<String> {
    let mut unneeded = Vec::new();
    for (d, doc) in documents.iter().enumerate() {
        let rules = doc["rules"].as_array().cloned().unwrap_or_default();
        for (r, rule) in rules.iter().enumerate() {
            let mut without = documents.to_vec();
            without[d]["rules"].as_array_mut().unwrap().remove(r);
            let role = format!(
                "{} {}",
                doc["kind"].as_str().unwrap_or_default(),
                doc["metadata"]["name"].as_str().unwrap_or_default()
            );
            let background = run_until_refused(&render(&without), setup);
            let parsed: PolicyRule = serde_json::from_value(rule.clone()).unwrap();
            let denials = background.cluster.requests().denials();
            if !denials.iter().any(|d| covers(&parsed, d)) {
                unneeded.push(format!("{role} rule {r} {rule}: denials {denials:?}"));
            }
        }
    }
    unneeded
}

fn kueue_api(
    client: &Client,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
        plural,
    );
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Drives an operator that owns Kueue Workloads through every request it makes: a queued job
/// whose Workload is created, admitted on a flavor (read), replaced after someone edited it
/// (deleted), and finished (its status patched) when the job succeeds.
async fn kueue_scenario(client: &Client) {
    ensure_namespace(client, NS).await;
    for (kind, plural, namespace, object) in [
        (
            "ResourceFlavor",
            "resourceflavors",
            None,
            json!({"metadata": {"name": "default-flavor"}, "spec": {}}),
        ),
        (
            "ClusterQueue",
            "clusterqueues",
            None,
            json!({
            "metadata": {"name": "cluster-queue"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu"],
                "flavors": [{"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": 8}]}]}]}}),
        ),
        (
            "LocalQueue",
            "localqueues",
            Some(NS),
            json!({"metadata": {"name": "user-queue"}, "spec": {"clusterQueue": "cluster-queue"}}),
        ),
    ] {
        let mut object = object;
        object["apiVersion"] = json!("kueue.x-k8s.io/v1beta2");
        object["kind"] = json!(kind);
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        kueue_api(client, kind, plural, namespace)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), NS);
    let mut queued = job(
        "queued",
        json!({"tfReplicaSpecs": {"Worker": worker(1, "Never", json!({"sim.tfjob.dev/duration": "2s"}))}}),
    );
    queued.metadata.labels = Some(
        [(
            "kueue.x-k8s.io/queue-name".to_owned(),
            "user-queue".to_owned(),
        )]
        .into(),
    );
    jobs.create(&PostParams::default(), &queued).await.unwrap();
    // Someone else edits the Workload: the operator deletes it and makes it anew.
    let workloads = kueue_api(client, "Workload", "workloads", Some(NS));
    let first = poll(WAIT, POLL, || async {
        let list = workloads
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .next()
            .ok_or_else(|| "no Workload yet".to_owned())
    })
    .await
    .unwrap();
    let edit = json!({"metadata": {"annotations": {"tfjob.dev/pod-sets-digest": "edited"}}});
    workloads
        .patch(
            &first.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&edit),
        )
        .await
        .unwrap();
    poll(WAIT, POLL, || async {
        let j = jobs.get("queued").await.unwrap();
        if is_true(&j, tfjob_api::JobConditionType::Succeeded) {
            Ok(())
        } else {
            Err("queued has not succeeded")
        }
    })
    .await
    .unwrap();
    poll(WAIT, POLL, || async {
        let list = workloads.list(&Default::default()).await.unwrap();
        let finished = list.items.iter().any(|w| {
            w.uid() != first.uid()
                && w.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Finished"))
        });
        if finished {
            Ok(())
        } else {
            Err("no Workload made anew and finished")
        }
    })
    .await
    .unwrap();
}

#[test]
fn an_operator_owning_kueue_workloads_is_never_refused_and_needs_every_rule_of_the_overlay() {
    let base = read("deploy/operator/rbac.yaml");
    let overlay_file = "deploy/overlays/kueue-workloads/rbac.yaml";
    let overlay = read(overlay_file);
    let background = run_until_refused(&format!("{base}\n---\n{overlay}"), Setup::KueueWorkloads);
    let cluster = &background.cluster;
    let denials = cluster.requests().denials();
    assert!(
        denials.is_empty(),
        "{overlay_file} with the base does not allow these requests of the operator: {denials:#?}"
    );
    assert_made(
        cluster,
        &[
            ("create", "kueue.x-k8s.io", "workloads"),
            ("delete", "kueue.x-k8s.io", "workloads"),
            ("watch", "kueue.x-k8s.io", "workloads"),
            ("patch", "kueue.x-k8s.io", "workloads/status"),
            ("watch", "kueue.x-k8s.io", "resourceflavors"),
        ],
    );
    drop(background);

    let overlay_documents = documents(&overlay);
    let rules = overlay_documents[0]["rules"].as_array().map_or(0, Vec::len);
    assert_eq!(rules, 3, "workloads, their status, flavors");
    let unneeded = unneeded_rules(
        &overlay_documents,
        |without| format!("{base}\n---\n{}", to_yaml(without)),
        Setup::KueueWorkloads,
    );
    assert!(
        unneeded.is_empty(),
        "without these rules of {overlay_file} the operator was refused nothing they allow: {unneeded:#?}"
    );
}

#[test]
fn the_operator_is_never_refused_with_the_deployed_rbac() {
    let background = run_until_refused(&read("deploy/operator/rbac.yaml"), Setup::Standalone);
    let cluster = &background.cluster;
    let denials = cluster.requests().denials();
    assert!(
        denials.is_empty(),
        "deploy/operator/rbac.yaml does not allow these requests of the operator: {denials:#?}"
    );

    assert_made(
        cluster,
        &[
            ("create", "", "pods"),
            ("delete", "", "pods"),
            ("create", "", "services"),
            ("delete", "", "services"),
            ("update", "kubeflow.org", "tfjobs/status"),
            ("delete", "kubeflow.org", "tfjobs"),
            ("watch", "kubeflow.org", "tfjobs"),
            ("create", "events.k8s.io", "events"),
            ("create", "scheduling.volcano.sh", "podgroups"),
            ("update", "scheduling.volcano.sh", "podgroups"),
            ("delete", "scheduling.volcano.sh", "podgroups"),
            ("list", "scheduling.k8s.io", "priorityclasses"),
            ("patch", "", "configmaps"),
            ("get", "", "secrets"),
            ("list", "", "nodes"),
            ("watch", "", "nodes"),
            ("list", "", "namespaces"),
            ("watch", "", "namespaces"),
        ],
    );
}

/// Whether `rule` allows what `denial` was refused.
fn covers(rule: &PolicyRule, denial: &Denial) -> bool {
    let (resource, subresource) = denial
        .resource
        .split_once('/')
        .unwrap_or((denial.resource.as_str(), ""));
    rule.allows(&Attributes::Resource(ResourceAttributes {
        verb: denial.verb.clone(),
        group: denial.group.clone(),
        resource: resource.to_owned(),
        subresource: subresource.to_owned(),
        namespace: denial.namespace.clone(),
        // Rules here name no objects; a denial's name does not matter to them.
        name: String::new(),
    }))
}

#[test]
fn every_deployed_rule_is_needed() {
    let documents = deployed_documents();
    let rules: usize = documents
        .iter()
        .map(|d| d["rules"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(
        rules >= 2,
        "the RBAC file has a ClusterRole and a Role with rules"
    );
    let unneeded = unneeded_rules(&documents, to_yaml, Setup::Standalone);
    assert!(
        unneeded.is_empty(),
        "without these rules of deploy/operator/rbac.yaml the operator was refused nothing they allow: {unneeded:#?}"
    );
}
