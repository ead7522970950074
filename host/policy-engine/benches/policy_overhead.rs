//! What the sandbox costs: each default Wasm policy against the same decision logic called
//! natively, and against the floor of a JSON contract, per hook, in one criterion run.
//!
//! - `<hook>/wasm`: one full evaluation through `PolicyEngine::{decorate, override_resources,
//!   classify}` of the embedded default policy (compiled once before measuring). Every call
//!   builds a fresh store and instance with the operator's default limits (deadline, memory
//!   cap, no ambient authority), exactly as the operator evaluates a policy.
//! - `<hook>/native`: the `tfjob_policy_logic` function the guest runs, with the work the guest
//!   does around it: decoding and validating the settings document, decoding the JSON input
//!   into k8s-openapi types, deciding, and encoding the result.
//! - `<hook>/floor`: what any policy behind a JSON contract pays at least, whatever it decides.
//!   For decoration, `serde_json` parsing the pod into a `Value` and serialising it again (a
//!   policy must read the pod it returns); for classification, parsing the observed pod alone
//!   (the verdict is a small record); for resources, whose input is a hundred bytes, the
//!   sandbox itself: a fresh instance of a minimal component ([`FLOOR_RESOURCES_WAT`]) whose
//!   `override-resources` returns its input at once, called through the same
//!   `PolicyEngine::override_resources` path with the same limits.
//!
//! The inputs are a TFJob worker pod as the operator builds it (4-6 KB of JSON, checked at
//! start) and, for classification, the same pod observed after its `tensorflow` container
//! failed. After the groups the medians of each hook are printed with the ratios wasm/native
//! and wasm/floor, and whether wasm/floor meets the hook's target ([`TARGETS`]); the medians are
//! read from the `estimates.json` criterion writes for this run (not timed separately).
//!
//! Run: `cargo bench -p tfjob-policy-engine --bench policy_overhead`

use std::borrow::Cow;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use criterion::Criterion;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};
use tfjob_policy_engine::bindings::{self, JobContext as WitContext};
use tfjob_policy_engine::{CompiledPolicy, Hook, PolicyEngine, SandboxLimits, defaults};
use tfjob_policy_logic::classify::classify_pod;
use tfjob_policy_logic::classify_settings::ClassifySettingsDoc;
use tfjob_policy_logic::context::{INTERRUPTIBLE_ANNOTATION, JobContext};
use tfjob_policy_logic::decorate::{DecorateSettings, decorate_pod};
use tfjob_policy_logic::json::from_json;
use tfjob_policy_logic::resources::{ResourceRules, ResourceSettings, override_resources};
use tfjob_policy_logic::settings::settings_from_json;

#[path = "support/medians.rs"]
mod medians;
use medians::{criterion_dir, median_ns};

const GROUPS: [&str; 3] = ["decorate", "resources", "classify"];
const NOW: &str = "2026-01-01T00:20:00Z";
const CONTAINER: &str = "tensorflow";

