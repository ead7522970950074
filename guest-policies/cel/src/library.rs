//! What a CEL policy's expressions may use beyond the language: CEL's standard library with
//! its macros (`has`, `all`, `exists`, `exists_one`, `map`, `filter`) and optional fields
//! (`a.?b.orValue(c)`), the strings extension (`lowerAscii`, `split`, `join`, `format`, ...),
//! the lists extension (`distinct`, `flatten`, `reverse`, `slice`, `sort`, `sortBy`,
//! `lists.range`), the math extension (`math.greatest`, `math.least`, `math.ceil`, ...),
//! regular expressions (`matches`), Kubernetes' quantity and lists libraries
//! ([`crate::quantity`], [`crate::lists`]), Kyverno's resource library ([`crate::reads`]), and
//! the struct literals a mutation returns. Not offered: Kubernetes' `url`, `ip`/`cidr` and `authz`
//! libraries, and type checking before a call (a misspelt field is an error when the expression
//! runs, with the expression named).
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
use cel::objects::{Key, Map};
use cel::{Env, ExecutionError, Program, StructType, Value};

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
    env.add_extension(cel::extensions::lists)
        .expect("the lists extension declares no function of the strings extension");
    env.add_extension(cel::extensions::math)
        .expect("the math extension declares no function of the others");
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

#[cfg(test)]
mod tests {
    use super::*;
    use cel::{Context, ResolveResult};

    fn eval(expression: &str) -> ResolveResult {
        let program = parser_env().compile(expression).expect("compiles");
        let mut structs = BTreeSet::new();
        struct_names(&program, &mut structs);
        let env = env(&structs).unwrap();
        let program = env.compile(expression).unwrap();
        program.execute(&Context::with_env(env))
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
