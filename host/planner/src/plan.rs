//! The planner: from a TFJob and its observed pods and services to the actions that move it on.
//!
//! [`plan`] is a pure function of its [`PlanInput`]: no IO, no clock, no randomness. The
//! controller executes the resulting [`Plan`] in a fixed order (status first, with optimistic
//! concurrency, then deletions, then creations, then events), which is what makes restart
//! accounting and pod creation idempotent under a stale cache: a restart is recorded in the
//! status together with the uid of the pod it deletes, and pods have deterministic names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tfjob_api::validation::{ValidJob, ValidationErrors, managed_elsewhere, validate};
use tfjob_api::{
    CleanPodPolicy, ConditionStatus, JobConditionType, ReplicaStatus, ReplicaType, RestartPolicy,
    SuccessPolicy, TFJob, TFJobStatus,
};

use crate::conditions::set_condition;
use crate::gang::{self, GangScheduler, ObservedPodGroup, PodGroupChange};
use crate::kueue::{self, Gate, KueueView, WorkloadChange};
use crate::objects::{build_pod, build_service, object_name, replica_of, replica_selector};
use crate::policy::{
    Classified, PodContext, PodPolicies, PolicyError, PolicyNote, Verdict, VerdictPhase,
};
use crate::problems::pod_problem_events;

/// How often a job with pods still on their way to running is looked at again, so that grace
/// periods and pending timeouts expire without another event.
pub const PENDING_RECHECK: Duration = Duration::from_secs(15);

/// Longest policy message carried into a condition or event.
const MAX_DETAIL: usize = 1024;

/// How long changes of the replica counts alone wait to be written, by default.
pub const STATUS_BATCH: Duration = Duration::from_secs(1);

/// Operator-wide settings the planner needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Adds `.svc.<domain>` to `TF_CONFIG` host names.
    pub cluster_domain: Option<String>,
    /// A status change that only moves `replicaStatuses` counts is written at most once per
    /// this window after the previous write (the job is looked at again when it ends); any
    /// other change (a condition, a time, a restart) is written at once. Zero writes every
    /// change. Pods starting one by one would otherwise cost a status write each.
    pub status_batch: Duration,
    /// The gang scheduler jobs are grouped for (`--gang-scheduler-name`); `None` creates no
    /// PodGroups and leaves pods' scheduler alone.
    pub gang_scheduler: Option<GangScheduler>,
    /// The operator creates and owns a Kueue Workload for each job with a queue label, and
    /// runs its pods only while the Workload is admitted (`--kueue-workloads`).
    pub kueue_workloads: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            cluster_domain: None,
            status_batch: STATUS_BATCH,
            gang_scheduler: None,
            kueue_workloads: false,
        }
    }
}

/// Everything [`plan`] looks at.
pub struct PlanInput<'a> {
    pub job: &'a TFJob,
    /// Pods owned by the job.
    pub pods: &'a [Pod],
    /// Services owned by the job.
    pub services: &'a [Service],
    pub now: Timestamp,
    pub settings: &'a Settings,
    pub policies: &'a dyn PodPolicies,
    /// The job's PodGroup (named after the job), when gang scheduling is on and it exists.
    pub pod_group: Option<&'a ObservedPodGroup>,
    /// Values of the cluster's priority classes by name, for a computed `minResources` and a
    /// Workload's priority.
    pub priority_classes: &'a BTreeMap<String, i32>,
    /// The job's Workload and the ResourceFlavors, when the operator owns Kueue Workloads
    /// (`--kueue-workloads`); `None` otherwise.
    pub kueue: Option<KueueView<'a>>,
}

/// Why the planner left a job alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// `spec.runPolicy.managedBy` names another controller.
    ManagedElsewhere(String),
    /// The job is being deleted; garbage collection removes its objects.
    BeingDeleted,
}

/// Why an object is deleted; the controller words its events and logs by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionCause {
    Restart,
    ScaleDown,
    CleanPodPolicy,
    Suspend,
    /// Running and pending pods of a job that failed on its backoff limit or deadline.
    JobFailed,
}

/// One object to delete. `uid`, when set, is a precondition: a newer incarnation with the same
/// name is never deleted by mistake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub name: String,
    pub uid: Option<String>,
    pub cause: DeletionCause,
}

pub use crate::events::{EventType, JobEvent};

/// Job lifecycle transitions, counted by the operator's metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Created,
    Succeeded,
    Failed,
    Restarted,
    Deleted,
}

/// What to do for one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub skip: Option<Skip>,
    /// The new status, when it differs from the observed one.
    pub status: Option<TFJobStatus>,
    pub delete_pods: Vec<Deletion>,
    pub delete_services: Vec<Deletion>,
    pub create_services: Vec<Service>,
    pub create_pods: Vec<Pod>,
    /// Create, update or delete the job's PodGroup (gang scheduling only).
    pub pod_group: Option<PodGroupChange>,
    /// Create, replace or finish the job's Kueue Workload (`--kueue-workloads` only).
    pub workload: Option<WorkloadChange>,
    pub events: Vec<JobEvent>,
    pub transitions: Vec<Transition>,
    /// Delete the TFJob itself (TTL after finishing).
    pub delete_job: bool,
    pub requeue_after: Option<Duration>,
}

