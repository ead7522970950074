//! Core `Event`s the simulated components (kubelet, Kueue) record about objects, as their real
//! counterparts do, so `kubectl describe` and `kubectl get events` show them.

use serde_json::{Value, json};

use crate::storage::store::Store;

/// What an Event says.
#[derive(Clone, Copy, Debug)]
pub struct Note<'a> {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Records an Event about `involved` (an object reference: apiVersion, kind, namespace, name,
/// uid) from `component`. Best effort: a store that serves no Events, or refuses this one,
/// loses it, as a real cluster may.
pub fn record(store: &Store, component: &str, involved: Value, note: Note<'_>) {
    let Some(events_t) = store.resource("", "events") else {
        return;
    };
    let now = jiff::Timestamp::now().to_string();
    let ns = involved["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_owned();
    let name = involved["name"].as_str().unwrap_or_default().to_owned();
    let event = json!({
        "metadata": {
            "name": format!("{name}.{}", uuid::Uuid::new_v4().simple()),
            "namespace": ns,
        },
        "involvedObject": involved,
        "reason": note.reason,
        "message": note.message,
        "type": if note.warning { "Warning" } else { "Normal" },
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(e) = store.create(&events_t, Some(&ns), event) {
        tracing::debug!(error = %e, "cannot record the event");
    }
}
