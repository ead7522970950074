//! The Kubeflow SDK (`kubeflow-training` 1.9, the `TrainingClient` ML engineers submit TFJobs
//! with) on both clusters, `up`'s embedded one and the real control plane, with no queue and no
//! gang scheduler: `tests/python/sdk_plain.py` creates a job of one PS and two workers, follows
//! it with the SDK's own calls to `Succeeded`, lists its pods the SDK's ways, and deletes it.
//! Kueue through the SDK, which needs Kueue's controller, runs on `up` only
//! (`kueue_e2e::the_kubeflow_sdk_queues_jobs_through_kueue_in_both_modes`).
//!
//! It needs a Python with the SDK: `TFJOB_PYTHON` names its interpreter, as `tests/run` sets it
//! up. Without it the test says so and passes; CI always sets it.

use crate::common;

use std::process::Command;

use common::kubectl::{Cluster, repo};
use serde_json::{Value, json};

crate::on_both_clusters! {
    the_kubeflow_sdk_runs_lists_and_deletes_a_job,
}

fn the_kubeflow_sdk_runs_lists_and_deletes_a_job(c: &Cluster) {
    let Some(python) = std::env::var_os("TFJOB_PYTHON") else {
        eprintln!("SKIPPED: TFJOB_PYTHON is not set (tests/run sets it)");
        return;
    };
    let out = Command::new(python)
        .arg(repo("tests/python/sdk_plain.py"))
        .arg(&c.kubeconfig)
        .arg("default")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the SDK script failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["pods"],
        json!(["sdk-plain-ps-0", "sdk-plain-worker-0", "sdk-plain-worker-1"])
    );
    assert_eq!(seen["worker_1"], json!(["sdk-plain-worker-1"]));
    // No Chief or Master: worker 0 carries the `job-role: master` label, as 1.9 gives it, and
    // the SDK's chief-or-master selection finds it.
    assert_eq!(seen["chief"], json!(["sdk-plain-worker-0"]));
    assert_eq!(seen["last"], "Succeeded");
    assert_eq!(
        seen["conditions"],
        json!(["Created", "Running", "Succeeded"]),
        "{seen}"
    );
    assert!(
        seen["listed"]
            .as_array()
            .unwrap()
            .contains(&json!("sdk-plain")),
        "{seen}"
    );
}
