//! Traces of `tfjob-operator up` and `run`, received on loopback: by the test-support crate's
//! OTLP/HTTP receiver, its requests decoded here with the protocol's own messages, and by an
//! independent receiver in Python (`tests/python/otlp_receiver.py`); and a collector that is
//! down or never answers. No collector is involved.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Kubectl as _;
use common::up::Up;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// One received span with what the test reads of it.
#[derive(Clone, Debug)]
struct Received {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: HashMap<String, String>,
    links: Vec<Vec<u8>>,
    /// The span's events: name and attributes.
    events: Vec<(String, HashMap<String, String>)>,
    service_name: String,
}

/// The received spans.
type Spans = Arc<Mutex<Vec<Received>>>;

/// An OTLP/HTTP receiver on loopback whose spans, decoded with the protocol's own messages,
/// collect in the returned list as they arrive.
fn receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let decoded = Arc::clone(&spans);
    let receiver = tfjob_test_support::otlp::Receiver::start_with(move |body| {
        let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
        record(&request, &decoded);
    });
    (receiver.endpoint(), spans)
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn record(request: &ExportTraceServiceRequest, spans: &Spans) {
    let mut spans = spans.lock().unwrap();
    for resource_spans in &request.resource_spans {
        let service_name = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                spans.push(received(span, &service_name));
            }
        }
    }
}

fn attributes(
    list: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> HashMap<String, String> {
    list.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
            )
        })
        .collect()
}

fn received(span: &Span, service_name: &str) -> Received {
    Received {
        name: span.name.clone(),
        trace_id: span.trace_id.clone(),
        span_id: span.span_id.clone(),
        parent_span_id: span.parent_span_id.clone(),
        attributes: attributes(&span.attributes),
        links: span.links.iter().map(|l| l.trace_id.clone()).collect(),
        events: span
            .events
            .iter()
            .map(|e| (e.name.clone(), attributes(&e.attributes)))
            .collect(),
        service_name: service_name.to_owned(),
    }
}

/// The trace a pipeline submitted the job in.
const SUBMITTER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn job(name: &str, traceparent: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: {name}\n  namespace: default\n  \
         annotations:\n    tracing.k8s.io/traceparent: \"{traceparent}\"\nspec:\n  tfReplicaSpecs:\n    \
         Worker:\n      replicas: 1\n      restartPolicy: Never\n      template:\n        metadata:\n          \
         annotations:\n            sim.tfjob.dev/duration: \"1s\"\n        spec:\n          containers:\n          \
         - name: tensorflow\n            image: kubeflow/tf-dist-mnist-test:latest\n"
    )
}

#[test]
fn up_exports_the_reconciles_policy_calls_and_api_requests_of_a_job_over_otlp_http() {
    let (endpoint, spans) = receiver();
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(
        &[
            "--otel-exporter-otlp-endpoint",
            &endpoint,
            "--otel-exporter-otlp-protocol",
            "http/protobuf",
            "--otel-service-name",
            "tfjob-operator-e2e",
        ],
        dir.path(),
    );
    // A policy of a platform team, from a ConfigMap: the team-labels example in Rust, which
    // logs a line for every pod it labels.
    let built = tfjob_test_support::build_rust(
        &["example-team-labels"],
        &common::policy_target_dir("examples"),
    );
    // Packed and shipped as the policy author's guide says (`policy pack --gzip`, then
    // `kubectl apply --server-side`): a Rust component is too large for a ConfigMap unpacked.
    let settings = dir.path().join("settings.yaml");
    std::fs::write(&settings, "team: ml\n").unwrap();
    let mut pack = common::operator();
    pack.args([
        "policy",
        "pack",
        "--name",
        "team-labels",
        "--hooks",
        "decorate",
        "--gzip",
    ])
    .arg("--wasm")
    .arg(built.join("example_team_labels.wasm"))
    .arg("--settings")
    .arg(&settings);
    let packed = common::expect_exit_zero(
        &common::run(pack, None, Duration::from_secs(120)),
        "policy pack",
    );
    let shipped = up.kubectl_with(
        &["apply", "--server-side", "-f", "-", "-o", "name"],
        Some(&packed),
    );
    assert_eq!(shipped.trim(), "configmap/tfjob-policy-team-labels");
    up.kubectl_until(
        Duration::from_secs(120),
        &[
            "-n",
            "tfjob-system",
            "get",
            "configmap",
            "tfjob-policy-team-labels",
            "-o",
            "jsonpath={.metadata.annotations.policy\\.tfjob\\.dev/status}",
        ],
        |text| {
            serde_json::from_str::<serde_json::Value>(text).is_ok_and(|s| s["state"] == "Active")
        },
    );
    let policy_calls = one_traced_job(&up, &spans, "tfjob-operator-e2e");
    // The team's policy was called for the job's pod, and its log line is an event of the call.
    let labelling = policy_calls
        .iter()
        .filter(|c| c.attributes["policy"] == "team-labels")
        .flat_map(|c| &c.events)
        .find(|(name, _)| name == "labelling pod")
        .unwrap_or_else(|| panic!("no guest log event among {policy_calls:?}"));
    assert!(labelling.1["fields"].contains("team=ml"), "{labelling:?}");
}

