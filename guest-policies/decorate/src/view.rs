//! The parts of a pod decoration works with, decoded as k8s-openapi types over the pod's JSON.
//!
//! Decoding a whole core/v1 Pod into k8s-openapi types and encoding it again costs a component
//! about 500 KiB of code (the `Volume` decoder alone is 80 KiB, and timestamps pull in jiff's
//! parser and printer), all for fields decoration never looks at. So the pod is read as a JSON
//! document; the fields `tfjob_policy_logic::decorate` reads or writes are decoded into a
//! k8s-openapi `Pod` that holds only them; `decorate_pod` runs on that pod; and the fields it
//! changed are written back into the document. Everything else passes through untouched.
//!
//! The carried fields, which are everything `decorate_pod` reads or writes:
//!
//! - `metadata.labels`, `metadata.annotations`;
//! - `spec.initContainers[*]` and `spec.containers[*]`: `name`, `env`, `volumeMounts`, and
//!   `resources` (read only);
//! - `spec.volumes[*].name` (read only: decoration appends volumes, written whole);
//! - `spec.tolerations`, `spec.nodeSelector`, `spec.schedulerName`.
//!
//! Should the decision logic ever change a field outside this list, the change would be lost;
//! [`write_back`] detects that and fails instead, and the crate's tests compare this path with
//! decoding the whole pod.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tfjob_policy_sdk::k8s_openapi;
use tfjob_policy_sdk::serde_json;
use tfjob_policy_sdk::wit::PolicyError;

/// The container lists decoration visits, by JSON key.
const CONTAINER_LISTS: [&str; 2] = ["initContainers", "containers"];

/// Decodes the carried fields of a pod document (see the module documentation).
pub fn extract(pod: &Map<String, Value>) -> Result<Pod, PolicyError> {
    let mut view = Pod::default();
    if let Some(metadata) = object(field(pod, "metadata"), "pod.metadata")? {
        view.metadata.labels = typed(field(metadata, "labels"), "pod.metadata.labels")?;
        view.metadata.annotations =
            typed(field(metadata, "annotations"), "pod.metadata.annotations")?;
    }
    let Some(spec) = object(field(pod, "spec"), "pod.spec")? else {
        return Ok(view);
    };
    let mut view_spec = PodSpec {
        containers: containers(spec, "containers")?.unwrap_or_default(),
        init_containers: containers(spec, "initContainers")?,
        tolerations: typed(field(spec, "tolerations"), "pod.spec.tolerations")?,
        node_selector: typed(field(spec, "nodeSelector"), "pod.spec.nodeSelector")?,
        scheduler_name: typed(field(spec, "schedulerName"), "pod.spec.schedulerName")?,
        ..PodSpec::default()
    };
    if let Some(volumes) = array(field(spec, "volumes"), "pod.spec.volumes")? {
        let mut names = Vec::with_capacity(volumes.len());
        for (i, volume) in volumes.iter().enumerate() {
            let path = format!("pod.spec.volumes[{i}]");
            let volume = item(volume, &path)?;
            names.push(Volume {
                name: typed(field(volume, "name"), &format!("{path}.name"))?.unwrap_or_default(),
                ..Volume::default()
            });
        }
        view_spec.volumes = Some(names);
    }
    view.spec = Some(view_spec);
    Ok(view)
}

/// Writes the carried fields that differ between `before` (from [`extract`]) and `after` (the
/// decorated view) into the pod document, then checks that nothing else changed.
pub fn write_back(
    pod: &mut Map<String, Value>,
    before: Pod,
    after: Pod,
) -> Result<(), PolicyError> {
    write_carried(pod, &before, &after)?;
    if residue(before) != residue(after) {
        return Err(PolicyError::Failed(
            "decoration changed a pod field this component does not carry back (see view.rs)"
                .into(),
        ));
    }
    Ok(())
}

fn write_carried(
    pod: &mut Map<String, Value>,
    before: &Pod,
    after: &Pod,
) -> Result<(), PolicyError> {
    if before.metadata.labels != after.metadata.labels {
        set(child(pod, "metadata"), "labels", &after.metadata.labels)?;
    }
    if before.metadata.annotations != after.metadata.annotations {
        set(
            child(pod, "metadata"),
            "annotations",
            &after.metadata.annotations,
        )?;
    }
    let (Some(b), Some(a)) = (&before.spec, &after.spec) else {
        return Ok(());
    };
    let spec = child(pod, "spec");
    for key in CONTAINER_LISTS {
        let (b_list, a_list) = match key {
            "containers" => (b.containers.as_slice(), a.containers.as_slice()),
            _ => (
                b.init_containers.as_deref().unwrap_or_default(),
                a.init_containers.as_deref().unwrap_or_default(),
            ),
        };
        for (i, (bc, ac)) in b_list.iter().zip(a_list).enumerate() {
            let Some(Value::Object(container)) = spec.get_mut(key).and_then(|list| list.get_mut(i))
            else {
                continue;
            };
            if bc.env != ac.env {
                set(container, "env", &ac.env)?;
            }
            if bc.volume_mounts != ac.volume_mounts {
                set(container, "volumeMounts", &ac.volume_mounts)?;
            }
        }
    }
    let b_volumes = b.volumes.as_deref().unwrap_or_default();
    let a_volumes = a.volumes.as_deref().unwrap_or_default();
    let kept = a_volumes.len() >= b_volumes.len()
        && b_volumes
            .iter()
            .zip(a_volumes)
            .all(|(bv, av)| bv.name == av.name);
    if !kept {
        return Err(PolicyError::Failed(
            "decoration removed or renamed a pod volume".into(),
        ));
    }
    if a_volumes.len() > b_volumes.len() {
        let list = spec
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        if let Value::Array(list) = list {
            for volume in &a_volumes[b_volumes.len()..] {
                list.push(encode_volume(volume)?);
            }
        }
    }
    if b.tolerations != a.tolerations {
        set(spec, "tolerations", &a.tolerations)?;
    }
    if b.node_selector != a.node_selector {
        set(spec, "nodeSelector", &a.node_selector)?;
    }
    if b.scheduler_name != a.scheduler_name {
        set(spec, "schedulerName", &a.scheduler_name)?;
    }
    Ok(())
}

