//! A document compiled: every expression parsed once, when the policy version is activated
//! (`validate-settings`; the operator keeps the guest's memory from then on, so calls never
//! parse), and the environment its expressions run in.
//!
//! A document that cannot run is refused here, each error naming the expression by its place
//! in the document (`mutations[1].jsonPatch.expression`) and, for a syntax error, the line and
//! column with the expression and a caret under the position. Also refused: a mutation whose
//! expression is not under the key its `patchType` names, variable names that are not CEL
//! identifiers or are given twice, match condition names that are empty or given twice, an
//! expression longer than [`MAX_EXPRESSION_BYTES`], and more than [`MAX_EXPRESSIONS`]
//! expressions in all (a document of thousands is a mistake or an attack; either way it would
//! cost every call).

use std::collections::BTreeSet;
use std::sync::Arc;

use cel::{Env, Program};
use tfjob_policy_logic::verdict::{FailureKind, Phase};

use crate::document::{CelDocument, Mutation, PatchType};
use crate::library;

/// The most expressions a document holds.
pub const MAX_EXPRESSIONS: usize = 256;
/// The longest expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 16 << 10;

/// Why a document does not compile: where, and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CompileError {
    /// The place in the document, e.g. `variables[0].expression`.
    pub path: String,
    pub message: String,
}

/// An expression and where it is in the document.
#[derive(Debug)]
pub struct Compiled {
    pub path: String,
    pub program: Program,
}

/// A named expression (a match condition or a variable).
#[derive(Debug)]
pub struct Named {
    pub name: String,
    pub expression: Compiled,
}

/// A mutation: how its result patches, and the expression.
#[derive(Debug)]
pub struct CompiledMutation {
    pub patch_type: PatchType,
    pub expression: Compiled,
}

/// A verdict rule.
#[derive(Debug)]
pub struct CompiledVerdict {
    pub condition: Compiled,
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    pub message_expression: Option<Compiled>,
    pub kind: FailureKind,
}

/// The compiled document.
pub struct CompiledDocument {
    pub env: Arc<Env>,
    /// The parts of the document (`matchConditions`, `mutations`, ...) with an expression that
    /// reads `namespaceObject`: only a call that evaluates one reads the job's Namespace (a
    /// read the manifest must declare).
    namespace_readers: BTreeSet<String>,
    /// The functions the expressions call: a call registers only the libraries they use.
    pub functions: BTreeSet<String>,
    pub match_conditions: Vec<Named>,
    pub variables: Vec<Named>,
    pub mutations: Vec<CompiledMutation>,
    pub resource_mutations: Vec<CompiledMutation>,
    pub verdicts: Vec<CompiledVerdict>,
}

/// The hook a call is for: which part of the document it evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Decorate,
    Resources,
    Classify,
}

impl Hook {
    /// The part of the document the hook evaluates besides the match conditions and variables.
    fn part(self) -> &'static str {
        match self {
            Hook::Decorate => "mutations",
            Hook::Resources => "resourceMutations",
            Hook::Classify => "verdicts",
        }
    }
}

impl CompiledDocument {
    /// Whether a call of `hook` evaluates an expression that reads `namespaceObject`: the
    /// match conditions and variables run for every hook, each hook's own part for it alone.
    pub fn reads_namespace(&self, hook: Hook) -> bool {
        ["matchConditions", "variables", hook.part()]
            .iter()
            .any(|part| self.namespace_readers.contains(*part))
    }

    /// Whether an expression calls one of `names`.
    pub fn calls_any(&self, names: &[&str]) -> bool {
        names.iter().any(|name| self.functions.contains(*name))
    }
}

impl std::fmt::Debug for CompiledDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledDocument")
            .field("match_conditions", &self.match_conditions.len())
            .field("variables", &self.variables.len())
            .field("mutations", &self.mutations.len())
            .field("resource_mutations", &self.resource_mutations.len())
            .field("verdicts", &self.verdicts.len())
            .finish()
    }
}

