//! CEL policies delivered as ConfigMaps, through the operator's load pipeline and its policy
//! seam: a document under `policy.cel.yaml` decorates pods behind the same guard as a module;
//! a document that does not compile is refused at the `document` step naming the expression
//! with a caret; a document that mixes in a module or is unsigned under trusted keys is refused
//! before it runs; and no CEL mutation can touch what the operator owns.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use common::operator_pod;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::{Value, json};
use tfjob_planner::{PodContext, PodPolicies};
use tfjob_policy_engine::cel_configmap::{CEL_KEY, CEL_SIGNATURE_KEY};
use tfjob_policy_engine::configmap::{self, LoadError, PolicyForm, Signed};
use tfjob_policy_engine::signature::{SigningKey, TrustedKeys};
use tfjob_policy_engine::{
    Category, Hook, PolicyEngine, PolicyManifest, PolicySet, Registry, SandboxLimits, WasmPolicies,
};

fn engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(PolicyEngine::new(SandboxLimits::default()).expect("engine starts"))
    })
}

const GPU_TOLERATIONS: &str = r#"
matchConditions:
- name: gpu-pods
  expression: "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
mutations:
- patchType: ApplyConfiguration
  applyConfiguration:
    expression: >-
      Object{
        metadata: Object.metadata{labels: {'accelerator': 'nvidia'}},
        spec: Object.spec{tolerations: [Object.spec.tolerations{key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule'}]}
      }
"#;

/// The ConfigMap `policy pack --cel` makes of `document`.
fn packed(name: &str, document: &str) -> ConfigMap {
    let manifest = PolicyManifest {
        name: name.into(),
        ..PolicyManifest::default()
    };
    configmap::pack_cel(&manifest, document, "tfjob-system").expect("packs")
}

fn ctx() -> PodContext {
    PodContext::single_worker("ml", "mnist")
}

/// A pod as the operator builds it, asking for a GPU.
fn gpu_pod() -> Value {
    let mut pod = operator_pod();
    pod["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}});
    pod
}

fn shape(cm: &ConfigMap) -> Result<Value, tfjob_planner::PolicyError> {
    let active = configmap::load(engine(), cm).expect("the CEL policy loads");
    let pod: Pod = serde_json::from_value(gpu_pod()).unwrap();
    WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
    .shape_pod(&ctx(), pod)
    .map(|shaped| serde_json::to_value(shaped.pod).unwrap())
}

#[test]
fn a_cel_configmap_decorates_gpu_pods_through_the_policy_seam() {
    let cm = packed("gpu-tolerations", GPU_TOLERATIONS);
    let source = configmap::read_configmap(&cm).unwrap();
    assert_eq!(source.form, PolicyForm::Cel);
    assert_eq!(source.manifest.hooks, vec![Hook::Decorate]);
    assert_eq!(
        source.digest,
        tfjob_policy_engine::defaults::cel_policy_digest()
    );

    let pod = shape(&cm).unwrap();
    assert_eq!(pod["metadata"]["labels"]["accelerator"], "nvidia");
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // What the operator set is still there.
    assert_eq!(
        pod["metadata"]["labels"]["training.kubeflow.org/replica-index"],
        "0"
    );
    assert_eq!(pod["spec"]["containers"][0]["env"][0]["name"], "TF_CONFIG");
}

#[test]
fn a_document_that_does_not_compile_is_refused_naming_the_expression_and_position() {
    let broken = GPU_TOLERATIONS.replace("operator: 'Exists'", "operator: 'Exists'}");
    let err = configmap::load(engine(), &packed("broken", &broken)).unwrap_err();
    assert_eq!(err.step(), "document", "{err}");
    let text = err.to_string();
    assert!(text.starts_with("data key policy.cel.yaml: "), "{text}");
    assert!(
        text.contains("mutations[0].applyConfiguration.expression"),
        "{text}"
    );
    assert!(text.contains('^'), "{text}");
    assert!(matches!(err, LoadError::CelDocument(ref e) if e.category == Category::Settings));

    let misspelt = GPU_TOLERATIONS.replace("matchConditions", "matchCondition");
    let err = configmap::load(engine(), &packed("misspelt", &misspelt)).unwrap_err();
    assert!(err.to_string().contains("matchCondition"), "{err}");
}

#[test]
fn no_cel_mutation_touches_what_the_operator_owns() {
    for (patch, reported) in [
        (
            "[JSONPatch{op: 'replace', path: '/metadata/labels/training.kubeflow.org~1replica-index', value: '7'}]",
            "metadata.labels[training.kubeflow.org/replica-index]",
        ),
        (
            "[JSONPatch{op: 'remove', path: '/metadata/ownerReferences'}]",
            "metadata.ownerReferences",
        ),
        (
            "[JSONPatch{op: 'replace', path: '/spec/containers/0/env/0/value', value: '{\"cluster\": {}}'}]",
            "TF_CONFIG",
        ),
        (
            "[JSONPatch{op: 'add', path: '/spec/containers/0/env/-', value: {'name': 'TOKEN', 'valueFrom': {'secretKeyRef': {'name': 'db', 'key': 'password'}}}}]",
            "secret",
        ),
        (
            "[JSONPatch{op: 'replace', path: '/spec/containers/0/image', value: 'evil:latest'}]",
            "spec.containers[0].image",
        ),
    ] {
        let document = format!(
            "mutations:\n- patchType: JSONPatch\n  jsonPatch:\n    expression: {}\n",
            serde_json::to_string(patch).unwrap()
        );
        let err = shape(&packed("protected", &document)).unwrap_err();
        assert_eq!(err.category, Category::GuardViolation, "{patch}: {err}");
        assert!(err.message.contains(reported), "{patch}: {err}");
    }
}

#[test]
fn a_bad_patch_path_fails_the_call_naming_the_mutation() {
    let document = "mutations:\n- patchType: JSONPatch\n  jsonPatch:\n    expression: \
                    \"[JSONPatch{op: 'replace', path: '/spec/nothing/here', value: 1}]\"\n";
    let err = shape(&packed("bad-path", document)).unwrap_err();
    assert!(err.message.contains("mutations[0]"), "{err}");
    assert!(err.message.contains("/spec/nothing/here"), "{err}");
}

#[test]
fn a_cel_document_is_never_mixed_with_a_module() {
    let mut with_module = packed("mixed", GPU_TOLERATIONS);
    with_module.binary_data = Some(BTreeMap::from([(
        configmap::WASM_KEY.to_owned(),
        ByteString(b"\0asm".to_vec()),
    )]));
    let err = configmap::read_configmap(&with_module).unwrap_err();
    assert_eq!(err.step(), "ambiguous");
    assert!(
        err.to_string().contains("binaryData key policy.wasm"),
        "{err}"
    );

    let mut with_reference = packed("mixed", GPU_TOLERATIONS);
    let data = with_reference.data.as_mut().unwrap();
    data.insert(configmap::MODULE_KEY.into(), "oci://registry/p:1".into());
    let err = configmap::module_reference(&with_reference).unwrap_err();
    assert!(
        err.to_string().contains("data key module are both set"),
        "{err}"
    );

    let mut module_signature = packed("mixed", GPU_TOLERATIONS);
    configmap::set_signature(&mut module_signature, "c2ln");
    let data = module_signature.data.as_mut().unwrap();
    let signature = data
        .remove(CEL_SIGNATURE_KEY)
        .expect("filed under the CEL key");
    data.insert(configmap::SIGNATURE_KEY.into(), signature);
    let err = configmap::read_configmap(&module_signature).unwrap_err();
    assert!(
        err.to_string().contains("goes under policy.cel.yaml.sig"),
        "{err}"
    );
}

#[test]
fn under_trusted_keys_a_cel_policy_loads_only_with_the_documents_signature() {
    let pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBhHz2cQkF8mJ2Zk1p3lJq8tW6vQx0yJ0sWc3mXg4hRk\n-----END PRIVATE KEY-----\n";
    let key = SigningKey::from_pem("platform.pem", pem).expect("an Ed25519 key");
    let mut keys = TrustedKeys::none();
    keys.insert(key.public_key().clone());

    let unsigned = packed("signed", GPU_TOLERATIONS);
    let err = configmap::load_verified(engine(), &unsigned, &keys).unwrap_err();
    assert_eq!(err.step(), "signature");
    assert!(
        err.to_string().contains("policy.cel.yaml.sig is missing"),
        "{err}"
    );

    let mut signed = unsigned.clone();
    configmap::set_signature(&mut signed, &key.sign(GPU_TOLERATIONS.as_bytes()));
    let (_, by) = configmap::load_verified(engine(), &signed, &keys).expect("loads");
    assert_eq!(by, Signed::By(key.public_key().id().clone()));

    // The signature covers the document: an edit after signing is refused.
    let mut edited = signed.clone();
    let data = edited.data.as_mut().unwrap();
    let document = data[CEL_KEY].replace("nvidia", "amd");
    data.insert(CEL_KEY.into(), document);
    let err = configmap::load_verified(engine(), &edited, &keys).unwrap_err();
    assert!(err.to_string().contains("does not verify"), "{err}");
}
