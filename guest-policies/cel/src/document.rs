//! The CEL policy document as a platform team writes it: the policy's settings, in the shape
//! of `MutatingAdmissionPolicy`'s spec wherever it applies.
//!
//! ```yaml
//! matchConditions:                  # all must hold, or the policy leaves the pod alone
//! - name: gpu-pods
//!   expression: "object.spec.containers.exists(c, 'nvidia.com/gpu' in c.?resources.?limits.orValue({}))"
//! variables:                        # evaluated in order; `variables.NAME` in later expressions
//! - name: team
//!   expression: "job.labels.?team.orValue('none')"
//! mutations:                        # the pod, in order, each seeing the previous one's result
//! - patchType: ApplyConfiguration
//!   applyConfiguration:
//!     expression: "Object{metadata: Object.metadata{labels: {'team': variables.team}}}"
//! - patchType: JSONPatch
//!   jsonPatch:
//!     expression: "[JSONPatch{op: 'add', path: '/spec/tolerations/-', value: {'key': 'gpu', 'operator': 'Exists'}}]"
//! resourceMutations: []             # one container's requirements (the resources hook)
//! verdicts:                         # the classification: the first whose condition holds
//! - condition: "object.status.?reason.orValue('') == 'Evicted'"
//!   phase: retryable-failure
//!   reason: Evicted
//!   messageExpression: "'evicted from ' + object.spec.nodeName"
//! ```
//!
//! Differences from the upstream type: no `matchConstraints`, bindings or `paramKind` (the
//! operator already knows the object is a TFJob pod, and the manifest's `selector` chooses the
//! jobs); no `reinvocationPolicy` (each hook runs once); `failurePolicy`, which a ConfigMap's
//! document may carry as upstream's does, is taken into the policy's manifest by the operator
//! and never reaches the evaluator; `resourceMutations` and `verdicts` are this operator's.
//! Unknown fields are refused, naming the field, so a misspelt key never silently does nothing.

use serde::Deserialize;
use tfjob_policy_logic::verdict::{FailureKind, Phase};

/// The whole document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelDocument {
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub mutations: Vec<Mutation>,
    #[serde(default)]
    pub resource_mutations: Vec<Mutation>,
    #[serde(default)]
    pub verdicts: Vec<VerdictRule>,
}

/// A match condition or a variable: a name and an expression.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedExpression {
    pub name: String,
    pub expression: String,
}

/// How a mutation's expression patches its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum PatchType {
    /// The expression returns an `Object{...}` merged as server-side apply merges.
    ApplyConfiguration,
    /// The expression returns a list of `JSONPatch{op, path, value, from}` (RFC 6902).
    #[serde(rename = "JSONPatch")]
    JsonPatch,
}

/// One mutation: its patch type and the expression of that type.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mutation {
    pub patch_type: PatchType,
    pub apply_configuration: Option<Expression>,
    pub json_patch: Option<Expression>,
}

/// `{expression: ...}`, as `applyConfiguration` and `jsonPatch` hold it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expression {
    pub expression: String,
}

/// One rule of the classification.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerdictRule {
    /// When it applies: a boolean expression.
    pub condition: String,
    pub phase: Phase,
    pub reason: String,
    /// A fixed message; `messageExpression` wins when both are set.
    #[serde(default)]
    pub message: String,
    pub message_expression: Option<String>,
    /// Whose fault a failure is [default: user].
    pub kind: Option<FailureKind>,
}

/// Why a document was refused before any expression was compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DocumentError(pub String);

impl CelDocument {
    /// Reads the document from the settings' JSON text (empty: the empty document, which
    /// changes nothing). An error names the field where it went wrong.
    pub fn parse(settings: &str) -> Result<CelDocument, DocumentError> {
        if settings.trim().is_empty() {
            return Ok(CelDocument::default());
        }
        let mut de = serde_json::Deserializer::from_str(settings);
        let document: CelDocument = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let at = e.path().to_string();
            DocumentError(if at == "." {
                e.inner().to_string()
            } else {
                format!("{at}: {}", e.inner())
            })
        })?;
        de.end()
            .map_err(|e| DocumentError(format!("after the document: {e}")))?;
        Ok(document)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_shape_reads_as_written() {
        let doc = CelDocument::parse(
            r#"{"matchConditions": [{"name": "gpu", "expression": "true"}],
                "variables": [{"name": "team", "expression": "'ml'"}],
                "mutations": [
                  {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}},
                  {"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}
                ],
                "verdicts": [{"condition": "true", "phase": "permanent-failure", "reason": "OOMKilled",
                              "messageExpression": "'x'", "kind": "user"}]}"#,
        )
        .unwrap();
        assert_eq!(doc.match_conditions[0].name, "gpu");
        assert_eq!(doc.mutations[1].patch_type, PatchType::JsonPatch);
        assert_eq!(doc.verdicts[0].phase, Phase::PermanentFailure);
        assert_eq!(CelDocument::parse("").unwrap(), CelDocument::default());
        assert_eq!(CelDocument::parse("{}").unwrap(), CelDocument::default());
    }

    #[test]
    fn unknown_and_misspelt_fields_are_refused_by_name() {
        for (text, named) in [
            (r#"{"mutation": []}"#, "mutation"),
            (r#"{"mutations": [{"patchType": "Merge"}]}"#, "Merge"),
            (
                r#"{"variables": [{"name": "a", "expresion": "1"}]}"#,
                "expresion",
            ),
            (
                r#"{"verdicts": [{"condition": "true", "phase": "failed", "reason": "x"}]}"#,
                "failed",
            ),
        ] {
            let err = CelDocument::parse(text).unwrap_err().to_string();
            assert!(err.contains(named), "{text}: {err}");
        }
    }
}
