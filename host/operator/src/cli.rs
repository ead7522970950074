//! Command-line arguments of `tfjob-operator`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    Render(RenderArgs),
    /// Print the TFJob CustomResourceDefinition as YAML.
    Crd,
    /// Run the controller against the cluster of the current kubeconfig or in-cluster config.
    #[command(
        after_help = "Examples:\n  tfjob-operator run\n  tfjob-operator run --namespace ml --controller-threads 8 --metrics-bind-address 127.0.0.1:9090\n  tfjob-operator run --gang-scheduler-name volcano --health-probe-bind-address :8081\n  tfjob-operator run --config /etc/tfjob/config.yaml"
    )]
    // Boxed: its flags make it far larger than the other subcommands.
    Run(Box<RunArgs>),
    /// Start an embedded cluster (API server, CRD, default policies, operator) in this process.
    #[command(
        after_help = "Examples:\n  tfjob-operator up\n  tfjob-operator up --port 0 --state .tfjob-operator/state.json\n\nThen, in another shell: export KUBECONFIG=$PWD/.tfjob-operator/kubeconfig; kubectl get tfjobs"
    )]
    Up(crate::up::UpArgs),
    /// Test, inspect and package policies.
    #[command(subcommand)]
    Policy(crate::policy_cmd::PolicyCommand),
    /// Configuration files for `run --config`.
    #[command(subcommand)]
    Config(crate::config_file::ConfigCommand),
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
    /// YAML file setting any of these flags: keys are their long names, values as on the
    /// command line (see `tfjob-operator config defaults`). A flag on the command line, or its
    /// environment variable, wins over the file.
    #[arg(long = crate::config_file::CONFIG_ID, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Watch only this namespace [default: $KUBEFLOW_NAMESPACE, else all namespaces].
    #[arg(long, env = "KUBEFLOW_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// Concurrent reconciles (never two for the same job).
    #[arg(long, visible_alias = "controller-threads", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Concurrent reconciles of one namespace's jobs, so that a namespace with many jobs or
    /// slow reconciles cannot hold every thread; waiting namespaces are served round robin
    /// [default: three in four of the threads, rounded up].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub max_reconciles_per_namespace: Option<u16>,
    /// Address of the /metrics endpoint (which also answers /healthz and /readyz): HOST:PORT,
    /// :PORT for every interface, or 0 for none.
    #[arg(long = "metrics-bind-address", visible_alias = "metrics-addr", default_value = "0.0.0.0:8080", value_name = "ADDR", value_parser = bind_address)]
    pub metrics_addr: BindAddress,
    /// Address of the /healthz and /readyz probes: HOST:PORT, :PORT, or 0 for none.
    #[arg(long, default_value = ":8081", value_name = "ADDR", value_parser = bind_address)]
    pub health_probe_bind_address: BindAddress,
    /// Gang-schedule jobs with this scheduler: `volcano` (Volcano PodGroups), any other name
    /// for scheduler-plugins' coscheduling (scheduling.x-k8s.io PodGroups) [default: none].
    #[arg(long, value_name = "NAME")]
    pub gang_scheduler_name: Option<String>,
    /// Requests per second to the API server, sustained (client-side token bucket).
    #[arg(long, default_value_t = 20, value_name = "QPS", value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_qps: u32,
    /// Requests to the API server at once after a quiet period.
    #[arg(long, default_value_t = 30, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_burst: u32,
    /// Job kinds to run. Accepted for compatibility with training-operator's Deployment
    /// arguments; this operator runs TFJobs only, so `tfjob` is the one value.
    #[arg(long, value_name = "KIND", value_parser = tfjob_scheme)]
    pub enable_scheme: Vec<String>,
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
    pub leader: LeaderElectionArgs,
    #[command(flatten)]
    pub policies: crate::policy_setup::PolicyArgs,
    #[command(flatten)]
    pub sources: crate::policy_setup::PolicySourceArgs,
}

/// Leader election, with controller-runtime's flag names and defaults.
#[derive(Debug, Args)]
pub struct LeaderElectionArgs {
    /// Run as one of several replicas: only the holder of a coordination.k8s.io Lease
    /// reconciles; the others stand by with their caches filled and policies compiled.
    #[arg(long)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "tfjob-operator", value_name = "NAME")]
    pub leader_election_id: String,
    /// Namespace of the Lease [default: $POD_NAMESPACE, else tfjob-system].
    #[arg(long, value_name = "NS")]
    pub leader_election_namespace: Option<String>,
    /// How long standbys wait, after the Lease last changed, before taking it over (Go
    /// duration: 15s, 1m).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = go_duration)]
    pub leader_election_lease_duration: std::time::Duration,
    /// How long the leader keeps leading while it fails to renew the Lease.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = go_duration)]
    pub leader_election_renew_deadline: std::time::Duration,
    /// How often the Lease is renewed, and taken when free.
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = go_duration)]
    pub leader_election_retry_period: std::time::Duration,
}

/// A Go duration, as controller-runtime's flags take them.
fn go_duration(value: &str) -> Result<std::time::Duration, String> {
    tfjob_policy_logic::classify_settings::parse_go_duration(value)
}

/// A listen address, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindAddress(pub Option<SocketAddr>);

/// Parses a listen address as controller-runtime's flags take it: `HOST:PORT`, `:PORT` (every
/// interface), or `0` (serve nothing).
pub fn bind_address(value: &str) -> Result<BindAddress, String> {
    if value == "0" {
        return Ok(BindAddress(None));
    }
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_owned(),
    };
    full.parse()
        .map(|a| BindAddress(Some(a)))
        .map_err(|_| format!("{value:?} is not a listen address: expected HOST:PORT, :PORT or 0"))
}

/// Accepts `tfjob` in any case, the only kind this operator runs.
fn tfjob_scheme(value: &str) -> Result<String, String> {
    if value.eq_ignore_ascii_case("tfjob") {
        Ok("tfjob".to_owned())
    } else {
        Err(format!(
            "{value:?} is not run by this operator: it runs TFJobs only (--enable-scheme=tfjob)"
        ))
    }
}

impl RunArgs {
    pub fn policy_namespaces(&self) -> Vec<String> {
        self.sources.namespaces()
    }

    /// The namespace to watch: an empty `--namespace` (or `$KUBEFLOW_NAMESPACE`) means all, as
    /// in training-operator.
    pub fn watched_namespace(&self) -> Option<String> {
        self.namespace.clone().filter(|ns| !ns.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_take_controller_runtimes_forms() {
        let addr = |s: &str| bind_address(s).map(|b| b.0.map(|a| a.to_string()));
        assert_eq!(addr(":8081"), Ok(Some("0.0.0.0:8081".into())));
        assert_eq!(addr("127.0.0.1:9090"), Ok(Some("127.0.0.1:9090".into())));
        assert_eq!(addr("[::1]:8080"), Ok(Some("[::1]:8080".into())));
        assert_eq!(addr("0"), Ok(None));
        for bad in ["", "8080", ":", ":http", "host:8080", "1.2.3.4:99999"] {
            let err = bind_address(bad).unwrap_err();
            assert!(err.contains("HOST:PORT, :PORT or 0"), "{bad}: {err}");
        }
    }

    #[test]
    fn only_the_tfjob_scheme_is_accepted() {
        assert_eq!(tfjob_scheme("TFJob"), Ok("tfjob".into()));
        assert!(
            tfjob_scheme("pytorchjob")
                .unwrap_err()
                .contains("TFJobs only")
        );
    }
}
