//! The integration tests of the cross-crate suites, one binary: one module per area, sharing `common`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-conformance --test integration admission::`.

mod admission;
mod common;
mod convergence;
mod deploy_overlays;
mod differential;
mod gang_e2e;
mod kubectl_e2e;
mod kubeflow_examples;
mod kubeflow_sdk;
mod kueue_e2e;
mod module_cycles;
mod policy_configmaps;
mod python_client;
mod rbac;
mod scenarios;
mod simulated_kubelets;
mod tenant_isolation;
