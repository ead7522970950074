//! The HTTP front of the embedded API server: Kubernetes REST paths for every served type
//! (`/api/v1/...`, `/apis/<group>/<version>/...`, namespaced or cluster-wide), list with label and
//! field selectors and `limit`/`continue`, watch streams with resourceVersion semantics and
//! bookmarks, create, replace, the four patch types, delete and deletecollection, status
//! subresources, `pods/log` ([`crate::http::pod_log`]), protobuf bodies of the core types kubectl sends
//! that way ([`crate::http::protobuf`]), discovery, OpenAPI v3 documents for kubectl's validation, and
//! CRDs that make their resources served when applied. Tests reach in through [`ServerOptions`]: a
//! middleware in front of every handler injects the configured [`Faults`] and counts requests in
//! [`RequestStats`], and `/debug/faults` and `/debug/requests` read and change both at run time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tfjob_policy_logic::label_selector::LabelSelector;
use tokio::sync::broadcast::error::RecvError;

use crate::admission::fields::{self, FieldProblem, FieldValidation};
use crate::auth::access::Access;
use crate::error::{ApiError, StatusCause};
use crate::faults::Faults;
use crate::http::paging::ListPages;
use crate::http::query::{
    DeleteQuery, ListOptions, Query, Write, WriteOptions, invalid_options, not_supported,
};
use crate::http::requests::RequestStats;
use crate::http::respond::{error_response, json_response};
use crate::storage::selector::{FieldSelector, label_selector, matches_labels};
use crate::storage::store::{
    Commit, DeleteOptions, Part, Patch, Propagation, ResourceType, Store, WatchEvent,
};

/// The patch types a real server accepts for custom resources, as it lists them in a 415.
const PATCH_TYPES_OF_CUSTOM_RESOURCES: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// Longest watch when the client names no timeout.
const DEFAULT_WATCH: Duration = Duration::from_secs(300);

/// What the server injects and counts, shared with whoever started it.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// Faults injected into resource requests (none by default).
    pub faults: Faults,
    /// Counters of the resource requests answered.
    pub stats: RequestStats,
    /// Authentication, and authorization when asked ([`crate::auth::access`]).
    pub access: Access,
    /// HTTPS with this configuration ([`crate::http::tls`]); plain HTTP without.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Trace spans of the requests served, made by whoever runs the server (none by default).
    pub tracing: Option<Arc<dyn RequestTracing>>,
}

/// How the server traces the requests it serves. The server knows no trace format: whoever
/// starts it (the operator's `up`, which exports traces) decides which requests get a span and
/// what it says, typically a child of the client's span named by a `traceparent` header.
pub trait RequestTracing: std::fmt::Debug + Send + Sync + 'static {
    /// The span to serve the request in, or `None` to serve it untraced.
    fn span(&self, headers: &HeaderMap, method: &Method, uri: &Uri) -> Option<tracing::Span>;
    /// The request served in `span` was answered with `status`.
    fn answered(&self, span: &tracing::Span, status: StatusCode);
}

/// Serves the request in the span `tracing` makes for it, if any; see [`RequestTracing`].
async fn traced(
    State(tracing): State<Arc<dyn RequestTracing>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument as _;
    match tracing.span(request.headers(), request.method(), request.uri()) {
        None => next.run(request).await,
        Some(span) => {
            let response = next.run(request).instrument(span.clone()).await;
            tracing.answered(&span, response.status());
            response
        }
    }
}

impl ServerOptions {
    /// These options serving HTTPS with `certificates`, the administrator presenting their
    /// token (as [`ClientAccess::https`](crate::http::kubeconfig::ClientAccess::https) hands it
    /// to clients).
    pub fn with_https(
        mut self,
        certificates: &crate::http::tls::ServingCertificates,
    ) -> Result<ServerOptions, crate::http::tls::TlsError> {
        self.tls = Some(certificates.server_config()?);
        self.access.tokens.accept(
            certificates.admin_token(),
            crate::auth::rbac::UserInfo::admin(crate::auth::tokens::ADMIN),
        );
        Ok(self)
    }
}

/// The server's state.
pub struct ApiServer {
    pub store: Arc<Store>,
    pub options: ServerOptions,
    /// The snapshots of paged lists being read.
    pub pages: ListPages,
}

/// A server serving in the background.
#[derive(Debug)]
pub struct RunningServer {
    /// The bound loopback address.
    pub addr: SocketAddr,
    /// The serving task; it runs until aborted.
    pub handle: tokio::task::JoinHandle<()>,
    options: ServerOptions,
}

impl RunningServer {
    /// The fault configuration of the server, changeable while it runs.
    pub fn faults(&self) -> &Faults {
        &self.options.faults
    }

    /// The server's request counters.
    pub fn requests(&self) -> &RequestStats {
        &self.options.stats
    }

