//! Kueue's `kubeflow.org/tfjob` integration, the pure part: which TFJobs Kueue manages, the
//! Workload it creates for one (name, pod sets, priority, owner), what admission does to the
//! job (node selectors and tolerations of the assigned flavors merged into the replicas'
//! templates, `runPolicy.suspend: false`) and what eviction undoes, when the job is finished,
//! and the webhook that suspends labelled jobs at creation and refuses a queue change on a
//! running job.
//!
//! Kueue names a job's Workload `tfjob-<job name>-<5 hex chars of a SHA-1>` over the owner's
//! kind, group, name and uid. The simulation hashes the same four fields (kind, group, name
//! and uid, each followed by a newline) with SHA-256, so names have Kueue's shape and are as
//! deterministic, but their five hex characters differ from a real cluster's.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::objects::{Admission, ResourceFlavor, condition};
use super::{GROUP, VERSION};
use crate::error::StatusCause;
use crate::storage::store::Webhook;

/// The label that puts a job in a LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The label Kueue puts on a job's Workload: the job's uid.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// `runPolicy.managedBy` of a job that MultiKueue runs on a worker cluster.
pub const MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// The TFJob API group and plural.
pub const TFJOB_GROUP: &str = "kubeflow.org";
pub const TFJOB_PLURAL: &str = "tfjobs";

/// Replica types in the order of the training operator (and of the pod sets).
pub const REPLICA_TYPES: [&str; 5] = ["Chief", "Master", "PS", "Worker", "Evaluator"];

/// The longest Workload name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// How many hex characters of the hash end a Workload's name.
const HASH_CHARS: usize = 5;

/// The queue a job names, if any.
pub fn queue_name(job: &Value) -> Option<&str> {
    job.pointer("/metadata/labels")
        .and_then(|l| l.get(QUEUE_LABEL))
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
}

/// Whether MultiKueue runs the job elsewhere: the integration leaves it alone.
pub fn managed_elsewhere(job: &Value) -> bool {
    job.pointer("/spec/runPolicy/managedBy")
        .and_then(Value::as_str)
        == Some(MULTIKUEUE)
}

/// Whether Kueue manages the job: labelled with a queue and not MultiKueue's.
pub fn managed(job: &Value) -> bool {
    queue_name(job).is_some() && !managed_elsewhere(job)
}

pub fn suspended(job: &Value) -> bool {
    job.pointer("/spec/runPolicy/suspend")
        .and_then(Value::as_bool)
        == Some(true)
}

/// `Succeeded` or `Failed` with status True: the reason and the condition's message.
pub fn finished(job: &Value) -> Option<(&'static str, String)> {
    ["Succeeded", "Failed"].into_iter().find_map(|t| {
        condition(job, t)
            .filter(|c| c["status"] == "True")
            .map(|c| (t, c["message"].as_str().unwrap_or_default().to_owned()))
    })
}

/// The key of `replica_type` in `spec.tfReplicaSpecs`, whatever its case.
pub fn replica_key(job: &Value, replica_type: &str) -> Option<String> {
    job.pointer("/spec/tfReplicaSpecs")
        .and_then(Value::as_object)?
        .keys()
        .find(|k| k.eq_ignore_ascii_case(replica_type))
        .cloned()
}

/// The replica types a job has, in pod-set order, with their keys.
fn replicas(job: &Value) -> Vec<(&'static str, String)> {
    REPLICA_TYPES
        .iter()
        .filter_map(|t| replica_key(job, t).map(|k| (*t, k)))
        .collect()
}