/// A policy with failure policy `Fail` could not decide, so the reconcile must not go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Policy(#[from] PolicyError),
}

/// Plans one reconcile of `input.job`.
pub fn plan(input: &PlanInput<'_>) -> Result<Plan, PlanError> {
    let job = input.job;
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Plan {
            skip: Some(Skip::BeingDeleted),
            ..Plan::default()
        });
    }
    if managed_elsewhere(job) {
        let manager = job.spec.run_policy.managed_by.clone().unwrap_or_default();
        return Ok(Plan {
            skip: Some(Skip::ManagedElsewhere(manager)),
            ..Plan::default()
        });
    }
    let observed = job.status.clone().unwrap_or_default();
    let mut planner = Planner {
        input,
        status: observed.clone(),
        plan: Plan::default(),
        name: job.metadata.name.clone().unwrap_or_default(),
        namespace: job
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    };
    planner.ensure_created();
    match validate(job) {
        Err(errors) => planner.invalid(&errors),
        Ok(valid) => planner.reconcile(&valid)?,
    }
    Ok(planner.finish(observed))
}

/// Pod counts of one replica type during a reconcile.
#[derive(Default)]
struct Tally {
    active: i32,
    /// Failed pods that fail the job (unless tolerated).
    failed: i32,
    /// Failed pods that are restarted instead; reported as failed, as upstream did, but they do
    /// not fail the job.
    restarting: i32,
    /// Indexes whose work is done (a succeeded pod now, or recorded earlier).
    succeeded: BTreeSet<i32>,
}

/// A replica type and index: where one pod and its service belong.
type Slot = (ReplicaType, i32);

/// What the pods of a running job showed.
#[derive(Default)]
struct Observed<'p> {
    tallies: BTreeMap<ReplicaType, Tally>,
    /// Slots without a pod whose work is not done.
    missing: Vec<Slot>,
    /// Failed pods that will be restarted.
    retryable: Vec<Judged<'p>>,
    /// Failed pods that fail their replica for good.
    permanent: Vec<Judged<'p>>,
    /// Container restarts in place (`OnFailure`, `Always`), counted against the backoff limit.
    in_place_restarts: i64,
    /// A pod is still on its way to running.
    pending: bool,
}

/// A pod that needs a decision after all pods were classified.
struct Judged<'p> {
    rtype: ReplicaType,
    pod: &'p Pod,
    verdict: Verdict,
}

struct Planner<'a, 'i> {
    input: &'a PlanInput<'i>,
    status: TFJobStatus,
    plan: Plan,
    name: String,
    namespace: String,
}

impl<'a, 'i> Planner<'a, 'i> {
    fn now(&self) -> Timestamp {
        self.input.now
    }

    fn condition(
        &mut self,
        type_: JobConditionType,
        value: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        set_condition(
            &mut self.status,
            type_,
            value,
            reason,
            message,
            self.input.now,
        )
    }

    fn event(&mut self, type_: EventType, reason: &str, message: String, once_key: Option<String>) {
        self.plan
            .events
            .push(JobEvent::new(type_, reason, message, once_key));
    }

    /// Records the policies' notes as events, each key once per job.
    fn policy_notes(&mut self, job_uid: &str, notes: Vec<PolicyNote>) {
        for note in notes {
            let type_ = if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            let key = format!("{job_uid}/{}/{}", note.policy, note.key);
            let already = self
                .plan
                .events
                .iter()
                .any(|e| e.once_key.as_deref() == Some(key.as_str()));
            if !already {
                self.event(type_, &note.reason, note.message, Some(key));
            }
        }
    }

    fn ensure_created(&mut self) {
        if self.status.condition(JobConditionType::Created).is_none() {
            let message = format!("TFJob {} is created.", self.name);
            self.condition(
                JobConditionType::Created,
                ConditionStatus::True,
                "TFJobCreated",
                &message,
            );
            self.plan.transitions.push(Transition::Created);
        }
    }

    fn invalid(&mut self, errors: &ValidationErrors) {
        let message = format!(
            "TFJob {}/{} is invalid: {errors}",
            self.namespace, self.name
        );
        if self.condition(
            JobConditionType::Failed,
            ConditionStatus::True,
            "FailedValidation",
            &message,
        ) {
            self.status
                .completion_time
                .get_or_insert(Time(self.input.now));
            self.event(EventType::Warning, "FailedValidation", message, None);
            self.plan.transitions.push(Transition::Failed);
        }
    }

    fn finish(mut self, observed: TFJobStatus) -> Plan {
        if self.status != observed {
            if let Some(wait) = self.batch_wait(&observed) {
                self.requeue(wait);
                return self.plan;
            }
            self.status.last_reconcile_time = Some(Time(self.input.now));
            self.plan.status = Some(self.status);
        }
        self.plan
    }

    /// How long to hold back this status write: `Some` when only replica counts changed and
    /// the previous write (its `lastReconcileTime`) is younger than the batch window.
    fn batch_wait(&self, observed: &TFJobStatus) -> Option<Duration> {
        let window = self.input.settings.status_batch;
        let last = observed.last_reconcile_time.as_ref()?.0;
        let counts_only = {
            let strip = |s: &TFJobStatus| TFJobStatus {
                replica_statuses: Default::default(),
                last_reconcile_time: None,
                ..s.clone()
            };
            strip(&self.status) == strip(observed)
        };
        if window.is_zero() || !counts_only {
            return None;
        }
        // A last write in the future (clock skew between operator instances) holds nothing
        // back: otherwise counts could wait until the clock catches up.
        let since = Duration::try_from(self.input.now.duration_since(last)).ok()?;
        window.checked_sub(since).filter(|w| !w.is_zero())
    }

