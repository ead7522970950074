//! The default policies through the real Wasm path: the embedded components, compiled and run
//! by the engine in the sandbox, against the behaviour tables of `default-policies.md`.
//!
//! The cases live in the default policies' test suites (`guest-policies/*/tests/*.yaml`, run by
//! `tfjob-operator policy test --suite` in `host/operator/tests/policy_suites.rs`). Here every
//! classification case is checked both against the verdict its suite expects and against the
//! native `tfjob_policy_logic` classification with the same settings, and every decoration and
//! resource case against the native logic (its pods are in k8s-openapi's own encoding). What a
//! suite cannot say (raw settings text, order of JSON keys, the pipeline of several policies)
//! is checked here directly. The last tests load policies the way the operator's flags do:
//! `--policy-config` overrides of the defaults and a `--policy-dir` directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tfjob_planner::{PodContext, PodPolicies, VerdictPhase};
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::defaults::{self, HOSTILE_POLICY_WASM};
use tfjob_policy_engine::hook_call::{job_context, verdict_from};
use tfjob_policy_engine::local::{LocalError, PolicyConfig, load_policy_config, load_policy_dir};
use tfjob_policy_engine::{
    APPLIED_ANNOTATION, ActivePolicy, Category, CompiledPolicy, EvalError, Hook, PolicyEngine,
    PolicySet, Registry, SandboxLimits, WasmPolicies,
};
use tfjob_policy_logic::classify::classify_pod;
use tfjob_policy_logic::classify_settings::ClassifySettingsDoc;
use tfjob_policy_logic::context::JobContext as LogicContext;
use tfjob_policy_logic::decorate::{DecorateSettings, decorate_pod};
use tfjob_policy_logic::resources::{ResourceRules, ResourceSettings, override_resources};
use tfjob_policy_logic::settings::settings_from_json;

/// One engine for the whole file. Its deadline is generous: these tests check what the policies
/// decide, not the sandbox's clock, and a loaded CI machine must not turn a decision into a
/// timeout.
fn engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(
            PolicyEngine::new(SandboxLimits {
                deadline: Duration::from_secs(30),
                ..SandboxLimits::default()
            })
            .expect("engine starts"),
        )
    })
}

