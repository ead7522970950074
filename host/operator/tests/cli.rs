//! End-to-end tests of the `tfjob-operator` binary's offline subcommands.
//!
//! Every test runs the built binary as a child process, the way a user or a script would, and
//! checks its exit status, standard output and standard error: `render` on the real Kubeflow
//! example manifests in `tests/data/kubeflow/` (YAML and JSON output, cluster domain from the
//! flag or the environment, standard input, several documents, invalid input), `crd`,
//! `--version` and `--help`. Nothing here needs a cluster.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::text;

/// Replica types (lower case, in processing order) with their counts.
type Replicas = &'static [(&'static str, usize)];

/// The five Kubeflow examples: file, job name, namespace the objects land in, and the replicas.
const EXAMPLES: [(&str, &str, &str, Replicas); 5] = [
    (
        "dist-mnist.yaml",
        "dist-mnist-for-e2e-test",
        "default",
        &[("ps", 2), ("worker", 4)],
    ),
    (
        "estimator-distributed.yaml",
        "distributed-training",
        "kf-latest",
        &[("worker", 3)],
    ),
    (
        "keras-multi-worker.yaml",
        "multi-worker",
        "default",
        &[("worker", 2)],
    ),
    (
        "mnist-with-summaries.yaml",
        "mnist",
        "kubeflow",
        &[("worker", 1)],
    ),
    ("simple.yaml", "tfjob-simple", "kubeflow", &[("worker", 2)]),
];

const DIST_MNIST: &str = "dist-mnist-for-e2e-test";

/// `TF_CONFIG` of dist-mnist's worker 1, byte for byte as training-operator 1.9 wrote it.
const DIST_MNIST_WORKER_1: &str = r#"{"cluster":{"ps":["dist-mnist-for-e2e-test-ps-0.default.svc:2222","dist-mnist-for-e2e-test-ps-1.default.svc:2222"],"worker":["dist-mnist-for-e2e-test-worker-0.default.svc:2222","dist-mnist-for-e2e-test-worker-1.default.svc:2222","dist-mnist-for-e2e-test-worker-2.default.svc:2222","dist-mnist-for-e2e-test-worker-3.default.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#;

/// `TF_CONFIG` of dist-mnist's ps 0.
const DIST_MNIST_PS_0: &str = r#"{"cluster":{"ps":["dist-mnist-for-e2e-test-ps-0.default.svc:2222","dist-mnist-for-e2e-test-ps-1.default.svc:2222"],"worker":["dist-mnist-for-e2e-test-worker-0.default.svc:2222","dist-mnist-for-e2e-test-worker-1.default.svc:2222","dist-mnist-for-e2e-test-worker-2.default.svc:2222","dist-mnist-for-e2e-test-worker-3.default.svc:2222"]},"task":{"type":"ps","index":0},"environment":"cloud"}"#;

/// A job with three problems `validate` reports: a bad name, an unknown replica type and a
/// container without an image.
const INVALID: &str = r#"apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: Bad_Name
spec:
  tfReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: tensorflow, image: tf:2}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: tensorflow}]
"#;

fn data_dir() -> PathBuf {
    common::repo("tests/data/kubeflow")
}

fn example(file: &str) -> PathBuf {
    data_dir().join(file)
}

fn example_text(file: &str) -> String {
    std::fs::read_to_string(example(file)).expect("example manifest is readable")
}

/// Longest a single invocation may take before the test gives up on it.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The binary, under a memory limit, with `CUSTOM_CLUSTER_DOMAIN` cleared so the caller's
/// environment cannot leak in.
fn operator() -> Command {
    let mut cmd = common::limited();
    cmd.env_remove("CUSTOM_CLUSTER_DOMAIN");
    cmd
}

/// Runs `cmd` with `stdin` (or an empty standard input) and collects its output; kills it and
/// fails the test after [`TIMEOUT`].
fn run_with(cmd: Command, stdin: Option<&str>) -> Output {
    common::run(cmd, Some(stdin.unwrap_or_default()), TIMEOUT)
}

