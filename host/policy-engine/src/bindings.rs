//! Host bindings generated from `wit/policy.wit`.
//!
//! One world with every hook is generated; a component that implements only some hooks is
//! still usable because each exported interface is looked up on its own (see
//! [`crate::engine::CompiledPolicy`]).

wasmtime::component::bindgen!({
    world: "full-policy",
    path: "../../wit",
});

pub use exports::tfjob::policy::{classify, decorate, resources, settings};
pub use tfjob::policy::types::{FailureKind, JobContext, Phase, PolicyError, Verdict};
