//! The RBAC of `deploy/operator/rbac.yaml` covers everything the operator does. The operator runs
//! on the embedded cluster (which counts every request by client, verb, API group and
//! resource) through jobs that make it use every kind of request it has: creating and deleting
//! pods and services, restarts, suspension, the TTL deletion of a job, status writes, events
//! and their series, gang scheduling (PodGroups created, updated and deleted, priority classes
//! read) and a policy ConfigMap whose status annotation it writes. Every request of the
//! operator's client must be allowed by a rule of the checked-in ClusterRole or Role; a rule
//! removed from the file, or a new kind of request without one, fails this test.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_operator::embedded::ClusterOptions;
use tfjob_planner::gang::GangScheduler;

use common::kubectl::repo;
use common::{IMAGE, ensure_namespace, is_true, poll};

const NS: &str = "rbac";
const WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

/// One rule of a Role or ClusterRole.
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

impl Rule {
    fn allows(&self, verb: &str, group: &str, resource: &str) -> bool {
        let has = |list: &[String], item: &str| list.iter().any(|x| x == item || x == "*");
        has(&self.groups, group) && has(&self.resources, resource) && has(&self.verbs, verb)
    }
}

/// The rules of every Role and ClusterRole in the operator's RBAC file.
fn deployed_rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(repo("deploy/operator/rbac.yaml")).unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    text.split("\n---")
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).unwrap())
        .filter(|doc| matches!(doc["kind"].as_str(), Some("Role" | "ClusterRole")))
        .flat_map(|doc| doc["rules"].as_array().cloned().unwrap_or_default())
        .map(|rule| Rule {
            groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            verbs: strings(&rule["verbs"]),
        })
        .collect()
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

#[test]
fn every_request_the_operator_makes_is_allowed_by_the_deployed_rbac() {
    let mut options = ClusterOptions::new(common::default_policies());
    options.kubelet = common::roomy_kubelet();
    options.gang_scheduler = Some(GangScheduler::Volcano);
    let background = common::Background::start(options);
    let cluster = &background.cluster;
    let client = cluster.client();

    background.runtime.block_on(async {
        ensure_namespace(&client, NS).await;
        ensure_namespace(&client, "tfjob-system").await;
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
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "tfjob-system");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "not-a-policy", "labels": {"policy.tfjob.dev/policy": "true"}},
            "data": {"policy.yaml": "this is not a manifest"}
        }))
        .unwrap();
        configmaps
            .create(&PostParams::default(), &cm)
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
        let groups = cluster.requests();
        poll(WAIT, POLL, || async {
            let updated = groups.snapshot().agents.iter().any(|c| {
                c.agent == "tfjob-operator"
                    && c.resource == "podgroups"
                    && c.verb.as_str() == "update"
            });
            updated.then_some(()).ok_or("the PodGroup was not updated")
        })
        .await
        .unwrap();
        patch(json!({"runPolicy": {"suspend": true}})).await;

        // The retry job ran, restarted, succeeded and was deleted by its TTL; the suspended job
        // lost its pods; the ConfigMap got its status.
        poll(WAIT, POLL, || async {
            let gone =
                matches!(jobs.get("retry").await, Err(kube::Error::Api(s)) if s.is_not_found());
            let cm = configmaps.get("not-a-policy").await.unwrap();
            let annotated = cm
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("policy.tfjob.dev/status"));
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
    });

    let rules = deployed_rules();
    let snapshot = cluster.requests().snapshot();
    let used: BTreeSet<(String, String, String)> = snapshot
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
        .collect();
    let denied: Vec<_> = used
        .iter()
        .filter(|(verb, group, resource)| !rules.iter().any(|r| r.allows(verb, group, resource)))
        .collect();
    assert!(
        denied.is_empty(),
        "deploy/operator/rbac.yaml does not allow these requests of the operator (verb, group, resource): {denied:?}"
    );
    // The scenario reached every kind of request the rules are there for.
    for expected in [
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
    ] {
        let key = (
            expected.0.to_owned(),
            expected.1.to_owned(),
            expected.2.to_owned(),
        );
        assert!(
            used.contains(&key),
            "the scenario never made {expected:?}: {used:?}"
        );
    }
}

#[test]
fn the_rule_check_refuses_what_no_rule_names() {
    let rules = deployed_rules();
    let allowed = |v, g, r| rules.iter().any(|rule: &Rule| rule.allows(v, g, r));
    assert!(allowed("update", "kubeflow.org", "tfjobs/finalizers"));
    assert!(allowed("update", "scheduling.x-k8s.io", "podgroups"));
    assert!(!allowed("create", "", "secrets"));
    assert!(!allowed("update", "", "pods"));
    assert!(!allowed(
        "delete",
        "apiextensions.k8s.io",
        "customresourcedefinitions"
    ));
}
