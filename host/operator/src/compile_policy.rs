//! `tfjob-operator compile-policy` (hidden): the child the operator compiles policies in. It
//! reads a component on standard input, compiles it with the settings the operator's engine
//! runs with, and writes the compiled code on standard output, so that the compiler's memory
//! (hundreds of MiB for a language runtime) is given back when the child exits instead of
//! staying with the operator's allocator. See `tfjob_policy_engine::engine::Compiler`.

use std::io::{Read as _, Write as _};

use anyhow::Context as _;
use clap::Args;
use tfjob_policy_engine::engine::{CompileSettings, compile_standalone};

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
}

/// The largest component read: the operator's own limit is at most 1 GiB.
const MAX_INPUT: u64 = 1 << 30;

pub fn main(args: &CompilePolicyArgs) -> anyhow::Result<()> {
    let mut binary = Vec::new();
    std::io::stdin()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut binary)
        .context("reading the component")?;
    if binary.len() as u64 > MAX_INPUT {
        anyhow::bail!("the component is larger than {MAX_INPUT} bytes");
    }
    let settings = CompileSettings {
        memory: args.memory,
        pooling: args.pooling,
    };
    let code = compile_standalone(settings, &binary).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&code).context("writing the compiled code")?;
    out.flush().context("writing the compiled code")
}
