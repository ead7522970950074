//! The integration tests of the embedded cluster, one binary: one module per area, sharing `common`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-cluster --test integration authorization::`.

mod authorization;
mod common;
mod deletion;
mod faults;
mod gang;
mod kubectl;
mod kubelet;
mod kueue;
mod operator_e2e;
mod python_client;
mod query_semantics;
