//! What happens to an object between decoding and storage: the built-in kinds' defaults
//! ([`defaults`]), the CEL rules and bounds of custom resources' schemas ([`cel`]), and the
//! owner-reference permission rule ([`owner_refs`]).

pub mod cel;
pub mod defaults;
pub mod owner_refs;