/// Extra `render` flags that select the operator's native pod building. Builds that load pod
/// policies by default (and offer `--no-policies`) get that flag, so that the objects checked
/// here are the ones the planner builds, before any decoration, and so that no policy engine
/// starts for each of the many invocations; builds without policies need nothing.
fn native_render_flags() -> &'static [&'static str] {
    static FLAGS: OnceLock<&'static [&'static str]> = OnceLock::new();
    FLAGS.get_or_init(|| {
        let help = success(&run(&["render", "--help"]));
        if help.contains("--no-policies") {
            &["--no-policies"]
        } else {
            &[]
        }
    })
}

/// `tfjob-operator render` with the native flags; the caller adds the rest.
fn render() -> Command {
    let mut cmd = operator();
    cmd.arg("render").args(native_render_flags());
    cmd
}

fn run_render(args: &[&str]) -> Output {
    let mut cmd = render();
    cmd.args(args);
    run_with(cmd, None)
}

fn run(args: &[&str]) -> Output {
    let mut cmd = operator();
    cmd.args(args);
    run_with(cmd, None)
}

/// Asserts exit status 0 and an empty stderr; returns stdout.
fn success(output: &Output) -> String {
    common::expect_success(output, "")
}

/// Asserts exit status 2 (invalid input) and an empty stdout; returns stderr.
fn invalid(output: &Output) -> String {
    common::expect_failure(output, "")
}

fn render_file(file: &str, extra: &[&str]) -> Output {
    let path = example(file);
    let mut args = vec!["-f", path.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    run_render(&args)
}

/// Parses `render -o json` output and returns its items, checking the `List` envelope.
fn json_items(text: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(text).expect("render -o json prints JSON");
    let keys: Vec<&String> = list.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["apiVersion", "items", "kind"]);
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    list["items"].as_array().expect("items is an array").clone()
}

/// Parses the `---`-separated YAML documents of `render` output.
fn yaml_items(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            let value: serde_yaml_ng::Value =
                serde::Deserialize::deserialize(doc).expect("render prints YAML");
            serde_json::to_value(value).expect("YAML output converts to JSON")
        })
        .collect()
}

/// `(kind, name)` of every item.
fn kinds_and_names(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().expect("kind").to_owned(),
                i["metadata"]["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect()
}

/// What `render` prints for a fresh job: every service, then every pod, in replica type order.
fn expected_kinds_and_names(job: &str, replicas: &[(&str, usize)]) -> Vec<(String, String)> {
    let names: Vec<String> = replicas
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |i| format!("{job}-{t}-{i}")))
        .collect();
    ["Service", "Pod"]
        .into_iter()
        .flat_map(|kind| names.iter().map(move |n| (kind.to_owned(), n.clone())))
        .collect()
}

fn item<'a>(items: &'a [Value], kind: &str, name: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["kind"] == kind && i["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the output"))
}

/// The `TF_CONFIG` value of pod `name`, if it has one.
fn tf_config(items: &[Value], name: &str) -> Option<String> {
    let pod = item(items, "Pod", name);
    let env = pod["spec"]["containers"][0]["env"].as_array()?;
    let vars: Vec<&Value> = env.iter().filter(|e| e["name"] == "TF_CONFIG").collect();
    assert_eq!(vars.len(), 1, "exactly one TF_CONFIG on {name}");
    Some(
        vars[0]["value"]
            .as_str()
            .expect("a string value")
            .to_owned(),
    )
}

fn replica_labels(job: &str, rtype: &str, index: usize) -> Value {
    json!({
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-index": index.to_string(),
        "training.kubeflow.org/replica-type": rtype,
    })
}

/// The dense `TF_CONFIG` of dist-mnist for `rtype` index `index`; `suffix` follows `.svc`.
fn dist_mnist_tf_config(rtype: &str, index: usize, suffix: &str) -> String {
    let hosts = |t: &str, n: usize| {
        (0..n)
            .map(|i| format!("\"{DIST_MNIST}-{t}-{i}.default.svc{suffix}:2222\""))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        r#"{{"cluster":{{"ps":[{}],"worker":[{}]}},"task":{{"type":"{rtype}","index":{index}}},"environment":"cloud"}}"#,
        hosts("ps", 2),
        hosts("worker", 4)
    )
}

