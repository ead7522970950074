//! The official Kubernetes Python client (`kubernetes` 35.0.0, the library under the Kubeflow
//! SDK and most ML tooling) against both clusters (`up`'s embedded one and the real control
//! plane), as a user's program runs it:
//! - its own end-to-end suite (`kubernetes/e2e_test/` of the client at v35.0.0, kept beside the
//!   repository in `../shared/reference/python-client-e2e/`), unmodified, with exactly the tests
//!   listed in `tests/python/e2e-deselected.txt` (on `up`) or
//!   `e2e-deselected-real-control-plane.txt` left out;
//! - `tests/python/watch_tfjob.py`: watches of a TFJob, of its pods by label and of events,
//!   each made of short streams resumed from the last resourceVersion, while the job runs.
//!
//! Both need a Python with that client (and pytest): `TFJOB_PYTHON` names its interpreter, as
//! `tests/run` sets it up in a throw-away virtual environment. Without it the tests say so and
//! pass; CI always sets it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::kubectl::{Cluster, repo};

crate::on_both_clusters! {
    the_official_python_clients_own_suite_passes,
    test_pod_apis_finds_the_default_service_account_and_stops_at_its_exec,
    a_python_watch_sees_a_tfjob_its_pods_and_events_in_order,
}
use serde_json::Value;

/// The interpreter with the client installed, from `TFJOB_PYTHON`.
fn python() -> Option<PathBuf> {
    let python = std::env::var_os("TFJOB_PYTHON").map(PathBuf::from);
    if python.is_none() {
        eprintln!(
            "SKIPPED: TFJOB_PYTHON is not set; point it at a Python with `kubernetes==35.0.0` and \
             pytest installed (tests/run makes one)"
        );
    }
    python
}

/// Where the client's e2e suite is: `TFJOB_PYTHON_E2E`, else beside the repository.
fn suite_dir() -> PathBuf {
    std::env::var_os("TFJOB_PYTHON_E2E")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo("../shared/reference/python-client-e2e/e2e_test"))
}

/// The lists of deselected tests: on `up`'s embedded cluster, and on the real control plane.
const DESELECTED: [&str; 2] = [
    "tests/python/e2e-deselected.txt",
    "tests/python/e2e-deselected-real-control-plane.txt",
];

/// The tests deselected on `cluster`, as `file::Class::test`, each with its reason.
fn deselected_on(cluster: &Cluster) -> Vec<(String, String)> {
    deselected(DESELECTED[usize::from(cluster.is_real())])
}

/// The deselected tests of list `file`, as `file::Class::test`, each with its reason.
fn deselected(file: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo(file)).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (id, reason) = l
                .split_once('#')
                .unwrap_or_else(|| panic!("no reason given for {l:?}"));
            (id.trim().to_owned(), reason.trim().to_owned())
        })
        .collect()
}

