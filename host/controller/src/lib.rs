//! Kubernetes IO of the TFJob operator.
//!
//! A kube-runtime `Controller` on TFJobs that owns Pods and Services: shared reflector caches
//! feed both the controller's triggers and the planner's view of each job's objects (and, with a
//! gang scheduler, of its PodGroup: [`gang`]; with `--kueue-workloads`, of its Workload:
//! [`kueue`]); every
//! reconcile runs the pure planner ([`tfjob_planner`]) and executes its plan ([`execute`]).
//! Also the Prometheus metrics (training-operator's, this operator's, and the standard ones of
//! controller-runtime, client-go's work queue and the process) and the health endpoint. The
//! operator does not know whether it talks to a real cluster or to the embedded one; it only
//! needs a `kube::Client`.

pub mod backoff;
pub mod coalesce;
pub mod context;
pub mod error;
pub mod event_recorder;
pub mod execute;
pub mod gang;
pub mod http;
pub mod kueue;
pub mod leader;
pub mod metrics;
pub mod outcome;
pub mod owned_object;
pub mod owner_index;
pub mod pod_group;
pub mod priority_classes;
pub mod process;
pub mod progress;
pub mod recent;
pub mod reconcile;
pub mod runtime_metrics;
pub mod seats;
pub mod trace_context;
pub mod workload;
pub mod workqueue;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::Api;
use kube::core::error_boundary::DeserializeGuard;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use prometheus_client::registry::Registry;
use tfjob_api::TFJob;
use tfjob_api::labels::{CONTROLLER_NAME, OPERATOR_NAME, OPERATOR_NAME_VALUE};
use tfjob_planner::{PodPolicies, Settings};

use crate::event_recorder::EventRecorder;

pub use context::Context;
pub use error::Error;
pub use leader::Leadership;

/// The default of [`Config::stall_after`]: far above any reconcile's API calls under load.
pub const STALL_AFTER: Duration = Duration::from_secs(300);

/// How long an event of a job's pods or services is held for more of the same job's
/// ([`coalesce`](coalesce::coalesce)), counted from the first event held. At 1,000 jobs this
/// window took status writes per job from 4.64 to 4.02-4.12 and write amplification from
/// 1.126-1.161 to 1.079-1.086, with no change in how long the jobs took; it is far below what
/// anyone watching a job notices. (kube-runtime's debounce, tried first, restarts its wait on
/// every event, so an object that keeps changing could be held indefinitely.)
pub const COALESCE_WINDOW: Duration = Duration::from_millis(100);

/// How the controller runs.
pub struct Config {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub threads: u16,
    /// Concurrent reconciles of one namespace's jobs [default: three in four of `threads`,
    /// see [`seats::SeatLimits::new`]].
    pub per_namespace: Option<u16>,
    /// Address of `/metrics`, `/healthz`, `/readyz`; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Address of `/healthz` and `/readyz` alone (`--health-probe-bind-address`).
    pub probe_addr: Option<SocketAddr>,
    /// `/healthz` fails while a reconcile has been running longer than this.
    pub stall_after: Duration,
    pub settings: Settings,
    pub policies: Arc<dyn PodPolicies>,
    /// Name of this operator instance in events (e.g. the pod name).
    pub instance: Option<String>,
    /// Metrics of the operator's other parts (the policies'); the controller adds its own and
    /// serves them all on `metrics_addr`.
    pub metrics: Registry,
    /// Whether this instance may reconcile ([`Leadership::always`] without leader election).
    /// A standby keeps its caches filled and reconciles every job when it becomes the leader.
    pub leadership: Leadership,
}

