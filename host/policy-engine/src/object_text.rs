//! Fields of a cached object read from its JSON text instead of copied beside it, so that a
//! cache of thousands of nodes keeps each once: its labels, for selectors, and its
//! resourceVersion, for provenance. Neither ever needs escaping in JSON: a valid label key is
//! a DNS subdomain, `/` and a name, a value alphanumerics, `-`, `_` and `.`, and a
//! resourceVersion is the server's plain token. So each `"key":"value"` pair appears verbatim
//! in the object's serialised text, and its key and value are spans of it. Any occurrence of
//! that exact pair will do (an annotation of the same key and value has the same bytes). A
//! label that would need escaping, which an API server never serves but a fixture might, makes
//! the object keep its labels as an owned copy instead (and such a resourceVersion is not
//! kept).

use std::collections::BTreeMap;

/// Where a field's key or value lies in an object's JSON text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn of(text: &str, span: Span) -> &str {
        let start = span.start as usize;
        &text[start..start + span.len as usize]
    }

    /// The span of `value` where `"field":"value"` appears verbatim in `text`.
    pub(crate) fn of_field(text: &str, field: &str, value: &str) -> Option<Span> {
        pair_in(text, field, value).map(|(_, value)| value)
    }

    /// The text it spans in `text`.
    pub(crate) fn read(self, text: &str) -> &str {
        Span::of(text, self)
    }
}

/// An object's labels, as spans of its JSON text or, when that cannot be, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ObjectLabels {
    /// Key and value spans, sorted by key.
    Spans(Box<[(Span, Span)]>),
    Owned(BTreeMap<String, String>),
}

impl ObjectLabels {
    /// The labels `labels` of the object serialised as `text`.
    pub(crate) fn index(text: &str, labels: BTreeMap<String, String>) -> ObjectLabels {
        let mut spans = Vec::with_capacity(labels.len());
        for (key, value) in &labels {
            match pair_in(text, key, value) {
                Some(pair) => spans.push(pair),
                None => return ObjectLabels::Owned(labels),
            }
        }
        // `labels` iterates in key order, so the spans are sorted by key.
        ObjectLabels::Spans(spans.into_boxed_slice())
    }

    /// The value of label `key`, read from `text`, the object's JSON the spans point into.
    pub(crate) fn get<'a>(&'a self, text: &'a str, key: &str) -> Option<&'a str> {
        match self {
            ObjectLabels::Spans(spans) => spans
                .binary_search_by(|(k, _)| Span::of(text, *k).cmp(key))
                .ok()
                .map(|i| Span::of(text, spans[i].1)),
            ObjectLabels::Owned(labels) => labels.get(key).map(String::as_str),
        }
    }
}

/// The spans of `key` and `value` where `"key":"value"` appears verbatim in `text`.
fn pair_in(text: &str, key: &str, value: &str) -> Option<(Span, Span)> {
    let verbatim = |s: &str| !s.chars().any(|c| c == '"' || c == '\\' || c.is_control());
    if !verbatim(key) || !verbatim(value) {
        return None;
    }
    let at = text.find(&format!("\"{key}\":\"{value}\""))?;
    let span = |start: usize, len: usize| {
        Some(Span {
            start: u32::try_from(start).ok()?,
            len: u32::try_from(len).ok()?,
        })
    };
    let key_span = span(at + 1, key.len())?;
    let value_span = span(at + key.len() + 4, value.len())?;
    Some((key_span, value_span))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn indexed(object: &serde_json::Value) -> (String, ObjectLabels) {
        let text = object.to_string();
        let labels = tfjob_policy_logic::label_selector::labels(object);
        let index = ObjectLabels::index(&text, labels);
        (text, index)
    }

    #[test]
    fn labels_are_read_from_the_text_without_a_copy() {
        let object = json!({"metadata": {
            "name": "n",
            "annotations": {"team": "vision", "note": "\"pool\":\"gpu\""},
            "labels": {"pool": "gpu", "team": "vision", "example.com/zone": "a-1", "empty": ""},
        }});
        let (text, labels) = indexed(&object);
        assert!(matches!(labels, ObjectLabels::Spans(_)), "{labels:?}");
        assert_eq!(labels.get(&text, "pool"), Some("gpu"));
        assert_eq!(labels.get(&text, "team"), Some("vision"));
        assert_eq!(labels.get(&text, "example.com/zone"), Some("a-1"));
        assert_eq!(labels.get(&text, "empty"), Some(""));
        assert_eq!(
            labels.get(&text, "note"),
            None,
            "annotations are not labels"
        );
        assert_eq!(labels.get(&text, "name"), None);
    }

    #[test]
    fn labels_that_need_escaping_are_kept_owned_and_still_answer() {
        for value in ["a\"b", "back\\slash", "line\nbreak", "ünïcode", "日本"] {
            let object = json!({"metadata": {"labels": {"k": value, "plain": "x"}}});
            let (text, labels) = indexed(&object);
            assert_eq!(labels.get(&text, "k"), Some(value), "{value:?}: {labels:?}");
            assert_eq!(labels.get(&text, "plain"), Some("x"));
        }
        let object = json!({"metadata": {"labels": {"quo\"te": "v"}}});
        let (text, labels) = indexed(&object);
        assert!(matches!(labels, ObjectLabels::Owned(_)));
        assert_eq!(labels.get(&text, "quo\"te"), Some("v"));
    }

    #[test]
    fn a_resource_version_is_read_from_the_text() {
        let object = json!({"metadata": {
            "annotations": {"resourceVersion": "forged"},
            "name": "n",
            "resourceVersion": "4711",
        }});
        let text = object.to_string();
        let span = Span::of_field(&text, "resourceVersion", "4711").expect("found");
        assert_eq!(span.read(&text), "4711");
        assert_eq!(Span::of_field(&text, "resourceVersion", "47"), None);
    }

    #[test]
    fn no_labels_is_an_empty_index() {
        let (text, labels) = indexed(&json!({"metadata": {"name": "n"}}));
        assert_eq!(labels, ObjectLabels::Spans(Box::new([])));
        assert_eq!(labels.get(&text, "any"), None);
    }
}
