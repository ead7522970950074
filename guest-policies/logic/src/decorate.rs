//! Pod decoration: execution environment variables, accelerator volumes, tolerations, labels,
//! annotations, node selectors and the scheduler name.
//!
//! The rules follow `default-policies.md` "Decoration" (Flyte's `flytek8s` pod helpers and the
//! original tf-operator's `ControllerConfig.Accelerators`), with these choices made explicit:
//!
//! - **Containers** means init containers and regular containers alike: init containers run in
//!   the same job (a data loader wants `TFJOB_NAME` too, and one that asks for a GPU needs the
//!   driver mounts just as much). Ephemeral containers are not part of a pod being created.
//! - **Never overwrite**: whatever the pod already sets wins. A container's own environment
//!   variable is left alone (upstream appended duplicates), a volume or mount whose name (or
//!   mount path) is taken is not added again, a toleration already present is not added again,
//!   and labels, annotations, node selector entries and the scheduler name from settings only
//!   fill keys the pod leaves unset. The pod was built from the TFJob's own template, and an
//!   explicit choice of the job's author beats a platform default.
//! - **Interruptible** jobs are those annotated `policy.tfjob.dev/interruptible: "true"` (see
//!   [`crate::context::INTERRUPTIBLE_ANNOTATION`]). They also get `interruptibleTolerations`,
//!   and `interruptibleNodeSelector` entries, which take precedence over `nodeSelector` ones for
//!   the same key (the point of the interruptible selector is to move the pod elsewhere).
//! - **Resources are read as written**: decoration runs before resource overrides, so a container
//!   asking for `gpu` has not yet been renamed to `nvidia.com/gpu`; accelerators and resource
//!   tolerations are keyed by the name the container uses.
//! - **Order is deterministic**: environment variables in settings order (after the six
//!   `TFJOB_*` ones), accelerators and resource tolerations by resource name, then interruptible
//!   tolerations, then default tolerations.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HostPathVolumeSource, Pod, PodSpec, Toleration, Volume, VolumeMount,
};
use serde::{Deserialize, Serialize};

use crate::context::JobContext;
use crate::names::{
    check_dns1123_label, check_dns1123_subdomain, check_env_var_name, check_label_value,
    check_qualified_name, key_path,
};
use crate::ordered::OrderedMap;
use crate::settings::PolicySettings;

/// The execution environment every container gets, in this order.
pub const EXECUTION_ENV_VARS: [&str; 6] = [
    "TFJOB_NAME",
    "TFJOB_NAMESPACE",
    "TFJOB_UID",
    "TFJOB_REPLICA_TYPE",
    "TFJOB_REPLICA_INDEX",
    "TFJOB_ATTEMPT",
];

const TOLERATION_OPERATORS: [&str; 2] = ["Equal", "Exists"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Settings of the decoration policy. Every field is optional; the defaults add only the
/// execution environment variables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DecorateSettings {
    /// Variables added to every container after the `TFJOB_*` ones, in the order written.
    pub default_env_vars: OrderedMap,
    /// Per resource name (`nvidia.com/gpu`): host volumes and variables for the containers that
    /// request or limit it.
    pub accelerators: BTreeMap<String, AcceleratorSettings>,
    /// Per resource name: tolerations for pods whose containers request or limit it.
    pub resource_tolerations: BTreeMap<String, Vec<TolerationSetting>>,
    /// Tolerations for pods of interruptible jobs.
    pub interruptible_tolerations: Vec<TolerationSetting>,
    /// Tolerations for every pod.
    pub default_tolerations: Vec<TolerationSetting>,
    /// Labels for every pod.
    pub default_labels: BTreeMap<String, String>,
    /// Annotations for every pod.
    pub default_annotations: BTreeMap<String, String>,
    /// Node selector entries for every pod.
    pub node_selector: BTreeMap<String, String>,
    /// Node selector entries for pods of interruptible jobs.
    pub interruptible_node_selector: BTreeMap<String, String>,
    /// Scheduler for pods that do not name one.
    pub scheduler_name: Option<String>,
    /// Labels of the job's Namespace copied onto its pods, by key (`[team, cost-center]`).
    /// The policy then reads the Namespace from the cluster (`reads: [{resource: namespaces}]`
    /// in its manifest, added by the operator when this is set); a label the pod already has
    /// wins, and a namespace label wins over `defaultLabels`.
    pub namespace_labels: Vec<String>,
}