/// Compiles `document`.
pub fn compile(document: &CelDocument) -> Result<CompiledDocument, CompileError> {
    let count = document.match_conditions.len()
        + document.variables.len()
        + document.mutations.len()
        + document.resource_mutations.len()
        + document.verdicts.len() * 2;
    if count > MAX_EXPRESSIONS {
        return Err(CompileError {
            path: "document".into(),
            message: format!(
                "{count} expressions; a CEL policy holds at most {MAX_EXPRESSIONS} (split it into several policies)"
            ),
        });
    }
    let mut structs = BTreeSet::new();
    let mut namespace_readers = BTreeSet::new();
    let mut functions = BTreeSet::new();
    let mut expression = |path: String, source: &str| -> Result<Compiled, CompileError> {
        let program = parse(&path, source)?;
        library::struct_names(&program, &mut structs);
        let references = program.references();
        if references.has_variable("namespaceObject") {
            let part = path.split(['[', '.']).next().unwrap_or_default();
            namespace_readers.insert(part.to_owned());
        }
        functions.extend(references.functions().into_iter().map(str::to_owned));
        Ok(Compiled { path, program })
    };
    let match_conditions = named(
        &document.match_conditions,
        "matchConditions",
        &mut expression,
        false,
    )?;
    let variables = named(&document.variables, "variables", &mut expression, true)?;
    let mutations = compile_mutations(&document.mutations, "mutations", &mut expression)?;
    let resource_mutations = compile_mutations(
        &document.resource_mutations,
        "resourceMutations",
        &mut expression,
    )?;
    let mut verdicts = Vec::with_capacity(document.verdicts.len());
    for (i, rule) in document.verdicts.iter().enumerate() {
        if rule.reason.is_empty() {
            return Err(CompileError {
                path: format!("verdicts[{i}].reason"),
                message: "must not be empty".into(),
            });
        }
        verdicts.push(CompiledVerdict {
            condition: expression(format!("verdicts[{i}].condition"), &rule.condition)?,
            phase: rule.phase,
            reason: rule.reason.clone(),
            message: rule.message.clone(),
            message_expression: rule
                .message_expression
                .as_deref()
                .map(|source| expression(format!("verdicts[{i}].messageExpression"), source))
                .transpose()?,
            kind: rule.kind.unwrap_or(FailureKind::User),
        });
    }
    let env = library::env(&structs).map_err(|message| CompileError {
        path: "document".into(),
        message,
    })?;
    Ok(CompiledDocument {
        env,
        namespace_readers,
        functions,
        match_conditions,
        variables,
        mutations,
        resource_mutations,
        verdicts,
    })
}

/// Parses one expression, refusing an over-long one.
fn parse(path: &str, source: &str) -> Result<Program, CompileError> {
    let error = |message: String| CompileError {
        path: path.to_owned(),
        message,
    };
    if source.trim().is_empty() {
        return Err(error("must not be empty".into()));
    }
    if source.len() > MAX_EXPRESSION_BYTES {
        return Err(error(format!(
            "{} bytes; an expression holds at most {MAX_EXPRESSION_BYTES}",
            source.len()
        )));
    }
    library::parser_env()
        .compile(source)
        .map_err(|e| error(e.to_string()))
}

fn named(
    entries: &[crate::document::NamedExpression],
    field: &str,
    expression: &mut impl FnMut(String, &str) -> Result<Compiled, CompileError>,
    identifiers: bool,
) -> Result<Vec<Named>, CompileError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let refuse = |message: String| CompileError {
            path: format!("{field}[{i}].name"),
            message,
        };
        if entry.name.is_empty() {
            return Err(refuse("must not be empty".into()));
        }
        if identifiers && !is_identifier(&entry.name) {
            return Err(refuse(format!(
                "{:?} is not a CEL identifier (letters, digits and _, not starting with a digit): \
                 expressions name it as variables.NAME",
                entry.name
            )));
        }
        if !seen.insert(entry.name.as_str()) {
            return Err(refuse(format!("{:?} is given twice", entry.name)));
        }
        out.push(Named {
            name: entry.name.clone(),
            expression: expression(format!("{field}[{i}].expression"), &entry.expression)?,
        });
    }
    Ok(out)
}