/// The embedded default policy for `hook`, compiled (once per digest) by the shared engine.
fn default_policy(hook: Hook) -> (Arc<CompiledPolicy>, &'static str) {
    let d = defaults::for_hook(hook);
    let compiled = engine().compile(d.wasm).expect("default policy compiles");
    assert_eq!(
        compiled.hooks(),
        vec![hook],
        "{} exports its hook only",
        d.name
    );
    (compiled, d.name)
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The pods of the classification suite; `worker.yaml`, a pod before any policy, is shared
/// with the operator's tests.
fn pods_dir() -> PathBuf {
    repo("guest-policies/classify/tests/pods")
}

fn read_yaml(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A pod file of the classification suite (or `worker.yaml`), decoded as the operator holds it.
fn pod_file(file: &str) -> Pod {
    let path = match file {
        "worker.yaml" => repo("tests/data/pods/worker.yaml"),
        _ => pods_dir().join(file),
    };
    serde_json::from_value(read_yaml(&path)).unwrap_or_else(|e| panic!("{file} is not a Pod: {e}"))
}

fn ctx() -> PodContext {
    PodContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "uid-1".into(),
        job_labels: BTreeMap::new(),
        job_annotations: BTreeMap::new(),
        replica_type: "Worker".into(),
        replica_index: 3,
        replica_count: 4,
        attempt: 2,
    }
}

fn wit_ctx(c: &PodContext) -> JobContext {
    job_context(c)
}

fn logic_ctx(c: &PodContext) -> LogicContext {
    LogicContext {
        job_name: c.job_name.clone(),
        namespace: c.namespace.clone(),
        job_uid: c.job_uid.clone(),
        job_labels: c.job_labels.clone(),
        job_annotations: c.job_annotations.clone(),
        replica_type: c.replica_type.clone(),
        replica_index: c.replica_index,
        replica_count: c.replica_count,
        attempt: c.attempt,
    }
}

fn at(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not RFC 3339: {e}"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

/// A suite of `guest-policies/*/tests/`, read for what these tests compare: the settings and the
/// input of each case, and what it expects (the suite runner checks the expectations in full).
#[derive(Debug, Deserialize)]
struct Suite {
    #[serde(default)]
    context: Option<Value>,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    settings: Option<Value>,
    input: Input,
    expect: Value,
}

#[derive(Debug, Deserialize)]
struct Input {
    pod: Value,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    container: Option<String>,
}

fn suite(path: &str) -> Suite {
    let path = repo(path);
    serde_json::from_value(read_yaml(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The classification suite's cases; each expects the whole verdict.
fn cases() -> Vec<Case> {
    suite("guest-policies/classify/tests/classification.yaml").cases
}

impl Case {
    /// The settings text the case runs with; `default` when it gives none (the operator's).
    fn settings_text(&self, default: &Value) -> String {
        self.settings.as_ref().unwrap_or(default).to_string()
    }

    /// The pod file of a classification case.
    fn pod_file(&self) -> &str {
        let file = self
            .input
            .pod
            .as_str()
            .expect("classification pods are files");
        file.strip_prefix("pods/").expect("in pods/")
    }

    fn now(&self) -> &str {
        self.input
            .now
            .as_deref()
            .expect("classification cases give now")
    }

    /// The verdict expected.
    fn verdict(&self) -> &Value {
        &self.expect["result"]
    }

    /// The job context: the suite's with the case's fields laid over it.
    fn context(&self, suite: &Suite) -> PodContext {
        let mut fields = serde_json::Map::new();
        for part in [&suite.context, &self.input.context].into_iter().flatten() {
            fields.extend(
                part.as_object()
                    .expect("contexts are inline mappings")
                    .clone(),
            );
        }
        let c: SuiteContext = serde_json::from_value(Value::Object(fields))
            .unwrap_or_else(|e| panic!("{}: context: {e}", self.name));
        PodContext {
            job_name: c.job_name,
            namespace: c.namespace,
            job_uid: c.job_uid,
            job_labels: c.job_labels,
            job_annotations: c.job_annotations,
            replica_type: c.replica_type,
            replica_index: c.replica_index,
            replica_count: c.replica_count,
            attempt: c.attempt,
        }
    }
}

/// A suite's job context (the suites of the defaults give every field).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SuiteContext {
    job_name: String,
    namespace: String,
    job_uid: String,
    #[serde(default)]
    job_labels: BTreeMap<String, String>,
    #[serde(default)]
    job_annotations: BTreeMap<String, String>,
    replica_type: String,
    replica_index: i32,
    replica_count: i32,
    attempt: i32,
}

/// Classifies `pod` with the Wasm default and returns the verdict as the planner gets it, in
/// its JSON form, with the raw `occurred-at` text the guest returned.
fn wasm_classify(
    settings: &str,
    pod: &Pod,
    now: &str,
) -> Result<(Value, Option<String>), EvalError> {
    let (policy, name) = default_policy(Hook::Classify);
    let pod_json = serde_json::to_string(pod).expect("pods serialise");
    let raw = engine().at_maximum().classify(
        &policy,
        name,
        &wit_ctx(&ctx()),
        settings,
        &pod_json,
        now,
    )?;
    let occurred_at = raw.occurred_at.clone();
    let verdict = verdict_from(raw, name)?;
    Ok((
        serde_json::to_value(&verdict).expect("verdicts serialise"),
        occurred_at,
    ))
}

/// The native reference classification with the same settings document, in the same JSON form.
fn native_classify(settings: &str, pod: &Pod, now: &str) -> Value {
    let doc: ClassifySettingsDoc =
        settings_from_json(settings).unwrap_or_else(|e| panic!("settings {settings}: {e}"));
    let settings = doc.to_settings().expect("valid settings");
    serde_json::to_value(classify_pod(&settings, pod, at(now))).expect("verdicts serialise")
}

#[test]
fn every_classification_case_through_wasm_matches_the_table_and_the_native_logic() {
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let pod = pod_file(case.pod_file());
        let settings = case.settings_text(&json!({}));
        let (wasm, raw_occurred_at) = match wasm_classify(&settings, &pod, case.now()) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{}: the Wasm policy failed: {e}", case.name));
                continue;
            }
        };
        let native = native_classify(&settings, &pod, case.now());
        if &wasm != case.verdict() {
            failures.push(format!(
                "{}: Wasm verdict\n  {wasm}\nexpected\n  {}",
                case.name,
                case.verdict()
            ));
        }
        if wasm != native {
            failures.push(format!(
                "{}: Wasm verdict\n  {wasm}\nnative verdict\n  {native}",
                case.name
            ));
        }
        // The guest spells the time as RFC 3339 in UTC, exactly as the table writes it.
        if raw_occurred_at.as_deref() != case.verdict()["occurredAt"].as_str() {
            failures.push(format!(
                "{}: occurred-at {raw_occurred_at:?}, expected {}",
                case.name,
                case.verdict()["occurredAt"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_cases_cover_every_row_of_the_classification_table() {
    let cases = cases();
    let reasons: Vec<&str> = cases
        .iter()
        .filter_map(|c| c.verdict()["reason"].as_str())
        .collect();
    for wanted in [
        "Unschedulable",
        "|ErrImagePull",
        "|ContainerCreating",
        "|PodInitializing",
        "|ImagePullBackOff",
        "|CreateContainerError",
        "|CreateContainerConfigError",
        "|InvalidImageName",
        "|ErrImageNeverPull",
        "ContainersNotInitialized|",
        "PodPendingTimeout",
        "OOMKilled",
        "Interrupted",
        "UnknownError",
        "Evicted",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(wanted)),
            "no case with reason {wanted:?}"
        );
    }
    let phases: Vec<&str> = cases
        .iter()
        .filter_map(|c| c.verdict()["phase"].as_str())
        .collect();
    for phase in [
        "undefined",
        "queued",
        "initializing",
        "running",
        "succeeded",
        "retryable-failure",
        "permanent-failure",
    ] {
        assert!(phases.contains(&phase), "no case with phase {phase}");
    }
    // Grace periods: a case inside and one at the end of each.
    for reason in [
        "|ImagePullBackOff",
        "|CreateContainerError",
        "|CreateContainerConfigError",
    ] {
        let outcomes: Vec<&str> = cases
            .iter()
            .filter(|c| {
                c.verdict()["reason"]
                    .as_str()
                    .is_some_and(|r| r.ends_with(reason))
            })
            .filter_map(|c| c.verdict()["phase"].as_str())
            .collect();
        assert!(outcomes.contains(&"initializing"), "{reason}: {outcomes:?}");
        assert!(
            outcomes.iter().any(|p| p.ends_with("-failure")),
            "{reason}: {outcomes:?}"
        );
    }
    // Every pod file is used, and every case's pod exists.
    let mut files: Vec<String> = std::fs::read_dir(pods_dir())
        .expect("pods dir")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    for f in &files {
        assert!(
            cases.iter().any(|c| c.pod_file() == f),
            "{f} is not used by a case"
        );
    }
    for c in &cases {
        assert!(
            files.iter().any(|f| f == c.pod_file()),
            "{}: no pod file {}",
            c.name,
            c.pod_file()
        );
    }
}

#[test]
fn classification_errors_name_the_input() {
    let pod = pod_file("running.yaml");
    let err = wasm_classify("{}", &pod, "soon").unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    assert!(err.message.contains("now: "), "{err}");
    let err = wasm_classify(
        r#"{"podPendingTimeout": "10 minutes"}"#,
        &pod,
        "2026-01-01T00:00:00Z",
    )
    .unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(
        err.message
            .starts_with("podPendingTimeout: invalid duration \"10 minutes\""),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Decoration
// ---------------------------------------------------------------------------------------------

/// A pod in k8s-openapi's own encoding, so that the Wasm policy (which edits the JSON document)
/// and the native logic (which decodes the whole pod) can be compared value for value.
fn canonical(pod: Value) -> Value {
    let pod: Pod = serde_json::from_value(pod).expect("a Pod");
    serde_json::to_value(pod).expect("pods serialise")
}

fn wasm_decorate(settings: &str, c: &PodContext, pod: &Value) -> Result<Value, EvalError> {
    let (policy, name) = default_policy(Hook::Decorate);
    let out =
        engine()
            .at_maximum()
            .decorate(&policy, name, &wit_ctx(c), settings, &pod.to_string())?;
    Ok(serde_json::from_str(&out).expect("the decorated pod is JSON"))
}

/// Decorates through Wasm and checks the result equals the native logic's.
fn decorate(settings: &str, c: &PodContext, pod: &Value) -> Value {
    let wasm = wasm_decorate(settings, c, pod).unwrap_or_else(|e| panic!("{e}"));
    let native_settings: DecorateSettings =
        settings_from_json(settings).unwrap_or_else(|e| panic!("{e}"));
    let native = decorate_pod(
        &native_settings,
        &logic_ctx(c),
        serde_json::from_value(pod.clone()).unwrap(),
    );
    assert_eq!(
        wasm,
        serde_json::to_value(native).unwrap(),
        "Wasm and native decoration differ for settings {settings}"
    );
    wasm
}

fn env(pod: &Value, list: &str, i: usize) -> Vec<(String, String)> {
    pod["spec"][list][i]["env"]
        .as_array()
        .unwrap_or_else(|| panic!("no env on {list}[{i}] of {pod}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

const EXECUTION_ENV: [(&str, &str); 6] = [
    ("TFJOB_NAME", "mnist"),
    ("TFJOB_NAMESPACE", "ml"),
    ("TFJOB_UID", "uid-1"),
    ("TFJOB_REPLICA_TYPE", "Worker"),
    ("TFJOB_REPLICA_INDEX", "3"),
    ("TFJOB_ATTEMPT", "2"),
];

fn env_pod() -> Value {
    canonical(json!({
        "metadata": {"name": "mnist-worker-3", "namespace": "ml"},
        "spec": {
            "initContainers": [{"name": "fetch-data", "image": "busybox:1.36"}],
            "containers": [
                {"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0",
                 "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                         {"name": "TFJOB_ATTEMPT", "value": "mine"}]},
                {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}
            ]
        }
    }))
}

#[test]
fn decoration_adds_the_execution_env_then_default_env_vars_in_order() {
    // Raw JSON: the order of defaultEnvVars is the order written.
    let settings = r#"{"defaultEnvVars": {"Z_FIRST": "1", "A_SECOND": "$(Z_FIRST)", "TF_CPP_MIN_LOG_LEVEL": "0"}}"#;
    let out = decorate(settings, &ctx(), &env_pod());
    let mut fetch = pairs(&EXECUTION_ENV);
    fetch.extend(pairs(&[
        ("Z_FIRST", "1"),
        ("A_SECOND", "$(Z_FIRST)"),
        ("TF_CPP_MIN_LOG_LEVEL", "0"),
    ]));
    assert_eq!(env(&out, "initContainers", 0), fetch);
    assert_eq!(env(&out, "containers", 1), fetch);
    // The container's own variables stay first and keep their values.
    assert_eq!(
        env(&out, "containers", 0),
        pairs(&[
            ("TF_CPP_MIN_LOG_LEVEL", "2"),
            ("TFJOB_ATTEMPT", "mine"),
            ("TFJOB_NAME", "mnist"),
            ("TFJOB_NAMESPACE", "ml"),
            ("TFJOB_UID", "uid-1"),
            ("TFJOB_REPLICA_TYPE", "Worker"),
            ("TFJOB_REPLICA_INDEX", "3"),
            ("Z_FIRST", "1"),
            ("A_SECOND", "$(Z_FIRST)"),
        ])
    );
}

#[test]
fn default_settings_add_only_the_execution_env() {
    let pod = env_pod();
    for settings in ["{}", "", "null"] {
        let mut out = decorate(settings, &ctx(), &pod);
        assert_eq!(env(&out, "initContainers", 0), pairs(&EXECUTION_ENV));
        assert_eq!(env(&out, "containers", 1), pairs(&EXECUTION_ENV));
        // Nothing else changes.
        let mut before = pod.clone();
        for (list, i) in [("initContainers", 0), ("containers", 0), ("containers", 1)] {
            out["spec"][list][i].as_object_mut().unwrap().remove("env");
            before["spec"][list][i]
                .as_object_mut()
                .unwrap()
                .remove("env");
        }
        assert_eq!(out, before, "settings {settings:?}");
    }
}

/// The cases of a suite that end in a result (not a failure).
fn result_cases(suite: &Suite) -> Vec<&Case> {
    suite
        .cases
        .iter()
        .filter(|c| c.expect.get("failure").is_none())
        .collect()
}

#[test]
fn every_decoration_case_of_the_suite_matches_the_native_logic() {
    let suite = suite("guest-policies/decorate/tests/decoration.yaml");
    let operators = defaults::default_settings(defaults::find("default-decorate").unwrap());
    let cases = result_cases(&suite);
    assert!(cases.len() >= 10, "{} cases", cases.len());
    for case in cases {
        let pod = canonical(case.input.pod.clone());
        // `decorate` compares the Wasm policy's pod with the native logic's.
        decorate(&case.settings_text(&operators), &case.context(&suite), &pod);
    }
}

#[test]
fn settings_errors_name_the_field() {
    let check = |hook: Hook, settings: &str, expected: &str| {
        let (policy, name) = default_policy(hook);
        let err = engine()
            .validate_settings(&policy, name, settings)
            .expect_err(settings);
        assert_eq!(err.category, Category::Settings, "{err}");
        assert!(
            err.message.starts_with(expected),
            "{name} with {settings}: {err}"
        );
    };
    for (settings, expected) in [
        (
            r#"{"defaultEnvVars": {"TFJOB_NAME": "x"}}"#,
            "defaultEnvVars.TFJOB_NAME: reserved",
        ),
        (
            r#"{"accelerators": {"nvidia.com/gpu": {"volumes": [{"name": "lib", "hostPath": "usr/lib", "mountPath": "/lib"}]}}}"#,
            "accelerators[\"nvidia.com/gpu\"].volumes[0].hostPath: \"usr/lib\" must be an absolute path",
        ),
        (
            r#"{"defaultTolerations": [{"key": "a", "operator": "In"}]}"#,
            "defaultTolerations[0].operator: \"In\" is not one of [\"Equal\", \"Exists\"]",
        ),
        (
            r#"{"resourceTolerations": {"nvidia.com/gpu": [{"key": "a", "tolerationSeconds": 30}]}}"#,
            "resourceTolerations[\"nvidia.com/gpu\"][0].tolerationSeconds: ",
        ),
        (
            r#"{"defaultLabels": {"team": "not ok"}}"#,
            "defaultLabels.team: ",
        ),
        (
            r#"{"schedulerName": ""}"#,
            "schedulerName: must not be empty",
        ),
        (
            r#"{"nodeSelectors": {}}"#,
            "nodeSelectors: unknown field `nodeSelectors`",
        ),
    ] {
        check(Hook::Decorate, settings, expected);
    }
    check(
        Hook::Resources,
        r#"{"limits": {"memory": "lots"}}"#,
        "limits.memory: invalid quantity \"lots\": expected a number",
    );
    check(
        Hook::Resources,
        r#"{"defaults": {"requests": {"nvidia.com/gpu": "1"}}}"#,
        "defaults.requests[\"nvidia.com/gpu\"]: only cpu and memory",
    );
    check(
        Hook::Classify,
        r#"{"imagePullBackOffGracePeriod": "1m"}"#,
        "imagePullBackOffGracePeriod: unknown field",
    );
    // The hook itself rejects bad settings the same way.
    let err = wasm_decorate(r#"{"schedulerName": ""}"#, &ctx(), &env_pod()).unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(err.message.starts_with("schedulerName: "), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Resource overrides
// ---------------------------------------------------------------------------------------------

fn wasm_resources(
    settings: &str,
    container: &str,
    requirements: Value,
) -> Result<Value, EvalError> {
    let (policy, name) = default_policy(Hook::Resources);
    let out = engine().at_maximum().override_resources(
        &policy,
        name,
        &wit_ctx(&ctx()),
        settings,
        container,
        &requirements.to_string(),
    )?;
    Ok(serde_json::from_str(&out).expect("the requirements are JSON"))
}

/// Overrides through Wasm and checks the result equals the native logic's.
fn resources(settings: &str, container: &str, requirements: Value) -> Value {
    let wasm =
        wasm_resources(settings, container, requirements.clone()).unwrap_or_else(|e| panic!("{e}"));
    let native_settings: ResourceSettings =
        settings_from_json(settings).unwrap_or_else(|e| panic!("{e}"));
    let rules = ResourceRules::try_from(native_settings).unwrap_or_else(|e| panic!("{e}"));
    let parsed: ResourceRequirements = serde_json::from_value(requirements).unwrap();
    let native = override_resources(&rules, container, parsed).unwrap();
    assert_eq!(
        wasm,
        serde_json::to_value(native).unwrap(),
        "settings {settings}"
    );
    wasm
}

#[test]
fn every_resources_case_of_the_suite_matches_the_native_logic() {
    let suite = suite("guest-policies/resources/tests/overrides.yaml");
    let cases = result_cases(&suite);
    assert!(cases.len() >= 10, "{} cases", cases.len());
    for case in cases {
        let pod: Pod = serde_json::from_value(case.input.pod.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let containers = pod.spec.unwrap().containers;
        let container = match &case.input.container {
            Some(name) => containers.into_iter().find(|c| &c.name == name).unwrap(),
            None => containers.into_iter().next().unwrap(),
        };
        let requirements = serde_json::to_value(container.resources.unwrap_or_default()).unwrap();
        // `resources` compares the Wasm policy's requirements with the native logic's.
        resources(
            &case.settings_text(&json!({})),
            &container.name,
            requirements,
        );
    }
}

#[test]
fn an_unparsable_quantity_names_the_container_and_the_resource() {
    let err = wasm_resources("{}", "ps", json!({"limits": {"memory": "lots"}})).unwrap_err();
    assert_eq!(err.category, Category::InvalidOutput, "{err}");
    assert!(
        err.message.ends_with(
            "container \"ps\": resources.limits.memory: invalid quantity \"lots\": expected a number"
        ),
        "{err}"
    );
    let err = wasm_resources(
        "{}",
        "worker",
        json!({"requests": {"nvidia.com/gpu": "one"}}),
    )
    .unwrap_err();
    assert!(
        err.message.contains(
            "container \"worker\": resources.requests[\"nvidia.com/gpu\"]: invalid quantity \"one\""
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The defaults behind the planner's seam, and the operator's policy flags
// ---------------------------------------------------------------------------------------------

fn seam(active: Vec<ActivePolicy>) -> WasmPolicies {
    WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new(active))),
    )
}

fn label(name: &str) -> String {
    let d = defaults::find(name).expect("a default policy");
    format!("{name}@{}", &sha256_hex(d.wasm)[..12])
}

#[test]
fn shape_pod_with_the_defaults_records_both_policies_on_the_pod() {
    let policies =
        seam(defaults::load_defaults(engine(), &PolicyConfig::default()).expect("defaults load"));
    let shaped = policies
        .shape_pod(&ctx(), pod_file("worker.yaml"))
        .expect("the defaults shape the pod");
    let expected = format!(
        "{},{}",
        label("default-decorate"),
        label("default-resources")
    );
    assert_eq!(shaped.applied, expected.split(',').collect::<Vec<_>>());
    assert!(shaped.skipped.is_empty());
    let annotations = shaped.pod.metadata.annotations.clone().unwrap_or_default();
    let recorded = &annotations[APPLIED_ANNOTATION];
    assert_eq!(recorded, &expected);
    // `default-decorate@<12 hex>,default-resources@<12 hex>`
    let parts: Vec<(&str, &str)> = recorded
        .split(',')
        .map(|p| p.split_once('@').expect("name@digest"))
        .collect();
    assert_eq!(
        parts.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["default-decorate", "default-resources"]
    );
    for (_, digest) in &parts {
        assert_eq!(digest.len(), 12, "{recorded}");
        assert!(
            digest
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{recorded}"
        );
    }

    let pod = serde_json::to_value(&shaped.pod).unwrap();
    // Decoration: the execution environment on every container.
    for (list, i) in [("initContainers", 0), ("containers", 0), ("containers", 1)] {
        let names: Vec<String> = env(&pod, list, i).into_iter().map(|(n, _)| n).collect();
        assert!(
            EXECUTION_ENV
                .iter()
                .all(|(n, _)| names.iter().any(|m| m == n)),
            "{list}[{i}]: {names:?}"
        );
    }
    // Resources: every container, init containers too, after decoration.
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        json!({
            "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}
        })
    );
    assert_eq!(
        pod["spec"]["containers"][1]["resources"],
        json!({"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}})
    );
    assert_eq!(
        pod["spec"]["initContainers"][0]["resources"],
        json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
    );
    // What no policy touches is left as built.
    let before = serde_json::to_value(pod_file("worker.yaml")).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        before["spec"]["containers"][0]["image"]
    );
    assert_eq!(pod["metadata"]["labels"], before["metadata"]["labels"]);
}

fn gpu_pod(resource: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "mnist-worker-3", "namespace": "ml"},
        "spec": {"containers": [
            {"name": "tensorflow", "image": "tf", "resources": {"limits": {resource: "1"}}},
            {"name": "log-shipper", "image": "fluent"}
        ]}
    }))
    .unwrap()
}

#[test]
fn the_default_decoration_prepares_gpu_containers_however_the_gpu_is_written() {
    let policies = seam(defaults::load_defaults(engine(), &PolicyConfig::default()).unwrap());
    let shaped = policies
        .shape_pod(&ctx(), gpu_pod("nvidia.com/gpu"))
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = serde_json::to_value(&shaped.pod).unwrap();
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "nvidia-driver", "hostPath": {"path": defaults::NVIDIA_DRIVER_HOST_PATH}}])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": true}])
    );
    assert!(env(&pod, "containers", 0).contains(&(
        "NVIDIA_DRIVER_CAPABILITIES".into(),
        "compute,utility".into()
    )));
    assert!(pod["spec"]["containers"][1].get("volumeMounts").is_none());
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // `gpu` is the same request (default-resources renames it): the same pod comes out, or the
    // container would land without the driver, or never pass the GPU nodes' taint.
    let alias = policies
        .shape_pod(&ctx(), gpu_pod("gpu"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(serde_json::to_value(&alias.pod).unwrap(), pod);
    // A pod without GPUs gets neither.
    let cpu_only = policies
        .shape_pod(&ctx(), gpu_pod("cpu"))
        .unwrap_or_else(|e| panic!("{e}"));
    let spec = serde_json::to_value(cpu_only.pod.spec).unwrap();
    assert!(spec.get("volumes").is_none(), "{spec}");
    assert!(spec.get("tolerations").is_none(), "{spec}");
}

fn write(dir: &Path, file: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, contents).expect("writing a temp file");
    path
}

#[test]
fn accelerator_volumes_configured_for_the_default_decorate_policy_reach_the_pod() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "policy-config.yaml",
        br#"
default-decorate:
  settings:
    accelerators:
      nvidia.com/gpu:
        volumes:
        - {name: nvidia-driver, hostPath: /home/kubernetes/bin/nvidia, mountPath: /usr/local/nvidia}
        envVars: {LD_LIBRARY_PATH: /usr/local/nvidia/lib64}
"#,
    );
    let config = load_policy_config(&config).expect("config loads");
    let policies = seam(defaults::load_defaults(engine(), &config).expect("defaults load"));
    let mut pod = pod_file("worker.yaml");
    // Decoration reads resources as written: the accelerator is keyed by the full name.
    let limits = pod.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .limits
        .as_mut()
        .unwrap();
    let gpu = limits.remove("gpu").unwrap();
    limits.insert("nvidia.com/gpu".into(), gpu);
    let shaped = policies
        .shape_pod(&ctx(), pod)
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = serde_json::to_value(&shaped.pod).unwrap();
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "nvidia-driver", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}])
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": true}])
    );
    assert!(pod["spec"]["containers"][1].get("volumeMounts").is_none());
}

fn image_pull_backoff_at(policies: &WasmPolicies, now: &str) -> tfjob_planner::Verdict {
    policies
        .classify(
            &ctx(),
            &pod_file("pending-image-pull-backoff.yaml"),
            at(now),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .verdict
}

#[test]
fn policy_config_overrides_the_default_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "policy-config.yaml",
        b"default-classify:\n  settings:\n    imagePullBackoffGracePeriod: 30s\n",
    );
    let config = load_policy_config(&path).expect("config loads");
    let configured = seam(defaults::load_defaults(engine(), &config).expect("defaults load"));
    let plain = seam(defaults::load_defaults(engine(), &PolicyConfig::default()).unwrap());

    // 30 s after the condition: past the configured grace period, within the default one.
    let v = image_pull_backoff_at(&configured, "2026-01-01T00:01:30Z");
    assert_eq!(v.phase, VerdictPhase::RetryableFailure, "{v:?}");
    assert!(
        v.message.starts_with("Grace period [30s] exceeded|"),
        "{v:?}"
    );
    assert_eq!(v.policy, label("default-classify"));
    let v = image_pull_backoff_at(&plain, "2026-01-01T00:01:30Z");
    assert_eq!(v.phase, VerdictPhase::Initializing, "{v:?}");
    // 29 s after: within both.
    let v = image_pull_backoff_at(&configured, "2026-01-01T00:01:29Z");
    assert_eq!(v.phase, VerdictPhase::Initializing, "{v:?}");
}

