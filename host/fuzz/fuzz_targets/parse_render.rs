//! Fuzz target `parse_render`: arbitrary text through the TFJob parser, validation and planner.
//!
//! The input bytes are read as UTF-8 text (anything else is skipped) and parsed as a stream of
//! TFJob documents. Every job is validated and planned with the native policies the way
//! `tfjob-operator render` does (empty observed state, status cleared), and again with the status
//! it was given. Then a few reconciles are simulated: the pods and services the previous plan
//! created are observed, with phases, container states, exit codes, restart counts, deletion
//! marks and clock advances all derived from the input bytes, and the next plan's deletions and
//! creations are applied before the one after. None of it may panic; the rendered objects must
//! serialise to JSON and YAML and every `TF_CONFIG` must be JSON.

#![no_main]

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodStatus, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use libfuzzer_sys::fuzz_target;
use tfjob_api::TFJob;
use tfjob_api::parse::parse_tfjob_documents;
use tfjob_api::validation::validate;
use tfjob_planner::native::NativePolicies;
use tfjob_planner::{Plan, PlanInput, Settings, plan};

/// Reconciles simulated after the first one.
const ROUNDS: usize = 4;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    #[cfg(feature = "skip-yaml-syntax-errors")]
    if !well_formed_yaml(text) {
        return;
    }
    let mut bytes = Bytes::new(data);
    for document in parse_tfjob_documents(text) {
        // A document that is not a TFJob is an error for the caller to print, never a panic.
        let job = match document {
            Ok(job) => job,
            Err(e) => {
                let _ = e.to_string();
                continue;
            }
        };
        if let Err(errors) = validate(&job) {
            assert!(!errors.0.is_empty(), "validation errors are never empty");
            let _ = errors.to_string();
        }
        render(&job, &mut bytes);
        reconcile(job, &mut bytes);
    }
});

/// Whether every document of `text` is well-formed YAML; stops at the first error, which the
/// API's parser does not (see README.md).
#[cfg(feature = "skip-yaml-syntax-errors")]
fn well_formed_yaml(text: &str) -> bool {
    use serde::Deserialize;
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        if serde_yaml_ng::Value::deserialize(document).is_err() {
            return false;
        }
    }
    true
}

/// The input bytes again, cycled, as a source of decisions.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bytes { data, at: 0 }
    }

    fn next(&mut self) -> u8 {
        if self.data.is_empty() {
            return 0;
        }
        let b = self.data[self.at % self.data.len()];
        self.at = self.at.wrapping_add(1);
        b
    }

    fn pick<'s>(&mut self, options: &[&'s str]) -> &'s str {
        options[usize::from(self.next()) % options.len()]
    }
}

fn start() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("a valid timestamp")
}

fn settings(bytes: &mut Bytes<'_>) -> Settings {
    let cluster_domain = match bytes.next() % 3 {
        0 => None,
        1 => Some("cluster.local".to_owned()),
        _ => Some(String::new()),
    };
    Settings {
        cluster_domain,
        ..Settings::default()
    }
}

fn run_plan(
    job: &TFJob,
    pods: &[Pod],
    services: &[Service],
    now: Timestamp,
    settings: &Settings,
) -> Option<Plan> {
    let policies = NativePolicies::default();
    let input = PlanInput {
        job,
        pods,
        services,
        now,
        settings,
        policies: &policies,
    };
    // Native policies never fail; a PlanError would still be an answer, not a crash.
    plan(&input).ok()
}

/// What `tfjob-operator render` does with a job, including printing the objects.
fn render(job: &TFJob, bytes: &mut Bytes<'_>) {
    let mut job = job.clone();
    job.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    job.status = None;
    let settings = settings(bytes);
    let Some(plan) = run_plan(&job, &[], &[], start(), &settings) else {
        return;
    };
    check_objects(&plan);
    for svc in &plan.create_services {
        serde_yaml_ng::to_string(svc).expect("services serialise to YAML");
    }
    for pod in &plan.create_pods {
        serde_yaml_ng::to_string(pod).expect("pods serialise to YAML");
    }
    serde_json::to_string_pretty(&plan.create_services).expect("services serialise to JSON");
    serde_json::to_string_pretty(&plan.create_pods).expect("pods serialise to JSON");
}

