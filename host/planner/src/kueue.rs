//! Kueue Workloads the operator owns (`--kueue-workloads`): the Workload a queued job needs,
//! what an observed Workload says about the job (wait, or run where Kueue placed it), and the
//! change that brings the Workload in line with the job.
//!
//! A job is queued when it carries the label `kueue.x-k8s.io/queue-name`. Its Workload
//! (`kueue.x-k8s.io/v1beta2`) is owned by the job and holds one pod set per replica type, in
//! the order Kueue's own TFJob integration uses (Chief, Master, PS, Worker, Evaluator), each with
//! its count and template, and the job's priority class. The job's pods exist only while the
//! Workload is admitted; they run on the flavors the admission assigned (each ResourceFlavor's
//! node labels and tolerations), and they stop when Kueue evicts the Workload. When the job ends
//! the Workload is marked finished, which gives its quota back.
//!
//! Pure: the controller hands in the Workload and ResourceFlavors it observed and carries out
//! the returned [`WorkloadChange`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tfjob_api::labels::KUEUE_QUEUE_NAME;
use tfjob_api::validation::ValidJob;
use tfjob_api::{ReplicaType, TFJob};

/// The API group, version, kind and plural of Kueue's Workloads.
pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta2";
pub const WORKLOAD_KIND: &str = "Workload";
pub const WORKLOAD_PLURAL: &str = "workloads";
pub const RESOURCE_FLAVOR_KIND: &str = "ResourceFlavor";
pub const RESOURCE_FLAVOR_PLURAL: &str = "resourceflavors";

/// Annotation on the Workload: a digest of the pod sets it was built from, so a changed job
/// (or a Workload someone else rewrote) is noticed without comparing templates the API server
/// may have defaulted.
pub const POD_SETS_DIGEST_ANNOTATION: &str = "tfjob.dev/pod-sets-digest";

/// A Workload name may be at most this long (a DNS subdomain).
const MAX_NAME: usize = 253;
/// Hex characters of the digest that end a Workload's name.
const NAME_HASH: usize = 5;

/// The queue a job waits in: its `kueue.x-k8s.io/queue-name` label, when set and not empty.
pub fn queue_name(job: &TFJob) -> Option<&str> {
    job.metadata
        .labels
        .as_ref()?
        .get(KUEUE_QUEUE_NAME)
        .map(String::as_str)
        .filter(|q| !q.is_empty())
}

/// The Workload's name, shaped as Kueue names the Workloads of its integrations:
/// `tfjob-<job name>-<5 hex>`, the prefix cut so the whole fits 253 characters. The hash covers
/// the job's name and uid, so a job recreated under the same name gets a new Workload.
pub fn workload_name(job_name: &str, job_uid: &str) -> String {
    let digest = Sha256::digest(format!("TFJob\nkubeflow.org\n{job_name}\n{job_uid}"));
    let hash = hex::encode(digest);
    let mut prefix = format!("tfjob-{job_name}");
    // Job names are DNS labels (ASCII), so cutting at a byte count is at a character.
    prefix.truncate(MAX_NAME - 1 - NAME_HASH);
    format!(
        "{}-{}",
        prefix.trim_end_matches(['-', '.']),
        &hash[..NAME_HASH]
    )
}

/// The priority class a Workload carries: the run policy's, else the first template's (in
/// pod-set order) that names one, as Kueue reads a TFJob.
pub fn priority_class(job: &ValidJob) -> Option<String> {
    let from_policy = job
        .run_policy
        .scheduling
        .priority_class
        .clone()
        .filter(|c| !c.is_empty());
    from_policy.or_else(|| {
        job.replicas.values().find_map(|r| {
            r.template
                .spec
                .as_ref()?
                .priority_class_name
                .clone()
                .filter(|c| !c.is_empty())
        })
    })
}

/// The pod sets of `job`: one per replica type, in Kueue's order.
fn pod_sets(job: &ValidJob) -> Value {
    let sets: Vec<Value> = job
        .replicas
        .iter()
        .map(|(rtype, replica)| {
            json!({
                "name": rtype.lower(),
                "count": replica.replicas,
                "template": replica.template,
            })
        })
        .collect();
    Value::Array(sets)
}

