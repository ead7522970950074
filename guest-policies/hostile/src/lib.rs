//! A deliberately misbehaving policy (world `full-policy`), used only by the host's tests of the
//! sandbox: deadlines, memory caps, output size limits, the mutation guard, and the absence of
//! files, environment and network inside the sandbox.
//!
//! The behaviour is chosen by the settings document `{"mode": "<mode>"}` (`{}` or an empty
//! document mean `ok`); `validate-settings` accepts every mode below and rejects anything else
//! with an error naming `mode`.
//!
//! | mode          | decorate-pod                          | override-resources          | classify-pod                        |
//! |---------------|---------------------------------------|-----------------------------|-------------------------------------|
//! | `loop`        | never returns                         | never returns               | never returns                       |
//! | `memory`      | allocates and touches 1 MiB chunks until allocation fails, then `failed("allocation failed after N MiB")` (a host that traps on failed growth never sees the error) | same | same |
//! | `big-output`  | the input pod after 16 MiB of spaces (still valid JSON, same meaning) | the input after 16 MiB of spaces | `running`, 16 MiB message |
//! | `panic`       | panics (a trap under `panic = "abort"`) | panics                    | panics                              |
//! | `read-file`   | annotation `hostile/read-file`        | `failed("read-file: <report>")` | `running`, reason `read-file`, message the report |
//! | `env`         | annotation `hostile/env`              | `failed("env: <report>")`   | `running`, reason `env`, message the report |
//! | `network`     | annotation `hostile/network`          | `failed("network: <report>")` | `running`, reason `network`, message the report |
//! | `change-image`| `spec.containers[0].image` = `evil:latest` | input unchanged        | `running`                           |
//! | `privileged`  | `spec.containers[0].securityContext.privileged` = `true` | input unchanged | `running`            |
//! | `host-path`   | adds volume `{"name": "hostile-root", "hostPath": {"path": "/"}}` | input unchanged | `running`   |
//! | `sleep`       | `std::thread::sleep` for an hour (a blocking WASI timer) | same       | same                                |
//! | `poll`        | `wasi:io/poll.poll` on a timer an hour away | same                  | same                                |
//! | `stdin`       | reads stdin to its end; annotation `hostile/stdin` = bytes read | `failed("stdin: <n> bytes")` | `running`, reason `stdin` |
//! | `long-error`  | `failed(<text>)`: `pad` ASCII bytes, then 10 KiB of 2-, 3- and 4-byte characters | same | same |
//! | `log-flood`   | 100,000 log records of 1,000 empty fields each, then input unchanged | same, then input unchanged | same, then `running` |
//! | `edit`        | sets the JSON pointer `path` of the pod to `value` (`-` appends to a list) | input unchanged | `phase` if set, else `running` |
//! | `verdict`     | input unchanged                       | input unchanged             | a verdict of phase `phase`          |
//! | `read`        | makes the cluster reads in `reads`, annotation `hostile/read` = what each answered | same, then input unchanged | `running`, message what each answered |
//! | `read-forever`| repeats the first of `reads` forever, ignoring every error | same | same |
//! | `ok`          | input unchanged                       | input unchanged             | `running`                           |
//!
//! `validate-settings` itself misbehaves in three more modes: `sleep-in-settings` (sleeps an
//! hour), `long-error-in-settings` (rejects with the `long-error` text) and `loop-in-settings`
//! (never returns); their hooks behave as `ok`.
//!
//! Reports: `read-file` tries `/etc/passwd` and reports `denied` or the first 64 bytes read;
//! `env` reports `count=<n> visible=<true|false>` for `std::env::vars_os()`; `network` tries a
//! TCP connection to `127.0.0.1:80` and reports `connected` or `error: <error>`.
//!
//! Pods are edited as plain JSON documents, so the only change is the one the mode makes.

use serde::Deserialize;
use tfjob_policy_sdk::serde_json::{self, Map, Value, json};
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, Phase, PolicyError, Verdict};

/// The size of `big-output` results: far above any sane output cap.
const BIG_OUTPUT: usize = 16 * 1024 * 1024;
/// `memory` allocates in chunks of this size.
const MEMORY_CHUNK: usize = 1024 * 1024;
/// How much of a readable `/etc/passwd` the `read-file` report shows.
const READ_FILE_PREFIX: usize = 64;

