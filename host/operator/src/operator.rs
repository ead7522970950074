//! The operator as one unit: the policy ConfigMap sync and the TFJob controller, sharing one
//! policy registry and one metrics registry.
//!
//! The sync starts first and the controller waits until every policy namespace has been listed
//! and its policies loaded, so no pod is shaped by the built-in defaults when a configured
//! policy was meant to replace them. `tfjob-operator run` and the embedded cluster both start
//! the operator through [`run`].

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use kube::Client;
use prometheus_client::registry::Registry as MetricsRegistry;
use tfjob_planner::Settings;
use tfjob_policy_engine::cluster_cache::ClusterCache;
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_engine::{Breakers, PolicyMetrics, PolicySet, Registry, WasmPolicies};
use tfjob_policy_sync::read_caches::{OverCapEvents, ReadCacheMetrics, ReadCaches};
use tfjob_policy_sync::{PolicySync, SyncConfig, SyncMetrics};

use crate::api_metrics::ApiMetrics;
use crate::policy_setup::Policies;
use prometheus_client::metrics::gauge::Gauge;
use tfjob_controller::Leadership;
use tfjob_controller::leader::{Elector, LeaseConfig};

/// Longest wait for the policy ConfigMaps before the first reconcile.
pub const POLICY_WAIT: Duration = Duration::from_secs(30);

/// How the operator runs.
#[derive(Clone, Debug, Default)]
pub struct OperatorConfig {
    /// Watch one namespace for TFJobs, or all.
    pub namespace: Option<String>,
    pub threads: u16,
    /// Reconciles of one namespace's jobs at once [default: three in four of `threads`].
    pub reconciles_per_namespace: Option<u16>,
    pub metrics_addr: Option<SocketAddr>,
    /// Address of the `/healthz` and `/readyz` probes alone.
    pub probe_addr: Option<SocketAddr>,
    pub settings: Settings,
    /// Name of this instance in events.
    pub instance: Option<String>,
    /// Namespaces whose `policy.tfjob.dev/policy=true` ConfigMaps are policies; empty turns
    /// ConfigMap policies off.
    pub policy_namespaces: Vec<String>,
    /// Policy namespaces whose ConfigMaps may reach jobs of every namespace and replace the
    /// built-in policies; the operator's own namespace always is one.
    pub cluster_policy_namespaces: BTreeSet<String>,
    /// Compile the CEL evaluator at start, in the background (`run` and `up` do unless
    /// `--no-cel-warmup`; off by default, as a test harness wants).
    pub warm_cel_evaluator: bool,
    /// Policy ConfigMaps loaded per namespace at most [default:
    /// `tfjob_policy_sync::watch::MAX_PER_NAMESPACE`].
    pub max_policies_per_namespace: Option<usize>,
    /// `/healthz` fails while a reconcile runs longer than this [default:
    /// `tfjob_controller::STALL_AFTER`].
    pub stall_after: Option<Duration>,
    /// When not empty, a policy ConfigMap loads only with a signature by one of these keys.
    pub trusted_keys: Arc<TrustedKeys>,
    /// Where modules that policy ConfigMaps name by reference are pulled from [default: HTTPS
    /// to every registry, no cache].
    pub registry: Option<crate::policy_setup::PolicyRegistry>,
    /// Run as one of several replicas: only the holder of this Lease writes (`--leader-elect`).
    pub leader_election: Option<LeaseConfig>,
    /// The client the Lease is renewed with [default: the operator's]: one outside the
    /// operator's rate limit, so a busy operator's queue of requests never delays a renewal
    /// past the renew deadline (client-go gives the election a client of its own too).
    pub lease_client: Option<LeaseClient>,
    /// The request counters of the client the operator is given (the ones
    /// [`crate::api_client::build`] counted into), served on `/metrics`.
    pub api_metrics: ApiMetrics,
}

/// A client for the leader election alone.
#[derive(Clone)]
pub struct LeaseClient(pub Client);

impl std::fmt::Debug for LeaseClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseClient")
    }
}

