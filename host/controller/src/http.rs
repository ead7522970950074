//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz` and `/readyz` on the
//! metrics address, and the probes alone on the probe address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::progress::Progress;

/// What the endpoint serves.
#[derive(Clone)]
pub struct Endpoint {
    pub registry: Arc<Registry>,
    /// Set once the caches are filled and reconciles may run.
    pub ready: Arc<AtomicBool>,
    /// Reconciles in flight; `/healthz` fails while one has run longer than `stall_after`.
    pub progress: Arc<Progress>,
    pub stall_after: Duration,
}

/// The router of the metrics address, separate from serving so tests can call it directly.
/// It answers the probes too, so a deployment that probes the metrics port keeps working.
pub fn router(endpoint: Endpoint) -> Router {
    probes_router(endpoint.clone()).merge(
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(endpoint),
    )
}

/// The router of the probe address (`--health-probe-bind-address`): `/healthz` and `/readyz`.
pub fn probes_router(endpoint: Endpoint) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(endpoint)
}

/// Binds `addr`, so that an address in use stops the operator at start instead of leaving it
/// without probes.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding {addr}: {e}")))
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving HTTP");
    }
    axum::serve(listener, router)
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

async fn healthz(State(e): State<Endpoint>) -> impl IntoResponse {
    match e.progress.stalled(Instant::now(), e.stall_after) {
        None => (StatusCode::OK, "ok".to_owned()),
        Some(running) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "a reconcile has been running for {}s (the bound is {}s)",
                running.as_secs(),
                e.stall_after.as_secs()
            ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn endpoint() -> (Endpoint, crate::metrics::Metrics) {
        let mut registry = Registry::default();
        let metrics = crate::metrics::Metrics::register(&mut registry);
        (
            Endpoint {
                registry: Arc::new(registry),
                ready: Arc::new(AtomicBool::new(false)),
                progress: Arc::default(),
                stall_after: Duration::from_secs(60),
            },
            metrics,
        )
    }

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn health_readiness_and_metrics() {
        let (e, metrics) = endpoint();
        metrics.transition("ml", tfjob_planner::Transition::Succeeded);
        metrics.pod_group_created();
        assert_eq!(
            get(router(e.clone()), "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
        assert_eq!(
            get(router(e.clone()), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        e.ready.store(true, Ordering::Release);
        assert_eq!(get(router(e.clone()), "/readyz").await.0, StatusCode::OK);
        assert_eq!(
            get(probes_router(e.clone()), "/readyz").await.0,
            StatusCode::OK
        );
        assert_eq!(
            get(probes_router(e.clone()), "/metrics").await.0,
            StatusCode::NOT_FOUND
        );
        let (status, body) = get(router(e), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains(
                r#"training_operator_jobs_successful_total{job_namespace="ml",framework="tensorflow"} 1"#
            ),
            "{body}"
        );
        assert!(body.contains("\ncreated_pod_groups_total 1\n"), "{body}");
        assert!(body.contains("\ndeleted_pod_groups_total 0\n"), "{body}");
        assert!(body.ends_with("# EOF\n"));
    }

    #[tokio::test]
    async fn healthz_fails_while_a_reconcile_is_stalled() {
        let (e, _metrics) = endpoint();
        let long_ago = Instant::now() - Duration::from_secs(61);
        let stuck = e.progress.begin(long_ago);
        let (status, body) = get(router(e.clone()), "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("running for 61s"), "{body}");
        drop(stuck);
        assert_eq!(
            get(router(e), "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
    }
}
