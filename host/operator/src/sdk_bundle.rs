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
const SDK_SOURCES: &[(&str, &str)] =
    sources!("sdk": "convert.rs", "lib.rs", "log.rs", "settings.rs", "wit.rs");

/// The logic crate's `src/` files.
const LOGIC_SOURCES: &[(&str, &str)] = sources!("logic":
    "classify.rs", "classify_settings.rs", "context.rs", "decorate.rs", "duration.rs", "json.rs", "lib.rs",
    "names.rs", "ordered.rs", "quantity.rs", "resources.rs", "settings.rs", "text.rs", "verdict.rs",
);

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
