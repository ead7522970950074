//! Which permission checks Kubernetes' `OwnerReferencesPermissionEnforcement` admission plugin
//! asks for when a request sets owner references: a client that changes an object's owners
//! must be allowed to delete the object (creating it proves as much), and one that sets
//! `blockOwnerDeletion: true` on a reference must be allowed to update the owner's
//! `finalizers` subresource, since blocking the owner's deletion is as strong as adding a
//! finalizer to it. Many clusters (OpenShift among them) turn the plugin on, so an operator's
//! RBAC needs `update` on `<owner>/finalizers`; the embedded server enforces it when it
//! authorizes. Pure: [`crate::auth::access`] runs the checks.

use serde_json::Value;

/// An owner reference that blocks its owner's deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockingRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

fn owner_refs(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn blocks(r: &Value) -> bool {
    r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
}

fn text(r: &Value, key: &str) -> String {
    r.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Whether writing `new` over `old` (`None` for a create) changes the owner references.
pub fn changes_owner_refs(new: &Value, old: Option<&Value>) -> bool {
    match old {
        None => !owner_refs(new).is_empty(),
        Some(old) => owner_refs(new) != owner_refs(old),
    }
}

/// The references of `new` that block their owner's deletion and did not before (by uid).
pub fn new_blocking_refs(new: &Value, old: Option<&Value>) -> Vec<BlockingRef> {
    let old_refs = old.map_or(&[][..], owner_refs);
    owner_refs(new)
        .iter()
        .filter(|r| blocks(r))
        .filter(|r| {
            !old_refs
                .iter()
                .any(|o| text(o, "uid") == text(r, "uid") && blocks(o))
        })
        .map(|r| BlockingRef {
            api_version: text(r, "apiVersion"),
            kind: text(r, "kind"),
            name: text(r, "name"),
        })
        .collect()
}

/// The message of a denied blocking reference, as the plugin words it (the trailing `<nil>` is
/// the plugin's, which prints an empty error).
pub fn finalizers_message(reason: &str) -> String {
    format!(
        "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {reason}, <nil>"
    )
}

/// The message of a denied owner change on an object the client may not delete.
pub fn delete_message(reason: &str) -> String {
    format!("cannot set an ownerRef on a resource you can't delete: {reason}, <nil>")
}

/// The message of a blocking reference to a kind the server does not serve.
pub fn unmapped_message(r: &BlockingRef) -> String {
    format!(
        "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {} Kind {}: no matches for kind {:?} in version {:?}",
        r.api_version, r.kind, r.kind, r.api_version
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_refs(refs: Value) -> Value {
        json!({"metadata": {"name": "p", "ownerReferences": refs}})
    }

    fn owner(uid: &str, block: Option<bool>) -> Value {
        let mut r = json!({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j", "uid": uid, "controller": true});
        if let Some(b) = block {
            r["blockOwnerDeletion"] = json!(b);
        }
        r
    }

    #[test]
    fn a_create_with_a_blocking_reference_needs_the_owners_finalizers() {
        let pod = with_refs(json!([
            owner("1", Some(true)),
            owner("2", Some(false)),
            owner("3", None)
        ]));
        assert!(changes_owner_refs(&pod, None));
        assert_eq!(
            new_blocking_refs(&pod, None),
            vec![BlockingRef {
                api_version: "kubeflow.org/v1".into(),
                kind: "TFJob".into(),
                name: "j".into()
            }]
        );
        let plain = json!({"metadata": {"name": "p"}});
        assert!(!changes_owner_refs(&plain, None));
        assert_eq!(new_blocking_refs(&plain, None), vec![]);
    }

    #[test]
    fn an_update_is_checked_only_for_what_it_changes() {
        let before = with_refs(json!([owner("1", Some(true))]));
        // The same references: nothing to check (a PodGroup update keeps its owner).
        assert!(!changes_owner_refs(&before, Some(&before)));
        assert_eq!(new_blocking_refs(&before, Some(&before)), vec![]);
        // Turning blocking on, or adding a blocking owner, needs the finalizers.
        let unblocked = with_refs(json!([owner("1", Some(false))]));
        assert!(changes_owner_refs(&before, Some(&unblocked)));
        assert_eq!(new_blocking_refs(&before, Some(&unblocked)).len(), 1);
        let added = with_refs(json!([owner("1", Some(true)), owner("2", Some(true))]));
        assert_eq!(new_blocking_refs(&added, Some(&before)).len(), 1);
        // Dropping an owner changes the references but blocks nothing new.
        let dropped = with_refs(json!([]));
        assert!(changes_owner_refs(&dropped, Some(&before)));
        assert_eq!(new_blocking_refs(&dropped, Some(&before)), vec![]);
    }

    #[test]
    fn messages_are_the_plugins() {
        assert_eq!(
            finalizers_message(""),
            "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"
        );
        assert_eq!(
            delete_message(""),
            "cannot set an ownerRef on a resource you can't delete: , <nil>"
        );
    }
}