/// The Workload name of a job.
pub fn workload_name(job_name: &str, uid: &str) -> String {
    let digest = Sha256::digest(format!("TFJob\n{TFJOB_GROUP}\n{job_name}\n{uid}\n"));
    let hash: String = digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(HASH_CHARS)
        .map(|n| char::from_digit(u32::from(n), 16).unwrap_or('0'))
        .collect();
    let mut prefix = format!("tfjob-{job_name}");
    prefix.truncate(MAX_NAME - HASH_CHARS - 1);
    // A cut must not leave a segment ending in '-' or '.'.
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// The job's pod sets, in Workload shape.
pub fn pod_sets(job: &Value) -> Vec<Value> {
    replicas(job)
        .into_iter()
        .map(|(t, key)| {
            let spec = &job["spec"]["tfReplicaSpecs"][&key];
            json!({
                "name": t.to_ascii_lowercase(),
                "count": spec.get("replicas").and_then(Value::as_i64).unwrap_or(1),
                "template": spec.get("template").cloned().unwrap_or_else(|| json!({})),
            })
        })
        .collect()
}

/// The priority class a job asks for: `runPolicy.schedulingPolicy.priorityClass`, else the
/// first replica template (in pod-set order) naming one.
pub fn priority_class(job: &Value) -> Option<String> {
    let named = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    named(job.pointer("/spec/runPolicy/schedulingPolicy/priorityClass")).or_else(|| {
        replicas(job).into_iter().find_map(|(_, key)| {
            named(job["spec"]["tfReplicaSpecs"][&key].pointer("/template/spec/priorityClassName"))
        })
    })
}

/// The Workload Kueue creates for a job; `priority` is the job's PriorityClass and its value,
/// when the class exists.
pub fn workload(job: &Value, priority: Option<(&str, i64)>) -> Value {
    let meta = |k: &str| job["metadata"][k].as_str().unwrap_or_default();
    let mut spec = json!({
        "queueName": queue_name(job).unwrap_or_default(),
        "podSets": pod_sets(job),
        "active": true,
    });
    if let Some((class, value)) = priority {
        spec["priorityClassRef"] =
            json!({"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": class});
        spec["priority"] = json!(value);
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta("name"), meta("uid")),
            "namespace": meta("namespace"),
            "labels": {JOB_UID_LABEL: meta("uid")},
            "ownerReferences": [{
                "apiVersion": job["apiVersion"].as_str().unwrap_or("kubeflow.org/v1"),
                "kind": "TFJob",
                "name": meta("name"),
                "uid": meta("uid"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    })
}

/// Whether a Workload was created for this job (its controller reference names the job).
pub fn owned_by(wl: &Value, job_uid: &str) -> bool {
    wl.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| r["uid"] == job_uid && r["controller"] == true && r["kind"] == "TFJob")
}

/// The uid of the TFJob that controls a Workload, if one does.
pub fn owner_uid(wl: &Value) -> Option<&str> {
    wl.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == "TFJob")
        .and_then(|r| r["uid"].as_str())
}

/// Whether the Workload's pod sets are still the job's (replicas or templates unchanged).
pub fn pod_sets_match(job: &Value, wl: &Value) -> bool {
    let theirs = wl.pointer("/spec/podSets").cloned().unwrap_or(json!([]));
    let ours = pod_sets(job);
    let key = |s: &Value| {
        (
            s["name"].clone(),
            s.get("count").and_then(Value::as_i64).unwrap_or(1),
            s.get("template").cloned().unwrap_or(json!({})),
        )
    };
    theirs
        .as_array()
        .is_some_and(|t| t.len() == ours.len() && t.iter().map(key).eq(ours.iter().map(key)))
}

/// The template spec of the replica a pod set stands for.
fn template_spec<'a>(job: &'a mut Value, pod_set: &str) -> Option<&'a mut Map<String, Value>> {
    let key = REPLICA_TYPES
        .iter()
        .find(|t| t.eq_ignore_ascii_case(pod_set))
        .and_then(|t| replica_key(job, t))?;
    let template = job
        .pointer_mut(&format!("/spec/tfReplicaSpecs/{key}"))?
        .as_object_mut()?
        .entry("template")
        .or_insert_with(|| json!({}));
    if !template.is_object() {
        *template = json!({});
    }
    let spec = template
        .as_object_mut()?
        .entry("spec")
        .or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    spec.as_object_mut()
}

fn set_suspend(job: &mut Value, suspend: bool) {
    if !job["spec"]["runPolicy"].is_object() {
        job["spec"]["runPolicy"] = json!({});
    }
    job["spec"]["runPolicy"]["suspend"] = json!(suspend);
}

