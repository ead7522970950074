//! One call of a compiled document, from its inputs to its answer.
//!
//! Expressions see:
//! - `object`: the hook's object: the pod (decorate, classify) or one container's requirements
//!   (resources), as updated by the mutations before;
//! - `job`: the job and replica the pod is for (`name`, `namespace`, `uid`, `labels`,
//!   `annotations`, `replicaType`, `replicaIndex`, `replicaCount`, `attempt`);
//! - `namespaceObject`: the job's Namespace when the policy reads it (declared `reads`), else
//!   null;
//! - `resource.Get(apiVersion, resource, namespace, name)` and `resource.List(apiVersion,
//!   resource, namespace[, labels])`: the objects the policy declares it reads
//!   ([`crate::reads`]);
//! - `hook` (`decorate`, `resources` or `classify`), `containerName` (resources) and `now`
//!   (classify, a timestamp: `now - timestamp(c.lastTransitionTime) > duration('10m')`);
//! - `variables.NAME`: the document's variables, evaluated in order after the match conditions,
//!   each seeing those before it.
//!
//! When a match condition is false the policy has nothing to say: the pod or requirements stay
//! as they are, and classification answers none (the guest then classifies as the default
//! does). Mutations apply in order. Any error (a type error found only now, a division by zero,
//! an integer overflow, a patch at a path that does not exist) fails the call naming the
//! expression; the manifest's `failurePolicy` decides what the operator does then.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Value};
use serde_json::Value as Json;
use tfjob_policy_logic::verdict::{FailureKind, Phase};

use crate::apply::{self, Root};
use crate::compile::{Compiled, CompiledDocument, CompiledMutation};
use crate::convert::{to_cel, to_json, to_val};
use crate::document::PatchType;
use crate::reads::{self, ClusterReader};
use crate::{lists, quantity};

/// What a call knows besides its object.
#[derive(Clone)]
pub struct Inputs {
    /// The `job` variable (see the module documentation).
    pub job: Json,
    /// The job's Namespace, when the policy read it.
    pub namespace_object: Option<Json>,
    /// What `resource.Get` and `resource.List` ask.
    pub reader: Arc<dyn ClusterReader>,
}

impl Default for Inputs {
    fn default() -> Inputs {
        Inputs {
            job: Json::Null,
            namespace_object: None,
            reader: Arc::new(NoReads),
        }
    }
}

impl std::fmt::Debug for Inputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("job", &self.job)
            .field("namespace_object", &self.namespace_object)
            .finish_non_exhaustive()
    }
}

/// The reader of a call that can read nothing (a test's, a suite's without fixtures).
#[derive(Debug)]
pub struct NoReads;

impl ClusterReader for NoReads {
    fn get(&self, resource: &str, _: &str, _: &str) -> Result<Option<Json>, String> {
        Err(format!("this call reads no {resource}"))
    }

    fn list(&self, resource: &str, _: &str, _: &str) -> Result<Vec<Json>, String> {
        Err(format!("this call reads no {resource}"))
    }
}

/// Why a call failed: the expression, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct EvalError {
    pub path: String,
    pub message: String,
}

/// A verdict a rule gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleVerdict {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    pub kind: Option<FailureKind>,
}

impl CompiledDocument {
    /// The pod after the document's mutations.
    pub fn decorate(&self, inputs: &Inputs, pod: Json) -> Result<Json, EvalError> {
        let root = self.root(inputs, "decorate", []);
        let Some(matched) = self.prepare(&root, &pod, self.mutations.first())? else {
            return Ok(pod);
        };
        self.mutate(&root, matched, &self.mutations, pod, Root::Pod)
    }

    /// Container `container`'s requirements after the document's resource mutations.
    pub fn override_resources(
        &self,
        inputs: &Inputs,
        container: &str,
        requirements: Json,
    ) -> Result<Json, EvalError> {
        let container = Value::String(Arc::new(container.to_owned()));
        let root = self.root(inputs, "resources", [("containerName", container)]);
        let first = self.resource_mutations.first();
        let Some(matched) = self.prepare(&root, &requirements, first)? else {
            return Ok(requirements);
        };
        self.mutate(
            &root,
            matched,
            &self.resource_mutations,
            requirements,
            Root::Requirements,
        )
    }

