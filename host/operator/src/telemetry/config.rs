//! What the trace settings mean: the flags of `run` and `up`, each also read from the
//! OpenTelemetry SDK's standard environment variable of the same name and from the
//! configuration file under the flag's name, resolved into one checked [`TraceConfig`].
//!
//! Tracing is off unless an endpoint is given: an operator that starts exporting to a default
//! address nobody listens on would only count dropped spans. Everything here is pure: the
//! exporter is built from the result elsewhere ([`super::start`]).

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// The trace flags shared by `run` and `up`.
#[derive(Args, Debug, Clone, Default)]
pub struct TraceArgs {
    /// OTLP endpoint spans are exported to (`http://HOST:PORT`); tracing is off without it.
    /// With http/protobuf, `/v1/traces` is appended.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otel_exporter_otlp_endpoint: Option<String>,
    /// OTLP endpoint of traces only, used as given (overrides --otel-exporter-otlp-endpoint).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL")]
    pub otel_exporter_otlp_traces_endpoint: Option<String>,
    /// OTLP transport [default: grpc].
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum)]
    pub otel_exporter_otlp_protocol: Option<Protocol>,
    /// The service name spans carry [default: tfjob-operator].
    #[arg(long, env = "OTEL_SERVICE_NAME", value_name = "NAME")]
    pub otel_service_name: Option<String>,
    /// Which traces are recorded [default: parentbased_always_on].
    #[arg(long, env = "OTEL_TRACES_SAMPLER", value_enum)]
    pub otel_traces_sampler: Option<SamplerName>,
    /// The ratio (0 to 1) of the traceidratio samplers [default: 1].
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", value_name = "RATIO")]
    pub otel_traces_sampler_arg: Option<String>,
    /// Attributes every span's resource carries: `key=value,...`, values percent-encoded.
    #[arg(long, env = "OTEL_RESOURCE_ATTRIBUTES", value_name = "LIST")]
    pub otel_resource_attributes: Option<String>,
    /// Turn tracing off whatever else is set.
    #[arg(long, env = "OTEL_SDK_DISABLED")]
    pub otel_sdk_disabled: bool,
    /// Ended spans waiting for export at most; a span ending while the queue is full is dropped
    /// and counted (`tfjob_operator_trace_spans_dropped_total`), never waited for.
    #[arg(long, value_name = "SPANS", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub otel_span_queue_size: u32,
}

/// An OTLP transport, named as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    #[value(name = "grpc")]
    Grpc,
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// A sampler, named as `OTEL_TRACES_SAMPLER` names it.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum SamplerName {
    AlwaysOn,
    AlwaysOff,
    Traceidratio,
    ParentbasedAlwaysOn,
    ParentbasedAlwaysOff,
    ParentbasedTraceidratio,
}

/// Which traces are recorded, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    /// A root span decided by the inner sampling; a child follows its parent.
    ParentBased(Root),
}

/// The decision for a root span under a parent-based sampler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

/// The resolved trace settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceConfig {
    /// Where spans go: the full URL for http/protobuf, the server for gRPC.
    pub endpoint: String,
    pub protocol: Protocol,
    pub service_name: String,
    pub sampling: Sampling,
    /// `OTEL_RESOURCE_ATTRIBUTES`, decoded, in key order.
    pub resource_attributes: BTreeMap<String, String>,
    pub queue_size: usize,
    /// How long one batch may take to export before it is given up and counted as dropped.
    pub export_timeout: Duration,
}

/// A trace setting that cannot be used, naming the flag and its variable.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TraceConfigError {
    #[error("{setting}: {value:?} is not an OTLP endpoint: {reason} (expected http://HOST:PORT)")]
    Endpoint {
        setting: &'static str,
        value: String,
        reason: String,
    },
    #[error(
        "OTEL_TRACES_SAMPLER_ARG (--otel-traces-sampler-arg): {value:?} is not a ratio from 0 to 1"
    )]
    Ratio { value: String },
    #[error("OTEL_RESOURCE_ATTRIBUTES (--otel-resource-attributes): entry {entry}: {reason}")]
    ResourceAttribute { entry: usize, reason: &'static str },
    #[error("OTEL_SERVICE_NAME (--otel-service-name) is empty")]
    EmptyServiceName,
}

const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT (--otel-exporter-otlp-endpoint)";
const TRACES_ENDPOINT: &str =
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (--otel-exporter-otlp-traces-endpoint)";

/// The SDK's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`'s default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest resource attribute list accepted: a list is a few names; anything far larger
/// would ride along on every exported batch.
const MAX_RESOURCE_ATTRIBUTES_BYTES: usize = 4096;

