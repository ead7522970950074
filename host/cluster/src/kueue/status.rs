//! The status the simulation writes, rendered from a decision, pure: a Workload admitted,
//! pending, evicted or finished, and the counts and usage of ClusterQueues and LocalQueues.
//!
//! Conditions are `metav1.Condition`s with Kueue's types, reasons and messages; a condition's
//! `lastTransitionTime` moves only when its status changes. Each function answers `None` when
//! the status would not change, so a pass that decides what the last one decided writes
//! nothing: the loop is woken by its own writes, and must not feed itself.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::objects::{Admission, ClusterQueue, LocalQueue, condition, render};
use super::quota::{Eviction, QueueCounts};

/// When a status is written, and the generation of the object it is about.
#[derive(Clone, Copy, Debug)]
pub struct Stamp<'a> {
    pub now: &'a str,
    pub generation: Option<i64>,
}

impl Stamp<'_> {
    pub fn of<'a>(obj: &Value, now: &'a str) -> Stamp<'a> {
        Stamp {
            now,
            generation: obj.pointer("/metadata/generation").and_then(Value::as_i64),
        }
    }
}

/// A condition to set.
struct Cond<'a> {
    type_: &'a str,
    status: bool,
    reason: &'a str,
    message: &'a str,
}

fn cond<'a>(type_: &'a str, status: bool, reason: &'a str, message: &'a str) -> Cond<'a> {
    Cond {
        type_,
        status,
        reason,
        message,
    }
}

/// Sets a condition in `status.conditions`, keeping its transition time when its status
/// stays.
fn set(status: &mut Map<String, Value>, c: &Cond<'_>, stamp: Stamp<'_>) {
    let value = if c.status { "True" } else { "False" };
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    let old = list.iter().position(|x| x["type"] == c.type_);
    let since = old
        .and_then(|i| list.get(i))
        .filter(|x| x["status"] == value)
        .and_then(|x| x.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(stamp.now));
    let mut next = json!({
        "type": c.type_, "status": value, "reason": c.reason, "message": c.message,
        "lastTransitionTime": since,
    });
    if let Some(g) = stamp.generation {
        next["observedGeneration"] = json!(g);
    }
    match old {
        Some(i) => list[i] = next,
        None => list.push(next),
    }
}

fn status_of(obj: &Value) -> Map<String, Value> {
    obj.get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The new status, if it differs from the object's.
fn changed(obj: &Value, status: Map<String, Value>) -> Option<Value> {
    let status = Value::Object(status);
    (obj.get("status") != Some(&status)).then_some(status)
}

/// `status.admission` as Kueue writes it.
pub fn admission_json(admission: &Admission) -> Value {
    let assignments: Vec<Value> = admission
        .pod_sets
        .iter()
        .map(|a| {
            let usage: BTreeMap<&String, String> =
                a.usage.iter().map(|(r, v)| (r, render(r, *v))).collect();
            json!({"name": a.name, "flavors": a.flavors, "resourceUsage": usage, "count": a.count})
        })
        .collect();
    json!({"clusterQueue": admission.cluster_queue, "podSetAssignments": assignments})
}

/// The status of a workload given `admission`.
pub fn admitted(wl: &Value, admission: &Admission, stamp: Stamp<'_>) -> Option<Value> {
    let mut status = status_of(wl);
    status.insert("admission".into(), admission_json(admission));
    let reserved = format!("Quota reserved in ClusterQueue {}", admission.cluster_queue);
    for (type_, reason, message) in [
        ("QuotaReserved", "QuotaReserved", reserved.as_str()),
        ("Admitted", "Admitted", "The workload is admitted"),
    ] {
        set(&mut status, &cond(type_, true, reason, message), stamp);
    }
    // Admitted in the pass that saw the cause of its eviction gone.
    requeue(wl, &mut status, stamp);
    // Kueue keeps the last eviction's message, marked as past.
    if let Some(evicted) = condition(wl, "Evicted").filter(|c| c["status"] == "True") {
        let message = format!(
            "Previously: {}",
            evicted["message"].as_str().unwrap_or_default()
        );
        let c = Cond {
            type_: "Evicted",
            status: false,
            reason: "QuotaReserved",
            message: &message,
        };
        set(&mut status, &c, stamp);
    }
    changed(wl, status)
}

/// The reason of `Requeued` once the cause of an eviction is gone, Kueue's.
fn requeue_reason(evicted_reason: &str) -> &'static str {
    match evicted_reason {
        "Deactivated" => "Reactivated",
        "ClusterQueueStopped" => "ClusterQueueRestarted",
        "LocalQueueStopped" => "LocalQueueRestarted",
        _ => "Pending",
    }
}

