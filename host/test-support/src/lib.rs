//! Building policies for the tests and benches the way their authors build them: Python with
//! componentize-py, JavaScript with componentize-js (at the versions the SDKs pin,
//! `guest-policies/sdk-python/requirements.txt` and `guest-policies/sdk-js/package-lock.json`),
//! Rust with cargo for `wasm32-wasip2`; running a child process with a time limit; a real OCI
//! registry on loopback ([`registry::Registry`]); an OTLP/HTTP trace receiver
//! ([`otlp::Receiver`]); and the round counts of looping tests ([`rounds()`]).
//!
//! `tests/run` installs both componentize tools outside the clone and names them in
//! `TFJOB_COMPONENTIZE_PY` and `TFJOB_COMPONENTIZE_JS`. Elsewhere they are looked up on `PATH`
//! (and componentize-js in `guest-policies/sdk-js/node_modules` after `npm ci` there). A build
//! that cannot find its tool fails, saying how to install it: a test never passes without
//! having run. This crate serves tests, so it fails by panicking with what went wrong.

mod kept;
pub mod otlp;
mod process;
pub mod registry;
pub mod rounds;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use kept::{compiled_policies_dir, forget_unused, kept_between_runs, policy_target_dir};
pub use process::run;
pub use rounds::rounds;

use kept::BuildInputs;

/// How long one componentize run may take (10 to 30 s each on two cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a cargo build of policy crates may take (minutes on a cold cache).
const CARGO_TIMEOUT: Duration = Duration::from_secs(900);

/// `path` in the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

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
        "run the suite with tests/run, which installs it (or pip install -r \
         guest-policies/sdk-python/requirements.txt)",
    )
}

pub fn componentize_js() -> PathBuf {
    tool(
        "TFJOB_COMPONENTIZE_JS",
        "componentize-js",
        &[repo(
            "guest-policies/sdk-js/node_modules/.bin/componentize-js",
        )],
        "run the suite with tests/run, which installs it (or run npm ci in guest-policies/sdk-js)",
    )
}

/// Builds the Python app module `app.py` of `dir` with the repository's SDK into a component of
/// the contract's `world`, written to `out`. A component built before from the same inputs is
/// taken from [`kept_between_runs`] instead.
pub fn build_python(dir: &Path, world: &str, out: &Path) {
    let tool = componentize_py();
    let mut inputs = BuildInputs::new(&tool);
    inputs
        .part(b"python")
        .part(world.as_bytes())
        .tree(&repo("wit/policy.wit"))
        .tree(&repo("guest-policies/sdk-python"))
        .tree(dir);
    kept::build_or_reuse(inputs, out, |out| {
        let mut cmd = Command::new(&tool);
        cmd.arg("-d")
            .arg(repo("wit/policy.wit"))
            .args(["-w", world, "componentize", "-p"])
            .arg(repo("guest-policies/sdk-python"))
            .arg("-p")
            .arg(dir)
            .arg("app")
            .arg("-o")
            .arg(out);
        expect_built(&run(cmd, None, BUILD_TIMEOUT), "componentize-py", dir);
    });
}

/// Builds the JavaScript module `source` (which imports the SDK by relative path) into a
/// component of the contract's `world`, without `wasi:http`, written to `out`.
pub fn build_js(source: &Path, world: &str, out: &Path) {
    build_js_with(source, world, out, &["--disable", "http", "fetch-event"]);
}

/// [`build_js`] with `options` instead of the features it disables. A component built before
/// from the same inputs is taken from [`kept_between_runs`] instead.
pub fn build_js_with(source: &Path, world: &str, out: &Path, options: &[&str]) {
    let tool = componentize_js();
    let mut inputs = BuildInputs::new(&tool);
    inputs.part(b"javascript").part(world.as_bytes());
    for option in options {
        inputs.part(option.as_bytes());
    }
    // The source imports its neighbours and the SDK by relative path.
    inputs
        .tree(&repo("wit/policy.wit"))
        .tree(&repo("guest-policies/sdk-js/tfjob-policy"))
        .part(source.file_name().unwrap().as_encoded_bytes())
        .tree(source.parent().unwrap());
    kept::build_or_reuse(inputs, out, |out| {
        // componentize-js reads the modules a source imports through the working directory
        // only: it must hold the SDK as well as the source.
        let root = repo("").canonicalize().unwrap();
        let mut cmd = Command::new(&tool);
        cmd.current_dir(&root)
            .arg(source.canonicalize().unwrap())
            .arg("--wit")
            .arg(repo("wit/policy.wit"))
            .args(["--world-name", world])
            .args(options)
            .arg("-o")
            .arg(out);
        expect_built(&run(cmd, None, BUILD_TIMEOUT), "componentize-js", source);
    });
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
    // The caller's own build settings are for the host.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let output = run(cmd, None, CARGO_TIMEOUT);
    expect_built(&output, "cargo build", Path::new(&packages.join(" ")));
    target_dir.join("wasm32-wasip2/guest")
}

/// Fails with both output streams unless the build exited 0.
fn expect_built(output: &std::process::Output, tool: &str, what: &Path) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{tool} {}\nstdout:\n{}\nstderr:\n{}",
        what.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
