//! Gang scheduling on the embedded cluster, with no operator: PodGroups and pods created
//! directly in the store (and through kubectl and kube-rs over HTTPS) and the simulated
//! scheduler of `KubeletConfig::gang_scheduler` acting on them. A group too big for the
//! cluster waits whole with the scheduler's message; lowering `minMember` or adding a node
//! lets it run; two groups that do not fit together run one after the other, never half each;
//! pods of a scheduler nobody runs stay untouched; the coscheduling permit times out.
//! As in `kubelet.rs`, what happened on the way is read from the store's watch history.

use crate::common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tfjob_cluster::Part;

use serde_json::{Value, json};
use tfjob_cluster::kubelet::gang::{GROUP_NAME_ANNOTATION, POD_GROUP_LABEL};
use tfjob_cluster::kubelet::script::DURATION;
use tfjob_cluster::kubelet::{self, KubeletConfig};
use tfjob_cluster::storage::store::Patch;
use tfjob_cluster::{ResourceType, Store};

const NS: &str = "ml";
const VOLCANO: &str = "volcano";
const PLUGINS: &str = "scheduler-plugins-scheduler";

struct Cluster {
    store: Arc<Store>,
    pods: ResourceType,
    groups: Option<ResourceType>,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kubelet.abort();
    }
}

/// Two nodes with two GPUs each; pods run for `DURATION` or 300 ms.
fn cluster(gang: Option<&str>) -> Cluster {
    let store = Store::new();
    let pods = store.resource("", "pods").unwrap();
    let config = KubeletConfig {
        default_duration: Duration::from_millis(300),
        startup: Duration::from_millis(20),
        gang_scheduler: gang.map(str::to_owned),
        ..KubeletConfig::default()
    };
    let kubelet = kubelet::spawn(Arc::clone(&store), config);
    let groups = match gang {
        Some(VOLCANO) => store.resource("scheduling.volcano.sh", "podgroups"),
        Some(_) => store.resource("scheduling.x-k8s.io", "podgroups"),
        None => None,
    };
    Cluster {
        store,
        pods,
        groups,
        kubelet,
    }
}

/// A member of group `group` asking for `gpus` GPUs, as the operator creates it.
fn member(scheduler: &str, group: &str, name: &str, gpus: u32, duration: &str) -> Value {
    let mut pod = json!({
        "metadata": {"name": name, "annotations": {DURATION: duration}, "labels": {}},
        "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "containers": [
            {"name": "tensorflow", "image": "tf:2", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    });
    if scheduler == VOLCANO {
        pod["metadata"]["annotations"][GROUP_NAME_ANNOTATION] = json!(group);
        pod["metadata"]["annotations"]["volcano.sh/task-spec"] = json!("worker");
    } else {
        pod["metadata"]["labels"][POD_GROUP_LABEL] = json!(group);
    }
    pod
}

impl Cluster {
    fn group(&self, name: &str, spec: Value) {
        let groups = self.groups.as_ref().expect("a gang scheduler");
        self.store
            .create(
                groups,
                Some(NS),
                json!({"metadata": {"name": name}, "spec": spec}),
            )
            .unwrap();
    }

    fn get_group(&self, name: &str) -> Arc<Value> {
        self.store
            .get(self.groups.as_ref().unwrap(), Some(NS), name)
            .unwrap()
    }

    fn create(&self, pod: Value) {
        self.store.create(&self.pods, Some(NS), pod).unwrap();
    }

    fn get(&self, name: &str) -> Arc<Value> {
        self.store.get(&self.pods, Some(NS), name).unwrap()
    }

    /// Every stored version of the pods and groups so far, oldest first, with their
    /// resourceVersions.
    fn history(&self, resource: &str) -> Vec<(u64, Arc<Value>)> {
        let (events, _) = self.store.watch(resource, Some(NS), 1).unwrap();
        events.into_iter().map(|e| (e.rv, e.object)).collect()
    }

    fn pod_history(&self, name: &str) -> Vec<(u64, Arc<Value>)> {
        self.history("/pods")
            .into_iter()
            .filter(|(_, p)| p["metadata"]["name"] == name)
            .collect()
    }

    /// The resourceVersion at which pod `name` was first bound.
    fn bound_at(&self, name: &str) -> Option<u64> {
        self.pod_history(name)
            .into_iter()
            .find(|(_, p)| p["spec"]["nodeName"].is_string())
            .map(|(rv, _)| rv)
    }

    /// The phases group `name` went through, in order, without repeats.
    fn group_phases(&self, name: &str) -> Vec<String> {
        let key = self.groups.as_ref().unwrap().key();
        let mut phases: Vec<String> = Vec::new();
        for (_, g) in self.history(&key) {
            if g["metadata"]["name"] != name {
                continue;
            }
            if let Some(p) = g["status"]["phase"].as_str()
                && phases.last().map(String::as_str) != Some(p)
            {
                phases.push(p.to_owned());
            }
        }
        phases
    }
}

/// Polls `check` until it returns `Some`, or fails after a generous timeout.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

fn scheduled_message(pod: &Value) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
        .filter(|c| c["reason"] == "Unschedulable")
        .and_then(|c| c["message"].as_str().map(str::to_owned))
}

