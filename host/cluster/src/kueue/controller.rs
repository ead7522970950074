//! The simulated Kueue's one loop: it reads the store, lets the pure modules decide, and writes
//! the decisions back through the status subresource (Workloads, queues) or whole-object
//! updates (TFJobs), with Events.
//!
//! Each pass lists what it needs and decides from that view alone; nothing is cached but the
//! pod sets of each job's last Workload (to restore a job whose Workload someone deleted).
//! Writes carry the resourceVersion they were decided from, so a concurrent change makes a
//! write fail with a conflict and the next pass decide again. Evictions are written before
//! admissions, and no admission is written in a pass where an eviction failed, so the quota
//! admitted Workloads hold never exceeds a queue's nominal quota. The loop is woken by changes
//! of the kinds it reads (and every [`KueueConfig::resync`]); a pass that decides what the
//! last one did writes nothing, so its own writes wake it once and it settles.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use super::integration::{self as tfjob, TFJOB_GROUP, TFJOB_PLURAL};
use super::objects::{
    ClusterQueue, Labels, LocalQueue, ResourceFlavor, Workload, WorkloadKey, condition,
    condition_true, string_map,
};
use super::quota::{self, Decision, World};
use super::status::{self, Stamp};
use super::{COMPONENT, GROUP, KueueConfig};
use crate::error::ApiError;
use crate::storage::events::{self, Note};
use crate::storage::store::{DeleteOptions, Part, Patch, ResourceType, Store, WatchEvent};

/// How long the loop waits after a change for the changes that come with it (a `kubectl
/// apply` of several objects), so one pass sees them all.
const SETTLE: Duration = Duration::from_millis(10);

/// The kinds whose changes the loop reads, by store key.
fn relevant(resource: &str) -> bool {
    resource.starts_with(GROUP)
        || matches!(
            resource,
            "/nodes" | "/namespaces" | "scheduling.k8s.io/priorityclasses"
        )
        || resource == format!("{TFJOB_GROUP}/{TFJOB_PLURAL}")
}

/// The types a pass reads, resolved each pass: CRDs may be served (or replaced) at any time.
struct Types {
    workloads: ResourceType,
    cluster_queues: ResourceType,
    local_queues: ResourceType,
    flavors: ResourceType,
    nodes: Option<ResourceType>,
    namespaces: Option<ResourceType>,
    tfjobs: Option<ResourceType>,
    priority_classes: Option<ResourceType>,
}

impl Types {
    fn resolve(store: &Store) -> Option<Types> {
        Some(Types {
            workloads: store.resource(GROUP, "workloads")?,
            cluster_queues: store.resource(GROUP, "clusterqueues")?,
            local_queues: store.resource(GROUP, "localqueues")?,
            flavors: store.resource(GROUP, "resourceflavors")?,
            nodes: store.resource("", "nodes"),
            namespaces: store.resource("", "namespaces"),
            tfjobs: store.resource(TFJOB_GROUP, TFJOB_PLURAL),
            priority_classes: store.resource("scheduling.k8s.io", "priorityclasses"),
        })
    }
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn key_of(obj: &Value) -> WorkloadKey {
    (
        meta(obj, "namespace").to_owned(),
        meta(obj, "name").to_owned(),
    )
}

fn now() -> String {
    Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string()
}

/// What an Event is about: the object itself.
fn reference(obj: &Value) -> Value {
    json!({
        "apiVersion": obj["apiVersion"], "kind": obj["kind"], "namespace": meta(obj, "namespace"),
        "name": meta(obj, "name"), "uid": meta(obj, "uid"),
    })
}

/// The job a Workload belongs to, from its controller reference.
fn owner_reference(wl: &Value) -> Option<Value> {
    let owner = wl
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == "TFJob")?;
    Some(json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "namespace": meta(wl, "namespace"), "name": owner["name"], "uid": owner["uid"],
    }))
}

pub struct Controller {
    store: Arc<Store>,
    config: KueueConfig,
    /// The pod sets of each managed job's Workload as last seen, by job uid: what the job's
    /// templates are restored to if the Workload is deleted while the job runs.
    originals: HashMap<String, Value>,
}

