//! What a real cluster keeps in place for every namespace, as far as clients count on it: the
//! system namespaces the API server makes (`default`, `kube-system`, `kube-public`,
//! `kube-node-lease`), and the service-account controller's `default` ServiceAccount in every
//! namespace, made when a namespace appears (those restored from a state file and made at
//! start too) and made again when it is deleted, but never in a namespace being deleted.
//! Clients such as the official Python client's end-to-end suite wait for it before creating
//! pods.
//!
//! Not made (yet): the `kube-root-ca.crt` ConfigMap, which publishes the CA of a server that
//! serves TLS; this one serves plain HTTP.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use crate::storage::store::{ResourceType, Store, WatchEvent};

/// The ServiceAccount every namespace gets.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The namespaces a real API server makes at start, and again when they are deleted.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Starts the controller on the current Tokio runtime.
pub fn spawn(store: Arc<Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store))
}

/// Keeps a `default` ServiceAccount in every namespace, for as long as the store's changes can
/// be watched.
pub async fn run(store: Arc<Store>) {
    let mut rx = match store.watch("", None, store.resource_version()) {
        Ok((_, rx)) => rx,
        Err(e) => {
            tracing::error!(error = %e, "the namespace controller cannot watch the store");
            return;
        }
    };
    loop {
        pass(&store);
        if !wait_for_change(&mut rx).await {
            return;
        }
    }
}

/// One pass: the system namespaces, then a `default` ServiceAccount in each namespace that
/// lacks one and is not being deleted. Returns the namespaces an account was made in.
pub fn pass(store: &Store) -> Vec<String> {
    let (Some(namespaces), Some(accounts)) = (
        store.resource("", "namespaces"),
        store.resource("", "serviceaccounts"),
    ) else {
        return Vec::new();
    };
    for name in SYSTEM_NAMESPACES {
        if store.get(&namespaces, None, name).is_err() {
            let namespace = json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
            });
            if let Err(e) = store.create(&namespaces, None, namespace) {
                tracing::debug!(namespace = name, error = %e, "system namespace not made");
            }
        }
    }
    let (all, _) = store.list(&namespaces, None);
    let mut made = Vec::new();
    for ns in all.iter().filter(|ns| !terminating(ns)) {
        let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        if store
            .get(&accounts, Some(name), DEFAULT_SERVICE_ACCOUNT)
            .is_ok()
        {
            continue;
        }
        match store.create(&accounts, Some(name), default_account(&accounts, name)) {
            Ok(_) => made.push(name.to_owned()),
            // Made meanwhile by a client, or the namespace went: the next pass sees which.
            Err(e) => {
                tracing::debug!(namespace = name, error = %e, "no default ServiceAccount made")
            }
        }
    }
    made
}

fn default_account(t: &ResourceType, namespace: &str) -> Value {
    json!({
        "apiVersion": t.api_version(),
        "kind": t.kind,
        "metadata": {"name": DEFAULT_SERVICE_ACCOUNT, "namespace": namespace},
    })
}

fn terminating(ns: &Value) -> bool {
    ns.pointer("/metadata/deletionTimestamp").is_some()
        || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}

/// Waits for a change of a namespace or a ServiceAccount; false once the store is gone.
async fn wait_for_change(rx: &mut Receiver<WatchEvent>) -> bool {
    loop {
        match rx.recv().await {
            Ok(e) if e.resource == "/namespaces" || e.resource == "/serviceaccounts" => {
                return true;
            }
            Ok(_) => {}
            // Missed changes: the next pass reads everything anew anyway.
            Err(RecvError::Lagged(_)) => return true,
            Err(RecvError::Closed) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_gets_a_default_service_account_once_and_again_when_deleted() {
        let store = Store::new();
        let namespaces = store.resource("", "namespaces").unwrap();
        let accounts = store.resource("", "serviceaccounts").unwrap();
        for name in ["ml", "going"] {
            store
                .create(&namespaces, None, json!({"metadata": {"name": name}}))
                .unwrap();
        }
        let made = pass(&store);
        assert!(made.contains(&"ml".to_owned()), "{made:?}");
        for system in SYSTEM_NAMESPACES {
            assert!(made.contains(&system.to_owned()), "{system}: {made:?}");
        }
        let sa = store.get(&accounts, Some("ml"), "default").unwrap();
        assert_eq!(sa["kind"], "ServiceAccount");
        assert_eq!(sa["apiVersion"], "v1");
        assert!(pass(&store).is_empty(), "made once");

        store
            .delete(&accounts, Some("ml"), "default", &Default::default())
            .unwrap();
        assert_eq!(pass(&store), vec!["ml".to_owned()], "made again");

        // A namespace being deleted gets none.
        let mut going = (*store.get(&namespaces, None, "going").unwrap()).clone();
        going["status"] = json!({"phase": "Terminating"});
        store
            .delete(&accounts, Some("going"), "default", &Default::default())
            .unwrap();
        store
            .replace_with(
                &namespaces,
                None,
                "going",
                going,
                crate::storage::store::Part::Status,
                crate::storage::store::Commit::Store,
            )
            .unwrap();
        assert!(!pass(&store).contains(&"going".to_owned()));
    }
}