/// Accelerator mounts and variables, resource, interruptible and default tolerations, labels,
/// annotations, node selectors and a scheduler: every rule of the decoration has work to do.
const DECORATE_SETTINGS: &str = r#"{
  "defaultEnvVars": {"PLATFORM": "ml-prod", "HTTPS_PROXY": "http://proxy.internal:3128"},
  "accelerators": {
    "nvidia.com/gpu": {
      "volumes": [
        {"name": "nvidia-driver", "hostPath": "/usr/local/nvidia", "mountPath": "/usr/local/nvidia"},
        {"name": "cuda-libs", "hostPath": "/usr/lib/cuda", "mountPath": "/usr/lib/cuda"}
      ],
      "envVars": {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/lib/cuda/lib64", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    }
  },
  "resourceTolerations": {
    "nvidia.com/gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
  },
  "interruptibleTolerations": [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
  "defaultTolerations": [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
  ],
  "defaultLabels": {"platform.example.com/tier": "training"},
  "defaultAnnotations": {"platform.example.com/cost-center": "ml-research"},
  "nodeSelector": {"node.kubernetes.io/pool": "gpu"},
  "interruptibleNodeSelector": {"cloud.google.com/gke-spot": "true"},
  "schedulerName": "volcano"
}"#;

/// GPU renaming, explicit default requests and caps on every handled resource.
const RESOURCE_SETTINGS: &str = r#"{
  "gpuResourceName": "nvidia.com/gpu",
  "defaults": {"requests": {"cpu": "500m", "memory": "1Gi"}},
  "limits": {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "4"}
}"#;

const CLASSIFY_SETTINGS: &str = r#"{"imagePullBackoffGracePeriod": "5m", "podPendingTimeout": "30m", "oomKilledIsPermanent": false}"#;

/// The issue's targets: the most each hook's Wasm median may be, as a multiple of its floor.
const TARGETS: [(&str, f64); 3] = [("decorate", 2.5), ("resources", 2.0), ("classify", 1.5)];

/// The floor of the resources hook: a component that does nothing but cross the boundary. Its
/// `override-resources` returns the `resources` argument as it came, so the host lowers the same
/// arguments and lifts a result of the same kind as with the default policy; nothing is
/// imported, no settings are read.
///
/// The arguments do not fit in 16 flat values, so the host writes them into guest memory (through
/// the bump allocator `realloc`) and passes a pointer: the job context record takes bytes 0..60
/// (five strings and two lists of 8 bytes each, three `s32`), then `settings` at 60,
/// `container-name` at 68 and `resources` at 76 (pointer) and 80 (length). The result is written
/// to a return area: the `ok` case (0) at byte 0, the string's pointer and length at 4 and 8.
///
/// The exported interface instance is `tests/data/resources-export-0.1.0.wat`, built as
/// `wit-component` builds one.
const FLOOR_RESOURCES_WAT: &str = concat!(
    r#"
(component
  (core module $m
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local $end i32)
      (local.set $p (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
        (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
      (local.set $end (i32.add (local.get $p) (local.get 3)))
      (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
        (then
          (if (i32.eq (i32.const -1) (memory.grow
                (i32.sub
                  (i32.shr_u (i32.add (local.get $end) (i32.const 65535)) (i32.const 16))
                  (memory.size))))
            (then unreachable))))
      (global.set $heap (local.get $end))
      (local.get $p))
    (func (export "override-resources") (param $args i32) (result i32)
      (i32.store8 (i32.const 16) (i32.const 0))
      (i32.store (i32.const 20) (i32.load offset=76 (local.get $args)))
      (i32.store (i32.const 24) (i32.load offset=80 (local.get $args)))
      (i32.const 16)))
  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias core export $i "override-resources" (core func $override))
"#,
    include_str!("../tests/data/resources-export-0.1.0.wat"),
    ")\n"
);

fn logic_context() -> JobContext {
    JobContext {
        job_name: "resnet50-imagenet".into(),
        namespace: "ml-research".into(),
        job_uid: "6f1c2b8e-3d4a-4c5e-9f70-1a2b3c4d5e6f".into(),
        job_labels: [("team".to_owned(), "vision".to_owned())].into(),
        job_annotations: [(INTERRUPTIBLE_ANNOTATION.to_owned(), "true".to_owned())].into(),
        replica_type: "Worker".into(),
        replica_index: 1,
        replica_count: 4,
        attempt: 0,
    }
}

fn wit_context(ctx: &JobContext) -> WitContext {
    let pairs = |m: &std::collections::BTreeMap<String, String>| {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    WitContext {
        job_name: ctx.job_name.clone(),
        namespace: ctx.namespace.clone(),
        job_uid: ctx.job_uid.clone(),
        job_labels: pairs(&ctx.job_labels),
        job_annotations: pairs(&ctx.job_annotations),
        replica_type: ctx.replica_type.clone(),
        replica_index: ctx.replica_index,
        replica_count: ctx.replica_count,
        attempt: ctx.attempt,
    }
}

/// Worker 1 of a 4-worker, 2-PS TFJob as `build_pod` makes it: replica labels, owner reference,
/// the template's annotations, env (TF_CONFIG last), volumes, a GPU, tolerations, affinity.
fn worker_pod() -> Pod {
    let tf_config = json!({
        "cluster": {
            "ps": [
                "resnet50-imagenet-ps-0.ml-research.svc:2222",
                "resnet50-imagenet-ps-1.ml-research.svc:2222"
            ],
            "worker": [
                "resnet50-imagenet-worker-0.ml-research.svc:2222",
                "resnet50-imagenet-worker-1.ml-research.svc:2222",
                "resnet50-imagenet-worker-2.ml-research.svc:2222",
                "resnet50-imagenet-worker-3.ml-research.svc:2222"
            ]
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud"
    })
    .to_string();
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "resnet50-imagenet-worker-1",
            "namespace": "ml-research",
            "labels": {
                "app": "resnet50",
                "team": "vision",
                "training.kubeflow.org/job-name": "resnet50-imagenet",
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/replica-index": "1",
                "training.kubeflow.org/replica-type": "worker"
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "sidecar.istio.io/inject": "false",
                "kubectl.kubernetes.io/default-container": "tensorflow"
            },
            "ownerReferences": [{
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": "resnet50-imagenet",
                "uid": "6f1c2b8e-3d4a-4c5e-9f70-1a2b3c4d5e6f",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "restartPolicy": "Never",
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "training",
            "terminationGracePeriodSeconds": 60,
            "priorityClassName": "batch-high",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
            "initContainers": [{
                "name": "fetch-dataset",
                "image": "gcr.io/ml-research/dataset-fetcher:1.4.2",
                "command": ["sh", "-c", "gsutil -m rsync -r gs://ml-datasets/imagenet/shards /data/imagenet"],
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                "volumeMounts": [{"name": "dataset", "mountPath": "/data"}]
            }],
            "containers": [{
                "name": "tensorflow",
                "image": "gcr.io/ml-research/resnet50-train:2.15.0-gpu",
                "imagePullPolicy": "IfNotPresent",
                "command": ["python", "/opt/train/resnet50.py"],
                "args": [
                    "--data_dir=/data/imagenet",
                    "--model_dir=/checkpoints/resnet50",
                    "--batch_size=256",
                    "--train_epochs=90",
                    "--distribution_strategy=multi_worker_mirrored"
                ],
                "workingDir": "/opt/train",
                "ports": [
                    {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}
                ],
                "env": [
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                    {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"},
                    {"name": "NCCL_DEBUG", "value": "WARN"},
                    {"name": "GCS_BUCKET", "value": "gs://ml-research-checkpoints"},
                    {"name": "OMP_NUM_THREADS", "value": "6"},
                    {"name": "KMP_AFFINITY", "value": "granularity=fine,compact,1,0"},
                    {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
                    {"name": "WANDB_PROJECT", "value": "resnet50-imagenet"},
                    {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "TF_CONFIG", "value": tf_config}
                ],
                "resources": {
                    "requests": {"cpu": "6", "memory": "24Gi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "20Gi"}
                },
                "volumeMounts": [
                    {"name": "dataset", "mountPath": "/data", "readOnly": true},
                    {"name": "checkpoints", "mountPath": "/checkpoints"},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                    {"name": "gcp-credentials", "mountPath": "/var/secrets/google", "readOnly": true}
                ],
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 9090},
                    "initialDelaySeconds": 60,
                    "periodSeconds": 30,
                    "failureThreshold": 5
                },
                "readinessProbe": {
                    "tcpSocket": {"port": 2222},
                    "initialDelaySeconds": 10,
                    "periodSeconds": 10
                },
                "terminationMessagePolicy": "FallbackToLogsOnError"
            }],
            "volumes": [
                {"name": "dataset", "emptyDir": {"sizeLimit": "200Gi"}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "resnet50-checkpoints"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "gcp-credentials", "secret": {"secretName": "gcp-training-sa", "defaultMode": 420}}
            ],
            "tolerations": [
                {"key": "workload", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-tesla-a100", "nvidia-l4"]}
                        ]}]
                    }
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {
                                "training.kubeflow.org/job-name": "resnet50-imagenet",
                                "training.kubeflow.org/replica-type": "worker"
                            }}
                        }
                    }]
                }
            }
        }
    });
    serde_json::from_value(pod).expect("the worker pod is a valid Pod")
}

