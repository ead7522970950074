//! What the trace settings mean: the flags of `run` and `up`, each also read from the
//! OpenTelemetry SDK's standard environment variable of the same name and from the
//! configuration file under the flag's name, resolved into one checked [`TraceConfig`].
//!
//! Each value is checked by its flag's own parser, so a bad one is reported against the flag,
//! the variable or the file's key it came from, before anything starts.
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
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL", value_parser = endpoint)]
    pub otel_exporter_otlp_endpoint: Option<String>,
    /// OTLP endpoint of traces only, used as given (overrides --otel-exporter-otlp-endpoint).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL", value_parser = endpoint)]
    pub otel_exporter_otlp_traces_endpoint: Option<String>,
    /// OTLP transport [default: grpc].
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum)]
    pub otel_exporter_otlp_protocol: Option<Protocol>,
    /// The service name spans carry [default: tfjob-operator].
    #[arg(long, env = "OTEL_SERVICE_NAME", value_name = "NAME", value_parser = service_name)]
    pub otel_service_name: Option<String>,
    /// Which traces are recorded [default: parentbased_always_on].
    #[arg(long, env = "OTEL_TRACES_SAMPLER", value_enum)]
    pub otel_traces_sampler: Option<SamplerName>,
    /// The ratio (0 to 1) of the traceidratio samplers [default: 1].
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", value_name = "RATIO", value_parser = ratio)]
    pub otel_traces_sampler_arg: Option<f64>,
    /// Attributes every span's resource carries: `key=value,...`, values percent-encoded.
    #[arg(long, env = "OTEL_RESOURCE_ATTRIBUTES", value_name = "LIST", value_parser = resource_attributes)]
    pub otel_resource_attributes: Option<ResourceAttributes>,
    /// Turn tracing off whatever else is set.
    #[arg(long, env = "OTEL_SDK_DISABLED")]
    pub otel_sdk_disabled: bool,
    /// Ended spans waiting for export at most; a span ending while the queue is full is dropped
    /// and counted (`tfjob_operator_trace_spans_dropped_total`), never waited for.
    #[arg(long, value_name = "SPANS", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub otel_span_queue_size: u32,
}

/// `OTEL_RESOURCE_ATTRIBUTES`, decoded, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes(pub BTreeMap<String, String>);

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

/// The SDK's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`'s default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest resource attribute list accepted: a list is a few names; anything far larger
/// would ride along on every exported batch.
const MAX_RESOURCE_ATTRIBUTES_BYTES: usize = 4096;

impl TraceArgs {
    /// The settings, or `None` when tracing is off (no endpoint, or disabled). Every value was
    /// checked when it was parsed.
    pub fn resolve(&self) -> Option<TraceConfig> {
        if self.otel_sdk_disabled {
            return None;
        }
        let protocol = self.otel_exporter_otlp_protocol.unwrap_or(Protocol::Grpc);
        let endpoint = match (
            non_empty(&self.otel_exporter_otlp_traces_endpoint),
            non_empty(&self.otel_exporter_otlp_endpoint),
        ) {
            (Some(traces), _) => traces.to_owned(),
            (None, Some(general)) => match protocol {
                Protocol::Grpc => general.to_owned(),
                // The general endpoint names the collector; each signal has its own path.
                Protocol::HttpProtobuf => format!("{}/v1/traces", general.trim_end_matches('/')),
            },
            (None, None) => return None,
        };
        let ratio = self.otel_traces_sampler_arg.unwrap_or(1.0);
        let sampling = match self
            .otel_traces_sampler
            .unwrap_or(SamplerName::ParentbasedAlwaysOn)
        {
            SamplerName::AlwaysOn => Sampling::AlwaysOn,
            SamplerName::AlwaysOff => Sampling::AlwaysOff,
            SamplerName::Traceidratio => Sampling::Ratio(ratio),
            SamplerName::ParentbasedAlwaysOn => Sampling::ParentBased(Root::AlwaysOn),
            SamplerName::ParentbasedAlwaysOff => Sampling::ParentBased(Root::AlwaysOff),
            SamplerName::ParentbasedTraceidratio => Sampling::ParentBased(Root::Ratio(ratio)),
        };
        Some(TraceConfig {
            endpoint,
            protocol,
            // As the SDK specification orders it: the service name's own setting, then a
            // `service.name` among the resource attributes, then the default.
            service_name: self
                .otel_service_name
                .clone()
                .or_else(|| {
                    self.otel_resource_attributes
                        .as_ref()
                        .and_then(|a| a.0.get("service.name").cloned())
                })
                .unwrap_or_else(|| "tfjob-operator".to_owned()),
            sampling,
            resource_attributes: self.otel_resource_attributes.clone().unwrap_or_default().0,
            queue_size: self.otel_span_queue_size as usize,
            export_timeout: EXPORT_TIMEOUT,
        })
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Checks an endpoint: an absolute `http://` URL with a host, or empty (no endpoint).
/// `https://` is refused: the exporters are built without TLS, and a collector on loopback or
/// in a sidecar is the deployment this serves.
fn endpoint(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(String::new());
    }
    let uri: http::Uri = value
        .parse()
        .map_err(|e| format!("not a URL ({e}); expected http://HOST:PORT"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "TLS to the collector is not supported; export to a collector on \
                        loopback or in a sidecar (http://HOST:PORT)"
                    .to_owned(),
            );
        }
        _ => return Err("no http:// scheme; expected http://HOST:PORT".to_owned()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("no host; expected http://HOST:PORT".to_owned());
    }
    Ok(value.to_owned())
}

fn service_name(value: &str) -> Result<String, String> {
    match value.trim() {
        "" => Err("must not be empty".to_owned()),
        name => Ok(name.to_owned()),
    }
}

/// A sampling ratio: a number from 0 to 1 (not NaN).
fn ratio(value: &str) -> Result<f64, String> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| "not a ratio from 0 to 1".to_owned())
}

