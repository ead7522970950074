//! Capabilities: what a decoration may add to a pod beyond plain decoration, each off unless the
//! policy's manifest declares it and the operator's ceiling allows it.
//!
//! A decorated pod runs with the job's service account in the job's namespace, so whatever a
//! policy mounts or injects is read by the job's code. Some additions reach beyond the pod:
//! secrets, service-account tokens for other audiences, host directories, network and cloud
//! storage. A policy gets none of them by default; its manifest declares what it needs
//! (`capabilities`), and the cluster operator sets the most any policy may be granted (the
//! ceiling: `--policy-allow` and `--policy-allow-host-path`). A manifest that asks for more than
//! the ceiling is refused, naming the field, so a policy never runs with less than it was written
//! for without anyone knowing.
//!
//! [`check`] compares the pod before and after one decoration and names the first addition the
//! grant does not cover. Volumes and environment entries the pod already had (from the job's
//! template or an earlier policy) are not the policy's doing and are not judged again.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Capabilities declared by a manifest, granted to a policy, or allowed by the operator (the
/// ceiling). All off by default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Capabilities {
    /// Secret volumes (also as projected sources), `env[].valueFrom.secretKeyRef` and
    /// `envFrom[].secretRef`.
    #[serde(skip_serializing_if = "is_false")]
    pub secrets: bool,
    /// Projected `serviceAccountToken` sources.
    #[serde(skip_serializing_if = "is_false")]
    pub service_account_tokens: bool,
    /// Volume types that reach outside the pod and the node: persistent volume claims,
    /// ephemeral volumes, csi, nfs, iscsi, image volumes and every other network or cloud
    /// source.
    #[serde(skip_serializing_if = "is_false")]
    pub external_volumes: bool,
    /// `hostPath` volumes under these absolute path prefixes, mounted read-only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_paths: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One capability named as on the command line (`--policy-allow`).
pub const NAMES: [&str; 3] = ["secrets", "service-account-tokens", "external-volumes"];

impl Capabilities {
    /// Every capability, every host path: for checking a manifest's shape where the operator's
    /// ceiling does not apply yet (activation checks it against the real one).
    pub fn everything() -> Capabilities {
        Capabilities {
            secrets: true,
            service_account_tokens: true,
            external_volumes: true,
            host_paths: vec!["/".to_owned()],
        }
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        *self == Capabilities::default()
    }