/// The worker pod, scheduled and failed: its `tensorflow` container exited with code 1.
fn failed_pod(mut pod: Pod) -> Pod {
    pod.metadata.creation_timestamp = Some(time("2026-01-01T00:00:00Z"));
    pod.metadata.uid = Some("0b9d7c1e-5f3a-4e2d-8c6b-7a9e0f1d2c3b".into());
    pod.metadata.resource_version = Some("48213377".into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some("gke-ml-gpu-pool-7f3c9b2a-x4kq".into());
    }
    let status = json!({
        "phase": "Failed",
        "hostIP": "10.128.0.42",
        "podIP": "10.52.3.17",
        "startTime": "2026-01-01T00:00:05Z",
        "qosClass": "Burstable",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:03:40Z"},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "2026-01-01T00:17:12Z"},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": "2026-01-01T00:17:12Z"}
        ],
        "initContainerStatuses": [{
            "name": "fetch-dataset",
            "image": "gcr.io/ml-research/dataset-fetcher:1.4.2",
            "imageID": "gcr.io/ml-research/dataset-fetcher@sha256:3f1e0c9a",
            "ready": true,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": "2026-01-01T00:00:09Z", "finishedAt": "2026-01-01T00:03:39Z"}}
        }],
        "containerStatuses": [{
            "name": "tensorflow",
            "image": "gcr.io/ml-research/resnet50-train:2.15.0-gpu",
            "imageID": "gcr.io/ml-research/resnet50-train@sha256:9ad41c70",
            "containerID": "containerd://4e5f6a7b8c9d",
            "ready": false,
            "started": false,
            "restartCount": 0,
            "state": {"terminated": {
                "exitCode": 1,
                "reason": "Error",
                "message": "tensorflow.python.framework.errors_impl.NotFoundError: /data/imagenet/train-00042-of-01024; No such file or directory",
                "startedAt": "2026-01-01T00:03:41Z",
                "finishedAt": "2026-01-01T00:17:11Z",
                "containerID": "containerd://4e5f6a7b8c9d"
            }}
        }]
    });
    pod.status = Some(serde_json::from_value(status).expect("the status is a valid PodStatus"));
    pod
}