    fn requeue(&mut self, after: Duration) {
        self.plan.requeue_after = Some(self.plan.requeue_after.map_or(after, |d| d.min(after)));
    }

    fn reconcile(&mut self, job: &ValidJob) -> Result<(), PlanError> {
        if self.status.is_finished() {
            self.finished(job);
            self.release_pod_group();
            self.finish_workload();
            return Ok(());
        }
        if job.run_policy.suspend {
            let message = format!("TFJob {} is suspended.", self.name);
            self.stop(job, "TFJobSuspended", &message);
            self.release_pod_group();
            return Ok(());
        }
        let placed;
        let job = match self.queue_gate(job) {
            None => job,
            Some(Gate::Wait { reason, message }) => {
                self.stop(job, reason, &message);
                self.release_pod_group();
                return Ok(());
            }
            Some(Gate::Admitted(placement)) => {
                placed = kueue::placed(job, &placement);
                &placed
            }
        };
        if self.status.is_true(JobConditionType::Suspended) {
            let message = format!("TFJob {} is resumed.", self.name);
            self.condition(
                JobConditionType::Suspended,
                ConditionStatus::False,
                "TFJobResumed",
                &message,
            );
            self.status.start_time = Some(Time(self.now()));
            self.event(EventType::Normal, "TFJobResumed", message, None);
        }
        self.run(job)?;
        if self.status.is_finished() {
            self.release_pod_group();
        }
        Ok(())
    }

    /// A finished or suspended job gives its PodGroup back, so the gang scheduler stops
    /// reserving room for it (1.9 did the same, and announced it on every reconcile of a
    /// finished job; here only when a group is there to delete).
    fn release_pod_group(&mut self) {
        let present = self.input.pod_group.is_some_and(|g| !g.deleting);
        if self.input.settings.gang_scheduler.is_none() || !present {
            return;
        }
        self.plan.pod_group = Some(PodGroupChange::Delete);
        self.event(
            EventType::Normal,
            "JobTerminated",
            "Job has been terminated. Deleting PodGroup".into(),
            None,
        );
    }

    /// Brings the job's PodGroup up to date; returns why pods must wait, if they must (Volcano
    /// has not admitted the group yet).
    fn sync_pod_group(&mut self, job: &ValidJob) -> Option<String> {
        let scheduler = self.input.settings.gang_scheduler.as_ref()?;
        let annotations = self
            .input
            .job
            .metadata
            .annotations
            .clone()
            .unwrap_or_default();
        let observed = self.input.pod_group;
        self.plan.pod_group = gang::sync(
            job,
            &annotations,
            scheduler,
            self.input.priority_classes,
            observed,
        );
        let delay = gang::creation_delay(job, scheduler, observed)?;
        // The first reconcile creates the group; the wait is news only once it exists.
        if observed.is_some() {
            self.event(EventType::Normal, "PodGroupPending", delay.clone(), None);
        }
        Some(delay)
    }

    /// A finished job: apply cleanPodPolicy and the TTL.
    fn finished(&mut self, job: &ValidJob) {
        let clean = job.run_policy.clean_pod_policy;
        for pod in self.input.pods {
            let phase = pod_phase(pod);
            let delete = match clean {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => phase == "Running" || phase == "Pending",
                CleanPodPolicy::None => false,
            };
            if delete && pod.metadata.deletion_timestamp.is_none() {
                self.delete_pod_and_service(pod, DeletionCause::CleanPodPolicy);
            }
        }
        if self.status.is_true(JobConditionType::Succeeded) {
            for rs in self.status.replica_statuses.values_mut() {
                rs.succeeded += rs.active;
                rs.active = 0;
            }
        }
        let (Some(ttl), Some(done)) = (
            job.run_policy.ttl_seconds_after_finished,
            self.status.completion_time.clone(),
        ) else {
            return;
        };
        // A TTL that reaches past the representable future never expires.
        let Some(expires) = later(done.0, i64::from(ttl)) else {
            return;
        };
        if self.now() >= expires {
            self.plan.delete_job = true;
            self.plan.transitions.push(Transition::Deleted);
            self.event(
                EventType::Normal,
                "SuccessfulDeleteJob",
                format!("Deleted job: {}", self.name),
                None,
            );
        } else {
            self.requeue(until(self.now(), expires));
        }
    }

    /// In Workload mode, for a job with a queue label: what its Workload allows, with the
    /// Workload change that goes with it. `None` when the job is not Kueue's to gate.
    fn queue_gate(&mut self, job: &ValidJob) -> Option<Gate> {
        let view = self.input.kueue.as_ref()?;
        let queue = kueue::queue_name(self.input.job)?;
        let priority = match kueue::priority_class(job) {
            None => None,
            Some(class) => match self.input.priority_classes.get(&class) {
                Some(value) => Some((class, *value)),
                None => {
                    return Some(Gate::Wait {
                        reason: "WorkloadPending",
                        message: format!(
                            "PriorityClass {class} is not found; the job's Workload waits for it"
                        ),
                    });
                }
            },
        };
        let desired = kueue::desired(job, queue, priority.as_ref().map(|(c, v)| (c.as_str(), *v)));
        let (gate, change) = kueue::gate(job, &desired, view);
        self.plan.workload = change;
        Some(gate)
    }

