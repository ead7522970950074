//! Built-in native policies: the default behaviour written in Rust.
//!
//! They serve as the operator's policies until the Wasm engine provides its own, and later as the
//! reference the Wasm default policies are benchmarked and cross-checked against.

pub use tfjob_policy_logic::classify::{ClassifySettings, classify_pod};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::policy::{Classified, PodContext, PodPolicies, PolicyError, ShapedPod, Verdict};

/// The name native decisions are attributed to in conditions and events.
pub const NATIVE_POLICY_NAME: &str = "builtin";

/// Native policies: pods are created as built, and classified by [`classify_pod`].
#[derive(Clone, Debug, Default)]
pub struct NativePolicies {
    pub classify: ClassifySettings,
}

impl PodPolicies for NativePolicies {
    fn shape_pod(&self, _ctx: &PodContext, pod: Pod) -> Result<ShapedPod, PolicyError> {
        Ok(ShapedPod {
            pod,
            applied: Vec::new(),
            skipped: Vec::new(),
            notes: Vec::new(),
        })
    }

    fn classify(
        &self,
        _ctx: &PodContext,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<Classified, PolicyError> {
        Ok(Classified::quietly(Verdict::decided_by(
            classify_pod(&self.classify, pod, now),
            NATIVE_POLICY_NAME,
        )))
    }
}
