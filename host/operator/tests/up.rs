//! `tfjob-operator up`, run as a newcomer runs it: the whole embedded cluster in one process.
//! `--demo` must submit the examples, show them to the end and exit with a summary; a bad
//! `--faults` file must be refused, naming the field.

mod common;

use std::process::Stdio;

use common::repo;

fn up(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    common::operator()
        .arg("up")
        .args(["--port", "0", "--kubeconfig-out"])
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
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("server: http://127.0.0.1:"), "{text}");
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
