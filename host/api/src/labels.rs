//! Label keys, values and other names that form the operator's external contract.
//!
//! They are byte-identical to Kubeflow training-operator 1.9 so that existing label selectors,
//! dashboards and scripts keep matching the objects this operator creates.

/// Names the operator that owns an object.
pub const OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
/// The value of [`OPERATOR_NAME`] on every object this operator creates.
pub const OPERATOR_NAME_VALUE: &str = "tfjob-controller";
/// The TFJob an object belongs to.
pub const JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Lower-case replica type (`ps`, `worker`, `chief`, `master`, `evaluator`).
pub const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
/// Replica index, decimal.
pub const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// `master` on the pod that decides the job's success.
pub const JOB_ROLE: &str = "training.kubeflow.org/job-role";
/// The value of [`JOB_ROLE`].
pub const JOB_ROLE_MASTER: &str = "master";

/// The port name whose `containerPort` is advertised in `TF_CONFIG`.
pub const DEFAULT_PORT_NAME: &str = "tfjob-port";
/// The port used when the `tensorflow` container declares no `tfjob-port`.
pub const DEFAULT_PORT: i32 = 2222;
/// The container that gets `TF_CONFIG` and whose exit code decides `ExitCode` restarts.
pub const DEFAULT_CONTAINER_NAME: &str = "tensorflow";

/// `spec.runPolicy.managedBy` value meaning "this operator".
pub const MANAGED_BY_TRAINING_OPERATOR: &str = "kubeflow.org/training-operator";
/// `spec.runPolicy.managedBy` value meaning "Kueue's MultiKueue dispatches this job".
pub const MANAGED_BY_MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// Job label naming the Kueue LocalQueue the job waits in. While it is set, what Kueue placed
/// in the pod templates (node selector, tolerations, labels, scheduling gates) is Kueue's.
pub const KUEUE_QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";

/// The name this operator uses as field manager and event reporter.
pub const CONTROLLER_NAME: &str = "tfjob-controller";

/// The scheduler name that selects Volcano as the gang scheduler (any other gang scheduler
/// name means scheduler-plugins' coscheduling).
pub const VOLCANO_SCHEDULER: &str = "volcano";
/// Pod annotation naming the Volcano PodGroup the pod belongs to.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Pod annotation naming the Volcano task (the lower-case replica type).
pub const VOLCANO_TASK_ANNOTATION: &str = "volcano.sh/task-spec";
/// Pod label naming the scheduler-plugins PodGroup the pod belongs to.
pub const SCHEDULER_PLUGINS_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The Volcano queue a PodGroup goes to when the job names none.
pub const DEFAULT_QUEUE: &str = "default";
