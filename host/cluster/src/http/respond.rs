//! The JSON answers every part of the HTTP front sends: an object with its status code, and an
//! [`ApiError`] as the `Status` object a Kubernetes API server answers with.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::ApiError;

/// `body` as JSON with status `code`.
pub(crate) fn json_response(code: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The error's `Status` object, with its code.
pub(crate) fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}
