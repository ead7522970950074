//! `deploy/operator/rbac.yaml` held to the real RBAC authorizer: the operator runs on a real
//! control plane as the ServiceAccount `deploy/` binds, through a scenario that makes it use
//! every kind of request it has (pods and services made and deleted, a restart, a TTL deletion,
//! status writes, events, a gang-scheduled job's PodGroup made, updated and deleted, priority
//! classes read, policy ConfigMaps read and annotated, a pull Secret read, a reading policy's
//! watches of namespaces and nodes, leader election). The API server's audit log records each
//! of the account's requests with the authorizer's answer:
//! - **sufficient**: not one request of the account was refused (403);
//! - **least**: every verb each rule grants was used on something the rule names and allowed.
//!   A verb the audit log does not show is removed from the role and the scenario run again on
//!   a fresh control plane: the operator must then be refused something, or the verb goes.
//!
//! The embedded cluster's own proof (`rbac` in the conformance tests) removes whole rules; this
//! one goes down to the verb, against the real authorizer.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_control_plane::{ControlPlane, NodeSpec, Options};

use common::real::{
    NS, OPERATOR_USER, WAIT, install_crds, installed_with, job, kubectl, kubectl_with, operator,
    patch_job_spec,
};
use common::{Killed, repo};

/// A grant of the role: one verb of one rule, and what the rule names.
#[derive(Debug, Clone)]
struct Grant {
    /// `ClusterRole tfjob-operator rule 3`.
    rule: String,
    /// Which document and rule, to remove the verb from.
    document: usize,
    index: usize,
    verb: String,
    groups: Vec<String>,
    resources: Vec<String>,
}

impl Grant {
    fn covers(&self, (verb, group, resource): &(String, String, String)) -> bool {
        *verb == self.verb && self.groups.contains(group) && self.resources.contains(resource)
    }
}

fn documents() -> Vec<Value> {
    let text = std::fs::read_to_string(repo("deploy/operator/rbac.yaml")).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// Every verb of every rule of the Roles and ClusterRoles in `documents`.
fn grants(documents: &[Value]) -> Vec<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let mut grants = Vec::new();
    for (document, doc) in documents.iter().enumerate() {
        for (index, rule) in doc["rules"].as_array().into_iter().flatten().enumerate() {
            for verb in strings(&rule["verbs"]) {
                grants.push(Grant {
                    rule: format!(
                        "{} {} rule {index}",
                        doc["kind"].as_str().unwrap_or_default(),
                        doc["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    document,
                    index,
                    verb,
                    groups: strings(&rule["apiGroups"]),
                    resources: strings(&rule["resources"]),
                });
            }
        }
    }
    grants
}

/// `documents` without `grant`'s verb, as YAML.
fn without(documents: &[Value], grant: &Grant) -> String {
    let mut documents = documents.to_vec();
    let verbs = documents[grant.document]["rules"][grant.index]["verbs"]
        .as_array_mut()
        .unwrap();
    verbs.retain(|v| v.as_str() != Some(grant.verb.as_str()));
    if verbs.is_empty() {
        // A rule must name a verb.
        documents[grant.document]["rules"]
            .as_array_mut()
            .unwrap()
            .remove(grant.index);
    }
    documents
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A control plane auditing the operator's account, with Volcano's PodGroup CRD and `deploy/`
/// installed, the operator's RBAC replaced by `rbac`.
fn control_plane(rbac: &str) -> ControlPlane {
    let plane = installed_with(Options {
        nodes: vec![NodeSpec::default(); 3],
        audit_users: vec![OPERATOR_USER.to_owned()],
        ..Options::default()
    });
    install_crds(&plane, "tests/data/crds/volcano-podgroups.yaml");
    // What the overlay bound, replaced (a verb removed from a role stays removed).
    let (ok, err) = kubectl_with(
        &plane,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        rbac,
    );
    assert!(ok, "{err}");
    plane
}

/// `job`'s manifest with its pods left to the default scheduler: no Volcano scheduler runs
/// here, and the real one binds them while the operator still manages the job's PodGroup.
fn default_scheduled(manifest: &str) -> String {
    let mut job: Value = serde_json::from_str(manifest).unwrap();
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] =
        json!("default-scheduler");
    job.to_string()
}

fn apply(plane: &ControlPlane, manifest: &str) {
    // Server-side: a client-side apply would copy a policy's module into an annotation, past
    // the server's bound on annotations.
    let (ok, err) = kubectl_with(plane, &["apply", "--server-side", "-f", "-"], manifest);
    let start: String = manifest.chars().take(300).collect();
    assert!(ok, "{err}\n{start}");
}

/// The operator's requests so far that the server allowed, as (verb, group, resource).
fn allowed(plane: &ControlPlane) -> BTreeSet<(String, String, String)> {
    let requests = plane.audited().unwrap_or_else(|e| panic!("{e}"));
    tfjob_control_plane::audit::allowed_for(&requests, OPERATOR_USER)
}

/// The operator's refused requests so far, each as `verb group/resource in namespace`.
fn refused(plane: &ControlPlane) -> Vec<String> {
    plane
        .audited()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|r| r.user == OPERATOR_USER && r.forbidden())
        .map(|r| format!("{} {}/{} in {:?}", r.verb, r.group, r.resource, r.namespace))
        .collect()
}

/// Plays Volcano's scheduler: every PodGroup without a phase is admitted (`Running`), which
/// lets the operator create the job's pods.
fn admit_pod_groups(plane: &ControlPlane) {
    let groups = kubectl(
        plane,
        &[
            "get",
            "podgroups.scheduling.volcano.sh",
            "-n",
            NS,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}",
        ],
    );
    // A line of a PodGroup without a phase ends in the space.
    let unadmitted = groups
        .lines()
        .filter_map(|l| l.strip_suffix(' '))
        .filter(|name| !name.is_empty());
    for name in unadmitted {
        let _ = plane.kubectl_run(&[
            "patch",
            "podgroups.scheduling.volcano.sh",
            name,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ]);
    }
}

