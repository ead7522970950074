//! The behaviour of a simulated pod, scripted by `sim.tfjob.dev/*` annotations.
//!
//! Tests and demos need pods that fail in specific, realistic ways (an OOM kill on worker 0, an
//! image that cannot be pulled, an eviction on the second run only), without a container
//! runtime. Each annotation holds either one value for every replica or values per replica
//! index (`0=137,2=1,*=0`), the index being the pod's `training.kubeflow.org/replica-index`
//! label. Parsing is pure and forgiving: a malformed value is reported as a problem and the
//! default is used, so one typo never stops the simulation.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// How long the containers run, e.g. `2s`, `500ms`, `1m30s`.
pub const DURATION: &str = "sim.tfjob.dev/duration";
/// Exit code of the main container at the end of its run.
pub const EXIT_CODE: &str = "sim.tfjob.dev/exit-code";
/// The pod never starts: `Unschedulable`, or the waiting reason of the main container.
pub const PENDING_REASON: &str = "sim.tfjob.dev/pending-reason";
/// The terminated reason of the main container, e.g. `OOMKilled`.
pub const TERMINATED_REASON: &str = "sim.tfjob.dev/terminated-reason";
/// The pod fails as a whole with this `status.reason`, e.g. `Evicted`.
pub const POD_REASON: &str = "sim.tfjob.dev/pod-reason";
/// The scripted failure applies to the first N runs of the replica only.
pub const FAIL_TIMES: &str = "sim.tfjob.dev/fail-times";

/// The label the operator puts the replica index in.
pub const REPLICA_INDEX_LABEL: &str = "training.kubeflow.org/replica-index";
/// The label naming the job of a pod.
pub const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
/// The label naming the replica type of a pod.
pub const REPLICA_TYPE_LABEL: &str = "training.kubeflow.org/replica-type";

/// Why a pod never starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// The scheduler never binds it (`PodScheduled=False`, reason `Unschedulable`).
    Unschedulable,
    /// It is bound but its main container keeps waiting with this reason (`ErrImagePull`, ...).
    Waiting(String),
}

/// What a pod does, for every run of its replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    pub duration: Duration,
    pub exit_code: i32,
    pub pending_reason: Option<PendingReason>,
    pub terminated_reason: Option<String>,
    pub pod_reason: Option<String>,
    /// `None`: the failure applies to every run.
    pub fail_times: Option<u32>,
}

impl Script {
    /// A clean run of `duration` ending with exit code 0.
    pub fn clean(duration: Duration) -> Script {
        Script {
            duration,
            exit_code: 0,
            pending_reason: None,
            terminated_reason: None,
            pod_reason: None,
            fail_times: None,
        }
    }

    /// The script of the pod `metadata`, for replica `index`. Problems name the annotation and
    /// why its value was ignored.
    pub fn parse(
        metadata: Option<&Value>,
        index: Option<u32>,
        default_duration: Duration,
    ) -> (Script, Vec<String>) {
        let annotations = metadata
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object);
        let mut problems = Vec::new();
        let mut script = Script::clean(default_duration);
        let Some(annotations) = annotations else {
            return (script, problems);
        };
        let p = &mut problems;
        let duration = field(annotations, DURATION, index, p, parse_duration);
        let exit_code = field(annotations, EXIT_CODE, index, p, parse_exit_code);
        script.terminated_reason = field(annotations, TERMINATED_REASON, index, p, reason);
        script.pod_reason = field(annotations, POD_REASON, index, p, reason);
        script.pending_reason = field(annotations, PENDING_REASON, index, p, reason).map(|r| {
            if r == "Unschedulable" {
                PendingReason::Unschedulable
            } else {
                PendingReason::Waiting(r)
            }
        });
        script.fail_times = field(annotations, FAIL_TIMES, index, p, |s| {
            s.parse::<u32>().map_err(|e| e.to_string())
        });
        script.duration = duration.unwrap_or(default_duration);
        // A reason alone implies the failure it names: OOM kills and evictions end with
        // SIGKILL (137), any other terminated reason with a generic error.
        script.exit_code = exit_code.unwrap_or(
            match (&script.pod_reason, script.terminated_reason.as_deref()) {
                (Some(_), _) | (None, Some("OOMKilled")) => 137,
                (None, Some("Completed")) | (None, None) => 0,
                (None, Some(_)) => 1,
            },
        );
        (script, problems)
    }

    /// The script of the `run`-th run (1-based) of the replica: past `fail_times` runs, a
    /// clean run of the same duration.
    pub fn for_run(&self, run: u32) -> Script {
        match self.fail_times {
            Some(n) if run > n => Script::clean(self.duration),
            _ => self.clone(),
        }
    }
}

