//! The `kubeflow.org/v1` TFJob API as the operator understands it.
//!
//! This crate is pure data: the serde/schemars types that deserialise Kubeflow TFJob manifests
//! unchanged ([`types`]), the label and annotation keys that form the external contract
//! ([`labels`]), the in-memory defaults and validation that turn a raw spec into a
//! [`validation::ValidJob`] the planner can trust, the CRD generated from the types ([`crd`]) with
//! the admission rules an API server checks itself ([`cel_rules`]), and
//! YAML/JSON parsing with field-path errors ([`parse`]); and [`text`], the one place where text
//! is cut to a byte budget. Nothing here talks to a cluster.

pub mod cel_rules;
pub mod crd;
pub mod labels;
pub mod parse;
pub mod replica_type;
pub mod types;
pub mod validation;

pub use replica_type::ReplicaType;
pub use types::*;
