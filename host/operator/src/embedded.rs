//! A whole cluster in one process: the embedded API server with the TFJob CRD and its
//! admission check installed, the simulated kubelet and scheduler, the namespaces' default
//! ServiceAccounts, and the operator with its
//! policies, talking to the server over HTTP exactly as it would to a real cluster.
//!
//! `tfjob-operator up` and the end-to-end suites start it the same way, so what a newcomer sees
//! is what the tests check. The operator can be stopped and started again while the cluster
//! keeps running, which is how the operator-restart tests cut it off mid-job.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tfjob_cluster::Part;

use serde::Deserialize as _;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;
use tfjob_cluster::faults::{FaultConfig, Faults};
use tfjob_cluster::http::kubeconfig::ClientAccess;
use tfjob_cluster::http::requests::RequestStats;
use tfjob_cluster::http::server::{RunningServer, ServerOptions};
use tfjob_cluster::http::tls::{ServingCertificates, TlsError};
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_cluster::kueue::KueueConfig;
use tfjob_cluster::storage::durable::{Durable, DurableError};
use tfjob_cluster::{ApiError, Store};
use tfjob_planner::Settings;
use tfjob_planner::gang::GangScheduler;
use tfjob_policy_engine::signature::TrustedKeys;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api_metrics::ApiMetrics;
use crate::operator::OperatorConfig;
use crate::policy_setup::{Policies, PolicyRegistry};
use tfjob_controller::leader::LeaseConfig;

/// What to start.
pub struct ClusterOptions {
    /// Loopback port of the API server; 0 picks a free one.
    pub port: u16,
    /// The durable state database (SQLite): objects restored from it at start, and every
    /// write made durable in it before it is answered. An old JSON state file there is
    /// imported once.
    pub state: Option<PathBuf>,
    /// Nodes, capacity and timings of the simulated kubelet.
    pub kubelet: KubeletConfig,
    /// Concurrent reconciles of the operator.
    pub threads: u16,
    /// Concurrent reconciles of one namespace's jobs [default: the operator's].
    pub reconciles_per_namespace: Option<u16>,
    /// The operator's built-in policies and engine.
    pub policies: Arc<Policies>,
    /// Namespaces whose labelled ConfigMaps are policies (empty: none).
    pub policy_namespaces: Vec<String>,
    /// Policy namespaces that reach the whole cluster besides `tfjob-system`.
    pub cluster_policy_namespaces: BTreeSet<String>,
    /// When not empty, policy ConfigMaps load only with a signature by one of these keys.
    pub trusted_keys: Arc<TrustedKeys>,
    /// Where the operator pulls modules named by reference [default: HTTPS, no cache].
    pub registry: Option<PolicyRegistry>,
    /// The operator compiles the CEL evaluator at start, in the background (`up` does unless
    /// `--no-cel-warmup`).
    pub warm_cel_evaluator: bool,
    /// Start the operator with the cluster (off for benchmarks that run it as its own process).
    pub run_operator: bool,
    /// Faults the API server injects from the start (changeable later through
    /// [`EmbeddedCluster::faults`] or `PUT /debug/faults`).
    pub faults: FaultConfig,
    /// The operator gang-schedules jobs with this scheduler (`up --gang-scheduler-name`), and
    /// the simulated cluster runs it (unless `kubelet.gang_scheduler` names another).
    pub gang_scheduler: Option<GangScheduler>,
    /// The operator owns a Kueue Workload for each job with a queue label and runs its pods
    /// only while it is admitted (`--kueue-workloads`).
    pub kueue_workloads: bool,
    /// The cluster simulates Kueue (`up --kueue`); unless the operator owns Workloads, the
    /// simulation also plays Kueue's built-in TFJob integration.
    pub simulate_kueue: bool,
    /// The operator campaigns for this Lease and writes only while it holds it.
    pub leader_election: Option<LeaseConfig>,
    /// The API server authorizes requests by the RBAC objects it holds (`up --authorize`);
    /// the admin client and kubeconfig keep full access. See
    /// [`EmbeddedCluster::run_operator_as`] for running the operator with less.
    pub authorize: bool,
    /// How the API server serves: HTTPS (the default) or plain HTTP.
    pub serving: Serving,
    /// The API server makes a trace span of each request that carries a trace context, a child
    /// of the client's (`up` with traces on; [`crate::api_trace`]).
    pub trace_requests: bool,
}