/// What identifies `pod_sets` for [`POD_SETS_DIGEST_ANNOTATION`].
fn digest_of(pod_sets: &Value) -> String {
    hex::encode(&Sha256::digest(pod_sets.to_string())[..8])
}

/// The Workload `job` needs in `queue`, owned by the job; `priority` is the priority class and
/// its value, when the job names one.
pub fn desired(job: &ValidJob, queue: &str, priority: Option<(&str, i32)>) -> Value {
    let sets = pod_sets(job);
    let mut spec = json!({"queueName": queue, "podSets": sets});
    if let Some((class, value)) = priority {
        spec["priorityClassRef"] =
            json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class});
        spec["priority"] = json!(value);
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": WORKLOAD_KIND,
        "metadata": {
            "name": workload_name(&job.name, &job.uid),
            "namespace": job.namespace,
            "labels": {tfjob_api::labels::JOB_NAME: job.name},
            "annotations": {POD_SETS_DIGEST_ANNOTATION: digest_of(&spec["podSets"])},
            "ownerReferences": [{
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": job.name,
                "uid": job.uid,
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": spec
    })
}

/// A status condition of a Workload, as far as the job cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadCondition {
    pub reason: String,
    pub message: String,
}

/// One pod set's admission: the flavor assigned to each resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub pod_set: String,
    pub flavors: BTreeMap<String, String>,
}

/// A Workload as observed in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedWorkload {
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    pub queue_name: String,
    /// The pod sets' names and counts, in order.
    pub pod_sets: Vec<(String, i64)>,
    pub pod_sets_digest: Option<String>,
    /// The admission, when quota is reserved and the Workload is admitted.
    pub admission: Option<Vec<Assignment>>,
    /// `Evicted` is True: why.
    pub evicted: Option<WorkloadCondition>,
    /// `QuotaReserved` is False: why it waits.
    pub pending: Option<WorkloadCondition>,
    pub finished: bool,
    /// The Workload's conditions as stored, for a status write that adds one.
    pub conditions: Vec<Value>,
}

fn is_true(conditions: &[Value], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c["status"] == "True")
}

fn find<'v>(conditions: &'v [Value], type_: &str) -> Option<&'v Value> {
    conditions.iter().find(|c| c["type"] == type_)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn condition_of(c: &Value) -> WorkloadCondition {
    WorkloadCondition {
        reason: text(&c["reason"]),
        message: text(&c["message"]),
    }
}

