//! CustomResourceDefinitions: the served resource type a CRD describes, and its status once
//! established. [`podgroups`] holds the PodGroup CRDs of the gang schedulers the simulated
//! kubelet can stand in for.

pub mod podgroups;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::storage::store::{Part, Patch, ResourceType, Store};

/// The resource type of the CRD's storage version (or first served version).
pub fn resource_type(crd: &Value) -> Option<ResourceType> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let versions = spec.get("versions")?.as_array()?;
    let version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .or_else(|| versions.iter().find(|v| v["served"] == true))?;
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let kind = text(&names["kind"])?;
    Some(ResourceType {
        group: text(&spec["group"])?,
        version: text(&version["name"])?,
        plural: text(&names["plural"])?,
        singular: text(&names["singular"]).unwrap_or_else(|| kind.to_ascii_lowercase()),
        short_names: names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        kind,
        namespaced: spec["scope"] != "Cluster",
        status: version.pointer("/subresources/status").is_some(),
        printer_columns: version["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        schema: version.pointer("/schema/openAPIV3Schema").cloned(),
    })
}

/// The status a CRD gets once its resources are served.
pub fn established_status(crd: &Value) -> Value {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": crd.pointer("/spec/versions/0/name").map(|v| json!([v])).unwrap_or(json!([])),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
        ]
    })
}

/// Stores a CRD (or updates it), serves its resources and marks it Established: what applying
/// a CRD does on a real cluster.
pub fn install(store: &Store, crd: Value) -> Result<Value, ApiError> {
    let crds = store
        .resource("apiextensions.k8s.io", "customresourcedefinitions")
        .expect("CRDs are a built-in type");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let stored = match store.create(&crds, None, crd.clone()) {
        Ok(o) => o,
        Err(e) if e.reason == "AlreadyExists" => store.patch(
            &crds,
            None,
            &name,
            Patch::Merge(json!({"spec": crd["spec"]})),
            Part::Whole,
        )?,
        Err(e) => return Err(e),
    };
    established(store, &stored)
}

/// Serves the resources of a stored CRD and sets its Established condition if missing.
pub fn established(store: &Store, crd: &Value) -> Result<Value, ApiError> {
    let rt =
        resource_type(crd).ok_or_else(|| ApiError::invalid("the CRD has no served version"))?;
    store.register(rt);
    let done = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established"));
    if done {
        return Ok(crd.clone());
    }
    let crds = store
        .resource("apiextensions.k8s.io", "customresourcedefinitions")
        .expect("CRDs are a built-in type");
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    store
        .patch(
            &crds,
            None,
            name,
            Patch::Merge(json!({"status": established_status(crd)})),
            Part::Status,
        )
        .map(Arc::unwrap_or_clone)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::cel::widget_crd;

    #[test]
    fn the_store_refuses_bad_crds_and_invalid_objects_with_status_causes() {
        let store = Store::new();
        let bad = install(&store, widget_crd(json!({"rule": "self >"}), false))
            .expect_err("a rule that does not compile refuses the CRD");
        assert_eq!(bad.code, 422);
        assert!(
            bad.message.starts_with("CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.validation"),
            "{}",
            bad.message
        );
        assert!(store.resource("example.com", "widgets").is_none());

        let rule = json!({"rule": "!has(self.replicas) || self.replicas < 3", "message": "at most 2", "fieldPath": ".replicas"});
        install(&store, widget_crd(rule, false)).expect("the CRD is served");
        let widgets = store.resource("example.com", "widgets").unwrap();
        let err = store
            .create(
                &widgets,
                Some("default"),
                json!({"metadata": {"name": "w"}, "spec": {"field": {"replicas": 3}}}),
            )
            .expect_err("refused at admission");
        assert_eq!(
            err.message,
            "Widget.example.com \"w\" is invalid: spec.field.replicas: Invalid value: at most 2"
        );
        let status = err.status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["details"],
            json!({"name": "w", "group": "example.com", "kind": "Widget", "causes": [
                {"reason": "FieldValueInvalid", "field": "spec.field.replicas", "message": "Invalid value: at most 2"}
            ]})
        );
        assert!(
            store.get(&widgets, Some("default"), "w").is_err(),
            "nothing stored"
        );

        store
            .create(
                &widgets,
                Some("default"),
                json!({"metadata": {"name": "w"}, "spec": {"field": {"replicas": 1}}}),
            )
            .expect("a valid object is stored");
        let patched = store.patch(
            &widgets,
            Some("default"),
            "w",
            Patch::Merge(json!({"spec": {"field": {"replicas": 7}}})),
            Part::Whole,
        );
        assert_eq!(patched.expect_err("patches are admitted too").code, 422);
    }
}
