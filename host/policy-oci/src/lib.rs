//! Policy modules in OCI registries.
//!
//! A policy ConfigMap may name its module by reference (`module: oci://HOST/REPO@sha256:...`)
//! instead of carrying it, so a module can be of any size and ship the way platform teams
//! already ship artefacts. This crate is everything between such a reference and the bytes
//! the policy engine compiles:
//!
//! - [`reference`]: parsing `oci://HOST[:PORT]/REPO[:TAG][@sha256:...]`;
//! - [`artifact`]: the Wasm OCI artifact and cosign signature layouts, built and checked;
//! - [`credentials`]: registry credentials from a Docker config (a dockerconfigjson Secret);
//! - [`client`]: the registry client, every request bounded in time, bytes and redirects;
//! - [`transfer`]: push and verified pull;
//! - [`cache`]: pulled modules on disk, verified when read back.
//!
//! Everything but `client`, `transfer` and `cache` is pure.

pub mod artifact;
pub mod cache;
pub mod client;
pub mod credentials;
pub mod reference;
pub mod transfer;

pub use cache::{ArtifactCache, CacheError};
pub use client::{Limits, RegistryClient, RegistryError};
pub use credentials::Credentials;
pub use reference::{ModuleRef, ReferenceError};
pub use transfer::{PullError, Pulled, Pushed, Signature, pull, push};
