//! `tfjob-operator run`: connect to the cluster and run the controller until SIGTERM or SIGINT.

use std::num::NonZeroU32;

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use tfjob_operator::api_metrics::ApiMetrics;
use tfjob_operator::rate_limit::ApiRate;
use tfjob_planner::Settings;
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::SandboxLimits;
use tracing_subscriber::EnvFilter;

use crate::cli::{LeaderElectionArgs, RunArgs};
use crate::policy_setup::Policies;
use tfjob_controller::leader::LeaseConfig;
use tfjob_controller::leader::election::Timings;
use tfjob_operator::operator::{LeaseClient, OperatorConfig};

pub fn main(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args))
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
    let policies = Policies::load(&args.policies, limits).context("loading policies")?;
    let rate = ApiRate {
        qps: NonZeroU32::new(args.kube_api_qps).context("--kube-api-qps must be at least 1")?,
        burst: NonZeroU32::new(args.kube_api_burst)
            .context("--kube-api-burst must be at least 1")?,
    };
    let api_metrics = ApiMetrics::default();
    let kube_config = client_config(args.kubeconfig.as_deref()).await?;
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
        },
        instance: std::env::var("POD_NAME").ok(),
        policy_namespaces: args.policy_namespaces(),
        cluster_policy_namespaces: args.sources.cluster_namespaces(),
        max_policies_per_namespace: Some(args.sources.max_per_namespace),
        stall_after: Some(std::time::Duration::from_secs(args.healthz_stall_seconds)),
        trusted_keys: std::sync::Arc::new(trusted_keys),
        leader_election: lease_config(&args.leader)?,
        lease_client: Some(LeaseClient(lease_client)),
        api_metrics,
    };
    tfjob_operator::operator::run(client, config, &policies, shutdown_signal())
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

/// The kubeconfig given by flag or `$KUBECONFIG`, else the usual inference
/// (`~/.kube/config`, then in-cluster service account).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let config = client_config(kubeconfig).await?;
    Client::try_from(config).context("creating the Kubernetes client")
}

async fn client_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig found and not running in a cluster")?,
    };
    Ok(config)
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutdown requested; finishing reconciles in flight");
}

pub fn init_logging(json: bool) {
    init_logging_at(json, "info");
}

/// Logging with `default` as the level when `RUST_LOG` is not set.
pub fn init_logging_at(json: bool, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
