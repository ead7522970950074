//! `meta.k8s.io/v1` Table responses, which `kubectl get` asks for: CRD printer columns (so
//! `kubectl get tfjobs` shows STATE), the usual pod columns, and NAME/AGE for everything else.

use std::borrow::Borrow;

use serde_json::{Value, json};

use crate::storage::store::ResourceType;

/// Whether the client asked for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn column(name: &str, type_: &str, format: &str) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": "", "priority": 0})
}

/// Human-readable age, as kubectl prints it (`45s`, `3m`, `2h`, `4d`).
pub fn age(timestamp: Option<&str>) -> String {
    let Some(t) = timestamp.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = jiff::Timestamp::now().duration_since(t).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Evaluates the small JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[-1:]`, and
/// filters on a field of a list's items, `.a[?(@.type=='Ready')].status` (the first match).
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = obj;
    for part in path_parts(path.trim_start_matches('.')) {
        let (field, index) = match part.split_once('[') {
            Some((f, rest)) => (f, Some(rest.strip_suffix(']').unwrap_or(rest))),
            None => (part, None),
        };
        if !field.is_empty() {
            current = current.get(field)?;
        }
        if let Some(index) = index {
            let items = current.as_array()?;
            current = match index {
                "-1:" | "-1" => items.last()?,
                i if i.starts_with("?(") => {
                    let (key, wanted) = filter(i)?;
                    items
                        .iter()
                        .find(|item| item.get(key).and_then(Value::as_str) == Some(wanted))?
                }
                i => items.get(i.parse::<usize>().ok()?)?,
            };
        }
    }
    Some(current)
}

/// The dot-separated parts of a path; dots inside brackets belong to their part.
fn path_parts(path: &str) -> Vec<&str> {
    crate::storage::selector::split_outside(path, '.', ('[', ']'))
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect()
}

/// `?(@.key=='value')` as its key and value.
fn filter(expr: &str) -> Option<(&str, &str)> {
    let inner = expr.strip_prefix("?(@.")?.strip_suffix(')')?;
    let (key, value) = inner.split_once("==")?;
    let value = value.trim();
    let unquoted = value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))?;
    Some((key.trim(), unquoted))
}

fn cell(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(other) => json!(other.to_string()),
    }
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .map(|s| s["restartCount"].as_i64().unwrap_or(0))
        .sum();
    let waiting = statuses
        .iter()
        .find_map(|s| s.pointer("/state/waiting/reason").and_then(Value::as_str));
    let terminated = statuses.iter().find_map(|s| {
        s.pointer("/state/terminated/reason")
            .and_then(Value::as_str)
    });
    let status = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .or(waiting)
        .or(terminated)
        .or_else(|| pod.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("Pending");
    vec![
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts),
    ]
}

/// The table of `objects`.
pub fn table<O: Borrow<Value>>(t: &ResourceType, objects: &[O], resource_version: u64) -> Value {
    let mut columns = vec![column("Name", "string", "name")];
    let is_pod = t.group.is_empty() && t.plural == "pods";
    if is_pod {
        columns.push(column("Ready", "string", ""));
        columns.push(column("Status", "string", ""));
        columns.push(column("Restarts", "integer", ""));
    }
    let printer: Vec<&Value> = t
        .printer_columns
        .iter()
        .filter(|c| c["jsonPath"] != ".metadata.creationTimestamp")
        .collect();
    for c in &printer {
        let mut def = column(
            c["name"].as_str().unwrap_or(""),
            c["type"].as_str().unwrap_or("string"),
            "",
        );
        // kubectl shows columns of a higher priority with `-o wide` only.
        if let Some(p) = c.get("priority").filter(|p| p.is_u64()) {
            def["priority"] = p.clone();
        }
        columns.push(def);
    }
    columns.push(column("Age", "string", ""));
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let o: &Value = o.borrow();
            let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            if is_pod {
                cells.extend(pod_cells(o));
            }
            for c in &printer {
                cells.push(cell(json_path(o, c["jsonPath"].as_str().unwrap_or(""))));
            }
            cells.push(json!(age(o.pointer("/metadata/creationTimestamp").and_then(Value::as_str))));
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths_of_printer_columns() {
        let job = json!({"status": {"conditions": [{"type": "Created"}, {"type": "Running"}]}});
        assert_eq!(
            json_path(&job, ".status.conditions[-1:].type"),
            Some(&json!("Running"))
        );
        assert_eq!(
            json_path(&job, ".status.conditions[0].type"),
            Some(&json!("Created"))
        );
        assert_eq!(json_path(&job, ".spec.missing"), None);
        let wl = json!({"status": {"conditions": [
            {"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "False"},
        ]}});
        let admitted = ".status.conditions[?(@.type=='Admitted')].status";
        assert_eq!(json_path(&wl, admitted), Some(&json!("False")));
        let finished = ".status.conditions[?(@.type==\"Finished\")].status";
        assert_eq!(json_path(&wl, finished), None);
    }

    #[test]
    fn crd_tables_carry_printer_columns() {
        let mut t = ResourceType::new("kubeflow.org", "v1", "TFJob", "tfjobs", true, true);
        t.printer_columns = vec![
            json!({"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
        ];
        let job =
            json!({"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Succeeded"}]}});
        let table = table(&t, &[job], 7);
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["Name", "State", "Age"]);
        assert_eq!(table["rows"][0]["cells"][1], "Succeeded");
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
