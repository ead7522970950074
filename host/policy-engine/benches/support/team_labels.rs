//! Builds the team-labels example (`guest-policies/examples/team-labels`) in Rust, Python and
//! JavaScript for the benches that compare languages, as the tests build policies
//! (`tfjob_test_support`): Rust with cargo (`guest` profile), Python and JavaScript with
//! `TFJOB_COMPONENTIZE_PY` and `TFJOB_COMPONENTIZE_JS` (or the tools on `PATH`; `tests/run`
//! installs them). Included by the policy engine's `languages` bench and the operator's
//! `loaded_policies` bench.

use std::path::Path;

use tfjob_test_support::{build_js, build_python, build_rust, policy_target_dir, repo};

/// The team-labels example in `lang`, built into `dir`.
pub fn build(lang: &str, dir: &Path) -> Vec<u8> {
    let example = repo("guest-policies/examples/team-labels");
    let out = dir.join(format!("team-labels-{lang}.wasm"));
    match lang {
        "rust" => {
            let target = policy_target_dir("examples", &repo("target/tmp"));
            let built = build_rust(&["example-team-labels"], &target);
            return std::fs::read(built.join("example_team_labels.wasm")).unwrap();
        }
        "python" => build_python(&example.join("python"), "decorator", &out),
        _ => build_js(&example.join("js/policy.js"), "decorator", &out),
    }
    std::fs::read(out).unwrap()
}
