//! What loaded policies hold, end to end: the embedded cluster, the distribution registry on
//! loopback, policy ConfigMaps applied with kubectl and the operator binary (`run`) as its own
//! process, whose memory is read from `/proc`.
//!
//! - A team namespace adds Python policies (componentize-py, CPython inside) until its share of
//!   the memory for loaded policies is used: the next one is `Rejected` naming the share, the
//!   ones before keep serving and the operator's RSS stays under the limit the shipped
//!   Deployment gives it throughout; how fast another team's jobs get their pods meanwhile is
//!   measured and printed (not met reliably; see the test).
//! - One policy swapped 50 times (15 in the everyday run, `tfjob_test_support::rounds`): the
//!   operator's RSS and its cache directory end where a few versions left them (old versions are
//!   freed, their files removed).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::cluster::Cluster;
use common::registry::{self, push};
use common::{Killed, eventually, expect_success, operator, run};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use tfjob_policy_engine::configmap::{PolicyState, PolicyStatus};
use tfjob_policy_engine::defaults;
use tfjob_test_support::registry::Registry;

/// One test at a time: each measures the operator's memory and time, which a test beside it
/// (compiling, swapping) would disturb.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The memory limit of `deploy/operator/deployment.yaml`.
const DEPLOYMENT_LIMIT_MIB: u64 = 512;

struct Env {
    cluster: Cluster,
    cache: tempfile::TempDir,
}

impl Env {
    fn start(namespaces: &[&str]) -> Env {
        let cluster = Cluster::start(|_| {});
        cluster.create_namespaces(namespaces);
        let cache = common::private_dir();
        Env { cluster, cache }
    }

    fn operator(&self, extra: &[&str]) -> Killed {
        let mut args = vec![
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--policy-registry-insecure",
            "127.0.0.1",
            "--policy-cache-dir",
            self.cache.path().to_str().unwrap(),
            // What is measured is the policies these tests load, not the evaluator of CEL
            // policies compiled ahead (the CEL test compiles it with its first policy).
            "--no-cel-warmup",
        ];
        args.extend_from_slice(extra);
        self.cluster.operator(&args, &[])
    }

    /// `kubectl apply -f -` of `object` (JSON).
    fn kubectl_apply(&self, object: &serde_json::Value) {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.args(["apply", "-f", "-"])
            .env("KUBECONFIG", &self.cluster.kubeconfig);
        let out = run(cmd, Some(&object.to_string()), Duration::from_secs(60));
        expect_success(&out, "kubectl apply");
    }

