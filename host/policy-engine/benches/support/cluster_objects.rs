//! Nodes and namespaces as an API server serves them to a watch, for the benchmarks of cluster
//! reads: the shape of a GPU node of a managed cloud cluster (about twenty labels, the
//! annotations its agents write, taints, capacity and allocatable, five conditions with their
//! messages, addresses, node info, fifty images and server-side apply's managed fields), and a
//! namespace with a few team labels and a last-applied annotation. The cache trims what
//! policies cannot read (images, managed fields, the last-applied copy), so these carry it: what
//! is measured is what a real watch would feed.

use serde_json::{Value, json};

/// The writers of a node's fields, each with its managed-fields entry.
const MANAGERS: [&str; 4] = [
    "kubelet",
    "kube-controller-manager",
    "node-problem-detector",
    "gke-agent",
];

/// Node `i` (`gpu-node-00042`), in zone `i % 3` and pool `i % 4`.
pub fn node(i: usize) -> Value {
    let name = format!("gpu-node-{i:05}");
    let zone = format!("us-central1-{}", ["a", "b", "c"][i % 3]);
    let pool = format!("pool-{}", i % 4);
    let images: Vec<Value> = (0..50)
        .map(|k| {
            json!({
                "names": [
                    format!("registry.example.com/ml/image-{k}@sha256:{:064x}", k * 7919 + i),
                    format!("registry.example.com/ml/image-{k}:v{k}.{}", i % 10),
                ],
                "sizeBytes": 100_000_000 + k * 1_000_003,
            })
        })
        .collect();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": "2026-12-01T10:00:00Z",
            "lastTransitionTime": "2026-11-20T08:00:00Z",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": format!("{:08x}-1f2e-4d3c-8b7a-{:012x}", i, i * 31),
            "resourceVersion": format!("{}", 1_000_000 + i),
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "a2-highgpu-8g",
                "beta.kubernetes.io/os": "linux",
                "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-boot-disk": "pd-balanced",
                "cloud.google.com/gke-container-runtime": "containerd",
                "cloud.google.com/gke-nodepool": pool,
                "cloud.google.com/gke-os-distribution": "cos",
                "cloud.google.com/machine-family": "a2",
                "cloud.google.com/private-node": "false",
                "failure-domain.beta.kubernetes.io/region": "us-central1",
                "failure-domain.beta.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "a2-highgpu-8g",
                "nvidia.com/gpu.present": "true",
                "topology.kubernetes.io/region": "us-central1",
                "topology.kubernetes.io/zone": zone,
                "team": format!("team-{}", i % 16),
            },
            "annotations": {
                "container.googleapis.com/instance_id": format!("{}", 7_000_000_000_000_000u64 + i as u64),
                "csi.volume.kubernetes.io/nodeid": format!("{{\"pd.csi.storage.gke.io\":\"projects/ml/zones/{zone}/instances/{name}\"}}"),
                "node.alpha.kubernetes.io/ttl": "0",
                "node.gke.io/last-applied-node-labels": "cloud.google.com/gke-boot-disk=pd-balanced,cloud.google.com/gke-container-runtime=containerd,cloud.google.com/gke-nodepool=pool",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": MANAGERS.iter().map(|manager| json!({
                "manager": manager,
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-12-01T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastHeartbeatTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}}, "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}},
            })).collect::<Vec<_>>(),
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", i / 256 % 256, i % 256),
            "podCIDRs": [format!("10.{}.{}.0/24", i / 256 % 256, i % 256)],
            "providerID": format!("gce://ml/{zone}/{name}"),
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "12", "ephemeral-storage": "98831908Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "87540324Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "11900m", "ephemeral-storage": "47060071478", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "77039716Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                condition("FrequentContainerdRestart", "False", "NoFrequentContainerdRestart", "containerd is functioning properly"),
                condition("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status. AppArmor enabled"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": format!("10.128.{}.{}", i / 256 % 256, i % 256)},
                {"type": "ExternalIP", "address": format!("34.70.{}.{}", i / 256 % 256, i % 256)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{:032x}", i * 104_729),
                "systemUUID": format!("{:08x}-0000-0000-0000-{:012x}", i, i),
                "bootID": format!("{:08x}-aaaa-bbbb-cccc-{:012x}", i * 3, i),
                "kernelVersion": "6.1.100+",
                "osImage": "Container-Optimized OS from Google",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.4-gke.1256000",
                "kubeProxyVersion": "v1.31.4-gke.1256000",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    })
}

/// Namespace `i` (`team-00042`), labelled with its team and cost center.
pub fn namespace(i: usize) -> Value {
    let name = format!("team-{i:05}");
    let last_applied = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"team": name, "cost-center": format!("cc-{}", i % 100)}},
    });
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": format!("{:08x}-5a6b-4c7d-9e8f-{:012x}", i, i * 17),
            "resourceVersion": format!("{}", 2_000_000 + i),
            "creationTimestamp": "2026-10-01T08:00:00Z",
            "labels": {
                "kubernetes.io/metadata.name": name,
                "team": name,
                "cost-center": format!("cc-{}", i % 100),
                "environment": "production",
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied.to_string(),
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
                "time": "2026-10-01T08:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {".": {}, "f:cost-center": {}, "f:environment": {}, "f:team": {}}}},
            }],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}
