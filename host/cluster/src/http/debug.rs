//! The server's test hooks: the middleware that injects faults and counts requests in front of
//! every handler, and the `/debug/faults` and `/debug/requests` endpoints that read and change
//! them while the server runs (`kubectl get --raw /debug/faults`,
//! `curl -X PUT --data @faults.json http://.../debug/faults`).
//!
//! Doing both in one layer keeps the handlers unaware of tests: an injected error is answered
//! before the request reaches the store, and a counted request is counted with the status the
//! client actually saw, injected or not.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde_json::json;

use crate::error::ApiError;
use crate::faults::{FaultConfig, Faults};
use crate::http::requests::RequestStats;
use crate::http::requests::{self, Verb};
use crate::http::respond::{error_response, json_response};

/// Largest request body read before answering with an injected error.
const MAX_DRAINED_BODY: usize = 64 << 20;

/// What the test hooks read and change: the faults and the request counters.
pub(crate) struct Hooks {
    pub faults: Faults,
    pub stats: RequestStats,
}

/// The `/debug/faults` and `/debug/requests` routes, for any router's state.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(hooks: Arc<Hooks>) -> axum::Router<S> {
    axum::Router::new()
        .route(
            "/debug/faults",
            axum::routing::get(get_faults).put(put_faults),
        )
        .route("/debug/requests", axum::routing::get(get_requests))
        .with_state(hooks)
}

/// Injects the configured faults into resource requests and counts them.
pub(crate) async fn middleware(
    State(server): State<Arc<Hooks>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(info) = requests::classify(request.method(), request.uri()) else {
        return next.run(request).await;
    };
    let agent = requests::agent(request.headers());
    let faults = &server.faults;
    let decision = faults.decide(&info);
    if let Some(delay) = decision.delay {
        tokio::time::sleep(delay).await;
    }
    let response = match decision.error {
        Some(injected) => {
            // Read the body the client sent, so the connection stays usable for its next
            // request; what it asked for never happens.
            let _ = axum::body::to_bytes(request.into_body(), MAX_DRAINED_BODY).await;
            let mut response = json_response(injected.status.code(), &injected.body());
            if let Some(seconds) = injected.retry_after_seconds {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
        None => {
            let response = next.run(request).await;
            match decision.cut_watch_after {
                Some(after) if info.verb == Verb::Watch && response.status() == StatusCode::OK => {
                    cut_after(response, after, faults.clone())
                }
                _ => response,
            }
        }
    };
    server.stats.record(&info, &agent, response.status());
    response
}

/// Ends a watch response's body after `after`, between two events, as a real server does when
/// a watch times out: the client sees a clean end of the stream and watches again.
fn cut_after(response: Response, after: Duration, faults: Faults) -> Response {
    let (parts, body) = response.into_parts();
    let deadline = async move {
        tokio::time::sleep(after).await;
        faults.watch_cut();
    };
    let stream = body.into_data_stream().take_until(deadline);
    Response::from_parts(parts, Body::from_stream(stream))
}

/// `GET /debug/faults`: the configuration in force.
async fn get_faults(State(server): State<Arc<Hooks>>) -> Response {
    json_response(200, &json!(server.faults.get()))
}

/// `PUT /debug/faults`: replaces the configuration; `400` naming the field when it is not valid.
async fn put_faults(State(server): State<Arc<Hooks>>, body: Bytes) -> Response {
    let applied = FaultConfig::from_json(&body).and_then(|config| {
        server.faults.set(config.clone())?;
        Ok(config)
    });
    match applied {
        Ok(config) => {
            tracing::info!(faults = %json!(config), "fault configuration changed");
            json_response(200, &json!(config))
        }
        Err(e) => error_response(&ApiError::bad_request(format!(
            "invalid fault configuration: {e}"
        ))),
    }
}

/// `GET /debug/requests`: the request counters and the faults injected so far.
async fn get_requests(State(server): State<Arc<Hooks>>) -> Response {
    let snapshot = server.stats.snapshot();
    json_response(
        200,
        &json!({
            "requests": snapshot.requests,
            "agents": snapshot.agents,
            "faults": server.faults.counts(),
            "denied": server.stats.denied(),
            "denials": server.stats.denials(),
        }),
    )
}
