//! An `ApplyConfiguration` merged into its object as server-side apply merges, for the fields
//! of a pod and of a container's requirements:
//!
//! - maps merge field by field, recursively; a field set to `null` is removed;
//! - a list the Kubernetes API declares keyed (`x-kubernetes-list-type: map`) merges item by
//!   item on its keys: an item whose keys match is merged into, another is appended. Keyed:
//!   `containers`, `initContainers`, `ephemeralContainers`, `volumes`, `imagePullSecrets`,
//!   `resourceClaims`, `schedulingGates` (by `name`), `hostAliases` (`ip`),
//!   `topologySpreadConstraints` (`topologyKey`, `whenUnsatisfiable`) and
//!   `metadata.ownerReferences` (`uid`); in a container `env` (`name`), `ports`
//!   (`containerPort`, `protocol`, TCP when absent), `volumeMounts` (`mountPath`),
//!   `volumeDevices` (`devicePath`) and `resizePolicy` (`resourceName`); in requirements
//!   `claims` (`name`);
//! - `metadata.finalizers` is a set: the union, in order;
//! - every other list is atomic: the configuration's list replaces it (as `tolerations` is
//!   replaced by server-side apply: to add one, use a `JSONPatch` `add` at `/spec/tolerations/-`).
//!
//! Ownership (which manager owns which field) is not modelled: a policy's configuration always
//! wins, and the guard afterwards decides what a policy may change at all.

use serde_json::Value as Json;

/// The object a configuration applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Pod,
    Requirements,
}

/// How the list at a path merges.
enum ListKind {
    Keyed(&'static [&'static str]),
    Set,
    Atomic,
}

/// Merges `configuration` into `target`; an error when the configuration is not an object.
pub fn apply(target: &mut Json, configuration: &Json, root: Root) -> Result<(), String> {
    if !configuration.is_object() {
        return Err(format!(
            "an applyConfiguration must be an object (Object{{...}}), not {}",
            kind(configuration)
        ));
    }
    merge(target, configuration, root, &mut Vec::new());
    Ok(())
}

fn merge(target: &mut Json, patch: &Json, root: Root, path: &mut Vec<String>) {
    match (target, patch) {
        (Json::Object(fields), Json::Object(changes)) => {
            for (name, change) in changes {
                if change.is_null() {
                    fields.remove(name);
                    continue;
                }
                path.push(name.clone());
                match fields.get_mut(name) {
                    Some(existing) => merge(existing, change, root, path),
                    None => {
                        fields.insert(name.clone(), change.clone());
                    }
                }
                path.pop();
            }
        }
        (Json::Array(items), Json::Array(changes)) => match list_kind(root, path) {
            ListKind::Keyed(keys) => {
                for change in changes {
                    let found = items.iter_mut().find(|item| same_keys(item, change, keys));
                    match found {
                        Some(item) => {
                            path.push("[]".into());
                            merge(item, change, root, path);
                            path.pop();
                        }
                        None => items.push(change.clone()),
                    }
                }
            }
            ListKind::Set => {
                for change in changes {
                    if !items.contains(change) {
                        items.push(change.clone());
                    }
                }
            }
            ListKind::Atomic => *items = changes.clone(),
        },
        (target, patch) => *target = patch.clone(),
    }
}

/// Whether `a` and `b` agree on every key (a missing `protocol` is TCP, as the API defaults it).
fn same_keys(a: &Json, b: &Json, keys: &[&str]) -> bool {
    keys.iter().all(|k| {
        let get = |v: &Json| match (v.get(*k), *k) {
            (None, "protocol") => Some(Json::String("TCP".into())),
            (found, _) => found.cloned(),
        };
        get(a) == get(b)
    })
}

