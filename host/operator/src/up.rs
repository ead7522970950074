//! `tfjob-operator up`: a whole cluster in one process for trying the operator and for
//! development: the embedded API server, the TFJob CRD with admission validation, the default
//! policies and the operator, with a kubeconfig written for kubectl.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tfjob_cluster::faults::FaultConfig;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::SandboxLimits;

use tfjob_operator::embedded::{ClusterOptions, EmbeddedCluster, Serving};

/// The operator's namespace and RBAC as `deploy/` ships them, which `up --authorize` applies.
const DEPLOYED_NAMESPACE: &str = include_str!("../../../deploy/overlays/standalone/namespace.yaml");
const DEPLOYED_RBAC: &str = include_str!("../../../deploy/operator/rbac.yaml");
const DEPLOYED_KUEUE_RBAC: &str =
    include_str!("../../../deploy/overlays/kueue-workloads/rbac.yaml");
/// The service account `deploy/operator/rbac.yaml` binds its roles to.
const OPERATOR_ACCOUNT: (&str, &str) = ("tfjob-system", "tfjob-operator");

use tfjob_operator::policy_setup::{Policies, PolicyArgs, PolicySourceArgs};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Loopback port of the API server (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Keep the cluster's objects in this SQLite database across restarts, every write
    /// durable before it is answered; an old JSON state file there is imported once
    /// [default: in memory only].
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Where the kubeconfig for kubectl is written.
    #[arg(
        long,
        default_value = ".tfjob-operator/kubeconfig",
        value_name = "FILE"
    )]
    pub kubeconfig_out: PathBuf,
    /// Concurrent reconciles of the operator.
    #[arg(long, default_value_t = 4)]
    pub threads: u16,
    /// Concurrent reconciles of one namespace's jobs [default: three in four of the threads,
    /// rounded up].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub max_reconciles_per_namespace: Option<u16>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub nodes: u16,
    /// `nvidia.com/gpu` of each simulated node.
    #[arg(long, default_value_t = 2)]
    pub gpus_per_node: u32,
    /// Gang-schedule jobs: the operator groups them for this scheduler (`volcano`, or any other
    /// name for scheduler-plugins) and the cluster simulates it.
    #[arg(long, value_name = "NAME")]
    pub gang_scheduler_name: Option<String>,
    /// Simulate Kueue (kueue.x-k8s.io/v1beta2 Workloads, ClusterQueues, LocalQueues and
    /// ResourceFlavors, with quota admission and eviction). Jobs labelled
    /// kueue.x-k8s.io/queue-name go through Kueue's built-in TFJob integration, or, with
    /// --kueue-workloads, through Workloads the operator owns.
    #[arg(long)]
    pub kueue: bool,
    /// With --kueue: the operator creates and owns the Workloads of queued jobs (as
    /// `tfjob-operator run --kueue-workloads`) and the simulated Kueue leaves TFJobs alone.
    #[arg(long, requires = "kueue")]
    pub kueue_workloads: bool,
    /// Faults for the API server to inject from the start (JSON, as `PUT /debug/faults` takes:
    /// error rates per verb and resource, latency, cut watches); change them later with
    /// `kubectl replace --raw /debug/faults -f FILE`.
    #[arg(long, value_name = "FILE")]
    pub faults: Option<PathBuf>,
    /// Start the cluster without its operator (CRDs, simulated kubelet and the policies'
    /// namespace only), to run `tfjob-operator run` processes, one or several, against it
    /// with the written kubeconfig.
    #[arg(long, conflicts_with = "demo")]
    pub no_operator: bool,
    /// Authorize requests by RBAC: the operator runs as the `tfjob-operator` service account
    /// with the namespace and RBAC of `deploy/operator/` (applied at start); the kubeconfig
    /// written for kubectl keeps full access (`kubectl --as=system:serviceaccount:NS:NAME`
    /// acts as an account).
    #[arg(long, conflicts_with = "no_operator")]
    pub authorize: bool,
    /// Serve plain HTTP instead of HTTPS. By default the API server serves HTTPS with a CA and
    /// certificate made at the first start (kept in `STATE.pki/` beside `--state`) and written
    /// into the kubeconfig as `certificate-authority-data`.
    #[arg(long)]
    pub plain_http: bool,
    /// Submit the jobs in `deploy/examples/` and show them run to the end, then stop.
    #[arg(long)]
    pub demo: bool,
    /// Where `--demo` takes its jobs from.
    #[arg(long, default_value = "deploy/examples", value_name = "DIR")]
    pub examples: PathBuf,
    #[command(flatten)]
    pub policies: PolicyArgs,
    #[command(flatten)]
    pub sources: PolicySourceArgs,
    #[command(flatten)]
    pub traces: tfjob_operator::telemetry::TraceArgs,
}

/// Applies `deploy/`'s namespace and RBAC and starts the operator as its service account.
async fn run_operator_with_deployed_rbac(
    cluster: &mut EmbeddedCluster,
    kueue_workloads: bool,
) -> anyhow::Result<()> {
    let mut manifests = vec![
        (
            "deploy/overlays/standalone/namespace.yaml",
            DEPLOYED_NAMESPACE,
        ),
        ("deploy/operator/rbac.yaml", DEPLOYED_RBAC),
    ];
    if kueue_workloads {
        manifests.push((
            "deploy/overlays/kueue-workloads/rbac.yaml",
            DEPLOYED_KUEUE_RBAC,
        ));
    }
    for (file, manifest) in manifests {
        cluster
            .apply_manifests(manifest)
            .with_context(|| format!("applying {file}"))?;
    }
    let (namespace, name) = OPERATOR_ACCOUNT;
    cluster.run_operator_as(namespace, name).await?;
    cluster.start_operator();
    println!("Authorizing by RBAC; the operator runs as system:serviceaccount:{namespace}:{name}");
    Ok(())
}