/// How the API server serves its clients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Serving {
    /// HTTPS, with a CA and serving certificate made at start.
    #[default]
    Https,
    /// HTTPS, with the CA and serving certificate kept in this directory (made there at the
    /// first start, loaded at the next), so kubeconfigs written before still work.
    HttpsKeptIn(PathBuf),
    /// Plain HTTP (`up --plain-http`).
    PlainHttp,
}

impl ClusterOptions {
    /// A cluster on a free port, in memory, with the default kubelet, these policies and
    /// ConfigMap policies from `tfjob-system`.
    pub fn new(policies: Arc<Policies>) -> ClusterOptions {
        ClusterOptions {
            port: 0,
            state: None,
            kubelet: KubeletConfig::default(),
            threads: 4,
            reconciles_per_namespace: None,
            policies,
            policy_namespaces: vec!["tfjob-system".to_owned()],
            cluster_policy_namespaces: BTreeSet::new(),
            trusted_keys: Arc::default(),
            registry: None,
            warm_cel_evaluator: false,
            run_operator: true,
            faults: FaultConfig::default(),
            gang_scheduler: None,
            kueue_workloads: false,
            simulate_kueue: false,
            leader_election: None,
            authorize: false,
            serving: Serving::Https,
            trace_requests: false,
        }
    }
}

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("installing the TFJob CRD: {0}")]
    Crd(String),
    #[error(transparent)]
    State(#[from] DurableError),
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("fault configuration: {0}")]
    Faults(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("creating the client for the embedded server: {0}")]
    Client(#[from] kube::Error),
    #[error("a token for service account {namespace}/{name}: {source}")]
    Token {
        namespace: String,
        name: String,
        #[source]
        source: ApiError,
    },
    #[error("the kubeconfig for the operator's identity: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
}

/// Why manifests could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("document {index}: {message}")]
    Yaml { index: usize, message: String },
    #[error("document {index}: apiVersion {api_version:?} kind {kind:?} is not served")]
    Unserved {
        index: usize,
        api_version: String,
        kind: String,
    },
    #[error("document {index} ({kind} {name:?}): {source}")]
    Api {
        index: usize,
        kind: String,
        name: String,
        #[source]
        source: ApiError,
    },
}

