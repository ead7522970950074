//! Builders shared by the planner scenario tests: jobs from YAML, pods with a status, a tiny
//! in-memory cluster that executes plans, and assertion helpers.
//!
//! Every integration test file compiles this module on its own and uses a different subset of
//! it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodStatus, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;
use tfjob_api::parse::parse_tfjob_yaml;
use tfjob_api::{ConditionStatus, JobConditionType, ReplicaStatus, TFJob, TFJobStatus};
use tfjob_planner::gang::{ObservedPodGroup, PodGroupChange};
use tfjob_planner::native::NativePolicies;
use tfjob_planner::{Deletion, DeletionCause, EventType, Plan, PlanInput, Settings, plan};

/// Namespace of every test job.
pub const NS: &str = "ml";
/// Name of every test job built by [`tfjob`].
pub const NAME: &str = "mnist";
/// uid of every test job.
pub const JOB_UID: &str = "job-uid-1";

/// The fixed start of every scenario.
pub fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

/// `t0` plus `secs` seconds.
pub fn at(secs: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(secs)
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Parses a TFJob and gives it a uid, as the API server would.
pub fn job(yaml: &str) -> TFJob {
    let mut job = parse_tfjob_yaml(yaml).expect("test job parses");
    job.metadata.uid = Some(JOB_UID.into());
    job
}

/// A job named `mnist` in namespace `ml` with the given replicas, each
/// `(type, replicas, restartPolicy)` (an empty policy leaves the default), and extra `spec`
/// fields written as one-line YAML (`runPolicy: {backoffLimit: 1}`).
pub fn tfjob(replicas: &[(&str, i32, &str)], spec_extra: &[&str]) -> TFJob {
    let mut yaml = format!("metadata: {{name: {NAME}, namespace: {NS}}}\nspec:\n");
    for line in spec_extra {
        yaml.push_str(&format!("  {line}\n"));
    }
    yaml.push_str("  tfReplicaSpecs:\n");
    for (rtype, count, policy) in replicas {
        let policy = if policy.is_empty() {
            String::new()
        } else {
            format!(", restartPolicy: {policy}")
        };
        yaml.push_str(&format!(
            "    {rtype}: {{replicas: {count}{policy}, template: {{spec: {{containers: [{{name: tensorflow, image: \"tf:2\"}}]}}}}}}\n"
        ));
    }
    job(&yaml)
}

/// Runs the planner once with the native policies and default settings.
pub fn run(job: &TFJob, pods: &[Pod], services: &[Service], now: Timestamp) -> Plan {
    run_with(&Settings::default(), job, pods, services, now)
}

/// Runs the planner once with the native policies and the given settings.
pub fn run_with(
    settings: &Settings,
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    now: Timestamp,
) -> Plan {
    run_gang(settings, None, job, pods, services, now)
}

/// Runs the planner once with the native policies, the given settings and the job's observed
/// PodGroup (no priority classes).
pub fn run_gang(
    settings: &Settings,
    pod_group: Option<&ObservedPodGroup>,
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    now: Timestamp,
) -> Plan {
    let policies = NativePolicies::default();
    plan(&PlanInput {
        job,
        pods,
        services,
        now,
        settings,
        policies: &policies,
        pod_group,
        priority_classes: &Default::default(),
        kueue: None,
    })
    .expect("native policies never fail")
}

/// A job, its pods and services, and the effect of executing plans on them the way the controller
/// does: status first, then deletions (honouring uid preconditions), then creations.
pub struct Cluster {
    pub job: TFJob,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    /// Operator settings every plan runs with.
    pub settings: Settings,
    /// The job's PodGroup, created, updated and deleted by the plans.
    pub pod_group: Option<ObservedPodGroup>,
    created: u32,
}

impl Cluster {
    pub fn new(job: TFJob) -> Cluster {
        Cluster {
            job,
            pods: Vec::new(),
            services: Vec::new(),
            settings: Settings::default(),
            pod_group: None,
            created: 0,
        }
    }

    /// Plans without executing.
    pub fn plan(&self, now: Timestamp) -> Plan {
        run_gang(
            &self.settings,
            self.pod_group.as_ref(),
            &self.job,
            &self.pods,
            &self.services,
            now,
        )
    }

    /// Executes a plan. Created pods get a fresh uid (`<name>-uid-<n>`), a creation timestamp
    /// and no status, as a just-created pod has.
    pub fn apply(&mut self, plan: &Plan, now: Timestamp) {
        if let Some(status) = &plan.status {
            self.job.status = Some(status.clone());
        }
        for d in &plan.delete_pods {
            self.pods.retain(|p| {
                !(p.metadata.name.as_deref() == Some(&d.name)
                    && d.uid
                        .as_ref()
                        .is_none_or(|u| p.metadata.uid.as_ref() == Some(u)))
            });
        }
        for d in &plan.delete_services {
            self.services
                .retain(|s| s.metadata.name.as_deref() != Some(&d.name));
        }
        match &plan.pod_group {
            Some(PodGroupChange::Create(object)) => {
                assert!(self.pod_group.is_none(), "PodGroup created while it exists");
                self.pod_group = Some(ObservedPodGroup::from_object(object));
            }
            Some(PodGroupChange::UpdateSpec(spec)) => {
                self.pod_group.as_mut().expect("PodGroup to update").spec = spec.clone();
            }
            Some(PodGroupChange::Delete) => self.pod_group = None,
            None => {}
        }
        for svc in &plan.create_services {
            let mut svc = svc.clone();
            svc.metadata.uid = Some(format!("{}-svc", svc.metadata.name.clone().unwrap()));
            self.services.push(svc);
        }
        for pod in &plan.create_pods {
            let name = pod.metadata.name.clone().unwrap();
            assert!(
                self.find(&name).is_none(),
                "pod {name} created while it exists"
            );
            self.created += 1;
            let mut pod = pod.clone();
            pod.metadata.uid = Some(format!("{name}-uid-{}", self.created));
            pod.metadata.creation_timestamp = Some(Time(now));
            self.pods.push(pod);
        }
    }

    /// Plans and executes one reconcile.
    pub fn reconcile(&mut self, now: Timestamp) -> Plan {
        let plan = self.plan(now);
        self.apply(&plan, now);
        plan
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.pods
            .iter()
            .position(|p| p.metadata.name.as_deref() == Some(name))
    }

    pub fn pod(&self, name: &str) -> &Pod {
        &self.pods[self.find(name).unwrap_or_else(|| panic!("no pod {name}"))]
    }

    pub fn pod_mut(&mut self, name: &str) -> &mut Pod {
        let i = self.find(name).unwrap_or_else(|| panic!("no pod {name}"));
        &mut self.pods[i]
    }

    pub fn uid(&self, name: &str) -> String {
        self.pod(name).metadata.uid.clone().unwrap()
    }

    /// Gives pod `name` a status.
    pub fn set(&mut self, name: &str, status: PodStatus) {
        self.pod_mut(name).status = Some(status);
    }

    pub fn remove_pod(&mut self, name: &str) {
        let i = self.find(name).unwrap_or_else(|| panic!("no pod {name}"));
        self.pods.remove(i);
    }

    pub fn status(&self) -> &TFJobStatus {
        self.job.status.as_ref().expect("job has a status")
    }

    pub fn pod_names(&self) -> Vec<String> {
        pod_names(&self.pods)
    }

    pub fn service_names(&self) -> Vec<String> {
        service_names(&self.services)
    }

    /// Sets `spec.runPolicy.suspend`.
    pub fn suspend(&mut self, suspend: bool) {
        self.job.spec.run_policy.suspend = Some(suspend);
    }

    /// Sets `replicas` of one replica type.
    pub fn scale(&mut self, rtype: &str, replicas: i32) {
        self.job
            .spec
            .tf_replica_specs
            .get_mut(rtype)
            .unwrap_or_else(|| panic!("no replica type {rtype}"))
            .replicas = Some(replicas);
    }
}

fn status(value: serde_json::Value) -> PodStatus {
    serde_json::from_value(value).expect("valid pod status")
}

fn container(state: serde_json::Value, restart_count: i32) -> serde_json::Value {
    json!({"name": "tensorflow", "ready": false, "restartCount": restart_count, "image": "tf:2",
           "imageID": "", "state": state})
}

/// Phase Running, the `tensorflow` container running.
pub fn running() -> PodStatus {
    running_restarted(0)
}

/// Phase Running after the kubelet restarted the `tensorflow` container `n` times in place.
pub fn running_restarted(n: i32) -> PodStatus {
    status(json!({
        "phase": "Running",
        "containerStatuses": [container(json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}), n)],
    }))
}

