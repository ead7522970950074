//! `tfjob-operator policy test --suite FILE`: a policy's behaviour written down as cases, run in
//! the real sandbox, for a platform team's CI.
//!
//! A single `policy test` answers "what does my policy do with this pod?"; a suite says what it
//! must do, case by case, and fails the build when it stops doing it. Each case names a hook,
//! settings, an input (pod, job context, `now`, container) and an expectation: the whole result,
//! a subset of its fields, values at JSON paths, a verdict's phase/reason/kind, or a failure of
//! the operator's categories (`guard-violation`, `timeout`, `invalid-settings`, ...). Every case
//! activates the policy with the operator's own activation and runs the hook behind the
//! operator's checks ([`crate::policy_hooks::run_hook`]), with the operator's limits.
//!
//! The module has three parts: loading ([`load`]: the YAML, the files it names, every field
//! checked before anything runs, so a typo fails the suite instead of passing a case), comparing
//! ([`check`]: pure), and reporting (a table, JSON or JUnit XML).
//!
//! A suite is input that may come from anyone who can open a pull request, so loading is
//! defensive: files are named relative to the suite's directory and may not lead out of it (no
//! absolute paths, no `..`, no symbolic links pointing elsewhere), only regular files are read,
//! and the suite, the files it names and the number of cases are capped. Text from the suite or
//! the policy is printed with control characters escaped, so a case name cannot rewrite the
//! terminal, and XML gets only characters XML allows.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tfjob_planner::PodContext;
use tfjob_planner::policy::{FailureKind, VerdictPhase};
use tfjob_policy_engine::hook_call::job_context;
use tfjob_policy_engine::{Category, EvalError, Hook, PolicyEngine, SandboxLimits};

use crate::policy_hooks::{
    ContextFile, HookInput, PolicySource, container, policy_source, run_hook,
};

/// The largest suite file read.
pub const MAX_SUITE_BYTES: u64 = 16 << 20;
/// The largest file a suite names (pod, context, settings, manifest).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The most cases one suite may hold.
pub const MAX_CASES: usize = 10_000;
/// The deepest nesting of flow collections (`[`, `{`) read. The YAML parser takes time
/// quadratic in this depth (100,000 levels, 200 KB of brackets, take minutes) although
/// deserializing stops at 128 levels anyway.
pub const MAX_FLOW_DEPTH: usize = 256;

/// How `policy test --suite` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per case, then every failure with its differences.
    Table,
    /// One JSON document.
    Json,
    /// JUnit XML, as CI systems read test results.
    Junit,
}

// ---------------------------------------------------------------------------------------------
// The suite as loaded
// ---------------------------------------------------------------------------------------------

/// A suite whose every field was checked and every file read.
#[derive(Debug)]
pub struct Suite {
    /// The suite file, as given.
    pub file: PathBuf,
    /// The policy to test, unless `--policy` names one.
    pub policy: Option<PolicyRef>,
    /// The manifest to run it with (YAML text), unless `--manifest` gives one.
    pub manifest: Option<String>,
    pub cases: Vec<Case>,
}

/// The suite's `policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyRef {
    /// `default` or `default:<name>`.
    Default(String),
    /// A module next to the suite.
    File(PathBuf),
}

/// One case.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub hook: Hook,
    /// `None`: the manifest's settings (a default's: the operator's).
    pub settings: Option<Value>,
    pub pod: Arc<Pod>,
    pub context: PodContext,
    /// When the classification is made; set for every `classify` case.
    pub now: Option<jiff::Timestamp>,
    /// The container of a `resources` case [default: the first].
    pub container: Option<String>,
    pub expect: Expectation,
}

/// What a case expects. Either `failure`, or any of the others (all must hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expectation {
    /// The whole result.
    pub result: Option<Value>,
    /// A subset of the result: the fields given, recursively.
    pub fields: Option<Value>,
    /// Values at paths of the result.
    pub paths: Vec<(JsonPath, Value)>,
    /// A subset of the verdict (classify only), times normalised to UTC.
    pub verdict: Option<Value>,
    pub failure: Option<FailureExpectation>,
}

/// An expected failure: its category and, optionally, text its message contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureExpectation {
    pub category: FailureCategory,
    pub message: Option<String>,
}

/// Why a call produced no result, in the operator's categories (those of
/// `tfjob_policy_errors_total` and of the events), settings named as the contract names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureCategory {
    /// `validate-settings` refused the settings, the manifest or its limits were refused, or
    /// the hook reported `invalid-settings` (the operator's category `settings`).
    InvalidSettings,
    GuardViolation,
    InvalidOutput,
    Timeout,
    Memory,
    Trap,
    Link,
    Unavailable,
    /// The operator's breaker refused the call; a suite calls the engine without breakers, so
    /// no case fails this way, but every category of the operator has its name here.
    Tripped,
}

impl FailureCategory {
    const ALL: [FailureCategory; 9] = [
        FailureCategory::InvalidSettings,
        FailureCategory::GuardViolation,
        FailureCategory::InvalidOutput,
        FailureCategory::Timeout,
        FailureCategory::Memory,
        FailureCategory::Trap,
        FailureCategory::Link,
        FailureCategory::Unavailable,
        FailureCategory::Tripped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCategory::InvalidSettings => "invalid-settings",
            FailureCategory::GuardViolation => "guard-violation",
            FailureCategory::InvalidOutput => "invalid-output",
            FailureCategory::Timeout => "timeout",
            FailureCategory::Memory => "memory",
            FailureCategory::Trap => "trap",
            FailureCategory::Link => "link",
            FailureCategory::Unavailable => "unavailable",
            FailureCategory::Tripped => "tripped",
        }
    }

    /// Parses a category; `settings` (the operator's own name) means `invalid-settings`.
    pub fn parse(text: &str) -> Result<FailureCategory, String> {
        if text == "settings" {
            return Ok(FailureCategory::InvalidSettings);
        }
        FailureCategory::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = FailureCategory::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown failure category {text:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

impl From<Category> for FailureCategory {
    fn from(c: Category) -> FailureCategory {
        match c {
            Category::Settings => FailureCategory::InvalidSettings,
            Category::GuardViolation => FailureCategory::GuardViolation,
            Category::InvalidOutput => FailureCategory::InvalidOutput,
            Category::Timeout => FailureCategory::Timeout,
            Category::Memory => FailureCategory::Memory,
            Category::Trap => FailureCategory::Trap,
            Category::Link => FailureCategory::Link,
            Category::Unavailable => FailureCategory::Unavailable,
            Category::Tripped => FailureCategory::Tripped,
        }
    }
}

impl fmt::Display for FailureCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call that produced no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub category: FailureCategory,
    pub message: String,
}

impl From<EvalError> for Failure {
    fn from(e: EvalError) -> Failure {
        Failure {
            category: e.category.into(),
            message: e.message,
        }
    }
}

/// What a case's call came to: the hook's result as JSON, or a failure.
pub type Outcome = Result<Value, Failure>;

// ---------------------------------------------------------------------------------------------
// JSON paths
// ---------------------------------------------------------------------------------------------

/// One step of a [`JsonPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path into a JSON document, written as the guard writes them (`spec.containers[0].env`,
/// `metadata.labels["example.com/team"]`; brackets without quotes also take a key) or as a
/// JSON Pointer (`/spec/containers/0/env`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JsonPath(pub Vec<Segment>);

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        if text.is_empty() {
            return Err("empty path (`result` compares the whole result)".into());
        }
        if let Some(pointer) = text.strip_prefix('/') {
            let segments = pointer
                .split('/')
                .map(|s| Segment::Key(s.replace("~1", "/").replace("~0", "~")))
                .collect();
            return Ok(JsonPath(segments));
        }
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        let mut expect_key = true;
        while i < chars.len() {
            match chars[i] {
                '[' => {
                    let (segment, next) =
                        bracket(&chars, i).map_err(|e| format!("{text:?}: {e}"))?;
                    segments.push(segment);
                    i = next;
                    expect_key = false;
                }
                '.' if !expect_key => {
                    i += 1;
                    expect_key = true;
                    if i == chars.len() {
                        return Err(format!("{text:?}: ends with `.`"));
                    }
                }
                '.' => return Err(format!("{text:?}: empty field name at offset {i}")),
                ']' => return Err(format!("{text:?}: `]` without `[` at offset {i}")),
                _ if expect_key => {
                    let start = i;
                    while i < chars.len() && !matches!(chars[i], '.' | '[' | ']') {
                        i += 1;
                    }
                    segments.push(Segment::Key(chars[start..i].iter().collect()));
                    expect_key = false;
                }
                c => return Err(format!("{text:?}: expected `.` or `[` before {c:?}")),
            }
        }
        Ok(JsonPath(segments))
    }

    /// The value at the path, if there is one. A key step into an array takes an index (as a
    /// JSON Pointer writes them).
    pub fn get<'a>(&self, mut value: &'a Value) -> Option<&'a Value> {
        for segment in &self.0 {
            value = match (segment, value) {
                (Segment::Key(k), Value::Object(m)) => m.get(k)?,
                (Segment::Key(k), Value::Array(a)) => a.get(k.parse::<usize>().ok()?)?,
                (Segment::Index(i), Value::Array(a)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(value)
    }

    fn child(&self, segment: Segment) -> JsonPath {
        let mut segments = self.0.clone();
        segments.push(segment);
        JsonPath(segments)
    }
}

/// A `[...]` step starting at `chars[start]`: `[3]`, `["a.b"]` (a JSON string) or `[a.b]`.
/// Returns the step and where the text goes on.
fn bracket(chars: &[char], start: usize) -> Result<(Segment, usize), String> {
    let mut i = start + 1;
    if chars.get(i) == Some(&'"') {
        // A JSON string: up to the first quote not escaped by a backslash.
        let mut j = i + 1;
        while j < chars.len() && chars[j] != '"' {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        if chars.get(j + 1) != Some(&']') {
            return Err(format!("unterminated `[\"` at offset {start}"));
        }
        let quoted: String = chars[i..=j].iter().collect();
        let key: String = serde_json::from_str(&quoted)
            .map_err(|e| format!("{quoted} at offset {start} is not a JSON string: {e}"))?;
        return Ok((Segment::Key(key), j + 2));
    }
    while i < chars.len() && chars[i] != ']' {
        i += 1;
    }
    if i == chars.len() {
        return Err(format!("`[` at offset {start} is not closed"));
    }
    let inner: String = chars[start + 1..i].iter().collect();
    if inner.is_empty() {
        return Err(format!("empty `[]` at offset {start}"));
    }
    let segment = match inner.parse::<usize>() {
        Ok(n) if inner.bytes().all(|b| b.is_ascii_digit()) => Segment::Index(n),
        _ => Segment::Key(inner),
    };
    Ok((segment, i + 1))
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(result)");
        }
        for (n, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(i) => write!(f, "[{i}]")?,
                Segment::Key(k) if plain_key(k) => {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{}]", Value::from(k.as_str()))?,
            }
        }
        Ok(())
    }
}

