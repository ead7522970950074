//! Running one hook of a policy as the operator would, for `policy test` and its suites: the
//! policy named on the command line or in a suite ([`policy_source`]), the job context and
//! settings given as files or flags, and [`run_hook`], which calls the hook through the same
//! steps as the operator's pipeline ([`tfjob_policy_engine::hook_call`]).
//! The engine they run in is made here too ([`test_engine`]), with compiled code kept in
//! `--policy-cache-dir` when given.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod};
use serde::Deserialize;
use serde_json::Value;
use tfjob_planner::{PodContext, Verdict};
use tfjob_policy_engine::cel_configmap;
use tfjob_policy_engine::configmap::{self, PolicyForm};
use tfjob_policy_engine::hook_call::{self, Caller, Observed};
use tfjob_policy_engine::{
    ActivationError, ActivePolicy, EvalError, Hook, PolicyEngine, PolicyManifest, SandboxLimits,
    activate_checked, defaults,
};

pub(crate) fn read_yaml(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not valid YAML or JSON", path.display()))
}

/// A policy module to test and the manifest the operator would run it with.
pub(crate) struct PolicySource {
    pub bytes: Vec<u8>,
    /// The name it runs under: a default's, else the file's stem.
    pub name: String,
    /// A default's own manifest, or one given; `None`: a module alone, which runs with no
    /// allowance beyond the default paths.
    pub manifest: Option<PolicyManifest>,
    /// Whether `manifest` is a default's own: other settings then declare the capabilities
    /// they use, as the operator does for `--policy-config`.
    pub default_manifest: bool,
    /// A CEL policy's document: a manifest given for it is read as a CEL policy's.
    pub cel_document: Option<String>,
}

/// The names of the embedded defaults, for error messages.
pub(crate) fn default_names() -> String {
    let names: Vec<&str> = defaults::DEFAULTS.iter().map(|d| d.name).collect();
    names.join(", ")
}

/// The policy `spec` names (`default`, `default:<name>` or a file) for `hook`, with the
/// manifest the operator runs a default with. `flag` leads the errors (`--policy`).
pub(crate) fn policy_source(spec: &str, hook: Hook, flag: &str) -> anyhow::Result<PolicySource> {
    let default = if spec == "default" {
        Some(defaults::for_hook(hook))
    } else if let Some(name) = spec.strip_prefix("default:") {
        Some(defaults::find(name).ok_or_else(|| {
            anyhow!(
                "{flag}: no default policy {name:?} (defaults: {})",
                default_names()
            )
        })?)
    } else {
        None
    };
    if let Some(d) = default {
        return Ok(PolicySource {
            bytes: d.wasm.to_vec(),
            name: d.name.to_owned(),
            manifest: Some(defaults::manifest(d)),
            default_manifest: true,
            cel_document: None,
        });
    }
    let path = Path::new(spec);
    if is_cel_file(path) {
        return cel_source(path, flag);
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("{flag}: reading {}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("policy")
        .to_owned();
    Ok(PolicySource {
        bytes,
        name,
        manifest: None,
        default_manifest: false,
        cel_document: None,
    })
}

/// Whether `path` names a CEL policy (a YAML file) rather than a module.
pub(crate) fn is_cel_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// A CEL policy from a YAML file: a policy ConfigMap (as `policy pack --cel` prints it), read
/// as the operator reads it, or a CEL document alone, named after the file (`gpu.cel.yaml`
/// runs as `gpu`), with the hooks its parts serve.
pub(crate) fn cel_source(path: &Path, flag: &str) -> anyhow::Result<PolicySource> {
    let at = || format!("{flag}: {}", path.display());
    let text = std::fs::read_to_string(path).with_context(|| format!("{}: reading", at()))?;
    // Parsed once: a document that is not YAML is the CEL reader's to report.
    let value = serde_yaml_ng::from_str::<Value>(&text).ok();
    let kind = value
        .as_ref()
        .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned));
    if let Some(kind) = kind.as_deref().filter(|k| *k != "ConfigMap") {
        return Err(anyhow!(
            "{}: a {kind}, not a policy: give a component (.wasm), a CEL document \
             (matchConditions, variables, mutations, ...) or its ConfigMap",
            at()
        ));
    }
    let (manifest, document) = if let (Some(_), Some(value)) = (&kind, value) {
        let cm: ConfigMap =
            serde_json::from_value(value).with_context(|| format!("{}: not a ConfigMap", at()))?;
        let source = configmap::read_configmap(&cm).map_err(|e| anyhow!("{}: {e}", at()))?;
        let document = cm.data.as_ref().and_then(|d| d.get(cel_configmap::CEL_KEY));
        match (source.form, document) {
            (PolicyForm::Cel, Some(document)) => (source.manifest, document.clone()),
            _ => {
                return Err(anyhow!(
                    "{}: carries a module, not a CEL document (data key {})",
                    at(),
                    cel_configmap::CEL_KEY
                ));
            }
        }
    } else {
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .map(|s| s.split('.').next().unwrap_or(s))
            .filter(|s| !s.is_empty())
            .unwrap_or("policy");
        let manifest =
            cel_configmap::manifest_for(&text, None, name).map_err(|e| anyhow!("{}: {e}", at()))?;
        (manifest, text)
    };
    Ok(PolicySource {
        bytes: defaults::CEL_POLICY_WASM.to_vec(),
        name: manifest.name.clone(),
        manifest: Some(manifest),
        default_manifest: false,
        cel_document: Some(document),
    })
}

