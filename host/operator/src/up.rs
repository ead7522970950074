//! `tfjob-operator up`: a whole cluster in one process for trying the operator and for
//! development: the embedded API server, the TFJob CRD with admission validation, the default
//! policies and the operator, with a kubeconfig written for kubectl.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kube::{Client, Config};
use tfjob_cluster::Store;
use tfjob_policy_engine::SandboxLimits;

use crate::policy_setup::{Policies, PolicyArgs};

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Loopback port of the API server (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Keep the cluster's objects in this file across restarts [default: in memory only].
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
    /// Simulated nodes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub nodes: u16,
    /// `nvidia.com/gpu` of each simulated node.
    #[arg(long, default_value_t = 2)]
    pub gpus_per_node: u32,
    /// Submit the jobs in `deploy/examples/` and show them run to the end, then stop.
    #[arg(long)]
    pub demo: bool,
    /// Where `--demo` takes its jobs from.
    #[arg(long, default_value = "deploy/examples", value_name = "DIR")]
    pub examples: PathBuf,
    #[command(flatten)]
    pub policies: PolicyArgs,
}

pub fn main(args: UpArgs) -> anyhow::Result<()> {
    // The demo's progress display is the output; logs only when something goes wrong.
    crate::run::init_logging_at(false, if args.demo { "warn" } else { "info" });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(up(args))
}

/// Starts the embedded API server with the CRD installed; returns the store and the address.
pub async fn start_cluster(
    port: u16,
    state: Option<&Path>,
) -> anyhow::Result<(Arc<Store>, std::net::SocketAddr)> {
    let store = Store::new();
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd())?;
    tfjob_cluster::crd::install(&store, crd)
        .map_err(|e| anyhow::anyhow!("installing the TFJob CRD: {e}"))?;
    store.set_validator(
        "kubeflow.org",
        "tfjobs",
        Arc::new(tfjob_api::validation::admit),
    );
    if let Some(path) = state.filter(|p| p.exists()) {
        tfjob_cluster::persist::load(&store, path)
            .with_context(|| format!("restoring {}", path.display()))?;
    }
    let (addr, _server) = tfjob_cluster::server::start(Arc::clone(&store), port)
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    Ok((store, addr))
}

/// Writes a kubeconfig pointing at the embedded server.
pub fn write_kubeconfig(path: &Path, addr: std::net::SocketAddr) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: tfjob-embedded\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: tfjob-embedded\n  context:\n    cluster: tfjob-embedded\n    user: developer\n    namespace: default\ncurrent-context: tfjob-embedded\nusers:\n- name: developer\n  user: {{}}\n"
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    let limits = SandboxLimits {
        concurrency: u32::from(args.threads) * 2,
        ..SandboxLimits::default()
    };
    let policies = Policies::load(&args.policies, limits).context("loading policies")?;
    let (store, addr) = start_cluster(args.port, args.state.as_deref()).await?;
    write_kubeconfig(&args.kubeconfig_out, addr)?;
    let kubeconfig =
        std::fs::canonicalize(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    println!("Embedded cluster listening on http://{addr}");
    println!("export KUBECONFIG={}", kubeconfig.display());

    let client = Client::try_from(Config::new(format!("http://{addr}").parse()?))?;
    let kubelet = tfjob_cluster::kubelet::spawn(
        Arc::clone(&store),
        tfjob_cluster::kubelet::KubeletConfig {
            nodes: usize::from(args.nodes),
            gpus_per_node: args.gpus_per_node,
            ..Default::default()
        },
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let operator = {
        let mut rx = stop_rx.clone();
        let config = tfjob_controller::Config {
            namespace: None,
            threads: args.threads,
            metrics_addr: None,
            settings: Default::default(),
            policies: policies.seam(),
            instance: Some("embedded".into()),
        };
        tokio::spawn(tfjob_controller::run(client.clone(), config, async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }))
    };
    let saver = args.state.clone().map(|path| {
        let store = Arc::clone(&store);
        let mut rx = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = rx.wait_for(|stop| *stop) => break,
                }
                if let Err(e) = tfjob_cluster::persist::save(&store, &path) {
                    tracing::warn!(error = %e, "could not save the cluster state");
                }
            }
        })
    });

    if args.demo {
        let jobs = crate::demo::submit_examples(&client, &args.examples).await?;
        println!(
            "Submitted {} jobs from {}; Ctrl-C stops.",
            jobs.len(),
            args.examples.display()
        );
        crate::demo::watch_progress(&client, &jobs, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    } else {
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
    }
    println!("Shutting down...");
    kubelet.abort();
    let _ = stop_tx.send(true);
    match tokio::time::timeout(Duration::from_secs(30), operator).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "operator stopped with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "operator task failed"),
        Err(_) => tracing::warn!("operator did not stop within 30 s"),
    }
    if let Some(saver) = saver {
        let _ = saver.await;
    }
    if let Some(path) = &args.state {
        tfjob_cluster::persist::save(&store, path)
            .with_context(|| format!("saving {}", path.display()))?;
        println!("Cluster state saved to {}", path.display());
    }
    Ok(())
}
