//! `tfjob-operator policy push` and `policy pull`: a policy module to and from an OCI registry,
//! as a Wasm artifact, signed in cosign's layout with `--sign-key` and verified with
//! `--trusted-key`. Both use the operator's own registry client and checks, so a module that
//! `pull --trusted-key` accepts is one the operator accepts from the same registry.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use clap::Args;
use tfjob_operator::policy_setup::{read_signing_key, read_trusted_keys};
use tfjob_policy_oci::{Credentials, Limits, ModuleRef, RegistryClient};

/// How to reach the registry, shared by push and pull.
#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to the registry (a local one, or `up`'s), instead of HTTPS.
    #[arg(long)]
    pub insecure: bool,
    /// A Docker config with the registry's credentials (`auths`, as `docker login` or
    /// `kubectl create secret docker-registry` write it) [default: $DOCKER_CONFIG/config.json
    /// or ~/.docker/config.json when present; else anonymous].
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The module (`.wasm` component) to push.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Where: `HOST[:PORT]/REPO:TAG` (`oci://` optional).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Sign it with this private key (PEM, ECDSA P-256 as cosign writes it unencrypted, or
    /// Ed25519): a cosign signature under the tag `sha256-<digest>.sig`.
    #[arg(long, value_name = "KEY.pem")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// `HOST[:PORT]/REPO:TAG` or `HOST[:PORT]/REPO@sha256:...` (`oci://` optional).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Where to write the module.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Accept the module only with a cosign signature by this public key (PEM); repeatable.
    #[arg(long = "trusted-key", value_name = "KEY.pem")]
    pub trusted_keys: Vec<PathBuf>,
    /// Largest module accepted, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = tfjob_policy_oci::client::MAX_MODULE_BYTES >> 20)]
    pub max_module_mib: u64,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Pushes; prints `REF@sha256:...`.
pub fn push(args: &PushArgs) -> anyhow::Result<String> {
    let reference = ModuleRef::parse(&args.reference)?;
    if reference.tag.is_none() || reference.digest.is_some() {
        return Err(anyhow!(
            "{}: push to a tag (HOST/REPO:TAG); the digest is the registry's answer",
            args.reference
        ));
    }
    let module =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    if !module.starts_with(b"\0asm") {
        return Err(anyhow!(
            "{}: not a Wasm binary (policy push takes the built component)",
            args.file.display()
        ));
    }
    let signer = args
        .sign_key
        .as_deref()
        .map(|path| read_signing_key("--sign-key", path))
        .transpose()?;
    let creds = credentials(&args.registry)?;
    let client = client(&args.registry, &reference, Limits::default())?;
    let pushed = runtime()?.block_on(tfjob_policy_oci::push(
        &client,
        &reference,
        &creds,
        &module,
        signer.as_ref(),
    ))?;
    Ok(format!("{}\n", pushed.reference))
}

/// Pulls and verifies; prints the pinned reference.
pub fn pull(args: &PullArgs) -> anyhow::Result<String> {
    let reference = ModuleRef::parse(&args.reference)?;
    let keys = read_trusted_keys("--trusted-key", &args.trusted_keys)?;
    let limits = Limits {
        max_module_bytes: args
            .max_module_mib
            .checked_mul(1 << 20)
            .ok_or_else(|| anyhow!("--max-module-mib {} is too large", args.max_module_mib))?,
        ..Limits::default()
    };
    let creds = credentials(&args.registry)?;
    let client = client(&args.registry, &reference, limits)?;
    let pulled = runtime()?.block_on(tfjob_policy_oci::pull(&client, &reference, &creds, &keys))?;
    write_atomically(&args.output, &pulled.module)?;
    let signed = match &pulled.signed_by {
        Some(key) => format!(" (signed by key {key})"),
        None => String::new(),
    };
    Ok(format!("{}{signed}\n", pulled.pinned))
}

fn client(
    args: &RegistryArgs,
    reference: &ModuleRef,
    limits: Limits,
) -> anyhow::Result<RegistryClient> {
    let insecure = args.insecure.then(|| reference.registry.clone());
    Ok(RegistryClient::new(limits, insecure)?)
}

fn credentials(args: &RegistryArgs) -> anyhow::Result<Credentials> {
    let path = match &args.auth_file {
        Some(path) => path.clone(),
        None => {
            let dir = std::env::var_os("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")));
            match dir.map(|d| d.join("config.json")).filter(|p| p.exists()) {
                Some(path) => path,
                None => return Ok(Credentials::none()),
            }
        }
    };
    let bytes =
        std::fs::read(&path).with_context(|| format!("--auth-file: reading {}", path.display()))?;
    Ok(Credentials::from_docker_config(
        &path.display().to_string(),
        &bytes,
    )?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Writes `bytes` to `path` through a temporary file beside it, so a failed pull leaves no
/// half-written module.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("-o {}: cannot write beside it", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("-o {}", path.display()))?;
    file.persist(path)
        .map_err(|e| anyhow!("-o {}: {}", path.display(), e.error))?;
    Ok(())
}