impl ObservedWorkload {
    /// Reads a Workload object (any fields it lacks read as absent).
    pub fn from_object(object: &Value) -> ObservedWorkload {
        let conditions: Vec<Value> = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let admitted = is_true(&conditions, "QuotaReserved") && is_true(&conditions, "Admitted");
        let admission = object
            .pointer("/status/admission/podSetAssignments")
            .and_then(Value::as_array)
            .filter(|_| admitted)
            .map(|list| {
                list.iter()
                    .map(|a| Assignment {
                        pod_set: text(&a["name"]),
                        flavors: a["flavors"]
                            .as_object()
                            .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            });
        let evicted = find(&conditions, "Evicted")
            .filter(|c| c["status"] == "True")
            .map(condition_of);
        let pending = find(&conditions, "QuotaReserved")
            .filter(|c| c["status"] == "False")
            .map(condition_of);
        ObservedWorkload {
            name: text(&object["metadata"]["name"]),
            uid: text(&object["metadata"]["uid"]),
            deleting: object
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null()),
            queue_name: text(&object["spec"]["queueName"]),
            pod_sets: object["spec"]["podSets"]
                .as_array()
                .map(|sets| {
                    sets.iter()
                        .map(|s| (text(&s["name"]), s["count"].as_i64().unwrap_or(1)))
                        .collect()
                })
                .unwrap_or_default(),
            pod_sets_digest: object
                .pointer(&format!(
                    "/metadata/annotations/{}",
                    POD_SETS_DIGEST_ANNOTATION.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .map(str::to_owned),
            admission,
            evicted,
            pending,
            finished: is_true(&conditions, "Finished"),
            conditions,
        }
    }
}

/// Where a ResourceFlavor puts pods: its node labels and tolerations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flavor {
    pub node_labels: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

impl Flavor {
    /// Reads a ResourceFlavor object; malformed fields read as absent.
    pub fn from_object(object: &Value) -> Flavor {
        Flavor {
            node_labels: object
                .pointer("/spec/nodeLabels")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
            tolerations: object
                .pointer("/spec/tolerations")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
        }
    }
}

/// What the planner reads of Kueue for one job, in Workload mode.
#[derive(Clone, Copy, Debug)]
pub struct KueueView<'a> {
    /// The job's Workload (by [`workload_name`]), if it exists.
    pub workload: Option<&'a ObservedWorkload>,
    /// ResourceFlavors by name.
    pub flavors: &'a BTreeMap<String, Flavor>,
}

/// A change to the job's Workload.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadChange {
    Create(Value),
    /// Delete the Workload with this name and uid (the next reconcile creates the right one).
    Delete {
        name: String,
        uid: String,
    },
    /// Mark it finished (the job ended); `conditions` is the whole new list.
    Finish {
        name: String,
        conditions: Vec<Value>,
    },
}

/// What the job's Workload allows.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Run, each replica type's pods on these flavors.
    Admitted(BTreeMap<ReplicaType, Flavor>),
    /// No pods: the Workload is missing, pending, evicted or being replaced.
    Wait {
        reason: &'static str,
        message: String,
    },
}

/// Judges the observed Workload against the job: the gate for its pods and the change that
/// brings the Workload in line.
pub fn gate(
    job: &ValidJob,
    desired: &Value,
    view: &KueueView<'_>,
) -> (Gate, Option<WorkloadChange>) {
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let queue = desired["spec"]["queueName"].as_str().unwrap_or_default();
    let Some(observed) = view.workload else {
        let wait = Gate::Wait {
            reason: "WorkloadCreated",
            message: format!(
                "waiting for Kueue to admit Workload {name} in queue {queue}: created"
            ),
        };
        return (wait, Some(WorkloadChange::Create(desired.clone())));
    };
    if observed.deleting {
        let wait = Gate::Wait {
            reason: "WorkloadReplaced",
            message: format!("waiting for Workload {name} to be deleted before it is made anew"),
        };
        return (wait, None);
    }
    if let Some(why) = mismatch(observed, desired) {
        let wait = Gate::Wait {
            reason: "WorkloadReplaced",
            message: format!("Workload {name} no longer matches the job ({why}); replacing it"),
        };
        let delete = WorkloadChange::Delete {
            name: observed.name.clone(),
            uid: observed.uid.clone(),
        };
        return (wait, Some(delete));
    }
    if let Some(assignments) = &observed.admission {
        return (placement(job, assignments, view.flavors, name), None);
    }
    let wait = match (&observed.evicted, &observed.pending) {
        (Some(evicted), _) => Gate::Wait {
            reason: "WorkloadEvicted",
            message: format!(
                "Workload {name} was evicted by Kueue ({}): {}; waiting in queue {queue} to be \
                 admitted again",
                evicted.reason, evicted.message
            ),
        },
        (None, Some(pending)) if !pending.message.is_empty() => Gate::Wait {
            reason: "WorkloadPending",
            message: format!(
                "waiting for Kueue to admit Workload {name} in queue {queue}: {}",
                pending.message
            ),
        },
        _ => Gate::Wait {
            reason: "WorkloadPending",
            message: format!("waiting for Kueue to admit Workload {name} in queue {queue}"),
        },
    };
    (wait, None)
}

