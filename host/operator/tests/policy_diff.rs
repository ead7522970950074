//! `policy diff` against the embedded cluster: jobs running under the default policies, and a
//! candidate that adds a label and classifies differently (a module, and a CEL ConfigMap). The diff must list exactly those
//! changes, per job and pod, and leave every object of the cluster as it was.

use crate::common;

use std::time::Duration;

use serde_json::{Value, json};
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;

use common::cluster::Cluster;
use common::{eventually, operator};

const NS: &str = "ml";

/// A job of two workers that run for an hour, so nothing changes while the diff reads.
fn long_job(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {"sim.tfjob.dev/duration": "1h"}},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
    })
}

/// Runs `policy diff` with `args` against the cluster; exit code, stdout, stderr.
fn diff(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = operator()
        .args(["policy", "diff", "--kubeconfig"])
        .arg(&c.kubeconfig)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("tfjob-operator runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON report of `policy diff` of the candidate `wasm` under `manifest` in namespace
/// [`NS`], which must succeed.
fn json_report(c: &Cluster, wasm: &str, manifest: &str) -> Value {
    report_of(c, &["--policy", wasm, "--manifest", manifest])
}

/// The JSON report of `policy diff` of the candidate `candidate` names (flags) in namespace
/// [`NS`], which must succeed.
fn report_of(c: &Cluster, candidate: &[&str]) -> Value {
    let mut args = candidate.to_vec();
    args.extend(["-n", NS, "-o", "json"]);
    let (code, out, err) = diff(c, &args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Writes the candidate: the test policy decorating with `decorate` (a JSON pointer and value)
/// and classifying every pod as `phase`, selecting jobs labelled `team: vision`.
fn candidate(c: &Cluster, settings: Value) -> (String, String) {
    reading_candidate(c, settings, &[])
}

/// [`candidate`] declaring that it reads `reads` (cluster-scoped resources).
fn reading_candidate(c: &Cluster, settings: Value, reads: &[&str]) -> (String, String) {
    let wasm = c.dir.path().join("what-if.wasm");
    std::fs::write(&wasm, HOSTILE_POLICY_WASM).unwrap();
    let manifest = c.dir.path().join("policy.yaml");
    let text = serde_yaml_ng::to_string(&json!({
        "name": "what-if",
        "hooks": ["decorate", "classify"],
        // Before the default classifier, so its verdict is the one that counts.
        "order": -10,
        "selector": {"matchLabels": {"team": "vision"}},
        "settings": settings,
        "reads": reads.iter().map(|r| json!({"resource": r})).collect::<Vec<_>>(),
    }))
    .unwrap();
    std::fs::write(&manifest, text).unwrap();
    (wasm.display().to_string(), manifest.display().to_string())
}

#[test]
fn a_candidate_is_compared_with_the_live_policies_without_writing_anything() {
    let c = Cluster::start(|_| {});
    {
        let _operator = c.operator(&[], &[]);
        c.submit_manifest(long_job("vision", json!({"team": "vision"})));
        c.submit_manifest(long_job("speech", json!({"team": "speech"})));
        eventually("both jobs running", || {
            (c.state(NS, "vision").as_deref() == Some("Running")
                && c.state(NS, "speech").as_deref() == Some("Running"))
            .then_some(())
        });
        // The operator stops here: from now on nothing writes to the cluster but the diff
        // could (the pods run for an hour; the simulated kubelet has nothing to report).
    }
    // The namespace a reading candidate will read, labelled before the cluster stands still.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(c.client());
    let labelled = c
        .runtime
        .block_on(namespaces.patch(
            NS,
            &kube::api::PatchParams::apply("policy-diff-test"),
            &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NS, "labels": {"cost-center": "cc-7"}}})),
        ))
        .expect("the namespace is labelled");
    let version = labelled.metadata.resource_version.unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let store = std::sync::Arc::clone(c.embedded().store());
    let before = store.resource_version();

    let (wasm, manifest) = candidate(
        &c,
        json!({"mode": "edit", "path": "/metadata/labels/cost-center", "value": "cc-42",
               "phase": "retryable-failure"}),
    );
    let report = json_report(&c, &wasm, &manifest);
    assert_eq!(
        report["summary"],
        json!({"jobsSelected": 1, "jobsChanged": 1, "podsChanged": 2, "verdictsChanged": 2,
               "refused": 0}),
        "{report:#}"
    );
    let jobs = report["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(
        (job["namespace"].as_str(), job["name"].as_str()),
        (Some(NS), Some("vision"))
    );
    for (i, pod) in job["pods"].as_array().unwrap().iter().enumerate() {
        assert_eq!(pod["pod"], format!("vision-worker-{i}"));
        // Exactly the label, nothing else of the pod.
        assert_eq!(
            pod["fields"],
            json!([{"path": "metadata.labels.cost-center", "current": null, "candidate": "cc-42"}]),
            "{pod:#}"
        );
        let (current, proposed) = (
            pod["policies"][0].as_str().unwrap(),
            pod["policies"][1].as_str().unwrap(),
        );
        assert!(!current.contains("what-if@"), "{current}");
        assert!(proposed.contains("what-if@"), "{proposed}");
    }
    for (i, v) in job["verdicts"].as_array().unwrap().iter().enumerate() {
        assert_eq!(v["pod"], format!("vision-worker-{i}"));
        assert_eq!(v["current"]["phase"], "running", "{v:#}");
        assert!(
            v["current"]["policy"]
                .as_str()
                .unwrap()
                .starts_with("default-classify@")
        );
        assert_eq!(v["candidate"]["phase"], "retryable-failure", "{v:#}");
        assert!(
            v["candidate"]["policy"]
                .as_str()
                .unwrap()
                .starts_with("what-if@")
        );
    }
    assert_eq!(job["refused"], json!([]));

    // The table says the same, summary first.
    let (code, table, err) = diff(&c, &["--policy", &wasm, "--manifest", &manifest, "-n", NS]);
    assert_eq!(code, 0, "{err}");
    let first = table.lines().next().unwrap_or_default();
    assert!(
        first.contains("1 jobs selected, 1 would change: 2 pods shaped differently, 2 verdicts differ, 0 refusals"),
        "{table}"
    );
    assert!(table.contains("ml/vision"), "{table}");
    assert!(
        table.contains("metadata.labels.cost-center: null -> \"cc-42\""),
        "{table}"
    );
    assert!(!table.contains("ml/speech"), "not selected: {table}");

    // A candidate that reads the cluster reads the live one: its Namespace, as labelled.
    let (wasm, manifest) = reading_candidate(
        &c,
        json!({"mode": "read", "reads": [{"resource": "namespaces", "name": NS}]}),
        &["namespaces"],
    );
    let report = json_report(&c, &wasm, &manifest);
    let job = &report["jobs"][0];
    assert_eq!(job["refused"], json!([]), "{report:#}");
    let pod = &job["pods"][0];
    let answered: Value = serde_json::from_str(
        pod["fields"][0]["candidate"]
            .as_str()
            .expect("the read's answer"),
    )
    .unwrap();
    assert_eq!(
        pod["fields"][0]["path"],
        "metadata.annotations[\"hostile/read\"]"
    );
    assert_eq!(answered[0]["object"], NS, "{answered}");
    assert_eq!(
        pod["reads"][0],
        Value::Null,
        "the current set reads nothing"
    );
    assert_eq!(
        pod["reads"][1][0]["reads"],
        json!([{"resource": "namespaces", "what": NS, "objects": 1, "resourceVersion": version}]),
        "{pod:#}"
    );

    // A CEL candidate, in the ConfigMap `policy pack --cel` prints: the Namespace's cost center
    // on the pods of the selected job, read from the live cluster.
    let document = "mutations:\n- patchType: ApplyConfiguration\n  applyConfiguration:\n    \
                    expression: \"Object{metadata: Object.metadata{labels: {'cost-center': \
                    namespaceObject.metadata.labels['cost-center']}}}\"\n";
    let manifest = tfjob_policy_engine::PolicyManifest {
        name: "cel-what-if".into(),
        selector: serde_json::from_value(json!({"matchLabels": {"team": "vision"}})).unwrap(),
        ..Default::default()
    };
    let cm = tfjob_policy_engine::configmap::pack_cel(&manifest, document, "tfjob-system").unwrap();
    let file = c.dir.path().join("cel-what-if.yaml");
    std::fs::write(&file, tfjob_policy_engine::configmap::to_yaml(&cm)).unwrap();
    let report = report_of(&c, &["--configmap", file.to_str().unwrap()]);
    assert_eq!(report["summary"]["podsChanged"], 2, "{report:#}");
    let pod = &report["jobs"][0]["pods"][0];
    assert_eq!(
        pod["fields"],
        json!([{"path": "metadata.labels.cost-center", "current": null, "candidate": "cc-7"}]),
        "{pod:#}"
    );
    assert_eq!(
        pod["reads"][1][0]["reads"],
        json!([{"resource": "namespaces", "what": NS, "objects": 1, "resourceVersion": version}]),
        "{pod:#}"
    );

    // A candidate the guard would refuse is reported as refused, by the same guard.
    let (wasm, manifest) = candidate(
        &c,
        json!({"mode": "edit", "path": "/spec/containers/0/image", "value": "evil:latest"}),
    );
    let report = json_report(&c, &wasm, &manifest);
    let refused = &report["jobs"][0]["refused"];
    assert_eq!(refused[0]["set"], "candidate", "{report:#}");
    assert_eq!(refused[0]["step"], "shape");
    assert_eq!(refused[0]["category"], "guard-violation", "{report:#}");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("spec.containers[0].image")
    );

    // A candidate that does not load is an error naming why, exit 2.
    std::fs::write(c.dir.path().join("broken.wasm"), b"not wasm").unwrap();
    let broken = c.dir.path().join("broken.wasm").display().to_string();
    let (code, _, err) = diff(&c, &["--policy", &broken, "-n", NS]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--policy") && err.contains("broken.wasm"),
        "{err}"
    );

    // Nothing was written: no object changed, none was created.
    assert_eq!(
        store.resource_version(),
        before,
        "the diff wrote to the cluster"
    );
}