/// Marks an evicted workload queued again (`Requeued` True), once the cause is gone.
fn requeue(wl: &Value, status: &mut Map<String, Value>, stamp: Stamp<'_>) {
    if !condition(wl, "Requeued").is_some_and(|c| c["status"] == "False") {
        return;
    }
    let evicted = condition(wl, "Evicted")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default();
    let c = Cond {
        type_: "Requeued",
        status: true,
        reason: requeue_reason(evicted),
        message: "The workload is queued again",
    };
    set(status, &c, stamp);
}

/// The status of a workload waiting for admission, `message` saying why; `queued` when it
/// waits in a ClusterQueue (an evicted workload is then requeued).
pub fn pending(wl: &Value, message: &str, queued: bool, stamp: Stamp<'_>) -> Option<Value> {
    let mut status = status_of(wl);
    let c = Cond {
        type_: "QuotaReserved",
        status: false,
        reason: "Pending",
        message,
    };
    set(&mut status, &c, stamp);
    if queued {
        requeue(wl, &mut status, stamp);
    }
    changed(wl, status)
}

/// The status of an admitted workload evicted for `why`: no admission, no quota.
pub fn evicted(wl: &Value, why: Eviction, stamp: Stamp<'_>) -> Option<Value> {
    let mut status = status_of(wl);
    status.remove("admission");
    let conditions = [
        ("Evicted", true, why.reason(), why.message()),
        ("QuotaReserved", false, "Pending", why.message()),
        (
            "Admitted",
            false,
            "NoReservation",
            "The workload has no reservation",
        ),
        ("Requeued", false, why.reason(), why.message()),
    ];
    for (type_, status_, reason, message) in conditions {
        set(&mut status, &cond(type_, status_, reason, message), stamp);
    }
    changed(wl, status)
}

/// The status of a workload whose job ended: `reason` Succeeded or Failed.
pub fn finished(wl: &Value, reason: &str, message: &str, stamp: Stamp<'_>) -> Option<Value> {
    let mut status = status_of(wl);
    let c = Cond {
        type_: "Finished",
        status: true,
        reason,
        message,
    };
    set(&mut status, &c, stamp);
    changed(wl, status)
}

/// Usage per flavor in the shape of `flavorsReservation` / `flavorsUsage`: every flavor and
/// covered resource of `groups`, in their order.
fn flavors_usage(
    flavors: &[(String, Vec<String>)],
    usage: &BTreeMap<(String, String), i128>,
) -> Value {
    let list: Vec<Value> = flavors
        .iter()
        .map(|(flavor, resources)| {
            let resources: Vec<Value> = resources
                .iter()
                .map(|r| {
                    let total = usage
                        .get(&(flavor.clone(), r.clone()))
                        .copied()
                        .unwrap_or(0);
                    json!({"name": r, "total": render(r, total), "borrowed": "0"})
                })
                .collect();
            json!({"name": flavor, "resources": resources})
        })
        .collect();
    Value::Array(list)
}

