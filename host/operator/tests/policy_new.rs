//! End-to-end tests of `tfjob-operator policy new`: the crate it writes, the names and
//! directories it refuses, and (the slow test) a generated crate built for `wasm32-wasip2` with
//! no edits and run through its own suite in the sandbox.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::text;

const TIMEOUT: Duration = Duration::from_secs(120);

/// `policy new` with `args`, run in `cwd`.
fn new(cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = common::operator();
    cmd.current_dir(cwd).args(["policy", "new"]).args(args);
    common::run(cmd, None, TIMEOUT)
}

/// Every non-empty choice of hooks, as `--hooks` takes it.
fn combinations() -> Vec<String> {
    let hooks = ["decorate", "resources", "classify"];
    (1u8..8)
        .map(|bits| {
            let chosen: Vec<&str> = (0..3)
                .filter(|i| bits & (1 << i) != 0)
                .map(|i| hooks[i])
                .collect();
            chosen.join(",")
        })
        .collect()
}

/// Every file below `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned());
            }
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_crate_has_what_a_team_needs_for_the_hooks_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let out = new(dir.path(), &["team-labels", "--hooks", "classify,decorate"]);
    let stdout = common::expect_success(&out, "policy new");
    assert!(
        stdout.contains("Created policy team-labels in team-labels (hooks: classify, decorate"),
        "{stdout}"
    );
    assert!(stdout.contains("policy test --suite tests/suite.yaml --policy target/wasm32-wasip2/release/team_labels.wasm"), "{stdout}");
    let root = dir.path().join("team-labels");
    let files = tree(&root);
    let (vendored, own): (Vec<&String>, Vec<&String>) =
        files.iter().partition(|f| f.starts_with("vendor/"));
    assert_eq!(
        own,
        [
            ".gitignore",
            "Cargo.toml",
            "README.md",
            "src/lib.rs",
            "tests/pods/oom-killed.yaml",
            "tests/pods/worker.yaml",
            "tests/suite.yaml",
            "wit/deps/tfjob-policy/policy.wit",
            "wit/world.wit",
        ]
    );
    // Outside a checkout of the repository: the SDK this binary carries, as it is in the
    // repository, beside the crate.
    for (vendored_path, original) in [
        (
            "vendor/crates/tfjob-policy-sdk/src/lib.rs",
            "guest-policies/sdk/src/lib.rs",
        ),
        (
            "vendor/crates/tfjob-policy-logic/src/quantity.rs",
            "guest-policies/logic/src/quantity.rs",
        ),
        ("vendor/wit/policy.wit", "wit/policy.wit"),
    ] {
        assert!(vendored.iter().any(|f| *f == vendored_path), "{vendored:?}");
        assert_eq!(
            read(&root.join(vendored_path)),
            read(&common::repo(original))
        );
    }
    // The contract exactly as this operator has it.
    assert_eq!(
        read(&root.join("wit/deps/tfjob-policy/policy.wit")),
        read(&common::repo("wit/policy.wit"))
    );
    let world = read(&root.join("wit/world.wit"));
    assert!(
        world.contains("export tfjob:policy/decorate@0.3.0;"),
        "{world}"
    );
    assert!(
        world.contains("export tfjob:policy/classify@0.3.0;"),
        "{world}"
    );
    assert!(!world.contains("resources"), "{world}");
    let lib = read(&root.join("src/lib.rs"));
    assert!(lib.starts_with("//! The `team-labels` policy"), "{lib}");
    assert!(lib.contains("struct TeamLabelsPolicy;"));
    assert!(!lib.contains("override_resources"));
    let cargo = read(&root.join("Cargo.toml"));
    assert!(cargo.contains("name = \"team-labels\""), "{cargo}");
    assert!(cargo.contains("\n[workspace]\n"), "{cargo}");
    assert!(
        cargo.contains("tfjob-policy-sdk = { path = \"vendor/crates/tfjob-policy-sdk\" }"),
        "{cargo}"
    );
    let readme = read(&root.join("README.md"));
    for step in [
        "cargo build --release --target wasm32-wasip2",
        "policy test --suite tests/suite.yaml",
        "policy pack",
        "--hooks decorate,classify",
    ] {
        assert!(readme.contains(step), "README lacks {step:?}:\n{readme}");
    }
}