/// Parses `key=value,...` as the SDK specification writes it: keys and values trimmed,
/// values percent-decoded to UTF-8. A malformed entry refuses the whole list, naming it
/// (counted from 1), rather than dropping attributes silently.
fn resource_attributes(list: &str) -> Result<ResourceAttributes, String> {
    if list.len() > MAX_RESOURCE_ATTRIBUTES_BYTES {
        return Err(format!("longer than {MAX_RESOURCE_ATTRIBUTES_BYTES} bytes"));
    }
    let mut attributes = BTreeMap::new();
    for (index, entry) in list.split(',').enumerate() {
        let fail = |reason: &str| format!("entry {}: {reason}", index + 1);
        if entry.trim().is_empty() {
            continue;
        }
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| fail("no `=` between key and value"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(fail("empty key"));
        }
        if !key.is_ascii() {
            return Err(fail("keys are ASCII; percent-encode values only"));
        }
        let value = percent_decoded(value.trim()).map_err(fail)?;
        attributes.insert(key.to_owned(), value);
    }
    Ok(ResourceAttributes(attributes))
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
    use clap::Parser;

    /// The trace flags as `run` and `up` take them.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        traces: TraceArgs,
    }

    fn parse(flags: &[&str]) -> Result<TraceArgs, String> {
        Cli::try_parse_from(std::iter::once("tfjob-operator").chain(flags.iter().copied()))
            .map(|cli| cli.traces)
            .map_err(|e| e.to_string())
    }

    fn resolve(flags: &[&str]) -> Option<TraceConfig> {
        parse(flags).expect("valid flags").resolve()
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(resolve(&[]), None);
        assert_eq!(resolve(&["--otel-exporter-otlp-endpoint", "  "]), None);
        assert_eq!(
            resolve(&[
                "--otel-exporter-otlp-endpoint",
                "http://127.0.0.1:4317",
                "--otel-sdk-disabled"
            ]),
            None
        );
    }

    #[test]
    fn the_defaults_follow_the_sdk_specification() {
        let config = resolve(&["--otel-exporter-otlp-endpoint", "http://127.0.0.1:4317"]).unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:4317");
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.service_name, "tfjob-operator");
        assert_eq!(config.sampling, Sampling::ParentBased(Root::AlwaysOn));
        assert!(config.resource_attributes.is_empty());
        assert_eq!(config.queue_size, 2048);
    }

    #[test]
    fn the_service_name_comes_from_its_setting_then_the_resource_attributes() {
        let endpoint = ["--otel-exporter-otlp-endpoint", "http://127.0.0.1:4317"];
        let named = |extra: &[&str]| {
            let mut flags = endpoint.to_vec();
            flags.extend_from_slice(extra);
            resolve(&flags).unwrap().service_name
        };
        let attributes = ["--otel-resource-attributes", "service.name=trainer,team=ml"];
        assert_eq!(named(&attributes), "trainer");
        let mut both = attributes.to_vec();
        both.extend(["--otel-service-name", "operator-a"]);
        assert_eq!(named(&both), "operator-a");
    }

    #[test]
    fn http_appends_the_traces_path_to_the_general_endpoint_only() {
        let general = [
            "--otel-exporter-otlp-endpoint",
            "http://collector:4318/",
            "--otel-exporter-otlp-protocol",
            "http/protobuf",
        ];
        assert_eq!(
            resolve(&general).unwrap().endpoint,
            "http://collector:4318/v1/traces"
        );
        let mut both = general.to_vec();
        both.extend([
            "--otel-exporter-otlp-traces-endpoint",
            "http://other:4318/custom",
        ]);
        assert_eq!(resolve(&both).unwrap().endpoint, "http://other:4318/custom");
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_flag() {
        for (flag, bad) in [
            ("--otel-exporter-otlp-endpoint", "collector:4317"),
            ("--otel-exporter-otlp-endpoint", "https://collector:4317"),
            ("--otel-exporter-otlp-endpoint", "http://"),
            ("--otel-exporter-otlp-endpoint", "ftp://x"),
            ("--otel-exporter-otlp-endpoint", "http://a b"),
            ("--otel-exporter-otlp-traces-endpoint", "nonsense"),
            ("--otel-exporter-otlp-protocol", "http/json"),
            ("--otel-traces-sampler", "jaeger_remote"),
            ("--otel-service-name", " "),
            ("--otel-span-queue-size", "0"),
        ] {
            let error = parse(&[flag, bad]).unwrap_err();
            assert!(error.contains(flag), "{flag} {bad}: {error}");
        }
    }

    #[test]
    fn sampler_ratios_are_checked() {
        let sampling = |flags: &[&str]| {
            let mut all = vec!["--otel-exporter-otlp-endpoint", "http://127.0.0.1:4317"];
            all.extend_from_slice(flags);
            resolve(&all).unwrap().sampling
        };
        assert_eq!(
            sampling(&[
                "--otel-traces-sampler",
                "traceidratio",
                "--otel-traces-sampler-arg",
                "0.25"
            ]),
            Sampling::Ratio(0.25)
        );
        assert_eq!(
            sampling(&["--otel-traces-sampler", "parentbased_traceidratio"]),
            Sampling::ParentBased(Root::Ratio(1.0))
        );
        assert_eq!(
            sampling(&[
                "--otel-traces-sampler",
                "traceidratio",
                "--otel-traces-sampler-arg",
                "0"
            ]),
            Sampling::Ratio(0.0)
        );
        assert_eq!(
            sampling(&["--otel-traces-sampler", "always_off"]),
            Sampling::AlwaysOff
        );
        for bad in ["NaN", "1.5", "-0.1", "inf", "１", "half", ""] {
            let error = parse(&[&format!("--otel-traces-sampler-arg={bad}")]).unwrap_err();
            assert!(error.contains("not a ratio from 0 to 1"), "{bad}: {error}");
        }
    }

    #[test]
    fn resource_attributes_are_decoded_or_refused_whole() {
        let parsed = resource_attributes(
            " deployment.environment = prod ,team=ml%20platform,,city=K%C3%B6ln,empty=",
        )
        .unwrap();
        assert_eq!(
            parsed.0,
            BTreeMap::from([
                ("city".to_owned(), "Köln".to_owned()),
                ("deployment.environment".to_owned(), "prod".to_owned()),
                ("empty".to_owned(), String::new()),
                ("team".to_owned(), "ml platform".to_owned()),
            ])
        );
        let refused = |list: &str| resource_attributes(list).unwrap_err();
        assert_eq!(refused("a=1,b"), "entry 2: no `=` between key and value");
        for bad in ["a=%zz", "a=%C3", "a=%4", "=v", "ké=v"] {
            assert!(
                refused(bad).starts_with("entry 1: "),
                "{bad}: {}",
                refused(bad)
            );
        }
        assert!(refused(&"k=v,".repeat(2000)).starts_with("longer than"));
        // Multi-byte text in a value is fine, percent-encoded or as it is.
        assert_eq!(resource_attributes("k=日本").unwrap().0["k"], "日本");
        // Through the flag, the error names it.
        let error = parse(&["--otel-resource-attributes", "a=1,b"]).unwrap_err();
        assert!(error.contains("--otel-resource-attributes"), "{error}");
        assert!(error.contains("entry 2"), "{error}");
    }
}
