//! The integration tests of the operator binary, one binary: one module per area, sharing `common`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-operator --test integration cel_policies::`.

mod cel_live;
mod cel_policies;
mod cli;
mod common;
mod config_file;
mod kueue_workloads;
mod language_policies;
mod leader_election;
mod loaded_memory;
mod mutating_admission_policy;
mod policy_cli;
mod policy_diff;
mod policy_new;
mod policy_pack;
mod policy_registry;
mod policy_suites;
mod read_caches;
mod real_cluster;
mod real_cluster_rbac;
mod registry_policies;
mod render_policies;
mod run_flags;
mod standard_metrics;
mod state_durability;
mod traces;
mod up;
