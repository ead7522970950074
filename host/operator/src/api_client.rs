//! The operator's API client: every request names the operator in its `User-Agent`
//! (`tfjob-operator/<version>`), so audit logs, API priority and fairness, and the embedded
//! cluster's request counts tell its requests from anyone else's; every request passes the
//! client-side rate limit ([`crate::rate_limit`]) and is counted by status code and method
//! ([`crate::api_metrics`]).

use http::HeaderValue;
use http::header::USER_AGENT as USER_AGENT_HEADER;
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::util::MapRequestLayer;

use crate::api_metrics::ApiMetrics;
use crate::rate_limit::{ApiRate, RateLimitLayer};

/// The operator's `User-Agent`.
pub const USER_AGENT: &str = concat!("tfjob-operator/", env!("CARGO_PKG_VERSION"));

/// A client for `config`, named, held to `rate` (`None`: no limit) and counted in `metrics`.
pub fn build(
    config: Config,
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
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&measure)
        .with_layer(&name)
        .with_layer(&limit)
        .build())
}
