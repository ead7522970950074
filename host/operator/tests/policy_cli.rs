//! End-to-end tests of `tfjob-operator policy test` and `policy inspect`.
//!
//! Every test runs the built binary as a child process, the way a platform team would while
//! writing a policy: the classification suite of the default classifier
//! (`guest-policies/classify/tests/classification.yaml`), case by case, through the
//! embedded default policy, settings inline and from a file, decoration with a job context,
//! resource overrides of one container, every kind of error (exit status 2, a clear message on
//! stderr, nothing on stdout), a hostile policy stopped by the sandbox and the guard, and
//! `inspect` of a policy module.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;

use common::{text, write};

/// Longest a single invocation may take before the test gives up on it.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the binary with `args` under the memory limit and collects its output; kills it and
/// fails the test after [`TIMEOUT`].
fn run(args: &[&str]) -> Output {
    let mut cmd = common::limited();
    cmd.args(args);
    common::run(cmd, None, TIMEOUT)
}

/// Asserts exit status 0 and an empty stderr; returns stdout parsed as JSON.
fn success(args: &[&str]) -> Value {
    let stdout = common::expect_success(&run(args), &format!("{args:?}"));
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}):\n{stdout}"))
}

/// Asserts exit status 2, an empty stdout and an error on stderr; returns stderr.
fn failure(args: &[&str]) -> String {
    let stderr = common::expect_failure(&run(args), &format!("{args:?}"));
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    stderr
}

/// The pods of the classification suite.
fn pods_dir() -> PathBuf {
    common::repo("guest-policies/classify/tests/pods")
}

/// A pod of the classification suite, or `worker.yaml` (a pod before any policy).
fn pod(file: &str) -> String {
    let path = match file {
        "worker.yaml" => common::repo("tests/data/pods/worker.yaml"),
        _ => pods_dir().join(file),
    };
    assert!(path.exists(), "{}", path.display());
    path.to_str().expect("UTF-8 path").to_owned()
}

/// `policy test` of the default policy for `hook` on a pod file, with extra flags.
fn policy_test(hook: &str, file: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["policy", "test", "--policy", "default", "--hook", hook]
        .map(String::from)
        .to_vec();
    args.extend(["--input".to_owned(), pod(file)]);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// classify
// ---------------------------------------------------------------------------------------------

/// A case of the classification suite, as far as a single `policy test` runs it.
#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    settings: Option<Value>,
    input: CaseInput,
    expect: CaseExpect,
}

#[derive(Debug, Deserialize)]
struct CaseInput {
    pod: String,
    now: String,
}

#[derive(Debug, Deserialize)]
struct CaseExpect {
    result: Value,
}

#[derive(Debug, Deserialize)]
struct Suite {
    cases: Vec<Case>,
}

fn cases() -> Vec<Case> {
    let path = common::repo("guest-policies/classify/tests/classification.yaml");
    let text = std::fs::read_to_string(&path).expect("the classification suite");
    let suite: Suite = serde_yaml_ng::from_str(&text).expect("the classification suite parses");
    suite.cases
}

/// What `policy test --hook classify` prints for a verdict: phase, reason and message always,
/// kind on failures only.
fn printed(expect: &Value) -> Value {
    let mut out = json!({
        "phase": expect["phase"],
        "reason": expect.get("reason").cloned().unwrap_or(json!("")),
        "message": expect.get("message").cloned().unwrap_or(json!("")),
    });
    if let Some(kind) = expect.get("kind") {
        out["kind"] = kind.clone();
    }
    out
}