    /// A finished job gives its Workload's quota back.
    fn finish_workload(&mut self) {
        let Some(view) = self.input.kueue.as_ref() else {
            return;
        };
        let succeeded = self.status.is_true(JobConditionType::Succeeded);
        let type_ = if succeeded {
            JobConditionType::Succeeded
        } else {
            JobConditionType::Failed
        };
        let message = self
            .status
            .condition(type_)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        self.plan.workload = kueue::finish(view.workload, succeeded, &message, self.now());
    }

    /// No pods run: those there are deleted with their services, the active counts drop to 0,
    /// and the job shows `Suspended` with `reason` and `message` (the user suspended it, or its
    /// Workload is not admitted).
    fn stop(&mut self, job: &ValidJob, reason: &str, message: &str) {
        for pod in self.input.pods {
            if pod.metadata.deletion_timestamp.is_none() {
                self.plan
                    .delete_pods
                    .push(deletion(pod, DeletionCause::Suspend));
            }
        }
        for svc in self.input.services {
            self.plan.delete_services.push(Deletion {
                name: svc.metadata.name.clone().unwrap_or_default(),
                uid: None,
                cause: DeletionCause::Suspend,
            });
        }
        let mut tallies: BTreeMap<ReplicaType, Tally> = BTreeMap::new();
        for rtype in job.replicas.keys() {
            let done = self.completed(job, *rtype);
            tallies.insert(
                *rtype,
                Tally {
                    succeeded: done,
                    ..Tally::default()
                },
            );
        }
        self.write_replica_statuses(job, &tallies);
        if self.status.is_true(JobConditionType::Running) {
            self.condition(
                JobConditionType::Running,
                ConditionStatus::False,
                reason,
                message,
            );
        }
        let news = self
            .status
            .condition(JobConditionType::Suspended)
            .is_none_or(|c| {
                c.status != ConditionStatus::True || c.reason != reason || c.message != message
            });
        if news {
            self.condition(
                JobConditionType::Suspended,
                ConditionStatus::True,
                reason,
                message,
            );
            // The algebra keeps a condition whose reason is unchanged; a Workload's wait is
            // told anew when its message changes (another queue, another shortage).
            let now = self.now();
            if let Some(c) = self
                .status
                .conditions
                .iter_mut()
                .find(|c| c.type_ == JobConditionType::Suspended && c.message != message)
            {
                c.message = message.to_owned();
                c.last_update_time = Some(Time(now));
            }
            self.event(EventType::Normal, reason, message.to_owned(), None);
        }
    }

    /// The recorded completed indexes of `rtype` that are still part of the spec (a scale-down
    /// drops the others, so they never count towards success).
    fn completed(&self, job: &ValidJob, rtype: ReplicaType) -> BTreeSet<i32> {
        self.status
            .completed_indexes
            .get(rtype.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|&index| in_spec(job, rtype, index))
            .collect()
    }

    fn context(&self, job: &ValidJob, rtype: ReplicaType, index: i32) -> PodContext {
        let meta = &self.input.job.metadata;
        let name = object_name(&job.name, rtype, index);
        PodContext {
            job_name: job.name.clone(),
            namespace: job.namespace.clone(),
            job_uid: job.uid.clone(),
            job_labels: meta.labels.clone().unwrap_or_default(),
            job_annotations: meta.annotations.clone().unwrap_or_default(),
            replica_type: rtype.as_str().to_owned(),
            replica_index: index,
            replica_count: job.replicas[&rtype].replicas,
            attempt: self.status.pod_restarts.get(&name).map_or(0, |r| r.count),
        }
    }

    /// The running job: classify every pod, decide success, failure or restarts, create what is
    /// missing.
    fn run(&mut self, job: &ValidJob) -> Result<(), PlanError> {
        let slots = self.pods_by_slot(job);
        let services = self.services_in_spec(job);
        let mut seen = self.observe_replicas(job, &slots)?;
        self.record_completed_indexes(&seen.tallies);
        self.forget_restarts_outside_spec(job);
        let outcome = self.decide(job, &mut seen);
        self.write_replica_statuses(job, &seen.tallies);
        if outcome == Outcome::Finished {
            return Ok(());
        }
        self.create_missing(job, &seen.missing, &services)?;
        self.schedule_rechecks(job, seen.pending);
        Ok(())
    }

