//! `tfjob-operator policy test --suite FILE`: a policy's behaviour written down as cases, run in
//! the real sandbox, for a platform team's CI.
//!
//! A single `policy test` answers "what does my policy do with this pod?"; a suite says what it
//! must do, case by case, and fails the build when it stops doing it. Each case names a hook,
//! settings, an input (pod, job context, `now`, container) and an expectation: the whole result,
//! a subset of its fields, values at JSON paths, a verdict's phase/reason/kind, or a failure of
//! the operator's categories (`guard-violation`, `timeout`, `invalid-settings`, ...). Every case
//! activates the policy with the operator's own activation and runs the hook behind the
//! operator's checks ([`crate::policy_hooks::run_hook`]), with the operator's limits.
//!
//! Its parts are modules of their own: [`model`] (the suite as loaded), [`load`] (the YAML, the
//! files it names, every field checked before anything runs, so a typo fails the suite instead
//! of passing a case), [`json_path`] and [`compare`] (pure), [`run`] (the sandbox) and
//! [`report`] (a table, JSON or JUnit XML).
//!
//! A suite is input that may come from anyone who can open a pull request, so loading is
//! defensive: files are named relative to the suite's directory and may not lead out of it (no
//! absolute paths, no `..`, no symbolic links pointing elsewhere), only regular files are read,
//! and the suite, the files it names and the number of cases are capped. Text from the suite or
//! the policy is printed with control characters escaped, so a case name cannot rewrite the
//! terminal, and XML gets only characters XML allows.

use std::path::Path;
use std::process::ExitCode;

/// The largest suite file read.
pub const MAX_SUITE_BYTES: u64 = 16 << 20;
/// The largest file a suite names (pod, context, settings, manifest).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The most cases one suite may hold.
pub const MAX_CASES: usize = 10_000;
/// The deepest nesting of flow collections (`[`, `{`) read. The YAML parser takes time
/// quadratic in this depth (100,000 levels, 200 KB of brackets, take minutes) although
/// deserializing stops at 128 levels anyway.
pub const MAX_FLOW_DEPTH: usize = 256;

/// How `policy test --suite` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per case, then every failure with its differences.
    Table,
    /// One JSON document.
    Json,
    /// JUnit XML, as CI systems read test results.
    Junit,
}

mod compare;
mod json_path;
mod load;
mod model;
mod report;
mod run;
#[cfg(test)]
mod tests;

pub(crate) use load::load;
pub(crate) use report::{junit, table, to_json};
pub use run::Overrides;
pub(crate) use run::run;

/// `policy test --suite`: exit status 0 when every case passes, 1 when one fails, 2 when the
/// suite cannot run (the error on stderr).
pub fn main(file: &Path, args: &Overrides<'_>, output: Format) -> ExitCode {
    let report = match load(file)
        .map_err(anyhow::Error::from)
        .and_then(|s| run(&s, args))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match output {
        Format::Table => print!("{}", table(&report)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&report)).expect("JSON values serialise")
        ),
        Format::Junit => print!("{}", junit(&report)),
    }
    if report.failed() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