#[test]
fn classify_reproduces_every_case_of_the_table() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let mut extra = vec!["--now".to_owned(), case.input.now.clone()];
        if let Some(settings) = &case.settings {
            extra.extend(["--settings".to_owned(), settings.to_string()]);
        }
        let file = case.input.pod.strip_prefix("pods/").expect("pods/");
        let args = policy_test("classify", file, &refs(&extra));
        let output = run(&refs(&args));
        if output.status.code() != Some(0) || !output.stderr.is_empty() {
            failures.push(format!(
                "{}: exit {:?}, stderr {}",
                case.name,
                output.status.code(),
                text(&output.stderr)
            ));
            continue;
        }
        let out: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
        let expected = printed(&case.expect.result);
        if out != expected {
            failures.push(format!(
                "{}: printed\n  {out}\nexpected\n  {expected}",
                case.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_default_can_be_named() {
    let now = ["--now", "2026-01-01T01:00:00Z"];
    let by_hook = success(&refs(&policy_test(
        "classify",
        "failed-sigkill-137.yaml",
        &now,
    )));
    let mut args = policy_test("classify", "failed-sigkill-137.yaml", &now);
    args[3] = "default:default-classify".into();
    assert_eq!(success(&refs(&args)), by_hook);
    assert_eq!(by_hook["phase"], "retryable-failure");
    assert_eq!(by_hook["kind"], "system");
}

#[test]
fn settings_inline_or_from_a_file_change_the_verdict() {
    let now = ["--now", "2026-01-01T00:01:30Z"];
    let file = "pending-image-pull-backoff.yaml";
    let out = success(&refs(&policy_test("classify", file, &now)));
    assert_eq!(out["phase"], "initializing", "{out}");
    assert!(out.get("kind").is_none(), "{out}");

    let expected = json!({
        "phase": "retryable-failure",
        "reason": "ContainersNotReady|ImagePullBackOff",
        "message": "Grace period [30s] exceeded|containers with unready status: [tensorflow]|Back-off pulling image \"tensorflow/tensorflow:2.15.0\"",
        "kind": "user"
    });
    let inline = [
        now[0],
        now[1],
        "--settings",
        r#"{"imagePullBackoffGracePeriod":"30s"}"#,
    ];
    assert_eq!(
        success(&refs(&policy_test("classify", file, &inline))),
        expected
    );

    let dir = tempfile::tempdir().unwrap();
    for (name, contents) in [
        ("settings.yaml", "imagePullBackoffGracePeriod: 30s\n"),
        ("settings.json", r#"{"imagePullBackoffGracePeriod": "30s"}"#),
    ] {
        let at_file = format!("@{}", write(dir.path(), name, contents.as_bytes()));
        let args = policy_test("classify", file, &[now[0], now[1], "--settings", &at_file]);
        assert_eq!(success(&refs(&args)), expected, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// decorate and resources
// ---------------------------------------------------------------------------------------------

fn env_of(pod: &Value, list: &str, i: usize) -> Vec<(String, String)> {
    pod["spec"][list][i]["env"]
        .as_array()
        .unwrap_or_else(|| panic!("no env on {list}[{i}]: {pod}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn execution_env(values: [&str; 6]) -> Vec<(String, String)> {
    [
        "TFJOB_NAME",
        "TFJOB_NAMESPACE",
        "TFJOB_UID",
        "TFJOB_REPLICA_TYPE",
        "TFJOB_REPLICA_INDEX",
        "TFJOB_ATTEMPT",
    ]
    .into_iter()
    .zip(values)
    .map(|(n, v)| (n.to_owned(), v.to_owned()))
    .collect()
}

#[test]
fn decorate_prints_the_pod_with_the_execution_env_of_the_context() {
    let out = success(&refs(&policy_test("decorate", "worker.yaml", &[])));
    let defaults = execution_env([
        "test-job",
        "default",
        "00000000-0000-0000-0000-000000000000",
        "Worker",
        "0",
        "0",
    ]);
    assert_eq!(env_of(&out, "initContainers", 0), defaults);
    assert_eq!(env_of(&out, "containers", 1), defaults);
    // The container's own variable first; the GPU container gets the driver's after these.
    let mut tensorflow = vec![("TF_CPP_MIN_LOG_LEVEL".to_owned(), "2".to_owned())];
    tensorflow.extend(defaults);
    assert_eq!(env_of(&out, "containers", 0)[..7], tensorflow);
    // The rest of the pod is printed as given.
    assert_eq!(out["metadata"]["name"], "mnist-worker-0");
    assert_eq!(
        out["spec"]["containers"][0]["image"],
        "tensorflow/tensorflow:2.15.0-gpu"
    );
    assert_eq!(
        out["spec"]["containers"][0]["resources"],
        json!({"limits": {"gpu": "1", "memory": "1024Mi"}, "requests": {"cpu": "0.5"}})
    );

    let dir = tempfile::tempdir().unwrap();
    let context = write(
        dir.path(),
        "context.yaml",
        b"jobName: mnist\nnamespace: ml\njobUid: 6f1c3a52-9d1e-4f0b-8a57-0c9d2e1b7a44\nreplicaType: PS\nreplicaIndex: 1\nreplicaCount: 2\nattempt: 3\n",
    );
    let out = success(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &["--context", &context],
    )));
    assert_eq!(
        env_of(&out, "containers", 1),
        execution_env([
            "mnist",
            "ml",
            "6f1c3a52-9d1e-4f0b-8a57-0c9d2e1b7a44",
            "PS",
            "1",
            "3"
        ])
    );

    // Settings reach the policy.
    let out = success(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &[
            "--settings",
            r#"{"defaultEnvVars": {"DATA_DIR": "/data"}, "schedulerName": "volcano"}"#,
        ],
    )));
    assert_eq!(
        env_of(&out, "containers", 1).last().unwrap(),
        &("DATA_DIR".to_owned(), "/data".to_owned())
    );
    assert_eq!(out["spec"]["schedulerName"], "volcano");

    // A context with a misspelt field is refused, naming it.
    let bad = write(dir.path(), "bad-context.yaml", b"jobname: mnist\n");
    let err = failure(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &["--context", &bad],
    )));
    assert!(
        err.contains("bad-context.yaml") && err.contains("jobname"),
        "{err}"
    );
}

#[test]
fn the_default_decoration_runs_as_the_operator_runs_it() {
    // Without --settings, the operator's own settings of the default: GPU containers (here
    // asking for `gpu`) get the driver mount and the GPU toleration.
    let out = success(&refs(&policy_test("decorate", "worker.yaml", &[])));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "nvidia-driver", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}])
    );
    assert_eq!(
        out["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": true}])
    );
    assert!(out["spec"]["containers"][1].get("volumeMounts").is_none());
    assert_eq!(
        out["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // Settings given replace them; the default declares the host paths they use, which the
    // operator's ceiling must allow, as `run` would need `--policy-allow-host-path`.
    let cuda = r#"{"accelerators": {"gpu": {"volumes": [{"name": "cuda", "hostPath": "/opt/cuda", "mountPath": "/usr/local/cuda"}]}}}"#;
    let err = failure(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &["--settings", cuda],
    )));
    assert!(err.contains("capabilities.hostPaths[0]"), "{err}");
    assert!(err.contains("/opt/cuda"), "{err}");
    let out = success(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &["--settings", cuda, "--policy-allow-host-path", "/opt"],
    )));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "cuda", "hostPath": {"path": "/opt/cuda"}}])
    );
    assert!(out["spec"].get("tolerations").is_none(), "{out}");
    // `{}` is the policy's own defaults: the execution environment only.
    let out = success(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &["--settings", "{}"],
    )));
    assert!(out["spec"].get("volumes").is_none(), "{out}");
    // A policy file gets no such allowance.
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "decorate.wasm",
        tfjob_policy_engine::defaults::find("default-decorate")
            .unwrap()
            .wasm,
    );
    let err = failure(&[
        "policy",
        "test",
        "--policy",
        &file,
        "--hook",
        "decorate",
        "--input",
        &pod("worker.yaml"),
        "--settings",
        r#"{"accelerators": {"gpu": {"volumes": [{"name": "cuda", "hostPath": "/opt/cuda", "mountPath": "/usr/local/cuda"}]}}}"#,
    ]);
    assert!(err.contains("guard-violation"), "{err}");
    assert!(err.contains("spec.volumes[0].hostPath"), "{err}");
    // Its manifest declares the host path, and the ceiling allows it.
    let manifest = write(
        dir.path(),
        "policy.yaml",
        b"hooks: [decorate]\ncapabilities: {hostPaths: [/opt/cuda]}\n",
    );
    let out = success(&[
        "policy",
        "test",
        "--policy",
        &file,
        "--hook",
        "decorate",
        "--input",
        &pod("worker.yaml"),
        "--settings",
        r#"{"accelerators": {"gpu": {"volumes": [{"name": "cuda", "hostPath": "/opt/cuda", "mountPath": "/usr/local/cuda"}]}}}"#,
        "--manifest",
        &manifest,
        "--policy-allow-host-path",
        "/opt/cuda",
    ]);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "cuda", "hostPath": {"path": "/opt/cuda"}}])
    );
}

