//! `render` with the default Wasm policies: what a GPU TFJob's pods look like once the embedded
//! policies have decorated them and set their resources, `--no-policies` for the bare pods, and
//! `--policy-config` overriding the defaults' settings.

use crate::common;

use std::process::Output;

use serde_json::{Value, json};

use common::repo;

fn render(extra: &[&str]) -> Output {
    common::operator()
        .arg("render")
        .arg("-f")
        .arg(repo("deploy/examples/gpu-mnist.yaml"))
        .args(["-o", "json"])
        .args(extra)
        .env_remove("CUSTOM_CLUSTER_DOMAIN")
        .output()
        .expect("the binary runs")
}

fn pods(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON list");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .cloned()
        .collect()
}

fn pod<'a>(pods: &'a [Value], name: &str) -> &'a Value {
    pods.iter()
        .find(|p| p["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no pod {name}"))
}

fn env(pod: &Value) -> Vec<(String, String)> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn gpu_pods_get_the_default_policies_decisions() {
    let out = render(&[]);
    let pods = pods(&out);
    let worker = pod(&pods, "gpu-mnist-worker-1");
    let names: Vec<String> = env(worker).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "TF_CONFIG",
            "TFJOB_NAME",
            "TFJOB_NAMESPACE",
            "TFJOB_UID",
            "TFJOB_REPLICA_TYPE",
            "TFJOB_REPLICA_INDEX",
            "TFJOB_ATTEMPT",
            "NVIDIA_DRIVER_CAPABILITIES"
        ]
    );
    assert!(env(worker).contains(&("TFJOB_REPLICA_INDEX".into(), "1".into())));
    assert_eq!(
        worker["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert_eq!(
        worker["spec"]["volumes"],
        json!([{"name": "nvidia-driver", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}])
    );
    assert_eq!(
        worker["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": true}])
    );
    assert_eq!(
        worker["spec"]["containers"][0]["resources"],
        json!({
            "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
        })
    );
    let applied = worker["metadata"]["annotations"]["policy.tfjob.dev/policies"]
        .as_str()
        .unwrap();
    let parts: Vec<&str> = applied.split(',').collect();
    assert_eq!(parts.len(), 2, "{applied}");
    assert!(
        parts[0].starts_with("default-decorate@")
            && parts[0].len() == "default-decorate@".len() + 12
    );
    assert!(parts[1].starts_with("default-resources@"));

    // The PS requests no GPU: no toleration, no driver mount, but the resource defaults.
    let ps = pod(&pods, "gpu-mnist-ps-0");
    assert!(ps["spec"]["tolerations"].is_null());
    assert!(ps["spec"]["volumes"].is_null());
    assert_eq!(
        ps["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
}

#[test]
fn no_policies_prints_the_pods_as_built() {
    let pods = pods(&render(&["--no-policies"]));
    let worker = pod(&pods, "gpu-mnist-worker-0");
    // Only the template's own annotations: no policy shaped the pod.
    assert_eq!(
        worker["metadata"]["annotations"],
        json!({"sim.tfjob.dev/duration": "3s"})
    );
    assert_eq!(env(worker).len(), 1, "only TF_CONFIG");
    assert_eq!(
        worker["spec"]["containers"][0]["resources"],
        json!({"limits": {"nvidia.com/gpu": "1"}})
    );
}

#[test]
fn policy_config_overrides_the_default_settings() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policies.yaml");
    std::fs::write(
        &config,
        "default-decorate:\n  settings:\n    defaultEnvVars: {TEAM: vision}\ndefault-resources:\n  settings:\n    limits: {cpu: 500m}\n",
    )
    .unwrap();
    let pods = pods(&render(&["--policy-config", config.to_str().unwrap()]));
    let worker = pod(&pods, "gpu-mnist-worker-0");
    assert!(env(worker).contains(&("TEAM".into(), "vision".into())));
    // The whole settings document was replaced: no GPU toleration configured any more.
    assert!(worker["spec"]["tolerations"].is_null());
    assert_eq!(
        worker["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "500m"
    );

    std::fs::write(&config, "default-paint:\n  settings: {}\n").unwrap();
    let out = render(&["--policy-config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("default-paint"), "{err}");

    std::fs::write(
        &config,
        "default-resources:\n  settings:\n    limits: {memory: lots}\n",
    )
    .unwrap();
    let out = render(&["--policy-config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.memory"), "{err}");
}
