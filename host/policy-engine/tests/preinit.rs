//! Pre-initialised components (`LimitedEngine::prepare`): a copy of a component whose every
//! instance starts where `validate-settings` of one settings document ended.
//!
//! What must hold: the default policies decide exactly as without the copy; every call through
//! the copy still starts fresh (from the snapshot, never from an earlier call); a settings
//! document other than the prepared one runs from the plain component; and a policy whose
//! validation misbehaves (refuses, sleeps, loops, fills its memory) gets no copy, while its
//! plain component keeps serving.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_planner::{PodContext, PodPolicies};
use tfjob_policy_engine::bindings::{JobContext, Phase};
use tfjob_policy_engine::defaults::{self, HOSTILE_POLICY_WASM};
use tfjob_policy_engine::engine::MAX_PREPARED;
use tfjob_policy_engine::local::PolicyConfig;
use tfjob_policy_engine::{
    Category, CompiledPolicy, Hook, PolicyEngine, PolicySet, Registry, SandboxLimits, WasmPolicies,
};

/// An engine with a generous deadline: these tests check decisions and copies, not the clock.
fn patient() -> PolicyEngine {
    PolicyEngine::new(SandboxLimits {
        deadline: Duration::from_secs(30),
        ..SandboxLimits::default()
    })
    .expect("engine starts")
}

fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(patient)
}

/// A second engine that never prepares anything: the reference for what the plain components
/// decide.
fn plain_engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(patient)
}

fn ctx() -> JobContext {
    JobContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "uid-1".into(),
        job_labels: vec![],
        job_annotations: vec![],
        replica_type: "Worker".into(),
        replica_index: 1,
        replica_count: 4,
        attempt: 0,
    }
}

fn worker_pod() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/pods/worker.yaml"
    );
    let pod: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).expect("worker.yaml"))
        .expect("YAML");
    pod.to_string()
}

/// `worker.yaml` asking for a GPU under its alias, and failed with exit code 137 (OOMKilled).
fn gpu_pod(failed: bool) -> String {
    let mut pod: Value = serde_json::from_str(&worker_pod()).expect("JSON");
    pod["spec"]["containers"][0]["resources"] =
        json!({"limits": {"gpu": "1", "cpu": "4", "memory": "8Gi"}});
    if failed {
        pod["status"] = json!({
            "phase": "Failed",
            "containerStatuses": [{
                "name": "tensorflow", "ready": false, "restartCount": 0, "image": "tf", "imageID": "",
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "finishedAt": "2026-12-01T10:00:00Z"}}
            }]
        });
    }
    pod.to_string()
}

fn compiled(engine: &PolicyEngine, hook: Hook) -> (Arc<CompiledPolicy>, &'static str, String) {
    let d = defaults::for_hook(hook);
    let policy = engine.compile(d.wasm).expect("default policy compiles");
    (policy, d.name, defaults::default_settings(d).to_string())
}

/// Calls `hook` of `policy` with `settings` on the GPU pod and reports what it decided.
fn decide(engine: &PolicyEngine, hook: Hook, policy: &CompiledPolicy, settings: &str) -> String {
    let name = "default";
    match hook {
        Hook::Decorate => engine
            .at_maximum()
            .decorate(policy, name, &ctx(), settings, &gpu_pod(false))
            .expect("decorate"),
        Hook::Resources => engine
            .at_maximum()
            .override_resources(
                policy,
                name,
                &ctx(),
                settings,
                "tensorflow",
                r#"{"limits": {"gpu": "2", "cpu": "4"}, "requests": {"cpu": "3"}}"#,
            )
            .expect("resources"),
        Hook::Classify => {
            let v = engine
                .at_maximum()
                .classify(
                    policy,
                    name,
                    &ctx(),
                    settings,
                    &gpu_pod(true),
                    "2026-12-01T10:05:00Z",
                )
                .expect("classify");
            format!(
                "{:?}|{}|{}|{:?}",
                v.phase, v.reason, v.message, v.recheck_at
            )
        }
    }
}

/// Settings for `hook` that differ from its defaults in what they decide.
fn other_settings(hook: Hook) -> &'static str {
    match hook {
        Hook::Decorate => r#"{"defaultEnvVars": {"TEAM": "vision"}}"#,
        Hook::Resources => r#"{"limits": {"cpu": "2"}}"#,
        Hook::Classify => r#"{"oomKilledIsPermanent": true}"#,
    }
}

#[test]
fn a_prepared_default_policy_decides_as_the_plain_one_for_every_hook() {
    for hook in Hook::ALL {
        let (policy, name, settings) = compiled(engine(), hook);
        let (plain, _, _) = compiled(plain_engine(), hook);
        let before = decide(plain_engine(), hook, &plain, &settings);

        assert!(
            engine()
                .prepare(&policy, name, &settings)
                .unwrap_or_else(|e| panic!("{hook}: {e}")),
            "{hook}: a copy is made"
        );
        assert!(policy.is_prepared_for(&settings), "{hook}");
        assert!(
            !engine().prepare(&policy, name, &settings).expect("again"),
            "{hook}: once per settings document"
        );
        // Several calls: each starts from the snapshot, none from what the last one left.
        for call in 0..3 {
            assert_eq!(
                decide(engine(), hook, &policy, &settings),
                before,
                "{hook}, call {call}"
            );
        }

        // Other settings run from the plain component and decide by those settings.
        let other = other_settings(hook);
        assert!(!policy.is_prepared_for(other));
        let expected = decide(plain_engine(), hook, &plain, other);
        assert_ne!(expected, before, "{hook}: the other settings matter");
        assert_eq!(decide(engine(), hook, &policy, other), expected, "{hook}");
    }
}

