//! Gang scheduling: the PodGroup a job gets and how its pods join it, as training-operator 1.9
//! made them for Volcano and for scheduler-plugins' coscheduling.
//!
//! Distributed TensorFlow needs all of its replicas or none; a gang scheduler binds a group's
//! pods only together. The operator's part is to describe the group (a PodGroup named after the
//! job, owned by it) and to mark each pod as a member. With Volcano, pods are not even created
//! until Volcano has admitted the group (phase `Inqueue` or later), so a job that does not fit
//! holds no pods at all.
//!
//! Pure functions over the job, the observed PodGroup and the cluster's priority classes; the
//! controller reads and writes the objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde_json::{Map, Value, json};
use tfjob_api::ReplicaType;
use tfjob_api::labels::{
    DEFAULT_QUEUE, SCHEDULER_PLUGINS_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION, VOLCANO_SCHEDULER,
    VOLCANO_TASK_ANNOTATION,
};
use tfjob_api::validation::ValidJob;
use tfjob_policy_logic::quantity::Quantity;

use crate::objects::owner_reference;

/// Which gang scheduler the operator works with, chosen by `--gang-scheduler-name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangScheduler {
    /// Volcano: `scheduling.volcano.sh/v1beta1` PodGroups, pods created once admitted.
    Volcano,
    /// scheduler-plugins' coscheduling, served by the scheduler of this name:
    /// `scheduling.x-k8s.io/v1alpha1` PodGroups, pods created at once.
    SchedulerPlugins(String),
}

impl GangScheduler {
    /// The backend a `--gang-scheduler-name` selects: `volcano` in any case, or
    /// scheduler-plugins under any other name (as 1.9 decided).
    pub fn from_name(name: &str) -> GangScheduler {
        if name.eq_ignore_ascii_case(VOLCANO_SCHEDULER) {
            GangScheduler::Volcano
        } else {
            GangScheduler::SchedulerPlugins(name.to_owned())
        }
    }

    /// The `spec.schedulerName` its pods get.
    pub fn scheduler_name(&self) -> &str {
        match self {
            GangScheduler::Volcano => VOLCANO_SCHEDULER,
            GangScheduler::SchedulerPlugins(name) => name,
        }
    }

    /// API group of its PodGroups.
    pub fn group(&self) -> &'static str {
        match self {
            GangScheduler::Volcano => "scheduling.volcano.sh",
            GangScheduler::SchedulerPlugins(_) => "scheduling.x-k8s.io",
        }
    }

    /// API version of its PodGroups.
    pub fn version(&self) -> &'static str {
        match self {
            GangScheduler::Volcano => "v1beta1",
            GangScheduler::SchedulerPlugins(_) => "v1alpha1",
        }
    }

    /// `group/version`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group(), self.version())
    }
}

/// The kind of both backends' group object.
pub const POD_GROUP_KIND: &str = "PodGroup";
/// The resource name of both backends' group object.
pub const POD_GROUP_PLURAL: &str = "podgroups";

/// What the planner sees of the job's PodGroup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedPodGroup {
    /// `spec`, as stored.
    pub spec: Value,
    /// `status.phase`; `None` while no scheduler has looked at the group.
    pub phase: Option<String>,
    pub uid: Option<String>,
    /// Set while the group is being deleted.
    pub deleting: bool,
}

