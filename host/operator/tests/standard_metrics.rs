//! The standard metrics of a controller-runtime operator, served by `tfjob-operator run`: the
//! binary runs against the embedded cluster (started without its own operator) through a job
//! that succeeds, one that fails and a decoration policy that traps, and then its `/metrics` has
//! every family of controller-runtime, client-go's work queue, client-go's REST client and the
//! process, with values that agree with what happened; the existing families are still there.
//! And every metric the Grafana dashboard in `deploy/monitoring/` queries is one it serves.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tfjob_api::TFJob;
use tfjob_policy_engine::configmap;
use tfjob_policy_engine::{FailurePolicy, Hook, PolicyManifest, defaults};

use common::cluster::Cluster;
use common::eventually;

const JOBS_NS: &str = "ml";
const POLICY_NS: &str = "tfjob-system";
const TRAPPING_POLICY: &str = "traps";

// ---------------------------------------------------------------------------------------------
// The scrape

/// One sample of the text format: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the samples of an OpenMetrics text body (comments skipped).
fn parse_samples(body: &str) -> Vec<Sample> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().unwrap_or_else(|_| panic!("value of {line}")),
            }
        })
        .collect()
}

/// `k="v",k2="v2"`, values with `\"` and `\\` escapes.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_owned(), value);
        rest = &after[end..];
    }
    labels
}

/// The sum of the samples named `name` whose labels include `labels`; `None` when none is.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

// ---------------------------------------------------------------------------------------------
// The dashboard

/// PromQL words that are not metric names and take no parenthesised label list.
const KEYWORDS: [&str; 6] = ["bool", "and", "or", "unless", "offset", "atan2"];
/// PromQL words followed by a parenthesised list of label names.
const GROUPINGS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression reads: identifiers that are not functions (followed by
/// `(`), keywords, label names (inside `{}` or a grouping), durations (inside `[]`), strings,
/// numbers or dashboard variables (`$name`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_to = |from: usize, close: char| {
        // Past the matching `close`, ignoring its character inside strings.
        let mut j = from + 1;
        let mut quote = None;
        while j < chars.len() {
            match (quote, chars[j]) {
                (Some(_), '\\') => j += 1,
                (Some(q), c) if c == q => quote = None,
                (None, '"' | '\'' | '`') => quote = Some(chars[j]),
                (None, c) if c == close => return j + 1,
                _ => {}
            }
            j += 1;
        }
        chars.len()
    };
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip_to(i, '}');
        } else if c == '[' {
            i = skip_to(i, ']');
        } else if matches!(c, '"' | '\'' | '`') {
            // A string: skip to its closing quote.
            i = skip_to(i, c);
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            i += 1;
            while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if is_word(c) {
            let start = i;
            while i < chars.len() && is_word(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            // A function call, or an aggregation with its grouping first (`sum by (le) (...)`).
            let following: String = chars[next..].iter().take_while(|c| is_word(**c)).collect();
            let calls =
                chars.get(next) == Some(&'(') || ["by", "without"].contains(&following.as_str());
            if GROUPINGS.contains(&word.as_str()) {
                if calls {
                    i = skip_to(next, ')');
                }
            } else if !calls && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Every metric the dashboard reads: the panels' queries and the template variables' queries
/// (`label_values(SERIES, label)`: the series alone).
fn dashboard_metrics(dashboard: &Value) -> BTreeSet<String> {
    fn exprs(panel: &Value, out: &mut Vec<String>) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push(expr.to_owned());
            }
        }
        for inner in panel["panels"].as_array().into_iter().flatten() {
            exprs(inner, out);
        }
    }
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        exprs(panel, &mut all);
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            let series = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map_or(query, |(series, _)| series);
            all.push(series.to_owned());
        }
    }
    assert!(all.len() > 10, "the dashboard has its queries: {all:?}");
    all.iter().flat_map(|e| metric_names(e)).collect()
}

#[test]
fn metric_names_are_read_from_promql() {
    let expr = r#"histogram_quantile(0.99, sum by (le, verb) (rate(rest_client_request_duration_seconds_bucket{job=~"$job",code!="a{b}"}[$__rate_interval]))) / on (job) group_left () up offset 5m and bool process_open_fds / max without (instance) (process_max_fds)"#;
    assert_eq!(
        metric_names(expr),
        BTreeSet::from([
            "rest_client_request_duration_seconds_bucket".to_owned(),
            "up".to_owned(),
            "process_open_fds".to_owned(),
            "process_max_fds".to_owned(),
        ])
    );
}

// ---------------------------------------------------------------------------------------------
// The run