/// Whether a key can be written without brackets and read back as the same key.
fn plain_key(k: &str) -> bool {
    !k.is_empty()
        && !k.bytes().all(|b| b.is_ascii_digit())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

/// One way a case's outcome differs from what it expects.
#[derive(Clone, Debug, PartialEq)]
pub enum Mismatch {
    /// A value differs (`None`: absent).
    Value {
        path: JsonPath,
        expected: Option<Value>,
        actual: Option<Value>,
    },
    /// A failure where a result was expected, a result where a failure was, or another failure.
    Outcome { expected: String, actual: String },
}

/// Every way `outcome` differs from `expect`; empty when the case passes.
///
/// Throughout, `null` and an absent field are the same (`paths: {spec.schedulerName: null}`
/// expects no scheduler name), and numbers compare by value (`1` equals `1.0`).
pub fn check(expect: &Expectation, outcome: &Outcome) -> Vec<Mismatch> {
    let mut out = Vec::new();
    match (&expect.failure, outcome) {
        (Some(wanted), Err(got)) => {
            let message_ok = wanted
                .message
                .as_ref()
                .is_none_or(|m| got.message.contains(m.as_str()));
            if wanted.category != got.category || !message_ok {
                out.push(Mismatch::Outcome {
                    expected: describe_expected_failure(wanted),
                    actual: format!("failure {}: {}", got.category, got.message),
                });
            }
        }
        (Some(wanted), Ok(result)) => out.push(Mismatch::Outcome {
            expected: describe_expected_failure(wanted),
            actual: format!("a result: {}", elided_json(result)),
        }),
        (None, Err(got)) => out.push(Mismatch::Outcome {
            expected: "a result".into(),
            actual: format!("failure {}: {}", got.category, got.message),
        }),
        (None, Ok(result)) => {
            let root = JsonPath::default();
            if let Some(whole) = &expect.result {
                diff_whole(&root, present(Some(whole)), present(Some(result)), &mut out);
            }
            if let Some(fields) = &expect.fields {
                diff_subset(&root, fields, Some(result), &mut out);
            }
            for (path, wanted) in &expect.paths {
                let got = present(path.get(result));
                let wanted = present(Some(wanted));
                if !same(wanted, got) {
                    out.push(Mismatch::Value {
                        path: path.clone(),
                        expected: wanted.cloned(),
                        actual: got.cloned(),
                    });
                }
            }
            if let Some(verdict) = &expect.verdict {
                diff_subset(&root, verdict, Some(result), &mut out);
            }
        }
    }
    out
}

fn describe_expected_failure(f: &FailureExpectation) -> String {
    match &f.message {
        Some(m) => format!("failure {} with a message containing {m:?}", f.category),
        None => format!("failure {}", f.category),
    }
}

/// `None` for an absent value or `null`.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// Equality with `null` as absent and numbers by value.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (present(a), present(b)) {
        (None, None) => true,
        (Some(Value::Number(x)), Some(Value::Number(y))) => match (x.as_i128(), y.as_i128()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| same(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(Some(a), Some(b)))
        }
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Exact comparison; objects key by key, arrays of equal length element by element (arrays of
/// different lengths are reported whole).
fn diff_whole(
    path: &JsonPath,
    expected: Option<&Value>,
    actual: Option<&Value>,
    out: &mut Vec<Mismatch>,
) {
    match (expected, actual) {
        (Some(Value::Object(e)), Some(Value::Object(a))) => {
            let mut keys: Vec<&String> = e.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff_whole(
                    &path.child(Segment::Key(k.clone())),
                    present(e.get(k)),
                    present(a.get(k)),
                    out,
                );
            }
        }
        (Some(Value::Array(e)), Some(Value::Array(a))) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                diff_whole(
                    &path.child(Segment::Index(i)),
                    present(Some(e)),
                    present(Some(a)),
                    out,
                );
            }
        }
        (e, a) if same(e, a) => {}
        (e, a) => out.push(Mismatch::Value {
            path: path.clone(),
            expected: e.cloned(),
            actual: a.cloned(),
        }),
    }
}

/// Subset comparison: every field `expected` gives must be in `actual` with a matching value;
/// other fields of `actual` are not looked at. Arrays must have the same length, and their
/// elements match as subsets.
fn diff_subset(path: &JsonPath, expected: &Value, actual: Option<&Value>, out: &mut Vec<Mismatch>) {
    let actual = present(actual);
    match (expected, actual) {
        (Value::Null, None) => {}
        (Value::Object(e), Some(Value::Object(a))) => {
            for (k, v) in e {
                diff_subset(&path.child(Segment::Key(k.clone())), v, a.get(k), out);
            }
        }
        (Value::Array(e), Some(Value::Array(a))) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                diff_subset(&path.child(Segment::Index(i)), e, Some(a), out);
            }
        }
        (e, a) if same(Some(e), a) => {}
        (e, a) => out.push(Mismatch::Value {
            path: path.clone(),
            expected: present(Some(e)).cloned(),
            actual: a.cloned(),
        }),
    }
}

/// The longest value printed in a difference, in characters.
const MAX_SHOWN: usize = 300;
/// The most differences printed per case.
const MAX_MISMATCHES_SHOWN: usize = 50;

fn elided_json(v: &Value) -> String {
    tfjob_policy_logic::text::elided(&v.to_string(), MAX_SHOWN)
}

fn shown(v: &Option<Value>) -> String {
    v.as_ref()
        .map_or_else(|| "(absent)".to_owned(), elided_json)
}

