//! `tfjob-operator policy test`: one hook of a policy run in the sandbox on one pod, printed
//! as JSON; with `--suite`, every case of a test suite ([`crate::policy_suite`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{ActivationError, Hook, SandboxLimits};

use crate::policy_hooks::{
    HookInput, HookOutput, container, context, policy_source, read_yaml, run_hook, settings_value,
};
use crate::policy_suite::{Format, Overrides};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// `.wasm` file, `default` (the embedded default for the hook), `default:<name>`, or a CEL
    /// policy: a `.yaml` file holding its document or its ConfigMap; with `--suite`, replaces
    /// the suite's `policy`.
    #[arg(
        long,
        value_name = "P.wasm|P.cel.yaml",
        required_unless_present = "suite"
    )]
    pub policy: Option<String>,
    /// The hook to run.
    #[arg(long, value_parser = ["decorate", "resources", "classify"], required_unless_present = "suite", conflicts_with = "suite")]
    pub hook: Option<String>,
    /// The pod (YAML or JSON); with status for `classify`.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "suite",
        conflicts_with = "suite"
    )]
    pub input: Option<PathBuf>,
    /// Settings as inline JSON, or `@file` (JSON or YAML) [default: for a default policy, the
    /// settings the operator runs it with; else none].
    #[arg(long, value_name = "JSON|@FILE", conflicts_with = "suite")]
    pub settings: Option<String>,
    /// Job context (YAML or JSON: jobName, namespace, jobUid, jobLabels, jobAnnotations,
    /// replicaType, replicaIndex, replicaCount, attempt); missing fields take test defaults.
    #[arg(long, value_name = "FILE", conflicts_with = "suite")]
    pub context: Option<PathBuf>,
    /// The time the classification is made at (RFC 3339) [default: now].
    #[arg(long, value_name = "RFC3339", conflicts_with = "suite")]
    pub now: Option<String>,
    /// The container whose resources the `resources` hook overrides [default: the first].
    #[arg(long, value_name = "NAME", conflicts_with = "suite")]
    pub container: Option<String>,
    /// The policy's manifest (`policy.yaml`, as in its ConfigMap): its allowed paths,
    /// capabilities, limits and settings apply, checked against the ceiling below; with
    /// `--suite`, replaces the suite's `manifest`.
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Run every case of a test suite (YAML) instead of one hook; exit status 1 when a case
    /// fails.
    #[arg(long, value_name = "FILE")]
    pub suite: Option<PathBuf>,
    /// How to report a suite's results.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        value_name = "FORMAT",
        requires = "suite"
    )]
    pub output: Option<Format>,
    /// Keep compiled policies in DIR (a directory only this user may write, as `run
    /// --policy-cache-dir` takes it), so that the next test of the same module loads its code
    /// instead of compiling it again: seconds for a Python or JavaScript policy.
    #[arg(long, value_name = "DIR")]
    pub policy_cache_dir: Option<PathBuf>,
    /// The operator's ceiling to test under (as `run` takes it).
    #[command(flatten)]
    pub ceiling: tfjob_operator::policy_setup::CeilingArgs,
}

/// Runs `policy test`: exit status 0 with the hook's output, 2 with the error on stderr; with
/// `--suite`, the suite's exit status.
pub fn main(args: &TestArgs) -> ExitCode {
    if let Some(file) = &args.suite {
        let overrides = Overrides {
            policy: args.policy.as_deref(),
            manifest: args.manifest.as_deref(),
            ceiling: &args.ceiling,
            cache_dir: args.policy_cache_dir.as_deref(),
        };
        return crate::policy_suite::main(file, &overrides, args.output.unwrap_or(Format::Table));
    }
    match test(args) {
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

fn test(args: &TestArgs) -> anyhow::Result<Value> {
    let (Some(spec), Some(hook), Some(input_path)) = (&args.policy, &args.hook, &args.input) else {
        bail!("--policy, --hook and --input are required without --suite");
    };
    if args.output.is_some() {
        bail!("-o/--output formats the report of a --suite; a single test prints JSON");
    }
    let hook: Hook = hook.parse().map_err(|e: String| anyhow!(e))?;
    let mut source = policy_source(spec, hook, "--policy")?;
    if let Some(path) = &args.manifest {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--manifest: reading {}", path.display()))?;
        source = source.with_manifest(&text, &format!("--manifest {}", path.display()))?;
    }
    let limits = SandboxLimits {
        ceiling: args.ceiling.ceiling()?,
        ..tfjob_operator::policy_setup::operator_limits()
    };
    let engine = crate::policy_hooks::test_engine(limits, args.policy_cache_dir.as_deref())?;
    let settings = settings_value(args.settings.as_deref())?;
    let name = &source.name;
    let policy = source
        .activate(&engine, hook, settings.as_ref())
        .map_err(|e| match e {
            ActivationError::Compile(e) => anyhow!("--policy {spec}: {e}"),
            ActivationError::Settings(e) => anyhow!("--settings rejected by {name}: {e}"),
            ActivationError::Hooks { hook } => {
                anyhow!("link: --policy {spec} does not export {}", hook.interface())
            }
            other => anyhow!("manifest of {name}: {other}"),
        })?;
    let input = read_yaml(input_path)?;
    let pod: Pod = serde_path_to_error::deserialize(input).map_err(|e| {
        anyhow!(
            "{}: field {}: {}",
            input_path.display(),
            e.path(),
            e.inner()
        )
    })?;
    let ctx = job_context(&context(args.context.as_deref())?);
    let input = match hook {
        Hook::Decorate => HookInput::Decorate(&pod),
        Hook::Resources => {
            HookInput::Resources(container(&pod, args.container.as_deref()).map_err(|e| {
                match &args.container {
                    Some(_) => anyhow!("--container {e}"),
                    None => anyhow!("{e}"),
                }
            })?)
        }
        Hook::Classify => HookInput::Classify {
            pod: &pod,
            now: match &args.now {
                Some(t) => t
                    .parse::<jiff::Timestamp>()
                    .with_context(|| format!("--now {t:?}: not RFC 3339"))?,
                None => jiff::Timestamp::now(),
            },
        },
    };
    // No cluster is read from here: every read the policy makes is answered `unavailable`.
    let cluster = std::sync::Arc::default();
    let caller = tfjob_policy_engine::hook_call::Caller::new(&engine, &cluster);
    Ok(match run_hook(caller, &policy, &ctx, input)? {
        HookOutput::Verdict(v) => {
            let mut out = json!({"phase": v.phase, "reason": v.reason, "message": v.message});
            if let Some(kind) = v.kind.filter(|_| v.phase.is_failure()) {
                out["kind"] = json!(kind);
            }
            out
        }
        other => other.into_json(),
    })
}
