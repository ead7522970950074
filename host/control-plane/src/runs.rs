//! `sim.tfjob.dev/fail-times`, which kwok's stages cannot play alone: they see one pod at a
//! time, and "fail the first N runs of this replica, then succeed" needs the replica's history.
//! [`RunLedger`] follows every pod through one `kubectl get pods --watch` and counts the runs of
//! each replica (job, replica type, index; a pod outside a job by its name), a pod or a restart
//! of its containers in place each one run, as the embedded cluster's kubelet counts them; a pod whose run is past its replica's `fail-times` has its
//! failure script cleared (exit code 0, no terminated, pending or pod reason) before kwok ends it,
//! so that it runs clean. Which pods to clear is decided by [`Ledger::observe`], pure and
//! tested alone.

use std::collections::{HashMap, HashSet};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

/// The annotation naming how many runs of a replica fail.
pub const FAIL_TIMES: &str = "sim.tfjob.dev/fail-times";
const JOB_NAME: &str = "training.kubeflow.org/job-name";
const REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";

/// A replica: namespace, job (or pod) name, replica type, index.
type Replica = (String, String, String, String);

/// The runs seen so far.
#[derive(Debug, Default)]
pub struct Ledger {
    seen: HashSet<String>,
    runs: HashMap<Replica, u32>,
}

/// A pod to run clean: namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clear {
    pub namespace: String,
    pub name: String,
}

impl Ledger {
    /// Takes one pod as the watch shows it; the pod to clear if it is a new run past its
    /// replica's `fail-times`.
    pub fn observe(&mut self, pod: &Value) -> Option<Clear> {
        let meta = pod.get("metadata")?;
        let text = |v: Option<&Value>, key: &str| {
            v.and_then(|v| v.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        // A run is a pod, or a restart of its containers in place.
        let restarts = pod
            .pointer("/status/containerStatuses/0/restartCount")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let uid = text(Some(meta), "uid");
        let labels = meta.get("labels");
        let namespace = text(Some(meta), "namespace");
        let name = text(Some(meta), "name");
        let index = text(labels, REPLICA_INDEX);
        let fail_times = text(meta.get("annotations"), FAIL_TIMES);
        if uid.is_empty() || fail_times.is_empty() || !self.seen.insert(format!("{uid}/{restarts}"))
        {
            return None;
        }
        let job = Some(text(labels, JOB_NAME))
            .filter(|j| !j.is_empty())
            .unwrap_or_else(|| name.clone());
        let replica = (
            namespace.clone(),
            job,
            text(labels, REPLICA_TYPE),
            index.clone(),
        );
        let run = self.runs.entry(replica).or_default();
        *run += 1;
        // A value that does not parse fails every run, as the embedded kubelet ignores it.
        let limit = pick(&fail_times, &index)?.parse::<u32>().ok()?;
        (*run > limit).then_some(Clear { namespace, name })
    }
}

/// The value of a scripted annotation for replica `index`: its `index=` entry, else its `*=`
/// entry, else a value without `=`.
fn pick<'a>(raw: &'a str, index: &str) -> Option<&'a str> {
    let (mut exact, mut any, mut plain) = (None, None, None);
    for entry in raw.split(',').map(str::trim) {
        match entry.split_once('=') {
            Some((key, value)) if key.trim() == index => exact = Some(value.trim()),
            Some((key, value)) if key.trim() == "*" => any = Some(value.trim()),
            Some(_) => {}
            None if !entry.is_empty() => plain = Some(entry),
            None => {}
        }
    }
    exact.or(any).or(plain)
}

/// The ledger running beside kwok; dropping it stops the watch.
#[derive(Debug)]
pub struct RunLedger {
    stop: Arc<AtomicBool>,
    watch: Arc<std::sync::Mutex<Option<Child>>>,
    thread: Option<JoinHandle<()>>,
}

impl RunLedger {
    /// Follows the pods of the cluster `kubeconfig` reaches with `kubectl`.
    pub fn start(kubectl: &Path, kubeconfig: &Path) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let watch = Arc::new(std::sync::Mutex::new(None));
        let thread = {
            let (stop, watch) = (Arc::clone(&stop), Arc::clone(&watch));
            let (kubectl, kubeconfig) = (kubectl.to_owned(), kubeconfig.to_owned());
            std::thread::Builder::new()
                .name("run-ledger".into())
                .spawn(move || follow(&kubectl, &kubeconfig, &stop, &watch))?
        };
        Ok(RunLedger {
            stop,
            watch,
            thread: Some(thread),
        })
    }
}

