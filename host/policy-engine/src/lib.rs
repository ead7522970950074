//! The sandboxed WebAssembly policy engine.
//!
//! Policies are components implementing `wit/policy.wit`. The [`engine::PolicyEngine`] compiles
//! each once per digest (after [`structure`] checked its shape) and runs every call in a fresh
//! store with a deadline (timers bounded by [`clock`]), a memory cap and input/output size caps,
//! with no ambient authority, from a copy pre-initialised for the policy's settings once
//! `preinit.rs` made one. The [`guard`] checks decorated pods against the paths and the
//! [`capabilities`] a policy was granted, the [`verdict_guard`] checks classifications against
//! the pod, [`signature`] verifies signed modules, the [`registry`] holds the active policies as
//! an atomically swappable snapshot, and
//! [`policies::WasmPolicies`] plugs all of it into the planner's policy seam, refusing calls of
//! a policy whose [`breaker`] tripped after failing again and again. Policies come
//! embedded ([`defaults`], over the [`builtin`] components), from local files ([`local`]) or
//! from labelled ConfigMaps ([`configmap`], CEL documents among them: [`cel_configmap`]), all
//! through the same activation; a version's pre-initialised copies last while versions use
//! their settings ([`settings_uses`]). With a [`compiled_cache`], compiled code
//! outlives the process. Policies that declare cluster reads ([`cluster_reads`]) are answered,
//! call by call within bounds ([`cluster_access`]), from shared caches of trimmed objects
//! ([`cluster_cache`], [`cluster_objects`]) that the operator's watches fill.

pub mod bindings;
pub mod breaker;
pub mod builtin;
pub mod capabilities;
pub mod cel_configmap;
pub mod clock;
pub mod cluster_access;
pub mod cluster_cache;
pub mod cluster_objects;
pub mod cluster_reads;
pub mod compiled_cache;
pub mod config;
pub mod configmap;
pub mod defaults;
pub mod engine;
pub mod error;
pub mod field_diff;
pub mod function_cache;
pub mod guard;
pub mod hook_call;
pub mod loaded_budget;
pub mod local;
pub mod metrics;
mod object_text;
mod preinit;
pub mod read_provenance;
pub mod resident;
mod sandbox;
pub mod settings_uses;
pub mod signature;

pub use breaker::{BreakerConfig, Breakers};
pub use config::{CallLimits, LimitError, SandboxLimits};
pub use engine::{CompiledPolicy, Hook, LimitedEngine, PolicyEngine};
pub use error::{Category, EngineSetupError, EvalError};
pub mod policies;
pub mod registry;
pub mod structure;
pub mod tenants;
pub mod verdict_cache;
pub mod verdict_guard;

pub use metrics::PolicyMetrics;
pub use policies::{APPLIED_ANNOTATION, WasmPolicies};
pub use registry::{
    ActivationError, ActivePolicy, FailurePolicy, JobSelector, LabelExpression, ManifestError,
    PolicyManifest, PolicyMode, PolicySet, Registry, SelectorOperator, activate, activate_checked,
};
