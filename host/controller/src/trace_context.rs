//! The trace a TFJob was submitted in, and the span of each reconcile.
//!
//! A pipeline that submits a job can record its W3C trace context in the job's
//! `tracing.k8s.io/traceparent` annotation (the name Kubernetes' KEP-5915 proposes). Each
//! reconcile's span is then linked to that trace: a link, not a parent, because a reconcile is
//! not part of the submission's work (there are many, long after it has ended) and each keeps
//! its own trace. A value that is not a valid `traceparent` is ignored: the job is reconciled
//! as any other, and its author is not told, as the API server does not check it either.

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The annotation a job's submitter records its trace context in.
pub const TRACEPARENT_ANNOTATION: &str = "tracing.k8s.io/traceparent";

/// The longest value read: version 00 is 55 characters, and later versions may only append
/// fields. Anything far longer is not a trace context and is not parsed at all.
const MAX_TRACEPARENT_LEN: usize = 256;

/// The span context `value` names, if it is a valid, non-zero W3C `traceparent`.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    if value.len() > MAX_TRACEPARENT_LEN || !has_traceparent_layout(value) {
        return None;
    }
    let carrier = std::collections::HashMap::from([("traceparent".to_owned(), value.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then_some(span_context)
}

/// Whether `value` has the fields the W3C specification fixes: version, 32-digit trace id,
/// 16-digit parent id and flags, in lower-case hex, and nothing after them in version 00. The
/// SDK's parser, which checks the rest (no zero ids, no version ff), takes shorter ids.
fn has_traceparent_layout(value: &str) -> bool {
    let fields: Vec<&str> = value.split('-').collect();
    let lower_hex = |f: &str| {
        f.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    fields.len() >= 4
        && (fields[0] != "00" || fields.len() == 4)
        && fields[..4]
            .iter()
            .zip([2, 32, 16, 2])
            .all(|(field, len)| field.len() == len && lower_hex(field))
}

/// The span of one reconcile of the job in `namespace`/`name`, linked to the trace its
/// annotations name. Its `outcome` and `requeue_after_ms` are recorded when it ends.
pub fn reconcile_span(meta: &kube::api::ObjectMeta) -> tracing::Span {
    let span = tracing::span!(
        target: tfjob_planner::SPAN_TARGET,
        tracing::Level::DEBUG,
        "reconcile",
        otel.kind = "internal",
        k8s.namespace.name = meta.namespace.as_deref().unwrap_or_default(),
        tfjob.name = meta.name.as_deref().unwrap_or_default(),
        tfjob.uid = meta.uid.as_deref().unwrap_or_default(),
        tfjob.generation = meta.generation.unwrap_or_default(),
        outcome = tracing::field::Empty,
        requeue_after_ms = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(linked) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACEPARENT_ANNOTATION))
        .and_then(|v| parse_traceparent(v))
    {
        span.add_link(linked);
    }
    span
}

/// The id of the trace `span` is recorded in, when it is recorded and sampled.
pub fn trace_id_of(span: &tracing::Span) -> Option<String> {
    if span.is_none() {
        return None;
    }
    let context = span.context();
    let span = context.span();
    let ids = span.span_context();
    (ids.is_valid() && ids.is_sampled()).then(|| ids.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_names_its_trace_and_parent() {
        let context = parse_traceparent(VALID).expect("valid");
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert!(context.is_remote());
        // Not sampled upstream is still a trace to link to.
        let unsampled = VALID.replace("-01", "-00");
        assert!(parse_traceparent(&unsampled).is_some());
    }

    #[test]
    fn anything_else_is_ignored() {
        let long = format!("{VALID}-{}", "a".repeat(MAX_TRACEPARENT_LEN));
        for bad in [
            "",
            "garbage",
            // All-zero trace or parent id: invalid by the specification.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version ff is forbidden; version 00 has exactly four fields.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // Upper-case hex, short ids, multi-byte characters in place of hex digits.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47ﾘ6-00f067aa0ba902b7-01",
            "00-４bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            long.as_str(),
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
        // A megabyte is refused before any parsing.
        assert!(parse_traceparent(&"0".repeat(1 << 20)).is_none());
    }
}