fn time(text: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(text.parse().expect("RFC 3339"))
}

/// The pod as the operator hands it to a policy: k8s-openapi's own encoding. Between 4 and 6
/// KB, or the benchmark is not measuring what it says.
fn encode(what: &str, pod: &Pod) -> String {
    let text = serde_json::to_string(pod).expect("a pod encodes");
    assert!(
        (4096..=6144).contains(&text.len()),
        "the {what} pod is {} bytes; the benchmark wants 4-6 KB",
        text.len()
    );
    text
}

// The native side: what each guest does around the shared logic (see guest-policies/*/src).

fn native_decorate(ctx: &JobContext, settings: &str, pod: &str) -> String {
    let settings: DecorateSettings = settings_from_json(settings).expect("settings");
    let pod: Pod = from_json("pod", pod).expect("pod");
    serde_json::to_string(&decorate_pod(&settings, ctx, pod)).expect("encode")
}

fn native_resources(settings: &str, container: &str, resources: &str) -> String {
    let settings: ResourceSettings = settings_from_json(settings).expect("settings");
    let rules = ResourceRules::try_from(settings).expect("settings");
    let resources: ResourceRequirements = from_json("resources", resources).expect("resources");
    let resources = override_resources(&rules, container, resources).expect("resources");
    serde_json::to_string(&resources).expect("encode")
}

/// As the classifier guest: metadata and status only (classification never reads the spec);
/// the verdict's time in RFC 3339, as it crosses the boundary.
fn native_classify(settings: &str, pod: &str, now: &str) -> (String, Option<String>) {
    #[derive(Deserialize)]
    struct ObservedPod {
        #[serde(default)]
        metadata: ObjectMeta,
        #[serde(default)]
        status: Option<PodStatus>,
    }
    let doc: ClassifySettingsDoc = settings_from_json(settings).expect("settings");
    let settings = doc.to_settings().expect("settings");
    let observed: ObservedPod = from_json("pod", pod).expect("pod");
    let pod = Pod {
        metadata: observed.metadata,
        spec: None,
        status: observed.status,
    };
    let now: Timestamp = now.parse().expect("now");
    let verdict = classify_pod(&settings, &pod, now);
    (
        format!("{:?}|{}|{}", verdict.phase, verdict.reason, verdict.message),
        verdict.occurred_at.map(|t| t.to_string()),
    )
}

// The floors (see the module documentation).