#[test]
fn render_prints_the_services_and_pods_of_every_example() {
    for (file, job, namespace, replicas) in EXAMPLES {
        let yaml = success(&render_file(file, &[]));
        let from_yaml = yaml_items(&yaml);
        let json = success(&render_file(file, &["-o", "json"]));
        let from_json = json_items(&json);
        assert_eq!(
            kinds_and_names(&from_yaml),
            expected_kinds_and_names(job, replicas),
            "{file}"
        );
        assert_eq!(from_yaml, from_json, "{file}: YAML and JSON say the same");
        for i in &from_json {
            assert_eq!(i["apiVersion"], "v1", "{file}");
            assert_eq!(i["metadata"]["namespace"], namespace, "{file}");
            // A job read from a file has no uid: the controller adds the owner reference.
            assert!(i["metadata"].get("ownerReferences").is_none(), "{file}");
        }
    }
}

#[test]
fn render_yaml_separates_documents() {
    let yaml = success(&render_file("simple.yaml", &[]));
    assert!(
        yaml.starts_with("apiVersion: v1\nkind: Service\n"),
        "{yaml}"
    );
    assert_eq!(yaml.matches("\n---\n").count(), 3, "{yaml}");
    assert!(yaml.ends_with('\n'));
}

#[test]
fn render_json_dist_mnist_objects_are_exact() {
    let text = success(&render_file("dist-mnist.yaml", &["-o", "json"]));
    assert!(text.ends_with("}\n"));
    let items = json_items(&text);
    let replicas = [("ps", 2), ("worker", 4)];
    assert_eq!(
        kinds_and_names(&items),
        expected_kinds_and_names(DIST_MNIST, &replicas)
    );

    // Byte for byte, from literals rather than from the helper.
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-worker-1").as_deref(),
        Some(DIST_MNIST_WORKER_1)
    );
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-ps-0").as_deref(),
        Some(DIST_MNIST_PS_0)
    );
    assert_eq!(dist_mnist_tf_config("worker", 1, ""), DIST_MNIST_WORKER_1);
    assert_eq!(dist_mnist_tf_config("ps", 0, ""), DIST_MNIST_PS_0);

    for (rtype, count) in replicas {
        for index in 0..count {
            let name = format!("{DIST_MNIST}-{rtype}-{index}");
            let labels = replica_labels(DIST_MNIST, rtype, index);
            assert_eq!(
                item(&items, "Service", &name),
                &json!({
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"labels": labels, "name": name, "namespace": "default"},
                    "spec": {
                        "clusterIP": "None",
                        "ports": [{"name": "tfjob-port", "port": 2222}],
                        "selector": labels,
                    },
                })
            );
            let mut pod_labels = labels.clone();
            if (rtype, index) == ("worker", 0) {
                pod_labels["training.kubeflow.org/job-role"] = json!("master");
            }
            assert_eq!(
                item(&items, "Pod", &name),
                &json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"labels": pod_labels, "name": name, "namespace": "default"},
                    "spec": {
                        "containers": [{
                            "env": [{
                                "name": "TF_CONFIG",
                                "value": dist_mnist_tf_config(rtype, index, ""),
                            }],
                            "image": "kubeflow/tf-dist-mnist-test:1.0",
                            "name": "tensorflow",
                            "ports": [{"containerPort": 2222, "name": "tfjob-port"}],
                        }],
                        "restartPolicy": "Never",
                    },
                })
            );
        }
    }
}

