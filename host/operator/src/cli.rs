//! The command line of `tfjob-operator`: its subcommands, each with the arguments its own
//! module defines.

use clap::{Parser, Subcommand};

/// Runs Kubeflow TFJobs (kubeflow.org/v1) on Kubernetes.
#[derive(Debug, Parser)]
#[command(
    name = "tfjob-operator",
    version,
    after_help = "Examples:\n  tfjob-operator render -f dist-mnist.yaml\n  tfjob-operator render -f job.yaml -o json --cluster-domain cluster.local\n  tfjob-operator crd | kubectl apply --server-side -f -\n  tfjob-operator run --namespace ml --threads 4 --metrics-bind-address :8080\n  tfjob-operator policy test --policy default --hook classify --input pod.yaml"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the pods and services the operator would create for a TFJob, without a cluster.
    #[command(
        after_help = "Examples:\n  tfjob-operator render -f job.yaml\n  cat job.yaml | tfjob-operator render -f - -o json\n\nExit status: 0 on success, 2 when the input is not a valid TFJob (every problem is printed\nto stderr with its field path; nothing is printed on stdout)."
    )]
    Render(crate::render::RenderArgs),
    /// Print the TFJob CustomResourceDefinition as YAML.
    Crd,
    /// Run the controller against the cluster of the current kubeconfig or in-cluster config.
    #[command(
        after_help = "Examples:\n  tfjob-operator run\n  tfjob-operator run --namespace ml --controller-threads 8 --metrics-bind-address 127.0.0.1:9090\n  tfjob-operator run --gang-scheduler-name volcano --health-probe-bind-address :8081\n  tfjob-operator run --config /etc/tfjob/config.yaml"
    )]
    // Boxed, as `Up`: its flags make it far larger than the other subcommands.
    Run(Box<crate::run::RunArgs>),
    /// Start an embedded cluster (API server, CRD, default policies, operator) in this process.
    #[command(
        after_help = "Examples:\n  tfjob-operator up\n  tfjob-operator up --port 0 --state .tfjob-operator/state.db\n\nThen, in another shell: export KUBECONFIG=$PWD/.tfjob-operator/kubeconfig; kubectl get tfjobs"
    )]
    Up(Box<crate::up::UpArgs>),
    /// Test, inspect and package policies.
    #[command(subcommand)]
    Policy(crate::policy_cmd::PolicyCommand),
    /// Configuration files for `run --config`.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Compile a policy component read on stdin for the engine of `run` and `up` (the child
    /// they compile in).
    #[command(hide = true)]
    CompilePolicy(crate::compile_policy::CompilePolicyArgs),
}

/// `tfjob-operator config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a complete configuration file for `run --config`: every key with its help as a
    /// comment and its built-in default as the value.
    #[command(
        after_help = "Examples:\n  tfjob-operator config defaults > /etc/tfjob/config.yaml\n  tfjob-operator run --config /etc/tfjob/config.yaml"
    )]
    Defaults,
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::{Cli, Command};
    use crate::policy_cmd::PolicyCommand;
    use crate::shared::ClusterScope;

    fn scope_of(args: &[&str]) -> Result<ClusterScope, String> {
        let argv = ["tfjob-operator", "policy"].iter().chain(args);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Policy(PolicyCommand::List(args)) => Ok(args.scope),
            Command::Policy(PolicyCommand::Diff(args)) => Ok(args.scope),
            other => panic!("not list or diff: {other:?}"),
        }
    }

    #[test]
    fn list_and_diff_share_their_cluster_flags_each_with_its_own_default_namespace() {
        let list = scope_of(&["list"]).unwrap();
        assert_eq!(list.namespace, "tfjob-system");
        assert!(!list.all_namespaces && list.kubeconfig.is_none());
        let diff = scope_of(&["diff", "--policy", "new.wasm"]).unwrap();
        assert_eq!(diff.namespace, "default");

        let chosen = scope_of(&[
            "diff",
            "--policy",
            "new.wasm",
            "-n",
            "ml",
            "--kubeconfig",
            "k",
        ])
        .unwrap();
        assert_eq!(chosen.namespace, "ml");
        assert_eq!(
            chosen.kubeconfig.as_deref(),
            Some(std::path::Path::new("k"))
        );
        assert!(scope_of(&["list", "-A"]).unwrap().all_namespaces);

        for command in [&["list"][..], &["diff", "--policy", "new.wasm"]] {
            let both = [command, &["-n", "ml", "-A"]].concat();
            let error = scope_of(&both).unwrap_err();
            assert!(error.contains("cannot be used with"), "{error}");
        }
    }
}
