//! What a simulated container prints: a start line naming its TensorFlow task, the lines its
//! `sim.tfjob.dev/log` annotation scripts, and an exit line with its exit code and reason.
//!
//! `kubectl logs` on a training pod is how people check that a job runs and learns, so the
//! simulation prints what a trainer would: `INFO starting task worker:1 of cluster {...}` from
//! the pod's `TF_CONFIG`, then step lines. The annotation takes one of two forms:
//!
//! - a script, `key=value` fields separated by `;`: `every=500ms;lines=10;text=step {i} loss
//!   {loss}`. `every` (a duration, at least [`MIN_EVERY`]) prints a line that often while the main
//!   container runs; without it the lines are printed at once when it starts. `lines` stops after
//!   that many lines per run (at most [`MAX_LINES`]; without it, as many as the run lasts with
//!   `every`, one line without). `text` comes last and takes the rest of the value, `;` and `=`
//!   included; in it `{i}` is the line's number in the run (from 1), `{loss}` a loss that falls as
//!   `i` grows, `{task}` the replica's task (`worker:1`) and `{run}` the run of the container (1,
//!   then 2 after a restart in place). Without `text`, `step {i} loss {loss}`.
//! - anything else is literal text, printed line by line when the container starts.
//!
//! Pure: parsing and rendering only; the kubelet loop owns the timers and the buffers.

use std::time::Duration;

use serde_json::Value;

use super::script::parse_duration;
use super::status::{ContainerSim, ContainerState};

/// The annotation scripting a pod's log.
pub const LOG: &str = "sim.tfjob.dev/log";

/// The shortest interval between scripted lines; a script asking for less gets this.
pub const MIN_EVERY: Duration = Duration::from_millis(10);
/// The most scripted lines one run prints.
pub const MAX_LINES: u32 = 100_000;
/// The most lines a literal text, or a script without `every`, prints at once: they are
/// written in one go by the kubelet loop, which must not stall on them.
pub const MAX_LITERAL_LINES: usize = 10_000;
/// The longest template; a longer one is cut.
pub const MAX_TEMPLATE_BYTES: usize = 4096;

const DEFAULT_TEXT: &str = "step {i} loss {loss}";

/// The scripted part of a container's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LogScript {
    /// Nothing beyond the start and exit lines.
    #[default]
    None,
    /// Lines printed as they are when the container starts.
    Literal(Vec<String>),
    /// Lines rendered from `text`, one every `every` (all at start when `None`).
    Steps {
        every: Option<Duration>,
        lines: u32,
        text: String,
    },
}

impl LogScript {
    /// The script of the pod `metadata`; problems say what was ignored or bounded.
    pub fn parse(metadata: Option<&Value>) -> (LogScript, Vec<String>) {
        let raw = metadata
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(LOG))
            .and_then(Value::as_str);
        match raw {
            None => (LogScript::None, Vec::new()),
            Some(raw) => parse(raw),
        }
    }

    /// How many lines print when the container starts, before any timer.
    pub fn immediate(&self) -> u32 {
        match self {
            LogScript::Steps {
                every: None, lines, ..
            } => *lines,
            _ => 0,
        }
    }
}

const KEYS: [&str; 3] = ["every", "lines", "text"];

/// Whether `raw` is a script rather than literal text: it starts with one of the keys.
fn is_script(raw: &str) -> bool {
    let head = raw.trim_start();
    KEYS.iter()
        .any(|k| head.strip_prefix(k).is_some_and(|r| r.starts_with('=')))
}

