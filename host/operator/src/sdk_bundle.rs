//! The policy SDK's source, carried in the binary, so that `policy new` writes a crate that
//! builds anywhere with nothing but crates.io: the SDK (`guest-policies/sdk`), the decision
//! logic it builds on (`guest-policies/logic`) and the contract's WIT, exactly as this operator
//! was built with them, under the new crate's `vendor/`.
//!
//! The sources are included file by file; a test holds the lists to the directories, and the
//! vendored manifests' dependencies to the workspace's, so neither can drift.

use std::path::PathBuf;

/// Where the bundle goes in a new crate, and where its SDK crate is, relative to the crate.
pub const VENDOR_DIR: &str = "vendor";
pub const SDK_DIR: &str = "vendor/crates/tfjob-policy-sdk";

/// The SDK's `wit.rs` reads the contract from `../../wit`, relative to its manifest.
const WIT: (&str, &str) = (
    "vendor/wit/policy.wit",
    include_str!("../../../wit/policy.wit"),
);

const SDK_MANIFEST: &str = include_str!("../templates/policy-new/vendor/sdk.Cargo.toml");
const LOGIC_MANIFEST: &str = include_str!("../templates/policy-new/vendor/logic.Cargo.toml");

macro_rules! sources {
    ($dir:literal: $($file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("../../../guest-policies/", $dir, "/src/", $file)))),*]
    };
}

/// The SDK's `src/` files.
const SDK_SOURCES: &[(&str, &str)] = sources!("sdk": "cluster.rs", "convert.rs", "lib.rs", "log.rs", "pod.rs", "settings.rs", "wit.rs");

/// The logic crate's `src/` files.
const LOGIC_SOURCES: &[(&str, &str)] = sources!("logic":
    "classify.rs", "classify_settings.rs", "context.rs", "decorate.rs", "duration.rs", "json.rs",
    "label_selector.rs", "lib.rs", "names.rs", "never_fits.rs", "ordered.rs", "quantity.rs", "resources.rs", "settings.rs", "text.rs", "verdict.rs",
);

/// The Python SDK (`guest-policies/sdk-python/tfjob_policy`), written as `tfjob_policy/` of a
/// new Python policy.
const PYTHON_SOURCES: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/__init__.py"),
    ),
    (
        "cluster.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/cluster.py"),
    ),
    (
        "context.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/context.py"),
    ),
    (
        "errors.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/errors.py"),
    ),
    (
        "hooks.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/hooks.py"),
    ),
    (
        "log.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/log.py"),
    ),
    (
        "pod.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/pod.py"),
    ),
    (
        "settings.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/settings.py"),
    ),
    (
        "verdict.py",
        include_str!("../../../guest-policies/sdk-python/tfjob_policy/verdict.py"),
    ),
];

/// The pinned componentize-py of the Python SDK.
pub const PYTHON_REQUIREMENTS: &str =
    include_str!("../../../guest-policies/sdk-python/requirements.txt");

/// The JavaScript SDK (`guest-policies/sdk-js/tfjob-policy`), written as `tfjob-policy/` of a
/// new JavaScript policy.
const JS_SOURCES: &[(&str, &str)] = &[
    (
        "core.js",
        include_str!("../../../guest-policies/sdk-js/tfjob-policy/core.js"),
    ),
    (
        "index.js",
        include_str!("../../../guest-policies/sdk-js/tfjob-policy/index.js"),
    ),
];

/// The JavaScript SDK's lock file: the pinned componentize-js and every package it brings, with
/// their integrity hashes. A new policy's `package.json` asks for exactly what it locks.
const JS_LOCK: &str = include_str!("../../../guest-policies/sdk-js/package-lock.json");
/// The name the lock file carries for its root package.
const JS_LOCK_NAME: &str = "tfjob-policy-sdk";

/// The Python SDK's files, path relative to the new policy.
pub fn python_files() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from("tfjob_policy");
    let mut out: Vec<(PathBuf, String)> = PYTHON_SOURCES
        .iter()
        .map(|(f, t)| (dir.join(f), (*t).to_owned()))
        .collect();
    out.push(("requirements.txt".into(), PYTHON_REQUIREMENTS.to_owned()));
    out
}

/// The JavaScript SDK's files and the lock file for a policy named `name`, path relative to it.
pub fn js_files(name: &str) -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from("tfjob-policy");
    let mut out: Vec<(PathBuf, String)> = JS_SOURCES
        .iter()
        .map(|(f, t)| (dir.join(f), (*t).to_owned()))
        .collect();
    // The root package's name appears twice, at the top and as the `""` package; the
    // dependencies' entries are keyed by `node_modules/...` and never carry it.
    let quoted = format!("\"name\": \"{JS_LOCK_NAME}\"");
    out.push((
        "package-lock.json".into(),
        JS_LOCK.replace(&quoted, &format!("\"name\": \"{name}\"")),
    ));
    out
}

/// A manifest template with this operator's version filled in.
fn manifest(template: &str) -> String {
    template
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{rust_version}}", env!("CARGO_PKG_RUST_VERSION"))
}