#[test]
fn the_sdk_is_a_path_inside_a_checkout_or_with_sdk_path() {
    let dir = tempfile::tempdir().unwrap();
    // A checkout: an SDK crate two levels up from the new crate.
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("guest-policies/sdk")).unwrap();
    std::fs::write(
        checkout.join("guest-policies/sdk/Cargo.toml"),
        "[package]\nname = \"tfjob-policy-sdk\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(checkout.join("policies")).unwrap();
    common::expect_success(
        &new(&checkout.join("policies"), &["gpu"]),
        "policy new in a checkout",
    );
    let cargo = read(&checkout.join("policies/gpu/Cargo.toml"));
    assert!(
        cargo.contains("tfjob-policy-sdk = { path = \"../../guest-policies/sdk\" }"),
        "{cargo}"
    );
    // --sdk-path wins, relative to the crate.
    let sdk = common::repo("guest-policies/sdk");
    let out = new(
        dir.path(),
        &[
            "gpu",
            "--dir",
            "elsewhere/gpu",
            "--sdk-path",
            sdk.to_str().unwrap(),
        ],
    );
    common::expect_success(&out, "policy new --sdk-path");
    let cargo = read(&dir.path().join("elsewhere/gpu/Cargo.toml"));
    let line = cargo
        .lines()
        .find(|l| l.starts_with("tfjob-policy-sdk = { path = \""))
        .expect(&cargo);
    let relative = line.split('"').nth(1).unwrap();
    assert!(relative.starts_with("../"), "{line}");
    assert_eq!(
        dir.path()
            .join("elsewhere/gpu")
            .join(relative)
            .canonicalize()
            .unwrap(),
        sdk.canonicalize().unwrap()
    );
    // Not an SDK: refused, and the directory it would have made is gone again.
    let out = new(
        dir.path(),
        &[
            "gpu",
            "--dir",
            "third",
            "--sdk-path",
            dir.path().to_str().unwrap(),
        ],
    );
    let err = common::expect_failure(&out, "not an SDK");
    assert!(
        err.contains("--sdk-path") && err.contains("tfjob-policy-sdk"),
        "{err}"
    );
    assert!(!dir.path().join("third").exists());
}

#[test]
fn bad_names_hooks_and_directories_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = dir.path().join("cwd");
    std::fs::create_dir(&sandbox).unwrap();
    for name in [
        "../evil",
        "a/b",
        "/tmp/evil",
        ".",
        "..",
        "Evil",
        "team_labels",
        "1st",
        "x-",
        "fn",
        "self",
        "std",
        "naïve",
        &"x".repeat(64),
        "",
    ] {
        let out = new(&sandbox, &[name]);
        let err = common::expect_failure(&out, name);
        assert!(
            err.starts_with(&format!("error: NAME {name:?}: ")),
            "{name}: {err}"
        );
    }
    assert!(tree(dir.path()).is_empty(), "{:?}", tree(dir.path()));
    // A name that looks like a flag is not taken as one.
    let out = new(&sandbox, &["--", "-x"]);
    assert!(common::expect_failure(&out, "-x").contains("NAME \"-x\""));
    let err = common::expect_failure(
        &new(&sandbox, &["ok", "--hooks", "decorate,decorate"]),
        "twice",
    );
    assert!(err.contains("--hooks: decorate is named twice"), "{err}");
    let out = new(&sandbox, &["ok", "--hooks", "decorate,teapot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown hook \"teapot\""),
        "{}",
        text(&out.stderr)
    );
    assert!(tree(dir.path()).is_empty());

    // A directory with anything in it is left as it is.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("Cargo.toml"), "mine").unwrap();
    let err = common::expect_failure(
        &new(&sandbox, &["ok", "--dir", taken.to_str().unwrap()]),
        "taken",
    );
    assert!(err.contains("exists and is not empty"), "{err}");
    assert_eq!(read(&taken.join("Cargo.toml")), "mine");
    assert_eq!(tree(&taken), ["Cargo.toml"]);
    // A file, and a symbolic link to a directory elsewhere, are not directories to write into.
    std::fs::write(dir.path().join("file"), "x").unwrap();
    let err = common::expect_failure(
        &new(
            &sandbox,
            &["ok", "--dir", dir.path().join("file").to_str().unwrap()],
        ),
        "file",
    );
    assert!(err.contains("exists and is not a directory"), "{err}");
    let target = dir.path().join("target-dir");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("link")).unwrap();
    let err = common::expect_failure(
        &new(
            &sandbox,
            &["ok", "--dir", dir.path().join("link").to_str().unwrap()],
        ),
        "link",
    );
    assert!(err.contains("exists and is not a directory"), "{err}");
    assert!(tree(&target).is_empty());
    // An empty directory is fine.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    common::expect_success(
        &new(&sandbox, &["ok", "--dir", empty.to_str().unwrap()]),
        "empty dir",
    );
    assert!(empty.join("src/lib.rs").exists());
}

#[test]
fn every_choice_of_hooks_exports_exactly_those_hooks() {
    let dir = tempfile::tempdir().unwrap();
    for hooks in combinations() {
        let name = format!("p-{}", hooks.replace(',', "-"));
        common::expect_success(&new(dir.path(), &[&name, "--hooks", &hooks]), &hooks);
        let world = read(&dir.path().join(&name).join("wit/world.wit"));
        let suite = read(&dir.path().join(&name).join("tests/suite.yaml"));
        for hook in ["decorate", "resources", "classify"] {
            let chosen = hooks.split(',').any(|h| h == hook);
            assert_eq!(
                world.contains(&format!("export tfjob:policy/{hook}@0.3.0;")),
                chosen,
                "{hooks}: {world}"
            );
            assert_eq!(
                suite.contains(&format!("hook: {hook}")),
                chosen,
                "{hooks}: {suite}"
            );
        }
    }
}