    /// The server's tokens and authorization switch.
    pub fn access(&self) -> &Access {
        &self.options.access
    }
}

/// The router, injecting and counting through `options`.
pub fn router(store: Arc<Store>, options: ServerOptions) -> Router {
    let gate = Arc::new(crate::auth::access::Gate {
        store: Arc::clone(&store),
        access: options.access.clone(),
        stats: options.stats.clone(),
    });
    let hooks = Arc::new(crate::http::debug::Hooks {
        faults: options.faults.clone(),
        stats: options.stats.clone(),
    });
    let tracing = options.tracing.clone();
    let state = Arc::new(ApiServer {
        store,
        options,
        pages: ListPages::default(),
    });
    let router = Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/livez", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route("/version", axum::routing::get(version))
        .route("/metrics", axum::routing::get(metrics))
        .route("/openapi/v3", axum::routing::get(openapi_index))
        .route("/openapi/v3/{*path}", axum::routing::get(openapi_document))
        .merge(crate::http::debug::routes(Arc::clone(&hooks)))
        .fallback(handle)
        .layer(axum::middleware::from_fn_with_state(
            gate,
            crate::auth::access::middleware,
        ))
        .layer(axum::middleware::from_fn_with_state(
            hooks,
            crate::http::debug::middleware,
        ));
    // Outermost, so a request's span covers everything the server does for it.
    let router = match tracing {
        Some(tracing) => router.layer(axum::middleware::from_fn_with_state(tracing, traced)),
        None => router,
    };
    router.with_state(state)
}