/// A packed policy ConfigMap that reads namespaces and nodes (the default ceiling) and selects
/// no job: while it is active the operator watches both.
fn reading_policy() -> String {
    let configmap = tfjob_policy_engine::configmap::pack(
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
        "tfjob-system",
        false,
    )
    .unwrap();
    serde_json::to_string(&configmap).unwrap()
}

/// Polls `check` (every 200 ms, at most [`WAIT`]) until it holds or the operator is refused
/// something; whether it held.
fn until_or_refused(plane: &ControlPlane, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < WAIT {
        admit_pod_groups(plane);
        if check() {
            return true;
        }
        if !refused(plane).is_empty() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Drives the operator through every kind of request it makes; stops early, returning false,
/// once it is refused something.
fn scenario(plane: &ControlPlane) -> bool {
    let json_of = |name: &str| kubectl(plane, &["get", "tfjob", name, "-n", NS, "-o", "json"]);
    let condition = |job: &Value, kind: &str| {
        job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    // A pull Secret and three policy ConfigMaps: one refused, one whose module is in a
    // registry (that is not there; the status says so) with credentials in the Secret, one
    // that reads the cluster.
    apply(
        plane,
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "registry-credentials", "namespace": "tfjob-system"},
                "type": "kubernetes.io/dockerconfigjson",
                "data": {".dockerconfigjson": "eyJhdXRocyI6IHt9fQ=="}})
        .to_string(),
    );
    for (name, data) in [
        (
            "not-a-policy",
            json!({"policy.yaml": "this is not a manifest"}),
        ),
        (
            "referenced",
            json!({"policy.yaml": "name: referenced\nhooks: [decorate]\nfailurePolicy: Ignore\n",
                   "module": "oci://127.0.0.1:9/none/policy:v1",
                   "pullSecret": "registry-credentials"}),
        ),
    ] {
        apply(
            plane,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "tfjob-system",
                                 "labels": {"policy.tfjob.dev/policy": "true"}},
                    "data": data})
            .to_string(),
        );
    }
    let mut reader: Value = serde_json::from_str(&reading_policy()).unwrap();
    reader["apiVersion"] = json!("v1");
    reader["kind"] = json!("ConfigMap");
    apply(plane, &reader.to_string());

    // A restart (a pod deleted and made again), then failure past the backoff limit; deleted by
    // its TTL.
    apply(
        plane,
        &default_scheduled(&job(
            "retry",
            1,
            "ExitCode",
            json!({"sim.tfjob.dev/duration": "1s", "sim.tfjob.dev/exit-code": "137"}),
            json!({"runPolicy": {"ttlSecondsAfterFinished": 0, "backoffLimit": 1}}),
        )),
    );
    // Runs long enough to have its minAvailable edited, then to be suspended.
    apply(
        plane,
        &default_scheduled(&job(
            "long",
            2,
            "Never",
            json!({"sim.tfjob.dev/duration": "600s"}),
            json!({}),
        )),
    );
    if !until_or_refused(plane, || {
        condition(&serde_json::from_str(&json_of("long")).unwrap(), "Running")
    }) {
        return false;
    }
    patch_job_spec(
        plane,
        "long",
        json!({"runPolicy": {"schedulingPolicy": {"minAvailable": 1}}}),
    );
    let podgroup_updated = |plane: &ControlPlane| {
        allowed(plane).contains(&(
            "update".into(),
            "scheduling.volcano.sh".into(),
            "podgroups".into(),
        ))
    };
    if !until_or_refused(plane, || podgroup_updated(plane)) {
        return false;
    }
    patch_job_spec(plane, "long", json!({"runPolicy": {"suspend": true}}));
    until_or_refused(plane, || {
        let retry_gone = plane
            .kubectl_run(&["get", "tfjob", "retry", "-n", NS, "-o", "name"])
            .is_err();
        let annotated = ["not-a-policy", "referenced", "tfjob-policy-reader"]
            .iter()
            .all(|name| {
                kubectl(
                    plane,
                    &[
                        "get",
                        "configmap",
                        name,
                        "-n",
                        "tfjob-system",
                        "-o",
                        "jsonpath={.metadata.annotations}",
                    ],
                )
                .contains("policy.tfjob.dev/status")
            });
        let suspended = condition(
            &serde_json::from_str(&json_of("long")).unwrap(),
            "Suspended",
        );
        let made = allowed(plane);
        let watched = ["nodes", "namespaces"].iter().all(|resource| {
            ["list", "watch"]
                .iter()
                .all(|verb| made.contains(&((*verb).into(), String::new(), (*resource).into())))
        });
        retry_gone && annotated && suspended && watched
    })
}