#[test]
fn render_keeps_template_fields_and_maps_restart_policies() {
    let items = json_items(&success(&render_file(
        "estimator-distributed.yaml",
        &["-o", "json"],
    )));
    for i in 0..3 {
        let pod = item(&items, "Pod", &format!("distributed-training-worker-{i}"));
        assert_eq!(
            pod["metadata"]["annotations"],
            json!({"scheduling.k8s.io/group-name": "distributed-training"})
        );
    }

    let items = json_items(&success(&render_file(
        "keras-multi-worker.yaml",
        &["-o", "json"],
    )));
    let pod = item(&items, "Pod", "multi-worker-worker-1");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(
        container["volumeMounts"],
        json!([{"mountPath": "/train", "name": "training"}])
    );
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "training", "persistentVolumeClaim": {"claimName": "strategy-volume"}}])
    );

    // simple.yaml asks for OnFailure, which pods get verbatim.
    let items = json_items(&success(&render_file("simple.yaml", &["-o", "json"])));
    for i in 0..2 {
        let pod = item(&items, "Pod", &format!("tfjob-simple-worker-{i}"));
        assert_eq!(pod["spec"]["restartPolicy"], "OnFailure");
        assert_eq!(
            pod["spec"]["containers"][0]["command"],
            json!([
                "python",
                "/opt/tf-mnist-with-summaries/mnist.py",
                "--epochs=1"
            ])
        );
    }
    assert_eq!(
        tf_config(&items, "tfjob-simple-worker-1").as_deref(),
        Some(
            r#"{"cluster":{"worker":["tfjob-simple-worker-0.kubeflow.svc:2222","tfjob-simple-worker-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
        )
    );
}

#[test]
fn render_single_replica_job_has_no_tf_config() {
    let items = json_items(&success(&render_file(
        "mnist-with-summaries.yaml",
        &["-o", "json"],
    )));
    assert_eq!(items.len(), 2);
    assert_eq!(tf_config(&items, "mnist-worker-0"), None);
    let pod = item(&items, "Pod", "mnist-worker-0");
    assert_eq!(
        pod["metadata"]["labels"]["training.kubeflow.org/job-role"],
        "master"
    );
}

#[test]
fn cluster_domain_flag_extends_host_names() {
    for args in [
        ["-o", "json", "--cluster-domain", "cluster.local"],
        ["-o", "json", "--cluster-domain=cluster.local", ""],
    ] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let items = json_items(&success(&render_file("dist-mnist.yaml", &args)));
        assert_eq!(
            tf_config(&items, "dist-mnist-for-e2e-test-worker-1").as_deref(),
            Some(
                r#"{"cluster":{"ps":["dist-mnist-for-e2e-test-ps-0.default.svc.cluster.local:2222","dist-mnist-for-e2e-test-ps-1.default.svc.cluster.local:2222"],"worker":["dist-mnist-for-e2e-test-worker-0.default.svc.cluster.local:2222","dist-mnist-for-e2e-test-worker-1.default.svc.cluster.local:2222","dist-mnist-for-e2e-test-worker-2.default.svc.cluster.local:2222","dist-mnist-for-e2e-test-worker-3.default.svc.cluster.local:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
            )
        );
        assert_eq!(
            tf_config(&items, "dist-mnist-for-e2e-test-ps-1").as_deref(),
            Some(dist_mnist_tf_config("ps", 1, ".cluster.local").as_str())
        );
    }
}

#[test]
fn cluster_domain_comes_from_the_environment() {
    let path = example("dist-mnist.yaml");
    let path = path.to_str().expect("UTF-8 path");
    let render_with_env = |value: &str, extra: &[&str]| {
        let mut cmd = render();
        cmd.args(["-f", path, "-o", "json"])
            .args(extra)
            .env("CUSTOM_CLUSTER_DOMAIN", value);
        json_items(&success(&run_with(cmd, None)))
    };

    let items = render_with_env("example.org", &[]);
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-worker-2").as_deref(),
        Some(dist_mnist_tf_config("worker", 2, ".example.org").as_str())
    );

    // The flag wins over the environment.
    let items = render_with_env("example.org", &["--cluster-domain", "cluster.local"]);
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-worker-2").as_deref(),
        Some(dist_mnist_tf_config("worker", 2, ".cluster.local").as_str())
    );

    // An empty variable means no domain.
    let items = render_with_env("", &[]);
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-worker-2").as_deref(),
        Some(dist_mnist_tf_config("worker", 2, "").as_str())
    );
}

#[test]
fn render_reads_standard_input() {
    for file in ["dist-mnist.yaml", "simple.yaml"] {
        let mut cmd = render();
        cmd.args(["-f", "-", "-o", "json"]);
        let from_stdin = success(&run_with(cmd, Some(&example_text(file))));
        let from_file = success(&render_file(file, &["-o", "json"]));
        assert_eq!(from_stdin, from_file, "{file}");
    }
    let mut cmd = render();
    cmd.args(["--filename", "-"]);
    let yaml = success(&run_with(cmd, Some(&example_text("simple.yaml"))));
    assert_eq!(yaml, success(&render_file("simple.yaml", &[])));
}

