//! Where two JSON documents differ, field by field, with both values.
//!
//! Shadow mode reports how a shadow policy would shape a pod differently from the enforced one,
//! and `policy diff` how a candidate policy would; both read better as `path: a -> b` than as
//! two whole pods. Keys that are not plain words (`tfjob.dev/team`) are written in brackets, so
//! a path reads unambiguously; lists of the same length are compared item by item, lists of
//! different lengths as one value.

use serde_json::Value;

/// One place where `a` and `b` differ; a missing field reads as `null`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldDifference {
    pub path: String,
    pub a: Value,
    pub b: Value,
}

/// The first `max` places where `a` and `b` differ, in key order.
pub fn differences(a: &Value, b: &Value, max: usize) -> Vec<FieldDifference> {
    let mut out = Vec::new();
    walk(a, b, String::new(), max, &mut out);
    out
}

fn walk(a: &Value, b: &Value, at: String, max: usize, out: &mut Vec<FieldDifference>) {
    if out.len() >= max || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let plain = !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                let path = match (at.is_empty(), plain) {
                    (true, true) => k.clone(),
                    (false, true) => format!("{at}.{k}"),
                    (_, false) => format!("{at}[{k:?}]"),
                };
                walk(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    path,
                    max,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                walk(u, v, format!("{at}[{i}]"), max, out);
            }
        }
        _ => out.push(FieldDifference {
            path: at,
            a: a.clone(),
            b: b.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_prefixed_keys_and_carry_both_values() {
        let a =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "a"}]}});
        let b = json!({
            "metadata": {"labels": {"app": "x", "tfjob.dev/shadow": "candidate"}},
            "spec": {"containers": [{"name": "b"}]}
        });
        let diffs = differences(&a, &b, 10);
        let seen: Vec<(&str, &Value, &Value)> = diffs
            .iter()
            .map(|d| (d.path.as_str(), &d.a, &d.b))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "metadata.labels[\"tfjob.dev/shadow\"]",
                    &Value::Null,
                    &json!("candidate")
                ),
                ("spec.containers[0].name", &json!("a"), &json!("b")),
            ]
        );
        assert_eq!(differences(&a, &b, 1).len(), 1, "bounded");
        assert!(differences(&a, &a, 10).is_empty());
        // Lists of different lengths are one difference.
        let diffs = differences(&json!({"l": [1]}), &json!({"l": [1, 2]}), 10);
        assert_eq!(diffs.len(), 1);
        assert_eq!(diffs[0].path, "l");
    }
}
