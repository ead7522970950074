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
//! `Succeeded`, any other `Failed`; `sim.tfjob.dev/pod-reason` (`Evicted`) fails the pod as a
//! whole, with the message the embedded kubelet gives. Under `restartPolicy` `Always`, and
//! `OnFailure` after a failed run, the containers restart in place instead: their restart count
//! up, the ended run as their last state. A pod being deleted is removed at once, as a kubelet
//! whose containers stop instantly would. Every scripted value may be given per replica index;
//! kwok reads them with jq and Go templates generated here.

/// The annotation that marks a node as kwok's.
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

const DURATION: &str = "sim.tfjob.dev/duration";
const EXIT_CODE: &str = "sim.tfjob.dev/exit-code";
const PENDING_REASON: &str = "sim.tfjob.dev/pending-reason";
const TERMINATED_REASON: &str = "sim.tfjob.dev/terminated-reason";
const POD_REASON: &str = "sim.tfjob.dev/pod-reason";
const FAIL_TIMES: &str = "sim.tfjob.dev/fail-times";

/// The message of a container waiting for `sim.tfjob.dev/pending-reason`, as the embedded
/// cluster's kubelet words it (held to it by a test of the conformance suite), with `{image}`,
/// `{container}`, `{pod}` and `{ns}` for the container's image and name and the pod's name and
/// namespace; no message for any other reason.
pub const WAITING_MESSAGES: [(&str, &str); 5] = [
    (
        "ErrImagePull",
        r#"rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/{image}": not found"#,
    ),
    ("ImagePullBackOff", r#"Back-off pulling image "{image}""#),
    (
        "InvalidImageName",
        r#"Failed to apply default image tag "{image}": couldn't parse image name "{image}": invalid reference format"#,
    ),
    (
        "CreateContainerConfigError",
        r#"secret "{pod}-sim-missing" not found"#,
    ),
    (
        "CreateContainerError",
        r#"failed to reserve container name "{container}_{pod}_{ns}": name is reserved"#,
    ),
];

/// Go template lines, inside a `range` over the pod's containers, setting `$waitingMessage` for
/// `$waiting`.
fn waiting_message_template() -> String {
    let mut t = String::from(r#"{{ $waitingMessage := "" }}"#);
    for (reason, message) in WAITING_MESSAGES {
        let format = message
            .replace('"', "\\\"")
            .replace("{image}", "%[1]s")
            .replace("{container}", "%[2]s")
            .replace("{pod}", "%[3]s")
            .replace("{ns}", "%[4]s");
        t.push_str(&format!(
            r#"{{{{ if eq $waiting "{reason}" }}}}{{{{ $waitingMessage = printf "{format}" .image .name $.metadata.name $.metadata.namespace }}}}{{{{ end }}}}"#
        ));
    }
    t
}

/// The message of a pod that fails as a whole for a reason [`POD_FAILURE_MESSAGES`] does not
/// name: this, then the reason.
pub const POD_FAILURE_GENERIC: &str = "Pod failed on the node: ";

/// The message of a pod that fails as a whole with `sim.tfjob.dev/pod-reason`, as the embedded
/// cluster's kubelet words it (a test of the conformance suite holds the two to each other);
/// any other reason is `Pod failed on the node: <reason>`.
pub const POD_FAILURE_MESSAGES: [(&str, &str); 4] = [
    (
        "Evicted",
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 56Mi. Container tensorflow was using 3Gi, request is 0, has larger consumption of memory.",
    ),
    ("Shutdown", "Pod was rejected as the node is shutting down."),
    (
        "NodeShutdown",
        "Pod was rejected as the node is shutting down.",
    ),
    (
        "Terminated",
        "Pod was terminated in response to imminent node shutdown.",
    ),
];

/// How long a pod runs when it does not say.
const DEFAULT_DURATION_MS: u64 = 3000;

/// A jq expression (kwok evaluates its `expressionFrom` and selector keys with gojq) for the
/// pod's `annotation` as its replica index reads it: the `<index>=` entry, else the `*=` entry,
/// else a plain value, else `default` (`null` with none: the key then does not exist). Spaces
/// inside the annotation are ignored.
fn pick_jq(annotation: &str, default: Option<&str>) -> String {
    let fallback = default.map_or_else(|| "null".to_owned(), |d| format!("\"{d}\""));
    format!(
        r#"(.metadata.labels["training.kubeflow.org/replica-index"] // "") as $i | [(.metadata.annotations["{annotation}"] // "") | split(",")[] | gsub(" "; "") | select(. != "")] as $e | [($e[] | select(startswith($i + "=")) | ltrimstr($i + "=")), ($e[] | select(startswith("*=")) | ltrimstr("*=")), ($e[] | select(contains("=") | not)), {fallback}] | .[0]"#
    )
}

/// Go template lines (kwok's status templates, with sprig) setting `$<var>` to the pod's
/// `annotation` as its replica index reads it, as [`pick_jq`] does, else to `default`.
fn pick_template(var: &str, annotation: &str, default: &str) -> String {
    let t = |line: &str| line.replace("VAR", var);
    [
        t(r#"{{ $VARIndex := index (.metadata.labels | default dict) "training.kubeflow.org/replica-index" | default "" }}"#),
        t(&format!(r#"{{{{ $VARScript := index (.metadata.annotations | default dict) "{annotation}" | default "" }}}}"#)),
        t(r#"{{ $VARExact := "" }}{{ $VARAny := "" }}{{ $VARPlain := "" }}"#),
        t(r#"{{ range splitList "," $VARScript }}"#),
        t(r#"{{ $entry := trim . }}"#),
        t(r#"{{ if contains "=" $entry }}"#),
        t(r#"{{ $key := trim (first (splitList "=" $entry)) }}"#),
        t(r#"{{ $value := trim (last (splitList "=" $entry)) }}"#),
        t(r#"{{ if eq $key $VARIndex }}{{ $VARExact = $value }}{{ else if eq $key "*" }}{{ $VARAny = $value }}{{ end }}"#),
        t(r#"{{ else if ne $entry "" }}{{ $VARPlain = $entry }}{{ end }}"#),
        t(r#"{{ end }}"#),
        t(&format!(r#"{{{{ $VAR := $VARExact | default $VARAny | default $VARPlain | default "{default}" }}}}"#)),
    ]
    .join("\n      ")
}

/// Go template lines setting `$code` (the main container's exit code: scripted, else implied by
/// the pod or terminated reason, as the embedded kubelet implies it), `$scriptedReason` and
/// `$podReason` (empty where not scripted). A restart in place past the replica's
/// `fail-times` runs clean: those restarts are counted here from the pod's restart count, which
/// the run ledger (`crate::runs`) cannot clear in time for a short run.
fn ending_template() -> String {
    [
        pick_template("scriptedCode", EXIT_CODE, ""),
        pick_template("scriptedReason", TERMINATED_REASON, ""),
        pick_template("podReason", POD_REASON, ""),
        pick_template("failTimes", FAIL_TIMES, ""),
        concat!(
            r#"{{ $restarts := 0 }}{{ with .status.containerStatuses }}{{ $restarts = (index . 0).restartCount }}{{ end }}"#,
            r#"{{ if and (ne $failTimes "") (ge (int64 $restarts) (int64 $failTimes)) }}"#,
            r#"{{ $scriptedCode = "" }}{{ $scriptedReason = "" }}{{ $podReason = "" }}{{ end }}"#,
        )
        .to_owned(),
        concat!(
            r#"{{ $implied := "0" }}{{ if or (ne $podReason "") (eq $scriptedReason "OOMKilled") }}{{ $implied = "137" }}"#,
            r#"{{ else if and (ne $scriptedReason "") (ne $scriptedReason "Completed") }}{{ $implied = "1" }}{{ end }}"#,
        )
        .to_owned(),
        r#"{{ $code := $scriptedCode | default $implied }}"#.to_owned(),
    ]
    .join("\n      ")
}

/// A jq expression for what a running pod's run ends in, as [`ending_template`] and the
/// restart policy decide: `restart` in place (`Always`, or `OnFailure` with a non-zero exit
/// code, unless the pod fails as a whole) or `end`.
fn fate_jq() -> String {
    format!(
        r#"((.status.containerStatuses // [])[0].restartCount // 0) as $n | ({fail}) as $f | ($f != null and ($f | test("^[0-9]+$")) and $n >= ($f | tonumber)) as $clean | (if $clean then null else ({code}) end) as $x | (if $clean then null else ({pod}) end) as $r | (if $clean then null else ({reason}) end) as $t | ($x // (if $r != null or $t == "OOMKilled" then "137" elif $t == null or $t == "Completed" then "0" else "1" end)) as $c | if $r != null then "end" elif .spec.restartPolicy == "Always" then "restart" elif .spec.restartPolicy == "OnFailure" and $c != "0" then "restart" else "end" end"#,
        fail = pick_jq(FAIL_TIMES, None),
        code = pick_jq(EXIT_CODE, None),
        pod = pick_jq(POD_REASON, None),
        reason = pick_jq(TERMINATED_REASON, None),
    )
}

/// Go template lines setting `$podMessage` for `$podReason`.
fn pod_message_template() -> String {
    let mut t = format!(r#"{{{{ $podMessage := printf "{POD_FAILURE_GENERIC}%s" $podReason }}}}"#);
    for (reason, message) in POD_FAILURE_MESSAGES {
        t.push_str(&format!(
            r#"{{{{ if eq $podReason "{reason}" }}}}{{{{ $podMessage = "{message}" }}}}{{{{ end }}}}"#
        ));
    }
    t
}
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
            // As the embedded cluster labels its nodes; a node with GPUs says so, as NVIDIA's
            // feature discovery labels one.
            let mut labels = serde_json::json!({
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "sim",
                "type": "kwok",
            });
            if node.gpus > 0 {
                labels["nvidia.com/gpu.present"] = "true".into();
            }
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
                    "labels": labels,
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
        &pod_created(),
        &pod_running(),
        &pod_ended(),
        &container_restarted(),
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
fn pod_created() -> String {
    POD_CREATED
        .replace(
            "@WAITING@",
            &pick_template("waiting", PENDING_REASON, "ContainerCreating"),
        )
        .replace("@MESSAGE@", &waiting_message_template())
}

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
      @WAITING@
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
        @MESSAGE@
        state:
          waiting:
            reason: {{ $waiting | Quote }}
            {{ if ne $waitingMessage "" }}message: {{ $waitingMessage | Quote }}{{ end }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
      phase: Pending
"#;

/// Created containers run.
fn pod_running() -> String {
    POD_RUNNING.replace("@PENDING@", &pick_jq(PENDING_REASON, None))
}

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
    - key: '@PENDING@'
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

/// A running pod whose run does not restart in place ends after its duration, with its
/// scripted exit code and reason (each the value for its replica index, else the `*` value,
/// else a plain value), or fails as a whole with its `pod-reason`.
fn pod_ended() -> String {
    let duration = pick_jq(DURATION, Some(&format!("{DEFAULT_DURATION_MS}ms")));
    let ending = ending_template();
    let message = pod_message_template();
    let fate = fate_jq();
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
    - key: '{fate}'
      operator: In
      values: ["end"]
  delay:
    durationMilliseconds: {DEFAULT_DURATION_MS}
    durationFrom:
      expressionFrom: '{duration}'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {ending}
      {message}
      {{{{ $failed := or (ne $code "0") (ne $podReason "") }}}}
      {{{{ $reason := $scriptedReason | default (ternary "Error" "Completed" $failed) }}}}
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
      {{{{ range .status.containerStatuses }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: false
        restartCount: {{{{ .restartCount }}}}
        started: false
        {{{{ if .lastState }}}}lastState: {{{{ .lastState | toJson }}}}{{{{ end }}}}
        state:
          terminated:
            exitCode: {{{{ atoi $code }}}}
            reason: {{{{ $reason | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {{{{ ternary "Failed" "Succeeded" $failed }}}}
      {{{{ if ne $podReason "" }}}}reason: {{{{ $podReason | Quote }}}}
      message: {{{{ $podMessage | Quote }}}}{{{{ end }}}}
"#
    )
}

/// A running pod whose run restarts in place (`Always`, or `OnFailure` after a failure) has
/// its containers restarted after its duration: their restart count up by one, the run that
/// ended as their last state, running again.
fn container_restarted() -> String {
    let duration = pick_jq(DURATION, Some(&format!("{DEFAULT_DURATION_MS}ms")));
    let ending = ending_template();
    let fate = fate_jq();
    format!(
        r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfjob-container-restarted
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
    - key: '{fate}'
      operator: In
      values: ["restart"]
  delay:
    durationMilliseconds: {DEFAULT_DURATION_MS}
    durationFrom:
      expressionFrom: '{duration}'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {ending}
      {{{{ $reason := $scriptedReason | default (ternary "Error" "Completed" (ne $code "0")) }}}}
      containerStatuses:
      {{{{ range .status.containerStatuses }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: true
        restartCount: {{{{ add1 .restartCount }}}}
        started: true
        lastState:
          terminated:
            exitCode: {{{{ atoi $code }}}}
            reason: {{{{ $reason | Quote }}}}
            startedAt: {{{{ .state.running.startedAt | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
        state:
          running:
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: Running
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
    #[test]
    fn a_pick_falls_back_to_its_default_or_to_null() {
        assert!(pick_jq(DURATION, Some("3000ms")).ends_with(r#""3000ms"] | .[0]"#));
        assert!(pick_jq(PENDING_REASON, None).ends_with("null] | .[0]"));
        let template = pick_template("code", EXIT_CODE, "0");
        assert!(
            template.contains(r#""sim.tfjob.dev/exit-code""#),
            "{template}"
        );
        assert!(
            template.ends_with(
                r#"{{ $code := $codeExact | default $codeAny | default $codePlain | default "0" }}"#
            ),
            "{template}"
        );
    }

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
    fn the_configuration_is_six_stages() {
        let config = configuration();
        assert_eq!(config.matches("kind: Stage\n").count(), 6);
        assert!(config.contains("durationMilliseconds: 3000"), "{config}");
        // The format! escapes came out as the template's own braces.
        assert!(config.contains("{{ $now := Now }}"));
        assert!(!config.contains("{{{{"));
        assert!(!config.contains('@'), "a placeholder left: {config}");
    }
}
