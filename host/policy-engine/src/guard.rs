//! The mutation guard: which fields of a pod a decoration policy may change.
//!
//! The host diffs the pod a policy returns against the pod it was given and rejects any change
//! outside the allowed paths. Paths use `.` for fields and `[*]` for any array element, e.g.
//! `spec.containers[*].env`. A path allows its whole subtree. Pure logic over JSON values.

use serde_json::Value;

/// Paths every decoration policy may change.
pub const DEFAULT_ALLOWED: &[&str] = &[
    "metadata.labels",
    "metadata.annotations",
    "spec.tolerations",
    "spec.nodeSelector",
    "spec.affinity",
    "spec.schedulerName",
    "spec.priorityClassName",
    "spec.volumes",
    "spec.containers[*].env",
    "spec.containers[*].envFrom",
    "spec.containers[*].volumeMounts",
    "spec.containers[*].resources",
    "spec.initContainers[*].env",
    "spec.initContainers[*].envFrom",
    "spec.initContainers[*].volumeMounts",
    "spec.initContainers[*].resources",
];

/// The path that lets a policy add `hostPath` volumes; never allowed unless configured.
pub const HOST_PATH: &str = "spec.volumes[*].hostPath";

/// Paths no configuration can allow: identity, code and privilege of the pod.
pub const NEVER_ALLOWED: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.ownerReferences",
    "spec.containers[*].image",
    "spec.containers[*].command",
    "spec.containers[*].args",
    "spec.containers[*].securityContext",
    "spec.initContainers[*].image",
    "spec.initContainers[*].command",
    "spec.initContainers[*].args",
    "spec.initContainers[*].securityContext",
    "spec.securityContext",
    "spec.serviceAccountName",
    "spec.serviceAccount",
    "spec.hostNetwork",
    "spec.hostPID",
    "spec.hostIPC",
];

/// The paths one policy may change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedPaths {
    patterns: Vec<Vec<Segment>>,
    host_path: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Field(String),
    AnyIndex,
}

impl Default for AllowedPaths {
    fn default() -> Self {
        AllowedPaths::new(DEFAULT_ALLOWED.iter().copied()).expect("default paths are valid")
    }
}

impl AllowedPaths {
    /// Allowed paths from patterns; `spec.volumes[*].hostPath` enables host path volumes.
    /// A pattern that could allow a never-allowed path is refused, naming it.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<AllowedPaths, String> {
        let mut parsed = Vec::new();
        let mut host_path = false;
        for p in patterns {
            if p == HOST_PATH {
                host_path = true;
                continue;
            }
            let segments = parse(p)?;
            for never in NEVER_ALLOWED {
                let n = parse(never).expect("constant paths parse");
                if covers(&segments, &n) || covers(&n, &segments) {
                    return Err(format!("path {p:?} may not be allowed: it touches {never}"));
                }
            }
            parsed.push(segments);
        }
        Ok(AllowedPaths {
            patterns: parsed,
            host_path,
        })
    }

    /// The default paths plus `extra`.
    pub fn with_extra<'a>(
        extra: impl IntoIterator<Item = &'a str>,
    ) -> Result<AllowedPaths, String> {
        AllowedPaths::new(DEFAULT_ALLOWED.iter().copied().chain(extra))
    }

    fn allows(&self, path: &[Segment]) -> bool {
        self.patterns.iter().any(|p| covers(p, path))
    }
}

/// Whether `pattern` is a prefix of `path`, with `[*]` matching any index.
fn covers(pattern: &[Segment], path: &[Segment]) -> bool {
    pattern.len() <= path.len()
        && pattern.iter().zip(path).all(|(p, s)| match (p, s) {
            (Segment::AnyIndex, Segment::AnyIndex) => true,
            (Segment::Field(a), Segment::Field(b)) => a == b,
            _ => false,
        })
}

fn parse(pattern: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    for part in pattern.split('.') {
        let (field, rest) = part.split_once('[').map_or((part, ""), |(f, r)| (f, r));
        if field.is_empty() {
            return Err(format!("invalid path {pattern:?}: empty field name"));
        }
        out.push(Segment::Field(field.to_owned()));
        let mut rest = rest;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("*]") {
                out.push(Segment::AnyIndex);
                rest = r.strip_prefix('[').unwrap_or(r);
            } else {
                return Err(format!(
                    "invalid path {pattern:?}: only [*] indexes are supported"
                ));
            }
        }
    }
    Ok(out)
}

/// Checks that `after` differs from `before` only within `allowed`. Returns the first
/// offending path (`spec.containers[0].image`).
pub fn check(before: &Value, after: &Value, allowed: &AllowedPaths) -> Result<(), String> {
    let mut path = Vec::new();
    let mut printable = String::new();
    walk(before, after, allowed, &mut path, &mut printable)?;
    if !allowed.host_path {
        check_no_new_host_path(before, after)?;
    }
    Ok(())
}

