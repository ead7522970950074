//! Policy ConfigMaps through the real load pipeline: the embedded default guests packed into
//! ConfigMaps (plain and gzip) load and run; a ConfigMap policy named like a default replaces
//! it; and every kind of bad ConfigMap is refused at the step that catches it, naming the key or
//! manifest field; with trusted keys, a policy loads only with a signature by one of them.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, OnceLock};

use flate2::Compression;
use flate2::write::GzEncoder;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::json;
use sha2::{Digest, Sha256};
use tfjob_planner::{PodContext, PodPolicies};
use tfjob_policy_engine::configmap::Signed;
use tfjob_policy_engine::configmap::{self, LoadError, WASM_GZIP_KEY, WASM_KEY};
use tfjob_policy_engine::defaults::{self, DEFAULTS, DefaultPolicy};
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

fn default_named(name: &str) -> &'static DefaultPolicy {
    defaults::find(name).expect("a default policy")
}

/// The ConfigMap `policy pack` makes of a default policy, with its operator settings.
fn packed(d: &DefaultPolicy, gzip: bool) -> ConfigMap {
    configmap::pack(defaults::manifest(d), d.wasm, "tfjob-system", gzip).expect("packs")
}

fn with_manifest(mut cm: ConfigMap, edit: impl FnOnce(&mut PolicyManifest)) -> ConfigMap {
    let data = cm.data.as_mut().expect("data");
    let mut manifest: PolicyManifest =
        serde_yaml_ng::from_str(&data[configmap::MANIFEST_KEY]).expect("manifest parses");
    edit(&mut manifest);
    data.insert(
        configmap::MANIFEST_KEY.into(),
        serde_yaml_ng::to_string(&manifest).unwrap(),
    );
    cm
}

fn with_module(mut cm: ConfigMap, key: &str, bytes: Vec<u8>) -> ConfigMap {
    cm.binary_data = Some(BTreeMap::from([(key.to_owned(), ByteString(bytes))]));
    cm
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn ctx() -> PodContext {
    PodContext::single_worker("ml", "mnist")
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mnist-worker-0", "namespace": "ml"},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2",
            "resources": {"limits": {"gpu": "1"}}}]}
    }))
    .unwrap()
}

#[test]
fn every_default_policy_loads_from_a_configmap_plain_and_gzip() {
    for d in &DEFAULTS {
        for gzip in [false, true] {
            let cm = packed(d, gzip);
            let key = if gzip { WASM_GZIP_KEY } else { WASM_KEY };
            let stored = &cm.binary_data.as_ref().unwrap()[key].0;
            if gzip {
                assert!(
                    stored.len() < d.wasm.len() / 2,
                    "{}: gzip shrinks it",
                    d.name
                );
            }
            let active = configmap::load(engine(), &cm)
                .unwrap_or_else(|e| panic!("{} gzip={gzip}: {e}", d.name));
            assert_eq!(active.name(), d.name);
            assert_eq!(active.manifest.hooks, vec![d.hook]);
            assert_eq!(active.compiled.digest, sha256(d.wasm));
            assert_eq!(active.manifest.sha256.as_deref(), Some(&*sha256(d.wasm)));
            assert_eq!(active.manifest.settings, defaults::default_settings(d));
            assert_eq!(active.limits, SandboxLimits::default().call_limits());
        }
    }
}

#[test]
fn a_module_is_compiled_once_per_digest() {
    let d = default_named("default-classify");
    let plain = configmap::load(engine(), &packed(d, false)).unwrap();
    let gzip = configmap::load(engine(), &packed(d, true)).unwrap();
    assert!(Arc::ptr_eq(&plain.compiled, &gzip.compiled));
    // Concurrent loads of one module share one compilation.
    let loads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| configmap::load(engine(), &packed(d, true)).unwrap()))
        .collect();
    for load in loads {
        assert!(Arc::ptr_eq(&load.join().unwrap().compiled, &plain.compiled));
    }
}

#[test]
fn modules_no_policy_uses_can_be_evicted() {
    let engine = PolicyEngine::new(SandboxLimits::default()).unwrap();
    let d = default_named("default-resources");
    let held = configmap::load(&engine, &packed(d, true)).unwrap();
    drop(configmap::load(&engine, &packed(default_named("default-classify"), true)).unwrap());
    assert_eq!(engine.evict_unused(), 1, "only the module nothing holds");
    assert_eq!(engine.evict_unused(), 0);
    let again = configmap::load(&engine, &packed(d, false)).unwrap();
    assert!(Arc::ptr_eq(&held.compiled, &again.compiled), "still cached");
}

