//! What the admission loop reads of Kueue's objects, parsed from their JSON once per pass into
//! plain types: ClusterQueues with their resource groups and quotas, LocalQueues,
//! ResourceFlavors with their node labels and taints, and Workloads with their pod sets, their
//! admission and their state.
//!
//! Parsing never fails: a field that is missing takes Kueue's default (`spec.active` true,
//! `count` 1, `queueingStrategy` BestEffortFIFO), a quantity that does not parse counts as
//! zero, so a malformed object is judged (and reported) instead of stopping the loop.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::kubelet::schedule::{Resources, parse_quantity, pod_requests};

/// Label keys to values.
pub type Labels = BTreeMap<String, String>;

/// A workload's namespace and name.
pub type WorkloadKey = (String, String);

/// `stopPolicy` of a ClusterQueue or LocalQueue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StopPolicy {
    #[default]
    None,
    /// Admit nothing more; what is admitted stays.
    Hold,
    /// Admit nothing more and evict what is admitted.
    HoldAndDrain,
}

impl StopPolicy {
    fn of(spec: &Value) -> StopPolicy {
        match spec.get("stopPolicy").and_then(Value::as_str) {
            Some("Hold") => StopPolicy::Hold,
            Some("HoldAndDrain") => StopPolicy::HoldAndDrain,
            _ => StopPolicy::None,
        }
    }

    pub fn stopped(self) -> bool {
        self != StopPolicy::None
    }
}

/// `queueingStrategy` of a ClusterQueue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Kueue's default: a head that does not fit lets the next ones try.
    #[default]
    BestEffortFifo,
    /// A head that does not fit blocks the workloads behind it.
    StrictFifo,
}

/// One flavor of a resource group with its nominal quota per resource, in thousandths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlavorQuotas {
    pub name: String,
    pub nominal: Resources,
}

/// `spec.resourceGroups[*]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceGroup {
    pub covered: Vec<String>,
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterQueue {
    pub name: String,
    pub groups: Vec<ResourceGroup>,
    pub strategy: Strategy,
    pub stop: StopPolicy,
    /// `spec.namespaceSelector`; `None` admits every namespace.
    pub namespace_selector: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalQueue {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: String,
    pub stop: StopPolicy,
}

/// A node taint a flavor declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceFlavor {
    pub name: String,
    pub node_labels: Labels,
    pub node_taints: Vec<Taint>,
    /// Tolerations admitted pods get (`spec.tolerations`), as written.
    pub tolerations: Vec<Value>,
}

/// One pod set of a workload: `count` pods of one template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSet {
    pub name: String,
    pub count: i128,
    /// What one pod requests.
    pub requests: Resources,
    pub node_selector: Labels,
    pub tolerations: Vec<Value>,
}

impl PodSet {
    /// What all the set's pods request together; resources asked for in zero amounts left out.
    pub fn total(&self) -> Resources {
        self.requests
            .iter()
            .filter(|(_, amount)| **amount > 0)
            .map(|(name, amount)| (name.clone(), amount * self.count))
            .collect()
    }
}

/// `status.admission.podSetAssignments[*]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub name: String,
    /// The flavor of each resource.
    pub flavors: BTreeMap<String, String>,
    /// What the set's pods request together.
    pub usage: Resources,
    pub count: i128,
}

/// `status.admission`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub cluster_queue: String,
    pub pod_sets: Vec<Assignment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    /// `metadata.creationTimestamp`: RFC 3339 in UTC, so it orders as text.
    pub created: String,
    pub priority: i64,
    pub queue_name: String,
    /// `spec.active`, true unless set false.
    pub active: bool,
    pub pod_sets: Vec<PodSet>,
    /// The admission, while `QuotaReserved` is True.
    pub admission: Option<Admission>,
    /// `Finished` is True.
    pub finished: bool,
    /// Marked for deletion: it holds its quota until gone, and is not admitted.
    pub deleting: bool,
}

