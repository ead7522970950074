//! The JSON state file earlier versions of `up --state` wrote (every object and the
//! resourceVersion in one document), read once to import it into the durable store
//! ([`crate::storage::durable`]), and restoring a list of saved objects into a store.

use serde_json::Value;

use crate::storage::store::Store;

/// Reads a JSON state document: its resourceVersion and objects as `(group/plural, object)`.
pub fn parse(text: &str) -> Result<(u64, Vec<(String, Value)>), String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let rv = doc["resourceVersion"]
        .as_u64()
        .ok_or_else(|| "resourceVersion missing".to_owned())?;
    let objects = doc["objects"]
        .as_array()
        .ok_or_else(|| "objects missing".to_owned())?
        .iter()
        .map(|o| {
            let resource = o["type"]
                .as_str()
                .ok_or_else(|| "an object without its type".to_owned())?;
            Ok((resource.to_owned(), o["object"].clone()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((rv, objects))
}

/// Puts saved objects back into `store`, resuming at `rv`. CRDs come first, so their resources
/// are served again before their objects come back.
pub fn restore(store: &Store, rv: u64, objects: Vec<(String, Value)>) {
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|(t, _)| t == "apiextensions.k8s.io/customresourcedefinitions");
    for (_, crd) in &crds {
        if let Some(rt) = crate::storage::crd::resource_type(crd) {
            store.register(rt);
        }
    }
    store.restore(rv, crds.into_iter().chain(rest).collect());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_saved_state_comes_back_and_a_malformed_one_is_refused() {
        let store = Store::new();
        let cm = store.resource("", "configmaps").unwrap();
        let created = store
            .create(
                &cm,
                Some("ns"),
                json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            )
            .unwrap();
        let (rv, objects) = store.snapshot();
        let doc = json!({
            "resourceVersion": rv,
            "objects": objects.into_iter().map(|(t, o)| json!({"type": t, "object": o})).collect::<Vec<_>>(),
        });
        let (rv, objects) = parse(&doc.to_string()).unwrap();
        let restored = Store::new();
        restore(&restored, rv, objects);
        assert_eq!(restored.get(&cm, Some("ns"), "a").unwrap(), created);
        assert!(restored.resource_version() >= store.resource_version());
        assert_eq!(parse("[]").unwrap_err(), "resourceVersion missing");
        assert_eq!(
            parse(r#"{"resourceVersion": 3, "objects": [{"object": {}}]}"#).unwrap_err(),
            "an object without its type"
        );
    }
}
