//! The CEL policy's evaluator through the real sandbox: a CEL document as the settings of the
//! embedded component, compiled once by `validate-settings` and evaluated by each hook, with
//! the operator's default limits. Every hostile document ends with its documented category
//! (`settings` for what does not compile, `timeout`, `memory`, `invalid-output` for an
//! expression that fails), and the engine serves the next call.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use tfjob_planner::PodContext;
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::cluster_access::{ReadBounds, Reader};
use tfjob_policy_engine::cluster_cache::{ClusterCache, ResourceCache};
use tfjob_policy_engine::cluster_reads::{ReadCeiling, ReadDeclaration, Resource};
use tfjob_policy_engine::defaults::CEL_POLICY_WASM;
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{
    CallLimits, Category, CompiledPolicy, EvalError, PolicyEngine, SandboxLimits,
};

/// The operator's limits but a patient deadline: a call that ends by its memory cap or an
/// error must not turn into a timeout on a loaded machine. The endless loop runs under the
/// operator's own deadline ([`OPERATOR_DEADLINE`]).
fn engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let limits = SandboxLimits {
            deadline: Duration::from_secs(30),
            ..SandboxLimits::default()
        };
        Arc::new(PolicyEngine::new(limits).expect("engine starts"))
    })
}

/// The operator's default deadline per call.
const OPERATOR_DEADLINE: Duration = Duration::from_millis(50);

fn cel() -> Arc<CompiledPolicy> {
    engine()
        .compile(CEL_POLICY_WASM)
        .expect("the CEL policy compiles")
}

fn ctx() -> JobContext {
    let mut ctx = PodContext::single_worker("vision", "mnist");
    ctx.job_labels.insert("team".into(), "vision".into());
    job_context(&ctx)
}

fn gpu_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mnist-worker-0", "namespace": "vision", "labels": {"app": "tf"}},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2",
                                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    })
}

fn decorate(document: &Value) -> Result<Value, EvalError> {
    decorate_within(document, engine().limits().deadline)
}

/// [`decorate`] with a call deadline of `deadline`.
fn decorate_within(document: &Value, deadline: Duration) -> Result<Value, EvalError> {
    let settings = document.to_string();
    engine().validate_settings(&cel(), "cel", &settings)?;
    let limits = CallLimits {
        deadline,
        ..engine().limits().call_limits()
    };
    let out = engine().limited(limits).decorate(
        &cel(),
        "cel",
        &ctx(),
        &settings,
        &gpu_pod().to_string(),
    )?;
    Ok(serde_json::from_str(&out).unwrap())
}

/// The next ordinary call is served.
fn others_are_served() {
    assert_eq!(decorate(&json!({})).unwrap(), gpu_pod());
}

#[test]
fn a_document_decorates_gpu_pods_with_a_toleration_and_a_label() {
    let out = decorate(&json!({
        "matchConditions": [{"name": "gpu", "expression":
            "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"}],
        "variables": [{"name": "team", "expression": "job.labels.?team.orValue('none')"}],
        "mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'team': variables.team}}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/spec/tolerations', value: [{'key': 'nvidia.com/gpu', 'operator': 'Exists'}]}]"}}
        ]
    }))
    .unwrap();
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "tf", "team": "vision"})
    );
    assert_eq!(
        out["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists"}])
    );
}

#[test]
fn a_document_that_does_not_compile_is_refused_with_the_expression_and_a_caret() {
    let err = decorate(&json!({"variables": [
        {"name": "ok", "expression": "1"},
        {"name": "broken", "expression": "job.labels[ 'team'"}
    ]}))
    .unwrap_err();
    assert_eq!(err.category, Category::Settings, "{err}");
    assert!(err.message.contains("variables[1].expression"), "{err}");
    assert!(err.message.contains("| job.labels[ 'team'"), "{err}");
    assert!(err.message.contains('^'), "{err}");
    others_are_served();
}

