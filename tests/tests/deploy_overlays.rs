//! `deploy/` as a kustomize base and overlays: `kubectl kustomize` renders each overlay, the
//! rendered objects are what the overlay promises (every object in its namespace, service
//! account subjects moved with it, two replicas with leader election, a disruption budget,
//! topology spread, non-root with a read-only root file system, the CRD as generated, the
//! Kubeflow roles aggregated, Volcano's gang scheduler flag, the Kueue Workloads flag with its
//! role), and `kubectl apply -k` of the
//! standalone overlay succeeds on the embedded cluster.

use crate::common;

use std::collections::BTreeSet;

use serde_json::Value;

use common::kubectl::{cluster, repo};

/// The objects `kubectl kustomize deploy/<dir>` renders.
fn render(dir: &str) -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(repo(&format!("deploy/{dir}")))
        .output()
        .expect("kubectl runs (install it: apt-get install kubernetes-client)");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---\n")
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).unwrap())
        .collect()
}

/// `v` with every whole float as an integer: kustomize writes the CRD's `minimum: 0.0` as `0`.
fn whole_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && n.is_f64() => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(whole_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, whole_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", "tfjob-operator")["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// What every overlay shares: the base's objects, all namespaced ones (and every service
/// account subject of a binding) in `namespace`, and a Deployment fit for production.
fn check_base(objects: &[Value], namespace: &str) {
    let cluster_scoped = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
    ];
    for o in objects {
        let kind = o["kind"].as_str().unwrap();
        if !cluster_scoped.contains(&kind) {
            assert_eq!(
                o["metadata"]["namespace"], namespace,
                "{kind} {} is outside {namespace}",
                o["metadata"]["name"]
            );
        }
        for subject in o["subjects"].as_array().into_iter().flatten() {
            if subject["kind"] == "ServiceAccount" {
                assert_eq!(
                    subject["namespace"], namespace,
                    "{kind} {}",
                    o["metadata"]["name"]
                );
            }
        }
    }
    let crd = find(objects, "CustomResourceDefinition", "tfjobs.kubeflow.org");
    let generated: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/crd/kubeflow.org_tfjobs.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        whole_numbers(crd.clone()),
        whole_numbers(generated),
        "the CRD is rendered as generated"
    );
    for (kind, name) in [
        ("ServiceAccount", "tfjob-operator"),
        ("ClusterRole", "tfjob-operator"),
        ("ClusterRoleBinding", "tfjob-operator"),
        ("Role", "tfjob-operator-policies"),
        ("Role", "tfjob-operator-leader-election"),
        ("PodDisruptionBudget", "tfjob-operator"),
        ("Service", "tfjob-operator-metrics"),
    ] {
        find(objects, kind, name);
    }

    let deployment = find(objects, "Deployment", "tfjob-operator");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    assert!(args(objects).iter().any(|a| a == "--leader-elect"));
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(pod["topologySpreadConstraints"][0]["topologyKey"].is_string());
    let c = container(objects);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let pdb = find(objects, "PodDisruptionBudget", "tfjob-operator");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"],
        "the budget covers the operator's pods"
    );
}

#[test]
fn the_standalone_overlay_renders_in_tfjob_system() {
    let objects = render("overlays/standalone");
    check_base(&objects, "tfjob-system");
    find(&objects, "Namespace", "tfjob-system");
    assert!(
        !args(&objects)
            .iter()
            .any(|a| a.starts_with("--gang-scheduler-name"))
    );
    assert_eq!(
        render("."),
        objects,
        "deploy/ itself is the standalone overlay"
    );
}

#[test]
fn the_volcano_overlay_gang_schedules_with_volcano() {
    let objects = render("overlays/volcano");
    check_base(&objects, "tfjob-system");
    assert!(args(&objects).contains(&"--gang-scheduler-name=volcano".to_owned()));
    let rules = &find(&objects, "ClusterRole", "tfjob-operator")["rules"];
    assert!(
        rules.as_array().unwrap().iter().any(|r| {
            r["apiGroups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == "scheduling.volcano.sh")
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "podgroups")
        }),
        "the operator may manage Volcano's PodGroups"
    );
}

#[test]
fn the_kueue_workloads_overlay_owns_workloads_with_its_own_role() {
    let objects = render("overlays/kueue-workloads");
    check_base(&objects, "tfjob-system");
    assert!(args(&objects).contains(&"--kueue-workloads".to_owned()));
    let role = find(&objects, "ClusterRole", "tfjob-operator-kueue-workloads");
    let resources: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        resources,
        ["workloads", "workloads/status", "resourceflavors"]
    );
    let binding = find(
        &objects,
        "ClusterRoleBinding",
        "tfjob-operator-kueue-workloads",
    );
    assert_eq!(binding["subjects"][0]["namespace"], "tfjob-system");
    assert_eq!(binding["subjects"][0]["name"], "tfjob-operator");
}

#[test]
fn the_kubeflow_overlay_lives_in_kubeflow_and_aggregates_its_roles() {
    let objects = render("overlays/kubeflow");
    check_base(&objects, "kubeflow");
    assert!(
        !objects.iter().any(|o| o["kind"] == "Namespace"),
        "Kubeflow owns its namespace"
    );
    let label = |name: &str, key: &str| -> bool {
        find(&objects, "ClusterRole", name)["metadata"]["labels"][key] == "true"
    };
    let prefix = "rbac.authorization.kubeflow.org/aggregate-to-";
    assert!(label(
        "kubeflow-tfjob-admin",
        &format!("{prefix}kubeflow-admin")
    ));
    assert!(label(
        "kubeflow-tfjob-edit",
        &format!("{prefix}kubeflow-edit")
    ));
    assert!(label(
        "kubeflow-tfjob-edit",
        &format!("{prefix}kubeflow-tfjob-admin")
    ));
    assert!(label(
        "kubeflow-tfjob-view",
        &format!("{prefix}kubeflow-view")
    ));
    let verbs = |name: &str| -> BTreeSet<String> {
        find(&objects, "ClusterRole", name)["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == "tfjobs")
            })
            .flat_map(|r| r["verbs"].as_array().unwrap().clone())
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        verbs("kubeflow-tfjob-edit")
            .is_superset(&["create", "delete", "patch"].map(String::from).into())
    );
    assert_eq!(
        verbs("kubeflow-tfjob-view"),
        ["get", "list", "watch"].map(String::from).into()
    );
}

#[test]
fn the_standalone_overlay_applies_on_the_embedded_cluster() {
    let c = cluster();
    let dir = repo("deploy/overlays/standalone");
    let applied = c.ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        dir.to_str().unwrap(),
    ]);
    for line in [
        "namespace/tfjob-system serverside-applied",
        "deployment.apps/tfjob-operator serverside-applied",
        "poddisruptionbudget.policy/tfjob-operator serverside-applied",
        "clusterrole.rbac.authorization.k8s.io/tfjob-operator serverside-applied",
        "role.rbac.authorization.k8s.io/tfjob-operator-leader-election serverside-applied",
        "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org serverside-applied",
    ] {
        assert!(applied.contains(line), "{line} missing from:\n{applied}");
    }
    let replicas = c.ok(&[
        "get",
        "deployment",
        "tfjob-operator",
        "-n",
        "tfjob-system",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas, "2");
    // The CRD applied over the running one still serves TFJobs.
    c.ok(&["get", "tfjobs", "-A"]);
}