    fn status(&self, namespace: &str, name: &str) -> Option<PolicyStatus> {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.cluster.client(), namespace);
        let cm = self.cluster.runtime.block_on(api.get(name)).ok()?;
        PolicyStatus::of(&cm)?.ok()
    }

    /// Waits (up to `within`) for the status of `name` to satisfy `done`.
    fn status_until(
        &self,
        namespace: &str,
        name: &str,
        within: Duration,
        done: impl Fn(&PolicyStatus) -> bool,
    ) -> PolicyStatus {
        let started = Instant::now();
        loop {
            let status = self.status(namespace, name);
            if let Some(s) = status.as_ref().filter(|s| done(s)) {
                return s.clone();
            }
            assert!(
                started.elapsed() < within,
                "{namespace}/{name}: the awaited status never came (last: {status:?})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Submits a job of `workers` workers in `ml` and returns how long until all its pods
    /// exist.
    fn time_to_pods(&self, job: &str, workers: usize) -> Duration {
        let started = Instant::now();
        self.cluster.submit_manifest(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": job, "namespace": "ml"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
        }));
        let pods: Api<Pod> = Api::namespaced(self.cluster.client(), "ml");
        let selector = format!("training.kubeflow.org/job-name={job}");
        loop {
            let list = self
                .cluster
                .runtime
                .block_on(pods.list(&ListParams::default().labels(&selector)))
                .unwrap();
            if list.items.len() >= workers {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "{job} never got its {workers} pods"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn time_to_pod(&self, job: &str) -> Duration {
        self.time_to_pods(job, 1)
    }
}

/// The median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib >> 10)
}

/// Samples the RSS of `pid` every 50 ms until dropped; [`Sampler::max`] is the highest seen.
struct Sampler {
    max: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let max = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (max, stop) = (Arc::clone(&max), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(mib) = rss_mib(pid) {
                        max.fetch_max(mib, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Sampler {
            max,
            stop,
            thread: Some(thread),
        }
    }

    fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A team's policy ConfigMap naming `reference`.
fn referencing(namespace: &str, name: &str, reference: &str) -> serde_json::Value {
    registry::referencing(
        namespace,
        name,
        reference,
        &format!("settings: {{team: {name}}}\n"),
    )
}

#[test]
fn a_team_adding_python_policies_past_its_share_is_refused_naming_it() {
    let _serial = serial();
    let env = Env::start(&["tfjob-system", "team-a", "ml"]);
    let registry = Registry::start();
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    // Three distinct Python policies: the team-labels example, each with its own constant.
    let example = common::repo("guest-policies/examples/team-labels/python/app.py");
    let mut references = Vec::new();
    for i in 1..=3 {
        let source = dir.path().join(format!("p{i}"));
        std::fs::create_dir_all(&source).unwrap();
        let mut app = std::fs::read_to_string(&example).unwrap();
        app.push_str(&format!("\nVARIANT = {i}\n"));
        std::fs::write(source.join("app.py"), app).unwrap();
        let component = dir.path().join(format!("p{i}.wasm"));
        tfjob_test_support::build_python(&source, "decorator", &component);
        let module = std::fs::read(&component).unwrap();
        push(dir.path(), &module, &format!("{host}/team-a/p{i}:v1"), &[]);
        references.push(format!("{host}/team-a/p{i}:v1"));
    }

    let running = env.operator(&[
        "--policy-namespace",
        "tfjob-system",
        "--policy-namespace",
        "team-a",
        "--policy-loaded-memory-per-namespace-mib",
        "64",
        // Not held back by the client's rate limit: how fast pods come is the operator's CPU.
        "--kube-api-qps",
        "1000",
        "--kube-api-burst",
        "1000",
    ]);
    let pid = running.0.id();
    // The operator serves: another team's jobs get their pods. How long that takes, quiet.
    const WORKERS: usize = 8;
    env.time_to_pods("warm-up", WORKERS);
    let quiet = median(
        (0..5)
            .map(|i| env.time_to_pods(&format!("quiet-{i}"), WORKERS))
            .collect(),
    );

    let before = rss_mib(pid).unwrap();
    let sampler = Sampler::start(pid);
    let mut busy = Vec::new();
    let mut refused = None;
    for (i, reference) in references.iter().enumerate() {
        let name = format!("p{}", i + 1);
        let configmap = format!("tfjob-policy-{name}");
        env.kubectl_apply(&referencing("team-a", &name, reference));
        // Another team's jobs, one after another, while this one loads (pulls, compiles in a
        // child, pre-initialises, is measured).
        let started = Instant::now();
        let status = loop {
            busy.push(env.time_to_pods(&format!("busy-{i}-{}", busy.len()), WORKERS));
            // A job every quarter second or so: the operator's caches grow with the jobs, and
            // what is measured is the policies.
            std::thread::sleep(Duration::from_millis(250));
            let status = env.status("team-a", &configmap);
            if let Some(s) =
                status.filter(|s| matches!(s.state, PolicyState::Active | PolicyState::Rejected))
            {
                break s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "{configmap} never loaded"
            );
        };
        if status.state == PolicyState::Rejected {
            refused = Some((name, status));
            break;
        }
        let charged = status
            .memory_bytes
            .expect("an Active version says what it holds");
        assert!(charged > 1 << 20, "{name}: {charged} bytes charged");
    }
    let (name, status) = refused.expect("the team's share is used before its third policy");
    let error = status.error.unwrap_or_default();
    assert!(
        error.contains("namespace team-a")
            && error.contains("--policy-loaded-memory-per-namespace-mib"),
        "{name}: {error}"
    );
    assert_ne!(name, "p1", "the first policy fits the share: {error}");
    // The versions admitted before keep serving.
    let first = env.status("team-a", "tfjob-policy-p1").unwrap();
    assert_eq!(first.state, PolicyState::Active, "{first:?}");

    // `policy list` shows what each serving version holds.
    let mut list = operator();
    list.args(["policy", "list", "-n", "team-a", "--kubeconfig"])
        .arg(&env.cluster.kubeconfig);
    let table = expect_success(&run(list, None, Duration::from_secs(60)), "policy list");
    assert!(table.lines().next().unwrap().contains("MEMORY"), "{table}");
    let p1 = table
        .lines()
        .find(|l| l.contains("tfjob-policy-p1"))
        .unwrap();
    assert!(p1.contains("Mi "), "{table}");

    let typical = median(busy.clone());
    // Settled: the load threads have ended and the allocator has given back what they freed.
    std::thread::sleep(Duration::from_secs(15));
    eprintln!(
        "pods of another team: {quiet:?} quiet, {typical:?} (median of {busy:?}) while team-a \
         loaded; the operator's \
         RSS {before} MiB before team-a's policies, at most {} MiB while they loaded (the \
         Deployment's limit is 512 MiB), {} MiB \
         after; {name} refused: {error}",
        sampler.max(),
        rss_mib(pid).unwrap_or(0),
    );
    eprintln!(
        "{}",
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("Rss") || l.starts_with("Threads"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // Compiling, instrumenting and pre-initialising run in the compiler child, so what a
    // Python policy costs the operator while it loads is what it holds once loaded.
    assert!(
        sampler.max() < DEPLOYMENT_LIMIT_MIB,
        "the operator's RSS reached {} MiB while team-a's policies loaded",
        sampler.max()
    );
    // Another team's pods within 1.5x of their quiet time is measured and printed above, not
    // asserted: with the compiler child on one of the two cores, it held in some runs and not
    // in others (medians 111 against 107 ms quiet, 125 against 77 ms), so it is not met
    // (docs/performance.md, "Loaded policies").
}

/// The default decoration made distinct by a custom section naming `version`.
fn version(version: usize) -> Vec<u8> {
    let mut wasm = defaults::find("default-decorate").unwrap().wasm.to_vec();
    let name = b"tfjob-test-version";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(version.to_string().as_bytes());
    wasm.push(0);
    wasm.push(section.len() as u8);
    wasm.extend_from_slice(&section);
    wasm
}

fn cache_files(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir.join("compiled"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

#[test]
fn swapping_one_policy_many_times_leaves_memory_where_a_few_versions_leave_it() {
    let _serial = serial();
    let swaps = tfjob_test_support::rounds(50, 15);
    let env = Env::start(&["tfjob-system", "ml"]);
    let running = env.operator(&["--policy-namespace", "tfjob-system"]);
    let pid = running.0.id();
    env.time_to_pod("first");
    let mut after_one = None;
    let mut files_after_one = 0;
    for v in 0..swaps {
        let module = version(v);
        let digest = hex::encode(Sha256::digest(&module));
        env.kubectl_apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tfjob-policy-labels", "namespace": "tfjob-system",
                         "labels": {"policy.tfjob.dev/policy": "true"}},
            "data": {"policy.yaml": format!("name: labels\nhooks: [decorate]\nsettings:\n  defaultLabels: {{version: \"{v}\"}}\n")},
            "binaryData": {"policy.wasm": base64::engine::general_purpose::STANDARD.encode(&module)},
        }));
        env.status_until(
            "tfjob-system",
            "tfjob-policy-labels",
            Duration::from_secs(120),
            |s| s.state == PolicyState::Active && s.digest.as_deref() == Some(digest.as_str()),
        );
        // Called, so that what a version costs once it serves is in the figures.
        env.time_to_pod(&format!("job-{v}"));
        if v == 4 {
            // A few versions in: the allocator and the pools have their working size.
            after_one = rss_mib(pid);
            files_after_one = cache_files(env.cache.path()).len();
        }
    }
    let after_one = after_one.unwrap();
    let after_all = eventually("the operator's RSS", || rss_mib(pid));
    eprintln!(
        "the operator's RSS: {after_one} MiB after 5 versions, {after_all} MiB after {swaps}"
    );
    assert!(
        after_all <= after_one + 16,
        "RSS after {swaps} versions: {after_all} MiB; after 5: {after_one} MiB"
    );
    let files = cache_files(env.cache.path());
    assert_eq!(
        files.len(),
        files_after_one,
        "the cache holds the serving versions' files, not every version's: {files:?}"
    );
}

/// The copies pre-initialised for settings documents in the compiled-code cache.
fn prepared_files(dir: &Path) -> std::collections::BTreeSet<String> {
    cache_files(dir)
        .into_keys()
        .filter(|name| name.starts_with("prepared-") && name.ends_with(".cwasm"))
        .collect()
}

#[test]
fn editing_a_cel_policy_twelve_times_serves_every_version_and_keeps_copies_of_serving_ones() {
    let _serial = serial();
    let env = Env::start(&["tfjob-system", "ml"]);
    let _running = env.operator(&["--policy-namespace", "tfjob-system"]);
    env.time_to_pod("first");
    // The default policies' copies (one per hook), made once their hooks are first called.
    let defaults = eventually("the default policies' copies", || {
        let files = prepared_files(env.cache.path());
        (files.len() == 3).then_some(files)
    });
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.cluster.client(), "tfjob-system");
    let pods: Api<Pod> = Api::namespaced(env.cluster.client(), "ml");
    let mut before_last = Default::default();
    // More versions than the engine keeps copies: every CEL document shares the evaluator.
    let versions = 12;
    for v in 0..versions {
        if v == versions - 1 {
            before_last = prepared_files(env.cache.path());
        }
        env.kubectl_apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tfjob-policy-version", "namespace": "tfjob-system",
                         "labels": {"policy.tfjob.dev/policy": "true"}},
            "data": {"policy.cel.yaml": format!(
                "mutations:\n- patchType: ApplyConfiguration\n  applyConfiguration:\n    \
                 expression: \"Object{{metadata: Object.metadata{{labels: {{'version': 'v{v}'}}}}}}\"\n")},
        }));
        let applied = env
            .cluster
            .runtime
            .block_on(configmaps.get("tfjob-policy-version"))
            .unwrap()
            .metadata
            .resource_version;
        env.status_until(
            "tfjob-system",
            "tfjob-policy-version",
            Duration::from_secs(120),
            |s| s.state == PolicyState::Active && s.resource_version == applied,
        );
        let job = format!("job-{v}");
        env.time_to_pod(&job);
        let selector = format!("training.kubeflow.org/job-name={job}");
        let pod = env
            .cluster
            .runtime
            .block_on(pods.list(&ListParams::default().labels(&selector)))
            .unwrap()
            .items
            .remove(0);
        assert_eq!(
            pod.metadata.labels.unwrap_or_default().get("version"),
            Some(&format!("v{v}")),
            "version {v} decorates the next pod"
        );
    }
    // The last version gets a copy of its own in the background, and the cache keeps the
    // copies of the versions that serve, not one per version (nor stops at the engine's bound
    // on copies, which every later version would then run without).
    let after = eventually("the last version's copy", || {
        let files = prepared_files(env.cache.path());
        files
            .difference(&before_last)
            .next()
            .is_some()
            .then_some(files)
    });
    let cel: Vec<_> = after.difference(&defaults).collect();
    assert!(
        cel.len() <= 3,
        "the copies of serving versions only, not of {versions}: {cel:?}"
    );
}

