//! Traces over OTLP: the operator's `tracing` spans (reconciles, the API requests kube-client
//! makes, policy calls) exported as OpenTelemetry spans.
//!
//! [`config`] reads the settings; [`export`] queues and exports spans without ever holding a
//! reconcile up; this module builds the tracer and the subscriber layer from them. The layer
//! has a filter of its own, apart from the log filter: the API request span kube-client makes
//! for every request is at `debug`, which the logs do not want, and the spans the traces want
//! are fixed, whatever `RUST_LOG` says.

pub mod config;
pub mod export;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

pub use config::{ResourceAttributes, TraceArgs, TraceConfig};
pub use export::{BoundedExport, ExportSettings, ExportStartError, SpanCounts, span_counts};

use config::{Protocol, Root, Sampling};

/// Tracing, started: the provider to flush and shut down at exit, and the tracer the layer
/// records with.
#[derive(Debug)]
pub struct Tracing {
    pub provider: SdkTracerProvider,
    pub tracer: SdkTracer,
}

impl Tracing {
    /// Starts the export thread and the tracer for `config`, counting into `counts`.
    pub fn start(config: &TraceConfig, counts: SpanCounts) -> Result<Tracing, ExportStartError> {
        let resource = Resource::builder_empty()
            .with_detector(Box::new(TelemetryResourceDetector))
            .with_attributes(
                config
                    .resource_attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .with_service_name(config.service_name.clone())
            .build();
        let (protocol, endpoint, timeout) = (
            config.protocol,
            config.endpoint.clone(),
            config.export_timeout,
        );
        let build = move || {
            let built = match protocol {
                Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .with_timeout(timeout)
                    .build(),
                Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(endpoint)
                    .with_timeout(timeout)
                    .build(),
            };
            built.map_err(|e| e.to_string())
        };
        let processor = BoundedExport::start(
            build,
            resource.clone(),
            ExportSettings::with_queue(config.queue_size, config.export_timeout),
            counts,
        )?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler(config.sampling))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("tfjob-operator");
        Ok(Tracing { provider, tracer })
    }

    /// The subscriber layer that records spans with this tracer.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            // Source locations and thread names on every span cost more than they tell here.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(traced())
    }

    /// Exports what is queued and stops the export thread, waiting at most a few seconds: an
    /// unreachable collector does not hold up the process's exit.
    pub fn shutdown(self) {
        if let Err(error) = self
            .provider
            .shutdown_with_timeout(std::time::Duration::from_secs(5))
        {
            tracing::warn!(%error, "spans still queued at exit were not all exported");
        }
    }
}

/// What a trace records: the operator's own spans ([`tfjob_planner::SPAN_TARGET`], at `debug`
/// so that logs do not pay for them; among them each API request's, [`crate::api_trace`]),
/// and events at `info` and above, which become events of the span they happen in (a policy's
/// log lines in its call's). kube-runtime's span around each reconcile is left out: it covers
/// only the creation of the reconcile's future, not its run, and would be an empty trace each
/// time.
fn traced() -> Targets {
    Targets::new()
        .with_target(tfjob_planner::SPAN_TARGET, LevelFilter::DEBUG)
        .with_target("kube_runtime", LevelFilter::WARN)
        .with_default(LevelFilter::INFO)
}

fn sampler(sampling: Sampling) -> Sampler {
    let root = |root: Root| match root {
        Root::AlwaysOn => Sampler::AlwaysOn,
        Root::AlwaysOff => Sampler::AlwaysOff,
        Root::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
    };
    match sampling {
        Sampling::AlwaysOn => Sampler::AlwaysOn,
        Sampling::AlwaysOff => Sampler::AlwaysOff,
        Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        Sampling::ParentBased(inner) => Sampler::ParentBased(Box::new(root(inner))),
    }
}

/// Where a [`TraceIds`] formatter finds the subscriber it formats for, filled once the
/// subscriber is built (the formatter is part of it, so it cannot be given it before).
#[derive(Clone, Debug, Default)]
pub struct DispatchSlot(std::sync::Arc<std::sync::OnceLock<tracing::dispatcher::WeakDispatch>>);

impl DispatchSlot {
    /// Points the formatters sharing this slot at `dispatch`.
    pub fn fill(&self, dispatch: &tracing::Dispatch) {
        let _ = self.0.set(dispatch.downgrade());
    }

    /// The ids of `span`'s trace, when the trace layer records it.
    fn ids_of(
        &self,
        span: &tracing::span::Id,
    ) -> Option<(opentelemetry::trace::TraceId, opentelemetry::trace::SpanId)> {
        use opentelemetry::trace::TraceContextExt as _;
        let dispatch = self.0.get()?.upgrade()?;
        let context = tracing_opentelemetry::get_otel_context(span, &dispatch)?;
        let span = context.span();
        let ids = span.span_context();
        ids.is_valid().then(|| (ids.trace_id(), ids.span_id()))
    }
}

