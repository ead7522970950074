//! Gang scheduling end to end, through kubectl: the embedded cluster simulating Volcano or
//! scheduler-plugins' coscheduling, the operator grouping each job for it. A job whose group
//! does not fit waits whole and says why; lowering `minAvailable` or adding a node lets it run
//! to `Succeeded`; two jobs that do not fit together never both hold part of the cluster.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use tfjob_api::TFJob;
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::ClusterOptions;
use tfjob_planner::gang::GangScheduler;

use common::kubectl::{Cluster, cluster_with, repo};

const VOLCANO: &str = "volcano";
const COSCHEDULING: &str = "scheduler-plugins-scheduler";

/// Two nodes with two GPUs each, and the operator and cluster gang-scheduling with `scheduler`.
fn gang_cluster(scheduler: &str) -> Cluster {
    let mut options = ClusterOptions::new(common::default_policies());
    options.gang_scheduler = Some(GangScheduler::from_name(scheduler));
    options.kubelet = KubeletConfig {
        nodes: 2,
        cpu: "16".into(),
        memory: "64Gi".into(),
        gpus_per_node: 2,
        default_duration: Duration::from_secs(1),
        startup: Duration::from_millis(50),
        ..KubeletConfig::default()
    };
    cluster_with(options)
}

/// A job of three workers, each asking for two GPUs: six, where the cluster has four.
const BIG: &str = r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: big, namespace: default}
spec:
  runPolicy: {schedulingPolicy: {queue: default}}
  tfReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:latest
            resources: {limits: {nvidia.com/gpu: 2}}
"#;

fn apply(c: &Cluster, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object.yaml");
    std::fs::write(&file, yaml).unwrap();
    c.ok(&["apply", "-f", file.to_str().unwrap()]);
}

fn last_condition(c: &Cluster, job: &str) -> String {
    c.ok(&[
        "get",
        "tfjob",
        job,
        "-o",
        "jsonpath={.status.conditions[-1:].type}",
    ])
}

fn pods_of(c: &Cluster, job: &str) -> String {
    let selector = format!("training.kubeflow.org/job-name={job}");
    c.ok(&["get", "pods", "-l", &selector, "-o", "name"])
}

fn wait_succeeded(c: &Cluster, job: &str) {
    c.ok(&[
        "wait",
        "--for=condition=Succeeded",
        &format!("tfjob/{job}"),
        "--timeout=120s",
    ]);
}

#[test]
fn a_volcano_job_that_does_not_fit_waits_whole_until_min_available_is_lowered() {
    let c = gang_cluster(VOLCANO);
    apply(&c, BIG);
    c.until(
        &["get", "podgroup", "big", "-o", "jsonpath={.status.phase}"],
        |phase| phase == "Pending",
    );
    let group = c.ok(&["get", "podgroup", "big", "-o", "jsonpath={.spec}"]);
    assert!(
        group.contains(r#""minMember":3"#) && group.contains(r#""nvidia.com/gpu":"6""#),
        "{group}"
    );
    // The job says why it waits, and holds nothing. The operator may first have seen the group
    // before the simulated Volcano gave it a phase ("has no phase yet"); the event that names the
    // queue follows once the phase change wakes the job.
    let described = c.until(&["describe", "tfjob", "big"], |text| {
        text.contains("PodGroup default/big is Pending in queue \"default\"")
    });
    assert!(described.contains("PodGroupPending"), "{described}");
    assert_eq!(last_condition(&c, "big"), "Created");
    assert_eq!(pods_of(&c, "big"), "");

    c.ok(&[
        "patch",
        "tfjob",
        "big",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"runPolicy":{"schedulingPolicy":{"minAvailable":2}}}}"#,
    ]);
    c.until(
        &["get", "podgroup", "big", "-o", "jsonpath={.spec.minMember}"],
        |min| min == "2",
    );
    wait_succeeded(&c, "big");
    let pod = c.ok(&[
        "get",
        "pod",
        "big-worker-0",
        "-o",
        "jsonpath={.spec.schedulerName} {.metadata.annotations.scheduling\\.k8s\\.io/group-name} {.metadata.annotations.volcano\\.sh/task-spec}",
    ]);
    assert_eq!(pod, "volcano big worker");
    // The finished job gives its group back.
    c.until(&["get", "podgroups", "-o", "name"], |out| {
        out.trim().is_empty()
    });
    let described = c.ok(&["describe", "tfjob", "big"]);
    assert!(described.contains("Deleted PodGroup: big"), "{described}");
}