/// Waits until pod `name` is unschedulable with a message containing `text`.
async fn waits_with(c: &Cluster, name: &str, text: &str) -> String {
    eventually(&format!("{name} unschedulable with {text:?}"), || {
        scheduled_message(&c.get(name)).filter(|m| m.contains(text))
    })
    .await
}

#[tokio::test]
async fn a_volcano_group_waits_whole_until_min_member_is_lowered() {
    let c = cluster(Some(VOLCANO));
    c.group(
        "mnist",
        json!({"minMember": 3, "queue": "default", "minResources": {"nvidia.com/gpu": 2}}),
    );
    for i in 0..2 {
        c.create(member(
            VOLCANO,
            "mnist",
            &format!("mnist-worker-{i}"),
            1,
            "30s",
        ));
    }
    let message = waits_with(&c, "mnist-worker-0", "valid: 2, min: 3").await;
    assert!(
        message.starts_with(
            "3/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 3 minAvailable"
        ),
        "{message}"
    );
    assert!(
        message.contains("Not enough valid tasks for gang-scheduling, valid: 2, min: 3"),
        "{message}"
    );
    waits_with(&c, "mnist-worker-1", "podgroup ml/mnist").await;
    // Admitted (its minResources fit), but nothing bound: the gang is not complete.
    assert_eq!(c.get_group("mnist")["status"]["phase"], "Inqueue");
    assert!(c.bound_at("mnist-worker-0").is_none() && c.bound_at("mnist-worker-1").is_none());

    c.store
        .patch(
            c.groups.as_ref().unwrap(),
            Some(NS),
            "mnist",
            Patch::Merge(json!({"spec": {"minMember": 2}})),
            Part::Whole,
        )
        .unwrap();
    for i in 0..2 {
        eventually("the gang running", || {
            (phase(&c.get(&format!("mnist-worker-{i}"))) == "Running").then_some(())
        })
        .await;
    }
    let group = eventually("the group Running", || {
        let g = c.get_group("mnist");
        (g["status"]["phase"] == "Running" && g["status"]["running"] == 2).then_some(g)
    })
    .await;
    assert_eq!(group["spec"]["minMember"], 2);
    assert_eq!(c.group_phases("mnist"), ["Pending", "Inqueue", "Running"]);
    // Both were bound in the same pass, one right after the other.
    let (a, b) = (
        c.bound_at("mnist-worker-0").unwrap(),
        c.bound_at("mnist-worker-1").unwrap(),
    );
    assert!(a.abs_diff(b) <= 4, "bound together: rv {a} and {b}");
}

