//! What a policy written in CEL costs, against the Rust default decorator on the same pod, with
//! the operator's default limits.
//!
//! - `decorate/rust-default`: the embedded `default-decorate` with the settings the operator runs
//!   it with (GPU tolerations, driver volumes, environment), from its pre-initialised copy.
//! - `decorate/cel`: a CEL document that adds a toleration and a label to GPU pods (a match
//!   condition, a JSON patch, an apply configuration), from its pre-initialised copy: the
//!   document compiled once, by `validate-settings`, when the copy was made.
//! - `decorate-plain/cel`: the same call from the plain evaluator, which decodes and compiles
//!   the document in every call: what a version costs until its copy is made.
//! - `activation/cel`: what the operator does when a new version of a CEL ConfigMap arrives and
//!   the evaluator's code is compiled already (it is the same for every CEL policy): read the
//!   ConfigMap and call `validate-settings`, which compiles every expression in the sandbox.
//!   Every iteration is a document the engine has not seen.
//!
//! Before the groups, the evaluator's compile time (once per operator) and a version's
//! pre-initialisation (once per document) are printed.
//!
//! Run: `cargo bench -p tfjob-policy-engine --bench cel_policy`

use std::hint::black_box;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::configmap;
use tfjob_policy_engine::defaults::{self, CEL_POLICY_WASM};
use tfjob_policy_engine::{CompiledPolicy, PolicyEngine, PolicyManifest, SandboxLimits};

#[path = "support/worker_call.rs"]
mod worker_call;
use worker_call::{POD, context};

/// A toleration and a label for GPU pods.
const DOCUMENT: &str = r#"
matchConditions:
- name: asks-for-a-gpu
  expression: "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
mutations:
- patchType: JSONPatch
  jsonPatch:
    expression: >-
      [JSONPatch{op: 'add', path: '/spec/tolerations',
                 value: [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]}]
- patchType: ApplyConfiguration
  applyConfiguration:
    expression: "Object{metadata: Object.metadata{labels: {'accelerator': 'nvidia'}}}"
"#;

/// A policy compiled and pre-initialised for its settings.
struct Ready {
    compiled: Arc<CompiledPolicy>,
    settings: String,
}

fn ready(engine: &PolicyEngine, name: &str, wasm: &[u8], settings: String) -> Ready {
    let started = Instant::now();
    let compiled = engine.compile(wasm).expect("compiles");
    let compile = started.elapsed();
    engine
        .validate_settings(&compiled, name, &settings)
        .expect("valid settings");
    let started = Instant::now();
    let prepared = engine.prepare(&compiled, name, &settings);
    println!(
        "{name}: component {:.1} MB, compiled in {:.2} s; pre-initialised for its settings \
         ({prepared:?}) in {:.0} ms",
        wasm.len() as f64 / 1e6,
        compile.as_secs_f64(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ready { compiled, settings }
}

/// The CEL ConfigMap of `document`, as `policy pack --cel` writes it.
fn packed(document: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    let manifest = PolicyManifest {
        name: "gpu".into(),
        ..PolicyManifest::default()
    };
    configmap::pack_cel(&manifest, document, "tfjob-system").expect("packs")
}

fn cel_policy(c: &mut Criterion) {
    // The operator's own module limit (64 MiB, `--policy-max-module-mib`): the evaluator's
    // pre-initialised copy is larger than the library's default of 4 MiB.
    // A compiled-code cache, as the operator always has (its own directory, or a private
    // temporary one): it holds the functions a pre-initialised copy shares with its component.
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let engine = PolicyEngine::new(SandboxLimits {
        max_module: 64 << 20,
        ..SandboxLimits::default()
    })
    .unwrap()
    .with_compiled_cache(CompiledCache::open(cache.path()).unwrap());
    let default = defaults::find("default-decorate").unwrap();
    let rust = ready(
        &engine,
        default.name,
        default.wasm,
        defaults::default_settings(default).to_string(),
    );
    let source = configmap::read_configmap(&packed(DOCUMENT)).unwrap();
    let cel = ready(
        &engine,
        "gpu",
        CEL_POLICY_WASM,
        source.manifest.settings.to_string(),
    );
    // A second version of the document: what the operator pre-initialises when a CEL
    // ConfigMap is edited (the evaluator's code compiled already).
    let edited = configmap::read_configmap(&packed(&DOCUMENT.replace("'nvidia'", "'edited'")))
        .unwrap()
        .manifest
        .settings
        .to_string();
    engine
        .validate_settings(&cel.compiled, "gpu", &edited)
        .unwrap();
    let started = Instant::now();
    let prepared = engine.prepare(&cel.compiled, "gpu", &edited);
    println!(
        "gpu, edited: pre-initialised for its new document ({prepared:?}) in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );

    let ctx = context();
    let out = engine
        .at_maximum()
        .decorate(&cel.compiled, "gpu", &ctx, &cel.settings, POD)
        .unwrap();
    assert!(out.contains(r#""accelerator":"nvidia""#), "{out}");

    let mut g = c.benchmark_group("decorate");
    for (name, policy) in [("rust-default", &rust), ("cel", &cel)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    engine
                        .at_maximum()
                        .decorate(&policy.compiled, name, &ctx, &policy.settings, POD)
                        .unwrap(),
                )
            })
        });
    }
    g.finish();

    // Settings text no copy was made for: the same document, followed by a space.
    let plain = format!("{} ", cel.settings);
    let mut g = c.benchmark_group("decorate-plain");
    g.bench_function("cel", |b| {
        b.iter(|| {
            black_box(
                engine
                    .at_maximum()
                    .decorate(&cel.compiled, "gpu", &ctx, &plain, POD)
                    .unwrap(),
            )
        })
    });
    g.finish();

    let version = AtomicU64::new(0);
    let mut g = c.benchmark_group("activation");
    g.sample_size(30);
    g.bench_function("cel", |b| {
        b.iter_batched(
            || {
                let n = version.fetch_add(1, Ordering::Relaxed);
                packed(&DOCUMENT.replace("'nvidia'", &format!("'nvidia-{n}'")))
            },
            |cm| configmap::load(&engine, &cm).expect("activates"),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, cel_policy);
criterion_main!(benches);
