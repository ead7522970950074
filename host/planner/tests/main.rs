//! The integration tests of the planner, one binary: one module per area, sharing `common`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-planner --test integration plan_gang::`.

mod common;
mod plan_gang;
mod plan_kueue;
mod plan_lifecycle;
mod plan_restarts;
mod plan_run_policy;
mod plan_verdicts;
