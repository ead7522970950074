//! `tfjob-operator policy pack`: a policy as the ConfigMap the operator loads, checked with
//! the operator's own loader (`configmap::load`), so a ConfigMap it prints is one the operator
//! accepts (given the same limits); optionally signed.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use clap::Args;
use serde_json::json;
use tfjob_policy_engine::capabilities::{self, Capabilities};
use tfjob_policy_engine::cluster_reads::{ReadCeiling, ReadDeclaration, ReadScope};
use tfjob_policy_engine::configmap::{self, LoadError};
use tfjob_policy_engine::signature::{self, TrustedKeys};
use tfjob_policy_engine::{
    FailurePolicy, Hook, PolicyEngine, PolicyManifest, PolicyMode, SandboxLimits, defaults,
};

use crate::policy_hooks::{default_names, read_yaml};
use tfjob_operator::policy_setup::read_signing_key;

#[derive(Debug, Args)]
pub struct PackArgs {
    /// The `.wasm` component, or `default:<name>` for an embedded default policy.
    #[arg(long, value_name = "P.wasm", required_unless_present = "cel")]
    pub wasm: Option<String>,
    /// A CEL document (`MutatingAdmissionPolicy`'s shape) instead of a module: the ConfigMap
    /// carries it under `policy.cel.yaml`, its hooks are the parts it has, and it is checked by
    /// compiling every expression as the operator does.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["wasm", "hooks", "settings", "gzip", "host_paths", "module_ref"])]
    pub cel: Option<PathBuf>,
    /// Policy name; the ConfigMap is `tfjob-policy-<NAME>`. A default's name replaces it.
    #[arg(long)]
    pub name: String,
    /// Hooks to run it for, comma-separated; each must be exported.
    #[arg(long, required_unless_present = "cel", value_delimiter = ',', value_parser = parse_hook)]
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
    /// A cluster resource the policy reads (repeatable): `RESOURCE` for a cluster-scoped one
    /// (`namespaces`, `nodes`, ...), `RESOURCE:job-namespace` or `RESOURCE:policy-namespace`
    /// for a namespaced one (`configmaps:job-namespace`). The operator grants it only if its
    /// read ceiling allows it.
    #[arg(long = "read", visible_alias = "context", value_name = "RESOURCE[:SCOPE]", value_parser = parse_read)]
    pub reads: Vec<ReadDeclaration>,
    /// The policy's deadline per call, at most the operator's (50).
    #[arg(long, value_name = "MS")]
    pub deadline_ms: Option<u64>,
    /// The policy's memory cap per call, at most the operator's (64).
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Sign the module (or the CEL document) with this private key (PEM: PKCS#8 ECDSA P-256 or Ed25519, or SEC1
    /// P-256) into `policy.wasm.sig`, for an operator run with `--policy-trusted-key`.
    #[arg(long, value_name = "KEY.pem")]
    pub sign_key: Option<PathBuf>,
    /// Put this signature of the module (base64, e.g. the output of `cosign sign-blob --key
    /// cosign.key P.wasm`) into `policy.wasm.sig` as it is; the operator verifies it.
    #[arg(long, value_name = "FILE", conflicts_with = "sign_key")]
    pub signature: Option<PathBuf>,
    /// Reference the module in a registry instead of embedding it: `HOST[:PORT]/REPO@sha256:...`
    /// (what `policy push` printed) or `HOST[:PORT]/REPO:TAG`. `--wasm` is still read, to check
    /// that the policy loads and to pin the module's sha256 in the manifest. Such a module is
    /// verified by its cosign signature in the registry, and may be of any size up to the
    /// operator's --policy-max-module-mib.
    #[arg(long, value_name = "REF", conflicts_with_all = ["gzip", "sign_key", "signature"])]
    pub module_ref: Option<String>,
    /// The `kubernetes.io/dockerconfigjson` Secret, in `--namespace`, with the registry's
    /// credentials.
    #[arg(long, value_name = "NAME", requires = "module_ref")]
    pub pull_secret: Option<String>,
}

fn parse_hook(s: &str) -> Result<Hook, String> {
    s.parse()
}

/// `RESOURCE` or `RESOURCE:SCOPE`, checked as a manifest's `reads` entry is.
fn parse_read(s: &str) -> Result<ReadDeclaration, String> {
    let (resource, scope) = match s.split_once(':') {
        Some((resource, "job-namespace")) => (resource, Some(ReadScope::JobNamespace)),
        Some((resource, "policy-namespace")) => (resource, Some(ReadScope::PolicyNamespace)),
        Some((_, other)) => {
            return Err(format!(
                "scope {other:?}: expected job-namespace or policy-namespace"
            ));
        }
        None => (s, None),
    };
    let declaration = ReadDeclaration {
        resource: resource.to_owned(),
        scope,
    };
    ReadCeiling::everything()
        .grant(std::slice::from_ref(&declaration), None)
        .map_err(|(_, e)| e)?;
    Ok(declaration)
}

/// Builds the ConfigMap, then loads it as the operator would: whatever `load` refuses, `pack`
/// refuses with the same reason.
pub fn main(args: &PackArgs) -> anyhow::Result<String> {
    if let Some(cel) = &args.cel {
        return pack_cel(args, cel);
    }
    let wasm_arg = args
        .wasm
        .as_deref()
        .expect("clap requires --wasm without --cel");
    let (wasm, default) = match wasm_arg.strip_prefix("default:") {
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
            let bytes =
                std::fs::read(wasm_arg).with_context(|| format!("--wasm: reading {wasm_arg}"))?;
            (bytes, None)
        }
    };
    let settings = match (&args.settings, default) {
        (Some(path), _) => read_yaml(path).context("--settings")?,
        (None, Some(d)) => defaults::default_settings(d),
        (None, None) => json!({}),
    };
    let flags = flag_manifest(args)?;
    // A default's settings say what it mounts and reads, unless `--host-path` or `--read` do.
    let capabilities = match default {
        Some(_) if args.host_paths.is_empty() => {
            with_flag_capabilities(defaults::capabilities_used(&settings), args)?
        }
        _ => flags.capabilities.clone(),
    };
    let reads = match default {
        Some(d) if args.reads.is_empty() => defaults::reads_used(d.hook, &settings),
        _ => args.reads.clone(),
    };
    let manifest = PolicyManifest {
        hooks: args.hooks.clone(),
        settings,
        capabilities,
        reads,
        ..flags
    };
    // Read before anything is built, so that a bad key is reported as such.
    let signer = signer(args)?;
    let mut cm =
        configmap::pack(manifest, &wasm, &args.namespace, args.gzip).map_err(|e| {
            match e.field.as_str() {
                "name" => anyhow!("--name {:?}: {}", args.name, e.message),
                _ => anyhow!("{wasm_arg}: {e}"),
            }
        })?;
    // The signature is over the module itself, not its gzip form: what the operator runs.
    let trusted = sign(args, &mut cm, signer.as_ref(), &wasm)?;
    let engine = checking_engine()?;
    if let Some(reference) = &args.module_ref {
        return referencing(args, cm, reference, wasm, &engine);
    }
    // Loaded as an operator trusting the signing key would load it.
    configmap::load_verified(&engine, &cm, &trusted).map_err(|e| {
        let hint = match &e {
            LoadError::Size { .. } if !args.gzip && wasm.len() <= configmap::MAX_WASM_BYTES => {
                "; pack it with --gzip"
            }
            _ => "",
        };
        anyhow!(
            "{wasm_arg}: the operator would reject this policy ({} step): {e}{hint}",
            e.step()
        )
    })?;
    Ok(configmap::to_yaml(&cm))
}

