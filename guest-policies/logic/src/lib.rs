//! The default policies' decisions as pure, synchronous Rust over k8s-openapi types.
//!
//! The same code is compiled into the Wasm default policies (`guest-policies/*`) and linked
//! natively into the operator as the reference implementation the Wasm path is tested and
//! benchmarked against. Nothing here does IO or reads a clock: time comes in as an argument.

pub mod classify;
pub mod classify_settings;
pub mod context;
pub mod decorate;
pub mod duration;
pub mod json;
pub mod label_selector;
pub mod names;
pub mod never_fits;
pub mod ordered;
pub mod quantity;
pub mod resources;
pub mod settings;
pub mod text;
pub mod verdict;

/// The replica container whose exit code decides `ExitCode` restarts.
pub const DEFAULT_CONTAINER_NAME: &str = "tensorflow";