fn floor_decorate(pod: &str) -> String {
    let pod: Value = serde_json::from_str(pod).expect("pod");
    serde_json::to_string(&pod).expect("encode")
}

fn floor_classify(pod: &str) -> Value {
    serde_json::from_str(pod).expect("pod")
}

/// Which component a Wasm iteration runs: the copy pre-initialised for the benchmark's settings
/// (what the operator runs), or the plain component, reached with the same settings followed by
/// a space (the same document, a text no copy was prepared for).
#[derive(Clone, Copy)]
enum Run {
    Prepared,
    Plain,
}

impl Run {
    fn settings(self, hook: Hook) -> Cow<'static, str> {
        let settings = match hook {
            Hook::Decorate => DECORATE_SETTINGS,
            Hook::Resources => RESOURCE_SETTINGS,
            Hook::Classify => CLASSIFY_SETTINGS,
        };
        match self {
            Run::Prepared => Cow::Borrowed(settings),
            Run::Plain => Cow::Owned(format!("{settings} ")),
        }
    }
}

struct Inputs {
    engine: PolicyEngine,
    policies: [Arc<CompiledPolicy>; 3],
    /// [`FLOOR_RESOURCES_WAT`], compiled.
    floor_resources: Arc<CompiledPolicy>,
    ctx: JobContext,
    wit_ctx: WitContext,
    pod: String,
    resources: String,
    observed: String,
}

impl Inputs {
    fn new() -> Inputs {
        let engine = PolicyEngine::new(SandboxLimits::default()).expect("engine starts");
        let policies = Hook::ALL.map(|hook| {
            let d = defaults::for_hook(hook);
            let policy = engine.compile(d.wasm).expect("default policy compiles");
            // As the operator does once it activated a policy version.
            engine
                .prepare(&policy, d.name, &Run::Prepared.settings(hook))
                .expect("the default policy is pre-initialised");
            policy
        });
        let pod = worker_pod();
        let resources = pod.spec.as_ref().expect("spec").containers[0]
            .resources
            .clone()
            .expect("resources");
        let floor_resources = engine
            .compile(FLOOR_RESOURCES_WAT.as_bytes())
            .expect("the floor component compiles");
        let ctx = logic_context();
        let inputs = Inputs {
            floor_resources,
            wit_ctx: wit_context(&ctx),
            ctx,
            pod: encode("worker", &pod),
            resources: serde_json::to_string(&resources).expect("encode"),
            observed: encode("failed worker", &failed_pod(pod)),
            engine,
            policies,
        };
        inputs.check();
        inputs
    }

    fn policy(&self, hook: Hook) -> (&CompiledPolicy, &'static str) {
        let i = Hook::ALL.iter().position(|h| *h == hook).expect("a hook");
        (&self.policies[i], defaults::for_hook(hook).name)
    }

    fn wasm_decorate(&self, run: Run) -> String {
        let (p, name) = self.policy(Hook::Decorate);
        self.engine
            .at_maximum()
            .decorate(
                p,
                name,
                &self.wit_ctx,
                &run.settings(Hook::Decorate),
                &self.pod,
            )
            .expect("decorate")
    }

    fn wasm_resources(&self, run: Run) -> String {
        let (p, name) = self.policy(Hook::Resources);
        self.engine
            .at_maximum()
            .override_resources(
                p,
                name,
                &self.wit_ctx,
                &run.settings(Hook::Resources),
                CONTAINER,
                &self.resources,
            )
            .expect("resources")
    }

    fn floor_resources(&self) -> String {
        self.engine
            .at_maximum()
            .override_resources(
                &self.floor_resources,
                "floor-resources",
                &self.wit_ctx,
                RESOURCE_SETTINGS,
                CONTAINER,
                &self.resources,
            )
            .expect("floor resources")
    }

    fn wasm_classify(&self, run: Run) -> bindings::Verdict {
        let (p, name) = self.policy(Hook::Classify);
        self.engine
            .at_maximum()
            .classify(
                p,
                name,
                &self.wit_ctx,
                &run.settings(Hook::Classify),
                &self.observed,
                NOW,
            )
            .expect("classify")
    }

