//! JSON decoding whose errors name the field at fault.
//!
//! Every document a policy reads (settings, pods, resource requirements) comes in as JSON text.
//! A bare serde error says what is wrong but not where, which is useless for a 200-line pod, so
//! decoding goes through `serde_path_to_error` and the error starts with the field path, e.g.
//! `pod.spec.containers[0].ports[1].containerPort: invalid type: string "80", expected i32 at
//! line 1 column 212`. Map keys holding dots or slashes are quoted (`limits["nvidia.com/gpu"]`),
//! the same spelling the settings validators use.

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use crate::names::key_path;

/// Decodes `text` as a `T`. `root` names the document (`pod`, `resources`) and starts every
/// error's path; pass `""` for a document whose fields need no prefix (settings).
///
/// Tracking the path costs on every field, and policies decode their inputs on every call, so
/// the document is decoded plainly first; only a document that fails is decoded again, with the
/// path tracked, to name the field. Decoding is deterministic, so the second pass fails with the
/// same error at the same place.
pub fn from_json<T: DeserializeOwned>(root: &str, text: &str) -> Result<T, String> {
    serde_json::from_str(text).or_else(|_| from_json_tracked(root, text))
}

fn from_json_tracked<T: DeserializeOwned>(root: &str, text: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = field_path(root, e.path());
        with_path(&path, e.into_inner())
    })?;
    // Trailing garbage after a complete document is an error too, not silently ignored.
    de.end().map_err(|e| with_path(root, e))?;
    Ok(value)
}

/// Decodes a part of an already parsed document as a `T`; `root` is the part's own path
/// (`pod.spec.containers[0].env`) and starts every error's path. As [`from_json`], the path is
/// tracked only when the plain decoding fails.
pub fn from_value<T: DeserializeOwned>(root: &str, value: &serde_json::Value) -> Result<T, String> {
    <T as serde::Deserialize>::deserialize(value).or_else(|_| {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = field_path(root, e.path());
            with_path(&path, e.into_inner())
        })
    })
}

fn with_path(path: &str, error: serde_json::Error) -> String {
    if path.is_empty() {
        error.to_string()
    } else {
        format!("{path}: {error}")
    }
}

fn field_path(root: &str, path: &serde_path_to_error::Path) -> String {
    let mut out = root.to_owned();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = key_path(&out, key),
            Segment::Enum { variant } => out = key_path(&out, variant),
            // A segment serde could not name (e.g. inside a half-read document) says nothing
            // useful to a reader; the error message itself carries the position.
            Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use std::collections::BTreeMap;

    #[test]
    fn errors_name_the_field_inside_a_pod() {
        let text = r#"{"spec": {"containers": [{"name": "tensorflow", "ports": [{"containerPort": "80"}]}]}}"#;
        let err = from_json::<Pod>("pod", text).unwrap_err();
        assert!(
            err.starts_with("pod.spec.containers[0].ports[0].containerPort: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn map_keys_with_separators_are_quoted() {
        let err = from_json::<BTreeMap<String, BTreeMap<String, u8>>>(
            "",
            r#"{"nvidia.com/gpu": {"a": -1}}"#,
        )
        .unwrap_err();
        assert!(
            err.starts_with("[\"nvidia.com/gpu\"].a: invalid value"),
            "{err}"
        );
    }

    #[test]
    fn parts_of_a_parsed_document_keep_their_path() {
        let value = serde_json::json!([{"name": "A", "value": 1}]);
        let err = from_value::<Vec<k8s_openapi::api::core::v1::EnvVar>>(
            "pod.spec.containers[0].env",
            &value,
        )
        .unwrap_err();
        assert!(
            err.starts_with("pod.spec.containers[0].env[0].value: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_and_trailing_text_are_reported() {
        let err = from_json::<Pod>("pod", "{").unwrap_err();
        assert!(err.starts_with("pod: EOF while parsing"), "{err}");
        let err = from_json::<BTreeMap<String, String>>("", "{} x").unwrap_err();
        assert!(err.starts_with("trailing characters"), "{err}");
        let ok: BTreeMap<String, String> = from_json("", " {\"a\": \"b\"} ").unwrap();
        assert_eq!(ok["a"], "b");
    }
}
