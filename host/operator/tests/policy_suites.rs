//! End-to-end tests of `tfjob-operator policy test --suite`, run as a platform team's CI runs
//! it: the built binary, a suite file, and its exit status and report.
//!
//! A deliberately hostile policy and the embedded defaults produce every kind of outcome: each
//! expectation kind (whole result, fields, paths, verdict, each failure category) passes where
//! it should and fails with a diff of expected and actual where it should not; the JSON and
//! JUnit reports are parsed and checked; a suite that cannot run exits 2 naming the file and
//! the field.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;

use common::{text, write};

const TIMEOUT: Duration = Duration::from_secs(300);

fn run(args: &[&str]) -> Output {
    let mut cmd = common::limited();
    cmd.args(args);
    common::run(cmd, None, TIMEOUT)
}

/// Runs the suite `file` with `extra` arguments; returns exit status and stdout, after checking
/// that stderr is empty unless the suite could not run.
fn suite(file: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["policy", "test", "--suite", file];
    args.extend(extra);
    let out = run(&args);
    let code = out.status.code().expect("exit status");
    if code != 2 {
        assert_eq!(text(&out.stderr), "", "{args:?}");
    }
    (code, text(&out.stdout))
}

/// A directory with the hostile module and a worker pod, for suites to name.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hostile.wasm", HOSTILE_POLICY_WASM);
    write(
        dir.path(),
        "worker.yaml",
        &std::fs::read(common::repo("tests/data/pods/worker.yaml")).unwrap(),
    );
    dir
}

const PASSING: &str = r#"
policy: hostile.wasm
now: "2026-01-01T00:00:00Z"
context: {jobName: mnist, namespace: ml}
cases:
- name: whole result of a resources call
  hook: resources
  settings: {mode: ok}
  input: {pod: worker.yaml, container: log-shipper}
  expect:
    result: {requests: {memory: 64Mi}}
- name: fields of a decorated pod
  hook: decorate
  settings: {mode: edit, path: /metadata/labels/team, value: ml}
  input: {pod: worker.yaml}
  expect:
    fields:
      metadata: {labels: {team: ml}}
      spec: {containers: [{name: tensorflow}, {name: log-shipper}]}
- name: values at paths, null for absent
  hook: decorate
  settings: {mode: edit, path: /spec/schedulerName, value: volcano}
  input: {pod: worker.yaml}
  expect:
    paths:
      spec.schedulerName: volcano
      /spec/containers/0/name: tensorflow
      spec.priorityClassName: null
- name: a verdict
  hook: classify
  settings: {mode: verdict, phase: queued}
  input:
    pod: {metadata: {name: p}, status: {phase: Pending}}
  expect:
    verdict: {phase: queued}
- name: guard-violation
  hook: decorate
  settings: {mode: change-image}
  input: {pod: worker.yaml}
  expect:
    failure: {category: guard-violation, message: "spec.containers[0].image"}
- name: timeout
  hook: classify
  settings: {mode: loop}
  input: {pod: worker.yaml}
  expect: {failure: timeout}
- name: invalid-settings
  hook: decorate
  settings: {mode: teleport}
  input: {pod: worker.yaml}
  expect: {failure: {category: invalid-settings, message: mode}}
- name: invalid-output, a verdict that contradicts the pod
  hook: classify
  settings: {mode: verdict, phase: succeeded}
  input:
    pod: {metadata: {name: p}, status: {phase: Running}}
  expect: {failure: {category: invalid-output, message: contradicts the pod}}
- name: trap
  hook: resources
  settings: {mode: panic}
  input: {pod: worker.yaml}
  expect: {failure: trap}
- name: memory, a pod larger than the sandbox takes
  hook: decorate
  settings: {mode: ok}
  input: {pod: big.yaml}
  expect: {failure: {category: memory, message: input limit}}
"#;

