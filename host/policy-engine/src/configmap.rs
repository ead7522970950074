//! Policies delivered as ConfigMaps, and the status the operator records on them.
//!
//! A ConfigMap labelled `policy.tfjob.dev/policy: "true"` carries one policy: the component
//! under `binaryData` key `policy.wasm` (or gzip-compressed under `policy.wasm.gz`) and its
//! manifest under `data` key `policy.yaml`. Loading is a pipeline whose every step can refuse
//! the policy with a [`LoadError`] naming the key or manifest field: size limits, decompression
//! (bounded while streaming, so a gzip bomb cannot exhaust memory), the signature when the
//! operator trusts keys, the manifest, the digest and its pin, compilation (once per digest,
//! through the engine's cache), the exported hooks, the per-policy limits and
//! `validate-settings`.
//!
//! A signature (`data` key `policy.wasm.sig`, base64, see [`crate::signature`]) covers the
//! module as it runs: the decompressed bytes, whichever key stored them, so the same signature
//! serves `policy.wasm` and `policy.wasm.gz` and `cosign sign-blob policy.wasm` signs what is
//! shipped. It does not cover the manifest. With trusted keys, a module that is unsigned or
//! whose signature verifies against none of them is refused before its manifest is even read,
//! and long before it is compiled; without keys a signature is recorded as unverified and
//! otherwise ignored.
//!
//! Everything here is synchronous and pure apart from the Wasm calls of activation, which are
//! CPU-heavy: an async caller runs [`load`] on a blocking thread. [`pack`] builds the ConfigMap
//! for a module, the inverse of [`read_configmap`], so the CLI and the operator share one
//! definition of the format.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::{Compression, GzBuilder};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capabilities::Capabilities;
use crate::cel_configmap::{self, CEL_KEY, CEL_SIGNATURE_KEY, CelSourceError};
use crate::cluster_reads::ReadCeiling;
use crate::config::LimitError;
use crate::engine::{Hook, PolicyEngine};
use crate::error::EvalError;
use crate::registry::{ActivationError, ActivePolicy, ManifestError, PolicyManifest};
pub use crate::signature::Signed;
use crate::signature::{KeyId, SignatureError, TrustedKeys};

/// Label that marks a ConfigMap as a policy (value `"true"`).
pub const POLICY_LABEL: &str = "policy.tfjob.dev/policy";
/// The label selector of policy ConfigMaps.
pub const POLICY_SELECTOR: &str = "policy.tfjob.dev/policy=true";
/// Annotation with the operator's [`PolicyStatus`] of the ConfigMap, as JSON.
pub const STATUS_ANNOTATION: &str = "policy.tfjob.dev/status";
/// `binaryData` key of an uncompressed module.
pub const WASM_KEY: &str = "policy.wasm";
/// `binaryData` key of a gzip-compressed module.
pub const WASM_GZIP_KEY: &str = "policy.wasm.gz";
/// `data` key of the manifest.
pub const MANIFEST_KEY: &str = "policy.yaml";
/// `data` key of the module's signature: base64, over the decompressed module.
pub const SIGNATURE_KEY: &str = "policy.wasm.sig";
/// `data` key of a module reference, `oci://HOST[:PORT]/REPO[:TAG][@sha256:...]`, in place of
/// the module's bytes: the operator pulls it from the registry.
pub const MODULE_KEY: &str = "module";
/// `data` key naming a `kubernetes.io/dockerconfigjson` Secret of the ConfigMap's own namespace
/// with the registry's credentials.
pub const PULL_SECRET_KEY: &str = "pullSecret";
/// The scheme of a module reference.
pub const MODULE_SCHEME: &str = "oci://";
/// Prefix of the ConfigMap names `pack` gives; a manifest without `name` takes the ConfigMap's
/// name without it.
pub const NAME_PREFIX: &str = "tfjob-policy-";
/// Largest module accepted after decompression.
pub const MAX_WASM_BYTES: usize = 8 << 20;
/// Largest ConfigMap accepted: Kubernetes' own limit on `data` plus `binaryData` (keys and
/// decoded values).
pub const MAX_CONFIGMAP_BYTES: usize = 1 << 20;

/// Why a policy ConfigMap was not loaded, by pipeline step.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The ConfigMap or the decompressed module is too large.
    #[error("{what} exceeds the limit of {limit} bytes")]
    Size { what: String, limit: usize },
    #[error("{section} key {key} is missing{hint}")]
    Missing {
        section: &'static str,
        key: &'static str,
        hint: &'static str,
    },
    #[error("binaryData keys {WASM_KEY} and {WASM_GZIP_KEY} are both set; keep one")]
    Ambiguous,
    /// `module` names a reference and the bytes are there too, or the reference is malformed.
    #[error("data key {MODULE_KEY}: {0}")]
    Reference(String),
    #[error("binaryData key {WASM_GZIP_KEY}: not valid gzip: {message}")]
    Decompress { message: String },
    /// The operator trusts keys and the module is unsigned or not signed by one of them.
    #[error("{0}")]
    Signature(SignatureRejection),
    #[error("data key {MANIFEST_KEY}: {0}")]
    Manifest(ManifestError),
    #[error(
        "data key {MANIFEST_KEY}: manifest field sha256: expected {expected} but the module's digest is {actual}"
    )]
    Digest { expected: String, actual: String },
    /// Not a component, or it imports what the sandbox does not provide.
    #[error("the module does not load: {0}")]
    Compile(EvalError),
    #[error(
        "data key {MANIFEST_KEY}: manifest field hooks: declares {hook} but the module does not export {}",
        hook.interface()
    )]
    Hooks { hook: Hook },
    /// `validate-settings` refused the settings (or failed).
    #[error("data key {MANIFEST_KEY}: manifest field settings: {0}")]
    Settings(EvalError),
    /// `deadlineMs` or `memoryMib` above the operator's maximum.
    #[error("data key {MANIFEST_KEY}: {0}")]
    Limits(LimitError),
    /// Keys of two kinds of policy (a module, a reference, a CEL document) are both set.
    #[error("{0}")]
    Mixed(String),
    /// A CEL policy's document, manifest or signature was refused before it ran.
    #[error("{0}")]
    Cel(CelSourceError),
    /// The CEL evaluator's `validate-settings` refused the document: an expression that does
    /// not compile (named with a caret under its position), a field it does not know, too many.
    #[error("data key {CEL_KEY}: {}", .0.message)]
    CelDocument(EvalError),
}

