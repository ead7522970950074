//! client-go's REST client metrics for the operator's API client, under the names and labels
//! controller-runtime serves: `rest_client_requests_total{code,method,host}` and
//! `rest_client_request_duration_seconds{verb,host}`.
//!
//! A tower layer on the client's HTTP stack counts every request whoever sends it (the
//! controller, its watches, the policy sync, events). The client is built before the operator's
//! metrics registry exists, so the counters live in an [`ApiMetrics`] handed to both: to
//! [`crate::api_client::build`] for counting, and through the operator's configuration to the
//! registry `/metrics` serves.
//!
//! As client-go, the time is taken from sending the request to receiving the response headers
//! (a watch is timed until its stream opens), and the wait for the client-side rate limit is
//! not part of it. Unlike client-go, a request that kube's client retries on its own is counted
//! once, with its last answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

/// client-go's request latency buckets (seconds).
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The `code` of a request that got no answer (connection refused, timeout), as client-go
/// writes it.
pub const NO_RESPONSE: &str = "<error>";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    verb: String,
    host: Arc<str>,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The counters of one client. Cheap to clone; every clone counts into the same series.
#[derive(Clone, Debug)]
pub struct ApiMetrics {
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl Default for ApiMetrics {
    fn default() -> ApiMetrics {
        ApiMetrics {
            requests: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
        }
    }
}

impl ApiMetrics {
    /// Registers the metrics in `registry` (again for each registry: a restarted operator in
    /// the embedded cluster keeps counting the same client).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            self.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, by verb and host",
            self.durations.clone(),
        );
    }

    /// The layer that counts the requests of a client of the API server at `host`
    /// (`host[:port]`, the `host` label).
    pub fn layer(&self, host: &str) -> ApiMetricsLayer {
        ApiMetricsLayer {
            metrics: self.clone(),
            host: Arc::from(host),
        }
    }

    fn record(&self, host: &Arc<str>, method: &http::Method, code: String, seconds: f64) {
        let method = method.as_str().to_owned();
        self.durations
            .get_or_create(&DurationLabels {
                verb: method.clone(),
                host: Arc::clone(host),
            })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels {
                code,
                method,
                host: Arc::clone(host),
            })
            .inc();
    }
}

/// client-go's `code` label: the status code, or [`NO_RESPONSE`].
pub fn code_label(status: Option<http::StatusCode>) -> String {
    status.map_or_else(|| NO_RESPONSE.to_owned(), |s| s.as_u16().to_string())
}

/// The layer; see [`ApiMetrics::layer`].
#[derive(Clone, Debug)]
pub struct ApiMetricsLayer {
    metrics: ApiMetrics,
    host: Arc<str>,
}

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = Measured<S>;

    fn layer(&self, inner: S) -> Measured<S> {
        Measured {
            inner,
            metrics: self.metrics.clone(),
            host: Arc::clone(&self.host),
        }
    }
}

/// A service that counts and times each request it passes on.
#[derive(Clone, Debug)]
pub struct Measured<S> {
    inner: S,
    metrics: ApiMetrics,
    host: Arc<str>,
}

impl<S, B, R> Service<http::Request<B>> for Measured<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.method().clone();
        let (metrics, host) = (self.metrics.clone(), Arc::clone(&self.host));
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let status = result.as_ref().ok().map(http::Response::status);
            metrics.record(
                &host,
                &method,
                code_label(status),
                started.elapsed().as_secs_f64(),
            );
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[test]
    fn the_code_is_the_status_or_error_without_a_response() {
        assert_eq!(code_label(Some(http::StatusCode::CREATED)), "201");
        assert_eq!(code_label(Some(http::StatusCode::NOT_FOUND)), "404");
        assert_eq!(code_label(None), "<error>");
    }

    #[tokio::test]
    async fn requests_are_counted_by_code_method_and_host_and_timed_by_verb() {
        let metrics = ApiMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        // Creates succeed, reads of a missing object are 404, a DELETE gets no answer at all.
        let server = tower::service_fn(|request: http::Request<()>| async move {
            match *request.method() {
                http::Method::POST => Ok(http::Response::builder().status(201).body(()).unwrap()),
                http::Method::GET => Ok(http::Response::builder().status(404).body(()).unwrap()),
                _ => Err("connection reset"),
            }
        });
        let mut client = metrics.layer("10.0.0.1:6443").layer(server);
        for method in ["POST", "POST", "GET", "DELETE"] {
            let request = http::Request::builder().method(method).body(()).unwrap();
            let _ = client.ready().await.unwrap().call(request).await;
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"rest_client_requests_total{code="201",method="POST",host="10.0.0.1:6443"} 2"#,
            r#"rest_client_requests_total{code="404",method="GET",host="10.0.0.1:6443"} 1"#,
            r#"rest_client_requests_total{code="<error>",method="DELETE",host="10.0.0.1:6443"} 1"#,
            r#"rest_client_request_duration_seconds_count{verb="POST",host="10.0.0.1:6443"} 2"#,
            r#"rest_client_request_duration_seconds_bucket{le="60.0",verb="GET",host="10.0.0.1:6443"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
