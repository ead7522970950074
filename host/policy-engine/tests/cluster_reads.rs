//! Cluster reads through the real sandbox: a guest built against contract 0.3.0 reads what it
//! was granted from a shared cache, and every hostile way of reading ends the call with its
//! documented category (`read-denied`, `read-limit`, `read-invalid`, `unavailable`, `timeout`)
//! whatever the guest does with the error, the engine serving other calls afterwards.
//! Components built against 0.2.0 keep running unchanged.

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use tfjob_planner::PodContext;
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::cluster_access::{ReadBounds, Reader};
use tfjob_policy_engine::cluster_cache::{ClusterCache, ResourceCache};
use tfjob_policy_engine::cluster_reads::{ReadCeiling, ReadDeclaration, ReadScope, Resource};
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{Category, CompiledPolicy, EvalError, Hook, PolicyEngine, SandboxLimits};

fn engine() -> &'static Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Arc::new(PolicyEngine::new(SandboxLimits::default()).expect("engine starts"))
    })
}

fn hostile() -> Arc<CompiledPolicy> {
    engine()
        .compile(HOSTILE_POLICY_WASM)
        .expect("hostile policy compiles")
}

/// Worker 0 of job `vision/mnist`.
fn pod_context() -> PodContext {
    PodContext::single_worker("vision", "mnist")
}

fn ctx() -> JobContext {
    job_context(&pod_context())
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mnist-worker-0", "namespace": "vision"},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}
    })
}

fn node(i: usize, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": format!("node-{i:05}"), "labels": labels, "resourceVersion": "41"},
        "status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": "8"}}
    })
}

/// Namespaces `vision` and `team-b`, and `nodes` nodes of which the first 5 are in pool `gpu`.
fn cluster(nodes: usize) -> Arc<ClusterCache> {
    let namespace = |name: &str| json!({"metadata": {"name": name, "labels": {"team": name}, "resourceVersion": "9"}});
    Arc::new(ClusterCache::of([
        ResourceCache::of(
            Resource::Namespaces,
            1000,
            [namespace("vision"), namespace("team-b")],
        ),
        ResourceCache::of(
            Resource::Nodes,
            20_000,
            (0..nodes).map(|i| node(i, json!({"pool": if i < 5 { "gpu" } else { "cpu" }}))),
        ),
    ]))
}

fn reader(declared: &[&str], cache: Arc<ClusterCache>) -> Reader {
    let declared: Vec<ReadDeclaration> = declared
        .iter()
        .map(|r| ReadDeclaration {
            resource: (*r).into(),
            scope: None,
        })
        .collect();
    Reader {
        grants: ReadCeiling::default()
            .grant(&declared, None)
            .expect("within the default ceiling")
            .into(),
        job_namespace: "vision".into(),
        job_name: "mnist".into(),
        policy_namespace: None,
        cache,
        bounds: ReadBounds::default(),
        journal: None,
    }
}

fn decorate(reader: Reader, settings: Value) -> Result<Value, EvalError> {
    let out = engine().at_maximum().reading(reader).decorate(
        &hostile(),
        "reader",
        &ctx(),
        &settings.to_string(),
        &pod().to_string(),
    )?;
    let pod: Value = serde_json::from_str(&out).unwrap();
    let answers = pod["metadata"]["annotations"]["hostile/read"]
        .as_str()
        .expect("the read annotation");
    Ok(serde_json::from_str(answers).unwrap())
}

fn reads(reads: Value) -> Value {
    json!({"mode": "read", "reads": reads})
}

/// Another policy's ordinary call still answers.
fn others_are_served() {
    let out = engine()
        .at_maximum()
        .decorate(
            &hostile(),
            "other",
            &ctx(),
            r#"{"mode":"ok"}"#,
            &pod().to_string(),
        )
        .expect("another call is served");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), pod());
}

#[test]
fn granted_reads_are_answered_from_the_cache_with_their_freshness() {
    let answers = decorate(
        reader(&["namespaces", "nodes"], cluster(20)),
        reads(json!([
            {"resource": "namespaces", "name": "vision"},
            {"resource": "namespaces", "name": "gone"},
            {"resource": "nodes", "selector": "pool=gpu"},
            {"resource": "nodes", "selector": "pool=cpu", "limit": 3},
        ])),
    )
    .expect("granted reads are answered");
    assert_eq!(
        answers,
        json!([
            {"object": "vision", "synced": true, "resourceVersion": "9"},
            {"object": null, "synced": true, "resourceVersion": "9"},
            {"items": ["node-00000", "node-00001", "node-00002", "node-00003", "node-00004"],
             "more": false, "synced": true, "resourceVersion": "41"},
            {"items": ["node-00005", "node-00006", "node-00007"],
             "more": true, "synced": true, "resourceVersion": "41"},
        ])
    );
}