    /// Both sides decide the same, and decide something: the comparison is of equal work.
    fn check(&self) {
        for hook in Hook::ALL {
            let (p, name) = self.policy(hook);
            let settings = Run::Prepared.settings(hook);
            self.engine
                .validate_settings(p, name, &settings)
                .expect("the benchmark's settings are valid");
            assert!(p.is_prepared_for(&settings), "{hook} is prepared");
            assert!(!p.is_prepared_for(&Run::Plain.settings(hook)), "{hook}");
        }
        // The copy decides as the plain component.
        assert_eq!(
            self.wasm_decorate(Run::Prepared),
            self.wasm_decorate(Run::Plain)
        );
        assert_eq!(
            self.wasm_resources(Run::Prepared),
            self.wasm_resources(Run::Plain)
        );
        assert_eq!(
            format!("{:?}", self.wasm_classify(Run::Prepared)),
            format!("{:?}", self.wasm_classify(Run::Plain))
        );

        let wasm: Value = serde_json::from_str(&self.wasm_decorate(Run::Prepared)).expect("JSON");
        let native: Value =
            serde_json::from_str(&native_decorate(&self.ctx, DECORATE_SETTINGS, &self.pod))
                .expect("JSON");
        assert_eq!(wasm, native, "decorated pods differ");
        let input: Value = serde_json::from_str(&self.pod).expect("JSON");
        assert_ne!(wasm, input, "decoration changed nothing");
        for (pointer, len) in [
            ("/spec/tolerations", 5),
            ("/spec/volumes", 6),
            ("/spec/containers/0/volumeMounts", 6),
        ] {
            let got = wasm
                .pointer(pointer)
                .and_then(Value::as_array)
                .map(Vec::len);
            assert_eq!(got, Some(len), "{pointer} after decoration");
        }

        let wasm: Value = serde_json::from_str(&self.wasm_resources(Run::Prepared)).expect("JSON");
        let native: Value = serde_json::from_str(&native_resources(
            RESOURCE_SETTINGS,
            CONTAINER,
            &self.resources,
        ))
        .expect("JSON");
        assert_eq!(wasm, native, "resources differ");
        assert_eq!(wasm["requests"]["nvidia.com/gpu"], "1", "{wasm}");

        let wasm = self.wasm_classify(Run::Prepared);
        let (native, occurred_at) = native_classify(CLASSIFY_SETTINGS, &self.observed, NOW);
        // Exit code 1 of the tensorflow container: a permanent failure of the user's code.
        assert_eq!(wasm.phase, bindings::Phase::PermanentFailure, "{wasm:?}");
        assert_eq!(
            native,
            format!("PermanentFailure|{}|{}", wasm.reason, wasm.message)
        );
        assert_eq!(occurred_at, wasm.occurred_at);

        // The floors do what they say: the pod round-trips, the empty call echoes its input.
        let round_trip: Value = serde_json::from_str(&floor_decorate(&self.pod)).expect("JSON");
        assert_eq!(round_trip, input);
        assert!(floor_classify(&self.observed)["status"].is_object());
        assert_eq!(self.floor_resources(), self.resources);
    }
}

fn bench(c: &mut Criterion, inputs: &Inputs) {
    let mut group = c.benchmark_group("decorate");
    group.bench_function("wasm", |b| {
        b.iter(|| black_box(inputs.wasm_decorate(Run::Prepared)))
    });
    group.bench_function("wasm-plain", |b| {
        b.iter(|| black_box(inputs.wasm_decorate(Run::Plain)))
    });
    group.bench_function("native", |b| {
        b.iter(|| {
            black_box(native_decorate(
                black_box(&inputs.ctx),
                black_box(DECORATE_SETTINGS),
                black_box(&inputs.pod),
            ))
        })
    });
    group.bench_function("floor", |b| {
        b.iter(|| black_box(floor_decorate(black_box(&inputs.pod))))
    });
    group.finish();

    let mut group = c.benchmark_group("resources");
    group.bench_function("wasm", |b| {
        b.iter(|| black_box(inputs.wasm_resources(Run::Prepared)))
    });
    group.bench_function("wasm-plain", |b| {
        b.iter(|| black_box(inputs.wasm_resources(Run::Plain)))
    });
    group.bench_function("native", |b| {
        b.iter(|| {
            black_box(native_resources(
                black_box(RESOURCE_SETTINGS),
                black_box(CONTAINER),
                black_box(&inputs.resources),
            ))
        })
    });
    group.bench_function("floor", |b| b.iter(|| black_box(inputs.floor_resources())));
    group.finish();

    let mut group = c.benchmark_group("classify");
    group.bench_function("wasm", |b| {
        b.iter(|| black_box(inputs.wasm_classify(Run::Prepared)))
    });
    group.bench_function("wasm-plain", |b| {
        b.iter(|| black_box(inputs.wasm_classify(Run::Plain)))
    });
    group.bench_function("native", |b| {
        b.iter(|| {
            black_box(native_classify(
                black_box(CLASSIFY_SETTINGS),
                black_box(&inputs.observed),
                black_box(NOW),
            ))
        })
    });
    group.bench_function("floor", |b| {
        b.iter(|| black_box(floor_classify(black_box(&inputs.observed))))
    });
    group.finish();
}

