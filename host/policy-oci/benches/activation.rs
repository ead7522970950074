//! What the caches save, measured: a 10+ MB policy's activation cold (pulled from a registry,
//! verified, compiled) against warm (read back from `--policy-cache-dir`, its compiled code
//! loaded), and a restart's compilation of 20 policies against loading them from the
//! compiled-code cache.
//!
//! The large policies are real ones: the `team-labels` example written in Python (a
//! componentize-py component, CPython inside, about 18 MB) and in JavaScript (componentize-js,
//! SpiderMonkey inside, about 12 MB), built when the bench starts with the tools their SDKs pin.
//! Activation here is everything an operator does before a policy serves but instantiating it
//! and `validate-settings`, which the overhead bench of the policy engine measures.
//!
//! Needs Debian's `docker-registry` (the CNCF distribution registry), which the bench starts on
//! loopback, and the two tools (`TFJOB_COMPONENTIZE_PY` and `TFJOB_COMPONENTIZE_JS`, or on
//! `PATH`; `tests/run` shows how to install them):
//! `cargo bench -p tfjob-policy-oci --bench activation`.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use tfjob_policy_engine::compiled_cache::CompiledCache;
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_engine::{PolicyEngine, SandboxLimits, defaults};
use tfjob_policy_oci::{ArtifactCache, Credentials, Limits, ModuleRef, RegistryClient};
use tfjob_test_support::{build_js, build_python, repo};

/// The team-labels example built in `lang` (`python` or `js`), as the tests build it.
fn example(lang: &str, dir: &Path) -> Vec<u8> {
    let out = dir.join(format!("team-labels-{lang}.wasm"));
    let example = repo(&format!("guest-policies/examples/team-labels/{lang}"));
    match lang {
        "python" => build_python(&example, "decorator", &out),
        _ => build_js(&example.join("policy.js"), "decorator", &out),
    }
    std::fs::read(out).unwrap()
}

/// The default decorate module made distinct by a custom section: same code, another digest.
fn variant(n: usize) -> Vec<u8> {
    let mut wasm = defaults::find("default-decorate").unwrap().wasm.to_vec();
    let payload = format!("\x05bench{n}");
    wasm.push(0);
    wasm.push(payload.len() as u8);
    wasm.extend_from_slice(payload.as_bytes());
    wasm
}

fn limits() -> SandboxLimits {
    SandboxLimits {
        max_module: 64 << 20,
        ..SandboxLimits::default()
    }
}

fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry runs (apt-get install docker-registry)");
    let started = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the registry did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Registry {
        child,
        addr,
        _dir: dir,
    }
}

/// Pull, verify, cache and compile `r` into `dir`: what a cold activation does.
fn activate_cold(
    runtime: &tokio::runtime::Runtime,
    client: &RegistryClient,
    r: &ModuleRef,
    dir: &Path,
) {
    let pulled = runtime
        .block_on(tfjob_policy_oci::pull(
            client,
            r,
            &Credentials::none(),
            &TrustedKeys::none(),
        ))
        .unwrap();
    ArtifactCache::open(dir).unwrap().put(&pulled).unwrap();
    let engine = PolicyEngine::new(limits())
        .unwrap()
        .with_compiled_cache(CompiledCache::open(dir).unwrap());
    engine.compile(&pulled.module).unwrap();
}

/// Read `r` back from the caches in `dir` and load its compiled code: a warm activation.
fn activate_warm(r: &ModuleRef, dir: &Path) {
    let pulled = ArtifactCache::open(dir)
        .unwrap()
        .get(r, 64 << 20, &TrustedKeys::none())
        .unwrap()
        .expect("cached");
    let engine = PolicyEngine::new(limits())
        .unwrap()
        .with_compiled_cache(CompiledCache::open(dir).unwrap());
    engine.compile(&pulled.module).unwrap();
    assert_eq!(engine.compiled_cache().unwrap().stats().hits, 1);
}

fn activation(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = start_registry();
    let client = RegistryClient::new(Limits::default(), [registry.addr.clone()]).unwrap();
    let built = tempfile::tempdir().unwrap();
    for lang in ["python", "js"] {
        let module = example(lang, built.path());
        eprintln!("{lang} component: {} bytes", module.len());
        let tagged =
            ModuleRef::parse(&format!("{}/bench/team-labels-{lang}:v1", registry.addr)).unwrap();
        let pushed = runtime
            .block_on(tfjob_policy_oci::push(
                &client,
                &tagged,
                &Credentials::none(),
                &module,
                None,
            ))
            .unwrap();
        let pinned = pushed
            .reference
            .at_digest(pushed.reference.digest.as_deref().unwrap());

        let mut group = c.benchmark_group(format!("activation_{lang}"));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(30));
        group.bench_function("cold_pull_verify_compile", |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let dir = private_dir();
                    let started = Instant::now();
                    activate_cold(&runtime, &client, &pinned, dir.path());
                    total += started.elapsed();
                }
                total
            });
        });
        let warm = private_dir();
        activate_cold(&runtime, &client, &pinned, warm.path());
        group.bench_function("warm_from_cache", |b| {
            b.iter(|| activate_warm(&pinned, warm.path()));
        });
        group.finish();
    }
}

fn restart(c: &mut Criterion) {
    let modules: Vec<Vec<u8>> = (0..20).map(variant).collect();
    let warm = private_dir();
    {
        let engine = PolicyEngine::new(limits())
            .unwrap()
            .with_compiled_cache(CompiledCache::open(warm.path()).unwrap());
        for m in &modules {
            engine.compile(m).unwrap();
        }
    }
    let mut group = c.benchmark_group("restart_20_policies");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(60));
    group.bench_function("compile_all", |b| {
        b.iter(|| {
            let engine = PolicyEngine::new(limits()).unwrap();
            for m in &modules {
                engine.compile(m).unwrap();
            }
        });
    });
    group.bench_function("from_compiled_cache", |b| {
        b.iter(|| {
            let engine = PolicyEngine::new(limits())
                .unwrap()
                .with_compiled_cache(CompiledCache::open(warm.path()).unwrap());
            for m in &modules {
                engine.compile(m).unwrap();
            }
            assert_eq!(engine.compiled_cache().unwrap().stats().hits, 20);
        });
    });
    group.finish();
}

criterion_group!(benches, activation, restart);
criterion_main!(benches);
