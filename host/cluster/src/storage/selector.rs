//! Selectors of list and watch requests: label selectors through the API crate's parser (the
//! grammar policies' reads use too), and the field selectors the operator and kubectl use
//! (`metadata.name`, `metadata.namespace`, `status.phase`, ...), which allow only `=`, `==` and
//! `!=`.

use serde_json::Value;
use tfjob_policy_logic::label_selector::LabelSelector;

use crate::error::ApiError;

/// One `key=value` or `key!=value` term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FieldTerm {
    Equals(String, String),
    NotEquals(String, String),
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

pub use tfjob_policy_logic::label_selector::labels;

/// Parses a label selector; a malformed one is a 400 naming the requirement.
pub fn label_selector(text: &str) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Whether an object's labels satisfy `selector`.
pub fn matches_labels(selector: &LabelSelector, object: &Value) -> bool {
    let labels = object.pointer("/metadata/labels");
    selector.matches(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
}

/// A parsed field selector over [`SUPPORTED_FIELDS`]; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
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

impl FieldSelector {
    /// Parses a field selector: terms of `=`, `==` or `!=` over the supported fields, as a real
    /// server answers anything else with a 400.
    pub fn parse(text: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for part in split_top(text) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                FieldTerm::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                FieldTerm::Equals(k.trim().into(), v.trim().into())
            } else {
                return Err(ApiError::bad_request(
                    "field selectors support =, == and != only",
                ));
            };
            let (FieldTerm::Equals(key, _) | FieldTerm::NotEquals(key, _)) = &term;
            if !SUPPORTED_FIELDS.contains(&key.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
            terms.push(term);
        }
        Ok(FieldSelector { terms })
    }

    /// Matches the supported fields of an object.
    pub fn matches(&self, object: &Value) -> bool {
        let field = |k: &str| {
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
            object.pointer(pointer).and_then(Value::as_str)
        };
        self.terms.iter().all(|t| match t {
            FieldTerm::Equals(k, v) => field(k) == Some(v.as_str()),
            FieldTerm::NotEquals(k, v) => field(k) != Some(v.as_str()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_match_labels_and_refuse_bad_syntax_with_a_400() {
        let obj = json!({"metadata": {"labels": {"app": "tf", "tier": "worker"}}});
        let sel = label_selector("app=tf,tier in (ps,worker)").unwrap();
        assert!(matches_labels(&sel, &obj));
        assert!(!matches_labels(&label_selector("!app").unwrap(), &obj));
        let err = label_selector("a b=c").unwrap_err();
        assert_eq!(err.code, 400, "{err:?}");
    }

    #[test]
    fn field_selectors() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}});
        let sel = FieldSelector::parse("metadata.name=a,status.phase!=Failed").unwrap();
        assert!(sel.matches(&obj));
        assert!(FieldSelector::parse("spec.replicas=1").is_err());
        assert!(FieldSelector::parse("status.phase in (Running)").is_err());
    }
}
