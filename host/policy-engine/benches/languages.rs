//! What a policy's language costs: the same policy (`guest-policies/examples/team-labels`)
//! written in Rust, Python (componentize-py, CPython inside) and JavaScript (componentize-js,
//! SpiderMonkey inside), on the same worker pod, with the operator's default limits.
//!
//! - `decorate/<lang>`: one `decorate-pod` call from the copy pre-initialised for the settings
//!   (what the operator runs once a version is active): a fresh instance, the call, the guard.
//! - `decorate-plain/<lang>`: the same call from the plain component (settings text no copy was
//!   made for: the same document followed by a space), which parses its settings every call
//!   and, for Python and JavaScript, starts from the runtime's initial memory.
//! - `activation/<lang>`: what the operator does when it activates a version whose compiled
//!   code is in `--policy-cache-dir`: the module's code loaded from the cache (checksum
//!   verified) and `validate-settings` called. A fresh engine is made outside the timing, so
//!   nothing is served from memory.
//!
//! Before the groups, each language's compile time, component size and pre-initialisation
//! (time and the size of the copy) are printed once.
//!
//! The components are built when the bench starts: Rust with cargo (`guest` profile, into
//! `target/bench-examples`), Python and JavaScript with `TFJOB_COMPONENTIZE_PY` and
//! `TFJOB_COMPONENTIZE_JS` (or the tools on `PATH`; `tests/run` shows how to install them).
//!
//! Run: `cargo bench -p tfjob-policy-engine --bench languages`

use std::hint::black_box;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::{CompiledPolicy, PolicyEngine, SandboxLimits};

#[path = "support/worker_call.rs"]
mod worker_call;
use worker_call::{POD, context};
#[path = "support/team_labels.rs"]
mod team_labels;
use team_labels::build;

const SETTINGS: &str = r#"{"team": "ml"}"#;
const LANGS: [&str; 3] = ["rust", "python", "js"];

fn limits() -> SandboxLimits {
    SandboxLimits {
        max_module: 64 << 20,
        ..SandboxLimits::default()
    }
}

struct Policy {
    lang: &'static str,
    binary: Vec<u8>,
    engine: PolicyEngine,
    compiled: Arc<CompiledPolicy>,
    cache: tempfile::TempDir,
}

fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn prepare(lang: &'static str, built: &Path) -> Policy {
    let binary = build(lang, built);
    let cache = private_dir();
    let engine = PolicyEngine::new(limits())
        .unwrap()
        .with_compiled_cache(CompiledCache::open(cache.path()).unwrap());
    let started = Instant::now();
    let compiled = engine.compile(&binary).expect("the example compiles");
    let compile = started.elapsed();
    let started = Instant::now();
    let prepared = engine.prepare(&compiled, "team-labels", SETTINGS);
    let preinit = started.elapsed();
    println!(
        "{lang}: component {:.1} MB, compiled in {:.2} s; pre-initialisation for the settings: \
         {prepared:?} in {:.2} s",
        binary.len() as f64 / 1e6,
        compile.as_secs_f64(),
        preinit.as_secs_f64()
    );
    let out = engine
        .at_maximum()
        .decorate(&compiled, "team-labels", &context(), SETTINGS, POD)
        .expect("decorate");
    assert!(out.contains(r#""team":"ml""#), "{lang}: {out}");
    Policy {
        lang,
        binary,
        engine,
        compiled,
        cache,
    }
}

fn languages(c: &mut Criterion) {
    let built = tempfile::tempdir().unwrap();
    let policies: Vec<Policy> = LANGS.iter().map(|l| prepare(l, built.path())).collect();
    let ctx = context();
    let plain = format!("{SETTINGS} ");
    for (group, settings) in [("decorate", SETTINGS), ("decorate-plain", plain.as_str())] {
        let mut g = c.benchmark_group(group);
        for p in &policies {
            g.bench_function(p.lang, |b| {
                b.iter(|| {
                    black_box(
                        p.engine
                            .at_maximum()
                            .decorate(&p.compiled, "team-labels", &ctx, settings, POD)
                            .unwrap(),
                    )
                })
            });
        }
        g.finish();
    }
    let mut g = c.benchmark_group("activation");
    g.sample_size(20);
    for p in &policies {
        g.bench_function(p.lang, |b| {
            b.iter_batched(
                || {
                    PolicyEngine::new(limits())
                        .unwrap()
                        .with_compiled_cache(CompiledCache::open(p.cache.path()).unwrap())
                },
                |engine| {
                    let compiled = engine.compile(&p.binary).unwrap();
                    engine
                        .validate_settings(&compiled, "team-labels", SETTINGS)
                        .unwrap();
                    assert_eq!(engine.compiled_cache().unwrap().stats().hits, 1);
                    engine
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, languages);
criterion_main!(benches);
