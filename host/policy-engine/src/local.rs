//! Local policy sources: a directory of `*.wasm` files with a manifest each (`--policy-dir`), and
//! a file overriding the default policies' settings (`--policy-config`).
//!
//! Errors name the file and the field, and a directory with one bad policy loads nothing: a
//! half-loaded policy set would make pods depend on which file happened to parse.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::engine::PolicyEngine;
use crate::error::EvalError;
use crate::registry::{ActivePolicy, FailurePolicy, PolicyManifest, activate};

/// A local policy source that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("{path}: policy {name} rejected ({error})")]
    Rejected {
        path: PathBuf,
        name: String,
        #[source]
        error: EvalError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LocalError + '_ {
    move |source| LocalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Loads every `NAME.wasm` in `dir` with its manifest `NAME.yaml` (or `.yml`, `.json`), in file
/// name order. The manifest's `name` defaults to `NAME`.
pub fn load_policy_dir(engine: &PolicyEngine, dir: &Path) -> Result<Vec<ActivePolicy>, LocalError> {
    let mut wasm_files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    wasm_files.sort();
    let mut loaded = Vec::new();
    for wasm_path in wasm_files {
        let stem = wasm_path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let manifest_path = ["yaml", "yml", "json"]
            .iter()
            .map(|ext| wasm_path.with_extension(ext))
            .find(|p| p.exists())
            .ok_or_else(|| LocalError::Manifest {
                path: wasm_path.clone(),
                message: format!("no manifest: expected {stem}.yaml next to it"),
            })?;
        let text = std::fs::read_to_string(&manifest_path).map_err(io(&manifest_path))?;
        let manifest = parse_manifest(&text, &stem).map_err(|message| LocalError::Manifest {
            path: manifest_path.clone(),
            message,
        })?;
        let wasm = std::fs::read(&wasm_path).map_err(io(&wasm_path))?;
        let name = manifest.name.clone();
        let active = activate(engine, manifest, &wasm).map_err(|error| LocalError::Rejected {
            path: wasm_path.clone(),
            name,
            error,
        })?;
        loaded.push(active);
    }
    Ok(loaded)
}

/// Parses a YAML (or JSON) manifest; `default_name` fills a missing `name`.
pub fn parse_manifest(text: &str, default_name: &str) -> Result<PolicyManifest, String> {
    PolicyManifest::from_yaml(text, default_name).map_err(|e| match e.field.as_str() {
        "." => e.message,
        field => format!("field {field}: {}", e.message),
    })
}

/// Overrides of one default policy.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultOverride {
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    #[serde(default)]
    pub failure_policy: Option<FailurePolicy>,
    #[serde(default)]
    pub order: Option<i32>,
}

/// `--policy-config`: default policy name to its overrides.
pub type PolicyConfig = BTreeMap<String, DefaultOverride>;

/// Reads a `--policy-config` file.
pub fn load_policy_config(path: &Path) -> Result<PolicyConfig, LocalError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| LocalError::Manifest {
            path: path.to_owned(),
            message: format!("not valid YAML: {e}"),
        })?;
    serde_path_to_error::deserialize(value).map_err(|e| LocalError::Manifest {
        path: path.to_owned(),
        message: format!("field {}: {}", e.path(), e.inner()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_default_their_name_and_name_bad_fields() {
        let m = parse_manifest("hooks: [decorate]\norder: 5\nsettings: {a: 1}\n", "gpu").unwrap();
        assert_eq!(m.name, "gpu");
        assert_eq!(m.order, 5);
        assert_eq!(m.failure_policy, FailurePolicy::Fail);
        assert_eq!(m.settings, serde_json::json!({"a": 1}));
        let err = parse_manifest("hooks: [decorate]\nfailurePolicy: Sometimes\n", "x").unwrap_err();
        assert!(err.contains("failurePolicy"), "{err}");
        let err = parse_manifest("hooks: [paint]\n", "x").unwrap_err();
        assert!(err.contains("hooks"), "{err}");
        let err = parse_manifest("hooks: [decorate]\nsetings: {}\n", "x").unwrap_err();
        assert!(err.contains("setings"), "{err}");
    }
}