/// Phase Succeeded, the `tensorflow` container exited 0.
pub fn succeeded() -> PodStatus {
    status(json!({
        "phase": "Succeeded",
        "containerStatuses": [container(json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), 0)],
    }))
}

/// Phase Succeeded although the `tensorflow` container was OOMKilled.
pub fn succeeded_oom_killed() -> PodStatus {
    status(json!({
        "phase": "Succeeded",
        "containerStatuses": [container(json!({"terminated": {"exitCode": 0, "reason": "OOMKilled"}}), 0)],
    }))
}

/// Phase Failed, the `tensorflow` container exited with `code`.
pub fn failed(code: i32) -> PodStatus {
    failed_restarted(code, 0)
}

/// Phase Failed with `code` after `n` in-place container restarts.
pub fn failed_restarted(code: i32, n: i32) -> PodStatus {
    status(json!({
        "phase": "Failed",
        "containerStatuses": [container(json!({"terminated": {"exitCode": code, "reason": "Error"}}), n)],
    }))
}

/// Phase Failed because the kubelet evicted the pod; no container termination recorded.
pub fn evicted() -> PodStatus {
    status(json!({
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
    }))
}

/// Phase Pending, scheduled, the `tensorflow` container waiting with `reason` since `since`.
pub fn waiting(reason: &str, message: &str, since: Timestamp) -> PodStatus {
    status(json!({
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": since.to_string()},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "message": "containers with unready status: [tensorflow]",
             "lastTransitionTime": since.to_string()},
        ],
        "containerStatuses": [container(json!({"waiting": {"reason": reason, "message": message}}), 0)],
    }))
}

