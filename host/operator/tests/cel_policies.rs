//! CEL policies through the CLI a platform team uses: the examples of `deploy/examples/cel`
//! pass their suites; `gpu-placement` passes one suite as a CEL policy and as a Rust component;
//! `policy pack --cel` prints a ConfigMap the operator loads, and refuses what it would refuse
//! with the expression and a caret (`policy_pack.rs`); `policy new --lang cel` writes a policy
//! that passes the suite it comes with, packed or not.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{expect_exit_zero, operator, repo, run};
use tfjob_test_support::build_rust;

/// Runs `policy test --suite SUITE [--policy POLICY]`; returns the report of a run that passed.
fn suite(suite: &Path, policy: Option<&Path>) -> String {
    let mut cmd = operator();
    cmd.args(["policy", "test", "--suite"]).arg(suite);
    if let Some(policy) = policy {
        cmd.arg("--policy").arg(policy);
    }
    let out = run(cmd, None, Duration::from_secs(120));
    let report = expect_exit_zero(&out, &format!("{}", suite.display()));
    assert!(report.contains(" passed, 0 failed"), "{report}");
    report
}

#[test]
fn the_cel_examples_pass_their_suites() {
    let mut names: Vec<String> = std::fs::read_dir(repo("deploy/examples/cel"))
        .expect("the CEL examples")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".suite.yaml").map(str::to_owned)
        })
        .collect();
    names.sort();
    assert!(names.contains(&"never-schedulable".to_owned()), "{names:?}");
    for name in &names {
        let report = suite(
            &repo(&format!("deploy/examples/cel/{name}.suite.yaml")),
            None,
        );
        assert!(report.contains(&format!("cases of {name}@")), "{report}");
    }
}

#[test]
fn gpu_placement_passes_one_suite_as_cel_and_as_rust() {
    let rust = build_rust(
        &["example-gpu-placement"],
        &common::policy_target_dir("examples"),
    );
    let shared = repo("guest-policies/examples/gpu-placement/suite.yaml");
    let cel = suite(
        &shared,
        Some(&repo("deploy/examples/cel/policies/gpu-placement.yaml")),
    );
    let component = suite(&shared, Some(&rust.join("example_gpu_placement.wasm")));
    for report in [&cel, &component] {
        assert!(report.contains("4 passed, 0 failed"), "{report}");
    }
    assert!(cel.contains("cases of gpu-placement@"), "{cel}");
}

#[test]
fn a_new_cel_policy_passes_its_own_suite_and_packs() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("team-policy");
    let mut new = operator();
    new.args(["policy", "new", "team-policy", "--lang", "cel", "--reads"])
        .args(["--hooks", "decorate,resources,classify", "--dir"])
        .arg(&project);
    let printed = expect_exit_zero(&run(new, None, Duration::from_secs(60)), "policy new");
    assert!(
        printed.contains("policy pack --cel policy.cel.yaml --name team-policy"),
        "{printed}"
    );

    let report = suite(
        &project.join("tests/suite.yaml"),
        Some(&project.join("policy.cel.yaml")),
    );
    assert!(report.contains("7 passed, 0 failed"), "{report}");
    assert!(report.contains("read namespaces ml: 1 object"), "{report}");

    let mut pack = operator();
    pack.args(["policy", "pack", "--name", "team-policy", "--cel"])
        .arg(project.join("policy.cel.yaml"));
    let configmap = expect_exit_zero(&run(pack, None, Duration::from_secs(60)), "policy pack");
    assert!(
        configmap.contains("name: tfjob-policy-team-policy"),
        "{configmap}"
    );
    // The packed ConfigMap runs the same suite.
    let packed = project.join("configmap.yaml");
    std::fs::write(&packed, &configmap).unwrap();
    suite(&project.join("tests/suite.yaml"), Some(&packed));
}