#[test]
fn render_accepts_json_input() {
    let job = json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "from-json", "namespace": "ml"},
        "spec": {"tfReplicaSpecs": {"Chief": {"restartPolicy": "ExitCode", "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "tf:2",
                            "ports": [{"name": "tfjob-port", "containerPort": 3333}]}]}}},
            "Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}},
    });
    let mut cmd = render();
    cmd.args(["-f", "-", "-o", "json"]);
    let items = json_items(&success(&run_with(cmd, Some(&job.to_string()))));
    assert_eq!(
        kinds_and_names(&items),
        expected_kinds_and_names("from-json", &[("chief", 1), ("worker", 1)])
    );
    let chief = item(&items, "Pod", "from-json-chief-0");
    assert_eq!(chief["spec"]["restartPolicy"], "Never");
    assert_eq!(
        chief["metadata"]["labels"]["training.kubeflow.org/job-role"],
        "master"
    );
    let worker = item(&items, "Pod", "from-json-worker-0");
    assert!(
        worker["metadata"]["labels"]
            .get("training.kubeflow.org/job-role")
            .is_none()
    );
    assert_eq!(
        tf_config(&items, "from-json-worker-0").as_deref(),
        Some(
            r#"{"cluster":{"chief":["from-json-chief-0.ml.svc:3333"],"worker":["from-json-worker-0.ml.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}"#
        )
    );
    assert_eq!(
        item(&items, "Service", "from-json-chief-0")["spec"]["ports"],
        json!([{"name": "tfjob-port", "port": 3333}])
    );
}

#[test]
fn render_renders_every_document_of_a_stream() {
    let stream = format!(
        "{}---\n{}\n---\n# only a comment\n---\n",
        example_text("dist-mnist.yaml"),
        example_text("simple.yaml")
    );
    let mut cmd = render();
    cmd.args(["-f", "-", "-o", "json"]);
    let items = json_items(&success(&run_with(cmd, Some(&stream))));
    let mut expected = expected_kinds_and_names(DIST_MNIST, &[("ps", 2), ("worker", 4)]);
    expected.extend(expected_kinds_and_names("tfjob-simple", &[("worker", 2)]));
    assert_eq!(kinds_and_names(&items), expected);
    assert_eq!(
        tf_config(&items, "dist-mnist-for-e2e-test-worker-1").as_deref(),
        Some(DIST_MNIST_WORKER_1)
    );

    // The same stream from a file, as YAML.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.yaml");
    std::fs::write(&path, &stream).expect("write stream");
    let yaml = success(&run_render(&["-f", path.to_str().expect("UTF-8 path")]));
    assert_eq!(yaml_items(&yaml), items);
}

#[test]
fn invalid_job_reports_every_problem_with_its_path() {
    let mut cmd = render();
    cmd.args(["-f", "-"]);
    let err = invalid(&run_with(cmd, Some(INVALID)));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    for (line, path) in lines.iter().zip([
        "metadata.name: ",
        "spec.tfReplicaSpecs[Launcher]: unknown replica type",
        "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: must be set",
    ]) {
        assert!(
            line.starts_with(&format!("error: -: document 1: {path}")),
            "{line:?} should name {path:?}"
        );
    }
    assert!(lines[0].contains("\"Bad_Name\""), "{err}");

    // The same from a file names the file.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, INVALID).expect("write job");
    let path = path.to_str().expect("UTF-8 path");
    let err = invalid(&run_render(&["-f", path, "-o", "json"]));
    assert_eq!(err.lines().count(), 3, "{err}");
    assert!(
        err.lines()
            .all(|l| l.starts_with(&format!("error: {path}: document 1: "))),
        "{err}"
    );
}