#[test]
fn resources_prints_the_requirements_of_one_container() {
    // The first container by default.
    let out = success(&refs(&policy_test("resources", "worker.yaml", &[])));
    assert_eq!(
        out,
        json!({
            "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
        })
    );
    let out = success(&refs(&policy_test(
        "resources",
        "worker.yaml",
        &["--container", "log-shipper"],
    )));
    assert_eq!(
        out,
        json!({"limits": {"cpu": "1", "memory": "64Mi"}, "requests": {"cpu": "1", "memory": "64Mi"}})
    );
    let out = success(&refs(&policy_test(
        "resources",
        "worker.yaml",
        &[
            "--container",
            "log-shipper",
            "--settings",
            r#"{"limits": {"cpu": "250m"}}"#,
        ],
    )));
    assert_eq!(out["requests"]["cpu"], "250m");
    assert_eq!(out["limits"]["cpu"], "250m");

    let err = failure(&refs(&policy_test(
        "resources",
        "worker.yaml",
        &["--container", "sidecar"],
    )));
    assert!(err.contains("--container \"sidecar\""), "{err}");
}

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    let running = "running.yaml";
    let now = ["--now", "2026-01-01T00:00:00Z"];

    let mut args = policy_test("classify", running, &now);
    args[3] = "default:default-clasify".into();
    let err = failure(&refs(&args));
    assert!(
        err.contains("no default policy \"default-clasify\""),
        "{err}"
    );
    assert!(
        err.contains("default-classify"),
        "lists the defaults: {err}"
    );

    let err = failure(&refs(&policy_test(
        "classify",
        running,
        &["--now", "yesterday"],
    )));
    assert!(err.contains("--now \"yesterday\": not RFC 3339"), "{err}");

    let missing = pods_dir().join("no-such-pod.yaml");
    let missing = missing.to_str().unwrap();
    let args = [
        "policy", "test", "--policy", "default", "--hook", "classify", "--input", missing,
    ];
    let err = failure(&args);
    assert!(err.contains(missing), "{err}");

    let err = failure(&refs(&policy_test(
        "classify",
        running,
        &[
            now[0],
            now[1],
            "--settings",
            r#"{"imagePullBackoffGracePeriod": "soon"}"#,
        ],
    )));
    assert!(
        err.contains("--settings rejected by default-classify"),
        "{err}"
    );
    assert!(err.contains("imagePullBackoffGracePeriod"), "{err}");
    assert!(err.contains("\"soon\""), "{err}");

    let err = failure(&refs(&policy_test(
        "classify",
        running,
        &[now[0], now[1], "--settings", "{not json"],
    )));
    assert!(err.contains("--settings: not valid JSON"), "{err}");

    let err = failure(&refs(&policy_test(
        "decorate",
        "worker.yaml",
        &[
            "--settings",
            r#"{"defaultTolerations": [{"key": "a", "operator": "In"}]}"#,
        ],
    )));
    assert!(
        err.contains("defaultTolerations[0].operator: \"In\" is not one of"),
        "{err}"
    );
}