/// Two replicas of the operator on `plane` as deploy/ runs them (leader election, Volcano gang
/// scheduling), the second started once the first leads (a standby watches the Lease), with
/// their logs in `dir/operator.log` and `dir/standby/operator.log`.
fn run_operators(plane: &ControlPlane, dir: &Path) -> [Killed; 2] {
    let args = ["--leader-elect", "--gang-scheduler-name=volcano"];
    let leader = operator(plane, dir, &args).0;
    common::eventually_within(WAIT, "the first operator leading", || {
        plane
            .kubectl_run(&[
                "get",
                "lease",
                "tfjob-operator",
                "-n",
                "tfjob-system",
                "-o",
                "name",
            ])
            .ok()
            .map(drop)
    });
    let standby_dir = dir.join("standby");
    std::fs::create_dir(&standby_dir).unwrap();
    let standby = operator(plane, &standby_dir, &args).0;
    [leader, standby]
}

#[test]
fn deploys_rbac_is_sufficient_and_least_under_the_real_authorizer() {
    let documents = documents();
    let all = grants(&documents);
    assert!(all.len() > 10, "the role grants verbs: {all:?}");
    let plane = control_plane(&std::fs::read_to_string(repo("deploy/operator/rbac.yaml")).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let _operators = run_operators(&plane, dir.path());
    let log = || std::fs::read_to_string(dir.path().join("operator.log")).unwrap_or_default();
    let completed = scenario(&plane);
    let refusals = refused(&plane);
    assert!(
        refusals.is_empty(),
        "deploy/operator/rbac.yaml does not allow these requests of the operator: {refusals:#?}"
    );
    assert!(
        completed,
        "the scenario did not complete; operator log:\n{}",
        log()
    );
    let used = allowed(&plane);
    let unused: Vec<&Grant> = all
        .iter()
        .filter(|g| !used.iter().any(|u| g.covers(u)))
        .collect();
    eprintln!("not seen in the audit log: {unused:#?}");
    drop(plane);

    // Each verb the audit log does not show is removed in turn: the operator must be refused
    // something without it.
    let mut unneeded = Vec::new();
    for grant in unused {
        let plane = control_plane(&without(&documents, grant));
        let dir = tempfile::tempdir().unwrap();
        let _operators = run_operators(&plane, dir.path());
        let _ = scenario(&plane);
        if refused(&plane).is_empty() {
            unneeded.push(format!("{} verb {}", grant.rule, grant.verb));
        }
    }
    assert!(
        unneeded.is_empty(),
        "without these verbs of deploy/operator/rbac.yaml the operator was refused nothing: {unneeded:#?}"
    );
}
