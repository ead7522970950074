//! An embedded Kubernetes API server for development and end-to-end tests.
//!
//! No real API server can run on the development and CI machines, so the project brings its own: an
//! in-process server that speaks the Kubernetes HTTP API well enough that kube-rs talks to it
//! unchanged. [`store`] holds the objects and the server-side rules; [`server`] is the HTTP front
//! (with [`table`], [`openapi`] and [`protobuf`] for kubectl, [`crd`] for custom resources and
//! [`cel_admission`] for the CEL rules and bounds of their schemas);
//! [`kubelet`] schedules pods onto simulated nodes and runs them by the scripts in their
//! annotations, writing their containers' output into [`logs`], which `pods/log` ([`pod_log`])
//! serves; [`persist`] keeps the objects in a file across restarts. For tests of how clients cope
//! with a misbehaving server, [`faults`] injects API errors, latency and cut watches, and
//! [`requests`] counts requests by verb, resource and client. [`access`] authenticates every
//! request by its bearer token ([`tokens`], TokenRequests included) or as the user it
//! impersonates ([`impersonation`]) and, when asked,
//! authorizes it by the stored RBAC objects ([`rbac`]) and the owner-reference permission rule
//! ([`owner_refs`]).

pub mod access;
pub mod allocations;
pub mod cel_admission;
pub mod crd;
mod debug;
pub mod defaults;
pub mod error;
pub mod faults;
mod http;
pub mod impersonation;
pub mod kubelet;
pub mod logs;
pub mod openapi;
pub mod owner_refs;
pub mod persist;
pub mod pod_log;
pub mod protobuf;
pub mod query;
pub mod rbac;
pub mod requests;
pub mod selector;
pub mod server;
pub mod store;
pub mod strategic_merge;
pub mod table;
pub mod tokens;

pub use error::ApiError;
pub use store::{ResourceType, Store};
