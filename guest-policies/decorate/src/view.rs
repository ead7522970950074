//! The parts of a pod decoration works with, decoded as k8s-openapi types over the pod's JSON
//! text, and everything else passed through as the text it came as.
//!
//! Decoding a whole core/v1 Pod into k8s-openapi types and encoding it again costs a component
//! about 500 KiB of code (the `Volume` decoder alone is 80 KiB, and timestamps pull in jiff's
//! parser and printer), all for fields decoration never looks at. Reading the pod into a
//! `serde_json::Value` instead costs time: every object of the pod becomes a map, every string
//! an allocation, and all of it is encoded again, though decoration touches a few fields. So the
//! pod is read as a [`Document`]: only the objects and lists on the way to the carried fields
//! are opened, every other value stays a slice of the input (scanned for validity, never
//! decoded) and is written back byte for byte. The fields `tfjob_policy_logic::decorate` reads
//! or writes are decoded into a k8s-openapi `Pod` that holds only them; `decorate_pod` runs on
//! that pod; and the fields it changed are encoded into the document again.
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
//!
//! The document is the same JSON as the input where decoration changed nothing, which is what
//! the operator compares: keys keep their order (a replaced field keeps its place, an added one
//! comes last in its object), and a key written twice counts once, its last value, as when the
//! operator reads the result.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tfjob_policy_sdk::k8s_openapi;
use tfjob_policy_sdk::wit::PolicyError;

/// The container lists decoration visits, by JSON key.
const CONTAINER_LISTS: [&str; 2] = ["initContainers", "containers"];

/// A pod document, opened where decoration looks (see the module documentation).
pub struct Document<'a> {
    pod: Vec<Entry<'a>>,
    /// The length of the input, which the output about matches.
    len: usize,
}

/// An object's entry: its key, as decoded, and its value.
type Entry<'a> = (Cow<'a, str>, Node<'a>);