/// A case's differences as `-` (expected) and `+` (actual) lines.
pub fn diff_text(mismatches: &[Mismatch]) -> String {
    let mut out = String::new();
    for m in mismatches.iter().take(MAX_MISMATCHES_SHOWN) {
        match m {
            Mismatch::Value {
                path,
                expected,
                actual,
            } => {
                out.push_str(&format!("- {path}: {}\n", shown(expected)));
                out.push_str(&format!("+ {path}: {}\n", shown(actual)));
            }
            Mismatch::Outcome { expected, actual } => {
                out.push_str(&format!(
                    "- {}\n",
                    tfjob_policy_logic::text::elided(expected, MAX_SHOWN * 4)
                ));
                out.push_str(&format!(
                    "+ {}\n",
                    tfjob_policy_logic::text::elided(actual, MAX_SHOWN * 4)
                ));
            }
        }
    }
    if mismatches.len() > MAX_MISMATCHES_SHOWN {
        out.push_str(&format!(
            "  ... and {} more differences\n",
            mismatches.len() - MAX_MISMATCHES_SHOWN
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// A suite that cannot be run: the file, the field (`cases[3].input.pod`) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {field}: {message}", file.display())]
pub struct SuiteError {
    pub file: PathBuf,
    pub field: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    manifest: Option<Value>,
    #[serde(default)]
    hook: Option<Hook>,
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    now: Option<String>,
    cases: Vec<RawCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    #[serde(default)]
    hook: Option<Hook>,
    #[serde(default)]
    settings: Option<Value>,
    input: RawInput,
    expect: RawExpect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInput {
    pod: Value,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    container: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    fields: Option<Value>,
    #[serde(default)]
    paths: Option<Map<String, Value>>,
    #[serde(default)]
    verdict: Option<RawVerdict>,
    #[serde(default)]
    failure: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawVerdict {
    #[serde(default)]
    phase: Option<VerdictPhase>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    kind: Option<FailureKind>,
    #[serde(default)]
    occurred_at: Option<String>,
    #[serde(default)]
    recheck_at: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFailure {
    category: String,
    #[serde(default)]
    message: Option<String>,
}

/// Reads at most `limit` bytes of `path`; more is an error saying so.
fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{} is larger than the {} MiB allowed",
            path.display(),
            limit >> 20
        ));
    }
    Ok(bytes)
}

/// Whether YAML `text` nests flow collections deeper than `max`. Brackets inside quoted
/// scalars and comments do not count; the scan errs towards counting (a quote or `#` starts
/// a scalar or a comment only where YAML would start one), which can only refuse absurd text.
fn flow_too_deep(text: &str, max: usize) -> bool {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut prev = '\n';
    for c in text.chars() {
        if comment {
            comment = c != '\n';
        } else if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if q == '"' && c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else {
            let at_start = prev.is_whitespace() || matches!(prev, '[' | '{' | ',' | ':');
            match c {
                '"' | '\'' if at_start => quote = Some(c),
                '#' if prev.is_whitespace() => comment = true,
                '[' | '{' => {
                    depth += 1;
                    if depth > max {
                        return true;
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = c;
    }
    false
}

/// Parses a YAML (or JSON) document after checking its nesting.
fn yaml_value(text: &str) -> Result<Value, String> {
    if flow_too_deep(text, MAX_FLOW_DEPTH) {
        return Err(format!("nested deeper than {MAX_FLOW_DEPTH} levels"));
    }
    serde_yaml_ng::from_str(text).map_err(|e| format!("not valid YAML or JSON: {e}"))
}

/// Reads and checks the suite `file`: every case, every file it names, every expectation.
pub fn load(file: &Path) -> Result<Suite, SuiteError> {
    let whole = |message: String| SuiteError {
        file: file.to_owned(),
        field: ".".into(),
        message,
    };
    let bytes = read_capped(file, MAX_SUITE_BYTES).map_err(whole)?;
    let text = String::from_utf8(bytes).map_err(|e| whole(format!("not UTF-8: {e}")))?;
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = parent
        .canonicalize()
        .map_err(|e| whole(format!("its directory {}: {e}", parent.display())))?;
    parse(&text, file, &dir)
}

/// Parses suite `text`; `file` names it in errors, and the files it names are read from `dir`
/// (canonical) and below.
pub fn parse(text: &str, file: &Path, dir: &Path) -> Result<Suite, SuiteError> {
    if flow_too_deep(text, MAX_FLOW_DEPTH) {
        return Err(SuiteError {
            file: file.to_owned(),
            field: ".".into(),
            message: format!("nested deeper than {MAX_FLOW_DEPTH} levels"),
        });
    }
    let raw: RawSuite = serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(
        text,
    ))
    .map_err(|e| {
        let field = match e.path().to_string() {
            f if f.is_empty() || f == "?" => ".".to_owned(),
            f => tfjob_policy_logic::text::elided(&f, 200),
        };
        // The parser's own text may start with the path too.
        let message = e.into_inner().to_string();
        let message = message
            .strip_prefix(&format!("{field}: "))
            .map_or_else(|| message.clone(), str::to_owned);
        SuiteError {
            file: file.to_owned(),
            field,
            message,
        }
    })?;
    let mut loader = Loader {
        file: file.to_owned(),
        dir: dir.to_owned(),
        documents: HashMap::new(),
        pods: HashMap::new(),
    };
    loader.suite(raw)
}

/// Reads what a suite names, each file once.
struct Loader {
    file: PathBuf,
    dir: PathBuf,
    documents: HashMap<PathBuf, Arc<Value>>,
    pods: HashMap<PathBuf, Arc<Pod>>,
}

impl Loader {
    fn error(&self, field: &str, message: impl Into<String>) -> SuiteError {
        SuiteError {
            file: self.file.clone(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// The file `reference` names, relative to the suite's directory and inside it.
    fn resolve(&self, reference: &str, field: &str) -> Result<PathBuf, SuiteError> {
        let relative = Path::new(reference);
        let confined = relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if reference.is_empty() || relative.is_absolute() || !confined {
            return Err(self.error(
                field,
                format!(
                    "{reference:?}: files are named relative to the suite's directory, without `..`"
                ),
            ));
        }
        let real = self.dir.join(relative).canonicalize().map_err(|e| {
            self.error(
                field,
                format!("{reference:?} (in {}): {e}", self.dir.display()),
            )
        })?;
        if !real.starts_with(&self.dir) {
            return Err(self.error(
                field,
                format!(
                    "{reference:?} leads out of the suite's directory {}",
                    self.dir.display()
                ),
            ));
        }
        if !real.is_file() {
            return Err(self.error(field, format!("{reference:?} is not a regular file")));
        }
        Ok(real)
    }

    /// A YAML or JSON document: inline (anything but a string), or the file a string names.
    fn document(&mut self, source: &Value, field: &str) -> Result<Arc<Value>, SuiteError> {
        let Value::String(reference) = source else {
            return Ok(Arc::new(source.clone()));
        };
        let path = self.resolve(reference, field)?;
        if let Some(doc) = self.documents.get(&path) {
            return Ok(Arc::clone(doc));
        }
        let bytes = read_capped(&path, MAX_FILE_BYTES).map_err(|e| self.error(field, e))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| self.error(field, format!("{reference}: not UTF-8: {e}")))?;
        let doc = yaml_value(&text).map_err(|e| self.error(field, format!("{reference}: {e}")))?;
        let doc = Arc::new(doc);
        self.documents.insert(path, Arc::clone(&doc));
        Ok(doc)
    }

    /// A mapping, inline or from a file (`what` says what it is).
    fn mapping(
        &mut self,
        source: &Value,
        field: &str,
        what: &str,
    ) -> Result<Map<String, Value>, SuiteError> {
        match &*self.document(source, field)? {
            Value::Object(m) => Ok(m.clone()),
            Value::Null => Ok(Map::new()),
            other => Err(self.error(
                field,
                format!(
                    "expected {what} (a mapping) or the name of a file holding one, not {}",
                    kind_of(other)
                ),
            )),
        }
    }

    fn pod(&mut self, source: &Value, field: &str) -> Result<Arc<Pod>, SuiteError> {
        let cache_key = match source {
            Value::String(reference) => Some(self.resolve(reference, field)?),
            Value::Object(_) => None,
            other => {
                return Err(self.error(
                    field,
                    format!(
                        "expected a pod (a mapping) or the name of a file holding one, not {}",
                        kind_of(other)
                    ),
                ));
            }
        };
        if let Some(pod) = cache_key.as_ref().and_then(|k| self.pods.get(k)) {
            return Ok(Arc::clone(pod));
        }
        let doc = self.document(source, field)?;
        let pod: Pod = serde_path_to_error::deserialize(&*doc).map_err(|e| {
            let at = e.path().to_string();
            let inner = e.into_inner();
            match source {
                Value::String(f) => self.error(field, format!("{f}: field {at}: {inner}")),
                _ => self.error(&format!("{field}.{at}"), inner.to_string()),
            }
        })?;
        let pod = Arc::new(pod);
        if let Some(k) = cache_key {
            self.pods.insert(k, Arc::clone(&pod));
        }
        Ok(pod)
    }

    fn context(
        &mut self,
        suite: &Option<Value>,
        case: &Option<Value>,
        field: &str,
    ) -> Result<PodContext, SuiteError> {
        let mut merged = Map::new();
        for (source, at) in [(suite, "context"), (case, field)] {
            let Some(source) = source else { continue };
            let part = self.mapping(source, at, "a job context")?;
            // Each part alone, so that an error names where the field was written.
            serde_path_to_error::deserialize::<_, ContextFile>(Value::Object(part.clone()))
                .map_err(|e| {
                    let message = match source {
                        Value::String(f) => format!("{f}: field {}: {}", e.path(), e.inner()),
                        _ => format!("field {}: {}", e.path(), e.inner()),
                    };
                    self.error(at, message)
                })?;
            merged.extend(part);
        }
        let c: ContextFile = serde_json::from_value(Value::Object(merged))
            .map_err(|e| self.error(field, e.to_string()))?;
        Ok(c.into())
    }

    fn timestamp(&self, text: &str, field: &str) -> Result<jiff::Timestamp, SuiteError> {
        text.parse::<jiff::Timestamp>()
            .map_err(|e| self.error(field, format!("{text:?} is not an RFC 3339 time: {e}")))
    }

    fn suite(&mut self, raw: RawSuite) -> Result<Suite, SuiteError> {
        if raw.cases.is_empty() {
            return Err(self.error("cases", "a suite needs at least one case"));
        }
        if raw.cases.len() > MAX_CASES {
            return Err(self.error(
                "cases",
                format!(
                    "{} cases; a suite holds at most {MAX_CASES}",
                    raw.cases.len()
                ),
            ));
        }
        let policy = match raw.policy.as_deref() {
            None => None,
            Some(spec) if spec == "default" || spec.starts_with("default:") => {
                Some(PolicyRef::Default(spec.to_owned()))
            }
            Some(file) => Some(PolicyRef::File(self.resolve(file, "policy")?)),
        };
        let manifest = match &raw.manifest {
            None => None,
            Some(source) => {
                let m = self.mapping(source, "manifest", "a policy manifest")?;
                let text = serde_json::to_string(&Value::Object(m)).expect("JSON values serialise");
                // Checked now with a stand-in name; the policy's own name fills it when it runs.
                tfjob_policy_engine::PolicyManifest::from_yaml(&text, "policy")
                    .map_err(|e| self.error("manifest", e.to_string()))?;
                Some(text)
            }
        };
        if let Some(now) = &raw.now {
            self.timestamp(now, "now")?;
        }
        let suite_settings = match &raw.settings {
            Some(s) => Some(self.document(s, "settings")?),
            None => None,
        };
        let mut cases: Vec<Case> = Vec::with_capacity(raw.cases.len());
        for (i, rc) in raw.cases.into_iter().enumerate() {
            let at = format!("cases[{i}]");
            if rc.name.trim().is_empty() {
                return Err(self.error(&format!("{at}.name"), "must not be empty"));
            }
            if let Some(j) = cases.iter().position(|c| c.name == rc.name) {
                return Err(self.error(
                    &format!("{at}.name"),
                    format!(
                        "{:?} is also the name of cases[{j}]; names must be unique",
                        rc.name
                    ),
                ));
            }
            let hook = rc.hook.or(raw.hook).ok_or_else(|| {
                self.error(
                    &format!("{at}.hook"),
                    "required (or a `hook` for the whole suite)",
                )
            })?;
            let settings = match &rc.settings {
                Some(s) => Some((*self.document(s, &format!("{at}.settings"))?).clone()),
                None => suite_settings.as_deref().cloned(),
            };
            let pod = self.pod(&rc.input.pod, &format!("{at}.input.pod"))?;
            let context = self.context(
                &raw.context,
                &rc.input.context,
                &format!("{at}.input.context"),
            )?;
            let now = match (rc.input.now.as_ref().or(raw.now.as_ref()), hook) {
                (Some(t), Hook::Classify) => Some(self.timestamp(t, &format!("{at}.input.now"))?),
                (None, Hook::Classify) => {
                    return Err(self.error(
                        &format!("{at}.input.now"),
                        "required for classify (or a `now` for the whole suite): a suite must not depend on the clock",
                    ));
                }
                (Some(_), _) if rc.input.now.is_some() => {
                    return Err(
                        self.error(&format!("{at}.input.now"), "only classify takes a time")
                    );
                }
                _ => None,
            };
            match (&rc.input.container, hook) {
                (c, Hook::Resources) => {
                    container(&pod, c.as_deref())
                        .map_err(|e| self.error(&format!("{at}.input.container"), e))?;
                }
                (Some(_), _) => {
                    return Err(self.error(
                        &format!("{at}.input.container"),
                        "only the resources hook takes a container",
                    ));
                }
                (None, _) => {}
            }
            let expect = self.expectation(rc.expect, hook, &format!("{at}.expect"))?;
            cases.push(Case {
                name: rc.name,
                hook,
                settings,
                pod,
                context,
                now,
                container: rc.input.container,
                expect,
            });
        }
        Ok(Suite {
            file: self.file.clone(),
            policy,
            manifest,
            cases,
        })
    }

    fn expectation(&self, raw: RawExpect, hook: Hook, at: &str) -> Result<Expectation, SuiteError> {
        let mut expect = Expectation {
            result: raw.result,
            fields: raw.fields,
            ..Expectation::default()
        };
        if hook == Hook::Classify {
            for v in [&mut expect.result, &mut expect.fields]
                .into_iter()
                .flatten()
            {
                normalise_times(v);
            }
        }
        for (path, value) in raw.paths.unwrap_or_default() {
            let parsed =
                JsonPath::parse(&path).map_err(|e| self.error(&format!("{at}.paths"), e))?;
            expect.paths.push((parsed, value));
        }
        if let Some(v) = raw.verdict {
            if hook != Hook::Classify {
                return Err(self.error(
                    &format!("{at}.verdict"),
                    format!("only classify returns a verdict, not {hook}"),
                ));
            }
            let mut m = Map::new();
            if let Some(p) = v.phase {
                m.insert("phase".into(), json!(p));
            }
            if let Some(r) = v.reason {
                m.insert("reason".into(), json!(r));
            }
            if let Some(msg) = v.message {
                m.insert("message".into(), json!(msg));
            }
            if let Some(k) = v.kind {
                m.insert("kind".into(), json!(k));
            }
            for (key, t) in [("occurredAt", v.occurred_at), ("recheckAt", v.recheck_at)] {
                if let Some(t) = t {
                    let ts = self.timestamp(&t, &format!("{at}.verdict.{key}"))?;
                    m.insert(key.into(), json!(ts.to_string()));
                }
            }
            if m.is_empty() {
                return Err(self.error(&format!("{at}.verdict"), "names no field to check"));
            }
            expect.verdict = Some(Value::Object(m));
        }
        if let Some(f) = raw.failure {
            let field = format!("{at}.failure");
            let failure = match f {
                Value::String(c) => FailureExpectation {
                    category: FailureCategory::parse(&c).map_err(|e| self.error(&field, e))?,
                    message: None,
                },
                other => {
                    let r: RawFailure = serde_path_to_error::deserialize(&other)
                        .map_err(|e| self.error(&field, format!("{}: {}", e.path(), e.inner())))?;
                    FailureExpectation {
                        category: FailureCategory::parse(&r.category)
                            .map_err(|e| self.error(&format!("{field}.category"), e))?,
                        message: r.message,
                    }
                }
            };
            if expect.result.is_some()
                || expect.fields.is_some()
                || !expect.paths.is_empty()
                || expect.verdict.is_some()
            {
                return Err(self.error(&field, "a case expects a failure or a result, not both"));
            }
            expect.failure = Some(failure);
        }
        if expect == Expectation::default() {
            return Err(self.error(
                at,
                "names nothing to check: give result, fields, paths, verdict or failure",
            ));
        }
        Ok(expect)
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Writes a verdict's times as the operator prints them (UTC), so `+01:00` in a suite matches.
fn normalise_times(v: &mut Value) {
    for key in ["occurredAt", "recheckAt"] {
        if let Some(t) = v.get(key).and_then(Value::as_str)
            && let Ok(ts) = t.parse::<jiff::Timestamp>()
        {
            v[key] = json!(ts.to_string());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// One case's run.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    pub hook: Hook,
    /// `name@short-digest` of the module that ran.
    pub policy: String,
    pub outcome: Outcome,
    pub mismatches: Vec<Mismatch>,
    pub elapsed: Duration,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// A suite's run.
#[derive(Debug)]
pub struct Report {
    pub suite: String,
    pub cases: Vec<CaseReport>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed()).count()
    }

    pub fn passed(&self) -> usize {
        self.cases.len() - self.failed()
    }

    fn elapsed(&self) -> Duration {
        self.cases.iter().map(|c| c.elapsed).sum()
    }
}

/// A policy ready for a suite's cases of one hook.
struct UnderTest {
    source: PolicySource,
    label: String,
}

/// What `policy test` gives a suite besides its file: the policy and manifest that replace the
/// suite's own, and the operator's ceiling to test under.
pub struct Overrides<'a> {
    pub policy: Option<&'a str>,
    pub manifest: Option<&'a Path>,
    pub ceiling: &'a tfjob_operator::policy_setup::CeilingArgs,
}

/// Runs every case of `suite` in the sandbox with the operator's limits. Errors are what keeps
/// the suite from running at all (no policy, a module that does not compile).
pub fn run(suite: &Suite, args: &Overrides<'_>) -> anyhow::Result<Report> {
    let engine = PolicyEngine::new(SandboxLimits {
        ceiling: args.ceiling.ceiling()?,
        ..SandboxLimits::default()
    })?;
    let manifest = match args.manifest {
        Some(path) => Some((
            std::fs::read_to_string(path)
                .with_context(|| format!("--manifest: reading {}", path.display()))?,
            format!("--manifest {}", path.display()),
        )),
        None => suite
            .manifest
            .clone()
            .map(|text| (text, format!("{}: manifest", suite.file.display()))),
    };
    let mut policies: HashMap<Hook, UnderTest> = HashMap::new();
    let mut cases = Vec::with_capacity(suite.cases.len());
    for case in &suite.cases {
        if let std::collections::hash_map::Entry::Vacant(e) = policies.entry(case.hook) {
            e.insert(under_test(
                &engine,
                suite,
                args,
                case.hook,
                manifest.as_ref(),
            )?);
        }
        let p = &policies[&case.hook];
        let started = Instant::now();
        let outcome = run_case(&engine, &p.source, case);
        let elapsed = started.elapsed();
        cases.push(CaseReport {
            name: case.name.clone(),
            hook: case.hook,
            policy: p.label.clone(),
            mismatches: check(&case.expect, &outcome),
            outcome,
            elapsed,
        });
    }
    Ok(Report {
        suite: suite.file.display().to_string(),
        cases,
    })
}

fn under_test(
    engine: &PolicyEngine,
    suite: &Suite,
    args: &Overrides<'_>,
    hook: Hook,
    manifest: Option<&(String, String)>,
) -> anyhow::Result<UnderTest> {
    let mut source = match (args.policy, &suite.policy) {
        (Some(spec), _) => policy_source(spec, hook, "--policy")?,
        (None, Some(PolicyRef::Default(spec))) => {
            policy_source(spec, hook, &format!("{}: policy", suite.file.display()))?
        }
        (None, Some(PolicyRef::File(path))) => {
            let bytes = read_capped(path, engine.limits().max_module as u64)
                .map_err(|e| anyhow!("{}: policy: {e}", suite.file.display()))?;
            PolicySource {
                bytes,
                name: path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("policy")
                    .to_owned(),
                manifest: None,
                default_manifest: false,
            }
        }
        (None, None) => bail!(
            "{}: no policy to test: give --policy or a `policy` in the suite",
            suite.file.display()
        ),
    };
    if let Some((text, what)) = manifest {
        source = source.with_manifest(text, what)?;
    }
    let file = suite.file.display();
    if let Some(m) = &source.manifest
        && !m.hooks.contains(&hook)
    {
        let hooks: Vec<&str> = m.hooks.iter().map(|h| h.as_str()).collect();
        bail!(
            "{file}: the manifest of {} runs it for {} only; the suite has {hook} cases",
            source.name,
            hooks.join(", ")
        );
    }
    let compiled = engine.compile(&source.bytes).map_err(|e| {
        anyhow!(
            "{file}: policy {}: the module does not load: {e}",
            source.name
        )
    })?;
    let label = format!("{}@{}", source.name, compiled.short_digest());
    Ok(UnderTest { source, label })
}

/// Activates the policy with the case's settings and runs its hook on the case's input.
fn run_case(engine: &PolicyEngine, source: &PolicySource, case: &Case) -> Outcome {
    let active = source
        .activate(engine, case.hook, case.settings.as_ref())
        .map_err(|e| Failure::from(EvalError::from(e)))?;
    let ctx = job_context(&case.context);
    let input = match case.hook {
        Hook::Decorate => HookInput::Decorate(&case.pod),
        Hook::Resources => HookInput::Resources(
            // Checked when the suite was loaded.
            container(&case.pod, case.container.as_deref()).map_err(|message| Failure {
                category: FailureCategory::InvalidOutput,
                message,
            })?,
        ),
        Hook::Classify => HookInput::Classify {
            pod: &case.pod,
            now: case.now.unwrap_or_else(jiff::Timestamp::now),
        },
    };
    run_hook(engine, &active, &ctx, input)
        .map(|out| out.into_json())
        .map_err(Failure::from)
}

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------

/// `text` with control characters and invisible reordering characters escaped, for a terminal.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || invisible {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The table: one line per case, then each failure with its differences, then the counts.
pub fn table(report: &Report) -> String {
    let rows: Vec<[String; 4]> = report
        .cases
        .iter()
        .map(|c| {
            [
                if c.passed() { "ok" } else { "FAILED" }.to_owned(),
                c.hook.to_string(),
                millis(c.elapsed),
                printable(&c.name),
            ]
        })
        .collect();
    let header = ["RESULT", "HOOK", "TIME", "CASE"].map(str::to_owned);
    let mut widths = [0usize; 4];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&header).chain(&rows) {
        let line = format!(
            "{:<w0$}   {:<w1$}   {:>w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for c in report.cases.iter().filter(|c| !c.passed()) {
        out.push_str(&format!(
            "\nFAILED {} ({}, {})\nexpected (-), actual (+):\n",
            printable(&c.name),
            c.hook,
            c.policy
        ));
        for line in diff_text(&c.mismatches).lines() {
            out.push_str(&format!("  {}\n", printable(line)));
        }
    }
    let mut policies: Vec<&str> = report.cases.iter().map(|c| c.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    out.push_str(&format!(
        "\n{}: {} cases of {} in {}\n{} passed, {} failed\n",
        printable(&report.suite),
        report.cases.len(),
        policies.join(", "),
        millis(report.elapsed()),
        report.passed(),
        report.failed()
    ));
    out
}

fn mismatch_json(m: &Mismatch) -> Value {
    match m {
        Mismatch::Value {
            path,
            expected,
            actual,
        } => {
            let mut v = json!({"path": path.to_string()});
            if let Some(e) = expected {
                v["expected"] = e.clone();
            }
            if let Some(a) = actual {
                v["actual"] = a.clone();
            }
            v
        }
        Mismatch::Outcome { expected, actual } => {
            json!({"path": "(outcome)", "expected": expected, "actual": actual})
        }
    }
}

/// The report as one JSON document; failed cases carry what came out and the differences.
pub fn to_json(report: &Report) -> Value {
    let cases: Vec<Value> = report
        .cases
        .iter()
        .map(|c| {
            let mut v = json!({
                "name": c.name,
                "hook": c.hook,
                "policy": c.policy,
                "passed": c.passed(),
                "seconds": c.elapsed.as_secs_f64(),
            });
            if !c.passed() {
                v["actual"] = match &c.outcome {
                    Ok(result) => json!({"result": result}),
                    Err(f) => {
                        json!({"failure": {"category": f.category.as_str(), "message": f.message}})
                    }
                };
                v["differences"] = c.mismatches.iter().map(mismatch_json).collect();
            }
            v
        })
        .collect();
    json!({
        "suite": report.suite,
        "passed": report.passed(),
        "failed": report.failed(),
        "cases": cases,
    })
}

/// `text` for XML: the five special characters as entities, characters XML 1.0 does not allow
/// (most control characters) as visible escapes; in attributes also tabs and line breaks.
pub fn xml_escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' if attribute => out.push_str(&format!("&#{};", u32::from(c))),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{fffe}' | '\u{ffff}' => out.extend(c.escape_unicode()),
            c if u32::from(c) < 0x20 => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// The report as JUnit XML: one `testsuite` for the suite file, one `testcase` per case
/// (`classname` the policy and hook), a `failure` with the differences for each failed case.
pub fn junit(report: &Report) -> String {
    let seconds = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let (tests, failures, time) = (
        report.cases.len(),
        report.failed(),
        seconds(report.elapsed()),
    );
    let suite = xml_escape(&report.suite, true);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"tfjob-operator policy test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time}\">\n"
    ));
    out.push_str(&format!(
        "  <testsuite name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time}\">\n"
    ));
    for c in &report.cases {
        let attrs = format!(
            "name=\"{}\" classname=\"{}\" time=\"{}\"",
            xml_escape(&c.name, true),
            xml_escape(&format!("{}.{}", c.policy, c.hook), true),
            seconds(c.elapsed)
        );
        if c.passed() {
            out.push_str(&format!("    <testcase {attrs}/>\n"));
            continue;
        }
        let summary = match c.mismatches.as_slice() {
            [Mismatch::Outcome { actual, .. }] => {
                tfjob_policy_logic::text::elided(actual, MAX_SHOWN)
            }
            ms => format!("{} difference(s) from the expectation", ms.len()),
        };
        out.push_str(&format!(
            "    <testcase {attrs}>\n      <failure message=\"{}\" type=\"mismatch\">{}</failure>\n    </testcase>\n",
            xml_escape(&summary, true),
            xml_escape(&format!("expected (-), actual (+):\n{}", diff_text(&c.mismatches)), false)
        ));
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// `policy test --suite`: exit status 0 when every case passes, 1 when one fails, 2 when the
/// suite cannot run (the error on stderr).
pub fn main(file: &Path, args: &Overrides<'_>, output: Format) -> ExitCode {
    let report = match load(file)
        .map_err(anyhow::Error::from)
        .and_then(|s| run(&s, args))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match output {
        Format::Table => print!("{}", table(&report)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&report)).expect("JSON values serialise")
        ),
        Format::Junit => print!("{}", junit(&report)),
    }
    if report.failed() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> JsonPath {
        JsonPath::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    #[test]
    fn paths_in_the_guards_spelling_and_as_json_pointers() {
        assert_eq!(
            path("spec.containers[0].env"),
            JsonPath(vec![
                key("spec"),
                key("containers"),
                Segment::Index(0),
                key("env")
            ])
        );
        assert_eq!(
            path("metadata.labels[\"example.com/team\"]"),
            JsonPath(vec![
                key("metadata"),
                key("labels"),
                key("example.com/team")
            ])
        );
        // The guard writes label keys in brackets without quotes.
        assert_eq!(
            path("metadata.labels[training.kubeflow.org/replica-index]"),
            JsonPath(vec![
                key("metadata"),
                key("labels"),
                key("training.kubeflow.org/replica-index")
            ])
        );
        assert_eq!(
            path("/spec/containers/0/env"),
            JsonPath(vec![key("spec"), key("containers"), key("0"), key("env")])
        );
        assert_eq!(path("/a~1b/c~0d"), JsonPath(vec![key("a/b"), key("c~d")]));
        assert_eq!(path("[\"a\\\"]b\"]"), JsonPath(vec![key("a\"]b")]));
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a[",
            "a[0",
            "a]",
            "a[]",
            "a[0]b",
            "a[\"x]",
            "a[\"\\q\"]",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} parses");
        }
    }

    #[test]
    fn paths_print_so_that_they_read_back() {
        for text in [
            "spec.containers[0].env",
            "metadata.labels[\"example.com/team\"]",
            "a[\"0\"]",
            "a[\"\"]",
            "[\"with space\"].b",
            "a[\"quote\\\"]\"]",
        ] {
            let p = path(text);
            assert_eq!(p.to_string(), text);
            assert_eq!(path(&p.to_string()), p, "{text}");
        }
        assert_eq!(path("/a.b/0").to_string(), "[\"a.b\"][\"0\"]");
        assert_eq!(JsonPath::default().to_string(), "(result)");
    }

    #[test]
    fn lookups_follow_objects_and_arrays() {
        let doc = json!({"spec": {"containers": [{"name": "tf"}, {"name": "sidecar"}]}});
        assert_eq!(
            path("spec.containers[1].name").get(&doc),
            Some(&json!("sidecar"))
        );
        assert_eq!(
            path("/spec/containers/1/name").get(&doc),
            Some(&json!("sidecar"))
        );
        assert_eq!(path("spec.containers[2]").get(&doc), None);
        assert_eq!(path("spec.containers.name").get(&doc), None);
        assert_eq!(path("spec[0]").get(&doc), None);
    }

    fn expect(yaml: &str) -> Expectation {
        let raw: RawExpect = serde_yaml_ng::from_str(yaml).unwrap();
        let loader = Loader {
            file: "s.yaml".into(),
            dir: ".".into(),
            documents: HashMap::new(),
            pods: HashMap::new(),
        };
        loader.expectation(raw, Hook::Classify, "expect").unwrap()
    }

    fn pod_result() -> Outcome {
        Ok(json!({
            "metadata": {"name": "w-0", "labels": {"team": "ml", "tier": "gold"}},
            "spec": {"containers": [{"name": "tf", "env": [{"name": "A", "value": "1"}]}], "replicas": 2}
        }))
    }

    fn value(p: &str, expected: Option<Value>, actual: Option<Value>) -> Mismatch {
        Mismatch::Value {
            path: path(p),
            expected,
            actual,
        }
    }

    #[test]
    fn a_whole_result_must_match_exactly() {
        let same = pod_result().unwrap();
        assert_eq!(
            check(
                &Expectation {
                    result: Some(same.clone()),
                    ..Default::default()
                },
                &pod_result()
            ),
            vec![]
        );
        let mut other = same.clone();
        other["metadata"]["labels"]["team"] = json!("vision");
        other["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("tier");
        other["spec"]["containers"][0]["env"] = json!([]);
        other["extra"] = json!(true);
        let got = check(
            &Expectation {
                result: Some(other),
                ..Default::default()
            },
            &pod_result(),
        );
        assert_eq!(
            got,
            vec![
                value("extra", Some(json!(true)), None),
                value(
                    "metadata.labels.team",
                    Some(json!("vision")),
                    Some(json!("ml"))
                ),
                value("metadata.labels.tier", None, Some(json!("gold"))),
                value(
                    "spec.containers[0].env",
                    Some(json!([])),
                    Some(json!([{"name": "A", "value": "1"}]))
                ),
            ]
        );
        // null is absent, numbers compare by value.
        let mut loose = same.clone();
        loose["metadata"]["annotations"] = Value::Null;
        loose["spec"]["replicas"] = json!(2.0);
        assert_eq!(
            check(
                &Expectation {
                    result: Some(loose),
                    ..Default::default()
                },
                &pod_result()
            ),
            vec![]
        );
    }

    #[test]
    fn fields_match_as_a_subset() {
        let e = expect(
            "fields: {metadata: {labels: {team: ml}}, spec: {containers: [{env: [{name: A}]}]}}",
        );
        assert_eq!(check(&e, &pod_result()), vec![]);
        let e = expect(
            "fields: {metadata: {labels: {team: vision, owner: null}, annotations: {a: b}}}",
        );
        assert_eq!(
            check(&e, &pod_result()),
            vec![
                value("metadata.annotations", Some(json!({"a": "b"})), None),
                value(
                    "metadata.labels.team",
                    Some(json!("vision")),
                    Some(json!("ml"))
                ),
            ]
        );
        // A list must have as many elements as expected.
        let e = expect("fields: {spec: {containers: [{name: tf}, {name: sidecar}]}}");
        assert_eq!(check(&e, &pod_result()).len(), 1);
        // Expecting null where there is a value.
        let e = expect("fields: {metadata: {labels: null}}");
        assert_eq!(
            check(&e, &pod_result()),
            vec![value(
                "metadata.labels",
                None,
                Some(json!({"team": "ml", "tier": "gold"}))
            )]
        );
    }

    #[test]
    fn paths_match_exactly_and_null_means_absent() {
        let e = expect(
            "paths:\n  metadata.labels.team: ml\n  /spec/containers/0/env/0/value: \"1\"\n  spec.schedulerName: null\n  spec.replicas: 2.0\n",
        );
        assert_eq!(check(&e, &pod_result()), vec![]);
        let e = expect("paths:\n  metadata.labels.team: vision\n  spec.containers[0].name: null\n");
        let got = check(&e, &pod_result());
        assert!(
            got.contains(&value(
                "metadata.labels.team",
                Some(json!("vision")),
                Some(json!("ml"))
            )),
            "{got:?}"
        );
        assert!(
            got.contains(&value("spec.containers[0].name", None, Some(json!("tf")))),
            "{got:?}"
        );
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn verdicts_match_the_fields_given_with_times_in_utc() {
        let verdict = Ok(json!({
            "phase": "retryable-failure", "reason": "OOMKilled", "kind": "user",
            "occurredAt": "2026-01-01T00:01:00Z"
        }));
        let e = expect(
            "verdict: {phase: retryable-failure, kind: user, occurredAt: \"2026-01-01T01:01:00+01:00\"}",
        );
        assert_eq!(
            e.verdict.as_ref().unwrap()["occurredAt"],
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(check(&e, &verdict), vec![]);
        let e = expect("verdict: {phase: permanent-failure, reason: OOMKilled, message: boom}");
        assert_eq!(
            check(&e, &verdict),
            vec![
                value("message", Some(json!("boom")), None),
                value(
                    "phase",
                    Some(json!("permanent-failure")),
                    Some(json!("retryable-failure"))
                ),
            ]
        );
    }

    #[test]
    fn failures_match_by_category_and_message() {
        let failed: Outcome = Err(Failure {
            category: FailureCategory::GuardViolation,
            message: "policy x may not change spec.containers[0].image".into(),
        });
        assert_eq!(check(&expect("failure: guard-violation"), &failed), vec![]);
        assert_eq!(
            check(
                &expect("failure: {category: guard-violation, message: \"containers[0].image\"}"),
                &failed
            ),
            vec![]
        );
        let got = check(
            &expect("failure: {category: guard-violation, message: volumes}"),
            &failed,
        );
        assert_eq!(
            got,
            vec![Mismatch::Outcome {
                expected: "failure guard-violation with a message containing \"volumes\"".into(),
                actual: "failure guard-violation: policy x may not change spec.containers[0].image"
                    .into(),
            }]
        );
        assert_eq!(check(&expect("failure: timeout"), &failed).len(), 1);
        // A failure where a result was expected, and the other way round.
        let got = check(&expect("fields: {}"), &failed);
        assert!(
            matches!(&got[..], [Mismatch::Outcome { expected, .. }] if expected == "a result"),
            "{got:?}"
        );
        let got = check(&expect("failure: timeout"), &pod_result());
        assert!(
            matches!(&got[..], [Mismatch::Outcome { actual, .. }] if actual.starts_with("a result: {")),
            "{got:?}"
        );
        // `settings`, the operator's name, is `invalid-settings`.
        assert_eq!(
            expect("failure: settings").failure.unwrap().category,
            FailureCategory::InvalidSettings
        );
    }

    #[test]
    fn differences_print_as_minus_and_plus_lines_and_are_capped() {
        let text = diff_text(&[
            value("a.b", Some(json!("x")), None),
            value("c", None, Some(json!([1, 2]))),
        ]);
        assert_eq!(
            text,
            "- a.b: \"x\"\n+ a.b: (absent)\n- c: (absent)\n+ c: [1,2]\n"
        );
        let long = json!("y".repeat(10_000));
        let text = diff_text(&[value("big", Some(long.clone()), Some(long))]);
        assert!(text.len() < 1000, "{}", text.len());
        let many: Vec<Mismatch> = (0..80)
            .map(|i| value(&format!("k{i}"), Some(json!(i)), None))
            .collect();
        let text = diff_text(&many);
        assert_eq!(text.lines().count(), 2 * MAX_MISMATCHES_SHOWN + 1);
        assert!(text.ends_with("... and 30 more differences\n"), "{text}");
    }

    #[test]
    fn text_from_a_suite_cannot_steer_a_terminal_or_break_xml() {
        assert_eq!(
            printable("ok \u{1b}[2J\r\u{202e}x"),
            "ok \\u{1b}[2J\\u{d}\\u{202e}x"
        );
        assert_eq!(printable("naïve ✓"), "naïve ✓");
        assert_eq!(
            xml_escape("<a & \"b\" 'c'>", false),
            "&lt;a &amp; &quot;b&quot; &apos;c&apos;&gt;"
        );
        assert_eq!(
            xml_escape("x\u{0}\u{1b}\u{fffe}\ny", false),
            "x\\u{0}\\u{1b}\\u{fffe}\ny"
        );
        assert_eq!(xml_escape("a\tb\nc", true), "a&#9;b&#10;c");
    }

    #[test]
    fn failure_categories_are_the_operators() {
        for c in FailureCategory::ALL {
            assert_eq!(FailureCategory::parse(c.as_str()), Ok(c));
        }
        for c in [
            Category::Trap,
            Category::Timeout,
            Category::Memory,
            Category::InvalidOutput,
            Category::GuardViolation,
            Category::Link,
            Category::Unavailable,
            Category::Tripped,
        ] {
            assert_eq!(FailureCategory::from(c).as_str(), c.as_str());
        }
        assert_eq!(
            FailureCategory::from(Category::Settings),
            FailureCategory::InvalidSettings
        );
        let err = FailureCategory::parse("guard-violaton").unwrap_err();
        assert!(
            err.contains("\"guard-violaton\"") && err.contains("guard-violation"),
            "{err}"
        );
    }

    // -----------------------------------------------------------------------------------------
    // Loading
    // -----------------------------------------------------------------------------------------

    const POD: &str = "{metadata: {name: p}, spec: {containers: [{name: tf, image: tf}]}}";

    /// A directory with `files`, and the suite `text` parsed in it.
    fn load_in(
        files: &[(&str, &str)],
        text: &str,
    ) -> (tempfile::TempDir, Result<Suite, SuiteError>) {
        let dir = tempfile::tempdir().unwrap();
        for (name, contents) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        std::fs::write(dir.path().join("suite.yaml"), text).unwrap();
        let result = load(&dir.path().join("suite.yaml"));
        (dir, result)
    }

    fn load_error(files: &[(&str, &str)], text: &str) -> SuiteError {
        match load_in(files, text).1 {
            Ok(s) => panic!("loaded: {s:?}"),
            Err(e) => e,
        }
    }

    fn one_case(case: &str) -> String {
        format!("hook: decorate\ncases:\n- name: c\n{case}")
    }

    #[test]
    fn a_suite_with_defaults_files_and_inline_input() {
        let files = [
            ("pods/p.yaml", POD),
            ("ctx.yaml", "jobName: mnist\nreplicaType: PS\n"),
            ("settings.json", r#"{"team": "ml"}"#),
        ];
        let text = r#"
policy: default:default-classify
hook: classify
now: "2026-01-01T00:00:00Z"
context: ctx.yaml
settings: settings.json
cases:
- name: from files
  input: {pod: pods/p.yaml}
  expect: {verdict: {phase: running}}
- name: inline, another hook, own context and settings
  hook: resources
  settings: {limits: {cpu: "1"}}
  input:
    pod: {spec: {containers: [{name: a}, {name: b}]}}
    context: {replicaIndex: 3}
    container: b
  expect: {paths: {limits.cpu: "1"}}
"#;
        let (_dir, suite) = load_in(&files, text);
        let suite = suite.unwrap();
        assert_eq!(
            suite.policy,
            Some(PolicyRef::Default("default:default-classify".into()))
        );
        let [a, b] = &suite.cases[..] else { panic!() };
        assert_eq!(a.hook, Hook::Classify);
        assert_eq!(a.settings, Some(json!({"team": "ml"})));
        assert_eq!(a.pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(a.context.job_name, "mnist");
        assert_eq!(a.context.replica_type, "PS");
        assert_eq!(a.context.namespace, "default", "test default");
        assert_eq!(a.now, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        assert_eq!(b.hook, Hook::Resources);
        assert_eq!(b.settings, Some(json!({"limits": {"cpu": "1"}})));
        // The case's context is laid over the suite's, field by field.
        assert_eq!(
            (b.context.job_name.as_str(), b.context.replica_index),
            ("mnist", 3)
        );
        assert_eq!(b.container.as_deref(), Some("b"));
        assert_eq!(b.now, None);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases = [
            ("cases: []", "cases", "at least one case"),
            (
                "cases:\n- name: c\n  input: {pod: {}}\n  expect: {fields: {}}\n  hok: decorate",
                "cases[0]",
                "unknown field `hok`",
            ),
            (
                &one_case("  hook: decorat\n  input: {pod: {}}\n  expect: {fields: {}}"),
                "cases[0].hook",
                "unknown variant `decorat`",
            ),
            (
                "cases:\n- name: c\n  input: {pod: {}}\n  expect: {fields: {}}",
                "cases[0].hook",
                "required",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {}"),
                "cases[0].expect",
                "names nothing to check",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {failure: timeout, fields: {}}"),
                "cases[0].expect.failure",
                "not both",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {failure: teapot}"),
                "cases[0].expect.failure",
                "unknown failure category \"teapot\"",
            ),
            (
                &one_case(
                    "  input: {pod: {}}\n  expect: {failure: {category: timeout, messages: x}}",
                ),
                "cases[0].expect.failure",
                "unknown field `messages`",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {verdict: {phase: running}}"),
                "cases[0].expect.verdict",
                "only classify",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {paths: {\"a..b\": 1}}"),
                "cases[0].expect.paths",
                "empty field name",
            ),
            (
                &one_case("  input: {pod: {spec: {containers: 3}}}\n  expect: {fields: {}}"),
                "cases[0].input.pod.spec.containers",
                "invalid type",
            ),
            (
                &one_case("  input: {pod: [1]}\n  expect: {fields: {}}"),
                "cases[0].input.pod",
                "not a list",
            ),
            (
                &one_case("  input: {pod: {}, context: {jobname: x}}\n  expect: {fields: {}}"),
                "cases[0].input.context",
                "jobname",
            ),
            (
                &one_case(
                    "  input: {pod: {}, now: \"2026-01-01T00:00:00Z\"}\n  expect: {fields: {}}",
                ),
                "cases[0].input.now",
                "only classify",
            ),
            (
                &one_case("  input: {pod: {}, container: tf}\n  expect: {fields: {}}"),
                "cases[0].input.container",
                "only the resources hook",
            ),
            (
                &one_case("  hook: resources\n  input: {pod: {}}\n  expect: {fields: {}}"),
                "cases[0].input.container",
                "no containers",
            ),
            (
                &one_case(
                    "  hook: resources\n  input: {pod: {spec: {containers: [{name: a}]}}, container: b}\n  expect: {fields: {}}",
                ),
                "cases[0].input.container",
                "\"b\": no such container",
            ),
            (
                &one_case(
                    "  hook: classify\n  input: {pod: {}}\n  expect: {verdict: {phase: running}}",
                ),
                "cases[0].input.now",
                "must not depend on the clock",
            ),
            (
                &one_case(
                    "  hook: classify\n  input: {pod: {}, now: soon}\n  expect: {verdict: {phase: running}}",
                ),
                "cases[0].input.now",
                "\"soon\" is not an RFC 3339 time",
            ),
            (
                &one_case(
                    "  hook: classify\n  input: {pod: {}, now: \"2026-01-01T00:00:00Z\"}\n  expect: {verdict: {phase: runing}}",
                ),
                "cases[0].expect.verdict.phase",
                "unknown variant `runing`",
            ),
            (
                &format!(
                    "{}\n- name: c\n  input: {{pod: {{}}}}\n  expect: {{fields: {{}}}}",
                    one_case("  input: {pod: {}}\n  expect: {fields: {}}")
                ),
                "cases[1].name",
                "also the name of cases[0]",
            ),
            (
                &one_case("  input: {pod: {}}\n  expect: {fields: {}}\n  settings: missing.yaml"),
                "cases[0].settings",
                "missing.yaml",
            ),
            (
                &format!(
                    "manifest: {{hooks: [decorat]}}\n{}",
                    one_case("  input: {pod: {}}\n  expect: {fields: {}}")
                ),
                "manifest",
                "decorat",
            ),
        ];
        for (text, field, message) in cases {
            let err = load_error(&[], text);
            assert!(
                err.field.starts_with(field),
                "{text}\nfield {} (wanted {field}): {err}",
                err.field
            );
            assert!(err.message.contains(message), "{text}\n{err}");
            assert!(err.to_string().contains("suite.yaml"), "{err}");
        }
        // A pod file with a bad field names the file and the field.
        let err = load_error(
            &[("bad.yaml", "spec: {containers: [{name: 5}]}")],
            &one_case("  input: {pod: bad.yaml}\n  expect: {fields: {}}"),
        );
        assert_eq!(err.field, "cases[0].input.pod");
        assert!(
            err.message
                .starts_with("bad.yaml: field spec.containers[0].name: invalid type"),
            "{err}"
        );
        let err = load_error(
            &[("bad.yaml", "a: [")],
            &one_case("  input: {pod: bad.yaml}\n  expect: {fields: {}}"),
        );
        assert!(
            err.message.contains("bad.yaml: not valid YAML or JSON"),
            "{err}"
        );
    }

    #[test]
    fn files_stay_inside_the_suites_directory() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.yaml"), POD).unwrap();
        let secret = outside.path().join("secret.yaml");
        let secret = secret.to_str().unwrap();
        for reference in [
            secret,
            "../secret.yaml",
            "pods/../../secret.yaml",
            "",
            "/etc/passwd",
        ] {
            let err = load_error(
                &[("pods/p.yaml", POD)],
                &one_case(&format!(
                    "  input: {{pod: {reference:?}}}\n  expect: {{fields: {{}}}}"
                )),
            );
            assert_eq!(err.field, "cases[0].input.pod", "{reference}");
            assert!(
                err.message
                    .contains("relative to the suite's directory, without `..`"),
                "{reference}: {err}"
            );
        }
        // A symbolic link inside that leads outside.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(secret, dir.path().join("link.yaml")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        for reference in ["link.yaml", "linkdir/secret.yaml"] {
            std::fs::write(
                dir.path().join("suite.yaml"),
                one_case(&format!(
                    "  input: {{pod: {reference}}}\n  expect: {{fields: {{}}}}"
                )),
            )
            .unwrap();
            let err = load(&dir.path().join("suite.yaml")).unwrap_err();
            assert!(
                err.message.contains("leads out of the suite's directory"),
                "{reference}: {err}"
            );
        }
        // Not a regular file: a directory, a FIFO (a read would block).
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for reference in ["d", "fifo", "."] {
            std::fs::write(
                dir.path().join("suite.yaml"),
                one_case(&format!(
                    "  input: {{pod: {reference:?}}}\n  expect: {{fields: {{}}}}"
                )),
            )
            .unwrap();
            let err = load(&dir.path().join("suite.yaml")).unwrap_err();
            assert!(
                err.message.contains("is not a regular file"),
                "{reference}: {err}"
            );
        }
        // The suite's `policy` follows the same rule.
        let err = load_error(
            &[],
            &format!(
                "policy: ../x.wasm\n{}",
                one_case("  input: {pod: {}}\n  expect: {fields: {}}")
            ),
        );
        assert_eq!(err.field, "policy");
    }

    #[test]
    fn huge_and_hostile_yaml_is_refused_quickly() {
        // A file past the cap.
        let big = format!(
            "metadata: {{name: \"{}\"}}\n",
            "x".repeat(MAX_FILE_BYTES as usize)
        );
        let err = load_error(
            &[("big.yaml", &big)],
            &one_case("  input: {pod: big.yaml}\n  expect: {fields: {}}"),
        );
        assert!(
            err.message.contains("larger than the 4 MiB allowed"),
            "{err}"
        );
        // A suite past the cap.
        let dir = tempfile::tempdir().unwrap();
        let suite = dir.path().join("suite.yaml");
        let file = std::fs::File::create(&suite).unwrap();
        file.set_len(MAX_SUITE_BYTES + 1).unwrap();
        let err = load(&suite).unwrap_err();
        assert!(
            err.message.contains("larger than the 16 MiB allowed"),
            "{err}"
        );
        // An alias bomb expands past the parser's limit instead of filling memory.
        let mut bomb = String::from("settings:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            bomb.push_str(&format!(
                "  a{i}: &a{i} [{}]\n",
                [prev.as_str(); 10].join(", ")
            ));
        }
        bomb.push_str("cases: []\n");
        let started = Instant::now();
        let err = load_error(&[], &bomb);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(err.message.contains("repetition limit"), "{err}");
        // Deep nesting stops at the parser's recursion limit.
        // Deep nesting is refused before the parser, which takes minutes on it.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let started = Instant::now();
        let err = load_error(&[], &format!("settings: {deep}\ncases: []\n"));
        assert!(
            err.message.contains("nested deeper than 256 levels"),
            "{err}"
        );
        let err = load_error(
            &[("deep.yaml", &deep)],
            &one_case("  input: {pod: deep.yaml}\n  expect: {fields: {}}"),
        );
        assert!(
            err.message
                .contains("deep.yaml: nested deeper than 256 levels"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Below that, the parser's recursion limit, with a path that is cut short.
        let err = load_error(
            &[],
            &format!(
                "settings: {}{}\ncases: []\n",
                "[".repeat(200),
                "]".repeat(200)
            ),
        );
        assert!(err.message.contains("recursion limit"), "{err}");
        assert!(err.field.len() < 300, "{}", err.field);
        // Not UTF-8.
        std::fs::write(&suite, b"cases: [\xff]").unwrap();
        assert!(load(&suite).unwrap_err().message.contains("not UTF-8"));
        // Too many cases.
        let mut many = String::from("hook: decorate\ncases:\n");
        for i in 0..=MAX_CASES {
            many.push_str(&format!(
                "- {{name: c{i}, input: {{pod: {{}}}}, expect: {{fields: {{}}}}}}\n"
            ));
        }
        let err = load_error(&[], &many);
        assert_eq!(err.field, "cases");
        assert!(err.message.contains("at most 10000"), "{err}");
    }

    #[test]
    fn flow_depth_counts_brackets_outside_quotes_and_comments() {
        assert!(!flow_too_deep("a: [[x]]", 2));
        assert!(flow_too_deep("a: [[[x]]]", 2));
        assert!(!flow_too_deep("a: \"[[[[\"\nb: '{{{{'\nc: x # [[[[\n", 1));
        assert!(!flow_too_deep("m: \"esc \\\" [[[[\"", 1));
        // A quote or `#` inside a plain scalar starts nothing: the brackets after it count.
        assert!(flow_too_deep("[don't, [[[x]]]]", 3));
        assert!(flow_too_deep("[a#[[[x]]]]", 3));
        // Closing more than was opened does not bank depth.
        assert!(flow_too_deep("]]]]]] [[[x]]]", 2));
    }

    #[test]
    fn a_pod_file_used_by_many_cases_is_read_once() {
        let mut text = String::from("hook: decorate\ncases:\n");
        for i in 0..50 {
            text.push_str(&format!(
                "- {{name: c{i}, input: {{pod: p.yaml}}, expect: {{fields: {{}}}}}}\n"
            ));
        }
        let (_dir, suite) = load_in(&[("p.yaml", POD)], &text);
        let suite = suite.unwrap();
        assert!(
            suite
                .cases
                .windows(2)
                .all(|w| Arc::ptr_eq(&w[0].pod, &w[1].pod))
        );
    }

    fn report() -> Report {
        let case = |name: &str, outcome: Outcome, mismatches: Vec<Mismatch>| CaseReport {
            name: name.into(),
            hook: Hook::Decorate,
            policy: "team@0123456789ab".into(),
            outcome,
            mismatches,
            elapsed: Duration::from_millis(3),
        };
        Report {
            suite: "tests/suite.yaml".into(),
            cases: vec![
                case("adds the label", pod_result(), vec![]),
                case(
                    "keeps <the> \"image\" & \u{1b}[31m",
                    pod_result(),
                    vec![value(
                        "metadata.labels.team",
                        Some(json!("vision")),
                        Some(json!("ml")),
                    )],
                ),
                case(
                    "refuses",
                    Err(Failure {
                        category: FailureCategory::Timeout,
                        message: "deadline of 50ms exceeded".into(),
                    }),
                    vec![Mismatch::Outcome {
                        expected: "a result".into(),
                        actual: "failure timeout: deadline of 50ms exceeded".into(),
                    }],
                ),
            ],
        }
    }

    #[test]
    fn the_table_lists_every_case_then_the_differences_then_the_counts() {
        let text = table(&report());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "RESULT   HOOK       TIME   CASE");
        assert_eq!(lines[1], "ok       decorate    3ms   adds the label");
        assert_eq!(
            lines[2],
            "FAILED   decorate    3ms   keeps <the> \"image\" & \\u{1b}[31m"
        );
        assert!(text.contains(
            "FAILED keeps <the> \"image\" & \\u{1b}[31m (decorate, team@0123456789ab)\nexpected (-), actual (+):\n  - metadata.labels.team: \"vision\"\n  + metadata.labels.team: \"ml\"\n"
        ), "{text}");
        assert!(
            text.contains("  - a result\n  + failure timeout: deadline of 50ms exceeded\n"),
            "{text}"
        );
        assert!(text.ends_with("\n1 passed, 2 failed\n"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn json_reports_what_failed_cases_returned() {
        let v = to_json(&report());
        assert_eq!(
            (v["passed"].as_u64(), v["failed"].as_u64()),
            (Some(1), Some(2))
        );
        assert_eq!(v["cases"][0]["passed"], true);
        assert!(v["cases"][0].get("actual").is_none());
        assert_eq!(
            v["cases"][1]["differences"],
            json!([{"path": "metadata.labels.team", "expected": "vision", "actual": "ml"}])
        );
        assert_eq!(v["cases"][1]["actual"]["result"]["metadata"]["name"], "w-0");
        assert_eq!(
            v["cases"][2]["actual"]["failure"],
            json!({"category": "timeout", "message": "deadline of 50ms exceeded"})
        );
    }

    #[test]
    fn junit_is_well_formed_xml_with_a_failure_per_failed_case() {
        let xml = junit(&report());
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("tests"), Some("3"));
        assert_eq!(suite.attribute("failures"), Some("2"));
        let cases: Vec<_> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len(), 3);
        assert_eq!(
            cases[1].attribute("name"),
            Some("keeps <the> \"image\" & \\u{1b}[31m")
        );
        assert_eq!(
            cases[1].attribute("classname"),
            Some("team@0123456789ab.decorate")
        );
        let failure = cases[1]
            .children()
            .find(|n| n.has_tag_name("failure"))
            .unwrap();
        assert_eq!(
            failure.text(),
            Some(
                "expected (-), actual (+):\n- metadata.labels.team: \"vision\"\n+ metadata.labels.team: \"ml\"\n"
            )
        );
        let failure = cases[2]
            .children()
            .find(|n| n.has_tag_name("failure"))
            .unwrap();
        assert_eq!(
            failure.attribute("message"),
            Some("failure timeout: deadline of 50ms exceeded")
        );
        assert!(cases[0].children().all(|n| !n.is_element()));
    }
}
