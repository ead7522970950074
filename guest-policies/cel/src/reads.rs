//! Kyverno's resource library for cluster reads: `resource.Get(apiVersion, resource,
//! namespace, name)` answers one object (or null when there is none) and
//! `resource.List(apiVersion, resource, namespace[, labels])` answers `{items: [...]}`, the
//! objects whose labels match `labels` (a map of label to value, as Kyverno takes it, or a
//! selector in Kubernetes' text form such as `pool=gpu,zone in (a,b)`).
//!
//! The reads themselves are the operator's, through the contract's `cluster` import (the
//! guest's [`ClusterReader`]): only what the policy's manifest declares under `reads` is
//! granted, from the operator's caches, bounded per call. A read that fails fails the
//! expression, and the operator ends the call with the read's category.
//!
//! `apiVersion` must be the one the operator reads the resource at ([`api_version`]), so an
//! expression written for another version (`kueue.x-k8s.io/v1beta1`) is an error naming both
//! instead of an answer in a shape it did not expect. The same read made twice in one call is
//! answered once: an expression may call `resource.Get` inside a comprehension without
//! spending the call's reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cel::extractors::Arguments;
use cel::objects::{Key, Map};
use cel::{Context, ExecutionError, Value};
use serde_json::Value as Json;

use crate::convert::to_cel;

/// The cluster reads of one call.
pub trait ClusterReader: Send + Sync {
    /// The object `name` of `resource` (plural, as in `reads[].resource`) in `namespace`
    /// (empty for a cluster-scoped resource), or none; an error says why there is no answer.
    fn get(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Json>, String>;

    /// The objects of `resource` in `namespace` whose labels match `selector` (Kubernetes'
    /// text form; empty matches all).
    fn list(&self, resource: &str, namespace: &str, selector: &str) -> Result<Vec<Json>, String>;
}

/// The apiVersion the operator reads `resource` at; none for a resource policies do not read.
pub fn api_version(resource: &str) -> Option<&'static str> {
    Some(match resource {
        "namespaces" | "nodes" | "resourcequotas" | "limitranges" | "configmaps" => "v1",
        "priorityclasses" => "scheduling.k8s.io/v1",
        "localqueues" | "clusterqueues" | "resourceflavors" => "kueue.x-k8s.io/v1beta2",
        "tfjobs" => "kubeflow.org/v1",
        _ => return None,
    })
}

const GET: &str = "resource.Get";
const LIST: &str = "resource.List";

/// The names the parser gives the library's calls (`Get` on the target `resource`).
pub const NAMES: [&str; 2] = ["Get", "List"];

/// Registers `resource.Get` and `resource.List` on `context`, answered by `reader`.
pub fn add_resource_functions(context: &mut Context<'_, '_>, reader: Arc<dyn ClusterReader>) {
    let memo = Arc::new(Memo {
        reader,
        answers: Mutex::new(HashMap::new()),
    });
    let get = Arc::clone(&memo);
    let registered = context
        .add_function(GET, move |Arguments(args): Arguments| get.get(&args))
        .and_then(|()| {
            context.add_function(LIST, move |Arguments(args): Arguments| memo.list(&args))
        });
    registered.expect("the environment declares no resource.Get or resource.List");
}

/// A reader that answers each distinct read of a call once.
struct Memo {
    reader: Arc<dyn ClusterReader>,
    answers: Mutex<HashMap<Read, Value>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Read {
    Get(String, String, String),
    List(String, String, String),
}

impl Memo {
    fn get(&self, args: &[Value]) -> Result<Value, ExecutionError> {
        let [api, resource, namespace, name] = args else {
            return Err(usage(GET, args.len()));
        };
        let resource = checked_resource(GET, api, resource)?;
        let namespace = string(GET, "namespace", namespace)?;
        let name = string(GET, "name", name)?;
        let read = Read::Get(resource.clone(), namespace.clone(), name.clone());
        self.answer(read, || {
            let object = self.reader.get(&resource, &namespace, &name)?;
            Ok(object.as_ref().map_or(Value::Null, to_cel))
        })
    }

