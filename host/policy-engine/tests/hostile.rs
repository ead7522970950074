//! Hostile guests through the real sandbox: a policy cannot hang, exhaust memory, flood the
//! operator with output, crash it, reach files, environment or network, or change a forbidden
//! pod field; and the engine keeps serving other policies afterwards. A policy that keeps
//! failing trips its circuit breaker and is no longer called.

use crate::common;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::operator_pod;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tfjob_planner::{PodContext, PodPolicies};
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::capabilities::Capabilities;
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{
    ActivationError, ActivePolicy, BreakerConfig, Breakers, CallLimits, Category, CompiledPolicy,
    Hook, JobSelector, LabelExpression, PolicyEngine, PolicyManifest, PolicyMode, PolicySet,
    Registry, SandboxLimits, SelectorOperator, WasmPolicies, activate, activate_checked, defaults,
};

fn engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(PolicyEngine::new(SandboxLimits::default()).expect("engine starts"))
    })
}

/// An engine with a long deadline, for limits that must trip on their own account rather than
/// on the clock (filling 64 MiB or building 16 MiB takes a guest longer than 50 ms).
fn patient_engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(
            PolicyEngine::new(SandboxLimits {
                deadline: std::time::Duration::from_secs(30),
                ..SandboxLimits::default()
            })
            .expect("engine starts"),
        )
    })
}

fn patient_decorate(mode: &str) -> Result<String, tfjob_policy_engine::EvalError> {
    let e = patient_engine();
    let policy = e.compile(HOSTILE_POLICY_WASM).unwrap();
    e.at_maximum().decorate(
        &policy,
        "hostile",
        &wit_ctx(),
        &settings(mode),
        &pod().to_string(),
    )
}

fn hostile() -> Arc<CompiledPolicy> {
    engine()
        .compile(HOSTILE_POLICY_WASM)
        .expect("hostile policy compiles")
}

fn ctx() -> PodContext {
    PodContext::single_worker("ml", "mnist")
}

fn wit_ctx() -> JobContext {
    job_context(&ctx())
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mnist-worker-0", "namespace": "ml"},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]},
        "status": {"phase": "Running"}
    })
}

fn settings(mode: &str) -> String {
    json!({ "mode": mode }).to_string()
}

fn decorate(mode: &str) -> Result<String, tfjob_policy_engine::EvalError> {
    engine().at_maximum().decorate(
        &hostile(),
        "hostile",
        &wit_ctx(),
        &settings(mode),
        &pod().to_string(),
    )
}

#[test]
fn an_infinite_loop_is_stopped_by_the_deadline() {
    let started = Instant::now();
    let err = decorate("loop").unwrap_err();
    assert_eq!(err.category, Category::Timeout, "{err}");
    // Not a performance assertion: without a working deadline the call would never return.
    // The bound is generous so a loaded machine cannot make it flaky.
    assert!(
        started.elapsed().as_secs() < 10,
        "took {:?}",
        started.elapsed()
    );
    let err = engine()
        .at_maximum()
        .classify(
            &hostile(),
            "hostile",
            &wit_ctx(),
            &settings("loop"),
            &pod().to_string(),
            "2026-01-01T00:00:00Z",
        )
        .unwrap_err();
    assert_eq!(err.category, Category::Timeout);
}

#[test]
fn a_memory_bomb_hits_the_memory_cap() {
    let err = patient_decorate("memory").unwrap_err();
    assert_eq!(err.category, Category::Memory, "{err}");
    assert!(
        err.message.contains("memory limit of 67108864 bytes"),
        "{err}"
    );
}

#[test]
fn oversized_output_is_rejected() {
    let err = patient_decorate("big-output").unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    assert!(err.message.contains("output limit"), "{err}");
}

#[test]
fn a_panic_is_a_trap_not_a_crash() {
    let err = decorate("panic").unwrap_err();
    assert_eq!(err.category, Category::Trap, "{err}");
}

/// What the hostile guest reported about an attempt, in the annotation it adds.
fn reported(mode: &str) -> String {
    let out: Value =
        serde_json::from_str(&decorate(mode).expect("the guest reports instead of failing"))
            .unwrap();
    out["metadata"]["annotations"][format!("hostile/{mode}")]
        .as_str()
        .unwrap_or_else(|| panic!("no report in {out}"))
        .to_owned()
}

#[test]
fn files_environment_and_network_are_out_of_reach() {
    let file = reported("read-file");
    assert!(file.starts_with("denied"), "reading /etc/passwd: {file}");
    let env = reported("env");
    assert_eq!(env, "count=0 visible=false", "environment");
    let net = reported("network");
    assert!(net.starts_with("error: "), "network: {net}");
}

fn hostile_decorator(mode: &str, allowed_paths: Vec<String>) -> WasmPolicies {
    let manifest = PolicyManifest {
        name: format!("hostile-{mode}"),
        hooks: vec![Hook::Decorate],
        settings: json!({ "mode": mode }),
        allowed_paths,
        ..PolicyManifest::default()
    };
    let active =
        activate(engine(), manifest, HOSTILE_POLICY_WASM).expect("hostile policy activates");
    WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
}

fn base_pod() -> Pod {
    serde_json::from_value(pod()).unwrap()
}

