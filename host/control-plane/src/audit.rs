//! The API server's audit log, read back: which requests a set of users made and what the
//! server answered. The real RBAC authorizer's decisions show here (a refusal is a 403), so a
//! test can prove an account's permissions sufficient (nothing refused) and least (each grant
//! used) without asking the account's program what it did.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::Error;

/// An audit policy recording, at the `Metadata` level, the requests of `users` and nothing else.
/// `RequestReceived` is left out so that each request is one event (a watch's is the one at
/// `ResponseStarted`).
pub fn policy(users: &[String]) -> String {
    let rules = if users.is_empty() {
        serde_json::json!([{"level": "None"}])
    } else {
        serde_json::json!([{"level": "Metadata", "users": users}, {"level": "None"}])
    };
    serde_json::json!({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": rules,
    })
    .to_string()
}

/// One audited request to a resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub user: String,
    /// The authorizer's verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    /// The resource with its subresource if any: `pods`, `tfjobs/status`.
    pub resource: String,
    pub namespace: String,
    /// The status code answered; 0 where the event has none.
    pub code: u16,
}

impl Request {
    /// Whether the authorizer refused it.
    pub fn forbidden(&self) -> bool {
        self.code == 403
    }
}

/// The requests to resources in the audit log at `path` (non-resource requests such as
/// `/healthz` are left out). A log that does not exist yet has none.
pub fn read(path: &Path) -> Result<Vec<Request>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut requests = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: Value = serde_json::from_str(line).map_err(|e| Error::Audit {
            path: path.to_owned(),
            line: index + 1,
            reason: e.to_string(),
        })?;
        if let Some(request) = request(&event) {
            requests.push(request);
        }
    }
    Ok(requests)
}

/// `v[key]` as text; `""` where it is missing or not text.
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The request one audit event records, if it is one to a resource.
fn request(event: &Value) -> Option<Request> {
    let object = event.get("objectRef")?;
    let resource = text(object, "resource");
    if resource.is_empty() {
        return None;
    }
    let subresource = text(object, "subresource");
    Some(Request {
        user: text(event.get("user").unwrap_or(&Value::Null), "username").to_owned(),
        verb: text(event, "verb").to_owned(),
        group: text(object, "apiGroup").to_owned(),
        resource: if subresource.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}/{subresource}")
        },
        namespace: text(object, "namespace").to_owned(),
        code: event
            .pointer("/responseStatus/code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
    })
}

/// The (verb, group, resource) of `requests` that `user` made and was not refused.
pub fn allowed_for(requests: &[Request], user: &str) -> BTreeSet<(String, String, String)> {
    requests
        .iter()
        .filter(|r| r.user == user && !r.forbidden())
        .map(|r| (r.verb.clone(), r.group.clone(), r.resource.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_becomes_a_request_with_its_subresource_and_code() {
        let event = serde_json::json!({
            "kind": "Event", "stage": "ResponseComplete", "verb": "update",
            "user": {"username": "system:serviceaccount:ns:op"},
            "objectRef": {"resource": "tfjobs", "subresource": "status", "namespace": "ml",
                          "apiGroup": "kubeflow.org", "name": "a"},
            "responseStatus": {"code": 200},
        });
        assert_eq!(
            request(&event),
            Some(Request {
                user: "system:serviceaccount:ns:op".into(),
                verb: "update".into(),
                group: "kubeflow.org".into(),
                resource: "tfjobs/status".into(),
                namespace: "ml".into(),
                code: 200,
            })
        );
    }

    #[test]
    fn non_resource_requests_and_refusals_are_told_apart() {
        let health = serde_json::json!({"verb": "get", "requestURI": "/healthz",
                                        "user": {"username": "u"}});
        assert_eq!(request(&health), None);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(
            &log,
            concat!(
                r#"{"verb":"list","user":{"username":"u"},"objectRef":{"resource":"pods"},"responseStatus":{"code":403}}"#,
                "\n",
                r#"{"verb":"watch","user":{"username":"u"},"objectRef":{"resource":"pods"},"responseStatus":{"code":200}}"#,
                "\n",
            ),
        )
        .unwrap();
        let requests = read(&log).unwrap();
        assert!(requests[0].forbidden());
        assert_eq!(
            allowed_for(&requests, "u"),
            [("watch".to_owned(), String::new(), "pods".to_owned())].into()
        );
    }

    #[test]
    fn a_malformed_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(&log, "{}\nnot json\n").unwrap();
        let err = read(&log).unwrap_err().to_string();
        assert!(err.contains("audit.log") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn the_policy_records_only_the_named_users() {
        let alice: Value = serde_json::from_str(&policy(&["alice".into()])).unwrap();
        assert_eq!(alice["rules"][0]["users"][0], "alice");
        assert_eq!(alice["rules"][1]["level"], "None");
        let none: Value = serde_json::from_str(&policy(&[])).unwrap();
        assert_eq!(none["rules"].as_array().unwrap().len(), 1);
    }
}
