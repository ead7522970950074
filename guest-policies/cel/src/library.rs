//! What a CEL policy's expressions may use beyond the language: CEL's standard library with
//! its macros (`has`, `all`, `exists`, `exists_one`, `map`, `filter`) and optional fields
//! (`a.?b.orValue(c)`), the strings extension (`lowerAscii`, `split`, `join`, `format`, ...),
//! regular expressions (`matches`), Kubernetes' quantity library, and the struct literals a
//! mutation returns.
//!
//! Kubernetes' quantity library, as the API server offers it to admission policies:
//! `quantity('1.5Gi')`, `isQuantity(s)`, and on a quantity `isLessThan(q)`, `isGreaterThan(q)`,
//! `compareTo(q)` (-1, 0, 1), `add(q or int)`, `sub(q or int)`, `isInteger()`, `asInteger()`,
//! `asApproximateFloat()` and `sign()`. Quantities are exact (nano-units, as the API server
//! keeps them), so `quantity('1Gi') == quantity('1024Mi')`. Not offered: Kubernetes' `url`,
//! `ip`/`cidr` and `authz` libraries, and type checking before a call (a misspelt field is an
//! error when the expression runs, with the expression named).
//!
//! Struct literals: `Object{...}` and its nested `Object.spec{...}`,
//! `Object.spec.tolerations{...}`, ... (an `ApplyConfiguration`), and `JSONPatch{op, path,
//! value, from}`. They take any fields and become maps: the shape is checked where it is used
//! (a patch's fields, the pod the merge makes). Each document registers the struct names its
//! expressions construct ([`struct_names`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::Type;
use cel::common::value::{CowVal, Val};
use cel::extractors::This;
use cel::objects::{Key, Map, Opaque};
use cel::{Context, Env, ExecutionError, Program, ResolveResult, StructType, Value};
use tfjob_policy_logic::quantity::{Format, Quantity};

/// The CEL environment of a document whose expressions construct `structs`.
pub fn env(structs: &BTreeSet<String>) -> Result<Arc<Env>, String> {
    let mut env = base();
    for name in structs {
        env.add_type(Literal {
            ty: Type::new_struct(name.clone()),
        })
        .map_err(|e| format!("struct {name}: {e}"))?;
    }
    Ok(Arc::new(env))
}

/// The standard library and the strings extension, which every document's environment
/// starts from.
fn base() -> Env {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .expect("the strings extension declares no function twice");
    env
}

/// A parse-only environment: what compiles under it compiles under every document's.
pub fn parser_env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    Arc::clone(ENV.get_or_init(|| Arc::new(base())))
}

/// The names of the struct literals `program` constructs (`Object.spec`, `JSONPatch`).
pub fn struct_names(program: &Program, into: &mut BTreeSet<String>) {
    let mut stack: Vec<&IdedExpr> = vec![program.expression()];
    while let Some(node) = stack.pop() {
        match &node.expr {
            Expr::Call(call) => {
                stack.extend(call.target.as_deref());
                stack.extend(call.args.iter());
            }
            Expr::Comprehension(c) => {
                stack.extend([
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ]);
            }
            Expr::List(list) => stack.extend(list.elements.iter()),
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(e) = &entry.expr {
                        stack.extend([&e.key, &e.value]);
                    }
                }
            }
            Expr::Select(select) => stack.push(&select.operand),
            Expr::Struct(s) => {
                into.insert(s.type_name.clone());
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push(&f.value),
                        EntryExpr::MapEntry(e) => stack.extend([&e.key, &e.value]),
                    }
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
}

/// A struct literal's type: any fields, made into a map of them.
struct Literal {
    ty: Type,
}

impl StructType for Literal {
    fn get_type(&self) -> &Type {
        &self.ty
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut map = HashMap::with_capacity(fields.len());
        for (name, value) in fields {
            map.insert(
                Key::String(Arc::new(name)),
                Value::try_from(value.as_ref())?,
            );
        }
        let boxed: Box<dyn Val> = Value::Map(Map { map: Arc::new(map) }).try_into()?;
        Ok(boxed)
    }
}

/// A Kubernetes quantity as a CEL value.
#[derive(Debug, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Opaque for CelQuantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

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
        let program = parser_env().compile(expression).expect("compiles");
        let mut structs = BTreeSet::new();
        struct_names(&program, &mut structs);
        let env = env(&structs).unwrap();
        let program = env.compile(expression).unwrap();
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

    #[test]
    fn struct_literals_become_maps_of_their_fields() {
        let value = eval("Object{spec: Object.spec{nodeName: 'n1', priority: 2}}").unwrap();
        let json = crate::convert::to_json(&value).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"spec": {"nodeName": "n1", "priority": 2}})
        );
        let patch = eval("[JSONPatch{op: 'add', path: '/a', value: [1, 'x']}]").unwrap();
        assert_eq!(
            crate::convert::to_json(&patch).unwrap(),
            serde_json::json!([{"op": "add", "path": "/a", "value": [1, "x"]}])
        );
    }
}
