//! The integration tests of the registry client, one binary: one module per area, sharing `support`.
//!
//! A binary of its own per area would link the whole dependency tree once per area; one
//! binary links it once. Run one area with a module filter, e.g.
//! `cargo test -p tfjob-policy-oci --test integration hostile_registry::`.

mod hostile_registry;
mod registry_auth;
mod support;