/// Serves the API on `listener` with `options` until `shutdown` resolves.
pub async fn serve(
    store: Arc<Store>,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match options.tls.clone() {
        Some(config) => {
            crate::http::tls::serve(listener, router(store, options), config, shutdown).await
        }
        None => {
            axum::serve(listener, router(store, options))
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// Binds a loopback port (0 picks a free one) and serves in the background.
pub async fn start(
    store: Arc<Store>,
    port: u16,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let running = start_with(store, port, ServerOptions::default()).await?;
    Ok((running.addr, running.handle))
}

/// Binds a loopback port (0 picks a free one) and serves with `options` in the background.
pub async fn start_with(
    store: Arc<Store>,
    port: u16,
    options: ServerOptions,
) -> std::io::Result<RunningServer> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let serving = options.clone();
    let handle = tokio::spawn(async move {
        if let Err(e) = serve(store, listener, serving, std::future::pending()).await {
            tracing::error!(error = %e, "API server stopped");
        }
    });
    Ok(RunningServer {
        addr,
        handle,
        options,
    })
}

/// `GET /metrics`: the request counts, as kube-apiserver's own metrics name them.
async fn metrics(State(server): State<Arc<ApiServer>>) -> Response {
    let mut response = Response::new(axum::body::Body::from(server.options.stats.prometheus()));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn openapi_index(State(server): State<Arc<ApiServer>>) -> Response {
    json_response(200, &crate::http::openapi::index(&server.store))
}

async fn openapi_document(
    State(server): State<Arc<ApiServer>>,
    axum::extract::Path(path): axum::extract::Path<String>,
) -> Response {
    match crate::http::openapi::document(&server.store, &path) {
        Some(doc) => json_response(200, &doc),
        None => error_response(&ApiError::not_found("OpenAPI document", &path)),
    }
}

async fn version() -> Response {
    json_response(
        200,
        &json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-tfjob-embedded",
            "gitCommit": "embedded", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
        }),
    )
}

/// Which objects a request addresses.
struct Target {
    t: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    /// The object, or its `status` subresource.
    part: Part,
}

/// How long a write waits to be durable before the server answers it with an error.
const DURABLE_WITHIN: Duration = Duration::from_secs(30);

/// Serves a request; a request that may write is answered only once what it wrote is durable
/// (`up --state`), as a real API server answers once etcd holds the write. A refused write
/// (any answer but 2xx: a conflict, a validation error, a denial) wrote nothing and is answered
/// at once, without waiting for the writes of others.
async fn handle(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let writes = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let store = Arc::clone(&server.store);
    let response = serve_request(State(server), method, uri, headers, body).await;
    if wrote(writes, response.status())
        && let Err(e) = store.durable(DURABLE_WITHIN).await
    {
        return error_response(&ApiError::new(500, "InternalError", e));
    }
    response
}

/// Whether a request may have written something: one that may write, answered with success.
fn wrote(writes: bool, status: StatusCode) -> bool {
    writes && status.is_success()
}

async fn serve_request(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let segments: Vec<&str> = uri
        .path()
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let query = Query::parse(uri.query());
    if let ["api", "v1", "namespaces", ns, "pods", name, "log"] = segments.as_slice() {
        if method != Method::GET {
            return error_response(&ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported on {}", uri.path()),
            ));
        }
        return crate::http::pod_log::serve(&server.store, ns, name, &query);
    }
    if let [
        "api",
        "v1",
        "namespaces",
        ns,
        "serviceaccounts",
        name,
        "token",
    ] = segments.as_slice()
    {
        if method != Method::POST {
            return error_response(&ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{method} is not supported on {}", uri.path()),
            ));
        }
        let answer = json_body(&headers, body).and_then(|body| {
            crate::auth::tokens::token_request(
                &server.store,
                &server.options.access.tokens,
                ns,
                name,
                &body,
            )
        });
        return match answer {
            Ok((code, obj)) => json_response(code, &obj),
            Err(e) => error_response(&e),
        };
    }
    match discovery(&server.store, &segments) {
        Some(doc) if method == Method::GET => return json_response(200, &doc),
        _ => {}
    }
    let target = match resolve(&server.store, &segments) {
        Ok(t) => t,
        Err(e) => return error_response(&e),
    };
    let body = match json_body(&headers, body) {
        Ok(body) => body,
        Err(e) => return error_response(&e),
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let table = crate::http::table::wants_table(accept);
    // What `fieldValidation=Warn` (the default) tells the client of a write's fields.
    let mut warnings = Vec::new();
    let result = match (&method, &target.name) {
        (&Method::GET, None) => match ListOptions::from_query(&query) {
            Ok(options) if options.watch => {
                return watch(&server.store, &target, &options, table);
            }
            Ok(options) if table => list(&server.store, &server.pages, &target, &options)
                .map(|(code, l)| (code, Arc::new(list_as_table(&target.t, &l)))),
            Ok(options) => list(&server.store, &server.pages, &target, &options),
            Err(e) => Err(e),
        },
        (&Method::GET, Some(name)) => server
            .store
            .get(&target.t, target.namespace.as_deref(), name)
            .map(|o| {
                if table {
                    (
                        200,
                        Arc::new(crate::http::table::table(
                            &target.t,
                            &[o],
                            server.store.resource_version(),
                        )),
                    )
                } else {
                    (200, o)
                }
            }),
        (&Method::POST, None) => {
            WriteOptions::from_query(&query, Write::Create).and_then(|options| {
                let obj = decode_object(&target.t, &options, &body, &mut warnings)?;
                server
                    .store
                    .create_with(
                        &target.t,
                        target.namespace.as_deref(),
                        obj,
                        commit_of(&options),
                    )
                    .map(|o| (201, o))
            })
        }
        (&Method::PUT, Some(name)) => WriteOptions::from_query(&query, Write::Update)
            .and_then(|options| {
                let obj = decode_object(&target.t, &options, &body, &mut warnings)?;
                server.store.replace_with(
                    &target.t,
                    target.namespace.as_deref(),
                    name,
                    obj,
                    target.part,
                    commit_of(&options),
                )
            })
            .map(|o| (200, o)),
        (&Method::PATCH, Some(name)) => patch(
            &server.store,
            &target,
            name,
            &headers,
            &query,
            &body,
            &mut warnings,
        ),
        (&Method::DELETE, Some(name)) => delete_options(&body, &query)
            .and_then(|opts| {
                server
                    .store
                    .delete(&target.t, target.namespace.as_deref(), name, &opts)
            })
            .map(|o| (200, o)),
        (&Method::DELETE, None) => {
            delete_collection(&server.store, &server.pages, &target, &body, &query)
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on {}", uri.path()),
        )),
    };
    match result {
        Ok((code, obj)) => {
            // A dry run changed nothing, so nothing follows from it.
            let dry_run = query.all("dryRun").any(|v| !v.is_empty());
            if method != Method::GET && !dry_run {
                after_write(&server.store, &target.t, &method, &obj);
            }
            let mut response = if !table
                && crate::http::protobuf::prefers_protobuf(accept)
                && let Some(response) = protobuf_response(code, &obj)
            {
                response
            } else {
                json_response(code, &obj)
            };
            add_warnings(&mut response, &warnings);
            response
        }
        Err(e) => error_response(&e),
    }
}

/// A create's or update's body, decoded as the API server decodes it: parsed (noting duplicate
/// fields unless told to ignore them), pruned by the type's schema, and refused under
/// `fieldValidation=Strict` when either found something; under `Warn` what was found becomes
/// `warnings`.
fn decode_object(
    t: &ResourceType,
    options: &WriteOptions,
    body: &Bytes,
    warnings: &mut Vec<String>,
) -> Result<Value, ApiError> {
    let validation = FieldValidation::from_query(options.field_validation.as_deref());
    let (mut obj, duplicates) = parse_noting_duplicates(body, validation)?;
    let unknown = match fields::schema_of(t) {
        Some(schema) => schema.prune(&mut obj),
        None => Vec::new(),
    };
    judge_fields(t, validation, unknown, duplicates, warnings)?;
    Ok(obj)
}