/// How long the tokens minted for the operator last: as long as any session of `up`.
const OPERATOR_TOKEN_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// A running operator task and the switch that stops it.
struct Operator {
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

/// The running cluster. Dropping it aborts the kubelet, the simulated Kueue and the operator; [`shutdown`] stops
/// them in order and lets reconciles in flight finish.
///
/// [`shutdown`]: EmbeddedCluster::shutdown
pub struct EmbeddedCluster {
    store: Arc<Store>,
    addr: SocketAddr,
    /// The server's URL, CA (when it serves HTTPS) and administrator's token.
    access: ClientAccess,
    client: Client,
    /// The operator's own client (user agent `tfjob-operator/...`).
    operator_client: Client,
    /// Its request counters, served by every operator started here.
    api_metrics: ApiMetrics,
    kubelet: JoinHandle<()>,
    /// What the controller manager keeps in every namespace (its `default` ServiceAccount).
    namespaces: JoinHandle<()>,
    /// The simulated Kueue, when it runs.
    kueue: Option<JoinHandle<()>>,
    /// The durable state database, with `state`.
    durable: Option<Arc<Durable>>,
    /// Where an old JSON state file was kept once imported at start.
    imported_json: Option<PathBuf>,
    server: RunningServer,
    operator: Option<Operator>,
    threads: u16,
    reconciles_per_namespace: Option<u16>,
    policies: Arc<Policies>,
    policy_namespaces: Vec<String>,
    cluster_policy_namespaces: BTreeSet<String>,
    trusted_keys: Arc<TrustedKeys>,
    registry: Option<PolicyRegistry>,
    warm_cel_evaluator: bool,
    gang_scheduler: Option<GangScheduler>,
    kueue_workloads: bool,
    leader_election: Option<LeaseConfig>,
}

impl EmbeddedCluster {
    /// Starts the API server, the kubelet and the operator. Must run inside a Tokio runtime.
    pub async fn start(options: ClusterOptions) -> Result<EmbeddedCluster, StartError> {
        let store = Store::new();
        let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd())
            .map_err(|e| StartError::Crd(e.to_string()))?;
        tfjob_cluster::storage::crd::install(&store, crd)
            .map_err(|e| StartError::Crd(e.to_string()))?;
        store.set_validator(
            "kubeflow.org",
            "tfjobs",
            Arc::new(tfjob_api::validation::admit),
        );
        let mut imported_json = None;
        let durable = match options.state.as_deref() {
            Some(path) => {
                let (durable, restored) = Durable::open(path)?;
                imported_json = durable.attach(&store, restored);
                Some(durable)
            }
            None => None,
        };
        let faults = Faults::new(options.faults).map_err(|e| StartError::Faults(e.to_string()))?;
        let certificates = match &options.serving {
            Serving::Https => Some(ServingCertificates::generate()?),
            Serving::HttpsKeptIn(dir) => Some(ServingCertificates::load_or_generate(dir)?),
            Serving::PlainHttp => None,
        };
        let mut server_options = ServerOptions {
            faults,
            ..ServerOptions::default()
        };
        server_options.access.authorize = options.authorize;
        if options.trace_requests {
            server_options.tracing = Some(Arc::new(crate::api_trace::ServerTracing));
        }
        if let Some(certificates) = &certificates {
            server_options = server_options.with_https(certificates)?;
        }
        let server = tfjob_cluster::http::server::start_with(
            Arc::clone(&store),
            options.port,
            server_options,
        )
        .await
        .map_err(|source| StartError::Bind {
            port: options.port,
            source,
        })?;
        let addr = server.addr;
        let access = match &certificates {
            Some(certificates) => ClientAccess::https(addr, certificates),
            None => ClientAccess::plain(addr),
        };
        let url = access
            .url()
            .parse()
            .expect("a socket address makes a valid URL");
        let mut config = Config::new(url);
        config.root_cert = certificates.as_ref().map(|c| vec![c.ca_der()]);
        let client = Client::try_from(config.clone())?;
        // The operator has a client of its own, named, so requests are told apart by agent.
        let api_metrics = ApiMetrics::default();
        let operator_client = crate::api_client::build(config, None, &api_metrics)?;
        let mut kubelet_config = options.kubelet;
        // The cluster simulates the scheduler the operator groups jobs for (and serves its
        // PodGroup CRD), unless the kubelet configuration names one itself.
        if let Some(scheduler) = &options.gang_scheduler {
            kubelet_config
                .gang_scheduler
                .get_or_insert_with(|| scheduler.scheduler_name().to_owned());
        }
        let kubelet = tfjob_cluster::kubelet::spawn(Arc::clone(&store), kubelet_config);
        let namespaces = tfjob_cluster::namespaces::spawn(
            Arc::clone(&store),
            certificates.as_ref().map(|c| c.ca_pem().to_owned()),
        );
        let kueue = options.simulate_kueue.then(|| {
            let config = KueueConfig {
                integration: !options.kueue_workloads,
                ..KueueConfig::default()
            };
            tfjob_cluster::kueue::spawn(Arc::clone(&store), config)
        });
        let mut cluster = EmbeddedCluster {
            store,
            addr,
            access,
            client,
            operator_client,
            api_metrics,
            kubelet,
            namespaces,
            kueue,
            durable,
            imported_json,
            server,
            operator: None,
            threads: options.threads,
            reconciles_per_namespace: options.reconciles_per_namespace,
            policies: options.policies,
            policy_namespaces: options.policy_namespaces,
            cluster_policy_namespaces: options.cluster_policy_namespaces,
            trusted_keys: options.trusted_keys,
            registry: options.registry,
            warm_cel_evaluator: options.warm_cel_evaluator,
            gang_scheduler: options.gang_scheduler,
            kueue_workloads: options.kueue_workloads,
            leader_election: options.leader_election,
        };
        if options.run_operator {
            cluster.start_operator();
        }
        Ok(cluster)
    }