    /// The job's pods by replica slot; pods beyond the spec (scale down, removed replica
    /// types) are deleted.
    fn pods_by_slot(&mut self, job: &ValidJob) -> BTreeMap<Slot, Vec<&'i Pod>> {
        let mut by_slot: BTreeMap<Slot, Vec<&Pod>> = BTreeMap::new();
        for pod in self.input.pods {
            if let Some(slot) = replica_of(&pod.metadata) {
                by_slot.entry(slot).or_default().push(pod);
            }
        }
        for (&(rtype, index), pods) in &by_slot {
            if !in_spec(job, rtype, index) {
                for pod in pods {
                    if pod.metadata.deletion_timestamp.is_none() {
                        self.plan
                            .delete_pods
                            .push(deletion(pod, DeletionCause::ScaleDown));
                    }
                }
            }
        }
        by_slot
    }

    /// The slots that have a service; services beyond the spec are deleted.
    fn services_in_spec(&mut self, job: &ValidJob) -> BTreeSet<Slot> {
        let mut existing = BTreeSet::new();
        for svc in self.input.services {
            let Some((rtype, index)) = replica_of(&svc.metadata) else {
                continue;
            };
            if in_spec(job, rtype, index) {
                existing.insert((rtype, index));
            } else {
                self.plan.delete_services.push(Deletion {
                    name: svc.metadata.name.clone().unwrap_or_default(),
                    uid: None,
                    cause: DeletionCause::ScaleDown,
                });
            }
        }
        existing
    }

    /// Classifies the current pod of every slot of the spec and sorts it into the tallies.
    fn observe_replicas(
        &mut self,
        job: &ValidJob,
        slots: &BTreeMap<Slot, Vec<&'i Pod>>,
    ) -> Result<Observed<'i>, PlanError> {
        let mut seen = Observed::default();
        for (&rtype, replica) in &job.replicas {
            let mut tally = Tally {
                succeeded: self.completed(job, rtype),
                ..Tally::default()
            };
            for index in 0..replica.replicas {
                let pods = slots
                    .get(&(rtype, index))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                match self.current_pod(pods) {
                    Some(pod) => {
                        self.observe_pod(job, (rtype, index), pod, &mut tally, &mut seen)?
                    }
                    None if !tally.succeeded.contains(&index) => seen.missing.push((rtype, index)),
                    None => {}
                }
            }
            seen.tallies.insert(rtype, tally);
        }
        Ok(seen)
    }

    /// Classifies one slot's current pod and counts it.
    fn observe_pod(
        &mut self,
        job: &ValidJob,
        (rtype, index): Slot,
        pod: &'i Pod,
        tally: &mut Tally,
        seen: &mut Observed<'i>,
    ) -> Result<(), PlanError> {
        let replica = &job.replicas[&rtype];
        if self.restart_in_progress(pod) {
            // The deletion was recorded but the cache still shows the pod: ask again, count
            // no restart.
            self.plan
                .delete_pods
                .push(deletion(pod, DeletionCause::Restart));
            tally.restarting += 1;
            return Ok(());
        }
        let verdict = self.verdict(job, (rtype, index), pod)?;
        for event in pod_problem_events(pod) {
            self.plan.events.push(event);
        }
        if replica.restart_policy == RestartPolicy::ExitCode && pod_phase(pod) == "Failed" {
            self.exited_with_code_event(pod);
        }
        if matches!(
            replica.restart_policy,
            RestartPolicy::OnFailure | RestartPolicy::Always
        ) {
            seen.in_place_restarts += i64::from(container_restarts(pod));
        }
        match verdict.phase {
            VerdictPhase::Running => tally.active += 1,
            VerdictPhase::Succeeded => {
                tally.succeeded.insert(index);
            }
            VerdictPhase::RetryableFailure if replica.restart_policy != RestartPolicy::Never => {
                tally.restarting += 1;
                seen.retryable.push(Judged {
                    rtype,
                    pod,
                    verdict,
                });
            }
            VerdictPhase::RetryableFailure => {
                tally.failed += 1;
            }
            VerdictPhase::PermanentFailure => {
                tally.failed += 1;
                seen.permanent.push(Judged {
                    rtype,
                    pod,
                    verdict,
                });
            }
            _ => seen.pending = true,
        }
        Ok(())
    }

    /// The policies' verdict on a pod (a terminating pod is not asked about), with their notes
    /// recorded and a recheck at the time the verdict may change on its own.
    fn verdict(
        &mut self,
        job: &ValidJob,
        (rtype, index): Slot,
        pod: &Pod,
    ) -> Result<Verdict, PlanError> {
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(terminating_verdict(
                pod.metadata.name.as_deref().unwrap_or_default(),
            ));
        }
        let input = self.input;
        let ctx = self.context(job, rtype, index);
        let Classified { verdict, notes } = input.policies.classify(&ctx, pod, input.now)?;
        self.policy_notes(&job.uid, notes);
        // Time alone changes this verdict then: look again at that moment rather than at the
        // next periodic pass.
        if let Some(at) = verdict.recheck_at.filter(|at| *at > self.now()) {
            self.requeue(until(self.now(), at));
        }
        Ok(verdict)
    }

    /// Keeps the indexes whose work is done; those of replicas no longer in the spec are
    /// dropped with them.
    fn record_completed_indexes(&mut self, tallies: &BTreeMap<ReplicaType, Tally>) {
        self.status.completed_indexes = tallies
            .iter()
            .filter(|(_, tally)| !tally.succeeded.is_empty())
            .map(|(rtype, tally)| {
                let indexes = tally.succeeded.iter().copied().collect();
                (rtype.as_str().to_owned(), indexes)
            })
            .collect();
    }

    /// Drops the restart records of indexes that are no longer part of the spec.
    fn forget_restarts_outside_spec(&mut self, job: &ValidJob) {
        let wanted: BTreeSet<String> = job
            .replicas
            .iter()
            .flat_map(|(&t, r)| (0..r.replicas).map(move |i| object_name(&job.name, t, i)))
            .collect();
        self.status
            .pod_restarts
            .retain(|name, _| wanted.contains(name));
    }

    /// Creates the missing pods and services, unless gang scheduling holds them back.
    fn create_missing(
        &mut self,
        job: &ValidJob,
        missing: &[Slot],
        services: &BTreeSet<Slot>,
    ) -> Result<(), PlanError> {
        // As 1.9: while Volcano has not admitted the group, neither pods nor services are
        // created, so a job that does not fit holds nothing.
        if self.sync_pod_group(job).is_some() {
            return Ok(());
        }
        for &(rtype, index) in missing {
            self.create_pod(job, rtype, index)?;
        }
        for (&rtype, replica) in &job.replicas {
            for index in 0..replica.replicas {
                if !services.contains(&(rtype, index)) {
                    self.plan
                        .create_services
                        .push(build_service(job, rtype, index));
                }
            }
        }
        Ok(())
    }

    /// Starts the clock on the first pass, and asks to be called again when the deadline ends
    /// and, while pods are on their way, periodically.
    fn schedule_rechecks(&mut self, job: &ValidJob, pending: bool) {
        if self.status.start_time.is_none() {
            self.status.start_time = Some(Time(self.now()));
        }
        if let (Some(ads), Some(start)) = (
            job.run_policy.active_deadline_seconds,
            self.status.start_time.clone(),
        ) && let Some(deadline) = later(start.0, ads)
        {
            self.requeue(until(self.now(), deadline));
        }
        if pending {
            self.requeue(PENDING_RECHECK);
        }
    }

    /// Picks the pod that represents a replica index: one not being deleted if there is one.
    fn current_pod<'p>(&self, pods: &[&'p Pod]) -> Option<&'p Pod> {
        pods.iter()
            .find(|p| p.metadata.deletion_timestamp.is_none() && !self.restart_in_progress(p))
            .or_else(|| pods.first())
            .copied()
    }

    fn restart_in_progress(&self, pod: &Pod) -> bool {
        let (Some(name), Some(uid)) = (&pod.metadata.name, &pod.metadata.uid) else {
            return false;
        };
        self.status
            .pod_restarts
            .get(name)
            .is_some_and(|r| &r.last_deleted_uid == uid)
    }

    fn exited_with_code_event(&mut self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let code = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.name == tfjob_api::labels::DEFAULT_CONTAINER_NAME)
            })
            .and_then(|c| c.state.as_ref()?.terminated.as_ref())
            .map(|t| t.exit_code);
        if let Some(code) = code {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let event = JobEvent::new(
                EventType::Normal,
                "ExitedWithCode",
                format!("Pod: {}.{name} exited with code {code}", self.namespace),
                Some(format!("{uid}/ExitedWithCode")),
            );
            self.plan.events.push(event.about("Pod", &name));
        }
    }

    /// Success, failure, restarts and the Running condition, in that order.
    fn decide(&mut self, job: &ValidJob, seen: &mut Observed<'_>) -> Outcome {
        // Deliberate fix: success is evaluated first, so a job never has both outcomes.
        if self.succeeded(job, &seen.tallies) {
            self.succeed();
            return Outcome::Finished;
        }
        if let Some(message) = self.permanent_failure(job, seen) {
            self.fail(&message);
            return Outcome::Finished;
        }
        if let Some(message) = self.limit_reached(job, seen) {
            self.fail(&message);
            self.free_resources(&mut seen.tallies);
            return Outcome::Finished;
        }
        // A replica that failed for good fails the job before anything is restarted, so a
        // failing job never also shows Restarting or deletes pods for nothing.
        if let Some(message) = self.failed_replica(job, &seen.tallies) {
            self.fail(&message);
            return Outcome::Finished;
        }
        for j in &seen.retryable {
            self.restart(j);
        }
        if seen.retryable.is_empty() && running(job, &seen.tallies) {
            let message = format!("TFJob {}/{} is running.", self.namespace, self.name);
            self.condition(
                JobConditionType::Running,
                ConditionStatus::True,
                "TFJobRunning",
                &message,
            );
        }
        Outcome::Continue
    }

    fn succeed(&mut self) {
        let message = format!(
            "TFJob {}/{} successfully completed.",
            self.namespace, self.name
        );
        self.condition(
            JobConditionType::Succeeded,
            ConditionStatus::True,
            "TFJobSucceeded",
            &message,
        );
        self.status.completion_time.get_or_insert(Time(self.now()));
        self.event(EventType::Normal, "TFJobSucceeded", message, None);
        self.plan.transitions.push(Transition::Succeeded);
    }

    /// The failure message of the first pod the policies failed for good, unless its replica
    /// type tolerates failures.
    fn permanent_failure(&self, job: &ValidJob, seen: &Observed<'_>) -> Option<String> {
        let j = seen
            .permanent
            .iter()
            .find(|j| !tolerates_failures(job, j.rtype))?;
        let base = match job.replicas[&j.rtype].restart_policy {
            RestartPolicy::ExitCode => format!(
                "job \"{}\" is failing because \"{}\" replica(s) failed.",
                self.name, j.rtype
            ),
            _ => format!(
                "TFJob {}/{} has failed because {} {} replica(s) failed.",
                self.namespace, self.name, seen.tallies[&j.rtype].failed, j.rtype
            ),
        };
        Some(format!("{base} {}", verdict_detail(j.pod, &j.verdict)))
    }

    /// The failure message when the backoff limit or the active deadline is reached.
    fn limit_reached(&self, job: &ValidJob, seen: &Observed<'_>) -> Option<String> {
        let restarts_done =
            i64::from(self.status.restart_count.unwrap_or(0)) + seen.in_place_restarts;
        // The restarts this reconcile needs must fit within the limit: restarts never exceed it,
        // and no pod is deleted for a restart the job cannot afford.
        let needed = seen.retryable.len() as i64;
        if let Some(limit) = job.run_policy.backoff_limit.map(i64::from)
            && restarts_done + needed > limit
        {
            return Some(format!(
                "Job {} has failed because it has reached the specified backoff limit",
                self.name
            ));
        }
        if let (Some(ads), Some(start)) = (
            job.run_policy.active_deadline_seconds,
            self.status.start_time.clone(),
        ) && later(start.0, ads).is_some_and(|deadline| self.now() >= deadline)
        {
            return Some(format!(
                "Job {} has failed because it was active longer than specified deadline",
                self.name
            ));
        }
        None
    }

    /// The failure message of the first replica type with failed pods that does not tolerate
    /// them.
    fn failed_replica(
        &self,
        job: &ValidJob,
        tallies: &BTreeMap<ReplicaType, Tally>,
    ) -> Option<String> {
        let (rtype, tally) = tallies
            .iter()
            .find(|(rtype, tally)| tally.failed > 0 && !tolerates_failures(job, **rtype))?;
        Some(format!(
            "TFJob {}/{} has failed because {} {} replica(s) failed.",
            self.namespace, self.name, tally.failed, rtype
        ))
    }

    fn succeeded(&self, job: &ValidJob, tallies: &BTreeMap<ReplicaType, Tally>) -> bool {
        let all_done = |rtype: ReplicaType| {
            let expected = job.replicas.get(&rtype).map_or(0, |r| r.replicas);
            tallies
                .get(&rtype)
                .is_some_and(|t| t.succeeded.len() as i64 >= i64::from(expected))
        };
        if job.has_chief_or_master() {
            [ReplicaType::Chief, ReplicaType::Master]
                .into_iter()
                .filter(|t| job.replicas.contains_key(t))
                .all(all_done)
        } else if job.replicas.contains_key(&ReplicaType::Worker) {
            let worker0 = tallies
                .get(&ReplicaType::Worker)
                .is_some_and(|t| t.succeeded.contains(&0));
            all_done(ReplicaType::Worker)
                || (worker0 && job.success_policy != SuccessPolicy::AllWorkers)
        } else {
            false
        }
    }

    fn fail(&mut self, message: &str) {
        if self.condition(
            JobConditionType::Failed,
            ConditionStatus::True,
            "TFJobFailed",
            message,
        ) {
            self.status.completion_time.get_or_insert(Time(self.now()));
            self.event(EventType::Warning, "TFJobFailed", message.to_owned(), None);
            self.plan.transitions.push(Transition::Failed);
        }
    }

    /// Deliberate fix: a job that failed on its backoff limit or deadline frees the resources of
    /// its running and pending pods; finished pods stay for their logs (cleanPodPolicy decides).
    fn free_resources(&mut self, tallies: &mut BTreeMap<ReplicaType, Tally>) {
        for pod in self.input.pods {
            let phase = pod_phase(pod);
            if (phase == "Running" || phase == "Pending")
                && pod.metadata.deletion_timestamp.is_none()
            {
                self.delete_pod_and_service(pod, DeletionCause::JobFailed);
            }
        }
        for tally in tallies.values_mut() {
            tally.active = 0;
        }
    }

    fn restart(&mut self, j: &Judged<'_>) {
        let name = j.pod.metadata.name.clone().unwrap_or_default();
        let uid = j.pod.metadata.uid.clone().unwrap_or_default();
        let record = self.status.pod_restarts.entry(name.clone()).or_default();
        record.count += 1;
        record.last_deleted_uid = uid.clone();
        // In-place container restarts of the deleted pod stay counted against backoffLimit.
        let total = self.status.restart_count.unwrap_or(0) + 1 + container_restarts(j.pod);
        self.status.restart_count = Some(total);
        self.plan
            .delete_pods
            .push(deletion(j.pod, DeletionCause::Restart));
        let message = format!(
            "job {} is restarting because {} replica(s) failed.",
            self.name, j.rtype
        );
        self.condition(
            JobConditionType::Restarting,
            ConditionStatus::True,
            "TFJobRestarting",
            &message,
        );
        let event = JobEvent::new(
            EventType::Warning,
            "TFJobRestarting",
            format!("{message} {}", verdict_detail(j.pod, &j.verdict)),
            Some(format!("{uid}/TFJobRestarting")),
        );
        self.plan.events.push(event.about("Pod", &name));
        self.plan.transitions.push(Transition::Restarted);
    }

    fn create_pod(
        &mut self,
        job: &ValidJob,
        rtype: ReplicaType,
        index: i32,
    ) -> Result<(), PlanError> {
        let mut base = build_pod(
            job,
            rtype,
            index,
            self.input.settings.cluster_domain.as_deref(),
        );
        if let Some(scheduler) = &self.input.settings.gang_scheduler {
            // Before the policies, so they see the pod as it will be; the guard keeps them
            // from taking it out of its group.
            gang::join_group(&mut base, scheduler, &job.name, rtype);
            let key = format!("{}/SettedPodTemplateSchedulerName", job.uid);
            let warned = self
                .plan
                .events
                .iter()
                .any(|e| e.once_key.as_deref() == Some(key.as_str()));
            if !warned && gang::names_another_scheduler(job, scheduler) {
                self.event(
                    EventType::Warning,
                    "SettedPodTemplateSchedulerName",
                    "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten".into(),
                    Some(key),
                );
            }
        }
        let ctx = self.context(job, rtype, index);
        let shaped = self.input.policies.shape_pod(&ctx, base)?;
        for skipped in &shaped.skipped {
            self.event(
                EventType::Warning,
                "PolicyIgnored",
                format!(
                    "{skipped}; pod {} created without it",
                    object_name(&job.name, rtype, index)
                ),
                Some(format!(
                    "{}/{}/{}",
                    job.uid, skipped.policy, skipped.category
                )),
            );
        }
        self.policy_notes(&job.uid, shaped.notes.clone());
        let template_policy = job.replicas[&rtype]
            .template
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .is_some();
        if template_policy {
            self.event(
                EventType::Warning,
                "SetPodTemplateRestartPolicy",
                "Restart policy in pod template will be overwritten by restart policy in replica spec".into(),
                Some(format!("{}/{rtype}/SetPodTemplateRestartPolicy", job.uid)),
            );
        }
        self.plan.create_pods.push(shaped.pod);
        Ok(())
    }

    fn delete_pod_and_service(&mut self, pod: &Pod, cause: DeletionCause) {
        self.plan.delete_pods.push(deletion(pod, cause));
        let name = pod.metadata.name.clone().unwrap_or_default();
        if self
            .input
            .services
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(&name))
        {
            self.plan.delete_services.push(Deletion {
                name,
                uid: None,
                cause,
            });
        }
    }

    fn write_replica_statuses(&mut self, job: &ValidJob, tallies: &BTreeMap<ReplicaType, Tally>) {
        let mut statuses = BTreeMap::new();
        for (rtype, tally) in tallies {
            let (label_selector, selector) = replica_selector(&job.name, *rtype);
            statuses.insert(
                rtype.as_str().to_owned(),
                ReplicaStatus {
                    active: tally.active,
                    succeeded: tally.succeeded.len() as i32,
                    failed: tally.failed + tally.restarting,
                    label_selector: Some(label_selector),
                    selector: Some(selector),
                },
            );
        }
        self.status.replica_statuses = statuses;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Finished,
    Continue,
}

