//! The operator's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// What the endpoint serves.
#[derive(Clone)]
pub struct Endpoint {
    pub registry: Arc<Registry>,
    /// Set once the caches are filled and reconciles may run.
    pub ready: Arc<AtomicBool>,
}

/// The router, separate from serving so tests can call it directly.
pub fn router(endpoint: Endpoint) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(endpoint)
}

/// Binds `addr` and serves until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    endpoint: Endpoint,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(endpoint))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(e): State<Endpoint>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &e.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "could not encode metrics".to_owned(),
        ),
    }
}

async fn readyz(State(e): State<Endpoint>) -> impl IntoResponse {
    if e.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}
