//! What reading the cluster costs a policy, from inside the sandbox: the hostile test policy
//! (a Rust guest of contract 0.3.0) in its `read` mode makes the reads its settings list and
//! parses every object answered, as a policy deciding on them would.
//!
//! - `reads/none`: the same mode making no read, so the difference is the reads alone.
//! - `reads/get-namespace`: one `get` of a namespace from a cache of 1,000.
//! - `list-nodes/<n>`: one `list` of every node of a cache of `n` (100, 1,000, 10,000), each
//!   node as a managed cloud's GPU node trimmed by the cache (about 2.5 KB of JSON), parsed in
//!   the guest. 100 and 1,000 run under the operator's default limits (50 ms deadline, 64 MiB
//!   of guest memory, 1,000 objects and 4 MiB per answer); 10,000 is past those bounds on
//!   purpose (the default answers `read-limit`), so it runs with them raised to show what such
//!   a read would cost, and `list-nodes/10000-refused` measures the refusal under the defaults.
//!
//! Every call is a full evaluation as the operator makes it: a fresh instance and store, the
//! deadline, the memory cap, the host answering from the shared cache. After the groups the
//! medians are printed with the target (a `get` adds at most 10 µs to a call).
//!
//! Run: `cargo bench -p tfjob-policy-engine --bench cluster_reads`

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::Criterion;
use serde_json::{Value, json};
use tfjob_planner::PodContext;
use tfjob_policy_engine::cluster_access::{ReadBounds, Reader};
use tfjob_policy_engine::cluster_cache::{ClusterCache, ResourceCache};
use tfjob_policy_engine::cluster_reads::{ReadCeiling, ReadDeclaration, Resource};
use tfjob_policy_engine::defaults::HOSTILE_POLICY_WASM;
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{Category, CompiledPolicy, PolicyEngine, SandboxLimits};

#[path = "support/cluster_objects.rs"]
mod cluster_objects;
#[path = "support/medians.rs"]
mod medians;

const NODE_COUNTS: [usize; 3] = [100, 1_000, 10_000];
const NAMESPACES: usize = 1_000;
/// The most a `get` may add to a call (the issue's target), in ns.
const GET_TARGET_NS: f64 = 10_000.0;

/// An engine, its compiled hostile policy, and the caches of `nodes` nodes and 1,000
/// namespaces.
struct Bench {
    engine: PolicyEngine,
    policy: Arc<CompiledPolicy>,
    cache: Arc<ClusterCache>,
    bounds: ReadBounds,
}

impl Bench {
    fn new(limits: SandboxLimits, bounds: ReadBounds, nodes: usize) -> Bench {
        let engine = PolicyEngine::new(limits).expect("the engine starts");
        let policy = engine
            .compile(HOSTILE_POLICY_WASM)
            .expect("the hostile policy compiles");
        let cache = Arc::new(ClusterCache::of([
            ResourceCache::of(
                Resource::Namespaces,
                20_000,
                (0..NAMESPACES).map(cluster_objects::namespace),
            ),
            ResourceCache::of(
                Resource::Nodes,
                20_000,
                (0..nodes).map(cluster_objects::node),
            ),
        ]));
        Bench {
            engine,
            policy,
            cache,
            bounds,
        }
    }

    /// A reader as the operator makes one for a cluster-wide policy declaring namespaces and
    /// nodes, for a job of namespace `team-00042`.
    fn reader(&self) -> Reader {
        let declared: Vec<ReadDeclaration> = ["namespaces", "nodes"]
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
            job_namespace: "team-00042".into(),
            job_name: "mnist".into(),
            policy_namespace: None,
            cache: Arc::clone(&self.cache),
            bounds: self.bounds,
            journal: None,
        }
    }

    /// One decoration making `reads`; the pod it returns, or the error's category.
    fn call(&self, reads: &Value) -> Result<String, Category> {
        let settings = json!({"mode": "read", "reads": reads}).to_string();
        self.engine
            .at_maximum()
            .reading(self.reader())
            .decorate(&self.policy, "reader", &context(), &settings, POD)
            .map_err(|e| e.category)
    }
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"mnist-worker-0","namespace":"team-00042","labels":{"training.kubeflow.org/job-name":"mnist"}},"spec":{"containers":[{"name":"tensorflow","image":"tensorflow/tensorflow:2.15.0-gpu","resources":{"limits":{"nvidia.com/gpu":"8"}}}]}}"#;