/// How a generated crate is built.
#[derive(Clone, Copy, PartialEq)]
enum Build {
    /// With the profile the crate was generated with (fat LTO: a small component).
    AsGenerated,
    /// Without LTO, which takes most of a build's time: for crates after the first, whose
    /// profile the first already proved, and whose suites test the code, not its size.
    WithoutLto,
}

/// Runs cargo in `dir` with the environment of a plain shell: the variables the outer cargo
/// set for this test (its target directory, flags, jobserver) would steer the nested build.
fn cargo(dir: &Path, target_dir: &Path, args: &[&str], build: Build) -> Output {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(dir)
        .args(args)
        .arg("--target-dir")
        .arg(target_dir);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let from_cargo = key.starts_with("CARGO_") && key != "CARGO_HOME";
        if from_cargo
            || matches!(
                key.as_str(),
                "RUSTFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "MAKEFLAGS" | "MFLAGS"
            )
        {
            cmd.env_remove(key);
        }
    }
    // The dependencies are in the registry cache already (the SDK's are this workspace's).
    cmd.env("CARGO_NET_OFFLINE", "true");
    if build == Build::WithoutLto {
        cmd.env("CARGO_PROFILE_RELEASE_LTO", "false");
    }
    common::run(cmd, None, Duration::from_secs(40 * 60))
}

fn cargo_ok(dir: &Path, target_dir: &Path, args: &[&str], build: Build) {
    let out = cargo(dir, target_dir, args, build);
    assert!(
        out.status.success(),
        "cargo {args:?} in {}\nstdout:\n{}\nstderr:\n{}",
        dir.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Slow (minutes on a cold cache: it compiles the SDK and k8s-openapi for `wasm32-wasip2`): a
/// generated crate for each choice of hooks builds as generated and passes its own suite in the
/// sandbox; the crate with every hook (and `--reads`) also passes its native unit tests, and is made outside
/// the checkout with no `--sdk-path`, so it builds on the SDK the binary wrote beside it, with
/// the profile it was generated with; the others build without LTO. The build cache is kept
/// between runs (`common::policy_target_dir`), so later runs are fast.
#[test]
fn slow_generated_crates_build_for_wasm_and_pass_their_own_suites() {
    let dir = tempfile::tempdir().unwrap();
    let target_dir = common::policy_target_dir("policy-new");
    let sdk = common::repo("guest-policies/sdk");
    let mut combos = combinations();
    // Every hook first: its native tests too.
    combos.reverse();
    for (i, hooks) in combos.iter().enumerate() {
        let name = format!("e2e-{}", hooks.replace(',', "-"));
        let sdk_path = sdk.to_str().unwrap();
        let mut args = vec![name.as_str(), "--hooks", hooks];
        if i > 0 {
            args.extend(["--sdk-path", sdk_path]);
        } else {
            // Its decoration reads the cluster too: the suite's reading cases run.
            args.push("--reads");
        }
        common::expect_success(&new(dir.path(), &args), hooks);
        if i == 0 {
            let cargo = read(&dir.path().join(&name).join("Cargo.toml"));
            assert!(
                cargo.contains("path = \"vendor/crates/tfjob-policy-sdk\""),
                "{cargo}"
            );
        }
        let root = dir.path().join(&name);
        // The versions this workspace was tested with, so the offline build finds them.
        std::fs::copy(common::repo("Cargo.lock"), root.join("Cargo.lock")).unwrap();
        let build = if i == 0 {
            Build::AsGenerated
        } else {
            Build::WithoutLto
        };
        cargo_ok(
            &root,
            &target_dir,
            &["build", "--release", "--target", "wasm32-wasip2"],
            build,
        );
        if i == 0 {
            cargo_ok(&root, &target_dir, &["test"], build);
        }
        let wasm = target_dir.join(format!(
            "wasm32-wasip2/release/{}.wasm",
            name.replace('-', "_")
        ));
        let out = {
            let mut cmd = common::limited();
            cmd.current_dir(&root).args([
                "policy",
                "test",
                "--suite",
                "tests/suite.yaml",
                "--policy",
                wasm.to_str().unwrap(),
            ]);
            common::run(cmd, None, TIMEOUT)
        };
        let report = common::expect_success(&out, &format!("the suite of {name}"));
        assert!(report.contains(" passed, 0 failed\n"), "{report}");
        let inspect = {
            let mut cmd = common::operator();
            cmd.args(["policy", "inspect", wasm.to_str().unwrap()]);
            common::run(cmd, None, TIMEOUT)
        };
        let info: serde_json::Value =
            serde_json::from_str(&common::expect_success(&inspect, "inspect")).unwrap();
        let exported: Vec<&str> = info["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert_eq!(exported.join(","), *hooks, "{name}");
        assert_eq!(info["validatesSettings"], true);
        assert_eq!(info["contract"], "0.3.0");
    }
}