/// Runs the controller until `shutdown` resolves, then finishes the reconciles in flight.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> std::io::Result<()> {
    let (jobs, pods, services): (Api<DeserializeGuard<TFJob>>, Api<Pod>, Api<Service>) =
        match &config.namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (
                Api::all(client.clone()),
                Api::all(client.clone()),
                Api::all(client.clone()),
            ),
        };
    let owned =
        watcher::Config::default().labels(&format!("{OPERATOR_NAME}={OPERATOR_NAME_VALUE}"));

    // The caches of owned objects keep their index by owner from the same events.
    let (pod_cache, pod_writer) = owner_index::cache();
    let pod_stream = owner_index::reflector(
        pod_writer,
        watcher(pods, owned.clone()).modify(owner_index::trim),
    )
    .default_backoff()
    .touched_objects();
    let (service_cache, service_writer) = owner_index::cache();
    let service_stream = owner_index::reflector(
        service_writer,
        watcher(services, owned).modify(owner_index::trim),
    )
    .default_backoff()
    .touched_objects();

    // What `Controller::new` builds, with every trigger stream passing the work queue metrics.
    let (job_reader, job_writer) = reflector::store();
    let mut seat_limits = seats::SeatLimits::new(config.threads);
    if let Some(n) = config.per_namespace {
        seat_limits = seat_limits.per_namespace(n);
    }
    let seats = seats::Seats::new(seat_limits);

    let mut registry = config.metrics;
    let metrics = metrics::Metrics::register(&mut registry);
    metrics.runtime.set_max_concurrent(config.threads);
    process::register(&mut registry);
    let queue = metrics.queue.clone();
    let ready = Arc::new(AtomicBool::new(false));
    let reporter = Reporter {
        controller: CONTROLLER_NAME.into(),
        instance: config.instance.clone(),
    };
    let gang = config
        .settings
        .gang_scheduler
        .as_ref()
        .map(|scheduler| gang::watch(&client, scheduler, config.namespace.as_deref()));
    let kueue = config
        .settings
        .kueue_workloads
        .then(|| kueue::watch(&client, config.namespace.as_deref()));
    let mut ctx = Context::new(
        client.clone(),
        pod_cache.clone(),
        service_cache.clone(),
        EventRecorder::new(client, reporter),
        metrics,
        config.settings,
        config.policies,
    )
    .with_leadership(config.leadership.clone())
    .with_jobs(job_reader.clone())
    .with_seats(seats);
    let mut group_trigger = None;
    if let Some((caches, stream)) = gang {
        group_trigger = Some((stream, caches.resource.clone()));
        ctx = ctx.with_gang(caches);
    }
    let mut workload_trigger = None;
    if let Some((caches, stream)) = kueue {
        workload_trigger = Some(stream);
        ctx = ctx.with_kueue(caches);
    }
    let ctx = Arc::new(ctx);

    let shutdown = shutdown.shared();
    let endpoint = http::Endpoint {
        registry: Arc::new(registry),
        ready: Arc::clone(&ready),
        progress: Arc::clone(&ctx.progress),
        stall_after: config.stall_after,
    };
    let mut servers = Vec::new();
    for (addr, router) in [
        (config.metrics_addr, http::router(endpoint.clone())),
        (config.probe_addr, http::probes_router(endpoint)),
    ] {
        let Some(addr) = addr else { continue };
        let listener = http::bind(addr).await?;
        servers.push(tokio::spawn(http::serve(
            listener,
            router,
            shutdown.clone(),
        )));
    }

    // kube-runtime's `Store::wait_until_ready` wakes only the task that polled it last (every
    // clone shares one oneshot receiver), and the controller waits on the job store itself: a
    // second task waiting there may never be woken, and readiness hung that way in one start
    // in a few. So the job stream itself says when its first list is in.
    let (jobs_listed_tx, mut jobs_listed) = tokio::sync::watch::channel(false);
    let job_stream = reflector(
        job_writer,
        watcher(jobs, watcher::Config::default().any_semantic()),
    )
    // As every other watch here: a refused or broken watch is retried after a growing pause,
    // not at once in a loop against the API server.
    .default_backoff()
    .inspect_ok(move |event| {
        if matches!(event, watcher::Event::InitDone) {
            jobs_listed_tx.send_replace(true);
        }
    })
    .applied_objects();
    let mut controller = Controller::for_stream(queue.job_triggers(job_stream), job_reader)
        .owns_stream(queue.owner_triggers(coalesce::coalesce(pod_stream, COALESCE_WINDOW)))
        .owns_stream(queue.owner_triggers(coalesce::coalesce(service_stream, COALESCE_WINDOW)));
    if let Some((stream, resource)) = group_trigger {
        // A PodGroup's phase change (Volcano admitting it) wakes its job.
        controller = controller.owns_stream_with(queue.owner_triggers(stream), resource);
    }
    if let Some(stream) = workload_trigger {
        // A Workload admitted, evicted or changed by someone else wakes its job.
        controller =
            controller.owns_stream_with(queue.owner_triggers(stream), kueue::workload_resource());
    }
    let controller = controller
        // A new leader looks at every job: the standby skipped the events it saw.
        .reconcile_all_on(config.leadership.gains())
        // Unbounded here: the seats bound the reconciles that run, fairly among namespaces; a
        // request waiting for a seat still counts as running for its job.
        .with_config(ControllerConfig::default().concurrency(0))
        .graceful_shutdown_on(shutdown.clone());
    // Readiness: every cache has been filled once. Nothing but this task waits on the pod,
    // service and gang caches.
    {
        let ready = Arc::clone(&ready);
        let (p, s) = (pod_cache.clone(), service_cache.clone());
        let gang_stores = ctx
            .gang
            .as_ref()
            .map(|g| (g.pod_groups.clone(), g.priority_classes.clone()));
        tokio::spawn(async move {
            let _ = tokio::join!(p.wait_until_ready(), s.wait_until_ready(), async {
                // The guard it returns is not `Send`: dropped here.
                let _ = jobs_listed.wait_for(|listed| *listed).await;
            });
            if let Some((groups, classes)) = gang_stores {
                let _ = tokio::join!(groups.wait_until_ready(), classes.wait_until_ready());
            }
            ready.store(true, Ordering::Release);
            tracing::info!("caches synced; reconciling");
        });
    }
    tracing::info!(
        namespace = config.namespace.as_deref().unwrap_or("<all>"),
        threads = seat_limits.total,
        per_namespace = seat_limits.per_namespace,
        "starting TFJob controller"
    );
    controller
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| {
            queue.settle(&result);
            async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "controller event");
                }
            }
        })
        .await;
    tracing::info!("controller stopped");
    for server in servers {
        match server.await {
            Ok(result) => result?,
            Err(e) => tracing::warn!(error = %e, "HTTP server task failed"),
        }
    }
    Ok(())
}