impl LoadError {
    /// The step that failed, as a metric label: `size`, `missing`, `ambiguous`, `reference`,
    /// `decompress`, `signature`, `manifest`, `digest`, `compile`, `hooks`, `settings`, `limits`
    /// or `document` (a CEL policy's).
    pub fn step(&self) -> &'static str {
        match self {
            LoadError::Size { .. } => "size",
            LoadError::Missing { .. } => "missing",
            LoadError::Ambiguous => "ambiguous",
            LoadError::Reference(_) => "reference",
            LoadError::Decompress { .. } => "decompress",
            LoadError::Signature(_) => "signature",
            LoadError::Manifest(_) => "manifest",
            LoadError::Digest { .. } => "digest",
            LoadError::Compile(_) => "compile",
            LoadError::Hooks { .. } => "hooks",
            LoadError::Settings(_) => "settings",
            LoadError::Limits(_) => "limits",
            LoadError::Mixed(_) => "ambiguous",
            LoadError::Cel(CelSourceError::Document(_)) | LoadError::CelDocument(_) => "document",
            LoadError::Cel(CelSourceError::Manifest(_)) => "manifest",
            LoadError::Cel(CelSourceError::Unsigned { .. } | CelSourceError::Signature(_)) => {
                "signature"
            }
        }
    }
}

impl From<ActivationError> for LoadError {
    fn from(e: ActivationError) -> LoadError {
        match e {
            ActivationError::Manifest(m) => LoadError::Manifest(m),
            ActivationError::Limits(l) => LoadError::Limits(l),
            ActivationError::Digest { expected, actual } => LoadError::Digest { expected, actual },
            ActivationError::Compile(e) => LoadError::Compile(e),
            ActivationError::Hooks { hook } => LoadError::Hooks { hook },
            ActivationError::Settings(e) => LoadError::Settings(e),
        }
    }
}

/// Why a module's signature was refused (only when the operator trusts keys).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRejection {
    #[error(
        "unsigned: {SIGNATURE_KEY} is missing; the operator loads only modules signed by one \
         of its trusted keys ({keys} configured){hint}"
    )]
    Missing { keys: usize, hint: &'static str },
    /// Bad base64, or no trusted key verifies it.
    #[error("{SIGNATURE_KEY}: {0}")]
    Invalid(SignatureError),
}

/// What a policy ConfigMap carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PolicyForm {
    /// A component: its bytes, or a reference to them in a registry.
    #[default]
    Module,
    /// A CEL document, run by the operator's CEL evaluator (see [`crate::cel_configmap`]).
    Cel,
}

/// A policy read from a ConfigMap, checked up to its digest (and signature, with trusted keys)
/// but not compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySource {
    pub manifest: PolicyManifest,
    /// Whether it came as a module or as a CEL document.
    pub form: PolicyForm,
    /// The module, decompressed; for a CEL document, the operator's own evaluator, borrowed
    /// (every read of a CEL ConfigMap would otherwise copy its 4 MB).
    pub wasm: Cow<'static, [u8]>,
    /// Lower-case hex sha256 of `wasm`.
    pub digest: String,
    pub signed: Signed,
}

/// The manifest alone, when it reads and validates, whatever the state of the module: a
/// policy whose module fails to load is still known by name, hooks and selector, so the jobs
/// it would select can be told.
pub fn read_manifest(cm: &ConfigMap) -> Option<PolicyManifest> {
    let data = cm.data.as_ref()?;
    let default_name = default_name(cm);
    let manifest = match data.get(CEL_KEY) {
        Some(document) => cel_configmap::manifest_for(
            document,
            data.get(MANIFEST_KEY).map(String::as_str),
            default_name,
        )
        .ok()?,
        None => PolicyManifest::from_yaml(data.get(MANIFEST_KEY)?, default_name).ok()?,
    };
    manifest.validate(&Capabilities::everything()).ok()?;
    manifest.grant_reads(&ReadCeiling::everything()).ok()?;
    Some(manifest)
}

/// Reads a policy ConfigMap: checks its size, finds the module and the manifest, decompresses
/// the module, parses and checks the manifest, digests the module and checks the digest against
/// the manifest's `sha256` pin. Compiling is left to [`load`]. A signature is not checked (see
/// [`read_verified`]).
pub fn read_configmap(cm: &ConfigMap) -> Result<PolicySource, LoadError> {
    read_verified(cm, &TrustedKeys::none())
}

/// [`read_configmap`], and with `keys` not empty, the module's signature must verify against
/// one of them; this is checked as soon as the module is decompressed, so nothing else of an
/// unsigned ConfigMap is looked at.
pub fn read_verified(cm: &ConfigMap, keys: &TrustedKeys) -> Result<PolicySource, LoadError> {
    let empty_data = BTreeMap::new();
    let empty_binary = BTreeMap::new();
    let data = cm.data.as_ref().unwrap_or(&empty_data);
    let binary = cm.binary_data.as_ref().unwrap_or(&empty_binary);

    let size = data.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + binary
            .iter()
            .map(|(k, v)| k.len() + v.0.len())
            .sum::<usize>();
    if size > MAX_CONFIGMAP_BYTES {
        return Err(LoadError::Size {
            what: format!("the ConfigMap's data and binaryData ({size} bytes)"),
            limit: MAX_CONFIGMAP_BYTES,
        });
    }

    if data.contains_key(CEL_KEY) {
        return read_cel(cm, data, binary, keys);
    }
    let text = data.get(MANIFEST_KEY).ok_or(LoadError::Missing {
        section: "data",
        key: MANIFEST_KEY,
        hint: "",
    })?;
    let wasm = match (binary.get(WASM_KEY), binary.get(WASM_GZIP_KEY)) {
        (Some(_), Some(_)) => return Err(LoadError::Ambiguous),
        (Some(plain), None) => plain.0.clone(),
        (None, Some(compressed)) => gunzip(&compressed.0)?,
        (None, None) => {
            let misplaced = data.contains_key(WASM_KEY) || data.contains_key(WASM_GZIP_KEY);
            return Err(LoadError::Missing {
                section: "binaryData",
                key: "policy.wasm (or policy.wasm.gz)",
                hint: if misplaced {
                    " (the module is under data; it belongs under binaryData)"
                } else {
                    ""
                },
            });
        }
    };
    if wasm.len() > MAX_WASM_BYTES {
        return Err(LoadError::Size {
            what: format!("binaryData key {WASM_KEY} ({} bytes)", wasm.len()),
            limit: MAX_WASM_BYTES,
        });
    }

    let signed = check_signature(data, binary, &wasm, keys)?;
    finish(cm, text, wasm, signed)
}

