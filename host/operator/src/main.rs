//! `tfjob-operator`: the command-line entry point. Parses arguments and hands off to the
//! subcommand modules; errors are reported here, at the binary's edge.

mod cli;
mod compile_policy;
mod config_file;
mod demo;
#[cfg(test)]
mod doc_commands;
mod policy_cmd;
mod policy_diff;
mod policy_hooks;
mod policy_inspect;
mod policy_list;
mod policy_new;
mod policy_pack;
mod policy_registry;
mod policy_suite;
mod policy_test;
mod render;
mod run;
mod sdk_bundle;
mod shared;
mod up;

use std::process::ExitCode;

use clap::CommandFactory as _;

fn main() -> ExitCode {
    let cli = match config_file::parse::<cli::Cli>(std::env::args_os().collect(), "run") {
        Ok(cli) => cli,
        Err(config_file::ParseError::Clap(e)) => e.exit(),
        Err(config_file::ParseError::Config(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        cli::Command::Config(cli::ConfigCommand::Defaults) => {
            print!(
                "{}",
                config_file::run_defaults_yaml(cli::Cli::command(), "run")
            );
            ExitCode::SUCCESS
        }
        cli::Command::Crd => {
            print!("{}", tfjob_api::crd::tfjob_crd_yaml());
            ExitCode::SUCCESS
        }
        cli::Command::Render(args) => render::main(&args),
        cli::Command::CompilePolicy(args) => match compile_policy::main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tfjob-operator compile-policy: {e:#}");
                ExitCode::FAILURE
            }
        },
        cli::Command::Policy(cmd) => policy_cmd::main(cmd),
        cli::Command::Up(args) => match up::main(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tfjob-operator: {e:#}");
                ExitCode::FAILURE
            }
        },
        cli::Command::Run(args) => match run::main(*args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tfjob-operator: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