#[test]
fn the_guard_rejects_forbidden_changes_naming_policy_and_path() {
    for (mode, path) in [
        ("change-image", "spec.containers[0].image"),
        ("privileged", "spec.containers[0].securityContext"),
        ("host-path", "hostPath"),
    ] {
        let err = hostile_decorator(mode, vec![])
            .shape_pod(&ctx(), base_pod())
            .unwrap_err();
        assert_eq!(err.category, Category::GuardViolation, "{mode}: {err}");
        assert!(err.policy.starts_with(&format!("hostile-{mode}@")), "{err}");
        assert!(err.message.contains(path), "{mode}: {err}");
    }
    // A host path is a capability: declared in the manifest, granted within the operator's
    // ceiling. The default ceiling allows only the NVIDIA driver directory.
    let declare_root = |m: &mut PolicyManifest| m.capabilities.host_paths = vec!["/".into()];
    let manifest = |edit: &dyn Fn(&mut PolicyManifest)| {
        let mut m = PolicyManifest {
            name: "hostile-host-path".into(),
            hooks: vec![Hook::Decorate],
            settings: json!({"mode": "host-path"}),
            ..PolicyManifest::default()
        };
        edit(&mut m);
        m
    };
    let err = activate(engine(), manifest(&declare_root), HOSTILE_POLICY_WASM).unwrap_err();
    assert!(err.message.contains("capabilities.hostPaths[0]"), "{err}");
    let permissive = permissive_engine();
    let active = activate(permissive, manifest(&declare_root), HOSTILE_POLICY_WASM)
        .expect("granted under a ceiling that allows /");
    let shaped = WasmPolicies::new(
        Arc::clone(permissive),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
    .shape_pod(&ctx(), base_pod())
    .expect("allowed explicitly");
    assert!(
        shaped
            .pod
            .spec
            .unwrap()
            .volumes
            .unwrap()
            .iter()
            .any(|v| v.host_path.is_some())
    );
}

/// An engine whose ceiling grants every capability a manifest declares.
fn permissive_engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(
            PolicyEngine::new(SandboxLimits {
                ceiling: Capabilities::everything(),
                ..SandboxLimits::default()
            })
            .expect("engine starts"),
        )
    })
}

#[test]
fn ignore_failure_policy_skips_a_broken_policy() {
    let manifest = PolicyManifest {
        name: "flaky".into(),
        hooks: vec![Hook::Decorate],
        failure_policy: tfjob_policy_engine::FailurePolicy::Ignore,
        settings: json!({"mode": "panic"}),
        ..PolicyManifest::default()
    };
    let active = activate(engine(), manifest, HOSTILE_POLICY_WASM).unwrap();
    let policies = WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    );
    let shaped = policies
        .shape_pod(&ctx(), base_pod())
        .expect("ignored, not fatal");
    assert!(shaped.applied.is_empty());
    assert_eq!(shaped.skipped.len(), 1);
    assert_eq!(shaped.skipped[0].category, Category::Trap);
    assert_eq!(shaped.pod, base_pod());
}