/// A module reference of a policy ConfigMap, as written (parsed by the puller).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleReference {
    /// `oci://...`, as written.
    pub reference: String,
    /// The Secret with the registry's credentials, in the ConfigMap's namespace.
    pub pull_secret: Option<String>,
}

/// The module reference `cm` carries instead of a module (`data` key `module`), if any. A
/// ConfigMap with both a reference and module bytes, or a signature meant for bytes, is
/// refused: which one would run must not be a guess.
pub fn module_reference(cm: &ConfigMap) -> Result<Option<ModuleReference>, LoadError> {
    let Some(reference) = cm.data.as_ref().and_then(|d| d.get(MODULE_KEY)) else {
        return Ok(None);
    };
    if cm.data.as_ref().is_some_and(|d| d.contains_key(CEL_KEY)) {
        return Err(LoadError::Mixed(format!(
            "data key {CEL_KEY} and data key {MODULE_KEY} are both set: a policy is a CEL \
             document or a module; keep one"
        )));
    }
    let binary = cm.binary_data.as_ref();
    if binary.is_some_and(|b| b.contains_key(WASM_KEY) || b.contains_key(WASM_GZIP_KEY)) {
        return Err(LoadError::Reference(format!(
            "a module reference and binaryData {WASM_KEY} are both set; keep one"
        )));
    }
    let data = cm.data.as_ref().expect("data holds the reference");
    if data.contains_key(SIGNATURE_KEY) {
        return Err(LoadError::Reference(format!(
            "a referenced module is verified by its cosign signature in the registry; remove \
             data key {SIGNATURE_KEY}"
        )));
    }
    let reference = reference.trim();
    if !reference.starts_with(MODULE_SCHEME) {
        return Err(LoadError::Reference(format!(
            "{:?} is not an {MODULE_SCHEME} reference",
            tfjob_policy_logic::text::prefix(reference, 120)
        )));
    }
    let pull_secret = match data.get(PULL_SECRET_KEY).map(|s| s.trim()) {
        None | Some("") => None,
        Some(name) if check_dns_subdomain(name).is_ok() => Some(name.to_owned()),
        Some(name) => {
            return Err(LoadError::Reference(format!(
                "data key {PULL_SECRET_KEY}: {:?} is not a Secret name",
                tfjob_policy_logic::text::prefix(name, 120)
            )));
        }
    };
    Ok(Some(ModuleReference {
        reference: reference.to_owned(),
        pull_secret,
    }))
}

/// Reads a policy ConfigMap whose module was pulled from the reference it names: `wasm` is the
/// module as pulled and verified, `signed` what its registry signature verified.
pub fn read_referenced(
    cm: &ConfigMap,
    wasm: Vec<u8>,
    signed: Signed,
) -> Result<PolicySource, LoadError> {
    let data = cm.data.as_ref();
    let size = data
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>();
    if size > MAX_CONFIGMAP_BYTES {
        return Err(LoadError::Size {
            what: format!("the ConfigMap's data ({size} bytes)"),
            limit: MAX_CONFIGMAP_BYTES,
        });
    }
    let text = data
        .and_then(|d| d.get(MANIFEST_KEY))
        .ok_or(LoadError::Missing {
            section: "data",
            key: MANIFEST_KEY,
            hint: "",
        })?;
    finish(cm, text, wasm, signed)
}

/// The name of a policy whose manifest does not say: the ConfigMap's, without [`NAME_PREFIX`].
fn default_name(cm: &ConfigMap) -> &str {
    let cm_name = cm.metadata.name.as_deref().unwrap_or_default();
    cm_name.strip_prefix(NAME_PREFIX).unwrap_or(cm_name)
}

/// Reads a ConfigMap that carries a CEL document (see [`crate::cel_configmap`]): nothing of a
/// module may be beside it, and with `keys` the document must be signed by one of them.
fn read_cel(
    cm: &ConfigMap,
    data: &BTreeMap<String, String>,
    binary: &BTreeMap<String, ByteString>,
    keys: &TrustedKeys,
) -> Result<PolicySource, LoadError> {
    let module_key = [WASM_KEY, WASM_GZIP_KEY]
        .into_iter()
        .find(|k| binary.contains_key(*k))
        .map(|k| format!("binaryData key {k}"))
        .or_else(|| {
            data.contains_key(MODULE_KEY)
                .then(|| format!("data key {MODULE_KEY}"))
        });
    if let Some(module_key) = module_key {
        return Err(LoadError::Mixed(format!(
            "data key {CEL_KEY} and {module_key} are both set: a policy is a CEL document or a \
             module; keep one"
        )));
    }
    if data.contains_key(SIGNATURE_KEY) {
        return Err(LoadError::Mixed(format!(
            "data key {SIGNATURE_KEY} signs a module; a CEL document's signature goes under \
             {CEL_SIGNATURE_KEY}"
        )));
    }
    if !keys.is_empty() && binary.contains_key(CEL_SIGNATURE_KEY) {
        return Err(LoadError::Cel(cel_configmap::misplaced_signature(keys)));
    }
    let document = &data[CEL_KEY];
    let source = cel_configmap::read(
        document,
        data.get(MANIFEST_KEY).map(String::as_str),
        data.get(CEL_SIGNATURE_KEY).map(String::as_str),
        keys,
        default_name(cm),
    )
    .map_err(LoadError::Cel)?;
    Ok(PolicySource {
        manifest: source.manifest,
        form: PolicyForm::Cel,
        wasm: Cow::Borrowed(crate::defaults::CEL_POLICY_WASM),
        digest: crate::defaults::cel_policy_digest().to_owned(),
        signed: source.signed,
    })
}

