//! Trace spans of API requests, on both sides of the wire.
//!
//! The operator's client gives each request it sends a span named after what the request does
//! (`create pods`, `update tfjobs/status`, `watch pods`), with its method, path and status, and
//! sends that span's W3C trace context in a `traceparent` header. An API server that traces
//! (the embedded cluster of `up`, or a kube-apiserver with its tracing on) makes its own span
//! of the request a child of the client's, so one trace shows both sides. kube-client's own
//! per-request span is not used: it is created inside kube's stack, where no layer of ours can
//! reach it to send its context, and it names the request only by its URL.
//!
//! [`RequestKind`] is the pure part: the Kubernetes verb and resource of a method and path.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, Method, Uri};
use opentelemetry::propagation::{Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tower::{Layer, Service};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// What a request does, in Kubernetes' words: its verb (`get`, `list`, `watch`, `create`,
/// `update`, `patch`, `delete`, `deletecollection`) and the resource it addresses, with its
/// subresource (`pods`, `tfjobs/status`); for paths that are not resources (`/version`), the
/// method's name and no resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestKind {
    pub verb: &'static str,
    pub resource: String,
}

impl RequestKind {
    /// The kind of a request with `method` for `uri` (a path, or a whole URL).
    pub fn of(method: &Method, uri: &Uri) -> RequestKind {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        // `/api/v1/...` or `/apis/<group>/<version>/...`.
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] => rest,
            ["apis", _group, _version, rest @ ..] => rest,
            _ => &[][..],
        };
        // `namespaces/<ns>/<resource>...`, except a namespace itself: `namespaces/<name>`.
        let rest = match rest {
            ["namespaces", _namespace, rest @ ..] if !rest.is_empty() => rest,
            _ => rest,
        };
        let (resource, named) = match rest {
            [] => (String::new(), false),
            [resource] => ((*resource).to_owned(), false),
            [resource, _name] => ((*resource).to_owned(), true),
            [resource, _name, subresource, ..] => (format!("{resource}/{subresource}"), true),
        };
        let watching = uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        if resource.is_empty() {
            // A non-resource URL: its verb is the method, as Kubernetes' authorizer has it.
            let verb = match *method {
                Method::GET => "get",
                Method::POST => "post",
                Method::PUT => "put",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                Method::HEAD => "head",
                _ => "other",
            };
            return RequestKind { verb, resource };
        }
        let verb = match *method {
            Method::GET if named => "get",
            Method::GET if watching => "watch",
            Method::GET => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if named => "delete",
            Method::DELETE => "deletecollection",
            Method::HEAD => "head",
            _ => "other",
        };
        RequestKind { verb, resource }
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.resource.is_empty() {
            f.write_str(self.verb)
        } else {
            write!(f, "{} {}", self.verb, self.resource)
        }
    }
}