/// HTTPS unless asked for plain HTTP; with a state database, the certificates are kept beside
/// it (`state.db` → `state.pki/`), so a restart serves the CA its kubeconfigs hold.
fn serving(plain_http: bool, state: Option<&std::path::Path>) -> Serving {
    match (plain_http, state) {
        (true, _) => Serving::PlainHttp,
        (false, Some(state)) => Serving::HttpsKeptIn(state.with_extension("pki")),
        (false, None) => Serving::Https,
    }
}

pub fn main(args: UpArgs) -> anyhow::Result<()> {
    let traces = crate::shared::start_tracing(&args.traces)?;
    // The demo's progress display is the output; logs only when something goes wrong.
    crate::shared::init_logging_at(
        false,
        if args.demo { "warn" } else { "info" },
        traces.as_ref(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(up(args, traces.is_some()));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    result
}

/// What the default policies read in `--demo` unless `--policy-config` says otherwise: the
/// classification tells a pod no node can hold from one waiting its turn (`demo-too-big`).
const DEMO_POLICY_CONFIG: &str = "\
# Written by `up --demo`: in the demo the default classification reads the nodes and fails a
# pod that no node could ever hold once it has waited 5 s (docs/policies.md, \"The default
# policies that read\"). `up --demo --policy-config FILE` chooses otherwise.
default-classify:
  settings: {failUnschedulable: {gracePeriod: 5s}}
";

/// Runs `up`; `traced`: traces are exported, so the API server traces the requests it serves.
async fn up(mut args: UpArgs, traced: bool) -> anyhow::Result<()> {
    if args.demo && args.policies.policy_config.is_none() {
        let path = args
            .kubeconfig_out
            .with_file_name("demo-policy-config.yaml");
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, DEMO_POLICY_CONFIG)
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "The default classification reads the nodes in the demo: {}",
            path.display()
        );
        args.policies.policy_config = Some(path);
    }
    let defaults = SandboxLimits::default();
    let limits = SandboxLimits {
        concurrency: u32::from(args.threads) * 2,
        tenant: args.sources.tenant_limits(defaults.memory_budget)?,
        ..defaults
    };
    let trusted_keys = Arc::new(args.sources.trusted_keys()?);
    let policies = Policies::load_compiling(&args.policies, limits, Policies::compiler_child()?)
        .context("loading policies")?;
    let registry = Some(args.sources.registry(&policies)?);
    let faults = match &args.faults {
        Some(path) => {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            FaultConfig::from_json(&text).with_context(|| format!("{}", path.display()))?
        }
        None => FaultConfig::default(),
    };
    let mut cluster = EmbeddedCluster::start(ClusterOptions {
        port: args.port,
        state: args.state.clone(),
        kubelet: KubeletConfig {
            nodes: usize::from(args.nodes),
            gpus_per_node: args.gpus_per_node,
            ..Default::default()
        },
        threads: args.threads,
        reconciles_per_namespace: args.max_reconciles_per_namespace,
        policies: Arc::new(policies),
        policy_namespaces: args.sources.namespaces(),
        cluster_policy_namespaces: args.sources.cluster_namespaces(),
        trusted_keys,
        registry,
        warm_cel_evaluator: !args.sources.no_cel_warmup,
        // Authorizing, the operator starts once its account and RBAC exist.
        run_operator: !args.no_operator && !args.authorize,
        leader_election: None,
        faults,
        gang_scheduler: args
            .gang_scheduler_name
            .as_deref()
            .filter(|name| !name.is_empty())
            .map(GangScheduler::from_name),
        kueue_workloads: args.kueue_workloads,
        simulate_kueue: args.kueue,
        authorize: args.authorize,
        serving: serving(args.plain_http, args.state.as_deref()),
        trace_requests: traced,
    })
    .await?;
    if args.authorize {
        run_operator_with_deployed_rbac(&mut cluster, args.kueue_workloads).await?;
    }
    cluster
        .write_kubeconfig(&args.kubeconfig_out)
        .with_context(|| format!("writing {}", args.kubeconfig_out.display()))?;
    let kubeconfig =
        std::fs::canonicalize(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    if let (Some(path), Some(json)) = (&args.state, cluster.imported_json()) {
        println!(
            "Imported the JSON state file into the state database {} (the JSON file is kept as {})",
            path.display(),
            json.display()
        );
    }
    println!("Embedded cluster listening on {}", cluster.url());
    println!("export KUBECONFIG={}", kubeconfig.display());
    if args.no_operator {
        println!(
            "No operator runs: start one or several with\n  tfjob-operator run --kubeconfig {} --leader-elect --metrics-bind-address 0 --health-probe-bind-address 0",
            kubeconfig.display()
        );
    }

    let client = cluster.client();
    if args.demo {
        let jobs = crate::demo::submit_examples(&client, &args.examples).await?;
        println!(
            "Submitted {} jobs from {}; Ctrl-C stops.",
            jobs.len(),
            args.examples.display()
        );
        crate::demo::watch_progress(&client, &jobs, crate::shared::shutdown_signal()).await?;
    } else {
        crate::shared::shutdown_signal().await;
    }
    println!("Shutting down...");
    cluster.shutdown(Duration::from_secs(30)).await;
    if let Some(path) = &args.state {
        println!("Cluster state kept in {}", path.display());
    }
    Ok(())
}
