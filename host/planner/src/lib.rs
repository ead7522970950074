//! Pure, synchronous TFJob reconcile planning.
//!
//! Given a TFJob, the pods and services it owns, the current time and the operator's settings,
//! [`plan::plan`] computes every action one reconcile must take: pods and services to create or
//! delete, the new status, events, metric transitions and when to look again. It never performs
//! IO; the pod-level decisions go through the [`policy::PodPolicies`] seam so that the Wasm
//! policy engine plugs in without changing the planner; [`gang`] describes the PodGroup of a
//! gang-scheduled job and [`kueue`] the Workload of a job Kueue queues; [`call_watch`] lets the async side stop
//! waiting on a policy call that outlived its bound.

pub mod call_watch;
pub mod conditions;
pub mod events;
pub mod gang;
pub mod kueue;
pub mod names;
pub mod native;
pub mod objects;
pub mod plan;
pub mod policy;
pub mod problems;
pub mod tf_config;

pub use plan::{
    Deletion, DeletionCause, EventType, JobEvent, Plan, PlanError, PlanInput, Settings, Skip,
    Transition, plan,
};
pub use policy::{
    Classified, Hook, PodContext, PodPolicies, PolicyError, PolicyNote, ShapedPod, Verdict,
    VerdictPhase,
};

/// The `tracing` target of the spans a trace is made of (reconciles, seat waits, policy calls,
/// pulls). They are at `debug`, under a target of their own, so that logging at `info` neither
/// pays for them nor shows them, while the trace exporter enables this target alone.
pub const SPAN_TARGET: &str = "tfjob_spans";