/// The steps after the module is at hand: the manifest, the digest and its pin.
fn finish(
    cm: &ConfigMap,
    text: &str,
    wasm: Vec<u8>,
    signed: Signed,
) -> Result<PolicySource, LoadError> {
    let manifest =
        PolicyManifest::from_yaml(text, default_name(cm)).map_err(LoadError::Manifest)?;
    // The operator's ceiling is checked at activation; here only the manifest's shape.
    manifest
        .validate(&Capabilities::everything())
        .map_err(LoadError::Manifest)?;
    manifest
        .grant_reads(&ReadCeiling::everything())
        .map_err(LoadError::Manifest)?;

    let digest = hex::encode(Sha256::digest(&wasm));
    if let Some(expected) = &manifest.sha256
        && !expected.eq_ignore_ascii_case(&digest)
    {
        return Err(LoadError::Digest {
            expected: expected.clone(),
            actual: digest,
        });
    }
    Ok(PolicySource {
        manifest,
        form: PolicyForm::Module,
        wasm: Cow::Owned(wasm),
        digest,
        signed,
    })
}

/// The signature step: with no keys, only whether there is a signature; with keys, which one
/// verifies it.
fn check_signature(
    data: &BTreeMap<String, String>,
    binary: &BTreeMap<String, ByteString>,
    wasm: &[u8],
    keys: &TrustedKeys,
) -> Result<Signed, LoadError> {
    let signature = data.get(SIGNATURE_KEY);
    if keys.is_empty() {
        return Ok(match signature {
            Some(_) => Signed::Unverified,
            None => Signed::No,
        });
    }
    let Some(signature) = signature else {
        return Err(LoadError::Signature(SignatureRejection::Missing {
            keys: keys.len(),
            hint: if binary.contains_key(SIGNATURE_KEY) {
                " (it is under binaryData; it belongs under data, as base64 text)"
            } else {
                ""
            },
        }));
    };
    keys.verify(wasm, signature)
        .map(Signed::By)
        .map_err(|e| LoadError::Signature(SignatureRejection::Invalid(e)))
}

/// Decompresses at most [`MAX_WASM_BYTES`] (plus one byte, to tell a module of exactly the limit
/// from a larger one): the output buffer never grows past that, whatever the input claims.
fn gunzip(compressed: &[u8]) -> Result<Vec<u8>, LoadError> {
    let mut out = Vec::new();
    GzDecoder::new(compressed)
        .take(MAX_WASM_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| LoadError::Decompress {
            message: e.to_string(),
        })?;
    if out.len() > MAX_WASM_BYTES {
        return Err(LoadError::Size {
            what: format!("binaryData key {WASM_GZIP_KEY} decompressed"),
            limit: MAX_WASM_BYTES,
        });
    }
    Ok(out)
}

/// Reads and activates a policy ConfigMap: [`read_configmap`], then compilation (once per
/// digest), the exported hooks, the per-policy limits and `validate-settings`. Synchronous and
/// CPU-heavy on a cache miss.
pub fn load(engine: &PolicyEngine, cm: &ConfigMap) -> Result<ActivePolicy, LoadError> {
    activate_source(engine, read_configmap(cm)?)
}

/// [`load`] with [`read_verified`]: with `keys`, only a module signed by one of them is loaded.
/// Also says what is known of the signature.
pub fn load_verified(
    engine: &PolicyEngine,
    cm: &ConfigMap,
    keys: &TrustedKeys,
) -> Result<(ActivePolicy, Signed), LoadError> {
    let source = read_verified(cm, keys)?;
    let signed = source.signed.clone();
    Ok((activate_source(engine, source)?, signed))
}

/// Activates a policy read by [`read_configmap`].
pub fn activate_source(
    engine: &PolicyEngine,
    source: PolicySource,
) -> Result<ActivePolicy, LoadError> {
    let max = engine.limits().max_module;
    // The limit bounds what a ConfigMap's author ships; the CEL evaluator is the operator's own.
    if source.form == PolicyForm::Module && source.wasm.len() > max {
        return Err(LoadError::Size {
            what: format!("the module ({} bytes)", source.wasm.len()),
            limit: max,
        });
    }
    let form = source.form;
    crate::registry::activate_checked(engine, source.manifest, &source.wasm).map_err(|e| {
        match (form, LoadError::from(e)) {
            (PolicyForm::Cel, LoadError::Settings(refused)) => LoadError::CelDocument(refused),
            (_, other) => other,
        }
    })
}

/// The name `pack` gives the ConfigMap of policy `name`.
pub fn configmap_name(name: &str) -> String {
    format!("{NAME_PREFIX}{name}")
}

/// Builds the ConfigMap of a policy in `namespace`: named after the policy, labelled as a
/// policy, the manifest with `sha256` pinned to the module under `data`, the module under
/// `binaryData` (gzip-compressed when `gzip`). The same inputs always give the same bytes: the
/// gzip header carries no time, file name or operating system. Size and loadability are left
/// to [`load`], so that one code path decides what the operator accepts.
pub fn pack(
    mut manifest: PolicyManifest,
    wasm: &[u8],
    namespace: &str,
    gzip: bool,
) -> Result<ConfigMap, ManifestError> {
    let frame = frame(&manifest.name, namespace)?;
    manifest.sha256 = Some(hex::encode(Sha256::digest(wasm)));
    let text = serde_yaml_ng::to_string(&manifest).map_err(|e| ManifestError {
        field: ".".into(),
        message: e.to_string(),
    })?;
    let (key, module) = if gzip {
        (WASM_GZIP_KEY, gzip_deterministic(wasm))
    } else {
        (WASM_KEY, wasm.to_vec())
    };
    Ok(ConfigMap {
        data: Some(BTreeMap::from([(MANIFEST_KEY.into(), text)])),
        binary_data: Some(BTreeMap::from([(key.into(), ByteString(module))])),
        ..frame
    })
}