/// A component that counts its calls in a global: `validate-settings` and
/// `override-resources` each add one, and `override-resources` returns the count as one digit.
/// A plain instance answers `1`; one started from the snapshot taken after `validate-settings`
/// answers `2`, every time, or it started from an earlier call's state. Settings of exactly four
/// bytes make `validate-settings` fill 5 MiB of memory with non-zero bytes, which the snapshot
/// must carry; five bytes, 20 MiB. `$TAG` names the test, so that each test compiles a module of its own (modules
/// are shared by digest, and so are their copies).
const COUNTER_WAT: &str = concat!(
    r#"
(component
  (core module $m
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (global $calls (mut i32) (i32.const 0))
    (data (i32.const 400) "$TAG")
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
        (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
      (global.set $heap (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    (func (export "validate") (param $ptr i32) (param $len i32) (result i32)
      (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
      (if (i32.eq (local.get $len) (i32.const 4))
        (then
          (drop (memory.grow (i32.const 80)))
          (memory.fill (i32.const 65536) (i32.const 1) (i32.const 5242880))))
      (if (i32.eq (local.get $len) (i32.const 5))
        (then
          (drop (memory.grow (i32.const 320)))
          (memory.fill (i32.const 65536) (i32.const 1) (i32.const 20971520))))
      (i32.store8 (i32.const 256) (i32.const 0))
      (i32.const 256))
    (func (export "override-resources") (param $args i32) (result i32)
      (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
      (i32.store8 (i32.const 300) (i32.add (i32.const 48) (global.get $calls)))
      (i32.store8 (i32.const 16) (i32.const 0))
      (i32.store (i32.const 20) (i32.const 300))
      (i32.store (i32.const 24) (i32.const 1))
      (i32.const 16)))
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias core export $i "validate" (core func $validate))
  (alias core export $i "override-resources" (core func $override))

  (func $validate-settings (param "settings" string) (result (result (error string)))
    (canon lift (core func $validate) (memory $mem) (realloc $realloc)))
  (instance $settings (export "validate-settings" (func $validate-settings)))
  (export "tfjob:policy/settings@0.1.0" (instance $settings))
"#,
    include_str!("data/resources-export-0.1.0.wat"),
    ")\n"
);

fn counter(tag: &str) -> Arc<CompiledPolicy> {
    engine()
        .compile(COUNTER_WAT.replace("$TAG", tag).as_bytes())
        .expect("the counter component compiles")
}

fn count(policy: &CompiledPolicy, settings: &str) -> String {
    engine()
        .at_maximum()
        .override_resources(policy, "counter", &ctx(), settings, "c", "{}")
        .expect("override-resources")
}

#[test]
fn every_call_through_a_copy_starts_from_the_snapshot_not_from_the_last_call() {
    let policy = counter("fresh");
    assert_eq!(count(&policy, "{}"), "1", "plain: nothing ran before");
    assert!(
        engine()
            .prepare(&policy, "counter", "{}")
            .expect("prepares")
    );
    for call in 0..5 {
        assert_eq!(
            count(&policy, "{}"),
            "2",
            "call {call}: after the validation only"
        );
    }
    // Other settings: the plain component, as before.
    assert_eq!(count(&policy, "{ }"), "1");
}

#[test]
fn a_copy_larger_than_the_module_limit_is_refused_and_the_plain_component_serves() {
    let policy = counter("large");
    // Four bytes: the validation fills 5 MiB, more than the 4 MiB module limit.
    let err = engine().prepare(&policy, "counter", "fill").unwrap_err();
    assert_eq!(err.category, Category::Memory, "{err}");
    assert!(err.message.contains("the module limit is 4194304"), "{err}");
    assert!(!policy.is_prepared_for("fill"));
    assert_eq!(count(&policy, "fill"), "1");

    // Five bytes: 20 MiB, refused before the snapshot copies any of it.
    let err = engine().prepare(&policy, "counter", "fills").unwrap_err();
    assert_eq!(err.category, Category::Memory, "{err}");
    assert!(
        err.message.contains(
            "the validation left 21037056 bytes of memory; a copy is made of at most 16777216"
        ),
        "{err}"
    );
    assert!(!policy.is_prepared_for("fills"));
}

#[test]
fn copies_are_bounded_per_module() {
    let policy = counter("bounded");
    let documents: Vec<String> = (0..=MAX_PREPARED)
        .map(|i| format!(r#"{{"copy": {i}}}"#))
        .collect();
    let made: Vec<bool> = documents
        .iter()
        .map(|s| engine().prepare(&policy, "counter", s).expect("prepares"))
        .collect();
    assert_eq!(
        made.iter().filter(|m| **m).count(),
        MAX_PREPARED,
        "{made:?}"
    );
    assert!(!made[MAX_PREPARED], "the last one finds no room");
    assert_eq!(count(&policy, &documents[MAX_PREPARED]), "1");
    assert_eq!(count(&policy, &documents[0]), "2");
}

#[test]
fn copies_for_settings_no_version_runs_make_room_for_the_next() {
    // An engine of its own: evicting drops the copies other tests made without a version.
    let engine = patient();
    let policy = engine
        .compile(COUNTER_WAT.replace("$TAG", "versions").as_bytes())
        .expect("the counter component compiles");
    let count = |settings: &str| {
        engine
            .at_maximum()
            .override_resources(&policy, "counter", &ctx(), settings, "c", "{}")
            .expect("override-resources")
    };
    // A ConfigMap edited again and again: each version replaces the one before, three times
    // as many versions as the bound on copies.
    let mut serving = None;
    for version in 0..3 * MAX_PREPARED {
        let settings = format!(r#"{{"version": {version}}}"#);
        serving = Some(policy.use_settings(&settings));
        assert_eq!(engine.evict_unused(), 0, "the module itself is held");
        assert!(
            engine
                .prepare(&policy, "counter", &settings)
                .expect("prepares"),
            "version {version} gets a copy"
        );
        assert_eq!(count(&settings), "2", "version {version} runs from it");
    }
    // Versions that run side by side keep theirs.
    let side_by_side: Vec<_> = (0..MAX_PREPARED - 1)
        .map(|i| {
            let settings = format!(r#"{{"team": {i}}}"#);
            let held = policy.use_settings(&settings);
            engine
                .prepare(&policy, "counter", &settings)
                .expect("prepares");
            (settings, held)
        })
        .collect();
    engine.evict_unused();
    for (settings, _) in &side_by_side {
        assert!(policy.is_prepared_for(settings), "{settings}");
    }
    assert!(serving.is_some());
}

#[test]
fn a_validation_that_refuses_sleeps_or_loops_leaves_no_copy() {
    let limited = PolicyEngine::new(SandboxLimits {
        deadline: Duration::from_millis(200),
        ..SandboxLimits::default()
    })
    .expect("engine starts");
    let hostile = limited
        .compile(HOSTILE_POLICY_WASM)
        .expect("hostile policy compiles");
    for (mode, category) in [
        ("nonsense", Category::Settings),
        ("sleep-in-settings", Category::Timeout),
        ("loop-in-settings", Category::Timeout),
    ] {
        let settings = json!({ "mode": mode }).to_string();
        let err = limited.prepare(&hostile, "hostile", &settings).unwrap_err();
        assert_eq!(err.category, category, "{mode}: {err}");
        assert!(!hostile.is_prepared_for(&settings), "{mode}");
    }
    // The plain component still serves a well-behaved mode.
    let verdict = limited
        .at_maximum()
        .classify(
            &hostile,
            "hostile",
            &ctx(),
            r#"{"mode": "ok"}"#,
            &gpu_pod(true),
            "2026-12-01T10:05:00Z",
        )
        .expect("classify");
    assert_eq!(verdict.phase, Phase::Running, "{verdict:?}");
}

#[test]
fn the_policies_seam_prepares_each_active_policy_in_the_background() {
    // An engine of its own, so no other test prepared these modules first.
    let engine = Arc::new(patient());
    let active = tfjob_policy_engine::defaults::load_defaults(&engine, &PolicyConfig::default())
        .expect("defaults load");
    let watched: Vec<(Arc<CompiledPolicy>, String)> = active
        .iter()
        .map(|p| (Arc::clone(&p.compiled), p.settings.clone()))
        .collect();
    assert!(watched.iter().all(|(c, s)| !c.is_prepared_for(s)));
    let policies = WasmPolicies::new(
        Arc::clone(&engine),
        Arc::new(Registry::new(PolicySet::new(active))),
    );
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_str(&worker_pod()).expect("a pod");
    let ctx = PodContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "uid-1".into(),
        job_labels: Default::default(),
        job_annotations: Default::default(),
        replica_type: "Worker".into(),
        replica_index: 0,
        replica_count: 1,
        attempt: 0,
    };
    let first = policies.shape_pod(&ctx, pod.clone()).expect("shapes");
    policies
        .classify(&ctx, &pod, jiff::Timestamp::UNIX_EPOCH)
        .expect("classifies");

    // Each copy takes two compilations; a loaded machine may need a while.
    let until = Instant::now() + Duration::from_secs(120);
    while !watched.iter().all(|(c, s)| c.is_prepared_for(s)) {
        assert!(Instant::now() < until, "not all defaults were prepared");
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = policies.shape_pod(&ctx, pod).expect("shapes");
    assert_eq!(
        serde_json::to_value(&again.pod).unwrap(),
        serde_json::to_value(&first.pod).unwrap(),
        "the copies shape the pod as the plain components did"
    );
}