#[test]
fn policy_config_errors_name_the_policy_or_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let load = |yaml: &str| {
        let path = write(dir.path(), "policy-config.yaml", yaml.as_bytes());
        let config = load_policy_config(&path).expect("config parses");
        defaults::load_defaults(engine(), &config).map(|_| ())
    };
    let err = load("default-clasify:\n  settings: {}\n").unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(err.message.contains("\"default-clasify\""), "{err}");
    assert!(err.message.contains("default-classify"), "{err}");

    let err = load("default-classify:\n  settings:\n    imagePullBackoffGracePeriod: soon\n")
        .unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(
        err.message.starts_with(
            "default-classify: imagePullBackoffGracePeriod: invalid duration \"soon\""
        ),
        "{err}"
    );

    let err = load("default-resources:\n  settings:\n    limits: {memory: lots}\n").unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(
        err.message
            .starts_with("default-resources: limits.memory: "),
        "{err}"
    );

    // A misspelt override field is caught when the file is read, naming file and field.
    let path = write(
        dir.path(),
        "typo.yaml",
        b"default-classify:\n  setings: {}\n",
    );
    let err = load_policy_config(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("typo.yaml"), "{text}");
    assert!(text.contains("setings"), "{text}");
}

#[test]
fn a_policy_dir_loads_each_module_with_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "x.wasm", HOSTILE_POLICY_WASM);
    write(
        dir.path(),
        "x.yaml",
        b"hooks: [decorate]\nsettings: {mode: ok}\n",
    );
    let loaded = load_policy_dir(engine(), dir.path()).expect("the directory loads");
    assert_eq!(loaded.len(), 1);
    let p = &loaded[0];
    assert_eq!(p.name(), "x");
    assert_eq!(p.manifest.hooks, vec![Hook::Decorate]);
    assert_eq!(p.settings, r#"{"mode":"ok"}"#);
    assert_eq!(p.compiled.digest, sha256_hex(HOSTILE_POLICY_WASM));
    assert_eq!(
        p.compiled.hooks(),
        vec![Hook::Decorate, Hook::Resources, Hook::Classify]
    );

    // It runs for its declared hook only.
    let policies = seam(loaded);
    let pod = pod_file("worker.yaml");
    let shaped = policies.shape_pod(&ctx(), pod.clone()).expect("mode ok");
    let label = format!("x@{}", &sha256_hex(HOSTILE_POLICY_WASM)[..12]);
    assert_eq!(shaped.applied, vec![label.clone()]);
    let mut without_annotation = shaped.pod.clone();
    let annotations = without_annotation.metadata.annotations.as_mut().unwrap();
    assert_eq!(annotations.remove(APPLIED_ANNOTATION), Some(label));
    if annotations.is_empty() {
        without_annotation.metadata.annotations = None;
    }
    assert_eq!(without_annotation, pod);
}

