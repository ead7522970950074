//! Unknown fields, as a real API server's decoder treats them: every object written is pruned
//! to what its schema declares, and the request's `fieldValidation` decides whether what was
//! pruned is refused (`Strict`), reported in `Warning` headers (`Warn`, the default) or dropped
//! in silence (`Ignore`).
//!
//! Custom resources are pruned by their CRD's structural schema: an object schema keeps the
//! properties it declares, a map (`additionalProperties`) keeps its keys, and only
//! `x-kubernetes-preserve-unknown-fields` keeps what is undeclared. Built-in kinds are pruned
//! by the OpenAPI schema of their Go types, as k8s-openapi publishes it; there a field typed as
//! raw JSON (`RawExtension`, `JSON`) is an object with no properties, and is kept whole, as Go's
//! decoder keeps it. The root and any `x-kubernetes-embedded-resource` keep `apiVersion` and
//! `kind`, and their `metadata` is pruned as an `ObjectMeta` whatever the CRD says of it.
//!
//! Paths are spelled as the API server spells them: `spec.template.spec.containers[0].image`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex};

use schemars::JsonSchema;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::storage::store::ResourceType;

/// The most unknown fields one answer names; the rest are counted.
pub const MAX_REPORTED: usize = 100;

/// What a write does with unknown and duplicate fields (`?fieldValidation=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Prune in silence; a duplicate's last value wins.
    Ignore,
    /// Prune, and name each field in a `Warning` header.
    #[default]
    Warn,
    /// Refuse the write, naming each field.
    Strict,
}

impl FieldValidation {
    /// The query value's meaning; a missing value is the API server's default, `Warn`.
    /// Values other than the three are refused earlier, by the options' validation.
    pub fn from_query(value: Option<&str>) -> FieldValidation {
        match value {
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            _ => FieldValidation::Warn,
        }
    }
}

/// A problem the decoder found in a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldProblem {
    Unknown(String),
    Duplicate(String),
}

impl std::fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldProblem::Unknown(path) => write!(f, "unknown field {path:?}"),
            FieldProblem::Duplicate(path) => write!(f, "duplicate field {path:?}"),
        }
    }
}

/// The refusal of a `Strict` write, worded as the API server words it: `ConfigMap in version
/// "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "datta"`.
pub fn strict_error(t: &ResourceType, problems: &[FieldProblem]) -> ApiError {
    let mut listed: Vec<String> = problems
        .iter()
        .take(MAX_REPORTED)
        .map(ToString::to_string)
        .collect();
    if problems.len() > MAX_REPORTED {
        listed.push(format!("and {} more", problems.len() - MAX_REPORTED));
    }
    ApiError::bad_request(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
        listed.join(", "),
        kind = t.kind,
        version = t.version,
    ))
}

/// Which rules an object schema without properties follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// A CRD's structural schema: an object without properties keeps nothing undeclared.
    Structural,
    /// The OpenAPI of Go types: an object without properties is raw JSON, kept whole.
    GoTypes,
}

/// The schema objects of one type are pruned by: borrowed from a CRD's type (its schema is
/// not copied per write), or owned for a built-in kind.
#[derive(Clone, Debug)]
pub struct FieldSchema<'a> {
    root: Cow<'a, Value>,
    /// Definitions `$ref`s name (`#/$defs/<name>`), for the Go types' schemas.
    defs: Cow<'a, Map<String, Value>>,
    dialect: Dialect,
}

/// The schema of a type: a CRD's, borrowed, or a built-in kind's, shared.
pub enum SchemaOf<'a> {
    Custom(FieldSchema<'a>),
    BuiltIn(Arc<FieldSchema<'static>>),
}

impl<'a> std::ops::Deref for SchemaOf<'a> {
    type Target = FieldSchema<'a>;

    fn deref(&self) -> &FieldSchema<'a> {
        match self {
            SchemaOf::Custom(schema) => schema,
            SchemaOf::BuiltIn(schema) => schema,
        }
    }
}