fn hostile_file(dir: &Path) -> String {
    write(dir, "hostile.wasm", HOSTILE_POLICY_WASM)
}

#[test]
fn a_hostile_policy_is_stopped_by_the_sandbox_and_the_guard() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = hostile_file(dir.path());
    let worker = pod("worker.yaml");
    let hostile_test = |hook: &str, settings: &str| -> Vec<String> {
        [
            "policy",
            "test",
            "--policy",
            &hostile,
            "--hook",
            hook,
            "--input",
            &worker,
            "--settings",
            settings,
            "--now",
            "2026-01-01T00:00:00Z",
        ]
        .map(String::from)
        .to_vec()
    };

    for hook in ["decorate", "classify"] {
        let err = failure(&refs(&hostile_test(hook, r#"{"mode":"loop"}"#)));
        assert!(err.contains("timeout"), "{hook}: {err}");
    }

    let err = failure(&refs(&hostile_test(
        "decorate",
        r#"{"mode":"change-image"}"#,
    )));
    assert!(err.contains("guard-violation"), "{err}");
    assert!(err.contains("spec.containers[0].image"), "{err}");

    let err = failure(&refs(&hostile_test("decorate", r#"{"mode":"teleport"}"#)));
    assert!(err.contains("--settings rejected by hostile"), "{err}");

    // A guest blocked in WASI (sleep, poll) is stopped at its deadline: the command ends at
    // once with the reason, instead of after the hour the guest asked for.
    for mode in ["sleep", "poll"] {
        for hook in ["decorate", "resources", "classify"] {
            let started = std::time::Instant::now();
            let err = failure(&refs(&hostile_test(
                hook,
                &format!(r#"{{"mode":"{mode}"}}"#),
            )));
            assert!(err.contains("timeout"), "{mode} {hook}: {err}");
            assert!(
                err.contains("may not block past its deadline"),
                "{mode} {hook}: {err}"
            );
            // Process start and compilation included; the guest alone would take an hour.
            assert!(started.elapsed() < Duration::from_secs(60), "{mode} {hook}");
        }
    }
    let err = failure(&refs(&hostile_test(
        "decorate",
        r#"{"mode":"sleep-in-settings"}"#,
    )));
    assert!(err.contains("--settings rejected by hostile"), "{err}");
    assert!(err.contains("timeout"), "{err}");

    // The operator's own fields, whatever the policy: the replica index label.
    let err = failure(&refs(&hostile_test(
        "decorate",
        r#"{"mode":"edit","path":"/metadata/labels/training.kubeflow.org~1replica-index","value":"9"}"#,
    )));
    assert!(err.contains("guard-violation"), "{err}");
    assert!(
        err.contains("metadata.labels[training.kubeflow.org/replica-index]"),
        "{err}"
    );

    // A verdict that contradicts the pod.
    let running = pod("running.yaml");
    let mut args = hostile_test("classify", r#"{"mode":"verdict","phase":"succeeded"}"#);
    args[7] = running;
    let err = failure(&refs(&args));
    assert!(err.contains("invalid-output"), "{err}");
    assert!(
        err.contains("verdict succeeded contradicts the pod"),
        "{err}"
    );

    // Well-behaved, the same module runs.
    let out = success(&refs(&hostile_test("decorate", r#"{"mode":"ok"}"#)));
    assert_eq!(
        out["spec"]["containers"][0]["image"],
        "tensorflow/tensorflow:2.15.0-gpu"
    );
}

// ---------------------------------------------------------------------------------------------
// inspect
// ---------------------------------------------------------------------------------------------

#[test]
fn inspect_describes_a_policy_module() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = hostile_file(dir.path());
    let out = success(&["policy", "inspect", &hostile]);
    assert_eq!(out["file"], hostile.as_str());
    assert_eq!(out["size"], HOSTILE_POLICY_WASM.len());
    let sha = out["sha256"].as_str().expect("sha256 is a string");
    assert_eq!(sha.len(), 64, "{sha}");
    assert!(
        sha.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "{sha}"
    );
    assert_eq!(sha, hex::encode(Sha256::digest(HOSTILE_POLICY_WASM)));
    assert_eq!(out["hooks"], json!(["decorate", "resources", "classify"]));
    assert_eq!(out["validatesSettings"], true);
    // With its manifest: what it declares, and what the ceiling grants of it.
    let manifest = write(
        dir.path(),
        "policy.yaml",
        b"hooks: [decorate]\ncapabilities: {secrets: true, hostPaths: [/home/kubernetes/bin/nvidia/lib64]}\n",
    );
    let out = success(&["policy", "inspect", &hostile, "--manifest", &manifest]);
    assert_eq!(out["capabilities"]["declared"]["secrets"], true);
    let refused = out["capabilities"]["granted"]["refused"].as_str().unwrap();
    assert!(refused.contains("capabilities.secrets"), "{refused}");
    let out = success(&[
        "policy",
        "inspect",
        &hostile,
        "--manifest",
        &manifest,
        "--policy-allow",
        "secrets",
    ]);
    assert_eq!(
        out["capabilities"]["granted"],
        json!({"secrets": true, "hostPaths": ["/home/kubernetes/bin/nvidia/lib64"]})
    );
    let exports: Vec<&str> = out["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    for interface in [
        "tfjob:policy/decorate@0.3.0",
        "tfjob:policy/resources@0.3.0",
        "tfjob:policy/classify@0.3.0",
    ] {
        assert!(exports.contains(&interface), "{exports:?}");
    }
    assert!(out["imports"].is_array(), "{out}");
}

#[test]
fn inspect_shows_the_cluster_reads_declared_and_granted_under_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = hostile_file(dir.path());
    let manifest = write(
        dir.path(),
        "policy.yaml",
        b"hooks: [decorate]\nreads: [{resource: namespaces}, {resource: configmaps, scope: job-namespace}]\n",
    );
    let inspect = |extra: &[&str]| {
        let mut args = vec!["policy", "inspect", &hostile, "--manifest", &manifest];
        args.extend_from_slice(extra);
        success(&args)
    };
    let out = inspect(&[]);
    assert_eq!(
        out["reads"]["declared"],
        json!([{"resource": "namespaces"}, {"resource": "configmaps", "scope": "job-namespace"}])
    );
    let refused = out["reads"]["granted"]["refused"].as_str().unwrap();
    assert_eq!(
        refused,
        "manifest field reads[1].resource: configmaps is not readable by cluster-wide policies: \
         the operator allows namespaces, nodes (--policy-allow-read)"
    );
    let out = inspect(&[
        "--policy-allow-read",
        "namespaces",
        "--policy-allow-read",
        "configmaps",
    ]);
    assert_eq!(
        out["reads"]["granted"],
        json!(["namespaces", "configmaps(job-namespace)"])
    );
    // A flag naming what policies never read stops the command, naming the flag.
    let err = failure(&[
        "policy",
        "inspect",
        &hostile,
        "--manifest",
        &manifest,
        "--policy-allow-read",
        "secrets",
    ]);
    assert!(
        err.contains("--policy-allow-read: \"secrets\" is never readable"),
        "{err}"
    );
}

#[test]
fn inspect_refuses_what_is_not_a_policy_module() {
    let dir = tempfile::tempdir().unwrap();
    let not_wasm = write(dir.path(), "pod.wasm", b"apiVersion: v1\nkind: Pod\n");
    let err = failure(&["policy", "inspect", &not_wasm]);
    assert!(err.contains(&not_wasm), "{err}");
    assert!(err.contains("link"), "{err}");

    let missing = dir.path().join("missing.wasm");
    let err = failure(&["policy", "inspect", missing.to_str().unwrap()]);
    assert!(err.contains("missing.wasm"), "{err}");
}
