//! What TFJob pod-policy authors build on.
//!
//! A policy is a `wasm32-wasip2` component implementing one world of the `tfjob:policy@0.3.0`
//! contract (`wit/policy.wit`): `decorator`, `resource-policy`, `classifier` or `full-policy`.
//! This crate provides:
//!
//! - [`export_policy!`]: generates the bindings of the chosen world into a `bindings` module of
//!   the policy crate and exports the policy type (see "Choosing a world" below);
//! - [`wit`]: the contract's shared types (`JobContext`, `Verdict`, `PolicyError`, ...) and the
//!   `log` and `cluster` imports, generated once here so helpers in this crate accept them
//!   whatever the world;
//! - [`convert`]: JSON <-> k8s-openapi `Pod` / `ResourceRequirements` with errors naming the
//!   field, RFC 3339 timestamps, `JobContext` and `Verdict` conversions;
//! - [`settings`]: loading and validating a settings document (`{}`, `""` and `null` mean the
//!   defaults);
//! - [`pod`]: edits a decorator makes (`set_label`), checked as the API server checks them;
//! - [`log`]: structured logging into the operator's log;
//! - [`cluster`]: reads of the cluster objects the policy declared (`reads` in its manifest):
//!   typed (`namespace`, `nodes`, ...) or as JSON (`get`, `list`);
//! - re-exports of [`quantity`] (Kubernetes quantities, exact comparison, canonical spelling),
//!   the default policies' decision logic ([`logic`]), [`k8s_openapi`], [`serde_json`] and
//!   [`jiff`].
//!
//! # Choosing a world
//!
//! `wit-bindgen` defines one crate-level macro per exported interface, named after the
//! interface, so a single crate cannot hold the export bindings of several worlds that export
//! the same interface (every world exports `settings`). The policy crate therefore generates
//! its own world's bindings, through [`export_policy!`], and this crate generates only what the
//! worlds share: the `types`, `log` and `cluster` interfaces. The macro maps those onto
//! [`wit`] (wit-bindgen's `with` option), so the generated `Guest` traits take and return this
//! crate's types. The bindings only carry imports here; each policy's export macro embeds its
//! own world, so a decorator does not claim to export `classify`.
//!
//! See the crate's `README.md` for a complete policy.

pub use jiff;
pub use k8s_openapi;
pub use serde_json;
pub use tfjob_policy_logic as logic;
pub use tfjob_policy_logic::context::JobContext;
pub use tfjob_policy_logic::quantity;

/// The bindings generator, re-exported so [`export_policy!`] works without a direct dependency
/// (and so every policy uses the version this crate was built against).
#[doc(hidden)]
pub use wit_bindgen;

pub mod cluster;
pub mod convert;
pub mod log;
pub mod pod;
pub mod settings;
pub mod wit;

/// Generates the bindings of a `tfjob:policy` world into a module named `bindings` at the crate
/// root, and exports `$policy` as the component's implementation.
///
/// `world` is `"decorator"`, `"resource-policy"`, `"classifier"` or `"full-policy"`; `path` is
/// the directory holding `policy.wit`, relative to the policy crate's `Cargo.toml`. The policy
/// type implements the world's `Guest` traits, found under
/// `bindings::exports::tfjob::policy::<interface>::Guest`. Invoke it once, at the crate root,
/// in a crate that depends on this one under its own name (`tfjob_policy_sdk`).
///
/// ```ignore
/// struct MyPolicy;
/// tfjob_policy_sdk::export_policy!(world: "decorator", path: "wit", policy: MyPolicy);
/// ```
#[macro_export]
// `crate::bindings` is meant: the bindings module lives in the policy crate that invokes the
// macro, not in this one.
#[allow(clippy::crate_in_macro_def)]
macro_rules! export_policy {
    (world: $world:literal, path: $path:literal, policy: $policy:ident $(,)?) => {
        // Generated code: FFI glue with `unsafe` blocks and `export_name` attributes, which the
        // policy crate's own lints need not see.
        #[allow(unsafe_code, dead_code, missing_docs, clippy::all)]
        pub(crate) mod bindings {
            $crate::wit_bindgen::generate!({
                world: $world,
                path: $path,
                runtime_path: "tfjob_policy_sdk::wit_bindgen::rt",
                default_bindings_module: "crate::bindings",
                with: {
                    "tfjob:policy/types@0.3.0": tfjob_policy_sdk::wit::types,
                    "tfjob:policy/log@0.3.0": tfjob_policy_sdk::wit::log,
                    "tfjob:policy/cluster@0.3.0": tfjob_policy_sdk::wit::cluster,
                },
            });
        }

        #[allow(unsafe_code)]
        const _: () = {
            crate::bindings::export!($policy with_types_in crate::bindings);
        };
    };
}
