//! Builds the team-labels example (`guest-policies/examples/team-labels`) in Rust, Python and
//! JavaScript for the benches that compare languages: Rust with cargo (`guest` profile, into
//! `target/bench-examples`), Python and JavaScript with `TFJOB_COMPONENTIZE_PY` and
//! `TFJOB_COMPONENTIZE_JS` (or the tools on `PATH`; `.ci/run` shows how to install them).
//! Included by the policy engine's `languages` bench and the operator's `loaded_policies`
//! bench.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `path` in the repository (both benches' crates are `host/<crate>`).
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// Runs `cmd`, failing the bench with what it printed when it fails.
pub fn run(mut cmd: Command, what: &str) {
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The team-labels example in `lang`, built into `dir`.
pub fn build(lang: &str, dir: &Path) -> Vec<u8> {
    let root = repo("").canonicalize().unwrap();
    let wit = root.join("wit/policy.wit");
    let example = root.join("guest-policies/examples/team-labels");
    let out = dir.join(format!("team-labels-{lang}.wasm"));
    match lang {
        "rust" => {
            let target = root.join("target/bench-examples");
            let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()));
            cmd.current_dir(&root)
                .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
                .args(["-p", "example-team-labels", "--target-dir"])
                .arg(&target);
            run(cmd, "cargo build of the Rust example");
            return std::fs::read(target.join("wasm32-wasip2/guest/example_team_labels.wasm"))
                .unwrap();
        }
        "python" => {
            let tool =
                std::env::var_os("TFJOB_COMPONENTIZE_PY").unwrap_or("componentize-py".into());
            let mut cmd = Command::new(tool);
            cmd.arg("-d")
                .arg(&wit)
                .args(["-w", "decorator", "componentize", "-p"])
                .arg(root.join("guest-policies/sdk-python"))
                .arg("-p")
                .arg(example.join("python"))
                .args(["app", "-o"])
                .arg(&out);
            run(cmd, "componentize-py");
        }
        _ => {
            let tool =
                std::env::var_os("TFJOB_COMPONENTIZE_JS").unwrap_or("componentize-js".into());
            let mut cmd = Command::new(tool);
            // componentize-js reads the modules a source imports through the working directory.
            cmd.current_dir(&root)
                .arg(example.join("js/policy.js"))
                .arg("--wit")
                .arg(&wit)
                .args([
                    "--world-name",
                    "decorator",
                    "--disable",
                    "http",
                    "fetch-event",
                    "-o",
                ])
                .arg(&out);
            run(cmd, "componentize-js");
        }
    }
    std::fs::read(out).unwrap()
}