impl Controller {
    pub fn new(store: Arc<Store>, config: KueueConfig) -> Controller {
        Controller {
            store,
            config,
            originals: HashMap::new(),
        }
    }

    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut rx = self.store.subscribe_all();
        tokio::pin!(shutdown);
        loop {
            self.pass();
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.config.resync) => {}
                open = wait_for_change(&mut rx) => {
                    if !open {
                        break;
                    }
                    tokio::time::sleep(SETTLE).await;
                    // What came meanwhile is seen by the pass that follows.
                    while rx.try_recv().is_ok() {}
                }
            }
        }
    }

    /// One pass: the jobs first (Workloads created, jobs started or stopped), then admission.
    pub fn pass(&mut self) {
        let Some(t) = Types::resolve(&self.store) else {
            return;
        };
        let now = now();
        if self.config.integration
            && let Some(tfjobs) = &t.tfjobs
        {
            self.sync_jobs(&t, tfjobs, &now);
        }
        self.admit(&t, &now);
    }

    fn event(&self, involved: Value, warning: bool, reason: &str, message: &str) {
        let note = Note {
            warning,
            reason,
            message,
        };
        events::record(&self.store, COMPONENT, involved, note);
    }

    /// An Event on a Workload and, with the integration, on its job.
    fn workload_event(&self, wl: &Value, warning: bool, reason: &str, message: &str) {
        self.event(reference(wl), warning, reason, message);
        if self.config.integration
            && let Some(job) = owner_reference(wl)
        {
            self.event(job, warning, reason, message);
        }
    }

    /// Writes `status` over `obj`'s, as of the version `obj` was read at.
    fn write_status(&self, t: &ResourceType, obj: &Value, status: Value) -> Result<(), ApiError> {
        let mut body = obj.clone();
        body["status"] = status;
        let ns = t.namespaced.then(|| meta(obj, "namespace"));
        self.store
            .replace(t, ns, meta(obj, "name"), body, Part::Status)
            .map(|_| ())
            .inspect_err(|e| {
                tracing::debug!(kind = %t.kind, name = meta(obj, "name"), error = %e, "status write failed; the next pass retries");
            })
    }

    /// Replaces a whole object, as of the version it was read at.
    fn write(&self, t: &ResourceType, body: Value) -> Result<(), ApiError> {
        let (ns, name) = key_of(&body);
        self.store
            .replace(t, Some(&ns), &name, body, Part::Whole)
            .map(|_| ())
            .inspect_err(|e| {
                tracing::debug!(kind = %t.kind, %name, error = %e, "update failed; the next pass retries");
            })
    }

    fn delete_workload(&self, t: &Types, wl: &Value) {
        let opts = DeleteOptions {
            uid: Some(meta(wl, "uid").to_owned()),
            ..DeleteOptions::default()
        };
        let (ns, name) = key_of(wl);
        if let Err(e) = self.store.delete(&t.workloads, Some(&ns), &name, &opts) {
            tracing::debug!(%name, error = %e, "cannot delete the workload");
        }
    }

    /// The integration: one Workload per managed TFJob, jobs started on admission and stopped
    /// without one, Workloads finished with their jobs.
    fn sync_jobs(&mut self, t: &Types, tfjobs: &ResourceType, now: &str) {
        let (jobs, _) = self.store.list(tfjobs, None);
        let (workloads, _) = self.store.list(&t.workloads, None);
        let mut by_job: HashMap<&str, &Arc<Value>> = HashMap::new();
        for wl in &workloads {
            if let Some(uid) = tfjob::owner_uid(wl) {
                by_job.insert(uid, wl);
            }
        }
        let (flavor_objs, _) = self.store.list(&t.flavors, None);
        let flavors: BTreeMap<String, ResourceFlavor> = flavor_objs
            .iter()
            .map(|f| (meta(f, "name").to_owned(), ResourceFlavor::parse(f)))
            .collect();
        let alive: std::collections::HashSet<&str> = jobs.iter().map(|j| meta(j, "uid")).collect();
        self.originals.retain(|uid, _| alive.contains(uid.as_str()));
        for job in &jobs {
            let uid = meta(job, "uid");
            let wl = by_job.get(uid).copied();
            if tfjob::managed_elsewhere(job) || job.pointer("/metadata/deletionTimestamp").is_some()
            {
                continue;
            }
            if tfjob::queue_name(job).is_none() {
                // No longer queued (the label was removed while suspended): not Kueue's.
                if let Some(wl) = wl {
                    self.delete_workload(t, wl);
                }
                continue;
            }
            if let Some(wl) = wl
                && let Some(sets) = wl.pointer("/spec/podSets")
                && wl.pointer("/status/admission").is_none()
            {
                self.originals.insert(uid.to_owned(), sets.clone());
            }
            match wl {
                None => self.recreate(t, tfjobs, job),
                Some(wl) => self.sync_job(t, tfjobs, job, wl, &flavors, now),
            }
        }
    }

    /// A managed job without a Workload: suspended if it runs (it has no admission), then
    /// given one.
    fn recreate(&self, t: &Types, tfjobs: &ResourceType, job: &Value) {
        let mut job = job.clone();
        if !tfjob::suspended(&job) {
            let restored = match self.originals.get(meta(&job, "uid")) {
                Some(sets) => tfjob::stop(&job, &json!({"spec": {"podSets": sets}})),
                None => tfjob::stop(&job, &json!({})),
            };
            if self.write(tfjobs, restored.clone()).is_err() {
                return;
            }
            self.event(reference(&job), false, "Stopped", "No matching Workload");
            job = restored;
        }
        let priority = tfjob::priority_class(&job).and_then(|class| {
            let pcs = t.priority_classes.as_ref()?;
            let pc = self.store.get(pcs, None, &class).ok()?;
            let value = pc.get("value").and_then(Value::as_i64)?;
            Some((class, value))
        });
        let wl = tfjob::workload(&job, priority.as_ref().map(|(c, v)| (c.as_str(), *v)));
        let ns = meta(&job, "namespace");
        match self.store.create(&t.workloads, Some(ns), wl) {
            Ok(created) => {
                let message = format!("Created Workload: {ns}/{}", meta(&created, "name"));
                self.event(reference(&job), false, "CreatedWorkload", &message);
            }
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => {
                tracing::warn!(job = meta(&job, "name"), error = %e, "cannot create the job's workload");
                let message = format!("Cannot create the Workload: {}", e.message);
                self.event(reference(&job), true, "ErrWorkloadCompose", &message);
            }
        }
    }

    fn sync_job(
        &self,
        t: &Types,
        tfjobs: &ResourceType,
        job: &Value,
        wl: &Value,
        flavors: &BTreeMap<String, ResourceFlavor>,
        now: &str,
    ) {
        if wl.pointer("/metadata/deletionTimestamp").is_some() {
            return;
        }
        let finished = condition_true(wl, "Finished");
        if let Some((reason, message)) = tfjob::finished(job) {
            if !finished
                && let Some(status) = status::finished(wl, reason, &message, Stamp::of(wl, now))
                && self.write_status(&t.workloads, wl, status).is_ok()
            {
                self.workload_event(wl, false, "Finished", &message);
            }
            return;
        }
        if finished {
            return;
        }
        let parsed = Workload::parse(wl);
        let admitted = condition_true(wl, "Admitted")
            .then_some(parsed.admission)
            .flatten();
        let queue = tfjob::queue_name(job).unwrap_or_default();
        if parsed.queue_name != queue {
            // The label changed while the job was suspended.
            if admitted.is_some() {
                // Admitted to the old queue: that admission is void; a new Workload follows.
                self.delete_workload(t, wl);
            } else {
                let (ns, name) = key_of(wl);
                let patch = Patch::Merge(json!({"spec": {"queueName": queue}}));
                if let Err(e) = self
                    .store
                    .patch(&t.workloads, Some(&ns), &name, patch, Part::Whole)
                {
                    tracing::debug!(%name, error = %e, "cannot move the workload to its new queue");
                }
            }
            return;
        }
        let suspended = tfjob::suspended(job);
        match admitted {
            Some(admission) if suspended => {
                let started = tfjob::start(job, &admission, flavors);
                if self.write(tfjobs, started).is_ok() {
                    let message = format!("Admitted by clusterQueue {}", admission.cluster_queue);
                    self.event(reference(job), false, "Started", &message);
                }
            }
            Some(_) => {}
            None if !suspended => {
                let message = condition(wl, "Evicted")
                    .filter(|c| c["status"] == "True")
                    .and_then(|c| c["message"].as_str())
                    .unwrap_or("Not admitted by cluster queue")
                    .to_owned();
                if self.write(tfjobs, tfjob::stop(job, wl)).is_ok() {
                    self.event(reference(job), false, "Stopped", &message);
                }
            }
            None if !tfjob::pod_sets_match(job, wl) => {
                // The job changed while it waited: its Workload must describe it anew.
                self.delete_workload(t, wl);
            }
            None => {}
        }
    }

    /// Admission: evictions, then admissions and pending messages, then the queues' status.
    fn admit(&self, t: &Types, now: &str) {
        let list = |rt: &ResourceType| self.store.list(rt, None).0;
        let cq_objs = list(&t.cluster_queues);
        let lq_objs = list(&t.local_queues);
        let wl_objs = list(&t.workloads);
        let labels_of = |objs: Vec<Arc<Value>>| -> Vec<(String, Labels)> {
            objs.iter()
                .map(|o| {
                    (
                        meta(o, "name").to_owned(),
                        string_map(o.pointer("/metadata/labels")),
                    )
                })
                .collect()
        };
        let world = World {
            cluster_queues: cq_objs
                .iter()
                .map(|o| (meta(o, "name").to_owned(), ClusterQueue::parse(o)))
                .collect(),
            local_queues: lq_objs
                .iter()
                .map(|o| (key_of(o), LocalQueue::parse(o)))
                .collect(),
            flavors: list(&t.flavors)
                .iter()
                .map(|o| (meta(o, "name").to_owned(), ResourceFlavor::parse(o)))
                .collect(),
            nodes: t
                .nodes
                .as_ref()
                .map(|n| labels_of(list(n)).into_iter().map(|(_, l)| l).collect())
                .unwrap_or_default(),
            namespaces: t
                .namespaces
                .as_ref()
                .map(|n| labels_of(list(n)).into_iter().collect())
                .unwrap_or_default(),
            workloads: wl_objs.iter().map(|o| Workload::parse(o)).collect(),
        };
        let plan = quota::plan(&world);
        let objects: BTreeMap<WorkloadKey, &Arc<Value>> =
            wl_objs.iter().map(|o| (key_of(o), o)).collect();
        let decided = |want: fn(&Decision) -> bool| {
            plan.decisions
                .iter()
                .filter(move |(_, d)| want(d))
                .filter_map(|(k, d)| Some((*objects.get(k)?, d)))
        };
        let mut released = true;
        for (wl, decision) in decided(|d| matches!(d, Decision::Evict(_))) {
            let Decision::Evict(why) = decision else {
                continue;
            };
            let Some(next) = status::evicted(wl, *why, Stamp::of(wl, now)) else {
                continue;
            };
            if self.write_status(&t.workloads, wl, next).is_ok() {
                let reason = format!("EvictedDueTo{}", why.reason());
                self.workload_event(wl, false, &reason, why.message());
            } else {
                released = false;
            }
        }
        if !released {
            // Quota that is not released yet must not be admitted: the next pass decides again.
            return;
        }
        for (wl, decision) in decided(|d| !matches!(d, Decision::Evict(_))) {
            let stamp = Stamp::of(wl, now);
            match decision {
                Decision::Admit(admission) => {
                    let Some(next) = status::admitted(wl, admission, stamp) else {
                        continue;
                    };
                    if self.write_status(&t.workloads, wl, next).is_ok() {
                        let cq = &admission.cluster_queue;
                        let reserved = format!("Quota reserved in ClusterQueue {cq}");
                        self.workload_event(wl, false, "QuotaReserved", &reserved);
                        let message = format!("Admitted by ClusterQueue {cq}");
                        self.workload_event(wl, false, "Admitted", &message);
                    }
                }
                Decision::Pending { message, queued } => {
                    let before = condition(wl, "QuotaReserved").and_then(|c| c["message"].as_str());
                    let Some(next) = status::pending(wl, message, *queued, stamp) else {
                        continue;
                    };
                    if self.write_status(&t.workloads, wl, next).is_ok()
                        && before != Some(message.as_str())
                    {
                        self.workload_event(wl, true, "Pending", message);
                    }
                }
                Decision::Evict(_) => {}
            }
        }
        for obj in &cq_objs {
            let name = meta(obj, "name");
            let (Some(cq), Some(counts)) = (
                world.cluster_queues.get(name),
                plan.cluster_queues.get(name),
            ) else {
                continue;
            };
            if let Some(next) = status::cluster_queue(obj, cq, counts, Stamp::of(obj, now)) {
                let _ = self.write_status(&t.cluster_queues, obj, next);
            }
        }
        for obj in &lq_objs {
            let key = key_of(obj);
            let (Some(lq), Some(counts)) =
                (world.local_queues.get(&key), plan.local_queues.get(&key))
            else {
                continue;
            };
            let cq = world.cluster_queues.get(&lq.cluster_queue);
            if let Some(next) = status::local_queue(obj, lq, cq, counts, Stamp::of(obj, now)) {
                let _ = self.write_status(&t.local_queues, obj, next);
            }
        }
    }
}

/// Waits for a change of a kind the loop reads; false when the store is gone.
async fn wait_for_change(rx: &mut Receiver<WatchEvent>) -> bool {
    loop {
        match rx.recv().await {
            Ok(e) if relevant(&e.resource) => return true,
            Ok(_) => {}
            // Missed changes: a pass reads everything anew anyway.
            Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}
