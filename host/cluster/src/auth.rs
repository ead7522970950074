//! Authentication and authorization: bearer tokens and TokenRequests ([`tokens`]), the
//! impersonation headers ([`impersonation`]), RBAC evaluated over the stored roles and bindings
//! ([`rbac`]), the reviews a user asks about themselves ([`self_review`]), and the middleware
//! that applies them to every request ([`access`]).

pub mod access;
pub mod impersonation;
pub mod rbac;
pub mod self_review;
pub mod tokens;