/// `ObjectMeta`'s schema, which the metadata of every object is pruned by.
static OBJECT_META: LazyLock<FieldSchema<'static>> = LazyLock::new(|| {
    go_type_schema::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>()
});

/// Schemas by (group, kind); `None` for a kind whose Go type this server does not know.
type SchemasByKind = BTreeMap<(String, String), Option<Arc<FieldSchema<'static>>>>;

/// The built-in kinds' schemas, made on first use (a Pod's takes milliseconds to generate).
static BUILT_IN: LazyLock<Mutex<SchemasByKind>> = LazyLock::new(Mutex::default);

fn go_type_schema<T: JsonSchema>() -> FieldSchema<'static> {
    let mut root = schemars::SchemaGenerator::default()
        .into_root_schema_for::<T>()
        .to_value();
    let defs = match root.as_object_mut().and_then(|o| o.remove("$defs")) {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    FieldSchema {
        root: Cow::Owned(root),
        defs: Cow::Owned(defs),
        dialect: Dialect::GoTypes,
    }
}

/// The schema of a built-in kind, by group and kind; `None` for a kind this server does not
/// know the Go type of (its objects are stored as they come).
fn built_in_schema(group: &str, kind: &str) -> Option<FieldSchema<'static>> {
    use k8s_openapi::api::{apps, coordination, core, events, policy, rbac, scheduling};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    Some(match (group, kind) {
        ("", "Namespace") => go_type_schema::<core::v1::Namespace>(),
        ("", "Node") => go_type_schema::<core::v1::Node>(),
        ("", "Pod") => go_type_schema::<core::v1::Pod>(),
        ("", "Service") => go_type_schema::<core::v1::Service>(),
        ("", "ConfigMap") => go_type_schema::<core::v1::ConfigMap>(),
        ("", "Secret") => go_type_schema::<core::v1::Secret>(),
        ("", "ServiceAccount") => go_type_schema::<core::v1::ServiceAccount>(),
        ("", "Event") => go_type_schema::<core::v1::Event>(),
        ("events.k8s.io", "Event") => go_type_schema::<events::v1::Event>(),
        ("coordination.k8s.io", "Lease") => go_type_schema::<coordination::v1::Lease>(),
        ("apps", "Deployment") => go_type_schema::<apps::v1::Deployment>(),
        ("policy", "PodDisruptionBudget") => go_type_schema::<policy::v1::PodDisruptionBudget>(),
        ("rbac.authorization.k8s.io", "Role") => go_type_schema::<rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => go_type_schema::<rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => go_type_schema::<rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            go_type_schema::<rbac::v1::ClusterRoleBinding>()
        }
        ("scheduling.k8s.io", "PriorityClass") => go_type_schema::<scheduling::v1::PriorityClass>(),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            go_type_schema::<apiextensions::CustomResourceDefinition>()
        }
        _ => return None,
    })
}

/// The schema objects of `t` are pruned by: the CRD's for a custom resource, the Go type's for
/// a built-in kind; `None` when there is none (a type registered without a schema keeps what it
/// is given).
pub fn schema_of(t: &ResourceType) -> Option<SchemaOf<'_>> {
    if let Some(schema) = &t.schema {
        return Some(SchemaOf::Custom(FieldSchema {
            root: Cow::Borrowed(schema),
            defs: Cow::Owned(Map::new()),
            dialect: Dialect::Structural,
        }));
    }
    if !t.is_builtin() {
        return None;
    }
    let mut cache = BUILT_IN.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry((t.group.clone(), t.kind.clone()))
        .or_insert_with(|| built_in_schema(&t.group, &t.kind).map(Arc::new))
        .clone()
        .map(SchemaOf::BuiltIn)
}

