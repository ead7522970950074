//! Policies from ConfigMaps, swapped in while the operator runs.
//!
//! Platform teams ship a policy as a ConfigMap labelled `policy.tfjob.dev/policy=true` in a
//! policy namespace. [`watch::PolicySync`] watches those ConfigMaps, loads each new version off
//! the async executor (size limits, decompression, signature when keys are trusted, digest
//! pin, compile, hook check, `validate-settings`, all in `tfjob_policy_engine::configmap`), and
//! swaps the registry
//! snapshot atomically: reconciles in flight finish with the snapshot they started with. A
//! version that fails keeps the previous one serving ([`sources`] holds those rules), and every
//! ConfigMap carries its status in the `policy.tfjob.dev/status` annotation. [`scope`] bounds what
//! a ConfigMap may reach by the namespace it lives in. [`read_caches`] keeps one watch per
//! resource the active policies read, feeding the caches their cluster reads are answered from.

pub mod metrics;
pub mod pulls;
pub mod read_caches;
pub mod scope;
pub mod sources;
pub mod watch;

pub use metrics::SyncMetrics;
pub use scope::Scope;
pub use sources::{Attempt, Composition, SourceKey, Sources};
pub use watch::{PolicySync, SyncConfig, fingerprint};
