//! A string-to-string map that keeps the order its JSON object was written in.
//!
//! Environment variables in settings (`defaultEnvVars`, an accelerator's `envVars`) are added to
//! containers in the order the platform team wrote them, because a later variable may refer to
//! an earlier one with `$(NAME)`. JSON objects are the natural way to write them, but
//! `serde_json`'s map sorts keys unless its `preserve_order` feature is on, and turning that on
//! would change every map in every crate of the workspace. This type reads the object through
//! serde's map visitor instead, which sees the entries in document order, and keeps them in a
//! `Vec`. Duplicate keys are rejected, since only one of them could be meant.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Ordered `name -> value` pairs, written in JSON as an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderedMap(Vec<(String, String)>);

impl OrderedMap {
    pub fn new() -> OrderedMap {
        OrderedMap(Vec::new())
    }

    /// Appends an entry; returns `false` (and changes nothing) when the key is already present.
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>) -> bool {
        let key = key.into();
        if self.get(&key).is_some() {
            return false;
        }
        self.0.push((key, value.into()));
        true
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The entries in document order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for OrderedMap {
    /// Collects entries in order; a repeated key keeps its first value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = OrderedMap::new();
        for (k, v) in iter {
            map.push(k, v);
        }
        map
    }
}

impl Serialize for OrderedMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for OrderedMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor;

        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = OrderedMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<OrderedMap, A::Error> {
                let mut map = OrderedMap(Vec::with_capacity(access.size_hint().unwrap_or(0)));
                while let Some((key, value)) = access.next_entry::<String, String>()? {
                    if map.get(&key).is_some() {
                        return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                    }
                    map.0.push((key, value));
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(OrderedVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_document_order_and_round_trips() {
        let map: OrderedMap = serde_json::from_str(r#"{"Z": "1", "A": "2", "M": "3"}"#).unwrap();
        let keys: Vec<&str> = map.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["Z", "A", "M"]);
        assert_eq!(map.get("A"), Some("2"));
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            r#"{"Z":"1","A":"2","M":"3"}"#
        );
    }

    #[test]
    fn rejects_duplicates_and_non_strings() {
        let err = serde_json::from_str::<OrderedMap>(r#"{"A": "1", "A": "2"}"#).unwrap_err();
        assert!(err.to_string().starts_with("duplicate key \"A\""), "{err}");
        assert!(serde_json::from_str::<OrderedMap>(r#"{"A": 1}"#).is_err());
        assert!(serde_json::from_str::<OrderedMap>(r#"[["A", "1"]]"#).is_err());
    }

    #[test]
    fn push_and_collect_keep_the_first_value() {
        let mut map: OrderedMap = [("A", "1"), ("B", "2"), ("A", "3")].into_iter().collect();
        assert_eq!(map.len(), 2);
        assert_eq!(map.get("A"), Some("1"));
        assert!(!map.push("B", "x"));
        assert!(map.push("C", "y"));
        assert!(!map.is_empty());
    }
}
