//! `tfjob-operator run`: connect to the cluster and run the controller until SIGTERM or SIGINT.

use std::num::NonZeroU32;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use tfjob_operator::api_metrics::ApiMetrics;
use tfjob_operator::rate_limit::ApiRate;
use tfjob_planner::Settings;
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::SandboxLimits;

use tfjob_controller::leader::LeaseConfig;
use tfjob_controller::leader::election::Timings;
use tfjob_operator::operator::{LeaseClient, OperatorConfig};
use tfjob_operator::policy_setup::Policies;

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    let traces = crate::shared::start_tracing(&args.traces)?;
    crate::shared::init_logging_at(args.log_json, "info", traces.as_ref());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(run(args));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    result
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.config {
        tracing::info!(file = %path.display(), "flags not given take their values from this file");
    }
    let defaults = SandboxLimits::default();
    let limits = SandboxLimits {
        // Room for every concurrent reconcile to evaluate at once.
        concurrency: u32::from(args.threads) * 2,
        tenant: args.sources.tenant_limits(defaults.memory_budget)?,
        ..defaults
    };
    let trusted_keys = args.sources.trusted_keys()?;
    let policies = Policies::load_compiling(&args.policies, limits, Policies::compiler_child()?)
        .context("loading policies")?;
    let rate = ApiRate {
        qps: NonZeroU32::new(args.kube_api_qps).context("--kube-api-qps must be at least 1")?,
        burst: NonZeroU32::new(args.kube_api_burst)
            .context("--kube-api-burst must be at least 1")?,
    };
    let api_metrics = ApiMetrics::default();
    let kube_config = crate::shared::client_config(args.kubeconfig.as_deref()).await?;
    let client = tfjob_operator::api_client::build(kube_config.clone(), Some(rate), &api_metrics)
        .context("creating the Kubernetes client")?;
    // The Lease's requests are counted with the rest, but held to no rate limit.
    let lease_client = tfjob_operator::api_client::build(kube_config, None, &api_metrics)
        .context("creating the Kubernetes client")?;
    let gang_scheduler = args
        .gang_scheduler_name
        .as_deref()
        .filter(|name| !name.is_empty())
        .map(GangScheduler::from_name);
    if let Some(scheduler) = &gang_scheduler {
        require_pod_groups(&client, scheduler).await?;
    }
    if args.kueue_workloads {
        require_workloads(&client).await?;
    }
    let config = OperatorConfig {
        namespace: args.watched_namespace(),
        threads: args.threads,
        reconciles_per_namespace: args.max_reconciles_per_namespace,
        metrics_addr: args.metrics_addr.0,
        probe_addr: args.health_probe_bind_address.0,
        settings: Settings {
            cluster_domain: args.cluster_domain.clone().filter(|d| !d.is_empty()),
            status_batch: std::time::Duration::from_millis(args.status_batch_ms),
            gang_scheduler,
            kueue_workloads: args.kueue_workloads,
        },
        instance: std::env::var("POD_NAME").ok(),
        policy_namespaces: args.policy_namespaces(),
        cluster_policy_namespaces: args.sources.cluster_namespaces(),
        max_policies_per_namespace: Some(args.sources.max_per_namespace),
        warm_cel_evaluator: !args.sources.no_cel_warmup,
        stall_after: Some(std::time::Duration::from_secs(args.healthz_stall_seconds)),
        trusted_keys: std::sync::Arc::new(trusted_keys),
        registry: Some(args.sources.registry(&policies)?),
        leader_election: lease_config(&args.leader)?,
        lease_client: Some(LeaseClient(lease_client)),
        api_metrics,
    };
    tfjob_operator::operator::run(client, config, &policies, async {
        crate::shared::shutdown_signal().await;
        tracing::info!("shutdown requested; finishing reconciles in flight");
    })
    .await
    .context("running the controller")
}

/// The Lease to campaign for with `--leader-elect`, or none.
fn lease_config(args: &LeaderElectionArgs) -> anyhow::Result<Option<LeaseConfig>> {
    if !args.leader_elect {
        return Ok(None);
    }
    let timings = Timings {
        lease_duration: args.leader_election_lease_duration,
        renew_deadline: args.leader_election_renew_deadline,
        retry_period: args.leader_election_retry_period,
    };
    timings.validate()?;
    Ok(Some(LeaseConfig {
        namespace: args
            .leader_election_namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(tfjob_operator::operator::default_policy_namespace),
        name: args.leader_election_id.clone(),
        identity: tfjob_operator::operator::instance_identity(),
        timings,
    }))
}

/// Exits early, as training-operator did, when the gang scheduler's PodGroup CRD is not
/// installed: every job would otherwise fail to create its group.
async fn require_pod_groups(client: &Client, scheduler: &GangScheduler) -> anyhow::Result<()> {
    let resource = tfjob_controller::gang::pod_group_resource(scheduler);
    let groups: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match groups.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => anyhow::bail!(
            "--gang-scheduler-name {}: the PodGroup CRD {} is not installed on the cluster; install {} or leave the flag out",
            scheduler.scheduler_name(),
            scheduler.api_version(),
            match scheduler {
                GangScheduler::Volcano => "Volcano",
                GangScheduler::SchedulerPlugins(_) => "scheduler-plugins",
            }
        ),
        Err(e) => Err(e).with_context(|| format!("listing {} PodGroups", scheduler.api_version())),
    }
}

/// Exits early when `--kueue-workloads` is set and Kueue's Workload CRD is not installed: every
/// queued job would otherwise wait for a Workload that cannot be created.
async fn require_workloads(client: &Client) -> anyhow::Result<()> {
    let resource = tfjob_controller::kueue::workload_resource();
    let workloads: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match workloads
        .list_metadata(&ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => anyhow::bail!(
            "--kueue-workloads: the Workload CRD kueue.x-k8s.io/v1beta2 is not installed on the cluster; install Kueue (0.13 or later) or leave the flag out"
        ),
        Err(e) => Err(e).context("listing kueue.x-k8s.io/v1beta2 Workloads"),
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// YAML file setting any of these flags: keys are their long names, values as on the
    /// command line (see `tfjob-operator config defaults`). A flag on the command line, or its
    /// environment variable, wins over the file.
    // Its id, `config` from the field name, is the one `config_file` reads the file from.
    #[arg(long, value_name = "FILE")]
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
    /// Create and own a Kueue Workload (kueue.x-k8s.io/v1beta2) for each job labelled
    /// kueue.x-k8s.io/queue-name, and run its pods only while Kueue admits it. For Kueue
    /// versions whose built-in TFJob integration is off or gone; leave it off while that
    /// integration manages TFJobs.
    #[arg(long)]
    pub kueue_workloads: bool,
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
    pub policies: tfjob_operator::policy_setup::PolicyArgs,
    #[command(flatten)]
    pub sources: tfjob_operator::policy_setup::PolicySourceArgs,
    #[command(flatten)]
    pub traces: tfjob_operator::telemetry::TraceArgs,
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
    tfjob_policy_logic::duration::parse_go(value)
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
