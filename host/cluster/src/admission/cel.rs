//! Admission of custom resources by their CRD's schema, as a real API server does it without
//! webhooks: the `x-kubernetes-validations` CEL rules (with `oldSelf` for transition rules on
//! update) and the bounds CEL's cost estimate relies on (`maxItems`, `maxLength`,
//! `maxProperties`), plus `required`, `minimum`/`maximum` and `enum`.
//!
//! A schema is compiled once, when its CRD is served ([`SchemaRules::compile`]); a rule that does
//! not compile refuses the CRD itself, naming the rule's path ([`check_crd`]). Each create,
//! update and patch then walks the object along the compiled schema ([`SchemaRules::validate`])
//! and answers with the causes a real server gives: the field path (the rule's node plus its
//! `fieldPath`), the reason and the message (`messageExpression`, else `message`, else
//! `failed rule: RULE`). Real servers' rules hold here too: a rule does not run on a null value;
//! a transition rule runs on update only, where an old value correlates (object properties and
//! map keys; list items never, so a transition rule under a list is refused); and a value that
//! an update leaves unchanged is not judged again (ratcheting), so an object stored before a
//! rule existed can still be written. Not modelled: the cost budget (the bounds keep the work
//! small), `x-kubernetes-list-type: map` correlation, `optionalOldSelf` (refused) and CEL type
//! checking (a misspelled field fails when a rule runs, not when the CRD is applied).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

use crate::error::StatusCause;

/// The reasons a rule may give (what Kubernetes allows in `reason`).
const REASONS: [&str; 4] = [
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// A rule or schema that cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: Invalid value: {value:?}: {message}")]
pub struct CompileError {
    /// Where in the schema, e.g. `openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`.
    pub path: String,
    /// The offending text (a rule, a reason, a field path).
    pub value: String,
    pub message: String,
}

/// The CEL environment of every rule: the standard library with its macros (`has`, `all`,
/// `exists`, `exists_one`, `map`, `filter`) and the strings extension Kubernetes also offers
/// (`lowerAscii`, `join`, `split`, ...). Built once: it holds no state.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    Arc::clone(ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings)
            .expect("the strings extension declares no function twice");
        Arc::new(env)
    }))
}

/// One compiled `x-kubernetes-validations` entry.
struct CompiledRule {
    rule: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    /// `fieldPath`, already in the notation of field paths (`.a.b`, `[key]`).
    field_path: String,
    reason: String,
    /// Whether the rule reads `oldSelf`: it then runs on updates only.
    transition: bool,
}

/// Bounds and rules of one schema node, and its children.
#[derive(Default)]
struct Node {
    rules: Vec<CompiledRule>,
    properties: BTreeMap<String, Node>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    required: Vec<String>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    max_items: Option<usize>,
    max_length: Option<usize>,
    max_properties: Option<usize>,
    enumeration: Option<Vec<Value>>,
}

/// The compiled admission rules of one served CRD version.
pub struct SchemaRules {
    root: Node,
}

impl SchemaRules {
    /// Compiles an `openAPIV3Schema`. Errors name the schema path under `openAPIV3Schema`.
    pub fn compile(schema: &Value) -> Result<SchemaRules, CompileError> {
        Ok(SchemaRules {
            root: compile_node(schema, "openAPIV3Schema", true)?,
        })
    }

    /// Every cause that makes `object` invalid; `old` is the stored object on update.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<StatusCause> {
        // The root sees apiVersion, kind, spec, status, and of metadata only name and
        // generateName, as on a real server.
        let visible = |o: &Value| {
            let mut o = o.clone();
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.retain(|k, _| k == "name" || k == "generateName");
            }
            o
        };
        let object = visible(object);
        let old = old.map(visible);
        let mut causes = Vec::new();
        walk(&self.root, &object, old.as_ref(), "", &mut causes);
        causes
    }
}

