//! The admission rules of the TFJob CRD: `x-kubernetes-validations` CEL rules and the schema
//! bounds that keep their estimated cost finite, written into the generated schema.
//!
//! An API server evaluates these rules itself on create, update and patch, so an invalid TFJob
//! is refused by `kubectl apply` with the field path, without a webhook. They restate what CEL
//! can express of [`crate::validation::validate`] (a conformance test runs both over the same
//! manifests); what CEL cannot see stays a `Failed/FailedValidation` condition.
//!
//! A fact of real API servers shapes them: a CRD whose rules could cost too much is refused.
//! The estimate multiplies each rule's cost by how many times it can run and by the length of
//! the strings it reads, so every list and string a rule walks (in the pod template, whose
//! whole schema the CRD carries) has `maxItems`/`maxLength`, and the replica map
//! `maxProperties` (more than five keys always repeats or misspells a type).

use serde_json::{Map, Value, json};

use crate::labels::{DEFAULT_CONTAINER_NAME, MANAGED_BY_MULTIKUEUE, MANAGED_BY_TRAINING_OPERATOR};

/// At most this many replica types (keys of `tfReplicaSpecs`).
pub const MAX_REPLICA_TYPES: i64 = 5;
/// At most this many containers in a replica's pod template.
pub const MAX_CONTAINERS: i64 = 64;
/// At most this many ports per container.
pub const MAX_PORTS: i64 = 64;
/// A container name is a DNS-1123 label: at most 63 characters.
pub const MAX_CONTAINER_NAME: i64 = 63;
/// A port name is an IANA service name: at most 15 characters.
pub const MAX_PORT_NAME: i64 = 15;
/// training-operator 1.9's bound on `managedBy`.
pub const MAX_MANAGED_BY: i64 = 63;
/// An image reference; no registry accepts longer ones.
pub const MAX_IMAGE: i64 = 4096;

/// One `x-kubernetes-validations` entry and the schema node it belongs to.
struct Rule {
    /// The node, as `.`-separated property names from the root (empty for the root itself);
    /// `*` is a map's values, `[]` a list's items.
    at: String,
    rule: String,
    message: Option<String>,
    message_expression: Option<String>,
    field_path: Option<&'static str>,
    reason: Option<&'static str>,
}

impl Rule {
    fn new(at: impl Into<String>, rule: impl Into<String>) -> Rule {
        Rule {
            at: at.into(),
            rule: rule.into(),
            message: None,
            message_expression: None,
            field_path: None,
            reason: None,
        }
    }

    fn message(mut self, message: impl Into<String>) -> Rule {
        self.message = Some(message.into());
        self
    }

    fn message_expression(mut self, expression: impl Into<String>) -> Rule {
        self.message_expression = Some(expression.into());
        self
    }

    fn field_path(mut self, path: &'static str) -> Rule {
        self.field_path = Some(path);
        self
    }

    fn reason(mut self, reason: &'static str) -> Rule {
        self.reason = Some(reason);
        self
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("rule".into(), json!(self.rule));
        for (key, value) in [
            ("message", self.message.as_deref()),
            ("messageExpression", self.message_expression.as_deref()),
            ("fieldPath", self.field_path),
            ("reason", self.reason),
        ] {
            if let Some(v) = value {
                out.insert(key.into(), json!(v));
            }
        }
        Value::Object(out)
    }
}

const SPEC: &str = "spec";
const REPLICA_SPECS: &str = "spec.tfReplicaSpecs";
const REPLICA: &str = "spec.tfReplicaSpecs.*";
const CONTAINER: &str = "spec.tfReplicaSpecs.*.template.spec.containers.[]";
const MANAGED_BY: &str = "spec.runPolicy.managedBy";

/// The replica types in lower case, as a CEL list: keys match them case-insensitively, as
/// [`crate::ReplicaType::parse_loose`] does.
fn lower_types() -> String {
    let names: Vec<String> = crate::ReplicaType::ALL
        .iter()
        .map(|t| format!("'{}'", t.lower()))
        .collect();
    format!("[{}]", names.join(", "))
}

/// `x`'s queue name, `''` when it names none (a CEL expression over `x`, `self` or `oldSelf`).
fn queue_of(x: &str) -> String {
    format!(
        "(has({x}.runPolicy) && has({x}.runPolicy.schedulingPolicy) && has({x}.runPolicy.schedulingPolicy.queue) ? {x}.runPolicy.schedulingPolicy.queue : '')"
    )
}

/// `x`'s `managedBy`, `''` when unset.
fn managed_by_of(x: &str) -> String {
    format!("(has({x}.runPolicy) && has({x}.runPolicy.managedBy) ? {x}.runPolicy.managedBy : '')")
}

