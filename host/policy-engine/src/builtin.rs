//! The components built into the operator, as bytes: the default policies and the CEL
//! evaluator (built from `guest-policies/` by the build script). The operator's own code, so
//! the module size bound, set for what policy authors ship, does not apply to them.
//!
//! A leaf module: the engine asks it whether bytes are built in, and [`crate::defaults`]
//! describes the default policies over it.

/// `default-decorate`.
pub const DEFAULT_DECORATE_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_decorate.wasm"));
/// `default-resources`.
pub const DEFAULT_RESOURCES_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_resources.wasm"));
/// `default-classify`.
pub const DEFAULT_CLASSIFY_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_default_classify.wasm"));

/// The CEL policy's evaluator (`guest-policies/cel-guest`): a component exporting every hook
/// that runs the CEL document it is given as settings.
pub const CEL_POLICY_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tfjob_cel_policy.wasm"));

/// Whether `wasm` is one of the components built into the operator.
pub fn is_builtin(wasm: &[u8]) -> bool {
    [
        DEFAULT_DECORATE_WASM,
        DEFAULT_RESOURCES_WASM,
        DEFAULT_CLASSIFY_WASM,
        CEL_POLICY_WASM,
    ]
    .contains(&wasm)
}