    fn list(&self, args: &[Value]) -> Result<Value, ExecutionError> {
        let (api, resource, namespace, labels) = match args {
            [a, r, n] => (a, r, n, None),
            [a, r, n, l] => (a, r, n, Some(l)),
            _ => return Err(usage(LIST, args.len())),
        };
        let resource = checked_resource(LIST, api, resource)?;
        let namespace = string(LIST, "namespace", namespace)?;
        let selector = labels.map(selector).transpose()?.unwrap_or_default();
        let read = Read::List(resource.clone(), namespace.clone(), selector.clone());
        self.answer(read, || {
            let items = self.reader.list(&resource, &namespace, &selector)?;
            let items = Value::List(Arc::new(items.iter().map(to_cel).collect()));
            let mut map = HashMap::with_capacity(1);
            map.insert(Key::String(Arc::new("items".into())), items);
            Ok(Value::Map(Map { map: Arc::new(map) }))
        })
    }

    /// The answer to `read`, asking the reader only the first time.
    fn answer(
        &self,
        read: Read,
        ask: impl FnOnce() -> Result<Value, String>,
    ) -> Result<Value, ExecutionError> {
        let name = match read {
            Read::Get(..) => GET,
            Read::List(..) => LIST,
        };
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = answers.get(&read) {
            return Ok(value.clone());
        }
        let value = ask().map_err(|message| ExecutionError::function_error(name, message))?;
        answers.insert(read, value.clone());
        Ok(value)
    }
}

fn usage(function: &str, given: usize) -> ExecutionError {
    let expected = if function == GET {
        "apiVersion, resource, namespace, name"
    } else {
        "apiVersion, resource, namespace[, labels]"
    };
    ExecutionError::function_error(
        function,
        format!("takes ({expected}), not {given} arguments"),
    )
}

fn string(function: &str, what: &str, value: &Value) -> Result<String, ExecutionError> {
    match value {
        Value::String(s) => Ok(s.as_str().to_owned()),
        other => Err(ExecutionError::function_error(
            function,
            format!("{what} must be a string, not {other:?}"),
        )),
    }
}

/// The resource named by `resource`, refused unless `api` is the version it is read at.
fn checked_resource(
    function: &str,
    api: &Value,
    resource: &Value,
) -> Result<String, ExecutionError> {
    let api = string(function, "apiVersion", api)?;
    let resource = string(function, "resource", resource)?;
    match api_version(&resource) {
        Some(served) if served == api => Ok(resource),
        Some(served) => Err(ExecutionError::function_error(
            function,
            format!("{resource} are read at apiVersion {served:?}, not {api:?}"),
        )),
        None => Err(ExecutionError::function_error(
            function,
            format!("{resource:?} is not a resource policies read"),
        )),
    }
}

/// A label selector's text: `labels` as written, or a map of label to value joined in key
/// order (`{"pool": "gpu"}` is `pool=gpu`).
fn selector(labels: &Value) -> Result<String, ExecutionError> {
    match labels {
        Value::String(s) => Ok(s.as_str().to_owned()),
        Value::Map(map) => {
            let mut pairs = Vec::with_capacity(map.map.len());
            for (key, value) in map.map.iter() {
                let (Key::String(key), Value::String(value)) = (key, value) else {
                    return Err(ExecutionError::function_error(
                        LIST,
                        "labels must map strings to strings",
                    ));
                };
                pairs.push(format!("{key}={value}"));
            }
            pairs.sort();
            Ok(pairs.join(","))
        }
        other => Err(ExecutionError::function_error(
            LIST,
            format!("labels must be a map or a selector string, not {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Nodes `n1` (pool gpu) and `n2` (pool cpu), counting the reads asked of it.
    #[derive(Default)]
    struct Nodes {
        asked: AtomicUsize,
    }

    impl ClusterReader for Nodes {
        fn get(&self, resource: &str, _: &str, name: &str) -> Result<Option<Json>, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            if resource != "nodes" {
                return Err(format!("{resource} are not declared"));
            }
            Ok(self
                .all()
                .into_iter()
                .find(|n| n["metadata"]["name"] == name))
        }

        fn list(&self, _: &str, _: &str, selector: &str) -> Result<Vec<Json>, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let all = self.all();
            Ok(match selector.strip_prefix("pool=") {
                Some(pool) => all
                    .into_iter()
                    .filter(|n| n["metadata"]["labels"]["pool"] == pool)
                    .collect(),
                None => all,
            })
        }
    }

    impl Nodes {
        fn all(&self) -> Vec<Json> {
            ["gpu", "cpu"]
                .iter()
                .enumerate()
                .map(|(i, pool)| {
                    serde_json::json!({"metadata": {"name": format!("n{}", i + 1), "labels": {"pool": pool}}})
                })
                .collect()
        }
    }

    fn eval(reader: &Arc<Nodes>, expression: &str) -> Result<Value, ExecutionError> {
        let env = crate::library::parser_env();
        let program = env.compile(expression).expect("compiles");
        let mut context = Context::with_env(env);
        add_resource_functions(&mut context, Arc::clone(reader) as Arc<dyn ClusterReader>);
        program.execute(&context)
    }

    #[test]
    fn get_and_list_answer_in_kyvernos_shape() {
        let nodes = Arc::new(Nodes::default());
        let get = "resource.Get('v1', 'nodes', '', 'n1').metadata.labels.pool";
        assert_eq!(
            eval(&nodes, get).unwrap(),
            Value::String(Arc::new("gpu".into()))
        );
        let missing = "resource.Get('v1', 'nodes', '', 'n9') == null";
        assert_eq!(eval(&nodes, missing).unwrap(), Value::Bool(true));
        let by_map =
            "resource.List('v1', 'nodes', '', {'pool': 'cpu'}).items.map(n, n.metadata.name)";
        let names = eval(&nodes, by_map).unwrap();
        assert_eq!(
            crate::convert::to_json(&names).unwrap(),
            serde_json::json!(["n2"])
        );
        let all = "resource.List('v1', 'nodes', '').items.size()";
        assert_eq!(eval(&nodes, all).unwrap(), Value::Int(2));
    }

    #[test]
    fn the_same_read_in_a_call_is_asked_once() {
        let nodes = Arc::new(Nodes::default());
        let repeated = "[1, 2, 3].all(i, resource.Get('v1', 'nodes', '', 'n1') != null)";
        assert_eq!(eval(&nodes, repeated).unwrap(), Value::Bool(true));
        assert_eq!(nodes.asked.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wrong_versions_arguments_and_read_errors_name_the_function() {
        let nodes = Arc::new(Nodes::default());
        let cases = [
            (
                "resource.List('kueue.x-k8s.io/v1beta1', 'clusterqueues', '')",
                "clusterqueues are read at apiVersion \"kueue.x-k8s.io/v1beta2\", not \"kueue.x-k8s.io/v1beta1\"",
            ),
            (
                "resource.Get('v1', 'secrets', 'ns', 'token')",
                "\"secrets\" is not a resource policies read",
            ),
            (
                "resource.Get('v1', 'nodes', '')",
                "takes (apiVersion, resource, namespace, name), not 3",
            ),
            (
                "resource.Get('v1', 'nodes', '', 7)",
                "name must be a string",
            ),
            (
                "resource.List('v1', 'nodes', '', {'pool': 1})",
                "labels must map strings to strings",
            ),
            (
                "resource.Get('v1', 'configmaps', 'ns', 'limits')",
                "configmaps are not declared",
            ),
        ];
        for (expression, expected) in cases {
            let message = eval(&nodes, expression).unwrap_err().to_string();
            assert!(message.contains(expected), "{expression}: {message}");
            assert!(message.contains("resource."), "{expression}: {message}");
        }
    }
}