#[test]
fn classify_and_resources_read_too() {
    let settings = reads(json!([{"resource": "nodes", "name": "node-00001"}])).to_string();
    let limited = engine()
        .at_maximum()
        .reading(reader(&["nodes"], cluster(3)));
    let verdict = limited
        .classify(
            &hostile(),
            "reader",
            &ctx(),
            &settings,
            &pod().to_string(),
            "2026-01-01T00:00:00Z",
        )
        .expect("classified");
    assert!(
        verdict.message.contains("node-00001"),
        "{}",
        verdict.message
    );
    limited
        .override_resources(&hostile(), "reader", &ctx(), &settings, "tensorflow", "{}")
        .expect("resources read too");
}

/// Each hostile way of reading, with the category it ends with and a part of the message.
#[test]
fn hostile_reads_end_the_call_with_their_category_whatever_the_guest_does() {
    let big = cluster(10_000);
    let cases: Vec<(&str, Reader, Value, Category, &str)> = vec![
        (
            "a resource not declared",
            reader(&["namespaces"], big.clone()),
            json!([{"resource": "nodes", "name": "node-00001"}]),
            Category::ReadDenied,
            "nodes is not among the policy's granted reads (namespaces)",
        ),
        (
            "secrets",
            reader(&["namespaces"], big.clone()),
            json!([{"resource": "secrets", "namespace": "vision", "name": "token"}]),
            Category::ReadDenied,
            "holds credentials",
        ),
        (
            "a policy that declared nothing",
            Reader::nothing(),
            json!([{"resource": "namespaces", "name": "vision"}]),
            Category::ReadDenied,
            "(none)",
        ),
        (
            "every node of a 10,000-node cluster",
            reader(&["nodes"], big.clone()),
            json!([{"resource": "nodes"}]),
            Category::ReadLimit,
            "matched more than 1000 objects",
        ),
        (
            "reads in a loop until the budget",
            reader(&["namespaces"], big.clone()),
            Value::Array(vec![
                json!({"resource": "namespaces", "name": "vision"});
                200
            ]),
            Category::ReadLimit,
            "a call may make 64 reads",
        ),
        (
            "a malformed selector",
            reader(&["nodes"], big.clone()),
            json!([{"resource": "nodes", "selector": "pool in gpu"}]),
            Category::ReadInvalid,
            "parentheses",
        ),
        (
            "a huge selector",
            reader(&["nodes"], big.clone()),
            json!([{"resource": "nodes", "selector": "a=b,".repeat(100_000)}]),
            Category::ReadInvalid,
            "at most 4096",
        ),
        (
            "a multi-byte selector",
            reader(&["nodes"], big.clone()),
            json!([{"resource": "nodes", "selector": "équipe=visión"}]),
            Category::ReadInvalid,
            "équipe",
        ),
        (
            "a namespace on a cluster-scoped read",
            reader(&["nodes"], big.clone()),
            json!([{"resource": "nodes", "namespace": "vision", "name": "node-00001"}]),
            Category::ReadInvalid,
            "cluster-scoped",
        ),
        (
            "a cache not synced yet",
            reader(
                &["nodes"],
                Arc::new(ClusterCache::of([ResourceCache::new(Resource::Nodes, 10)])),
            ),
            json!([{"resource": "nodes", "name": "node-00001"}]),
            Category::Unavailable,
            "has not synced yet",
        ),
        (
            "a cache no policy started",
            reader(&["nodes"], Arc::new(ClusterCache::new())),
            json!([{"resource": "nodes", "selector": ""}]),
            Category::Unavailable,
            "no cache of nodes is running",
        ),
    ];
    for (what, reader, requested, category, message) in cases {
        for ignore_errors in [false, true] {
            let settings =
                json!({"mode": "read", "reads": requested, "ignoreErrors": ignore_errors});
            let err = decorate(reader.clone(), settings).expect_err(what);
            assert_eq!(
                err.category, category,
                "{what} (errors ignored: {ignore_errors}): {err}"
            );
            assert!(err.message.contains(message), "{what}: {err}");
            assert!(err.message.len() < 2000, "{what}: the message is bounded");
        }
        others_are_served();
    }
}

