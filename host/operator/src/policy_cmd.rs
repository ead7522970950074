//! `tfjob-operator policy`: its subcommands, each in a module of its own with its arguments
//! and its run function (`test` in [`crate::policy_test`] and [`crate::policy_suite`], `new` in
//! [`crate::policy_new`], `inspect` in [`crate::policy_inspect`], `pack` in
//! [`crate::policy_pack`], `diff` in [`crate::policy_diff`], `list` in [`crate::policy_list`], `push` and `pull` in
//! [`crate::policy_registry`]),
//! and how their results are printed.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Run one hook of a policy in the sandbox and print its result as JSON, or (`--suite`)
    /// every case of a test suite.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy test --policy default --hook classify --input failed-pod.yaml --now 2026-01-01T00:05:00Z\n  tfjob-operator policy test --policy gpu.wasm --hook decorate --input pod.yaml --settings @gpu-settings.json\n  tfjob-operator policy test --policy default:default-resources --hook resources --input pod.yaml --container tensorflow\n  tfjob-operator policy test --suite tests/suite.yaml --policy gpu.wasm -o junit > results.xml\n\nWith --suite: exit status 0 when every case passes, 1 when one fails (with a diff of\nexpected and actual), 2 when the suite cannot run."
    )]
    Test(crate::policy_test::TestArgs),
    /// Generate a ready-to-build policy crate: Cargo.toml, the contract's WIT, src/lib.rs with a
    /// settings type and the chosen hooks, a native unit test, a test suite and a README.
    New(crate::policy_new::NewArgs),
    /// Print a policy module's size, digest, hooks, imports and exports; with `--manifest`,
    /// also what the policy declares and would be granted under the ceiling.
    Inspect(crate::policy_inspect::InspectArgs),
    /// Print a policy as a ConfigMap for the operator (YAML), after checking that it loads.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy pack --wasm gpu.wasm --name gpu --hooks decorate --settings gpu.yaml --gzip | kubectl apply -f -\n  tfjob-operator policy pack --wasm default:default-classify --name default-classify --hooks classify --gzip\n  tfjob-operator policy pack --wasm gpu.wasm --name gpu --hooks decorate --sign-key signing.pem\n  tfjob-operator policy pack --wasm gpu.wasm --name gpu --hooks decorate --module-ref registry.example.com/platform/gpu@sha256:0f3c... --pull-secret registry-credentials\n\nThe module's sha256 is pinned in the manifest. Exit status 2, with the reason, when the\nmodule does not load, does not export the hooks, refuses the settings, or the ConfigMap\nwould exceed 1 MiB."
    )]
    Pack(crate::policy_pack::PackArgs),
    /// What a candidate policy would change on a live cluster, read-only: for every TFJob it
    /// selects, the pods the operator would create next and the verdicts on the existing pods,
    /// with the current policies and with the candidate in place.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy diff --policy team-label.wasm --manifest policy.yaml -A\n  tfjob-operator policy diff --configmap tfjob-policy-gpu.yaml -n ml -o json\n  tfjob-operator policy diff --policy v2.wasm --configmap tfjob-policy-gpu.yaml -n ml\n\nNothing is written to the cluster. Exit status 2, with the reason, when the candidate\nwould be refused or the cluster cannot be read."
    )]
    Diff(crate::policy_diff::DiffArgs),
    /// List the policy ConfigMaps of a cluster and the status the operator gave them.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy list\n  tfjob-operator policy list -A --kubeconfig ~/.kube/config"
    )]
    List(crate::policy_list::ListArgs),
    /// Push a policy module to an OCI registry as a Wasm artifact, optionally signed in
    /// cosign's layout; prints the reference pinned to its digest.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy push gpu.wasm registry.example.com/platform/gpu:v1 --sign-key signing.pem\n  tfjob-operator policy push gpu.wasm localhost:5000/gpu:v1 --insecure\n\nThe printed REF@sha256:... is what a policy ConfigMap names (policy pack --module-ref)."
    )]
    Push(crate::policy_registry::PushArgs),
    /// Pull a policy module from an OCI registry, verified (its digest, its layout and, with
    /// --trusted-key, its cosign signature) as the operator verifies it.
    #[command(
        after_help = "Examples:\n  tfjob-operator policy pull registry.example.com/platform/gpu:v1 -o gpu.wasm --trusted-key signing.pub\n  tfjob-operator policy pull localhost:5000/gpu@sha256:0f3c... -o gpu.wasm --insecure"
    )]
    Pull(crate::policy_registry::PullArgs),
}

/// What a subcommand prints on success.
enum Printed {
    /// Pretty JSON.
    Json(Value),
    /// Text as it is.
    Text(String),
}

pub fn main(cmd: PolicyCommand) -> ExitCode {
    let result = match cmd {
        PolicyCommand::Test(args) => return crate::policy_test::main(&args),
        PolicyCommand::New(args) => return crate::policy_new::main(&args),
        PolicyCommand::Inspect(args) => crate::policy_inspect::main(&args).map(Printed::Json),
        PolicyCommand::Pack(args) => crate::policy_pack::main(&args).map(Printed::Text),
        PolicyCommand::List(args) => crate::policy_list::main(&args).map(Printed::Text),
        PolicyCommand::Diff(args) => crate::policy_diff::main(&args).map(Printed::Text),
        PolicyCommand::Push(args) => crate::policy_registry::push(&args).map(Printed::Text),
        PolicyCommand::Pull(args) => crate::policy_registry::pull(&args).map(Printed::Text),
    };
    match result {
        Ok(Printed::Json(out)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("JSON values serialise")
            );
            ExitCode::SUCCESS
        }
        Ok(Printed::Text(out)) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