/// Submits a job whose annotation names the submitter's trace and one whose annotation is not a
/// trace context, waits for both to be reconciled and the first to succeed, and checks what the
/// receiver got: the reconciles (linked, or not), their seat waits, policy calls and API
/// requests. Returns the policy calls of the first job's reconciles.
fn one_traced_job(up: &Up, spans: &Spans, service: &str) -> Vec<Received> {
    up.kubectl_with(
        &["apply", "-f", "-"],
        Some(&job(
            "traced",
            &format!("00-{SUBMITTER_TRACE}-00f067aa0ba902b7-01"),
        )),
    );
    // A job whose annotation is not a trace context is reconciled all the same, unlinked.
    up.kubectl_with(
        &["apply", "-f", "-"],
        Some(&job("untraced", "00-ＮＯＴ-a-trace-ｃｏｎｔｅｘｔ")),
    );

    let submitter = hex::decode(SUBMITTER_TRACE).unwrap();
    let of_job = |name: &'static str| {
        move |s: &Received| {
            s.name == "reconcile"
                && s.attributes.get("tfjob.name").map(String::as_str) == Some(name)
        }
    };
    // Both jobs run to the end; the reconcile that saw it recorded how it ended.
    let (reconciles, all) = common::eventually(
        "the reconciles of both jobs, the last seeing them succeed",
        || {
            let all = spans.lock().unwrap().clone();
            let traced: Vec<Received> = all
                .iter()
                .filter(|s| of_job("traced")(s))
                .cloned()
                .collect();
            let untraced = all.iter().filter(|s| of_job("untraced")(s)).count();
            let succeeded = up.kubectl(&[
                "get",
                "tfjob",
                "traced",
                "-o",
                "jsonpath={.status.conditions[-1:].type}",
            ]);
            (traced.len() >= 2 && untraced >= 1 && succeeded == "Succeeded")
                .then_some((traced, all))
        },
    );
    for reconcile in &reconciles {
        assert_eq!(reconcile.service_name, service);
        assert_eq!(reconcile.attributes["k8s.namespace.name"], "default");
        assert!(!reconcile.attributes["tfjob.uid"].is_empty());
        assert_eq!(reconcile.attributes["tfjob.generation"], "1");
        assert!(
            reconcile.attributes.contains_key("outcome"),
            "{reconcile:?}"
        );
        // Linked to the submitter's trace, and a trace of its own.
        assert_eq!(
            reconcile.links,
            std::slice::from_ref(&submitter),
            "{reconcile:?}"
        );
        assert_ne!(reconcile.trace_id, submitter);
        assert!(reconcile.parent_span_id.is_empty(), "a reconcile is a root");
    }
    for unlinked in all.iter().filter(|s| of_job("untraced")(s)) {
        assert!(unlinked.links.is_empty(), "{unlinked:?}");
    }
    let in_reconcile = |span: &Received, name: &str| {
        span.name == name
            && reconciles
                .iter()
                .any(|r| r.trace_id == span.trace_id && r.span_id == span.parent_span_id)
    };
    // The reconcile's wait for its seat, its policy calls and its API requests are its
    // children.
    let seat_waits = all.iter().filter(|s| in_reconcile(s, "seat wait")).count();
    assert!(seat_waits >= 2, "{seat_waits} seat waits");
    let policy_calls: Vec<&Received> = all
        .iter()
        .filter(|s| s.name == "policy call" && reconciles.iter().any(|r| r.trace_id == s.trace_id))
        .collect();
    assert!(
        policy_calls
            .iter()
            .any(|c| c.attributes["hook"] == "decorate"),
        "{policy_calls:?}"
    );
    for call in &policy_calls {
        assert!(!call.attributes["policy"].is_empty());
        assert_eq!(call.attributes["policy.digest"].len(), 64, "{call:?}");
        assert_eq!(call.attributes["outcome"], "ok", "{call:?}");
        // Each call names the pod it is about: one of this job's.
        assert!(
            call.attributes["k8s.pod.name"].starts_with("traced-"),
            "{call:?}"
        );
    }
    // Each request's span is named after what it does (`create pods`, `update tfjobs/status`).
    let requests: Vec<&Received> = all
        .iter()
        .filter(|s| s.attributes.contains_key("k8s.verb") && in_reconcile(s, &s.name))
        .collect();
    let creation = requests
        .iter()
        .find(|r| {
            r.name == "create pods"
                && r.attributes["k8s.verb"] == "create"
                && r.attributes["k8s.resource"] == "pods"
                && r.attributes["http.method"] == "POST"
                && r.attributes["http.url"].contains("/namespaces/default/pods")
                && r.attributes["http.status_code"] == "201"
        })
        .unwrap_or_else(|| panic!("no pod creation among {requests:?}"));
    // The API server's side of the same request is its child, in the same trace: the
    // operator's client sent the request span's context in a `traceparent` header.
    let served: Vec<&Received> = all
        .iter()
        .filter(|s| s.trace_id == creation.trace_id && s.parent_span_id == creation.span_id)
        .collect();
    assert!(
        served.iter().any(|s| s.name == "serve create pods"
            && s.attributes["http.method"] == "POST"
            && s.attributes["http.status_code"] == "201"),
        "no server span under {creation:?}: {served:?}"
    );
    policy_calls.into_iter().cloned().collect()
}