impl TraceArgs {
    /// The checked settings, or `None` when tracing is off (no endpoint, or disabled).
    pub fn resolve(&self) -> Result<Option<TraceConfig>, TraceConfigError> {
        if self.otel_sdk_disabled {
            return Ok(None);
        }
        let protocol = self.otel_exporter_otlp_protocol.unwrap_or(Protocol::Grpc);
        let endpoint = match (
            non_empty(&self.otel_exporter_otlp_traces_endpoint),
            non_empty(&self.otel_exporter_otlp_endpoint),
        ) {
            (Some(traces), _) => checked_endpoint(TRACES_ENDPOINT, traces)?.to_owned(),
            (None, Some(general)) => {
                let base = checked_endpoint(ENDPOINT, general)?;
                match protocol {
                    Protocol::Grpc => base.to_owned(),
                    // The general endpoint names the collector; each signal has its own path.
                    Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
                }
            }
            (None, None) => return Ok(None),
        };
        let service_name = match &self.otel_service_name {
            Some(name) if name.trim().is_empty() => return Err(TraceConfigError::EmptyServiceName),
            Some(name) => name.clone(),
            None => "tfjob-operator".to_owned(),
        };
        Ok(Some(TraceConfig {
            endpoint,
            protocol,
            service_name,
            sampling: sampling(
                self.otel_traces_sampler
                    .unwrap_or(SamplerName::ParentbasedAlwaysOn),
                self.otel_traces_sampler_arg.as_deref(),
            )?,
            resource_attributes: match &self.otel_resource_attributes {
                Some(list) => resource_attributes(list)?,
                None => BTreeMap::new(),
            },
            queue_size: self.otel_span_queue_size as usize,
            export_timeout: EXPORT_TIMEOUT,
        }))
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Checks that `value` is an absolute `http://` URL with a host. `https://` is refused: the
/// exporters are built without TLS, and a collector on loopback or a sidecar is the
/// deployment this serves.
fn checked_endpoint<'a>(
    setting: &'static str,
    value: &'a str,
) -> Result<&'a str, TraceConfigError> {
    let refuse = |reason: String| TraceConfigError::Endpoint {
        setting,
        value: value.to_owned(),
        reason,
    };
    let uri: http::Uri = value.parse().map_err(|e| refuse(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(refuse(
                "TLS to the collector is not supported; export to a collector on loopback or in \
                 a sidecar"
                    .to_owned(),
            ));
        }
        _ => return Err(refuse("no http:// scheme".to_owned())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(refuse("no host".to_owned()));
    }
    Ok(value)
}

fn sampling(name: SamplerName, arg: Option<&str>) -> Result<Sampling, TraceConfigError> {
    let ratio = || match arg.map(str::trim).filter(|a| !a.is_empty()) {
        None => Ok(1.0),
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| TraceConfigError::Ratio {
                value: text.to_owned(),
            }),
    };
    Ok(match name {
        SamplerName::AlwaysOn => Sampling::AlwaysOn,
        SamplerName::AlwaysOff => Sampling::AlwaysOff,
        SamplerName::Traceidratio => Sampling::Ratio(ratio()?),
        SamplerName::ParentbasedAlwaysOn => Sampling::ParentBased(Root::AlwaysOn),
        SamplerName::ParentbasedAlwaysOff => Sampling::ParentBased(Root::AlwaysOff),
        SamplerName::ParentbasedTraceidratio => Sampling::ParentBased(Root::Ratio(ratio()?)),
    })
}

/// Parses `key=value,...` as the SDK specification writes it: keys and values trimmed,
/// values percent-decoded to UTF-8. A malformed entry refuses the whole list, naming it
/// (counted from 1), rather than dropping attributes silently.
fn resource_attributes(list: &str) -> Result<BTreeMap<String, String>, TraceConfigError> {
    let fail = |entry: usize, reason| TraceConfigError::ResourceAttribute { entry, reason };
    if list.len() > MAX_RESOURCE_ATTRIBUTES_BYTES {
        return Err(fail(0, "the list is longer than 4096 bytes"));
    }
    let mut attributes = BTreeMap::new();
    for (index, entry) in list.split(',').enumerate() {
        let number = index + 1;
        if entry.trim().is_empty() {
            continue;
        }
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| fail(number, "no `=` between key and value"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(fail(number, "empty key"));
        }
        if !key.is_ascii() {
            return Err(fail(number, "keys are ASCII; percent-encode values only"));
        }
        let value = percent_decoded(value.trim()).map_err(|reason| fail(number, reason))?;
        attributes.insert(key.to_owned(), value);
    }
    Ok(attributes)
}