/// The job as admission leaves it: each replica's template gets the node labels (as node
/// selector) and tolerations of the flavors its pod set was assigned, and the job is resumed.
pub fn start(
    job: &Value,
    admission: &Admission,
    flavors: &BTreeMap<String, ResourceFlavor>,
) -> Value {
    let mut job = job.clone();
    for set in &admission.pod_sets {
        let mut names: Vec<&String> = set.flavors.values().collect();
        names.sort();
        names.dedup();
        let Some(spec) = template_spec(&mut job, &set.name) else {
            continue;
        };
        for flavor in names.into_iter().filter_map(|n| flavors.get(n)) {
            if !flavor.node_labels.is_empty() {
                let selector = spec.entry("nodeSelector").or_insert_with(|| json!({}));
                if !selector.is_object() {
                    *selector = json!({});
                }
                for (k, v) in &flavor.node_labels {
                    selector[k] = json!(v);
                }
            }
            if !flavor.tolerations.is_empty() {
                let list = spec.entry("tolerations").or_insert_with(|| json!([]));
                if !list.is_array() {
                    *list = json!([]);
                }
                if let Some(list) = list.as_array_mut() {
                    for t in &flavor.tolerations {
                        if !list.contains(t) {
                            list.push(t.clone());
                        }
                    }
                }
            }
        }
    }
    set_suspend(&mut job, false);
    job
}

/// The job as eviction leaves it: suspended, each replica's node selector and tolerations as
/// the Workload's pod set templates hold them (as they were before admission).
pub fn stop(job: &Value, wl: &Value) -> Value {
    let mut job = job.clone();
    let sets = wl
        .pointer("/spec/podSets")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for set in sets {
        let name = set["name"].as_str().unwrap_or_default();
        let Some(spec) = template_spec(&mut job, name) else {
            continue;
        };
        for field in ["nodeSelector", "tolerations"] {
            match set.pointer(&format!("/template/spec/{field}")) {
                Some(v) => spec.insert(field.to_owned(), v.clone()),
                None => spec.remove(field),
            };
        }
    }
    set_suspend(&mut job, true);
    job
}

/// Kueue's TFJob webhook: a managed job is suspended at creation, and a job that is not
/// suspended keeps its queue.
pub fn admit(job: &mut Value, old: Option<&Value>) -> Result<(), Vec<StatusCause>> {
    if managed_elsewhere(job) {
        return Ok(());
    }
    let Some(old) = old else {
        if queue_name(job).is_some() {
            if !job.get("spec").is_some_and(Value::is_object) {
                job["spec"] = json!({});
            }
            set_suspend(job, true);
        }
        return Ok(());
    };
    let (before, after) = (queue_name(old), queue_name(job));
    if before == after || suspended(job) {
        return Ok(());
    }
    Err(vec![StatusCause {
        reason: "FieldValueInvalid".into(),
        field: format!("metadata.labels[{QUEUE_LABEL}]"),
        message: format!(
            "Invalid value: {:?}: field is immutable while the job is not suspended",
            after.unwrap_or_default()
        ),
    }])
}