#[test]
fn a_configmap_policy_named_like_a_default_replaces_it() {
    let d = default_named("default-resources");
    let cm = with_manifest(packed(d, true), |m| {
        m.settings = json!({"defaults": {"requests": {"cpu": "250m"}}});
    });
    let replacement = configmap::load(engine(), &cm).unwrap();
    let mut active = defaults::load_defaults(engine(), &Default::default()).unwrap();
    active.push(replacement);
    let set = PolicySet::new(active);
    assert_eq!(set.all().len(), DEFAULTS.len(), "replaced, not added");
    let policies = WasmPolicies::new(Arc::clone(engine()), Arc::new(Registry::new(set)));
    let shaped = policies.shape_pod(&ctx(), pod()).unwrap();
    let container = &shaped.pod.spec.unwrap().containers[0];
    let resources = serde_json::to_value(container.resources.as_ref().unwrap()).unwrap();
    assert_eq!(resources["requests"]["cpu"], "250m", "{resources}");
    assert_eq!(resources["limits"]["nvidia.com/gpu"], "1", "{resources}");
}

#[test]
fn per_policy_limits_within_the_maximum_are_applied() {
    let d = default_named("default-decorate");
    let cm = with_manifest(packed(d, true), |m| {
        m.deadline_ms = Some(40);
        m.memory_mib = Some(32);
    });
    let active = configmap::load(engine(), &cm).unwrap();
    assert_eq!(active.limits.deadline, std::time::Duration::from_millis(40));
    assert_eq!(active.limits.memory, 32 << 20);

    for (field, edit) in [
        (
            "deadlineMs",
            Box::new(|m: &mut PolicyManifest| m.deadline_ms = Some(51))
                as Box<dyn FnOnce(&mut PolicyManifest)>,
        ),
        ("memoryMib", Box::new(|m| m.memory_mib = Some(65))),
    ] {
        let err = configmap::load(engine(), &with_manifest(packed(d, true), edit)).unwrap_err();
        assert_eq!(err.step(), "limits", "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("data key policy.yaml: manifest field {field}: ")),
            "{err}"
        );
    }
}

#[test]
fn a_corrupt_module_is_a_compile_error() {
    let d = default_named("default-decorate");
    let mut module = d.wasm.to_vec();
    module.truncate(module.len() / 2);
    // Unpinned, so that the pipeline gets as far as compiling it.
    let cm = with_manifest(with_module(packed(d, false), WASM_KEY, module), |m| {
        m.sha256 = None
    });
    let err = configmap::load(engine(), &cm).unwrap_err();
    assert_eq!(err.step(), "compile", "{err}");
    let LoadError::Compile(inner) = &err else {
        panic!("{err}")
    };
    assert_eq!(inner.category, Category::Link);
}

#[test]
fn a_module_missing_a_declared_hook_is_refused() {
    // The classification default declared as a decoration policy.
    let d = default_named("default-classify");
    let cm = with_manifest(packed(d, true), |m| {
        m.hooks = vec![Hook::Classify, Hook::Decorate]
    });
    let err = configmap::load(engine(), &cm).unwrap_err();
    assert_eq!(
        err,
        LoadError::Hooks {
            hook: Hook::Decorate
        }
    );
    assert_eq!(err.step(), "hooks");
    assert!(
        err.to_string()
            .contains("does not export tfjob:policy/decorate@0.3.0"),
        "{err}"
    );
}

#[test]
fn settings_the_policy_refuses_are_a_settings_error() {
    let d = default_named("default-resources");
    let cm = with_manifest(packed(d, false), |m| {
        m.settings = json!({"limits": {"cpu": "lots"}});
    });
    let err = configmap::load(engine(), &cm).unwrap_err();
    assert_eq!(err.step(), "settings", "{err}");
    let LoadError::Settings(inner) = &err else {
        panic!("{err}")
    };
    assert_eq!(inner.category, Category::Settings);
    assert!(
        err.to_string()
            .starts_with("data key policy.yaml: manifest field settings: "),
        "{err}"
    );
    assert!(inner.message.contains("limits.cpu"), "{err}");
}

#[test]
fn a_module_other_than_the_pinned_one_is_refused_before_compiling() {
    let decorate = default_named("default-decorate");
    let classify = default_named("default-classify");
    let cm = with_module(packed(decorate, false), WASM_KEY, classify.wasm.to_vec());
    let err = configmap::load(engine(), &cm).unwrap_err();
    assert_eq!(
        err,
        LoadError::Digest {
            expected: sha256(decorate.wasm),
            actual: sha256(classify.wasm),
        }
    );
    assert_eq!(err.step(), "digest");
}

#[test]
fn a_gzip_bomb_is_refused_at_the_size_limit() {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..32 {
        encoder.write_all(&chunk).unwrap();
    }
    let bomb = encoder.finish().unwrap();
    let d = default_named("default-decorate");
    let err =
        configmap::load(engine(), &with_module(packed(d, true), WASM_GZIP_KEY, bomb)).unwrap_err();
    assert_eq!(err.step(), "size", "{err}");
    assert!(err.to_string().contains("policy.wasm.gz"), "{err}");
}