/// A JSON value of the document.
enum Node<'a> {
    /// Not looked into: the input's text.
    Raw(&'a RawValue),
    /// An object whose entries were looked at, in document order.
    Object(Vec<Entry<'a>>),
    /// A list whose items were looked at.
    List(Vec<Node<'a>>),
    /// A value decoration wrote, encoded.
    Encoded(String),
    /// `null` where an object or a list is opened.
    Null,
    /// Another kind of value where an object or a list is opened (`a string`, `a number`, ...):
    /// [`Document::parse`] refuses the document, so no [`Document`] holds one.
    Misshapen(&'static str),
}

impl<'a> Document<'a> {
    /// Reads a pod document, opening the pod, its `metadata` and `spec`, the container lists
    /// and their containers, and the volume list and its volumes. Errors name the field.
    pub fn parse(text: &'a str) -> Result<Document<'a>, PolicyError> {
        if !text.trim_start().starts_with('{') {
            // Not an object, or not JSON: the errors a JSON reader gives for the whole text.
            return Err(PolicyError::InvalidInput(
                match serde_json::from_str::<Value>(text) {
                    Ok(_) => "pod: expected a JSON object".to_owned(),
                    Err(e) => format!("pod: {e}"),
                },
            ));
        }
        let mut reader = serde_json::Deserializer::from_str(text);
        let pod = ShapeSeed(Shape::Object(POD_SHAPE))
            .deserialize(&mut reader)
            .and_then(|pod| reader.end().map(|()| pod))
            .map_err(|e| PolicyError::InvalidInput(format!("pod: {e}")))?;
        let Node::Object(pod) = pod else {
            return Err(PolicyError::InvalidInput(
                "pod: expected a JSON object".into(),
            ));
        };
        check_shapes(&pod, POD_SHAPE, "pod")?;
        Ok(Document {
            pod,
            len: text.len(),
        })
    }

    /// Decodes the carried fields (see the module documentation).
    pub fn extract(&self) -> Result<Pod, PolicyError> {
        let mut view = Pod::default();
        if let Some(metadata) = object(&self.pod, "metadata") {
            view.metadata.labels = typed(field(metadata, "labels"), "pod.metadata.labels")?;
            view.metadata.annotations =
                typed(field(metadata, "annotations"), "pod.metadata.annotations")?;
        }
        let Some(spec) = object(&self.pod, "spec") else {
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
        if let Some(volumes) = list(spec, "volumes") {
            let mut names = Vec::with_capacity(volumes.len());
            for (i, volume) in volumes.iter().enumerate() {
                let Node::Object(volume) = volume else {
                    continue; // opened as objects by `parse`
                };
                let path = || format!("pod.spec.volumes[{i}].name");
                names.push(Volume {
                    name: typed_at(field(volume, "name"), path)?.unwrap_or_default(),
                    ..Volume::default()
                });
            }
            view_spec.volumes = Some(names);
        }
        view.spec = Some(view_spec);
        Ok(view)
    }

    /// Writes the carried fields that differ between `before` (from [`Document::extract`]) and
    /// `after` (the decorated view) into the document, checks that nothing else changed, and
    /// encodes the document.
    pub fn write_back(mut self, before: Pod, after: Pod) -> Result<String, PolicyError> {
        write_carried(&mut self.pod, &before, &after)?;
        if residue(before) != residue(after) {
            return Err(PolicyError::Failed(
                "decoration changed a pod field this component does not carry back (see view.rs)"
                    .into(),
            ));
        }
        // Decoration adds some hundred bytes to a pod of some thousand: one allocation for the
        // whole output instead of one per doubling, each copying what was written so far.
        let mut out = String::with_capacity(self.len + self.len / 4 + 1024);
        write_object(&self.pod, &mut out);
        Ok(out)
    }
}

/// A copy of a view from [`Document::extract`]: the fields it holds, and no code for the ones
/// it does not (a derived `Pod::clone` covers every field a pod can hold).
pub fn copy(view: &Pod) -> Pod {
    let copy_containers = |list: &[Container]| -> Vec<Container> {
        list.iter()
            .map(|c| Container {
                name: c.name.clone(),
                env: c.env.clone(),
                volume_mounts: c.volume_mounts.clone(),
                resources: c.resources.clone(),
                ..Container::default()
            })
            .collect()
    };
    let mut copy = Pod::default();
    copy.metadata.labels = view.metadata.labels.clone();
    copy.metadata.annotations = view.metadata.annotations.clone();
    copy.spec = view.spec.as_ref().map(|spec| PodSpec {
        containers: copy_containers(&spec.containers),
        init_containers: spec.init_containers.as_deref().map(copy_containers),
        volumes: spec.volumes.as_ref().map(|volumes| {
            volumes
                .iter()
                .map(|v| Volume {
                    name: v.name.clone(),
                    ..Volume::default()
                })
                .collect()
        }),
        tolerations: spec.tolerations.clone(),
        node_selector: spec.node_selector.clone(),
        scheduler_name: spec.scheduler_name.clone(),
        ..PodSpec::default()
    });
    copy
}

fn write_carried(pod: &mut Vec<Entry<'_>>, before: &Pod, after: &Pod) -> Result<(), PolicyError> {
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
            let Some(Node::List(list)) = get_mut(spec, key) else {
                continue;
            };
            let Some(Node::Object(container)) = list.get_mut(i) else {
                continue;
            };
            if bc.env != ac.env {
                set_list(container, "env", bc.env.as_deref(), ac.env.as_deref())?;
            }
            if bc.volume_mounts != ac.volume_mounts {
                set_list(
                    container,
                    "volumeMounts",
                    bc.volume_mounts.as_deref(),
                    ac.volume_mounts.as_deref(),
                )?;
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
        let slot = slot(spec, "volumes");
        if !matches!(slot, Node::List(_)) {
            // Absent or `null`: a new list.
            *slot = Node::List(Vec::new());
        }
        if let Node::List(list) = slot {
            for volume in &a_volumes[b_volumes.len()..] {
                list.push(Node::Encoded(encode_volume(volume)?));
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
fn encode_volume(volume: &Volume) -> Result<String, PolicyError> {
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
            serde_json::to_value(host_path)
                .map_err(|e| PolicyError::Failed(format!("encoding pod.spec.volumes: {e}")))?,
        );
    }
    encode("pod.spec.volumes", &out)
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

// Reading.

/// What [`Document::parse`] opens below an object: the listed keys, each with the shape its
/// value must have; every other value stays text. The order is the order in which the shapes
/// are checked, so that of two misshapen fields the same one is always reported.
type Opened = &'static [(&'static str, Shape)];

/// The shape an opened value must have (`null` is accepted for either, and stays `null`).
#[derive(Clone, Copy)]
enum Shape {
    /// An object, whose keys in the list are opened in turn.
    Object(Opened),
    /// A list whose items are objects, opened with none of their keys.
    ListOfObjects,
}

/// The pod, its `metadata` and `spec`, and in the spec the container lists and the volumes.
const POD_SHAPE: Opened = &[
    ("metadata", Shape::Object(&[])),
    (
        "spec",
        Shape::Object(&[
            (CONTAINER_LISTS[0], Shape::ListOfObjects),
            (CONTAINER_LISTS[1], Shape::ListOfObjects),
            ("volumes", Shape::ListOfObjects),
        ]),
    ),
];

/// Reads one value of the document in the shape it should have. A value of another kind is
/// read through (a syntax error further on is still the one reported, as for any JSON reader)
/// and kept as [`Node::Misshapen`], for [`check_shapes`] to name.
struct ShapeSeed(Shape);

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Node<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Shape::Object(_) => "a JSON object",
            Shape::ListOfObjects => "a JSON list",
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node<'de>, A::Error> {
        let Shape::Object(opened) = self.0 else {
            while access.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Node::Misshapen("an object"));
        };
        let mut entries: Vec<Entry<'de>> = Vec::with_capacity(access.size_hint().unwrap_or(0));
        while let Some(Key(key)) = access.next_key()? {
            let value = match opened.iter().find(|(name, _)| *name == key) {
                Some((_, shape)) => access.next_value_seed(ShapeSeed(*shape))?,
                None => Node::Raw(access.next_value()?),
            };
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => entries.push((key, value)),
            }
        }
        Ok(Node::Object(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Node<'de>, A::Error> {
        let Shape::ListOfObjects = self.0 else {
            while access.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Node::Misshapen("a list"));
        };
        let mut items = Vec::with_capacity(access.size_hint().unwrap_or(0));
        while let Some(item) = access.next_element_seed(ShapeSeed(Shape::Object(&[])))? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Node<'de>, E> {
        Ok(Node::Misshapen("a boolean"))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Node<'de>, E> {
        Ok(Node::Misshapen("a number"))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Node<'de>, E> {
        Ok(Node::Misshapen("a number"))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Node<'de>, E> {
        Ok(Node::Misshapen("a number"))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Node<'de>, E> {
        Ok(Node::Misshapen("a string"))
    }
}

/// The first opened value, in [`POD_SHAPE`]'s order, that has not the shape it should have,
/// as an error naming it. An item of a list must be an object; `null` is not one.
fn check_shapes(entries: &[Entry<'_>], opened: Opened, path: &str) -> Result<(), PolicyError> {
    let misshapen = |path: &str, expected: &str, found: &str| {
        Err(PolicyError::InvalidInput(format!(
            "{path}: expected {expected}, found {found}"
        )))
    };
    for (key, shape) in opened {
        let Some(node) = get(entries, key) else {
            continue;
        };
        match (shape, node) {
            (Shape::Object(_), Node::Misshapen(found)) => {
                return misshapen(&format!("{path}.{key}"), "an object", found);
            }
            (Shape::ListOfObjects, Node::Misshapen(found)) => {
                return misshapen(&format!("{path}.{key}"), "a list", found);
            }
            (Shape::Object(inner), Node::Object(object)) if !inner.is_empty() => {
                check_shapes(object, inner, &format!("{path}.{key}"))?;
            }
            (Shape::ListOfObjects, Node::List(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let found = match item {
                        Node::Misshapen(found) => found,
                        Node::Null => "null",
                        _ => continue,
                    };
                    return misshapen(&format!("{path}.{key}[{i}]"), "an object", found);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// An object key, borrowed from the input unless it held escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }

            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }

        deserializer.deserialize_str(KeyVisitor)
    }
}

fn get<'n, 'a>(entries: &'n [Entry<'a>], key: &str) -> Option<&'n Node<'a>> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn get_mut<'n, 'a>(entries: &'n mut [Entry<'a>], key: &str) -> Option<&'n mut Node<'a>> {
    entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// An object `parse` opened under `key`.
fn object<'n, 'a>(entries: &'n [Entry<'a>], key: &str) -> Option<&'n [Entry<'a>]> {
    match get(entries, key) {
        Some(Node::Object(object)) => Some(object),
        _ => None,
    }
}

/// A list `parse` opened under `key`.
fn list<'n, 'a>(entries: &'n [Entry<'a>], key: &str) -> Option<&'n [Node<'a>]> {
    match get(entries, key) {
        Some(Node::List(items)) => Some(items),
        _ => None,
    }
}

/// A field's text; JSON `null` counts as absent, as k8s-openapi reads it.
fn field<'n>(entries: &'n [Entry<'_>], key: &str) -> Option<&'n str> {
    match get(entries, key)? {
        Node::Raw(raw) if raw.get() == "null" => None,
        Node::Raw(raw) => Some(raw.get()),
        Node::Encoded(text) => Some(text),
        // Only containers and volumes are opened, and those are read by their fields.
        Node::Object(_) | Node::List(_) | Node::Null | Node::Misshapen(_) => None,
    }
}

fn typed<T: DeserializeOwned>(text: Option<&str>, path: &str) -> Result<Option<T>, PolicyError> {
    typed_at(text, || path.to_owned())
}

/// As [`typed`], for a path that must be formatted (an item of a list): `path` is called only
/// for an error, so a pod that decodes formats none.
fn typed_at<T: DeserializeOwned>(
    text: Option<&str>,
    path: impl FnOnce() -> String,
) -> Result<Option<T>, PolicyError> {
    text.map(|t| {
        serde_json::from_str(t).or_else(|_| {
            tfjob_policy_sdk::logic::json::from_json(&path(), t).map_err(PolicyError::InvalidInput)
        })
    })
    .transpose()
}

fn containers(spec: &[Entry<'_>], key: &str) -> Result<Option<Vec<Container>>, PolicyError> {
    let Some(list) = list(spec, key) else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, container) in list.iter().enumerate() {
        let Node::Object(container) = container else {
            continue; // opened as objects by `parse`
        };
        let part = |name: &'static str| move || format!("pod.spec.{key}[{i}].{name}");
        out.push(Container {
            name: typed_at(field(container, "name"), part("name"))?.unwrap_or_default(),
            env: typed_at(field(container, "env"), part("env"))?,
            volume_mounts: typed_at(field(container, "volumeMounts"), part("volumeMounts"))?,
            resources: typed_at(field(container, "resources"), part("resources"))?,
            ..Container::default()
        });
    }
    Ok(Some(out))
}

// Writing.

/// The node under `key`, added (as `null`, for the caller to replace) if absent.
fn slot<'n, 'a>(entries: &'n mut Vec<Entry<'a>>, key: &'static str) -> &'n mut Node<'a> {
    let i = match entries.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            entries.push((Cow::Borrowed(key), Node::Encoded("null".to_owned())));
            entries.len() - 1
        }
    };
    &mut entries[i].1
}

