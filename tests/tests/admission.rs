//! Admission and validation agree: the TFJob CRD's CEL rules and schema bounds, evaluated as the
//! embedded API server evaluates them, refuse exactly the manifests the operator's validation
//! refuses, and admit every valid one (the real Kubeflow examples and the project's own).
//!
//! Corpora: `data/invalid/` (each manifest has one defect; its first two comment lines give the
//! admission cause and the operator's error), `data/invalid-planner-only/` (what CEL cannot see,
//! so the operator's `FailedValidation` remains), `data/kubeflow/` and `deploy/examples/`.
//! Updates are checked apart: the operator validates one state, never a change.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tfjob_api::parse::parse_tfjob_yaml;
use tfjob_api::validation::validate;
use tfjob_cluster::admission::cel::SchemaRules;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The `openAPIV3Schema` of the generated TFJob CRD.
fn tfjob_schema() -> Value {
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn admission(schema: &Value) -> SchemaRules {
    SchemaRules::compile(schema).expect("the TFJob CRD's rules compile")
}

/// `(file name, text)` of every `.yaml` file under `dir`, nested folders included, sorted.
fn manifests(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no manifests in {}", dir.display());
    out
}

/// Whether the manifest is a TFJob.
fn is_tfjob(text: &str) -> bool {
    serde_yaml_ng::from_str::<Value>(text).is_ok_and(|v| v["kind"] == "TFJob")
}

fn as_json(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("the manifest is YAML")
}

/// The causes admission gives, one line each.
fn admit(rules: &SchemaRules, object: &Value, old: Option<&Value>) -> Vec<String> {
    rules
        .validate(object, old)
        .iter()
        .map(|c| c.line())
        .collect()
}

/// The operator's verdict: parsing, then validation.
fn operator(text: &str) -> Result<(), String> {
    let job = parse_tfjob_yaml(text).map_err(|e| e.to_string())?;
    validate(&job).map(|_| ()).map_err(|e| e.to_string())
}

/// The text after `prefix` on the manifest's comment line that starts with it.
fn header<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line"))
        .trim()
}

#[test]
fn the_tfjob_crd_is_served_with_its_rules() {
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd()).unwrap();
    assert_eq!(tfjob_cluster::admission::cel::check_crd(&crd), Ok(()));
}

#[test]
fn every_valid_manifest_is_admitted_and_validates() {
    let rules = admission(&tfjob_schema());
    let mut seen = 0;
    for dir in ["tests/data/kubeflow", "deploy/examples"] {
        // `deploy/examples` also holds policies (`cel/`: ConfigMaps, their suites and pods).
        for (file, text) in manifests(&repo(dir))
            .into_iter()
            .filter(|(_, t)| is_tfjob(t))
        {
            assert_eq!(operator(&text), Ok(()), "{dir}/{file}");
            assert_eq!(
                admit(&rules, &as_json(&text), None),
                Vec::<String>::new(),
                "{dir}/{file}"
            );
            seen += 1;
        }
    }
    assert!(seen >= 10, "{seen} manifests");
}

#[test]
fn every_invalid_manifest_is_refused_by_admission_and_by_the_operator() {
    let rules = admission(&tfjob_schema());
    for (file, text) in manifests(&repo("tests/data/invalid")) {
        let causes = admit(&rules, &as_json(&text), None);
        let expected = header(&text, "# Refused at admission with:");
        assert!(
            causes.iter().any(|c| c.contains(expected)),
            "{file}: admission gave {causes:?}, expected {expected:?}"
        );
        let error = operator(&text).expect_err(&file);
        let expected = header(
            &text,
            "# FailedValidation (or a parse error) from the operator with:",
        );
        assert!(
            error.contains(expected),
            "{file}: the operator said {error:?}"
        );
    }
}

#[test]
fn what_cel_cannot_see_is_admitted_and_left_to_the_operator() {
    let rules = admission(&tfjob_schema());
    for (file, text) in manifests(&repo("tests/data/invalid-planner-only")) {
        assert_eq!(
            admit(&rules, &as_json(&text), None),
            Vec::<String>::new(),
            "{file}"
        );
        let error = operator(&text).expect_err(&file);
        let field = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .last()
            .unwrap()
            .trim_start_matches('#')
            .trim();
        assert!(error.contains(field), "{file}: {error}");
    }
}

