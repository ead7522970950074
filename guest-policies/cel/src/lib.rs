//! CEL policies for TFJob pods, in the shape of Kubernetes' `MutatingAdmissionPolicy`: a
//! document of `matchConditions`, `variables` and `mutations` (`ApplyConfiguration` or
//! `JSONPatch`), plus `resourceMutations` for one container's requirements and `verdicts` for
//! classification. A platform team writes it in a ConfigMap, with no toolchain.
//!
//! This crate is the whole of it as pure, synchronous Rust, compiled into the CEL guest that
//! the operator runs in its sandbox (the same deadline, memory and output caps as every
//! policy), and tested natively here:
//!
//! - [`document`]: the document as written, refused field by field when it is malformed;
//! - [`compile`]: every expression parsed once, when the policy version is activated, an
//!   error naming the expression (`mutations[1].jsonPatch.expression`) with a caret under the
//!   failing position;
//! - [`library`]: the environment expressions run in (CEL's standard library, the strings
//!   extension) and the struct types `Object{...}` and `JSONPatch{...}` construct;
//! - [`quantity`]: Kubernetes' `quantity()` library;
//! - [`lists`]: Kubernetes' lists library (`sum()`, `min()`, `max()`, `isSorted()`);
//! - [`reads`]: Kyverno's `resource.Get` and `resource.List`, answered by the cluster reads
//!   the policy declares;
//! - [`convert`]: JSON to CEL values and back;
//! - [`apply`]: an `ApplyConfiguration` merged into the pod as server-side apply merges;
//! - [`evaluate`]: a call, from the compiled document and the call's inputs to the new pod,
//!   the new requirements or the verdict.

pub mod apply;
pub mod compile;
pub mod convert;
pub mod document;
pub mod evaluate;
pub mod library;
pub mod lists;
pub mod quantity;
pub mod reads;