#[test]
fn hostile_documents_end_with_their_category_and_the_engine_serves_on() {
    let ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
    // Ten nested loops over ten items: 10^10 steps, allocating nothing.
    let endless = (0..10).fold("true".to_owned(), |body, i| {
        format!("variables.ten.all(x{i}, {body})")
    });
    // A string doubled forty times: a terabyte.
    let mut doubling = vec![json!({"name": "s0", "expression": "'0123456789abcdef'"})];
    for i in 1..=40 {
        doubling.push(json!({"name": format!("s{i}"),
                             "expression": format!("variables.s{0} + variables.s{0}", i - 1)}));
    }
    let many: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("v{i}"), "expression": "1"}))
        .collect();
    let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    for (what, document, category, says) in [
        (
            "a loop of 10^10 steps",
            json!({"variables": [{"name": "ten", "expression": ten}, {"name": "never", "expression": endless}]}),
            Category::Timeout,
            "",
        ),
        (
            "a string doubled forty times",
            json!({"variables": doubling}),
            Category::Memory,
            "",
        ),
        (
            "a division by zero",
            json!({"variables": [{"name": "x", "expression": "1 / (size(object.spec.containers) - 1)"}]}),
            Category::InvalidOutput,
            "variables[0].expression",
        ),
        (
            "an integer overflow",
            json!({"variables": [{"name": "x", "expression": "9223372036854775807 + size(object.spec.containers)"}]}),
            Category::InvalidOutput,
            "Overflow",
        ),
        (
            "a type error found only when it runs",
            json!({"matchConditions": [{"name": "m", "expression": "object.metadata.name + 1 == 'x'"}]}),
            Category::InvalidOutput,
            "matchConditions[0].expression",
        ),
        (
            "a JSON patch at a path that does not exist",
            json!({"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'replace', path: '/spec/nothing/here', value: 1}]"}}]}),
            Category::InvalidOutput,
            "mutations[0].jsonPatch.expression",
        ),
        (
            "a thousand expressions",
            json!({"variables": many}),
            Category::Settings,
            "at most 256",
        ),
        (
            "multi-byte text where an expression stops compiling",
            json!({"variables": [{"name": "greeting", "expression": "'日本語のラベル' + 'ü' +"}]}),
            Category::Settings,
            "| '日本語のラベル' + 'ü' +",
        ),
        (
            "a multi-byte variable name",
            json!({"variables": [{"name": "grüße", "expression": "1"}]}),
            Category::Settings,
            "\"grüße\" is not a CEL identifier",
        ),
        (
            "five thousand nested lists",
            json!({"variables": [{"name": "deep", "expression": deep}]}),
            Category::Settings,
            "variables[0].expression",
        ),
    ] {
        let deadline = match category {
            Category::Timeout => OPERATOR_DEADLINE,
            _ => engine().limits().deadline,
        };
        let err = decorate_within(&document, deadline).unwrap_err();
        assert_eq!(err.category, category, "{what}: {err}");
        assert!(err.message.contains(says), "{what}: {err}");
        others_are_served();
    }
}

/// A reader of `cache` granted the `declared` cluster-scoped resources, for a job of `vision`.
fn reader(cache: &Arc<ClusterCache>, declared: &[&str]) -> Reader {
    Reader {
        grants: ReadCeiling::default()
            .grant(
                &declared
                    .iter()
                    .map(|r| ReadDeclaration {
                        resource: (*r).into(),
                        scope: None,
                    })
                    .collect::<Vec<_>>(),
                None,
            )
            .expect("within the default ceiling")
            .into(),
        job_namespace: "vision".into(),
        job_name: "mnist".into(),
        policy_namespace: None,
        cache: Arc::clone(cache),
        bounds: ReadBounds::default(),
        journal: None,
    }
}

#[test]
fn a_document_naming_the_namespace_reads_it_and_one_that_does_not_reads_nothing() {
    let namespace = json!({"metadata": {"name": "vision", "labels": {"cost-center": "cc-7"}, "resourceVersion": "3"}});
    let cache = Arc::new(ClusterCache::of([ResourceCache::of(
        Resource::Namespaces,
        100,
        [namespace],
    )]));
    let reader = |declared: &[&str]| reader(&cache, declared);
    let reading = json!({"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{metadata: Object.metadata{labels: {'cost-center': namespaceObject.metadata.labels['cost-center']}}}"}}]})
    .to_string();
    let call = |settings: &str, granted: &[&str]| {
        engine().validate_settings(&cel(), "cel", settings)?;
        engine().at_maximum().reading(reader(granted)).decorate(
            &cel(),
            "cel",
            &ctx(),
            settings,
            &gpu_pod().to_string(),
        )
    };
    let out: Value = serde_json::from_str(&call(&reading, &["namespaces"]).unwrap()).unwrap();
    assert_eq!(out["metadata"]["labels"]["cost-center"], "cc-7");
    // Without the grant the read is refused, and the call ends with the read's category.
    let err = call(&reading, &[]).unwrap_err();
    assert_eq!(err.category, Category::ReadDenied, "{err}");
    // A document that never names namespaceObject makes no read, granted or not.
    let plain = json!({"variables": [{"name": "x", "expression": "1"}]}).to_string();
    let out: Value = serde_json::from_str(&call(&plain, &[]).unwrap()).unwrap();
    assert_eq!(out, gpu_pod());
}