/// Whether failed pods of `rtype` leave the job running (dynamic workers).
fn tolerates_failures(job: &ValidJob, rtype: ReplicaType) -> bool {
    job.enable_dynamic_worker && rtype == ReplicaType::Worker
}

/// Whether the job counts as running: its chief or master is, or without one a worker.
fn running(job: &ValidJob, tallies: &BTreeMap<ReplicaType, Tally>) -> bool {
    if job.has_chief_or_master() {
        tallies
            .iter()
            .any(|(t, tally)| t.is_chief_or_master() && tally.active > 0)
    } else {
        tallies
            .get(&ReplicaType::Worker)
            .is_some_and(|t| t.active > 0)
    }
}

fn in_spec(job: &ValidJob, rtype: ReplicaType, index: i32) -> bool {
    job.replicas
        .get(&rtype)
        .is_some_and(|r| index >= 0 && index < r.replicas)
}

fn deletion(pod: &Pod, cause: DeletionCause) -> Deletion {
    Deletion {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        cause,
    }
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn container_restarts(pod: &Pod) -> i32 {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .sum()
}

/// A pod someone else is deleting (node drained, manual delete): it will not finish its work.
fn terminating_verdict(name: &str) -> Verdict {
    Verdict {
        phase: VerdictPhase::RetryableFailure,
        reason: "Terminating".into(),
        message: format!("pod {name} is being deleted"),
        kind: Some(crate::policy::FailureKind::System),
        occurred_at: None,
        recheck_at: None,
        policy: crate::native::NATIVE_POLICY_NAME.into(),
    }
}

/// `Pod <name>: <reason> (policy <policy>): <message>`, the part of a condition or event that
/// says which pod failed and who decided.
fn verdict_detail(pod: &Pod, verdict: &Verdict) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    // Conditions and events are one line: the classifier's multi-line detail is folded.
    let mut message = verdict
        .message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if message.len() > MAX_DETAIL {
        tfjob_policy_logic::text::truncate(&mut message, MAX_DETAIL);
        message.push('…');
    }
    format!(
        "Pod {name}: {} (policy {}): {}",
        verdict.reason,
        verdict.policy,
        message.trim()
    )
}

/// `t + secs`, or `None` when that is past the last representable instant (a deadline or TTL
/// that far away never fires).
fn later(t: Timestamp, secs: i64) -> Option<Timestamp> {
    t.checked_add(jiff::SignedDuration::from_secs(secs)).ok()
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}