    /// The object store behind the API server (for assertions that need more than the API).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API server's fault injection, changeable while the cluster runs.
    pub fn faults(&self) -> &Faults {
        self.server.faults()
    }

    /// The API server's request counters.
    pub fn requests(&self) -> &RequestStats {
        self.server.requests()
    }

    /// A client of the embedded server.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The administrator's kubeconfig, with `default` as the namespace: over HTTPS it trusts
    /// the server's CA and presents the administrator's token; over plain HTTP it carries no
    /// credentials, which the server takes as `system:masters`.
    pub fn kubeconfig(&self) -> String {
        self.access.admin_kubeconfig("default")
    }

    /// How clients reach the server: its URL, CA and the kubeconfigs of its users.
    pub fn access(&self) -> &ClientAccess {
        &self.access
    }

    /// The API server's URL: `https://127.0.0.1:PORT`, or `http://` when it serves plain HTTP.
    pub fn url(&self) -> &str {
        self.access.url()
    }

    /// The CA (PEM) clients trust the server by, when it serves HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.access.ca_pem()
    }

    /// Writes [`kubeconfig`](Self::kubeconfig) to `path` (readable by its owner only, since it
    /// holds a token), creating its directory.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        write_private(path, &self.kubeconfig())
    }

    /// Mints a token for service account `name` in `namespace` (which must exist), valid for
    /// `ttl`, as `kubectl create token` does.
    pub fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<String, StartError> {
        self.server
            .access()
            .tokens
            .service_account(&self.store, namespace, name, ttl)
            .map(|issued| issued.token)
            .map_err(|source| StartError::Token {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })
    }

    /// From the next [`start_operator`](Self::start_operator) on, the operator runs as
    /// service account `name` in `namespace` (which must exist): with a token minted for it,
    /// through a client built from a kubeconfig for that token, as it would run in a cluster.
    /// With [`ClusterOptions::authorize`], its requests are then held to that account's RBAC.
    pub async fn run_operator_as(&mut self, namespace: &str, name: &str) -> Result<(), StartError> {
        let token = self.service_account_token(namespace, name, OPERATOR_TOKEN_TTL)?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let kubeconfig =
            Kubeconfig::from_yaml(&self.access.kubeconfig(&user, Some(&token), "default"))?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        self.operator_client = crate::api_client::build(config, None, &self.api_metrics)?;
        Ok(())
    }

    /// Creates the objects of a multi-document YAML manifest as the administrator (as
    /// `kubectl apply` would; one that exists already is replaced). Returns how many.
    pub fn apply_manifests(&self, yaml: &str) -> Result<usize, ApplyError> {
        let mut applied = 0;
        for (index, doc) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
            let index = index + 1;
            let obj = Value::deserialize(doc).map_err(|e| ApplyError::Yaml {
                index,
                message: e.to_string(),
            })?;
            if obj.is_null() {
                continue;
            }
            let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
            let (api_version, kind) = (text("apiVersion"), text("kind"));
            let t = self
                .store
                .types()
                .into_iter()
                .find(|t| t.api_version() == api_version && t.kind == kind)
                .ok_or_else(|| ApplyError::Unserved {
                    index,
                    api_version: api_version.to_owned(),
                    kind: kind.to_owned(),
                })?;
            let meta = |k: &str| {
                obj.pointer(&format!("/metadata/{k}"))
                    .and_then(Value::as_str)
            };
            let name = meta("name").unwrap_or_default().to_owned();
            let ns = meta("namespace").map(str::to_owned);
            let api_error = |source| ApplyError::Api {
                index,
                kind: kind.to_owned(),
                name: name.clone(),
                source,
            };
            match self.store.create(&t, ns.as_deref(), obj.clone()) {
                Ok(_) => {}
                Err(e) if e.code == 409 => {
                    let existing = self
                        .store
                        .get(&t, ns.as_deref(), &name)
                        .map_err(api_error)?;
                    let mut replacement = obj.clone();
                    replacement["metadata"]["resourceVersion"] =
                        existing["metadata"]["resourceVersion"].clone();
                    self.store
                        .replace(&t, ns.as_deref(), &name, replacement, Part::Whole)
                        .map_err(api_error)?;
                }
                Err(e) => return Err(api_error(e)),
            }
            applied += 1;
        }
        Ok(applied)
    }

    /// Starts the operator if it is not running. It lists everything afresh, as an operator
    /// restarted in a real cluster would.
    pub fn start_operator(&mut self) {
        if self.operator.is_some() {
            return;
        }
        let (stop, mut stopped) = watch::channel(false);
        let config = OperatorConfig {
            threads: self.threads,
            reconciles_per_namespace: self.reconciles_per_namespace,
            instance: Some("embedded".into()),
            policy_namespaces: self.policy_namespaces.clone(),
            cluster_policy_namespaces: self.cluster_policy_namespaces.clone(),
            trusted_keys: Arc::clone(&self.trusted_keys),
            registry: self.registry.clone(),
            warm_cel_evaluator: self.warm_cel_evaluator,
            settings: Settings {
                gang_scheduler: self.gang_scheduler.clone(),
                kueue_workloads: self.kueue_workloads,
                ..Settings::default()
            },
            leader_election: self.leader_election.clone(),
            api_metrics: self.api_metrics.clone(),
            ..OperatorConfig::default()
        };
        let client = self.operator_client.clone();
        let policies = Arc::clone(&self.policies);
        let task = tokio::spawn(async move {
            crate::operator::run(client, config, &policies, async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await
        });
        self.operator = Some(Operator { stop, task });
    }

    /// Stops the operator, letting reconciles in flight finish (at most `grace`, then it is
    /// aborted). The API server and the kubelet keep running.
    pub async fn stop_operator(&mut self, grace: Duration) {
        let Some(Operator { stop, mut task }) = self.operator.take() else {
            return;
        };
        let _ = stop.send(true);
        match tokio::time::timeout(grace, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "operator stopped with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "operator task failed"),
            Err(_) => {
                tracing::warn!(?grace, "operator did not stop in time; aborting it");
                task.abort();
            }
        }
    }

    /// Stops the kubelet, then the operator, then commits and closes the state database; the
    /// server goes when the cluster is dropped.
    pub async fn shutdown(mut self, grace: Duration) {
        self.kubelet.abort();
        self.namespaces.abort();
        if let Some(kueue) = &self.kueue {
            kueue.abort();
        }
        self.stop_operator(grace).await;
        if let Some(durable) = self.durable.take() {
            let _ = tokio::task::spawn_blocking(move || durable.close()).await;
        }
    }

    /// Where the old JSON state file was kept, if one was imported into the state database at
    /// start.
    pub fn imported_json(&self) -> Option<&Path> {
        self.imported_json.as_deref()
    }
}

/// Writes `text` to `path`, creating its directory; on Unix readable by its owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        // Never readable by others, not even between creating and writing; a file that
        // existed keeps its mode on open, hence the second step.
        options.mode(0o600);
        let file = options.open(path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        (&file).write_all(text.as_bytes())
    }
    #[cfg(not(unix))]
    options.open(path)?.write_all(text.as_bytes())
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        self.kubelet.abort();
        self.namespaces.abort();
        if let Some(kueue) = &self.kueue {
            kueue.abort();
        }
        self.server.handle.abort();
        if let Some(op) = self.operator.take() {
            op.task.abort();
        }
    }
}
