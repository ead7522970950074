//! The objects and their history: the versioned store with its watch history ([`store`]),
//! label and field selectors ([`selector`]), patches ([`strategic_merge`]) and server-side apply's
//! conflicts ([`apply_conflicts`]), cluster IP and node
//! port allocation ([`allocations`]), the custom resource types that CRDs install ([`crd`]), the
//! Events simulated components record ([`events`]), the durable store that keeps every
//! acknowledged write across restarts ([`durable`]), and the old JSON state file it imports
//! ([`persist`]).

pub mod allocations;
pub mod apply_conflicts;
pub mod crd;
pub mod durable;
pub mod events;
pub mod persist;
pub mod selector;
pub mod store;
pub mod strategic_merge;
