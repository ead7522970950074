//! Strategic merge patches of the built-in kinds (`application/strategic-merge-patch+json`),
//! which kubectl and the official clients send by default.
//!
//! A strategic merge patch is a JSON merge patch, except for lists: a list whose Go field is
//! tagged `patchStrategy:"merge"` merges item by item, matched on its `patchMergeKey` (containers
//! by `name`, service ports by `port`, conditions by `type`, ...), and a list of plain values so
//! tagged (finalizers) becomes the union. Every other list is replaced whole. The patch may carry
//! directives: `$patch: delete` on an item removes the matching one, `$patch: replace` replaces
//! instead of merging, `$deleteFromPrimitiveList/<field>` removes values, `$retainKeys` keeps
//! only the named fields, and `$setElementOrder/<field>` (order only) is read and dropped.
//!
//! The merge keys are those of the Kubernetes types this cluster serves ([`list_rule`]); custom
//! resources have no Go types, and a real server refuses this patch type for them (the server
//! answers 415 before calling [`apply`]).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// How a list field is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListRule {
    /// Replaced whole by the patch's list.
    Replace,
    /// Merged item by item, matched on this key.
    MergeOn(&'static str),
    /// A list of plain values merged as a set union, in order.
    Union,
}

/// The rule for the list at `path` (field names from the object's root, list positions left
/// out) of an object of the built-in kind `plural` in `group`.
pub fn list_rule(group: &str, plural: &str, path: &[&str]) -> ListRule {
    match path {
        ["metadata", "ownerReferences"] => return ListRule::MergeOn("uid"),
        ["metadata", "finalizers"] => return ListRule::Union,
        ["status", "conditions"] => return ListRule::MergeOn("type"),
        _ => {}
    }
    match (group, plural, path) {
        ("", "services", ["spec", "ports"]) => return ListRule::MergeOn("port"),
        ("", "nodes", ["status", "addresses"]) => return ListRule::MergeOn("type"),
        _ => {}
    }
    let pod_spec: &[&str] = match (group, plural) {
        ("", "pods") => &["spec"],
        ("apps", "deployments") => &["spec", "template", "spec"],
        _ => return ListRule::Replace,
    };
    let Some(inside) = path.strip_prefix(pod_spec) else {
        return ListRule::Replace;
    };
    match inside {
        ["containers" | "initContainers" | "ephemeralContainers" | "volumes"]
        | ["imagePullSecrets" | "resourceClaims" | "schedulingGates"] => ListRule::MergeOn("name"),
        ["hostAliases"] => ListRule::MergeOn("ip"),
        ["topologySpreadConstraints"] => ListRule::MergeOn("topologyKey"),
        [
            "containers" | "initContainers" | "ephemeralContainers",
            field,
        ] => match *field {
            "ports" => ListRule::MergeOn("containerPort"),
            "env" => ListRule::MergeOn("name"),
            "volumeMounts" => ListRule::MergeOn("mountPath"),
            "volumeDevices" => ListRule::MergeOn("devicePath"),
            "resizePolicy" => ListRule::MergeOn("resourceName"),
            _ => ListRule::Replace,
        },
        _ => ListRule::Replace,
    }
}

/// A patch that cannot be applied.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

/// Applies the strategic merge `patch` to `target`, an object of the kind whose list rules
/// `rule` gives by path.
pub fn apply(
    target: &mut Value,
    patch: &Value,
    rule: &dyn Fn(&[&str]) -> ListRule,
) -> Result<(), PatchError> {
    let mut path = Vec::new();
    merge_value(target, patch, &mut path, rule)
}

