//! What kwok simulates: the nodes (Node objects it keeps `Ready`, with the capacity asked for)
//! and the life of each pod bound to one of them, in kwok's own `Stage` documents.
//!
//! A pod is created (an IP, its containers waiting: `ContainerCreating`, or for good with the
//! reason its `sim.tfjob.dev/pending-reason` names, such as `InvalidImageName`), runs (`Running`, ready), and
//! after its `sim.tfjob.dev/duration` (Go syntax, `3s` by default, as on the embedded cluster)
//! ends with the exit code the embedded cluster's simulated kubelet gives it:
//! `sim.tfjob.dev/exit-code`, one value or values per replica index (`0=137,*=0`, the index
//! being the pod's `training.kubeflow.org/replica-index` label), and the reason of
//! `sim.tfjob.dev/terminated-reason` or else `Completed`/`Error`; past the replica's
//! `sim.tfjob.dev/fail-times` runs, a run is clean (`crate::runs` counts them). Exit code 0 makes the pod
//! `Succeeded`, any other `Failed`. A pod being deleted is removed at once, as a kubelet whose
//! containers stop instantly would. Pods that restart in place (`restartPolicy` `OnFailure` or
//! `Always`) run and are not ended: a kubelet's restart in place is not simulated here (see
//! docs/compatibility.md).

/// The annotation that marks a node as kwok's.
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// How long a pod runs when it does not say.
const DEFAULT_DURATION_MS: u64 = 3000;

/// One simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub cpu: String,
    pub memory: String,
    pub gpus: u32,
    pub pods: u32,
}

impl Default for NodeSpec {
    /// The embedded cluster's default node: 8 CPUs and 32 GiB.
    fn default() -> Self {
        NodeSpec {
            cpu: "8".into(),
            memory: "32Gi".into(),
            gpus: 0,
            pods: 110,
        }
    }
}

/// The Node objects of `nodes`, named `kwok-node-0`, `kwok-node-1`, ..., as one JSON list.
/// Their capacity rides in annotations that the node stage turns into status, so it does not
/// depend on what a create keeps of a status.
pub fn nodes_manifest(nodes: &[NodeSpec]) -> String {
    let items: Vec<serde_json::Value> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let name = format!("kwok-node-{i}");
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        NODE_ANNOTATION: "fake",
                        "sim.tfjob.dev/cpu": node.cpu,
                        "sim.tfjob.dev/memory": node.memory,
                        "sim.tfjob.dev/gpus": node.gpus.to_string(),
                        "sim.tfjob.dev/pods": node.pods.to_string(),
                    },
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                },
            })
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// kwok's configuration: the stages of nodes and pods (YAML documents).
pub fn configuration() -> String {
    [
        NODE_READY,
        POD_CREATED,
        POD_RUNNING,
        &pod_ended(),
        POD_DELETED,
    ]
    .join("---\n")
}

/// A node not yet ready becomes ready with the capacity its annotations give.
const NODE_READY: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $a := .metadata.annotations }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: simulated by kwok
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ range list "MemoryPressure" "DiskPressure" "PIDPressure" "NetworkUnavailable" }}
      - type: {{ . }}
        status: "False"
        reason: Simulated
        message: simulated by kwok
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - type: InternalIP
        address: {{ NodeIP | Quote }}
      - type: Hostname
        address: {{ NodeName | Quote }}
      {{ $capacity := dict "cpu" (index $a "sim.tfjob.dev/cpu") "memory" (index $a "sim.tfjob.dev/memory") "pods" (index $a "sim.tfjob.dev/pods") }}
      {{ if ne (index $a "sim.tfjob.dev/gpus" | default "0") "0" }}
      {{ $_ := set $capacity "nvidia.com/gpu" (index $a "sim.tfjob.dev/gpus") }}
      {{ end }}
      allocatable:
      {{ range $k, $v := $capacity }}
        {{ $k | Quote }}: {{ $v | Quote }}
      {{ end }}
      capacity:
      {{ range $k, $v := $capacity }}
        {{ $k | Quote }}: {{ $v | Quote }}
      {{ end }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ Version | Quote }}
        kubeProxyVersion: {{ Version | Quote }}
      phase: Running