pub use crate::policy_setup::default_policy_namespace;

/// This process's name in the leader election Lease: the pod's name (`$POD_NAME`, else
/// `$HOSTNAME`) and a random suffix, so a restarted container never mistakes its
/// predecessor's claim for its own.
pub fn instance_identity() -> String {
    let host = ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "tfjob-operator".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// Runs the policy sync and the controller until `shutdown` resolves. Each call starts from the
/// built-in policies, as a freshly started operator process would.
pub async fn run(
    client: Client,
    mut config: OperatorConfig,
    policies: &Policies,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> std::io::Result<()> {
    let mut metrics = MetricsRegistry::default();
    config.api_metrics.register(&mut metrics);
    crate::telemetry::span_counts().register(&mut metrics);
    let Some(lease) = config.leader_election.take() else {
        let leadership = Leadership::always();
        register_leadership(&mut metrics, &leadership);
        return serve(client, config, policies, shutdown, leadership, metrics).await;
    };
    // The elector writes the Lease with the ungated client; everything else goes through a
    // client that refuses writes while this instance does not lead.
    let lease_client = config
        .lease_client
        .take()
        .map_or_else(|| client.clone(), |c| c.0);
    let (elector, leadership) = Elector::new(lease_client, lease);
    register_leadership(&mut metrics, &leadership);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let election = tokio::spawn(elector.run(async {
        let _ = stopped.await;
    }));
    let gated = crate::api_client::write_gated(client, leadership.clone());
    let result = serve(gated, config, policies, shutdown, leadership, metrics).await;
    // Only now that every reconcile has finished is the lease released for the next leader.
    let _ = stop.send(());
    if let Err(e) = election.await {
        tracing::warn!(error = %e, "the leader election task failed");
    }
    result
}

/// The background puller of modules named by reference; none (such ConfigMaps are refused)
/// only if no registry client can be built.
fn puller(
    client: &Client,
    config: &OperatorConfig,
    policies: &Policies,
) -> Option<Arc<tfjob_policy_sync::pulls::Puller>> {
    let registry = match &config.registry {
        Some(registry) => registry.clone(),
        None => match crate::policy_setup::PolicyRegistry::new(
            policies,
            [],
            std::time::Duration::from_secs(60),
        ) {
            Ok(registry) => registry,
            Err(e) => {
                tracing::error!(error = %e, "no registry client: policies named by reference are refused");
                return None;
            }
        },
    };
    let settings = tfjob_policy_sync::pulls::PullSettings {
        client: registry.client,
        cache: registry.cache,
        keys: Arc::clone(&config.trusted_keys),
        refresh: registry.refresh,
        backoff: std::time::Duration::from_secs(1),
        max_backoff: std::time::Duration::from_secs(300),
    };
    Some(tfjob_policy_sync::pulls::Puller::new(
        settings,
        client.clone(),
    ))
}

/// `tfjob_operator_is_leader`: 1 while this instance leads (always, without leader election).
fn register_leadership(metrics: &mut MetricsRegistry, leadership: &Leadership) {
    let gauge: Gauge = Gauge::default();
    metrics.register(
        "tfjob_operator_is_leader",
        "Whether this operator instance is the leader (1) or a standby (0)",
        gauge.clone(),
    );
    let mut rx = leadership.receiver();
    tokio::spawn(async move {
        loop {
            gauge.set(i64::from(*rx.borrow_and_update()));
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The policy sync and the controller, writing only while `leadership` says so.
async fn serve(
    client: Client,
    config: OperatorConfig,
    policies: &Policies,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    leadership: Leadership,
    mut metrics: MetricsRegistry,
) -> std::io::Result<()> {
    let shutdown = shutdown.shared();
    let registry = Arc::new(Registry::new(PolicySet::with_unavailable(
        policies.builtin.iter().map(Arc::clone),
        Vec::new(),
    )));
    // One set of breakers for every reconcile, reported by the policy sync.
    let breakers = Breakers::new(policies.breakers);
    // The objects policies read, one watch per resource the active policies were granted.
    let cluster = Arc::new(ClusterCache::new());
    let seam = WasmPolicies::new(Arc::clone(&policies.engine), Arc::clone(&registry))
        .with_metrics(PolicyMetrics::register(&mut metrics))
        .with_breakers(breakers.clone())
        .with_cluster(Arc::clone(&cluster));
    let reads_task = tokio::spawn(
        ReadCaches::new(
            client.clone(),
            cluster,
            policies.read_cache_objects,
            ReadCacheMetrics::register(&mut metrics),
        )
        .with_events(config.instance.as_deref().map(|pod| {
            OverCapEvents::regarding_pod(client.clone(), &default_policy_namespace(), pod)
        }))
        .follow(Arc::clone(&registry), shutdown.clone()),
    );

    let sync_task = if config.policy_namespaces.is_empty() {
        None
    } else {
        for key in config.trusted_keys.iter() {
            tracing::info!(
                key = %key.id(),
                algorithm = key.algorithm(),
                file = key.file(),
                "policy modules signed by this key are trusted"
            );
        }
        let sync = PolicySync::new(
            client.clone(),
            Arc::clone(&policies.engine),
            Arc::clone(&registry),
            SyncConfig {
                namespaces: config.policy_namespaces.clone(),
                defaults: policies.builtin.clone(),
                instance: config.instance.clone(),
                cluster_namespaces: config
                    .cluster_policy_namespaces
                    .iter()
                    .cloned()
                    .chain([default_policy_namespace()])
                    .collect(),
                max_per_namespace: config
                    .max_policies_per_namespace
                    .unwrap_or(tfjob_policy_sync::watch::MAX_PER_NAMESPACE),
                load_bound: tfjob_policy_sync::watch::LOAD_BOUND,
                trusted_keys: Arc::clone(&config.trusted_keys),
                leading: leadership.receiver(),
                breakers,
                puller: puller(&client, &config, policies),
                loaded_budget: Arc::clone(&policies.loaded_budget),
                warm_cel_evaluator: config.warm_cel_evaluator,
            },
            SyncMetrics::register(&mut metrics),
        );
        let (ready_tx, mut ready) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(sync.run(ready_tx, shutdown.clone()));
        // The first reconcile waits for the configured policies, but not forever: a policy
        // namespace that cannot be listed (no RBAC Role there) must not keep the operator from
        // serving. Past the bound it starts with what is loaded; later loads swap in as usual.
        let started = tokio::time::Instant::now();
        loop {
            tokio::select! {
                r = ready.wait_for(|r| *r) => {
                    if r.is_err() {
                        tracing::error!("the policy sync stopped before its first load");
                    }
                    break;
                }
                () = shutdown.clone() => return Ok(()),
                () = tokio::time::sleep(Duration::from_secs(10)) => {
                    if started.elapsed() >= POLICY_WAIT {
                        tracing::error!(
                            namespaces = ?config.policy_namespaces,
                            "the policy ConfigMaps could not be listed in time; reconciling with \
                             the policies loaded so far (check the operator's Role in each policy \
                             namespace)"
                        );
                        break;
                    }
                    tracing::warn!(
                        namespaces = ?config.policy_namespaces,
                        "still waiting for the policy ConfigMaps to be listed"
                    );
                }
            }
        }
        Some(task)
    };

    let controller = tfjob_controller::Config {
        namespace: config.namespace,
        threads: config.threads,
        per_namespace: config.reconciles_per_namespace,
        metrics_addr: config.metrics_addr,
        probe_addr: config.probe_addr,
        stall_after: config.stall_after.unwrap_or(tfjob_controller::STALL_AFTER),
        settings: config.settings,
        policies: Arc::new(seam),
        instance: config.instance,
        metrics,
        leadership,
    };
    let result = tfjob_controller::run(client, controller, shutdown).await;
    if let Some(task) = sync_task {
        task.abort();
    }
    reads_task.abort();
    result
}
