//! What loaded policies cost: resident memory per additional distinct policy in Rust, Python
//! (componentize-py, CPython inside) and JavaScript (componentize-js, SpiderMonkey inside), and
//! the time until all are ready, cold and after a restart from the compiled-code cache.
//!
//! Each policy is activated as the operator's policy sync activates a ConfigMap version:
//! compiled (in a child running this package's binary, `compile-policy`, as `run` and `up`
//! do), its settings validated, pre-initialised for them, measured and admitted to the budget
//! of loaded policies (unbounded here). The policies of one language are the team-labels
//! example built once, made distinct by a custom section naming their index: each has its own
//! digest, its own compilation, its own cache files and its own pre-initialised copy.
//!
//! Printed per language: the process's RSS (anonymous / file-backed) before, after the first
//! policy and after the last, the RSS per additional policy, what the budget charged each
//! version (its compiled images' resident pages), the time until all were ready, and the same
//! time for a new engine on the same cache directory (a restart).
//!
//! `cargo bench -p tfjob-operator --bench loaded_policies`; `TFJOB_LOADED_RUST` (default 100),
//! `TFJOB_LOADED_PYTHON` (20) and `TFJOB_LOADED_JS` (10) set the counts, 0 skips a language.
//! The Python and JavaScript tools are found as the tests find them (`TFJOB_COMPONENTIZE_PY`,
//! `TFJOB_COMPONENTIZE_JS`, see `tests/run`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::engine::Compiler;
use tfjob_policy_engine::loaded_budget::{LoadedBudget, LoadedLimits, Reservation};
use tfjob_policy_engine::{PolicyEngine, PolicyManifest, SandboxLimits, activate};

#[path = "../../policy-engine/benches/support/team_labels.rs"]
mod team_labels;
use team_labels::build;

const SETTINGS: &str = "team: ml";

/// `wasm` with a custom section naming `index`: same behaviour, another digest.
fn variant(wasm: &[u8], index: usize) -> Vec<u8> {
    let name = b"tfjob-bench-variant";
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(index.to_string().as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    out.push(body.len() as u8);
    out.extend_from_slice(&body);
    out
}

/// (RSS, anonymous, file-backed) of this process, in MiB.
fn rss() -> (f64, f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

fn engine(cache: &Path) -> Arc<PolicyEngine> {
    let limits = SandboxLimits {
        max_module: 64 << 20,
        ..SandboxLimits::default()
    };
    Arc::new(
        PolicyEngine::new(limits)
            .unwrap()
            .with_compiled_cache(CompiledCache::open(cache).unwrap())
            .with_compiler(Compiler::Process {
                program: env!("CARGO_BIN_EXE_tfjob-operator").into(),
                args: vec!["compile-policy".into()],
                time_limit: Duration::from_secs(600),
            }),
    )
}

/// Activates the `modules` as the policy sync does; returns them with their reservations.
fn activate_all(
    engine: &PolicyEngine,
    modules: &[Vec<u8>],
) -> (
    Vec<(tfjob_policy_engine::ActivePolicy, Reservation)>,
    Duration,
) {
    let budget = LoadedBudget::new(LoadedLimits {
        total: u64::MAX,
        per_namespace: u64::MAX,
        cluster_reserve: 0,
    });
    let started = Instant::now();
    let loaded = modules
        .iter()
        .enumerate()
        .map(|(i, wasm)| {
            let manifest = PolicyManifest::from_yaml(
                &format!("hooks: [decorate]\nsettings: {{{SETTINGS}}}\n"),
                &format!("p{i}"),
            )
            .unwrap();
            let policy = activate(engine, manifest, wasm).unwrap();
            let prepared = engine
                .prepare_now(
                    &policy.compiled,
                    policy.name(),
                    &policy.settings,
                    policy.limits.clone(),
                )
                .unwrap();
            assert!(prepared, "p{i} is pre-initialised");
            let parts = policy.compiled.parts_for(&policy.settings);
            let reservation = budget.admit(&format!("p{i}"), None, parts).unwrap();
            (policy, reservation)
        })
        .collect();
    (loaded, started.elapsed())
}

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    for (lang, n) in [
        ("rust", count("TFJOB_LOADED_RUST", 100)),
        ("python", count("TFJOB_LOADED_PYTHON", 20)),
        ("js", count("TFJOB_LOADED_JS", 10)),
    ] {
        if n == 0 {
            continue;
        }
        let base = build(lang, dir.path());
        let modules: Vec<Vec<u8>> = (0..n).map(|i| variant(&base, i)).collect();
        let cache = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            cache.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();

        let before = rss();
        let engine_cold = engine(cache.path());
        let (first, _) = activate_all(&engine_cold, &modules[..1]);
        let after_first = rss();
        let (rest, cold) = activate_all(&engine_cold, &modules[1..]);
        let after_all = rss();
        let charged: Vec<u64> = first.iter().chain(&rest).map(|(_, r)| r.charged).collect();
        let per_policy = if n > 1 {
            (after_all.0 - after_first.0) / (n - 1) as f64
        } else {
            0.0
        };
        println!(
            "{lang}: {n} policies of {:.1} MB; RSS MiB (all/anon/file) before {:.0}/{:.0}/{:.0}, \
             after the first {:.0}/{:.0}/{:.0}, after all {:.0}/{:.0}/{:.0}: {per_policy:.1} MiB \
             per additional policy",
            base.len() as f64 / 1e6,
            before.0,
            before.1,
            before.2,
            after_first.0,
            after_first.1,
            after_first.2,
            after_all.0,
            after_all.1,
            after_all.2,
        );
        println!(
            "{lang}: charged per version: min {:.1} MiB, max {:.1} MiB; all ready {:.1} s after \
             the first ({:.1} s each)",
            *charged.iter().min().unwrap() as f64 / f64::from(1 << 20),
            *charged.iter().max().unwrap() as f64 / f64::from(1 << 20),
            cold.as_secs_f64(),
            cold.as_secs_f64() / (n.max(2) - 1) as f64,
        );
        drop((first, rest, engine_cold));

        // A restart: a new engine on the same directory maps every compiled component and
        // pre-initialised copy as it is.
        let engine_warm = engine(cache.path());
        let (again, warm) = activate_all(&engine_warm, &modules);
        let stats = engine_warm.compiled_cache().unwrap().stats();
        println!(
            "{lang}: after a restart, all {n} ready in {:.2} s ({} files mapped, {} compiled)",
            warm.as_secs_f64(),
            stats.hits,
            stats.misses,
        );
        drop((again, engine_warm));
    }
}
