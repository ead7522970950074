//! What the policies that shaped a pod read of the cluster, written on the pod beside the list
//! of those policies, so that "why did my pod get this toleration" is answered by the pod
//! itself: for each policy that read, each read with its resource, namespace, object name (or
//! `?selector` of a list), how many objects it answered and at which resourceVersion (a
//! `get`'s object's own; a `list`'s, the cache's).
//!
//! The annotation is bounded: a pod's annotations share 256 KiB, and 64 reads of each of
//! several policies must not take them. Past [`MAX_READS_ANNOTATION`] bytes the last reads give
//! way to a count of those left out, so what is written is always valid JSON and says that it
//! is incomplete. Policies cannot write it themselves: the guard keeps `policy.tfjob.dev/`
//! annotations the operator's.

use serde::Serialize;

use crate::cluster_access::ReadRecord;

/// The annotation listing what the policies that shaped a pod read.
pub const READS_ANNOTATION: &str = "policy.tfjob.dev/reads";

/// The most bytes the annotation holds.
pub const MAX_READS_ANNOTATION: usize = 8 << 10;

/// One policy's reads, as the annotation lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyReads {
    /// `name@short-digest`, as `policy.tfjob.dev/policies` names it.
    pub policy: String,
    pub reads: Vec<ReadRecord>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Item<'a> {
    Policy(&'a PolicyReads),
    Omitted { omitted: usize },
}

/// The annotation's value: a JSON list of the policies' reads, with `{"omitted": N}` last when
/// N reads did not fit. None when no policy read anything.
pub fn annotation(reads: &[PolicyReads]) -> Option<String> {
    let total: usize = reads.iter().map(|p| p.reads.len()).sum();
    if total == 0 {
        return None;
    }
    let mut kept: Vec<PolicyReads> = reads
        .iter()
        .filter(|p| !p.reads.is_empty())
        .cloned()
        .collect();
    loop {
        let shown: usize = kept.iter().map(|p| p.reads.len()).sum();
        let mut items: Vec<Item> = kept.iter().map(Item::Policy).collect();
        if shown < total {
            items.push(Item::Omitted {
                omitted: total - shown,
            });
        }
        let text = serde_json::to_string(&items).expect("reads serialise");
        if text.len() <= MAX_READS_ANNOTATION || shown == 0 {
            return Some(text);
        }
        // Drop the last read; a policy left with none goes.
        if let Some(last) = kept.last_mut() {
            last.reads.pop();
            if last.reads.is_empty() {
                kept.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_reads::Resource;
    use serde_json::{Value, json};

    fn read(what: &str) -> ReadRecord {
        ReadRecord {
            resource: Resource::Namespaces,
            namespace: String::new(),
            what: what.into(),
            objects: 1,
            resource_version: "17".into(),
        }
    }

    #[test]
    fn each_policy_lists_its_reads_with_their_versions() {
        let reads = [
            PolicyReads {
                policy: "default-decorate@abc".into(),
                reads: vec![read("vision")],
            },
            PolicyReads {
                policy: "quiet@def".into(),
                reads: vec![],
            },
        ];
        let text = annotation(&reads).expect("something was read");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            json!([{"policy": "default-decorate@abc", "reads": [
                {"resource": "namespaces", "what": "vision", "objects": 1, "resourceVersion": "17"}
            ]}])
        );
        assert_eq!(
            annotation(&reads[1..]),
            None,
            "nothing read, nothing written"
        );
    }

    #[test]
    fn too_many_reads_end_with_a_count_of_those_left_out() {
        let long = "n".repeat(253);
        let reads: Vec<PolicyReads> = (0..4)
            .map(|p| PolicyReads {
                policy: format!("policy-{p}@abc"),
                reads: (0..64).map(|_| read(&long)).collect(),
            })
            .collect();
        let text = annotation(&reads).unwrap();
        assert!(text.len() <= MAX_READS_ANNOTATION, "{}", text.len());
        let value: Value = serde_json::from_str(&text).unwrap();
        let items = value.as_array().unwrap();
        let shown: usize = items
            .iter()
            .filter_map(|i| i["reads"].as_array())
            .map(Vec::len)
            .sum();
        let omitted = items.last().unwrap()["omitted"].as_u64().unwrap() as usize;
        assert!(shown > 0);
        assert_eq!(shown + omitted, 4 * 64);
        assert_eq!(items[0]["policy"], "policy-0@abc", "the first reads stay");
    }
}