/// The object under `key`, created (or replacing a non-object) if needed.
fn child<'n, 'a>(parent: &'n mut Vec<Entry<'a>>, key: &'static str) -> &'n mut Vec<Entry<'a>> {
    let node = slot(parent, key);
    if !matches!(node, Node::Object(_)) {
        *node = Node::Object(Vec::new());
    }
    match node {
        Node::Object(entries) => entries,
        _ => unreachable!("the slot holds an object: set above"),
    }
}

fn set<T: Serialize>(
    object: &mut Vec<Entry<'_>>,
    key: &'static str,
    value: &Option<T>,
) -> Result<(), PolicyError> {
    match value {
        Some(v) => *slot(object, key) = Node::Encoded(encode(key, v)?),
        None => object.retain(|(k, _)| k != key),
    }
    Ok(())
}

/// Sets the list under `key`, which held `before` (decoded from the document), to `after`. When
/// `after` only appends to `before`, as decoration does with variables and mounts, the list's
/// text is kept and the new items are written after it: the items already there (a container's
/// `TF_CONFIG`, most of a worker's pod) are neither encoded again nor changed.
fn set_list<T: Serialize + PartialEq>(
    object: &mut Vec<Entry<'_>>,
    key: &'static str,
    before: Option<&[T]>,
    after: Option<&[T]>,
) -> Result<(), PolicyError> {
    if let (Some(before), Some(after), Some(Node::Raw(raw))) = (before, after, get(object, key))
        && after.starts_with(before)
        && let Some(open) = raw.get().strip_suffix(']')
    {
        let mut text = String::with_capacity(open.len() + 128 * (after.len() - before.len()));
        text.push_str(open);
        for (i, item) in after[before.len()..].iter().enumerate() {
            if i > 0 || !before.is_empty() {
                text.push(',');
            }
            text.push_str(&encode(key, item)?);
        }
        text.push(']');
        *slot(object, key) = Node::Encoded(text);
        return Ok(());
    }
    set(object, key, &after)
}

