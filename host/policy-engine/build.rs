//! Builds the default guest policies, the CEL policy's evaluator (and the hostile test policy)
//! for `wasm32-wasip2` so the operator can embed them: the operator works with zero
//! configuration and runs its defaults in the same sandbox as any other policy.
//!
//! The guests are built by a nested cargo into a separate target directory (no lock contention
//! with the outer build) with the `guest` profile (see the workspace `Cargo.toml`). That
//! directory is one fixed place under the outer target directory, not this script's `OUT_DIR`:
//! `cargo clippy` and `cargo test` give the script different output directories (clippy's driver
//! is part of the hash), and with one guest directory the second build finds the guests built
//! and nested cargo does nothing.
//!
//! The bytes must not depend on the machine that built them: `deploy/policies/` holds the
//! defaults packed with their sha256 pinned, and a test compares them with the embedded ones.
//! Sources of the workspace are compiled with relative paths already, but dependencies are
//! compiled from the cargo home, whose absolute path ends up in panic locations; it is remapped
//! to `/cargo` (and the workspace root to `.`, in case a path ever gets absolute there).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Guest crates and the file name cargo gives their component, in groups built by one cargo
/// run each. Cargo unifies the features of the dependencies of the packages one run builds, so
/// the CEL policy (whose CEL and JSON-patch crates turn on features of shared dependencies) is
/// built apart: the default policies' bytes never depend on it.
const GUESTS: &[&[(&str, &str)]] = &[
    &[
        ("tfjob-default-decorate", "tfjob_default_decorate.wasm"),
        ("tfjob-default-resources", "tfjob_default_resources.wasm"),
        ("tfjob-default-classify", "tfjob_default_classify.wasm"),
        ("tfjob-hostile-policy", "tfjob_hostile_policy.wasm"),
    ],
    &[("tfjob-cel-policy", "tfjob_cel_policy.wasm")],
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir.join("../..");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let target_dir = guest_target_dir(&out_dir);
    println!(
        "cargo:rerun-if-changed={}",
        root.join("guest-policies").display()
    );
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    // The `guest` profile and the locked dependency versions decide the bytes as much as the
    // sources do.
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    println!("cargo:rerun-if-env-changed=CARGO_HOME");
    // The nested build inherits these, and they change the guests' bytes (a profile with the
    // symbol names kept is how the guests are profiled).
    for setting in [
        "OPT_LEVEL",
        "STRIP",
        "DEBUG",
        "LTO",
        "CODEGEN_UNITS",
        "PANIC",
    ] {
        println!("cargo:rerun-if-env-changed=CARGO_PROFILE_GUEST_{setting}");
    }

    for group in GUESTS {
        build(&root, &target_dir, group);
        for (_, file) in *group {
            let built = target_dir.join("wasm32-wasip2/guest").join(file);
            std::fs::copy(&built, out_dir.join(file))
                .unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
        }
    }
}

/// Where the guests are built: `guest-policies/` in the outer build's target directory (the
/// nearest ancestor of `OUT_DIR` that cargo marked with `CACHEDIR.TAG`), shared by every
/// profile and tool that runs this script; `OUT_DIR` itself if no such ancestor is found.
/// Nested cargo locks the directory, so two builds at once wait for each other.
fn guest_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(|target| target.join("guest-policies"))
        .unwrap_or_else(|| out_dir.join("guest-target"))
}

/// Builds the guest crates of `group` with one nested cargo run.
fn build(root: &Path, target_dir: &Path, group: &[(&str, &str)]) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(target_dir);
    for (krate, _) in group {
        cmd.args(["-p", krate]);
    }
    // The outer build's flags and wrappers are for the host target; the guests get their own.
    // (The remapping flags are set after this loop.)
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_PROFILE_RELEASE_DEBUG",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", remap_flags(root).join("\x1f"));
    let status = cmd
        .status()
        .expect("running cargo to build the guest policies");
    assert!(
        status.success(),
        "building the guest policies failed; is the target installed? (rustup target add wasm32-wasip2)"
    );
}

/// `--remap-path-prefix` flags that make the guests' bytes independent of where the workspace
/// and the cargo home are.
fn remap_flags(root: &Path) -> Vec<String> {
    let mut flags = Vec::new();
    if let Ok(root) = root.canonicalize() {
        flags.push(format!("--remap-path-prefix={}=.", root.display()));
    }
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    if let Some(home) = cargo_home {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
        // The cargo home may be reached through a symlink; its real path is remapped too.
        if let Ok(canonical) = home.canonicalize()
            && canonical != home
        {
            flags.push(format!(
                "--remap-path-prefix={}=/cargo",
                canonical.display()
            ));
        }
    }
    flags
}
