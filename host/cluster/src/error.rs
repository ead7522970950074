//! API errors, rendered as Kubernetes `Status` objects so clients (kube-rs, kubectl) recognise
//! them: `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, `Gone`, ...

use serde_json::{Value, json};

/// A failed API request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
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
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}
