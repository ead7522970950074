//! `tfjob-operator up`, run as a newcomer runs it: the whole embedded cluster in one process.
//! `--demo` must submit the examples, show them to the end and exit with a summary; a bad
//! `--faults` file must be refused, naming the field; the walk-through of the default policies
//! that read the cluster (`docs/policies.md`) works as written, through kubectl. (A CEL policy
//! applied, edited and broken with kubectl alone, on `up` and on the real control plane, is
//! `cel_live`.)

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::Kubectl as _;
use common::repo;
use common::up::Up;

fn up(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    common::operator()
        .arg("up")
        .args(["--port", "0", "--no-cel-warmup", "--kubeconfig-out"])
        .arg(dir.join("kubeconfig"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("POD_NAMESPACE")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

#[test]
fn up_demo_runs_the_examples_to_the_end_and_summarises() {
    let dir = tempfile::tempdir().unwrap();
    let examples = repo("deploy/examples");
    let out = up(
        &["--demo", "--examples", examples.to_str().unwrap()],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let kubeconfig = dir.path().join("kubeconfig");
    assert!(
        stdout.contains(&format!(
            "export KUBECONFIG={}",
            kubeconfig.canonicalize().unwrap().display()
        )),
        "{stdout}"
    );
    let summary = stdout
        .split("Summary:")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    for (job, state) in [
        ("demo-dist-mnist", "Succeeded"),
        ("demo-retry", "Succeeded"),
        ("gpu-mnist", "Succeeded"),
        ("demo-bad-image", "Failed"),
        ("demo-too-big", "Failed"),
    ] {
        let line = summary
            .lines()
            .find(|l| l.trim_start().starts_with(job))
            .unwrap_or_else(|| panic!("{job} missing from the summary:\n{summary}"));
        assert!(line.contains(state), "{job} should be {state}: {line}");
    }
    assert!(
        summary.contains("restarts 1"),
        "demo-retry restarted once:\n{summary}"
    );
    // The default classification read the nodes: none holds 16 GPUs.
    assert!(
        summary.contains("it requests nvidia.com/gpu 16; the largest node offers 2"),
        "demo-too-big failed for its size:\n{summary}"
    );
    assert!(
        stdout.contains("The default classification reads the nodes in the demo"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");
    assert!(text.contains("certificate-authority-data: "), "{text}");
}

#[test]
fn up_demo_with_a_gang_scheduler_runs_the_competing_jobs_in_turn() {
    let examples = repo("deploy/examples/gang");
    for scheduler in ["volcano", "scheduler-plugins-scheduler"] {
        let dir = tempfile::tempdir().unwrap();
        let out = up(
            &[
                "--demo",
                "--gang-scheduler-name",
                scheduler,
                "--examples",
                examples.to_str().unwrap(),
            ],
            dir.path(),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{scheduler}: {stdout}\n{stderr}");
        let summary = stdout
            .split("Summary:")
            .nth(1)
            .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
        for job in ["gang-a", "gang-b"] {
            let line = summary
                .lines()
                .find(|l| l.trim_start().starts_with(job))
                .unwrap_or_else(|| panic!("{job} missing from the summary:\n{summary}"));
            assert!(line.contains("Succeeded"), "{scheduler}: {line}");
        }
    }
}

/// The CA a kubeconfig `up` wrote trusts, decoded to PEM.
fn ca_of(kubeconfig: &str) -> String {
    use base64::Engine as _;
    let data = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .unwrap_or_else(|| panic!("no CA in {kubeconfig}"));
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn up_serves_https_with_its_ca_in_the_kubeconfig_and_every_namespace_and_keeps_it_with_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let mut up = Up::start(
        &["--no-operator", "--state", state.to_str().unwrap()],
        dir.path(),
    );
    let written = std::fs::read_to_string(&up.kubeconfig).unwrap();
    assert!(written.contains("server: https://127.0.0.1:"), "{written}");
    let ca = ca_of(&written);
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    // kubectl verifies the server by the kubeconfig as written.
    assert_eq!(
        up.kubectl(&["get", "ns", "default", "-o", "name"]).trim(),
        "namespace/default"
    );
    // Pods find the same CA in their namespace, as on a real cluster.
    up.kubectl(&["create", "namespace", "ml"]);
    let published = up.kubectl_until(
        Duration::from_secs(10),
        &[
            "-n",
            "ml",
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
        |text| !text.is_empty(),
    );
    assert_eq!(published, ca);
    // A client that does not hold the CA is refused the connection.
    let foreign = dir.path().join("foreign");
    std::fs::write(
        &foreign,
        written.replace(
            written
                .lines()
                .find(|l| l.contains("certificate-authority-data"))
                .unwrap(),
            "",
        ),
    )
    .unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["get", "ns", "--request-timeout=10s"])
        .env("KUBECONFIG", &foreign)
        .env("KUBECACHEDIR", dir.path().join("foreign-cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("certificate signed by unknown authority"),
        "{stderr}"
    );
    // A restart on the same state serves the same CA, so kubeconfigs written before still work.
    up.kill();
    let again = Up::start(
        &["--no-operator", "--state", state.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(
        ca_of(&std::fs::read_to_string(&again.kubeconfig).unwrap()),
        ca
    );
    assert!(dir.path().join("state.pki/ca.key").exists());
    again.kubectl(&["get", "ns", "ml"]);

    let plain = tempfile::tempdir().unwrap();
    let up = Up::start(&["--no-operator", "--plain-http"], plain.path());
    let written = std::fs::read_to_string(&up.kubeconfig).unwrap();
    assert!(written.contains("server: http://127.0.0.1:"), "{written}");
    assert!(!written.contains("certificate-authority-data"), "{written}");
    up.kubectl(&["get", "ns", "default"]);
}

#[test]
fn up_refuses_a_bad_fault_file_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let faults = dir.path().join("faults.json");
    std::fs::write(&faults, r#"{"errors":[{"rate":0.1,"status":404}]}"#).unwrap();
    let out = up(&["--faults", faults.to_str().unwrap()], dir.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("faults.json"), "{stderr}");
    assert!(stderr.contains("errors[0].status"), "{stderr}");
}

/// The heredocs (`<<'YAML'` ... `YAML`) of the walk-through "The default policies that read"
/// in `docs/policies.md`: the policy configuration, then the job. The test runs the documented
/// text, so the page cannot drift from what works.
fn reading_walk_through() -> (String, String) {
    let doc = std::fs::read_to_string(repo("docs/policies.md")).unwrap();
    let section = doc
        .split("#### The default policies that read")
        .nth(1)
        .expect("the walk-through's section");
    let mut heredocs = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match &mut current {
            None if line.ends_with("<<'YAML'") => current = Some(String::new()),
            None => {}
            Some(_) if line == "YAML" => heredocs.extend(current.take()),
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
        }
        if heredocs.len() == 2 {
            return (heredocs[0].clone(), heredocs[1].clone());
        }
    }
    panic!("the walk-through has a policy configuration and a job: {heredocs:?}");
}

/// The documented job under another name, asking for `gpus` GPUs.
fn gpu_job(job: &str, name: &str, gpus: u32) -> String {
    assert!(
        job.contains("name: too-big") && job.contains("nvidia.com/gpu: 4"),
        "{job}"
    );
    job.replace("name: too-big", &format!("name: {name}"))
        .replace("nvidia.com/gpu: 4", &format!("nvidia.com/gpu: {gpus}"))
}

/// `up` as the walk-through starts it (two nodes of 2 GPUs, `config` as `--policy-config`),
/// with the namespace `vision` created.
fn walk_through_cluster(config: &str, dir: &std::path::Path) -> Up {
    let config_file = dir.join("policy-config.yaml");
    std::fs::write(&config_file, config).unwrap();
    let up = Up::start(
        &[
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--policy-config",
            config_file.to_str().unwrap(),
        ],
        dir,
    );
    up.kubectl(&["create", "namespace", "vision"]);
    up
}

/// `jsonpath` of `object` (`kind/name`) in the namespace `vision`.
fn in_vision(up: &Up, object: &str, jsonpath: &str) -> String {
    up.kubectl(&[
        "-n",
        "vision",
        "get",
        object,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// How long a job may take to reach a state here: the walk-through's 10 s grace period, and
/// a debug build on shared cores.
const STATE_WITHIN: Duration = Duration::from_secs(120);

/// `docs/policies.md`'s walk-through, on `up` with two nodes of 2 GPUs: a worker asking for
/// 4 fails for good with the classifier's reason in `kubectl describe`, one asking for 2 runs,
/// and the pods of the namespace labelled `team=vision` carry `team=vision`.
#[test]
fn up_fails_a_job_no_node_can_hold_and_labels_pods_with_their_namespace() {
    let (config, job) = reading_walk_through();
    let dir = tempfile::tempdir().unwrap();
    let up = walk_through_cluster(&config, dir.path());
    up.kubectl(&["label", "namespace", "vision", "team=vision"]);
    up.kubectl_with(&["-n", "vision", "apply", "-f", "-"], Some(&job));
    up.kubectl_with(
        &["-n", "vision", "apply", "-f", "-"],
        Some(&gpu_job(&job, "fits", 2)),
    );

    up.kubectl_until(
        STATE_WITHIN,
        &[
            "-n",
            "vision",
            "get",
            "pods",
            "-l",
            "team=vision",
            "-o",
            "name",
        ],
        |pods| pods.contains("pod/too-big-worker-0") && pods.contains("pod/fits-worker-0"),
    );
    up.kubectl(&[
        "-n",
        "vision",
        "wait",
        "--for=condition=Failed",
        "tfjob/too-big",
        "--timeout=120s",
    ]);
    let described = up.kubectl(&["-n", "vision", "describe", "tfjob", "too-big"]);
    assert!(
        described.contains(
            "the pod can never be scheduled: it requests nvidia.com/gpu 4; the largest node offers 2 (node/"
        ),
        "{described}"
    );
    let phase = in_vision(&up, "pod/too-big-worker-0", "{.status.phase}");
    assert_eq!(phase, "Pending", "the pod never ran");
    up.kubectl(&[
        "-n",
        "vision",
        "wait",
        "--for=condition=Succeeded",
        "tfjob/fits",
        "--timeout=120s",
    ]);
}

/// The walk-through's last paragraph: with a node pool of 8 GPUs declared, the 4-GPU job waits
/// for the pool past the grace period instead of failing.
#[test]
fn up_lets_a_job_wait_for_a_declared_node_pool() {
    let (config, job) = reading_walk_through();
    let doc = std::fs::read_to_string(repo("docs/policies.md")).unwrap();
    let pooled = doc
        .lines()
        .find(|l| l.contains("nodePools: [{name: a100"))
        .expect("the walk-through's node pool");
    let classify = "default-classify:\n  settings: {failUnschedulable: {gracePeriod: 10s}}\n";
    assert!(config.contains(classify), "{config}");
    // The documented pool, with a grace period of 2 s so that waiting well past it is short.
    let config = config.replace(
        classify,
        &format!(
            "default-classify:\n{}\n",
            pooled.replace("gracePeriod: 10s", "gracePeriod: 2s")
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let up = walk_through_cluster(&config, dir.path());
    up.kubectl_with(&["-n", "vision", "apply", "-f", "-"], Some(&job));
    up.kubectl_until(
        STATE_WITHIN,
        &[
            "-n",
            "vision",
            "get",
            "pod",
            "too-big-worker-0",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ],
        |reason| reason == "Unschedulable",
    );
    let waiting = std::time::Instant::now();
    // Meanwhile: a misspelt job is refused as a real cluster refuses it, naming both fields,
    // and with `--validate=warn` (a server-side dry run here) the server warns of each.
    let misspelt = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: misspelt}\nspec:\n  runPolicy: {cleanPodPolicyy: All}\n  tfReplicaSpecs:\n    Worker:\n      template:\n        spec:\n          containers: [{name: tensorflow, image: trainer:1, imagePullPolicyy: Always}]\n";
    let fields = [
        r#"unknown field "spec.runPolicy.cleanPodPolicyy""#,
        r#"unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy""#,
    ];
    let refused = up.kubectl_output(&["-n", "vision", "apply", "-f", "-"], Some(misspelt));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("strict decoding error"), "{stderr}");
    assert!(fields.iter().all(|f| stderr.contains(f)), "{stderr}");
    let warned = up.kubectl_output(
        &[
            "-n",
            "vision",
            "apply",
            "--validate=warn",
            "--dry-run=server",
            "-f",
            "-",
        ],
        Some(misspelt),
    );
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(warned.status.success(), "{stderr}");
    assert!(
        fields
            .iter()
            .all(|f| stderr.contains(&format!("Warning: {f}"))),
        "{stderr}"
    );
    // Well past the 2 s grace period, classified again meanwhile, the job still waits.
    std::thread::sleep(Duration::from_secs(8).saturating_sub(waiting.elapsed()));
    let state = in_vision(&up, "tfjob/too-big", "{.status.conditions[*].type}");
    assert!(!state.contains("Failed"), "{state}");
    let phase = in_vision(&up, "pod/too-big-worker-0", "{.status.phase}");
    assert_eq!(phase, "Pending");
}