/// The body as JSON, with the paths of its duplicate fields unless they are to be ignored.
fn parse_noting_duplicates(
    body: &Bytes,
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    if validation == FieldValidation::Ignore {
        return Ok((parse_body(body)?, Vec::new()));
    }
    crate::http::strict_json::parse(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
}

/// What a write's unknown and duplicate fields mean under its `fieldValidation`: a refusal
/// (`Strict`), warnings (`Warn`) or nothing (`Ignore`).
fn judge_fields(
    t: &ResourceType,
    validation: FieldValidation,
    unknown: Vec<String>,
    duplicates: Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let problems: Vec<FieldProblem> = duplicates
        .into_iter()
        .map(FieldProblem::Duplicate)
        .chain(unknown.into_iter().map(FieldProblem::Unknown))
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    match validation {
        FieldValidation::Strict => Err(fields::strict_error(t, &problems)),
        FieldValidation::Warn => {
            warnings.extend(
                problems
                    .iter()
                    .take(fields::MAX_REPORTED)
                    .map(ToString::to_string),
            );
            if problems.len() > fields::MAX_REPORTED {
                warnings.push(format!(
                    "and {} more unknown or duplicate fields",
                    problems.len() - fields::MAX_REPORTED
                ));
            }
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// `Warning: 299 - "text"` headers, as the API server sends them and kubectl prints them. The
/// text is a field path a client chose: control characters are escaped, quotes and backslashes
/// quoted, so no header can be split or broken.
fn add_warnings(response: &mut Response, warnings: &[String]) {
    for warning in warnings {
        let escaped: String = warning
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c if c.is_control() => c.escape_default().collect(),
                c => vec![c],
            })
            .collect();
        if let Ok(value) =
            header::HeaderValue::from_bytes(format!("299 - \"{escaped}\"").as_bytes())
        {
            response.headers_mut().append(header::WARNING, value);
        }
    }
}

/// The body as JSON: kubectl sends built-in objects as protobuf; the supported kinds are turned
/// into the JSON every handler works with, the others refused with 415.
fn json_body(headers: &HeaderMap, body: Bytes) -> Result<Bytes, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !body.is_empty() && content_type.contains("protobuf") {
        protobuf_body(&body)
    } else {
        Ok(body)
    }
}

/// The JSON of a protobuf request body: `415` for kinds not decoded here, `400` for bytes that
/// are not a well-formed object.
fn protobuf_body(body: &Bytes) -> Result<Bytes, ApiError> {
    use crate::http::protobuf::ProtoError;
    match crate::http::protobuf::decode(body) {
        Ok(obj) => Ok(Bytes::from(obj.to_string())),
        Err(e @ ProtoError::Unsupported { .. }) => {
            Err(ApiError::new(415, "UnsupportedMediaType", e.to_string()))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "the protobuf body cannot be decoded: {e}"
        ))),
    }
}

/// A protobuf answer, for a client that asks for protobuf first, when the object's kind is
/// one encoded here; `None` leaves the answer to JSON, which such clients accept too.
fn protobuf_response(code: u16, obj: &Value) -> Option<Response> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    if !crate::http::protobuf::supports(text("apiVersion"), text("kind")) {
        return None;
    }
    match crate::http::protobuf::encode(obj) {
        Ok(bytes) => Some(
            (
                StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
                [(header::CONTENT_TYPE, crate::http::protobuf::MEDIA_TYPE)],
                bytes,
            )
                .into_response(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode the answer as protobuf; answering JSON");
            None
        }
    }
}

/// A list response as a Table, keeping its resourceVersion and continue token.
fn list_as_table(t: &ResourceType, list: &Value) -> Value {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let rv = list
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut table = crate::http::table::table(t, &items, rv);
    if let Some(c) = list.pointer("/metadata/continue") {
        table["metadata"]["continue"] = c.clone();
    }
    table
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
}

fn resolve(store: &Store, segments: &[&str]) -> Result<Target, ApiError> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::not_found("path", &segments.join("/"))),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] => {
            (Some((*ns).to_owned()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (plural, name, part) = match rest.as_slice() {
        [plural] => (*plural, None, Part::Whole),
        [plural, name] => (*plural, Some((*name).to_owned()), Part::Whole),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), Part::Status),
        _ => return Err(ApiError::not_found("path", &segments.join("/"))),
    };
    let t = store
        .resource(group, plural)
        .filter(|t| t.version == version)
        .ok_or_else(|| ApiError::not_found("resource", &format!("{group}/{version}/{plural}")))?;
    if part == Part::Status && !t.status {
        return Err(ApiError::not_found("subresource", "status"));
    }
    Ok(Target {
        t,
        namespace,
        name,
        part,
    })
}

fn selectors(options: &ListOptions) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = label_selector(&options.label_selector)?;
    let fields = FieldSelector::parse(&options.field_selector)?;
    Ok((labels, fields))
}