/// What the policy does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    Loop,
    Memory,
    BigOutput,
    Panic,
    ReadFile,
    Env,
    Network,
    ChangeImage,
    Privileged,
    HostPath,
    Sleep,
    Poll,
    Stdin,
    LongError,
    LogFlood,
    Edit,
    Verdict,
    Read,
    ReadForever,
    SleepInSettings,
    LongErrorInSettings,
    LoopInSettings,
    #[default]
    Ok,
}

impl Mode {
    /// The mode as written in settings.
    fn name(self) -> &'static str {
        match self {
            Mode::Loop => "loop",
            Mode::Memory => "memory",
            Mode::BigOutput => "big-output",
            Mode::Panic => "panic",
            Mode::ReadFile => "read-file",
            Mode::Env => "env",
            Mode::Network => "network",
            Mode::ChangeImage => "change-image",
            Mode::Privileged => "privileged",
            Mode::HostPath => "host-path",
            Mode::Sleep => "sleep",
            Mode::Poll => "poll",
            Mode::Stdin => "stdin",
            Mode::LongError => "long-error",
            Mode::LogFlood => "log-flood",
            Mode::Edit => "edit",
            Mode::Verdict => "verdict",
            Mode::Read => "read",
            Mode::ReadForever => "read-forever",
            Mode::SleepInSettings => "sleep-in-settings",
            Mode::LongErrorInSettings => "long-error-in-settings",
            Mode::LoopInSettings => "loop-in-settings",
            Mode::Ok => "ok",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HostileSettings {
    mode: Mode,
    /// `long-error`: ASCII bytes before the multi-byte text, to move every cut across a
    /// character.
    pad: usize,
    /// `edit`: a JSON pointer into the pod.
    path: String,
    /// `edit`: the value to set there.
    value: Value,
    /// `verdict` (and `edit`, when set): the phase to answer, as spelled in the contract.
    phase: String,
    /// `verdict`: the `recheck-at` to answer, verbatim (RFC 3339 or not).
    #[serde(rename = "recheckAt")]
    recheck_at: Option<String>,
    /// `read`, `read-forever`: the reads to make, in order.
    reads: Vec<ReadRequest>,
    /// `read`: go on after a read fails (the host still ends the call with its category).
    #[serde(rename = "ignoreErrors")]
    ignore_errors: bool,
}

/// One read of `read` mode: a `get` when `name` is set, else a `list`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ReadRequest {
    resource: String,
    namespace: String,
    name: Option<String>,
    selector: String,
    limit: u32,
}

impl PolicySettings for HostileSettings {
    fn validate(&self) -> Result<(), String> {
        // serde already rejected unknown modes, naming `mode`.
        Ok(())
    }
}

/// The component's implementation.
struct Hostile;

tfjob_policy_sdk::export_policy!(world: "full-policy", path: "../../wit", policy: Hostile);

impl bindings::exports::tfjob::policy::settings::Guest for Hostile {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<HostileSettings>(&settings)?;
        let s = load(&settings).map_err(|e| e.message().to_owned())?;
        match s.mode {
            Mode::SleepInSettings => sleep_long(),
            Mode::LoopInSettings => spin(),
            Mode::LongErrorInSettings => Err(long_text(s.pad)),
            _ => Ok(()),
        }
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for Hostile {
    fn decorate_pod(
        _ctx: JobContext,
        settings: String,
        pod: String,
    ) -> Result<String, PolicyError> {
        let s = load(&settings)?;
        let mode = s.mode;
        if let Some(outcome) = common(&s) {
            return outcome.map(|()| pod);
        }
        match mode {
            Mode::Loop => spin(),
            Mode::Memory => Err(exhaust_memory()),
            Mode::Panic => panic!("hostile policy: panic mode"),
            Mode::BigOutput => Ok(pad(&pod)),
            Mode::Stdin => edit(&pod, |p| {
                let annotations = object(object(p, "metadata"), "annotations");
                annotations.insert("hostile/stdin".into(), json!(read_stdin().to_string()));
                Ok(())
            }),
            Mode::Read => {
                let answers = read_all(&s)?;
                edit(&pod, |p| {
                    let annotations = object(object(p, "metadata"), "annotations");
                    annotations.insert("hostile/read".into(), Value::String(answers));
                    Ok(())
                })
            }
            Mode::Edit => {
                let mut document: Value = serde_json::from_str(&pod)
                    .map_err(|e| PolicyError::InvalidInput(format!("pod: {e}")))?;
                set_pointer(&mut document, &s.path, s.value.clone())?;
                Ok(document.to_string())
            }
            Mode::ReadFile | Mode::Env | Mode::Network => edit(&pod, |p| {
                let annotations = object(object(p, "metadata"), "annotations");
                annotations.insert(
                    format!("hostile/{}", mode.name()),
                    Value::String(report(mode)),
                );
                Ok(())
            }),
            Mode::ChangeImage => edit(&pod, |p| {
                first_container(p)?.insert("image".into(), json!("evil:latest"));
                Ok(())
            }),
            Mode::Privileged => edit(&pod, |p| {
                object(first_container(p)?, "securityContext")
                    .insert("privileged".into(), json!(true));
                Ok(())
            }),
            Mode::HostPath => edit(&pod, |p| {
                let volumes = object(p, "spec")
                    .entry("volumes")
                    .or_insert_with(|| Value::Array(Vec::new()));
                match volumes {
                    Value::Array(list) => {
                        list.push(json!({"name": "hostile-root", "hostPath": {"path": "/"}}));
                        Ok(())
                    }
                    _ => Err(PolicyError::InvalidInput(
                        "pod.spec.volumes: expected a list".into(),
                    )),
                }
            }),
            _ => Ok(pod),
        }
    }
}

impl bindings::exports::tfjob::policy::resources::Guest for Hostile {
    fn override_resources(
        _ctx: JobContext,
        settings: String,
        _container_name: String,
        resources: String,
    ) -> Result<String, PolicyError> {
        let s = load(&settings)?;
        let mode = s.mode;
        if let Some(outcome) = common(&s) {
            return outcome.map(|()| resources);
        }
        match mode {
            Mode::Loop => spin(),
            Mode::Memory => Err(exhaust_memory()),
            Mode::Panic => panic!("hostile policy: panic mode"),
            Mode::BigOutput => Ok(pad(&resources)),
            Mode::Stdin => Err(PolicyError::Failed(format!(
                "stdin: {} bytes",
                read_stdin()
            ))),
            Mode::ReadFile | Mode::Env | Mode::Network => Err(PolicyError::Failed(format!(
                "{}: {}",
                mode.name(),
                report(mode)
            ))),
            Mode::Read => read_all(&s).map(|_| resources),
            _ => Ok(resources),
        }
    }
}

impl bindings::exports::tfjob::policy::classify::Guest for Hostile {
    fn classify_pod(
        _ctx: JobContext,
        settings: String,
        _pod: String,
        _now: String,
    ) -> Result<Verdict, PolicyError> {
        let s = load(&settings)?;
        let mode = s.mode;
        let running = |reason: &str, message: String| Verdict {
            phase: Phase::Running,
            reason: reason.to_owned(),
            message,
            kind: None,
            occurred_at: None,
            recheck_at: None,
        };
        if let Some(outcome) = common(&s) {
            return outcome.map(|()| running("", String::new()));
        }
        match mode {
            Mode::Loop => spin(),
            Mode::Memory => Err(exhaust_memory()),
            Mode::Panic => panic!("hostile policy: panic mode"),
            Mode::BigOutput => Ok(running("", "x".repeat(BIG_OUTPUT))),
            Mode::ReadFile | Mode::Env | Mode::Network => Ok(running(mode.name(), report(mode))),
            Mode::Stdin => Ok(running("stdin", read_stdin().to_string())),
            // A policy that both decorates and classifies: what-if tools compare both.
            Mode::Edit if !s.phase.is_empty() => Ok(Verdict {
                phase: phase(&s.phase)?,
                ..running("hostile", "as configured".into())
            }),
            Mode::Verdict => Ok(Verdict {
                phase: phase(&s.phase)?,
                recheck_at: s.recheck_at.clone(),
                ..running("hostile", "as configured".into())
            }),
            Mode::Read => Ok(running("read", read_all(&s)?)),
            _ => Ok(running("", String::new())),
        }
    }
}

fn load(settings: &str) -> Result<HostileSettings, PolicyError> {
    settings::load::<HostileSettings>(settings)
}

/// What every hook does alike in the modes that do not depend on the hook: `Some` with the
/// outcome (`Ok` meaning "then answer as `ok` would"), `None` for the hook's own modes.
fn common(s: &HostileSettings) -> Option<Result<(), PolicyError>> {
    match s.mode {
        Mode::Sleep => sleep_long(),
        Mode::Poll => poll_long(),
        Mode::LongError => Some(Err(PolicyError::Failed(long_text(s.pad)))),
        Mode::LogFlood => {
            log_flood();
            Some(Ok(()))
        }
        Mode::ReadForever => loop {
            if let Some(r) = s.reads.first() {
                let _ = read_one(r);
            }
        },
        _ => None,
    }
}

/// Makes the reads of `read` mode; returns what each answered as a JSON list, or the first
/// error unless errors are ignored.
fn read_all(s: &HostileSettings) -> Result<String, PolicyError> {
    let mut answers = Vec::with_capacity(s.reads.len());
    for r in &s.reads {
        match read_one(r) {
            Ok(answer) => answers.push(answer),
            Err(e) if s.ignore_errors => answers.push(json!({ "error": e })),
            Err(e) => return Err(PolicyError::Failed(e)),
        }
    }
    Ok(Value::Array(answers).to_string())
}

/// One read: the names it answered, whether more matched, the freshness; or the error.
fn read_one(r: &ReadRequest) -> Result<Value, String> {
    use tfjob_policy_sdk::cluster::{self, ReadError};
    let name_of = |json: &str| -> Value {
        serde_json::from_str::<Value>(json)
            .ok()
            .and_then(|o| o.pointer("/metadata/name").cloned())
            .unwrap_or(Value::Null)
    };
    let error = |e: ReadError| {
        let kind = match &e {
            ReadError::Denied(_) => "denied",
            ReadError::Unavailable(_) => "unavailable",
            ReadError::TooManyReads(_) => "too-many-reads",
            ReadError::TooLarge(_) => "too-large",
            ReadError::Invalid(_) => "invalid",
        };
        format!("{kind}: {}", cluster::message(&e))
    };
    match &r.name {
        Some(name) => {
            let got = cluster::get(&r.resource, &r.namespace, name).map_err(error)?;
            Ok(json!({
                "object": got.object.as_deref().map(name_of),
                "synced": got.freshness.synced,
                "resourceVersion": got.freshness.resource_version,
            }))
        }
        None => {
            let listed =
                cluster::list(&r.resource, &r.namespace, &r.selector, r.limit).map_err(error)?;
            Ok(json!({
                "items": listed.items.iter().map(|i| name_of(i)).collect::<Vec<_>>(),
                "more": listed.more,
                "synced": listed.freshness.synced,
                "resourceVersion": listed.freshness.resource_version,
            }))
        }
    }
}

/// Blocks in a WASI timer for an hour; only the host's bound on timers ends the call.
fn sleep_long() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// Waits on a pollable an hour away through `wasi:io/poll.poll` directly.
#[cfg(target_os = "wasi")]
fn poll_long() -> ! {
    loop {
        let timer = wasip2::clocks::monotonic_clock::subscribe_duration(3600 * 1_000_000_000);
        wasip2::io::poll::poll(&[&timer]);
    }
}

#[cfg(not(target_os = "wasi"))]
fn poll_long() -> ! {
    sleep_long()
}

/// Reads stdin to its end and returns how many bytes came.
fn read_stdin() -> usize {
    use std::io::Read;
    let mut buffer = Vec::new();
    std::io::stdin().read_to_end(&mut buffer).unwrap_or(0)
}

/// `pad` ASCII bytes, then 10 KiB of 2-, 3- and 4-byte characters, so any byte budget falls
/// inside a character for some `pad`.
fn long_text(pad: usize) -> String {
    let mut text = "p".repeat(pad);
    while text.len() < pad + 10 * 1024 {
        text.push_str("é€😀");
    }
    text
}

/// Many records of many empty fields: no text, all overhead.
fn log_flood() {
    let fields = vec![("", ""); 1000];
    for _ in 0..100_000 {
        tfjob_policy_sdk::log::info("", &fields);
    }
}

fn phase(name: &str) -> Result<Phase, PolicyError> {
    Ok(match name {
        "undefined" => Phase::Undefined,
        "queued" => Phase::Queued,
        "waiting-for-resources" => Phase::WaitingForResources,
        "initializing" => Phase::Initializing,
        "running" => Phase::Running,
        "succeeded" => Phase::Succeeded,
        "retryable-failure" => Phase::RetryableFailure,
        "permanent-failure" => Phase::PermanentFailure,
        other => {
            return Err(PolicyError::InvalidSettings(format!(
                "phase: unknown phase {other:?}"
            )));
        }
    })
}

/// Sets the JSON pointer `path` of `document` to `value`, creating objects on the way; a last
/// segment `-` appends to a list.
fn set_pointer(document: &mut Value, path: &str, value: Value) -> Result<(), PolicyError> {
    let invalid = |m: &str| PolicyError::InvalidSettings(format!("path {path:?}: {m}"));
    let segments: Vec<String> = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("a JSON pointer starts with /"))?
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = segments.split_last().ok_or_else(|| invalid("empty"))?;
    let mut at = document;
    for segment in parents {
        at = match at {
            Value::Array(list) => {
                let i: usize = segment.parse().map_err(|_| invalid("expected an index"))?;
                list.get_mut(i)
                    .ok_or_else(|| invalid("index out of range"))?
            }
            Value::Object(map) => map
                .entry(segment.clone())
                .or_insert_with(|| Value::Object(Map::new())),
            _ => return Err(invalid("goes through a scalar")),
        };
    }
    match at {
        Value::Array(list) if last == "-" => list.push(value),
        Value::Array(list) => {
            let i: usize = last.parse().map_err(|_| invalid("expected an index"))?;
            *list
                .get_mut(i)
                .ok_or_else(|| invalid("index out of range"))? = value;
        }
        Value::Object(map) => {
            map.insert(last.clone(), value);
        }
        _ => return Err(invalid("goes through a scalar")),
    }
    Ok(())
}

/// Burns CPU until the host's deadline stops the instance.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        // `black_box` keeps the loop from being recognised as side-effect free.
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Allocates and writes memory until an allocation fails; returns the error to report if the
/// host lets the allocation fail instead of trapping.
fn exhaust_memory() -> PolicyError {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk: Vec<u8> = Vec::new();
        if chunk.try_reserve_exact(MEMORY_CHUNK).is_err() || chunks.try_reserve(1).is_err() {
            return PolicyError::Failed(format!("allocation failed after {} MiB", chunks.len()));
        }
        // Writing every byte touches every page, so the memory is really used.
        chunk.resize(MEMORY_CHUNK, 0xA5);
        chunks.push(std::hint::black_box(chunk));
    }
}

