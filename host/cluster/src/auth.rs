//! Authentication and authorization: bearer tokens and TokenRequests ([`tokens`]), the
//! impersonation headers ([`impersonation`]), RBAC evaluated over the stored roles and bindings
//! ([`rbac`]), and the middleware that applies them to every request ([`access`]).

pub mod access;
pub mod impersonation;
pub mod rbac;
pub mod tokens;
