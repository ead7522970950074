//! Kubernetes' quantity library for CEL, as the API server offers it to admission policies:
//! `quantity('1.5Gi')`, `isQuantity(s)`, and on a quantity `isLessThan(q)`, `isGreaterThan(q)`,
//! `compareTo(q)` (-1, 0, 1), `add(q or int)`, `sub(q or int)`, `isInteger()`, `asInteger()`,
//! `asApproximateFloat()` and `sign()`. Quantities are exact (nano-units, as the API server
//! keeps them), so `quantity('1Gi') == quantity('1024Mi')`; arithmetic that overflows is an
//! error, never a wrapped value.

use std::sync::Arc;

use cel::extractors::This;
use cel::objects::Opaque;
use cel::{Context, ExecutionError, ResolveResult, Value};
use tfjob_policy_logic::quantity::{Format, Quantity};

/// A Kubernetes quantity as a CEL value.
#[derive(Debug, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Opaque for CelQuantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// The library's function names.
pub const NAMES: [&str; 11] = [
    "quantity",
    "isQuantity",
    "isLessThan",
    "isGreaterThan",
    "compareTo",
    "add",
    "sub",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "sign",
];

/// Adds the quantity library to `context`.
pub fn add_quantity_functions(context: &mut Context<'_, '_>) {
    // The names are this library's own: the standard library declares none of them.
    let declared = [
        context.add_function("quantity", |s: Arc<String>| -> ResolveResult {
            Quantity::parse(&s)
                .map(quantity_value)
                .map_err(|e| ExecutionError::function_error("quantity", e))
        }),
        context.add_function("isQuantity", |s: Arc<String>| Quantity::parse(&s).is_ok()),
        context.add_function(
            "isLessThan",
            |This(this): This<Value>, other: Value| -> ResolveResult {
                Ok(Value::Bool(
                    quantity_of("isLessThan", &this)? < quantity_of("isLessThan", &other)?,
                ))
            },
        ),
        context.add_function(
            "isGreaterThan",
            |This(this): This<Value>, other: Value| -> ResolveResult {
                Ok(Value::Bool(
                    quantity_of("isGreaterThan", &this)? > quantity_of("isGreaterThan", &other)?,
                ))
            },
        ),
        context.add_function(
            "compareTo",
            |This(this): This<Value>, other: Value| -> ResolveResult {
                let ordering =
                    quantity_of("compareTo", &this)?.cmp(&quantity_of("compareTo", &other)?);
                Ok(Value::Int(ordering as i64))
            },
        ),
        context.add_function(
            "add",
            |This(this): This<Value>, other: Value| -> ResolveResult {
                arithmetic("add", &this, &other, false)
            },
        ),
        context.add_function(
            "sub",
            |This(this): This<Value>, other: Value| -> ResolveResult {
                arithmetic("sub", &this, &other, true)
            },
        ),
        context.add_function("isInteger", |This(this): This<Value>| -> ResolveResult {
            Ok(Value::Bool(
                quantity_of("isInteger", &this)?.nanos() % NANOS_PER_UNIT == 0,
            ))
        }),
        context.add_function("asInteger", |This(this): This<Value>| -> ResolveResult {
            let nanos = quantity_of("asInteger", &this)?.nanos();
            if nanos % NANOS_PER_UNIT != 0 {
                return Err(ExecutionError::function_error(
                    "asInteger",
                    "the quantity is not a whole number (isInteger() is false)",
                ));
            }
            i64::try_from(nanos / NANOS_PER_UNIT)
                .map(Value::Int)
                .map_err(|_| ExecutionError::function_error("asInteger", "out of the range of int"))
        }),
        context.add_function(
            "asApproximateFloat",
            |This(this): This<Value>| -> ResolveResult {
                Ok(Value::Float(
                    quantity_of("asApproximateFloat", &this)?.nanos() as f64
                        / NANOS_PER_UNIT as f64,
                ))
            },
        ),
        context.add_function("sign", |This(this): This<Value>| -> ResolveResult {
            Ok(Value::Int(
                quantity_of("sign", &this)?.nanos().signum() as i64
            ))
        }),
    ];
    for result in declared {
        result.expect("the quantity library's names are free in the standard environment");
    }
}

/// Nano-units per unit, as [`Quantity::nanos`] counts them.
const NANOS_PER_UNIT: i128 = 1_000_000_000;

fn quantity_value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(CelQuantity(q)))
}

/// The quantity `value` holds; an error naming `function` for anything else.
fn quantity_of(function: &str, value: &Value) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<CelQuantity>()
            .map(|q| q.0)
            .ok_or_else(|| ExecutionError::function_error(function, "expects a quantity")),
        _ => Err(ExecutionError::function_error(
            function,
            format!("expects a quantity, got {:?}", value.type_of()),
        )),
    }
}

/// `this + other` or `this - other`, `other` a quantity or an int; an error on overflow.
fn arithmetic(function: &str, this: &Value, other: &Value, subtract: bool) -> ResolveResult {
    let this = quantity_of(function, this)?;
    let other = match other {
        Value::Int(units) => Quantity::from_units(*units, Format::DecimalSi),
        other => quantity_of(function, other)?,
    };
    let result = if subtract {
        this.checked_sub(other)
    } else {
        this.checked_add(other)
    };
    result
        .map(quantity_value)
        .ok_or_else(|| ExecutionError::function_error(function, "the result overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expression: &str) -> ResolveResult {
        let env = std::sync::Arc::new(cel::Env::stdlib());
        let program = env.compile(expression).expect("compiles");
        let mut context = Context::with_env(env);
        add_quantity_functions(&mut context);
        program.execute(&context)
    }

    #[test]
    fn quantities_compare_exactly_and_do_arithmetic() {
        for (expression, expected) in [
            ("quantity('1Gi') == quantity('1024Mi')", Value::Bool(true)),
            (
                "quantity('500m').isLessThan(quantity('1'))",
                Value::Bool(true),
            ),
            (
                "quantity('2').isGreaterThan(quantity('1500m'))",
                Value::Bool(true),
            ),
            ("quantity('1k').compareTo(quantity('1000'))", Value::Int(0)),
            ("quantity('1').compareTo(quantity('2'))", Value::Int(-1)),
            (
                "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')",
                Value::Bool(true),
            ),
            ("quantity('3').sub(1).asInteger()", Value::Int(2)),
            ("quantity('1500m').isInteger()", Value::Bool(false)),
            ("quantity('1500m').asApproximateFloat()", Value::Float(1.5)),
            ("quantity('-2').sign()", Value::Int(-1)),
            (
                "isQuantity('8Gi') && !isQuantity('eight')",
                Value::Bool(true),
            ),
        ] {
            assert_eq!(eval(expression), Ok(expected), "{expression}");
        }
    }

    #[test]
    fn quantity_errors_say_what_is_wrong() {
        for (expression, says) in [
            ("quantity('eight')", "eight"),
            ("quantity('1500m').asInteger()", "not a whole number"),
            ("quantity('1').isLessThan(2)", "expects a quantity"),
            (
                "quantity('8E').add(quantity('8E')).add(quantity('8E')).asInteger()",
                "range",
            ),
        ] {
            let err = eval(expression).unwrap_err().to_string();
            assert!(err.contains(says), "{expression}: {err}");
        }
    }
}