fn context() -> tfjob_policy_engine::bindings::JobContext {
    job_context(&PodContext::single_worker("team-00042", "mnist"))
}

fn list_nodes(limit: usize) -> Value {
    json!([{"resource": "nodes", "limit": limit}])
}

/// What the operator allows by default, but for the 10,000-node list.
fn raised() -> (SandboxLimits, ReadBounds) {
    let limits = SandboxLimits {
        deadline: Duration::from_secs(10),
        memory: 1 << 30,
        memory_budget: 1 << 30,
        concurrency: 1,
        ..SandboxLimits::default()
    };
    let bounds = ReadBounds {
        objects_per_answer: 10_000,
        bytes_per_answer: 256 << 20,
        bytes_per_call: 256 << 20,
        ..ReadBounds::default()
    };
    (limits, bounds)
}

fn bench(c: &mut Criterion) {
    let defaults = Bench::new(SandboxLimits::default(), ReadBounds::default(), 1_000);
    let get = json!([{"resource": "namespaces", "name": "team-00042"}]);
    let answered = defaults.call(&get).expect("the get is answered");
    assert!(
        answered.contains(r#"\"object\":\"team-00042\""#),
        "{answered}"
    );
    let mut reads = c.benchmark_group("reads");
    reads.bench_function("none", |b| b.iter(|| defaults.call(&json!([])).unwrap()));
    reads.bench_function("get-namespace", |b| b.iter(|| defaults.call(&get).unwrap()));
    reads.finish();

    let mut lists = c.benchmark_group("list-nodes");
    lists.sample_size(10);
    for nodes in NODE_COUNTS {
        let bench = if nodes <= ReadBounds::default().objects_per_answer as usize {
            Bench::new(SandboxLimits::default(), ReadBounds::default(), nodes)
        } else {
            let refused = Bench::new(SandboxLimits::default(), ReadBounds::default(), nodes);
            assert_eq!(refused.call(&list_nodes(nodes)), Err(Category::ReadLimit));
            lists.bench_function(format!("{nodes}-refused"), |b| {
                b.iter(|| refused.call(&list_nodes(nodes)).unwrap_err())
            });
            let (limits, bounds) = raised();
            Bench::new(limits, bounds, nodes)
        };
        let pod = bench
            .call(&list_nodes(nodes))
            .unwrap_or_else(|e| panic!("a list of {nodes} nodes: {e:?}"));
        assert!(
            pod.contains(&format!("gpu-node-{:05}", nodes - 1)),
            "every node answered"
        );
        lists.bench_function(nodes.to_string(), |b| {
            b.iter(|| bench.call(&list_nodes(nodes)).unwrap())
        });
    }
    lists.finish();
}

fn summary(since: SystemTime) {
    let dir = medians::criterion_dir();
    let median = |group: &str, function: &str| medians::median_ns(&dir, group, function, since);
    if let (Some(none), Some(get)) = (median("reads", "none"), median("reads", "get-namespace")) {
        let added = get - none;
        println!(
            "a get of a namespace adds {:.2} us to a call ({:.2} -> {:.2} us): target <= {:.0} us, {}",
            added / 1e3,
            none / 1e3,
            get / 1e3,
            GET_TARGET_NS / 1e3,
            if added <= GET_TARGET_NS {
                "met"
            } else {
                "NOT MET"
            }
        );
    }
    for nodes in NODE_COUNTS {
        if let Some(list) = median("list-nodes", &nodes.to_string()) {
            println!(
                "a list of {nodes} nodes: {:.3} ms per call, {:.2} us per node",
                list / 1e6,
                list / 1e3 / nodes as f64
            );
        }
    }
}

fn main() {
    let started = SystemTime::now();
    let mut c = Criterion::default()
        .output_directory(&medians::criterion_dir())
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary(started);
}
