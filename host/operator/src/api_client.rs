//! The operator's API client: every request names the operator in its `User-Agent`
//! (`tfjob-operator/<version>`), so audit logs, API priority and fairness, and the embedded
//! cluster's request counts tell its requests from anyone else's; every request passes the
//! client-side rate limit ([`crate::rate_limit`]), is counted by status code and method
//! ([`crate::api_metrics`]), each attempt of a retried one too (429, 503 and 504 are retried
//! with kube's policy, as client-go counts a retried request once per attempt) and, with traces on, is a span whose context goes with it
//! ([`crate::api_trace`]).

use http::HeaderValue;
use http::header::USER_AGENT as USER_AGENT_HEADER;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tfjob_controller::Leadership;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::util::MapRequestLayer;

use crate::api_metrics::ApiMetrics;
use crate::api_trace::ApiTraceLayer;
use crate::rate_limit::{ApiRate, RateLimitLayer};

/// The operator's `User-Agent`.
pub const USER_AGENT: &str = concat!("tfjob-operator/", env!("CARGO_PKG_VERSION"));

/// Requests that may wait for the retrying layer's buffer at once, as kube's own client buffers.
const RETRY_BUFFER: usize = 1024;

/// A client for `config`, named, held to `rate` (`None`: no limit) and counted in `metrics`.
pub fn build(
    mut config: Config,
    rate: Option<ApiRate>,
    metrics: &ApiMetrics,
) -> Result<Client, kube::Error> {
    // client-go's `host` label: the API server's host and port.
    let host = config
        .cluster_url
        .authority()
        .map_or_else(String::new, |a| a.as_str().to_owned());
    let measure = metrics.layer(&host);
    let limit = rate.map_or_else(RateLimitLayer::unlimited, RateLimitLayer::new);
    let name = MapRequestLayer::new(|mut request: http::Request<Body>| {
        request
            .headers_mut()
            .insert(USER_AGENT_HEADER, HeaderValue::from_static(USER_AGENT));
        request
    });
    // kube retries transient answers below every layer added here, where its attempts would go
    // uncounted: its policy is applied here instead, above the count and the rate limit, so
    // that each attempt is counted and waits its turn.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&measure)
        .with_layer(&name)
        .with_layer(&limit)
        // The retry sends copies of a request again, through a service it clones: kube's own
        // stack is not `Clone`, a buffer in front of it is (and costs a channel send).
        .with_layer(&BufferLayer::new(RETRY_BUFFER))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        // Outermost: the span covers the wait for the rate limit too.
        .with_layer(&ApiTraceLayer)
        .build())
}

/// `client` with every write (create, update, patch, delete) refused while `leadership` is
/// false: the last line of "a standby writes nothing". Reconciles and the policy sync already
/// skip writing on a standby; this also stops a reconcile that was in flight when leadership
/// was lost, at its next request. A refused request gets a 503 `Status` saying why, as if the
/// API server had answered it, so callers handle it like any failed request.
pub fn write_gated(client: Client, leadership: Leadership) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let client = client.clone();
        let leading = leadership.is_leading();
        async move {
            if !leading && is_write(request.method()) {
                return Ok(not_leader(&request));
            }
            client.send(request).await
        }
    });
    Client::new(service, namespace)
}

fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

fn not_leader(request: &http::Request<Body>) -> http::Response<Body> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "not sent: this tfjob-operator instance is not the leader ({} {})",
            request.method(),
            request.uri().path()
        ),
        "reason": "ServiceUnavailable",
        "code": 503,
    });
    http::Response::builder()
        .status(http::StatusCode::SERVICE_UNAVAILABLE)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(status.to_string().into_bytes()))
        .expect("a static response is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    /// A client whose every request is answered 200 with an empty list, counting requests.
    fn counting() -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&sent);
        let service = tower::service_fn(move |_: http::Request<Body>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
            async move {
                Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(
                    body.as_bytes().to_vec(),
                )))
            }
        });
        (Client::new(service, "default"), sent)
    }

    #[tokio::test]
    async fn a_standby_reads_but_sends_no_write() {
        let (inner, sent) = counting();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let client = write_gated(inner, Leadership::from_receiver(rx));
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        api.get("x").await.expect("reads pass");
        let cm: ConfigMap = serde_json::from_str(r#"{"metadata":{"name":"x"}}"#).unwrap();
        let err = api.create(&PostParams::default(), &cm).await.unwrap_err();
        match err {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 503);
                assert!(s.message.contains("not the leader"), "{}", s.message);
            }
            other => panic!("expected a Status, got {other:?}"),
        }
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Leading again: the write goes out.
        tx.send_replace(true);
        api.create(&PostParams::default(), &cm)
            .await
            .expect("leader writes");
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