/// Encodes a volume decoration added. Decoration adds host-path volumes only, and encoding
/// through `Volume`'s own `Serialize` would pull in the encoders of every volume source (an
/// ephemeral volume's claim template carries an `ObjectMeta`, whose timestamps bring in jiff's
/// printer): about 130 KiB of code. Any other kind of volume is refused rather than encoded
/// wrongly.
fn encode_volume(volume: &Volume) -> Result<Value, PolicyError> {
    let host_path_only = Volume {
        name: volume.name.clone(),
        host_path: volume.host_path.clone(),
        ..Volume::default()
    };
    if *volume != host_path_only {
        return Err(PolicyError::Failed(format!(
            "decoration added volume {:?}, which is not a host-path volume; this component only encodes those (see view.rs)",
            volume.name
        )));
    }
    let mut out = Map::new();
    out.insert("name".to_owned(), Value::String(volume.name.clone()));
    if let Some(host_path) = &volume.host_path {
        out.insert(
            "hostPath".to_owned(),
            encode("pod.spec.volumes", host_path)?,
        );
    }
    Ok(Value::Object(out))
}

/// What is left of a view once the carried fields are cleared; equal residues before and after
/// decoration mean nothing is lost.
fn residue(mut pod: Pod) -> Pod {
    pod.metadata.labels = None;
    pod.metadata.annotations = None;
    if let Some(spec) = pod.spec.as_mut() {
        for container in spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut())
        {
            container.env = None;
            container.volume_mounts = None;
        }
        spec.volumes = None;
        spec.tolerations = None;
        spec.node_selector = None;
        spec.scheduler_name = None;
    }
    pod
}

/// A field's value; JSON `null` counts as absent, as k8s-openapi reads it.
fn field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

fn object<'a>(
    value: Option<&'a Value>,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, PolicyError> {
    match value {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(PolicyError::InvalidInput(format!(
            "{path}: expected an object, found {}",
            kind(other)
        ))),
    }
}

/// A list item that must be an object.
fn item<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, PolicyError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(PolicyError::InvalidInput(format!(
            "{path}: expected an object, found {}",
            kind(other)
        ))),
    }
}

fn array<'a>(value: Option<&'a Value>, path: &str) -> Result<Option<&'a [Value]>, PolicyError> {
    match value {
        None => Ok(None),
        Some(Value::Array(list)) => Ok(Some(list)),
        Some(other) => Err(PolicyError::InvalidInput(format!(
            "{path}: expected a list, found {}",
            kind(other)
        ))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn typed<T: DeserializeOwned>(value: Option<&Value>, path: &str) -> Result<Option<T>, PolicyError> {
    value
        .map(|v| {
            tfjob_policy_sdk::logic::json::from_value(path, v).map_err(PolicyError::InvalidInput)
        })
        .transpose()
}

fn containers(spec: &Map<String, Value>, key: &str) -> Result<Option<Vec<Container>>, PolicyError> {
    let list_path = format!("pod.spec.{key}");
    let Some(list) = array(field(spec, key), &list_path)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, container) in list.iter().enumerate() {
        let path = format!("{list_path}[{i}]");
        let container = item(container, &path)?;
        let part = |name: &str| format!("{path}.{name}");
        out.push(Container {
            name: typed(field(container, "name"), &part("name"))?.unwrap_or_default(),
            env: typed(field(container, "env"), &part("env"))?,
            volume_mounts: typed(field(container, "volumeMounts"), &part("volumeMounts"))?,
            resources: typed(field(container, "resources"), &part("resources"))?,
            ..Container::default()
        });
    }
    Ok(Some(out))
}

/// The object under `key`, created (or replacing a non-object) if needed.
fn child<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    parent
        .entry(key)
        .and_modify(|slot| {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
        })
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("the slot holds an object: inserted or replaced above")
}

fn set<T: Serialize>(
    object: &mut Map<String, Value>,
    key: &str,
    value: &Option<T>,
) -> Result<(), PolicyError> {
    match value {
        Some(v) => {
            object.insert(key.to_owned(), encode(key, v)?);
        }
        None => {
            object.remove(key);
        }
    }
    Ok(())
}

fn encode<T: Serialize>(what: &str, value: &T) -> Result<Value, PolicyError> {
    serde_json::to_value(value)
        .map_err(|e| PolicyError::Failed(format!("encoding {what} as JSON: {e}")))
}