/// Parses an annotation value (see the module docs).
pub fn parse(raw: &str) -> (LogScript, Vec<String>) {
    let mut problems = Vec::new();
    if !is_script(raw) {
        let mut lines: Vec<String> = raw.lines().map(str::to_owned).collect();
        if lines.len() > MAX_LITERAL_LINES {
            problems.push(format!(
                "annotation {LOG}: {} lines, only the first {MAX_LITERAL_LINES} are printed",
                lines.len()
            ));
            lines.truncate(MAX_LITERAL_LINES);
        }
        return (LogScript::Literal(lines), problems);
    }
    let mut every = None;
    let mut lines = None;
    let mut text = None;
    let mut rest = raw.trim_start();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            problems.push(format!("annotation {LOG}: {rest:?} is not key=value"));
            break;
        };
        let key = key.trim();
        if key == "text" {
            // The rest of the value, whatever it holds.
            text = Some(after.to_owned());
            break;
        }
        let (value, next) = after.split_once(';').unwrap_or((after, ""));
        let value = value.trim();
        rest = next.trim_start();
        match key {
            "every" => match parse_duration(value) {
                Ok(d) if d < MIN_EVERY => {
                    problems.push(format!(
                        "annotation {LOG}: every={value} is below {}ms; using {}ms",
                        MIN_EVERY.as_millis(),
                        MIN_EVERY.as_millis()
                    ));
                    every = Some(MIN_EVERY);
                }
                Ok(d) => every = Some(d),
                Err(e) => problems.push(format!("annotation {LOG}: every: {e}")),
            },
            "lines" => match value.parse::<u64>() {
                Ok(n) if n > u64::from(MAX_LINES) => {
                    problems.push(format!(
                        "annotation {LOG}: lines={n} is above {MAX_LINES}; using {MAX_LINES}"
                    ));
                    lines = Some(MAX_LINES);
                }
                Ok(n) => lines = u32::try_from(n).ok(),
                Err(_) => problems.push(format!(
                    "annotation {LOG}: lines={value:?} is not a count of lines"
                )),
            },
            other => problems.push(format!(
                "annotation {LOG}: unknown key {other:?} (keys: every, lines, text)"
            )),
        }
    }
    let mut text = text.unwrap_or_else(|| DEFAULT_TEXT.to_owned());
    if text.len() > MAX_TEMPLATE_BYTES {
        problems.push(format!(
            "annotation {LOG}: text is longer than {MAX_TEMPLATE_BYTES} bytes; cut"
        ));
        tfjob_policy_logic::text::truncate(&mut text, MAX_TEMPLATE_BYTES);
    }
    let mut lines = lines.unwrap_or(if every.is_some() { MAX_LINES } else { 1 });
    let at_once = u32::try_from(MAX_LITERAL_LINES).unwrap_or(u32::MAX);
    if every.is_none() && lines > at_once {
        problems.push(format!(
            "annotation {LOG}: lines={lines} without every; printing {at_once} at once"
        ));
        lines = at_once;
    }
    let script = LogScript::Steps { every, lines, text };
    (script, problems)
}

/// The loss printed at step `i`: falls from about 2.3 (a ten-class cross entropy at start)
/// towards 0.05, with a little deterministic jitter so lines do not look machine-made.
pub fn loss(i: u32) -> f64 {
    let jitter = f64::from((i.wrapping_mul(2_654_435_761) >> 24) % 100) / 10_000.0;
    0.05 + 2.25 * 0.97f64.powi(i32::try_from(i).unwrap_or(i32::MAX)) + jitter
}

/// Line `i` (from 1) of run `run` of a template.
pub fn render_step(template: &str, i: u32, run: u32, task: &str) -> String {
    template
        .replace("{i}", &i.to_string())
        .replace("{loss}", &format!("{:.4}", loss(i)))
        .replace("{task}", task)
        .replace("{run}", &run.to_string())
}

/// The replica's task, `worker:1`, from the `TF_CONFIG` of the container; `None` without one.
pub fn task(tf_config: &str) -> Option<(String, Value)> {
    let config: Value = serde_json::from_str(tf_config).ok()?;
    let t = config.get("task")?;
    let kind = t.get("type")?.as_str()?;
    let index = t.get("index").and_then(Value::as_u64).unwrap_or(0);
    let cluster = config.get("cluster").cloned().unwrap_or(Value::Null);
    Some((format!("{kind}:{index}"), cluster))
}

/// The `TF_CONFIG` value of container `name` of the pod.
pub fn tf_config(pod: &Value, container: &str) -> Option<String> {
    pod.pointer("/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(container))?
        .get("env")?
        .as_array()?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some("TF_CONFIG"))?
        .get("value")?
        .as_str()
        .map(str::to_owned)
}

