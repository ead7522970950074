//! `tfjob-operator policy test`, `inspect`, `pack` and `list`: run one hook of a policy in the
//! sandbox or describe a policy module, without a cluster; package a policy as a ConfigMap the
//! operator loads; list the policy ConfigMaps of a cluster with the status the operator gave
//! them. `policy test --suite` (many cases, see [`crate::policy_suite`]) and `policy new`
//! ([`crate::policy_new`]) live in modules of their own.
//!
//! A test activates the policy with the operator's own activation (`activate_checked`: manifest,
//! limits, digest pin, exported hooks, `validate-settings`) and runs the hook behind the same
//! checks as the operator's pipeline ([`run_hook`]: the guard after decoration, the decoding of
//! resources, the verdict guard after classification), so what passes here passes there.
//!
//! `pack` checks what it prints with the operator's own loader (`configmap::load`), so a
//! ConfigMap it prints is one the operator accepts (given the same limits).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tfjob_policy_engine::capabilities::{self, Capabilities};
use tfjob_policy_engine::configmap::{self, LoadError, PolicyStatus};
use tfjob_policy_engine::signature::{self, SigningKey, TrustedKeys};
use tfjob_policy_engine::{
    FailurePolicy, Hook, PolicyEngine, PolicyManifest, PolicyMode, SandboxLimits, defaults,
};