fn list(
    store: &Store,
    pages: &ListPages,
    target: &Target,
    options: &ListOptions,
) -> Result<(u16, Arc<Value>), ApiError> {
    let limit = options
        .limit
        .and_then(|l| usize::try_from(l).ok())
        .filter(|l| *l > 0);
    // A token serves only the list it came from: same resource, namespace and selectors.
    let scope = format!(
        "{}\n{}\n{}\n{}",
        target.t.key(),
        target.namespace.as_deref().unwrap_or_default(),
        options.label_selector,
        options.field_selector
    );
    let now = std::time::Instant::now();
    let page = match options.continue_token.as_deref() {
        Some(token) => pages.next(&scope, token, limit, now)?,
        None => {
            let (labels, fields) = selectors(options)?;
            let (items, rv) = store.list(&target.t, target.namespace.as_deref());
            let items: Vec<Arc<Value>> = items
                .into_iter()
                .filter(|o| matches_labels(&labels, o) && fields.matches(o))
                .collect();
            pages.first(scope, rv, items, limit, now)
        }
    };
    // The one copy of a list: the answer is a new document holding the items.
    let items: Vec<Value> = page.items.iter().map(|o| (**o).clone()).collect();
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = page.continue_token {
        metadata["continue"] = json!(token);
        metadata["remainingItemCount"] = json!(page.remaining);
    }
    Ok((
        200,
        Arc::new(json!({
            "apiVersion": target.t.api_version(),
            "kind": format!("{}List", target.t.kind),
            "metadata": metadata,
            "items": items,
        })),
    ))
}

/// Whether a write's options ask for it to be stored or only answered.
fn commit_of(options: &WriteOptions) -> Commit {
    if options.dry_run {
        Commit::DryRun
    } else {
        Commit::Store
    }
}

fn patch(
    store: &Store,
    target: &Target,
    name: &str,
    headers: &HeaderMap,
    query: &Query,
    body: &Bytes,
    warnings: &mut Vec<String>,
) -> Result<(u16, Arc<Value>), ApiError> {
    let options = WriteOptions::from_query(query, Write::Patch)?;
    let validation = FieldValidation::from_query(options.field_validation.as_deref());
    let schema = fields::schema_of(&target.t);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/merge-patch+json");
    let (mut parsed, duplicates) = parse_noting_duplicates(body, validation)?;
    let unknown = match &schema {
        Some(schema) if content_type.starts_with("application/json-patch+json") => {
            match parsed.as_array_mut() {
                Some(ops) => schema.prune_json_patch(ops),
                None => Vec::new(),
            }
        }
        Some(schema) => schema.prune_patch(&mut parsed),
        None => Vec::new(),
    };
    judge_fields(&target.t, validation, unknown, duplicates, warnings)?;
    let body = parsed;
    let patch = if content_type.starts_with("application/json-patch+json") {
        Patch::Json(
            serde_json::from_value(body)
                .map_err(|e| ApiError::bad_request(format!("json patch: {e}")))?,
        )
    } else if content_type.starts_with("application/apply-patch") {
        // A real server refuses an apply that names no manager: the fields would be owned
        // by nobody.
        let Some(manager) = options.field_manager.clone() else {
            return Err(invalid_options(
                "PatchOptions",
                vec![StatusCause {
                    reason: "FieldValueRequired".into(),
                    field: "fieldManager".into(),
                    message: "Required value: is required for apply patch".into(),
                }],
            ));
        };
        Patch::Apply {
            body,
            manager,
            force: options.force,
        }
    } else if content_type.starts_with("application/strategic-merge-patch+json") {
        // Strategic merge needs the Go types' merge keys; custom resources have none, and a
        // real server refuses the patch type for them.
        if !target.t.is_builtin() {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: {PATCH_TYPES_OF_CUSTOM_RESOURCES}"
                ),
            ));
        }
        Patch::Strategic(body)
    } else {
        Patch::Merge(body)
    };
    store
        .patch_with(
            &target.t,
            target.namespace.as_deref(),
            name,
            patch,
            target.part,
            commit_of(&options),
        )
        .map(|o| (200, o))
}