/// Why the observed Workload is not the one the job needs, if it is not.
fn mismatch(observed: &ObservedWorkload, desired: &Value) -> Option<String> {
    let queue = desired["spec"]["queueName"].as_str().unwrap_or_default();
    if observed.queue_name != queue {
        return Some(format!(
            "queue {:?}, the job's label says {queue:?}",
            observed.queue_name
        ));
    }
    let wanted: Vec<(String, i64)> = desired["spec"]["podSets"]
        .as_array()
        .map(|sets| {
            sets.iter()
                .map(|s| (text(&s["name"]), s["count"].as_i64().unwrap_or(1)))
                .collect()
        })
        .unwrap_or_default();
    if observed.pod_sets != wanted {
        return Some("pod sets or counts changed".into());
    }
    let digest = desired
        .pointer(&format!(
            "/metadata/annotations/{}",
            POD_SETS_DIGEST_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    if observed.pod_sets_digest.as_deref() != digest {
        return Some("pod templates changed".into());
    }
    if observed.finished {
        return Some("it is marked finished while the job runs".into());
    }
    None
}

/// The flavors of an admission, per replica type; waits when the admission names a pod set or
/// flavor this operator cannot see.
fn placement(
    job: &ValidJob,
    assignments: &[Assignment],
    flavors: &BTreeMap<String, Flavor>,
    name: &str,
) -> Gate {
    let mut placed = BTreeMap::new();
    for rtype in job.replicas.keys() {
        let Some(assignment) = assignments.iter().find(|a| a.pod_set == rtype.lower()) else {
            return Gate::Wait {
                reason: "WorkloadReplaced",
                message: format!(
                    "the admission of Workload {name} has no pod set {}",
                    rtype.lower()
                ),
            };
        };
        let mut flavor = Flavor::default();
        let mut names: Vec<&String> = assignment.flavors.values().collect();
        names.sort();
        names.dedup();
        for flavor_name in names {
            let Some(f) = flavors.get(flavor_name) else {
                return Gate::Wait {
                    reason: "WorkloadPending",
                    message: format!(
                        "Workload {name} is admitted to ResourceFlavor {flavor_name}, which is \
                         not found"
                    ),
                };
            };
            flavor.node_labels.extend(f.node_labels.clone());
            for t in &f.tolerations {
                if !flavor.tolerations.contains(t) {
                    flavor.tolerations.push(t.clone());
                }
            }
        }
        placed.insert(*rtype, flavor);
    }
    Gate::Admitted(placed)
}

/// The change that marks the observed Workload finished for a job that ended, if it is not yet.
pub fn finish(
    observed: Option<&ObservedWorkload>,
    succeeded: bool,
    message: &str,
    now: jiff::Timestamp,
) -> Option<WorkloadChange> {
    let observed = observed.filter(|w| !w.finished && !w.deleting)?;
    let mut conditions: Vec<Value> = observed
        .conditions
        .iter()
        .filter(|c| c["type"] != "Finished")
        .cloned()
        .collect();
    conditions.push(json!({
        "type": "Finished",
        "status": "True",
        "reason": if succeeded { "Succeeded" } else { "Failed" },
        "message": message,
        "lastTransitionTime": now.round(jiff::Unit::Second).unwrap_or(now).to_string(),
    }));
    Some(WorkloadChange::Finish {
        name: observed.name.clone(),
        conditions,
    })
}

/// `job` with each replica type's template carrying its flavor's node labels (over the
/// template's own for the same key, as Kueue merges them) and tolerations.
pub fn placed(job: &ValidJob, placement: &BTreeMap<ReplicaType, Flavor>) -> ValidJob {
    let mut job = job.clone();
    for (rtype, flavor) in placement {
        let Some(replica) = job.replicas.get_mut(rtype) else {
            continue;
        };
        let spec = replica.template.spec.get_or_insert_with(Default::default);
        if !flavor.node_labels.is_empty() {
            spec.node_selector
                .get_or_insert_with(Default::default)
                .extend(flavor.node_labels.clone());
        }
        for t in &flavor.tolerations {
            let list = spec.tolerations.get_or_insert_with(Vec::new);
            if !list.contains(t) {
                list.push(t.clone());
            }
        }
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_api::parse::parse_tfjob_yaml;
    use tfjob_api::validation::validate;

    fn job(yaml: &str) -> ValidJob {
        let job: TFJob = parse_tfjob_yaml(yaml).expect("a TFJob");
        validate(&job).expect("valid")
    }

    const SAMPLE: &str = "
metadata: {name: mnist, namespace: ml, uid: uid-1, labels: {kueue.x-k8s.io/queue-name: user-queue}}
spec:
  runPolicy: {schedulingPolicy: {priorityClass: high}}
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: t, resources: {requests: {cpu: 1}}}]}}
    PS:
      template: {spec: {containers: [{name: tensorflow, image: t}]}}
    Chief:
      template: {spec: {priorityClassName: low, containers: [{name: tensorflow, image: t}]}}
