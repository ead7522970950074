//! The CEL policy: a Wasm component (world `full-policy`) whose settings are a CEL document in
//! `MutatingAdmissionPolicy`'s shape (`tfjob_policy_cel::document`), run by the operator like
//! any other policy: in its sandbox, within the deadline, memory and output caps, behind the
//! guard, the breakers and the tenant shares.
//!
//! `validate-settings` compiles the document and keeps it: the operator activates a policy
//! version by calling `validate-settings` once and keeping the instance's memory from then on,
//! so every call starts with the document compiled and no expression is parsed again. A
//! document that does not compile is refused with the expression's place and a caret under the
//! failing position.
//!
//! Each hook evaluates its part of the document: `mutations` for `decorate-pod`,
//! `resourceMutations` for `override-resources`, `verdicts` for `classify-pod` (when no rule
//! holds, or the match conditions do not, the pod is classified as the default classification
//! does with its default settings). The job's Namespace is read, through the contract's
//! `cluster` import, only by a hook that evaluates an expression naming `namespaceObject` (the
//! manifest declares `reads: [{resource: namespaces}]`); `resource.Get` and `resource.List` read what else the
//! manifest declares, through the same import. An expression that fails fails the call,
//! naming it.

use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use tfjob_policy_cel::compile::{CompileError, CompiledDocument, Hook, compile};
use tfjob_policy_cel::document::CelDocument;
use tfjob_policy_cel::evaluate::{EvalError, Inputs};
use tfjob_policy_cel::reads::ClusterReader;
use tfjob_policy_sdk::logic::classify::{ClassifySettings, classify_pod};
use tfjob_policy_sdk::logic::verdict::Classification;
use tfjob_policy_sdk::serde_json::{self, Value, json};
use tfjob_policy_sdk::settings::{self, PolicySettings};
use tfjob_policy_sdk::wit::{JobContext, PolicyError, Verdict};
use tfjob_policy_sdk::{cluster, convert};

/// The settings as written: the CEL document.
#[derive(Debug, Default, Deserialize)]
#[serde(transparent)]
struct Document(CelDocument);

impl PolicySettings for Document {
    fn validate(&self) -> Result<(), String> {
        // Compiling is the validation (see `Compiled`).
        Ok(())
    }
}

/// The settings as applied: the compiled document.
struct Compiled(CompiledDocument);

impl TryFrom<Document> for Compiled {
    type Error = CompileError;

    fn try_from(document: Document) -> Result<Compiled, CompileError> {
        compile(&document.0).map(Compiled)
    }
}

/// The component's implementation.
struct CelPolicy;

tfjob_policy_sdk::export_policy!(world: "full-policy", path: "../../wit", policy: CelPolicy);

impl bindings::exports::tfjob::policy::settings::Guest for CelPolicy {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate_as::<Document, Compiled>(&settings)
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for CelPolicy {
    fn decorate_pod(ctx: JobContext, settings: String, pod: String) -> Result<String, PolicyError> {
        let compiled = document(&settings)?;
        let pod = parse("pod", &pod)?;
        let out = compiled
            .0
            .decorate(&inputs(&ctx, &compiled.0, Hook::Decorate)?, pod)
            .map_err(failed)?;
        Ok(out.to_string())
    }
}

impl bindings::exports::tfjob::policy::resources::Guest for CelPolicy {
    fn override_resources(
        ctx: JobContext,
        settings: String,
        container_name: String,
        resources: String,
    ) -> Result<String, PolicyError> {
        let compiled = document(&settings)?;
        let requirements = parse("resources", &resources)?;
        let out = compiled
            .0
            .override_resources(
                &inputs(&ctx, &compiled.0, Hook::Resources)?,
                &container_name,
                requirements,
            )
            .map_err(failed)?;
        Ok(out.to_string())
    }
}

impl bindings::exports::tfjob::policy::classify::Guest for CelPolicy {
    fn classify_pod(
        ctx: JobContext,
        settings: String,
        pod: String,
        now: String,
    ) -> Result<Verdict, PolicyError> {
        let compiled = document(&settings)?;
        let json = parse("pod", &pod)?;
        let rule = compiled
            .0
            .classify(&inputs(&ctx, &compiled.0, Hook::Classify)?, &json, &now)
            .map_err(failed)?;
        let at = convert::timestamp_from_rfc3339("now", &now)?;
        let verdict = match rule {
            Some(rule) => Classification {
                phase: rule.phase,
                reason: rule.reason,
                message: rule.message,
                kind: rule.kind,
                occurred_at: Some(at),
                recheck_at: None,
            },
            None => {
                let observed = convert::observed_pod_from_json(&pod)?;
                classify_pod(&ClassifySettings::default(), &observed, at)
            }
        };
        Ok(verdict.into())
    }
}

/// The compiled document of `settings`, compiled once per text.
fn document(settings: &str) -> Result<Rc<Compiled>, PolicyError> {
    settings::cached_as::<Document, Compiled>(settings)
}

fn parse(what: &str, json: &str) -> Result<Value, PolicyError> {
    serde_json::from_str(json).map_err(|e| PolicyError::InvalidInput(format!("{what}: {e}")))
}

/// What expressions see of the job, and its Namespace when those `hook` evaluates read it.
fn inputs(
    ctx: &JobContext,
    compiled: &CompiledDocument,
    hook: Hook,
) -> Result<Inputs, PolicyError> {
    let pairs = |list: &[(String, String)]| -> serde_json::Map<String, Value> {
        list.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    let job = json!({
        "name": ctx.job_name,
        "namespace": ctx.namespace,
        "uid": ctx.job_uid,
        "labels": pairs(&ctx.job_labels),
        "annotations": pairs(&ctx.job_annotations),
        "replicaType": ctx.replica_type,
        "replicaIndex": ctx.replica_index,
        "replicaCount": ctx.replica_count,
        "attempt": ctx.attempt,
    });
    let namespace_object = if compiled.reads_namespace(hook) {
        let got = cluster::get("namespaces", "", &ctx.namespace)
            .map_err(|e| PolicyError::Failed(cluster::message(&e).to_owned()))?;
        got.object
            .map(|text| parse("the job's Namespace", &text))
            .transpose()?
    } else {
        None
    };
    Ok(Inputs {
        job,
        namespace_object,
        reader: Arc::new(Cluster),
    })
}

/// `resource.Get` and `resource.List` over the contract's `cluster` import.
struct Cluster;

impl ClusterReader for Cluster {
    fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
        let got =
            cluster::get(resource, namespace, name).map_err(|e| cluster::message(&e).to_owned())?;
        got.object
            .map(|text| serde_json::from_str(&text).map_err(|e| format!("{resource}/{name}: {e}")))
            .transpose()
    }

    fn list(&self, resource: &str, namespace: &str, selector: &str) -> Result<Vec<Value>, String> {
        // Every match: past what one answer holds the read fails `too-large`, which is better
        // than an expression deciding on the first page as if it were all.
        let listed = cluster::list(resource, namespace, selector, 0)
            .map_err(|e| cluster::message(&e).to_owned())?;
        listed
            .items
            .iter()
            .map(|text| serde_json::from_str(text).map_err(|e| format!("{resource}: {e}")))
            .collect()
    }
}

fn failed(e: EvalError) -> PolicyError {
    PolicyError::Failed(e.to_string())
}
