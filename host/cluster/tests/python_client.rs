//! The official Kubernetes Python client (`pip install kubernetes`) reading a pod's log from the
//! embedded cluster with `read_namespaced_pod_log`, plain and with `tail_lines`, and getting
//! the API server's error for an unknown container. The script is
//! `tests/python/read_pod_log.py`, run by the Python in `TFJOB_PYTHON` (the pinned environment
//! `tests/run` makes), else by `python3`. Without the client the test fails, saying how to get
//! it: it never passes without having run. The client connects over HTTPS with the kubeconfig
//! `up` writes, verifying the server's CA.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tfjob_cluster::Store;
use tfjob_cluster::kubelet::{self, KubeletConfig};

fn python() -> std::ffi::OsString {
    std::env::var_os("TFJOB_PYTHON").unwrap_or_else(|| "python3".into())
}

fn python_client_installed() -> bool {
    Command::new(python())
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_reads_pod_logs() {
    assert!(
        python_client_installed(),
        "{} -c 'import kubernetes' fails: run the suite with tests/run, which installs the \
         client, or set TFJOB_PYTHON to a Python that has it",
        python().to_string_lossy()
    );
    let store = Store::new();
    let server = common::serve(
        Arc::clone(&store),
        tfjob_cluster::http::server::ServerOptions::default(),
    )
    .await;
    let kubelet = kubelet::spawn(
        Arc::clone(&store),
        KubeletConfig {
            startup: Duration::from_millis(20),
            ..KubeletConfig::default()
        },
    );
    let pods = store.resource("", "pods").unwrap();
    store
        .create(
            &pods,
            Some("default"),
            json!({
                "metadata": {"name": "reader", "annotations": {
                    "sim.tfjob.dev/duration": "200ms",
                    "sim.tfjob.dev/log": "lines=4;text=step {i} loss {loss}",
                }},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "tensorflow", "image": "tf:2"}]}
            }),
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.get(&pods, Some("default"), "reader").unwrap()["status"]["phase"] != "Succeeded" {
        assert!(Instant::now() < deadline, "the pod never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_admin_kubeconfig(dir.path(), "default");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/read_pod_log.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .arg(script)
            .arg(&kubeconfig)
            .args(["default", "reader", "tensorflow"])
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    let whole = seen["whole"].as_str().unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    assert_eq!(lines.len(), 6, "{whole}");
    assert_eq!(lines[0], "INFO starting container tensorflow (image tf:2)");
    assert!(lines[1].starts_with("step 1 loss "), "{whole}");
    assert_eq!(lines[5], "INFO container exited with code 0 (Completed)");
    assert_eq!(seen["tail"].as_str().unwrap(), lines[4..].join("\n") + "\n");
    assert_eq!(seen["error"]["status"], 400);
    assert_eq!(
        seen["error"]["message"],
        "container nope is not valid for pod reader"
    );
    kubelet.abort();
    server.running.handle.abort();
}
