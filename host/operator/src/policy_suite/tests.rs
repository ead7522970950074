//! The suite runner's own tests.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_policy_engine::{Category, Hook};

use super::*;
use super::{compare::*, json_path::*, load::*, model::*, report::*, run::*};

fn path(text: &str) -> JsonPath {
    JsonPath::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn key(k: &str) -> Segment {
    Segment::Key(k.into())
}

#[test]
fn paths_in_the_guards_spelling_and_as_json_pointers() {
    assert_eq!(
        path("spec.containers[0].env"),
        JsonPath(vec![
            key("spec"),
            key("containers"),
            Segment::Index(0),
            key("env")
        ])
    );
    assert_eq!(
        path("metadata.labels[\"example.com/team\"]"),
        JsonPath(vec![
            key("metadata"),
            key("labels"),
            key("example.com/team")
        ])
    );
    // The guard writes label keys in brackets without quotes.
    assert_eq!(
        path("metadata.labels[training.kubeflow.org/replica-index]"),
        JsonPath(vec![
            key("metadata"),
            key("labels"),
            key("training.kubeflow.org/replica-index")
        ])
    );
    assert_eq!(
        path("/spec/containers/0/env"),
        JsonPath(vec![key("spec"), key("containers"), key("0"), key("env")])
    );
    assert_eq!(path("/a~1b/c~0d"), JsonPath(vec![key("a/b"), key("c~d")]));
    assert_eq!(path("[\"a\\\"]b\"]"), JsonPath(vec![key("a\"]b")]));
    for bad in [
        "",
        ".a",
        "a.",
        "a..b",
        "a[",
        "a[0",
        "a]",
        "a[]",
        "a[0]b",
        "a[\"x]",
        "a[\"\\q\"]",
    ] {
        assert!(JsonPath::parse(bad).is_err(), "{bad:?} parses");
    }
}

#[test]
fn paths_print_so_that_they_read_back() {
    for text in [
        "spec.containers[0].env",
        "metadata.labels[\"example.com/team\"]",
        "a[\"0\"]",
        "a[\"\"]",
        "[\"with space\"].b",
        "a[\"quote\\\"]\"]",
    ] {
        let p = path(text);
        assert_eq!(p.to_string(), text);
        assert_eq!(path(&p.to_string()), p, "{text}");
    }
    assert_eq!(path("/a.b/0").to_string(), "[\"a.b\"][\"0\"]");
    assert_eq!(JsonPath::default().to_string(), "(result)");
}

#[test]
fn lookups_follow_objects_and_arrays() {
    let doc = json!({"spec": {"containers": [{"name": "tf"}, {"name": "sidecar"}]}});
    assert_eq!(
        path("spec.containers[1].name").get(&doc),
        Some(&json!("sidecar"))
    );
    assert_eq!(
        path("/spec/containers/1/name").get(&doc),
        Some(&json!("sidecar"))
    );
    assert_eq!(path("spec.containers[2]").get(&doc), None);
    assert_eq!(path("spec.containers.name").get(&doc), None);
    assert_eq!(path("spec[0]").get(&doc), None);
}

fn expect(yaml: &str) -> Expectation {
    let raw: RawExpect = serde_yaml_ng::from_str(yaml).unwrap();
    let loader = Loader {
        file: "s.yaml".into(),
        dir: ".".into(),
        documents: HashMap::new(),
        pods: HashMap::new(),
    };
    loader.expectation(raw, Hook::Classify, "expect").unwrap()
}

fn pod_result() -> Outcome {
    Ok(json!({
        "metadata": {"name": "w-0", "labels": {"team": "ml", "tier": "gold"}},
        "spec": {"containers": [{"name": "tf", "env": [{"name": "A", "value": "1"}]}], "replicas": 2}
    }))
}

fn value(p: &str, expected: Option<Value>, actual: Option<Value>) -> Mismatch {
    Mismatch::Value {
        path: path(p),
        expected,
        actual,
    }
}

#[test]
fn a_whole_result_must_match_exactly() {
    let same = pod_result().unwrap();
    assert_eq!(
        check(
            &Expectation {
                result: Some(same.clone()),
                ..Default::default()
            },
            &pod_result()
        ),
        vec![]
    );
    let mut other = same.clone();
    other["metadata"]["labels"]["team"] = json!("vision");
    other["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("tier");
    other["spec"]["containers"][0]["env"] = json!([]);
    other["extra"] = json!(true);
    let got = check(
        &Expectation {
            result: Some(other),
            ..Default::default()
        },
        &pod_result(),
    );
    assert_eq!(
        got,
        vec![
            value("extra", Some(json!(true)), None),
            value(
                "metadata.labels.team",
                Some(json!("vision")),
                Some(json!("ml"))
            ),
            value("metadata.labels.tier", None, Some(json!("gold"))),
            value(
                "spec.containers[0].env",
                Some(json!([])),
                Some(json!([{"name": "A", "value": "1"}]))
            ),
        ]
    );
    // null is absent, numbers compare by value.
    let mut loose = same.clone();
    loose["metadata"]["annotations"] = Value::Null;
    loose["spec"]["replicas"] = json!(2.0);
    assert_eq!(
        check(
            &Expectation {
                result: Some(loose),
                ..Default::default()
            },
            &pod_result()
        ),
        vec![]
    );
}

#[test]
fn fields_match_as_a_subset() {
    let e = expect(
        "fields: {metadata: {labels: {team: ml}}, spec: {containers: [{env: [{name: A}]}]}}",
    );
    assert_eq!(check(&e, &pod_result()), vec![]);
    let e =
        expect("fields: {metadata: {labels: {team: vision, owner: null}, annotations: {a: b}}}");
    assert_eq!(
        check(&e, &pod_result()),
        vec![
            value("metadata.annotations", Some(json!({"a": "b"})), None),
            value(
                "metadata.labels.team",
                Some(json!("vision")),
                Some(json!("ml"))
            ),
        ]
    );
    // A list must have as many elements as expected.
    let e = expect("fields: {spec: {containers: [{name: tf}, {name: sidecar}]}}");
    assert_eq!(check(&e, &pod_result()).len(), 1);
    // Expecting null where there is a value.
    let e = expect("fields: {metadata: {labels: null}}");
    assert_eq!(
        check(&e, &pod_result()),
        vec![value(
            "metadata.labels",
            None,
            Some(json!({"team": "ml", "tier": "gold"}))
        )]
    );
}

#[test]
fn paths_match_exactly_and_null_means_absent() {
    let e = expect(
        "paths:\n  metadata.labels.team: ml\n  /spec/containers/0/env/0/value: \"1\"\n  spec.schedulerName: null\n  spec.replicas: 2.0\n",
    );
    assert_eq!(check(&e, &pod_result()), vec![]);
    let e = expect("paths:\n  metadata.labels.team: vision\n  spec.containers[0].name: null\n");
    let got = check(&e, &pod_result());
    assert!(
        got.contains(&value(
            "metadata.labels.team",
            Some(json!("vision")),
            Some(json!("ml"))
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&value("spec.containers[0].name", None, Some(json!("tf")))),
        "{got:?}"
    );
    assert_eq!(got.len(), 2);
}

#[test]
fn verdicts_match_the_fields_given_with_times_in_utc() {
    let verdict = Ok(json!({
        "phase": "retryable-failure", "reason": "OOMKilled", "kind": "user",
        "occurredAt": "2026-01-01T00:01:00Z"
    }));
    let e = expect(
        "verdict: {phase: retryable-failure, kind: user, occurredAt: \"2026-01-01T01:01:00+01:00\"}",
    );
    assert_eq!(
        e.verdict.as_ref().unwrap()["occurredAt"],
        "2026-01-01T00:01:00Z"
    );
    assert_eq!(check(&e, &verdict), vec![]);
    let e = expect("verdict: {phase: permanent-failure, reason: OOMKilled, message: boom}");
    assert_eq!(
        check(&e, &verdict),
        vec![
            value("message", Some(json!("boom")), None),
            value(
                "phase",
                Some(json!("permanent-failure")),
                Some(json!("retryable-failure"))
            ),
        ]
    );
}

#[test]
fn failures_match_by_category_and_message() {
    let failed: Outcome = Err(Failure {
        category: FailureCategory::GuardViolation,
        message: "policy x may not change spec.containers[0].image".into(),
    });
    assert_eq!(check(&expect("failure: guard-violation"), &failed), vec![]);
    assert_eq!(
        check(
            &expect("failure: {category: guard-violation, message: \"containers[0].image\"}"),
            &failed
        ),
        vec![]
    );
    let got = check(
        &expect("failure: {category: guard-violation, message: volumes}"),
        &failed,
    );
    assert_eq!(
        got,
        vec![Mismatch::Outcome {
            expected: "failure guard-violation with a message containing \"volumes\"".into(),
            actual: "failure guard-violation: policy x may not change spec.containers[0].image"
                .into(),
        }]
    );
    assert_eq!(check(&expect("failure: timeout"), &failed).len(), 1);
    // A failure where a result was expected, and the other way round.
    let got = check(&expect("fields: {}"), &failed);
    assert!(
        matches!(&got[..], [Mismatch::Outcome { expected, .. }] if expected == "a result"),
        "{got:?}"
    );
    let got = check(&expect("failure: timeout"), &pod_result());
    assert!(
        matches!(&got[..], [Mismatch::Outcome { actual, .. }] if actual.starts_with("a result: {")),
        "{got:?}"
    );
    // `settings`, the operator's name, is `invalid-settings`.
    assert_eq!(
        expect("failure: settings").failure.unwrap().category,
        FailureCategory::InvalidSettings
    );
}

#[test]
fn differences_print_as_minus_and_plus_lines_and_are_capped() {
    let text = diff_text(&[
        value("a.b", Some(json!("x")), None),
        value("c", None, Some(json!([1, 2]))),
    ]);
    assert_eq!(
        text,
        "- a.b: \"x\"\n+ a.b: (absent)\n- c: (absent)\n+ c: [1,2]\n"
    );
    let long = json!("y".repeat(10_000));
    let text = diff_text(&[value("big", Some(long.clone()), Some(long))]);
    assert!(text.len() < 1000, "{}", text.len());
    let many: Vec<Mismatch> = (0..80)
        .map(|i| value(&format!("k{i}"), Some(json!(i)), None))
        .collect();
    let text = diff_text(&many);
    assert_eq!(text.lines().count(), 2 * MAX_MISMATCHES_SHOWN + 1);
    assert!(text.ends_with("... and 30 more differences\n"), "{text}");
}

#[test]
fn text_from_a_suite_cannot_steer_a_terminal_or_break_xml() {
    assert_eq!(
        printable("ok \u{1b}[2J\r\u{202e}x"),
        "ok \\u{1b}[2J\\u{d}\\u{202e}x"
    );
    assert_eq!(printable("naïve ✓"), "naïve ✓");
    assert_eq!(
        xml_escape("<a & \"b\" 'c'>", false),
        "&lt;a &amp; &quot;b&quot; &apos;c&apos;&gt;"
    );
    assert_eq!(
        xml_escape("x\u{0}\u{1b}\u{fffe}\ny", false),
        "x\\u{0}\\u{1b}\\u{fffe}\ny"
    );
    assert_eq!(xml_escape("a\tb\nc", true), "a&#9;b&#10;c");
}

#[test]
fn failure_categories_are_the_operators() {
    for c in FailureCategory::ALL {
        assert_eq!(FailureCategory::parse(c.as_str()), Ok(c));
    }
    for c in [
        Category::Trap,
        Category::Timeout,
        Category::Memory,
        Category::InvalidOutput,
        Category::GuardViolation,
        Category::Link,
        Category::Unavailable,
        Category::Tripped,
    ] {
        assert_eq!(FailureCategory::from(c).as_str(), c.as_str());
    }
    assert_eq!(
        FailureCategory::from(Category::Settings),
        FailureCategory::InvalidSettings
    );
    let err = FailureCategory::parse("guard-violaton").unwrap_err();
    assert!(
        err.contains("\"guard-violaton\"") && err.contains("guard-violation"),
        "{err}"
    );
}

// -----------------------------------------------------------------------------------------
// Loading
// -----------------------------------------------------------------------------------------

const POD: &str = "{metadata: {name: p}, spec: {containers: [{name: tf, image: tf}]}}";

/// A directory with `files`, and the suite `text` parsed in it.
fn load_in(files: &[(&str, &str)], text: &str) -> (tempfile::TempDir, Result<Suite, SuiteError>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, contents) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    std::fs::write(dir.path().join("suite.yaml"), text).unwrap();
    let result = load(&dir.path().join("suite.yaml"));
    (dir, result)
}

fn load_error(files: &[(&str, &str)], text: &str) -> SuiteError {
    match load_in(files, text).1 {
        Ok(s) => panic!("loaded: {s:?}"),
        Err(e) => e,
    }
}

fn one_case(case: &str) -> String {
    format!("hook: decorate\ncases:\n- name: c\n{case}")
}

#[test]
fn a_suite_with_defaults_files_and_inline_input() {
    let files = [
        ("pods/p.yaml", POD),
        ("ctx.yaml", "jobName: mnist\nreplicaType: PS\n"),
        ("settings.json", r#"{"team": "ml"}"#),
    ];
    let text = r#"
policy: default:default-classify
hook: classify
now: "2026-01-01T00:00:00Z"
context: ctx.yaml
settings: settings.json
cases:
- name: from files
  input: {pod: pods/p.yaml}
  expect: {verdict: {phase: running}}
- name: inline, another hook, own context and settings
  hook: resources
  settings: {limits: {cpu: "1"}}
  input:
    pod: {spec: {containers: [{name: a}, {name: b}]}}
    context: {replicaIndex: 3}
    container: b
  expect: {paths: {limits.cpu: "1"}}
"#;
    let (_dir, suite) = load_in(&files, text);
    let suite = suite.unwrap();
    assert_eq!(
        suite.policy,
        Some(PolicyRef::Default("default:default-classify".into()))
    );
    let [a, b] = &suite.cases[..] else { panic!() };
    assert_eq!(a.hook, Hook::Classify);
    assert_eq!(a.settings, Some(json!({"team": "ml"})));
    assert_eq!(a.pod.metadata.name.as_deref(), Some("p"));
    assert_eq!(a.context.job_name, "mnist");
    assert_eq!(a.context.replica_type, "PS");
    assert_eq!(a.context.namespace, "default", "test default");
    assert_eq!(a.now, Some("2026-01-01T00:00:00Z".parse().unwrap()));
    assert_eq!(b.hook, Hook::Resources);
    assert_eq!(b.settings, Some(json!({"limits": {"cpu": "1"}})));
    // The case's context is laid over the suite's, field by field.
    assert_eq!(
        (b.context.job_name.as_str(), b.context.replica_index),
        ("mnist", 3)
    );
    assert_eq!(b.container.as_deref(), Some("b"));
    assert_eq!(b.now, None);
}

#[test]
fn errors_name_the_file_and_the_field() {
    let cases = [
        ("cases: []", "cases", "at least one case"),
        (
            "cases:\n- name: c\n  input: {pod: {}}\n  expect: {fields: {}}\n  hok: decorate",
            "cases[0]",
            "unknown field `hok`",
        ),
        (
            &one_case("  hook: decorat\n  input: {pod: {}}\n  expect: {fields: {}}"),
            "cases[0].hook",
            "unknown variant `decorat`",
        ),
        (
            "cases:\n- name: c\n  input: {pod: {}}\n  expect: {fields: {}}",
            "cases[0].hook",
            "required",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {}"),
            "cases[0].expect",
            "names nothing to check",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {failure: timeout, fields: {}}"),
            "cases[0].expect.failure",
            "not both",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {failure: teapot}"),
            "cases[0].expect.failure",
            "unknown failure category \"teapot\"",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {failure: {category: timeout, messages: x}}"),
            "cases[0].expect.failure",
            "unknown field `messages`",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {verdict: {phase: running}}"),
            "cases[0].expect.verdict",
            "only classify",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {paths: {\"a..b\": 1}}"),
            "cases[0].expect.paths",
            "empty field name",
        ),
        (
            &one_case("  input: {pod: {spec: {containers: 3}}}\n  expect: {fields: {}}"),
            "cases[0].input.pod.spec.containers",
            "invalid type",
        ),
        (
            &one_case("  input: {pod: [1]}\n  expect: {fields: {}}"),
            "cases[0].input.pod",
            "not a list",
        ),
        (
            &one_case("  input: {pod: {}, context: {jobname: x}}\n  expect: {fields: {}}"),
            "cases[0].input.context",
            "jobname",
        ),
        (
            &one_case("  input: {pod: {}, now: \"2026-01-01T00:00:00Z\"}\n  expect: {fields: {}}"),
            "cases[0].input.now",
            "only classify",
        ),
        (
            &one_case("  input: {pod: {}, container: tf}\n  expect: {fields: {}}"),
            "cases[0].input.container",
            "only the resources hook",
        ),
        (
            &one_case("  hook: resources\n  input: {pod: {}}\n  expect: {fields: {}}"),
            "cases[0].input.container",
            "no containers",
        ),
        (
            &one_case(
                "  hook: resources\n  input: {pod: {spec: {containers: [{name: a}]}}, container: b}\n  expect: {fields: {}}",
            ),
            "cases[0].input.container",
            "\"b\": no such container",
        ),
        (
            &one_case(
                "  hook: classify\n  input: {pod: {}}\n  expect: {verdict: {phase: running}}",
            ),
            "cases[0].input.now",
            "must not depend on the clock",
        ),
        (
            &one_case(
                "  hook: classify\n  input: {pod: {}, now: soon}\n  expect: {verdict: {phase: running}}",
            ),
            "cases[0].input.now",
            "\"soon\" is not an RFC 3339 time",
        ),
        (
            &one_case(
                "  hook: classify\n  input: {pod: {}, now: \"2026-01-01T00:00:00Z\"}\n  expect: {verdict: {phase: runing}}",
            ),
            "cases[0].expect.verdict.phase",
            "unknown variant `runing`",
        ),
        (
            &format!(
                "{}\n- name: c\n  input: {{pod: {{}}}}\n  expect: {{fields: {{}}}}",
                one_case("  input: {pod: {}}\n  expect: {fields: {}}")
            ),
            "cases[1].name",
            "also the name of cases[0]",
        ),
        (
            &one_case("  input: {pod: {}}\n  expect: {fields: {}}\n  settings: missing.yaml"),
            "cases[0].settings",
            "missing.yaml",
        ),
        (
            &format!(
                "manifest: {{hooks: [decorat]}}\n{}",
                one_case("  input: {pod: {}}\n  expect: {fields: {}}")
            ),
            "manifest",
            "decorat",
        ),
    ];
    for (text, field, message) in cases {
        let err = load_error(&[], text);
        assert!(
            err.field.starts_with(field),
            "{text}\nfield {} (wanted {field}): {err}",
            err.field
        );
        assert!(err.message.contains(message), "{text}\n{err}");
        assert!(err.to_string().contains("suite.yaml"), "{err}");
    }
    // A pod file with a bad field names the file and the field.
    let err = load_error(
        &[("bad.yaml", "spec: {containers: [{name: 5}]}")],
        &one_case("  input: {pod: bad.yaml}\n  expect: {fields: {}}"),
    );
    assert_eq!(err.field, "cases[0].input.pod");
    assert!(
        err.message
            .starts_with("bad.yaml: field spec.containers[0].name: invalid type"),
        "{err}"
    );
    let err = load_error(
        &[("bad.yaml", "a: [")],
        &one_case("  input: {pod: bad.yaml}\n  expect: {fields: {}}"),
    );
    assert!(
        err.message.contains("bad.yaml: not valid YAML or JSON"),
        "{err}"
    );
}

#[test]
fn files_stay_inside_the_suites_directory() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.yaml"), POD).unwrap();
    let secret = outside.path().join("secret.yaml");
    let secret = secret.to_str().unwrap();
    for reference in [
        secret,
        "../secret.yaml",
        "pods/../../secret.yaml",
        "",
        "/etc/passwd",
    ] {
        let err = load_error(
            &[("pods/p.yaml", POD)],
            &one_case(&format!(
                "  input: {{pod: {reference:?}}}\n  expect: {{fields: {{}}}}"
            )),
        );
        assert_eq!(err.field, "cases[0].input.pod", "{reference}");
        assert!(
            err.message
                .contains("relative to the suite's directory, without `..`"),
            "{reference}: {err}"
        );
    }
    // A symbolic link inside that leads outside.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(secret, dir.path().join("link.yaml")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("linkdir")).unwrap();
    for reference in ["link.yaml", "linkdir/secret.yaml"] {
        std::fs::write(
            dir.path().join("suite.yaml"),
            one_case(&format!(
                "  input: {{pod: {reference}}}\n  expect: {{fields: {{}}}}"
            )),
        )
        .unwrap();
        let err = load(&dir.path().join("suite.yaml")).unwrap_err();
        assert!(
            err.message.contains("leads out of the suite's directory"),
            "{reference}: {err}"
        );
    }
    // Not a regular file: a directory, a FIFO (a read would block).
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for reference in ["d", "fifo", "."] {
        std::fs::write(
            dir.path().join("suite.yaml"),
            one_case(&format!(
                "  input: {{pod: {reference:?}}}\n  expect: {{fields: {{}}}}"
            )),
        )
        .unwrap();
        let err = load(&dir.path().join("suite.yaml")).unwrap_err();
        assert!(
            err.message.contains("is not a regular file"),
            "{reference}: {err}"
        );
    }
    // The suite's `policy` follows the same rule.
    let err = load_error(
        &[],
        &format!(
            "policy: ../x.wasm\n{}",
            one_case("  input: {pod: {}}\n  expect: {fields: {}}")
        ),
    );
    assert_eq!(err.field, "policy");
}

#[test]
fn huge_and_hostile_yaml_is_refused_quickly() {
    // A file past the cap.
    let big = format!(
        "metadata: {{name: \"{}\"}}\n",
        "x".repeat(MAX_FILE_BYTES as usize)
    );
    let err = load_error(
        &[("big.yaml", &big)],
        &one_case("  input: {pod: big.yaml}\n  expect: {fields: {}}"),
    );
    assert!(
        err.message.contains("larger than the 4 MiB allowed"),
        "{err}"
    );
    // A suite past the cap.
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    let file = std::fs::File::create(&suite).unwrap();
    file.set_len(MAX_SUITE_BYTES + 1).unwrap();
    let err = load(&suite).unwrap_err();
    assert!(
        err.message.contains("larger than the 16 MiB allowed"),
        "{err}"
    );
    // An alias bomb expands past the parser's limit instead of filling memory.
    let mut bomb = String::from("settings:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!(
            "  a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    bomb.push_str("cases: []\n");
    let started = Instant::now();
    let err = load_error(&[], &bomb);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(err.message.contains("repetition limit"), "{err}");
    // Deep nesting stops at the parser's recursion limit.
    // Deep nesting is refused before the parser, which takes minutes on it.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let started = Instant::now();
    let err = load_error(&[], &format!("settings: {deep}\ncases: []\n"));
    assert!(
        err.message.contains("nested deeper than 256 levels"),
        "{err}"
    );
    let err = load_error(
        &[("deep.yaml", &deep)],
        &one_case("  input: {pod: deep.yaml}\n  expect: {fields: {}}"),
    );
    assert!(
        err.message
            .contains("deep.yaml: nested deeper than 256 levels"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // Below that, the parser's recursion limit, with a path that is cut short.
    let err = load_error(
        &[],
        &format!(
            "settings: {}{}\ncases: []\n",
            "[".repeat(200),
            "]".repeat(200)
        ),
    );
    assert!(err.message.contains("recursion limit"), "{err}");
    assert!(err.field.len() < 300, "{}", err.field);
    // Not UTF-8.
    std::fs::write(&suite, b"cases: [\xff]").unwrap();
    assert!(load(&suite).unwrap_err().message.contains("not UTF-8"));
    // Too many cases.
    let mut many = String::from("hook: decorate\ncases:\n");
    for i in 0..=MAX_CASES {
        many.push_str(&format!(
            "- {{name: c{i}, input: {{pod: {{}}}}, expect: {{fields: {{}}}}}}\n"
        ));
    }
    let err = load_error(&[], &many);
    assert_eq!(err.field, "cases");
    assert!(err.message.contains("at most 10000"), "{err}");
}

#[test]
fn flow_depth_counts_brackets_outside_quotes_and_comments() {
    assert!(!flow_too_deep("a: [[x]]", 2));
    assert!(flow_too_deep("a: [[[x]]]", 2));
    assert!(!flow_too_deep("a: \"[[[[\"\nb: '{{{{'\nc: x # [[[[\n", 1));
    assert!(!flow_too_deep("m: \"esc \\\" [[[[\"", 1));
    // A quote or `#` inside a plain scalar starts nothing: the brackets after it count.
    assert!(flow_too_deep("[don't, [[[x]]]]", 3));
    assert!(flow_too_deep("[a#[[[x]]]]", 3));
    // Closing more than was opened does not bank depth.
    assert!(flow_too_deep("]]]]]] [[[x]]]", 2));
}

#[test]
fn a_pod_file_used_by_many_cases_is_read_once() {
    let mut text = String::from("hook: decorate\ncases:\n");
    for i in 0..50 {
        text.push_str(&format!(
            "- {{name: c{i}, input: {{pod: p.yaml}}, expect: {{fields: {{}}}}}}\n"
        ));
    }
    let (_dir, suite) = load_in(&[("p.yaml", POD)], &text);
    let suite = suite.unwrap();
    assert!(
        suite
            .cases
            .windows(2)
            .all(|w| Arc::ptr_eq(&w[0].pod, &w[1].pod))
    );
}

fn report() -> Report {
    let case = |name: &str, outcome: Outcome, mismatches: Vec<Mismatch>| CaseReport {
        name: name.into(),
        hook: Hook::Decorate,
        policy: "team@0123456789ab".into(),
        outcome,
        mismatches,
        elapsed: Duration::from_millis(3),
        reads: Vec::new(),
    };
    Report {
        suite: "tests/suite.yaml".into(),
        cases: vec![
            case("adds the label", pod_result(), vec![]),
            case(
                "keeps <the> \"image\" & \u{1b}[31m",
                pod_result(),
                vec![value(
                    "metadata.labels.team",
                    Some(json!("vision")),
                    Some(json!("ml")),
                )],
            ),
            case(
                "refuses",
                Err(Failure {
                    category: FailureCategory::Timeout,
                    message: "deadline of 50ms exceeded".into(),
                }),
                vec![Mismatch::Outcome {
                    expected: "a result".into(),
                    actual: "failure timeout: deadline of 50ms exceeded".into(),
                }],
            ),
        ],
    }
}

#[test]
fn the_table_lists_every_case_then_the_differences_then_the_counts() {
    let text = table(&report());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "RESULT   HOOK       TIME   CASE");
    assert_eq!(lines[1], "ok       decorate    3ms   adds the label");
    assert_eq!(
        lines[2],
        "FAILED   decorate    3ms   keeps <the> \"image\" & \\u{1b}[31m"
    );
    assert!(text.contains(
            "FAILED keeps <the> \"image\" & \\u{1b}[31m (decorate, team@0123456789ab)\nexpected (-), actual (+):\n  - metadata.labels.team: \"vision\"\n  + metadata.labels.team: \"ml\"\n"
        ), "{text}");
    assert!(
        text.contains("  - a result\n  + failure timeout: deadline of 50ms exceeded\n"),
        "{text}"
    );
    assert!(text.ends_with("\n1 passed, 2 failed\n"), "{text}");
    assert!(!text.contains('\u{1b}'));
}

#[test]
fn json_reports_what_failed_cases_returned() {
    let v = to_json(&report());
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(v["cases"][0]["passed"], true);
    assert!(v["cases"][0].get("actual").is_none());
    assert_eq!(
        v["cases"][1]["differences"],
        json!([{"path": "metadata.labels.team", "expected": "vision", "actual": "ml"}])
    );
    assert_eq!(v["cases"][1]["actual"]["result"]["metadata"]["name"], "w-0");
    assert_eq!(
        v["cases"][2]["actual"]["failure"],
        json!({"category": "timeout", "message": "deadline of 50ms exceeded"})
    );
}

#[test]
fn junit_is_well_formed_xml_with_a_failure_per_failed_case() {
    let xml = junit(&report());
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("tests"), Some("3"));
    assert_eq!(suite.attribute("failures"), Some("2"));
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 3);
    assert_eq!(
        cases[1].attribute("name"),
        Some("keeps <the> \"image\" & \\u{1b}[31m")
    );
    assert_eq!(
        cases[1].attribute("classname"),
        Some("team@0123456789ab.decorate")
    );
    let failure = cases[1]
        .children()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert_eq!(
        failure.text(),
        Some(
            "expected (-), actual (+):\n- metadata.labels.team: \"vision\"\n+ metadata.labels.team: \"ml\"\n"
        )
    );
    let failure = cases[2]
        .children()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("failure timeout: deadline of 50ms exceeded")
    );
    assert!(cases[0].children().all(|n| !n.is_element()));
}