/// The operator's engine compiling in a child running this binary's `compile-policy`.
fn engine_compiling_in_child(
    limits: tfjob_policy_engine::SandboxLimits,
) -> tfjob_policy_engine::PolicyEngine {
    tfjob_policy_engine::PolicyEngine::new(limits)
        .unwrap()
        .with_compiler(tfjob_policy_engine::engine::Compiler::Process {
            program: env!("CARGO_BIN_EXE_tfjob-operator").into(),
            args: vec!["compile-policy".into()],
            time_limit: Duration::from_secs(600),
        })
}

#[test]
fn a_policy_compiled_in_a_child_decides_as_one_compiled_in_process_and_garbage_is_refused() {
    let _serial = serial();
    use tfjob_policy_engine::bindings::JobContext;
    let d = defaults::find("default-decorate").unwrap();
    let settings = defaults::default_settings(d).to_string();
    let ctx = JobContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "uid-1".into(),
        job_labels: vec![],
        job_annotations: vec![],
        replica_type: "Worker".into(),
        replica_index: 0,
        replica_count: 1,
        attempt: 0,
    };
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}).to_string();
    let decorate = |engine: &tfjob_policy_engine::PolicyEngine| {
        let policy = engine.compile(d.wasm).unwrap();
        engine.prepare(&policy, d.name, &settings).unwrap();
        engine
            .at_maximum()
            .decorate(&policy, d.name, &ctx, &settings, &pod)
            .unwrap()
    };
    let in_process =
        tfjob_policy_engine::PolicyEngine::new(tfjob_policy_engine::SandboxLimits::default())
            .unwrap();
    let child = engine_compiling_in_child(tfjob_policy_engine::SandboxLimits::default());
    assert_eq!(decorate(&child), decorate(&in_process));
    // The child pre-initialised too, and a refusal there reaches the operator as a refusal.
    let policy = child.compile(d.wasm).unwrap();
    assert!(policy.is_prepared_for(&settings));
    let err = child.prepare(&policy, d.name, "{not json").unwrap_err();
    assert_eq!(
        err.category,
        tfjob_policy_engine::Category::Settings,
        "{err}"
    );
    assert!(!policy.is_prepared_for("{not json"));
    // A policy may be named anything; the child gets the name as a value, never as a flag.
    let spaced = format!("{settings} ");
    assert_eq!(child.prepare(&policy, "--pooling\0-x", &spaced), Ok(true));

    // A child that fails or dies is an error naming what happened, never a panic or a hang.
    let within = |script: &str, time_limit: Duration| {
        tfjob_policy_engine::PolicyEngine::new(tfjob_policy_engine::SandboxLimits::default())
            .unwrap()
            .with_compiler(tfjob_policy_engine::engine::Compiler::Process {
                program: "sh".into(),
                args: vec!["-c".into(), script.into(), "sh".into()],
                time_limit,
            })
    };
    let with = |script: &str| within(script, Duration::from_secs(60));
    let err = with("cat >/dev/null; echo the compiler broke >&2; exit 3")
        .compile(d.wasm)
        .unwrap_err();
    assert!(
        err.message
            .contains("the compiler process exited with status 3: the compiler broke"),
        "{err}"
    );
    let err = with("kill -9 $$").compile(d.wasm).unwrap_err();
    assert!(err.message.contains("was killed"), "{err}");
    // A child compiling past its time is stopped, whether it reads its input or not, and the
    // next compilation gets the compiler.
    for script in ["exec sleep 600", "cat >/dev/null; exec sleep 600"] {
        let stuck = within(script, Duration::from_secs(1));
        let err = stuck.compile(d.wasm).unwrap_err();
        assert!(
            err.message
                .contains("did not finish within 1s and was stopped"),
            "{script}: {err}"
        );
        assert!(stuck.compile(d.wasm).is_err(), "the compiler is free again");
    }
    let err = with("cat >/dev/null; printf 'not compiled code'")
        .compile(d.wasm)
        .unwrap_err();
    assert_eq!(err.category, tfjob_policy_engine::Category::Link, "{err}");
    // The child yields the CPU to the operator: it runs at niceness 10 (the 19th field of
    // /proc/PID/stat), set before it reads its input.
    let mut waiting = operator()
        .args(["compile-policy", "--memory", "67108864", "--pooling"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stat = format!("/proc/{}/stat", waiting.id());
    eventually("the compiler child at niceness 10", || {
        let text = std::fs::read_to_string(&stat).ok()?;
        // The command name (field 2) is in parentheses and may hold spaces.
        let after = &text[text.rfind(')')? + 2..];
        (after.split(' ').nth(16)? == "10").then_some(())
    });
    drop(waiting.stdin.take());
    waiting.wait().unwrap();
    // The child itself refuses what is not a component, saying why.
    let mut cmd = operator();
    cmd.args(["compile-policy", "--memory", "67108864", "--pooling"]);
    let out = run(cmd, Some("\0asm garbage"), Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tfjob-operator compile-policy:"),
        "{out:?}"
    );
    // An engine with other limits gets code made for its own settings from the child.
    let small = engine_compiling_in_child(tfjob_policy_engine::SandboxLimits {
        memory: 16 << 20,
        ..tfjob_policy_engine::SandboxLimits::default()
    });
    assert_eq!(decorate(&small), decorate(&in_process));
}