#[test]
fn a_module_over_the_engine_limit_is_refused_as_too_large() {
    // Within the ConfigMap format's 8 MiB, above the engine's 4 MiB: refused before compiling.
    let d = default_named("default-decorate");
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(&vec![0u8; 5 << 20]).unwrap();
    let cm = with_manifest(
        with_module(packed(d, true), WASM_GZIP_KEY, encoder.finish().unwrap()),
        |m| m.sha256 = None,
    );
    let err = configmap::load(engine(), &cm).unwrap_err();
    assert_eq!(err.step(), "size", "{err}");
    assert!(err.to_string().contains("4194304"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Signed policies

/// A P-256 and an Ed25519 signing key from fixed seeds (reproducible, no random source).
fn signing_keys(seed: &str) -> [SigningKey; 2] {
    use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
    let bytes = Sha256::digest(seed.as_bytes());
    let p256 = p256::ecdsa::SigningKey::from_slice(&bytes)
        .unwrap()
        .to_pkcs8_pem(LineEnding::LF)
        .unwrap();
    let ed25519 = ed25519_dalek::SigningKey::from_bytes(&bytes.into())
        .to_pkcs8_pem(LineEnding::LF)
        .unwrap();
    [p256, ed25519].map(|pem| SigningKey::from_pem(seed, &pem).expect("a signing key"))
}

fn trusting(keys: &[&SigningKey]) -> TrustedKeys {
    let mut trusted = TrustedKeys::none();
    for key in keys {
        trusted.insert(key.public_key().clone());
    }
    trusted
}

fn signed(d: &DefaultPolicy, gzip: bool, key: &SigningKey) -> ConfigMap {
    let mut cm = packed(d, gzip);
    configmap::set_signature(&mut cm, &key.sign(d.wasm));
    cm
}

#[test]
fn a_signed_policy_loads_with_the_key_that_verified_it() {
    let [p256, ed25519] = signing_keys("platform");
    let trusted = trusting(&[&p256, &ed25519]);
    let d = default_named("default-decorate");
    for key in [&p256, &ed25519] {
        for gzip in [false, true] {
            let (active, signed) =
                configmap::load_verified(engine(), &signed(d, gzip, key), &trusted)
                    .unwrap_or_else(|e| panic!("{key:?} gzip={gzip}: {e}"));
            assert_eq!(active.compiled.digest, sha256(d.wasm));
            assert_eq!(signed, Signed::By(key.public_key().id().clone()));
        }
    }
    // Without trusted keys a signed policy loads as before, its signature unverified.
    let (_, signed) =
        configmap::load_verified(engine(), &signed(d, true, &p256), &TrustedKeys::none()).unwrap();
    assert_eq!(signed, Signed::Unverified);
    let (_, signed) =
        configmap::load_verified(engine(), &packed(d, true), &TrustedKeys::none()).unwrap();
    assert_eq!(signed, Signed::No);
}

#[test]
fn unsigned_tampered_and_foreign_policies_are_refused_before_compiling() {
    let [trusted_key, _] = signing_keys("platform");
    let [stranger, _] = signing_keys("stranger");
    let trusted = trusting(&[&trusted_key]);
    let d = default_named("default-decorate");
    let corrupt = b"\0asm\x0d\0\x01\0 not a component".to_vec();

    // A corrupt module would fail to compile: the signature step must refuse it first.
    let mut unsigned = with_module(packed(d, false), WASM_KEY, corrupt.clone());
    let err = configmap::load_verified(engine(), &unsigned, &trusted).unwrap_err();
    assert_eq!(err.step(), "signature", "{err}");
    assert!(
        err.to_string()
            .starts_with("unsigned: policy.wasm.sig is missing"),
        "{err}"
    );

    // Signed for the real module, shipped with another one.
    let mut tampered = signed(d, false, &trusted_key);
    tampered.binary_data = unsigned.binary_data.take();
    // By a key the operator does not trust, however valid.
    let mut foreign = with_module(packed(d, false), WASM_KEY, corrupt.clone());
    configmap::set_signature(&mut foreign, &stranger.sign(&corrupt));
    for (what, cm) in [("tampered", tampered), ("foreign", foreign)] {
        let err = configmap::load_verified(engine(), &cm, &trusted).unwrap_err();
        assert_eq!(err.step(), "signature", "{what}: {err}");
        assert_eq!(
            err.to_string(),
            "policy.wasm.sig: signature does not verify against any of 1 trusted key",
            "{what}"
        );
    }

    let mut garbled = signed(d, true, &trusted_key);
    configmap::set_signature(&mut garbled, "%%%");
    let err = configmap::load_verified(engine(), &garbled, &trusted).unwrap_err();
    assert_eq!(err.step(), "signature");
    assert!(
        err.to_string()
            .starts_with("policy.wasm.sig: invalid base64"),
        "{err}"
    );
}
