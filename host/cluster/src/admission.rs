//! What happens to an object between decoding and storage: unknown fields pruned and reported
//! as the request's `fieldValidation` asks ([`fields`]), the built-in kinds' defaults
//! ([`defaults`]), the CEL rules and bounds of custom resources' schemas ([`cel`]), and the
//! owner-reference permission rule ([`owner_refs`]).

pub mod cel;
pub mod defaults;
pub mod fields;
pub mod owner_refs;