fn list_kind(root: Root, path: &[String]) -> ListKind {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (root, path.as_slice()) {
        (Root::Requirements, ["claims"]) => ListKind::Keyed(&["name"]),
        (Root::Pod, ["metadata", "ownerReferences"]) => ListKind::Keyed(&["uid"]),
        (Root::Pod, ["metadata", "finalizers"]) => ListKind::Set,
        (
            Root::Pod,
            [
                "spec",
                "containers"
                | "initContainers"
                | "ephemeralContainers"
                | "volumes"
                | "imagePullSecrets"
                | "resourceClaims"
                | "schedulingGates",
            ],
        ) => ListKind::Keyed(&["name"]),
        (Root::Pod, ["spec", "hostAliases"]) => ListKind::Keyed(&["ip"]),
        (Root::Pod, ["spec", "topologySpreadConstraints"]) => {
            ListKind::Keyed(&["topologyKey", "whenUnsatisfiable"])
        }
        (
            Root::Pod,
            [
                "spec",
                "containers" | "initContainers" | "ephemeralContainers",
                "[]",
                field,
            ],
        ) => match *field {
            "env" => ListKind::Keyed(&["name"]),
            "ports" => ListKind::Keyed(&["containerPort", "protocol"]),
            "volumeMounts" => ListKind::Keyed(&["mountPath"]),
            "volumeDevices" => ListKind::Keyed(&["devicePath"]),
            "resizePolicy" => ListKind::Keyed(&["resourceName"]),
            _ => ListKind::Atomic,
        },
        (
            Root::Pod,
            [
                "spec",
                "containers" | "initContainers" | "ephemeralContainers",
                "[]",
                "resources",
                "claims",
            ],
        ) => ListKind::Keyed(&["name"]),
        _ => ListKind::Atomic,
    }
}

fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Json {
        json!({
            "metadata": {"name": "w-0", "labels": {"app": "tf"}, "finalizers": ["a"]},
            "spec": {
                "containers": [
                    {"name": "tensorflow", "image": "tf:2", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 2222}]},
                    {"name": "sidecar", "image": "log:1"}
                ],
                "tolerations": [{"key": "old", "operator": "Exists"}]
            }
        })
    }

    #[test]
    fn maps_merge_and_keyed_lists_merge_by_their_keys() {
        let mut p = pod();
        let configuration = json!({
            "metadata": {"labels": {"team": "vision"}, "finalizers": ["a", "b"]},
            "spec": {"containers": [
                {"name": "tensorflow", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                 "ports": [{"containerPort": 2222, "protocol": "TCP", "name": "tfjob-port"}]},
                {"name": "init-like", "image": "busybox"}
            ]}
        });
        apply(&mut p, &configuration, Root::Pod).unwrap();
        assert_eq!(
            p["metadata"]["labels"],
            json!({"app": "tf", "team": "vision"})
        );
        assert_eq!(p["metadata"]["finalizers"], json!(["a", "b"]));
        let containers = p["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 3, "sidecar kept, a new one appended");
        assert_eq!(containers[0]["image"], "tf:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "2"}, {"name": "B", "value": "3"}])
        );
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 2222, "protocol": "TCP", "name": "tfjob-port"}]),
            "an absent protocol is TCP: the configured port is the pod's"
        );
    }

    #[test]
    fn atomic_lists_are_replaced_and_null_removes() {
        let mut p = pod();
        let configuration = json!({
            "metadata": {"labels": {"app": null}},
            "spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
        });
        apply(&mut p, &configuration, Root::Pod).unwrap();
        assert_eq!(p["metadata"]["labels"], json!({}));
        assert_eq!(
            p["spec"]["tolerations"],
            json!([{"key": "gpu", "operator": "Exists"}])
        );
    }

    #[test]
    fn requirements_merge_and_a_non_object_is_refused() {
        let mut r = json!({"limits": {"memory": "4Gi"}});
        apply(
            &mut r,
            &json!({"requests": {"memory": "1Gi"}}),
            Root::Requirements,
        )
        .unwrap();
        assert_eq!(
            r,
            json!({"limits": {"memory": "4Gi"}, "requests": {"memory": "1Gi"}})
        );
        let err = apply(&mut r, &json!([1]), Root::Requirements).unwrap_err();
        assert!(err.contains("must be an object"), "{err}");
    }
}