#[tokio::test]
async fn a_coscheduled_group_too_big_for_the_cluster_runs_once_a_node_is_added() {
    let c = cluster(Some(PLUGINS));
    c.group("big", json!({"minMember": 3}));
    for i in 0..3 {
        c.create(member(PLUGINS, "big", &format!("big-worker-{i}"), 2, "30s"));
    }
    // Three two-GPU pods on two two-GPU nodes: none is bound.
    let message = waits_with(
        &c,
        "big-worker-0",
        "Insufficient nvidia.com/gpu. PodGroup ml/big",
    )
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. PodGroup ml/big gets rejected \
         due to Pod big-worker-2 is unschedulable even after PostFilter."
    );
    for i in 0..3 {
        waits_with(&c, &format!("big-worker-{i}"), "PodGroup ml/big").await;
        assert!(c.bound_at(&format!("big-worker-{i}")).is_none());
    }
    assert_eq!(c.get_group("big")["status"]["phase"], "PreScheduling");

    // A third node, created through the API as a cluster autoscaler would.
    let nodes = c.store.resource("", "nodes").unwrap();
    c.store
        .create(
            &nodes,
            None,
            json!({"metadata": {"name": "extra-node", "labels": {"kubernetes.io/hostname": "extra-node"}},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2", "pods": "110"}}}),
        )
        .unwrap();
    for i in 0..3 {
        eventually("the gang running", || {
            (phase(&c.get(&format!("big-worker-{i}"))) == "Running").then_some(())
        })
        .await;
    }
    let on_extra = (0..3)
        .filter(|i| c.get(&format!("big-worker-{i}"))["spec"]["nodeName"] == "extra-node")
        .count();
    assert_eq!(on_extra, 1, "the new node took one member");
    let group = eventually("the group Running", || {
        let g = c.get_group("big");
        (g["status"]["phase"] == "Running").then_some(g)
    })
    .await;
    assert_eq!(group["status"]["running"], 3);
    assert_eq!(group["status"]["scheduled"], 3);
    assert!(group["status"]["scheduleStartTime"].is_string());
    let phases = c.group_phases("big");
    assert_eq!(phases.first().map(String::as_str), Some("Pending"));
    assert_eq!(phases.last().map(String::as_str), Some("Running"));
    assert!(phases.iter().any(|p| p == "PreScheduling"), "{phases:?}");
}

/// Groups `first` and `second` each need all four GPUs of the cluster (two pods of two GPUs):
/// one runs, then the other, and the second never holds a GPU while the first runs.
async fn competing_groups_take_turns(scheduler: &str) {
    let c = cluster(Some(scheduler));
    for g in ["first", "second"] {
        c.group(
            g,
            json!({"minMember": 2, "minResources": {"nvidia.com/gpu": 4}}),
        );
        for i in 0..2 {
            c.create(member(scheduler, g, &format!("{g}-worker-{i}"), 2, "500ms"));
        }
    }
    for i in 0..2 {
        eventually("the second gang done", || {
            (phase(&c.get(&format!("second-worker-{i}"))) == "Succeeded").then_some(())
        })
        .await;
    }
    let first_done = (0..2)
        .map(|i| {
            c.pod_history(&format!("first-worker-{i}"))
                .into_iter()
                .find(|(_, p)| phase(p) == "Succeeded")
                .expect("the first gang ran to the end")
                .0
        })
        .max()
        .unwrap();
    for i in 0..2 {
        let name = format!("second-worker-{i}");
        let bound = c.bound_at(&name).unwrap();
        assert!(
            bound > first_done,
            "{name} bound at rv {bound}, before the first gang finished at {first_done}"
        );
        let waited = c
            .pod_history(&name)
            .iter()
            .find_map(|(_, p)| scheduled_message(p))
            .expect("the second gang waited with a message");
        assert!(waited.contains("ml/second"), "{waited}");
    }
}

#[tokio::test]
async fn two_volcano_groups_that_do_not_fit_together_run_one_after_the_other() {
    competing_groups_take_turns(VOLCANO).await;
}

#[tokio::test]
async fn two_coscheduled_groups_that_do_not_fit_together_run_one_after_the_other() {
    competing_groups_take_turns(PLUGINS).await;
}

#[tokio::test]
async fn volcano_keeps_a_group_pending_while_another_holds_its_reservation() {
    let c = cluster(Some(VOLCANO));
    c.group(
        "first",
        json!({"minMember": 2, "minResources": {"nvidia.com/gpu": 4}}),
    );
    c.group(
        "second",
        json!({"minMember": 1, "minResources": {"nvidia.com/gpu": 1}}),
    );
    eventually("the first admitted", || {
        (c.get_group("first")["status"]["phase"] == "Inqueue").then_some(())
    })
    .await;
    // The first group's pods are not created yet, but its minResources are reserved.
    c.create(member(VOLCANO, "second", "second-worker-0", 1, "30s"));
    let message = waits_with(&c, "second-worker-0", "podgroup ml/second is Pending").await;
    assert!(message.contains("not Inqueue"), "{message}");
    assert_eq!(c.get_group("second")["status"]["phase"], "Pending");
    // Once the first group's pods finish, it no longer holds anything back.
    for i in 0..2 {
        c.create(member(
            VOLCANO,
            "first",
            &format!("first-worker-{i}"),
            2,
            "300ms",
        ));
    }
    eventually("the second group running", || {
        (phase(&c.get("second-worker-0")) == "Running").then_some(())
    })
    .await;
    assert_eq!(
        c.group_phases("first"),
        ["Pending", "Inqueue", "Running", "Completed"]
    );
}

#[tokio::test]
async fn pods_of_a_scheduler_nobody_runs_stay_pending_untouched() {
    for gang in [None, Some(VOLCANO)] {
        let c = cluster(gang);
        let mut stray = member(VOLCANO, "none", "stray", 0, "1s");
        if gang.is_some() {
            stray["spec"]["schedulerName"] = json!("kube-batch");
        }
        c.create(stray);
        // An ordinary pod created after it runs: the scheduler has passed over the stray.
        c.create(
            json!({"metadata": {"name": "plain"}, "spec": {"containers": [
            {"name": "tensorflow", "image": "tf:2"}]}}),
        );
        eventually("the plain pod running", || {
            (phase(&c.get("plain")) == "Running").then_some(())
        })
        .await;
        let stray = c.get("stray");
        assert!(stray["spec"]["nodeName"].is_null(), "{stray}");
        // Only the status the API server gives every new pod: no scheduling condition.
        assert_eq!(stray["status"]["phase"], "Pending", "{stray}");
        assert!(
            stray["status"].get("conditions").is_none(),
            "untouched: {stray}"
        );
        assert_eq!(c.pod_history("stray").len(), 1, "never written");
    }
    // Without a gang scheduler, no PodGroup kind is served.
    let c = cluster(None);
    assert!(c.groups.is_none());
    assert!(
        c.store
            .resource("scheduling.volcano.sh", "podgroups")
            .is_none()
    );
    assert!(
        c.store
            .resource("scheduling.x-k8s.io", "podgroups")
            .is_none()
    );
}

#[tokio::test]
async fn coscheduled_members_are_rejected_after_the_schedule_timeout() {
    let c = cluster(Some(PLUGINS));
    c.group("slow", json!({"minMember": 2, "scheduleTimeoutSeconds": 1}));
    // The second member needs three GPUs, more than any node has.
    c.create(member(PLUGINS, "slow", "slow-worker-0", 1, "30s"));
    c.create(member(PLUGINS, "slow", "slow-worker-1", 3, "30s"));
    for name in ["slow-worker-0", "slow-worker-1"] {
        waits_with(
            &c,
            name,
            "rejected due to timeout after waiting 1s at plugin Coscheduling",
        )
        .await;
    }
    let messages: Vec<String> = c
        .pod_history("slow-worker-0")
        .iter()
        .filter_map(|(_, p)| scheduled_message(p))
        .collect();
    let timed_out = messages
        .iter()
        .position(|m| m.starts_with("rejected due to timeout"))
        .unwrap();
    assert!(
        messages[..timed_out].iter().any(|m| m.contains(
            "PodGroup ml/slow gets rejected due to Pod slow-worker-1 is unschedulable even after PostFilter"
        )),
        "the post-filter rejection came first: {messages:?}"
    );
    assert!(c.bound_at("slow-worker-0").is_none());
}

#[tokio::test]
async fn a_coscheduled_pod_without_its_podgroup_is_rejected_and_waits() {
    let c = cluster(Some(PLUGINS));
    c.create(member(PLUGINS, "missing", "orphan", 1, "30s"));
    let message = waits_with(&c, "orphan", "not found").await;
    assert_eq!(message, "PodGroup ml/missing not found");
    // Created late, the group takes the pod in.
    c.group("missing", json!({"minMember": 1}));
    eventually("the pod running", || {
        (phase(&c.get("orphan")) == "Running").then_some(())
    })
    .await;
}

/// kubectl and kube-rs against the HTTPS API, with the kubeconfig `up` writes: PodGroups are created, read through the short
/// name with the printer columns, listed, patched and deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_kube_rs_serve_podgroups() {
    let c = cluster(Some(VOLCANO));
    let server = common::serve(
        Arc::clone(&c.store),
        tfjob_cluster::http::server::ServerOptions::default(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_admin_kubeconfig(dir.path(), NS);
    let manifest = dir.path().join("pg.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: mnist\nspec:\n  minMember: 2\n  queue: default\n  minResources:\n    nvidia.com/gpu: \"2\"\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let kubectl = move |args: Vec<String>| {
        let (kubeconfig, cache) = (kubeconfig.clone(), cache.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let out = Command::new("kubectl")
                    .args(&args)
                    .env("KUBECONFIG", &kubeconfig)
                    .env("KUBECACHEDIR", &cache)
                    .env_remove("KUBERNETES_SERVICE_HOST")
                    .stdin(Stdio::null())
                    .output()
                    .expect("kubectl runs (CI installs it)");
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                assert!(out.status.success(), "kubectl {args:?}: {stderr}");
                assert!(!stderr.to_lowercase().contains("warning"), "{stderr}");
                String::from_utf8(out.stdout).unwrap()
            })
            .await
            .unwrap()
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    kubectl(args(&["apply", "-f", manifest.to_str().unwrap()])).await;
    eventually("the group Inqueue", || {
        (c.get_group("mnist")["status"]["phase"] == "Inqueue").then_some(())
    })
    .await;
    let table = kubectl(args(&["get", "pg"])).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["mnist", "Inqueue", "2"], "{table}");
    let wide = kubectl(args(&["get", "podgroups", "-o", "wide"])).await;
    assert!(wide.lines().next().unwrap().contains("QUEUE"), "{wide}");
    assert!(wide.contains("default"), "{wide}");
    let json_out = kubectl(args(&[
        "get",
        "podgroups.scheduling.volcano.sh",
        "mnist",
        "-o",
        "json",
    ]))
    .await;
    let obj: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(obj["spec"]["minResources"]["nvidia.com/gpu"], "2");

    // kube-rs, as the operator talks to it.
    use kube::api::{
        Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PatchParams,
    };
    let client = server.client().await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "scheduling.volcano.sh",
        "v1beta1",
        "PodGroup",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &resource);
    let mut created = DynamicObject::new("second", &resource);
    created.data = json!({"spec": {"minMember": 1}});
    api.create(&Default::default(), &created).await.unwrap();
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(names, ["mnist", "second"]);
    let patched = api
        .patch(
            "mnist",
            &PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"minMember": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["minMember"], 1);
    assert_eq!(
        patched.data["status"]["phase"], "Inqueue",
        "a spec patch leaves the status"
    );
    api.delete("second", &DeleteParams::default())
        .await
        .unwrap();
    assert!(api.get_opt("second").await.unwrap().is_none());
    kubectl(args(&["delete", "pg", "mnist"])).await;
    assert!(
        kubectl(args(&["get", "pg", "-o", "name"]))
            .await
            .trim()
            .is_empty()
    );
    server.running.handle.abort();
}