impl ObservedPodGroup {
    /// Reads the parts the planner needs from a PodGroup object of either backend.
    pub fn from_object(object: &Value) -> ObservedPodGroup {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        ObservedPodGroup {
            spec: object.get("spec").cloned().unwrap_or(Value::Null),
            phase: text("/status/phase"),
            uid: text("/metadata/uid"),
            deleting: object.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

/// A change to the job's PodGroup.
#[derive(Clone, Debug, PartialEq)]
pub enum PodGroupChange {
    /// Create this object (the whole PodGroup).
    Create(Value),
    /// Replace the stored group's `spec` with this one.
    UpdateSpec(Value),
    /// Delete the group (the job finished or is suspended).
    Delete,
}

/// The spec the job's PodGroup should have, as 1.9 filled it: `minMember` is
/// `schedulingPolicy.minAvailable` or the total of replicas; `minResources` is given or summed
/// from the requests of the first `minMember` pods in priority order. For Volcano, a queue
/// already set on the stored group is kept (Kueue and administrators set it there), otherwise
/// the job's queue or `default`.
pub fn desired_spec(
    job: &ValidJob,
    scheduler: &GangScheduler,
    priority_classes: &BTreeMap<String, i32>,
    observed: Option<&ObservedPodGroup>,
) -> Value {
    let policy = &job.run_policy.scheduling;
    let min_member = policy.min_available.unwrap_or_else(|| total_replicas(job));
    let min_resources: BTreeMap<String, K8sQuantity> = match &policy.min_resources {
        Some(given) => given.clone(),
        None => computed_min_resources(job, min_member, priority_classes),
    };
    let mut spec = Map::new();
    // Both backends' Go types omit a zero minMember and empty strings.
    if min_member != 0 {
        spec.insert("minMember".into(), json!(min_member));
    }
    match scheduler {
        GangScheduler::Volcano => {
            let kept_queue = observed
                .and_then(|o| o.spec.get("queue"))
                .and_then(Value::as_str)
                .filter(|q| !q.is_empty());
            let queue = kept_queue
                .or(policy.queue.as_deref().filter(|q| !q.is_empty()))
                .unwrap_or(DEFAULT_QUEUE);
            spec.insert("queue".into(), json!(queue));
            if let Some(pc) = policy.priority_class.as_deref().filter(|p| !p.is_empty()) {
                spec.insert("priorityClassName".into(), json!(pc));
            }
            // Volcano's minResources is a pointer: present, even when empty.
            spec.insert("minResources".into(), json!(min_resources));
        }
        GangScheduler::SchedulerPlugins(_) => {
            if !min_resources.is_empty() {
                spec.insert("minResources".into(), json!(min_resources));
            }
            if let Some(timeout) = policy.schedule_timeout_seconds {
                spec.insert("scheduleTimeoutSeconds".into(), json!(timeout));
            }
        }
    }
    Value::Object(spec)
}

/// A new PodGroup object: named after the job, in its namespace, with its annotations, owned
/// by it.
pub fn new_pod_group(
    job: &ValidJob,
    annotations: &BTreeMap<String, String>,
    scheduler: &GangScheduler,
    spec: Value,
) -> Value {
    let mut metadata = json!({
        "name": job.name,
        "namespace": job.namespace,
        "ownerReferences": [owner_reference(job)],
    });
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    json!({
        "apiVersion": scheduler.api_version(),
        "kind": POD_GROUP_KIND,
        "metadata": metadata,
        "spec": spec,
    })
}

/// What to do with the job's PodGroup while the job runs: create it, bring its spec up to
/// date, or nothing.
pub fn sync(
    job: &ValidJob,
    annotations: &BTreeMap<String, String>,
    scheduler: &GangScheduler,
    priority_classes: &BTreeMap<String, i32>,
    observed: Option<&ObservedPodGroup>,
) -> Option<PodGroupChange> {
    let spec = desired_spec(job, scheduler, priority_classes, observed);
    match observed {
        None => Some(PodGroupChange::Create(new_pod_group(
            job,
            annotations,
            scheduler,
            spec,
        ))),
        Some(o) if o.deleting => None,
        Some(o) if o.spec == spec => None,
        Some(_) => Some(PodGroupChange::UpdateSpec(spec)),
    }
}

/// Why pods must not be created yet, if so: Volcano has not admitted the group (no group, no
/// phase, or `Pending`), as 1.9 held them back. scheduler-plugins never delays creation.
pub fn creation_delay(
    job: &ValidJob,
    scheduler: &GangScheduler,
    observed: Option<&ObservedPodGroup>,
) -> Option<String> {
    if *scheduler != GangScheduler::Volcano {
        return None;
    }
    let group = format!("{}/{}", job.namespace, job.name);
    match observed {
        None => Some(format!(
            "waiting for PodGroup {group} to be created before creating pods"
        )),
        Some(o) if o.deleting => Some(format!(
            "PodGroup {group} is being deleted; pods are created once it is recreated and admitted"
        )),
        Some(o) => match o.phase.as_deref() {
            None => Some(format!(
                "PodGroup {group} has no phase yet: pods are created once volcano admits it (Inqueue)"
            )),
            Some("Pending") => {
                let queue = o
                    .spec
                    .get("queue")
                    .and_then(Value::as_str)
                    .unwrap_or(DEFAULT_QUEUE);
                Some(format!(
                    "PodGroup {group} is Pending in queue {queue:?}: pods are created once volcano admits it (Inqueue), when its minResources fit"
                ))
            }
            Some(_) => None,
        },
    }
}

/// Makes `pod` a member of the job's group: the gang scheduler's name unless the template names
/// a scheduler, and the group (and for Volcano the task) the scheduler reads.
pub fn join_group(pod: &mut Pod, scheduler: &GangScheduler, job_name: &str, rtype: ReplicaType) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    if spec.scheduler_name.as_deref().is_none_or(str::is_empty) {
        spec.scheduler_name = Some(scheduler.scheduler_name().to_owned());
    }
    let meta = &mut pod.metadata;
    match scheduler {
        GangScheduler::Volcano => {
            let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
            annotations.insert(VOLCANO_GROUP_ANNOTATION.into(), job_name.to_owned());
            annotations.insert(VOLCANO_TASK_ANNOTATION.into(), rtype.lower().to_owned());
        }
        GangScheduler::SchedulerPlugins(_) => {
            meta.labels
                .get_or_insert_with(BTreeMap::new)
                .insert(SCHEDULER_PLUGINS_GROUP_LABEL.into(), job_name.to_owned());
        }
    }
}

/// Whether a replica's template names a scheduler other than the gang scheduler (1.9 warns and
/// leaves it).
pub fn names_another_scheduler(job: &ValidJob, scheduler: &GangScheduler) -> bool {
    job.replicas.values().any(|r| {
        r.template
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .is_some_and(|n| !n.is_empty() && n != scheduler.scheduler_name())
    })
}

fn total_replicas(job: &ValidJob) -> i32 {
    job.replicas
        .values()
        .fold(0i32, |sum, r| sum.saturating_add(r.replicas))
}

/// The resources the first `min_member` pods request, taking replica types in descending
/// priority of their pods' priority class (unknown classes count as 0), as 1.9 computed them.
/// Deliberate fix: equal priorities keep the replica types' processing order (Chief, Master,
/// PS, Worker, Evaluator) where 1.9's unstable sort over a map made the result vary between
/// reconciles, and so updated the PodGroup back and forth.
pub fn computed_min_resources(
    job: &ValidJob,
    min_member: i32,
    priority_classes: &BTreeMap<String, i32>,
) -> BTreeMap<String, K8sQuantity> {
    let mut ordered: Vec<(i32, ReplicaType)> = job
        .replicas
        .iter()
        .map(|(&rtype, replica)| {
            let class = replica
                .template
                .spec
                .as_ref()
                .and_then(|s| s.priority_class_name.as_deref())
                .unwrap_or_default();
            (priority_classes.get(class).copied().unwrap_or(0), rtype)
        })
        .collect();
    // Stable: ties stay in processing order.
    ordered.sort_by_key(|&(priority, _)| std::cmp::Reverse(priority));

    let mut totals: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut counted = 0i32;
    'replicas: for (_, rtype) in ordered {
        let replica = &job.replicas[&rtype];
        let containers = replica
            .template
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        for _ in 0..replica.replicas {
            if counted >= min_member {
                break 'replicas;
            }
            counted += 1;
            for container in containers {
                add_requests(&mut totals, container);
            }
        }
    }
    totals
        .into_iter()
        .map(|(name, q)| (name, q.to_k8s()))
        .collect()
}

/// Adds what one container asks for: its requests, or its limits when it gives no requests (the
/// API server defaults requests to limits). Quantities that do not parse are left out: the pod
/// itself is refused for them when it is created, with the API server's message.
fn add_requests(totals: &mut BTreeMap<String, Quantity>, container: &Container) {
    let Some(resources) = &container.resources else {
        return;
    };
    let Some(list) = resources.requests.as_ref().or(resources.limits.as_ref()) else {
        return;
    };
    for (name, value) in list {
        let Ok(q) = Quantity::from_k8s(value) else {
            continue;
        };
        let total = totals.entry(name.clone()).or_insert(Quantity::ZERO);
        // An overflowing sum keeps the largest representable prefix of the total.
        if let Some(sum) = total.checked_add(q) {
            *total = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_api::parse::parse_tfjob_yaml;
    use tfjob_api::validation::validate;

    fn job(yaml: &str) -> ValidJob {
        let mut j = parse_tfjob_yaml(yaml).unwrap();
        j.metadata.uid = Some("uid-1".into());
        validate(&j).unwrap()
    }

    const MIXED: &str = r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: team-a}
spec:
  tfReplicaSpecs:
    PS:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources: {requests: {cpu: "1", memory: 2Gi}}
    Worker:
      replicas: 3
      template:
        spec:
          priorityClassName: high
          containers:
          - name: tensorflow
            image: tf
            resources: {limits: {cpu: 500m, nvidia.com/gpu: "1"}}
          - name: sidecar
            image: side
            resources: {requests: {cpu: 100m}, limits: {cpu: "8"}}
"#;

    fn quantities(map: &BTreeMap<String, K8sQuantity>) -> Vec<(&str, &str)> {
        map.iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect()
    }

    #[test]
    fn min_resources_sum_every_pod_when_all_must_run() {
        let j = job(MIXED);
        let total = computed_min_resources(&j, 4, &BTreeMap::new());
        // PS: 1 cpu, 2Gi; each worker: 500m (limit as request) + 100m, 1 GPU.
        assert_eq!(
            quantities(&total),
            vec![("cpu", "2800m"), ("memory", "2Gi"), ("nvidia.com/gpu", "3")]
        );
    }

    #[test]
    fn min_resources_take_the_highest_priority_replicas_first() {
        let j = job(MIXED);
        let classes = BTreeMap::from([("high".to_owned(), 1000)]);
        let two = computed_min_resources(&j, 2, &classes);
        assert_eq!(
            quantities(&two),
            vec![("cpu", "1200m"), ("nvidia.com/gpu", "2")]
        );
        // Without the class, PS comes first in processing order.
        let two = computed_min_resources(&j, 2, &BTreeMap::new());
        assert_eq!(
            quantities(&two),
            vec![("cpu", "1600m"), ("memory", "2Gi"), ("nvidia.com/gpu", "1")]
        );
        assert!(computed_min_resources(&j, 0, &classes).is_empty());
    }

    #[test]
    fn volcano_spec_defaults_to_all_replicas_and_the_default_queue() {
        let j = job(MIXED);
        let spec = desired_spec(&j, &GangScheduler::Volcano, &BTreeMap::new(), None);
        assert_eq!(
            spec,
            json!({
                "minMember": 4,
                "queue": "default",
                "minResources": {"cpu": "2800m", "memory": "2Gi", "nvidia.com/gpu": "3"}
            })
        );
    }

    #[test]
    fn scheduling_policy_sets_min_member_queue_priority_and_resources() {
        let yaml = MIXED.replace(
            "spec:\n  tfReplicaSpecs:",
            "spec:\n  runPolicy:\n    schedulingPolicy:\n      minAvailable: 2\n      queue: research\n      priorityClass: batch\n      scheduleTimeoutSeconds: 60\n      minResources: {cpu: 1000m}\n  tfReplicaSpecs:",
        );
        let j = job(&yaml);
        let volcano = desired_spec(&j, &GangScheduler::Volcano, &BTreeMap::new(), None);
        assert_eq!(
            volcano,
            json!({"minMember": 2, "queue": "research", "priorityClassName": "batch",
                   "minResources": {"cpu": "1000m"}})
        );
        let plugins = GangScheduler::from_name("scheduler-plugins-scheduler");
        let spec = desired_spec(&j, &plugins, &BTreeMap::new(), None);
        assert_eq!(
            spec,
            json!({"minMember": 2, "minResources": {"cpu": "1000m"}, "scheduleTimeoutSeconds": 60})
        );
    }

    #[test]
    fn a_queue_set_on_the_stored_volcano_group_is_kept() {
        let j = job(MIXED);
        let observed = ObservedPodGroup {
            spec: json!({"queue": "set-by-kueue", "minMember": 4}),
            ..ObservedPodGroup::default()
        };
        let spec = desired_spec(
            &j,
            &GangScheduler::Volcano,
            &BTreeMap::new(),
            Some(&observed),
        );
        assert_eq!(spec["queue"], "set-by-kueue");
    }

    #[test]
    fn a_new_group_is_created_and_an_outdated_one_updated() {
        let j = job(MIXED);
        let annotations = BTreeMap::from([("team".to_owned(), "a".to_owned())]);
        let none = BTreeMap::new();
        let Some(PodGroupChange::Create(object)) =
            sync(&j, &annotations, &GangScheduler::Volcano, &none, None)
        else {
            panic!("expected a create");
        };
        assert_eq!(object["apiVersion"], "scheduling.volcano.sh/v1beta1");
        assert_eq!(object["kind"], "PodGroup");
        assert_eq!(object["metadata"]["name"], "mnist");
        assert_eq!(object["metadata"]["namespace"], "team-a");
        assert_eq!(object["metadata"]["annotations"]["team"], "a");
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(object["metadata"]["ownerReferences"][0]["controller"], true);

        let current = ObservedPodGroup::from_object(&object);
        assert_eq!(
            sync(
                &j,
                &annotations,
                &GangScheduler::Volcano,
                &none,
                Some(&current)
            ),
            None
        );
        let yaml = MIXED.replace(
            "spec:\n  tfReplicaSpecs:",
            "spec:\n  runPolicy:\n    schedulingPolicy: {minAvailable: 1}\n  tfReplicaSpecs:",
        );
        let edited = job(&yaml);
        let Some(PodGroupChange::UpdateSpec(spec)) = sync(
            &edited,
            &annotations,
            &GangScheduler::Volcano,
            &none,
            Some(&current),
        ) else {
            panic!("expected an update");
        };
        assert_eq!(spec["minMember"], 1);
        assert_eq!(spec["minResources"], json!({"cpu": "1", "memory": "2Gi"}));
    }

    #[test]
    fn volcano_holds_pods_back_until_the_group_is_admitted() {
        let j = job(MIXED);
        let phase = |p: Option<&str>| ObservedPodGroup {
            spec: json!({"queue": "default"}),
            phase: p.map(str::to_owned),
            ..ObservedPodGroup::default()
        };
        let volcano = GangScheduler::Volcano;
        assert!(creation_delay(&j, &volcano, None).is_some());
        assert!(creation_delay(&j, &volcano, Some(&phase(None))).is_some());
        let pending = creation_delay(&j, &volcano, Some(&phase(Some("Pending")))).unwrap();
        assert!(
            pending.contains("team-a/mnist is Pending in queue \"default\""),
            "{pending}"
        );
        for admitted in ["Inqueue", "Running", "Unknown"] {
            assert_eq!(
                creation_delay(&j, &volcano, Some(&phase(Some(admitted)))),
                None
            );
        }
        let plugins = GangScheduler::from_name("scheduler-plugins-scheduler");
        assert_eq!(creation_delay(&j, &plugins, None), None);
    }

    #[test]
    fn pods_join_the_group_and_keep_a_scheduler_their_template_names() {
        let mut pod = Pod::default();
        join_group(
            &mut pod,
            &GangScheduler::Volcano,
            "mnist",
            ReplicaType::Worker,
        );
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("volcano")
        );
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[VOLCANO_GROUP_ANNOTATION], "mnist");
        assert_eq!(annotations[VOLCANO_TASK_ANNOTATION], "worker");

        let mut pod = Pod::default();
        pod.spec.get_or_insert_with(Default::default).scheduler_name = Some("custom".into());
        let plugins = GangScheduler::from_name("scheduler-plugins-scheduler");
        join_group(&mut pod, &plugins, "mnist", ReplicaType::PS);
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("custom")
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[SCHEDULER_PLUGINS_GROUP_LABEL],
            "mnist"
        );
        assert!(pod.metadata.annotations.is_none());
    }

    #[test]
    fn another_scheduler_in_a_template_is_noticed() {
        let j = job(MIXED);
        assert!(!names_another_scheduler(&j, &GangScheduler::Volcano));
        let custom = job(&MIXED.replace("priorityClassName: high", "schedulerName: custom"));
        assert!(names_another_scheduler(&custom, &GangScheduler::Volcano));
    }
}
