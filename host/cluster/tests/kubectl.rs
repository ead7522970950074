//! The real kubectl against the embedded API server, with kubectl's default client validation:
//! it reads the server's OpenAPI v3 documents, finds that the server validates fields itself,
//! and sends `fieldValidation=Strict`. `apply`, `apply --server-side`, `create` and `replace`
//! of built-in kinds and of TFJobs succeed, a second apply patches, and the fault endpoint is
//! driven with `kubectl get --raw` and `kubectl replace --raw`. With the simulated kubelet,
//! `kubectl logs` reads what the containers printed: plain, followed to the container's end,
//! tailed, with timestamps, per container and from the run before a restart. `kubectl create
//! namespace|configmap|secret|serviceaccount` send protobuf, which the server decodes (binary
//! ConfigMap data byte for byte) and answers in protobuf. Every request goes over HTTPS, with
//! the kubeconfig `up` writes. CI installs kubectl; the test needs it on PATH.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_cluster::http::server::ServerOptions;
use tfjob_cluster::kubelet::{self, KubeletConfig};

struct Kubectl {
    server: common::Serving,
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: tempfile::TempDir,
    store: Arc<Store>,
    _runtime: tokio::runtime::Runtime,
}

/// Starts the server (with the TFJob CRD and its admission check, no operator) on a background
/// runtime and writes a kubeconfig for it.
fn start() -> Kubectl {
    start_cluster(false)
}

/// The same, with the simulated kubelet running the pods.
fn start_with_kubelet() -> Kubectl {
    start_cluster(true)
}

fn start_cluster(with_kubelet: bool) -> Kubectl {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::new();
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd()).unwrap();
    tfjob_cluster::storage::crd::install(&store, crd).unwrap();
    store.set_validator(
        "kubeflow.org",
        "tfjobs",
        Arc::new(tfjob_api::validation::admit),
    );
    let server = runtime.block_on(common::serve(Arc::clone(&store), ServerOptions::default()));
    if with_kubelet {
        let config = KubeletConfig {
            startup: Duration::from_millis(20),
            ..KubeletConfig::default()
        };
        let _guard = runtime.enter();
        // Runs until the runtime is dropped with the test.
        drop(kubelet::spawn(Arc::clone(&store), config));
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_admin_kubeconfig(dir.path(), "default");
    Kubectl {
        server,
        kubeconfig,
        cache: dir.path().join("cache"),
        dir,
        store,
        _runtime: runtime,
    }
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            // A fresh cache per server: discovery and OpenAPI are read from this server only.
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs (CI installs it; locally: apt-get install kubernetes-client)")
    }

    /// Runs kubectl and returns its stdout, failing on a non-zero exit or any warning.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !stderr.to_lowercase().contains("warning"),
            "kubectl {args:?} warned: {stderr}"
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl expecting it to fail, and returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Waits (up to 30 s) until pod `name` in `default` satisfies `done`.
    fn wait_pod(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let pods = self.store.resource("", "pods").unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(p) = self.store.get(&pods, Some("default"), name)
                && done(&p)
            {
                return Arc::unwrap_or_clone(p);
            }
            assert!(Instant::now() < deadline, "pod {name} never became {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn create_pod(&self, pod: Value) -> String {
        let pods = self.store.resource("", "pods").unwrap();
        let created = self.store.create(&pods, Some("default"), pod).unwrap();
        created["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples")
        .join(name)
        .display()
        .to_string()
}

const BUILTINS: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team-a
data:
  size: "1"
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: team-a
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: team-a
  labels: {app: web}
spec:
  containers:
  - name: web
    image: nginx:1
"#;

#[test]
fn kubectl_applies_and_creates_with_default_validation() {
    let k = start();
    let builtins = k.file("builtins.yaml", BUILTINS);
    let applied = k.ok(&["apply", "-f", &builtins]);
    for created in [
        "namespace/team-a created",
        "configmap/settings created",
        "service/web created",
        "pod/web created",
    ] {
        assert!(applied.contains(created), "{applied}");
    }
    let changed = k.file(
        "changed.yaml",
        &BUILTINS.replace(r#"size: "1""#, r#"size: "2""#),
    );
    let again = k.ok(&["apply", "-f", &changed]);
    assert!(again.contains("configmap/settings configured"), "{again}");
    assert!(again.contains("service/web unchanged"), "{again}");
    assert_eq!(
        k.ok(&[
            "get",
            "cm",
            "settings",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.size}"
        ]),
        "2"
    );
    // Twice, so the second apply reads the field sets the first one recorded.
    for _ in 0..2 {
        let ssa = k.ok(&["apply", "--server-side", "-f", &builtins]);
        assert!(ssa.contains("pod/web serverside-applied"), "{ssa}");
    }

    let retry = example("demo-retry.yaml");
    assert!(
        k.ok(&["apply", "-f", &retry])
            .contains("tfjob.kubeflow.org/demo-retry created")
    );
    assert!(k.ok(&["apply", "-f", &retry]).contains("unchanged"));
    let dist = example("demo-dist-mnist.yaml");
    assert!(
        k.ok(&["apply", "--server-side", "-f", &dist])
            .contains("serverside-applied")
    );
    let gpu = example("gpu-mnist.yaml");
    assert!(
        k.ok(&["create", "-f", &gpu])
            .contains("tfjob.kubeflow.org/gpu-mnist created")
    );
    assert!(k.ok(&["replace", "-f", &gpu]).contains("replaced"));
    let tfjobs = k.store.resource("kubeflow.org", "tfjobs").unwrap();
    assert_eq!(k.store.list(&tfjobs, None).0.len(), 3);

    // Server-side validation still has the last word: admission names the bad field.
    let bad = k.file(
        "bad.yaml",
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: bad}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      template: {spec: {containers: [{name: tensorflow}]}}\n",
    );
    let out = k.run(&["apply", "-f", &bad]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("containers[0].image"), "{err}");
}

