//! Access control of the embedded API server: a middleware in front of every handler that
//! authenticates each request by its bearer token ([`crate::auth::tokens`]), applies its
//! impersonation headers ([`crate::auth::impersonation`]) and, when
//! [`Access::authorize`] is on, authorizes it by the RBAC objects in the store
//! ([`crate::auth::rbac`]) and applies the owner-reference permission rule to creates and updates
//! ([`crate::admission::owner_refs`]), as an API server started with `--authorization-mode=RBAC` and the
//! `OwnerReferencesPermissionEnforcement` admission plugin does.
//!
//! The request's attributes are derived as Kubernetes derives them: the verb from the method
//! and path ([`crate::http::requests::classify`]: a GET of a collection is a list, with
//! `?watch=true` a watch, a DELETE of one a deletecollection), the subresource from the path,
//! the name of a list or watch from a `metadata.name` field selector. Denials are answered
//! `403 Forbidden` with Kubernetes' message and counted in [`RequestStats`] with who was
//! denied what, so a test can assert that a client with a given RBAC never was.
//!
//! [`RequestStats`]: crate::http::requests::RequestStats

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use crate::admission::owner_refs;
use crate::auth::rbac::{Attributes, Decision, Policy, ResourceAttributes, UserInfo};
use crate::auth::self_review;
use crate::auth::tokens::{Tokens, Unauthenticated};
use crate::http::requests::{self, Denial, RequestStats};
use crate::http::respond::json_response;
use crate::storage::store::Store;

/// Largest body read to check its owner references (the largest the server takes).
const MAX_CHECKED_BODY: usize = 64 << 20;
/// Largest review read: one names a handful of short strings.
const MAX_REVIEW_BODY: usize = 64 << 10;

/// Who may use the server: the tokens it accepts and whether it authorizes by RBAC.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The admin token and the tokens issued so far.
    pub tokens: Tokens,
    /// Authorize every request of a user outside `system:masters` by the stored Roles,
    /// ClusterRoles and their bindings; off, every authenticated request is allowed.
    pub authorize: bool,
}

/// The attributes of a request, as the authorizer sees them.
pub fn attributes(method: &Method, uri: &Uri) -> Attributes {
    match requests::classify(method, uri) {
        Some(info) => {
            let (resource, subresource) = info
                .resource
                .split_once('/')
                .map_or((info.resource.as_str(), ""), |(r, s)| (r, s));
            Attributes::Resource(ResourceAttributes {
                verb: info.verb.as_str().to_owned(),
                group: info.group.clone(),
                resource: resource.to_owned(),
                subresource: subresource.to_owned(),
                namespace: info.namespace.clone().unwrap_or_default(),
                name: info.name.clone().unwrap_or_default(),
            })
        }
        None => Attributes::NonResource {
            verb: method.as_str().to_ascii_lowercase(),
            path: uri.path().to_owned(),
        },
    }
}

/// The RBAC objects that bear on a request in `namespace` (empty: the cluster scope).
fn policy(store: &Store, namespace: &str) -> Policy {
    let list = |plural: &str, ns: Option<&str>| {
        store
            .resource("rbac.authorization.k8s.io", plural)
            .map(|t| store.list(&t, ns).0)
            .unwrap_or_default()
    };
    let (roles, role_bindings) = if namespace.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        (
            list("roles", Some(namespace)),
            list("rolebindings", Some(namespace)),
        )
    };
    let (policy, errors) = Policy::from_objects(
        &list("clusterroles", None),
        &list("clusterrolebindings", None),
        &roles,
        &role_bindings,
    );
    for e in errors {
        tracing::warn!(error = %e, "an RBAC object grants nothing: it cannot be read");
    }
    policy
}

/// Whether `user` may do what `attributes` ask, by the objects in `store`.
pub fn authorize(store: &Store, user: &UserInfo, attributes: &Attributes) -> Decision {
    if user.in_group(crate::auth::rbac::MASTERS) {
        // No need to read the objects to know.
        return Policy::default().authorize(user, attributes);
    }
    let namespace = match attributes {
        Attributes::Resource(r) => r.namespace.as_str(),
        Attributes::NonResource { .. } => "",
    };
    policy(store, namespace).authorize(user, attributes)
}

/// A refused request: the `403` and its record.
struct Refusal {
    /// The check that failed.
    checked: Attributes,
    /// The whole message.
    message: String,
}

/// What the access middleware reads: the objects (roles, bindings, owners), the tokens and
/// the authorization switch, and where denials are recorded.
pub(crate) struct Gate {
    pub store: Arc<Store>,
    pub access: Access,
    pub stats: RequestStats,
}

