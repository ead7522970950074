//! `tfjob-operator policy inspect`: a policy module's size, digest, hooks, imports and exports,
//! and with `--manifest` what the policy declares and would be granted under the operator's
//! ceiling; without a cluster.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use serde_json::{Value, json};
use tfjob_policy_engine::{PolicyEngine, PolicyManifest};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The `.wasm` component.
    pub policy: PathBuf,
    /// The policy's manifest (`policy.yaml`).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// The operator's ceiling to grant under (as `run` takes it).
    #[command(flatten)]
    pub ceiling: tfjob_operator::policy_setup::CeilingArgs,
}

pub fn main(args: &InspectArgs) -> anyhow::Result<Value> {
    inspect(&args.policy, args.manifest.as_deref(), &args.ceiling)
}

fn engine() -> anyhow::Result<PolicyEngine> {
    Ok(PolicyEngine::new(
        tfjob_operator::policy_setup::operator_limits(),
    )?)
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
            "{}: exports none of the hooks of tfjob:policy@0.3.0 (nor of 0.2.0 or 0.1.0)",
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
        // As a cluster-wide policy: `inspect` knows no namespace to confine it to.
        out["reads"] = json!({
            "declared": m.reads,
            "granted": match m.grant_reads(&ceiling.reads()?) {
                Ok(grants) => json!(grants.iter().map(ToString::to_string).collect::<Vec<_>>()),
                Err(e) => json!({"refused": e.to_string()}),
            },
        });
    }
    Ok(out)
}