#[test]
fn every_expectation_kind_passes_against_the_sandbox() {
    let dir = workspace();
    let big = format!(
        "metadata: {{name: big, annotations: {{padding: \"{}\"}}}}\nspec: {{containers: [{{name: tf, image: tf}}]}}\n",
        "x".repeat(1 << 20)
    );
    write(dir.path(), "big.yaml", big.as_bytes());
    let file = write(dir.path(), "suite.yaml", PASSING.as_bytes());
    let (code, out) = suite(&file, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("\n10 passed, 0 failed\n"), "{out}");
    for line in out.lines().skip(1).take(10) {
        assert!(line.starts_with("ok "), "{line}\n{out}");
    }
    // The same through JSON: every case passed, each with the module's name and digest.
    let (code, out) = suite(&file, &["-o", "json"]);
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["passed"], 10);
    let label = report["cases"][0]["policy"].as_str().unwrap();
    assert!(
        label.starts_with("hostile@") && label.len() == "hostile@".len() + 12,
        "{label}"
    );
}

const FAILING: &str = r#"
policy: hostile.wasm
hook: decorate
settings: {mode: edit, path: /metadata/labels/team, value: ml}
cases:
- name: passes
  input: {pod: worker.yaml}
  expect: {paths: {metadata.labels.team: ml}}
- name: wrong label
  input: {pod: worker.yaml}
  expect:
    fields: {metadata: {labels: {team: vision, tier: gold}}}
- name: a failure where a result comes
  input: {pod: worker.yaml}
  expect: {failure: guard-violation}
- name: a result where a failure comes
  settings: {mode: change-image}
  input: {pod: worker.yaml}
  expect: {paths: {metadata.name: mnist-worker-0}}
- name: another failure
  settings: {mode: loop}
  input: {pod: worker.yaml}
  expect: {failure: {category: guard-violation, message: image}}
"#;