/// An empty policy ConfigMap: named after policy `name` (checked to make a ConfigMap name) in
/// `namespace`, labelled as a policy.
fn frame(name: &str, namespace: &str) -> Result<ConfigMap, ManifestError> {
    let name = configmap_name(name);
    check_dns_subdomain(&name).map_err(|message| ManifestError {
        field: "name".into(),
        message: format!("the ConfigMap name {name:?} {message}"),
    })?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(POLICY_LABEL.into(), "true".into())])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    })
}

/// Adds the signature (base64, as [`crate::signature::SigningKey::sign`] or `cosign
/// sign-blob` writes it) of the module, or of the CEL document, to a ConfigMap made by [`pack`]
/// or [`pack_cel`], under the key that kind of policy is signed under.
pub fn set_signature(cm: &mut ConfigMap, signature_b64: &str) {
    let data = cm.data.get_or_insert_with(BTreeMap::new);
    let key = if data.contains_key(CEL_KEY) {
        CEL_SIGNATURE_KEY
    } else {
        SIGNATURE_KEY
    };
    data.insert(key.to_owned(), signature_b64.trim().to_owned());
}

/// The ConfigMap of a CEL policy: `document` as written (its signature covers these bytes) and,
/// when `manifest` says more than its defaults, the manifest without what the document decides
/// (hooks, settings, the digest; see [`crate::cel_configmap`]). Like [`pack`], it does not load
/// the policy.
pub fn pack_cel(
    manifest: &PolicyManifest,
    document: &str,
    namespace: &str,
) -> Result<ConfigMap, ManifestError> {
    let frame = frame(&manifest.name, namespace)?;
    let unwritable = |e: serde_yaml_ng::Error| ManifestError {
        field: ".".into(),
        message: e.to_string(),
    };
    // YAML values keep the manifest's field order (name first), as `pack` writes it.
    let defaults = serde_yaml_ng::to_value(PolicyManifest::default()).map_err(unwritable)?;
    let serde_yaml_ng::Value::Mapping(mut fields) =
        serde_yaml_ng::to_value(manifest).map_err(unwritable)?
    else {
        unreachable!("a manifest serialises to a mapping");
    };
    // Fields at their default say nothing, and a failurePolicy at its default would contradict
    // one the document sets.
    fields.retain(|field, value| {
        let decided = matches!(field.as_str(), Some("hooks" | "settings" | "sha256"));
        !decided && defaults.get(field) != Some(&*value)
    });
    let mut data = BTreeMap::from([(CEL_KEY.to_owned(), document.to_owned())]);
    data.insert(
        MANIFEST_KEY.into(),
        serde_yaml_ng::to_string(&fields).map_err(unwritable)?,
    );
    Ok(ConfigMap {
        data: Some(data),
        ..frame
    })
}

/// gzip with a fixed header (no modification time, no file name, operating system "unknown")
/// and the best compression, so that packing is reproducible byte for byte.
fn gzip_deterministic(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), Compression::best());
    // Writing into a Vec cannot fail.
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.try_finish())
        .expect("compressing into memory");
    encoder.finish().expect("compressing into memory")
}

/// A DNS-1123 subdomain, as Kubernetes requires of ConfigMap names.
fn check_dns_subdomain(name: &str) -> Result<(), String> {
    let valid_label = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(
            "is not a valid name: lower-case letters, digits, '-' and '.', at most 253".into(),
        );
    }
    Ok(())
}

/// The ConfigMap as YAML for people and `kubectl apply`: apiVersion, kind and metadata first,
/// then the manifest, then the module's base64 (which would otherwise hide the rest).
pub fn to_yaml(cm: &ConfigMap) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Ordered<'a> {
        api_version: &'a str,
        kind: &'a str,
        metadata: &'a ObjectMeta,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<&'a BTreeMap<String, String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        binary_data: Option<&'a BTreeMap<String, ByteString>>,
    }
    serde_yaml_ng::to_string(&Ordered {
        api_version: "v1",
        kind: "ConfigMap",
        metadata: &cm.metadata,
        data: cm.data.as_ref(),
        binary_data: cm.binary_data.as_ref(),
    })
    .expect("a ConfigMap serialises to YAML")
}

/// Where a policy ConfigMap stands, as the operator last saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyState {
    /// Loaded and in the active set.
    Active,
    /// Not loaded; `error` says why.
    Rejected,
    /// Loaded, but another ConfigMap with the same policy name is active instead.
    Superseded,
    /// Its module is being pulled from a registry (`error` says what is awaited); the previous
    /// version, if any, serves meanwhile.
    Pending,
}

impl PolicyState {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyState::Active => "Active",
            PolicyState::Rejected => "Rejected",
            PolicyState::Superseded => "Superseded",
            PolicyState::Pending => "Pending",
        }
    }
}

/// The `policy.tfjob.dev/status` annotation of a policy ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    pub state: PolicyState,
    /// sha256 (hex) of the module, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When the operator loaded (or rejected) it, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The ConfigMap's `metadata.resourceVersion` this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Where the policy may act: `cluster`, or `namespace:<ns>` for that namespace's jobs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// What the serving version was granted beyond plain decoration (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted: Option<Capabilities>,
    /// The id of the trusted key whose signature the module (of `digest`) was loaded with;
    /// none when the operator trusts no keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// The serving version's circuit breaker while it is tripped; absent while calls go through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerStatus>,
    /// For a module pulled from a registry: the reference the serving version was pulled by,
    /// pinned to its manifest digest (a tag resolved to the digest it named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// What the serving version was charged of the memory for loaded policies when it loaded
    /// (its compiled code as far as it was resident, its pre-initialised copy, what is kept of
    /// its module), in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// A tripped circuit breaker in a [`PolicyStatus`] (see [`crate::breaker`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerStatus {
    /// `Tripped`: calls are refused (but for one trial call once `retryAt` has passed).
    pub state: String,
    /// The kind of the failures that tripped it: `timeout`, `trap`, `memory` or
    /// `invalid-output`.
    pub category: String,
    /// Consecutive failures of that kind.
    pub failures: u32,
    /// Times it opened since it last closed (the first trip and each failed trial).
    pub trips: u32,
    /// When a trial call may go through, RFC 3339.
    pub retry_at: String,
}