impl PolicySource {
    /// Replaces the manifest with the one in `text` (YAML); `what` names where it came from. A
    /// CEL policy's stays what its document decides (hooks, settings, the namespace read).
    pub(crate) fn with_manifest(mut self, text: &str, what: &str) -> anyhow::Result<PolicySource> {
        let manifest = match &self.cel_document {
            Some(document) => cel_configmap::manifest_for(document, Some(text), &self.name)
                .map_err(|e| anyhow!("{what}: {e}"))?,
            None => {
                PolicyManifest::from_yaml(text, &self.name).map_err(|e| anyhow!("{what}: {e}"))?
            }
        };
        self.manifest = Some(manifest);
        self.default_manifest = false;
        Ok(self)
    }

    /// The manifest the policy is activated with for `hook`: its own, or, for a module alone,
    /// one that runs it for `hook` with nothing granted. `settings` (`None`: the manifest's)
    /// replace the manifest's.
    pub(crate) fn manifest_for(&self, hook: Hook, settings: Option<&Value>) -> PolicyManifest {
        let mut m = self.manifest.clone().unwrap_or_else(|| PolicyManifest {
            name: self.name.clone(),
            hooks: vec![hook],
            ..PolicyManifest::default()
        });
        if let Some(settings) = settings {
            m.settings = settings.clone();
            if self.default_manifest {
                m.capabilities = defaults::capabilities_used(settings);
                m.reads = defaults::reads_used(hook, settings);
            }
        }
        m
    }

    /// Activates the policy as the operator does: manifest and limits, compilation, digest
    /// pin, exported hooks, `validate-settings`.
    pub(crate) fn activate(
        &self,
        engine: &PolicyEngine,
        hook: Hook,
        settings: Option<&Value>,
    ) -> Result<ActivePolicy, ActivationError> {
        activate_checked(engine, self.manifest_for(hook, settings), &self.bytes)
    }
}

/// What the operator's pipeline would take from a hook.
pub(crate) enum HookOutput {
    /// The decorated pod, as the guard accepted it.
    Pod(Value),
    /// One container's requirements, decoded as the operator decodes them.
    Resources(Value),
    /// The classification, as the verdict guard accepted it.
    Verdict(Verdict),
}

impl HookOutput {
    /// The output as a JSON document: the pod, the requirements, or the verdict as the operator
    /// holds it (`reason` and `message` left out when empty, `occurredAt` and `recheckAt` when
    /// unset).
    pub(crate) fn into_json(self) -> Value {
        match self {
            HookOutput::Pod(v) | HookOutput::Resources(v) => v,
            HookOutput::Verdict(v) => serde_json::to_value(&v).expect("verdicts serialise"),
        }
    }
}

