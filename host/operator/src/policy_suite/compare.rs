//! Comparing a case's outcome with what it expects, and the differences as text; pure.

use serde_json::Value;

use super::{json_path::*, model::*};

/// One way a case's outcome differs from what it expects.
#[derive(Clone, Debug, PartialEq)]
pub enum Mismatch {
    /// A value differs (`None`: absent).
    Value {
        path: JsonPath,
        expected: Option<Value>,
        actual: Option<Value>,
    },
    /// A failure where a result was expected, a result where a failure was, or another failure.
    Outcome { expected: String, actual: String },
}

/// Every way `outcome` differs from `expect`; empty when the case passes.
///
/// Throughout, `null` and an absent field are the same (`paths: {spec.schedulerName: null}`
/// expects no scheduler name), and numbers compare by value (`1` equals `1.0`).
pub fn check(expect: &Expectation, outcome: &Outcome) -> Vec<Mismatch> {
    let mut out = Vec::new();
    match (&expect.failure, outcome) {
        (Some(wanted), Err(got)) => {
            let message_ok = wanted
                .message
                .as_ref()
                .is_none_or(|m| got.message.contains(m.as_str()));
            if wanted.category != got.category || !message_ok {
                out.push(Mismatch::Outcome {
                    expected: describe_expected_failure(wanted),
                    actual: format!("failure {}: {}", got.category, got.message),
                });
            }
        }
        (Some(wanted), Ok(result)) => out.push(Mismatch::Outcome {
            expected: describe_expected_failure(wanted),
            actual: format!("a result: {}", elided_json(result)),
        }),
        (None, Err(got)) => out.push(Mismatch::Outcome {
            expected: "a result".into(),
            actual: format!("failure {}: {}", got.category, got.message),
        }),
        (None, Ok(result)) => {
            let root = JsonPath::default();
            if let Some(whole) = &expect.result {
                diff_whole(&root, present(Some(whole)), present(Some(result)), &mut out);
            }
            if let Some(fields) = &expect.fields {
                diff_subset(&root, fields, Some(result), &mut out);
            }
            for (path, wanted) in &expect.paths {
                let got = present(path.get(result));
                let wanted = present(Some(wanted));
                if !same(wanted, got) {
                    out.push(Mismatch::Value {
                        path: path.clone(),
                        expected: wanted.cloned(),
                        actual: got.cloned(),
                    });
                }
            }
            if let Some(verdict) = &expect.verdict {
                diff_subset(&root, verdict, Some(result), &mut out);
            }
        }
    }
    out
}

pub(crate) fn describe_expected_failure(f: &FailureExpectation) -> String {
    match &f.message {
        Some(m) => format!("failure {} with a message containing {m:?}", f.category),
        None => format!("failure {}", f.category),
    }
}

/// `None` for an absent value or `null`.
pub(crate) fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// Equality with `null` as absent and numbers by value.
pub(crate) fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (present(a), present(b)) {
        (None, None) => true,
        (Some(Value::Number(x)), Some(Value::Number(y))) => match (x.as_i128(), y.as_i128()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| same(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(Some(a), Some(b)))
        }
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Exact comparison; objects key by key, arrays of equal length element by element (arrays of
/// different lengths are reported whole).
pub(crate) fn diff_whole(
    path: &JsonPath,
    expected: Option<&Value>,
    actual: Option<&Value>,
    out: &mut Vec<Mismatch>,
) {
    match (expected, actual) {
        (Some(Value::Object(e)), Some(Value::Object(a))) => {
            let mut keys: Vec<&String> = e.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff_whole(
                    &path.child(Segment::Key(k.clone())),
                    present(e.get(k)),
                    present(a.get(k)),
                    out,
                );
            }
        }
        (Some(Value::Array(e)), Some(Value::Array(a))) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                diff_whole(
                    &path.child(Segment::Index(i)),
                    present(Some(e)),
                    present(Some(a)),
                    out,
                );
            }
        }
        (e, a) if same(e, a) => {}
        (e, a) => out.push(Mismatch::Value {
            path: path.clone(),
            expected: e.cloned(),
            actual: a.cloned(),
        }),
    }
}

/// Subset comparison: every field `expected` gives must be in `actual` with a matching value;
/// other fields of `actual` are not looked at. Arrays must have the same length, and their
/// elements match as subsets.
pub(crate) fn diff_subset(
    path: &JsonPath,
    expected: &Value,
    actual: Option<&Value>,
    out: &mut Vec<Mismatch>,
) {
    let actual = present(actual);
    match (expected, actual) {
        (Value::Null, None) => {}
        (Value::Object(e), Some(Value::Object(a))) => {
            for (k, v) in e {
                diff_subset(&path.child(Segment::Key(k.clone())), v, a.get(k), out);
            }
        }
        (Value::Array(e), Some(Value::Array(a))) if e.len() == a.len() => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                diff_subset(&path.child(Segment::Index(i)), e, Some(a), out);
            }
        }
        (e, a) if same(Some(e), a) => {}
        (e, a) => out.push(Mismatch::Value {
            path: path.clone(),
            expected: present(Some(e)).cloned(),
            actual: a.cloned(),
        }),
    }
}

/// The longest value printed in a difference, in characters.
pub(crate) const MAX_SHOWN: usize = 300;
/// The most differences printed per case.
pub(crate) const MAX_MISMATCHES_SHOWN: usize = 50;

pub(crate) fn elided_json(v: &Value) -> String {
    tfjob_policy_logic::text::elided(&v.to_string(), MAX_SHOWN)
}

pub(crate) fn shown(v: &Option<Value>) -> String {
    v.as_ref()
        .map_or_else(|| "(absent)".to_owned(), elided_json)
}

/// A case's differences as `-` (expected) and `+` (actual) lines.
pub fn diff_text(mismatches: &[Mismatch]) -> String {
    let mut out = String::new();
    for m in mismatches.iter().take(MAX_MISMATCHES_SHOWN) {
        match m {
            Mismatch::Value {
                path,
                expected,
                actual,
            } => {
                out.push_str(&format!("- {path}: {}\n", shown(expected)));
                out.push_str(&format!("+ {path}: {}\n", shown(actual)));
            }
            Mismatch::Outcome { expected, actual } => {
                out.push_str(&format!(
                    "- {}\n",
                    tfjob_policy_logic::text::elided(expected, MAX_SHOWN * 4)
                ));
                out.push_str(&format!(
                    "+ {}\n",
                    tfjob_policy_logic::text::elided(actual, MAX_SHOWN * 4)
                ));
            }
        }
    }
    if mismatches.len() > MAX_MISMATCHES_SHOWN {
        out.push_str(&format!(
            "  ... and {} more differences\n",
            mismatches.len() - MAX_MISMATCHES_SHOWN
        ));
    }
    out
}