/// Authenticates, authorizes and admits every request.
pub(crate) async fn middleware(
    State(server): State<Arc<Gate>>,
    request: Request,
    next: Next,
) -> Response {
    let access = &server.access;
    let user = match access.tokens.authenticate(request.headers()) {
        Ok(user) => user,
        Err(e) => {
            tracing::debug!(error = %e, path = %request.uri().path(), "unauthenticated request");
            drain(request).await;
            return json_response(401, &Unauthenticated::status());
        }
    };
    let user = match crate::auth::impersonation::requested(request.headers()) {
        Ok(None) => user,
        Ok(Some(acting)) => {
            let denied = (access.authorize && !user.in_group(crate::auth::rbac::MASTERS))
                .then(|| {
                    acting.checks.iter().find_map(|check| {
                        match authorize(&server.store, &user, check) {
                            Decision::Allow { .. } => None,
                            Decision::Deny { reason } => Some((check.clone(), reason)),
                        }
                    })
                })
                .flatten();
            if let Some((check, reason)) = denied {
                let refusal = Refusal {
                    message: crate::auth::rbac::denial(&user, &check, &reason),
                    checked: check.clone(),
                };
                return refuse(&server, request, &user, &check, refusal).await;
            }
            acting.user
        }
        Err(e) => {
            drain(request).await;
            return json_response(
                400,
                &crate::error::ApiError::bad_request(e.to_string()).status(),
            );
        }
    };
    if request.method() == Method::POST
        && matches!(
            request.uri().path(),
            self_review::ACCESS_REVIEW_PATH | self_review::SELF_REVIEW_PATH
        )
    {
        return review(&server, &user, request).await;
    }
    if !access.authorize || user.in_group(crate::auth::rbac::MASTERS) {
        return next.run(request).await;
    }
    let attributes = attributes(request.method(), request.uri());
    if let Decision::Deny { reason } = authorize(&server.store, &user, &attributes) {
        let message = crate::auth::rbac::denial(&user, &attributes, &reason);
        let refusal = Refusal {
            checked: attributes.clone(),
            message: message.clone(),
        };
        return refuse(&server, request, &user, &attributes, refusal).await;
    }
    let Attributes::Resource(r) = &attributes else {
        return next.run(request).await;
    };
    if !matches!(r.verb.as_str(), "create" | "update") || !r.subresource.is_empty() {
        return next.run(request).await;
    }
    // Creates and updates: the owner references the body sets.
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_CHECKED_BODY).await else {
        return json_response(
            413,
            &crate::error::ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("the body is larger than {MAX_CHECKED_BODY} bytes"),
            )
            .status(),
        );
    };
    let obj = body_object(&parts.headers, &bytes);
    let refused = obj
        .as_ref()
        .and_then(|obj| check_owner_refs(&server.store, &user, r, obj));
    let request = Request::from_parts(parts, Body::from(bytes));
    match refused {
        Some(refusal) => {
            // A create names its object in the body, and the answer names it too.
            let mut shown = r.clone();
            if shown.name.is_empty() {
                shown.name = obj
                    .as_ref()
                    .and_then(|o| o.pointer("/metadata/name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
            }
            refuse(
                &server,
                request,
                &user,
                &Attributes::Resource(shown),
                refusal,
            )
            .await
        }
        None => next.run(request).await,
    }
}

/// Answers a review the user asks about themselves (`kubectl auth can-i`, `kubectl auth
/// whoami`): `201` with the answer, `400` naming what is wrong with the review.
async fn review(server: &Gate, user: &UserInfo, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REVIEW_BODY).await else {
        return json_response(
            413,
            &crate::error::ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("a review is at most {MAX_REVIEW_BODY} bytes"),
            )
            .status(),
        );
    };
    let bad = |message: String| {
        json_response(400, &crate::error::ApiError::bad_request(message).status())
    };
    if path == self_review::SELF_REVIEW_PATH {
        return json_response(201, &self_review::self_review_answer(user));
    }
    let Some(asked) = body_object(&parts.headers, &bytes) else {
        return bad("the SelfSubjectAccessReview is not a JSON object".to_owned());
    };
    let attributes = match self_review::access_review_attributes(&asked) {
        Ok(attributes) => attributes,
        Err(e) => {
            return bad(format!(
                "SelfSubjectAccessReview.authorization.k8s.io is invalid: {e}"
            ));
        }
    };
    let decision = server
        .access
        .authorize
        .then(|| authorize(&server.store, user, &attributes));
    json_response(
        201,
        &self_review::access_review_answer(asked, decision.as_ref()),
    )
}

/// The object of a JSON or protobuf body; `None` when it is neither, which the handler then
/// refuses with a `400` of its own.
fn body_object(headers: &HeaderMap, body: &Bytes) -> Option<Value> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if crate::http::protobuf::is_protobuf(content_type) {
        crate::http::protobuf::decode(body).ok()
    } else {
        serde_json::from_slice(body).ok()
    }
}