/// What one hook call is given besides the context and settings.
pub(crate) enum HookInput<'a> {
    Decorate(&'a Pod),
    Resources(&'a Container),
    Classify { pod: &'a Pod, now: jiff::Timestamp },
}

/// Runs one hook of an activated policy as the operator's pipeline does
/// ([`tfjob_policy_engine::hook_call`]); every failure carries the operator's category.
pub(crate) fn run_hook(
    caller: Caller<'_>,
    policy: &ActivePolicy,
    ctx: &tfjob_policy_engine::bindings::JobContext,
    input: HookInput<'_>,
) -> Result<HookOutput, EvalError> {
    match input {
        HookInput::Decorate(pod) => {
            let pod = serde_json::to_value(pod).expect("pods serialise");
            hook_call::decorate(caller, policy, ctx, &pod).map(HookOutput::Pod)
        }
        HookInput::Resources(c) => {
            let requirements = serde_json::to_value(c.resources.clone().unwrap_or_default())
                .expect("requirements serialise");
            hook_call::resources(caller, policy, ctx, None, &c.name, &requirements)
                .map(HookOutput::Resources)
        }
        HookInput::Classify { pod, now } => {
            let json = Observed::encode(pod)?;
            let observed = Observed {
                pod,
                json: &json,
                now,
            };
            hook_call::classify(caller, policy, ctx, &observed).map(HookOutput::Verdict)
        }
    }
}

/// The container `wanted` of `pod` [default: the first]; the error says which is missing.
pub(crate) fn container<'a>(pod: &'a Pod, wanted: Option<&str>) -> Result<&'a Container, String> {
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    match wanted {
        Some(wanted) => containers
            .iter()
            .find(|c| c.name == wanted)
            .ok_or_else(|| format!("{wanted:?}: no such container in the pod")),
        None => containers
            .first()
            .ok_or_else(|| "the pod has no containers".to_owned()),
    }
}

pub(crate) fn settings_value(arg: Option<&str>) -> anyhow::Result<Option<Value>> {
    let Some(arg) = arg else {
        return Ok(None);
    };
    let value: Value = match arg.strip_prefix('@') {
        Some(file) => read_yaml(Path::new(file)).context("--settings")?,
        None => serde_json::from_str(arg).context("--settings: not valid JSON")?,
    };
    Ok(Some(value))
}

/// A job context file: the planner's context with test defaults for what it leaves out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(crate) struct ContextFile {
    job_name: String,
    namespace: String,
    job_uid: String,
    job_labels: BTreeMap<String, String>,
    job_annotations: BTreeMap<String, String>,
    replica_type: String,
    replica_index: i32,
    replica_count: i32,
    attempt: i32,
}

impl Default for ContextFile {
    fn default() -> Self {
        ContextFile {
            job_name: "test-job".into(),
            namespace: "default".into(),
            job_uid: "00000000-0000-0000-0000-000000000000".into(),
            job_labels: BTreeMap::new(),
            job_annotations: BTreeMap::new(),
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 1,
            attempt: 0,
        }
    }
}

impl From<ContextFile> for PodContext {
    fn from(c: ContextFile) -> PodContext {
        PodContext {
            job_name: c.job_name,
            namespace: c.namespace,
            job_uid: c.job_uid,
            job_labels: c.job_labels,
            job_annotations: c.job_annotations,
            replica_type: c.replica_type,
            replica_index: c.replica_index,
            replica_count: c.replica_count,
            attempt: c.attempt,
        }
    }
}

pub(crate) fn context(path: Option<&Path>) -> anyhow::Result<PodContext> {
    let c: ContextFile = match path {
        Some(p) => serde_path_to_error::deserialize(read_yaml(p)?)
            .map_err(|e| anyhow!("{}: field {}: {}", p.display(), e.path(), e.inner()))?,
        None => ContextFile::default(),
    };
    Ok(c.into())
}

/// The engine policies are tested in: `limits`, with compiled code kept in `cache_dir` when
/// one is given.
pub(crate) fn test_engine(
    limits: SandboxLimits,
    cache_dir: Option<&Path>,
) -> anyhow::Result<PolicyEngine> {
    let engine = PolicyEngine::new(limits)?;
    Ok(match cache_dir {
        Some(dir) => engine.with_compiled_cache(
            // Its error names the flag and the directory already.
            tfjob_policy_engine::compiled_cache::CompiledCache::open(dir)?,
        ),
        None => engine,
    })
}