/// The parsed value of annotation `key` for replica `index`; `None` (and a problem when
/// malformed) when it is missing or unusable.
fn field<T>(
    annotations: &serde_json::Map<String, Value>,
    key: &str,
    index: Option<u32>,
    problems: &mut Vec<String>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    // A non-string value cannot come from a real API server (annotations are strings).
    let raw = annotations.get(key)?.as_str()?;
    match pick(raw, index).and_then(|v| v.map(&parse).transpose()) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("annotation {key}={raw:?}: {e}"));
            None
        }
    }
}

/// The value of an annotation for replica `index`: the whole value, or the entry of a
/// per-index list (`0=137,2=1,*=0`) for the index, else its `*` entry. `None` when the list has
/// neither (the default applies).
pub fn pick(raw: &str, index: Option<u32>) -> Result<Option<&str>, String> {
    let raw = raw.trim();
    if !raw.contains('=') {
        return if raw.is_empty() {
            Err("empty value".into())
        } else {
            Ok(Some(raw))
        };
    }
    let mut entries: BTreeMap<Option<u32>, &str> = BTreeMap::new();
    for entry in raw.split(',') {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("entry {entry:?} is not index=value"))?;
        let (key, value) = (key.trim(), value.trim());
        let key = match key {
            "*" => None,
            k => Some(
                k.parse::<u32>()
                    .map_err(|_| format!("{k:?} is neither a replica index nor *"))?,
            ),
        };
        if value.is_empty() {
            return Err(format!("entry {entry:?} has no value"));
        }
        if entries.insert(key, value).is_some() {
            return Err(format!("entry {entry:?} repeats an index"));
        }
    }
    Ok(index
        .and_then(|i| entries.get(&Some(i)))
        .or_else(|| entries.get(&None))
        .copied())
}

/// A Go duration (`1m30s`, `1.5s`, `500ms`, `0`), spaces around it allowed, as the workspace's
/// one parser reads it ([`tfjob_policy_logic::duration::parse_go`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    tfjob_policy_logic::duration::parse_go(s.trim())
}

fn parse_exit_code(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(c) if (0..=255).contains(&c) => Ok(c),
        Ok(c) => Err(format!("exit code {c} is outside 0..=255")),
        Err(e) => Err(e.to_string()),
    }
}

/// A reason is a CamelCase word, as Kubernetes reasons are.
fn reason(s: &str) -> Result<String, String> {
    let mut chars = s.chars();
    let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if starts && chars.all(|c| c.is_ascii_alphanumeric()) {
        Ok(s.to_owned())
    } else {
        Err("a reason is a word of letters and digits".into())
    }
}