#[test]
fn a_coscheduled_job_too_big_for_the_cluster_runs_once_a_node_is_added() {
    let c = gang_cluster(COSCHEDULING);
    apply(&c, BIG);
    // scheduler-plugins: the pods exist at once, and wait together for room.
    let message = c.until(
        &[
            "get",
            "pod",
            "big-worker-0",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}"#,
        ],
        |m| !m.is_empty(),
    );
    assert!(
        message.contains("default/big"),
        "names the group: {message}"
    );
    let labels = c.ok(&[
        "get",
        "pods",
        "-l",
        "scheduling.x-k8s.io/pod-group=big",
        "-o",
        "jsonpath={range .items[*]}{.spec.schedulerName} {.spec.nodeName}|{end}",
    ]);
    assert_eq!(
        labels,
        "scheduler-plugins-scheduler |".repeat(3),
        "three members, none bound"
    );
    assert_eq!(last_condition(&c, "big"), "Created");

    // A third node, as a cluster autoscaler would add it.
    apply(
        &c,
        "apiVersion: v1\nkind: Node\nmetadata: {name: extra-node, labels: {kubernetes.io/hostname: extra-node}}\n",
    );
    c.ok(&[
        "patch",
        "node",
        "extra-node",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"allocatable":{"cpu":"16","memory":"64Gi","nvidia.com/gpu":"2","pods":"110"}}}"#,
    ]);
    wait_succeeded(&c, "big");
    c.until(&["get", "podgroups", "-o", "name"], |out| {
        out.trim().is_empty()
    });
}

/// Runs both gang examples and checks, while they run, that they never both hold part of the
/// cluster while both are running (each needs three of the four GPUs, so that would be a
/// partial allocation of at least one of them), and that what is bound never exceeds the four
/// GPUs. A job whose members have started to finish may still have its last member running;
/// the next job's three members then fit beside it and a real scheduler binds them, so the two
/// may overlap by that one pod.
fn competing_jobs_take_turns(scheduler: &str) {
    let c = gang_cluster(scheduler);
    for job in ["gang-a.yaml", "gang-b.yaml"] {
        let path = repo("deploy/examples/gang").join(job);
        c.ok(&["apply", "-f", path.to_str().unwrap()]);
    }
    let client = c.up().cluster.client();
    let holding = c.up().runtime.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let jobs: Api<TFJob> = Api::namespaced(client.clone(), "default");
        let started = Instant::now();
        // The most members each job had bound at once.
        let mut seen_alone = BTreeMap::new();
        loop {
            let mut holding: BTreeMap<String, usize> = BTreeMap::new();
            let mut finished_members: BTreeMap<String, usize> = BTreeMap::new();
            for pod in pods.list(&ListParams::default()).await.unwrap() {
                let bound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some();
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                let finished = matches!(phase, Some("Succeeded" | "Failed"));
                let Some(job) = pod.labels().get("training.kubeflow.org/job-name").cloned() else {
                    continue;
                };
                match (bound, finished) {
                    (true, false) => *holding.entry(job).or_default() += 1,
                    (_, true) => *finished_members.entry(job).or_default() += 1,
                    _ => {}
                }
            }
            let running_whole = holding
                .keys()
                .filter(|job| !finished_members.contains_key(*job))
                .count();
            assert!(
                running_whole < 2,
                "both jobs hold part of the cluster: {holding:?}"
            );
            // One GPU per member, four in the cluster.
            let gpus: usize = holding.values().sum();
            assert!(gpus <= 4, "more members bound than GPUs: {holding:?}");
            for (job, n) in holding {
                let most = seen_alone.entry(job).or_insert(0);
                *most = n.max(*most);
            }
            let done = jobs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|j| j.status.as_ref().is_some_and(|s| s.is_finished()))
                .count();
            if done == 2 {
                return seen_alone;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the jobs did not both finish"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // Each ran, whole, in its turn.
    assert_eq!(
        holding,
        BTreeMap::from([("gang-a".to_owned(), 3), ("gang-b".to_owned(), 3)])
    );
    for job in ["gang-a", "gang-b"] {
        assert_eq!(last_condition(&c, job), "Succeeded");
    }
}

#[test]
fn two_volcano_jobs_that_do_not_fit_together_take_turns() {
    competing_jobs_take_turns(VOLCANO);
}

#[test]
fn two_coscheduled_jobs_that_do_not_fit_together_take_turns() {
    competing_jobs_take_turns(COSCHEDULING);
}
