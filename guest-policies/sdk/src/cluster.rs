//! Reads of cluster objects, over the contract's `cluster` import (0.3.0).
//!
//! A policy reads only what its manifest declares under `reads` and the operator grants, e.g.
//!
//! ```yaml
//! reads:
//!   - resource: namespaces
//!   - resource: nodes
//! ```
//!
//! Answers come from the operator's shared caches, trimmed to the documented field mask. The
//! typed helpers ([`namespace`], [`nodes`], ...) decode them into k8s-openapi types and turn a
//! failed read into a [`PolicyError`], so `?` works in a hook; the host ends such a call with
//! the read's own category (`read-denied`, `read-limit`, `unavailable`, ...) whatever the hook
//! returns, and the policy's `failurePolicy` applies. [`get`] and [`list`] give the raw JSON
//! and the cache's [`Freshness`] for other kinds (Kueue's queues, ConfigMaps, ...).
//!
//! Outside Wasm (a policy's native unit tests) there is no cluster: every read answers
//! `unavailable`. Test reading policies with `policy test --suite` and a `cluster:` section.

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::de::DeserializeOwned;

use crate::wit::PolicyError;
pub use crate::wit::cluster::{Freshness, Got, Listed, ReadError};

/// Reads one object as JSON; `namespace` is empty for a cluster-scoped resource.
pub fn get(resource: &str, namespace: &str, name: &str) -> Result<Got, ReadError> {
    imports::get(resource, namespace, name)
}

/// Lists objects whose labels match `selector` (empty: all), at most `limit` (0: every match,
/// which fails with `too-large` past what one answer may hold).
pub fn list(
    resource: &str,
    namespace: &str,
    selector: &str,
    limit: u32,
) -> Result<Listed, ReadError> {
    imports::list(resource, namespace, selector, limit)
}

/// The Namespace `name`, if it exists (`reads: [{resource: namespaces}]`).
pub fn namespace(name: &str) -> Result<Option<Namespace>, PolicyError> {
    typed_get("namespaces", "", name)
}

/// The Node `name`, if it exists (`reads: [{resource: nodes}]`).
pub fn node(name: &str) -> Result<Option<Node>, PolicyError> {
    typed_get("nodes", "", name)
}

/// The Nodes whose labels match `selector` (empty: every node, at most what one answer
/// holds).
pub fn nodes(selector: &str) -> Result<Vec<Node>, PolicyError> {
    typed_list("nodes", "", selector)
}

/// The PriorityClass `name`, if it exists (`reads: [{resource: priorityclasses}]`).
pub fn priority_class(name: &str) -> Result<Option<PriorityClass>, PolicyError> {
    typed_get("priorityclasses", "", name)
}

/// The message of a read error, whatever the case.
pub fn message(e: &ReadError) -> &str {
    match e {
        ReadError::Denied(m)
        | ReadError::Unavailable(m)
        | ReadError::TooManyReads(m)
        | ReadError::TooLarge(m)
        | ReadError::Invalid(m) => m,
    }
}

fn failed(resource: &str, e: ReadError) -> PolicyError {
    PolicyError::Failed(format!("reading {resource}: {}", message(&e)))
}

fn typed_get<T: DeserializeOwned>(
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<T>, PolicyError> {
    let got = get(resource, namespace, name).map_err(|e| failed(resource, e))?;
    got.object
        .map(|json| crate::convert::from_json(resource, json.as_str()))
        .transpose()
}

fn typed_list<T: DeserializeOwned>(
    resource: &str,
    namespace: &str,
    selector: &str,
) -> Result<Vec<T>, PolicyError> {
    let listed = list(resource, namespace, selector, 0).map_err(|e| failed(resource, e))?;
    listed
        .items
        .iter()
        .map(|json| crate::convert::from_json(resource, json))
        .collect()
}

#[cfg(target_arch = "wasm32")]
mod imports {
    pub use crate::wit::cluster::{get, list};
}

#[cfg(not(target_arch = "wasm32"))]
mod imports {
    use super::{Got, Listed, ReadError};

    fn outside() -> ReadError {
        ReadError::Unavailable("no cluster outside the operator's sandbox".into())
    }

    pub fn get(_: &str, _: &str, _: &str) -> Result<Got, ReadError> {
        Err(outside())
    }

    pub fn list(_: &str, _: &str, _: &str, _: u32) -> Result<Listed, ReadError> {
        Err(outside())
    }
}