/// Checks that every served version's rules compile: what applying a CRD is refused for.
pub fn check_crd(crd: &Value) -> Result<(), StatusCause> {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let versions: Vec<&Value> = versions.collect();
    // kube-apiserver keeps a schema all versions share once, as the old `spec.validation`, and
    // names its fields from there.
    let shared = versions
        .windows(2)
        .all(|pair| pair[0].pointer("/schema") == pair[1].pointer("/schema"));
    for (i, version) in versions.iter().enumerate() {
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema")
            && let Err(e) = SchemaRules::compile(schema)
        {
            let at = if shared {
                "spec.validation".to_owned()
            } else {
                format!("spec.versions[{i}].schema")
            };
            return Err(StatusCause {
                reason: "FieldValueInvalid".into(),
                field: format!("{at}.{}", e.path),
                message: format!("Invalid value: {:?}: {}", e.value, e.message),
            });
        }
    }
    Ok(())
}

fn compile_node(schema: &Value, path: &str, correlatable: bool) -> Result<Node, CompileError> {
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    let count = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    };
    let mut node = Node {
        required: schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        minimum: number("minimum"),
        maximum: number("maximum"),
        max_items: count("maxItems"),
        max_length: count("maxLength"),
        max_properties: count("maxProperties"),
        enumeration: schema.get("enum").and_then(Value::as_array).cloned(),
        ..Node::default()
    };
    let rules = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for (i, rule) in rules.enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        node.rules
            .push(compile_rule(rule, &at, schema, correlatable)?);
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            let child_path = format!("{path}.properties[{name}]");
            node.properties.insert(
                name.clone(),
                compile_node(child, &child_path, correlatable)?,
            );
        }
    }
    if let Some(child) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        let child_path = format!("{path}.additionalProperties");
        node.additional = Some(Box::new(compile_node(child, &child_path, correlatable)?));
    }
    if let Some(child) = schema.get("items").filter(|v| v.is_object()) {
        // Items of a plain list have no old value to compare with.
        let child_path = format!("{path}.items");
        node.items = Some(Box::new(compile_node(child, &child_path, false)?));
    }
    Ok(node)
}

fn compile_rule(
    rule: &Value,
    at: &str,
    schema: &Value,
    correlatable: bool,
) -> Result<CompiledRule, CompileError> {
    let text = |key: &str| rule.get(key).and_then(Value::as_str).map(str::to_owned);
    let fail = |field: &str, value: &str, message: String| CompileError {
        path: format!("{at}.{field}"),
        value: value.to_owned(),
        message,
    };
    let source = text("rule").unwrap_or_default();
    let program = env()
        .compile(&source)
        .map_err(|e| fail("rule", &source, format!("compilation failed: {e}")))?;
    let transition = program.references().has_variable("oldSelf");
    if transition && !correlatable {
        return Err(fail(
            "rule",
            &source,
            "oldSelf cannot be used on the uncorrelatable portion of the schema within a list"
                .into(),
        ));
    }
    if rule.get("optionalOldSelf").and_then(Value::as_bool) == Some(true) {
        return Err(fail(
            "optionalOldSelf",
            "true",
            "not supported by this API server".into(),
        ));
    }
    let message_expression = match text("messageExpression") {
        Some(expr) => Some(env().compile(&expr).map_err(|e| {
            fail(
                "messageExpression",
                &expr,
                format!("compilation failed: {e}"),
            )
        })?),
        None => None,
    };
    let reason = text("reason").unwrap_or_else(|| REASONS[0].to_owned());
    if !REASONS.contains(&reason.as_str()) {
        return Err(fail(
            "reason",
            &reason,
            format!("must be one of {}", REASONS.join(", ")),
        ));
    }
    let field_path = match text("fieldPath") {
        Some(p) => parse_field_path(&p, schema).map_err(|m| fail("fieldPath", &p, m))?,
        None => String::new(),
    };
    Ok(CompiledRule {
        rule: source,
        program,
        message: text("message").filter(|m| !m.trim().is_empty()),
        message_expression,
        field_path,
        reason,
        transition,
    })
}

