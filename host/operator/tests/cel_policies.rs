//! CEL policies through the CLI a platform team uses: the examples of `deploy/examples/cel`
//! pass their suites; `gpu-placement` passes one suite as a CEL policy and as a Rust component;
//! `policy pack --cel` prints a ConfigMap the operator loads, and refuses what it would refuse
//! with the expression and a caret; `policy new --lang cel` writes a policy that passes the
//! suite it comes with.

mod common;

use std::path::Path;
use std::time::Duration;

use common::languages::build_rust;
use common::{expect_exit_zero, operator, repo, run};

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
    for name in ["namespace-labels", "memory-defaults", "failure-classes"] {
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
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("examples"),
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