impl<'a> FieldSchema<'a> {
    /// Removes from `obj` what the schema does not declare; returns the removed fields' paths.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut walk = Walk::new(self, false);
        walk.resource(&self.root, obj);
        walk.pruned
    }

    /// Prunes the body of a merge, strategic merge or apply patch, which has an object's shape:
    /// a strategic patch's directives (`$patch`, `$setElementOrder/...`) stay, and an unknown
    /// field set to `null` (deleting what is not there) is dropped without being named.
    pub fn prune_patch(&self, patch: &mut Value) -> Vec<String> {
        let mut walk = Walk::new(self, true);
        walk.resource(&self.root, patch);
        walk.pruned
    }

    /// Prunes a JSON patch (RFC 6902): an `add`, `replace`, `copy` or `move` into an undeclared
    /// field is dropped (a `move` still removes its source), and the values added are pruned
    /// where they land.
    pub fn prune_json_patch(&self, ops: &mut Vec<Value>) -> Vec<String> {
        let mut pruned = Vec::new();
        ops.retain_mut(|op| {
            let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
            if !matches!(kind, "add" | "replace" | "copy" | "move") {
                return true;
            }
            let Some(pointer) = op.get("path").and_then(Value::as_str).map(str::to_owned) else {
                return true;
            };
            let tokens: Vec<String> = pointer
                .split('/')
                .skip(1)
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect();
            match self.node_at(&tokens) {
                Target::Unknown(depth) => {
                    pruned.push(dotted(&tokens[..=depth]));
                    if kind == "move" {
                        op["op"] = Value::from("remove");
                        op["path"] = op.get("from").cloned().unwrap_or(Value::Null);
                        if let Some(o) = op.as_object_mut() {
                            o.remove("from");
                        }
                        return true;
                    }
                    false
                }
                Target::Declared(node) => {
                    if let Some(value) = op.get_mut("value") {
                        let mut walk = Walk::new(self, false);
                        walk.path = dotted(&tokens);
                        walk.value(node, value);
                        pruned.extend(walk.pruned);
                    }
                    true
                }
                Target::Open => true,
            }
        });
        pruned
    }

    /// What the schema says of the field a JSON pointer's tokens name.
    fn node_at<'s>(&'s self, tokens: &[String]) -> Target<'s> {
        let mut node = self.resolve(&self.root);
        let mut resource = true;
        for (depth, token) in tokens.iter().enumerate() {
            if resource {
                match token.as_str() {
                    "apiVersion" | "kind" => return Target::Open,
                    "metadata" => {
                        return OBJECT_META.node_at(&tokens[depth + 1..]);
                    }
                    _ => {}
                }
            }
            let next = if node.get("type").and_then(Value::as_str) == Some("array")
                || node.get("items").is_some()
            {
                node.get("items")
            } else if let Some(props) = node.get("properties").and_then(Value::as_object) {
                match props.get(token) {
                    Some(child) => Some(child),
                    None if preserves_unknown(node) => return Target::Open,
                    None => return Target::Unknown(depth),
                }
            } else if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object())
            {
                Some(values)
            } else if self.dialect == Dialect::Structural
                && !preserves_unknown(node)
                && node.get("type").and_then(Value::as_str) == Some("object")
            {
                return Target::Unknown(depth);
            } else {
                return Target::Open;
            };
            let Some(next) = next else {
                return Target::Open;
            };
            node = self.resolve(next);
            resource = node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
        }
        Target::Declared(node)
    }

    /// The schema a `$ref` names (the Go types' schemas name their definitions so).
    fn resolve<'s>(&'s self, node: &'s Value) -> &'s Value {
        let mut node = node;
        // A definition may name another; a few hops at most, bounded against a cycle.
        for _ in 0..8 {
            match node
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .and_then(|name| self.defs.get(name))
            {
                Some(target) => node = target,
                None => break,
            }
        }
        node
    }
}

/// Where a JSON patch writes, as the schema sees it.
enum Target<'a> {
    /// A declared field, with its schema.
    Declared(&'a Value),
    /// Inside something kept whole (`x-kubernetes-preserve-unknown-fields`, raw JSON).
    Open,
    /// The token at this depth is a field the schema does not declare.
    Unknown(usize),
}

/// One pruning walk: the path it is at and what it removed.
struct Walk<'a> {
    schema: &'a FieldSchema<'a>,
    /// Whether the value is a patch body (directives and deletions of unknown fields pass).
    patch: bool,
    path: String,
    pruned: Vec<String>,
}

