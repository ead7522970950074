//! `tfjob-operator compile-policy` (hidden): the child the operator compiles and pre-initialises
//! policies in, so that the compiler's memory (hundreds of MiB for a language runtime) and a
//! pre-initialisation's (the policy's instance, its snapshot) are given back when the child
//! exits instead of staying with the operator's allocator. See
//! `tfjob_policy_engine::engine::Compiler`.
//!
//! - Compiling: reads a component on standard input, instruments it for pre-initialisation
//!   (`--instrument`), compiles it with the settings the operator's engine runs with, and
//!   writes the compiled code on standard output.
//! - Pre-initialising (`--prepare DIGEST`): reads a settings document on standard input,
//!   pre-initialises the module the operator keeps in its cache directory for it, files the
//!   copy there, and writes a one-line JSON reply (`PrepareReply`) on standard output.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::config::CallLimits;
use tfjob_policy_engine::engine::{CompileSettings, Instrument, PrepareReply, compile_standalone};
use tfjob_policy_engine::{PolicyEngine, SandboxLimits};

#[derive(Debug, Args)]
pub struct CompilePolicyArgs {
    /// The per-call memory cap of the engine the code is for, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub memory: usize,
    /// The engine uses the pooling allocator.
    #[arg(
        long,
        conflicts_with = "on_demand",
        required_unless_present = "on_demand"
    )]
    pub pooling: bool,
    /// The engine allocates on demand.
    #[arg(long)]
    pub on_demand: bool,
    /// The compiled-function cache to reuse functions from and add to (an SQLite file in the
    /// compiled-code cache's directory).
    #[arg(long, value_name = "PATH")]
    pub functions: Option<PathBuf>,
    /// Instrument the component for pre-initialisation before compiling it (compiled as it
    /// is where that fails).
    #[arg(long, conflicts_with = "prepare")]
    pub instrument: bool,
    /// Pre-initialise the module with this digest, kept in `--cache-dir`, for the settings
    /// document on standard input.
    #[arg(long, value_name = "DIGEST", requires_all = ["cache_dir", "name", "call_memory", "deadline_ms", "max_module"])]
    pub prepare: Option<String>,
    /// The operator's compiled-code cache directory (its files, not their parent).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The policy's name, for its log lines.
    #[arg(long)]
    pub name: Option<String>,
    /// The memory the validation may use, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub call_memory: Option<usize>,
    /// The time the validation may take.
    #[arg(long, value_name = "MS")]
    pub deadline_ms: Option<u64>,
    /// The largest pre-initialised component accepted, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_module: Option<usize>,
}

/// The largest component read: the operator's own limit is at most 1 GiB.
const MAX_INPUT: u64 = 1 << 30;

/// The child's niceness: the operator's own threads (reconciles, API calls, policy calls on
/// the pod path) come first when they want the CPU; the child has it otherwise.
const NICENESS: i32 = 10;

pub fn main(args: &CompilePolicyArgs) -> anyhow::Result<()> {
    // Where this is refused (a policy forbidding it), the child runs at the operator's
    // priority, as it did before.
    if let Err(error) = rustix::process::setpriority_process(None, NICENESS) {
        eprintln!("compile-policy: keeping the operator's priority: {error}");
    }
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut input)
        .context("reading standard input")?;
    if input.len() as u64 > MAX_INPUT {
        anyhow::bail!("the input is larger than {MAX_INPUT} bytes");
    }
    let settings = CompileSettings {
        memory: args.memory,
        pooling: args.pooling,
    };
    let out = match &args.prepare {
        Some(digest) => prepare(args, settings, digest, &input)?,
        None => compile_standalone(
            settings,
            args.functions.as_deref(),
            &input,
            if args.instrument {
                Instrument::Yes
            } else {
                Instrument::No
            },
        )
        .map_err(|e| anyhow::anyhow!("{e:#}"))?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out).context("writing the result")?;
    stdout.flush().context("writing the result")
}

fn prepare(
    args: &CompilePolicyArgs,
    settings: CompileSettings,
    digest: &str,
    document: &[u8],
) -> anyhow::Result<Vec<u8>> {
    // clap's `requires_all` holds these present.
    let (Some(dir), Some(name), Some(call_memory), Some(deadline_ms), Some(max_module)) = (
        &args.cache_dir,
        &args.name,
        args.call_memory,
        args.deadline_ms,
        args.max_module,
    ) else {
        anyhow::bail!(
            "--prepare needs --cache-dir, --name, --call-memory, --deadline-ms and --max-module"
        );
    };
    let document = std::str::from_utf8(document).context("the settings document is not UTF-8")?;
    let limits = SandboxLimits {
        max_module,
        ..SandboxLimits::default()
    };
    let engine = PolicyEngine::for_compiler_child(limits, settings)?
        .with_compiled_cache(CompiledCache::in_dir(dir)?);
    let result = engine.prepare_stored(
        digest,
        name,
        document,
        CallLimits {
            deadline: Duration::from_millis(deadline_ms),
            memory: call_memory,
            tenant: None,
        },
    );
    Ok(serde_json::to_vec(&PrepareReply::of(&result))?)
}
