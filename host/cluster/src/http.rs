//! The HTTP front, as the API server's handler chain: routing and discovery ([`server`]), the
//! query parameters of every verb ([`query`]), paged lists from one snapshot ([`paging`]), the responses' shapes (JSON helpers in
//! [`respond`], [`table`] and [`protobuf`] for kubectl, [`openapi`] for schemas), `pods/log`
//! ([`pod_log`]), strict parsing of request bodies ([`strict_json`]), HTTPS ([`tls`]), the kubeconfig clients reach it by ([`kubeconfig`]), request accounting ([`requests`]) and the test-only [`debug`] endpoints.

pub(crate) mod debug;
pub mod kubeconfig;
pub mod openapi;
pub mod paging;
pub mod pod_log;
pub mod protobuf;
pub mod query;
pub mod requests;
pub(crate) mod respond;
pub mod server;
pub mod strict_json;
pub mod table;
pub mod tls;