fn merge_value<'p>(
    target: &mut Value,
    patch: &'p Value,
    path: &mut Vec<&'p str>,
    rule: &dyn Fn(&[&str]) -> ListRule,
) -> Result<(), PatchError> {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match fields.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = without_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => {
            return Err(PatchError(format!(
                "unknown patch type {other:?} in the patch of {}",
                shown(path)
            )));
        }
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let object = target.as_object_mut().expect("made an object above");
    for (key, value) in fields {
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let gone = value.as_array().cloned().unwrap_or_default();
            if let Some(list) = object.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(PatchError(format!(
                "unknown directive {key:?} in the patch of {}",
                shown(path)
            )));
        }
        path.push(key);
        match value {
            Value::Null => {
                object.remove(key);
            }
            Value::Array(items) => {
                let current = object.remove(key);
                let merged = merge_list(current, items, path, rule)?;
                object.insert(key.clone(), merged);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                object.remove(key);
            }
            Value::Object(_) => {
                let slot = object.entry(key.clone()).or_insert(Value::Null);
                merge_value(slot, value, path, rule)?;
            }
            other => {
                object.insert(key.clone(), other.clone());
            }
        }
        path.pop();
    }
    if let Some(keep) = fields.get("$retainKeys").and_then(Value::as_array) {
        object.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k.as_str())));
    }
    Ok(())
}

fn merge_list<'p>(
    current: Option<Value>,
    items: &'p [Value],
    path: &mut Vec<&'p str>,
    rule: &dyn Fn(&[&str]) -> ListRule,
) -> Result<Value, PatchError> {
    let mut list = match current {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    };
    match rule(path) {
        ListRule::Replace => Ok(Value::Array(
            items
                .iter()
                .filter(|i| !is_directive_only(i))
                .map(without_directives)
                .collect(),
        )),
        // Both merges find items through an index on their JSON text, not by scanning the
        // list per item: a patch of many items against a long list stays linear (the store
        // applies patches under its lock).
        ListRule::Union => {
            let mut seen: HashSet<String> = list.iter().map(Value::to_string).collect();
            for item in items {
                if seen.insert(item.to_string()) {
                    list.push(item.clone());
                }
            }
            Ok(Value::Array(list))
        }
        ListRule::MergeOn(key) => {
            let mut index: HashMap<String, usize> = HashMap::new();
            for (i, x) in list.iter().enumerate() {
                if let Some(id) = x.get(key) {
                    index.entry(id.to_string()).or_insert(i);
                }
            }
            let mut slots: Vec<Option<Value>> = list.into_iter().map(Some).collect();
            for item in items {
                let Some(id) = item.get(key) else {
                    return Err(PatchError(format!(
                        "an item of {} has no merge key {key:?}",
                        shown(path)
                    )));
                };
                let id = id.to_string();
                let at = index.get(&id).copied();
                match (item.get("$patch").and_then(Value::as_str), at) {
                    (Some("delete"), Some(i)) => {
                        slots[i] = None;
                        index.remove(&id);
                    }
                    (Some("delete"), None) => {}
                    (Some("replace"), Some(i)) => slots[i] = Some(without_directives(item)),
                    (_, Some(i)) => {
                        let slot = slots[i].get_or_insert(Value::Null);
                        merge_value(slot, item, path, rule)?;
                    }
                    (_, None) => {
                        index.insert(id, slots.len());
                        slots.push(Some(without_directives(item)));
                    }
                }
            }
            Ok(Value::Array(slots.into_iter().flatten().collect()))
        }
    }
}

/// An item made only of a directive (`{"$patch": "replace"}` opening a replaced list).
fn is_directive_only(item: &Value) -> bool {
    item.as_object()
        .is_some_and(|o| !o.is_empty() && o.keys().all(|k| k.starts_with('$')))
}