#[test]
fn policy_dir_errors_name_the_file() {
    // A module without a manifest.
    let dir = tempfile::tempdir().unwrap();
    let wasm = write(dir.path(), "x.wasm", HOSTILE_POLICY_WASM);
    let err = load_policy_dir(engine(), dir.path()).unwrap_err();
    match &err {
        LocalError::Manifest { path, message } => {
            assert_eq!(path, &wasm);
            assert!(message.contains("x.yaml"), "{err}");
        }
        other => panic!("expected a manifest error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&wasm.display().to_string()),
        "{err}"
    );

    // A manifest with a bad field.
    let manifest = write(
        dir.path(),
        "x.yaml",
        b"hooks: [decorate]\nfailurePolicy: Sometimes\n",
    );
    let err = load_policy_dir(engine(), dir.path()).unwrap_err();
    match &err {
        LocalError::Manifest { path, message } => {
            assert_eq!(path, &manifest);
            assert!(message.contains("failurePolicy"), "{err}");
        }
        other => panic!("expected a manifest error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&manifest.display().to_string()),
        "{err}"
    );

    // Settings the policy rejects name the module and the policy.
    write(
        dir.path(),
        "x.yaml",
        b"hooks: [decorate]\nsettings: {mode: teleport}\n",
    );
    let err = load_policy_dir(engine(), dir.path()).unwrap_err();
    match &err {
        LocalError::Rejected { path, name, error } => {
            assert_eq!(path, &wasm);
            assert_eq!(name, "x");
            assert_eq!(error.category, Category::Settings, "{err}");
        }
        other => panic!("expected a rejected policy, got {other:?}"),
    }
}

#[test]
fn a_pinned_view_keeps_the_policies_it_started_with_across_a_swap() {
    let policies =
        seam(defaults::load_defaults(engine(), &PolicyConfig::default()).expect("defaults load"));
    let pinned = policies.pinned().expect("Wasm policies can be pinned");
    // A swap to an empty set after the view was taken: the view still shapes with the defaults,
    // the live seam does not.
    policies.registry().swap(PolicySet::default());
    let annotations = |p: &dyn PodPolicies| {
        p.shape_pod(&ctx(), pod_file("worker.yaml"))
            .expect("shapes")
            .pod
            .metadata
            .annotations
            .unwrap_or_default()
    };
    let from_view = annotations(pinned.as_ref());
    assert!(
        from_view
            .get(APPLIED_ANNOTATION)
            .is_some_and(|a| a.contains(&label("default-decorate"))),
        "{from_view:?}"
    );
    assert!(!annotations(&policies).contains_key(APPLIED_ANNOTATION));
}

/// The default classifier behind the seam, with its evaluations counted.
fn counted_classifier(settings: Value) -> (WasmPolicies, Arc<Registry>, impl Fn() -> (u64, u64)) {
    let set = |settings: Value| {
        let d = defaults::for_hook(Hook::Classify);
        let mut m = defaults::manifest(d);
        m.settings = settings;
        PolicySet::new([tfjob_policy_engine::registry::activate(engine(), m, d.wasm).unwrap()])
    };
    let registry = Arc::new(Registry::new(set(settings)));
    let mut metrics = prometheus_client::registry::Registry::default();
    let policy_metrics = tfjob_policy_engine::metrics::PolicyMetrics::register(&mut metrics);
    let policies =
        WasmPolicies::new(Arc::clone(engine()), Arc::clone(&registry)).with_metrics(policy_metrics);
    let counts = move || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics).unwrap();
        let sum = |name: &str| -> u64 {
            text.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        (
            sum("tfjob_policy_evaluations_total"),
            sum("tfjob_policy_verdicts_reused_total"),
        )
    };
    (policies, registry, counts)
}

/// A pod whose image cannot be pulled since 00:00:00 (grace period 180 s by default).
fn backing_off(resource_version: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "w-0", "namespace": "ml", "uid": "pod-uid",
            "resourceVersion": resource_version, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}],
          "containerStatuses": [{"name": "tensorflow", "ready": false, "restartCount": 0,
             "image": "x", "imageID": "", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
    }))
    .unwrap()
}