fn encode<T: Serialize>(what: &str, value: &T) -> Result<String, PolicyError> {
    serde_json::to_string(value)
        .map_err(|e| PolicyError::Failed(format!("encoding {what} as JSON: {e}")))
}

fn write_object(entries: &[Entry<'_>], out: &mut String) {
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_key(key, matches!(key, Cow::Owned(_)), out);
        out.push(':');
        write_node(value, out);
    }
    out.push('}');
}

fn write_node(node: &Node<'_>, out: &mut String) {
    match node {
        Node::Raw(raw) => out.push_str(raw.get()),
        Node::Encoded(text) => out.push_str(text),
        Node::Null => out.push_str("null"),
        Node::Misshapen(found) => {
            unreachable!("a parsed document holds no misshapen value ({found})")
        }
        Node::Object(entries) => write_object(entries, out),
        Node::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_node(item, out);
            }
            out.push(']');
        }
    }
}

/// A key borrowed from the input held no escapes (and JSON strings hold no raw control
/// characters), so it is written as it was read; so are the plain keys decoration adds. A key
/// that held escapes is escaped again.
fn write_key(key: &str, escaped: bool, out: &mut String) {
    if escaped {
        out.push_str(&Value::String(key.to_owned()).to_string());
    } else {
        out.push('"');
        out.push_str(key);
        out.push('"');
    }
}
