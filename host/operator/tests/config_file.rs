//! `tfjob-operator run --config FILE` and `tfjob-operator config defaults`, through the built
//! binary: a file configures a running operator against the embedded cluster (namespace,
//! threads, metrics and probe addresses); a flag beats its environment variable, which beats the
//! file, which beats the built-in default (each shown, in the operator's startup log and by the
//! kubeconfig it reads); bad files exit 2 naming the file and the key; the printed defaults load
//! back and change nothing.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, http_status};
use common::{eventually, free_addr};
use common::{expect_failure, expect_success, text};

const STARTUP: &str = "starting TFJob controller";

/// `tfjob-operator run` with a clean environment: none of the variables `run` reads, and a home
/// without a kubeconfig.
fn run_command(home: &Path, args: &[&str]) -> Command {
    let mut cmd = common::operator();
    cmd.arg("run")
        .args(args)
        .env("HOME", home)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("KUBEFLOW_NAMESPACE")
        .env_remove("KUBECONFIG")
        .env_remove("CUSTOM_CLUSTER_DOMAIN")
        .env_remove("POD_NAMESPACE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

fn output(cmd: Command) -> std::process::Output {
    common::run(cmd, None, Duration::from_secs(60))
}

/// Writes a configuration file naming `c`'s kubeconfig, plus `rest`.
fn config_for(c: &Cluster, rest: &str) -> String {
    let text = format!("kubeconfig: {}\n{rest}", c.kubeconfig.display());
    common::write(c.dir.path(), "config.yaml", text.as_bytes())
}

/// A running operator, killed when dropped; its log lines (standard output) arrive on `lines`.
struct Operator {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Operator {
    fn spawn(mut cmd: Command) -> Operator {
        let mut child = cmd.spawn().expect("tfjob-operator runs");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Operator { child, lines }
    }

    /// The first log line containing `what`; fails the test if the operator exits first.
    fn wait_for_line(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no log line with {what:?}; the log:\n{}", seen.join("\n")),
            }
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The namespace and thread count the operator's startup line reports.
fn startup(cmd: Command) -> (String, String) {
    let line = Operator::spawn(cmd).wait_for_line(STARTUP);
    let field = |name: &str| {
        let start = line
            .find(&format!("{name}="))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            + name.len()
            + 1;
        line[start..]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_matches('"')
            .to_owned()
    };
    (field("namespace"), field("threads"))
}

#[test]
fn a_file_configures_the_running_operator() {
    let c = Cluster::start(|_| {});
    let metrics = free_addr();
    let probes = free_addr();
    let path = config_for(
        &c,
        &format!(
            "namespace: team-a\ncontroller-threads: 3\nmetrics-bind-address: {metrics}\n\
         health-probe-bind-address: \":{}\"\nno-configmap-policies: true\n",
            probes.port()
        ),
    );
    let operator = Operator::spawn(run_command(c.dir.path(), &["--config", &path]));
    let line = operator.wait_for_line(STARTUP);
    assert!(
        line.contains("namespace=\"team-a\"") || line.contains("namespace=team-a"),
        "{line}"
    );
    assert!(line.contains("threads=3"), "{line}");
    let probe_at = SocketAddr::from(([127, 0, 0, 1], probes.port()));
    eventually("ready on the file's probe address", || {
        (http_status(probe_at, "/readyz") == Some(200)).then_some(())
    });
    assert_eq!(http_status(probe_at, "/metrics"), Some(404));
    assert_eq!(http_status(metrics, "/metrics"), Some(200));

    c.submit("team-a", "mine");
    c.submit("team-b", "theirs");
    eventually("the file's namespace is reconciled", || {
        (c.state("team-a", "mine").as_deref() == Some("Succeeded")).then_some(())
    });
    assert_eq!(c.state("team-b", "theirs"), None, "team-b is not watched");
}

#[test]
fn a_flag_beats_its_environment_variable_which_beats_the_file_which_beats_the_default() {
    let c = Cluster::start(|_| {});
    let home = c.dir.path();
    let kubeconfig = c.kubeconfig.to_str().unwrap();
    let quiet = [
        "--metrics-bind-address",
        "0",
        "--health-probe-bind-address",
        "0",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        quiet
            .iter()
            .chain(["--no-configmap-policies"].iter())
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let start = |args: Vec<String>, env: &[(&str, &str)]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = run_command(home, &args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        startup(cmd)
    };
    // Built-in defaults: every namespace, 4 threads.
    let plain = with(&["--kubeconfig", kubeconfig]);
    assert_eq!(start(plain, &[]), ("<all>".into(), "4".into()));
    // The file over the defaults.
    let path = config_for(&c, "namespace: from-file\nthreads: 6\n");
    let file = with(&["--config", &path]);
    assert_eq!(start(file.clone(), &[]), ("from-file".into(), "6".into()));
    // The environment over the file.
    let env = [("KUBEFLOW_NAMESPACE", "from-env")];
    assert_eq!(start(file.clone(), &env), ("from-env".into(), "6".into()));
    // Flags over both, under either name.
    let mut flags = file.clone();
    flags.extend(["--namespace", "from-flag", "--controller-threads", "2"].map(String::from));
    assert_eq!(start(flags, &env), ("from-flag".into(), "2".into()));

    // The same order for the kubeconfig, seen in which file the operator fails to read.
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(
        dir.path(),
        "c.yaml",
        b"kubeconfig: /nonexistent/from-file\n",
    );
    let read = |args: &[&str], env: Option<&str>| {
        let mut all = vec!["--config", path.as_str()];
        all.extend(args);
        let mut cmd = run_command(dir.path(), &all);
        if let Some(env) = env {
            cmd.env("KUBECONFIG", env);
        }
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    assert!(read(&[], None).contains("/nonexistent/from-file"));
    assert!(read(&[], Some("/nonexistent/from-env")).contains("/nonexistent/from-env"));
    let stderr = read(
        &["--kubeconfig", "/nonexistent/flag"],
        Some("/nonexistent/env"),
    );
    assert!(stderr.contains("/nonexistent/flag"), "{stderr}");
}

/// Runs `run --config FILE` with `text` as the file; expects exit 2 and returns stderr with
/// the file's path as `FILE`.
fn refused(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(dir.path(), "config.yaml", text.as_bytes());
    let out = output(run_command(dir.path(), &["--config", &path]));
    expect_failure(&out, text).replace(&path, "FILE")
}

#[test]
fn a_bad_file_exits_2_naming_the_file_and_the_key() {
    assert_eq!(
        refused("controler-threads: 8\n"),
        "error: FILE: unknown key \"controler-threads\" (did you mean \"controller-threads\"?)\n"
    );
    assert_eq!(
        refused("controller-threads: 0\n"),
        "error: FILE: key \"controller-threads\": invalid value \"0\": 0 is not in 1..=65535\n"
    );
    assert_eq!(
        refused("- namespace\n"),
        "error: FILE: must be a mapping of flag names to values (see `tfjob-operator config defaults`), not a list\n"
    );
    assert!(
        refused("config: other.yaml\n")
            .contains("key \"config\" names the configuration file itself")
    );
    assert_eq!(
        refused("help: true\n"),
        "error: FILE: key \"help\" is not a setting\n"
    );
    assert!(
        refused("no-configmap-policies: true\npolicy-namespace: [a]\n")
            .contains("cannot be used with key")
    );
    // The trace settings are checked as they are read, naming the key.
    assert_eq!(
        refused("otel-traces-sampler-arg: 1.5\n"),
        "error: FILE: key \"otel-traces-sampler-arg\": invalid value \"1.5\": not a ratio from 0 to 1\n"
    );
    assert!(
        refused("otel-exporter-otlp-endpoint: https://collector:4317\n")
            .contains("key \"otel-exporter-otlp-endpoint\": invalid value \"https://collector:4317\": TLS to the collector is not supported"),
    );

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().unwrap();
    let out = output(run_command(dir.path(), &["--config", missing]));
    let stderr = expect_failure(&out, "a missing file");
    assert!(
        stderr.starts_with(&format!("error: {missing}: cannot read it: ")),
        "{stderr}"
    );
}

#[test]
fn the_printed_defaults_load_back_and_mean_the_defaults() {
    let out = output({
        let mut cmd = common::operator();
        cmd.args(["config", "defaults"]);
        cmd
    });
    let defaults = expect_success(&out, "config defaults");
    let document: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&defaults).unwrap();
    // Every flag `run --help` lists is a key, except the file itself and help.
    let help = expect_success(
        &output(run_command(Path::new("/"), &["--help"])),
        "run --help",
    );
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches([',', '.']))
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    assert!(flags.contains(&"kube-api-qps"), "{help}");
    let aliases: Vec<&str> = defaults
        .lines()
        .filter_map(|l| l.strip_prefix("# Also as: "))
        .flat_map(|l| l.trim_end_matches('.').split(", "))
        .collect();
    for flag in flags {
        let key = document.contains_key(flag) || aliases.contains(&flag);
        assert!(
            key || matches!(flag, "config" | "help"),
            "--{flag} is not in the defaults:\n{defaults}"
        );
    }

    let c = Cluster::start(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let path = common::write(dir.path(), "defaults.yaml", defaults.as_bytes());
    let kubeconfig = &c.kubeconfig;
    let probes = free_addr();
    let probes_text = probes.to_string();
    let operator = Operator::spawn(run_command(
        dir.path(),
        &[
            "--config",
            &path,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            &probes_text,
        ],
    ));
    let line = operator.wait_for_line(STARTUP);
    assert!(line.contains("threads=4"), "{line}");
    assert!(line.contains("<all>"), "{line}");
    eventually("ready with the defaults", || {
        (http_status(probes, "/readyz") == Some(200)).then_some(())
    });
}
