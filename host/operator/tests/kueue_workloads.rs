//! `tfjob-operator run --kueue-workloads` against the embedded cluster serving Kueue's own
//! CRDs (with their CEL rules, from `../shared/reference/kueue/crds/`): every Workload the
//! operator creates passes Kueue's validation. The test plays Kueue's part by writing the
//! Workload's status as Kueue does (admission, eviction), so what the operator does with each
//! is seen apart from any admission logic.

use crate::common;

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tfjob_api::{ConditionStatus, JobConditionType, TFJob};

use common::cluster::Cluster;
use common::{eventually, repo};

fn kueue_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

/// Serves Kueue's real CRDs on the cluster.
fn install_kueue_crds(cluster: &Cluster) {
    for plural in [
        "clusterqueues",
        "localqueues",
        "resourceflavors",
        "workloadpriorityclasses",
        "workloads",
    ] {
        let path = repo(&format!(
            "../shared/reference/kueue/crds/kueue.x-k8s.io_{plural}.yaml"
        ));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crd: Value = serde_yaml_ng::from_str(&text).unwrap();
        tfjob_cluster::storage::crd::install(cluster.embedded().store(), crd)
            .unwrap_or_else(|e| panic!("{plural}: {}", e.message));
    }
}

fn workloads(cluster: &Cluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client(),
        "default",
        &kueue_resource("Workload", "workloads"),
    )
}

fn the_workload(cluster: &Cluster) -> Option<Value> {
    let list = cluster
        .runtime
        .block_on(workloads(cluster).list(&ListParams::default()))
        .unwrap();
    let mut items: Vec<Value> = list
        .items
        .into_iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .map(|w| serde_json::to_value(w).unwrap())
        .collect();
    assert!(items.len() <= 1, "one Workload per job: {items:?}");
    items.pop()
}

fn pods(cluster: &Cluster) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client(), "default");
    cluster
        .runtime
        .block_on(api.list(&ListParams::default()))
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn suspended(job: &TFJob) -> Option<(ConditionStatus, String, String)> {
    let c = job
        .status
        .as_ref()?
        .condition(JobConditionType::Suspended)?
        .clone();
    Some((c.status, c.reason, c.message))
}

/// Writes the Workload's status as Kueue does.
fn write_status(cluster: &Cluster, name: &str, status: Value) {
    let patch = json!({"status": status});
    cluster
        .runtime
        .block_on(workloads(cluster).patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ))
        .unwrap_or_else(|e| panic!("Kueue's validation refused the status: {e}"));
}