/// The input after 16 MiB of whitespace: valid JSON meaning the same, so only size limits can
/// reject it.
fn pad(json: &str) -> String {
    let mut out = String::with_capacity(BIG_OUTPUT + json.len());
    out.extend(std::iter::repeat_n(' ', BIG_OUTPUT));
    out.push_str(json);
    out
}

/// What the sandbox let this mode see (see the crate documentation).
fn report(mode: Mode) -> String {
    match mode {
        Mode::ReadFile => match std::fs::read("/etc/passwd") {
            Ok(bytes) => {
                String::from_utf8_lossy(&bytes[..bytes.len().min(READ_FILE_PREFIX)]).into_owned()
            }
            Err(_) => "denied".to_owned(),
        },
        Mode::Env => {
            let count = std::env::vars_os().count();
            format!("count={count} visible={}", count > 0)
        }
        Mode::Network => match std::net::TcpStream::connect("127.0.0.1:80") {
            Ok(_) => "connected".to_owned(),
            Err(e) => format!("error: {e}"),
        },
        other => format!("mode {} has no report", other.name()),
    }
}

/// Applies `change` to the pod as a JSON document and encodes it again.
fn edit(
    pod: &str,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<(), PolicyError>,
) -> Result<String, PolicyError> {
    let mut document: Value =
        serde_json::from_str(pod).map_err(|e| PolicyError::InvalidInput(format!("pod: {e}")))?;
    let Value::Object(object) = &mut document else {
        return Err(PolicyError::InvalidInput(
            "pod: expected a JSON object".into(),
        ));
    };
    change(object)?;
    Ok(document.to_string())
}