/// The options of a delete: from a `DeleteOptions` body (kube-rs and kubectl send one), else from
/// the query (`?propagationPolicy=Foreground`), as a real API server reads them.
fn delete_options(body: &Bytes, query: &Query) -> Result<DeleteOptions, ApiError> {
    let from_query = DeleteQuery::from_query(query)?;
    let doc: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let policy = doc
        .get("propagationPolicy")
        .and_then(text)
        .or(from_query.propagation_policy);
    // `orphanDependents` is the deprecated spelling of the orphan policy; kubectl still
    // understands it, so the server does too.
    let orphan = doc
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or(from_query.orphan_dependents);
    // The body's `dryRun` list, checked as the query's is.
    let body_dry_run: Vec<&str> = doc
        .get("dryRun")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut causes = Vec::new();
    if let Some(bad) = body_dry_run.iter().find(|v| **v != "All") {
        causes.push(not_supported("dryRun", bad, &["All"]));
    }
    let propagation = match (policy, orphan) {
        (Some(p), Some(_)) => {
            causes.push(StatusCause {
                reason: "FieldValueInvalid".into(),
                field: "propagationPolicy".into(),
                message: format!(
                    "Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
                ),
            });
            Propagation::default()
        }
        (Some(p), None) => p.parse().unwrap_or_else(|_| {
            causes.push(not_supported(
                "propagationPolicy",
                &p,
                &["Foreground", "Background", "Orphan", "nil"],
            ));
            Propagation::default()
        }),
        (None, Some(true)) => Propagation::Orphan,
        (None, _) => Propagation::default(),
    };
    if !causes.is_empty() {
        return Err(invalid_options("DeleteOptions", causes));
    }
    Ok(DeleteOptions {
        uid: doc.pointer("/preconditions/uid").and_then(text),
        resource_version: doc.pointer("/preconditions/resourceVersion").and_then(text),
        propagation,
        dry_run: from_query.dry_run || !body_dry_run.is_empty(),
    })
}