fn walk(
    before: &Value,
    after: &Value,
    allowed: &AllowedPaths,
    path: &mut Vec<Segment>,
    printable: &mut String,
) -> Result<(), String> {
    if before == after || (!path.is_empty() && allowed.allows(path)) {
        return Ok(());
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let null = Value::Null;
                let (bv, av) = (b.get(key).unwrap_or(&null), a.get(key).unwrap_or(&null));
                let len = printable.len();
                if !printable.is_empty() {
                    printable.push('.');
                }
                printable.push_str(key);
                path.push(Segment::Field(key.clone()));
                walk(bv, av, allowed, path, printable)?;
                path.pop();
                printable.truncate(len);
            }
            Ok(())
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                let len = printable.len();
                printable.push_str(&format!("[{i}]"));
                path.push(Segment::AnyIndex);
                walk(bv, av, allowed, path, printable)?;
                path.pop();
                printable.truncate(len);
            }
            Ok(())
        }
        // Missing on one side and null on the other are the same to Kubernetes.
        (Value::Null, Value::Object(m)) | (Value::Object(m), Value::Null) if m.is_empty() => Ok(()),
        (Value::Null, Value::Array(v)) | (Value::Array(v), Value::Null) if v.is_empty() => Ok(()),
        _ => Err(if printable.is_empty() {
            "<root>".to_owned()
        } else {
            printable.clone()
        }),
    }
}

fn check_no_new_host_path(before: &Value, after: &Value) -> Result<(), String> {
    let host_paths = |pod: &Value| -> Vec<(String, Value)> {
        pod.pointer("/spec/volumes")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| {
                        Some((
                            v.get("name")?.as_str()?.to_owned(),
                            v.get("hostPath")?.clone(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let existing = host_paths(before);
    for (name, hp) in host_paths(after) {
        if !existing.contains(&(name.clone(), hp)) {
            return Err(format!("spec.volumes[{name}].hostPath"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2", "env": []}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        })
    }

    fn verdict(after: Value) -> Result<(), String> {
        check(&pod(), &after, &AllowedPaths::default())
    }

    #[test]
    fn allowed_changes_pass() {
        let mut p = pod();
        p["metadata"]["labels"]["team"] = json!("ml");
        p["metadata"]["annotations"] = json!({"x": "y"});
        p["spec"]["tolerations"] = json!([{"key": "gpu", "operator": "Exists"}]);
        p["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
        p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}]);
        assert_eq!(verdict(p), Ok(()));
    }

    #[test]
    fn forbidden_changes_name_the_path() {
        let mut p = pod();
        p["spec"]["containers"][0]["image"] = json!("evil:latest");
        assert_eq!(verdict(p), Err("spec.containers[0].image".into()));
        let mut p = pod();
        p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        assert_eq!(verdict(p), Err("spec.containers[0].securityContext".into()));
        let mut p = pod();
        p["spec"]["serviceAccountName"] = json!("admin");
        assert_eq!(verdict(p), Err("spec.serviceAccountName".into()));
        let mut p = pod();
        p["spec"]["hostNetwork"] = json!(true);
        assert_eq!(verdict(p), Err("spec.hostNetwork".into()));
        let mut p = pod();
        p["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "x"}));
        assert_eq!(verdict(p), Err("spec.containers".into()));
    }

    #[test]
    fn host_path_volumes_need_explicit_permission() {
        let mut p = pod();
        p["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "root", "hostPath": {"path": "/"}}));
        assert_eq!(
            verdict(p.clone()),
            Err("spec.volumes[root].hostPath".into())
        );
        let allowed = AllowedPaths::with_extra([HOST_PATH]).unwrap();
        assert_eq!(check(&pod(), &p, &allowed), Ok(()));
    }

    #[test]
    fn never_allowed_paths_cannot_be_configured() {
        let err = AllowedPaths::with_extra(["spec.containers[*].image"]).unwrap_err();
        assert!(err.contains("spec.containers[*].image"), "{err}");
        assert!(AllowedPaths::with_extra(["spec"]).is_err());
        assert!(AllowedPaths::with_extra(["spec.runtimeClassName"]).is_ok());
        assert!(AllowedPaths::new(["spec.containers[0].env"]).is_err());
    }

    #[test]
    fn empty_and_missing_are_the_same() {
        let mut p = pod();
        p["spec"]["nodeName"] = Value::Null;
        p["metadata"]["finalizers"] = json!([]);
        assert_eq!(verdict(p), Ok(()));
    }
}
