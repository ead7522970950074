//! Building policies written in Python and JavaScript for the tests, with the tools a policy
//! author uses: componentize-py and componentize-js, at the versions the SDKs pin
//! (`guest-policies/sdk-python/requirements.txt`, `guest-policies/sdk-js/package-lock.json`).
//!
//! `.ci/run` installs both outside the clone and names them in `TFJOB_COMPONENTIZE_PY` and
//! `TFJOB_COMPONENTIZE_JS`. Elsewhere the tools are looked up on `PATH` (and componentize-js in
//! `guest-policies/sdk-js/node_modules` after `npm ci` there). A test that cannot find one
//! fails, saying how to install it: it never passes without having run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{expect_exit_zero, repo, run};

/// How long one componentize run may take (about 10 s each on two cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// `var`, else `name` on `PATH`, else the first of `also` that exists.
fn tool(var: &str, name: &str, also: &[PathBuf], install: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name));
    on_path
        .chain(also.iter().cloned())
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is needed and was not found: set {var}, or {install}"))
}

pub fn componentize_py() -> PathBuf {
    tool(
        "TFJOB_COMPONENTIZE_PY",
        "componentize-py",
        &[],
        "pip install -r guest-policies/sdk-python/requirements.txt",
    )
}

pub fn componentize_js() -> PathBuf {
    tool(
        "TFJOB_COMPONENTIZE_JS",
        "componentize-js",
        &[repo(
            "guest-policies/sdk-js/node_modules/.bin/componentize-js",
        )],
        "run npm ci in guest-policies/sdk-js",
    )
}

/// Builds the Python app module `app.py` of `dir` with the repository's SDK into a component of
/// the contract's `world`, written to `out`.
pub fn build_python(dir: &Path, world: &str, out: &Path) {
    let mut cmd = Command::new(componentize_py());
    cmd.arg("-d")
        .arg(repo("wit/policy.wit"))
        .args(["-w", world, "componentize", "-p"])
        .arg(repo("guest-policies/sdk-python"))
        .arg("-p")
        .arg(dir)
        .arg("app")
        .arg("-o")
        .arg(out);
    let output = run(cmd, None, BUILD_TIMEOUT);
    expect_exit_zero(&output, &format!("componentize-py {}", dir.display()));
}

/// Builds the JavaScript module `source` (which imports the SDK by relative path) into a
/// component of the contract's `world`, without `wasi:http`, written to `out`.
pub fn build_js(source: &Path, world: &str, out: &Path) {
    build_js_with(source, world, out, &["--disable", "http", "fetch-event"]);
}

/// [`build_js`] with `options` instead of the features it disables.
pub fn build_js_with(source: &Path, world: &str, out: &Path, options: &[&str]) {
    // componentize-js reads the modules a source imports through the working directory only:
    // it must hold the SDK as well as the source.
    let root = repo("").canonicalize().unwrap();
    let mut cmd = Command::new(componentize_js());
    cmd.current_dir(&root)
        .arg(source.canonicalize().unwrap())
        .arg("--wit")
        .arg(repo("wit/policy.wit"))
        .args(["--world-name", world])
        .args(options)
        .arg("-o")
        .arg(out);
    let output = run(cmd, None, BUILD_TIMEOUT);
    expect_exit_zero(&output, &format!("componentize-js {}", source.display()));
}

/// Builds the Rust crates `packages` of the workspace for `wasm32-wasip2` (the `guest`
/// profile) into `target_dir`; returns where the components are.
pub fn build_rust(packages: &[&str], target_dir: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo(""))
        .args([
            "build",
            "--locked",
            "--profile",
            "guest",
            "--target",
            "wasm32-wasip2",
        ])
        .arg("--target-dir")
        .arg(target_dir);
    for p in packages {
        cmd.args(["-p", p]);
    }
    // The test's own build settings are for the host.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let output = run(cmd, None, Duration::from_secs(900));
    expect_exit_zero(&output, "cargo build of the Rust examples");
    target_dir.join("wasm32-wasip2/guest")
}