/// The rules of `schema`, with the node path of each (`x-kubernetes-validations` pointers).
fn rule_pointers(schema: &Value, at: String, out: &mut Vec<String>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        out.extend((0..rules.len()).map(|i| format!("{at}/x-kubernetes-validations/{i}")));
    }
    for (key, child) in schema.as_object().into_iter().flatten() {
        match key.as_str() {
            "properties" => {
                for (name, c) in child.as_object().into_iter().flatten() {
                    rule_pointers(c, format!("{at}/properties/{name}"), out);
                }
            }
            "additionalProperties" | "items" => rule_pointers(child, format!("{at}/{key}"), out),
            _ => {}
        }
    }
}

/// The schema with every rule removed but the one at `keep`.
fn only_rule(schema: &Value, keep: &str, all: &[String]) -> Value {
    let kept = schema.pointer(keep).cloned().unwrap();
    let mut out = schema.clone();
    // Remove from the last index down so earlier pointers stay valid.
    for pointer in all.iter().rev() {
        let (list, index) = pointer.rsplit_once('/').unwrap();
        let index: usize = index.parse().unwrap();
        out.pointer_mut(list)
            .and_then(Value::as_array_mut)
            .unwrap()
            .remove(index);
    }
    let (list, _) = keep.rsplit_once('/').unwrap();
    out.pointer_mut(list)
        .and_then(Value::as_array_mut)
        .unwrap()
        .push(kept);
    out
}

/// Strips the schema's own bounds, leaving the CEL rules alone to judge.
fn without_bounds(schema: &mut Value) {
    if let Some(map) = schema.as_object_mut() {
        for key in [
            "required",
            "minimum",
            "maximum",
            "maxItems",
            "maxLength",
            "maxProperties",
            "enum",
        ] {
            map.remove(key);
        }
        for child in map.values_mut() {
            without_bounds(child);
        }
    }
}

#[test]
fn every_rule_refuses_some_manifest_of_the_corpus_or_some_update() {
    let mut schema = tfjob_schema();
    without_bounds(&mut schema);
    let mut pointers = Vec::new();
    rule_pointers(&schema, String::new(), &mut pointers);
    assert!(pointers.len() >= 13, "{pointers:?}");
    let corpus: Vec<Value> = manifests(&repo("tests/data/invalid"))
        .iter()
        .map(|(_, text)| as_json(text))
        .collect();
    let (old, updates) = updates();
    for pointer in &pointers {
        let rules = admission(&only_rule(&schema, pointer, &pointers));
        let refuses_a_manifest = corpus.iter().any(|m| !admit(&rules, m, None).is_empty());
        let refuses_an_update = updates
            .iter()
            .any(|(_, new)| !admit(&rules, new, Some(&old)).is_empty());
        assert!(
            refuses_a_manifest || refuses_an_update,
            "no test input breaks the rule {}",
            schema.pointer(pointer).unwrap()
        );
    }
}

fn job(run_policy: Value) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:1.0"}
            ]}}}},
        },
    })
}

/// A stored running job in a Volcano queue, and updates admission refuses, with the cause.
fn updates() -> (Value, Vec<(&'static str, Value)>) {
    let old = job(
        json!({"managedBy": "kubeflow.org/training-operator", "schedulingPolicy": {"queue": "gold"}}),
    );
    let updates = vec![
        (
            "spec.runPolicy.managedBy: Invalid value: field is immutable",
            job(
                json!({"managedBy": "kueue.x-k8s.io/multikueue", "schedulingPolicy": {"queue": "gold"}}),
            ),
        ),
        (
            "spec.runPolicy.managedBy: Invalid value: field is immutable",
            job(json!({"schedulingPolicy": {"queue": "gold"}})),
        ),
        (
            "spec.runPolicy.schedulingPolicy.queue: Invalid value: may only change while the job is suspended",
            job(
                json!({"managedBy": "kubeflow.org/training-operator", "schedulingPolicy": {"queue": "silver"}}),
            ),
        ),
    ];
    (old, updates)
}

#[test]
fn transition_rules_keep_managed_by_and_a_running_jobs_queue() {
    let rules = admission(&tfjob_schema());
    let (old, refused) = updates();
    assert_eq!(admit(&rules, &old, None), Vec::<String>::new());
    for (cause, new) in refused {
        assert_eq!(admit(&rules, &new, Some(&old)), [cause]);
        // Created like that, nothing is wrong.
        assert_eq!(admit(&rules, &new, None), Vec::<String>::new());
    }
    // Suspended, the job may move to another queue; other fields change freely.
    let suspended = job(
        json!({"managedBy": "kubeflow.org/training-operator", "suspend": true, "schedulingPolicy": {"queue": "silver"}}),
    );
    assert_eq!(admit(&rules, &suspended, Some(&old)), Vec::<String>::new());
    let mut scaled = old.clone();
    scaled["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = json!(4);
    assert_eq!(admit(&rules, &scaled, Some(&old)), Vec::<String>::new());
}
