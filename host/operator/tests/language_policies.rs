//! Policies written in Python and JavaScript, built with the tools their authors use
//! (componentize-py, componentize-js) and run in the operator's sandbox through the CLI:
//! the SDKs' own tests; the example policies, whose Rust, Python and JavaScript versions pass
//! one shared suite each (namespace-labels reading the cluster from the suite's fixtures); the hostile policies, whose endless loops, memory bombs, sleeps,
//! file, socket and process attempts and huge results end within the operator's limits; and
//! `policy new --lang python|js`, whose projects build with their one command and pass the
//! suite they were generated with.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{expect_exit_zero, expect_failure, expect_success, operator, repo, run};
use tfjob_test_support::{build_js, build_js_with, build_python, build_rust};

/// One test at a time: the builds take both cores, and a suite's calls run against the
/// operator's 50 ms deadline, which a build beside them would eat into.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `suite` against `component` with `policy test --suite`; returns the report.
fn suite(suite: &Path, component: &Path) -> String {
    let mut cmd = common::policy_test();
    cmd.arg("--suite").arg(suite).arg("--policy").arg(component);
    let out = run(cmd, None, Duration::from_secs(300));
    let report = expect_exit_zero(
        &out,
        &format!("{} on {}", suite.display(), component.display()),
    );
    assert!(report.contains(" passed, 0 failed"), "{report}");
    report
}

fn example(path: &str) -> PathBuf {
    repo(&format!("guest-policies/examples/{path}"))
}

#[test]
fn the_sdks_own_tests_pass() {
    let _serial = serial();
    let mut python = Command::new("python3");
    python
        .args(["-m", "unittest", "discover", "-s", "tests"])
        .current_dir(repo("guest-policies/sdk-python"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    expect_exit_zero(
        &run(python, None, Duration::from_secs(120)),
        "the Python SDK's tests",
    );
    let mut node = Command::new("node");
    node.args(["--test", "test/"])
        .current_dir(repo("guest-policies/sdk-js"));
    expect_exit_zero(
        &run(node, None, Duration::from_secs(120)),
        "the JavaScript SDK's tests",
    );
}

#[test]
fn one_suite_holds_every_language_to_the_same_behaviour() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rust = build_rust(
        &[
            "example-team-labels",
            "example-oom-permanent",
            "example-namespace-labels",
        ],
        &common::policy_target_dir("examples"),
    );
    for (name, world) in [
        ("team-labels", "decorator"),
        ("oom-permanent", "classifier"),
        ("namespace-labels", "decorator"),
    ] {
        let python = dir.path().join(format!("{name}-python.wasm"));
        build_python(&example(&format!("{name}/python")), world, &python);
        let js = dir.path().join(format!("{name}-js.wasm"));
        build_js(&example(&format!("{name}/js/policy.js")), world, &js);
        let crate_file = format!("example_{}.wasm", name.replace('-', "_"));
        for component in [rust.join(crate_file), python, js] {
            let report = suite(&example(&format!("{name}/suite.yaml")), &component);
            if name == "namespace-labels" {
                // The report says what each case read, from the suite's `cluster:` objects,
                // with the object's own resourceVersion (the cache has seen 18).
                assert!(
                    report.contains("read namespaces ml: 1 object at resourceVersion 17"),
                    "{report}"
                );
                assert!(
                    report.contains("read namespaces deleted: 0 objects"),
                    "{report}"
                );
            }
        }
    }
}

#[test]
fn the_sandbox_holds_for_python_and_javascript() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let python = dir.path().join("hostile-python.wasm");
    build_python(&repo("guest-policies/hostile-python"), "decorator", &python);
    suite(&repo("guest-policies/hostile-python/suite.yaml"), &python);
    let js = dir.path().join("hostile-js.wasm");
    build_js(
        &repo("guest-policies/hostile-js/policy.js"),
        "decorator",
        &js,
    );
    suite(&repo("guest-policies/hostile-js/suite.yaml"), &js);

    // A policy's own memory cap (memoryMib in its manifest) holds for a runtime too: CPython's
    // initial linear memory is over 12 MiB, so 8 MiB refuses it at its first call, and 32 MiB
    // lets it run.
    let pod = dir.path().join("pod.json");
    std::fs::write(&pod, r#"{"metadata": {"name": "p"}}"#).unwrap();
    for (mib, fits) in [(8, false), (32, true)] {
        let manifest = dir.path().join(format!("memory-{mib}.yaml"));
        std::fs::write(&manifest, format!("hooks: [decorate]\nmemoryMib: {mib}\n")).unwrap();
        let mut cmd = common::policy_test();
        cmd.args(["--hook", "decorate", "--input"])
            .arg(&pod)
            .arg("--manifest")
            .arg(&manifest)
            .arg("--policy")
            .arg(&python);
        let out = run(cmd, None, Duration::from_secs(120));
        if fits {
            expect_success(&out, "memoryMib: 32");
        } else {
            let err = expect_failure(&out, "memoryMib: 8");
            assert!(
                err.contains("memory limit of 8388608 bytes exceeded"),
                "{err}"
            );
        }
    }

    // Built with its default features, a JavaScript component imports wasi:http, which the
    // operator does not provide: refused at load, naming the import.
    let with_http = dir.path().join("with-http.wasm");
    build_js_with(
        &example("team-labels/js/policy.js"),
        "decorator",
        &with_http,
        &[],
    );
    let mut cmd = common::policy_test();
    cmd.args(["--hook", "decorate", "--input"])
        .arg(&pod)
        .arg("--policy")
        .arg(&with_http);
    let refused = expect_failure(
        &run(cmd, None, Duration::from_secs(120)),
        "a component importing wasi:http",
    );
    assert!(
        refused.contains("link: component imports instance `wasi:http/"),
        "{refused}"
    );
}

/// `policy new NAME --lang LANG` with every hook, its decoration reading the cluster, then the
/// project's one build command, then the suite it came with (the reading cases answered from
/// its `cluster:` fixtures).
fn scaffold(lang: &str, build: &[&str]) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("team-policy");
    let mut new = operator();
    new.args(["policy", "new", "team-policy", "--lang", lang])
        .args(["--hooks", "decorate,resources,classify", "--reads", "--dir"])
        .arg(&project);
    let printed = expect_success(&run(new, None, Duration::from_secs(60)), "policy new");
    assert!(printed.contains(&build.join(" ")), "{printed}");
    let mut cmd = Command::new(build[0]);
    cmd.args(&build[1..]).current_dir(&project);
    expect_exit_zero(
        &run(cmd, None, Duration::from_secs(900)),
        &format!("{lang}: {build:?}"),
    );
    let report = suite(
        &project.join("tests/suite.yaml"),
        &project.join("policy.wasm"),
    );
    assert!(report.contains("10 passed, 0 failed"), "{report}");
}

#[test]
fn a_new_python_policy_builds_with_one_command_and_passes_its_suite() {
    scaffold("python", &["python3", "build.py"]);
}

#[test]
fn a_new_javascript_policy_builds_with_one_command_and_passes_its_suite() {
    scaffold("js", &["npm", "run", "build"]);
}