impl BreakerStatus {
    /// The status of a tripped breaker.
    pub fn of(tripped: &crate::breaker::TrippedPolicy) -> BreakerStatus {
        BreakerStatus {
            state: "Tripped".into(),
            category: tripped.category.as_str().to_owned(),
            failures: tripped.failures,
            trips: tripped.trips,
            // Whole seconds: the annotation is rewritten whenever it changes, and a retry time
            // recomputed to the nanosecond would change it on every report.
            retry_at: tripped
                .retry_at
                .round(jiff::Unit::Second)
                .unwrap_or(tripped.retry_at)
                .to_string(),
        }
    }
}

impl PolicyStatus {
    /// The status of a policy that was loaded at `at`.
    pub fn active(digest: &str, at: jiff::Timestamp) -> PolicyStatus {
        PolicyStatus {
            state: PolicyState::Active,
            digest: Some(digest.to_owned()),
            loaded_at: Some(at.to_string()),
            error: None,
            resource_version: None,
            scope: None,
            granted: None,
            signed_by: None,
            breaker: None,
            module: None,
            memory_bytes: None,
        }
    }

    /// The status of a policy refused at `at`; `digest` when the module could be read.
    pub fn rejected(error: &LoadError, digest: Option<&str>, at: jiff::Timestamp) -> PolicyStatus {
        PolicyStatus {
            state: PolicyState::Rejected,
            digest: digest.map(str::to_owned),
            loaded_at: Some(at.to_string()),
            error: Some(error.to_string()),
            resource_version: None,
            scope: None,
            granted: None,
            signed_by: None,
            breaker: None,
            module: None,
            memory_bytes: None,
        }
    }

    /// The status of a policy loaded at `at` but shadowed by `winner` (e.g. `ns/configmap`).
    pub fn superseded(digest: &str, winner: &str, at: jiff::Timestamp) -> PolicyStatus {
        PolicyStatus {
            state: PolicyState::Superseded,
            digest: Some(digest.to_owned()),
            loaded_at: Some(at.to_string()),
            error: Some(format!(
                "superseded by {winner}, which has the same policy name"
            )),
            resource_version: None,
            scope: None,
            granted: None,
            signed_by: None,
            breaker: None,
            module: None,
            memory_bytes: None,
        }
    }

    /// This status, naming the key that verified the module.
    pub fn signed_by(mut self, key: Option<&KeyId>) -> PolicyStatus {
        self.signed_by = key.map(|k| k.to_string());
        self
    }

    /// This status, about the given version of the ConfigMap.
    pub fn of_version(mut self, cm: &ConfigMap) -> PolicyStatus {
        self.resource_version = cm.metadata.resource_version.clone();
        self
    }

