//! One team cannot take the operator's service from another, end to end with the real kubectl
//! against the embedded cluster (policy namespaces `tfjob-system` and `team-a`, 40 simulated
//! nodes), tried as a hostile team would try it: team-a may write ConfigMaps in its own
//! namespace, so it ships policies that loop until their deadline or fill their memory, and it
//! submits many jobs; team-b, with no policies of its own, then submits 5 jobs of 4 workers.
//!
//! Each test measures team-b's time to all of its pods and prints it; the bound asserted is far
//! looser than what `cargo bench -p tfjob-operator --bench scale` reports (and far below the
//! 42 s these attacks took before namespaces were served fairly), because tests share the
//! machine with each other. The tests run one at a time.

use crate::common;

use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::kubectl::{Cluster, cluster_with};
use serde_json::{Value, json};
use tfjob_cluster::kubelet::KubeletConfig;
use tfjob_operator::embedded::ClusterOptions;
use tfjob_policy_engine::configmap;
use tfjob_policy_engine::{FailurePolicy, Hook, PolicyManifest, defaults};

/// The most team-b may wait for its 20 pods while team-a attacks. Before fair seats and shares
/// it waited 42.1 s under the looping policies.
const OTHER_TEAM_BOUND: Duration = Duration::from_secs(12);

/// The hostile team's namespace, a policy namespace of its own.
const HOSTILE: &str = "team-a";
/// The team that only submits jobs.
const QUIET: &str = "team-b";

/// These tests load the machine; one at a time.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn cluster() -> Cluster {
    let mut options = ClusterOptions::new(common::default_policies());
    options.policy_namespaces = vec!["tfjob-system".to_owned(), HOSTILE.to_owned()];
    options.kubelet = KubeletConfig {
        nodes: 40,
        cpu: "64".into(),
        memory: "256Gi".into(),
        gpus_per_node: 0,
        default_duration: Duration::from_secs(20),
        startup: Duration::from_millis(50),
        ..KubeletConfig::default()
    };
    let c = cluster_with(options);
    for ns in [HOSTILE, QUIET] {
        c.ok(&["create", "namespace", ns]);
    }
    c
}

/// Writes `text` to a file of the test and returns its path as a kubectl argument.
fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `count` decoration policies of team-a running the hostile test policy in `settings`, under
/// `Ignore`, as YAML documents.
fn hostile_policies(count: usize, settings: &Value) -> String {
    (0..count)
        .map(|i| {
            let manifest = PolicyManifest {
                name: format!("hostile-{i}"),
                hooks: vec![Hook::Decorate],
                failure_policy: FailurePolicy::Ignore,
                settings: settings.clone(),
                ..PolicyManifest::default()
            };
            let cm = configmap::pack(manifest, defaults::HOSTILE_POLICY_WASM, HOSTILE, true)
                .expect("the policy packs");
            format!("---\n{}", configmap::to_yaml(&cm))
        })
        .collect()
}

/// `count` TFJobs `<prefix>-<i>` of `workers` workers in `namespace`, as YAML documents.
fn jobs(namespace: &str, prefix: &str, count: usize, workers: usize) -> String {
    let mut text = String::new();
    for i in 0..count {
        write!(
            text,
            "---\napiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: {prefix}-{i}\n  \
             namespace: {namespace}\nspec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: \
             {workers}\n      restartPolicy: Never\n      template:\n        spec:\n          \
             containers:\n          - name: tensorflow\n            image: tensorflow/tensorflow:2.16.1\n"
        )
        .unwrap();
    }
    text
}

fn pods_in(c: &Cluster, namespace: &str) -> usize {
    c.ok(&["get", "pods", "-n", namespace, "-o", "name"])
        .lines()
        .count()
}

/// The kubectl arguments that print the status annotation of every policy ConfigMap in
/// `namespace`, one per line.
fn policy_statuses(namespace: &str) -> [&str; 8] {
    [
        "get",
        "configmaps",
        "-n",
        namespace,
        "-l",
        configmap::POLICY_SELECTOR,
        "-o",
        "jsonpath={range .items[*]}{.metadata.annotations.policy\\.tfjob\\.dev/status}{\"\\n\"}{end}",
    ]
}

/// Creates the policies and waits until all of them serve.
fn install_policies(c: &Cluster, dir: &tempfile::TempDir, count: usize, settings: Value) {
    let path = file(dir, "policies.yaml", &hostile_policies(count, &settings));
    c.ok(&["create", "-f", &path]);
    c.until(&policy_statuses(HOSTILE), |statuses| {
        statuses.matches("\"state\":\"Active\"").count() == count
    });
}

