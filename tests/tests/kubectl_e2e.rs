//! End to end with the real kubectl, on both clusters: `up`'s embedded API server and simulated
//! kubelet, and the real control plane with `deploy/` installed; the operator with the default
//! Wasm policies runs in this process on either. kubectl (a separate process, as a user would
//! run it) applies jobs, reads them, waits on their conditions, describes them,
//! watches them and deletes them. Waits use kubectl's own timeouts or poll; nothing asserts on
//! timing.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::kubectl::{Background, Cluster, example};

crate::on_both_clusters! {
    kubectl_drives_a_job_through_restart_to_success_and_deletion,
    kubectl_sees_policy_failures_admission_errors_and_watch_updates,
    kubectl_create_configmap_ships_a_policy_module,
    kubectl_apply_is_refused_at_admission_by_the_crds_cel_rules,
}

fn kubectl_drives_a_job_through_restart_to_success_and_deletion(c: &Cluster) {
    let version = c.ok(&["version", "-o", "json"]);
    assert!(version.contains("serverVersion"), "{version}");

    c.ok(&["apply", "-f", &example("demo-retry.yaml")]);
    let listed = c.ok(&["get", "tfjobs"]);
    assert!(
        listed.lines().next().unwrap().contains("STATE"),
        "printer columns: {listed}"
    );
    assert!(listed.contains("demo-retry"), "{listed}");

    c.ok(&[
        "wait",
        "--for=condition=Succeeded",
        "tfjob/demo-retry",
        "--timeout=120s",
    ]);
    let state = c.ok(&[
        "get",
        "tfjob",
        "demo-retry",
        "-o",
        "jsonpath={.status.conditions[-1:].type} {.status.restartCount}",
    ]);
    assert_eq!(state, "Succeeded 1");

    let described = c.ok(&["describe", "tfjob", "demo-retry"]);
    for expected in [
        "TFJobRestarting",
        "ExitedWithCode",
        "TFJobSucceeded",
        "Created pod: demo-retry-worker-1",
    ] {
        assert!(
            described.contains(expected),
            "describe shows {expected}:\n{described}"
        );
    }
    let pods = c.ok(&[
        "get",
        "pods",
        "-l",
        "training.kubeflow.org/job-name=demo-retry",
        "-o",
        "name",
    ]);
    assert_eq!(pods.lines().count(), 2, "{pods}");
    let annotations = c.ok(&[
        "get",
        "pod",
        "demo-retry-worker-0",
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    assert!(
        annotations.contains("default-decorate@"),
        "the default policies shaped the pod: {annotations}"
    );

    c.ok(&["delete", "tfjob", "demo-retry"]);
    c.until(
        &[
            "get",
            "pods,services",
            "-l",
            "training.kubeflow.org/job-name=demo-retry",
            "-o",
            "name",
        ],
        |out| out.trim().is_empty(),
    );
}

fn kubectl_sees_policy_failures_admission_errors_and_watch_updates(c: &Cluster) {
    // `get -w` sees the job appear and change.
    let watch = Background(Some(
        c.kubectl(&["get", "tfjobs", "-w", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    c.ok(&["create", "-f", &example("demo-bad-image.yaml")]);
    c.ok(&[
        "wait",
        "--for=condition=Failed",
        "tfjob/demo-bad-image",
        "--timeout=120s",
    ]);
    let message = c.ok(&[
        "get",
        "tfjob",
        "demo-bad-image",
        "-o",
        "jsonpath={.status.conditions[-1:].message}",
    ]);
    assert!(message.contains("Pod demo-bad-image-worker-0: ContainersNotReady|InvalidImageName (policy default-classify@"), "{message}");
    std::thread::sleep(Duration::from_millis(500));
    let seen = watch.finish();
    assert!(
        seen.contains("ADDED") && seen.contains("demo-bad-image"),
        "{seen}"
    );
    assert!(
        seen.contains("Failed"),
        "the watch saw the job fail: {seen}"
    );

    // The operator's validation rejects a bad job at admission, naming the field.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("kubectl-e2e-invalid.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: bad-job}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      template: {spec: {containers: [{name: tensorflow}]}}\n",
    )
    .unwrap();
    let out = c.run(&["create", "-f", &bad.display().to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.tfReplicaSpecs[Worker].template.spec.containers[0].image"),
        "{err}"
    );
    assert!(Path::new(&example("demo-retry.yaml")).exists());
}

/// The README's kubectl-only path for a policy: `create configmap --from-file` (sent as
/// protobuf, the module as binary data), `label`, and the operator serves it.
fn kubectl_create_configmap_ships_a_policy_module(c: &Cluster) {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("team.wasm");
    let decorate = tfjob_policy_engine::defaults::find("default-decorate").unwrap();
    std::fs::write(&wasm, decorate.wasm).unwrap();
    let manifest = dir.path().join("policy.yaml");
    std::fs::write(
        &manifest,
        "name: team-labels\nhooks: [decorate]\norder: 10\nsettings: {defaultLabels: {shipped-by: kubectl}}\n",
    )
    .unwrap();
    c.ok(&[
        "-n",
        "tfjob-system",
        "create",
        "configmap",
        "team-labels",
        &format!("--from-file=policy.wasm={}", wasm.display()),
        &format!("--from-file=policy.yaml={}", manifest.display()),
    ]);
    let module = c.ok(&[
        "-n",
        "tfjob-system",
        "get",
        "configmap",
        "team-labels",
        "-o",
        "jsonpath={.binaryData.policy\\.wasm}",
    ]);
    assert!(!module.is_empty(), "the module is kept as binary data");
    c.ok(&[
        "-n",
        "tfjob-system",
        "label",
        "configmap",
        "team-labels",
        "policy.tfjob.dev/policy=true",
    ]);
    c.until(
        &[
            "-n",
            "tfjob-system",
            "get",
            "configmap",
            "team-labels",
            "-o",
            "jsonpath={.metadata.annotations.policy\\.tfjob\\.dev/status}",
        ],
        |status| status.contains(r#""state":"Active""#),
    );
    c.ok(&["apply", "-f", &example("demo-dist-mnist.yaml")]);
    c.until(
        &["get", "pods", "-l", "shipped-by=kubectl", "-o", "name"],
        |pods| !pods.trim().is_empty(),
    );
}

/// `kubectl apply` of invalid TFJobs is refused by the CRD's own CEL rules, as on a real API
/// server without a webhook: the field path and the rule's message in kubectl's error, nothing
/// stored. An update that changes `managedBy` is refused the same way, and so is a CRD whose
/// rule does not compile.
fn kubectl_apply_is_refused_at_admission_by_the_crds_cel_rules(c: &Cluster) {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let tensorflow = "{name: tensorflow, image: kubeflow/tf-dist-mnist-test:1.0}";
    let bad = write(
        "bad.yaml",
        &format!(
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {{name: cel-bad}}\nspec:\n  tfReplicaSpecs:\n    Chief: {{template: {{spec: {{containers: [{tensorflow}]}}}}}}\n    Master: {{template: {{spec: {{containers: [{tensorflow}]}}}}}}\n    Worker:\n      template: {{spec: {{containers: [{tensorflow}, {{name: sidecar}}]}}}}\n"
        ),
    );
    let out = c.run(&["apply", "-f", &bad]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        // kubectl words the Status details: kind, name, then one line per cause.
        "The TFJob \"cel-bad\" is invalid",
        "spec.tfReplicaSpecs: Invalid value: must not contain both Chief and Master",
        "spec.tfReplicaSpecs[Worker].template.spec.containers[1].image: Required value: must be set",
    ] {
        assert!(err.contains(expected), "{expected:?} not in {err}");
    }
    let get = c.run(&["get", "tfjob", "cel-bad"]);
    assert!(!get.status.success(), "nothing was stored");
    assert!(String::from_utf8_lossy(&get.stderr).contains("NotFound"));

    // A valid job is stored; changing its manager afterwards is refused.
    let job = |managed_by: &str| {
        format!(
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {{name: cel-managed}}\nspec:\n  runPolicy: {{managedBy: {managed_by}, suspend: true}}\n  tfReplicaSpecs:\n    Worker: {{template: {{spec: {{containers: [{tensorflow}]}}}}}}\n"
        )
    };
    c.ok(&[
        "apply",
        "-f",
        &write("managed.yaml", &job("kueue.x-k8s.io/multikueue")),
    ]);
    let out = c.run(&[
        "apply",
        "-f",
        &write("managed.yaml", &job("kubeflow.org/training-operator")),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.runPolicy.managedBy: Invalid value: field is immutable"),
        "{err}"
    );
    let stored = c.ok(&[
        "get",
        "tfjob",
        "cel-managed",
        "-o",
        "jsonpath={.spec.runPolicy.managedBy}",
    ]);
    assert_eq!(stored, "kueue.x-k8s.io/multikueue");

    // A CRD whose rule does not compile is refused, naming the rule.
    let crd = write(
        "crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  names: {kind: Widget, plural: widgets, singular: widget}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            x-kubernetes-validations: [{rule: 'self.size >'}]\n",
    );
    let out = c.run(&["apply", "-f", &crd]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        ),
        "{err}"
    );
}
