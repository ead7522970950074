//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists) and the field selectors
//! the operator and kubectl use (`metadata.name`, `metadata.namespace`, `status.phase`).

use serde_json::Value;

use crate::error::ApiError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Field selector keys the server understands (pods, and core events as `kubectl describe`
/// selects them).
const SUPPORTED_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "spec.nodeName",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
];

/// An object's labels (`metadata.labels`; values that are not strings left out).
pub fn labels(object: &Value) -> std::collections::BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A parsed label or field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(text: &str) -> Vec<&str> {
    split_outside(text, ',', ('(', ')'))
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// Splits `text` on `sep` where it is not inside a pair of `brackets`.
pub fn split_outside(text: &str, sep: char, brackets: (char, char)) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in text.char_indices() {
        if c == brackets.0 {
            depth += 1;
        } else if c == brackets.1 {
            depth = depth.saturating_sub(1);
        } else if c == sep && depth == 0 {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

fn set_values(text: &str) -> Result<Vec<String>, ApiError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("invalid selector set {text:?}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl Selector {
    /// Parses a label selector.
    pub fn parse(text: &str) -> Result<Selector, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top(text) {
            let r = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.into())
            } else {
                return Err(ApiError::bad_request(format!("invalid selector {part:?}")));
            };
            requirements.push(r);
        }
        Ok(Selector { requirements })
    }

    /// Whether `lookup` (key to value) satisfies every requirement.
    pub fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => lookup(k).as_deref() == Some(v.as_str()),
            Requirement::NotEquals(k, v) => lookup(k).as_deref() != Some(v.as_str()),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => lookup(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
        })
    }

    /// Matches an object's labels.
    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        self.matches(|k| {
            labels
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    /// Matches the supported fields of an object.
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.matches(|k| {
            let pointer = match k {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                "status.phase" => "/status/phase",
                "spec.nodeName" => "/spec/nodeName",
                "involvedObject.kind" => "/involvedObject/kind",
                "involvedObject.name" => "/involvedObject/name",
                "involvedObject.namespace" => "/involvedObject/namespace",
                "involvedObject.uid" => "/involvedObject/uid",
                _ => return None,
            };
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    /// Field selectors support only these keys; anything else is a 400 as on a real server.
    pub fn check_fields(&self) -> Result<(), ApiError> {
        for r in &self.requirements {
            let key = match r {
                Requirement::Equals(k, _) | Requirement::NotEquals(k, _) => k,
                _ => {
                    return Err(ApiError::bad_request(
                        "field selectors support =, == and != only",
                    ));
                }
            };
            if !SUPPORTED_FIELDS.contains(&key.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let obj = json!({"metadata": {"labels": {"app": "tf", "tier": "worker"}}});
        for (sel, expected) in [
            ("", true),
            ("app=tf", true),
            ("app==tf,tier=worker", true),
            ("app!=tf", false),
            ("tier in (ps, worker)", true),
            ("tier notin (ps,worker)", false),
            ("app", true),
            ("!app", false),
            ("!missing,app=tf", true),
            ("missing", false),
            ("tier in (ps)", false),
        ] {
            assert_eq!(
                Selector::parse(sel).unwrap().matches_labels(&obj),
                expected,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selectors() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}});
        let sel = Selector::parse("metadata.name=a,status.phase!=Failed").unwrap();
        sel.check_fields().unwrap();
        assert!(sel.matches_fields(&obj));
        assert!(
            Selector::parse("spec.replicas=1")
                .unwrap()
                .check_fields()
                .is_err()
        );
    }
}
