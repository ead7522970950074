//! API errors, rendered as Kubernetes `Status` objects so clients (kube-rs, kubectl) recognise
//! them: `NotFound`, `AlreadyExists`, `Conflict`, `Invalid` (with the failing fields as
//! `details.causes`), `BadRequest`, `Gone`, ...

use serde_json::{Value, json};

/// A failed API request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the `Status`: which object, and for `Invalid` which fields (boxed: most
    /// errors have none, and every `Result` of the server carries this type).
    pub details: Option<Box<StatusDetails>>,
}

/// The object a failed request was about and the causes, as in a `Status`'s `details`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusDetails {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub causes: Vec<StatusCause>,
}

/// One field that made an object invalid: `{reason: FieldValueInvalid, field: "spec.x",
/// message: "Invalid value: ..."}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCause {
    pub reason: String,
    pub field: String,
    /// The text after the field in the error: `Invalid value: must ...`, or `Invalid value: 5: must ...` for a scalar.
    pub message: String,
}

impl StatusCause {
    /// The cause as one line of an error message: `spec.x: Invalid value: ...`.
    pub fn line(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// `Invalid` with every failing field, worded as a real API server words it:
    /// `TFJob.kubeflow.org "mnist" is invalid: spec.x: Invalid value: ...`, several causes in
    /// brackets. `qualified_kind` is `Kind.group` (or `Kind` in the core group).
    pub fn invalid_fields(
        qualified_kind: &str,
        group: &str,
        kind: &str,
        name: &str,
        causes: Vec<StatusCause>,
    ) -> ApiError {
        let lines: Vec<String> = causes.iter().map(StatusCause::line).collect();
        let listed = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        ApiError {
            details: Some(Box::new(StatusDetails {
                name: name.to_owned(),
                group: group.to_owned(),
                kind: kind.to_owned(),
                causes,
            })),
            ..ApiError::invalid(format!("{qualified_kind} \"{name}\" is invalid: {listed}"))
        }
    }

    pub fn not_found(resource: &str, name: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
    }

    pub fn already_exists(resource: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(409, "Conflict", message)
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(422, "Invalid", message)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// The `Status` object a Kubernetes API server answers with.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            let causes: Vec<Value> = d
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            status["details"] =
                json!({"name": d.name, "group": d.group, "kind": d.kind, "causes": causes});
        }
        status
    }
}
