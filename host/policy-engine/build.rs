//! Builds the default guest policies (and the hostile test policy) for `wasm32-wasip2` so the
//! operator can embed them: the operator works with zero configuration and runs its defaults in
//! the same sandbox as any other policy.
//!
//! The guests are built by a nested cargo into a separate target directory (no lock contention
//! with the outer build) with the size-optimised `guest` profile.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Guest crates and the file name cargo gives their component.
const GUESTS: &[(&str, &str)] = &[
    ("tfjob-default-decorate", "tfjob_default_decorate.wasm"),
    ("tfjob-default-resources", "tfjob_default_resources.wasm"),
    ("tfjob-default-classify", "tfjob_default_classify.wasm"),
    ("tfjob-hostile-policy", "tfjob_hostile_policy.wasm"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir.join("../..");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let target_dir = out_dir.join("guest-target");
    println!(
        "cargo:rerun-if-changed={}",
        root.join("guest-policies").display()
    );
    println!("cargo:rerun-if-changed={}", root.join("wit").display());

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--profile", "guest", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target_dir);
    for (krate, _) in GUESTS {
        cmd.args(["-p", krate]);
    }
    // The outer build's flags and wrappers are for the host target; the guests get their own.
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
    let status = cmd
        .status()
        .expect("running cargo to build the guest policies");
    assert!(
        status.success(),
        "building the guest policies failed; is the target installed? (rustup target add wasm32-wasip2)"
    );
    for (_, file) in GUESTS {
        let built = target_dir.join("wasm32-wasip2/guest").join(file);
        std::fs::copy(&built, out_dir.join(file))
            .unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
    }
}
