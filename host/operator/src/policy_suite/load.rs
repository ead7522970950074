//! Loading a suite: the YAML, the files it names, every field checked before anything runs, with the caps that keep hostile suites bounded.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tfjob_planner::PodContext;
use tfjob_planner::policy::{FailureKind, VerdictPhase};
use tfjob_policy_engine::Hook;
use tfjob_policy_engine::cluster_cache::{ClusterCache, DEFAULT_OBJECT_CAP, ResourceCache};
use tfjob_policy_engine::cluster_reads::{RESOURCES, Resource};

use crate::policy_hooks::{ContextFile, container};

use super::{MAX_CASES, MAX_FILE_BYTES, MAX_FLOW_DEPTH, MAX_SUITE_BYTES};
use super::{json_path::*, model::*};

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
pub(crate) struct RawSuite {
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
    /// Cluster objects every case's reads are answered from.
    #[serde(default)]
    cluster: Option<Value>,
    cases: Vec<RawCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCase {
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
pub(crate) struct RawInput {
    pod: Value,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    container: Option<String>,
    /// Cluster objects added to the suite's for this case (an object of the same kind,
    /// namespace and name replaces the suite's).
    #[serde(default)]
    cluster: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExpect {
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
pub(crate) struct RawVerdict {
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
pub(crate) struct RawFailure {
    category: String,
    #[serde(default)]
    message: Option<String>,
}

/// Reads at most `limit` bytes of `path`; more is an error saying so.
pub(crate) fn read_capped(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
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
pub(crate) fn flow_too_deep(text: &str, max: usize) -> bool {
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
pub(crate) fn yaml_value(text: &str) -> Result<Value, String> {
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
pub(crate) struct Loader {
    pub(crate) file: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) documents: HashMap<PathBuf, Arc<Value>>,
    pub(crate) pods: HashMap<PathBuf, Arc<Pod>>,
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
        let suite_cluster = match &raw.cluster {
            Some(source) => self.cluster_objects(source, "cluster")?,
            None => Fixtures::new(),
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
            let mut fixtures = suite_cluster.clone();
            if let Some(source) = &rc.input.cluster {
                fixtures.extend(self.cluster_objects(source, &format!("{at}.input.cluster"))?);
            }
            cases.push(Case {
                name: rc.name,
                hook,
                settings,
                pod,
                context,
                now,
                container: rc.input.container,
                cluster: Arc::new(cluster_cache(fixtures)),
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

    /// The objects of a `cluster` section: a list whose entries are objects, or names of files
    /// holding an object or a list of them; each names its `kind` and `metadata.name`.
    fn cluster_objects(&mut self, source: &Value, field: &str) -> Result<Fixtures, SuiteError> {
        let Value::Array(entries) = source else {
            return Err(self.error(
                field,
                format!(
                    "expected a list of cluster objects, not {}",
                    kind_of(source)
                ),
            ));
        };
        let mut fixtures = Fixtures::new();
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("{field}[{i}]");
            let document = self.document(entry, &at)?;
            let objects = match &*document {
                Value::Array(items) => items.clone(),
                Value::Object(o) if o.get("kind").and_then(Value::as_str) == Some("List") => o
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                other => vec![other.clone()],
            };
            for (j, object) in objects.into_iter().enumerate() {
                let at = if matches!(entry, Value::String(_)) {
                    format!("{at} (item {j})")
                } else {
                    at.clone()
                };
                let kind = object
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let resource = Resource::of_kind(kind).ok_or_else(|| {
                    let kinds: Vec<&str> = RESOURCES.iter().map(|r| r.kind()).collect();
                    self.error(
                        &format!("{at}.kind"),
                        format!(
                            "{:?} is not a kind policies read: expected one of {}",
                            tfjob_policy_logic::text::elided(kind, 64),
                            kinds.join(", ")
                        ),
                    )
                })?;
                let (namespace, name) = tfjob_policy_engine::cluster_cache::key(&object);
                if name.is_empty() {
                    return Err(self.error(&format!("{at}.metadata.name"), "required"));
                }
                if resource.is_namespaced() == namespace.is_empty() {
                    return Err(self.error(
                        &format!("{at}.metadata.namespace"),
                        if namespace.is_empty() {
                            format!("required: a {kind} lives in a namespace")
                        } else {
                            format!("a {kind} is cluster-scoped: it has no namespace")
                        },
                    ));
                }
                fixtures.insert((resource, namespace, name), object);
            }
        }
        Ok(fixtures)
    }

    pub(crate) fn expectation(
        &self,
        raw: RawExpect,
        hook: Hook,
        at: &str,
    ) -> Result<Expectation, SuiteError> {
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

/// A case's cluster objects by resource, namespace and name.
type Fixtures = std::collections::BTreeMap<(Resource, String, String), Value>;

/// The synced caches a case's reads are answered from.
fn cluster_cache(fixtures: Fixtures) -> ClusterCache {
    let mut by_resource: std::collections::BTreeMap<Resource, Vec<Value>> = Default::default();
    for ((resource, _, _), object) in fixtures {
        by_resource.entry(resource).or_default().push(object);
    }
    // Every resource a policy may read answers, empty when the suite has none of it, as a
    // synced cache of a cluster without such objects would.
    ClusterCache::of(RESOURCES.into_iter().map(|resource| {
        let objects = by_resource.remove(&resource).unwrap_or_default();
        ResourceCache::of(resource, DEFAULT_OBJECT_CAP, objects)
    }))
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
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
pub(crate) fn normalise_times(v: &mut Value) {
    for key in ["occurredAt", "recheckAt"] {
        if let Some(t) = v.get(key).and_then(Value::as_str)
            && let Ok(ts) = t.parse::<jiff::Timestamp>()
        {
            v[key] = json!(ts.to_string());
        }
    }
}
