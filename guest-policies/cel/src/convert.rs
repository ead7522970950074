//! JSON to CEL values and back: the pod, the job and the objects read go in as CEL maps and
//! lists; a mutation's result comes out as JSON. Integers stay integers both ways (a JSON
//! number without a fraction is a CEL `int`, or `uint` past `int`'s range), and a quantity
//! comes out in its canonical spelling. What JSON cannot hold (bytes, a map keyed by numbers, a
//! float that is not finite, a function) is an error naming the value's type.

use std::collections::HashMap;
use std::sync::Arc;

use cel::Value;
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::objects::{Key, Map};
use serde_json::Value as Json;

use crate::quantity::CelQuantity;

/// `json` as a CEL value.
pub fn to_cel(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::Int(i),
            (None, Some(u), _) => Value::UInt(u),
            (None, None, Some(f)) => Value::Float(f),
            (None, None, None) => Value::Null,
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Json::Object(fields) => {
            let map: HashMap<Key, Value> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// `json` as the CEL value an expression's variable is bound to, borrowing its strings: the
/// same value as [`to_cel`], without building it twice (a `Value` is converted again when it
/// is bound) or copying a string.
pub fn to_val<'v>(json: &'v Json) -> Box<dyn Val + 'v> {
    match json {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Box::new(CelInt::from(i)),
            (None, Some(u), _) => Box::new(CelUInt::from(u)),
            (None, None, Some(f)) => Box::new(CelDouble::from(f)),
            (None, None, None) => Box::new(CelNull),
        },
        Json::String(s) => Box::new(CelString::from(s.as_str())),
        Json::Array(items) => Box::new(CelList::from(items.iter().map(to_val).collect::<Vec<_>>())),
        Json::Object(fields) => {
            let mut map = HashMap::with_capacity(fields.len());
            map.extend(
                fields
                    .iter()
                    .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v))),
            );
            Box::new(CelMap::from(map))
        }
    }
}

/// `value` as JSON; an error names what JSON cannot hold.
pub fn to_json(value: &Value) -> Result<Json, String> {
    Ok(match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::UInt(u) => Json::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or_else(|| format!("the double {f} has no JSON form"))?,
        Value::String(s) => Json::String(s.as_str().to_owned()),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Map(map) => {
            let mut fields = serde_json::Map::with_capacity(map.map.len());
            for (k, v) in map.map.iter() {
                let Key::String(name) = k else {
                    return Err(format!("a map key must be a string, not {k:?}"));
                };
                fields.insert(name.as_str().to_owned(), to_json(v)?);
            }
            Json::Object(fields)
        }
        Value::Opaque(o) => match o.downcast_ref::<CelQuantity>() {
            Some(q) => Json::String(q.0.canonical()),
            None => {
                return Err(format!(
                    "a value of type {} has no JSON form",
                    o.runtime_type_name()
                ));
            }
        },
        other => {
            return Err(format!(
                "a value of type {:?} has no JSON form",
                other.type_of()
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_goes_through_cel_and_back_unchanged() {
        let pod = json!({
            "metadata": {"name": "w-0", "labels": {"team": "vision"}, "generation": 3},
            "spec": {"containers": [{"name": "tf", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                     "priority": -1, "big": 18446744073709551615u64, "ratio": 0.5, "none": null},
        });
        assert_eq!(to_json(&to_cel(&pod)).unwrap(), pod);
    }

    #[test]
    fn what_json_cannot_hold_is_named() {
        let bytes = Value::Bytes(Arc::new(vec![1]));
        assert!(to_json(&bytes).unwrap_err().contains("Bytes"));
        assert!(
            to_json(&Value::Float(f64::NAN))
                .unwrap_err()
                .contains("NaN")
        );
        let keyed = Value::Map(Map {
            map: Arc::new(HashMap::from([(Key::Int(1), Value::Null)])),
        });
        assert!(to_json(&keyed).unwrap_err().contains("map key"));
    }
}
