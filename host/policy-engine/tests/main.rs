//! The integration tests of the policy engine, one binary: one module per area, sharing `common`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-policy-engine --test integration cel_configmaps::`.

mod cel_configmaps;
mod cel_policies;
mod cluster_reads;
mod common;
mod compiled_cache;
mod configmap;
mod default_policies;
mod hostile;
mod preinit;