/// The manifest the flags say, for every kind of policy: what is left is the module's (hooks,
/// settings, what a default's settings use).
fn flag_manifest(args: &PackArgs) -> anyhow::Result<PolicyManifest> {
    let host_paths = Capabilities {
        host_paths: args.host_paths.clone(),
        ..Capabilities::default()
    };
    let capabilities = with_flag_capabilities(host_paths, args)?;
    Ok(PolicyManifest {
        name: args.name.clone(),
        order: args.order,
        failure_policy: match args.failure_policy.as_str() {
            "Ignore" => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        mode: match args.mode.as_str() {
            "Shadow" => PolicyMode::Shadow,
            _ => PolicyMode::Enforce,
        },
        allowed_paths: args.allowed_paths.clone(),
        capabilities,
        reads: args.reads.clone(),
        deadline_ms: args.deadline_ms,
        memory_mib: args.memory_mib,
        ..PolicyManifest::default()
    })
}

/// `base` with every `--capability` allowed.
fn with_flag_capabilities(mut base: Capabilities, args: &PackArgs) -> anyhow::Result<Capabilities> {
    for name in &args.capabilities {
        base.allow(name).map_err(|e| anyhow!("--capability: {e}"))?;
    }
    Ok(base)
}

fn signer(args: &PackArgs) -> anyhow::Result<Option<signature::SigningKey>> {
    args.sign_key
        .as_deref()
        .map(|path| read_signing_key("--sign-key", path))
        .transpose()
}

/// Signs `signed` (the module, or the CEL document's text) into `cm` with `signer`, or puts
/// the `--signature` given; returns the keys an operator that trusts the signer would have.
fn sign(
    args: &PackArgs,
    cm: &mut k8s_openapi::api::core::v1::ConfigMap,
    signer: Option<&signature::SigningKey>,
    signed: &[u8],
) -> anyhow::Result<TrustedKeys> {
    let mut trusted = TrustedKeys::none();
    if let Some(signer) = signer {
        configmap::set_signature(cm, &signer.sign(signed));
        trusted.insert(signer.public_key().clone());
    }
    if let Some(path) = &args.signature {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--signature: reading {}", path.display()))?;
        // Only the encoding can be checked here: which keys to trust is the operator's to say.
        signature::decode(&text).map_err(|e| anyhow!("--signature {}: {e}", path.display()))?;
        configmap::set_signature(cm, &text);
    }
    Ok(trusted)
}

/// The engine `pack` loads a ConfigMap with: the operator's limits, and every capability and
/// read allowed (they are checked against the cluster's ceilings when the operator loads it).
fn checking_engine() -> anyhow::Result<PolicyEngine> {
    Ok(PolicyEngine::new(SandboxLimits {
        ceiling: Capabilities::everything(),
        reads: ReadCeiling::everything(),
        ..tfjob_operator::policy_setup::operator_limits()
    })?)
}

/// `--cel FILE`: the document as written under `policy.cel.yaml`, the flags' manifest beside it,
/// loaded as the operator would load it (every expression compiled in the sandbox).
fn pack_cel(args: &PackArgs, file: &Path) -> anyhow::Result<String> {
    let document = std::fs::read_to_string(file)
        .with_context(|| format!("--cel: reading {}", file.display()))?;
    let signer = signer(args)?;
    let mut cm = configmap::pack_cel(&flag_manifest(args)?, &document, &args.namespace).map_err(
        |e| match e.field.as_str() {
            "name" => anyhow!("--name {:?}: {}", args.name, e.message),
            _ => anyhow!("{}: {e}", file.display()),
        },
    )?;
    let trusted = sign(args, &mut cm, signer.as_ref(), document.as_bytes())?;
    configmap::load_verified(&checking_engine()?, &cm, &trusted).map_err(|e| {
        anyhow!(
            "{}: the operator would reject this policy ({} step): {e}",
            file.display(),
            e.step()
        )
    })?;
    Ok(configmap::to_yaml(&cm))
}

/// The ConfigMap `cm` with its module replaced by `reference`, checked as the operator checks it
/// once it has pulled `wasm`.
fn referencing(
    args: &PackArgs,
    mut cm: k8s_openapi::api::core::v1::ConfigMap,
    reference: &str,
    wasm: Vec<u8>,
    engine: &PolicyEngine,
) -> anyhow::Result<String> {
    let parsed =
        tfjob_policy_oci::ModuleRef::parse(reference).map_err(|e| anyhow!("--module-ref: {e}"))?;
    cm.binary_data = None;
    let data = cm.data.get_or_insert_with(Default::default);
    data.insert(
        configmap::MODULE_KEY.into(),
        format!("{}{parsed}", configmap::MODULE_SCHEME),
    );
    if let Some(secret) = &args.pull_secret {
        data.insert(configmap::PULL_SECRET_KEY.into(), secret.clone());
    }
    configmap::module_reference(&cm).map_err(|e| anyhow!("--pull-secret: {e}"))?;
    configmap::read_referenced(&cm, wasm, configmap::Signed::No)
        .and_then(|source| configmap::activate_source(engine, source))
        .map_err(|e| {
            anyhow!(
                "{}: the operator would reject this policy ({} step): {e}",
                args.wasm.as_deref().unwrap_or_default(),
                e.step()
            )
        })?;
    Ok(configmap::to_yaml(&cm))
}
