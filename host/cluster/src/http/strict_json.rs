//! Request bodies parsed as the API server's strict decoder reads them: into the same JSON value
//! a plain parse gives (a duplicate's last value wins), noting every field named twice in one
//! object by its path (`spec.replicas`), for `fieldValidation` to refuse or warn about.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `body` as JSON, with the paths of its duplicate fields.
pub fn parse(body: &[u8]) -> Result<(Value, Vec<String>), serde_json::Error> {
    let mut duplicates = Vec::new();
    let mut path = String::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = Node {
        path: &mut path,
        duplicates: &mut duplicates,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((value, duplicates))
}

/// One value being read, at `path` (one buffer for the whole parse, grown and cut back as the
/// parse goes in and out, so a value costs no allocation of its own).
struct Node<'a> {
    path: &'a mut String,
    duplicates: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let len = self.path.len();
            self.path.push('[');
            self.path.push_str(itoa::Buffer::new().format(items.len()));
            self.path.push(']');
            let node = Node {
                path: &mut *self.path,
                duplicates: &mut *self.duplicates,
            };
            let item = seq.next_element_seed(node);
            self.path.truncate(len);
            match item? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        let mut reported = HashSet::new();
        while let Some(key) = access.next_key::<String>()? {
            let len = self.path.len();
            if len > 0 {
                self.path.push('.');
            }
            self.path.push_str(&key);
            if map.contains_key(&key) && reported.insert(key.clone()) {
                self.duplicates.push(self.path.clone());
            }
            let value = access.next_value_seed(Node {
                path: &mut *self.path,
                duplicates: &mut *self.duplicates,
            });
            self.path.truncate(len);
            map.insert(key, value?);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicates_are_named_by_path_at_every_depth_and_the_last_value_wins() {
        let (value, duplicates) = parse(
            br#"{"kind":"A","spec":{"replicas":1,"replicas":2,"replicas":3,
                "containers":[{"name":"a","name":"b"}]},"kind":"B"}"#,
        )
        .unwrap();
        assert_eq!(
            value,
            json!({"kind": "B", "spec": {"replicas": 3, "containers": [{"name": "b"}]}})
        );
        assert_eq!(
            duplicates,
            ["spec.replicas", "spec.containers[0].name", "kind"]
        );
    }

    #[test]
    fn a_plain_body_parses_as_serde_json_parses_it() {
        let body = r#"{"a":[1,-2,3.5,true,null,"ü €"],"b":{"c":{}},"d":18446744073709551615}"#;
        let (value, duplicates) = parse(body.as_bytes()).unwrap();
        assert_eq!(value, serde_json::from_str::<Value>(body).unwrap());
        assert!(duplicates.is_empty());
    }

    #[test]
    fn malformed_deep_and_trailing_bodies_are_errors() {
        assert!(parse(b"{\"a\":").is_err());
        assert!(parse(b"{} {}").is_err());
        // serde_json's recursion limit holds: no stack overflow on a hostile body.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).is_err());
    }
}