    /// Turns on the capability spelled `name` (one of [`NAMES`]).
    pub fn allow(&mut self, name: &str) -> Result<(), String> {
        match name {
            "secrets" => self.secrets = true,
            "service-account-tokens" => self.service_account_tokens = true,
            "external-volumes" => self.external_volumes = true,
            other => {
                return Err(format!(
                    "unknown capability {other:?}: expected one of {}",
                    NAMES.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Checks the shape of the host path prefixes: absolute, no `.` or `..` segments.
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (i, prefix) in self.host_paths.iter().enumerate() {
            check_prefix(prefix).map_err(|e| (format!("hostPaths[{i}]"), e))?;
        }
        Ok(())
    }

    /// `self` as granted under `ceiling`: every declared capability must be allowed there, and
    /// every declared host path prefix must lie under one of the ceiling's. The error names the
    /// field (relative to `capabilities`) and says what the ceiling is.
    pub fn grant(&self, ceiling: &Capabilities) -> Result<Capabilities, (String, String)> {
        self.validate()?;
        for (declared, allowed, field, flag) in [
            (
                self.secrets,
                ceiling.secrets,
                "secrets",
                "--policy-allow secrets",
            ),
            (
                self.service_account_tokens,
                ceiling.service_account_tokens,
                "serviceAccountTokens",
                "--policy-allow service-account-tokens",
            ),
            (
                self.external_volumes,
                ceiling.external_volumes,
                "externalVolumes",
                "--policy-allow external-volumes",
            ),
        ] {
            if declared && !allowed {
                return Err((
                    field.to_owned(),
                    format!("not allowed by the operator (it runs without {flag})"),
                ));
            }
        }
        for (i, prefix) in self.host_paths.iter().enumerate() {
            if !ceiling.host_paths.iter().any(|c| under(prefix, c)) {
                return Err((
                    format!("hostPaths[{i}]"),
                    format!(
                        "{prefix:?} is not under a host path the operator allows ({})",
                        if ceiling.host_paths.is_empty() {
                            "none".to_owned()
                        } else {
                            ceiling.host_paths.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(self.clone())
    }

    /// A one-line summary for listings, e.g. `secrets,hostPaths=/opt/drivers`; `-` for none.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.secrets {
            parts.push("secrets".into());
        }
        if self.service_account_tokens {
            parts.push("serviceAccountTokens".into());
        }
        if self.external_volumes {
            parts.push("externalVolumes".into());
        }
        if !self.host_paths.is_empty() {
            parts.push(format!("hostPaths={}", self.host_paths.join(":")));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(",")
        }
    }
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("{prefix:?} is not an absolute path"));
    }
    if prefix.split('/').any(|s| s == "." || s == "..") {
        return Err(format!("{prefix:?} has a . or .. segment"));
    }
    Ok(())
}

/// Whether `path` is `prefix` or lies below it, segment by segment (`/opt/nvidia-evil` is not
/// under `/opt/nvidia`). Paths with `.` or `..` segments are never under anything.
pub fn under(path: &str, prefix: &str) -> bool {
    let segments = |p: &str| -> Option<Vec<String>> {
        if !p.starts_with('/') {
            return None;
        }
        let parts: Vec<String> = p
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        (!parts.iter().any(|s| s == "." || s == "..")).then_some(parts)
    };
    match (segments(path), segments(prefix)) {
        (Some(path), Some(prefix)) => path.starts_with(&prefix),
        _ => false,
    }
}

/// The list at `pointer` in `value` (empty when absent or not a list).
pub(crate) fn items(value: &Value, pointer: &str) -> Vec<Value> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Volume sources that stay inside the pod and need no capability.
const POD_LOCAL_SOURCES: &[&str] = &["emptyDir", "configMap", "downwardAPI"];

/// Checks that every volume, volume mount and environment entry that `after` adds to `before`
/// is covered by `granted`. Returns the first offending path and why.
pub fn check(
    before: &Value,
    after: &Value,
    granted: &Capabilities,
) -> Result<(), (String, String)> {
    let (old_volumes, new_volumes) = (
        items(before, "/spec/volumes"),
        items(after, "/spec/volumes"),
    );
    for (i, volume) in new_volumes.iter().enumerate() {
        if old_volumes.contains(volume) {
            continue;
        }
        check_volume(volume, granted)
            .map_err(|why| (format!("spec.volumes[{i}]{}", why.0), why.1))?;
    }
    for list in ["initContainers", "containers"] {
        let pointer = format!("/spec/{list}");
        let (old, new) = (items(before, &pointer), items(after, &pointer));
        for (c, container) in new.iter().enumerate() {
            let previous = old.get(c).unwrap_or(&Value::Null);
            let at = format!("spec.{list}[{c}]");
            check_env(previous, container, granted)
                .map_err(|(p, why)| (format!("{at}.{p}"), why))?;
            check_mounts(previous, container, &old_volumes, &new_volumes, granted)
                .map_err(|(p, why)| (format!("{at}.{p}"), why))?;
        }
    }
    Ok(())
}

fn check_volume(volume: &Value, granted: &Capabilities) -> Result<(), (String, String)> {
    let Some(fields) = volume.as_object() else {
        return Ok(());
    };
    for (source, spec) in fields.iter().filter(|(k, _)| k.as_str() != "name") {
        if POD_LOCAL_SOURCES.contains(&source.as_str()) {
            continue;
        }
        match source.as_str() {
            "secret" => need(granted.secrets, "secret volumes", "secrets")
                .map_err(|why| (".secret".to_owned(), why))?,
            "projected" => {
                let sources = spec
                    .get("sources")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (j, projection) in sources.iter().enumerate() {
                    for kind in projection.as_object().into_iter().flat_map(|m| m.keys()) {
                        let result = match kind.as_str() {
                            "configMap" | "downwardAPI" => Ok(()),
                            "secret" => need(granted.secrets, "projected secrets", "secrets"),
                            "serviceAccountToken" => need(
                                granted.service_account_tokens,
                                "projected service-account tokens",
                                "serviceAccountTokens",
                            ),
                            _ => need(
                                granted.external_volumes,
                                "projections from outside the pod",
                                "externalVolumes",
                            ),
                        };
                        result.map_err(|why| (format!(".projected.sources[{j}].{kind}"), why))?;
                    }
                }
            }
            "hostPath" => {
                let path = spec.get("path").and_then(Value::as_str).unwrap_or("");
                if !granted.host_paths.iter().any(|p| under(path, p)) {
                    return Err((
                        ".hostPath".to_owned(),
                        format!(
                            "host path {path:?} is not under a prefix granted by capabilities.hostPaths"
                        ),
                    ));
                }
            }
            other => need(
                granted.external_volumes,
                &format!("{other} volumes"),
                "externalVolumes",
            )
            .map_err(|why| (format!(".{other}"), why))?,
        }
    }
    Ok(())
}

fn need(granted: bool, what: &str, capability: &str) -> Result<(), String> {
    if granted {
        Ok(())
    } else {
        Err(format!(
            "{what} need capability {capability}, which the policy was not granted"
        ))
    }
}

fn check_env(
    before: &Value,
    after: &Value,
    granted: &Capabilities,
) -> Result<(), (String, String)> {
    let old_env = items(before, "/env");
    for (i, var) in items(after, "/env").iter().enumerate() {
        if !old_env.contains(var) && var.pointer("/valueFrom/secretKeyRef").is_some() {
            need(granted.secrets, "secret environment variables", "secrets")
                .map_err(|why| (format!("env[{i}].valueFrom.secretKeyRef"), why))?;
        }
    }
    let old_from = items(before, "/envFrom");
    for (i, source) in items(after, "/envFrom").iter().enumerate() {
        if !old_from.contains(source) && source.get("secretRef").is_some() {
            need(granted.secrets, "secret environment sources", "secrets")
                .map_err(|why| (format!("envFrom[{i}].secretRef"), why))?;
        }
    }
    Ok(())
}

/// A mount of a host path volume that the policy added, or whose volume the policy added or
/// changed, must be of a granted prefix and read-only. (Checking only new mounts would let a
/// policy swap the volume behind a writable mount the template already had.)
fn check_mounts(
    before: &Value,
    after: &Value,
    old_volumes: &[Value],
    new_volumes: &[Value],
    granted: &Capabilities,
) -> Result<(), (String, String)> {
    let old = items(before, "/volumeMounts");
    for (i, mount) in items(after, "/volumeMounts").iter().enumerate() {
        let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(volume) = new_volumes
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
        else {
            continue;
        };
        let Some(path) = volume.pointer("/hostPath/path").and_then(Value::as_str) else {
            continue;
        };
        if old.contains(mount) && old_volumes.contains(volume) {
            continue;
        }
        if !granted.host_paths.iter().any(|p| under(path, p)) {
            return Err((
                format!("volumeMounts[{i}]"),
                format!(
                    "mounts host path {path:?}, which is not under a prefix granted by capabilities.hostPaths"
                ),
            ));
        }
        if mount.get("readOnly") != Some(&Value::Bool(true)) {
            return Err((
                format!("volumeMounts[{i}].readOnly"),
                format!("host path {path:?} may only be mounted read-only"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn granted(caps: &[&str], host_paths: &[&str]) -> Capabilities {
        let mut c = Capabilities {
            host_paths: host_paths.iter().map(|s| (*s).to_owned()).collect(),
            ..Capabilities::default()
        };
        for name in caps {
            c.allow(name).unwrap();
        }
        c
    }

    fn pod() -> Value {
        json!({
            "spec": {
                "containers": [{"name": "tensorflow", "image": "tf", "env": [{"name": "A", "value": "1"}]}],
                "volumes": [{"name": "template-secret", "secret": {"secretName": "mine"}}]
            }
        })
    }

    fn with(edit: impl FnOnce(&mut Value)) -> Value {
        let mut p = pod();
        edit(&mut p);
        p
    }

    fn add_volume(volume: Value) -> Value {
        with(|p| p["spec"]["volumes"].as_array_mut().unwrap().push(volume))
    }

    #[test]
    fn pod_local_volumes_need_nothing() {
        for v in [
            json!({"name": "scratch", "emptyDir": {}}),
            json!({"name": "cfg", "configMap": {"name": "c"}}),
            json!({"name": "info", "downwardAPI": {"items": []}}),
            json!({"name": "mix", "projected": {"sources": [{"configMap": {"name": "c"}}, {"downwardAPI": {}}]}}),
        ] {
            assert_eq!(
                check(&pod(), &add_volume(v.clone()), &Capabilities::default()),
                Ok(()),
                "{v}"
            );
        }
    }

    #[test]
    fn each_reaching_volume_needs_its_capability() {
        let none = Capabilities::default();
        for (volume, path, capability) in [
            (
                json!({"name": "s", "secret": {"secretName": "db"}}),
                "spec.volumes[1].secret",
                "secrets",
            ),
            (
                json!({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}),
                "spec.volumes[1].projected.sources[0].serviceAccountToken",
                "service-account-tokens",
            ),
            (
                json!({"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}),
                "spec.volumes[1].projected.sources[0].secret",
                "secrets",
            ),
            (
                json!({"name": "n", "nfs": {"server": "x", "path": "/"}}),
                "spec.volumes[1].nfs",
                "external-volumes",
            ),
            (
                json!({"name": "c", "csi": {"driver": "d"}}),
                "spec.volumes[1].csi",
                "external-volumes",
            ),
            (
                json!({"name": "i", "iscsi": {}}),
                "spec.volumes[1].iscsi",
                "external-volumes",
            ),
            (
                json!({"name": "v", "persistentVolumeClaim": {"claimName": "data"}}),
                "spec.volumes[1].persistentVolumeClaim",
                "external-volumes",
            ),
        ] {
            let after = add_volume(volume.clone());
            let (at, why) = check(&pod(), &after, &none).unwrap_err();
            assert_eq!(at, path, "{volume}");
            assert!(why.contains("which the policy was not granted"), "{why}");
            assert_eq!(
                check(&pod(), &after, &granted(&[capability], &[])),
                Ok(()),
                "{volume}"
            );
        }
    }

    #[test]
    fn what_the_pod_already_had_is_not_judged() {
        // The template's secret volume stays, and a policy that leaves it alone needs nothing.
        let after = with(|p| p["metadata"] = json!({"labels": {"team": "a"}}));
        assert_eq!(check(&pod(), &after, &Capabilities::default()), Ok(()));
    }

    #[test]
    fn secret_env_needs_secrets() {
        let none = Capabilities::default();
        let after = with(|p| {
            p["spec"]["containers"][0]["env"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}))
        });
        let (at, _) = check(&pod(), &after, &none).unwrap_err();
        assert_eq!(at, "spec.containers[0].env[1].valueFrom.secretKeyRef");
        assert_eq!(check(&pod(), &after, &granted(&["secrets"], &[])), Ok(()));
        let after = with(|p| {
            p["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "db"}}])
        });
        let (at, _) = check(&pod(), &after, &none).unwrap_err();
        assert_eq!(at, "spec.containers[0].envFrom[0].secretRef");
        // Config maps and plain values are ordinary decoration.
        let after = with(|p| {
            p["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "c"}}])
        });
        assert_eq!(check(&pod(), &after, &none), Ok(()));
    }

    #[test]
    fn host_paths_need_a_granted_prefix_and_read_only_mounts() {
        let nvidia = granted(&[], &["/home/kubernetes/bin/nvidia"]);
        let mount = |read_only: Option<bool>| {
            let mut m = json!({"name": "drv", "mountPath": "/usr/local/nvidia"});
            if let Some(ro) = read_only {
                m["readOnly"] = json!(ro);
            }
            m
        };
        let decorated = |path: &str, read_only: Option<bool>| {
            let mut p = add_volume(json!({"name": "drv", "hostPath": {"path": path}}));
            p["spec"]["containers"][0]["volumeMounts"] = json!([mount(read_only)]);
            p
        };
        assert_eq!(
            check(
                &pod(),
                &decorated("/home/kubernetes/bin/nvidia", Some(true)),
                &nvidia
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &pod(),
                &decorated("/home/kubernetes/bin/nvidia/lib64", Some(true)),
                &nvidia
            ),
            Ok(())
        );
        for (path, read_only, at) in [
            ("/", Some(true), "spec.volumes[1].hostPath"),
            (
                "/home/kubernetes/bin/nvidia-evil",
                Some(true),
                "spec.volumes[1].hostPath",
            ),
            (
                "/home/kubernetes/bin/nvidia/../../..",
                Some(true),
                "spec.volumes[1].hostPath",
            ),
            (
                "/home/kubernetes/bin/nvidia",
                None,
                "spec.containers[0].volumeMounts[0].readOnly",
            ),
            (
                "/home/kubernetes/bin/nvidia",
                Some(false),
                "spec.containers[0].volumeMounts[0].readOnly",
            ),
        ] {
            let (got, why) = check(&pod(), &decorated(path, read_only), &nvidia).unwrap_err();
            assert_eq!(got, at, "{path} {read_only:?}: {why}");
        }
        // A writable mount of a host path the job's template already declared is refused too.
        let template =
            add_volume(json!({"name": "drv", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}));
        let mut after = template.clone();
        after["spec"]["containers"][0]["volumeMounts"] = json!([mount(None)]);
        let (at, _) = check(&template, &after, &nvidia).unwrap_err();
        assert_eq!(at, "spec.containers[0].volumeMounts[0].readOnly");
        // Swapping the volume behind a writable mount the template already had.
        let mut scratch = add_volume(json!({"name": "drv", "emptyDir": {}}));
        scratch["spec"]["containers"][0]["volumeMounts"] = json!([mount(None)]);
        let mut swapped = scratch.clone();
        swapped["spec"]["volumes"][1] =
            json!({"name": "drv", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}});
        let (at, _) = check(&scratch, &swapped, &nvidia).unwrap_err();
        assert_eq!(at, "spec.containers[0].volumeMounts[0].readOnly");
    }

    #[test]
    fn grants_stay_under_the_ceiling() {
        let ceiling = granted(&["secrets"], &["/opt/drivers"]);
        assert_eq!(
            granted(&["secrets"], &["/opt/drivers/cuda"])
                .grant(&ceiling)
                .map(|g| g.secrets),
            Ok(true)
        );
        let (field, why) = granted(&["external-volumes"], &[])
            .grant(&ceiling)
            .unwrap_err();
        assert_eq!(field, "externalVolumes");
        assert!(why.contains("--policy-allow external-volumes"), "{why}");
        let (field, why) = granted(&[], &["/opt/drivers-evil"])
            .grant(&ceiling)
            .unwrap_err();
        assert_eq!(field, "hostPaths[0]");
        assert!(why.contains("/opt/drivers"), "{why}");
        let (field, _) = granted(&[], &["relative"]).grant(&ceiling).unwrap_err();
        assert_eq!(field, "hostPaths[0]");
        assert!(
            Capabilities::default()
                .allow("root")
                .unwrap_err()
                .contains("secrets, service-account-tokens, external-volumes")
        );
    }

    #[test]
    fn under_compares_whole_segments() {
        assert!(under("/a/b", "/a"));
        assert!(under("/a/b/", "/a/b"));
        assert!(under("/a", "/"));
        assert!(!under("/ab", "/a"));
        assert!(!under("/a/../etc", "/a"));
        assert!(!under("a/b", "a"));
    }

    #[test]
    fn summaries_read_as_flags() {
        assert_eq!(Capabilities::default().summary(), "-");
        assert_eq!(
            granted(&["secrets"], &["/x", "/y"]).summary(),
            "secrets,hostPaths=/x:/y"
        );
    }
}