/// The plugin's checks of a create or update of `obj`, the first failing one if any.
fn check_owner_refs(
    store: &Store,
    user: &UserInfo,
    request: &ResourceAttributes,
    obj: &Value,
) -> Option<Refusal> {
    let old = (request.verb == "update")
        .then(|| {
            let t = store.resource(&request.group, &request.resource)?;
            let ns = Some(request.namespace.as_str()).filter(|n| !n.is_empty());
            store.get(&t, ns, &request.name).ok()
        })
        .flatten();
    if !owner_refs::changes_owner_refs(obj, old.as_deref()) {
        return None;
    }
    if request.verb != "create" {
        // Creating an object shows the client could have left it alone; changing the owners
        // of an existing one needs the right to delete it.
        let delete = Attributes::Resource(ResourceAttributes {
            verb: "delete".into(),
            ..request.clone()
        });
        if let Decision::Deny { reason } = authorize(store, user, &delete) {
            return Some(Refusal {
                checked: delete,
                message: owner_refs::delete_message(&reason),
            });
        }
    }
    for blocking in owner_refs::new_blocking_refs(obj, old.as_deref()) {
        let types: Vec<_> = store
            .types()
            .into_iter()
            .filter(|t| t.api_version() == blocking.api_version && t.kind == blocking.kind)
            .collect();
        if types.is_empty() {
            return Some(Refusal {
                checked: Attributes::Resource(request.clone()),
                message: owner_refs::unmapped_message(&blocking),
            });
        }
        for t in types {
            // An owner is in its dependent's namespace, so the check is made there.
            let finalizers = Attributes::Resource(ResourceAttributes {
                verb: "update".into(),
                group: t.group.clone(),
                resource: t.plural.clone(),
                subresource: "finalizers".into(),
                namespace: request.namespace.clone(),
                name: blocking.name.clone(),
            });
            if let Decision::Deny { reason } = authorize(store, user, &finalizers) {
                let why = crate::auth::rbac::denial(user, &finalizers, &reason);
                return Some(Refusal {
                    checked: finalizers,
                    message: owner_refs::finalizers_message(&why),
                });
            }
        }
    }
    None
}

/// Answers `403 Forbidden` for `request` (whose attributes are `attributes`) and records it.
async fn refuse(
    server: &Gate,
    request: Request,
    user: &UserInfo,
    attributes: &Attributes,
    refusal: Refusal,
) -> Response {
    let agent = requests::agent(request.headers());
    drain(request).await;
    let status = crate::auth::rbac::forbidden_status(attributes, &refusal.message);
    let message = status["message"].as_str().unwrap_or_default().to_owned();
    tracing::debug!(user = %user.name, %message, "request denied");
    let (verb, group, resource, namespace) = match &refusal.checked {
        Attributes::Resource(r) => (
            r.verb.clone(),
            r.group.clone(),
            r.combined_resource(),
            r.namespace.clone(),
        ),
        Attributes::NonResource { verb, path } => {
            (verb.clone(), String::new(), path.clone(), String::new())
        }
    };
    server.stats.record_denial(Denial {
        user: user.name.clone(),
        agent,
        verb,
        group,
        resource,
        namespace,
        message,
    });
    json_response(403, &status)
}

/// Reads what the client sent, so that its connection stays usable for the next request.
async fn drain(request: Request) {
    let _ = axum::body::to_bytes(request.into_body(), MAX_CHECKED_BODY).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> Attributes {
        attributes(&method, &uri.parse().unwrap())
    }

    #[test]
    fn attributes_are_derived_as_kubernetes_derives_them() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods/p/log?follow=true",
                ["get", "", "pods", "log", "ns", "p"],
            ),
            (
                Method::PUT,
                "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j/status",
                ["update", "kubeflow.org", "tfjobs", "status", "ns", "j"],
            ),
            (
                Method::GET,
                "/apis/kubeflow.org/v1/tfjobs?watch=true&resourceVersion=5",
                ["watch", "kubeflow.org", "tfjobs", "", "", ""],
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods?labelSelector=a%3Db",
                ["deletecollection", "", "pods", "", "ns", ""],
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/tfjob-system/configmaps/c",
                ["patch", "", "configmaps", "", "tfjob-system", "c"],
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/serviceaccounts/sa/token",
                ["create", "", "serviceaccounts", "token", "ns", "sa"],
            ),
        ];
        for (method, uri, [verb, group, resource, sub, ns, name]) in cases {
            assert_eq!(
                attrs(method, uri),
                Attributes::Resource(ResourceAttributes {
                    verb: verb.into(),
                    group: group.into(),
                    resource: resource.into(),
                    subresource: sub.into(),
                    namespace: ns.into(),
                    name: name.into(),
                }),
                "{uri}"
            );
        }
        for (method, path) in [
            (Method::GET, "/apis/kubeflow.org/v1"),
            (Method::PUT, "/debug/faults"),
        ] {
            assert_eq!(
                attrs(method.clone(), path),
                Attributes::NonResource {
                    verb: method.as_str().to_ascii_lowercase(),
                    path: path.into()
                }
            );
        }
    }
}
