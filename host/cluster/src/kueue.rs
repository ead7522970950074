//! A simulated Kueue (`kueue.x-k8s.io/v1beta2`) working directly on the [`Store`].
//!
//! Jobs queued with Kueue wait suspended until Kueue admits their Workload into a ClusterQueue
//! with quota; no Kueue can run on the development and CI machines, so the embedded cluster
//! brings its own. It serves the Workload, ClusterQueue, LocalQueue and ResourceFlavor kinds
//! ([`crds`], unless Kueue's real CRDs are served already), admits pending Workloads by quota
//! and flavor, evicts them when deactivated or when their queue is drained, and keeps the
//! queues' counts and usage in their status ([`quota`], [`status`]), with Events on the
//! Workloads. With [`KueueConfig::integration`] it also plays Kueue's `kubeflow.org/tfjob`
//! integration ([`integration`]): a webhook suspends TFJobs labelled
//! `kueue.x-k8s.io/queue-name` at creation, each gets a Workload, admission resumes the job
//! with its flavors' node selectors and tolerations, eviction suspends it again, and a finished
//! job finishes its Workload.
//!
//! Not simulated: cohorts, borrowing and lending, preemption, fair sharing, partial admission,
//! admission checks (ProvisioningRequest, MultiKueue), topology-aware scheduling,
//! WorkloadPriorityClasses, LimitRanges and RuntimeClass overheads, `waitForPodsReady`, and
//! the integrations of other job kinds. A ResourceFlavor a ClusterQueue names that does not
//! exist makes that flavor unusable, not the whole queue inactive.
//!
//! The decisions are pure ([`quota`], [`status`], [`integration`]); [`controller`] is the one
//! loop that reads the store and writes the decisions, so admitting and releasing quota never
//! race each other.

pub mod controller;
pub mod crds;
pub mod integration;
pub mod objects;
pub mod quota;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use crate::error::ApiError;
use crate::storage::store::Store;

/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";

/// The version the simulation serves and writes.
pub const VERSION: &str = "v1beta2";

/// Who the simulation's Events come from.
pub const COMPONENT: &str = "kueue-admission";

/// What the simulated Kueue does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KueueConfig {
    /// Play Kueue's built-in TFJob integration: the webhook that suspends labelled TFJobs, one
    /// Workload per such job, the job resumed on admission and suspended on eviction. Off
    /// (the default, as in Kueue 0.19) when something else, such as the operator, creates the
    /// Workloads and acts on their admission.
    pub integration: bool,
    /// How often the loop looks again without being woken by a change (a safety net: changes
    /// to the objects it reads wake it at once).
    pub resync: Duration,
}

impl Default for KueueConfig {
    fn default() -> KueueConfig {
        KueueConfig {
            integration: false,
            resync: Duration::from_secs(1),
        }
    }
}

/// Serves the Kueue CRDs that are not served yet, as installing Kueue does: stored (so kubectl
/// and persistence see them) and Established. CRDs already served, Kueue's real ones for
/// instance, are left as they are.
pub fn install_crds(store: &Store) -> Result<(), ApiError> {
    for (plural, crd) in crds::all() {
        if store.resource(GROUP, plural).is_none() {
            crate::storage::crd::install(store, crd)?;
        }
    }
    Ok(())
}

/// Installs what must be in place before the first client request: the CRDs, and with the
/// integration the TFJob webhook.
pub fn prepare(store: &Store, config: &KueueConfig) -> Result<(), ApiError> {
    if config.integration {
        store.add_webhook(
            integration::TFJOB_GROUP,
            integration::TFJOB_PLURAL,
            "kueue-tfjob",
            integration::webhook(),
        );
    }
    install_crds(store)
}

/// Runs the simulation in the background until the handle is aborted (its state lives in the
/// task). The CRDs and the webhook are installed before the task starts, so a client applying
/// queues or creating jobs right after finds them.
pub fn spawn(store: Arc<Store>, config: KueueConfig) -> tokio::task::JoinHandle<()> {
    if let Err(e) = prepare(&store, &config) {
        tracing::error!(error = %e, "cannot serve the Kueue CRDs");
    }
    tokio::spawn(run(store, config, std::future::pending()))
}

/// Runs the simulation until `shutdown` resolves.
pub async fn run(store: Arc<Store>, config: KueueConfig, shutdown: impl Future<Output = ()>) {
    if let Err(e) = prepare(&store, &config) {
        tracing::error!(error = %e, "cannot serve the Kueue CRDs");
    }
    controller::Controller::new(store, config)
        .run(shutdown)
        .await;
}