use crate::policy_hooks::{default_names, read_yaml};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run one hook of a policy in the sandbox and print its result as JSON, or (`--suite`)
    /// every case of a test suite.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy test --policy default --hook classify --input failed-pod.yaml --now 2026-01-01T00:05:00Z\n  tfjob-operator policy test --policy gpu.wasm --hook decorate --input pod.yaml --settings @gpu-settings.json\n  tfjob-operator policy test --policy default:default-resources --hook resources --input pod.yaml --container tensorflow\n  tfjob-operator policy test --suite tests/suite.yaml --policy gpu.wasm -o junit > results.xml\n\nWith --suite: exit status 0 when every case passes, 1 when one fails (with a diff of\nexpected and actual), 2 when the suite cannot run."
    )]
    Test(crate::policy_test::TestArgs),
    /// Generate a ready-to-build policy crate: Cargo.toml, the contract's WIT, src/lib.rs with a
    /// settings type and the chosen hooks, a native unit test, a test suite and a README.
    New(crate::policy_new::NewArgs),
    /// Print a policy module's size, digest, hooks, imports and exports; with `--manifest`,
    /// also what the policy declares and would be granted under the ceiling.
    Inspect {
        /// The `.wasm` component.
        policy: PathBuf,
        /// The policy's manifest (`policy.yaml`).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// The operator's ceiling to grant under (as `run` takes it).
        #[command(flatten)]
        ceiling: tfjob_operator::policy_setup::CeilingArgs,
    },
    /// Print a policy as a ConfigMap for the operator (YAML), after checking that it loads.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy pack --wasm gpu.wasm --name gpu --hooks decorate --settings gpu.yaml --gzip | kubectl apply -f -\n  tfjob-operator policy pack --wasm default:default-classify --name default-classify --hooks classify --gzip\n  tfjob-operator policy pack --wasm gpu.wasm --name gpu --hooks decorate --sign-key signing.pem\n\nThe module's sha256 is pinned in the manifest. Exit status 2, with the reason, when the\nmodule does not load, does not export the hooks, refuses the settings, or the ConfigMap\nwould exceed 1 MiB."
    )]
    Pack(PackArgs),
    /// What a candidate policy would change on a live cluster, read-only: for every TFJob it
    /// selects, the pods the operator would create next and the verdicts on the existing pods,
    /// with the current policies and with the candidate in place.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy diff --policy team-label.wasm --manifest policy.yaml -A\n  tfjob-operator policy diff --configmap tfjob-policy-gpu.yaml -n ml -o json\n  tfjob-operator policy diff --policy v2.wasm --configmap tfjob-policy-gpu.yaml -n ml\n\nNothing is written to the cluster. Exit status 2, with the reason, when the candidate\nwould be refused or the cluster cannot be read."
    )]
    Diff(crate::policy_diff::DiffArgs),
    /// List the policy ConfigMaps of a cluster and the status the operator gave them.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy list\n  tfjob-operator policy list -A --kubeconfig ~/.kube/config"
    )]
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct PackArgs {
    /// The `.wasm` component, or `default:<name>` for an embedded default policy.
    #[arg(long, value_name = "P.wasm")]
    pub wasm: String,
    /// Policy name; the ConfigMap is `tfjob-policy-<NAME>`. A default's name replaces it.
    #[arg(long)]
    pub name: String,
    /// Hooks to run it for, comma-separated; each must be exported.
    #[arg(long, required = true, value_delimiter = ',', value_parser = parse_hook)]
    pub hooks: Vec<Hook>,
    /// Settings document (YAML or JSON) [default: for a default policy, the settings the
    /// operator runs it with; else `{}`].
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// Lower runs first; ties by name.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub order: i32,
    #[arg(long, value_parser = ["Fail", "Ignore"], default_value = "Fail")]
    pub failure_policy: String,
    #[arg(long, value_parser = ["Enforce", "Shadow"], default_value = "Enforce")]
    pub mode: String,
    /// Store the module gzip-compressed (`policy.wasm.gz`).
    #[arg(long)]
    pub gzip: bool,
    /// Namespace of the ConfigMap.
    #[arg(long, default_value = "tfjob-system", value_name = "NS")]
    pub namespace: String,
    /// A path the policy may change beyond the default ones (repeatable), e.g.
    /// `spec.topologySpreadConstraints`.
    #[arg(long = "allowed-path", value_name = "PATH")]
    pub allowed_paths: Vec<String>,
    /// A capability the policy needs (repeatable): secrets, service-account-tokens or
    /// external-volumes. The operator grants it only if its ceiling allows it.
    #[arg(long = "capability", value_name = "NAME", value_parser = capabilities::NAMES)]
    pub capabilities: Vec<String>,
    /// A host path prefix the policy may mount read-only (repeatable) [default: for a default
    /// policy, the paths its settings use].
    #[arg(long = "host-path", value_name = "PREFIX")]
    pub host_paths: Vec<String>,
    /// The policy's deadline per call, at most the operator's (50).
    #[arg(long, value_name = "MS")]
    pub deadline_ms: Option<u64>,
    /// The policy's memory cap per call, at most the operator's (64).
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Sign the module with this private key (PEM: PKCS#8 ECDSA P-256 or Ed25519, or SEC1
    /// P-256) into `policy.wasm.sig`, for an operator run with `--policy-trusted-key`.
    #[arg(long, value_name = "KEY.pem")]
    pub sign_key: Option<PathBuf>,
    /// Put this signature of the module (base64, e.g. the output of `cosign sign-blob --key
    /// cosign.key P.wasm`) into `policy.wasm.sig` as it is; the operator verifies it.
    #[arg(long, value_name = "FILE", conflicts_with = "sign_key")]
    pub signature: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, then in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the policy ConfigMaps.
    #[arg(
        short = 'n',
        long,
        default_value = "tfjob-system",
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: String,
    /// List policy ConfigMaps of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

fn parse_hook(s: &str) -> Result<Hook, String> {
    s.parse()
}

/// What a subcommand prints on success.
enum Printed {
    /// Pretty JSON.
    Json(Value),
    /// Text as it is.
    Text(String),
}

pub fn main(cmd: PolicyCommand) -> ExitCode {
    let result = match cmd {
        PolicyCommand::Test(args) => return crate::policy_test::main(&args),
        PolicyCommand::New(args) => return crate::policy_new::main(&args),
        PolicyCommand::Inspect {
            policy,
            manifest,
            ceiling,
        } => inspect(&policy, manifest.as_deref(), &ceiling).map(Printed::Json),
        PolicyCommand::Pack(args) => pack(&args).map(Printed::Text),
        PolicyCommand::List(args) => list(&args).map(Printed::Text),
        PolicyCommand::Diff(args) => crate::policy_diff::main(&args).map(Printed::Text),
    };
    match result {
        Ok(Printed::Json(out)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("JSON values serialise")
            );
            ExitCode::SUCCESS
        }
        Ok(Printed::Text(out)) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn engine() -> anyhow::Result<PolicyEngine> {
    Ok(PolicyEngine::new(SandboxLimits::default())?)
}

fn inspect(
    path: &Path,
    manifest: Option<&Path>,
    ceiling: &tfjob_operator::policy_setup::CeilingArgs,
) -> anyhow::Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let engine = engine()?;
    let policy = engine
        .compile(&bytes)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if policy.hooks().is_empty() {
        bail!(
            "{}: exports none of the hooks of tfjob:policy@0.2.0 (or of 0.1.0)",
            path.display()
        );
    }
    let mut out = json!({
        "file": path.display().to_string(),
        "size": policy.size,
        "sha256": policy.digest,
        "hooks": policy.hooks(),
        "validatesSettings": policy.validates_settings(),
        "imports": policy.imports,
        "exports": policy.exports,
        "contract": policy.contract(),
    });
    if let Some(file) = manifest {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--manifest: reading {}", file.display()))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("policy");
        let m = PolicyManifest::from_yaml(&text, name)
            .map_err(|e| anyhow!("--manifest {}: {e}", file.display()))?;
        out["capabilities"] = json!({
            "declared": m.capabilities,
            "granted": match m.validate(&ceiling.ceiling()?) {
                Ok(allowed) => json!(allowed.grants()),
                Err(e) => json!({"refused": e.to_string()}),
            },
        });
    }
    Ok(out)
}

/// Builds the ConfigMap, then loads it as the operator would: whatever `load` refuses, `pack`
/// refuses with the same reason.
fn pack(args: &PackArgs) -> anyhow::Result<String> {
    let (wasm, default) = match args.wasm.strip_prefix("default:") {
        Some(name) => {
            let d = defaults::find(name).ok_or_else(|| {
                anyhow!(
                    "--wasm: no default policy {name:?} (defaults: {})",
                    default_names()
                )
            })?;
            (d.wasm.to_vec(), Some(d))
        }
        None => {
            let bytes = std::fs::read(&args.wasm)
                .with_context(|| format!("--wasm: reading {}", args.wasm))?;
            (bytes, None)
        }
    };
    let settings = match (&args.settings, default) {
        (Some(path), _) => read_yaml(path).context("--settings")?,
        (None, Some(d)) => defaults::default_settings(d),
        (None, None) => json!({}),
    };
    let mut declared = match default {
        Some(_) if args.host_paths.is_empty() => defaults::capabilities_used(&settings),
        _ => Capabilities {
            host_paths: args.host_paths.clone(),
            ..Capabilities::default()
        },
    };
    for name in &args.capabilities {
        declared
            .allow(name)
            .map_err(|e| anyhow!("--capability: {e}"))?;
    }
    let manifest = PolicyManifest {
        name: args.name.clone(),
        hooks: args.hooks.clone(),
        order: args.order,
        failure_policy: match args.failure_policy.as_str() {
            "Ignore" => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        mode: match args.mode.as_str() {
            "Shadow" => PolicyMode::Shadow,
            _ => PolicyMode::Enforce,
        },
        settings,
        allowed_paths: args.allowed_paths.clone(),
        capabilities: declared,
        deadline_ms: args.deadline_ms,
        memory_mib: args.memory_mib,
        ..PolicyManifest::default()
    };
    // Read before anything is built, so that a bad key is reported as such.
    let signer = match &args.sign_key {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--sign-key: reading {}", path.display()))?;
            Some(
                SigningKey::from_pem(&path.display().to_string(), &text)
                    .map_err(|e| anyhow!("--sign-key {e}"))?,
            )
        }
        None => None,
    };
    let mut cm =
        configmap::pack(manifest, &wasm, &args.namespace, args.gzip).map_err(|e| {
            match e.field.as_str() {
                "name" => anyhow!("--name {:?}: {}", args.name, e.message),
                _ => anyhow!("{}: {e}", args.wasm),
            }
        })?;
    // The signature is over the module itself, not its gzip form: what the operator runs.
    let mut trusted = TrustedKeys::none();
    if let Some(signer) = &signer {
        configmap::set_signature(&mut cm, &signer.sign(&wasm));
        trusted.insert(signer.public_key().clone());
    }
    if let Some(path) = &args.signature {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--signature: reading {}", path.display()))?;
        // Only the encoding can be checked here: which keys to trust is the operator's to say.
        signature::decode(&text).map_err(|e| anyhow!("--signature {}: {e}", path.display()))?;
        configmap::set_signature(&mut cm, &text);
    }
    // Loaded as an operator trusting the signing key would load it.
    // The capabilities are checked against the cluster's ceiling when the operator loads the
    // ConfigMap; here everything the manifest can declare is allowed.
    let engine = PolicyEngine::new(SandboxLimits {
        ceiling: Capabilities::everything(),
        ..SandboxLimits::default()
    })?;
    configmap::load_verified(&engine, &cm, &trusted).map_err(|e| {
        let hint = match &e {
            LoadError::Size { .. } if !args.gzip && wasm.len() <= configmap::MAX_WASM_BYTES => {
                "; pack it with --gzip"
            }
            _ => "",
        };
        anyhow!(
            "{}: the operator would reject this policy ({} step): {e}{hint}",
            args.wasm,
            e.step()
        )
    })?;
    Ok(configmap::to_yaml(&cm))
}

/// Prints the table of the policy ConfigMaps.
fn list(args: &ListArgs) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let configmaps = runtime.block_on(fetch_policy_configmaps(args))?;
    if configmaps.is_empty() {
        let scope = if args.all_namespaces {
            "any namespace".to_owned()
        } else {
            format!("namespace {}", args.namespace)
        };
        eprintln!(
            "No policy ConfigMaps (label {}) found in {scope}.",
            configmap::POLICY_SELECTOR
        );
        return Ok(String::new());
    }
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "CONFIGMAP",
            "HOOKS",
            "MODE",
            "SCOPE",
            "GRANTED",
            "STATE",
            "DIGEST",
            "LOADED-AT",
            "ERROR",
        ]
        .map(str::to_owned),
    ];
    rows.extend(configmaps.iter().map(row));
    Ok(table(&rows))
}