fn check_objects(plan: &Plan) {
    for pod in &plan.create_pods {
        let env = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.env.iter().flatten());
        for var in env.filter(|e| e.name == "TF_CONFIG") {
            let value = var.value.as_deref().unwrap_or_default();
            if let Err(e) = serde_json::from_str::<serde_json::Value>(value) {
                panic!("TF_CONFIG is not JSON ({e}): {value}");
            }
        }
    }
}

/// The controller's loop: plan, apply the plan to the observed state, observe pods in states
/// the input bytes choose, plan again.
fn reconcile(mut job: TFJob, bytes: &mut Bytes<'_>) {
    job.metadata
        .uid
        .get_or_insert_with(|| "fuzz-job-uid".into());
    let settings = settings(bytes);
    let mut now = start();
    let mut pods: Vec<Pod> = Vec::new();
    let mut services: Vec<Service> = Vec::new();
    let mut generation = 0u32;
    for _ in 0..=ROUNDS {
        let Some(plan) = run_plan(&job, &pods, &services, now, &settings) else {
            return;
        };
        check_objects(&plan);
        if plan.delete_job || plan.skip.is_some() {
            return;
        }
        if let Some(status) = plan.status {
            job.status = Some(status);
        }
        pods.retain(|p| {
            !plan
                .delete_pods
                .iter()
                .any(|d| d.name == p.metadata.name.clone().unwrap_or_default())
        });
        services.retain(|s| {
            !plan
                .delete_services
                .iter()
                .any(|d| d.name == s.metadata.name.clone().unwrap_or_default())
        });
        for mut pod in plan.create_pods {
            generation += 1;
            pod.metadata.uid = Some(format!("pod-uid-{generation}"));
            pod.metadata.creation_timestamp = Some(Time(now));
            pods.push(pod);
        }
        services.extend(plan.create_services);
        let advance = i64::from(bytes.next()) * 7;
        now = now
            .checked_add(SignedDuration::from_secs(advance))
            .unwrap_or(now);
        for pod in &mut pods {
            observe(pod, now, bytes);
        }
    }
}

/// Gives `pod` a status (and maybe a deletion mark) chosen by the input bytes.
fn observe(pod: &mut Pod, now: Timestamp, bytes: &mut Bytes<'_>) {
    let phase = bytes.pick(&["Pending", "Running", "Succeeded", "Failed", "Unknown"]);
    let flags = bytes.next();
    if flags & 1 != 0 {
        pod.metadata.deletion_timestamp = Some(Time(now));
    }
    let since = now
        .checked_sub(SignedDuration::from_secs(i64::from(bytes.next()) * 3))
        .unwrap_or(now);
    let state = match bytes.next() % 4 {
        0 => None,
        1 => Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(since)),
            }),
            ..ContainerState::default()
        }),
        2 => Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(
                    bytes
                        .pick(&[
                            "ContainerCreating",
                            "PodInitializing",
                            "ErrImagePull",
                            "ImagePullBackOff",
                            "CrashLoopBackOff",
                            "InvalidImageName",
                            "CreateContainerError",
                            "CreateContainerConfigError",
                            "SomethingNew",
                        ])
                        .to_owned(),
                ),
                message: Some("waiting".into()),
            }),
            ..ContainerState::default()
        }),
        _ => {
            let code = bytes.next();
            Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: if code == 255 { -1 } else { i32::from(code) },
                    reason: Some(
                        bytes
                            .pick(&["Completed", "Error", "OOMKilled", "ContainerCannotRun", ""])
                            .to_owned(),
                    ),
                    started_at: Some(Time(since)),
                    finished_at: Some(Time(now)),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            })
        }
    };
    let ready = flags & 2 != 0;
    let container_statuses = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            ready,
            restart_count: i32::from(flags >> 4),
            state: state.clone(),
            ..ContainerStatus::default()
        })
        .collect();
    let mut conditions = Vec::new();
    if flags & 4 != 0 {
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/3 nodes are available".into()),
            last_transition_time: Some(Time(since)),
            ..PodCondition::default()
        });
    }
    if flags & 8 != 0 {
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("ContainersNotReady".into()),
            last_transition_time: Some(Time(since)),
            ..PodCondition::default()
        });
    }
    let reason = bytes.pick(&[
        "",
        "Evicted",
        "Shutdown",
        "NodeAffinity",
        "DeadlineExceeded",
    ]);
    pod.status = Some(PodStatus {
        phase: Some(phase.to_owned()),
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
        conditions: Some(conditions),
        container_statuses: Some(container_statuses),
        ..PodStatus::default()
    });
}