/// A span line of `tests/python/otlp_receiver.py`.
fn from_python(line: &str) -> Received {
    let span: serde_json::Value = serde_json::from_str(line).expect("a JSON span line");
    let bytes = |key: &str| hex::decode(span[key].as_str().unwrap_or_default()).unwrap();
    let strings = |value: &serde_json::Value| -> HashMap<String, String> {
        value
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    Received {
        name: span["name"].as_str().unwrap().to_owned(),
        trace_id: bytes("traceId"),
        span_id: bytes("spanId"),
        parent_span_id: bytes("parentSpanId"),
        attributes: strings(&span["attributes"]),
        links: span["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| hex::decode(l.as_str().unwrap()).unwrap())
            .collect(),
        events: span["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    strings(&e["attributes"]),
                )
            })
            .collect(),
        service_name: span["service"].as_str().unwrap().to_owned(),
    }
}

/// The same job, seen by a receiver written independently of this code base: Python, with the
/// protocol's messages from PyPI's `opentelemetry-proto`, and the exporter over gRPC's sibling,
/// http/protobuf, configured through the standard environment variables.
#[test]
fn up_reports_a_job_to_an_independent_python_receiver() {
    let Some(python) = std::env::var_os("TFJOB_PYTHON") else {
        eprintln!(
            "SKIPPED: TFJOB_PYTHON is not set; point it at a Python with opentelemetry-proto \
             (tests/run sets one up)"
        );
        return;
    };
    let mut receiver = std::process::Command::new(python)
        .arg(common::repo("tests/python/otlp_receiver.py"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("the receiver starts");
    let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the receiver's first line").unwrap();
    let port: u16 = first
        .strip_prefix("listening on ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    let spans: Spans = Arc::default();
    let received = Arc::clone(&spans);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            received.lock().unwrap().push(from_python(&line));
        }
    });
    let _receiver = common::Killed(receiver);

    let dir = tempfile::tempdir().unwrap();
    let up = Up::start_with_env(
        &[],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "tfjob-operator-python-e2e"),
        ],
        dir.path(),
    );
    one_traced_job(&up, &spans, "tfjob-operator-python-e2e");
}

#[test]
fn a_collector_that_is_down_or_never_answers_costs_the_jobs_nothing_and_counts_dropped_spans() {
    let cluster = common::cluster::Cluster::start(|_| {});
    // Down: a port nothing listens on. Silent: accepts every connection and never answers.
    let down = common::free_addr();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    for (name, endpoint, protocol) in [
        ("collector-down", down, "grpc"),
        ("collector-silent", silent_addr, "http/protobuf"),
    ] {
        let metrics = common::free_addr();
        let endpoint = format!("http://{endpoint}");
        // The standard environment variables, as a Deployment would set them.
        let _operator = cluster.operator(
            &["--metrics-bind-address", &metrics.to_string()],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
            ],
        );
        cluster.submit("ml", name);
        common::eventually(&format!("{name}: the job succeeds"), || {
            (cluster.state("ml", name).as_deref() == Some("Succeeded")).then_some(())
        });
        // The batches that held the job's spans failed (refused, or out of time) and are
        // counted: its reconciles, seat waits, policy calls and API requests are well over ten.
        common::eventually(
            &format!("{name}: the job's spans counted as dropped"),
            || {
                common::cluster::metric(metrics, "tfjob_operator_trace_spans_dropped_total")
                    .filter(|d| *d >= 10.0)
            },
        );
        assert_eq!(
            common::cluster::metric(metrics, "tfjob_operator_trace_spans_exported_total"),
            Some(0.0),
            "{name}"
        );
        // The reconciles were traced all the same: the duration buckets they fell in name
        // their traces as exemplars.
        let (_, body) = common::http_get(metrics, "/metrics").expect("the metrics");
        let exemplar = body
            .lines()
            .filter(|l| l.starts_with("tfjob_operator_reconcile_duration_seconds_bucket"))
            .find_map(|l| {
                l.split_once(" # {trace_id=\"")
                    .map(|(_, rest)| rest[..32].to_owned())
            })
            .unwrap_or_else(|| panic!("{name}: no exemplar in {body}"));
        assert!(
            exemplar.bytes().all(|b| b.is_ascii_hexdigit()) && exemplar != "0".repeat(32),
            "{exemplar}"
        );
    }
}