/// [`admit`] as the store's webhook of TFJobs.
pub fn webhook() -> Webhook {
    Arc::new(admit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kueue::objects::Assignment;

    fn job() -> Value {
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "mnist", "namespace": "default", "uid": "u-1",
                "labels": {QUEUE_LABEL: "user-queue"}},
            "spec": {"tfReplicaSpecs": {
                "worker": {"replicas": 2, "template": {"spec": {
                    "nodeSelector": {"disk": "ssd"},
                    "containers": [{"name": "tensorflow"}]}}},
                "PS": {"template": {"spec": {"priorityClassName": "high", "containers": [{"name": "tensorflow"}]}}},
            }},
        })
    }

    #[test]
    fn names_have_kueues_shape_and_fit() {
        let name = workload_name("mnist", "u-1");
        assert!(name.starts_with("tfjob-mnist-"), "{name}");
        assert_eq!(name.len(), "tfjob-mnist-".len() + 5);
        assert!(name[12..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(name, workload_name("mnist", "u-1"), "deterministic");
        assert_ne!(name, workload_name("mnist", "u-2"), "a new job, a new name");
        let long = workload_name(&format!("{}.-x", "a".repeat(245)), "u");
        assert!(long.len() <= 253, "{}", long.len());
        assert!(!long.contains(".-"));
    }

    #[test]
    fn pod_sets_follow_the_operators_order_and_case_insensitive_keys() {
        let sets = pod_sets(&job());
        let names: Vec<&str> = sets.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["ps", "worker"]);
        assert_eq!(sets[0]["count"], 1, "replicas default to 1");
        assert_eq!(sets[1]["count"], 2);
        assert_eq!(priority_class(&job()).as_deref(), Some("high"));
        let mut named = job();
        named["spec"]["runPolicy"] = json!({"schedulingPolicy": {"priorityClass": "top"}});
        assert_eq!(priority_class(&named).as_deref(), Some("top"));

        let wl = workload(&job(), Some(("high", 1000)));
        assert_eq!(wl["spec"]["queueName"], "user-queue");
        assert_eq!(wl["spec"]["priority"], 1000);
        assert_eq!(wl["spec"]["priorityClassRef"]["kind"], "PriorityClass");
        assert!(owned_by(&wl, "u-1"));
        assert_eq!(owner_uid(&wl), Some("u-1"));
        assert!(pod_sets_match(&job(), &wl));
        let mut scaled = job();
        scaled["spec"]["tfReplicaSpecs"]["worker"]["replicas"] = json!(3);
        assert!(!pod_sets_match(&scaled, &wl));
    }

    #[test]
    fn admission_merges_flavors_and_eviction_restores_the_templates() {
        let spot = ResourceFlavor::parse(&json!({"metadata": {"name": "spot"}, "spec": {
            "nodeLabels": {"instance-type": "spot"},
            "tolerations": [{"key": "spot-taint", "operator": "Exists", "effect": "NoSchedule"}],
        }}));
        let flavors = BTreeMap::from([("spot".to_owned(), spot)]);
        let assignment = |name: &str| Assignment {
            name: name.into(),
            flavors: BTreeMap::from([
                ("cpu".into(), "spot".into()),
                ("memory".into(), "spot".into()),
            ]),
            usage: BTreeMap::new(),
            count: 1,
        };
        let admission = Admission {
            cluster_queue: "cq".into(),
            pod_sets: vec![assignment("ps"), assignment("worker")],
        };
        let mut suspended_job = job();
        admit(&mut suspended_job, None).unwrap();
        assert!(suspended(&suspended_job));
        let wl = workload(&suspended_job, None);

        let running = start(&suspended_job, &admission, &flavors);
        assert!(!suspended(&running));
        let worker = &running["spec"]["tfReplicaSpecs"]["worker"]["template"]["spec"];
        assert_eq!(
            worker["nodeSelector"],
            json!({"disk": "ssd", "instance-type": "spot"})
        );
        assert_eq!(worker["tolerations"].as_array().unwrap().len(), 1);
        let again = start(&running, &admission, &flavors);
        assert_eq!(again, running, "merging twice adds nothing");

        let stopped = stop(&running, &wl);
        assert!(suspended(&stopped));
        assert_eq!(
            stopped, suspended_job,
            "the templates are back as they were"
        );
    }

    #[test]
    fn the_webhook_suspends_labelled_jobs_and_guards_the_queue_of_running_ones() {
        let mut plain = job();
        plain["metadata"]["labels"] = json!({});
        let mut created = plain.clone();
        admit(&mut created, None).unwrap();
        assert_eq!(created, plain, "an unlabelled job is left alone");

        let mut elsewhere = job();
        elsewhere["spec"]["runPolicy"] = json!({"managedBy": MULTIKUEUE});
        let before = elsewhere.clone();
        admit(&mut elsewhere, None).unwrap();
        assert_eq!(elsewhere, before);

        let mut running = job();
        running["spec"]["runPolicy"] = json!({"suspend": false});
        let mut moved = running.clone();
        moved["metadata"]["labels"][QUEUE_LABEL] = json!("other");
        let causes = admit(&mut moved, Some(&running)).unwrap_err();
        assert_eq!(
            causes[0].field,
            "metadata.labels[kueue.x-k8s.io/queue-name]"
        );
        let mut removed = running.clone();
        removed["metadata"]["labels"] = json!({});
        assert!(admit(&mut removed, Some(&running)).is_err());

        let mut suspended_move = moved.clone();
        suspended_move["spec"]["runPolicy"]["suspend"] = json!(true);
        assert!(admit(&mut suspended_move, Some(&running)).is_ok());
    }

    #[test]
    fn finished_jobs_carry_their_condition_message() {
        let mut done = job();
        done["status"] = json!({"conditions": [
            {"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True", "message": "TFJob default/mnist successfully completed."},
        ]});
        assert_eq!(
            finished(&done),
            Some((
                "Succeeded",
                "TFJob default/mnist successfully completed.".to_owned()
            ))
        );
        assert_eq!(finished(&job()), None);
    }
}