fn admit(cluster: &Cluster, name: &str) {
    write_status(
        cluster,
        name,
        json!({
            "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [
                {"name": "ps", "flavors": {"cpu": "spot", "memory": "spot"}, "count": 1,
                 "resourceUsage": {"cpu": "1", "memory": "200Mi"}},
                {"name": "worker", "flavors": {"cpu": "spot", "memory": "spot"}, "count": 2,
                 "resourceUsage": {"cpu": "2", "memory": "400Mi"}}
            ]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": "Quota reserved in ClusterQueue cluster-queue",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "message": "The workload is admitted", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }),
    );
}

#[test]
fn the_operator_owns_workloads_kueue_accepts_and_runs_pods_only_while_admitted() {
    let cluster = Cluster::start(|o| {
        o.kubelet.default_duration = Duration::from_secs(4);
    });
    install_kueue_crds(&cluster);
    let flavors = Api::<DynamicObject>::all_with(
        cluster.client(),
        &kueue_resource("ResourceFlavor", "resourceflavors"),
    );
    let spot: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "spot"},
        "spec": {"nodeLabels": {"instance-type": "spot"},
                 "tolerations": [{"key": "spot-taint", "operator": "Exists", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    cluster
        .runtime
        .block_on(flavors.create(&PostParams::default(), &spot))
        .unwrap();
    // The flavor's nodes, joining the simulated cluster: the scheduler places pods by their
    // node selector.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client());
    for i in 0..2 {
        let node = serde_json::from_value(json!({
            "metadata": {"name": format!("spot-{i}"), "labels": {"instance-type": "spot"}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap();
        cluster
            .runtime
            .block_on(nodes.create(&PostParams::default(), &node))
            .unwrap();
    }
    let _operator = cluster.operator(
        &[
            "--kueue-workloads",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ],
        &[],
    );

    // Kueue's own sample job, unchanged.
    let sample =
        std::fs::read_to_string(repo("../shared/reference/kueue/examples/sample-tfjob.yaml"))
            .unwrap();
    let job: TFJob = serde_yaml_ng::from_str(&sample).unwrap();
    let jobs: Api<TFJob> = Api::namespaced(cluster.client(), "default");
    cluster
        .runtime
        .block_on(jobs.create(&PostParams::default(), &job))
        .unwrap();
    let name = "tensorflow-dist-mnist";
    let get = || cluster.runtime.block_on(jobs.get(name)).unwrap();

    // The Workload: Kueue's pod sets, owned by the job; no pods while it waits.
    let workload = eventually("the Workload is created", || the_workload(&cluster));
    let wl_name = workload["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(
        wl_name.starts_with("tfjob-tensorflow-dist-mnist-"),
        "{wl_name}"
    );
    assert_eq!(workload["spec"]["queueName"], "user-queue");
    let sets: Vec<(&str, i64)> = workload["spec"]["podSets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["count"].as_i64().unwrap()))
        .collect();
    assert_eq!(sets, [("ps", 1), ("worker", 2)]);
    let owner = &workload["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "TFJob");
    assert_eq!(owner["controller"], true);
    let (status, _, message) = eventually("the job says it waits", || suspended(&get()));
    assert_eq!(status, ConditionStatus::True);
    assert!(message.contains("in queue user-queue"), "{message}");
    assert!(pods(&cluster).is_empty(), "no pods before admission");

    // Deleted by someone else: made anew.
    let first_uid = workload["metadata"]["uid"].clone();
    cluster
        .runtime
        .block_on(workloads(&cluster).delete(&wl_name, &DeleteParams::default()))
        .unwrap();
    let workload = eventually("the Workload is made anew", || {
        the_workload(&cluster).filter(|w| w["metadata"]["uid"] != first_uid)
    });
    assert_eq!(workload["metadata"]["name"], wl_name.as_str());

    // Admitted to the spot flavor: pods on it.
    admit(&cluster, &wl_name);
    let running = eventually("three pods start", || {
        let p = pods(&cluster);
        (p.len() == 3).then_some(p)
    });
    for pod in &running {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_selector.as_ref().unwrap()["instance-type"],
            "spot"
        );
        assert!(
            spec.tolerations
                .as_ref()
                .unwrap()
                .iter()
                .any(|t| t.key.as_deref() == Some("spot-taint")),
            "{:?}",
            spec.tolerations
        );
    }

    // Evicted: the pods stop and the job says why.
    write_status(
        &cluster,
        &wl_name,
        json!({
            "admission": null,
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                 "message": "The ClusterQueue is stopped", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Admitted", "status": "False", "reason": "NoReservation",
                 "message": "The workload has no reservation", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Evicted", "status": "True", "reason": "ClusterQueueStopped",
                 "message": "The ClusterQueue is stopped", "lastTransitionTime": "2026-01-01T00:00:01Z"}
            ]
        }),
    );
    eventually("the pods stop", || pods(&cluster).is_empty().then_some(()));
    let (_, reason, message) = eventually("the job says it was evicted", || {
        suspended(&get()).filter(|(s, r, _)| *s == ConditionStatus::True && r == "WorkloadEvicted")
    });
    assert_eq!(reason, "WorkloadEvicted");
    assert!(message.contains("ClusterQueueStopped"), "{message}");
    let active: i32 = get()
        .status
        .unwrap()
        .replica_statuses
        .values()
        .map(|r| r.active)
        .sum();
    assert_eq!(active, 0);

    // Admitted again: it runs to the end, and the Workload is marked finished.
    admit(&cluster, &wl_name);
    eventually("the job succeeds", || {
        get()
            .status
            .filter(|s| s.is_true(JobConditionType::Succeeded))
    });
    let finished = eventually("the Workload is finished", || {
        the_workload(&cluster).filter(|w| {
            w["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Finished" && c["status"] == "True")
            })
        })
    });
    let condition = finished["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Finished")
        .unwrap()
        .clone();
    assert_eq!(condition["reason"], "Succeeded");
}