#[test]
fn resources_and_classification_follow_their_parts_of_the_document() {
    let document = json!({
        "resourceMutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{requests: {'memory': job.replicaType == 'PS' ? '2Gi' : '8Gi'}}"}}],
        "verdicts": [{"condition": "object.status.?reason.orValue('') == 'Evicted'",
                      "phase": "permanent-failure", "reason": "Evicted",
                      "messageExpression": "'evicted: ' + object.status.message"}]
    })
    .to_string();
    engine()
        .validate_settings(&cel(), "cel", &document)
        .unwrap();
    let requirements = engine()
        .at_maximum()
        .override_resources(
            &cel(),
            "cel",
            &ctx(),
            &document,
            "tensorflow",
            r#"{"limits":{"cpu":"1"}}"#,
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&requirements).unwrap(),
        json!({"limits": {"cpu": "1"}, "requests": {"memory": "8Gi"}})
    );
    let now = "2026-01-01T00:00:00Z";
    let evicted = json!({"metadata": {"name": "w-0"},
        "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}});
    let verdict = engine()
        .at_maximum()
        .classify(&cel(), "cel", &ctx(), &document, &evicted.to_string(), now)
        .unwrap();
    assert_eq!(verdict.reason, "Evicted");
    assert_eq!(verdict.message, "evicted: low on memory");
    // No rule holds: the default classification decides.
    let running = json!({"metadata": {"name": "w-0"}, "status": {"phase": "Running",
        "containerStatuses": [{"name": "tensorflow", "ready": true, "restartCount": 0, "image": "tf", "imageID": "",
                               "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
    let verdict = engine()
        .at_maximum()
        .classify(&cel(), "cel", &ctx(), &document, &running.to_string(), now)
        .unwrap();
    assert_eq!(verdict.reason, "", "{verdict:?}");
}

/// Nodes of pool `gpu` with `gpus` allocatable each, and one CPU node.
fn nodes(gpus: &[u32]) -> Arc<ClusterCache> {
    let mut objects: Vec<Value> = gpus
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"metadata": {"name": format!("gpu-{i}"), "labels": {"pool": "gpu"}, "resourceVersion": "5"},
                   "status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": n.to_string()}}})
        })
        .collect();
    objects.push(
        json!({"metadata": {"name": "cpu-0", "labels": {"pool": "cpu"}, "resourceVersion": "5"},
                        "status": {"allocatable": {"cpu": "64"}}}),
    );
    Arc::new(ClusterCache::of([ResourceCache::of(
        Resource::Nodes,
        10_000,
        objects,
    )]))
}

/// The policy a pod sees of nodes, in CEL: a job whose pod asks for more GPUs than any node of
/// the GPU pool has can never be scheduled, so it fails at once instead of pending forever.
const NEVER_SCHEDULABLE: &str = r#"{
  "variables": [
    {"name": "wanted", "expression": "object.spec.containers.map(c, quantity(c.?resources.?limits[?'nvidia.com/gpu'].orValue('0')).asInteger()).sum()"},
    {"name": "largest", "expression": "resource.List('v1', 'nodes', '', {'pool': 'gpu'}).items.map(n, quantity(n.status.allocatable[?'nvidia.com/gpu'].orValue('0')).asInteger()).max()"}
  ],
  "verdicts": [{
    "condition": "object.status.conditions.exists(c, c.type == 'PodScheduled' && c.reason == 'Unschedulable') && variables.wanted > variables.largest",
    "phase": "permanent-failure", "reason": "NeverSchedulable",
    "messageExpression": "'asks for ' + string(variables.wanted) + ' GPUs; the largest node has ' + string(variables.largest)"
  }]
}"#;