"#;

/// A pod bound to a node gets an IP and its containers start being created.
const POD_CREATED: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-pod-created
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.podIP'
      operator: DoesNotExist
  delay:
    durationMilliseconds: 100
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $waiting := index (.metadata.annotations | default dict) "sim.tfjob.dev/pending-reason" | default "ContainerCreating" }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "False"
        reason: ContainersNotReady
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: {{ $waiting | Quote }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
      phase: Pending
"#;

/// Created containers run.
const POD_RUNNING: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Pending"]
    - key: '.status.podIP'
      operator: Exists
    # A pod scripted to wait (an image that cannot be pulled, say) never starts.
    - key: '.metadata.annotations["sim.tfjob.dev/pending-reason"]'
      operator: DoesNotExist
  delay:
    durationMilliseconds: 100
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"#;

/// A running pod that does not restart in place ends after its duration, with its scripted
/// exit code: the value for its replica index, else the `*` value, else a plain value, else 0.
fn pod_ended() -> String {
    format!(
        r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-pod-ended
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ["Running"]
    - key: '.spec.restartPolicy'
      operator: In
      values: ["Never"]
  delay:
    durationMilliseconds: {DEFAULT_DURATION_MS}
    durationFrom:
      expressionFrom: '.metadata.annotations["sim.tfjob.dev/duration"]'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $index := index (.metadata.labels | default dict) "training.kubeflow.org/replica-index" | default "" }}}}
      {{{{ $script := index (.metadata.annotations | default dict) "sim.tfjob.dev/exit-code" | default "" }}}}
      {{{{ $exact := "" }}}}{{{{ $any := "" }}}}{{{{ $plain := "" }}}}
      {{{{ range splitList "," $script }}}}
      {{{{ $entry := trim . }}}}
      {{{{ if contains "=" $entry }}}}
      {{{{ $key := trim (first (splitList "=" $entry)) }}}}
      {{{{ $value := trim (last (splitList "=" $entry)) }}}}
      {{{{ if eq $key $index }}}}{{{{ $exact = $value }}}}{{{{ else if eq $key "*" }}}}{{{{ $any = $value }}}}{{{{ end }}}}
      {{{{ else if ne $entry "" }}}}{{{{ $plain = $entry }}}}{{{{ end }}}}
      {{{{ end }}}}
      {{{{ $code := $exact | default $any | default $plain | default "0" }}}}
      {{{{ $failed := ne $code "0" }}}}
      {{{{ $reason := index (.metadata.annotations | default dict) "sim.tfjob.dev/terminated-reason" | default (ternary "Error" "Completed" $failed) }}}}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{{{ $now | Quote }}}}
      - type: Ready
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{{{ $now | Quote }}}}
      - type: ContainersReady
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{{{ $now | Quote }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{{{ atoi $code }}}}
            reason: {{{{ $reason | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {{{{ ternary "Failed" "Succeeded" $failed }}}}
"#
    )
}

/// A pod being deleted goes at once.
const POD_DELETED: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-pod-deleted
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
  next:
    delete: true
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_carry_their_capacity_and_the_kwok_annotation() {
        let manifest = nodes_manifest(&[
            NodeSpec::default(),
            NodeSpec {
                gpus: 4,
                ..NodeSpec::default()
            },
        ]);
        let doc: serde_json::Value = serde_json::from_str(&manifest).unwrap();
        let items = doc["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1]["metadata"]["name"], "kwok-node-1");
        let annotations = &items[1]["metadata"]["annotations"];
        assert_eq!(annotations[NODE_ANNOTATION], "fake");
        assert_eq!(annotations["sim.tfjob.dev/gpus"], "4");
        assert_eq!(annotations["sim.tfjob.dev/cpu"], "8");
    }

    #[test]
    fn the_configuration_is_five_stages() {
        let config = configuration();
        assert_eq!(config.matches("kind: Stage\n").count(), 5);
        assert!(config.contains("durationMilliseconds: 3000"), "{config}");
        // The format! escapes came out as the template's own braces.
        assert!(config.contains("{{ $now := Now }}"));
        assert!(!config.contains("{{{{"));
    }
}
