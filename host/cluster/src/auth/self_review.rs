//! The two reviews any authenticated user may ask about themselves, which `kubectl auth can-i`
//! and `kubectl auth whoami` send: a `SelfSubjectAccessReview` (may I do this?), answered by the
//! same authorizer that judges the user's requests, and a `SelfSubjectReview` (who am I?),
//! answered with the identity the server authenticated. Kubernetes grants both to every
//! authenticated user (the `system:basic-user` ClusterRole); they store nothing.
//!
//! What is asked is read from the review and checked here, naming the field that is wrong; the
//! answers are built here too. The access middleware, which knows the user, serves them.

use serde_json::{Value, json};

use crate::auth::rbac::{Attributes, Decision, ResourceAttributes, UserInfo};

/// Where `kubectl auth can-i` posts its review.
pub const ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
/// Where `kubectl auth whoami` posts its review.
pub const SELF_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A review that cannot be answered, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ReviewError {
    pub field: &'static str,
    pub reason: &'static str,
}

/// What a `SelfSubjectAccessReview` asks about.
pub fn access_review_attributes(review: &Value) -> Result<Attributes, ReviewError> {
    let spec = review.get("spec").ok_or(ReviewError {
        field: "spec",
        reason: "Required value",
    })?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    match (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    ) {
        (Some(_), Some(_)) => Err(ReviewError {
            field: "spec",
            reason: "Invalid value: resourceAttributes and nonResourceAttributes are mutually exclusive",
        }),
        (Some(r), None) => Ok(Attributes::Resource(ResourceAttributes {
            verb: text(r, "verb").unwrap_or_default(),
            group: text(r, "group").unwrap_or_default(),
            resource: text(r, "resource").unwrap_or_default(),
            subresource: text(r, "subresource").unwrap_or_default(),
            namespace: text(r, "namespace").unwrap_or_default(),
            name: text(r, "name").unwrap_or_default(),
        })),
        (None, Some(n)) => Ok(Attributes::NonResource {
            verb: text(n, "verb").unwrap_or_default(),
            path: text(n, "path").unwrap_or_default(),
        }),
        (None, None) => Err(ReviewError {
            field: "spec",
            reason: "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        }),
    }
}

/// The review answered: as asked, with `status` saying whether the authorizer allows it
/// (`None`: the server authorizes nothing, and allows everything).
pub fn access_review_answer(mut review: Value, decision: Option<&Decision>) -> Value {
    let status = match decision {
        None => json!({"allowed": true}),
        Some(Decision::Allow { by }) => {
            json!({"allowed": true, "reason": format!("RBAC: allowed by {by}")})
        }
        Some(Decision::Deny { reason }) if reason.is_empty() => json!({"allowed": false}),
        Some(Decision::Deny { reason }) => json!({"allowed": false, "reason": reason}),
    };
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = status;
    review
}

/// A `SelfSubjectReview` answered with `user`.
pub fn self_review_answer(user: &UserInfo) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_review_asks_what_its_attributes_say() {
        let review = json!({"spec": {"resourceAttributes": {
            "namespace": "ml", "verb": "create", "group": "kubeflow.org", "resource": "tfjobs",
            "subresource": "status"}}});
        let Attributes::Resource(r) = access_review_attributes(&review).unwrap() else {
            panic!("a resource review");
        };
        assert_eq!(
            (r.verb.as_str(), r.group.as_str(), r.resource.as_str()),
            ("create", "kubeflow.org", "tfjobs")
        );
        assert_eq!(
            (r.subresource.as_str(), r.namespace.as_str()),
            ("status", "ml")
        );
    }

    #[test]
    fn a_review_asking_nothing_or_both_is_refused_naming_spec() {
        for review in [
            json!({}),
            json!({"spec": {}}),
            json!({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {}}}),
        ] {
            let err = access_review_attributes(&review).unwrap_err();
            assert!(err.to_string().starts_with("spec: "), "{err}");
        }
        let path = json!({"spec": {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}});
        assert_eq!(
            access_review_attributes(&path).unwrap(),
            Attributes::NonResource {
                verb: "get".into(),
                path: "/metrics".into()
            }
        );
    }

    #[test]
    fn answers_say_allowed_and_why() {
        let asked = json!({"spec": {"nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        let allowed = access_review_answer(
            asked.clone(),
            Some(&Decision::Allow {
                by: "ClusterRoleBinding \"a\" of ClusterRole \"b\" to User \"u\"".into(),
            }),
        );
        assert_eq!(allowed["status"]["allowed"], true);
        assert!(
            allowed["status"]["reason"]
                .as_str()
                .unwrap()
                .starts_with("RBAC: allowed by")
        );
        assert_eq!(allowed["spec"], asked["spec"]);
        let denied = access_review_answer(
            asked.clone(),
            Some(&Decision::Deny {
                reason: String::new(),
            }),
        );
        assert_eq!(denied["status"], json!({"allowed": false}));
        assert_eq!(
            access_review_answer(asked, None)["status"],
            json!({"allowed": true})
        );
        let me = self_review_answer(&UserInfo::admin("admin"));
        assert_eq!(me["status"]["userInfo"]["username"], "admin");
        assert_eq!(me["status"]["userInfo"]["groups"][0], "system:masters");
    }
}