/// Decodes `%XX` escapes, refusing a `%` not followed by two hex digits and bytes that are not
/// UTF-8 once decoded.
fn percent_decoded(value: &str) -> Result<String, &'static str> {
    let bytes = value.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
        {
            return Err("a `%` not followed by two hex digits");
        }
    }
    percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| "the decoded value is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_endpoint(endpoint: &str) -> TraceArgs {
        TraceArgs {
            otel_exporter_otlp_endpoint: Some(endpoint.to_owned()),
            otel_span_queue_size: 2048,
            ..TraceArgs::default()
        }
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(TraceArgs::default().resolve(), Ok(None));
        let blank = with_endpoint("  ");
        assert_eq!(blank.resolve(), Ok(None));
        let disabled = TraceArgs {
            otel_sdk_disabled: true,
            ..with_endpoint("http://127.0.0.1:4317")
        };
        assert_eq!(disabled.resolve(), Ok(None));
    }

    #[test]
    fn the_defaults_follow_the_sdk_specification() {
        let config = with_endpoint("http://127.0.0.1:4317")
            .resolve()
            .unwrap()
            .unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:4317");
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.service_name, "tfjob-operator");
        assert_eq!(config.sampling, Sampling::ParentBased(Root::AlwaysOn));
        assert!(config.resource_attributes.is_empty());
        assert_eq!(config.queue_size, 2048);
    }

    #[test]
    fn http_appends_the_traces_path_to_the_general_endpoint_only() {
        let mut args = with_endpoint("http://collector:4318/");
        args.otel_exporter_otlp_protocol = Some(Protocol::HttpProtobuf);
        assert_eq!(
            args.resolve().unwrap().unwrap().endpoint,
            "http://collector:4318/v1/traces"
        );
        args.otel_exporter_otlp_traces_endpoint = Some("http://other:4318/custom".to_owned());
        assert_eq!(
            args.resolve().unwrap().unwrap().endpoint,
            "http://other:4318/custom"
        );
    }

    #[test]
    fn a_bad_endpoint_names_its_variable() {
        for bad in [
            "collector:4317",
            "https://collector:4317",
            "http://",
            "ftp://x",
            "http://a b",
        ] {
            let error = with_endpoint(bad).resolve().unwrap_err();
            assert!(
                error.to_string().starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"),
                "{bad}: {error}"
            );
        }
        let args = TraceArgs {
            otel_exporter_otlp_traces_endpoint: Some("nonsense".to_owned()),
            ..with_endpoint("http://fine:4317")
        };
        assert!(matches!(
            args.resolve(),
            Err(TraceConfigError::Endpoint { setting, .. }) if setting == TRACES_ENDPOINT
        ));
    }

    #[test]
    fn sampler_ratios_are_checked() {
        let resolve = |name, arg: Option<&str>| {
            let args = TraceArgs {
                otel_traces_sampler: Some(name),
                otel_traces_sampler_arg: arg.map(str::to_owned),
                ..with_endpoint("http://127.0.0.1:4317")
            };
            args.resolve().map(|c| c.unwrap().sampling)
        };
        assert_eq!(
            resolve(SamplerName::Traceidratio, Some("0.25")),
            Ok(Sampling::Ratio(0.25))
        );
        assert_eq!(
            resolve(SamplerName::ParentbasedTraceidratio, None),
            Ok(Sampling::ParentBased(Root::Ratio(1.0)))
        );
        assert_eq!(
            resolve(SamplerName::Traceidratio, Some("0")),
            Ok(Sampling::Ratio(0.0))
        );
        assert_eq!(
            resolve(SamplerName::AlwaysOff, Some("ignored")),
            Ok(Sampling::AlwaysOff)
        );
        for bad in ["NaN", "1.5", "-0.1", "inf", "１", "half"] {
            assert_eq!(
                resolve(SamplerName::Traceidratio, Some(bad)),
                Err(TraceConfigError::Ratio {
                    value: bad.to_owned()
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn resource_attributes_are_decoded_or_refused_whole() {
        let parsed = resource_attributes(
            " deployment.environment = prod ,team=ml%20platform,,city=K%C3%B6ln,empty=",
        )
        .unwrap();
        assert_eq!(
            parsed,
            BTreeMap::from([
                ("city".to_owned(), "Köln".to_owned()),
                ("deployment.environment".to_owned(), "prod".to_owned()),
                ("empty".to_owned(), String::new()),
                ("team".to_owned(), "ml platform".to_owned()),
            ])
        );
        let refused = |list: &str| resource_attributes(list).unwrap_err();
        assert_eq!(
            refused("a=1,b"),
            TraceConfigError::ResourceAttribute {
                entry: 2,
                reason: "no `=` between key and value"
            }
        );
        assert!(matches!(
            refused("a=%zz"),
            TraceConfigError::ResourceAttribute { entry: 1, .. }
        ));
        assert!(matches!(
            refused("a=%C3"),
            TraceConfigError::ResourceAttribute { entry: 1, .. }
        ));
        assert!(matches!(
            refused("a=%4"),
            TraceConfigError::ResourceAttribute { entry: 1, .. }
        ));
        assert!(matches!(
            refused("=v"),
            TraceConfigError::ResourceAttribute { entry: 1, .. }
        ));
        assert!(matches!(
            refused("ké=v"),
            TraceConfigError::ResourceAttribute { entry: 1, .. }
        ));
        assert!(matches!(
            refused(&"k=v,".repeat(2000)),
            TraceConfigError::ResourceAttribute { entry: 0, .. }
        ));
        // Multi-byte text in a value is fine when percent-encoded or given as is.
        assert_eq!(resource_attributes("k=日本").unwrap()["k"], "日本");
    }
}