";

    #[test]
    fn the_workload_has_kueues_pod_set_order_counts_owner_and_priority() {
        let j = job(SAMPLE);
        let w = desired(&j, "user-queue", Some(("high", 1000)));
        let sets: Vec<(String, i64)> = w["spec"]["podSets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (text(&s["name"]), s["count"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            sets,
            [("chief".into(), 1), ("ps".into(), 1), ("worker".into(), 2)]
        );
        assert_eq!(w["spec"]["queueName"], "user-queue");
        assert_eq!(
            w["spec"]["priorityClassRef"],
            json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"})
        );
        assert_eq!(w["spec"]["priority"], 1000);
        let owner = &w["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["uid"], &owner["controller"]),
            (&json!("TFJob"), &json!("uid-1"), &json!(true))
        );
        assert_eq!(priority_class(&j).as_deref(), Some("high"));
        let mut no_policy = j.clone();
        no_policy.run_policy.scheduling.priority_class = None;
        assert_eq!(priority_class(&no_policy).as_deref(), Some("low"));
    }

    #[test]
    fn names_are_kueues_shape_and_fit_a_dns_subdomain() {
        let n = workload_name("mnist", "uid-1");
        assert!(n.starts_with("tfjob-mnist-"), "{n}");
        assert_eq!(n.len(), "tfjob-mnist-".len() + NAME_HASH);
        assert_ne!(n, workload_name("mnist", "uid-2"), "a new job, a new name");
        let long = "a".repeat(253);
        let n = workload_name(&long, "u");
        assert_eq!(n.len(), MAX_NAME);
    }

    fn observed(w: &Value) -> ObservedWorkload {
        ObservedWorkload::from_object(w)
    }

    fn flavors() -> BTreeMap<String, Flavor> {
        BTreeMap::from([(
            "spot".to_owned(),
            Flavor::from_object(&json!({"spec": {
                "nodeLabels": {"instance-type": "spot"},
                "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
            }})),
        )])
    }

    fn admitted(mut w: Value, flavor: &str) -> Value {
        w["metadata"]["uid"] = json!("w-1");
        w["status"] = json!({
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "chief", "flavors": {"cpu": flavor}},
                {"name": "ps", "flavors": {"cpu": flavor}},
                {"name": "worker", "flavors": {"cpu": flavor, "memory": flavor}}
            ]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"}
            ]
        });
        w
    }

    #[test]
    fn pods_wait_until_the_workload_is_admitted_then_run_on_its_flavors() {
        let j = job(SAMPLE);
        let want = desired(&j, "user-queue", None);
        let flavors = flavors();
        fn view<'a>(
            w: Option<&'a ObservedWorkload>,
            flavors: &'a BTreeMap<String, Flavor>,
        ) -> KueueView<'a> {
            KueueView {
                workload: w,
                flavors,
            }
        }

        let (g, change) = gate(&j, &want, &view(None, &flavors));
        assert!(
            matches!(
                g,
                Gate::Wait {
                    reason: "WorkloadCreated",
                    ..
                }
            ),
            "{g:?}"
        );
        assert_eq!(change, Some(WorkloadChange::Create(want.clone())));

        let mut pending = want.clone();
        pending["status"] = json!({"conditions": [{"type": "QuotaReserved", "status": "False",
            "reason": "Pending", "message": "LocalQueue user-queue doesn't exist"}]});
        let (g, change) = gate(&j, &want, &view(Some(&observed(&pending)), &flavors));
        assert_eq!(change, None);
        let Gate::Wait { reason, message } = g else {
            panic!("waits")
        };
        assert_eq!(reason, "WorkloadPending");
        assert!(
            message.ends_with("in queue user-queue: LocalQueue user-queue doesn't exist"),
            "{message}"
        );

        let (g, change) = gate(
            &j,
            &want,
            &view(Some(&observed(&admitted(want.clone(), "spot"))), &flavors),
        );
        assert_eq!(change, None);
        let Gate::Admitted(placement) = g else {
            panic!("admitted: {g:?}")
        };
        let run = placed(&j, &placement);
        let worker = run.replicas[&ReplicaType::Worker]
            .template
            .spec
            .clone()
            .unwrap();
        assert_eq!(worker.node_selector.unwrap()["instance-type"], "spot");
        assert_eq!(worker.tolerations.unwrap()[0].key.as_deref(), Some("spot"));

        let (g, _) = gate(
            &j,
            &want,
            &view(Some(&observed(&admitted(want.clone(), "gone"))), &flavors),
        );
        assert!(
            matches!(&g, Gate::Wait { message, .. } if message.contains("ResourceFlavor gone")),
            "{g:?}"
        );
    }

    #[test]
    fn an_evicted_workload_stops_the_pods_and_says_why() {
        let j = job(SAMPLE);
        let want = desired(&j, "user-queue", None);
        let mut evicted = want.clone();
        evicted["status"] = json!({"conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "stopped"},
            {"type": "Evicted", "status": "True", "reason": "ClusterQueueStopped",
             "message": "The ClusterQueue is stopped"}
        ]});
        let flavors = flavors();
        let view = KueueView {
            workload: Some(&observed(&evicted)),
            flavors: &flavors,
        };
        let (g, change) = gate(&j, &want, &view);
        assert_eq!(change, None);
        let Gate::Wait { reason, message } = g else {
            panic!("waits")
        };
        assert_eq!(reason, "WorkloadEvicted");
        assert!(
            message.contains("evicted by Kueue (ClusterQueueStopped): The ClusterQueue is stopped"),
            "{message}"
        );
    }

    #[test]
    fn a_workload_that_no_longer_matches_is_replaced() {
        let j = job(SAMPLE);
        let want = desired(&j, "user-queue", None);
        let flavors = flavors();
        for (edit, why) in [
            (json!({"spec": {"queueName": "other"}}), "queue \"other\""),
            (
                json!({"spec": {"podSets": [{"name": "chief", "count": 1}, {"name": "ps", "count": 1}, {"name": "worker", "count": 9}]}}),
                "pod sets or counts changed",
            ),
            (
                json!({"metadata": {"annotations": {POD_SETS_DIGEST_ANNOTATION: "x"}}}),
                "pod templates changed",
            ),
            (
                json!({"status": {"conditions": [{"type": "Finished", "status": "True"}]}}),
                "marked finished",
            ),
        ] {
            let mut w = admitted(want.clone(), "spot");
            json_patch::merge(&mut w, &edit);
            let view = KueueView {
                workload: Some(&observed(&w)),
                flavors: &flavors,
            };
            let (g, change) = gate(&j, &want, &view);
            assert!(
                matches!(&g, Gate::Wait { reason: "WorkloadReplaced", message } if message.contains(why)),
                "{why}: {g:?}"
            );
            assert_eq!(
                change,
                Some(WorkloadChange::Delete {
                    name: workload_name("mnist", "uid-1"),
                    uid: "w-1".into()
                })
            );
        }
    }

    #[test]
    fn a_finished_job_marks_its_workload_finished_once() {
        let j = job(SAMPLE);
        let w = observed(&admitted(desired(&j, "user-queue", None), "spot"));
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let Some(WorkloadChange::Finish { name, conditions }) = finish(Some(&w), true, "done", now)
        else {
            panic!("finishes")
        };
        assert_eq!(name, w.name);
        assert_eq!(conditions.len(), 3);
        assert_eq!(conditions[2]["reason"], "Succeeded");
        let mut done = w.clone();
        done.finished = true;
        assert_eq!(finish(Some(&done), true, "done", now), None);
        assert_eq!(finish(None, true, "done", now), None);
    }
}