/// A log line formatter that puts the trace and span ids of the span a line is logged in before
/// the line (`trace_id=... span_id=...`), or first in its JSON object, so that a log line leads
/// to its trace. Lines logged outside any traced span are as `inner` writes them.
///
/// The span is the innermost one entered, whichever layer enabled it: the log filter does not
/// enable the trace's own spans, so the formatter's filtered view of the spans would miss them.
pub struct TraceIds<F> {
    inner: F,
    json: bool,
    slot: DispatchSlot,
}

impl<F> TraceIds<F> {
    /// Wraps `inner`, which writes JSON objects when `json`; `slot` is filled with the
    /// subscriber once it is built.
    pub fn new(inner: F, json: bool, slot: DispatchSlot) -> TraceIds<F> {
        TraceIds { inner, json, slot }
    }
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for TraceIds<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let current = ctx.current_span();
        let Some((trace_id, span_id)) = current.id().and_then(|id| self.slot.ids_of(id)) else {
            return self.inner.format_event(ctx, writer, event);
        };
        if !self.json {
            write!(writer, "trace_id={trace_id} span_id={span_id} ")?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        match line.strip_prefix('{') {
            // The ids are hex: nothing in them needs escaping.
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::prelude::*;

    /// A log destination the test reads back.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn tracing() -> Tracing {
        let provider = SdkTracerProvider::builder().build();
        let tracer = provider.tracer("test");
        Tracing { provider, tracer }
    }

    /// Logs one line outside any span and one inside a traced span; returns the log text and
    /// the span's trace id.
    fn log_in_and_out_of_a_span(json: bool) -> (String, String) {
        let traces = tracing();
        let lines = Lines::default();
        let writer = lines.clone();
        let format = tracing_subscriber::fmt::format().with_ansi(false);
        let slot = DispatchSlot::default();
        // The log layer's filter, as in the operator, does not enable the trace's spans.
        let logs = if json {
            tracing_subscriber::fmt::layer()
                .json()
                .event_format(TraceIds::new(format.json(), true, slot.clone()))
                .with_writer(move || writer.clone())
                .with_filter(LevelFilter::INFO)
                .boxed()
        } else {
            tracing_subscriber::fmt::layer()
                .event_format(TraceIds::new(format, false, slot.clone()))
                .with_writer(move || writer.clone())
                .with_filter(LevelFilter::INFO)
                .boxed()
        };
        let dispatch: tracing::Dispatch = tracing_subscriber::registry()
            .with(logs)
            .with(traces.layer())
            .into();
        slot.fill(&dispatch);
        let trace_id = tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!("outside");
            let span = tracing::span!(
                target: tfjob_planner::SPAN_TARGET,
                tracing::Level::DEBUG,
                "reconcile"
            );
            let _in = span.enter();
            tracing::info!(job = "a", "inside");
            let id = span.id().unwrap();
            slot.ids_of(&id).expect("a traced span").0.to_string()
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        (text, trace_id)
    }

    /// Whether each of 200 root spans started under `sampling` is sampled.
    fn sampled(sampling: Sampling) -> Vec<bool> {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler(sampling))
            .build();
        let tracer = provider.tracer("test");
        (0..200)
            .map(|i| {
                tracer
                    .start(format!("span {i}"))
                    .span_context()
                    .is_sampled()
            })
            .collect()
    }

    #[test]
    fn sampling_at_zero_keeps_no_trace_and_at_one_every_trace() {
        assert!(!sampled(Sampling::Ratio(0.0)).contains(&true));
        assert!(!sampled(Sampling::ParentBased(Root::Ratio(0.0))).contains(&true));
        assert!(!sampled(Sampling::AlwaysOff).contains(&true));
        assert!(!sampled(Sampling::Ratio(1.0)).contains(&false));
        assert!(!sampled(Sampling::ParentBased(Root::AlwaysOn)).contains(&false));
    }

    #[test]
    fn log_lines_in_a_traced_span_carry_its_ids() {
        let (text, trace_id) = log_in_and_out_of_a_span(false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(!lines[0].contains("trace_id"), "{}", lines[0]);
        let prefix = format!("trace_id={trace_id} span_id=");
        assert!(lines[1].starts_with(&prefix), "{}", lines[1]);
        assert!(lines[1].ends_with("inside job=\"a\""), "{}", lines[1]);
        // Not the span's fields: the log filter does not enable it.
        assert!(!lines[1].contains("reconcile"), "{}", lines[1]);
    }

    #[test]
    fn json_log_lines_stay_json_with_the_ids_first() {
        let (text, trace_id) = log_in_and_out_of_a_span(true);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].get("trace_id").is_none());
        assert_eq!(lines[1]["trace_id"], trace_id.as_str());
        assert_eq!(lines[1]["span_id"].as_str().unwrap().len(), 16);
        assert_eq!(lines[1]["fields"]["message"], "inside");
    }
}
