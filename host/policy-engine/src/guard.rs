//! The mutation guard: which fields of a pod a decoration policy may change.
//!
//! The host diffs the pod a policy returns against the pod it was given, in three passes:
//! 1. Paths: any change outside the allowed paths is refused. Paths use `.` for fields and `[*]`
//!    for any array element, e.g. `spec.containers[*].env`; a path allows its whole subtree.
//!    Some paths can never be allowed ([`NEVER_ALLOWED`]): the pod's identity, owner, code,
//!    privileges, ports and restart policy.
//! 2. The operator's own entries inside allowed subtrees: labels and annotations under the
//!    operator's prefixes ([`PROTECTED_KEY_PREFIXES`]: a changed replica index would make the
//!    operator delete and recreate the pod for ever) and the environment variables the operator
//!    sets ([`OPERATOR_ENV`]) are neither added, changed nor removed by any policy.
//! 3. Capabilities ([`crate::capabilities`]): secrets, tokens, host paths and volumes that reach
//!    outside the pod, each only when granted.
//!
//! And for a job queued by Kueue, [`check_queued_placement`]: what Kueue placed in the template
//! (node selector, tolerations, labels, scheduling gates) decides where the pods may run and
//! what quota they count against, so no policy removes or changes it.
//!
//! Pure logic over JSON values.

use std::fmt;

use serde_json::Value;

use crate::capabilities::{self, Capabilities, items};

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

/// The path that once let a policy add `hostPath` volumes; host paths are now a capability
/// (`capabilities.hostPaths`), and naming this path says so.
pub const HOST_PATH: &str = "spec.volumes[*].hostPath";

/// Label and annotation prefixes that belong to the operator: its selectors and bookkeeping
/// (`training.kubeflow.org/*`), the record of which policies shaped a pod, and the keys that
/// make a pod a member of its gang (a pod taken out of its group would be scheduled alone, or
/// wait for ever in another job's group).
pub const PROTECTED_KEY_PREFIXES: &[&str] = &[
    "training.kubeflow.org/",
    "policy.tfjob.dev/",
    tfjob_api::labels::VOLCANO_GROUP_ANNOTATION,
    tfjob_api::labels::VOLCANO_TASK_ANNOTATION,
    tfjob_api::labels::SCHEDULER_PLUGINS_GROUP_LABEL,
];

/// Environment variables the operator sets on the pods it builds.
pub const OPERATOR_ENV: &[&str] = &["TF_CONFIG"];

/// Paths no configuration can allow: identity, code and privilege of the pod, where it runs and
/// whom its names resolve to.
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
    "spec.containers[*].ports",
    "spec.initContainers[*].ports",
    "spec.restartPolicy",
    // Code run in the container, by other names.
    "spec.containers[*].lifecycle",
    "spec.containers[*].livenessProbe",
    "spec.containers[*].readinessProbe",
    "spec.containers[*].startupProbe",
    "spec.containers[*].workingDir",
    "spec.containers[*].volumeDevices",
    "spec.initContainers[*].lifecycle",
    "spec.initContainers[*].livenessProbe",
    "spec.initContainers[*].readinessProbe",
    "spec.initContainers[*].startupProbe",
    "spec.initContainers[*].workingDir",
    "spec.initContainers[*].restartPolicy",
    "spec.initContainers[*].volumeDevices",
    "spec.ephemeralContainers",
    // Where the pod runs and whom it can reach by name (TF_CONFIG's host names).
    "spec.nodeName",
    "spec.hostname",
    "spec.subdomain",
    "spec.hostAliases",
    "spec.dnsConfig",
    "spec.dnsPolicy",
    "spec.setHostnameAsFQDN",
    // Credentials and isolation.
    "spec.automountServiceAccountToken",
    "spec.imagePullSecrets",
    "spec.shareProcessNamespace",
    "spec.runtimeClassName",
    "spec.hostUsers",
    "spec.resourceClaims",
    "spec.os",
    "spec.securityContext",
    "spec.serviceAccountName",
    "spec.serviceAccount",
    "spec.hostNetwork",
    "spec.hostPID",
    "spec.hostIPC",
];

