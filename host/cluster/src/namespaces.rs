//! What a real cluster keeps in place for every namespace, as far as clients count on it: the
//! system namespaces the API server makes (`default`, `kube-system`, `kube-public`,
//! `kube-node-lease`), and the service-account controller's `default` ServiceAccount in every
//! namespace, made when a namespace appears (those restored from a state file and made at
//! start too) and made again when it is deleted, but never in a namespace being deleted.
//! Clients such as the official Python client's end-to-end suite wait for it before creating
//! pods. When the server serves HTTPS, the root CA publisher's `kube-root-ca.crt` ConfigMap
//! too: the CA under `ca.crt` in every namespace, made again when deleted and put back when
//! edited, as pods read it to trust the API server.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use crate::storage::store::{Part, ResourceType, Store, WatchEvent};

/// The ServiceAccount every namespace gets.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The namespaces a real API server makes at start, and again when they are deleted.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The ConfigMap that publishes the API server's CA in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Starts the controller on the current Tokio runtime; `root_ca` is the CA (PEM) of a server
/// that serves HTTPS.
pub fn spawn(store: Arc<Store>, root_ca: Option<String>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(store, root_ca))
}

/// Keeps a `default` ServiceAccount (and, with `root_ca`, the CA's ConfigMap) in every
/// namespace, for as long as the store's changes can be watched.
pub async fn run(store: Arc<Store>, root_ca: Option<String>) {
    let mut rx = store.subscribe_all();
    loop {
        pass(&store);
        if let Some(ca) = &root_ca {
            publish_root_ca(&store, ca);
        }
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

/// Puts `kube-root-ca.crt` holding `ca` in each namespace that is not being deleted: made where
/// it is missing, its data put back where it differs. Returns the namespaces written to.
pub fn publish_root_ca(store: &Store, ca: &str) -> Vec<String> {
    let (Some(namespaces), Some(configmaps)) = (
        store.resource("", "namespaces"),
        store.resource("", "configmaps"),
    ) else {
        return Vec::new();
    };
    let data = json!({"ca.crt": ca});
    let (all, _) = store.list(&namespaces, None);
    let mut written = Vec::new();
    for ns in all.iter().filter(|ns| !terminating(ns)) {
        let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let result = match store.get(&configmaps, Some(name), ROOT_CA_CONFIGMAP) {
            Ok(current) if current.get("data") == Some(&data) => continue,
            Ok(current) => {
                let mut next = (*current).clone();
                next["data"] = data.clone();
                if let Some(m) = next.as_object_mut() {
                    m.remove("binaryData");
                }
                store.replace(&configmaps, Some(name), ROOT_CA_CONFIGMAP, next, Part::Whole)
            }
            Err(_) => store.create(
                &configmaps,
                Some(name),
                json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": ROOT_CA_CONFIGMAP,
                        "namespace": name,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
                        },
                    },
                    "data": data,
                }),
            ),
        };
        match result {
            Ok(_) => written.push(name.to_owned()),
            // Written meanwhile by a client, or the namespace went: the next pass sees which.
            Err(e) => tracing::debug!(namespace = name, error = %e, "kube-root-ca.crt not written"),
        }
    }
    written
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

/// Waits for a change of a namespace, a ServiceAccount or a ConfigMap; false once the store is
/// gone.
async fn wait_for_change(rx: &mut Receiver<WatchEvent>) -> bool {
    loop {
        match rx.recv().await {
            Ok(e)
                if e.resource == "/namespaces"
                    || e.resource == "/serviceaccounts"
                    || e.resource == "/configmaps" =>
            {
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

    #[test]
    fn every_namespace_gets_the_ca_in_kube_root_ca_crt_made_again_and_put_back() {
        let store = Store::new();
        let namespaces = store.resource("", "namespaces").unwrap();
        let configmaps = store.resource("", "configmaps").unwrap();
        store
            .create(&namespaces, None, json!({"metadata": {"name": "ml"}}))
            .unwrap();
        pass(&store);
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let written = publish_root_ca(&store, ca);
        assert!(written.contains(&"ml".to_owned()) && written.contains(&"default".to_owned()));
        let cm = store
            .get(&configmaps, Some("ml"), ROOT_CA_CONFIGMAP)
            .unwrap();
        assert_eq!(cm["data"]["ca.crt"], ca);
        assert!(publish_root_ca(&store, ca).is_empty(), "written once");

        let mut edited = (*cm).clone();
        edited["data"]["ca.crt"] = json!("forged");
        store
            .replace(
                &configmaps,
                Some("ml"),
                ROOT_CA_CONFIGMAP,
                edited,
                Part::Whole,
            )
            .unwrap();
        assert_eq!(publish_root_ca(&store, ca), ["ml"], "put back");
        store
            .delete(
                &configmaps,
                Some("ml"),
                ROOT_CA_CONFIGMAP,
                &Default::default(),
            )
            .unwrap();
        assert_eq!(publish_root_ca(&store, ca), ["ml"], "made again");
        let cm = store
            .get(&configmaps, Some("ml"), ROOT_CA_CONFIGMAP)
            .unwrap();
        assert_eq!(cm["data"]["ca.crt"], ca);
    }
}