/// Submits team-b's 5 jobs of 4 workers and checks that its 20 pods exist within
/// [`OTHER_TEAM_BOUND`] while team-a does `attack`.
fn quiet_team_is_served(c: &Cluster, dir: &tempfile::TempDir, attack: &str) {
    let path = file(dir, "quiet.yaml", &jobs(QUIET, "quiet", 5, 4));
    let started = Instant::now();
    c.ok(&["create", "-f", &path]);
    c.until(&["get", "pods", "-n", QUIET, "-o", "name"], |pods| {
        pods.lines().count() == 20
    });
    let waited = started.elapsed();
    println!("team-b's 20 pods while team-a {attack}: {waited:?}");
    assert!(
        waited < OTHER_TEAM_BOUND,
        "team-b waited {waited:?} for its pods while team-a {attack} (bound {OTHER_TEAM_BOUND:?})"
    );
}

/// The reasons of the events in `namespace`, one per line.
fn event_reasons(c: &Cluster, namespace: &str) -> String {
    c.ok(&[
        "get",
        "events",
        "-n",
        namespace,
        "-o",
        "jsonpath={range .items[*]}{.reason} {.message}{\"\\n\"}{end}",
    ])
}

/// Every pod of team-b carries the cluster-wide default decoration.
fn assert_decorated_by_defaults(c: &Cluster) {
    let applied = c.ok(&[
        "get",
        "pods",
        "-n",
        QUIET,
        "-o",
        "jsonpath={range .items[*]}{.metadata.annotations.policy\\.tfjob\\.dev/policies}{\"\\n\"}{end}",
    ]);
    assert_eq!(applied.lines().count(), 20, "{applied}");
    for line in applied.lines() {
        assert!(line.contains("default-decorate@"), "{applied}");
    }
}

/// The scenario of the issue: eight looping decorators and 60 jobs of 8 workers in team-a.
#[test]
fn looping_policies_of_one_team_do_not_hold_up_another_teams_pods() {
    let _alone = alone();
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    install_policies(&c, &dir, 8, json!({"mode": "loop"}));
    let attack = file(&dir, "attack.yaml", &jobs(HOSTILE, "attack", 60, 8));
    c.ok(&["create", "-f", &attack]);
    quiet_team_is_served(&c, &dir, "runs eight looping policies");
    assert_decorated_by_defaults(&c);
    // Team-a's own jobs still run: every pod is created, its policies skipped as configured.
    c.until(&["get", "pods", "-n", HOSTILE, "-o", "name"], |pods| {
        pods.lines().count() == 480
    });
    let events = event_reasons(&c, HOSTILE);
    assert!(events.contains("PolicyIgnored"), "{events}");
    // Its policies were tripped: no longer called, their failure policy applied, and both the
    // ConfigMaps and the jobs say so.
    c.until(&policy_statuses(HOSTILE), |statuses| {
        statuses
            .matches("\"breaker\":{\"state\":\"Tripped\"")
            .count()
            == 8
    });
    let events = event_reasons(&c, HOSTILE);
    assert!(events.contains("PolicyTripped"), "{events}");
    assert_eq!(pods_in(&c, QUIET), 20);
}

/// A team whose policies fill their memory on every call makes no other team's calls, nor the
/// cluster-wide policies every job runs, fail for want of memory.
#[test]
fn policies_that_fill_their_memory_leave_other_teams_calls_theirs() {
    let _alone = alone();
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    install_policies(&c, &dir, 8, json!({"mode": "memory"}));
    let attack = file(&dir, "attack.yaml", &jobs(HOSTILE, "attack", 30, 8));
    c.ok(&["create", "-f", &attack]);
    quiet_team_is_served(&c, &dir, "runs eight memory-filling policies");
    assert_decorated_by_defaults(&c);
    let events = event_reasons(&c, QUIET);
    assert!(
        !events.contains("memory"),
        "no call for team-b's jobs ran out of memory: {events}"
    );
    // Team-a's own calls did run out (reported on its jobs as they come).
    c.until(
        &[
            "get",
            "events",
            "-n",
            HOSTILE,
            "-o",
            "jsonpath={range .items[*]}{.reason} {.message}{\"\\n\"}{end}",
        ],
        |events| events.contains("PolicyIgnored") && events.contains("memory"),
    );
}

/// A namespace that floods the operator with jobs (no policies at all) delays its own jobs,
/// not another namespace's.
#[test]
fn a_namespace_flooding_jobs_does_not_hold_up_another_namespace() {
    let _alone = alone();
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let flood = file(&dir, "flood.yaml", &jobs(HOSTILE, "flood", 400, 1));
    c.ok(&["create", "-f", &flood]);
    quiet_team_is_served(&c, &dir, "submitted 400 jobs first");
    c.until(&["get", "pods", "-n", HOSTILE, "-o", "name"], |pods| {
        pods.lines().count() == 400
    });
}