    /// The verdict of the first rule whose condition holds for `pod` at `now`; none when the
    /// match conditions do not hold or no rule does.
    pub fn classify(
        &self,
        inputs: &Inputs,
        pod: &Json,
        now: &str,
    ) -> Result<Option<RuleVerdict>, EvalError> {
        let now = chrono::DateTime::parse_from_rfc3339(now).map_err(|e| EvalError {
            path: "now".into(),
            message: format!("{now:?} is not an RFC 3339 time: {e}"),
        })?;
        let root = self.root(inputs, "classify", [("now", Value::Timestamp(now))]);
        let Some(Matched { variables, .. }) = self.prepare(&root, pod, None)? else {
            return Ok(None);
        };
        let scope = with_object(&root, pod);
        for rule in &self.verdicts {
            if !condition(&scope, &variables, &rule.condition)? {
                continue;
            }
            let message = match &rule.message_expression {
                Some(expression) => match run(&scope, &variables, expression)? {
                    Value::String(s) => s.as_str().to_owned(),
                    other => return Err(type_error(expression, "a string", &other)),
                },
                None => rule.message.clone(),
            };
            return Ok(Some(RuleVerdict {
                phase: rule.phase,
                reason: rule.reason.clone(),
                message,
                kind: rule.phase.is_failure().then_some(rule.kind),
            }));
        }
        Ok(None)
    }

    /// The scope of a whole call: the functions, and what every expression of the call sees
    /// but `object` and `variables`, each converted once.
    fn root<'v, const N: usize>(
        &self,
        inputs: &'v Inputs,
        hook: &'static str,
        extra: [(&'static str, Value); N],
    ) -> Context<'v, 'v> {
        let mut context = Context::with_env(Arc::clone(&self.env));
        // Registering a library costs a boxed function per name on every call: only those the
        // expressions call are.
        if self.calls_any(&quantity::NAMES) {
            quantity::add_quantity_functions(&mut context);
        }
        if self.calls_any(&lists::NAMES) {
            lists::add_list_functions(&mut context);
        }
        if self.calls_any(&reads::NAMES) {
            reads::add_resource_functions(&mut context, Arc::clone(&inputs.reader));
        }
        context.add_variable_as_val("job", to_val(&inputs.job));
        let namespace_object = inputs.namespace_object.as_ref().map_or(Value::Null, to_cel);
        context.add_variable_from_value("namespaceObject", namespace_object);
        context.add_variable_from_value("hook", Value::String(Arc::new(hook.to_owned())));
        for (name, value) in extra {
            context.add_variable_from_value(name, value);
        }
        context
    }

    /// Checks the match conditions on `object`, then evaluates the variables and, while the
    /// object is bound as it is, the `first` mutation's expression; none when a condition is
    /// false.
    fn prepare(
        &self,
        root: &Context<'_, '_>,
        object: &Json,
        first: Option<&CompiledMutation>,
    ) -> Result<Option<Matched>, EvalError> {
        let scope = with_object(root, object);
        let mut variables: HashMap<Key, Value> = HashMap::new();
        let empty = Value::Map(Map {
            map: Arc::new(HashMap::new()),
        });
        for condition_ in &self.match_conditions {
            if !condition(&scope, &empty, &condition_.expression)? {
                return Ok(None);
            }
        }
        for variable in &self.variables {
            let so_far = Value::Map(Map {
                map: Arc::new(variables.clone()),
            });
            let value = run(&scope, &so_far, &variable.expression)?;
            variables.insert(Key::String(Arc::new(variable.name.clone())), value);
        }
        let variables = Value::Map(Map {
            map: Arc::new(variables),
        });
        let first = first
            .map(|m| patch(&scope, &variables, &m.expression))
            .transpose()?;
        Ok(Some(Matched { variables, first }))
    }

    /// Applies `mutations` in order; `matched.first` is the first one's patch.
    fn mutate(
        &self,
        root: &Context<'_, '_>,
        matched: Matched,
        mutations: &[CompiledMutation],
        mut target: Json,
        patched: Root,
    ) -> Result<Json, EvalError> {
        let Matched { variables, first } = matched;
        let mut first = first;
        for mutation in mutations {
            let expression = &mutation.expression;
            // Each mutation sees the object as the ones before it left it.
            let result = match first.take() {
                Some(result) => result,
                None => patch(&with_object(root, &target), &variables, expression)?,
            };
            let applied = match mutation.patch_type {
                PatchType::ApplyConfiguration => apply::apply(&mut target, &result, patched),
                PatchType::JsonPatch => json_patch(&mut target, result),
            };
            applied.map_err(|message| EvalError {
                path: expression.path.clone(),
                message,
            })?;
        }
        Ok(target)
    }
}

/// `root` with `object` bound: converted once for every expression that sees it as it is.
fn with_object<'p, 'v>(root: &'p Context<'p, 'v>, object: &'v Json) -> Context<'p, 'v> {
    let mut scope = root.new_inner_scope();
    scope.add_variable_as_val("object", to_val(object));
    scope
}

/// A mutation's expression evaluated to its patch (an apply configuration or a JSON patch).
fn patch(scope: &Context, variables: &Value, expression: &Compiled) -> Result<Json, EvalError> {
    let result = run(scope, variables, expression)?;
    to_json(&result).map_err(|message| EvalError {
        path: expression.path.clone(),
        message,
    })
}

/// What holds once the match conditions did: the variables, and the first mutation's patch.
struct Matched {
    variables: Value,
    first: Option<Json>,
}

fn condition(scope: &Context, variables: &Value, expression: &Compiled) -> Result<bool, EvalError> {
    match run(scope, variables, expression)? {
        Value::Bool(b) => Ok(b),
        other => Err(type_error(expression, "a bool", &other)),
    }
}

fn run(scope: &Context, variables: &Value, expression: &Compiled) -> Result<Value, EvalError> {
    let mut context = scope.new_inner_scope();
    context.add_variable_from_value("variables", variables.clone());
    expression.program.execute(&context).map_err(|e| EvalError {
        path: expression.path.clone(),
        message: e.to_string(),
    })
}

fn json_patch(target: &mut Json, patch: Json) -> Result<(), String> {
    if !patch.is_array() {
        return Err(format!(
            "a jsonPatch expression returns a list of JSONPatch{{op, path, value}}, not {patch}"
        ));
    }
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|e| format!("not a JSON patch: {e}"))?;
    json_patch::patch(target, &patch).map_err(|e| e.to_string())
}