#[test]
fn objects_with_huge_labels_are_bounded_by_the_bytes_of_an_answer() {
    let huge = |i: usize| {
        let labels: serde_json::Map<String, Value> = (0..200)
            .map(|k| (format!("k{k}"), json!("v".repeat(60))))
            .chain([("pool".to_owned(), json!("gpu"))])
            .collect();
        let mut n = node(i, Value::Object(labels));
        n["metadata"]["annotations"] = json!({"big": "x".repeat(256 << 10)});
        n
    };
    let cache = Arc::new(ClusterCache::of([ResourceCache::of(
        Resource::Nodes,
        1000,
        (0..40).map(huge),
    )]));
    let err = decorate(
        reader(&["nodes"], cache),
        reads(json!([{"resource": "nodes", "selector": "pool=gpu"}])),
    )
    .unwrap_err();
    assert_eq!(err.category, Category::ReadLimit, "{err}");
    assert!(err.message.contains("one answer holds at most"), "{err}");
    others_are_served();
}

#[test]
fn the_deadline_covers_a_policy_that_reads_forever() {
    let settings =
        json!({"mode": "read-forever", "reads": [{"resource": "nodes", "name": "node-00001"}]});
    let err = decorate(reader(&["nodes"], cluster(10)), settings).unwrap_err();
    assert_eq!(err.category, Category::Timeout, "{err}");
    others_are_served();
}

#[test]
fn reads_follow_the_cache_as_it_changes() {
    let cache = cluster(2);
    let settings = reads(json!([{"resource": "nodes", "name": "node-00001"}]));
    let before = decorate(reader(&["nodes"], cache.clone()), settings.clone()).unwrap();
    assert_eq!(before[0]["object"], "node-00001");
    let nodes = cache.resource(Resource::Nodes).unwrap();
    let mut deleted = node(1, json!({}));
    deleted["metadata"]["resourceVersion"] = json!("42");
    tfjob_policy_engine::cluster_cache::write(&nodes).delete(&deleted);
    let after = decorate(reader(&["nodes"], cache.clone()), settings.clone()).unwrap();
    assert_eq!(
        after[0],
        json!({"object": null, "synced": true, "resourceVersion": "42"})
    );
    // During a relist the cache answers what it held, as not synced.
    tfjob_policy_engine::cluster_cache::write(&nodes).begin_list();
    let relisting = decorate(
        reader(&["nodes"], cache),
        reads(json!([{"resource": "nodes", "name": "node-00000"}])),
    )
    .unwrap();
    assert_eq!(relisting[0]["object"], "node-00000");
    assert_eq!(relisting[0]["synced"], false);
}

#[test]
fn namespaced_reads_stay_in_the_granted_namespace() {
    let configmap = |ns: &str| json!({"metadata": {"name": "limits", "namespace": ns}});
    let cache = Arc::new(ClusterCache::of([ResourceCache::of(
        Resource::ConfigMaps,
        10,
        [configmap("vision"), configmap("team-b")],
    )]));
    let reader = Reader {
        grants: ReadCeiling::everything()
            .grant(
                &[ReadDeclaration {
                    resource: "configmaps".into(),
                    scope: Some(ReadScope::JobNamespace),
                }],
                None,
            )
            .unwrap()
            .into(),
        ..reader(&[], cache)
    };
    let answers = decorate(
        reader.clone(),
        reads(json!([{"resource": "configmaps", "namespace": "vision", "name": "limits"}])),
    )
    .unwrap();
    assert_eq!(answers[0]["object"], "limits");
    let err = decorate(
        reader,
        reads(json!([{"resource": "configmaps", "namespace": "team-b", "name": "limits"}])),
    )
    .unwrap_err();
    assert_eq!(err.category, Category::ReadDenied, "{err}");
    assert!(err.message.contains("configmaps(job-namespace)"), "{err}");
}

const HOSTILE_0_2_0: &[u8] = include_bytes!("data/hostile-policy-0.2.0.wasm");

