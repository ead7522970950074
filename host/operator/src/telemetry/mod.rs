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

pub use config::{TraceArgs, TraceConfig, TraceConfigError};
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
/// so that logs do not pay for them), kube-client's span of each API request (also `debug`),
/// and events at `info` and above, which become events of the span they happen in (a policy's
/// log lines in its call's). kube-runtime's span around each reconcile is left out: it covers
/// only the creation of the reconcile's future, not its run, and would be an empty trace each
/// time.
fn traced() -> Targets {
    Targets::new()
        .with_target(tfjob_planner::SPAN_TARGET, LevelFilter::DEBUG)
        .with_target("kube_client::client::builder", LevelFilter::DEBUG)
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