impl Workload {
    pub fn key(&self) -> WorkloadKey {
        (self.namespace.clone(), self.name.clone())
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A string map (labels, node selectors); values that are not strings left out.
pub fn string_map(v: Option<&Value>) -> Labels {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A quantity written as a string or a number, in thousandths; zero when malformed.
pub fn quantity(v: &Value) -> i128 {
    match v {
        Value::String(s) => parse_quantity(s).unwrap_or_default(),
        Value::Number(n) => n.as_f64().map_or(0, |f| (f * 1000.0).ceil() as i128),
        _ => 0,
    }
}

/// Renders thousandths of `resource` as a Kubernetes quantity: memory-like resources with a
/// binary suffix where exact (`400Mi`), fractions in milli-units (`500m`), else plain (`3`).
pub fn render(resource: &str, milli: i128) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let mut units = milli / 1000;
    let bytes = resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-");
    if !bytes || units == 0 {
        return units.to_string();
    }
    let mut suffix = "";
    for next in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if units % 1024 != 0 {
            break;
        }
        units /= 1024;
        suffix = next;
    }
    format!("{units}{suffix}")
}

/// Whether a condition of `type_` has status True.
pub fn condition_true(obj: &Value, type_: &str) -> bool {
    list(obj, "/status/conditions")
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// A condition of `type_`, if any.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    list(obj, "/status/conditions")
        .iter()
        .find(|c| c["type"] == type_)
}

impl ClusterQueue {
    pub fn parse(obj: &Value) -> ClusterQueue {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let groups = list(spec, "/resourceGroups")
            .iter()
            .map(|g| ResourceGroup {
                covered: list(g, "/coveredResources")
                    .iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect(),
                flavors: list(g, "/flavors")
                    .iter()
                    .map(|f| FlavorQuotas {
                        name: text(f, "/name").to_owned(),
                        nominal: list(f, "/resources")
                            .iter()
                            .map(|r| {
                                let q = r.get("nominalQuota").map_or(0, quantity);
                                (text(r, "/name").to_owned(), q)
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        ClusterQueue {
            name: text(obj, "/metadata/name").to_owned(),
            groups,
            strategy: match spec.get("queueingStrategy").and_then(Value::as_str) {
                Some("StrictFIFO") => Strategy::StrictFifo,
                _ => Strategy::BestEffortFifo,
            },
            stop: StopPolicy::of(spec),
            namespace_selector: spec.get("namespaceSelector").cloned(),
        }
    }

    /// The index of the resource group covering `resource`.
    pub fn group_of(&self, resource: &str) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.covered.iter().any(|r| r == resource))
    }
}

impl LocalQueue {
    pub fn parse(obj: &Value) -> LocalQueue {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        LocalQueue {
            namespace: text(obj, "/metadata/namespace").to_owned(),
            name: text(obj, "/metadata/name").to_owned(),
            cluster_queue: text(spec, "/clusterQueue").to_owned(),
            stop: StopPolicy::of(spec),
        }
    }
}

impl ResourceFlavor {
    pub fn parse(obj: &Value) -> ResourceFlavor {
        ResourceFlavor {
            name: text(obj, "/metadata/name").to_owned(),
            node_labels: string_map(obj.pointer("/spec/nodeLabels")),
            node_taints: list(obj, "/spec/nodeTaints")
                .iter()
                .map(|t| Taint {
                    key: text(t, "/key").to_owned(),
                    value: text(t, "/value").to_owned(),
                    effect: text(t, "/effect").to_owned(),
                })
                .collect(),
            tolerations: list(obj, "/spec/tolerations").to_vec(),
        }
    }
}

impl PodSet {
    /// A pod set of a Workload's spec (or of a job, in the same shape).
    pub fn parse(set: &Value) -> PodSet {
        let template = set.get("template").unwrap_or(&Value::Null);
        PodSet {
            name: set
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("main")
                .to_owned(),
            count: set.get("count").and_then(Value::as_i64).unwrap_or(1).into(),
            requests: pod_requests(template),
            node_selector: string_map(template.pointer("/spec/nodeSelector")),
            tolerations: list(template, "/spec/tolerations").to_vec(),
        }
    }
}

impl Admission {
    pub fn parse(admission: &Value) -> Admission {
        Admission {
            cluster_queue: text(admission, "/clusterQueue").to_owned(),
            pod_sets: list(admission, "/podSetAssignments")
                .iter()
                .map(|a| Assignment {
                    name: text(a, "/name").to_owned(),
                    flavors: string_map(a.get("flavors")),
                    usage: a
                        .get("resourceUsage")
                        .and_then(Value::as_object)
                        .map(|m| m.iter().map(|(k, v)| (k.clone(), quantity(v))).collect())
                        .unwrap_or_default(),
                    count: a.get("count").and_then(Value::as_i64).unwrap_or(1).into(),
                })
                .collect(),
        }
    }

    /// What the admission holds, per flavor and resource.
    pub fn usage(&self) -> BTreeMap<(String, String), i128> {
        let mut out = BTreeMap::new();
        for set in &self.pod_sets {
            for (resource, amount) in &set.usage {
                if let Some(flavor) = set.flavors.get(resource) {
                    *out.entry((flavor.clone(), resource.clone())).or_default() += amount;
                }
            }
        }
        out
    }
}

impl Workload {
    pub fn parse(obj: &Value) -> Workload {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let admission = obj
            .pointer("/status/admission")
            .filter(|a| a.is_object() && condition_true(obj, "QuotaReserved"))
            .map(Admission::parse);
        Workload {
            namespace: text(obj, "/metadata/namespace").to_owned(),
            name: text(obj, "/metadata/name").to_owned(),
            created: text(obj, "/metadata/creationTimestamp").to_owned(),
            priority: spec.get("priority").and_then(Value::as_i64).unwrap_or(0),
            queue_name: text(spec, "/queueName").to_owned(),
            active: spec.get("active").and_then(Value::as_bool).unwrap_or(true),
            pod_sets: list(spec, "/podSets").iter().map(PodSet::parse).collect(),
            admission,
            finished: condition_true(obj, "Finished"),
            deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_render_as_kubernetes_writes_them() {
        assert_eq!(render("cpu", 3000), "3");
        assert_eq!(render("cpu", 1500), "1500m");
        assert_eq!(render("memory", 600 * 1024 * 1024 * 1000), "600Mi");
        assert_eq!(render("memory", 36 * (1 << 30) * 1000), "36Gi");
        assert_eq!(render("memory", 1000 * 1000), "1000");
        assert_eq!(render("memory", 0), "0");
    }

    #[test]
    fn missing_fields_take_kueues_defaults() {
        let wl = Workload::parse(&json!({
            "metadata": {"namespace": "default", "name": "w", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"queueName": "q", "podSets": [{"template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"cpu": "2"}}}
            ]}}}]},
        }));
        assert!(wl.active);
        assert_eq!(wl.pod_sets[0].name, "main");
        assert_eq!(wl.pod_sets[0].count, 1);
        assert_eq!(
            wl.pod_sets[0].requests["cpu"], 2000,
            "limits stand for requests"
        );
        assert_eq!(wl.admission, None);

        let cq = ClusterQueue::parse(&json!({"metadata": {"name": "cq"}, "spec": {}}));
        assert_eq!(cq.strategy, Strategy::BestEffortFifo);
        assert_eq!(cq.stop, StopPolicy::None);
    }

    #[test]
    fn an_admission_counts_only_while_quota_is_reserved() {
        let admission = json!({"clusterQueue": "cq", "podSetAssignments": [
            {"name": "worker", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "3", "memory": "1Gi"}, "count": 3}
        ]});
        let reserved = json!({"metadata": {"name": "w"}, "status": {
            "admission": admission,
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
        }});
        let parsed = Workload::parse(&reserved).admission.expect("admitted");
        assert_eq!(
            parsed.usage(),
            BTreeMap::from([(("f".into(), "cpu".into()), 3000)]),
            "a resource with no flavor is not counted"
        );
        let released = json!({"metadata": {"name": "w"}, "status": {"admission": admission}});
        assert_eq!(Workload::parse(&released).admission, None);
    }
}