fn run(cmd: &mut Command, cluster: &Cluster) -> std::process::Output {
    cmd.env("KUBECONFIG", &cluster.kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("python runs")
}

#[test]
fn the_deselected_tests_exist_and_the_docs_list_them() {
    let docs = std::fs::read_to_string(repo("docs/python-client.md")).unwrap();
    let listed: Vec<_> = DESELECTED
        .iter()
        .flat_map(|file| deselected(file))
        .collect();
    assert!(!listed.is_empty());
    for (id, reason) in &listed {
        assert!(!reason.is_empty(), "{id}: no reason");
        let name = id.rsplit("::").next().unwrap();
        assert!(
            docs.contains(name),
            "docs/python-client.md does not list {id}"
        );
        // A name that no longer exists would be deselected silently: the list must be exact.
        let suite = suite_dir();
        if suite.exists() {
            let file = id.split("::").next().unwrap();
            let source = std::fs::read_to_string(suite.join(file)).unwrap();
            assert!(
                source.contains(&format!("def {name}(")),
                "{id} is not a test of the suite"
            );
        }
    }
}

/// pytest over the client's installed suite, from where it runs, quiet, without a cache.
fn pytest() -> Option<Command> {
    let (python, site) = installed_suite()?;
    let mut pytest = Command::new(python);
    pytest
        .current_dir(site)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    Some(pytest)
}

/// The client's suite installed where it runs from (beside the `kubernetes` package it tests),
/// once per test process; none, saying why, without a Python or the suite.
fn installed_suite() -> Option<(PathBuf, PathBuf)> {
    static SITE: std::sync::OnceLock<Option<(PathBuf, PathBuf)>> = std::sync::OnceLock::new();
    SITE.get_or_init(install_suite).clone()
}

fn install_suite() -> Option<(PathBuf, PathBuf)> {
    let python = python()?;
    let suite = suite_dir();
    if std::env::var_os("TFJOB_PYTHON_E2E").is_none() && !suite.exists() {
        eprintln!(
            "SKIPPED: the client's e2e suite is not at {}; set TFJOB_PYTHON_E2E to its \
             `e2e_test` directory",
            suite.display()
        );
        return None;
    }
    assert!(
        suite.join("base.py").exists(),
        "the client's e2e suite is not at {}",
        suite.display()
    );
    // The suite imports itself as `kubernetes.e2e_test` and opens its YAML files relative to
    // the directory holding the `kubernetes` package: it runs from there, copied in whole.
    let out = Command::new(&python)
        .args([
            "-c",
            "import kubernetes, os; print(os.path.dirname(os.path.dirname(kubernetes.__file__)))",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let site = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let target = site.join("kubernetes/e2e_test");
    if target.exists() {
        std::fs::remove_dir_all(&target).unwrap();
    }
    copy_dir(&suite, &target);
    Some((python, site))
}

fn the_official_python_clients_own_suite_passes(c: &Cluster) {
    let Some(mut pytest) = pytest() else {
        return;
    };
    pytest.arg("kubernetes/e2e_test");
    let deselected = deselected_on(c);
    for (id, _) in &deselected {
        pytest
            .arg("--deselect")
            .arg(format!("kubernetes/e2e_test/{id}"));
    }
    let out = run(&mut pytest, c);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client's suite failed:\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = report.lines().last().unwrap_or_default();
    assert!(
        summary.contains(" passed")
            && summary.contains(&format!("{} deselected", deselected.len())),
        "{summary}"
    );
}

/// `test_pod_apis` is deselected for its exec, but what comes before must pass: it waits for the
/// `default` ServiceAccount a real cluster's controller makes in every namespace.
fn test_pod_apis_finds_the_default_service_account_and_stops_at_its_exec(c: &Cluster) {
    let Some(mut pytest) = pytest() else {
        return;
    };
    // `-s`: what the test prints while it waits is part of the report.
    pytest.args([
        "-s",
        "kubernetes/e2e_test/test_client.py::TestClient::test_pod_apis",
    ]);
    let out = run(&mut pytest, c);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "it execs, which nothing runs here:\n{report}"
    );
    // What it prints while it waits (the report also quotes its source, with the same texts).
    let waited = report.lines().any(|line| {
        line.starts_with("default service not found yet: (")
            || line.trim() == "timeout waiting for default service account creation"
    });
    assert!(
        !waited,
        "it waited for the default ServiceAccount:\n{report}"
    );
    assert!(
        report.contains("connect_get_namespaced_pod_exec"),
        "it stops at its exec, not before:\n{report}"
    );
}

fn a_python_watch_sees_a_tfjob_its_pods_and_events_in_order(c: &Cluster) {
    let Some(python) = python() else { return };
    let script = repo("tests/python/watch_tfjob.py");
    let mut cmd = Command::new(&python);
    cmd.arg(script)
        .arg(&c.kubeconfig)
        .args(["default", "watched"]);
    let out = run(&mut cmd, c);
    assert!(
        out.status.success(),
        "the watch script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["conditions"],
        serde_json::json!(["Created", "Running", "Succeeded"])
    );
    let pods = seen["pod_phases"].as_object().unwrap();
    assert_eq!(pods.len(), 2, "{seen}");
    for phases in pods.values() {
        assert_eq!(phases.as_array().unwrap().last().unwrap(), "Succeeded");
    }
    for watch in ["tfjobs", "pods", "events"] {
        assert!(seen["streams"][watch].as_u64().unwrap() > 1, "{seen}");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
            // The reference copy is read-only; the copy must be removable next run.
            let mut perms = std::fs::metadata(&dest).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&dest, perms).unwrap();
        }
    }
}