fn rules() -> Vec<Rule> {
    let types = lower_types();
    vec![
        // The root sees `metadata.name` only; no other metadata rule is allowed in a CRD.
        Rule::new(
            "",
            "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        )
        .message("metadata.name must be a DNS-1035 label: at most 63 lower-case alphanumeric characters or '-', starting with a letter and ending with an alphanumeric character"),
        Rule::new(SPEC, "has(self.tfReplicaSpecs) && size(self.tfReplicaSpecs) > 0")
            .message("must contain at least one replica spec")
            .field_path(".tfReplicaSpecs")
            .reason("FieldValueRequired"),
        // Transition rules sit on `spec`, which every update has: `runPolicy` may be absent
        // on one side (a real server defaults it, the embedded one does not).
        Rule::new(
            SPEC,
            format!("{} == {}", managed_by_of("self"), managed_by_of("oldSelf")),
        )
        .message("field is immutable")
        .field_path(".runPolicy.managedBy"),
        Rule::new(
            SPEC,
            format!(
                "(has(self.runPolicy) && has(self.runPolicy.suspend) && self.runPolicy.suspend == true) || {} == {}",
                queue_of("self"),
                queue_of("oldSelf")
            ),
        )
        .message("may only change while the job is suspended")
        .field_path(".runPolicy.schedulingPolicy.queue"),
        Rule::new(
            MANAGED_BY,
            format!("self in ['{MANAGED_BY_TRAINING_OPERATOR}', '{MANAGED_BY_MULTIKUEUE}']"),
        )
        .message(format!(
            "must be \"{MANAGED_BY_TRAINING_OPERATOR}\" or \"{MANAGED_BY_MULTIKUEUE}\""
        ))
        .message_expression(format!(
            "'unsupported value \"' + self + '\": must be \"{MANAGED_BY_TRAINING_OPERATOR}\" or \"{MANAGED_BY_MULTIKUEUE}\"'"
        )),
        // A static message: one naming the unknown keys would join map keys, whose length no
        // structural schema can bound, and a real API server refuses the whole CRD for that
        // expression's estimated cost (over 100 times its budget). The operator's own
        // validation names the key (`spec.tfReplicaSpecs[Launcher]: unknown replica type`).
        Rule::new(REPLICA_SPECS, format!("self.all(k, k.lowerAscii() in {types})"))
            .message("unknown replica type: must be one of Chief, Master, PS, Worker, Evaluator"),
        Rule::new(
            REPLICA_SPECS,
            format!("{types}.all(t, self.filter(k, k.lowerAscii() == t).size() <= 1)"),
        )
        .message("duplicate replica type: keys that differ only in case mean the same type"),
        Rule::new(
            REPLICA_SPECS,
            "!(self.exists(k, k.lowerAscii() == 'chief') && self.exists(k, k.lowerAscii() == 'master'))",
        )
        .message("must not contain both Chief and Master"),
        Rule::new(
            REPLICA_SPECS,
            "self.all(k, !(k.lowerAscii() in ['chief', 'master', 'evaluator']) || !has(self[k].replicas) || self[k].replicas <= 1)",
        )
        .message("Chief, Master and Evaluator must have at most 1 replica"),
        Rule::new(
            REPLICA,
            "has(self.template) && has(self.template.spec) && has(self.template.spec.containers) && size(self.template.spec.containers) > 0",
        )
        .message("must contain at least one container")
        .field_path(".template.spec.containers")
        .reason("FieldValueRequired"),
        Rule::new(
            REPLICA,
            format!(
                "!has(self.template) || !has(self.template.spec) || !has(self.template.spec.containers) || size(self.template.spec.containers) == 0 || self.template.spec.containers.exists(c, has(c.name) && c.name == '{DEFAULT_CONTAINER_NAME}')"
            ),
        )
        .message(format!("must contain a container named \"{DEFAULT_CONTAINER_NAME}\""))
        .field_path(".template.spec.containers"),
        Rule::new(CONTAINER, "has(self.name) && size(self.name) > 0")
            .message("must be set")
            .field_path(".name")
            .reason("FieldValueRequired"),
        Rule::new(CONTAINER, "has(self.image) && size(self.image) > 0")
            .message("must be set")
            .field_path(".image")
            .reason("FieldValueRequired"),
        Rule::new(
            format!("{CONTAINER}.ports.[].name"),
            "size(self) == 0 || (self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",
        )
        .message("must be an IANA service name: at most 15 lower-case alphanumeric characters or '-', with at least one letter, no '--', starting and ending with an alphanumeric character"),
    ]
}

/// Bounds the pod template's lists and strings the rules read (containers, their names,
/// images and ports, the ports' names), so each rule's estimated cost is finite.
fn bound_pod_template(template: &mut Value) {
    let containers = node(template, "spec.containers");
    containers["maxItems"] = json!(MAX_CONTAINERS);
    let container = node(containers, "[]");
    node(container, "name")["maxLength"] = json!(MAX_CONTAINER_NAME);
    node(container, "image")["maxLength"] = json!(MAX_IMAGE);
    let ports = node(container, "ports");
    ports["maxItems"] = json!(MAX_PORTS);
    node(ports, "[].name")["maxLength"] = json!(MAX_PORT_NAME);
}

/// The schema node at `at` (see [`Rule::at`]).
///
/// # Panics
/// When the generated schema lacks the node: the rules and the Rust types disagree, which the
/// CRD tests catch.
fn node<'a>(schema: &'a mut Value, at: &str) -> &'a mut Value {
    at.split('.')
        .filter(|step| !step.is_empty())
        .fold(schema, |node, step| {
            let next = match step {
                "*" => node.get_mut("additionalProperties"),
                "[]" => node.get_mut("items"),
                name => node.get_mut("properties").and_then(|p| p.get_mut(name)),
            };
            next.unwrap_or_else(|| panic!("the TFJob schema has no node {at:?} (at {step:?})"))
        })
}

/// Writes the bounds and the rules into the TFJob's `openAPIV3Schema`.
pub fn add_to_schema(schema: &mut Value) {
    bound_pod_template(node(schema, &format!("{REPLICA}.template")));
    node(schema, REPLICA_SPECS)["maxProperties"] = json!(MAX_REPLICA_TYPES);
    node(schema, MANAGED_BY)["maxLength"] = json!(MAX_MANAGED_BY);
    for rule in rules() {
        let target = node(schema, &rule.at);
        let list = target
            .as_object_mut()
            .expect("schema nodes are objects")
            .entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            list.push(rule.to_json());
        }
    }
}