#[test]
fn a_classification_is_reused_until_the_pod_the_policy_the_context_or_the_time_changes() {
    let (policies, registry, counts) = counted_classifier(json!({}));
    let c = ctx();
    let classify =
        |p: &dyn PodPolicies, pod: &Pod, now: &str| p.classify(&c, pod, at(now)).unwrap().verdict;
    let pod = backing_off("10");

    let first = classify(&policies, &pod, "2026-01-01T00:01:00Z");
    assert_eq!(first.phase, VerdictPhase::Initializing);
    assert_eq!(first.recheck_at, Some(at("2026-01-01T00:03:00Z")));
    assert_eq!(counts(), (1, 0));
    // Same pod, policy and context, before the recheck time: reused, also by a pinned view.
    assert_eq!(classify(&policies, &pod, "2026-01-01T00:02:00Z"), first);
    let pinned = policies.pinned().unwrap();
    assert_eq!(classify(&*pinned, &pod, "2026-01-01T00:02:30Z"), first);
    assert_eq!(counts(), (1, 2));
    // The pod changed.
    let changed = backing_off("11");
    classify(&policies, &changed, "2026-01-01T00:02:40Z");
    assert_eq!(counts(), (2, 2));
    // The recheck time came: the grace period is over and the verdict says so.
    let late = classify(&policies, &changed, "2026-01-01T00:03:00Z");
    assert_eq!(late.phase, VerdictPhase::RetryableFailure);
    assert_eq!(late.recheck_at, None);
    assert_eq!(counts(), (3, 2));
    // A final verdict waits for nothing: reused however late.
    assert_eq!(classify(&policies, &changed, "2026-01-02T00:00:00Z"), late);
    assert_eq!(counts(), (3, 3));
    // Another context: the replica was restarted.
    let restarted = PodContext {
        attempt: 1,
        ..c.clone()
    };
    policies
        .classify(&restarted, &changed, at("2026-01-02T00:00:00Z"))
        .unwrap();
    assert_eq!(counts(), (4, 3));
    // A new policy version (here new settings: a longer grace period) decides afresh.
    let d = defaults::for_hook(Hook::Classify);
    let mut m = defaults::manifest(d);
    m.settings = json!({"imagePullBackoffGracePeriod": "1h"});
    registry.swap(PolicySet::new([tfjob_policy_engine::registry::activate(
        engine(),
        m,
        d.wasm,
    )
    .unwrap()]));
    let graced = classify(&policies, &changed, "2026-01-01T00:10:00Z");
    assert_eq!(graced.phase, VerdictPhase::Initializing);
    assert_eq!(graced.recheck_at, Some(at("2026-01-01T01:00:00Z")));
    assert_eq!(counts(), (5, 3));
    // A pod the API server never stored (no resourceVersion) is never reused.
    let mut unstored = changed.clone();
    unstored.metadata.resource_version = None;
    classify(&policies, &unstored, "2026-01-01T00:10:00Z");
    classify(&policies, &unstored, "2026-01-01T00:10:00Z");
    assert_eq!(counts(), (7, 3));
}