/// A rule's `fieldPath` (`.spec.replicas`, `.labels['app']`, `.items[0]`) in field-path
/// notation (`.spec.replicas`, `.labels[app]`), checked against the schema it starts from.
fn parse_field_path(path: &str, schema: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut node = schema;
    let mut rest = path;
    if rest.is_empty() {
        return Err("must not be empty".into());
    }
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            if name.is_empty() {
                return Err("a '.' must be followed by a field name".into());
            }
            node = node
                .pointer(&format!("/properties/{name}"))
                .or_else(|| node.get("additionalProperties").filter(|v| v.is_object()))
                .ok_or_else(|| format!("does not refer to a field of the schema: {name}"))?;
            out.push('.');
            out.push_str(name);
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| "an opening '[' has no closing ']'".to_owned())?;
            let key = after[..end].trim_matches(|c| c == '\'' || c == '"');
            node = node
                .get("additionalProperties")
                .or_else(|| node.get("items"))
                .filter(|v| v.is_object())
                .ok_or_else(|| format!("[{key}] does not refer to a map or list of the schema"))?;
            out.push_str(&format!("[{key}]"));
            rest = &after[end + 1..];
        } else {
            return Err("must start each step with '.' or '['".into());
        }
    }
    Ok(out)
}

/// The path of a property below `path`.
fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn walk(node: &Node, value: &Value, old: Option<&Value>, path: &str, out: &mut Vec<StatusCause>) {
    // Rules and bounds do not judge null, and an unchanged value is not judged again.
    if value.is_null() || old == Some(value) {
        return;
    }
    check_bounds(node, value, path, out);
    for rule in &node.rules {
        if rule.transition && old.is_none_or(Value::is_null) {
            continue;
        }
        if let Some(cause) = evaluate(rule, value, old, path) {
            out.push(cause);
        }
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let old_child = old.and_then(|o| o.get(key));
                if let Some(n) = node.properties.get(key) {
                    walk(n, child, old_child, &child_path(path, key), out);
                } else if let Some(n) = &node.additional {
                    walk(n, child, old_child, &format!("{path}[{key}]"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(n) = &node.items {
                for (i, child) in items.iter().enumerate() {
                    walk(n, child, None, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The schema's own bounds, worded as a real server words them.
fn check_bounds(node: &Node, value: &Value, path: &str, out: &mut Vec<StatusCause>) {
    let mut cause = |reason: &str, field: String, message: String| {
        out.push(StatusCause {
            reason: reason.into(),
            field,
            message,
        })
    };
    let shown = if path.is_empty() { "<nil>" } else { path };
    // maxProperties and maxItems read alike: "Too many: N: must have at most M items".
    let size = match value {
        Value::Object(map) => Some((map.len(), node.max_properties)),
        Value::Array(items) => Some((items.len(), node.max_items)),
        _ => None,
    };
    if let Some((n, Some(max))) = size
        && n > max
    {
        cause(
            "FieldValueTooMany",
            shown.into(),
            format!("Too many: {n}: must have at most {max} items"),
        );
    }
    match value {
        Value::Object(map) => {
            for key in node.required.iter().filter(|k| !map.contains_key(*k)) {
                cause(
                    "FieldValueRequired",
                    child_path(path, key),
                    "Required value".into(),
                );
            }
        }
        Value::String(s) => {
            if let Some(max) = node.max_length.filter(|max| s.chars().count() > *max) {
                cause(
                    "FieldValueTooLong",
                    shown.into(),
                    format!("Too long: may not be more than {max} bytes"),
                );
            }
        }
        Value::Number(n) => {
            let v = n.as_f64().unwrap_or_default();
            let below = node.minimum.filter(|min| v < *min).map(|b| ("greater", b));
            let above = node.maximum.filter(|max| v > *max).map(|b| ("less", b));
            for (side, bound) in below.into_iter().chain(above) {
                cause(
                    "FieldValueInvalid",
                    shown.into(),
                    format!(
                        "Invalid value: {n}: {shown} in body should be {side} than or equal to {bound}"
                    ),
                );
            }
        }
        _ => {}
    }
    if let Some(allowed) = &node.enumeration
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed
            .iter()
            .filter(|v| !v.is_null())
            .map(Value::to_string)
            .collect();
        cause(
            "FieldValueNotSupported",
            shown.into(),
            format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        );
    }
}

/// A value as the API server shows it in a field error: a scalar as JSON (a string quoted), an
/// object or a list not at all.
fn shown_value(value: &Value) -> Option<String> {
    match value {
        Value::Object(_) | Value::Array(_) => None,
        scalar => Some(scalar.to_string()),
    }
}

/// Runs one rule; the cause when it does not hold (or cannot be evaluated).
fn evaluate(
    rule: &CompiledRule,
    value: &Value,
    old: Option<&Value>,
    path: &str,
) -> Option<StatusCause> {
    let mut context = Context::with_env(env());
    context.add_variable_from_value("self", to_cel(value));
    if rule.transition
        && let Some(old) = old
    {
        context.add_variable_from_value("oldSelf", to_cel(old));
    }
    let message = match rule.program.execute(&context) {
        Ok(Cel::Bool(true)) => return None,
        Ok(Cel::Bool(false)) => failure_message(rule, &context),
        Ok(other) => format!(
            "rule returned {:?} instead of a bool, evaluating rule: {}",
            other.type_of(),
            rule.rule
        ),
        Err(e) => format!("{e} evaluating rule: {}", rule.rule),
    };
    let field = format!("{path}{}", rule.field_path);
    let field = field.strip_prefix('.').unwrap_or(&field);
    let field = if field.is_empty() { "<nil>" } else { field };
    // As kube-apiserver v1.37 words it: a scalar's value is shown, an object's or a list's is
    // left out, and a duplicate names its value alone, without the rule's message.
    let shown = shown_value(value);
    let message = match (rule.reason.as_str(), shown) {
        ("FieldValueForbidden", _) => format!("Forbidden: {message}"),
        ("FieldValueRequired", _) => format!("Required value: {message}"),
        ("FieldValueDuplicate", Some(value)) => format!("Duplicate value: {value}"),
        ("FieldValueDuplicate", None) => "Duplicate value".to_owned(),
        (_, Some(value)) => format!("Invalid value: {value}: {message}"),
        (_, None) => format!("Invalid value: {message}"),
    };
    Some(StatusCause {
        reason: rule.reason.clone(),
        field: field.to_owned(),
        message,
    })
}

/// `messageExpression` when it gives a usable one-line text, else `message`, else the rule:
/// the fallbacks of a real server.
fn failure_message(rule: &CompiledRule, context: &Context) -> String {
    let computed = rule
        .message_expression
        .as_ref()
        .and_then(|p| p.execute(context).ok())
        .and_then(|v| match v {
            Cel::String(s) if !s.trim().is_empty() && !s.contains('\n') => Some(s.to_string()),
            _ => None,
        });
    computed
        .or_else(|| rule.message.clone())
        .unwrap_or_else(|| format!("failed rule: {}", rule.rule))
}

/// A JSON value as CEL sees it: integers as `int` (`uint` only past `i64`), objects as maps.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => Cel::from(
            map.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Cel>>(),
        ),
    }
}

/// A test CRD, `widgets.example.com`, whose `spec.field` (an object, or with `at_items` a list
/// of objects) carries `rule`.
#[cfg(test)]
pub(crate) fn widget_crd(rule: Value, at_items: bool) -> Value {
    use serde_json::json;
    let field = if at_items {
        json!({"type": "array", "items": {"type": "object", "x-kubernetes-validations": [rule]}})
    } else {
        json!({"type": "object", "properties": {"replicas": {"type": "integer"}}, "x-kubernetes-validations": [rule]})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {"field": field}}},
            }}}],
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(schema: Value) -> SchemaRules {
        SchemaRules::compile(&schema).expect("the test schema compiles")
    }

    /// `field: message` of every cause.
    fn lines(causes: &[StatusCause]) -> Vec<String> {
        causes.iter().map(StatusCause::line).collect()
    }

    #[test]
    fn a_rule_that_holds_passes_and_one_that_fails_names_its_field() {
        let r = rules(json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "properties": {"replicas": {"type": "integer"}},
                "x-kubernetes-validations": [{
                    "rule": "!has(self.replicas) || self.replicas <= 3",
                    "message": "at most 3",
                    "fieldPath": ".replicas",
                }],
            }},
        }));
        assert!(
            r.validate(&json!({"spec": {"replicas": 3}}), None)
                .is_empty()
        );
        assert!(r.validate(&json!({"spec": {}}), None).is_empty());
        let causes = r.validate(&json!({"spec": {"replicas": 4}}), None);
        assert_eq!(lines(&causes), ["spec.replicas: Invalid value: at most 3"]);
        assert_eq!(causes[0].reason, "FieldValueInvalid");
    }

    #[test]
    fn rules_do_not_run_on_null_or_absent_values() {
        let r = rules(json!({
            "type": "object",
            "properties": {"name": {"type": "string", "nullable": true,
                "x-kubernetes-validations": [{"rule": "self.startsWith('a')"}]}},
        }));
        assert!(r.validate(&json!({"name": null}), None).is_empty());
        assert!(r.validate(&json!({}), None).is_empty());
        assert_eq!(
            lines(&r.validate(&json!({"name": "b"}), None)),
            ["name: Invalid value: \"b\": failed rule: self.startsWith('a')"]
        );
    }

    #[test]
    fn transition_rules_see_old_self_on_update_only() {
        let r = rules(json!({
            "type": "object",
            "properties": {"spec": {"type": "object",
                "properties": {"queue": {"type": "string"}, "suspend": {"type": "boolean"}},
                "x-kubernetes-validations": [{
                    "rule": "(has(self.suspend) && self.suspend) || (has(self.queue) ? self.queue : '') == (has(oldSelf.queue) ? oldSelf.queue : '')",
                    "message": "may only change while suspended",
                    "fieldPath": ".queue",
                }],
            }},
        }));
        let running = json!({"spec": {"queue": "a"}});
        // On create there is no old object: the rule does not run.
        assert!(
            r.validate(&json!({"spec": {"queue": "b"}}), None)
                .is_empty()
        );
        assert_eq!(
            lines(&r.validate(&json!({"spec": {"queue": "b"}}), Some(&running))),
            ["spec.queue: Invalid value: may only change while suspended"]
        );
        assert!(
            r.validate(
                &json!({"spec": {"queue": "b", "suspend": true}}),
                Some(&running)
            )
            .is_empty()
        );
        // Dropping the queue is a change too.
        assert_eq!(r.validate(&json!({"spec": {}}), Some(&running)).len(), 1);
    }

    #[test]
    fn an_unchanged_value_is_not_judged_again() {
        let r = rules(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-validations": [{"rule": "has(self.image)"}]},
                "note": {"type": "string"},
            },
        }));
        let stored = json!({"spec": {}, "note": "a"});
        assert_eq!(r.validate(&stored, None).len(), 1);
        assert!(
            r.validate(&json!({"spec": {}, "note": "b"}), Some(&stored))
                .is_empty()
        );
        assert_eq!(
            r.validate(&json!({"spec": {"x": 1}}), Some(&stored)).len(),
            1
        );
    }

    #[test]
    fn message_expression_wins_and_falls_back_to_message() {
        let schema = |expression: &str| {
            json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "x-kubernetes-validations": [{
                    "rule": "self.n < 10",
                    "message": "too big",
                    "messageExpression": expression,
                    "reason": "FieldValueForbidden",
                }],
            })
        };
        let big = json!({"n": 12});
        assert_eq!(
            lines(&rules(schema("'n is ' + string(self.n) + ', at most 9'")).validate(&big, None)),
            ["<nil>: Forbidden: n is 12, at most 9"]
        );
        // An expression that fails or gives no text leaves the message.
        for fallback in ["self.missing", "''", "1"] {
            assert_eq!(
                lines(&rules(schema(fallback)).validate(&big, None)),
                ["<nil>: Forbidden: too big"],
                "{fallback}"
            );
        }
    }

    #[test]
    fn nested_maps_and_lists_give_kubernetes_paths() {
        let r = rules(json!({
            "type": "object",
            "properties": {"groups": {
                "type": "object",
                "maxProperties": 2,
                "x-kubernetes-validations": [{
                    "rule": "self.all(k, k.lowerAscii() == k)",
                    "messageExpression": "'keys must be lower case: ' + self.filter(k, k.lowerAscii() != k).join(', ')",
                }],
                "additionalProperties": {"type": "object", "properties": {"members": {
                    "type": "array", "maxItems": 2,
                    "items": {"type": "object",
                        "properties": {"name": {"type": "string", "maxLength": 3}},
                        "x-kubernetes-validations": [{"rule": "self.name != 'x'", "fieldPath": ".name", "reason": "FieldValueRequired", "message": "not x"}]},
                }}},
            }},
        }));
        let causes = r.validate(
            &json!({"groups": {"A": {"members": [{"name": "ok"}, {"name": "x"}, {"name": "long"}]}}}),
            None,
        );
        assert_eq!(
            lines(&causes),
            [
                "groups: Invalid value: keys must be lower case: A",
                "groups[A].members: Too many: 3: must have at most 2 items",
                "groups[A].members[1].name: Required value: not x",
                "groups[A].members[2].name: Too long: may not be more than 3 bytes",
            ]
        );
        let too_many = r.validate(&json!({"groups": {"a": {}, "b": {}, "c": {}}}), None);
        assert_eq!(
            lines(&too_many),
            ["groups: Too many: 3: must have at most 2 items"]
        );
    }

    #[test]
    fn schema_bounds_are_checked_as_a_real_server_words_them() {
        let r = rules(json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {"type": "object", "properties": {
                "count": {"type": "integer", "minimum": 0.0, "maximum": 5.0},
                "mode": {"type": "string", "nullable": true, "enum": ["On", "Off", null]},
            }}},
        }));
        assert_eq!(
            lines(&r.validate(&json!({}), None)),
            ["spec: Required value"]
        );
        assert_eq!(
            lines(&r.validate(&json!({"spec": {"count": -1, "mode": "Maybe"}}), None)),
            [
                "spec.count: Invalid value: -1: spec.count in body should be greater than or equal to 0",
                "spec.mode: Unsupported value: \"Maybe\": supported values: \"On\", \"Off\"",
            ]
        );
        assert_eq!(r.validate(&json!({"spec": {"count": 6}}), None).len(), 1);
        assert!(
            r.validate(&json!({"spec": {"count": 5, "mode": null}}), None)
                .is_empty()
        );
    }

    #[test]
    fn an_evaluation_error_rejects_and_says_why() {
        let r = rules(
            json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.spec.replicas > 0"}]}),
        );
        let causes = r.validate(&json!({"metadata": {"name": "a"}}), None);
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0]
                .message
                .contains("evaluating rule: self.spec.replicas > 0"),
            "{causes:?}"
        );
    }

    #[test]
    fn the_root_sees_only_the_name_of_metadata() {
        let r = rules(json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('job-')", "message": "bad name"},
            {"rule": "!has(self.metadata.labels)", "message": "labels are hidden"},
        ]}));
        let object = json!({"metadata": {"name": "job-1", "labels": {"a": "b"}}});
        assert!(r.validate(&object, None).is_empty());
        assert_eq!(
            lines(&r.validate(&json!({"metadata": {"name": "x"}}), None)),
            ["<nil>: Invalid value: bad name"]
        );
    }

    #[test]
    fn a_crd_whose_rule_does_not_compile_is_refused_with_the_rule_path() {
        let field_path = "spec.validation.openAPIV3Schema.properties[spec].properties[field]";
        for (rule, at_items, field) in [
            (json!({"rule": "self.replicas >"}), false, "rule"),
            (json!({"rule": "self == oldSelf"}), true, "rule"),
            (
                json!({"rule": "true", "messageExpression": "'a' +"}),
                false,
                "messageExpression",
            ),
            (
                json!({"rule": "true", "reason": "FieldValueTooLong"}),
                false,
                "reason",
            ),
            (
                json!({"rule": "true", "fieldPath": ".nope"}),
                false,
                "fieldPath",
            ),
        ] {
            let cause = check_crd(&widget_crd(rule.clone(), at_items)).expect_err("refused");
            let items = if at_items { ".items" } else { "" };
            assert_eq!(
                cause.field,
                format!("{field_path}{items}.x-kubernetes-validations[0].{field}"),
                "{rule}"
            );
            assert_eq!(cause.reason, "FieldValueInvalid");
        }
        assert_eq!(
            check_crd(&widget_crd(
                json!({"rule": "self.replicas >= 0", "fieldPath": ".replicas"}),
                false
            )),
            Ok(())
        );
    }
}