async fn fetch_policy_configmaps(args: &ListArgs) -> anyhow::Result<Vec<ConfigMap>> {
    let client = crate::shared::client(args.kubeconfig.as_deref()).await?;
    let api: Api<ConfigMap> = if args.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &args.namespace)
    };
    let mut items = api
        .list(&ListParams::default().labels(configmap::POLICY_SELECTOR))
        .await
        .context("listing policy ConfigMaps")?
        .items;
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(items)
}

/// One line of `policy list`. The manifest gives name, hooks and mode (`-` where it does not
/// parse); the status annotation gives the rest, `Unknown` when the operator has not written
/// one yet.
fn row(cm: &ConfigMap) -> [String; 11] {
    let dash = || "-".to_owned();
    let cm_name = cm.metadata.name.clone().unwrap_or_default();
    let manifest = cm
        .data
        .as_ref()
        .and_then(|d| d.get(configmap::MANIFEST_KEY))
        .and_then(|text| {
            let default_name = cm_name
                .strip_prefix(configmap::NAME_PREFIX)
                .unwrap_or(&cm_name);
            PolicyManifest::from_yaml(text, default_name).ok()
        });
    let (name, hooks, mode) = match &manifest {
        Some(m) => {
            let names: Vec<&str> = m.hooks.iter().map(|h| h.as_str()).collect();
            (
                m.name.clone(),
                format!("{} ({})", names.len(), names.join(",")),
                format!("{:?}", m.mode),
            )
        }
        None => (dash(), dash(), dash()),
    };
    let (scope, granted, state, digest, loaded_at, error) = match PolicyStatus::of(cm) {
        None => (dash(), dash(), "Unknown".to_owned(), dash(), dash(), dash()),
        Some(Err(e)) => (
            dash(),
            dash(),
            "Unknown".to_owned(),
            dash(),
            dash(),
            format!(
                "unreadable {} annotation: {e}",
                configmap::STATUS_ANNOTATION
            ),
        ),
        Some(Ok(status)) => (
            status.scope.clone().unwrap_or_else(dash),
            status
                .granted
                .as_ref()
                .map_or_else(dash, Capabilities::summary),
            // A tripped breaker is said beside the state: the version serves, but is not
            // called until a trial call succeeds.
            match &status.breaker {
                Some(_) => format!("{} (tripped)", status.state.as_str()),
                None => status.state.as_str().to_owned(),
            },
            status
                .digest
                .map(|d| d.chars().take(12).collect())
                .unwrap_or_else(dash),
            status.loaded_at.unwrap_or_else(dash),
            match (status.error, status.breaker) {
                (Some(e), _) => e.split_whitespace().collect::<Vec<_>>().join(" "),
                (None, Some(b)) => format!(
                    "tripped after {} consecutive {} failures; a trial call from {}",
                    b.failures, b.category, b.retry_at
                ),
                (None, None) => dash(),
            },
        ),
    };
    [
        cm.metadata.namespace.clone().unwrap_or_default(),
        name,
        cm_name,
        hooks,
        mode,
        scope,
        granted,
        state,
        digest,
        loaded_at,
        error,
    ]
}