/// The flavors of a ClusterQueue with the resources each covers.
fn flavors_of(cq: &ClusterQueue) -> Vec<(String, Vec<String>)> {
    cq.groups
        .iter()
        .flat_map(|g| {
            g.flavors
                .iter()
                .map(|f| (f.name.clone(), g.covered.clone()))
        })
        .collect()
}

/// Writes the counts into a queue status.
fn counts(status: &mut Map<String, Value>, counts: &QueueCounts) {
    status.insert("pendingWorkloads".into(), json!(counts.pending));
    status.insert("reservingWorkloads".into(), json!(counts.reserving));
    status.insert("admittedWorkloads".into(), json!(counts.reserving));
}

/// A ClusterQueue's status after a pass.
pub fn cluster_queue(
    obj: &Value,
    cq: &ClusterQueue,
    c: &QueueCounts,
    stamp: Stamp<'_>,
) -> Option<Value> {
    let mut status = status_of(obj);
    counts(&mut status, c);
    let usage = flavors_usage(&flavors_of(cq), &c.usage);
    status.insert("flavorsReservation".into(), usage.clone());
    status.insert("flavorsUsage".into(), usage);
    let active = if cq.stop.stopped() {
        Cond {
            type_: "Active",
            status: false,
            reason: "Stopped",
            message: "Can't admit new workloads; clusterQueue is stopped",
        }
    } else {
        Cond {
            type_: "Active",
            status: true,
            reason: "Ready",
            message: "Can admit new workloads",
        }
    };
    set(&mut status, &active, stamp);
    changed(obj, status)
}

