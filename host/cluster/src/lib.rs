//! An embedded Kubernetes API server for development and end-to-end tests.
//!
//! No real API server can run on the development and CI machines, so the project brings its own: an
//! in-process server that speaks the Kubernetes HTTP API well enough that kube-rs talks to it
//! unchanged. It is laid out like the system it imitates:
//!
//! - [`http`]: the front (routing, discovery, query parameters, tables, protobuf, OpenAPI,
//!   `pods/log`, request accounting);
//! - [`auth`]: authentication (bearer tokens, TokenRequests, impersonation) and authorization
//!   (RBAC), applied to every request;
//! - [`admission`]: defaults, the CEL rules of custom resources' schemas, the owner-reference
//!   permission rule;
//! - [`storage`]: the versioned store, watch history, selectors, patches, allocations, custom
//!   resource types and the state file;
//! - [`kubelet`]: the scheduler and simulated nodes that run pods by the scripts in their
//!   annotations and keep their containers' output;
//! - [`namespaces`]: what the controller manager keeps in every namespace (its `default`
//!   ServiceAccount);
//! - [`kueue`]: a simulated Kueue that admits Workloads by quota and, optionally, queues
//!   TFJobs as Kueue's TFJob integration does;
//! - [`faults`]: API errors, latency and cut watches injected for tests of how clients cope.

pub mod admission;
pub mod auth;
pub mod error;
pub mod faults;
pub mod http;
pub mod kubelet;
pub mod kueue;
pub mod namespaces;
pub mod storage;

pub use error::ApiError;
pub use storage::store::{Part, ResourceType, Store};
