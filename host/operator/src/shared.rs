//! What several subcommands share: the flags that say which cluster and namespaces a command
//! looks at, the Kubernetes client from a kubeconfig (or the in-cluster account), logging and
//! traces, and waiting for the signal to stop.

use anyhow::Context as _;
use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use tfjob_operator::telemetry::{DispatchSlot, TraceArgs, TraceIds, Tracing};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// The cluster a command reads and the namespaces it looks in: the flags `policy list` and
/// `policy diff` share. Each command gives `--namespace` its own default (without one it would
/// be required) and says what it looks for there, with `mut_arg` on its own arguments, since
/// they look for different things.
#[derive(Debug, clap::Args)]
pub struct ClusterScope {
    /// Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, then in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: String,
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

/// The kubeconfig given by flag or `$KUBECONFIG`, else the usual inference
/// (`~/.kube/config`, then in-cluster service account).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let config = client_config(kubeconfig).await?;
    Client::try_from(config).context("creating the Kubernetes client")
}

pub async fn client_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Config> {
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

/// Logging (JSON lines with `json`) at `default` unless `RUST_LOG` says otherwise, and the spans recorded by
/// `traces` when tracing is on. The log filter is the log layer's own, so that `RUST_LOG` never
/// decides which spans a trace has.
pub fn init_logging_at(json: bool, default: &str, traces: Option<&Tracing>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let format = tracing_subscriber::fmt::format();
    let slot = DispatchSlot::default();
    // With traces, each line logged inside a traced span carries its trace and span ids.
    let logs = match (json, traces.is_some()) {
        (true, true) => tracing_subscriber::fmt::layer()
            .json()
            .event_format(TraceIds::new(format.json(), true, slot.clone()))
            .with_filter(filter)
            .boxed(),
        (true, false) => tracing_subscriber::fmt::layer()
            .json()
            .with_filter(filter)
            .boxed(),
        (false, true) => tracing_subscriber::fmt::layer()
            .event_format(TraceIds::new(format, false, slot.clone()))
            .with_filter(filter)
            .boxed(),
        (false, false) => tracing_subscriber::fmt::layer().with_filter(filter).boxed(),
    };
    let dispatch: tracing::Dispatch = tracing_subscriber::registry()
        .with(logs)
        .with(traces.map(Tracing::layer))
        .into();
    slot.fill(&dispatch);
    dispatch.init();
}

/// Starts exporting traces when `args` configure it.
pub fn start_tracing(args: &TraceArgs) -> anyhow::Result<Option<Tracing>> {
    let Some(config) = args.resolve() else {
        return Ok(None);
    };
    let tracing = Tracing::start(&config, tfjob_operator::telemetry::span_counts().clone())
        .context("starting the trace export")?;
    Ok(Some(tracing))
}

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
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
}