/// A LocalQueue's status after a pass; `cq` is its ClusterQueue, if it exists.
pub fn local_queue(
    obj: &Value,
    lq: &LocalQueue,
    cq: Option<&ClusterQueue>,
    c: &QueueCounts,
    stamp: Stamp<'_>,
) -> Option<Value> {
    let mut status = status_of(obj);
    counts(&mut status, c);
    let flavors = cq.map(flavors_of).unwrap_or_default();
    status.insert("flavorsUsage".into(), flavors_usage(&flavors, &c.usage));
    let active = match cq {
        None => Cond {
            type_: "Active",
            status: false,
            reason: "ClusterQueueDoesNotExist",
            message: "Can't submit new workloads to clusterQueue",
        },
        Some(_) if lq.stop.stopped() => Cond {
            type_: "Active",
            status: false,
            reason: "Stopped",
            message: "LocalQueue is stopped",
        },
        Some(cq) if cq.stop.stopped() => Cond {
            type_: "Active",
            status: false,
            reason: "ClusterQueueIsInactive",
            message: "Can't submit new workloads to clusterQueue",
        },
        Some(_) => Cond {
            type_: "Active",
            status: true,
            reason: "Ready",
            message: "Can submit new workloads to localQueue",
        },
    };
    set(&mut status, &active, stamp);
    changed(obj, status)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kueue::objects::{Assignment, Workload};

    const T0: &str = "2025-01-01T00:00:00Z";
    const T1: &str = "2025-01-01T00:01:00Z";

    fn stamp(now: &str) -> Stamp<'_> {
        Stamp {
            now,
            generation: Some(1),
        }
    }

    fn admission() -> Admission {
        Admission {
            cluster_queue: "cluster-queue".into(),
            pod_sets: vec![Assignment {
                name: "worker".into(),
                flavors: BTreeMap::from([("cpu".into(), "default-flavor".into())]),
                usage: BTreeMap::from([
                    ("cpu".into(), 2000),
                    ("memory".into(), 400 * (1 << 20) * 1000),
                ]),
                count: 2,
            }],
        }
    }

    fn with(status: Value) -> Value {
        json!({"metadata": {"name": "w", "generation": 1}, "status": status})
    }

    #[test]
    fn admission_writes_kueues_conditions_once() {
        let wl = with(json!({}));
        let status = admitted(&wl, &admission(), stamp(T0)).expect("a change");
        assert_eq!(
            status["admission"]["podSetAssignments"][0],
            json!({"name": "worker", "flavors": {"cpu": "default-flavor"},
                "resourceUsage": {"cpu": "2", "memory": "400Mi"}, "count": 2})
        );
        let reserved = &status["conditions"][0];
        assert_eq!(reserved["type"], "QuotaReserved");
        assert_eq!(
            reserved["message"],
            "Quota reserved in ClusterQueue cluster-queue"
        );
        assert_eq!(reserved["observedGeneration"], 1);
        assert_eq!(status["conditions"][1]["reason"], "Admitted");
        let parsed = Workload::parse(&with(status.clone())).admission;
        assert_eq!(parsed, Some(admission()), "read back as written");
        assert_eq!(admitted(&with(status), &admission(), stamp(T1)), None);
    }

    #[test]
    fn pending_messages_are_written_when_they_change_only() {
        let first = pending(
            &with(json!({})),
            "LocalQueue q doesn't exist",
            false,
            stamp(T0),
        )
        .expect("a change");
        assert_eq!(
            pending(
                &with(first.clone()),
                "LocalQueue q doesn't exist",
                false,
                stamp(T1)
            ),
            None
        );
        let second = pending(&with(first), "other", false, stamp(T1)).expect("a new message");
        assert_eq!(
            second["conditions"][0]["lastTransitionTime"], T0,
            "the status stayed False"
        );
    }

    #[test]
    fn eviction_then_requeue_then_readmission() {
        let running = admitted(&with(json!({})), &admission(), stamp(T0)).unwrap();
        let out = evicted(&with(running), Eviction::ClusterQueueStopped, stamp(T1)).unwrap();
        assert!(out.get("admission").is_none());
        let wl = with(out);
        assert_eq!(
            condition(&wl, "Evicted").unwrap()["reason"],
            "ClusterQueueStopped"
        );
        assert_eq!(condition(&wl, "Admitted").unwrap()["status"], "False");
        assert_eq!(
            condition(&wl, "QuotaReserved").unwrap()["lastTransitionTime"],
            T1
        );

        let still_stopped = pending(&wl, "ClusterQueue cq is inactive", false, stamp(T1)).unwrap();
        assert_eq!(
            condition(&with(still_stopped), "Requeued").unwrap()["status"],
            "False"
        );
        let requeued = with(pending(&wl, "waiting", true, stamp(T1)).unwrap());
        assert_eq!(
            condition(&requeued, "Requeued").unwrap()["reason"],
            "ClusterQueueRestarted"
        );

        let again = with(admitted(&requeued, &admission(), stamp(T1)).unwrap());
        let evicted = condition(&again, "Evicted").unwrap();
        assert_eq!(evicted["status"], "False");
        assert_eq!(
            evicted["message"],
            "Previously: The ClusterQueue is stopped"
        );
    }

    #[test]
    fn queue_statuses_list_every_flavor_and_covered_resource() {
        let cq = ClusterQueue::parse(
            &json!({"metadata": {"name": "cq"}, "spec": {"resourceGroups": [
                {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f", "resources": []}]}
            ]}}),
        );
        let counts = QueueCounts {
            pending: 2,
            reserving: 1,
            usage: BTreeMap::from([(("f".into(), "cpu".into()), 3000)]),
        };
        let obj = json!({"metadata": {"name": "cq"}});
        let status = cluster_queue(&obj, &cq, &counts, stamp(T0)).unwrap();
        assert_eq!(status["pendingWorkloads"], 2);
        assert_eq!(status["admittedWorkloads"], 1);
        assert_eq!(
            status["flavorsUsage"],
            json!([{"name": "f", "resources": [
                {"name": "cpu", "total": "3", "borrowed": "0"},
                {"name": "memory", "total": "0", "borrowed": "0"},
            ]}])
        );
        let stored = json!({"metadata": {"name": "cq"}, "status": status});
        assert_eq!(cluster_queue(&stored, &cq, &counts, stamp(T1)), None);
    }
}
