//! Optional persistence of the store to a JSON file, so a restarted embedded cluster keeps its
//! objects. Written atomically (temporary file, then rename) so a crash never leaves half a file.

use std::path::Path;

use serde_json::{Value, json};

use crate::storage::store::Store;

/// A persistence failure, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a saved cluster state: {message}")]
    Format { path: String, message: String },
}

/// Saves every object and the resourceVersion.
pub fn save(store: &Store, path: &Path) -> Result<(), PersistError> {
    let (rv, objects) = store.snapshot();
    let doc = json!({
        "resourceVersion": rv,
        "objects": objects.into_iter().map(|(t, o)| json!({"type": t, "object": o})).collect::<Vec<_>>(),
    });
    let io = |source| PersistError::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Restores a saved state into `store`. CRDs are restored first so their resources are served
/// again before their objects come back.
pub fn load(store: &Store, path: &Path) -> Result<(), PersistError> {
    let text = std::fs::read_to_string(path).map_err(|source| PersistError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let format = |message: String| PersistError::Format {
        path: path.display().to_string(),
        message,
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let rv = doc["resourceVersion"]
        .as_u64()
        .ok_or_else(|| format("resourceVersion missing".into()))?;
    let objects: Vec<(String, Value)> = doc["objects"]
        .as_array()
        .ok_or_else(|| format("objects missing".into()))?
        .iter()
        .map(|o| {
            (
                o["type"].as_str().unwrap_or_default().to_owned(),
                o["object"].clone(),
            )
        })
        .collect();
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|(t, _)| t == "apiextensions.k8s.io/customresourcedefinitions");
    for (_, crd) in &crds {
        if let Some(rt) = crate::storage::crd::resource_type(crd) {
            store.register(rt);
        }
    }
    store.restore(rv, crds.into_iter().chain(rest).collect());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_store_comes_back() {
        let dir = std::env::temp_dir().join(format!("tfjob-persist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        let store = Store::new();
        let cm = store.resource("", "configmaps").unwrap();
        let created = store
            .create(
                &cm,
                Some("ns"),
                json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            )
            .unwrap();
        save(&store, &path).unwrap();
        let restored = Store::new();
        load(&restored, &path).unwrap();
        assert_eq!(restored.get(&cm, Some("ns"), "a").unwrap(), created);
        assert!(restored.resource_version() >= store.resource_version());
        std::fs::write(&path, "[]").unwrap();
        assert!(matches!(
            load(&Store::new(), &path),
            Err(PersistError::Format { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