#[test]
fn components_built_against_contract_0_2_0_run_every_hook_unchanged() {
    let old = engine()
        .compile(HOSTILE_0_2_0)
        .expect("a 0.2.0 component compiles");
    assert_eq!(old.contract(), "0.2.0");
    assert_eq!(old.hooks(), Hook::ALL.to_vec());
    assert!(
        old.imports.iter().all(|i| !i.contains("cluster")),
        "{:?}",
        old.imports
    );
    assert_eq!(hostile().contract(), "0.3.0");
    let limited = engine().at_maximum();
    let settings =
        r#"{"mode": "verdict", "phase": "running", "recheckAt": "2030-01-01T00:00:00Z"}"#;
    limited.validate_settings(&old, "old", settings).unwrap();
    let refused = limited
        .validate_settings(&old, "old", r#"{"mode": "nonsense"}"#)
        .unwrap_err();
    assert_eq!(refused.category, Category::Settings, "{refused}");
    let out = limited
        .decorate(&old, "old", &ctx(), settings, &pod().to_string())
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), pod());
    assert_eq!(
        limited
            .override_resources(&old, "old", &ctx(), settings, "tensorflow", "{}")
            .unwrap(),
        "{}"
    );
    let verdict = limited
        .classify(
            &old,
            "old",
            &ctx(),
            settings,
            &pod().to_string(),
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
    assert_eq!(
        verdict.recheck_at.as_deref(),
        Some("2030-01-01T00:00:00Z"),
        "a 0.2.0 verdict keeps its recheck-at"
    );
}

/// Through the operator's seam: a policy whose manifest declares reads is granted them at
/// activation, reads the cache the pipeline was given, and its verdicts are never reused, as
/// the objects it read may change while the pod does not.
#[test]
fn the_pipeline_grants_declared_reads_and_never_reuses_a_verdict_that_read() {
    use tfjob_planner::PodPolicies;
    use tfjob_policy_engine::{
        PolicyManifest, PolicySet, Registry, WasmPolicies, activate_checked,
    };

    let manifest = PolicyManifest {
        name: "reader".into(),
        hooks: vec![Hook::Classify],
        settings: json!({"mode": "read", "reads": [{"resource": "nodes", "name": "node-00001"}]}),
        reads: vec![ReadDeclaration {
            resource: "nodes".into(),
            scope: None,
        }],
        failure_policy: tfjob_policy_engine::FailurePolicy::Fail,
        ..PolicyManifest::default()
    };
    let active = activate_checked(engine(), manifest, HOSTILE_POLICY_WASM).expect("activates");
    assert_eq!(active.reads.len(), 1);
    let cache = cluster(3);
    let policies = WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([active]))),
    )
    .with_cluster(cache.clone());
    let mut observed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod()).unwrap();
    observed.metadata.uid = Some("pod-uid".into());
    observed.metadata.resource_version = Some("7".into());
    let ctx = pod_context();
    let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let first = policies.classify(&ctx, &observed, now).unwrap().verdict;
    assert!(
        first.message.contains("\"object\":\"node-00001\""),
        "{}",
        first.message
    );
    let nodes = cache.resource(Resource::Nodes).unwrap();
    tfjob_policy_engine::cluster_cache::write(&nodes).delete(&node(1, json!({})));
    let second = policies.classify(&ctx, &observed, now).unwrap().verdict;
    assert!(
        second.message.contains("\"object\":null"),
        "{}",
        second.message
    );
    assert_eq!(policies.cached_verdicts(), 0);
    // The same pipeline without a cache of nodes: the failure policy decides.
    let err = WasmPolicies::new(
        Arc::clone(engine()),
        Arc::new(Registry::new(PolicySet::new([activate_checked(
            engine(),
            PolicyManifest {
                name: "reader".into(),
                hooks: vec![Hook::Classify],
                settings: json!({"mode": "read", "reads": [{"resource": "nodes", "name": "x"}]}),
                reads: vec![ReadDeclaration {
                    resource: "nodes".into(),
                    scope: None,
                }],
                failure_policy: tfjob_policy_engine::FailurePolicy::Fail,
                ..PolicyManifest::default()
            },
            HOSTILE_POLICY_WASM,
        )
        .unwrap()]))),
    )
    .classify(&ctx, &observed, now)
    .unwrap_err();
    assert_eq!(err.category, Category::Unavailable, "{err}");
}