fn job(name: &str, annotations: Value) -> TFJob {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "namespace": JOBS_NS},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never",
            "template": {"metadata": {"annotations": annotations}, "spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
    }))
    .unwrap()
}

/// The last condition of a job, if it has any.
fn state(rt: &tokio::runtime::Runtime, jobs: &Api<TFJob>, name: &str) -> Option<String> {
    let job = rt.block_on(jobs.get(name)).unwrap();
    let conditions = job.status?.conditions;
    conditions.last().map(|c| format!("{:?}", c.type_))
}

#[test]
fn the_operator_serves_the_standard_controller_metrics_and_the_dashboards_queries() {
    let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let c = Cluster::start(|_| {});
    let rt = &c.runtime;
    let cluster = c.embedded();
    let client = c.client();

    // A decoration policy that traps in every call, ignored on failure: pods are still made,
    // and the policy error metrics count it.
    let trapping = configmap::pack(
        PolicyManifest {
            name: TRAPPING_POLICY.to_owned(),
            hooks: vec![Hook::Decorate],
            failure_policy: FailurePolicy::Ignore,
            settings: json!({"mode": "panic"}),
            ..PolicyManifest::default()
        },
        defaults::HOSTILE_POLICY_WASM,
        POLICY_NS,
        false,
    )
    .unwrap();
    rt.block_on(async {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in [JOBS_NS, POLICY_NS] {
            let ns = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            let _ = namespaces.create(&PostParams::default(), &ns).await;
        }
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), POLICY_NS);
        cms.create(&PostParams::default(), &trapping).await.unwrap();
    });

    let metrics = common::free_addr();
    let metrics_text = metrics.to_string();
    let _operator = c.operator(
        &[
            "--threads",
            "3",
            "--health-probe-bind-address",
            "0",
            "--metrics-bind-address",
            &metrics_text,
        ],
        &[],
    );
    eventually("the operator is ready", || {
        (common::http_get(metrics, "/readyz")?.0 == 200).then_some(())
    });
    // The trapping policy decorates the pods only once it is loaded: wait for its status, so
    // that a machine slow to compile it cannot let the jobs' pods through before it serves.
    let policy_name = trapping.metadata.name.clone().unwrap_or_default();
    let policies: Api<ConfigMap> = Api::namespaced(client.clone(), POLICY_NS);
    eventually("the trapping policy is active", || {
        let cm = rt.block_on(policies.get(&policy_name)).ok()?;
        let annotations = cm.metadata.annotations?;
        let status = annotations.get(configmap::STATUS_ANNOTATION)?;
        status.contains(r#""state":"Active""#).then_some(())
    });

    let jobs: Api<TFJob> = Api::namespaced(client.clone(), JOBS_NS);
    rt.block_on(async {
        let post = PostParams::default();
        jobs.create(&post, &job("succeeds", json!({})))
            .await
            .unwrap();
        let fails = job("fails", json!({"sim.tfjob.dev/exit-code": "1"}));
        jobs.create(&post, &fails).await.unwrap();
    });
    for (name, end) in [("succeeds", "Succeeded"), ("fails", "Failed")] {
        eventually(&format!("{name} ends {end}"), || {
            (state(rt, &jobs, name).as_deref() == Some(end)).then_some(())
        });
    }

    // Reconciles may still run (the finished jobs' last status writes): scrape until the
    // counts that describe the same reconciles agree.
    let scrape = |addr: SocketAddr| {
        let (status, body) = common::http_get(addr, "/metrics").expect("/metrics answers");
        assert_eq!(status, 200);
        (parse_samples(&body), body)
    };
    let controller = [("controller", "tfjob")];
    let queue = [("name", "tfjob"), ("controller", "tfjob")];
    let (samples, body) = eventually("the reconcile counts agree", || {
        let (samples, body) = scrape(metrics);
        let reconciles = value(&samples, "controller_runtime_reconcile_total", &controller)?;
        let timed = value(
            &samples,
            "controller_runtime_reconcile_time_seconds_count",
            &controller,
        )?;
        let worked = value(&samples, "workqueue_work_duration_seconds_count", &queue)?;
        let idle = value(&samples, "controller_runtime_active_workers", &controller)? == 0.0;
        // A requeue (the status batch's, say) may come due between two reconciles: it is a
        // request waiting for a worker, counted in the depth until its reconcile starts. The
        // queue must drain once the jobs are done, which the depth asserted below shows.
        let drained = value(&samples, "workqueue_depth", &queue)? == 0.0;
        (reconciles > 0.0 && reconciles == timed && timed == worked && idle && drained)
            .then_some((samples, body))
    });
    let get = |name: &str, labels: &[(&str, &str)]| {
        value(&samples, name, labels).unwrap_or_else(|| panic!("{name} {labels:?} in\n{body}"))
    };

    // controller-runtime's controller metrics.
    assert!(
        get(
            "controller_runtime_reconcile_total",
            &[("controller", "tfjob"), ("result", "success")]
        ) > 0.0
    );
    for result in ["error", "requeue", "requeue_after"] {
        get(
            "controller_runtime_reconcile_total",
            &[("controller", "tfjob"), ("result", result)],
        );
    }
    assert_eq!(
        get("controller_runtime_reconcile_errors_total", &controller),
        get(
            "controller_runtime_reconcile_total",
            &[("controller", "tfjob"), ("result", "error")]
        )
    );
    assert_eq!(
        get("controller_runtime_max_concurrent_reconciles", &controller),
        3.0,
        "--threads"
    );
    let reconciles = get("controller_runtime_reconcile_total", &controller);
    assert_eq!(
        get(
            "controller_runtime_reconcile_time_seconds_bucket",
            &[("controller", "tfjob"), ("le", "+Inf")]
        ),
        reconciles
    );
    assert_eq!(
        get("tfjob_operator_reconciles_total", &[]),
        reconciles,
        "the operator's own count agrees"
    );

    // client-go's work queue, replayed: every reconcile took a request off the queue, and the
    // queue is empty once the jobs are done.
    let adds = get("workqueue_adds_total", &queue);
    let waited = get("workqueue_queue_duration_seconds_count", &queue);
    assert!(
        waited > 0.0 && waited <= reconciles,
        "{waited} of {reconciles}"
    );
    assert!(adds >= waited, "{adds} adds, {waited} taken");
    assert_eq!(get("workqueue_depth", &queue), 0.0);
    assert_eq!(get("workqueue_unfinished_work_seconds", &queue), 0.0);
    assert_eq!(
        get("workqueue_longest_running_processor_seconds", &queue),
        0.0
    );
    get("workqueue_retries_total", &queue);

    // client-go's REST client: the operator created pods (and events) and read the API.
    let host = cluster.addr().to_string();
    let posts = [("code", "201"), ("method", "POST"), ("host", host.as_str())];
    assert!(
        get("rest_client_requests_total", &posts) >= 2.0,
        "two pods at least"
    );
    let gets = [("code", "200"), ("method", "GET"), ("host", host.as_str())];
    assert!(
        get("rest_client_requests_total", &gets) > 0.0,
        "lists and watches"
    );
    assert_eq!(
        get(
            "rest_client_request_duration_seconds_count",
            &[("verb", "POST"), ("host", host.as_str())]
        ),
        value(
            &samples,
            "rest_client_requests_total",
            &[("method", "POST"), ("host", host.as_str())]
        )
        .unwrap(),
        "every POST is timed"
    );

    // The process: the operator's own, started during this test.
    let resident = get("process_resident_memory_bytes", &[]);
    assert!(resident > 1e6, "{resident} bytes resident");
    assert!(get("process_virtual_memory_bytes", &[]) >= resident);
    assert!(get("process_cpu_seconds_total", &[]) > 0.0);
    let open = get("process_open_fds", &[]);
    assert!(open >= 3.0 && get("process_max_fds", &[]) >= open);
    let start = get("process_start_time_seconds", &[]);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(
        start >= started.as_secs_f64() - 2.0 && start <= now.as_secs_f64() + 1.0,
        "started at {start}, the test at {started:?}"
    );

    // The existing families, unchanged.
    let in_ml = [("job_namespace", JOBS_NS), ("framework", "tensorflow")];
    assert_eq!(get("training_operator_jobs_created_total", &in_ml), 2.0);
    assert_eq!(get("training_operator_jobs_successful_total", &in_ml), 1.0);
    assert_eq!(get("training_operator_jobs_failed_total", &in_ml), 1.0);
    assert!(
        get(
            "tfjob_policy_errors_total",
            &[
                ("policy", TRAPPING_POLICY),
                ("hook", "decorate"),
                ("category", "trap")
            ]
        ) >= 2.0,
        "one trap per pod"
    );
    assert!(get("tfjob_policy_evaluations_total", &[("hook", "decorate")]) >= 2.0);
    get("tfjob_policy_loads_total", &[("result", "active")]);

    // Every metric the dashboard reads is served.
    let text = std::fs::read_to_string(common::repo("deploy/monitoring/grafana-dashboard.json"))
        .expect("the dashboard is readable");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let served: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    let missing: Vec<String> = dashboard_metrics(&dashboard)
        .into_iter()
        .filter(|name| !served.contains(name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard reads {missing:?}, which /metrics does not serve"
    );
}
