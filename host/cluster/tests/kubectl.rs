//! The real kubectl against the embedded API server, with kubectl's default client validation:
//! it reads the server's OpenAPI v3 documents, finds that the server validates fields itself,
//! and sends `fieldValidation=Strict`. `apply`, `apply --server-side`, `create` and `replace`
//! of built-in kinds and of TFJobs succeed, a second apply patches, and the fault endpoint is
//! driven with `kubectl get --raw` and `kubectl replace --raw`. CI installs kubectl; the test
//! needs it on PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use tfjob_cluster::Store;
use tfjob_cluster::server::ServerOptions;

struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: tempfile::TempDir,
    store: Arc<Store>,
    _runtime: tokio::runtime::Runtime,
}

/// Starts the server (with the TFJob CRD and its admission check, no operator) on a background
/// runtime and writes a kubeconfig for it.
fn start() -> Kubectl {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::new();
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd()).unwrap();
    tfjob_cluster::crd::install(&store, crd).unwrap();
    store.set_validator(
        "kubeflow.org",
        "tfjobs",
        Arc::new(tfjob_api::validation::admit),
    );
    let running = runtime
        .block_on(tfjob_cluster::server::start_with(
            Arc::clone(&store),
            0,
            ServerOptions::default(),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: embedded\n  cluster:\n    server: http://{}\ncontexts:\n- name: embedded\n  context: {{cluster: embedded, user: embedded, namespace: default}}\ncurrent-context: embedded\nusers:\n- name: embedded\n  user: {{}}\n",
            running.addr
        ),
    )
    .unwrap();
    Kubectl {
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