/// What a trace would get from the policy pipeline: each span's name and fields when it
/// starts, and each event's fields, as text.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<Record>>>);

/// A span's name, or `event`, and its fields.
type Record = (String, BTreeMap<String, String>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let name = attrs.metadata().name().to_owned();
        self.0.lock().unwrap().push((name, fields));
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(("event".to_owned(), fields));
    }
}

#[test]
fn a_policy_call_span_names_its_pod_and_a_reused_verdict_says_so() {
    use tracing_subscriber::layer::SubscriberExt;
    let (policies, _registry, counts) = counted_classifier(json!({}));
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let pod = backing_off("10");
    tracing::subscriber::with_default(subscriber, || {
        for now in ["2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"] {
            policies.classify(&ctx(), &pod, at(now)).unwrap();
        }
    });
    assert_eq!(counts(), (1, 1), "one call, then one reuse");
    let captured = captured.0.lock().unwrap();
    let calls: Vec<_> = captured
        .iter()
        .filter(|(name, _)| name == "policy call")
        .collect();
    assert_eq!(calls.len(), 1, "{captured:?}");
    assert_eq!(calls[0].1["k8s.pod.name"], "w-0");
    assert_eq!(calls[0].1["hook"], "classify");
    let reused: Vec<_> = captured
        .iter()
        .filter(|(name, fields)| name == "event" && fields.contains_key("cache_hit"))
        .collect();
    assert_eq!(reused.len(), 1, "{captured:?}");
    assert_eq!(reused[0].1["k8s.pod.name"], "w-0");
    assert_eq!(reused[0].1["cache_hit"], "true");
}
