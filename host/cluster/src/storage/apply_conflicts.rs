//! Server-side apply's conflicts: a field another applier owns, set to a different value, is
//! refused with `409 Conflict` naming the field and its owner, unless the apply is forced, which
//! takes the field over. Ownership is read from the object's `managedFields` entries of
//! operation `Apply` (the store records no field sets for other writes, so only appliers
//! conflict here; a real server also reports the managers of updates).

use serde_json::Value;

use crate::error::{ApiError, StatusCause, StatusDetails};

/// A field another manager owns with another value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    /// The field as kube-apiserver prints it: `.data.k`.
    pub field: String,
    path: Vec<String>,
}

/// The conflicts of `manager` applying `applied` to `current`.
pub fn conflicts(current: &Value, applied: &Value, manager: &str) -> Vec<Conflict> {
    let mut found = Vec::new();
    for entry in entries(current) {
        let owner = entry
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if owner == manager || entry.get("operation").and_then(Value::as_str) != Some("Apply") {
            continue;
        }
        let mut paths = Vec::new();
        leaves(
            entry.get("fieldsV1").unwrap_or(&Value::Null),
            &mut Vec::new(),
            &mut paths,
        );
        for path in paths {
            let (Some(new), Some(old)) = (at(applied, &path), at(current, &path)) else {
                continue;
            };
            // A map conflicts key by key, never as a whole: an entry of `{}` for a map is
            // what this store records when an applier set none of its keys
            // (`metadata` with only the server's own fields).
            if new.is_object() || old.is_object() {
                continue;
            }
            if new != old {
                found.push(Conflict {
                    manager: owner.to_owned(),
                    api_version: entry
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    field: format!(".{}", path.join(".")),
                    path,
                });
            }
        }
    }
    found
}

/// The message kube-apiserver refuses a conflicting apply with.
pub fn message(conflicts: &[Conflict]) -> String {
    let each = |c: &Conflict| {
        format!(
            "conflict with \"{}\" using {}: {}",
            c.manager, c.api_version, c.field
        )
    };
    match conflicts {
        [one] => format!("Apply failed with 1 conflict: {}", each(one)),
        many => format!(
            "Apply failed with {} conflicts: {}",
            many.len(),
            many.iter().map(each).collect::<Vec<_>>().join("\n")
        ),
    }
}

/// The refusal: `409 Conflict` with one cause per field, as kube-apiserver answers.
pub fn refusal(conflicts: &[Conflict], plural: &str, group: &str, name: &str) -> ApiError {
    ApiError {
        details: Some(Box::new(StatusDetails {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: plural.to_owned(),
            causes: conflicts
                .iter()
                .map(|c| StatusCause {
                    reason: "FieldManagerConflict".into(),
                    field: c.field.clone(),
                    message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                })
                .collect(),
        })),
        ..ApiError::conflict(message(conflicts))
    }
}

/// A forced apply takes the conflicting fields over: they leave their former owners' sets.
pub fn take_over(obj: &mut Value, conflicts: &[Conflict]) {
    let Some(list) = obj
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in list.iter_mut() {
        let owner = entry
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        for c in conflicts.iter().filter(|c| c.manager == owner) {
            if let Some(fields) = entry.get_mut("fieldsV1") {
                remove(fields, &c.path);
            }
        }
    }
}

fn entries(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The paths of the leaf fields of a `FieldsV1` set (`{"f:data": {"f:k": {}}}` has `data.k`).
fn leaves(set: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(map) = set.as_object() else { return };
    let children: Vec<(&String, &Value)> =
        map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    for (key, child) in children {
        prefix.push(key["f:".len()..].to_owned());
        leaves(child, prefix, out);
        prefix.pop();
    }
}

fn at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// Removes `path` from a `FieldsV1` set, and the parents it leaves empty.
fn remove(set: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let key = format!("f:{first}");
    let Some(map) = set.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(&key);
        return;
    }
    if let Some(child) = map.get_mut(&key) {
        remove(child, rest);
        if child.as_object().is_some_and(|c| c.is_empty()) {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned_by(manager: &str) -> Value {
        json!({"metadata": {"name": "b", "managedFields": [
            {"manager": manager, "operation": "Apply", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}, "f:same": {}}}}]},
               "data": {"k": "v", "same": "s"}})
    }

    #[test]
    fn another_appliers_field_set_differently_conflicts() {
        let current = owned_by("first");
        let applied = json!({"data": {"k": "other", "same": "s", "new": "n"}});
        let found = conflicts(&current, &applied, "second");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, ".data.k");
        assert_eq!(
            message(&found),
            "Apply failed with 1 conflict: conflict with \"first\" using v1: .data.k"
        );
        let refused = refusal(&found, "configmaps", "", "b");
        assert_eq!(refused.code, 409);
        assert_eq!(
            refused.details.unwrap().causes[0].reason,
            "FieldManagerConflict"
        );
        // The owner itself, or the same value, is no conflict.
        assert!(conflicts(&current, &applied, "first").is_empty());
        assert!(conflicts(&current, &json!({"data": {"k": "v"}}), "second").is_empty());
    }

    #[test]
    fn a_forced_apply_takes_the_field_from_its_owner() {
        let mut current = owned_by("first");
        let found = conflicts(&current, &json!({"data": {"k": "x"}}), "second");
        take_over(&mut current, &found);
        assert_eq!(
            current["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:same": {}}})
        );
        assert!(conflicts(&current, &json!({"data": {"k": "y"}}), "second").is_empty());
    }

    #[test]
    fn a_map_owned_without_keys_conflicts_with_nothing() {
        let mut current = owned_by("kubectl");
        current["metadata"]["managedFields"][0]["fieldsV1"] = json!({"f:metadata": {}});
        let applied = json!({"metadata": {"annotations": {"a": "b"}}});
        assert!(conflicts(&current, &applied, "kubectl-client-side-apply").is_empty());
    }

    #[test]
    fn updates_and_malformed_entries_are_no_owners() {
        let mut current = owned_by("first");
        current["metadata"]["managedFields"][0]["operation"] = json!("Update");
        assert!(conflicts(&current, &json!({"data": {"k": "x"}}), "second").is_empty());
        current["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Apply",
                                                       "fieldsV1": "not a set"}]);
        assert!(conflicts(&current, &json!({"data": {"k": "x"}}), "second").is_empty());
    }
}
