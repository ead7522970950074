//! `tfjob-operator`: the command-line entry point. Parses arguments and hands off to the
//! subcommand modules; errors are reported here, at the binary's edge.

mod cli;
mod demo;
mod policy_cmd;
mod render;
mod run;
mod up;

use std::process::ExitCode;

use clap::Parser;
// The shared modules live in the library; importing them here keeps `crate::...` paths valid.
use tfjob_operator::{embedded, policy_setup};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Crd => {
            print!("{}", tfjob_api::crd::tfjob_crd_yaml());
            ExitCode::SUCCESS
        }
        cli::Command::Render(args) => render::main(&args),
        cli::Command::Policy(cmd) => policy_cmd::main(cmd),
        cli::Command::Up(args) => match up::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tfjob-operator: {e:#}");
                ExitCode::FAILURE
            }
        },
        cli::Command::Run(args) => match run::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tfjob-operator: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