#[test]
fn bad_enum_values_are_reported_with_their_path() {
    let stream = "metadata: {name: a}\nspec:\n  runPolicy: {cleanPodPolicy: Sometimes}\n  tfReplicaSpecs:\n    Worker: {template: {spec: {containers: [{name: tensorflow, image: t}]}}}\n\
        ---\nmetadata: {name: b}\nspec:\n  successPolicy: SomeWorkers\n  tfReplicaSpecs:\n    Worker: {template: {spec: {containers: [{name: tensorflow, image: t}]}}}\n\
        ---\nmetadata: {name: c}\nspec:\n  tfReplicaSpecs:\n    Worker: {replicas: -1, template: {spec: {containers: [{name: main, image: t}]}}}\n";
    let mut cmd = render();
    cmd.args(["-f", "-", "-o", "json"]);
    let err = invalid(&run_with(cmd, Some(stream)));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[0].starts_with("error: -: document 1: spec.runPolicy.cleanPodPolicy: "),
        "{err}"
    );
    assert!(lines[0].contains("Sometimes"), "{err}");
    assert!(
        lines[1].starts_with("error: -: document 2: spec.successPolicy: "),
        "{err}"
    );
    assert!(lines[1].contains("SomeWorkers"), "{err}");
    assert!(
        lines[2].starts_with("error: -: document 3: spec.tfReplicaSpecs[Worker].replicas: "),
        "{err}"
    );
    assert!(
        lines[3].starts_with(
            "error: -: document 3: spec.tfReplicaSpecs[Worker].template.spec.containers: "
        ),
        "{err}"
    );
    assert!(lines[3].contains("\"tensorflow\""), "{err}");
}

#[test]
fn one_bad_document_fails_the_whole_stream() {
    let stream = format!(
        "{}---\n{INVALID}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\n",
        example_text("dist-mnist.yaml")
    );
    let mut cmd = render();
    cmd.args(["-f", "-"]);
    let err = invalid(&run_with(cmd, Some(&stream)));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[..3]
            .iter()
            .all(|l| l.starts_with("error: -: document 2: ")),
        "{err}"
    );
    assert!(
        lines[3].starts_with("error: -: document 3: kind is \"v1 Pod\""),
        "{err}"
    );
}