impl<'a> Walk<'a> {
    fn new(schema: &'a FieldSchema<'a>, patch: bool) -> Walk<'a> {
        Walk {
            schema,
            patch,
            path: String::new(),
            pruned: Vec::new(),
        }
    }

    /// A (partial) object at the root or at an embedded resource: `apiVersion` and `kind` are
    /// kept, `metadata` is an `ObjectMeta`.
    fn resource(&mut self, node: &Value, obj: &mut Value) {
        let node = self.schema.resolve(node);
        let Value::Object(map) = obj else {
            return;
        };
        let props = node.get("properties").and_then(Value::as_object);
        let preserve = preserves_unknown(node);
        map.retain(|key, value| {
            let len = self.path.len();
            push_key(&mut self.path, key);
            let keep = match key.as_str() {
                "apiVersion" | "kind" => true,
                "metadata" => {
                    let mut meta = Walk {
                        schema: &OBJECT_META,
                        patch: self.patch,
                        path: std::mem::take(&mut self.path),
                        pruned: std::mem::take(&mut self.pruned),
                    };
                    meta.value(&OBJECT_META.root, value);
                    self.path = meta.path;
                    self.pruned = meta.pruned;
                    true
                }
                _ => self.field(props.and_then(|p| p.get(key)), preserve, key, value),
            };
            self.path.truncate(len);
            keep
        });
    }

    /// Whether a field of an object stays: declared ones are walked, undeclared ones stay
    /// only where unknown fields are preserved (or as a patch's directive or deletion).
    fn field(
        &mut self,
        child: Option<&Value>,
        preserve: bool,
        key: &str,
        value: &mut Value,
    ) -> bool {
        match child {
            Some(child) => {
                self.value(child, value);
                true
            }
            None if preserve => true,
            None if self.patch && key.starts_with('$') => true,
            None if self.patch && value.is_null() => false,
            None => {
                self.pruned.push(self.path.clone());
                false
            }
        }
    }

    fn value(&mut self, node: &Value, value: &mut Value) {
        let node = self.schema.resolve(node);
        if node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
            return self.resource(node, value);
        }
        match value {
            Value::Object(map) => {
                if let Some(props) = node.get("properties").and_then(Value::as_object) {
                    let preserve = preserves_unknown(node);
                    map.retain(|key, value| {
                        let len = self.path.len();
                        push_key(&mut self.path, key);
                        let keep = self.field(props.get(key), preserve, key, value);
                        self.path.truncate(len);
                        keep
                    });
                } else if let Some(values) =
                    node.get("additionalProperties").filter(|v| v.is_object())
                {
                    for (key, value) in map.iter_mut() {
                        if self.patch && key.starts_with('$') {
                            continue;
                        }
                        let len = self.path.len();
                        push_key(&mut self.path, key);
                        self.value(values, value);
                        self.path.truncate(len);
                    }
                } else if self.schema.dialect == Dialect::Structural
                    && !preserves_unknown(node)
                    && node.get("type").and_then(Value::as_str) == Some("object")
                {
                    map.retain(|key, value| {
                        let len = self.path.len();
                        push_key(&mut self.path, key);
                        let keep = self.field(None, false, key, value);
                        self.path.truncate(len);
                        keep
                    });
                }
            }
            Value::Array(items) => {
                if let Some(item) = node.get("items").filter(|v| v.is_object()) {
                    for (i, value) in items.iter_mut().enumerate() {
                        let len = self.path.len();
                        self.path.push_str(&format!("[{i}]"));
                        self.value(item, value);
                        self.path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A JSON pointer's tokens as the API server spells a field's path: `spec.containers[0].name`.
fn dotted(tokens: &[String]) -> String {
    let mut path = String::new();
    for token in tokens {
        if !path.is_empty() && (token.parse::<usize>().is_ok() || token == "-") {
            path.push_str(&format!("[{token}]"));
        } else {
            push_key(&mut path, token);
        }
    }
    path
}

fn preserves_unknown(node: &Value) -> bool {
    node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn built_in(group: &str, kind: &str, plural: &str) -> FieldSchema<'static> {
        let t = ResourceType::new(group, "v1", kind, plural, true, false);
        match schema_of(&t) {
            Some(SchemaOf::BuiltIn(schema)) => FieldSchema::clone(&schema),
            _ => panic!("{kind} is a built-in kind"),
        }
    }

    fn crd(schema: Value) -> FieldSchema<'static> {
        FieldSchema {
            root: Cow::Owned(schema),
            defs: Cow::Owned(Map::new()),
            dialect: Dialect::Structural,
        }
    }

    #[test]
    fn a_built_in_kind_loses_and_names_what_its_go_type_lacks() {
        let mut cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labelss": {"x": "y"}, "labels": {"k": "v"}},
            "data": {"key": "value"}, "datta": {"key": "value"},
        });
        assert_eq!(
            built_in("", "ConfigMap", "configmaps").prune(&mut cm),
            ["datta", "metadata.labelss"]
        );
        assert_eq!(
            cm,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "labels": {"k": "v"}}, "data": {"key": "value"}})
        );
    }

    #[test]
    fn a_pods_containers_maps_and_quantities_are_walked_by_their_definitions() {
        let mut pod = json!({
            "metadata": {"name": "p", "ownerReferences": [{"uid": "u", "name": "j", "kind": "TFJob", "apiVersion": "kubeflow.org/v1", "controllerr": true}]},
            "spec": {
                "containers": [
                    {"name": "a", "image": "i", "imagePullPolicy": "Always"},
                    {"name": "b", "image": "i", "imagePullPolicyy": "Always",
                     "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "1"}},
                     "ports": [{"containerPort": 80, "port": 81}]},
                ],
                "nodeSelector": {"pool": "gpu"},
            },
            "status": {"phase": "Running", "phasee": "x"},
        });
        let pruned = built_in("", "Pod", "pods").prune(&mut pod);
        assert_eq!(
            pruned,
            [
                "metadata.ownerReferences[0].controllerr",
                "spec.containers[1].imagePullPolicyy",
                "spec.containers[1].ports[0].port",
                "status.phasee",
            ]
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"],
            2
        );
        assert_eq!(pod["spec"]["nodeSelector"]["pool"], "gpu");
    }

    #[test]
    fn raw_json_fields_of_go_types_are_kept_whole() {
        // A CRD's schema holds `default` and `example` values: raw JSON, any shape.
        let mut crd_object = json!({
            "metadata": {"name": "things.example.com"},
            "spec": {"group": "example.com", "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "default": {"anything": [1, {"x": 2}]},
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "bogus": 1}}}}}]},
        });
        let pruned = built_in(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        )
        .prune(&mut crd_object);
        assert_eq!(
            pruned,
            ["spec.versions[0].schema.openAPIV3Schema.properties.spec.bogus"]
        );
        let schema = &crd_object["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["default"], json!({"anything": [1, {"x": 2}]}));
        assert_eq!(
            schema["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
    }

    fn structural() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "runPolicy": {"type": "object", "properties": {"cleanPodPolicy": {"type": "string"}}},
                    "replicas": {"type": "object", "additionalProperties": {
                        "type": "object", "properties": {"replicas": {"type": "integer"}}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "mixed": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"typed": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "empty": {"type": "object"},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                }},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            },
        })
    }

    #[test]
    fn a_structural_schema_prunes_as_the_api_server_does() {
        let mut obj = json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namee": "x"},
            "spec": {
                "runPolicy": {"cleanPodPolicy": "None", "cleanPodPolicyy": "All"},
                "replicas": {"Worker": {"replicas": 2, "replica": 3}},
                "free": {"anything": {"goes": [1]}},
                "mixed": {"kept": 1, "typed": {"a": "x", "b": "y"}},
                "empty": {"gone": 1},
                "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "x": 1},
                    "spec": {"a": "x", "b": "y"}, "other": 1},
            },
            "statuss": {},
        });
        let pruned = crd(structural()).prune(&mut obj);
        assert_eq!(
            pruned,
            [
                "metadata.namee",
                "spec.embedded.metadata.x",
                "spec.embedded.other",
                "spec.embedded.spec.b",
                "spec.empty.gone",
                "spec.mixed.typed.b",
                "spec.replicas.Worker.replica",
                "spec.runPolicy.cleanPodPolicyy",
                "statuss",
            ]
        );
        assert_eq!(obj["spec"]["free"], json!({"anything": {"goes": [1]}}));
        assert_eq!(
            obj["spec"]["mixed"],
            json!({"kept": 1, "typed": {"a": "x"}})
        );
        assert_eq!(obj["spec"]["embedded"]["kind"], "Pod");
        assert_eq!(obj["spec"]["empty"], json!({}));
    }

    #[test]
    fn patches_keep_directives_and_deletions_and_lose_unknown_fields() {
        let pod = built_in("", "Pod", "pods");
        let mut strategic = json!({
            "metadata": {"labels": {"a": null}},
            "spec": {
                "$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "a", "$patch": "delete"}, {"name": "b", "imagee": "x"}],
                "gone": null,
            },
        });
        assert_eq!(
            pod.prune_patch(&mut strategic),
            ["spec.containers[1].imagee"]
        );
        assert_eq!(
            strategic,
            json!({"metadata": {"labels": {"a": null}}, "spec": {
                "$setElementOrder/containers": [{"name": "a"}],
                "containers": [{"name": "a", "$patch": "delete"}, {"name": "b"}]}})
        );
    }

    #[test]
    fn a_json_patch_into_an_unknown_field_is_dropped_and_its_values_pruned() {
        let pod = built_in("", "Pod", "pods");
        let mut ops = vec![
            json!({"op": "add", "path": "/spec/nodeSelectorr", "value": {"a": "b"}}),
            json!({"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "A", "valuee": "x"}}),
            json!({"op": "replace", "path": "/metadata/labels/a~1b", "value": "x"}),
            json!({"op": "move", "from": "/spec/hostname", "path": "/spec/hostnamee"}),
            json!({"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"cpu": "1"}}),
            json!({"op": "remove", "path": "/spec/whatever"}),
        ];
        let pruned = pod.prune_json_patch(&mut ops);
        assert_eq!(
            pruned,
            [
                "spec.nodeSelectorr",
                "spec.containers[0].env[-].valuee",
                "spec.hostnamee"
            ]
        );
        assert_eq!(
            ops,
            [
                json!({"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "A"}}),
                json!({"op": "replace", "path": "/metadata/labels/a~1b", "value": "x"}),
                json!({"op": "remove", "path": "/spec/hostname"}),
                json!({"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"cpu": "1"}}),
                json!({"op": "remove", "path": "/spec/whatever"}),
            ]
        );
    }

    #[test]
    fn hostile_keys_are_named_as_they_are_and_the_message_is_bounded() {
        let mut obj = json!({"data": {}, "dätä\n\"x\"": 1});
        for i in 0..150 {
            obj[format!("f{i:03}")] = json!(i);
        }
        let pruned = built_in("", "ConfigMap", "configmaps").prune(&mut obj);
        assert_eq!(pruned.len(), 151);
        assert!(pruned.contains(&"dätä\n\"x\"".to_owned()));
        let problems: Vec<FieldProblem> = pruned.into_iter().map(FieldProblem::Unknown).collect();
        let t = ResourceType::new("", "v1", "ConfigMap", "configmaps", true, false);
        let message = strict_error(&t, &problems).message;
        assert!(message.starts_with(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field "
        ));
        assert!(message.ends_with(", and 51 more"), "{message}");
        assert!(
            message.contains(r#"unknown field "dätä\n\"x\"""#),
            "{message}"
        );
    }

    #[test]
    fn a_type_without_a_schema_keeps_everything() {
        let t = ResourceType::new("example.com", "v1", "Thing", "things", true, false);
        assert!(schema_of(&t).is_none());
    }
}
