//! OpenAPI v3 documents of the served types, for kubectl's validation.
//!
//! Before `kubectl apply`, `create` or `replace` sends an object, kubectl (1.27 and later)
//! reads `/openapi/v3`, fetches the document of the object's group-version and looks for a
//! PATCH operation tagged with the object's `x-kubernetes-group-version-kind` that declares the
//! `fieldValidation` query parameter. When it finds one, it leaves validation to the server and
//! sends `fieldValidation=Strict`; when the document is missing it falls back to `/openapi/v2`,
//! and without that it refuses to go on unless told `--validate=false`. So the server publishes,
//! for every served group-version, the operations kubectl asks about and a schema per kind:
//! a CRD's own `openAPIV3Schema` for custom resources, and for built-in types a schema that
//! names the common fields and preserves the rest. (That is all kubectl reads of it: the
//! server checks every field itself, by the Go types' schemas, in
//! [`crate::admission::fields`].)
//!
//! Each index entry carries a hash of its document, as a real server's does, so a client's HTTP
//! cache never serves a document from before a CRD changed.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::storage::store::{ResourceType, Store};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// `api/v1` or `apis/<group>/<version>`: a group-version's path in the index.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// FNV-1a, which is stable across runs and platforms (the standard hasher is not).
fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// The served group-versions, as (group, version).
fn group_versions(types: &[ResourceType]) -> BTreeSet<(String, String)> {
    types
        .iter()
        .map(|t| (t.group.clone(), t.version.clone()))
        .collect()
}