/// The object under `key`, created (or replacing a non-object) if needed.
fn object<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    parent
        .entry(key)
        .and_modify(|slot| {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
        })
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("the slot holds an object: inserted or replaced above")
}

fn first_container(pod: &mut Map<String, Value>) -> Result<&mut Map<String, Value>, PolicyError> {
    object(pod, "spec")
        .get_mut("containers")
        .and_then(|c| c.get_mut(0))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            PolicyError::InvalidInput("pod.spec.containers: no container to change".into())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::tfjob::policy::classify::Guest as _;
    use bindings::exports::tfjob::policy::decorate::Guest as _;
    use bindings::exports::tfjob::policy::resources::Guest as _;
    use bindings::exports::tfjob::policy::settings::Guest as _;

    const POD: &str =
        r#"{"metadata":{"name":"p"},"spec":{"containers":[{"image":"tf","name":"tensorflow"}]}}"#;

    fn ctx() -> JobContext {
        JobContext {
            job_name: "j".into(),
            namespace: "n".into(),
            job_uid: "u".into(),
            job_labels: vec![],
            job_annotations: vec![],
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }

    fn settings(mode: &str) -> String {
        json!({"mode": mode}).to_string()
    }

    fn decorate(mode: &str) -> Value {
        serde_json::from_str(&Hostile::decorate_pod(ctx(), settings(mode), POD.into()).unwrap())
            .unwrap()
    }

    #[test]
    fn validate_settings_accepts_known_modes_and_names_mode_otherwise() {
        for mode in [
            "loop",
            "memory",
            "big-output",
            "panic",
            "read-file",
            "env",
            "network",
            "change-image",
            "privileged",
            "host-path",
            "ok",
        ] {
            assert_eq!(Hostile::validate_settings(settings(mode)), Ok(()), "{mode}");
        }
        assert_eq!(Hostile::validate_settings("{}".into()), Ok(()));
        assert_eq!(Hostile::validate_settings("".into()), Ok(()));
        let err = Hostile::validate_settings(settings("fork-bomb")).unwrap_err();
        assert!(
            err.starts_with("mode: unknown variant `fork-bomb`"),
            "{err}"
        );
        let err = Hostile::decorate_pod(ctx(), settings("fork-bomb"), POD.into()).unwrap_err();
        assert!(matches!(err, PolicyError::InvalidSettings(m) if m.starts_with("mode: ")));
    }

    #[test]
    fn ok_mode_behaves() {
        assert_eq!(
            Hostile::decorate_pod(ctx(), "{}".into(), POD.into()).unwrap(),
            POD
        );
        assert_eq!(
            Hostile::override_resources(ctx(), settings("ok"), "tensorflow".into(), "{}".into())
                .unwrap(),
            "{}"
        );
        let v = Hostile::classify_pod(
            ctx(),
            settings("ok"),
            POD.into(),
            "2026-01-01T00:00:00Z".into(),
        )
        .unwrap();
        assert_eq!(v.phase, Phase::Running);
    }

    #[test]
    fn pod_mutations() {
        assert_eq!(
            decorate("change-image")["spec"]["containers"][0]["image"],
            "evil:latest"
        );
        assert_eq!(
            decorate("privileged")["spec"]["containers"][0]["securityContext"],
            json!({"privileged": true})
        );
        assert_eq!(
            decorate("host-path")["spec"]["volumes"],
            json!([{"name": "hostile-root", "hostPath": {"path": "/"}}])
        );
        // Decorator-only modes leave the other hooks alone.
        assert_eq!(
            Hostile::override_resources(
                ctx(),
                settings("host-path"),
                "tensorflow".into(),
                "{}".into()
            )
            .unwrap(),
            "{}"
        );
    }

    #[test]
    fn reports_land_in_the_output() {
        // Natively nothing is sandboxed, so the file is readable and the environment visible.
        let pod = decorate("read-file");
        let report = pod["metadata"]["annotations"]["hostile/read-file"]
            .as_str()
            .unwrap();
        assert!(report == "denied" || !report.is_empty());
        let pod = decorate("env");
        assert!(
            pod["metadata"]["annotations"]["hostile/env"]
                .as_str()
                .unwrap()
                .starts_with("count=")
        );
        let pod = decorate("network");
        let report = pod["metadata"]["annotations"]["hostile/network"]
            .as_str()
            .unwrap();
        assert!(
            report == "connected" || report.starts_with("error: "),
            "{report}"
        );
        let v = Hostile::classify_pod(ctx(), settings("env"), POD.into(), String::new()).unwrap();
        assert_eq!(v.reason, "env");
        assert!(v.message.starts_with("count="));
        let err =
            Hostile::override_resources(ctx(), settings("read-file"), "t".into(), "{}".into())
                .unwrap_err();
        assert!(matches!(err, PolicyError::Failed(m) if m.starts_with("read-file: ")));
    }

    #[test]
    fn big_output_is_big_and_still_the_same_json() {
        let out = Hostile::decorate_pod(ctx(), settings("big-output"), POD.into()).unwrap();
        assert_eq!(out.len(), BIG_OUTPUT + POD.len());
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            serde_json::from_str::<Value>(POD).unwrap()
        );
        let v = Hostile::classify_pod(ctx(), settings("big-output"), POD.into(), String::new())
            .unwrap();
        assert_eq!(v.message.len(), BIG_OUTPUT);
    }

    #[test]
    #[should_panic(expected = "hostile policy: panic mode")]
    fn panic_mode_panics() {
        let _ = Hostile::decorate_pod(ctx(), settings("panic"), POD.into());
    }
}