impl Drop for RunLedger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(child) = self
            .watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            let _ = child.kill();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Watches pods until stopped, starting the watch again whenever it ends (an API server
/// restarted); the ledger keeps its counts across watches.
fn follow(
    kubectl: &PathBuf,
    kubeconfig: &PathBuf,
    stop: &AtomicBool,
    watch: &std::sync::Mutex<Option<Child>>,
) {
    let mut ledger = Ledger::default();
    while !stop.load(Ordering::Relaxed) {
        let child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "pods", "--all-namespaces", "--watch", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        };
        let stdout = child.stdout.take();
        *watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        if let Some(stdout) = stdout {
            let pods =
                serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>();
            for pod in pods {
                let Ok(pod) = pod else { break };
                if let Some(clear) = ledger.observe(&pod) {
                    run_clean(kubectl, kubeconfig, &clear);
                }
            }
        }
        if let Some(mut child) = watch.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Clears the pod's failure script; a pod already gone needs nothing.
fn run_clean(kubectl: &PathBuf, kubeconfig: &PathBuf, clear: &Clear) {
    let _ = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "annotate",
            "--overwrite",
            "pod",
            &clear.name,
            "-n",
            &clear.namespace,
        ])
        .args([
            "sim.tfjob.dev/exit-code=0",
            "sim.tfjob.dev/terminated-reason-",
            "sim.tfjob.dev/pending-reason-",
            "sim.tfjob.dev/pod-reason-",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str, index: &str, fail_times: &str) -> Value {
        serde_json::json!({"metadata": {
            "uid": uid, "name": name, "namespace": "ml",
            "labels": {JOB_NAME: "j", REPLICA_TYPE: "worker", REPLICA_INDEX: index},
            "annotations": {FAIL_TIMES: fail_times},
        }})
    }

    #[test]
    fn runs_past_fail_times_are_cleared_once_each() {
        let mut ledger = Ledger::default();
        assert_eq!(ledger.observe(&pod("a", "j-worker-1", "1", "1")), None);
        // The same pod seen again (an update) is the same run.
        assert_eq!(ledger.observe(&pod("a", "j-worker-1", "1", "1")), None);
        let second = ledger.observe(&pod("b", "j-worker-1", "1", "1"));
        assert_eq!(
            second,
            Some(Clear {
                namespace: "ml".into(),
                name: "j-worker-1".into()
            })
        );
        assert_eq!(ledger.observe(&pod("b", "j-worker-1", "1", "1")), None);
    }

    #[test]
    fn a_restart_in_place_is_a_run() {
        let mut ledger = Ledger::default();
        let mut run = pod("a", "j-worker-0", "0", "1");
        assert!(ledger.observe(&run).is_none());
        run["status"] = serde_json::json!({"containerStatuses": [{"restartCount": 1}]});
        assert!(
            ledger.observe(&run).is_some(),
            "the second run of the same pod"
        );
        assert!(ledger.observe(&run).is_none(), "seen already");
    }

    #[test]
    fn replicas_count_apart_and_values_are_per_index() {
        let mut ledger = Ledger::default();
        // Index 0 fails twice, the others once.
        let script = "0=2,*=1";
        assert!(
            ledger
                .observe(&pod("a", "j-worker-0", "0", script))
                .is_none()
        );
        assert!(
            ledger
                .observe(&pod("b", "j-worker-1", "1", script))
                .is_none()
        );
        assert!(
            ledger
                .observe(&pod("c", "j-worker-0", "0", script))
                .is_none()
        );
        assert!(
            ledger
                .observe(&pod("d", "j-worker-1", "1", script))
                .is_some()
        );
        assert!(
            ledger
                .observe(&pod("e", "j-worker-0", "0", script))
                .is_some()
        );
    }

    #[test]
    fn pods_without_the_annotation_or_with_a_bad_value_are_left() {
        let mut ledger = Ledger::default();
        let mut plain = pod("a", "p", "0", "1");
        plain["metadata"]["annotations"] = serde_json::json!({});
        assert!(ledger.observe(&plain).is_none());
        assert!(ledger.observe(&pod("b", "q", "0", "many")).is_none());
        assert!(ledger.observe(&pod("c", "q", "0", "many")).is_none());
        assert!(
            ledger
                .observe(&serde_json::json!({"kind": "Status"}))
                .is_none()
        );
    }

    #[test]
    fn pick_prefers_the_index_then_the_star_then_a_plain_value() {
        assert_eq!(pick("0=3,*=1", "0"), Some("3"));
        assert_eq!(pick("0=3,*=1", "2"), Some("1"));
        assert_eq!(pick("2", "5"), Some("2"));
        assert_eq!(pick("0=3", "1"), None);
    }
}