fn without_directives(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

fn shown(path: &[&str]) -> String {
    if path.is_empty() {
        "the object".into()
    } else {
        path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(plural: &str, mut target: Value, patch: Value) -> Value {
        apply(&mut target, &patch, &|path: &[&str]| {
            list_rule("", plural, path)
        })
        .unwrap();
        target
    }

    #[test]
    fn service_ports_merge_by_port() {
        let svc = json!({"spec": {"ports": [{"name": "port", "port": 80, "targetPort": 80}]}});
        let out = patched(
            "services",
            svc,
            json!({"spec": {"ports": [{"name": "new", "port": 8080, "targetPort": 8080}]}}),
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([{"name": "port", "port": 80, "targetPort": 80},
                   {"name": "new", "port": 8080, "targetPort": 8080}])
        );
    }

    #[test]
    fn containers_merge_by_name_and_lists_without_a_key_are_replaced() {
        let pod = json!({"metadata": {"finalizers": ["a"]}, "spec": {
            "containers": [{"name": "tf", "image": "tf:1", "env": [{"name": "A", "value": "1"}],
                            "args": ["x", "y"]}],
            "tolerations": [{"key": "k"}]
        }});
        let out = patched(
            "pods",
            pod,
            json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {
                "$setElementOrder/containers": [{"name": "tf"}],
                "containers": [{"name": "tf", "image": "tf:2",
                                "env": [{"name": "B", "value": "2"}], "args": ["z"]}],
                "tolerations": [{"key": "other"}]
            }}),
        );
        let tf = &out["spec"]["containers"][0];
        assert_eq!(tf["image"], "tf:2");
        assert_eq!(
            tf["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(
            tf["args"],
            json!(["z"]),
            "a list without a merge key is replaced"
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "other"}]));
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert!(out["spec"].get("$setElementOrder/containers").is_none());
    }

    #[test]
    fn directives_delete_replace_and_retain() {
        let pod = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b", "image": "b:1"}],
                     "volumes": [{"name": "v", "emptyDir": {}}]}});
        let out = patched(
            "pods",
            pod,
            json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"x": null}},
                "spec": {"containers": [{"name": "a", "$patch": "delete"},
                                        {"name": "b", "$patch": "replace", "image": "b:2"}],
                         "volumes": [{"name": "v", "hostPath": {"path": "/d"}, "$retainKeys": ["name", "hostPath"]}]}
            }),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b", "image": "b:2"}])
        );
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v", "hostPath": {"path": "/d"}}])
        );
    }

    #[test]
    fn a_patch_of_many_items_merges_each_once() {
        let ports = |range: std::ops::Range<u32>, name: &str| -> Value {
            range.map(|p| json!({"port": p, "name": name})).collect()
        };
        let svc = json!({"spec": {"ports": ports(0..20_000, "old")},
                          "metadata": {"finalizers": (0..20_000).map(|i| format!("f{i}")).collect::<Vec<_>>()}});
        let out = patched(
            "services",
            svc,
            json!({"spec": {"ports": ports(10_000..30_000, "new")},
                   "metadata": {"finalizers": (10_000..30_000).map(|i| format!("f{i}")).collect::<Vec<_>>()}}),
        );
        let merged = out["spec"]["ports"].as_array().unwrap();
        assert_eq!(merged.len(), 30_000);
        assert_eq!(merged[9_999], json!({"port": 9_999, "name": "old"}));
        assert_eq!(merged[10_000], json!({"port": 10_000, "name": "new"}));
        assert_eq!(merged[29_999], json!({"port": 29_999, "name": "new"}));
        assert_eq!(
            out["metadata"]["finalizers"].as_array().unwrap().len(),
            30_000
        );
    }

    #[test]
    fn malformed_patches_are_refused_with_the_field_named() {
        let mut pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let rule = |path: &[&str]| list_rule("", "pods", path);
        let e = apply(
            &mut pod,
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            &rule,
        )
        .unwrap_err();
        assert!(e.0.contains("spec.containers"), "{e}");
        let e = apply(&mut pod, &json!({"spec": {"$patch": "explode"}}), &rule).unwrap_err();
        assert!(e.0.contains("explode"), "{e}");
        let e = apply(&mut pod, &json!({"spec": {"$unknown": 1}}), &rule).unwrap_err();
        assert!(e.0.contains("$unknown"), "{e}");
    }
}