/// `GET /openapi/v3`: where each group-version's document is.
pub fn index(store: &Store) -> Value {
    let types = store.types();
    let paths: Map<String, Value> = group_versions(&types)
        .into_iter()
        .map(|(g, v)| {
            let path = gv_path(&g, &v);
            let doc = group_version_document(&types, &g, &v).to_string();
            let url = format!("/openapi/v3/{path}?hash={}", hash(&doc));
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<path>`, where `path` is `api/v1` or `apis/<group>/<version>`.
pub fn document(store: &Store, path: &str) -> Option<Value> {
    let types = store.types();
    let (group, version) = match path.trim_matches('/').split('/').collect::<Vec<_>>()[..] {
        ["api", version] => (String::new(), version.to_owned()),
        ["apis", group, version] => (group.to_owned(), version.to_owned()),
        _ => return None,
    };
    group_versions(&types)
        .contains(&(group.clone(), version.clone()))
        .then(|| group_version_document(&types, &group, &version))
}

/// The component name of a kind, in the style of a real server: `io.k8s.api.core.v1.Pod`,
/// `io.k8s.api.coordination.v1.Lease`, and the reversed group for others
/// (`org.kubeflow.v1.TFJob`).
fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let prefix = if group.is_empty() {
        "io.k8s.api.core".to_owned()
    } else if let Some(short) = group.strip_suffix(".k8s.io") {
        format!("io.k8s.api.{short}")
    } else {
        group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{prefix}.{version}.{kind}")
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The schema of a kind: the CRD's own, or the common fields of a built-in type.
fn kind_schema(t: &ResourceType) -> Value {
    let mut schema = match &t.schema {
        Some(s) if s.is_object() => s.clone(),
        _ => {
            let description = format!(
                "{} (the embedded server keeps every field it is given).",
                t.kind
            );
            json!({
                "type": "object",
                "description": description,
                "x-kubernetes-preserve-unknown-fields": true,
            })
        }
    };
    if schema.get("type").is_none() {
        schema["type"] = json!("object");
    }
    let properties = schema
        .as_object_mut()
        .expect("a schema object")
        .entry("properties")
        .or_insert_with(|| json!({}));
    if let Some(p) = properties.as_object_mut() {
        p.entry("apiVersion")
            .or_insert_with(|| json!({"type": "string", "description": "Group and version."}));
        p.entry("kind")
            .or_insert_with(|| json!({"type": "string", "description": "The kind of object."}));
        // Every kind's metadata is the standard ObjectMeta, as a real server publishes it
        // whatever a CRD's schema says.
        p.insert("metadata".into(), reference(OBJECT_META));
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk(&t.group, &t.version, &t.kind)]);
    schema
}

fn list_schema(t: &ResourceType, item: &str) -> Value {
    json!({
        "type": "object",
        "description": format!("A list of {}.", t.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": reference(LIST_META),
            "items": {"type": "array", "items": reference(item)},
        },
        "x-kubernetes-group-version-kind": [gvk(&t.group, &t.version, &format!("{}List", t.kind))],
    })
}

/// The schemas every document refers to.
fn meta_schemas() -> Map<String, Value> {
    let string_map =
        json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
    let opaque_list = json!({"type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let mut owner_references = opaque_list.clone();
    owner_references["x-kubernetes-patch-merge-key"] = json!("uid");
    owner_references["x-kubernetes-patch-strategy"] = json!("merge");
    let mut m = Map::new();
    m.insert(
        OBJECT_META.into(),
        json!({
            "type": "object",
            "description": "Standard object metadata.",
            "properties": {
                "name": {"type": "string"},
                "generateName": {"type": "string"},
                "namespace": {"type": "string"},
                "uid": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "labels": string_map,
                "annotations": string_map,
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-list-type": "set"},
                "ownerReferences": owner_references,
                "managedFields": opaque_list,
            },
        }),
    );
    m.insert(
        LIST_META.into(),
        json!({"type": "object", "properties": {
            "resourceVersion": {"type": "string"}, "continue": {"type": "string"},
            "remainingItemCount": {"type": "integer", "format": "int64"}}}),
    );
    m.insert(
        STATUS.into(),
        json!({"type": "object", "description": "The result of an operation without an object.",
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-group-version-kind": [gvk("", "v1", "Status")]}),
    );
    m.insert(
        PATCH.into(),
        json!({"type": "object", "description": "A patch of a type the operation accepts."}),
    );
    m
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
        "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true,
        "description": format!("the {name} of the object"),
        "schema": {"type": "string", "uniqueItems": true}})
}

const LIST_PARAMS: [(&str, &str); 8] = [
    ("labelSelector", "Selects objects by their labels."),
    ("fieldSelector", "Selects objects by their fields."),
    ("limit", "The most objects in a response."),
    ("continue", "Where the previous page ended."),
    (
        "resourceVersion",
        "The resourceVersion to list or watch from.",
    ),
    ("timeoutSeconds", "How long a watch lasts."),
    ("watch", "Watch for changes instead of listing."),
    ("allowWatchBookmarks", "Ask for bookmark events."),
];

const WRITE_PARAMS: [(&str, &str); 3] = [
    ("dryRun", "When present, the change is not persisted."),
    ("fieldManager", "The name of the actor making the change."),
    // What kubectl looks for before it leaves validation to the server.
    (
        "fieldValidation",
        "How the server treats unknown and duplicate fields: Ignore, Warn or Strict.",
    ),
];

const DELETE_PARAMS: [(&str, &str); 3] = [
    ("propagationPolicy", "Foreground, Background or Orphan."),
    (
        "gracePeriodSeconds",
        "Seconds before the object is deleted.",
    ),
    ("dryRun", "When present, the deletion is not persisted."),
];

// Strategic merge patches are accepted but applied with merge semantics, so they are not
// declared: kubectl then computes a client-side apply's patch as it does without OpenAPI,
// instead of from schemas that carry no patch strategies.
const PATCH_TYPES: [&str; 3] = [
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// `KubeflowOrgV1`, `CoreV1`: the group-version part of operation ids.
fn id_part(t: &ResourceType) -> String {
    let group = if t.group.is_empty() { "core" } else { &t.group };
    let mut out = String::new();
    for word in group.split(['.', '-']).chain([t.version.as_str()]) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// The operations of one resource type, each tagged as kubectl reads it.
struct Operations<'a> {
    t: &'a ResourceType,
    /// `CoreV1NamespacedPod`: the part of the operation ids after the action.
    id: String,
    kind: Value,
    list: Value,
    /// The path parameters of the collection (`namespace`, for namespaced types).
    scope: Vec<Value>,
}

impl Operations<'_> {
    fn new(t: &ResourceType) -> Operations<'_> {
        let scope = if t.namespaced { "Namespaced" } else { "" };
        Operations {
            t,
            id: format!("{}{scope}{}", id_part(t), t.kind),
            kind: reference(&schema_name(&t.group, &t.version, &t.kind)),
            list: reference(&schema_name(
                &t.group,
                &t.version,
                &format!("{}List", t.kind),
            )),
            scope: if t.namespaced {
                vec![path_param("namespace")]
            } else {
                Vec::new()
            },
        }
    }

    fn operation(
        &self,
        action: &str,
        id: String,
        params: Vec<Value>,
        body: Option<Value>,
        codes: &[(&str, &Value)],
    ) -> Value {
        let responses: Map<String, Value> = codes
            .iter()
            .map(|(code, schema)| {
                let content = json!({"application/json": {"schema": schema}});
                (
                    (*code).to_owned(),
                    json!({"description": "OK", "content": content}),
                )
            })
            .collect();
        let mut op = json!({
            "operationId": id,
            "description": format!("{action} {}", self.t.kind),
            "tags": [self.t.api_version()],
            "parameters": params,
            "responses": responses,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(&self.t.group, &self.t.version, &self.t.kind),
        });
        if let Some(content) = body {
            op["requestBody"] = json!({"required": true, "content": content});
        }
        op
    }

    /// The collection's parameters followed by `extra`, and the name when `named`.
    fn params(&self, named: bool, extra: &[(&str, &str)]) -> Vec<Value> {
        let mut params = self.scope.clone();
        if named {
            params.push(path_param("name"));
        }
        params.extend(extra.iter().map(|(n, d)| query(n, d)));
        params
    }

    fn object_body(&self) -> Value {
        json!({"application/json": {"schema": self.kind}})
    }

    /// `GET`, `POST` and `DELETE` of the collection.
    fn collection(&self) -> Value {
        let status = reference(STATUS);
        let delete_params: Vec<(&str, &str)> = DELETE_PARAMS
            .iter()
            .chain(&LIST_PARAMS[..2])
            .copied()
            .collect();
        let id = &self.id;
        let list = self.operation(
            "list",
            format!("list{id}"),
            self.params(false, &LIST_PARAMS),
            None,
            &[("200", &self.list)],
        );
        let create = self.operation(
            "post",
            format!("create{id}"),
            self.params(false, &WRITE_PARAMS),
            Some(self.object_body()),
            &[("200", &self.kind), ("201", &self.kind)],
        );
        let delete = self.operation(
            "deletecollection",
            format!("deleteCollection{id}"),
            self.params(false, &delete_params),
            None,
            &[("200", &status)],
        );
        json!({"get": list, "post": create, "delete": delete})
    }

    /// `GET`, `PUT` and `PATCH` of one object (or its `status` subresource), and `DELETE` of
    /// the object.
    fn object(&self, subresource: bool) -> Value {
        let suffix = if subresource { "Status" } else { "" };
        let patch_params: Vec<(&str, &str)> = WRITE_PARAMS
            .iter()
            .copied()
            .chain([("force", "Take over fields other managers own (apply only).")])
            .collect();
        let patch_body: Map<String, Value> = PATCH_TYPES
            .iter()
            .map(|ct| ((*ct).to_owned(), json!({"schema": reference(PATCH)})))
            .collect();
        let written = [("200", &self.kind), ("201", &self.kind)];
        let id = &self.id;
        let get = self.operation(
            "get",
            format!("read{id}{suffix}"),
            self.params(true, &[]),
            None,
            &[("200", &self.kind)],
        );
        let put = self.operation(
            "put",
            format!("replace{id}{suffix}"),
            self.params(true, &WRITE_PARAMS),
            Some(self.object_body()),
            &written,
        );
        let patch = self.operation(
            "patch",
            format!("patch{id}{suffix}"),
            self.params(true, &patch_params),
            Some(Value::Object(patch_body)),
            &written,
        );
        let mut ops = json!({"get": get, "put": put, "patch": patch});
        if !subresource {
            let status = reference(STATUS);
            ops["delete"] = self.operation(
                "delete",
                format!("delete{}", self.id),
                self.params(true, &DELETE_PARAMS),
                None,
                &[("200", &status), ("202", &status)],
            );
        }
        ops
    }

    /// Listing a namespaced type across namespaces.
    fn all_namespaces(&self) -> Value {
        let params = LIST_PARAMS.iter().map(|(n, d)| query(n, d)).collect();
        let id = format!("list{}{}ForAllNamespaces", id_part(self.t), self.t.kind);
        json!({"get": self.operation("list", id, params, None, &[("200", &self.list)])})
    }
}

/// The paths of one resource type.
fn resource_paths(t: &ResourceType, paths: &mut Map<String, Value>) {
    let ops = Operations::new(t);
    let root = format!("/{}", gv_path(&t.group, &t.version));
    let collection = if t.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", t.plural)
    } else {
        format!("{root}/{}", t.plural)
    };
    paths.insert(format!("{collection}/{{name}}"), ops.object(false));
    if t.status {
        paths.insert(format!("{collection}/{{name}}/status"), ops.object(true));
    }
    paths.insert(collection, ops.collection());
    if t.namespaced {
        paths.insert(format!("{root}/{}", t.plural), ops.all_namespaces());
    }
}

/// The document of one group-version: its resources' operations and kinds.
fn group_version_document(types: &[ResourceType], group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = meta_schemas();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        resource_paths(t, &mut paths);
        let name = schema_name(group, version, &t.kind);
        schemas.insert(
            schema_name(group, version, &format!("{}List", t.kind)),
            list_schema(t, &name),
        );
        schemas.insert(name, kind_schema(t));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_points_at_every_served_group_version() {
        let store = Store::new();
        let index = index(&store);
        let core = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
        assert!(index["paths"]["apis/coordination.k8s.io/v1"].is_object());
        assert!(document(&store, "apis/kubeflow.org/v1").is_none());
        assert!(document(&store, "api/v2").is_none());
    }

    #[test]
    fn patch_operations_declare_field_validation_for_their_kind() {
        let store = Store::new();
        let doc = document(&store, "api/v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        let ns = &doc["paths"]["/api/v1/namespaces/{name}"]["patch"];
        assert_eq!(ns["x-kubernetes-group-version-kind"]["kind"], "Namespace");
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    }

    #[test]
    fn custom_resources_use_the_crd_schema_and_change_the_hash() {
        let store = Store::new();
        let before = index(&store);
        let mut t = ResourceType::new("example.com", "v1", "Widget", "widgets", true, true);
        t.schema = Some(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"size": {"type": "integer"}}}}}),
        );
        store.register(t.clone());
        let doc = document(&store, "apis/example.com/v1").unwrap();
        let widget = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            widget["properties"]["spec"]["properties"]["size"]["type"],
            "integer"
        );
        assert_eq!(
            widget["properties"]["metadata"]["$ref"],
            format!("#/components/schemas/{OBJECT_META}")
        );
        let url = |i: &Value| i["paths"]["apis/example.com/v1"]["serverRelativeURL"].clone();
        assert!(url(&before).is_null());
        let first = url(&index(&store));
        t.schema = Some(json!({"type": "object"}));
        store.register(t);
        assert_ne!(first, url(&index(&store)), "a changed CRD changes the hash");
    }
}
