//! `tfjob-operator policy test` and `policy inspect`: run one hook of a policy in the sandbox,
//! or describe a policy module, without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::{Value, json};
use tfjob_planner::PodContext;
use tfjob_policy_engine::guard::{self, AllowedPaths};
use tfjob_policy_engine::policies::{job_context, verdict_from};
use tfjob_policy_engine::{
    CompiledPolicy, Hook, PolicyEngine, PolicyManifest, SandboxLimits, defaults,
};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run one hook of a policy in the sandbox and print its result as JSON.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy test --policy default --hook classify --input failed-pod.yaml --now 2026-01-01T00:05:00Z\n  tfjob-operator policy test --policy gpu.wasm --hook decorate --input pod.yaml --settings @gpu-settings.json\n  tfjob-operator policy test --policy default:default-resources --hook resources --input pod.yaml --container tensorflow"
    )]
    Test(TestArgs),
    /// Print a policy module's size, digest, hooks, imports and exports.
    Inspect {
        /// The `.wasm` component.
        policy: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// `.wasm` file, `default` (the embedded default for the hook) or `default:<name>`.
    #[arg(long, value_name = "P.wasm")]
    pub policy: String,
    /// The hook to run.
    #[arg(long, value_parser = ["decorate", "resources", "classify"])]
    pub hook: String,
    /// The pod (YAML or JSON); with status for `classify`.
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Settings as inline JSON, or `@file` (JSON or YAML) [default: for a default policy, the
    /// settings the operator runs it with; else none].
    #[arg(long, value_name = "JSON|@FILE")]
    pub settings: Option<String>,
    /// Job context (YAML or JSON: jobName, namespace, jobUid, jobLabels, jobAnnotations,
    /// replicaType, replicaIndex, replicaCount, attempt); missing fields take test defaults.
    #[arg(long, value_name = "FILE")]
    pub context: Option<PathBuf>,
    /// The time the classification is made at (RFC 3339) [default: now].
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// The container whose resources the `resources` hook overrides [default: the first].
    #[arg(long, value_name = "NAME")]
    pub container: Option<String>,
}

pub fn main(cmd: PolicyCommand) -> ExitCode {
    let result = match cmd {
        PolicyCommand::Test(args) => test(&args),
        PolicyCommand::Inspect { policy } => inspect(&policy),
    };
    match result {
        Ok(out) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("JSON values serialise")
            );
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

fn read_yaml(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not valid YAML or JSON", path.display()))
}

/// The policy bytes, the name it runs under and, for a default policy, the manifest the
/// operator runs it with (its settings and allowed paths).
fn policy_bytes(
    spec: &str,
    hook: Hook,
) -> anyhow::Result<(Vec<u8>, String, Option<PolicyManifest>)> {
    if spec == "default" {
        let d = defaults::for_hook(hook);
        return Ok((
            d.wasm.to_vec(),
            d.name.to_owned(),
            Some(defaults::manifest(d)),
        ));
    }
    if let Some(name) = spec.strip_prefix("default:") {
        let d = defaults::find(name).ok_or_else(|| {
            let names: Vec<&str> = defaults::DEFAULTS.iter().map(|d| d.name).collect();
            anyhow!(
                "--policy: no default policy {name:?} (defaults: {})",
                names.join(", ")
            )
        })?;
        return Ok((
            d.wasm.to_vec(),
            d.name.to_owned(),
            Some(defaults::manifest(d)),
        ));
    }
    let path = Path::new(spec);
    let bytes =
        std::fs::read(path).with_context(|| format!("--policy: reading {}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("policy")
        .to_owned();
    Ok((bytes, name, None))
}

fn settings_text(arg: Option<&str>) -> anyhow::Result<String> {
    let Some(arg) = arg else {
        return Ok("{}".into());
    };
    let value: Value = match arg.strip_prefix('@') {
        Some(file) => read_yaml(Path::new(file)).context("--settings")?,
        None => serde_json::from_str(arg).context("--settings: not valid JSON")?,
    };
    Ok(value.to_string())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct ContextFile {
    job_name: String,
    namespace: String,
    job_uid: String,
    job_labels: BTreeMap<String, String>,
    job_annotations: BTreeMap<String, String>,
    replica_type: String,
    replica_index: i32,
    replica_count: i32,
    attempt: i32,
}

impl Default for ContextFile {
    fn default() -> Self {
        ContextFile {
            job_name: "test-job".into(),
            namespace: "default".into(),
            job_uid: "00000000-0000-0000-0000-000000000000".into(),
            job_labels: BTreeMap::new(),
            job_annotations: BTreeMap::new(),
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }
}

fn context(path: Option<&Path>) -> anyhow::Result<PodContext> {
    let c: ContextFile = match path {
        Some(p) => serde_path_to_error::deserialize(read_yaml(p)?)
            .map_err(|e| anyhow!("{}: field {}: {}", p.display(), e.path(), e.inner()))?,
        None => ContextFile::default(),
    };
    Ok(PodContext {
        job_name: c.job_name,
        namespace: c.namespace,
        job_uid: c.job_uid,
        job_labels: c.job_labels,
        job_annotations: c.job_annotations,
        replica_type: c.replica_type,
        replica_index: c.replica_index,
        replica_count: c.replica_count,
        attempt: c.attempt,
    })
}

fn test(args: &TestArgs) -> anyhow::Result<Value> {
    let hook: Hook = args.hook.parse().map_err(|e: String| anyhow!(e))?;
    let (bytes, name, manifest) = policy_bytes(&args.policy, hook)?;
    let engine = engine()?;
    let policy = engine
        .compile(&bytes)
        .map_err(|e| anyhow!("--policy {}: {e}", args.policy))?;
    let settings = match (&args.settings, &manifest) {
        (None, Some(m)) => m.settings.to_string(),
        (arg, _) => settings_text(arg.as_deref())?,
    };
    let allowed = AllowedPaths::with_extra(
        manifest
            .iter()
            .flat_map(|m| m.allowed_paths.iter().map(String::as_str)),
    )
    .map_err(|e| anyhow!("allowed paths of {name}: {e}"))?;
    engine
        .validate_settings(&policy, &name, &settings)
        .map_err(|e| anyhow!("--settings rejected by {name}: {e}"))?;
    let input = read_yaml(&args.input)?;
    let pod: Pod = serde_path_to_error::deserialize(input.clone()).map_err(|e| {
        anyhow!(
            "{}: field {}: {}",
            args.input.display(),
            e.path(),
            e.inner()
        )
    })?;
    let ctx = job_context(&context(args.context.as_deref())?);
    match hook {
        Hook::Decorate => decorate(&engine, &policy, &name, &ctx, &settings, &allowed, &pod),
        Hook::Resources => resources(
            &engine,
            &policy,
            &name,
            &ctx,
            &settings,
            &pod,
            args.container.as_deref(),
        ),
        Hook::Classify => {
            let now = match &args.now {
                Some(t) => t
                    .parse::<jiff::Timestamp>()
                    .with_context(|| format!("--now {t:?}: not RFC 3339"))?,
                None => jiff::Timestamp::now(),
            };
            let pod_json = serde_json::to_string(&pod)?;
            let v =
                engine.classify(&policy, &name, &ctx, &settings, &pod_json, &now.to_string())?;
            let v = verdict_from(v, &name)?;
            let mut out = json!({"phase": v.phase, "reason": v.reason, "message": v.message});
            if let Some(kind) = v.kind.filter(|_| v.phase.is_failure()) {
                out["kind"] = json!(kind);
            }
            Ok(out)
        }
    }
}

fn decorate(
    engine: &PolicyEngine,
    policy: &CompiledPolicy,
    name: &str,
    ctx: &tfjob_policy_engine::bindings::JobContext,
    settings: &str,
    allowed: &AllowedPaths,
    pod: &Pod,
) -> anyhow::Result<Value> {
    let before = serde_json::to_value(pod)?;
    let out = engine.decorate(policy, name, ctx, settings, &before.to_string())?;
    let after: Value = serde_json::from_str(&out).context("the decorated pod is not JSON")?;
    guard::check(&before, &after, allowed)
        .map_err(|path| anyhow!("guard-violation: policy {name} may not change {path}"))?;
    Ok(after)
}

fn resources(
    engine: &PolicyEngine,
    policy: &CompiledPolicy,
    name: &str,
    ctx: &tfjob_policy_engine::bindings::JobContext,
    settings: &str,
    pod: &Pod,
    container: Option<&str>,
) -> anyhow::Result<Value> {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let c = match container {
        Some(wanted) => containers
            .iter()
            .find(|c| c.name == wanted)
            .ok_or_else(|| anyhow!("--container {wanted:?}: no such container in the pod"))?,
        None => containers
            .first()
            .ok_or_else(|| anyhow!("the pod has no containers"))?,
    };
    let requirements = serde_json::to_string(&c.resources.clone().unwrap_or_default())?;
    let out = engine.override_resources(policy, name, ctx, settings, &c.name, &requirements)?;
    serde_json::from_str(&out).context("the policy's resources are not JSON")
}

fn inspect(path: &Path) -> anyhow::Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let engine = engine()?;
    let policy = engine
        .compile(&bytes)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if policy.hooks().is_empty() {
        bail!(
            "{}: exports none of the hooks of tfjob:policy@0.1.0",
            path.display()
        );
    }
    Ok(json!({
        "file": path.display().to_string(),
        "size": policy.size,
        "sha256": policy.digest,
        "hooks": policy.hooks(),
        "validatesSettings": policy.validates_settings(),
        "imports": policy.imports,
        "exports": policy.exports,
    }))
}