#[test]
fn a_verdict_reads_the_nodes_and_fails_a_pod_no_node_can_hold() {
    let document = NEVER_SCHEDULABLE;
    engine().validate_settings(&cel(), "cel", document).unwrap();
    let pending = |gpus: u32| {
        let mut pod = gpu_pod();
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
            json!(gpus.to_string());
        pod["status"] = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        pod.to_string()
    };
    let now = "2026-01-01T00:00:00Z";
    let classify = |cache: &Arc<ClusterCache>, granted: &[&str], gpus: u32| {
        engine()
            .at_maximum()
            .reading(reader(cache, granted))
            .classify(&cel(), "cel", &ctx(), document, &pending(gpus), now)
    };
    let cluster = nodes(&[4, 8]);
    let verdict = classify(&cluster, &["nodes"], 16).unwrap();
    assert_eq!(verdict.reason, "NeverSchedulable", "{verdict:?}");
    assert_eq!(verdict.message, "asks for 16 GPUs; the largest node has 8");
    // A pod some node can hold waits as the default classification says.
    let verdict = classify(&cluster, &["nodes"], 8).unwrap();
    assert_ne!(verdict.reason, "NeverSchedulable", "{verdict:?}");
    // Undeclared, the read is refused and the call ends with the read's category.
    let err = classify(&cluster, &["namespaces"], 16).unwrap_err();
    assert_eq!(err.category, Category::ReadDenied, "{err}");
    others_are_served();
}

#[test]
fn a_decoration_places_pods_by_what_the_nodes_hold_and_a_wrong_version_is_named() {
    let document = json!({
        "variables": [{"name": "pools", "expression":
            "resource.List('v1', 'nodes', '').items.map(n, n.metadata.labels.pool)"}],
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "'gpu' in variables.pools ? Object{spec: Object.spec{nodeSelector: {'pool': 'gpu'}}} : Object{}"}}]
    })
    .to_string();
    let call = |settings: &str| {
        engine().validate_settings(&cel(), "cel", settings)?;
        engine()
            .at_maximum()
            .reading(reader(&nodes(&[8]), &["nodes"]))
            .decorate(&cel(), "cel", &ctx(), settings, &gpu_pod().to_string())
    };
    let out: Value = serde_json::from_str(&call(&document).unwrap()).unwrap();
    assert_eq!(out["spec"]["nodeSelector"], json!({"pool": "gpu"}));
    let wrong = document.replace("'v1', 'nodes'", "'v1beta1', 'nodes'");
    let err = call(&wrong).unwrap_err();
    assert!(
        err.message.contains("variables[0].expression")
            && err
                .message
                .contains("nodes are read at apiVersion \"v1\", not \"v1beta1\""),
        "{err}"
    );
    others_are_served();
}

#[test]
fn reads_past_the_bounds_of_a_call_end_it_with_read_limit() {
    let many: Vec<u32> = vec![8; 1_500];
    let cluster = nodes(&many);
    let call = |expression: &str| {
        let document = json!({"variables": [{"name": "x", "expression": expression}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'n': string(variables.x)}}}"}}]})
        .to_string();
        engine().validate_settings(&cel(), "cel", &document)?;
        engine()
            .at_maximum()
            .reading(reader(&cluster, &["nodes"]))
            .decorate(&cel(), "cel", &ctx(), &document, &gpu_pod().to_string())
    };
    let cases = [
        // One answer of more objects than one read may return.
        "resource.List('v1', 'nodes', '').items.size()",
        // More distinct reads than one call may make.
        "lists.range(100).filter(i, resource.Get('v1', 'nodes', '', 'gpu-' + string(i)) != null).size()",
    ];
    for expression in cases {
        let err = call(expression).unwrap_err();
        assert_eq!(err.category, Category::ReadLimit, "{expression}: {err}");
    }
    // Within the bounds, the same reads answer.
    let out: Value = serde_json::from_str(
        &call("lists.range(10).filter(i, resource.Get('v1', 'nodes', '', 'gpu-' + string(i)) != null).size()").unwrap(),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"]["n"], "10");
    others_are_served();
}