fn delete_collection(
    store: &Store,
    pages: &ListPages,
    target: &Target,
    body: &Bytes,
    query: &Query,
) -> Result<(u16, Arc<Value>), ApiError> {
    let opts = DeleteOptions {
        uid: None,
        resource_version: None,
        ..delete_options(body, query)?
    };
    let (_, listed) = list(store, pages, target, &ListOptions::from_query(query)?)?;
    let mut deleted = Vec::new();
    for item in listed["items"].as_array().into_iter().flatten() {
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
        match store.delete(&target.t, ns, name, &opts) {
            Ok(o) => deleted.push(o),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let deleted: Vec<&Value> = deleted.iter().map(|o| &**o).collect();
    Ok((
        200,
        Arc::new(
            json!({"apiVersion": target.t.api_version(), "kind": format!("{}List", target.t.kind), "metadata": {}, "items": deleted}),
        ),
    ))
}

/// Side effects of writes: applying a CRD makes its resources served (and marks it
/// Established); an `events.k8s.io/v1` event is mirrored as a core/v1 event, which is the view
/// `kubectl describe` reads (on a real server both are views of one object).
fn after_write(store: &Store, t: &ResourceType, method: &Method, obj: &Value) {
    if *method == Method::DELETE {
        return;
    }
    if t.plural == "customresourcedefinitions" {
        if let Err(e) = crate::storage::crd::established(store, obj) {
            tracing::warn!(error = %e, "could not serve the CRD's resources");
        }
    } else if t.group == "events.k8s.io" && t.plural == "events" {
        mirror_event(store, obj);
    }
}

fn mirror_event(store: &Store, event: &Value) {
    let Some(core) = store.resource("", "events") else {
        return;
    };
    let name = event
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = event.pointer("/metadata/namespace").and_then(Value::as_str);
    let when = event
        .pointer("/series/lastObservedTime")
        .or_else(|| event.get("eventTime"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut mirrored = json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": event.get("regarding").cloned().unwrap_or(Value::Null),
        "reason": event.get("reason").cloned().unwrap_or(Value::Null),
        "message": event.get("note").cloned().unwrap_or(Value::Null),
        "type": event.get("type").cloned().unwrap_or(Value::Null),
        "source": {"component": event.get("reportingController").cloned().unwrap_or(Value::Null)},
        "firstTimestamp": event.get("eventTime").cloned().unwrap_or(Value::Null),
        "lastTimestamp": when,
        "count": event.pointer("/series/count").cloned().unwrap_or(json!(1)),
    });
    let result = match store.get(&core, ns, name) {
        Ok(existing) => {
            mirrored["metadata"] = existing["metadata"].clone();
            store.replace(&core, ns, name, mirrored, Part::Whole)
        }
        Err(_) => store.create(&core, ns, mirrored),
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "could not mirror an event");
    }
}

fn watch_line(e: &WatchEvent, table_of: Option<&ResourceType>) -> Bytes {
    match table_of {
        Some(t) => {
            let object = crate::http::table::table(t, std::slice::from_ref(&*e.object), e.rv);
            let mut line = json!({"type": e.type_.as_str(), "object": object}).to_string();
            line.push('\n');
            Bytes::from(line)
        }
        // Encoded once per event, whoever watches.
        None => e.json_line(),
    }
}

/// A `BOOKMARK` line at `rv`; `initial_events_end` marks the end of a streaming list's objects,
/// as the annotation `k8s.io/initial-events-end` does on a real server.
fn bookmark_line(api_version: &str, kind: &str, rv: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let bookmark = json!({
        "type": "BOOKMARK",
        "object": {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    });
    let mut line = bookmark.to_string();
    line.push('\n');
    Bytes::from(line)
}

/// A watch whose resourceVersion has been compacted away: one ERROR event, then the end.
fn expired_watch(e: &ApiError) -> Response {
    let mut line = json!({"type": "ERROR", "object": e.status()}).to_string();
    line.push('\n');
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(line))
        .unwrap_or_else(|_| error_response(e))
}

fn watch(store: &Arc<Store>, target: &Target, options: &ListOptions, as_table: bool) -> Response {
    // `kubectl get -w` asks for every event as a one-row table.
    let table_of = as_table.then(|| target.t.clone());
    let (labels, fields) = match selectors(options) {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let matches = move |o: &Value| matches_labels(&labels, o) && fields.matches(o);
    let ns = target.namespace.clone().filter(|_| target.t.namespaced);
    let since = match options.watch_from() {
        Ok(since) => since.unwrap_or(0),
        Err(e) => return error_response(&e),
    };
    // `sendInitialEvents=true` (a streaming list) starts with the current objects as ADDED and a
    // bookmark marking their end; `false` starts with changes only. Without it, a watch from no
    // resourceVersion (or "0") starts with the current objects, as a real server's.
    let send_initial = options.send_initial_events.unwrap_or(since == 0);
    let (initial, since) = if send_initial {
        let (items, rv) = store.list(&target.t, ns.as_deref());
        let mut lines: Vec<Bytes> = items
            .into_iter()
            .filter(|o| matches(o))
            .map(|o| {
                let e = WatchEvent::new(
                    rv,
                    target.t.key(),
                    String::new(),
                    crate::storage::store::EventType::Added,
                    o,
                );
                watch_line(&e, table_of.as_ref())
            })
            .collect();
        if options.send_initial_events == Some(true) {
            lines.push(bookmark_line(
                &target.t.api_version(),
                &target.t.kind,
                rv,
                true,
            ));
        }
        (lines, rv)
    } else if since == 0 {
        (Vec::new(), store.resource_version())
    } else {
        (Vec::new(), since)
    };
    let (past, rx) = match store.watch(&target.t.key(), ns.as_deref(), since) {
        Ok(w) => w,
        // A version older than the kept history is answered as a real server answers it: the
        // watch starts (200) and its one event is an ERROR carrying the 410. Clients relist on
        // that event; an HTTP 410 instead made kube-runtime's watcher retry the same version
        // forever, and its cache stopped following.
        Err(e) if e.code == 410 => return expired_watch(&e),
        Err(e) => return error_response(&e),
    };
    let timeout = options
        .timeout_seconds
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .map_or(DEFAULT_WATCH, Duration::from_secs);
    let bookmarks = options.allow_watch_bookmarks;
    let resource = target.t.key();
    let (api_version, kind) = (target.t.api_version(), target.t.kind.clone());
    let mut first: Vec<Bytes> = initial;
    first.extend(
        past.iter()
            .filter(|e| matches(&e.object))
            .map(|e| watch_line(e, table_of.as_ref())),
    );

    struct Live<F> {
        store: Arc<Store>,
        rx: tokio::sync::broadcast::Receiver<WatchEvent>,
        /// Changes read back from the type's history after falling behind, sent before `rx`.
        caught_up: std::collections::VecDeque<WatchEvent>,
        deadline: tokio::time::Instant,
        matches: F,
        resource: String,
        ns: Option<String>,
        last_rv: u64,
        bookmarks: bool,
        api_version: String,
        kind: String,
        table_of: Option<ResourceType>,
    }
    let last_rv = past.last().map_or(since, |e| e.rv);
    let live = Live {
        store: Arc::clone(store),
        rx,
        caught_up: std::collections::VecDeque::new(),
        deadline: tokio::time::Instant::now() + timeout,
        matches,
        resource,
        ns,
        last_rv,
        bookmarks,
        api_version,
        kind,
        table_of,
    };
    let rest = futures::stream::unfold(live, |mut s| async move {
        loop {
            let wait = if s.bookmarks {
                BOOKMARK_EVERY
            } else {
                DEFAULT_WATCH
            };
            let until = s.deadline.min(tokio::time::Instant::now() + wait);
            let next = match s.caught_up.pop_front() {
                Some(e) => Ok(Ok(e)),
                None => tokio::time::timeout_at(until, s.rx.recv()).await,
            };
            match next {
                Ok(Ok(e)) => {
                    if e.rv <= s.last_rv || s.ns.as_ref().is_some_and(|n| *n != e.namespace) {
                        continue;
                    }
                    s.last_rv = e.rv;
                    if (s.matches)(&e.object) {
                        let line = watch_line(&e, s.table_of.as_ref());
                        return Some((Ok::<Bytes, Infallible>(line), s));
                    }
                }
                // Fell behind: go on from the type's history, as the API server's watch cache
                // serves a slow watcher. Only a watcher the history has moved past ends; the
                // client resumes from the last resourceVersion it saw and relists on the 410.
                Ok(Err(RecvError::Lagged(_))) => {
                    match s.store.watch(&s.resource, s.ns.as_deref(), s.last_rv) {
                        Ok((past, rx)) => {
                            s.rx = rx;
                            s.caught_up = past.into();
                        }
                        Err(_) => return None,
                    }
                }
                // The store is gone.
                Ok(Err(RecvError::Closed)) => return None,
                Err(_) if tokio::time::Instant::now() >= s.deadline => return None,
                Err(_) => {
                    let line = bookmark_line(&s.api_version, &s.kind, s.last_rv, false);
                    return Some((Ok(line), s));
                }
            }
        }
    });
    let stream = futures::stream::iter(first.into_iter().map(Ok::<Bytes, Infallible>)).chain(rest);
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| {
            error_response(&ApiError::new(
                500,
                "InternalError",
                "building the watch response",
            ))
        })
}

/// Discovery documents: `/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`.
fn discovery(store: &Store, segments: &[&str]) -> Option<Value> {
    // Every request passes here first: only a discovery path pays for the copy of the types.
    if !matches!(
        segments,
        ["api"] | ["api", "v1"] | ["apis"] | ["apis", _, _]
    ) {
        return None;
    }
    let types = store.types();
    let resources = |group: &str, version: &str| -> Value {
        let list: Vec<Value> = types
            .iter()
            .filter(|t| t.group == group && t.version == version)
            .flat_map(|t| {
                let verbs = json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]);
                let mut out = vec![json!({
                    "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
                    "verbs": verbs, "shortNames": t.short_names,
                })];
                if t.status {
                    out.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
                        "kind": t.kind, "verbs": ["get", "patch", "update"]}));
                }
                out
            })
            .collect();
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") }, "resources": list})
    };
    match segments {
        ["api"] => Some(
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ),
        ["api", "v1"] => Some(resources("", "v1")),
        ["apis"] => {
            let mut groups: Vec<(String, String)> = types
                .iter()
                .filter(|t| !t.group.is_empty())
                .map(|t| (t.group.clone(), t.version.clone()))
                .collect();
            groups.sort();
            groups.dedup();
            let list: Vec<Value> = groups
                .iter()
                .map(|(g, v)| {
                    let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                    json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
                })
                .collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}))
        }
        ["apis", group, version] => types
            .iter()
            .any(|t| t.group == *group && t.version == *version)
            .then(|| resources(group, version)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_writes_answered_with_success_wait_to_be_durable() {
        assert!(wrote(true, StatusCode::OK));
        assert!(wrote(true, StatusCode::CREATED));
        assert!(wrote(true, StatusCode::ACCEPTED));
        // Refused writes wrote nothing.
        for refused in [
            StatusCode::BAD_REQUEST,
            StatusCode::FORBIDDEN,
            StatusCode::NOT_FOUND,
            StatusCode::CONFLICT,
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::INTERNAL_SERVER_ERROR,
        ] {
            assert!(!wrote(true, refused), "{refused}");
        }
        assert!(!wrote(false, StatusCode::OK));
    }

    /// A watcher that falls behind (its stream not read while more changes come than a watch
    /// buffers) is caught up from the type's history: it sees every change, in order, on the
    /// same stream.
    #[tokio::test]
    async fn a_watch_that_falls_behind_goes_on_from_the_history() {
        use futures::StreamExt as _;
        let store = Store::new();
        let configmaps = store.resource("", "configmaps").unwrap();
        let target = Target {
            t: configmaps.clone(),
            namespace: Some("ns".into()),
            name: None,
            part: Part::Whole,
        };
        let options = ListOptions {
            watch: true,
            resource_version: Some(store.resource_version().to_string()),
            timeout_seconds: Some(60),
            ..ListOptions::default()
        };
        let response = watch(&store, &target, &options, false);
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body().into_data_stream();
        // Nothing read yet: every change beyond the watch's buffer overflows it.
        let changes = 20_000;
        for i in 0..changes {
            let cm = json!({"metadata": {"name": format!("cm-{i}")}});
            store.create(&configmaps, Some("ns"), cm).unwrap();
        }
        let (mut seen, mut text) = (0, String::new());
        while seen < changes {
            let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
                .await
                .expect("the stream goes on")
                .expect("the stream has not ended")
                .unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
            while let Some((line, rest)) = text.split_once('\n') {
                let event: Value = serde_json::from_str(line).unwrap();
                assert_eq!(event["type"], "ADDED", "{line}");
                assert_eq!(event["object"]["metadata"]["name"], format!("cm-{seen}"));
                seen += 1;
                text = rest.to_owned();
            }
        }
    }
}