/// The replica index of a pod, from its label.
pub fn replica_index(metadata: Option<&Value>) -> Option<u32> {
    metadata?
        .get("labels")?
        .get(REPLICA_INDEX_LABEL)?
        .as_str()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D: Duration = Duration::from_secs(3);

    fn parse(annotations: Value, index: Option<u32>) -> (Script, Vec<String>) {
        Script::parse(Some(&json!({ "annotations": annotations })), index, D)
    }

    #[test]
    fn durations_follow_go_syntax() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "2", "s", "2x", "1..5s", "-1s", "ms2"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn per_index_values_fall_back_to_the_wildcard() {
        assert_eq!(pick("137", Some(4)), Ok(Some("137")));
        assert_eq!(pick("0=137,2=1,*=0", Some(0)), Ok(Some("137")));
        assert_eq!(pick("0=137,2=1,*=0", Some(2)), Ok(Some("1")));
        assert_eq!(pick("0=137,2=1,*=0", Some(5)), Ok(Some("0")));
        assert_eq!(pick("0=137, *=0", None), Ok(Some("0")));
        assert_eq!(pick("0=137", Some(1)), Ok(None));
        assert!(pick("0=1,x=2", Some(0)).is_err());
        assert!(pick("0=1,0=2", Some(0)).is_err());
        assert!(pick("0=", Some(0)).is_err());
        assert!(pick("0=1,2", Some(0)).is_err());
        assert!(pick("  ", Some(0)).is_err());
    }

    #[test]
    fn no_annotations_is_a_clean_run_of_the_default_duration() {
        assert_eq!(Script::parse(None, None, D), (Script::clean(D), vec![]));
        assert_eq!(parse(json!({"other": "x"}), Some(0)).0, Script::clean(D));
    }

    #[test]
    fn every_annotation_is_read_for_the_index() {
        let (s, problems) = parse(
            json!({
                DURATION: "0=1s,*=2s", EXIT_CODE: "0=137,*=0", TERMINATED_REASON: "OOMKilled",
                FAIL_TIMES: "2", POD_REASON: "1=Evicted", PENDING_REASON: "2=ImagePullBackOff,3=Unschedulable",
            }),
            Some(0),
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(s.duration, Duration::from_secs(1));
        assert_eq!(s.exit_code, 137);
        assert_eq!(s.terminated_reason.as_deref(), Some("OOMKilled"));
        assert_eq!(s.fail_times, Some(2));
        assert_eq!(s.pod_reason, None);
        assert_eq!(s.pending_reason, None);
        let one = parse(json!({POD_REASON: "1=Evicted"}), Some(1)).0;
        assert_eq!(
            (one.pod_reason.as_deref(), one.exit_code),
            (Some("Evicted"), 137)
        );
        let two = parse(
            json!({PENDING_REASON: "2=ImagePullBackOff,3=Unschedulable"}),
            Some(2),
        )
        .0;
        assert_eq!(
            two.pending_reason,
            Some(PendingReason::Waiting("ImagePullBackOff".into()))
        );
        let three = parse(
            json!({PENDING_REASON: "2=ImagePullBackOff,3=Unschedulable"}),
            Some(3),
        )
        .0;
        assert_eq!(three.pending_reason, Some(PendingReason::Unschedulable));
    }

    #[test]
    fn reasons_imply_an_exit_code_unless_one_is_given() {
        let code = |a: Value| parse(a, None).0.exit_code;
        assert_eq!(code(json!({TERMINATED_REASON: "OOMKilled"})), 137);
        assert_eq!(code(json!({TERMINATED_REASON: "Error"})), 1);
        assert_eq!(code(json!({TERMINATED_REASON: "Completed"})), 0);
        assert_eq!(code(json!({POD_REASON: "NodeShutdown"})), 137);
        assert_eq!(code(json!({TERMINATED_REASON: "Error", EXIT_CODE: "2"})), 2);
    }

    #[test]
    fn malformed_values_are_reported_and_ignored() {
        let (s, problems) = parse(
            json!({DURATION: "soon", EXIT_CODE: "300", POD_REASON: "not a reason",
                FAIL_TIMES: "-1", PENDING_REASON: "0=x,y"}),
            Some(0),
        );
        assert_eq!(s, Script::clean(D));
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains(DURATION)),
            "{problems:?}"
        );
        // A non-string annotation value is not ours to interpret.
        assert_eq!(parse(json!({EXIT_CODE: 1}), None).0, Script::clean(D));
    }

    #[test]
    fn failures_stop_after_fail_times_runs() {
        let s = parse(
            json!({EXIT_CODE: "1", FAIL_TIMES: "2", DURATION: "1s"}),
            None,
        )
        .0;
        assert_eq!(s.for_run(1).exit_code, 1);
        assert_eq!(s.for_run(2).exit_code, 1);
        assert_eq!(s.for_run(3), Script::clean(Duration::from_secs(1)));
        let always = parse(json!({EXIT_CODE: "1"}), None).0;
        assert_eq!(always.for_run(100).exit_code, 1);
    }

    #[test]
    fn the_replica_index_comes_from_the_label() {
        let m = json!({"labels": {REPLICA_INDEX_LABEL: "3"}});
        assert_eq!(replica_index(Some(&m)), Some(3));
        assert_eq!(replica_index(Some(&json!({"labels": {}}))), None);
        assert_eq!(replica_index(None), None);
    }
}