/// What containers using an accelerator resource get.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AcceleratorSettings {
    /// Host directories (drivers, libraries) mounted into those containers; the pod gets each
    /// volume once.
    pub volumes: Vec<AcceleratorVolume>,
    /// Variables for those containers (`LD_LIBRARY_PATH`), in the order written.
    pub env_vars: OrderedMap,
}

/// A host directory for an accelerator, as tf-operator's `AcceleratorVolume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcceleratorVolume {
    /// Volume name (a DNS-1123 label), shared by the pod volume and the container mounts.
    pub name: String,
    /// Absolute path on the node.
    pub host_path: String,
    /// Absolute path in the container.
    pub mount_path: String,
}

/// A toleration as written in settings: the core/v1 `Toleration` fields, but unknown fields are
/// rejected (k8s-openapi's type ignores them, which would hide a misspelt `efect`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TolerationSetting {
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`, or empty for all effects.
    pub effect: Option<String>,
    /// Only with effect `NoExecute`.
    pub toleration_seconds: Option<i64>,
}

impl TolerationSetting {
    pub fn to_k8s(&self) -> Toleration {
        Toleration {
            key: self.key.clone(),
            operator: self.operator.clone(),
            value: self.value.clone(),
            effect: self.effect.clone(),
            toleration_seconds: self.toleration_seconds,
        }
    }

    /// Checks the toleration as the API server's `validateTolerations` does.
    fn validate(&self, field: &str) -> Result<(), String> {
        let key = self.key.as_deref().unwrap_or("");
        let operator = self.operator.as_deref().unwrap_or("");
        let value = self.value.as_deref().unwrap_or("");
        let effect = self.effect.as_deref().unwrap_or("");
        if !key.is_empty() {
            check_qualified_name(key).map_err(|e| format!("{field}.key: {e}"))?;
        } else if operator != "Exists" {
            return Err(format!(
                "{field}.operator: must be \"Exists\" when the key is empty"
            ));
        }
        match operator {
            "" | "Equal" => {
                check_label_value(value).map_err(|e| format!("{field}.value: {e}"))?;
            }
            "Exists" if !value.is_empty() => {
                return Err(format!(
                    "{field}.value: must be empty when the operator is \"Exists\""
                ));
            }
            "Exists" => {}
            other => {
                return Err(format!(
                    "{field}.operator: {other:?} is not one of {TOLERATION_OPERATORS:?}"
                ));
            }
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            return Err(format!(
                "{field}.effect: {effect:?} is not one of {TAINT_EFFECTS:?}"
            ));
        }
        if self.toleration_seconds.is_some() && effect != "NoExecute" {
            return Err(format!(
                "{field}.tolerationSeconds: requires effect \"NoExecute\""
            ));
        }
        Ok(())
    }
}

impl PolicySettings for DecorateSettings {
    fn validate(&self) -> Result<(), String> {
        check_env_vars("defaultEnvVars", &self.default_env_vars)?;
        for (i, key) in self.namespace_labels.iter().enumerate() {
            check_qualified_name(key).map_err(|e| format!("namespaceLabels[{i}]: {e}"))?;
        }

        // Volume names are shared across accelerators: the pod gets each volume once, so two
        // accelerators may name the same volume only if they mean the same host path.
        let mut volumes: BTreeMap<&str, (&str, String)> = BTreeMap::new();
        for (resource, accelerator) in &self.accelerators {
            let field = key_path("accelerators", resource);
            check_qualified_name(resource).map_err(|e| format!("{field}: {e}"))?;
            let mut mount_paths: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, volume) in accelerator.volumes.iter().enumerate() {
                let vfield = format!("{field}.volumes[{i}]");
                check_dns1123_label(&volume.name).map_err(|e| format!("{vfield}.name: {e}"))?;
                check_absolute(&volume.host_path).map_err(|e| format!("{vfield}.hostPath: {e}"))?;
                check_absolute(&volume.mount_path)
                    .map_err(|e| format!("{vfield}.mountPath: {e}"))?;
                if let Some(j) = mount_paths.insert(&volume.mount_path, i) {
                    return Err(format!(
                        "{vfield}.mountPath: {:?} is already used by volumes[{j}]",
                        volume.mount_path
                    ));
                }
                match volumes.get(volume.name.as_str()) {
                    Some((host_path, other)) if *host_path != volume.host_path => {
                        return Err(format!(
                            "{vfield}.name: volume {:?} is already defined with hostPath {host_path:?} at {other}",
                            volume.name
                        ));
                    }
                    Some(_) => {}
                    None => {
                        volumes.insert(&volume.name, (&volume.host_path, vfield));
                    }
                }
            }
            check_env_vars(&format!("{field}.envVars"), &accelerator.env_vars)?;
        }

        for (resource, tolerations) in &self.resource_tolerations {
            let field = key_path("resourceTolerations", resource);
            check_qualified_name(resource).map_err(|e| format!("{field}: {e}"))?;
            check_tolerations(&field, tolerations)?;
        }
        check_tolerations("interruptibleTolerations", &self.interruptible_tolerations)?;
        check_tolerations("defaultTolerations", &self.default_tolerations)?;

        check_labels("defaultLabels", &self.default_labels)?;
        for key in self.default_annotations.keys() {
            check_qualified_name(key)
                .map_err(|e| format!("{}: {e}", key_path("defaultAnnotations", key)))?;
        }
        check_labels("nodeSelector", &self.node_selector)?;
        check_labels(
            "interruptibleNodeSelector",
            &self.interruptible_node_selector,
        )?;
        if let Some(name) = &self.scheduler_name {
            check_dns1123_subdomain(name).map_err(|e| format!("schedulerName: {e}"))?;
        }
        Ok(())
    }
}

fn check_env_vars(field: &str, vars: &OrderedMap) -> Result<(), String> {
    for (name, _) in vars.iter() {
        let vfield = key_path(field, name);
        check_env_var_name(name).map_err(|e| format!("{vfield}: {e}"))?;
        if EXECUTION_ENV_VARS.contains(&name) {
            return Err(format!(
                "{vfield}: reserved for the execution environment the policy sets itself"
            ));
        }
    }
    Ok(())
}

fn check_absolute(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} must be an absolute path"));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!("{path:?} must not contain '..'"));
    }
    Ok(())
}

fn check_tolerations(field: &str, tolerations: &[TolerationSetting]) -> Result<(), String> {
    tolerations
        .iter()
        .enumerate()
        .try_for_each(|(i, t)| t.validate(&format!("{field}[{i}]")))
}

fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in labels {
        let lfield = key_path(field, key);
        check_qualified_name(key).map_err(|e| format!("{lfield}: {e}"))?;
        check_label_value(value).map_err(|e| format!("{lfield}: {e}"))?;
    }
    Ok(())
}

/// Decorates `pod` (as the operator built it) for the job and replica in `ctx`.
pub fn decorate_pod(settings: &DecorateSettings, ctx: &JobContext, mut pod: Pod) -> Pod {
    let interruptible = ctx.is_interruptible();
    if let Some(spec) = pod.spec.as_mut() {
        decorate_spec(settings, ctx, interruptible, spec);
    }
    fill_missing(&mut pod.metadata.labels, &settings.default_labels);
    fill_missing(&mut pod.metadata.annotations, &settings.default_annotations);
    pod
}

fn decorate_spec(
    settings: &DecorateSettings,
    ctx: &JobContext,
    interruptible: bool,
    spec: &mut PodSpec,
) {
    // 1. Execution environment, then the platform's variables.
    let execution = execution_env(ctx);
    for container in containers_mut(spec) {
        let vars = execution
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .chain(settings.default_env_vars.iter());
        for (name, value) in vars {
            add_env(container, name, value);
        }
    }

    // 2. Accelerators.
    for (resource, accelerator) in &settings.accelerators {
        let mut used = false;
        for container in containers_mut(spec) {
            if !uses_resource(container, resource) {
                continue;
            }
            used = true;
            for volume in &accelerator.volumes {
                add_mount(container, volume);
            }
            for (name, value) in accelerator.env_vars.iter() {
                add_env(container, name, value);
            }
        }
        if used {
            for volume in &accelerator.volumes {
                add_volume(spec, volume);
            }
        }
    }

    // 3. Tolerations: per resource (sorted by name), interruptible, default.
    let used_resources: BTreeSet<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
        })
        .map(String::as_str)
        .collect();
    let mut wanted: Vec<Toleration> = used_resources
        .iter()
        .filter_map(|r| settings.resource_tolerations.get(*r))
        .flatten()
        .map(TolerationSetting::to_k8s)
        .collect();
    if interruptible {
        wanted.extend(
            settings
                .interruptible_tolerations
                .iter()
                .map(TolerationSetting::to_k8s),
        );
    }
    wanted.extend(
        settings
            .default_tolerations
            .iter()
            .map(TolerationSetting::to_k8s),
    );
    for toleration in wanted {
        let present = spec
            .tolerations
            .iter()
            .flatten()
            .any(|t| same_toleration(t, &toleration));
        if !present {
            spec.tolerations
                .get_or_insert_with(Vec::new)
                .push(toleration);
        }
    }

    // 4. Node selector (interruptible entries first, so they win over the default ones) and
    // scheduler.
    if interruptible {
        fill_missing(
            &mut spec.node_selector,
            &settings.interruptible_node_selector,
        );
    }
    fill_missing(&mut spec.node_selector, &settings.node_selector);
    if let Some(name) = &settings.scheduler_name
        && spec.scheduler_name.as_deref().is_none_or(str::is_empty)
    {
        spec.scheduler_name = Some(name.clone());
    }
}

fn execution_env(ctx: &JobContext) -> [(&'static str, String); 6] {
    let [name, namespace, uid, replica_type, replica_index, attempt] = EXECUTION_ENV_VARS;
    [
        (name, ctx.job_name.clone()),
        (namespace, ctx.namespace.clone()),
        (uid, ctx.job_uid.clone()),
        (replica_type, ctx.replica_type.clone()),
        (replica_index, ctx.replica_index.to_string()),
        (attempt, ctx.attempt.to_string()),
    ]
}

fn containers_mut(spec: &mut PodSpec) -> impl Iterator<Item = &mut Container> {
    spec.init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
}

fn uses_resource(container: &Container, resource: &str) -> bool {
    container.resources.as_ref().is_some_and(|r| {
        r.requests
            .as_ref()
            .is_some_and(|m| m.contains_key(resource))
            || r.limits.as_ref().is_some_and(|m| m.contains_key(resource))
    })
}

fn add_env(container: &mut Container, name: &str, value: &str) {
    let env = container.env.get_or_insert_with(Vec::new);
    if env.iter().any(|e| e.name == name) {
        return;
    }
    env.push(EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    });
}

fn add_mount(container: &mut Container, volume: &AcceleratorVolume) {
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    if mounts
        .iter()
        .any(|m| m.name == volume.name || m.mount_path == volume.mount_path)
    {
        return;
    }
    // Read-only: a driver directory is read by the workload, never written, and the host
    // grants policies host paths for read-only mounts only.
    mounts.push(VolumeMount {
        name: volume.name.clone(),
        mount_path: volume.mount_path.clone(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
}

fn add_volume(spec: &mut PodSpec, volume: &AcceleratorVolume) {
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if volumes.iter().any(|v| v.name == volume.name) {
        return;
    }
    volumes.push(Volume {
        name: volume.name.clone(),
        host_path: Some(HostPathVolumeSource {
            path: volume.host_path.clone(),
            type_: None,
        }),
        ..Volume::default()
    });
}

/// Tolerations are the same when they mean the same: an unset operator is `Equal`, and unset
/// and empty strings are alike.
fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    fn text(s: &Option<String>) -> &str {
        s.as_deref().unwrap_or("")
    }
    fn operator(t: &Toleration) -> &str {
        match text(&t.operator) {
            "" => "Equal",
            op => op,
        }
    }
    text(&a.key) == text(&b.key)
        && operator(a) == operator(b)
        && text(&a.value) == text(&b.value)
        && text(&a.effect) == text(&b.effect)
        && a.toleration_seconds == b.toleration_seconds
}

/// The labels of a Namespace given as JSON, decoding nothing else of it (a whole
/// k8s-openapi `ObjectMeta` would add more code to the decoration than it has).
pub fn namespace_labels_of(json: &str) -> Result<BTreeMap<String, String>, String> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Shape {
        metadata: Meta,
    }
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Meta {
        labels: BTreeMap<String, String>,
    }
    crate::json::from_json::<Shape>("namespace", json).map(|s| s.metadata.labels)
}

/// Copies the labels named by `keys` from the job's Namespace (`namespace_labels`) onto `pod`,
/// where the pod does not set them already. Run before [`decorate_pod`], so a namespace's label
/// wins over the settings' `defaultLabels`.
pub fn copy_namespace_labels(
    keys: &[String],
    namespace_labels: &BTreeMap<String, String>,
    pod: &mut Pod,
) {
    let chosen: BTreeMap<String, String> = keys
        .iter()
        .filter_map(|k| Some((k.clone(), namespace_labels.get(k)?.clone())))
        .collect();
    fill_missing(&mut pod.metadata.labels, &chosen);
}

fn fill_missing(target: &mut Option<BTreeMap<String, String>>, extra: &BTreeMap<String, String>) {
    if extra.is_empty() {
        return;
    }
    let map = target.get_or_insert_with(BTreeMap::new);
    for (key, value) in extra {
        map.entry(key.clone()).or_insert_with(|| value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_labels_fill_what_the_pod_leaves_unset_and_beat_default_labels() {
        let settings: DecorateSettings = crate::settings::settings_from_json(
            r#"{"namespaceLabels": ["team", "cost-center", "absent"], "defaultLabels": {"team": "platform", "tier": "batch"}}"#,
        )
        .unwrap();
        let namespace: BTreeMap<String, String> = [
            ("team", "vision"),
            ("cost-center", "cc-42"),
            ("kubernetes.io/metadata.name", "ml"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let mut pod = Pod::default();
        pod.metadata.labels = Some([("cost-center".to_owned(), "own".to_owned())].into());
        copy_namespace_labels(&settings.namespace_labels, &namespace, &mut pod);
        let pod = decorate_pod(&settings, &JobContext::default(), pod);
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(
            labels["team"], "vision",
            "the namespace's beats the default"
        );
        assert_eq!(labels["cost-center"], "own", "the pod's own wins");
        assert_eq!(labels["tier"], "batch");
        assert!(
            !labels.contains_key("absent") && !labels.contains_key("kubernetes.io/metadata.name")
        );
        let bad = crate::settings::settings_from_json::<DecorateSettings>(
            r#"{"namespaceLabels": ["team", "not a key"]}"#,
        )
        .unwrap_err();
        assert!(bad.starts_with("namespaceLabels[1]: "), "{bad}");
    }
    use crate::context::INTERRUPTIBLE_ANNOTATION;
    use crate::settings::settings_from_json;
    use serde_json::{Value, json};

    fn ctx() -> JobContext {
        JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "uid-1".into(),
            replica_type: "Worker".into(),
            replica_index: 3,
            replica_count: 4,
            attempt: 2,
            ..JobContext::default()
        }
    }

    fn interruptible_ctx() -> JobContext {
        let mut ctx = ctx();
        ctx.job_annotations
            .insert(INTERRUPTIBLE_ANNOTATION.into(), "true".into());
        ctx
    }

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "mnist-worker-3"}, "spec": spec}))
            .unwrap()
    }

    fn gpu_pod() -> Pod {
        pod(json!({
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [
                {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": "1"}},
                 "env": [{"name": "TFJOB_ATTEMPT", "value": "mine"}]},
                {"name": "sidecar", "image": "side", "resources": {"requests": {"cpu": "100m"}}}
            ]
        }))
    }

    fn settings(value: Value) -> DecorateSettings {
        settings_from_json(&value.to_string()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn decorate(settings: &DecorateSettings, ctx: &JobContext, pod: Pod) -> Value {
        serde_json::to_value(decorate_pod(settings, ctx, pod)).unwrap()
    }

    fn env_of(pod: &Value, path: &str, index: usize) -> Vec<(String, String)> {
        pod["spec"][path][index]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["value"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn execution_env_then_default_env_in_order_without_overriding() {
        // Raw JSON: `json!` would sort the keys before the settings saw them.
        let s: DecorateSettings =
            settings_from_json(r#"{"defaultEnvVars": {"Z_FIRST": "1", "A_SECOND": "$(Z_FIRST)"}}"#)
                .unwrap();
        let out = decorate(&s, &ctx(), gpu_pod());
        let tf = env_of(&out, "containers", 0);
        let names: Vec<&str> = tf.iter().map(|(n, _)| n.as_str()).collect();
        // The container's own TFJOB_ATTEMPT stays first and keeps its value.
        assert_eq!(
            names,
            [
                "TFJOB_ATTEMPT",
                "TFJOB_NAME",
                "TFJOB_NAMESPACE",
                "TFJOB_UID",
                "TFJOB_REPLICA_TYPE",
                "TFJOB_REPLICA_INDEX",
                "Z_FIRST",
                "A_SECOND"
            ]
        );
        assert_eq!(tf[0].1, "mine");
        let fetch = env_of(&out, "initContainers", 0);
        assert_eq!(
            fetch,
            [
                ("TFJOB_NAME", "mnist"),
                ("TFJOB_NAMESPACE", "ml"),
                ("TFJOB_UID", "uid-1"),
                ("TFJOB_REPLICA_TYPE", "Worker"),
                ("TFJOB_REPLICA_INDEX", "3"),
                ("TFJOB_ATTEMPT", "2"),
                ("Z_FIRST", "1"),
                ("A_SECOND", "$(Z_FIRST)"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
    }

    #[test]
    fn default_settings_only_add_the_execution_env() {
        let before = serde_json::to_value(gpu_pod()).unwrap();
        let mut out = decorate(&DecorateSettings::default(), &ctx(), gpu_pod());
        for (path, i) in [("initContainers", 0), ("containers", 0), ("containers", 1)] {
            let env = out["spec"][path][i].as_object_mut().unwrap().remove("env");
            assert!(env.is_some());
        }
        let mut before = before;
        before["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("env");
        assert_eq!(out, before);
    }

    #[test]
    fn accelerators_mount_into_users_and_add_volumes_once() {
        let s = settings(json!({"accelerators": {
            "nvidia.com/gpu": {
                "volumes": [
                    {"name": "nvidia-lib", "hostPath": "/usr/local/nvidia/lib64", "mountPath": "/usr/local/nvidia/lib64"},
                    {"name": "nvidia-bin", "hostPath": "/usr/local/nvidia/bin", "mountPath": "/usr/local/nvidia/bin"}
                ],
                "envVars": {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}
            },
            "example.com/fpga": {"volumes": [{"name": "fpga", "hostPath": "/dev/fpga", "mountPath": "/dev/fpga"}]}
        }}));
        let mut p = gpu_pod();
        // A second GPU container: volumes still once.
        let mut second = p.spec.as_ref().unwrap().containers[0].clone();
        second.name = "tensorflow-2".into();
        p.spec.as_mut().unwrap().containers.push(second);
        let out = decorate(&s, &ctx(), p);
        let volumes = out["spec"]["volumes"].as_array().unwrap();
        assert_eq!(
            volumes,
            &vec![
                json!({"name": "nvidia-lib", "hostPath": {"path": "/usr/local/nvidia/lib64"}}),
                json!({"name": "nvidia-bin", "hostPath": {"path": "/usr/local/nvidia/bin"}}),
            ]
        );
        for i in [0, 2] {
            let tf = &out["spec"]["containers"][i];
            assert_eq!(
                tf["volumeMounts"],
                json!([
                    {"name": "nvidia-lib", "mountPath": "/usr/local/nvidia/lib64", "readOnly": true},
                    {"name": "nvidia-bin", "mountPath": "/usr/local/nvidia/bin", "readOnly": true}
                ])
            );
            assert!(env_of(&out, "containers", i).contains(&(
                "LD_LIBRARY_PATH".to_owned(),
                "/usr/local/nvidia/lib64".to_owned()
            )));
        }
        let sidecar = &out["spec"]["containers"][1];
        assert!(sidecar.get("volumeMounts").is_none());
        assert!(
            !env_of(&out, "containers", 1)
                .iter()
                .any(|(n, _)| n == "LD_LIBRARY_PATH")
        );
    }

    #[test]
    fn accelerators_keep_existing_volumes_and_mounts() {
        let s = settings(json!({"accelerators": {"nvidia.com/gpu": {"volumes": [
            {"name": "nvidia-lib", "hostPath": "/usr/local/nvidia/lib64", "mountPath": "/nvidia"}
        ]}}}));
        let p = pod(json!({
            "containers": [{"name": "tensorflow", "image": "tf",
                "resources": {"requests": {"nvidia.com/gpu": "1"}},
                "volumeMounts": [{"name": "data", "mountPath": "/nvidia"}]}],
            "volumes": [{"name": "nvidia-lib", "emptyDir": {}}]
        }));
        let out = decorate(&s, &ctx(), p);
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "nvidia-lib", "emptyDir": {}}])
        );
        assert_eq!(
            out["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "data", "mountPath": "/nvidia"}])
        );
    }

    #[test]
    fn tolerations_sorted_by_resource_then_interruptible_then_default_without_duplicates() {
        let s = settings(json!({
            "resourceTolerations": {
                "nvidia.com/gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "cpu": [{"key": "dedicated", "value": "cpu", "effect": "NoSchedule"}],
                "memory": [{"key": "never", "operator": "Exists"}]
            },
            "interruptibleTolerations": [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "defaultTolerations": [
                {"key": "team", "operator": "Equal", "value": "ml"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ]
        }));
        let mut p = gpu_pod();
        // Already present, spelled with the implicit Equal operator.
        p.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("team".into()),
            value: Some("ml".into()),
            ..Toleration::default()
        }]);
        let out = decorate(&s, &ctx(), p.clone());
        assert_eq!(
            out["spec"]["tolerations"],
            json!([
                {"key": "team", "value": "ml"},
                {"key": "dedicated", "value": "cpu", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ])
        );
        let out = decorate(&s, &interruptible_ctx(), p);
        assert_eq!(
            out["spec"]["tolerations"][3],
            json!({"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"})
        );
        assert_eq!(out["spec"]["tolerations"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn labels_annotations_node_selector_and_scheduler_fill_only_unset_keys() {
        let s = settings(json!({
            "defaultLabels": {"team": "platform", "tier": "batch"},
            "defaultAnnotations": {"cost-center": "42"},
            "nodeSelector": {"pool": "default", "zone": "a"},
            "interruptibleNodeSelector": {"pool": "spot"},
            "schedulerName": "volcano"
        }));
        let mut p = gpu_pod();
        p.metadata.labels = Some(BTreeMap::from([("team".into(), "ml".into())]));
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("zone".into(), "b".into())]));
        let out = decorate(&s, &ctx(), p.clone());
        assert_eq!(
            out["metadata"]["labels"],
            json!({"team": "ml", "tier": "batch"})
        );
        assert_eq!(out["metadata"]["annotations"], json!({"cost-center": "42"}));
        assert_eq!(
            out["spec"]["nodeSelector"],
            json!({"pool": "default", "zone": "b"})
        );
        assert_eq!(out["spec"]["schedulerName"], "volcano");
        let out = decorate(&s, &interruptible_ctx(), p.clone());
        assert_eq!(
            out["spec"]["nodeSelector"],
            json!({"pool": "spot", "zone": "b"})
        );
        p.spec.as_mut().unwrap().scheduler_name = Some("kube-batch".into());
        let out = decorate(&s, &ctx(), p);
        assert_eq!(out["spec"]["schedulerName"], "kube-batch");
    }

    #[test]
    fn a_pod_without_spec_only_gets_metadata() {
        let s = settings(
            json!({"defaultLabels": {"a": "b"}, "defaultTolerations": [{"operator": "Exists"}]}),
        );
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        let out = decorate(&s, &ctx(), p);
        assert!(out.get("spec").is_none());
        assert_eq!(out["metadata"]["labels"], json!({"a": "b"}));
    }

    #[test]
    fn empty_settings_are_defaults() {
        assert_eq!(
            settings_from_json::<DecorateSettings>("").unwrap(),
            DecorateSettings::default()
        );
        assert_eq!(
            settings_from_json::<DecorateSettings>("{}").unwrap(),
            DecorateSettings::default()
        );
        assert_eq!(
            settings_from_json::<DecorateSettings>(" null ").unwrap(),
            DecorateSettings::default()
        );
    }

    #[test]
    fn validation_names_the_field() {
        let err = |v: Value| settings_from_json::<DecorateSettings>(&v.to_string()).unwrap_err();
        let gpu =
            |volume: Value| json!({"accelerators": {"nvidia.com/gpu": {"volumes": [volume]}}});
        assert_eq!(
            err(gpu(
                json!({"name": "", "hostPath": "/a", "mountPath": "/b"})
            )),
            "accelerators[\"nvidia.com/gpu\"].volumes[0].name: must not be empty"
        );
        assert_eq!(
            err(gpu(
                json!({"name": "lib", "hostPath": "usr/lib", "mountPath": "/b"})
            )),
            "accelerators[\"nvidia.com/gpu\"].volumes[0].hostPath: \"usr/lib\" must be an absolute path"
        );
        assert_eq!(
            err(gpu(
                json!({"name": "lib", "hostPath": "/usr/lib", "mountPath": "lib"})
            )),
            "accelerators[\"nvidia.com/gpu\"].volumes[0].mountPath: \"lib\" must be an absolute path"
        );
        assert!(
            err(gpu(
                json!({"name": "lib", "hostPath": "/a/../etc", "mountPath": "/b"})
            ))
            .ends_with("must not contain '..'")
        );
        assert!(
            err(gpu(json!({"name": "lib", "hostPath": "/a"}))).starts_with(
                "accelerators[\"nvidia.com/gpu\"].volumes[0]: missing field `mountPath`"
            )
        );
        assert!(
            err(json!({"accelerators": {
                "a.com/x": {"volumes": [{"name": "v", "hostPath": "/x", "mountPath": "/x"}]},
                "b.com/y": {"volumes": [{"name": "v", "hostPath": "/y", "mountPath": "/y"}]}
            }}))
            .starts_with(
                "accelerators[\"b.com/y\"].volumes[0].name: volume \"v\" is already defined"
            )
        );
        assert_eq!(
            err(json!({"defaultTolerations": [{"key": "a", "operator": "In"}]})),
            "defaultTolerations[0].operator: \"In\" is not one of [\"Equal\", \"Exists\"]"
        );
        assert_eq!(
            err(json!({"interruptibleTolerations": [{"operator": "Equal", "value": "x"}]})),
            "interruptibleTolerations[0].operator: must be \"Exists\" when the key is empty"
        );
        assert_eq!(
            err(
                json!({"resourceTolerations": {"nvidia.com/gpu": [{"key": "a", "operator": "Exists", "value": "x"}]}})
            ),
            "resourceTolerations[\"nvidia.com/gpu\"][0].value: must be empty when the operator is \"Exists\""
        );
        assert!(
            err(json!({"defaultTolerations": [{"key": "a", "effect": "NoRun"}]}))
                .starts_with("defaultTolerations[0].effect: ")
        );
        assert!(
            err(json!({"defaultTolerations": [{"key": "a", "tolerationSeconds": 30}]}))
                .starts_with("defaultTolerations[0].tolerationSeconds: ")
        );
        assert!(
            err(json!({"defaultTolerations": [{"key": "a", "efect": "NoSchedule"}]}))
                .starts_with("defaultTolerations[0].efect: unknown field `efect`")
        );
        assert!(
            err(json!({"defaultEnvVars": {"TFJOB_NAME": "x"}}))
                .starts_with("defaultEnvVars.TFJOB_NAME: reserved")
        );
        assert!(
            err(json!({"defaultEnvVars": {"A=B": "x"}})).starts_with("defaultEnvVars[\"A=B\"]: ")
        );
        assert!(
            err(json!({"defaultLabels": {"team": "not ok"}})).starts_with("defaultLabels.team: ")
        );
        assert!(
            err(json!({"defaultAnnotations": {"bad key": "x"}}))
                .starts_with("defaultAnnotations[\"bad key\"]: ")
        );
        assert!(err(json!({"nodeSelector": {"pool": "a b"}})).starts_with("nodeSelector.pool: "));
        assert!(err(json!({"schedulerName": ""})).starts_with("schedulerName: must not be empty"));
        assert!(
            err(json!({"nodeSelectors": {}}))
                .starts_with("nodeSelectors: unknown field `nodeSelectors`")
        );
        let dup =
            settings_from_json::<DecorateSettings>(r#"{"defaultEnvVars": {"A": "1", "A": "2"}}"#)
                .unwrap_err();
        assert!(
            dup.starts_with("defaultEnvVars: duplicate key \"A\""),
            "{dup}"
        );
    }
}