/// The span of a request the operator sends, or `None` when traces are off: the request's
/// kind is then not even read from its path, as every request of the operator passes here.
fn client_span(method: &Method, uri: &Uri) -> Option<tracing::Span> {
    if !tracing::enabled!(target: tfjob_planner::SPAN_TARGET, tracing::Level::DEBUG) {
        return None;
    }
    let kind = RequestKind::of(method, uri);
    let span = tracing::span!(
        target: tfjob_planner::SPAN_TARGET,
        tracing::Level::DEBUG,
        "api request",
        otel.name = %kind,
        otel.kind = "client",
        k8s.verb = kind.verb,
        k8s.resource = kind.resource.as_str(),
        http.method = %method,
        http.url = %uri,
        http.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    (!span.is_disabled()).then_some(span)
}

/// The span of a request the embedded API server serves, a child of the client's span named by
/// the request's `traceparent` header; `None` for a request that carries no valid trace context
/// (kubectl, the Python client): each of those would otherwise be a trace of one span.
pub fn server_span(headers: &HeaderMap, method: &Method, uri: &Uri) -> Option<tracing::Span> {
    // Read as strictly as a job's annotation: a client's header is anybody's input.
    let value = headers.get("traceparent")?.to_str().ok()?;
    let parent = opentelemetry::Context::new()
        .with_remote_span_context(tfjob_controller::trace_context::parse_traceparent(value)?);
    let kind = RequestKind::of(method, uri);
    let span = tracing::span!(
        target: tfjob_planner::SPAN_TARGET,
        tracing::Level::DEBUG,
        "api server",
        otel.name = %format_args!("serve {kind}"),
        otel.kind = "server",
        k8s.verb = kind.verb,
        k8s.resource = kind.resource.as_str(),
        http.method = %method,
        http.url = %uri,
        http.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    // Fails only when the span is disabled (traces off), and then there is nothing to link.
    let _ = span.set_parent(parent);
    Some(span)
}

/// Records a response's status in a request's span, an error status as the span's.
pub fn record_status(span: &tracing::Span, status: Option<http::StatusCode>) {
    match status {
        Some(status) => {
            span.record("http.status_code", status.as_u16());
            if status.is_client_error() || status.is_server_error() {
                span.record("otel.status_code", "ERROR");
            }
        }
        None => {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The embedded API server's tracing: a span for each request that carries a trace context
/// ([`server_span`]), its status recorded when answered.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerTracing;

impl tfjob_cluster::http::server::RequestTracing for ServerTracing {
    fn span(&self, headers: &HeaderMap, method: &Method, uri: &Uri) -> Option<tracing::Span> {
        server_span(headers, method, uri)
    }

    fn answered(&self, span: &tracing::Span, status: http::StatusCode) {
        record_status(span, Some(status));
    }
}

/// `headers` as the propagator writes them.
struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The layer giving each request the operator sends its span and `traceparent` header.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApiTraceLayer;

impl<S> Layer<S> for ApiTraceLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Traced<S> {
        Traced { inner }
    }
}

/// A service that sends each request within its own span; see [`ApiTraceLayer`].
#[derive(Clone, Debug)]
pub struct Traced<S> {
    inner: S,
}

impl<S, B, R> Service<http::Request<B>> for Traced<S>
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

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let Some(span) = client_span(request.method(), request.uri()) else {
            return Box::pin(self.inner.call(request));
        };
        TraceContextPropagator::new()
            .inject_context(&span.context(), &mut HeadersMut(request.headers_mut()));
        let response = span.in_scope(|| self.inner.call(request));
        let recorded = span.clone();
        Box::pin(
            async move {
                let result = response.await;
                record_status(&recorded, result.as_ref().ok().map(http::Response::status));
                result
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: Method, uri: &str) -> (String, String) {
        let k = RequestKind::of(&method, &uri.parse().unwrap());
        (k.verb.to_owned(), k.to_string())
    }

    #[test]
    fn verbs_and_resources_are_read_from_the_method_and_path() {
        let cases = [
            (Method::POST, "/api/v1/namespaces/ml/pods", "create pods"),
            (Method::GET, "/api/v1/namespaces/ml/pods/w-0", "get pods"),
            (
                Method::GET,
                "/api/v1/namespaces/ml/pods?labelSelector=a%3Db",
                "list pods",
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=5",
                "watch pods",
            ),
            (
                Method::PUT,
                "/apis/kubeflow.org/v1/namespaces/ml/tfjobs/mnist/status",
                "update tfjobs/status",
            ),
            (
                Method::PATCH,
                "/apis/events.k8s.io/v1/namespaces/ml/events/e.1",
                "patch events",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ml/pods/w-0",
                "delete pods",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ml/pods",
                "deletecollection pods",
            ),
            // A namespace itself, and cluster-scoped objects.
            (Method::GET, "/api/v1/namespaces/ml", "get namespaces"),
            (Method::GET, "/api/v1/namespaces", "list namespaces"),
            (Method::GET, "/api/v1/nodes/n-1", "get nodes"),
            (
                Method::GET,
                "/api/v1/namespaces/ml/pods/w-0/log",
                "get pods/log",
            ),
            // A whole URL reads the same as its path.
            (
                Method::POST,
                "https://10.0.0.1:6443/api/v1/namespaces/ml/services",
                "create services",
            ),
            // Not resources.
            (Method::GET, "/version", "get"),
            (Method::GET, "/", "get"),
            (Method::POST, "/apis", "post"),
        ];
        for (method, uri, expected) in cases {
            assert_eq!(kind(method, uri).1, expected, "{uri}");
        }
    }

    #[test]
    fn odd_paths_never_panic_and_keep_their_text() {
        for uri in [
            "/api",
            "/apis/g",
            "/apis/g/v/namespaces",
            "/api/v1/namespaces/%E2%9C%93/pods/%F0%9F%92%A5/x/y/z",
            "/api/v1//pods//",
        ] {
            let (verb, _) = kind(Method::GET, uri);
            assert!(["get", "list"].contains(&verb.as_str()), "{uri}: {verb}");
        }
        assert_eq!(kind(Method::OPTIONS, "/api/v1/pods").0, "other");
    }

    #[test]
    fn a_request_without_a_valid_trace_context_gets_no_server_span() {
        let method = Method::GET;
        let uri: Uri = "/api/v1/pods".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert!(server_span(&headers, &method, &uri).is_none());
        let huge = format!(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01{}",
            "-0".repeat(32 << 10)
        );
        for bad in [
            "garbage".to_owned(),
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_owned(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01".to_owned(),
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01".to_owned(),
            "00-4bf92f3577b34da6-00f067aa0ba902b7-01".to_owned(),
            huge,
        ] {
            headers.insert("traceparent", bad.parse().unwrap());
            assert!(server_span(&headers, &method, &uri).is_none(), "{bad:.80}");
        }
        // A value that is not text (bytes of a multi-byte character, as a header may carry).
        headers.insert(
            "traceparent",
            http::HeaderValue::from_bytes(
                "00-４bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".as_bytes(),
            )
            .unwrap(),
        );
        assert!(server_span(&headers, &method, &uri).is_none());
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        assert!(server_span(&headers, &method, &uri).is_some());
    }
}