fn compile_mutations(
    entries: &[Mutation],
    field: &str,
    expression: &mut impl FnMut(String, &str) -> Result<Compiled, CompileError>,
) -> Result<Vec<CompiledMutation>, CompileError> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, m) in entries.iter().enumerate() {
        let (key, holder, other) = match m.patch_type {
            PatchType::ApplyConfiguration => {
                ("applyConfiguration", &m.apply_configuration, &m.json_patch)
            }
            PatchType::JsonPatch => ("jsonPatch", &m.json_patch, &m.apply_configuration),
        };
        let refuse = |message: String| CompileError {
            path: format!("{field}[{i}]"),
            message,
        };
        if other.is_some() {
            return Err(refuse(format!(
                "patchType {:?} takes {key} alone; remove the other",
                m.patch_type
            )));
        }
        let Some(holder) = holder else {
            return Err(refuse(format!(
                "patchType {:?} needs {key}.expression",
                m.patch_type
            )));
        };
        out.push(CompiledMutation {
            patch_type: m.patch_type,
            expression: expression(format!("{field}[{i}].{key}.expression"), &holder.expression)?,
        });
    }
    Ok(out)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(json: &str) -> Result<CompiledDocument, CompileError> {
        compile(&CelDocument::parse(json).unwrap())
    }

    #[test]
    fn a_syntax_error_names_the_expression_and_points_at_the_position() {
        let err = compiled(
            r#"{"mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add',, path: '/a'}]"}}
            ]}"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "mutations[1].jsonPatch.expression");
        assert!(err.message.contains("<input>:1:"), "{}", err.message);
        assert!(
            err.message
                .contains("| [JSONPatch{op: 'add',, path: '/a'}]"),
            "{}",
            err.message
        );
        assert!(err.message.contains('^'), "{}", err.message);
    }

    #[test]
    fn the_shape_around_expressions_is_checked() {
        for (json, path, says) in [
            (
                r#"{"mutations": [{"patchType": "JSONPatch"}]}"#,
                "mutations[0]",
                "needs jsonPatch.expression",
            ),
            (
                r#"{"mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}, "applyConfiguration": {"expression": "Object{}"}}]}"#,
                "mutations[0]",
                "alone",
            ),
            (
                r#"{"variables": [{"name": "a-b", "expression": "1"}]}"#,
                "variables[0].name",
                "identifier",
            ),
            (
                r#"{"variables": [{"name": "a", "expression": "1"}, {"name": "a", "expression": "2"}]}"#,
                "variables[1].name",
                "twice",
            ),
            (
                r#"{"matchConditions": [{"name": "", "expression": "true"}]}"#,
                "matchConditions[0].name",
                "empty",
            ),
            (
                r#"{"variables": [{"name": "a", "expression": " "}]}"#,
                "variables[0].expression",
                "empty",
            ),
            (
                r#"{"verdicts": [{"condition": "true", "phase": "running", "reason": ""}]}"#,
                "verdicts[0].reason",
                "empty",
            ),
        ] {
            let err = compiled(json).unwrap_err();
            assert_eq!(err.path, path, "{json}");
            assert!(err.message.contains(says), "{json}: {}", err.message);
        }
    }

    #[test]
    fn too_many_or_too_long_expressions_are_refused() {
        let many: Vec<String> = (0..MAX_EXPRESSIONS + 1)
            .map(|i| format!(r#"{{"name": "v{i}", "expression": "{i}"}}"#))
            .collect();
        let err = compiled(&format!(r#"{{"variables": [{}]}}"#, many.join(","))).unwrap_err();
        assert!(err.message.contains("at most 256"), "{}", err.message);
        let long = "1 + ".repeat(MAX_EXPRESSION_BYTES / 4) + "1";
        let err = compiled(&format!(
            r#"{{"variables": [{{"name": "a", "expression": "{long}"}}]}}"#
        ))
        .unwrap_err();
        assert_eq!(err.path, "variables[0].expression");
        assert!(err.message.contains("at most 16384"), "{}", err.message);
    }

    #[test]
    fn struct_literals_are_registered_for_the_document() {
        let doc = compiled(
            r#"{"mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": "Object{spec: Object.spec{tolerations: [Object.spec.tolerations{key: 'gpu'}]}}"}}]}"#,
        )
        .unwrap();
        assert_eq!(doc.mutations.len(), 1);
        assert_eq!(
            doc.mutations[0].expression.path,
            "mutations[0].applyConfiguration.expression"
        );
        assert!(!doc.reads_namespace(Hook::Decorate));
        let reading = compiled(
            r#"{"variables": [{"name": "team", "expression": "namespaceObject.metadata.labels.team"}]}"#,
        )
        .unwrap();
        assert!(
            reading.reads_namespace(Hook::Classify),
            "only a document naming namespaceObject reads it"
        );
    }

    #[test]
    fn a_hook_reads_the_namespace_only_when_its_expressions_name_it() {
        let doc = compiled(
            r#"{"mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {'team': namespaceObject.metadata.labels.team}}}"}}],
                "verdicts": [{"condition": "object.status.phase == 'Failed'", "phase": "permanent-failure",
                              "reason": "Failed"}]}"#,
        )
        .unwrap();
        assert!(doc.reads_namespace(Hook::Decorate));
        assert!(
            !doc.reads_namespace(Hook::Classify) && !doc.reads_namespace(Hook::Resources),
            "the verdicts and resource mutations never name it"
        );
    }
}