/// What one policy may change: paths, and the capabilities it was granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedPaths {
    patterns: Vec<Vec<Segment>>,
    grants: Capabilities,
}

/// A change the guard refused: where, and why when the path alone does not say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The offending path, e.g. `spec.containers[0].image`.
    pub path: String,
    pub why: Option<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            None => f.write_str(&self.path),
            Some(why) => write!(f, "{} ({why})", self.path),
        }
    }
}

impl Violation {
    fn at(path: impl Into<String>, why: impl Into<String>) -> Violation {
        Violation {
            path: path.into(),
            why: Some(why.into()),
        }
    }
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
    /// Allowed paths from patterns, with no capabilities. A pattern that could allow a
    /// never-allowed path is refused, naming it.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<AllowedPaths, String> {
        let mut parsed = Vec::new();
        for p in patterns {
            if p == HOST_PATH {
                return Err(format!(
                    "path {p:?}: host path volumes are a capability now; declare the prefixes \
                     under capabilities.hostPaths"
                ));
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
            grants: Capabilities::default(),
        })
    }

    /// The same paths with `grants` granted.
    pub fn granting(mut self, grants: Capabilities) -> AllowedPaths {
        self.grants = grants;
        self
    }

    /// The capabilities granted.
    pub fn grants(&self) -> &Capabilities {
        &self.grants
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

/// Checks that `after` differs from `before` only within `allowed`, leaves the operator's own
/// entries alone and adds nothing its grants do not cover. Returns the first violation.
pub fn check(before: &Value, after: &Value, allowed: &AllowedPaths) -> Result<(), Violation> {
    let mut path = Vec::new();
    let mut printable = String::new();
    walk(before, after, allowed, &mut path, &mut printable)
        .map_err(|path| Violation { path, why: None })?;
    check_protected_keys(before, after)?;
    check_operator_env(before, after)?;
    capabilities::check(before, after, &allowed.grants)
        .map_err(|(path, why)| Violation::at(path, why))
}

/// Labels and annotations under [`PROTECTED_KEY_PREFIXES`] are the same before and after.
fn check_protected_keys(before: &Value, after: &Value) -> Result<(), Violation> {
    for field in ["labels", "annotations"] {
        let map = |pod: &Value| {
            pod.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (old, new) = (map(before), map(after));
        let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            if PROTECTED_KEY_PREFIXES.iter().any(|p| key.starts_with(p))
                && old.get(key) != new.get(key)
            {
                return Err(Violation::at(
                    format!("metadata.{field}[{key}]"),
                    "the operator's own keys are not a policy's to change",
                ));
            }
        }
    }
    Ok(())
}

/// Every container's entries for [`OPERATOR_ENV`] are the same before and after (none added,
/// changed or removed).
fn check_operator_env(before: &Value, after: &Value) -> Result<(), Violation> {
    for list in ["initContainers", "containers"] {
        let pointer = format!("/spec/{list}");
        let (old, new) = (items(before, &pointer), items(after, &pointer));
        for (i, container) in new.iter().enumerate() {
            let operator_entries = |c: Option<&Value>| -> Vec<Value> {
                c.and_then(|c| c.get("env"))
                    .and_then(Value::as_array)
                    .map(|env| {
                        env.iter()
                            .filter(|e| {
                                e.get("name")
                                    .and_then(Value::as_str)
                                    .is_some_and(|n| OPERATOR_ENV.contains(&n))
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if operator_entries(old.get(i)) != operator_entries(Some(container)) {
                return Err(Violation::at(
                    format!("spec.{list}[{i}].env"),
                    format!("{} is set by the operator alone", OPERATOR_ENV.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

/// For a job Kueue queues: every node selector entry, toleration, label and scheduling gate of
/// `before` (the pod as built from the template Kueue wrote, with the flavors Kueue assigned) is
/// still in `after`, unchanged. Adding is allowed: a policy may narrow where pods run, never
/// move them off the flavor Kueue admitted them to.
pub fn check_queued_placement(before: &Value, after: &Value) -> Result<(), Violation> {
    const WHY: &str = "Kueue placed it and the job's queue label is set";
    for (pointer, path) in [
        ("/spec/nodeSelector", "spec.nodeSelector"),
        ("/metadata/labels", "metadata.labels"),
    ] {
        let Some(placed) = before.pointer(pointer).and_then(Value::as_object) else {
            continue;
        };
        let kept = after.pointer(pointer).and_then(Value::as_object);
        for (key, value) in placed {
            if kept.and_then(|m| m.get(key)) != Some(value) {
                return Err(Violation::at(format!("{path}[{key}]"), WHY));
            }
        }
    }
    for (pointer, path) in [
        ("/spec/tolerations", "spec.tolerations"),
        ("/spec/schedulingGates", "spec.schedulingGates"),
    ] {
        let kept = items(after, pointer);
        for (i, entry) in items(before, pointer).iter().enumerate() {
            if !kept.contains(entry) {
                return Err(Violation::at(format!("{path}[{i}]"), WHY));
            }
        }
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
        check(&pod(), &after, &AllowedPaths::default()).map_err(|v| v.path)
    }

    #[test]
    fn what_kueue_placed_stays_and_more_may_be_added() {
        let placed = json!({
            "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/podset": "worker", "team": "a"}},
            "spec": {
                "nodeSelector": {"instance-type": "spot"},
                "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
                "containers": [{"name": "tensorflow", "image": "tf:2"}]
            }
        });
        let mut more = placed.clone();
        more["spec"]["nodeSelector"]["zone"] = json!("a");
        more["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"key": "gpu", "operator": "Exists"}));
        more["metadata"]["labels"]["extra"] = json!("1");
        assert_eq!(check_queued_placement(&placed, &more), Ok(()));

        let refused = |edit: &dyn Fn(&mut Value)| {
            let mut after = placed.clone();
            edit(&mut after);
            check_queued_placement(&placed, &after).map_err(|v| v.to_string())
        };
        assert_eq!(
            refused(&|p| p["spec"]["nodeSelector"]["instance-type"] = json!("on-demand")),
            Err("spec.nodeSelector[instance-type] (Kueue placed it and the job's queue label is set)".into())
        );
        assert_eq!(
            refused(&|p| p["spec"]["nodeSelector"] = json!({})),
            Err("spec.nodeSelector[instance-type] (Kueue placed it and the job's queue label is set)".into())
        );
        assert_eq!(
            refused(&|p| p["spec"]["tolerations"] = json!([])),
            Err("spec.tolerations[0] (Kueue placed it and the job's queue label is set)".into())
        );
        assert_eq!(
            refused(&|p| p["spec"]["tolerations"][0]["effect"] = json!("NoExecute")),
            Err("spec.tolerations[0] (Kueue placed it and the job's queue label is set)".into())
        );
        assert_eq!(
            refused(&|p| p["metadata"]["labels"]["team"] = json!("b")),
            Err("metadata.labels[team] (Kueue placed it and the job's queue label is set)".into())
        );
        assert_eq!(
            refused(&|p| p["spec"]
                .as_object_mut()
                .unwrap()
                .remove("schedulingGates")
                .map(drop)
                .unwrap_or_default()),
            Err(
                "spec.schedulingGates[0] (Kueue placed it and the job's queue label is set)".into()
            )
        );
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
    fn host_path_volumes_need_a_granted_prefix() {
        let mut p = pod();
        p["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "root", "hostPath": {"path": "/"}}));
        assert_eq!(verdict(p.clone()), Err("spec.volumes[1].hostPath".into()));
        let allowed = AllowedPaths::default().granting(Capabilities {
            host_paths: vec!["/".into()],
            ..Capabilities::default()
        });
        assert_eq!(check(&pod(), &p, &allowed), Ok(()));
        let err = AllowedPaths::with_extra([HOST_PATH]).unwrap_err();
        assert!(err.contains("capabilities.hostPaths"), "{err}");
    }

    #[test]
    fn the_operators_keys_and_env_are_protected() {
        let operator_pod = || {
            let mut p = pod();
            p["metadata"]["labels"]["training.kubeflow.org/replica-index"] = json!("0");
            p["spec"]["containers"][0]["env"] = json!([{"name": "TF_CONFIG", "value": "{}"}]);
            p
        };
        type Edit = fn(&mut Value);
        let edits: [(&str, Edit); 9] = [
            (
                "metadata.labels[training.kubeflow.org/replica-index]",
                |p| p["metadata"]["labels"]["training.kubeflow.org/replica-index"] = json!("7"),
            ),
            (
                "metadata.labels[training.kubeflow.org/replica-index]",
                |p| {
                    p["metadata"]["labels"]
                        .as_object_mut()
                        .unwrap()
                        .remove("training.kubeflow.org/replica-index");
                },
            ),
            ("metadata.labels[training.kubeflow.org/job-role]", |p| {
                p["metadata"]["labels"]["training.kubeflow.org/job-role"] = json!("master")
            }),
            ("metadata.annotations[policy.tfjob.dev/policies]", |p| {
                p["metadata"]["annotations"] = json!({"policy.tfjob.dev/policies": "none"})
            }),
            ("metadata.annotations[scheduling.k8s.io/group-name]", |p| {
                p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": "other"})
            }),
            ("metadata.labels[scheduling.x-k8s.io/pod-group]", |p| {
                p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = json!("other")
            }),
            ("spec.containers[0].env", |p| {
                p["spec"]["containers"][0]["env"][0]["value"] = json!("{\"cluster\":{}}")
            }),
            ("spec.containers[0].env", |p| {
                p["spec"]["containers"][0]["env"] = json!([])
            }),
            ("spec.containers[0].env", |p| {
                p["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "TF_CONFIG", "value": "{}"}))
            }),
        ];
        for (path, edit) in edits {
            let mut after = operator_pod();
            edit(&mut after);
            let v = check(&operator_pod(), &after, &AllowedPaths::default()).unwrap_err();
            assert_eq!(v.path, path);
        }
        // Other labels and variables are ordinary decoration.
        let mut after = operator_pod();
        after["metadata"]["labels"]["team"] = json!("ml");
        after["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "TFJOB_NAME", "value": "x"}));
        assert_eq!(
            check(&operator_pod(), &after, &AllowedPaths::default()),
            Ok(())
        );
    }

    #[test]
    fn ports_and_restart_policy_are_never_allowed() {
        for path in [
            "spec.containers[*].ports",
            "spec.restartPolicy",
            "spec.initContainers[*].ports",
        ] {
            assert!(AllowedPaths::with_extra([path]).is_err(), "{path}");
        }
        let mut p = pod();
        p["spec"]["restartPolicy"] = json!("Always");
        assert_eq!(verdict(p), Err("spec.restartPolicy".into()));
    }

    #[test]
    fn never_allowed_paths_cannot_be_configured() {
        let err = AllowedPaths::with_extra(["spec.containers[*].image"]).unwrap_err();
        assert!(err.contains("spec.containers[*].image"), "{err}");
        assert!(AllowedPaths::with_extra(["spec"]).is_err());
        assert!(AllowedPaths::with_extra(["spec.topologySpreadConstraints"]).is_ok());
        for never in [
            "spec.containers[*].lifecycle",
            "spec.hostAliases",
            "spec.dnsConfig",
            "spec.automountServiceAccountToken",
            "spec.runtimeClassName",
            "spec.ephemeralContainers",
        ] {
            assert!(AllowedPaths::with_extra([never]).is_err(), "{never}");
        }
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