#[test]
fn failing_cases_exit_1_with_a_diff_of_expected_and_actual() {
    let dir = workspace();
    let file = write(dir.path(), "suite.yaml", FAILING.as_bytes());
    let (code, out) = suite(&file, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.ends_with("\n1 passed, 4 failed\n"), "{out}");
    assert!(
        out.contains("FAILED wrong label (decorate, hostile@"),
        "{out}"
    );
    assert!(
        out.contains(
            "expected (-), actual (+):\n  - metadata.labels.team: \"vision\"\n  + metadata.labels.team: \"ml\"\n  - metadata.labels.tier: \"gold\"\n  + metadata.labels.tier: (absent)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("  - failure guard-violation\n  + a result: {\"apiVersion\":\"v1\""),
        "{out}"
    );
    assert!(
        out.contains("  - a result\n  + failure guard-violation: policy hostile may not change spec.containers[0].image\n"),
        "{out}"
    );
    assert!(
        out.contains("  - failure guard-violation with a message containing \"image\"\n  + failure timeout: deadline of 50ms exceeded"),
        "{out}"
    );

    let (code, out) = suite(&file, &["-o", "json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(1), Some(4))
    );
    let wrong = &report["cases"][1];
    assert_eq!(wrong["passed"], false);
    assert_eq!(
        wrong["differences"],
        serde_json::json!([
            {"path": "metadata.labels.team", "expected": "vision", "actual": "ml"},
            {"path": "metadata.labels.tier", "expected": "gold"}
        ])
    );
    assert_eq!(
        wrong["actual"]["result"]["metadata"]["labels"]["team"],
        "ml"
    );
    assert_eq!(
        report["cases"][4]["actual"]["failure"]["category"],
        "timeout"
    );
}

#[test]
fn junit_output_is_xml_a_ci_system_reads() {
    let dir = workspace();
    let file = write(dir.path(), "suite.yaml", FAILING.as_bytes());
    let (code, xml) = suite(&file, &["-o", "junit"]);
    assert_eq!(code, 1);
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("5"));
    assert_eq!(root.attribute("failures"), Some("4"));
    let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
    assert_eq!(suites.len(), 1);
    let s = suites[0];
    assert_eq!(s.tag_name().name(), "testsuite");
    assert_eq!(s.attribute("name"), Some(file.as_str()));
    for attr in ["tests", "failures", "errors", "skipped", "time"] {
        assert!(s.attribute(attr).is_some(), "testsuite has no {attr}");
    }
    let cases: Vec<_> = s.children().filter(|n| n.is_element()).collect();
    assert_eq!(cases.len(), 5);
    for c in &cases {
        assert_eq!(c.tag_name().name(), "testcase");
        assert!(c.attribute("classname").unwrap().starts_with("hostile@"));
        let t: f64 = c.attribute("time").unwrap().parse().unwrap();
        assert!(t >= 0.0);
    }
    assert_eq!(cases[0].attribute("name"), Some("passes"));
    assert!(cases[0].children().all(|n| !n.is_element()));
    let failures: Vec<_> = cases
        .iter()
        .filter_map(|c| c.children().find(|n| n.has_tag_name("failure")))
        .collect();
    assert_eq!(failures.len(), 4);
    assert!(
        failures[0]
            .text()
            .unwrap()
            .contains("- metadata.labels.team: \"vision\"\n+ metadata.labels.team: \"ml\"\n"),
        "{xml}"
    );
    assert_eq!(
        failures[3].attribute("message"),
        Some("failure timeout: deadline of 50ms exceeded")
    );
}

#[test]
fn names_with_control_characters_stay_printable_and_the_xml_well_formed() {
    let dir = workspace();
    let file = write(
        dir.path(),
        "suite.yaml",
        "policy: hostile.wasm\nhook: decorate\ncases:\n- name: \"\\e[2J\\0 <x> & \\u202e\"\n  input: {pod: worker.yaml}\n  expect: {failure: timeout}\n"
            .as_bytes(),
    );
    let (code, out) = suite(&file, &[]);
    assert_eq!(code, 1);
    assert!(!out.contains('\u{1b}') && !out.contains('\0'), "{out:?}");
    assert!(out.contains("\\u{1b}[2J\\u{0} <x> & \\u{202e}"), "{out}");
    let (_, xml) = suite(&file, &["-o", "junit"]);
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .unwrap();
    assert_eq!(
        case.attribute("name"),
        Some("\\u{1b}[2J\\u{0} <x> & \u{202e}")
    );
}

#[test]
fn the_policy_comes_from_the_command_line_or_the_suite() {
    let dir = workspace();
    let body = "hook: classify\nnow: \"2026-01-01T00:00:00Z\"\ncases:\n- name: running\n  input:\n    pod: {metadata: {name: p}, status: {phase: Running}}\n  expect: {verdict: {phase: running}}\n";
    let file = write(dir.path(), "suite.yaml", body.as_bytes());
    let out = run(&["policy", "test", "--suite", &file]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("no policy to test: give --policy or a `policy` in the suite"),
        "{err}"
    );
    assert_eq!(text(&out.stdout), "");
    // --policy names one; the default for the hook, a named default or a file.
    for policy in ["default", "default:default-classify"] {
        let (code, out) = suite(&file, &["--policy", policy]);
        assert_eq!(code, 0, "{policy}: {out}");
        assert!(out.contains("default-classify@"), "{out}");
    }
    let hostile = dir.path().join("hostile.wasm");
    let (code, out) = suite(&file, &["--policy", hostile.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("hostile@"), "{out}");
    // A manifest that does not run the policy for the suite's hook.
    let manifest = write(dir.path(), "policy.yaml", b"hooks: [decorate]\n");
    let out = run(&[
        "policy",
        "test",
        "--suite",
        &file,
        "--policy",
        hostile.to_str().unwrap(),
        "--manifest",
        &manifest,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("runs it for decorate only; the suite has classify cases"));
}

#[test]
fn a_manifest_grants_what_the_guard_otherwise_refuses() {
    let dir = workspace();
    let cases = "cases:\n- name: spread\n  settings: {mode: edit, path: /spec/topologySpreadConstraints, value: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}\n  input: {pod: worker.yaml}\n  expect: {paths: {\"spec.topologySpreadConstraints[0].maxSkew\": 1}}\n";
    let bare = write(
        dir.path(),
        "bare.yaml",
        format!("policy: hostile.wasm\nhook: decorate\n{cases}").as_bytes(),
    );
    let (code, out) = suite(&bare, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("may not change spec.topologySpreadConstraints"),
        "{out}"
    );
    let granted = write(
        dir.path(),
        "granted.yaml",
        format!("policy: hostile.wasm\nhook: decorate\nmanifest: {{hooks: [decorate], allowedPaths: [spec.topologySpreadConstraints]}}\n{cases}").as_bytes(),
    );
    let (code, out) = suite(&granted, &[]);
    assert_eq!(code, 0, "{out}");
    // The manifest's own limits apply: a deadline above the operator's is refused as the
    // operator refuses it.
    let limits = write(
        dir.path(),
        "limits.yaml",
        format!("policy: hostile.wasm\nhook: decorate\nmanifest: {{hooks: [decorate], deadlineMs: 500}}\n{}",
            "cases:\n- name: c\n  input: {pod: worker.yaml}\n  expect: {failure: {category: invalid-settings, message: deadlineMs}}\n").as_bytes(),
    );
    let (code, out) = suite(&limits, &[]);
    assert_eq!(code, 0, "{out}");
}

/// A reading policy reads the suite's `cluster:` objects, by kind, namespace and name; what its
/// manifest does not declare, or what the operator's ceiling does not allow, fails the case as
/// the operator would refuse it; the table says what each case read.
#[test]
fn cluster_fixtures_answer_reads_as_the_operator_would() {
    let dir = workspace();
    write(
        dir.path(),
        "nodes.yaml",
        b"- {apiVersion: v1, kind: Node, metadata: {name: gpu-1, labels: {pool: gpu}, resourceVersion: '5'}}\n\
          - {apiVersion: v1, kind: Node, metadata: {name: cpu-1, labels: {pool: cpu}}}\n",
    );
    let read = |reads: &str| format!("{{mode: read, reads: {reads}}}");
    let cases = [
        (
            "lists the gpu pool",
            read("[{resource: nodes, selector: pool=gpu}]"),
            "expect: {paths: {'metadata.annotations[\"hostile/read\"]': '[{\"items\":[\"gpu-1\"],\"more\":false,\"resourceVersion\":\"5\",\"synced\":true}]'}}",
        ),
        (
            "a read not declared is denied",
            read("[{resource: namespaces, name: ml}]"),
            "expect: {failure: {category: read-denied, message: namespaces is not among}}",
        ),
        (
            "secrets are never read",
            read("[{resource: secrets, namespace: ml, name: token}]"),
            "expect: {failure: {category: read-denied, message: credentials}}",
        ),
        (
            "a malformed selector is invalid",
            read("[{resource: nodes, selector: 'pool in gpu'}]"),
            "expect: {failure: read-invalid}",
        ),
        (
            "a loop of reads hits the bound",
            format!(
                "{{mode: read, ignoreErrors: true, reads: [{}]}}",
                vec!["{resource: nodes, name: gpu-1}"; 70].join(", ")
            ),
            "expect: {failure: {category: read-limit, message: 64 reads}}",
        ),
    ];
    let mut yaml = String::from(
        "policy: hostile.wasm\nhook: decorate\nmanifest: {hooks: [decorate], reads: [{resource: nodes}]}\n\
         context: {jobName: mnist, namespace: ml}\ncluster: [nodes.yaml]\ncases:\n",
    );
    for (name, settings, expect) in &cases {
        yaml.push_str(&format!(
            "- name: {name}\n  settings: {settings}\n  input: {{pod: worker.yaml}}\n  {expect}\n"
        ));
    }
    let file = write(dir.path(), "reads.yaml", yaml.as_bytes());
    let (code, out) = suite(&file, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("read nodes ?pool=gpu: 1 object at resourceVersion 5"),
        "{out}"
    );
    let (code, json) = suite(&file, &["-o", "json"]);
    assert_eq!(code, 0, "{json}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        report["cases"][0]["reads"][0],
        serde_json::json!({"resource": "nodes", "what": "?pool=gpu", "objects": 1, "resourceVersion": "5"})
    );

    // The operator's ceiling holds in a suite too: nodes are not granted under `none`.
    let (code, out) = suite(&file, &["--policy-allow-read", "none"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("nodes is not readable by cluster-wide policies"),
        "{out}"
    );

    // Fixtures are checked before anything runs, naming the entry.
    for (fixture, names) in [
        (
            "[{kind: Secret, metadata: {name: s, namespace: ml}}]",
            "cluster[0].kind: \"Secret\" is not a kind policies read",
        ),
        (
            "[{kind: Node, metadata: {}}]",
            "cluster[0].metadata.name: required",
        ),
        (
            "[{kind: ConfigMap, metadata: {name: c}}]",
            "cluster[0].metadata.namespace: required",
        ),
        (
            "[{kind: Node, metadata: {name: n, namespace: ml}}]",
            "cluster[0].metadata.namespace: a Node is cluster-scoped",
        ),
        (
            "{kind: Node}",
            "cluster: expected a list of cluster objects",
        ),
        (
            "[../nodes.yaml]",
            "cluster[0]: \"../nodes.yaml\": files are named relative",
        ),
    ] {
        let err = unrunnable(
            dir.path(),
            &format!(
                "policy: hostile.wasm\nhook: decorate\ncluster: {fixture}\ncases:\n- name: c\n  input: {{pod: worker.yaml}}\n  expect: {{fields: {{}}}}\n"
            ),
        );
        assert!(err.contains(names), "{fixture}: {err}");
    }
}

/// Runs `policy test --suite` on a suite that cannot run; returns stderr.
fn unrunnable(dir: &Path, yaml: &str) -> String {
    let file = write(dir, "suite.yaml", yaml.as_bytes());
    let out = run(&["policy", "test", "--suite", &file]);
    assert_eq!(out.status.code(), Some(2), "{yaml}\n{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "", "{yaml}");
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("suite.yaml"),
        "{err}"
    );
    err
}

#[test]
fn a_suite_that_cannot_run_exits_2_naming_the_file_and_the_field() {
    let dir = workspace();
    let err = unrunnable(
        dir.path(),
        "policy: hostile.wasm\ncases:\n- name: c\n  hook: decorate\n  input: {pod: ../worker.yaml}\n  expect: {fields: {}}\n",
    );
    assert!(err.contains("cases[0].input.pod: \"../worker.yaml\": files are named relative to the suite's directory"), "{err}");
    let err = unrunnable(
        dir.path(),
        "policy: hostile.wasm\ncases:\n- name: c\n  hook: decorate\n  input: {pod: worker.yaml}\n  expect: {failure: guard-violaton}\n",
    );
    assert!(
        err.contains("cases[0].expect.failure: unknown failure category \"guard-violaton\""),
        "{err}"
    );
    let err = unrunnable(dir.path(), "cases:\n  - name: [unclosed\n");
    assert!(err.contains("suite.yaml"), "{err}");
    let err = unrunnable(
        dir.path(),
        "policy: worker.yaml\nhook: decorate\ncases:\n- name: c\n  input: {pod: worker.yaml}\n  expect: {fields: {}}\n",
    );
    // A YAML file is read as a CEL policy; a pod is not one.
    assert!(
        err.contains("worker.yaml: a Pod, not a policy: give a component (.wasm), a CEL document"),
        "{err}"
    );
    // Arguments of a single test do not mix with a suite.
    let out = run(&["policy", "test", "--suite", "s.yaml", "--input", "pod.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "policy", "test", "--policy", "default", "--hook", "classify", "--input", "pod.yaml", "-o",
        "junit",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--suite"),
        "{}",
        text(&out.stderr)
    );
    let missing = dir.path().join("missing.yaml");
    let out = run(&["policy", "test", "--suite", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.yaml"));
}

/// Every suite of the default policies (`guest-policies/*/tests/*.yaml`).
fn default_suites() -> Vec<std::path::PathBuf> {
    let mut suites = Vec::new();
    for policy in ["decorate", "resources", "classify"] {
        let dir = common::repo(&format!("guest-policies/{policy}/tests"));
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                suites.push(path);
            }
        }
    }
    suites.sort();
    suites
}

#[test]
fn the_default_policies_pass_their_own_suites() {
    let suites = default_suites();
    assert_eq!(suites.len(), 3, "{suites:?}");
    let mut total = 0;
    for path in &suites {
        let file = path.to_str().unwrap();
        let (code, out) = suite(file, &["-o", "json"]);
        let report: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{file}: {e}\n{out}"));
        if code != 0 {
            let (_, table) = suite(file, &[]);
            panic!("{file}: exit {code}\n{table}");
        }
        assert_eq!(report["failed"], 0, "{file}");
        let n = report["passed"].as_u64().unwrap();
        assert!(n >= 10, "{file}: {n} cases");
        // Each runs the embedded default it is about.
        let name = path
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        for case in report["cases"].as_array().unwrap() {
            assert!(
                case["policy"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("default-{name}@")),
                "{case}"
            );
        }
        total += n;
    }
    assert!(total >= 70, "{total} cases");
}