/// Where criterion keeps its results, resolved as criterion does (`CRITERION_HOME`, then
/// `CARGO_TARGET_DIR`), else from this executable's place in the target directory
/// (`<target>/<profile>/deps/<bench>`), so the summary reads the files this run writes.
fn summary(dir: &Path, since: SystemTime) {
    let mut ratios = Vec::new();
    let mut floors = Vec::new();
    for group in GROUPS {
        let median = |function| median_ns(dir, group, function, since);
        let (Some(wasm), native, floor) = (median("wasm"), median("native"), median("floor"))
        else {
            continue;
        };
        if let Some(native) = native {
            ratios.push(format!(
                "{group:<10} wasm {:>9.2} us   native {:>8.2} us   wasm/native {:>5.2}x",
                wasm / 1e3,
                native / 1e3,
                wasm / native
            ));
        }
        if let Some(floor) = floor {
            let target = TARGETS
                .iter()
                .find(|(hook, _)| *hook == group)
                .map(|(_, target)| *target)
                .expect("every hook has a target");
            let ratio = wasm / floor;
            let native = native.map_or_else(|| "-".to_owned(), |n| format!("{:.2} us", n / 1e3));
            floors.push(format!(
                "{group:<10} wasm {:>9.2} us   native {native:>11}   floor {:>8.2} us   wasm/floor {ratio:>5.2}x   target <= {target}x: {}",
                wasm / 1e3,
                floor / 1e3,
                if ratio <= target { "met" } else { "NOT MET" }
            ));
        }
    }
    if !ratios.is_empty() {
        println!("\nMedian ratio wasm/native (criterion estimates of this run, {dir:?}):");
        for line in ratios {
            println!("  {line}");
        }
    }
    if !floors.is_empty() {
        println!("\nMedian ratio wasm/floor against the issue's targets:");
        for line in floors {
            println!("  {line}");
        }
    }
    let plain: Vec<String> = GROUPS
        .iter()
        .filter_map(|group| {
            let median = |function| median_ns(dir, group, function, since);
            let (wasm, plain) = (median("wasm")?, median("wasm-plain")?);
            let floor = median("floor").map_or_else(
                || "-".to_owned(),
                |floor| format!("{:.2}x", plain / floor),
            );
            Some(format!(
                "{group:<10} wasm {:>9.2} us   plain {:>9.2} us   wasm/plain {:>5.2}x   plain/floor {floor}",
                wasm / 1e3,
                plain / 1e3,
                wasm / plain
            ))
        })
        .collect();
    if !plain.is_empty() {
        println!("\nThe pre-initialised copy (wasm) against the plain component (wasm-plain):");
        for line in plain {
            println!("  {line}");
        }
    }
}

fn main() {
    let started = SystemTime::now();
    let dir = criterion_dir();
    let inputs = Inputs::new();
    println!(
        "inputs: worker pod {} bytes, failed worker pod {} bytes, resources {} bytes; \
         components: decorate {} bytes, resources {} bytes, classify {} bytes",
        inputs.pod.len(),
        inputs.observed.len(),
        inputs.resources.len(),
        inputs.policies[0].size,
        inputs.policies[1].size,
        inputs.policies[2].size,
    );
    let mut c = Criterion::default()
        .output_directory(&dir)
        .configure_from_args();
    bench(&mut c, &inputs);
    c.final_summary();
    summary(&dir, started);
}