/// The first line of a run: the task and a summary of the cluster (replicas per type) for a
/// TensorFlow container, else the container and image.
pub fn start_line(container: &str, image: &str, tf_config: Option<&str>) -> String {
    match tf_config.and_then(task) {
        Some((task, cluster)) => {
            let sizes: Vec<String> = cluster
                .as_object()
                .map(|c| {
                    c.iter()
                        .map(|(kind, hosts)| {
                            format!("{kind}: {}", hosts.as_array().map_or(0, Vec::len))
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "INFO starting task {task} of cluster {{{}}}",
                sizes.join(", ")
            )
        }
        None => format!("INFO starting container {container} (image {image})"),
    }
}

/// The last line of a run.
pub fn exit_line(exit_code: i32, reason: &str) -> String {
    let level = if exit_code == 0 { "INFO" } else { "ERROR" };
    format!("{level} container exited with code {exit_code} ({reason})")
}

/// A change in a container's life that shows in its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// The current run ended.
    Exit {
        container: String,
        exit_code: i32,
        reason: String,
    },
    /// A new run began; `run` counts from 1.
    Start { container: String, run: u32 },
}

/// What changed between two snapshots of a pod's containers: runs that ended (terminated, or
/// restarted in place) and runs that began, an ending before the start that follows it.
pub fn transitions(before: &[ContainerSim], after: &[ContainerSim]) -> Vec<LogEvent> {
    let mut events = Vec::new();
    for a in after {
        let Some(b) = before.iter().find(|b| b.name == a.name) else {
            continue;
        };
        let was_running = matches!(b.state, ContainerState::Running { .. });
        let restarted = a.restarts > b.restarts;
        let ended = match (&a.state, restarted) {
            (_, true) if was_running => a.last.as_ref(),
            (ContainerState::Terminated(t), false) if was_running => Some(t),
            _ => None,
        };
        if let Some(t) = ended {
            events.push(LogEvent::Exit {
                container: a.name.clone(),
                exit_code: t.exit_code,
                reason: t.reason.clone(),
            });
        }
        let starts =
            matches!(a.state, ContainerState::Running { .. }) && (restarted || !was_running);
        if starts {
            events.push(LogEvent::Start {
                container: a.name.clone(),
                run: a.restarts + 1,
            });
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use serde_json::json;

    #[test]
    fn scripts_and_literals_are_told_apart() {
        assert_eq!(
            parse("every=500ms;lines=10;text=step {i} loss {loss}"),
            (
                LogScript::Steps {
                    every: Some(Duration::from_millis(500)),
                    lines: 10,
                    text: "step {i} loss {loss}".into()
                },
                vec![]
            )
        );
        assert_eq!(
            parse("lines=3").0,
            LogScript::Steps {
                every: None,
                lines: 3,
                text: DEFAULT_TEXT.into()
            }
        );
        assert_eq!(parse("lines=3").0.immediate(), 3);
        assert_eq!(
            parse("loading data\nepoch 1 done").0,
            LogScript::Literal(vec!["loading data".into(), "epoch 1 done".into()])
        );
        // Text takes the rest of the value, separators included.
        assert_eq!(
            parse("every=1s; text=a=b; c").0,
            LogScript::Steps {
                every: Some(Duration::from_secs(1)),
                lines: MAX_LINES,
                text: "a=b; c".into()
            }
        );
        assert_eq!(
            LogScript::parse(Some(&json!({"annotations": {LOG: "hi"}}))).0,
            LogScript::Literal(vec!["hi".into()])
        );
        assert_eq!(LogScript::parse(None).0, LogScript::None);
    }

    #[test]
    fn floods_are_bounded() {
        let (s, problems) = parse("every=1ns;lines=5000000000;text=x");
        assert_eq!(
            s,
            LogScript::Steps {
                every: Some(MIN_EVERY),
                lines: MAX_LINES,
                text: "x".into()
            }
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        let long = format!("text={}", "é".repeat(MAX_TEMPLATE_BYTES));
        let (LogScript::Steps { text, .. }, problems) = parse(&long) else {
            panic!("a script");
        };
        assert!(text.len() <= MAX_TEMPLATE_BYTES);
        assert_eq!(problems.len(), 1);
        let (s, problems) = parse("lines=99999;text=x");
        assert_eq!(s.immediate(), 10_000);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let many = "x\n".repeat(MAX_LITERAL_LINES + 5);
        let (LogScript::Literal(lines), problems) = parse(&many) else {
            panic!("literal");
        };
        assert_eq!((lines.len(), problems.len()), (MAX_LITERAL_LINES, 1));
    }

    #[test]
    fn malformed_fields_are_reported_and_ignored() {
        let (s, problems) = parse("every=soon;lines=-1;colour=red;text=t");
        assert_eq!(
            s,
            LogScript::Steps {
                every: None,
                lines: 1,
                text: "t".into()
            }
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems.iter().all(|p| p.contains(LOG)));
        let (_, problems) = parse("lines=2;garbage");
        assert_eq!(problems.len(), 1, "{problems:?}");
    }

    #[test]
    fn steps_render_their_placeholders() {
        assert_eq!(
            render_step("{task} run {run} step {i} loss {loss}", 1, 2, "worker:1"),
            format!("worker:1 run 2 step 1 loss {:.4}", loss(1))
        );
        assert!(loss(1) > loss(50) && loss(50) > loss(200));
        assert!((2.0..2.5).contains(&loss(0)), "{}", loss(0));
        assert!(loss(u32::MAX).is_finite());
    }

    #[test]
    fn the_start_line_names_the_task_from_tf_config() {
        let tf = r#"{"cluster":{"chief":["a:2222"],"worker":["b:2222","c:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#;
        assert_eq!(
            start_line("tensorflow", "tf:2", Some(tf)),
            "INFO starting task worker:1 of cluster {chief: 1, worker: 2}"
        );
        assert_eq!(
            start_line("sidecar", "busybox", None),
            "INFO starting container sidecar (image busybox)"
        );
        assert_eq!(
            start_line("t", "i", Some("not json")),
            "INFO starting container t (image i)"
        );
        let pod = json!({"spec": {"containers": [{"name": "tensorflow", "env": [
            {"name": "A", "value": "1"}, {"name": "TF_CONFIG", "value": tf}]}]}});
        assert_eq!(tf_config(&pod, "tensorflow").as_deref(), Some(tf));
        assert_eq!(tf_config(&pod, "other"), None);
        assert_eq!(
            exit_line(137, "OOMKilled"),
            "ERROR container exited with code 137 (OOMKilled)"
        );
        assert_eq!(
            exit_line(0, "Completed"),
            "INFO container exited with code 0 (Completed)"
        );
    }

    fn container(name: &str, state: ContainerState, restarts: u32) -> ContainerSim {
        ContainerSim {
            name: name.into(),
            image: "tf:2".into(),
            state,
            last: None,
            restarts,
        }
    }

    #[test]
    fn transitions_follow_the_containers() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let waiting = ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: String::new(),
        };
        let running = ContainerState::Running { started_at: t0 };
        let done = super::super::status::Terminated {
            exit_code: 1,
            reason: "Error".into(),
            started_at: t0,
            finished_at: t0,
        };
        let created = [container("tensorflow", waiting.clone(), 0)];
        let started = [container("tensorflow", running.clone(), 0)];
        assert_eq!(
            transitions(&created, &started),
            [LogEvent::Start {
                container: "tensorflow".into(),
                run: 1
            }]
        );
        assert!(transitions(&started, &started).is_empty());
        assert!(transitions(&created, &created).is_empty());
        let mut restarted = container("tensorflow", running, 1);
        restarted.last = Some(done.clone());
        assert_eq!(
            transitions(&started, &[restarted]),
            [
                LogEvent::Exit {
                    container: "tensorflow".into(),
                    exit_code: 1,
                    reason: "Error".into()
                },
                LogEvent::Start {
                    container: "tensorflow".into(),
                    run: 2
                }
            ]
        );
        let ended = [container("tensorflow", ContainerState::Terminated(done), 0)];
        assert_eq!(
            transitions(&started, &ended),
            [LogEvent::Exit {
                container: "tensorflow".into(),
                exit_code: 1,
                reason: "Error".into()
            }]
        );
        // A container that never ran has nothing to end.
        assert!(transitions(&created, &ended).is_empty());
    }
}