/// Every file of the bundle, path relative to the new crate.
pub fn files() -> Vec<(PathBuf, String)> {
    let mut out = vec![(PathBuf::from(WIT.0), WIT.1.to_owned())];
    for (name, template, sources) in [
        ("tfjob-policy-sdk", SDK_MANIFEST, SDK_SOURCES),
        ("tfjob-policy-logic", LOGIC_MANIFEST, LOGIC_SOURCES),
    ] {
        let dir = PathBuf::from(VENDOR_DIR).join("crates").join(name);
        out.push((dir.join("Cargo.toml"), manifest(template)));
        for (file, text) in sources {
            out.push((dir.join("src").join(file), (*text).to_owned()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn repo(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path)
    }

    fn listed(dir: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(repo(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_language_sdks_are_carried_whole() {
        for (dir, sources) in [
            ("guest-policies/sdk-python/tfjob_policy", PYTHON_SOURCES),
            ("guest-policies/sdk-js/tfjob-policy", JS_SOURCES),
        ] {
            let bundled: Vec<String> = sources.iter().map(|(f, _)| (*f).to_owned()).collect();
            let on_disk: Vec<String> = listed(dir)
                .into_iter()
                .filter(|f| f != "__pycache__")
                .collect();
            assert_eq!(bundled, on_disk, "{dir}: add the new file to sdk_bundle.rs");
        }
        let lock = js_files("team-labels")
            .into_iter()
            .find(|(p, _)| p == Path::new("package-lock.json"))
            .unwrap()
            .1;
        let lock: serde_json::Value = serde_json::from_str(&lock).unwrap();
        assert_eq!(lock["name"], "team-labels");
        assert_eq!(lock["packages"][""]["name"], "team-labels");
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(repo("guest-policies/sdk-js/package.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            lock["packages"][""]["devDependencies"], manifest["devDependencies"],
            "the lock file pins what the SDK's package.json asks for"
        );
        let template: serde_json::Value = serde_json::from_str(
            &include_str!("../templates/policy-new/js/package.json")
                .replace("{{name}}", "x")
                .replace("{{hooks}}", "decorate"),
        )
        .unwrap();
        assert_eq!(
            template["devDependencies"], manifest["devDependencies"],
            "a new policy asks for what the lock file pins"
        );
        assert!(PYTHON_REQUIREMENTS.trim().starts_with("componentize-py=="));
    }

    #[test]
    fn the_bundle_holds_every_source_file_as_it_is() {
        for (dir, sources) in [
            ("guest-policies/sdk/src", SDK_SOURCES),
            ("guest-policies/logic/src", LOGIC_SOURCES),
        ] {
            let bundled: Vec<String> = sources.iter().map(|(f, _)| (*f).to_owned()).collect();
            assert_eq!(
                bundled,
                listed(dir),
                "{dir}: add the new file to sdk_bundle.rs"
            );
        }
        assert!(
            SDK_SOURCES
                .iter()
                .any(|(_, t)| t.contains("path: \"../../wit\""))
        );
        let files = files();
        assert!(
            files
                .iter()
                .any(|(p, _)| p == Path::new("vendor/wit/policy.wit"))
        );
        assert!(files.iter().all(|(p, _)| p.starts_with(VENDOR_DIR)));
    }

    /// The `name = ...` lines of a manifest's `[dependencies]`, without comments.
    fn dependencies(manifest: &str) -> Vec<(String, String)> {
        manifest
            .split("\n[")
            .find(|section| section.starts_with("dependencies]"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once(" = "))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect()
    }

    #[test]
    fn the_vendored_manifests_ask_for_what_the_workspace_builds_with() {
        let workspace = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
        let pinned: std::collections::HashMap<String, String> = workspace
            .lines()
            .filter_map(|l| l.split_once(" = "))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        for (crate_dir, template) in [
            ("guest-policies/sdk", SDK_MANIFEST),
            ("guest-policies/logic", LOGIC_MANIFEST),
        ] {
            let own = std::fs::read_to_string(repo(&format!("{crate_dir}/Cargo.toml"))).unwrap();
            let theirs = dependencies(&own);
            let ours = dependencies(template);
            let names = |deps: &[(String, String)]| {
                let mut n: Vec<String> = deps.iter().map(|(k, _)| k.clone()).collect();
                n.sort();
                n
            };
            assert_eq!(
                names(&ours),
                names(&theirs),
                "{crate_dir}: the same dependencies"
            );
            for (name, spec) in &ours {
                let original = &theirs.iter().find(|(k, _)| k == name).unwrap().1;
                let expected = if original == "{ workspace = true }" {
                    pinned.get(name).cloned().unwrap_or_default()
                } else {
                    original.clone()
                };
                if name.starts_with("tfjob-policy-") {
                    assert!(
                        spec.starts_with("{ path = \"../"),
                        "{crate_dir}: {name} = {spec}"
                    );
                } else {
                    assert_eq!(spec, &expected, "{crate_dir}: {name}");
                }
            }
        }
    }
}