#[test]
fn unreadable_or_empty_input_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("no-such-job.yaml");
    let missing = missing.to_str().expect("UTF-8 path");
    let err = invalid(&run_render(&["-f", missing]));
    assert!(err.starts_with(&format!("error: {missing}: ")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let mut cmd = render();
    cmd.args(["-f", "-"]);
    let err = invalid(&run_with(cmd, Some("# nothing here\n---\n")));
    assert_eq!(err, "error: -: no TFJob found in the input\n");
}

#[test]
fn yaml_syntax_error_exits_2() {
    for text in [
        "spec: [unclosed\n",
        "metadata: {name: a}\nspec: {}\n---\n\tbad: [\n",
    ] {
        let mut cmd = render();
        cmd.args(["-f", "-"]);
        let err = invalid(&run_with(cmd, Some(text)));
        assert!(err.contains(": not valid YAML"), "{err}");
        let syntax_errors = err
            .lines()
            .filter(|l| l.contains(": not valid YAML"))
            .count();
        assert_eq!(syntax_errors, 1, "the syntax error is reported once: {err}");
    }
}

#[test]
fn huge_active_deadline_does_not_crash() {
    for seconds in ["9223372036854775807", "400000000000"] {
        let job = format!(
            "metadata: {{name: a}}\nspec:\n  runPolicy: {{activeDeadlineSeconds: {seconds}}}\n  tfReplicaSpecs:\n    Worker: {{template: {{spec: {{containers: [{{name: tensorflow, image: t}}]}}}}}}\n"
        );
        let mut cmd = render();
        cmd.args(["-f", "-"]);
        let out = run_with(cmd, Some(&job));
        assert!(
            matches!(out.status.code(), Some(0 | 2)),
            "activeDeadlineSeconds {seconds}: {:?}\n{}",
            out.status,
            text(&out.stderr)
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["render", "-f", "x.yaml", "-o", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    assert!(text(&out.stderr).contains("'xml'"), "{}", text(&out.stderr));

    let out = run(&["render"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--filename"),
        "{}",
        text(&out.stderr)
    );

    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn crd_prints_the_committed_crd() {
    let committed = std::fs::read_to_string(common::repo("deploy/crd/kubeflow.org_tfjobs.yaml"))
        .expect("deploy/crd/kubeflow.org_tfjobs.yaml is readable");
    let printed = success(&run(&["crd"]));
    assert_eq!(printed, committed);
    let crd: serde_yaml_ng::Value = serde_yaml_ng::from_str(&printed).expect("CRD is YAML");
    assert_eq!(crd["kind"].as_str(), Some("CustomResourceDefinition"));
    assert_eq!(
        crd["metadata"]["name"].as_str(),
        Some("tfjobs.kubeflow.org")
    );
}

#[test]
fn version_and_help() {
    let version = success(&run(&["--version"]));
    assert_eq!(
        version,
        format!("tfjob-operator {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(success(&run(&["-V"])), version);

    let help = success(&run(&["--help"]));
    assert!(
        help.starts_with("Runs Kubeflow TFJobs (kubeflow.org/v1) on Kubernetes"),
        "{help}"
    );
    for word in ["Usage: tfjob-operator", "render", "crd", "run", "Examples:"] {
        assert!(help.contains(word), "--help mentions {word:?}:\n{help}");
    }
    assert_eq!(success(&run(&["help"])), help);

    let render_help = success(&run(&["render", "--help"]));
    for word in [
        "--filename <FILE>",
        "--cluster-domain <DOMAIN>",
        "CUSTOM_CLUSTER_DOMAIN",
        "--output <OUTPUT>",
        "yaml",
        "json",
        "Exit status: 0 on success, 2",
    ] {
        assert!(
            render_help.contains(word),
            "render --help mentions {word:?}:\n{render_help}"
        );
    }
    let run_help = success(&run(&["run", "--help"]));
    for word in ["--namespace", "--threads", "--metrics-addr", "--kubeconfig"] {
        assert!(
            run_help.contains(word),
            "run --help mentions {word:?}:\n{run_help}"
        );
    }
}

/// The commands the README and `docs/policies.md` show that need no cluster run as written,
/// from the repository root, and print what they say they print. (Every documented command
/// parses: the binary's `doc_commands` test.)
#[test]
fn the_readmes_commands_without_a_cluster_run() {
    let readme = std::fs::read_to_string(common::repo("README.md")).unwrap();
    let policies = std::fs::read_to_string(common::repo("docs/policies.md")).unwrap();
    for (page, text, shown, args, expect) in [
        (
            "README.md",
            &readme,
            "cargo run -p tfjob-operator -- render -f tests/data/kubeflow/dist-mnist.yaml\n",
            &["render", "-f", "tests/data/kubeflow/dist-mnist.yaml"][..],
            "kind: Pod",
        ),
        (
            "README.md",
            &readme,
            "cargo run -p tfjob-operator -- render -f tests/data/kubeflow/dist-mnist.yaml -o json\n",
            &[
                "render",
                "-f",
                "tests/data/kubeflow/dist-mnist.yaml",
                "-o",
                "json",
            ],
            "\"kind\": \"Service\"",
        ),
        (
            "README.md",
            &readme,
            "cargo run -p tfjob-operator -- crd\n",
            &["crd"],
            "kind: CustomResourceDefinition",
        ),
        (
            "docs/policies.md",
            &policies,
            "tfjob-operator render -f deploy/examples/gpu-mnist.yaml          # with the policies\n",
            &["render", "-f", "deploy/examples/gpu-mnist.yaml"],
            "policy.tfjob.dev/policies",
        ),
        (
            "docs/policies.md",
            &policies,
            "tfjob-operator render -f deploy/examples/gpu-mnist.yaml --no-policies\n",
            &[
                "render",
                "-f",
                "deploy/examples/gpu-mnist.yaml",
                "--no-policies",
            ],
            "kind: Pod",
        ),
    ] {
        assert!(text.contains(shown), "{page} no longer shows {shown:?}");
        let mut cmd = operator();
        cmd.args(args).current_dir(common::repo(""));
        let out = success(&run_with(cmd, None));
        assert!(out.contains(expect), "{page}: {shown}: {out}");
    }
}