    /// The annotation's value: compact JSON.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a status serialises to JSON")
    }

    /// Parses an annotation's value. Fields this version does not know are ignored, so an
    /// older CLI can read a newer operator's status.
    pub fn from_annotation(text: &str) -> Result<PolicyStatus, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The status recorded on `cm`: `None` without the annotation.
    pub fn of(cm: &ConfigMap) -> Option<Result<PolicyStatus, serde_json::Error>> {
        cm.metadata
            .annotations
            .as_ref()?
            .get(STATUS_ANNOTATION)
            .map(|text| PolicyStatus::from_annotation(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Hook;

    /// A module stand-in: `read_configmap` digests bytes, it does not compile them.
    const MODULE: &[u8] = b"\0asm fake module bytes";

    fn manifest() -> PolicyManifest {
        PolicyManifest {
            name: "gpu".into(),
            hooks: vec![Hook::Decorate],
            ..PolicyManifest::default()
        }
    }

    fn packed(gzip: bool) -> ConfigMap {
        pack(manifest(), MODULE, "tfjob-system", gzip).unwrap()
    }

    fn with_binary(mut cm: ConfigMap, key: &str, bytes: Vec<u8>) -> ConfigMap {
        cm.binary_data = Some(BTreeMap::from([(key.to_owned(), ByteString(bytes))]));
        cm
    }

    fn with_manifest(mut cm: ConfigMap, text: &str) -> ConfigMap {
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert(MANIFEST_KEY.into(), text.into());
        cm
    }

    #[test]
    fn packed_configmaps_read_back_plain_and_gzip() {
        let digest = hex::encode(Sha256::digest(MODULE));
        for gzip in [false, true] {
            let cm = packed(gzip);
            assert_eq!(cm.metadata.name.as_deref(), Some("tfjob-policy-gpu"));
            assert_eq!(
                cm.metadata.labels.as_ref().unwrap()[POLICY_LABEL],
                "true",
                "labelled"
            );
            let source = read_configmap(&cm).unwrap();
            assert_eq!(source.wasm, MODULE);
            assert_eq!(source.digest, digest);
            assert_eq!(source.manifest.sha256.as_deref(), Some(digest.as_str()));
            assert_eq!(source.manifest.name, "gpu");
        }
        // Reproducible: the same inputs give the same YAML.
        assert_eq!(to_yaml(&packed(true)), to_yaml(&packed(true)));
        let gz = &packed(true).binary_data.unwrap()[WASM_GZIP_KEY].0;
        assert_eq!(
            &gz[..10],
            &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255],
            "fixed header"
        );
    }

    #[test]
    fn the_yaml_puts_metadata_and_manifest_before_the_module() {
        let yaml = to_yaml(&packed(false));
        let at = |s: &str| yaml.find(s).unwrap_or_else(|| panic!("{s} in\n{yaml}"));
        assert!(at("apiVersion: v1") < at("kind: ConfigMap"));
        assert!(at("kind: ConfigMap") < at("metadata:"));
        assert!(at("metadata:") < at("data:"));
        assert!(at("data:") < at("binaryData:"));
        let back: ConfigMap = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, packed(false));
    }

    #[test]
    fn a_missing_name_defaults_to_the_configmap_name() {
        let mut cm = with_manifest(packed(false), "hooks: [classify]\n");
        cm.metadata.name = Some("tfjob-policy-preemption".into());
        assert_eq!(read_configmap(&cm).unwrap().manifest.name, "preemption");
        cm.metadata.name = Some("preemption-rules".into());
        assert_eq!(
            read_configmap(&cm).unwrap().manifest.name,
            "preemption-rules"
        );
    }

    #[test]
    fn missing_and_doubled_keys_are_named() {
        let mut cm = packed(false);
        cm.data = None;
        let err = read_configmap(&cm).unwrap_err();
        assert_eq!(err.step(), "missing");
        assert_eq!(err.to_string(), "data key policy.yaml is missing");

        let mut cm = packed(false);
        cm.binary_data = None;
        let err = read_configmap(&cm).unwrap_err();
        assert_eq!(err.step(), "missing");
        assert!(
            err.to_string().contains("binaryData key policy.wasm"),
            "{err}"
        );

        let mut cm = packed(false);
        cm.binary_data = None;
        cm.data
            .as_mut()
            .unwrap()
            .insert(WASM_KEY.into(), "AGFzbQ==".into());
        let err = read_configmap(&cm).unwrap_err();
        assert!(
            err.to_string().contains("belongs under binaryData"),
            "{err}"
        );

        let mut cm = packed(false);
        cm.binary_data
            .as_mut()
            .unwrap()
            .insert(WASM_GZIP_KEY.into(), ByteString(gzip_deterministic(MODULE)));
        let err = read_configmap(&cm).unwrap_err();
        assert_eq!(err, LoadError::Ambiguous);
        assert!(err.to_string().contains("policy.wasm.gz"), "{err}");
    }

    #[test]
    fn bad_gzip_is_a_decompress_error() {
        let cm = with_binary(packed(true), WASM_GZIP_KEY, MODULE.to_vec());
        let err = read_configmap(&cm).unwrap_err();
        assert_eq!(err.step(), "decompress");
        assert!(
            err.to_string()
                .starts_with("binaryData key policy.wasm.gz: not valid gzip")
        );

        // A valid header with a damaged body fails its checksum.
        let mut gz = gzip_deterministic(&[7u8; 4096]);
        let n = gz.len();
        gz[n - 6] ^= 0xff;
        let err = read_configmap(&with_binary(packed(true), WASM_GZIP_KEY, gz)).unwrap_err();
        assert_eq!(err.step(), "decompress", "{err}");
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        // 16 MiB of zeros compress to about 16 KiB: well within the ConfigMap limit.
        let mut encoder = GzBuilder::new().write(Vec::new(), Compression::fast());
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..16 {
            encoder.write_all(&chunk).unwrap();
        }
        let bomb = encoder.finish().unwrap();
        assert!(bomb.len() < MAX_CONFIGMAP_BYTES / 4, "{}", bomb.len());
        let err = read_configmap(&with_binary(packed(true), WASM_GZIP_KEY, bomb)).unwrap_err();
        assert_eq!(err.step(), "size");
        assert_eq!(
            err.to_string(),
            "binaryData key policy.wasm.gz decompressed exceeds the limit of 8388608 bytes"
        );
        // Exactly the limit is fine.
        let exact = gzip_deterministic(&vec![0u8; MAX_WASM_BYTES]);
        let source = read_configmap(&with_binary(
            with_manifest(packed(true), "hooks: [decorate]\n"),
            WASM_GZIP_KEY,
            exact,
        ))
        .unwrap();
        assert_eq!(source.wasm.len(), MAX_WASM_BYTES);
    }

    #[test]
    fn an_oversized_configmap_is_refused() {
        let cm = with_binary(packed(false), WASM_KEY, vec![0; MAX_CONFIGMAP_BYTES]);
        let err = read_configmap(&cm).unwrap_err();
        assert_eq!(err.step(), "size");
        assert!(err.to_string().contains("data and binaryData"), "{err}");
        assert!(err.to_string().contains("1048576"), "{err}");
    }

    #[test]
    fn manifest_errors_name_the_field() {
        for (text, field) in [
            ("hooks: [decorate]\nmode: Loud\n", "mode"),
            ("hooks: [paint]\n", "hooks[0]"),
            (
                "hooks: [decorate]\nselector: {namespace: [a]}\n",
                "selector.namespace",
            ),
            (
                "hooks: [decorate]\nselector: {matchExpressions: [{key: team, operator: In}]}\n",
                "selector.matchExpressions[0].values",
            ),
            ("hooks: [decorate]\ndeadlineMs: soon\n", "deadlineMs"),
            ("hooks: [decorate]\nsha256: abc\n", "sha256"),
            ("hooks: []\n", "hooks"),
            (
                "hooks: [decorate]\nallowedPaths: [\"spec.containers[*].image\"]\n",
                "allowedPaths",
            ),
        ] {
            let err = read_configmap(&with_manifest(packed(false), text)).unwrap_err();
            let LoadError::Manifest(m) = &err else {
                panic!("{text}: {err}")
            };
            assert_eq!(m.field, field, "{text}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("data key policy.yaml: manifest field {field}: ")),
                "{err}"
            );
        }
        let err = read_configmap(&with_manifest(packed(false), "hooks: [decorate\n")).unwrap_err();
        assert_eq!(err.step(), "manifest");
        assert!(err.to_string().contains("not valid YAML"), "{err}");
    }

    #[test]
    fn the_digest_pin_names_both_digests() {
        let cm = with_binary(packed(false), WASM_KEY, b"another module".to_vec());
        let err = read_configmap(&cm).unwrap_err();
        let LoadError::Digest { expected, actual } = &err else {
            panic!("{err}")
        };
        assert_eq!(expected, &hex::encode(Sha256::digest(MODULE)));
        assert_eq!(actual, &hex::encode(Sha256::digest(b"another module")));
        assert!(
            err.to_string().contains(expected) && err.to_string().contains(actual),
            "{err}"
        );
        assert_eq!(err.step(), "digest");
        // Without a pin any module is read; upper-case pins match too.
        let unpinned = with_manifest(cm.clone(), "hooks: [decorate]\n");
        assert!(read_configmap(&unpinned).is_ok());
        let upper = format!(
            "hooks: [decorate]\nsha256: {}\n",
            hex::encode_upper(Sha256::digest(b"another module"))
        );
        assert!(read_configmap(&with_manifest(cm, &upper)).is_ok());
    }

    #[test]
    fn pack_refuses_names_kubernetes_would_refuse() {
        let mut m = manifest();
        m.name = "GPU_rules".into();
        let err = pack(m, MODULE, "ns", false).unwrap_err();
        assert_eq!(err.field, "name");
        assert!(err.message.contains("tfjob-policy-GPU_rules"), "{err}");
    }

    use crate::signature::test_keys::signer;

    fn signed(gzip: bool, key: &crate::signature::SigningKey) -> ConfigMap {
        let mut cm = packed(gzip);
        set_signature(&mut cm, &key.sign(MODULE));
        cm
    }

    #[test]
    fn a_signature_over_the_decompressed_module_verifies_plain_and_gzip() {
        let (key, keys) = signer("ops");
        for gzip in [false, true] {
            let cm = signed(gzip, &key);
            let source = read_verified(&cm, &keys).unwrap();
            assert_eq!(source.signed, Signed::By(key.public_key().id().clone()));
            assert_eq!(source.signed.key(), Some(key.public_key().id()));
            // Without keys the signature is only noted.
            assert_eq!(read_configmap(&cm).unwrap().signed, Signed::Unverified);
        }
        assert_eq!(read_configmap(&packed(false)).unwrap().signed, Signed::No);
    }

    #[test]
    fn with_trusted_keys_an_unsigned_module_is_refused_first() {
        let (_, keys) = signer("ops");
        let err = read_verified(&packed(true), &keys).unwrap_err();
        assert_eq!(err.step(), "signature");
        assert_eq!(
            err.to_string(),
            "unsigned: policy.wasm.sig is missing; the operator loads only modules signed by one \
             of its trusted keys (1 configured)"
        );
        // Refused before the manifest is looked at: a broken manifest is not what is reported.
        let broken = with_manifest(packed(false), "hooks: [decorate\n");
        assert_eq!(
            read_verified(&broken, &keys).unwrap_err().step(),
            "signature"
        );

        let mut misplaced = packed(false);
        misplaced
            .binary_data
            .as_mut()
            .unwrap()
            .insert(SIGNATURE_KEY.into(), ByteString(b"AAAA".to_vec()));
        let err = read_verified(&misplaced, &keys).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("it belongs under data, as base64 text)"),
            "{err}"
        );
    }

    #[test]
    fn a_tampered_module_a_stranger_s_signature_or_bad_base64_is_refused() {
        let (key, keys) = signer("ops");
        let (stranger, _) = signer("stranger");
        let mut tampered = signed(false, &key);
        tampered.binary_data.as_mut().unwrap().insert(
            WASM_KEY.into(),
            ByteString(b"\0asm fake module bytes, altered".to_vec()),
        );
        for cm in [tampered, signed(true, &stranger)] {
            let err = read_verified(&cm, &keys).unwrap_err();
            assert_eq!(err.step(), "signature");
            assert_eq!(
                err.to_string(),
                "policy.wasm.sig: signature does not verify against any of 1 trusted key"
            );
        }
        let mut garbled = packed(false);
        set_signature(&mut garbled, "MEUCIQ*garbled");
        let err = read_verified(&garbled, &keys).unwrap_err();
        assert!(
            matches!(
                &err,
                LoadError::Signature(SignatureRejection::Invalid(SignatureError::Base64 { .. }))
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("policy.wasm.sig: invalid base64: "),
            "{err}"
        );
        // Without trusted keys nothing of this is checked.
        assert_eq!(read_configmap(&garbled).unwrap().signed, Signed::Unverified);
    }

    #[test]
    fn status_round_trips_through_the_annotation() {
        let at: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let mut cm = packed(false);
        cm.metadata.resource_version = Some("42".into());
        let active = PolicyStatus::active("abc", at).of_version(&cm);
        let text = active.to_annotation();
        assert_eq!(
            text,
            r#"{"state":"Active","digest":"abc","loadedAt":"2026-01-02T03:04:05Z","resourceVersion":"42"}"#
        );
        assert_eq!(PolicyStatus::from_annotation(&text).unwrap(), active);
        let signed = active
            .clone()
            .signed_by(Some(signer("ops").0.public_key().id()));
        let text = signed.to_annotation();
        assert!(
            text.ends_with(&format!(
                r#""signedBy":"{}"}}"#,
                signed.signed_by.as_deref().unwrap()
            )),
            "{text}"
        );
        assert_eq!(PolicyStatus::from_annotation(&text).unwrap(), signed);

        let rejected = PolicyStatus::rejected(&LoadError::Ambiguous, None, at);
        assert_eq!(rejected.state, PolicyState::Rejected);
        let back = PolicyStatus::from_annotation(&rejected.to_annotation()).unwrap();
        assert_eq!(back, rejected);
        assert!(back.error.unwrap().contains("both set"));

        let tripped = PolicyStatus {
            breaker: Some(BreakerStatus {
                state: "Tripped".into(),
                category: "timeout".into(),
                failures: 5,
                trips: 1,
                retry_at: "2026-01-02T03:04:15Z".into(),
            }),
            ..active.clone()
        };
        let text = tripped.to_annotation();
        assert!(
            text.ends_with(
                r#""breaker":{"state":"Tripped","category":"timeout","failures":5,"trips":1,"retryAt":"2026-01-02T03:04:15Z"}}"#
            ),
            "{text}"
        );
        assert_eq!(PolicyStatus::from_annotation(&text).unwrap(), tripped);

        let superseded = PolicyStatus::superseded("abc", "ml/tfjob-policy-gpu", at);
        assert!(
            superseded
                .to_annotation()
                .contains(r#""state":"Superseded""#)
        );

        // Unknown fields from a newer operator are ignored; a bad state is an error.
        let newer = r#"{"state":"Active","digest":"abc","shadowDiffs":3}"#;
        assert_eq!(
            PolicyStatus::from_annotation(newer).unwrap().state,
            PolicyState::Active
        );
        assert!(PolicyStatus::from_annotation(r#"{"state":"Sleeping"}"#).is_err());

        assert!(PolicyStatus::of(&cm).is_none());
        cm.metadata.annotations = Some(BTreeMap::from([(
            STATUS_ANNOTATION.to_owned(),
            active.to_annotation(),
        )]));
        assert_eq!(PolicyStatus::of(&cm).unwrap().unwrap(), active);
    }
}