/// A TFJob with a misspelt run policy and a misspelt container field.
const MISSPELT_JOB: &str = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: NAME}\nspec:\n  runPolicy: {cleanPodPolicyy: All}\n  tfReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          containers: [{name: tensorflow, image: trainer:1, imagePullPolicyy: Always}]\n";

#[test]
fn misspelt_fields_are_refused_warned_about_or_pruned_as_kubectl_asks() {
    let k = start();
    let job = |name: &str| k.file(&format!("{name}.yaml"), &MISSPELT_JOB.replace("NAME", name));
    let run_policy = r#"unknown field "spec.runPolicy.cleanPodPolicyy""#;
    let container = r#"unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy""#;

    // kubectl's default, --validate=strict: refused, naming both fields.
    for verb in [&["apply", "-f"][..], &["create", "-f"]] {
        let err = k.fails(&[verb, &[job("strict").as_str()]].concat());
        assert!(
            err.contains(
                r#"TFJob in version "v1" cannot be handled as a TFJob: strict decoding error: "#
            ),
            "{err}"
        );
        assert!(err.contains(run_policy) && err.contains(container), "{err}");
    }
    let tfjobs = k.store.resource("kubeflow.org", "tfjobs").unwrap();
    assert!(k.store.list(&tfjobs, None).0.is_empty());

    // --validate=warn: created, each field printed as a warning, and gone from the object.
    let out = k.run(&["apply", "--validate=warn", "-f", &job("warned")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("Warning: {run_policy}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("Warning: {container}")),
        "{stderr}"
    );

    // --validate=false: created in silence, the fields pruned.
    let out = k.run(&["apply", "--validate=false", "-f", &job("quiet")]);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    for name in ["warned", "quiet"] {
        // (The last-applied annotation keeps what was sent, as on a real cluster.)
        let spec = k.ok(&["get", "tfjob", name, "-o", "jsonpath={.spec}"]);
        assert!(spec.contains(r#""image":"trainer:1""#), "{spec}");
        assert!(
            !spec.contains("cleanPodPolicyy") && !spec.contains("imagePullPolicyy"),
            "{spec}"
        );
    }

    // An update is held to the same rule.
    let err = k.fails(&["replace", "-f", &job("quiet")]);
    assert!(err.contains(run_policy), "{err}");
    // kubectl patch leaves the choice to the server, whose default warns and prunes.
    let out = k.run(&[
        "patch",
        "tfjob",
        "quiet",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"runPolicy":{"cleanPodPolicyy":"All"}}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("Warning: {run_policy}")),
        "{stderr}"
    );

    // Built-in kinds by their Go types' schemas.
    let cm = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndatta: {a: b}\n",
    );
    let err = k.fails(&["apply", "-f", &cm]);
    assert!(
        err.contains(r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "datta""#),
        "{err}"
    );
    let err = k.fails(&["create", "-f", &cm]);
    assert!(err.contains(r#"unknown field "datta""#), "{err}");

    // Duplicate fields (kubectl's YAML parser refuses them first, so a raw client sends them).
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"twice"},"data":{"a":"1","a":"2"}}"#;
    let path = "/api/v1/namespaces/default/configmaps";
    let (head, answer) = k.server.raw_exchange(
        &format!("POST {path}?fieldValidation=Strict HTTP/1.1\r\nContent-Type: application/json"),
        body,
    );
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(
        answer.contains(r#"strict decoding error: duplicate field \"data.a\""#),
        "{answer}"
    );
    let (head, answer) = k.server.raw_exchange(
        &format!("POST {path} HTTP/1.1\r\nContent-Type: application/json"),
        body,
    );
    assert!(head.starts_with("HTTP/1.1 201"), "{head}");
    assert!(
        head.to_lowercase()
            .contains(r#"warning: 299 - "duplicate field \"data.a\"""#),
        "{head}"
    );
    assert!(
        answer.contains(r#""a":"2""#),
        "the last value wins: {answer}"
    );
}

#[test]
fn https_serves_kubectl_past_a_client_that_never_completes_its_handshake() {
    let k = start();
    let addr = k.server.addr();
    // Connections that stall before or inside the handshake hold only their own task.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        stalled.push(std::net::TcpStream::connect(addr).unwrap());
    }
    use std::io::Write as _;
    stalled[0]
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0xff])
        .unwrap();
    // Plain HTTP to the HTTPS port gets no answer a client could mistake for the API.
    let head = plain_http_status(addr, "GET /api HTTP/1.1");
    assert!(!head.contains("200"), "{head}");

    let answer = k.ok(&["get", "--raw", "/api", "--request-timeout=20s"]);
    assert!(answer.contains("APIVersions"), "{answer}");
    drop(stalled);
}

#[test]
fn kubectl_drives_the_fault_endpoint() {
    let k = start();
    let shown = k.ok(&["get", "--raw", "/debug/faults"]);
    assert!(shown.contains(r#""errors":[]"#), "{shown}");
    let faults = k.file(
        "faults.json",
        r#"{"errors": [{"verbs": ["create"], "resources": ["configmaps"], "rate": 1.0, "status": 500}]}"#,
    );
    k.ok(&["replace", "--raw", "/debug/faults", "-f", &faults]);
    let cm = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: faulted}\ndata: {a: b}\n",
    );
    let out = k.run(&["apply", "-f", &cm]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("InternalError"), "{err}");
    let configmaps = k.store.resource("", "configmaps").unwrap();
    assert!(k.store.list(&configmaps, None).0.is_empty());

    let invalid = k.file(
        "invalid.json",
        r#"{"errors": [{"rate": 1.0, "status": 503}]}"#,
    );
    let out = k.run(&["replace", "--raw", "/debug/faults", "-f", &invalid]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("errors[0].status"), "{err}");

    let none = k.file("none.json", "{}");
    k.ok(&["replace", "--raw", "/debug/faults", "-f", &none]);
    k.ok(&["apply", "-f", &cm]);
    let counted = k.ok(&["get", "--raw", "/debug/requests"]);
    assert!(counted.contains(r#""agent":"kubectl""#), "{counted}");
    assert!(counted.contains(r#""internalErrors":1"#), "{counted}");
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or_default()
}

const TF_CONFIG: &str = r#"{"cluster":{"chief":["trainer-chief-0:2222"],"worker":["trainer-worker-0:2222","trainer-worker-1:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#;

/// A worker printing five loss lines, 100 ms apart, beside a sidecar.
fn trainer() -> Value {
    json!({
        "metadata": {"name": "trainer", "annotations": {
            "sim.tfjob.dev/duration": "2s",
            "sim.tfjob.dev/log": "every=100ms;lines=5;text=step {i} loss {loss}",
        }},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "tensorflow", "image": "tf:2", "env": [{"name": "TF_CONFIG", "value": TF_CONFIG}]},
            {"name": "sidecar", "image": "busybox:1"},
        ]}
    })
}

#[test]
fn kubectl_logs_follows_tails_and_picks_containers() {
    let k = start_with_kubelet();
    let uid = k.create_pod(trainer());
    k.wait_pod("trainer", "Running", |p| phase(p) == "Running");

    // -f streams until the container ends, then kubectl returns.
    let started = Instant::now();
    let followed = k.ok(&["logs", "-f", "trainer", "-c", "tensorflow"]);
    assert!(started.elapsed() < Duration::from_secs(20));
    let lines: Vec<&str> = followed.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"INFO starting task worker:1 of cluster {chief: 1, worker: 2}"),
        "{followed}"
    );
    let steps: Vec<&&str> = lines.iter().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 5, "{followed}");
    assert!(steps[0].starts_with("step 1 loss 2."), "{followed}");
    assert_eq!(
        lines.last(),
        Some(&"INFO container exited with code 0 (Completed)"),
        "{followed}"
    );
    k.wait_pod("trainer", "Succeeded", |p| phase(p) == "Succeeded");

    // The same log, plain, after the end.
    assert_eq!(k.ok(&["logs", "trainer", "-c", "tensorflow"]), followed);
    // kubectl picks the first container itself when there are several.
    let defaulted = k.run(&["logs", "trainer"]);
    assert!(defaulted.status.success());
    assert_eq!(String::from_utf8_lossy(&defaulted.stdout), followed);
    let tail = k.ok(&["logs", "trainer", "-c", "tensorflow", "--tail=2"]);
    let tail: Vec<&str> = tail.lines().collect();
    assert_eq!(tail.len(), 2, "{tail:?}");
    assert!(tail[0].starts_with("step 5 loss "), "{tail:?}");
    assert_eq!(tail[1], "INFO container exited with code 0 (Completed)");
    assert_eq!(
        k.ok(&["logs", "trainer", "-c", "sidecar"]),
        "INFO starting container sidecar (image busybox:1)\nINFO container exited with code 0 (Completed)\n"
    );
    let stamped = k.ok(&["logs", "trainer", "-c", "tensorflow", "--timestamps"]);
    assert_eq!(stamped.lines().count(), lines.len());
    for (line, plain) in stamped.lines().zip(&lines) {
        let (at, text) = line.split_once(' ').unwrap();
        let at: jiff::Timestamp = at.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(at <= jiff::Timestamp::now());
        assert_eq!(text, *plain);
    }
    assert_eq!(
        k.ok(&["logs", "trainer", "-c", "tensorflow", "--limit-bytes=4"]),
        "INFO"
    );

    // Refusals, in Kubernetes' words.
    let err = k.fails(&["logs", "trainer", "-c", "nope"]);
    assert!(
        err.contains("container nope is not valid for pod trainer"),
        "{err}"
    );
    let err = k.fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/trainer/log",
    ]);
    assert!(
        err.contains("a container name must be specified for pod trainer, choose one of: [tensorflow sidecar]"),
        "{err}"
    );
    let err = k.fails(&["logs", "trainer", "-c", "tensorflow", "--previous"]);
    assert!(
        err.contains(r#"previous terminated container "tensorflow" in pod "trainer" not found"#),
        "{err}"
    );
    let err = k.fails(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/trainer/log?container=sidecar&tailLines=ten",
    ]);
    assert!(err.contains("tailLines"), "{err}");
    let err = k.fails(&["logs", "missing"]);
    assert!(err.contains(r#"pods "missing" not found"#), "{err}");
    let huge = k.ok(&["get", "--raw", "/api/v1/namespaces/default/pods/trainer/log?container=sidecar&tailLines=9223372036854775807"]);
    assert_eq!(huge.lines().count(), 2);

    // A deleted pod takes its logs with it.
    k.ok(&["delete", "pod", "trainer", "--wait=false"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while k.store.logs().current(&uid, "tensorflow").is_some() {
        assert!(Instant::now() < deadline, "the logs outlived the pod");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kubectl_logs_previous_reads_the_run_before_a_restart() {
    let k = start_with_kubelet();
    k.create_pod(json!({
        "metadata": {"name": "flaky", "annotations": {
            "sim.tfjob.dev/duration": "300ms",
            "sim.tfjob.dev/exit-code": "1",
            "sim.tfjob.dev/fail-times": "1",
            "sim.tfjob.dev/log": "lines=1;text=attempt {run}",
        }},
        "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "tensorflow", "image": "tf:2"}]}
    }));
    k.wait_pod("flaky", "restarted", |p| {
        p.pointer("/status/containerStatuses/0/restartCount")
            .and_then(Value::as_u64)
            .is_some_and(|n| n >= 1)
    });
    assert_eq!(
        k.ok(&["logs", "flaky", "--previous"]),
        "INFO starting container tensorflow (image tf:2)\nattempt 1\nERROR container exited with code 1 (Error)\n"
    );
    let current = k.ok(&["logs", "flaky"]);
    assert!(
        current.starts_with("INFO starting container tensorflow (image tf:2)\nattempt 2\n"),
        "{current}"
    );

    // A pod that never starts has no log yet: the kubelet's message says why.
    k.create_pod(json!({
        "metadata": {"name": "stuck", "annotations": {"sim.tfjob.dev/pending-reason": "ImagePullBackOff"}},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:missing"}]}
    }));
    k.wait_pod("stuck", "stuck", |p| {
        p.pointer("/status/containerStatuses/0/state/waiting")
            .is_some()
    });
    let err = k.fails(&["logs", "stuck"]);
    assert!(
        err.contains(
            r#"container "tensorflow" in pod "stuck" is waiting to start: ImagePullBackOff"#
        ),
        "{err}"
    );
}

/// A small but real WebAssembly module (`(func (export "ans") (result i32) i32.const 65535)`)
/// with a custom section holding every byte value, so it is not UTF-8 and kubectl puts it in
/// `binaryData`.
fn wasm_module() -> Vec<u8> {
    let mut m = vec![0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
    m.extend([0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f]); // type: () -> i32
    m.extend([0x03, 0x02, 0x01, 0x00]); // function 0 has type 0
    m.extend([0x07, 0x07, 0x01, 0x03, b'a', b'n', b's', 0x00, 0x00]); // export "ans"
    m.extend([0x0a, 0x08, 0x01, 0x06, 0x00, 0x41, 0xff, 0xff, 0x03, 0x0b]); // i32.const 65535
    let payload: Vec<u8> = (0..4).flat_map(|_| 0..=255u8).collect();
    // Custom section "blob": 1 + 4 + 1024 = 1029 bytes, LEB128 0x85 0x08.
    m.extend([0x00, 0x85, 0x08, 0x04, b'b', b'l', b'o', b'b']);
    m.extend(payload);
    m
}

/// The first line of what the server answers a plain-HTTP request with, if anything.
fn plain_http_status(addr: std::net::SocketAddr, head: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!("{head}\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    response.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn kubectl_creates_core_objects_sent_as_protobuf() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let k = start();

    // kubectl sends the namespace as protobuf and is answered in protobuf.
    let out = k.run(&["create", "namespace", "team-a", "-v=8"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "namespace/team-a created\n"
    );
    // Once for the request, once for the answer.
    assert_eq!(
        log.matches("Content-Type: application/vnd.kubernetes.protobuf")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("201 Created"), "{log}");
    assert_eq!(
        k.ok(&[
            "get",
            "namespace",
            "team-a",
            "-o",
            "jsonpath={.metadata.name}"
        ]),
        "team-a"
    );

    let module = wasm_module();
    let wasm = k.dir.path().join("policy.wasm");
    std::fs::write(&wasm, &module).unwrap();
    let from_file = format!("--from-file=policy.wasm={}", wasm.display());
    assert_eq!(
        k.ok(&[
            "create",
            "configmap",
            "policy",
            "-n",
            "team-a",
            &from_file,
            "--from-literal=mode=enforce"
        ]),
        "configmap/policy created\n"
    );
    let stored = k.ok(&[
        "get",
        "cm",
        "policy",
        "-n",
        "team-a",
        "-o",
        r"jsonpath={.binaryData.policy\.wasm}",
    ]);
    assert_eq!(b64.decode(stored.trim()).unwrap(), module);
    assert_eq!(
        k.ok(&[
            "get",
            "cm",
            "policy",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.mode}"
        ]),
        "enforce"
    );

    assert_eq!(
        k.ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "team-a",
            "--from-literal=token=s3cr3t",
            "--type=Opaque",
            &from_file
        ]),
        "secret/creds created\n"
    );
    let token = k.ok(&[
        "get",
        "secret",
        "creds",
        "-n",
        "team-a",
        "-o",
        "jsonpath={.data.token}",
    ]);
    assert_eq!(b64.decode(token).unwrap(), b"s3cr3t");
    let blob = k.ok(&[
        "get",
        "secret",
        "creds",
        "-n",
        "team-a",
        "-o",
        r"jsonpath={.data.policy\.wasm}",
    ]);
    assert_eq!(b64.decode(blob).unwrap(), module);
    assert_eq!(
        k.ok(&[
            "get",
            "secret",
            "creds",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.type}"
        ]),
        "Opaque"
    );
    assert_eq!(
        k.ok(&["create", "serviceaccount", "runner", "-n", "team-a"]),
        "serviceaccount/runner created\n"
    );
    assert_eq!(
        k.ok(&[
            "create",
            "service",
            "clusterip",
            "web",
            "-n",
            "team-a",
            "--tcp=80:8080"
        ]),
        "service/web created\n"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "svc",
            "web",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}"
        ]),
        "80 8080 web"
    );
    // A second create of the same name is refused as on a real server.
    let err = k.fails(&["create", "namespace", "team-a"]);
    assert!(err.contains("AlreadyExists"), "{err}");

    // Bytes that are not a Kubernetes protobuf object: 400 with the reason, and nothing stored.
    let namespaces = k.store.resource("", "namespaces").unwrap();
    let before = k.store.list(&namespaces, None).0.len();
    let post =
        "POST /api/v1/namespaces HTTP/1.1\r\nContent-Type: application/vnd.kubernetes.protobuf";
    for (body, expect) in [
        (b"not protobuf".to_vec(), "magic number"),
        (b"k8s\0\x12\xff\xff\xff\xff\x0f".to_vec(), "envelope"),
        (
            b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x03\xff\xff\xff".to_vec(),
            "Namespace in the protobuf body is malformed",
        ),
    ] {
        let (status, answer) = k.server.raw_request(post, &body);
        assert!(status.contains(" 400 "), "{status} {answer}");
        assert!(answer.contains(expect), "{answer}");
        assert!(answer.contains(r#""kind":"Status""#), "{answer}");
    }
    let pod = b"k8s\0\x0a\x09\x0a\x02v1\x12\x03Pod\x12\x00";
    let (status, answer) = k.server.raw_request(post, pod);
    assert!(status.contains(" 415 "), "{status} {answer}");
    assert_eq!(k.store.list(&namespaces, None).0.len(), before);
}