/// Phase Pending, not schedulable.
pub fn unschedulable(since: Timestamp) -> PodStatus {
    status(json!({
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                        "lastTransitionTime": since.to_string()}],
    }))
}

pub fn pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

pub fn service_names(services: &[Service]) -> Vec<String> {
    services
        .iter()
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// `(name, uid, cause)` of each deletion.
pub fn deletions(ds: &[Deletion]) -> Vec<(String, Option<String>, DeletionCause)> {
    ds.iter()
        .map(|d| (d.name.clone(), d.uid.clone(), d.cause))
        .collect()
}

/// A deletion tuple with a uid precondition.
pub fn del(name: &str, uid: &str, cause: DeletionCause) -> (String, Option<String>, DeletionCause) {
    (name.to_owned(), Some(uid.to_owned()), cause)
}

/// A deletion tuple without a uid precondition (services).
pub fn del_svc(name: &str, cause: DeletionCause) -> (String, Option<String>, DeletionCause) {
    (name.to_owned(), None, cause)
}

/// The new status of a plan, which must write one.
pub fn new_status(plan: &Plan) -> &TFJobStatus {
    plan.status.as_ref().expect("plan writes a status")
}

/// `(type, status, reason)` of each condition, in order.
pub fn shape(status: &TFJobStatus) -> Vec<(JobConditionType, ConditionStatus, String)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_, c.status, c.reason.clone()))
        .collect()
}

/// A condition tuple for [`shape`].
pub fn c(
    type_: JobConditionType,
    status: ConditionStatus,
    reason: &str,
) -> (JobConditionType, ConditionStatus, String) {
    (type_, status, reason.to_owned())
}

/// The message of the condition of type `type_`.
pub fn message(status: &TFJobStatus, type_: JobConditionType) -> String {
    status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_:?} condition"))
        .message
        .clone()
}

/// `(type, reason, once_key)` of each event, in order.
pub fn events(plan: &Plan) -> Vec<(EventType, String, Option<String>)> {
    plan.events
        .iter()
        .map(|e| (e.type_, e.reason.clone(), e.once_key.clone()))
        .collect()
}

/// An event tuple for [`events`].
pub fn ev(
    type_: EventType,
    reason: &str,
    once_key: Option<&str>,
) -> (EventType, String, Option<String>) {
    (type_, reason.to_owned(), once_key.map(str::to_owned))
}

/// The message of the only event with `reason`.
pub fn event_message(plan: &Plan, reason: &str) -> String {
    let found: Vec<_> = plan.events.iter().filter(|e| e.reason == reason).collect();
    assert_eq!(found.len(), 1, "one {reason} event in {:?}", plan.events);
    found[0].message.clone()
}

/// `(active, succeeded, failed)` of one replica type.
pub fn counts(status: &TFJobStatus, rtype: &str) -> (i32, i32, i32) {
    let rs: &ReplicaStatus = status
        .replica_statuses
        .get(rtype)
        .unwrap_or_else(|| panic!("no replica status for {rtype}"));
    (rs.active, rs.succeeded, rs.failed)
}

/// Drives a fresh job to "every pod created and running": one reconcile creating everything at
/// `t0`, then the pods report Running, then one reconcile at `at(10)` that sets `Running` when the
/// job's rules say so.
pub fn running_cluster(job: TFJob) -> Cluster {
    let mut cluster = Cluster::new(job);
    cluster.reconcile(t0());
    for name in cluster.pod_names() {
        cluster.set(&name, running());
    }
    cluster.reconcile(at(10));
    cluster
}
