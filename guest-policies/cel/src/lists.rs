//! Kubernetes' lists library for CEL, as far as it does not collide with the strings
//! extension: on a list, `sum()` (of ints, uints, doubles or durations; 0 for an empty list),
//! `min()` and `max()` (an error on an empty list), and `isSorted()`. Its `indexOf` and
//! `lastIndexOf` are the strings extension's here, on strings only. An integer sum that
//! overflows is an error, never a wrapped value.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, ExecutionError, ResolveResult, Value};

/// The library's function names.
pub const NAMES: [&str; 4] = ["sum", "min", "max", "isSorted"];

/// Adds the lists library to `context`.
pub fn add_list_functions(context: &mut Context<'_, '_>) {
    let declared = [
        context.add_function("sum", |This(list): This<Arc<Vec<Value>>>| sum(&list)),
        context.add_function("min", |This(list): This<Arc<Vec<Value>>>| {
            extreme("min", &list, Ordering::Less)
        }),
        context.add_function("max", |This(list): This<Arc<Vec<Value>>>| {
            extreme("max", &list, Ordering::Greater)
        }),
        context.add_function(
            "isSorted",
            |This(list): This<Arc<Vec<Value>>>| -> ResolveResult {
                for pair in list.windows(2) {
                    if compare("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
                        return Ok(Value::Bool(false));
                    }
                }
                Ok(Value::Bool(true))
            },
        ),
    ];
    for result in declared {
        result.expect("the lists library's names are free in the standard environment");
    }
}

fn sum(list: &[Value]) -> ResolveResult {
    let Some(first) = list.first() else {
        return Ok(Value::Int(0));
    };
    let overflow = || ExecutionError::function_error("sum", "integer overflow");
    let mut total = first.clone();
    for item in &list[1..] {
        total = match (&total, item) {
            (Value::Int(a), Value::Int(b)) => Value::Int(a.checked_add(*b).ok_or_else(overflow)?),
            (Value::UInt(a), Value::UInt(b)) => {
                Value::UInt(a.checked_add(*b).ok_or_else(overflow)?)
            }
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => {
                Value::Duration(a.checked_add(b).ok_or_else(overflow)?)
            }
            (a, b) if std::mem::discriminant(a) == std::mem::discriminant(b) => break,
            (a, b) => {
                return Err(ExecutionError::function_error(
                    "sum",
                    format!("cannot add {:?} and {:?}", a.type_of(), b.type_of()),
                ));
            }
        };
    }
    // Reached with a total of another type (one item, or the loop broken on two alike).
    match total {
        Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Duration(_) => Ok(total),
        other => Err(ExecutionError::function_error(
            "sum",
            format!("sums numbers and durations, not {:?}", other.type_of()),
        )),
    }
}

/// The item of `list` that every other compares `wanted` to or equal to.
fn extreme(name: &str, list: &[Value], wanted: Ordering) -> ResolveResult {
    let Some(mut best) = list.first() else {
        return Err(ExecutionError::function_error(name, "the list is empty"));
    };
    for item in &list[1..] {
        if compare(name, item, best)? == wanted {
            best = item;
        }
    }
    Ok(best.clone())
}

fn compare(name: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    if std::mem::discriminant(a) != std::mem::discriminant(b) {
        return Err(ExecutionError::function_error(
            name,
            format!("cannot compare {:?} and {:?}", a.type_of(), b.type_of()),
        ));
    }
    a.partial_cmp(b).ok_or_else(|| {
        ExecutionError::function_error(name, format!("cannot order {:?} and {:?}", a, b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expression: &str) -> ResolveResult {
        let env = crate::library::parser_env();
        let program = env.compile(expression).expect("compiles");
        let mut context = Context::with_env(env);
        add_list_functions(&mut context);
        program.execute(&context)
    }

    #[test]
    fn sums_minimums_maximums_and_order() {
        let cases = [
            ("[1, 2, 3].sum()", Value::Int(6)),
            ("[].sum()", Value::Int(0)),
            ("[1.5, 2.5].sum()", Value::Float(4.0)),
            ("[3, 1, 2].min()", Value::Int(1)),
            ("['b', 'c', 'a'].max()", Value::String(Arc::new("c".into()))),
            ("[1, 2, 2].isSorted()", Value::Bool(true)),
            ("[2, 1].isSorted()", Value::Bool(false)),
            (
                "[duration('1m'), duration('30s')].sum() == duration('90s')",
                Value::Bool(true),
            ),
        ];
        for (expression, expected) in cases {
            assert_eq!(eval(expression).unwrap(), expected, "{expression}");
        }
    }

    #[test]
    fn empty_mixed_and_overflowing_lists_are_errors_naming_the_function() {
        let cases = [
            ("[].max()", "max", "the list is empty"),
            ("[1, 'a'].min()", "min", "cannot compare"),
            ("[1, 2.0].sum()", "sum", "cannot add"),
            ("['a', 'b'].sum()", "sum", "sums numbers and durations"),
            ("[9223372036854775807, 1].sum()", "sum", "integer overflow"),
        ];
        for (expression, function, says) in cases {
            let message = eval(expression).unwrap_err().to_string();
            assert!(
                message.contains(function) && message.contains(says),
                "{expression}: {message}"
            );
        }
    }
}
