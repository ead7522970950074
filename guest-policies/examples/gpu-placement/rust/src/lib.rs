//! gpu-placement in Rust: a pod that asks for an NVIDIA GPU tolerates the GPU nodes' taint and
//! is placed on GPU nodes (`nvidia.com/gpu.present: "true"`, the label NVIDIA's feature
//! discovery puts on them). A pod that tolerates the taint already keeps its tolerations as
//! they are; its own node selector is kept beside the GPU one.
//!
//! It takes no settings. The same policy is written in CEL (`deploy/examples/cel/policies/
//! gpu-placement.yaml`), and one suite (`../suite.yaml`) holds both to the same behaviour: what
//! a platform team gains or loses by choosing either can be seen side by side.

use tfjob_policy_sdk::convert;
use tfjob_policy_sdk::k8s_openapi::api::core::v1::{Pod, Toleration};
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};

const GPU: &str = "nvidia.com/gpu";
const GPU_NODE_LABEL: &str = "nvidia.com/gpu.present";

/// Its settings: none, so that a setting meant for something else is refused, not ignored.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoSettings {}

impl PolicySettings for NoSettings {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

struct GpuPlacement;

tfjob_policy_sdk::export_policy!(world: "decorator", path: "../../../../wit", policy: GpuPlacement);

impl bindings::exports::tfjob::policy::settings::Guest for GpuPlacement {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<NoSettings>(&settings)
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for GpuPlacement {
    fn decorate_pod(
        _ctx: JobContext,
        _settings: String,
        pod: String,
    ) -> Result<String, PolicyError> {
        let mut pod = convert::pod_from_json(&pod)?;
        if asks_for_a_gpu(&pod) {
            place_on_gpu_nodes(&mut pod);
        }
        convert::pod_to_json(&pod)
    }
}

fn asks_for_a_gpu(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|limits| limits.contains_key(GPU))
    })
}

fn place_on_gpu_nodes(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.iter().any(|t| t.key.as_deref() == Some(GPU)) {
        tolerations.push(Toleration {
            key: Some(GPU.into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        });
    }
    spec.node_selector
        .get_or_insert_with(Default::default)
        .insert(GPU_NODE_LABEL.into(), "true".into());
}
