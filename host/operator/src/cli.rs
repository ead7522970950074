//! Command-line arguments of `tfjob-operator`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Runs Kubeflow TFJobs (kubeflow.org/v1) on Kubernetes.
#[derive(Debug, Parser)]
#[command(
    name = "tfjob-operator",
    version,
    after_help = "Examples:\n  tfjob-operator render -f dist-mnist.yaml\n  tfjob-operator render -f job.yaml -o json --cluster-domain cluster.local\n  tfjob-operator crd | kubectl apply --server-side -f -\n  tfjob-operator run --namespace ml --threads 4 --metrics-addr 0.0.0.0:8080\n  tfjob-operator policy test --policy default --hook classify --input pod.yaml"
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
    Render(RenderArgs),
    /// Print the TFJob CustomResourceDefinition as YAML.
    Crd,
    /// Run the controller against the cluster of the current kubeconfig or in-cluster config.
    #[command(
        after_help = "Examples:\n  tfjob-operator run\n  tfjob-operator run --namespace ml --threads 8 --metrics-addr 127.0.0.1:9090"
    )]
    Run(RunArgs),
    /// Start an embedded cluster (API server, CRD, default policies, operator) in this process.
    #[command(
        after_help = "Examples:\n  tfjob-operator up\n  tfjob-operator up --port 0 --state .tfjob-operator/state.json\n\nThen, in another shell: export KUBECONFIG=$PWD/.tfjob-operator/kubeconfig; kubectl get tfjobs"
    )]
    Up(crate::up::UpArgs),
    /// Test, inspect and package policies.
    #[command(subcommand)]
    Policy(crate::policy_cmd::PolicyCommand),
}

/// Output formats of `render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// TFJob manifest (YAML or JSON, several documents allowed); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Cluster domain for TF_CONFIG host names [default: $CUSTOM_CLUSTER_DOMAIN].
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN", value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: OutputFormat,
    #[command(flatten)]
    pub policies: crate::policy_setup::PolicyArgs,
    /// Print the pods as the operator builds them, before any policy.
    #[arg(long, conflicts_with_all = ["policy_dir", "policy_config"])]
    pub no_policies: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Watch only this namespace [default: all namespaces].
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Concurrent reconciles (never two for the same job).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Cluster domain for TF_CONFIG host names [default: $CUSTOM_CLUSTER_DOMAIN].
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN", value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, then in-cluster].
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Log output as JSON lines.
    #[arg(long)]
    pub log_json: bool,
    /// Changes of a job's replica counts alone are written at most once per this many
    /// milliseconds (conditions, times and restarts are written at once); 0 writes every change.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub status_batch_ms: u64,
    /// /healthz fails while a reconcile has been running longer than this many seconds, so a
    /// wedged operator is restarted by its liveness probe.
    #[arg(long, default_value_t = 300, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub healthz_stall_seconds: u64,
    #[command(flatten)]
    pub policies: crate::policy_setup::PolicyArgs,
    #[command(flatten)]
    pub sources: crate::policy_setup::PolicySourceArgs,
}

impl RunArgs {
    pub fn policy_namespaces(&self) -> Vec<String> {
        self.sources.namespaces()
    }
}