/// Left-aligned columns three spaces apart, as kubectl prints them; the last column unpadded.
fn table(rows: &[[String; 11]]) -> String {
    let mut widths = [0usize; 11];
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use tfjob_policy_engine::Hook;
    use tfjob_policy_engine::configmap::{BreakerStatus, PolicyState, STATUS_ANNOTATION};

    #[test]
    fn a_tripped_breaker_shows_in_the_list() {
        let manifest = PolicyManifest {
            name: "looper".into(),
            hooks: vec![Hook::Decorate],
            ..PolicyManifest::default()
        };
        let mut cm = configmap::pack(manifest, b"\0asm module", "tfjob-system", false).unwrap();
        let mut status = PolicyStatus::active("abc", jiff::Timestamp::UNIX_EPOCH);
        let annotate = |cm: &mut ConfigMap, status: &PolicyStatus| {
            cm.metadata.annotations = Some(BTreeMap::from([(
                STATUS_ANNOTATION.to_owned(),
                status.to_annotation(),
            )]));
        };
        annotate(&mut cm, &status);
        let closed = row(&cm);
        assert_eq!((closed[7].as_str(), closed[10].as_str()), ("Active", "-"));

        status.breaker = Some(BreakerStatus {
            state: "Tripped".into(),
            category: "timeout".into(),
            failures: 5,
            trips: 1,
            retry_at: "1970-01-01T00:00:10Z".into(),
        });
        annotate(&mut cm, &status);
        let tripped = row(&cm);
        assert_eq!(tripped[7], "Active (tripped)");
        assert_eq!(
            tripped[10],
            "tripped after 5 consecutive timeout failures; a trial call from \
             1970-01-01T00:00:10Z"
        );
        // An error (a rejected update) is still what the last column says.
        status.state = PolicyState::Rejected;
        status.error = Some("bad settings".into());
        annotate(&mut cm, &status);
        assert_eq!(row(&cm)[10], "bad settings");
    }
}