#[test]
fn the_engine_keeps_serving_after_hostile_calls() {
    for mode in ["loop", "memory", "panic", "big-output"] {
        assert!(decorate(mode).is_err());
    }
    // The same engine, the same compiled module, a well-behaved call.
    let out: Value = serde_json::from_str(&decorate("ok").unwrap()).unwrap();
    assert_eq!(out["spec"], pod()["spec"]);
    // And the default policies still run.
    let d = defaults::for_hook(Hook::Classify);
    let compiled = engine().compile(d.wasm).unwrap();
    let verdict = engine()
        .at_maximum()
        .classify(
            &compiled,
            d.name,
            &wit_ctx(),
            "{}",
            &pod().to_string(),
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
    assert_eq!(verdict.phase, tfjob_policy_engine::bindings::Phase::Running);
}

#[test]
fn modules_that_are_not_policies_are_link_errors() {
    let err = engine().compile(b"not wasm at all").unwrap_err();
    assert_eq!(err.category, Category::Link);
    let manifest = PolicyManifest {
        name: "wrong-hook".into(),
        hooks: vec![Hook::Decorate],
        settings: json!({}),
        ..PolicyManifest::default()
    };
    let err = activate(engine(), manifest, defaults::for_hook(Hook::Classify).wasm).unwrap_err();
    assert_eq!(err.category, Category::Link);
    assert!(err.message.contains("tfjob:policy/decorate@0.3.0"), "{err}");
}

#[test]
fn settings_are_validated_before_activation() {
    let manifest = PolicyManifest {
        name: "bad-mode".into(),
        hooks: vec![Hook::Decorate],
        settings: json!({"mode": "teleport"}),
        ..PolicyManifest::default()
    };
    let err = activate(engine(), manifest, HOSTILE_POLICY_WASM).unwrap_err();
    assert_eq!(err.category, Category::Settings);
    assert!(err.message.contains("mode"), "{err}");
}

#[test]
fn other_evaluations_carry_on_while_one_policy_loops() {
    let looping = std::thread::spawn(|| decorate("loop"));
    for _ in 0..5 {
        assert!(decorate("ok").is_ok());
    }
    assert_eq!(
        looping.join().unwrap().unwrap_err().category,
        Category::Timeout
    );
}

/// A component whose `validate-settings` accepts only a pristine instance: its data segment's
/// byte, a zero byte past it, its memory size, a mutable global and a freshly grown page all as
/// instantiation leaves them. Then it changes every one of them, so an evaluation that saw what
/// an earlier one left behind (a memory slot reused without being reset) reports `state leaked`.
const STATEFUL_WAT: &str = r#"
(component
  (core module $m
    (memory (export "memory") 1)
    (data (i32.const 16) "\01")
    (data (i32.const 32) "state leaked")
    (global $calls (mut i32) (i32.const 0))
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
        (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
      (global.set $heap (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    (func (export "validate") (param i32 i32) (result i32)
      (local $fresh i32)
      (local.set $fresh (i32.and
        (i32.and
          (i32.eq (i32.load8_u (i32.const 16)) (i32.const 1))
          (i32.eqz (i32.load8_u (i32.const 512))))
        (i32.and
          (i32.eq (memory.size) (i32.const 1))
          (i32.eqz (global.get $calls)))))
      (drop (memory.grow (i32.const 1)))
      (local.set $fresh (i32.and (local.get $fresh)
        (i32.eqz (i32.load8_u (i32.const 65552)))))
      (i32.store8 (i32.const 16) (i32.const 2))
      (i32.store8 (i32.const 512) (i32.const 7))
      (i32.store8 (i32.const 65552) (i32.const 9))
      (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
      (if (result i32) (local.get $fresh)
        (then
          (i32.store8 (i32.const 256) (i32.const 0))
          (i32.const 256))
        (else
          (i32.store8 (i32.const 256) (i32.const 1))
          (i32.store (i32.const 260) (i32.const 32))
          (i32.store (i32.const 264) (i32.const 12))
          (i32.const 256)))))
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias core export $i "validate" (core func $validate))
  (func $validate-settings (param "settings" string) (result (result (error string)))
    (canon lift (core func $validate) (memory $mem) (realloc $realloc)))
  (instance $settings (export "validate-settings" (func $validate-settings)))
  (export "tfjob:policy/settings@0.1.0" (instance $settings)))
"#;

#[test]
fn no_state_survives_an_evaluation() {
    let policy = engine()
        .compile(STATEFUL_WAT.as_bytes())
        .expect("the stateful component compiles");
    assert!(policy.validates_settings());
    // The same compiled module again and again: the pool hands its memory slot back to it.
    for call in 0..20 {
        engine()
            .validate_settings(&policy, "stateful", r#"{"call": 1}"#)
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Per-policy limits, mode and selector
// ---------------------------------------------------------------------------------------------

/// The hostile guest for `hooks` in `mode` with a manifest tweaked by `edit`, alone in a
/// registry served by `engine`.
fn hostile_policies(
    engine: &Arc<PolicyEngine>,
    hooks: Vec<Hook>,
    mode: &str,
    edit: impl FnOnce(&mut PolicyManifest),
) -> WasmPolicies {
    let mut manifest = PolicyManifest {
        name: format!("hostile-{mode}"),
        hooks,
        settings: json!({ "mode": mode }),
        ..PolicyManifest::default()
    };
    edit(&mut manifest);
    let active = activate(engine, manifest, HOSTILE_POLICY_WASM).expect("activates");
    WasmPolicies::new(
        Arc::clone(engine),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
}

#[test]
fn a_policy_deadline_bounds_every_hook_below_the_engine_deadline() {
    // The engine allows 30 s; the policy asks for 20 ms, and gets it on every hook.
    for hook in Hook::ALL {
        let policies = hostile_policies(patient_engine(), vec![hook], "loop", |m| {
            m.deadline_ms = Some(20);
        });
        let started = Instant::now();
        let err = match hook {
            Hook::Classify => policies
                .classify(&ctx(), &base_pod(), jiff::Timestamp::UNIX_EPOCH)
                .unwrap_err(),
            Hook::Decorate | Hook::Resources => policies.shape_pod(&ctx(), base_pod()).unwrap_err(),
        };
        assert_eq!(err.category, Category::Timeout, "{hook}: {err}");
        assert!(err.message.contains("deadline of 20ms"), "{hook}: {err}");
        // Far below the engine's 30 s; generous against a loaded machine.
        assert!(
            started.elapsed().as_secs() < 10,
            "{hook}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_policy_memory_cap_bounds_its_calls_below_the_engine_cap() {
    let policies = hostile_policies(patient_engine(), vec![Hook::Decorate], "memory", |m| {
        m.memory_mib = Some(8);
    });
    let err = policies.shape_pod(&ctx(), base_pod()).unwrap_err();
    assert_eq!(err.category, Category::Memory, "{err}");
    assert!(
        err.message.contains("memory limit of 8388608 bytes"),
        "{err}"
    );
    // The engine's own cap is still 64 MiB for a policy that sets none.
    let err = patient_decorate("memory").unwrap_err();
    assert!(
        err.message.contains("memory limit of 67108864 bytes"),
        "{err}"
    );
}

#[test]
fn a_policy_memory_cap_applies_to_validate_settings_too() {
    // The guest's initial memory alone is more than 1 MiB: activation runs validate-settings
    // under the policy's cap and refuses it.
    let manifest = PolicyManifest {
        name: "tiny".into(),
        hooks: vec![Hook::Decorate],
        memory_mib: Some(1),
        ..PolicyManifest::default()
    };
    let err = activate_checked(engine(), manifest, HOSTILE_POLICY_WASM).unwrap_err();
    let ActivationError::Settings(inner) = &err else {
        panic!("{err}")
    };
    assert_eq!(inner.category, Category::Memory, "{err}");
    assert!(inner.message.contains("1048576"), "{err}");
}

#[test]
fn limits_above_the_maximum_are_refused_naming_the_field() {
    for (deadline_ms, memory_mib, field) in [
        (Some(51), None, "deadlineMs"),
        (None, Some(65), "memoryMib"),
        (Some(0), None, "deadlineMs"),
    ] {
        let manifest = PolicyManifest {
            name: "greedy".into(),
            hooks: vec![Hook::Decorate],
            deadline_ms,
            memory_mib,
            ..PolicyManifest::default()
        };
        let err = activate_checked(engine(), manifest, HOSTILE_POLICY_WASM).unwrap_err();
        let ActivationError::Limits(limit) = &err else {
            panic!("{field}: {err}")
        };
        assert_eq!(limit.field, field);
        assert!(err.to_string().contains("operator's maximum"), "{err}");
    }
    // Whatever a caller asks of the engine directly, its maximum holds.
    let asked = CallLimits {
        deadline: std::time::Duration::from_secs(3600),
        memory: usize::MAX,
        tenant: None,
    };
    assert_eq!(
        engine().limited(asked).limits(),
        SandboxLimits::default().call_limits()
    );
}

#[test]
fn shadow_policies_and_unselected_jobs_are_not_enforced() {
    // A policy that would break every pod it touches shows whether it ran.
    let breaks = |edit: fn(&mut PolicyManifest)| {
        hostile_policies(engine(), vec![Hook::Decorate], "change-image", edit)
            .shape_pod(&ctx(), base_pod())
    };
    assert_eq!(
        breaks(|_| {}).unwrap_err().category,
        Category::GuardViolation,
        "enforced on every job by default"
    );
    let shaped = breaks(|m| m.mode = PolicyMode::Shadow).expect("a shadow policy is not applied");
    assert_eq!(shaped.pod, base_pod());
    assert!(shaped.applied.is_empty());

    // ctx(): namespace `ml`, no labels.
    let other_namespace = breaks(|m| m.selector.namespaces = vec!["vision".into()]);
    assert_eq!(other_namespace.unwrap().pod, base_pod());
    let this_namespace = breaks(|m| m.selector.namespaces = vec!["vision".into(), "ml".into()]);
    assert!(this_namespace.is_err());
    let needs_label = breaks(|m| {
        m.selector = JobSelector {
            match_labels: [("team".to_owned(), "vision".to_owned())].into(),
            ..JobSelector::default()
        }
    });
    assert!(needs_label.is_ok(), "the job has no team label");
    let unless_label = breaks(|m| {
        m.selector.match_expressions = vec![LabelExpression {
            key: "sandboxed".into(),
            operator: SelectorOperator::DoesNotExist,
            values: vec![],
        }]
    });
    assert!(unless_label.is_err(), "the job has no sandboxed label");

    // The same for classification: a shadow classifier leaves the verdict to the fallback.
    let shadow = hostile_policies(engine(), vec![Hook::Classify], "panic", |m| {
        m.mode = PolicyMode::Shadow
    });
    let verdict = shadow
        .classify(&ctx(), &base_pod(), jiff::Timestamp::UNIX_EPOCH)
        .expect("the panicking shadow classifier is not called")
        .verdict;
    assert!(!verdict.policy.starts_with("hostile"), "{verdict:?}");
}

// ---------------------------------------------------------------------------------------------
// Blocking, long texts, log floods, protected fields, capabilities and contradicting verdicts
// ---------------------------------------------------------------------------------------------

/// Runs `hook` of the hostile guest in `settings` on the plain pod through the engine.
fn call(hook: Hook, settings: &Value) -> Result<(), tfjob_policy_engine::EvalError> {
    let e = engine();
    let policy = hostile();
    let settings = settings.to_string();
    let pod = pod().to_string();
    match hook {
        Hook::Decorate => e
            .at_maximum()
            .decorate(&policy, "hostile", &wit_ctx(), &settings, &pod)
            .map(drop),
        Hook::Resources => e
            .at_maximum()
            .override_resources(
                &policy,
                "hostile",
                &wit_ctx(),
                &settings,
                "tensorflow",
                "{}",
            )
            .map(drop),
        Hook::Classify => e
            .at_maximum()
            .classify(
                &policy,
                "hostile",
                &wit_ctx(),
                &settings,
                &pod,
                "2026-01-01T00:00:00Z",
            )
            .map(drop),
    }
}

#[test]
fn a_guest_blocked_in_a_host_call_is_stopped_at_its_deadline() {
    for mode in ["sleep", "poll"] {
        for hook in Hook::ALL {
            let started = Instant::now();
            let err = call(hook, &json!({"mode": mode})).unwrap_err();
            assert_eq!(err.category, Category::Timeout, "{mode} {hook}: {err}");
            assert!(
                err.message.contains("may not block past its deadline"),
                "{err}"
            );
            // Not a performance assertion: without the bound the call would take an hour.
            assert!(
                started.elapsed().as_secs() < 10,
                "{mode} {hook}: {:?}",
                started.elapsed()
            );
        }
    }
    let started = Instant::now();
    let err = engine()
        .validate_settings(&hostile(), "hostile", r#"{"mode":"sleep-in-settings"}"#)
        .unwrap_err();
    assert_eq!(err.category, Category::Timeout, "{err}");
    assert!(started.elapsed().as_secs() < 10);
}

#[test]
fn an_ignored_sleeping_decorator_does_not_hold_up_the_pod() {
    let manifest = PolicyManifest {
        name: "sleepy".into(),
        hooks: vec![Hook::Decorate],
        failure_policy: tfjob_policy_engine::FailurePolicy::Ignore,
        settings: json!({"mode": "sleep"}),
        ..PolicyManifest::default()
    };
    let active = activate(engine(), manifest, HOSTILE_POLICY_WASM).unwrap();
    let policies = WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    );
    let shaped = policies.shape_pod(&ctx(), base_pod()).expect("ignored");
    assert_eq!(shaped.skipped.len(), 1);
    assert_eq!(shaped.skipped[0].category, Category::Timeout);
    assert_eq!(shaped.pod, base_pod());
}

#[test]
fn stdin_is_empty_and_never_blocks() {
    let out: Value = serde_json::from_str(&decorate("stdin").unwrap()).unwrap();
    assert_eq!(out["metadata"]["annotations"]["hostile/stdin"], "0");
}

#[test]
fn long_multibyte_error_texts_are_cut_at_character_boundaries() {
    // 10 KiB of 2-, 3- and 4-byte characters after 0..12 ASCII bytes: every cut the host
    // makes falls inside a character for some padding, and none may panic.
    for pad in 0..12 {
        for hook in Hook::ALL {
            let err = call(hook, &json!({"mode": "long-error", "pad": pad})).unwrap_err();
            assert_eq!(err.category, Category::InvalidOutput, "{hook} {pad}");
            assert!(
                err.message.len() <= 4096 + 64,
                "{hook} {pad}: {}",
                err.message.len()
            );
            assert!(err.message.ends_with('…'), "{hook} {pad}");
        }
        let err = engine()
            .validate_settings(
                &hostile(),
                "hostile",
                &json!({"mode": "long-error-in-settings", "pad": pad}).to_string(),
            )
            .unwrap_err();
        assert_eq!(err.category, Category::Settings, "{pad}");
        assert!(err.message.len() <= 4096 + 3, "{pad}");
        // Through activation, as a ConfigMap load would see it.
        let manifest = PolicyManifest {
            name: "long-error".into(),
            hooks: vec![Hook::Decorate],
            settings: json!({"mode": "long-error-in-settings", "pad": pad}),
            ..PolicyManifest::default()
        };
        let err = activate_checked(engine(), manifest, HOSTILE_POLICY_WASM).unwrap_err();
        assert!(err.to_string().len() <= 4096 + 64, "{pad}");
    }
}

#[test]
fn a_log_flood_of_empty_fields_ends_within_the_deadline() {
    // 100,000 records of 1,000 empty fields: the budget counts every record and field, and
    // the deadline ends the call; either way the call ends and the engine carries on.
    for hook in Hook::ALL {
        let started = Instant::now();
        match call(hook, &json!({"mode": "log-flood"})) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.category, Category::Timeout, "{hook}: {e}"),
        }
        assert!(
            started.elapsed().as_secs() < 10,
            "{hook}: {:?}",
            started.elapsed()
        );
    }
    assert!(decorate("ok").is_ok());
}

/// Decorates the operator's pod with the hostile guest setting `path` to `value`, on `engine`
/// with `capabilities` declared.
fn edit_pod(
    engine: &Arc<PolicyEngine>,
    path: &str,
    value: Value,
    capabilities: Capabilities,
) -> Result<Value, tfjob_planner::PolicyError> {
    let manifest = PolicyManifest {
        name: "editor".into(),
        hooks: vec![Hook::Decorate],
        settings: json!({"mode": "edit", "path": path, "value": value}),
        capabilities,
        ..PolicyManifest::default()
    };
    let active = activate(engine, manifest, HOSTILE_POLICY_WASM).expect("activates");
    let pod: Pod = serde_json::from_value(operator_pod()).unwrap();
    WasmPolicies::new(
        Arc::clone(engine),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
    .shape_pod(&ctx(), pod)
    .map(|s| serde_json::to_value(s.pod).unwrap())
}

#[test]
fn no_policy_may_touch_the_operators_own_fields() {
    for (path, value, reported) in [
        (
            "/metadata/labels/training.kubeflow.org~1replica-index",
            json!("7"),
            "metadata.labels[training.kubeflow.org/replica-index]",
        ),
        (
            "/metadata/labels/training.kubeflow.org~1job-role",
            json!("master"),
            "metadata.labels[training.kubeflow.org/job-role]",
        ),
        (
            "/metadata/annotations/policy.tfjob.dev~1policies",
            json!("forged"),
            "metadata.annotations[policy.tfjob.dev/policies]",
        ),
        (
            "/metadata/ownerReferences",
            json!([]),
            "metadata.ownerReferences",
        ),
        ("/metadata/name", json!("other"), "metadata.name"),
        (
            "/metadata/namespace",
            json!("kube-system"),
            "metadata.namespace",
        ),
        (
            "/spec/containers/0/env/0/value",
            json!("{\"cluster\":{\"worker\":[\"evil:2222\"]}}"),
            "spec.containers[0].env",
        ),
        (
            "/spec/containers/0/env",
            json!([]),
            "spec.containers[0].env",
        ),
        (
            "/spec/containers/0/ports/0/containerPort",
            json!(80),
            "spec.containers[0].ports",
        ),
        ("/spec/restartPolicy", json!("Always"), "spec.restartPolicy"),
        (
            "/spec/serviceAccountName",
            json!("admin"),
            "spec.serviceAccountName",
        ),
    ] {
        // Not even a cluster operator who grants everything can allow these.
        let err =
            edit_pod(permissive_engine(), path, value, Capabilities::everything()).unwrap_err();
        assert_eq!(err.category, Category::GuardViolation, "{path}: {err}");
        assert!(err.message.contains(reported), "{path}: {err}");
    }
}

#[test]
fn reaching_out_of_the_pod_needs_a_declared_and_allowed_capability() {
    let mount = json!({"name": "x", "mountPath": "/x", "readOnly": true});
    for (path, value, reported, capability) in [
        (
            "/spec/volumes",
            json!([{"name": "x", "secret": {"secretName": "db"}}]),
            "spec.volumes[0].secret",
            "secrets",
        ),
        (
            "/spec/containers/0/env/-",
            json!({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}),
            "secretKeyRef",
            "secrets",
        ),
        (
            "/spec/containers/0/envFrom",
            json!([{"secretRef": {"name": "db"}}]),
            "envFrom[0].secretRef",
            "secrets",
        ),
        (
            "/spec/volumes",
            json!([{"name": "x", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}]),
            "serviceAccountToken",
            "service-account-tokens",
        ),
        (
            "/spec/volumes",
            json!([{"name": "x", "csi": {"driver": "secrets-store.csi.k8s.io"}}]),
            "spec.volumes[0].csi",
            "external-volumes",
        ),
        (
            "/spec/volumes",
            json!([{"name": "x", "nfs": {"server": "10.0.0.1", "path": "/"}}]),
            "spec.volumes[0].nfs",
            "external-volumes",
        ),
    ] {
        let err = edit_pod(engine(), path, value.clone(), Capabilities::default()).unwrap_err();
        assert_eq!(err.category, Category::GuardViolation, "{path}: {err}");
        assert!(err.message.contains(reported), "{path}: {err}");
        assert!(err.message.contains("not granted"), "{path}: {err}");
        // Declared, but above the operator's default ceiling: refused when loading.
        let mut declared = Capabilities::default();
        declared.allow(capability).unwrap();
        let manifest = PolicyManifest {
            name: "editor".into(),
            hooks: vec![Hook::Decorate],
            settings: json!({"mode": "ok"}),
            capabilities: declared.clone(),
            ..PolicyManifest::default()
        };
        let err = activate(engine(), manifest, HOSTILE_POLICY_WASM).unwrap_err();
        assert!(err.message.contains("not allowed by the operator"), "{err}");
        // Declared and allowed: the change goes through.
        edit_pod(permissive_engine(), path, value, declared).expect("granted");
    }
    // A host path: only under a granted prefix, and only read-only.
    let driver = Capabilities {
        host_paths: vec!["/home/kubernetes/bin/nvidia".into()],
        ..Capabilities::default()
    };
    let with_mount = |host: &str, mount: Value| {
        let mut pod = operator_pod();
        pod["spec"]["volumes"] = json!([{"name": "x", "hostPath": {"path": host}}]);
        pod["spec"]["containers"][0]["volumeMounts"] = json!([mount]);
        pod
    };
    let whole = |host: &str, mount: Value| {
        edit_pod(
            engine(),
            "/spec",
            with_mount(host, mount)["spec"].clone(),
            driver.clone(),
        )
    };
    assert!(whole("/home/kubernetes/bin/nvidia", mount.clone()).is_ok());
    let err = whole("/", mount.clone()).unwrap_err();
    assert!(err.message.contains("spec.volumes[0].hostPath"), "{err}");
    let err = whole(
        "/home/kubernetes/bin/nvidia",
        json!({"name": "x", "mountPath": "/x"}),
    )
    .unwrap_err();
    assert!(err.message.contains("readOnly"), "{err}");
}

fn classify_with(
    verdict_phase: &str,
    failure: tfjob_policy_engine::FailurePolicy,
    pod: &Pod,
) -> Result<tfjob_planner::Verdict, tfjob_planner::PolicyError> {
    let manifest = PolicyManifest {
        name: "liar".into(),
        hooks: vec![Hook::Classify],
        failure_policy: failure,
        settings: json!({"mode": "verdict", "phase": verdict_phase}),
        ..PolicyManifest::default()
    };
    let active = activate(engine(), manifest, HOSTILE_POLICY_WASM).unwrap();
    WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
    .classify(&ctx(), pod, jiff::Timestamp::UNIX_EPOCH)
    .map(|c| c.verdict)
}

#[test]
fn a_verdict_that_contradicts_the_pod_is_invalid_output() {
    use tfjob_policy_engine::FailurePolicy;
    let running = base_pod();
    let err = classify_with("succeeded", FailurePolicy::Fail, &running).unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    assert!(
        err.message
            .contains("verdict succeeded contradicts the pod"),
        "{err}"
    );
    // Under Ignore the operator's own classification stands in.
    let v = classify_with("succeeded", FailurePolicy::Ignore, &running).unwrap();
    assert_eq!(v.phase, tfjob_planner::VerdictPhase::Running);
    // A finished pod cannot be read as still running.
    let mut failed = pod();
    failed["status"] = json!({"phase": "Failed"});
    let failed: Pod = serde_json::from_value(failed).unwrap();
    let err = classify_with("running", FailurePolicy::Fail, &failed).unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    // What the pod supports passes.
    let v = classify_with("retryable-failure", FailurePolicy::Fail, &running).unwrap();
    assert_eq!(v.phase, tfjob_planner::VerdictPhase::RetryableFailure);
}

#[test]
fn a_module_crafted_to_compile_slowly_is_refused_before_compiling() {
    // One function with 20,000 locals (register allocation grows faster than linearly), as a
    // component and as text: both are refused by the shape check, before Cranelift sees them.
    let wat = format!(
        "(component (core module (func (local {}) (local.get 0) drop)))",
        "i32 ".repeat(20_000)
    );
    for bytes in [wat::parse_str(&wat).unwrap(), wat.clone().into_bytes()] {
        let err = engine().compile(&bytes).unwrap_err();
        assert_eq!(err.category, Category::Link, "{err}");
        assert!(err.message.contains("locals"), "{err}");
        assert!(err.message.contains("refused before compiling"), "{err}");
    }
    // The engine goes on compiling and serving other modules.
    assert!(decorate("ok").is_ok());
}

/// The hostile policy as built against contract 0.1.0 (before `recheck-at`), kept to prove
/// that components built then still run.
const HOSTILE_0_1_0: &[u8] = include_bytes!("data/hostile-policy-0.1.0.wasm");

#[test]
fn components_built_against_contract_0_1_0_run_every_hook_and_their_verdicts_are_not_reused() {
    let old = engine()
        .compile(HOSTILE_0_1_0)
        .expect("a 0.1.0 component compiles");
    assert_eq!(old.contract(), "0.1.0");
    assert_eq!(old.hooks(), Hook::ALL.to_vec());
    assert!(old.validates_settings());
    assert!(
        old.exports
            .iter()
            .any(|e| e == "tfjob:policy/classify@0.1.0"),
        "{:?}",
        old.exports
    );
    assert_eq!(hostile().contract(), "0.3.0");

    let settings = r#"{"mode": "ok"}"#;
    let limited = engine().limited(engine().limits().call_limits());
    limited.validate_settings(&old, "old", settings).unwrap();
    // Settings are still checked by the component itself.
    let refused = limited
        .validate_settings(&old, "old", r#"{"mode": "nonsense"}"#)
        .unwrap_err();
    assert_eq!(refused.category, Category::Settings, "{refused}");
    let pod = pod().to_string();
    assert_eq!(
        limited
            .decorate(&old, "old", &wit_ctx(), settings, &pod)
            .unwrap(),
        pod
    );
    let requirements = r#"{"limits":{"cpu":"1"}}"#;
    assert_eq!(
        limited
            .override_resources(
                &old,
                "old",
                &wit_ctx(),
                settings,
                "tensorflow",
                requirements
            )
            .unwrap(),
        requirements
    );

    // Through the seam: the verdict says "ask again now", so it is never kept.
    let mut manifest = PolicyManifest {
        name: "old".into(),
        hooks: vec![Hook::Classify],
        settings: json!({"mode": "verdict", "phase": "running"}),
        ..PolicyManifest::default()
    };
    manifest.failure_policy = tfjob_policy_engine::FailurePolicy::Fail;
    let active = activate(engine(), manifest, HOSTILE_0_1_0).expect("activates");
    let policies = WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    );
    let mut observed = base_pod();
    observed.metadata.uid = Some("pod-uid".into());
    observed.metadata.resource_version = Some("7".into());
    let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let verdict = policies.classify(&ctx(), &observed, now).unwrap().verdict;
    assert_eq!(verdict.phase, tfjob_planner::VerdictPhase::Running);
    assert_eq!(verdict.recheck_at, Some(now));
    assert_eq!(policies.cached_verdicts(), 0);
}

#[test]
fn a_recheck_time_is_checked_like_any_output() {
    let classify = |recheck_at: Value| {
        let policies = hostile_policies(engine(), vec![Hook::Classify], "verdict", |m| {
            m.settings = json!({"mode": "verdict", "phase": "running", "recheckAt": recheck_at});
            m.failure_policy = tfjob_policy_engine::FailurePolicy::Fail;
        });
        let mut observed = base_pod();
        observed.metadata.uid = Some("pod-uid".into());
        observed.metadata.resource_version = Some("7".into());
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let result = policies.classify(&ctx(), &observed, now);
        (result, policies.cached_verdicts())
    };
    // Not a time: refused as invalid output, naming the field, never kept.
    let (result, kept) = classify(json!("tomorrow"));
    let err = result.unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    assert!(err.message.contains("recheck-at"), "{err}");
    assert_eq!(kept, 0);
    // Nearly a megabyte of it: refused, and the message quotes only the start of it.
    let (result, _) = classify(json!("9".repeat(900 << 10)));
    let err = result.unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput);
    assert!(err.message.len() < 1024, "{} bytes", err.message.len());
    // In the past: valid, and never reused. Far in the future: kept (until the pod changes).
    let (result, kept) = classify(json!("1970-01-01T00:00:00Z"));
    assert!(result.is_ok());
    assert_eq!(kept, 0);
    let (result, kept) = classify(json!("9000-01-01T00:00:00Z"));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(kept, 1);
}

// ---------------------------------------------------------------------------------------------
// Circuit breakers
// ---------------------------------------------------------------------------------------------

/// `hostile` in `mode` as a decoration policy called `name`.
fn hostile_decoration(
    name: &str,
    mode: &str,
    edit: impl FnOnce(&mut PolicyManifest),
) -> ActivePolicy {
    let mut manifest = PolicyManifest {
        name: name.to_owned(),
        hooks: vec![Hook::Decorate],
        settings: json!({ "mode": mode }),
        ..PolicyManifest::default()
    };
    edit(&mut manifest);
    activate(engine(), manifest, HOSTILE_POLICY_WASM).expect("activates")
}

/// The default decoration policy, which sets `TFJOB_NAME` on every container.
fn default_decoration() -> ActivePolicy {
    let d = defaults::for_hook(Hook::Decorate);
    activate(engine(), defaults::manifest(d), d.wasm).expect("the default activates")
}

/// `policies` with their metrics counted, breakers tripping after `threshold` failures and
/// staying open for an hour (no test waits for one to close), and a reader of the metrics:
/// the sum of the samples of a family whose labels contain every one of `labels`.
fn with_breakers(
    policies: WasmPolicies,
    threshold: u32,
) -> (WasmPolicies, Breakers, impl Fn(&str, &[&str]) -> f64) {
    let mut metrics = prometheus_client::registry::Registry::default();
    let policy_metrics = tfjob_policy_engine::PolicyMetrics::register(&mut metrics);
    let breakers = Breakers::new(BreakerConfig {
        threshold,
        first_open: Duration::from_secs(3600),
        max_open: Duration::from_secs(3600),
    });
    let policies = policies
        .with_metrics(policy_metrics)
        .with_breakers(breakers.clone());
    let sample = move |family: &str, labels: &[&str]| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics).unwrap();
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter(|l| labels.iter().all(|label| l.contains(label)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (policies, breakers, sample)
}

fn policies_of(set: Vec<ActivePolicy>) -> (WasmPolicies, Arc<Registry>) {
    let registry = Arc::new(Registry::new(PolicySet::new(set)));
    (
        WasmPolicies::new(Arc::clone(engine()), Arc::clone(&registry)),
        registry,
    )
}

fn decorated_by_default(pod: &Pod) -> bool {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .any(|e| e.name == "TFJOB_NAME")
}

#[test]
fn a_policy_that_keeps_failing_trips_its_breaker_and_is_no_longer_called() {
    use tfjob_policy_engine::FailurePolicy;
    let ignored = |m: &mut PolicyManifest| m.failure_policy = FailurePolicy::Ignore;
    let (policies, registry) = policies_of(vec![
        hostile_decoration("looper", "loop", ignored),
        default_decoration(),
    ]);
    let (policies, breakers, sample) = with_breakers(policies, 3);
    let calls = || sample("tfjob_policy_evaluations_total", &[r#"policy="looper""#]);

    // Each call runs into the deadline; the pods are made without the policy.
    for call in 1..=3 {
        let shaped = policies.shape_pod(&ctx(), base_pod()).expect("ignored");
        assert_eq!(shaped.skipped.len(), 1);
        assert_eq!(shaped.skipped[0].category, Category::Timeout, "call {call}");
        assert!(decorated_by_default(&shaped.pod));
        assert!(shaped.notes.iter().all(|n| n.reason != "PolicyTripped"));
    }
    assert_eq!(calls(), 3.0);
    let tripped = breakers.tripped();
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    assert_eq!(tripped[0].key.name, "looper");
    assert_eq!(
        (tripped[0].category, tripped[0].failures, tripped[0].trips),
        (Category::Timeout, 3, 1)
    );
    assert_eq!(
        sample("tfjob_policy_breaker_open", &[r#"policy="looper""#]),
        1.0
    );
    assert_eq!(
        sample("tfjob_policy_breaker_trips_total", &[r#"policy="looper""#]),
        1.0
    );

    // Tripped: not called any more, by this seam or a pinned view of it (one set of breakers),
    // and the other policies still shape every pod.
    let pinned = policies.pinned().expect("a pinned view");
    for view in [&policies as &dyn PodPolicies, pinned.as_ref()] {
        for _ in 0..5 {
            let shaped = view.shape_pod(&ctx(), base_pod()).expect("still ignored");
            assert!(decorated_by_default(&shaped.pod));
            assert!(
                shaped
                    .applied
                    .iter()
                    .any(|a| a.starts_with("default-decorate@"))
            );
            assert_eq!(shaped.skipped.len(), 1);
            let skipped = &shaped.skipped[0];
            assert_eq!(skipped.category, Category::Tripped, "{skipped}");
            assert!(skipped.policy.starts_with("looper@"), "{skipped}");
            assert!(
                skipped
                    .message
                    .contains("is tripped after 3 consecutive timeout failures"),
                "{skipped}"
            );
            assert!(skipped.message.contains("tried again at"), "{skipped}");
            let note = shaped
                .notes
                .iter()
                .find(|n| n.reason == "PolicyTripped")
                .expect("a PolicyTripped note");
            assert!(note.warning);
            assert_eq!(note.key, "breaker-open", "one event per job, not per pod");
            assert_eq!(note.policy, skipped.policy);
        }
    }
    assert_eq!(calls(), 3.0, "a tripped policy is not called");
    assert_eq!(
        sample(
            "tfjob_policy_errors_total",
            &[r#"policy="looper""#, r#"category="tripped""#]
        ),
        10.0
    );

    // A new version (other settings) starts with a closed breaker: it is called again.
    registry.swap(PolicySet::new([
        hostile_decoration("looper", "panic", ignored),
        default_decoration(),
    ]));
    let shaped = policies.shape_pod(&ctx(), base_pod()).expect("ignored");
    assert_eq!(shaped.skipped[0].category, Category::Trap);
    assert_eq!(calls(), 4.0);
    assert!(breakers.tripped().is_empty(), "{:?}", breakers.tripped());
    assert_eq!(
        sample("tfjob_policy_breaker_open", &[r#"policy="looper""#]),
        0.0
    );
}

#[test]
fn a_tripped_policy_under_fail_fails_the_pod_as_tripped() {
    let (policies, _) = policies_of(vec![hostile_decoration("crasher", "panic", |_| {})]);
    let (policies, _, sample) = with_breakers(policies, 2);
    for _ in 0..2 {
        let err = policies.shape_pod(&ctx(), base_pod()).unwrap_err();
        assert_eq!(err.category, Category::Trap, "{err}");
    }
    for _ in 0..3 {
        let err = policies.shape_pod(&ctx(), base_pod()).unwrap_err();
        assert_eq!(err.category, Category::Tripped, "{err}");
        assert!(err.policy.starts_with("crasher@"), "{err}");
        assert!(
            err.message
                .contains("is tripped after 2 consecutive trap failures"),
            "{err}"
        );
    }
    assert_eq!(
        sample("tfjob_policy_evaluations_total", &[r#"policy="crasher""#]),
        2.0
    );
}

#[test]
fn a_shadow_policy_trips_its_own_breaker_not_its_enforced_namesakes() {
    let (policies, _) = policies_of(vec![
        hostile_decoration("twin", "ok", |_| {}),
        hostile_decoration("twin", "panic", |m| m.mode = PolicyMode::Shadow),
    ]);
    let (policies, breakers, sample) = with_breakers(policies, 2);
    for call in 0..5 {
        let shaped = policies
            .shape_pod(&ctx(), base_pod())
            .expect("the shadow changes nothing");
        assert!(
            shaped.applied.iter().any(|a| a.starts_with("twin@")),
            "the enforced twin keeps being applied: {:?}",
            shaped.applied
        );
        let reasons: Vec<&str> = shaped.notes.iter().map(|n| n.reason.as_str()).collect();
        let expected = if call < 2 {
            "PolicyShadowFailed"
        } else {
            "PolicyTripped"
        };
        assert_eq!(reasons, vec![expected], "call {call}");
        if call >= 2 {
            assert_eq!(shaped.notes[0].key, "shadow/breaker-open");
        }
    }
    let tripped = breakers.tripped();
    assert_eq!(tripped.len(), 1);
    assert_eq!(tripped[0].key.mode, PolicyMode::Shadow);
    assert_eq!(
        sample(
            "tfjob_policy_evaluations_total",
            &[r#"policy="twin""#, r#"mode="Shadow""#]
        ),
        2.0
    );
    assert_eq!(
        sample(
            "tfjob_policy_evaluations_total",
            &[r#"policy="twin""#, r#"mode="Enforce""#]
        ),
        5.0
    );
}

#[test]
fn a_policy_that_fights_kueue_is_refused_while_the_job_is_queued() {
    // The pod as built from a template Kueue wrote at admission: the flavor's node label and
    // toleration, and a label of its own.
    let mut placed = operator_pod();
    placed["spec"]["nodeSelector"] = json!({"instance-type": "spot"});
    placed["spec"]["tolerations"] =
        json!([{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]);
    placed["metadata"]["labels"]["kueue.x-k8s.io/podset"] = json!("worker");
    let queued = |queue: Option<&str>| {
        let mut c = ctx();
        if let Some(q) = queue {
            c.job_labels
                .insert("kueue.x-k8s.io/queue-name".into(), q.into());
        }
        c
    };
    let shape = |path: &str, value: Value, queue: Option<&str>| {
        let manifest = PolicyManifest {
            name: "fights-kueue".into(),
            hooks: vec![Hook::Decorate],
            settings: json!({"mode": "edit", "path": path, "value": value}),
            ..PolicyManifest::default()
        };
        let active = activate(engine(), manifest, HOSTILE_POLICY_WASM).expect("activates");
        let pod: Pod = serde_json::from_value(placed.clone()).unwrap();
        WasmPolicies::new(
            Arc::clone(engine()),
            Arc::new(Registry::new(PolicySet::new([active]))),
        )
        .shape_pod(&queued(queue), pod)
        .map(|s| serde_json::to_value(s.pod).unwrap())
    };
    for (path, value, reported) in [
        (
            "/spec/nodeSelector/instance-type",
            json!("on-demand"),
            "spec.nodeSelector[instance-type]",
        ),
        (
            "/spec/nodeSelector",
            json!({}),
            "spec.nodeSelector[instance-type]",
        ),
        ("/spec/tolerations", json!([]), "spec.tolerations[0]"),
        (
            "/metadata/labels/kueue.x-k8s.io~1podset",
            json!("ps"),
            "metadata.labels[kueue.x-k8s.io/podset]",
        ),
    ] {
        let err = shape(path, value.clone(), Some("user-queue")).unwrap_err();
        assert_eq!(err.category, Category::GuardViolation, "{path}: {err}");
        assert!(err.policy.starts_with("fights-kueue@"), "{err}");
        assert!(
            err.message.contains(&format!(
                "may not change {reported} (Kueue placed it and the job's queue label is set)"
            )),
            "{path}: {err}"
        );
        // The same edit on a job no queue holds is within the default allowed paths.
        shape(path, value, None).unwrap_or_else(|e| panic!("{path} unqueued: {e}"));
    }
    // Adding is narrowing, not fighting.
    let narrowed = shape("/spec/nodeSelector/zone", json!("a"), Some("user-queue"))
        .expect("a policy may add a node selector entry");
    assert_eq!(
        narrowed["spec"]["nodeSelector"],
        json!({"instance-type": "spot", "zone": "a"})
    );
}
