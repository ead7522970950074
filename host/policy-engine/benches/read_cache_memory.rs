//! What the caches behind cluster reads hold: the live heap of a [`ResourceCache`] of 1,000 and
//! 10,000 nodes and namespaces, fed as a watch feeds it (each object trimmed as it enters), per
//! object and in all, against the targets (at most 4 KiB per cached node; 10,000 nodes
//! at most 60 MiB). The heap is counted by dhat's allocator, so the numbers are the bytes the
//! cache keeps (JSON text, labels for selectors, keys, the map), not a resident-set estimate.
//! Beside them: the objects' JSON as the API server sends it and as trimmed.
//!
//! Run: `cargo bench -p tfjob-policy-engine --bench read_cache_memory`

use serde_json::Value;
use tfjob_policy_engine::cluster_cache::{DEFAULT_OBJECT_CAP, ResourceCache};
use tfjob_policy_engine::cluster_objects::trim;
use tfjob_policy_engine::cluster_reads::Resource;

#[path = "support/cluster_objects.rs"]
mod cluster_objects;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const COUNTS: [usize; 2] = [1_000, 10_000];
const NODE_TARGET_PER_OBJECT: usize = 4 << 10;
const NODES_TARGET_AT_10K: usize = 60 << 20;
/// Objects whose JSON sizes are averaged for the table.
const SAMPLE: usize = 100;

/// Makes object `i` of a kind.
type Make = fn(usize) -> Value;

fn live_bytes() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// Mean JSON bytes of an object as served and as trimmed, over the first [`SAMPLE`].
fn json_sizes(resource: Resource, make: Make) -> (usize, usize) {
    let (mut served, mut trimmed) = (0, 0);
    for i in 0..SAMPLE {
        let mut object = make(i);
        served += object.to_string().len();
        trim(resource, &mut object);
        trimmed += object.to_string().len();
    }
    (served / SAMPLE, trimmed / SAMPLE)
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let kinds: [(Resource, Make); 2] = [
        (Resource::Nodes, cluster_objects::node),
        (Resource::Namespaces, cluster_objects::namespace),
    ];
    for (resource, make) in kinds {
        let (served, trimmed) = json_sizes(resource, make);
        println!("{resource}: {served} bytes of JSON served, {trimmed} kept after trimming");
        for count in COUNTS {
            let before = live_bytes();
            let cache = ResourceCache::of(resource, DEFAULT_OBJECT_CAP, (0..count).map(make));
            let held = live_bytes() - before;
            assert_eq!(cache.len(), count);
            let per_object = held / count;
            let mut line = format!(
                "{resource} x {count}: {:.1} MiB held, {per_object} bytes per object ({} of them JSON text)",
                held as f64 / f64::from(1 << 20),
                cache.bytes() / count
            );
            if resource == Resource::Nodes {
                let met = |ok: bool| if ok { "met" } else { "NOT MET" };
                line.push_str(&format!(
                    "; target <= {NODE_TARGET_PER_OBJECT} bytes per node: {}",
                    met(per_object <= NODE_TARGET_PER_OBJECT)
                ));
                if count == 10_000 {
                    line.push_str(&format!(
                        "; target <= 60 MiB at 10,000: {}",
                        met(held <= NODES_TARGET_AT_10K)
                    ));
                }
            }
            println!("{line}");
            drop(cache);
        }
    }
}