fn type_error(expression: &Compiled, wanted: &str, got: &Value) -> EvalError {
    EvalError {
        path: expression.path.clone(),
        message: format!("must evaluate to {wanted}, not {:?}", got.type_of()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::document::CelDocument;
    use serde_json::json;

    fn document(json: Json) -> CompiledDocument {
        compile(&CelDocument::parse(&json.to_string()).unwrap()).unwrap()
    }

    fn inputs() -> Inputs {
        Inputs {
            job: json!({"name": "mnist", "namespace": "vision", "labels": {"team": "vision"},
                        "replicaType": "Worker", "replicaIndex": 0, "replicaCount": 2, "attempt": 0}),
            namespace_object: Some(
                json!({"metadata": {"name": "vision", "labels": {"cost-center": "cc-7"}}}),
            ),
            ..Inputs::default()
        }
    }

    fn gpu_pod() -> Json {
        json!({
            "metadata": {"name": "mnist-worker-0", "labels": {"app": "tf"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:2",
                                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
        })
    }

    #[test]
    fn gpu_pods_get_a_toleration_and_a_label_from_their_namespace() {
        let doc = document(json!({
            "matchConditions": [{"name": "gpu", "expression":
                "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"}],
            "variables": [
                {"name": "costCenter", "expression": "namespaceObject.metadata.labels['cost-center']"},
                {"name": "label", "expression": "variables.costCenter + '-' + job.replicaType.lowerAscii()"}
            ],
            "mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {'cost-center': variables.label}}}"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/spec/tolerations', value: [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]}]"}}
            ]
        }));
        let out = doc.decorate(&inputs(), gpu_pod()).unwrap();
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "tf", "cost-center": "cc-7-worker"})
        );
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
        );
        let mut cpu = gpu_pod();
        cpu["spec"]["containers"][0]["resources"] = json!({});
        assert_eq!(
            doc.decorate(&inputs(), cpu.clone()).unwrap(),
            cpu,
            "no match, no change"
        );
    }

    #[test]
    fn each_mutation_sees_the_one_before() {
        let doc = document(json!({"mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/metadata/labels/step', value: '1'}]"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/labels/after', value: object.metadata.labels.step + '2'}]"}}
        ]}));
        let out = doc.decorate(&inputs(), gpu_pod()).unwrap();
        assert_eq!(out["metadata"]["labels"]["after"], "12");
    }

    #[test]
    fn a_memory_request_defaults_by_replica_type() {
        let doc = document(json!({
            "variables": [{"name": "memory", "expression": "job.replicaType == 'PS' ? '2Gi' : '8Gi'"}],
            "resourceMutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "has(object.requests) && 'memory' in object.requests ? Object{} : Object{requests: {'memory': variables.memory}}"}}]
        }));
        let out = doc
            .override_resources(&inputs(), "tensorflow", json!({"limits": {"cpu": "2"}}))
            .unwrap();
        assert_eq!(
            out,
            json!({"limits": {"cpu": "2"}, "requests": {"memory": "8Gi"}})
        );
        let own = json!({"requests": {"memory": "1Gi"}});
        assert_eq!(
            doc.override_resources(&inputs(), "tensorflow", own.clone())
                .unwrap(),
            own
        );
    }

    #[test]
    fn the_first_verdict_that_holds_decides() {
        let doc = document(json!({"verdicts": [
            {"condition": "object.status.phase == 'Failed' && object.status.containerStatuses.exists(s, s.?state.?terminated.?reason.orValue('') == 'OOMKilled')",
             "phase": "permanent-failure", "reason": "OOMKilled",
             "messageExpression": "'out of memory in ' + object.metadata.name"},
            {"condition": "object.status.phase == 'Failed'", "phase": "retryable-failure", "reason": "Failed", "message": "try again", "kind": "system"}
        ]}));
        let pod = |reason: &str| {
            json!({
                "metadata": {"name": "w-0"},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "tensorflow",
                    "state": {"terminated": {"exitCode": 137, "reason": reason}}}]}
            })
        };
        let now = "2026-01-01T00:00:00Z";
        let oom = doc
            .classify(&inputs(), &pod("OOMKilled"), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            oom,
            RuleVerdict {
                phase: Phase::PermanentFailure,
                reason: "OOMKilled".into(),
                message: "out of memory in w-0".into(),
                kind: Some(FailureKind::User),
            }
        );
        let other = doc
            .classify(&inputs(), &pod("Error"), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            (other.phase, other.kind),
            (Phase::RetryableFailure, Some(FailureKind::System))
        );
        let running = json!({"metadata": {"name": "w-0"}, "status": {"phase": "Running"}});
        assert_eq!(doc.classify(&inputs(), &running, now).unwrap(), None);
    }

    #[test]
    fn run_time_errors_name_the_expression() {
        for (doc, path, says) in [
            (
                json!({"variables": [{"name": "x", "expression": "1 / 0"}]}),
                "variables[0].expression",
                "ivision",
            ),
            (
                json!({"variables": [{"name": "x", "expression": "9223372036854775807 + 1"}]}),
                "variables[0].expression",
                "Overflow",
            ),
            (
                json!({"matchConditions": [{"name": "m", "expression": "'yes'"}]}),
                "matchConditions[0].expression",
                "a bool",
            ),
            (
                json!({"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'replace', path: '/spec/nothing/here', value: 1}]"}}]}),
                "mutations[0].jsonPatch.expression",
                "path",
            ),
            (
                json!({"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "'a string'"}}]}),
                "mutations[0].applyConfiguration.expression",
                "must be an object",
            ),
            (
                json!({"variables": [{"name": "x", "expression": "object.spec.nodeName"}]}),
                "variables[0].expression",
                "nodeName",
            ),
        ] {
            let err = document(doc.clone())
                .decorate(&inputs(), gpu_pod())
                .unwrap_err();
            assert_eq!(err.path, path, "{doc}");
            assert!(err.message.contains(says), "{doc}: {}", err.message);
        }
    }

    #[test]
    fn multi_byte_text_goes_through_unchanged() {
        let doc = document(
            json!({"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{metadata: Object.metadata{annotations: {'note': 'équipe 日本 ' + string(size('日本'))}}}"}}]}),
        );
        let out = doc.decorate(&inputs(), gpu_pod()).unwrap();
        assert_eq!(out["metadata"]["annotations"]["note"], "équipe 日本 2");
    }
}
