//! Request accounting: what each API request is (verb and resource, as Kubernetes RBAC names
//! them) and counters of requests by verb, resource, status class and client.
//!
//! Benchmarks need to know how many writes the operator itself made, apart from the test's own
//! requests to set up and observe the cluster. Every client announces itself in `User-Agent`
//! (`kubectl/v1.32.4 (linux/amd64) ...`, or whatever a kube-rs client sets), so requests are also
//! counted per agent: the product token before the first `/` or space. A client that sends no
//! `User-Agent` (kube-rs sends none unless configured) is counted as `unknown`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use serde::{Deserialize, Serialize};

/// An API verb, as Kubernetes names it in RBAC rules and audit logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    Deletecollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Deletecollection => "deletecollection",
        }
    }

    /// Whether the verb changes objects (status writes are updates and patches too).
    pub fn is_write(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a resource request addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    pub verb: Verb,
    /// The API group (`""` for the core group), as RBAC rules name it.
    pub group: String,
    /// The resource's plural (`pods`, `tfjobs`), with the subresource when there is one
    /// (`pods/status`).
    pub resource: String,
    /// The namespace addressed; `None` at the cluster scope. A namespace's own requests
    /// (`/api/v1/namespaces/ns`) are in that namespace, as Kubernetes authorizes them.
    pub namespace: Option<String>,
    /// The object addressed: from the path, or for a list or watch from a
    /// `metadata.name=NAME` field selector, as Kubernetes derives it for RBAC's resourceNames.
    pub name: Option<String>,
}

impl RequestInfo {
    /// The resource without its subresource: `pods` for `pods/status`.
    pub fn plural(&self) -> &str {
        self.resource
            .split_once('/')
            .map_or(self.resource.as_str(), |(p, _)| p)
    }
}

/// Classifies a request by its method and path. `None` for everything that is not a resource
/// request: health checks, `/version`, discovery (`/api`, `/apis`, `/apis/<group>/<version>`),
/// OpenAPI documents and the `/debug` endpoints.
pub fn classify(method: &Method, uri: &Uri) -> Option<RequestInfo> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return None,
    };
    // `namespaces/<ns>/<plural>/...` addresses a namespaced resource; shorter paths under
    // `namespaces` address namespaces themselves.
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !matches!(*plural, "status" | "finalize") || !tail.is_empty() =>
        {
            (
                Some(*ns),
                *plural,
                tail.first().copied(),
                tail.get(1).copied(),
            )
        }
        ["namespaces", ns, tail @ ..] => {
            (Some(*ns), "namespaces", Some(*ns), tail.first().copied())
        }
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return None,
    };
    let query: Vec<(&str, &str)> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .collect();
    let watch = query
        .iter()
        .any(|(k, v)| *k == "watch" && (*v == "true" || *v == "1"));
    let verb = match (method, name) {
        (&Method::GET, Some(_)) => Verb::Get,
        (&Method::GET, None) if watch => Verb::Watch,
        (&Method::GET, None) => Verb::List,
        (&Method::POST, _) => Verb::Create,
        (&Method::PUT, _) => Verb::Update,
        (&Method::PATCH, _) => Verb::Patch,
        (&Method::DELETE, Some(_)) => Verb::Delete,
        (&Method::DELETE, None) => Verb::Deletecollection,
        _ => return None,
    };
    let resource = match sub {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_owned(),
    };
    let name = name.map(str::to_owned).or_else(|| {
        matches!(verb, Verb::List | Verb::Watch)
            .then(|| selected_name(&query))
            .flatten()
    });
    Some(RequestInfo {
        verb,
        group: group.to_owned(),
        resource,
        namespace: namespace.map(str::to_owned),
        name,
    })
}

/// The name a list or watch selects with a field selector requiring exactly
/// `metadata.name=NAME` (or `==`), as kube-rs and kubectl watch a single object.
fn selected_name(query: &[(&str, &str)]) -> Option<String> {
    let (_, selector) = query.iter().find(|(k, _)| *k == "fieldSelector")?;
    let selector = crate::http::query::decode(selector);
    selector.split(',').find_map(|term| {
        let (key, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        (key.trim() == "metadata.name")
            .then(|| value.trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// The client of a request: the product token of its `User-Agent`.
pub fn agent(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split(['/', ' ']).next())
        .filter(|a| !a.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

/// `2xx`, `4xx`, `5xx`, ...
fn status_class(code: u16) -> String {
    format!("{}xx", code / 100)
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    verb: Verb,
    group: String,
    resource: String,
    code: u16,
    agent: String,
}

/// Counters of the requests a server answered. Cheap to clone: clones share the counters.
#[derive(Clone, Debug, Default)]
pub struct RequestStats {
    counts: Arc<Mutex<BTreeMap<Key, u64>>>,
    denials: Arc<Mutex<Denials>>,
}

/// Denials kept for reading back; older ones are only counted.
const DENIALS_KEPT: usize = 1000;

#[derive(Debug, Default)]
struct Denials {
    total: u64,
    recent: VecDeque<Denial>,
}

/// A request refused with `403 Forbidden`: who asked for what, and the server's message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    pub user: String,
    /// The client's `User-Agent` product token.
    pub agent: String,
    /// The verb, or the HTTP method of a non-resource path.
    pub verb: String,
    /// API group, resource (`tfjobs/status`) and namespace checked; the path of a non-resource
    /// request in `resource`.
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub message: String,
}

/// Requests of one verb, resource and status class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCount {
    pub verb: Verb,
    pub resource: String,
    /// `2xx`, `4xx`, `5xx`.
    pub class: String,
    pub count: u64,
}

/// Requests of one client, verb and resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCount {
    pub agent: String,
    pub verb: Verb,
    /// API group (`""` for the core group).
    pub group: String,
    pub resource: String,
    pub count: u64,
}

/// The counters at one moment, in two views.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestSnapshot {
    /// By verb, resource and status class, over all clients.
    pub requests: Vec<RequestCount>,
    /// By client, verb and resource, over all status classes.
    pub agents: Vec<AgentCount>,
}

impl RequestSnapshot {
    /// Requests of `verb` on `resource` (`pods`, or `pods/status` for the subresource alone),
    /// whatever their outcome.
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.requests
            .iter()
            .filter(|c| c.verb == verb && c.resource == resource)
            .map(|c| c.count)
            .sum()
    }

    /// Requests of `verb` on `resource` answered with a status of `class` (`2xx`, `5xx`, ...).
    pub fn count_class(&self, verb: Verb, resource: &str, class: &str) -> u64 {
        self.requests
            .iter()
            .filter(|c| c.verb == verb && c.resource == resource && c.class == class)
            .map(|c| c.count)
            .sum()
    }

    /// Requests of `verb` by `agent`, on any resource.
    pub fn by_agent(&self, agent: &str, verb: Verb) -> u64 {
        self.agents
            .iter()
            .filter(|c| c.agent == agent && c.verb == verb)
            .map(|c| c.count)
            .sum()
    }

    /// Writes (create, update, patch, delete, deletecollection, status writes included) by
    /// `agent`.
    pub fn writes_by(&self, agent: &str) -> u64 {
        self.agents
            .iter()
            .filter(|c| c.agent == agent && c.verb.is_write())
            .map(|c| c.count)
            .sum()
    }

    /// Every counted request.
    pub fn total(&self) -> u64 {
        self.requests.iter().map(|c| c.count).sum()
    }
}

impl RequestStats {
    pub fn new() -> RequestStats {
        RequestStats::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, u64>> {
        // A panic elsewhere while counting leaves consistent counters; keep counting.
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one answered request.
    pub fn record(&self, info: &RequestInfo, agent: &str, status: StatusCode) {
        let key = Key {
            verb: info.verb,
            group: info.group.clone(),
            resource: info.resource.clone(),
            code: status.as_u16(),
            agent: agent.to_owned(),
        };
        *self.lock().entry(key).or_default() += 1;
    }

    /// Forgets every count (a benchmark resets after its setup).
    pub fn reset(&self) {
        self.lock().clear();
        *self.lock_denials() = Denials::default();
    }

    fn lock_denials(&self) -> std::sync::MutexGuard<'_, Denials> {
        self.denials
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a request refused with `403 Forbidden`.
    pub fn record_denial(&self, denial: Denial) {
        let mut denials = self.lock_denials();
        denials.total += 1;
        if denials.recent.len() == DENIALS_KEPT {
            denials.recent.pop_front();
        }
        denials.recent.push_back(denial);
    }

    /// Requests refused with `403 Forbidden` so far.
    pub fn denied(&self) -> u64 {
        self.lock_denials().total
    }

    /// The latest denials (at most a thousand), oldest first.
    pub fn denials(&self) -> Vec<Denial> {
        self.lock_denials().recent.iter().cloned().collect()
    }

    /// The counts now.
    /// The counts in Prometheus' text format, as kube-apiserver's `/metrics` serves them:
    /// `apiserver_request_total` by verb (its upper-case request verb: `LIST`, `POST`, ...),
    /// group, resource, subresource and status code, over all clients.
    pub fn prometheus(&self) -> String {
        let mut totals: BTreeMap<(&'static str, String, String, String, u16), u64> =
            BTreeMap::new();
        for (k, n) in self.lock().iter() {
            let (resource, subresource) = k
                .resource
                .split_once('/')
                .map_or((k.resource.as_str(), ""), |(r, s)| (r, s));
            *totals
                .entry((
                    request_verb(k.verb),
                    k.group.clone(),
                    resource.to_owned(),
                    subresource.to_owned(),
                    k.code,
                ))
                .or_default() += n;
        }
        let mut text = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, group, resource, subresource and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        for ((verb, group, resource, subresource, code), n) in totals {
            text.push_str(&format!(
                "apiserver_request_total{{code=\"{code}\",group=\"{}\",resource=\"{}\",subresource=\"{}\",verb=\"{verb}\"}} {n}\n",
                label(&group),
                label(&resource),
                label(&subresource),
            ));
        }
        text
    }

    pub fn snapshot(&self) -> RequestSnapshot {
        let counts = self.lock().clone();
        let mut requests: BTreeMap<(Verb, String, String), u64> = BTreeMap::new();
        let mut agents: BTreeMap<(String, Verb, String, String), u64> = BTreeMap::new();
        for (k, n) in counts {
            *requests
                .entry((k.verb, k.resource.clone(), status_class(k.code)))
                .or_default() += n;
            *agents
                .entry((k.agent, k.verb, k.group, k.resource))
                .or_default() += n;
        }
        RequestSnapshot {
            requests: requests
                .into_iter()
                .map(|((verb, resource, class), count)| RequestCount {
                    verb,
                    resource,
                    class,
                    count,
                })
                .collect(),
            agents: agents
                .into_iter()
                .map(|((agent, verb, group, resource), count)| AgentCount {
                    agent,
                    verb,
                    group,
                    resource,
                    count,
                })
                .collect(),
        }
    }
}

/// The verb label kube-apiserver's request metrics give a request.
fn request_verb(verb: Verb) -> &'static str {
    match verb {
        Verb::Get => "GET",
        Verb::List => "LIST",
        Verb::Watch => "WATCH",
        Verb::Create => "POST",
        Verb::Update => "PUT",
        Verb::Patch => "PATCH",
        Verb::Delete | Verb::Deletecollection => "DELETE",
    }
}

/// A label value escaped as Prometheus' text format wants it.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_count_by_verb_group_resource_subresource_and_code() {
        let stats = RequestStats::new();
        let uri = |u: &str| u.parse::<Uri>().unwrap();
        let list = classify(&Method::GET, &uri("/api/v1/namespaces/a/pods")).unwrap();
        let status = classify(
            &Method::PUT,
            &uri("/apis/kubeflow.org/v1/namespaces/a/tfjobs/j/status"),
        )
        .unwrap();
        stats.record(&list, "kubectl", StatusCode::OK);
        stats.record(&list, "tfjob-operator", StatusCode::OK);
        stats.record(&status, "tfjob-operator", StatusCode::CONFLICT);
        let text = stats.prometheus();
        assert!(
            text.contains("# TYPE apiserver_request_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="LIST"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_total{code="409",group="kubeflow.org",resource="tfjobs",subresource="status",verb="PUT"} 1"#),
            "{text}"
        );
        assert_eq!(label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
    }

    fn info(method: Method, uri: &str) -> Option<(Verb, String)> {
        classify(&method, &uri.parse().unwrap()).map(|i| (i.verb, i.resource))
    }

    #[test]
    fn requests_carry_their_api_group() {
        let group = |uri: &str| classify(&Method::GET, &uri.parse().unwrap()).unwrap().group;
        assert_eq!(group("/api/v1/namespaces/ns/pods"), "");
        assert_eq!(group("/apis/kubeflow.org/v1/tfjobs"), "kubeflow.org");
        assert_eq!(
            group("/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/j"),
            "scheduling.volcano.sh"
        );
    }

    #[test]
    fn requests_are_classified_as_rbac_names_them() {
        let v = |verb, r: &str| Some((verb, r.to_owned()));
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/ns/pods"),
            v(Verb::List, "pods")
        );
        assert_eq!(
            info(Method::GET, "/api/v1/pods?watch=true&resourceVersion=3"),
            v(Verb::Watch, "pods")
        );
        assert_eq!(
            info(Method::GET, "/api/v1/namespaces/ns/pods/a"),
            v(Verb::Get, "pods")
        );
        assert_eq!(
            info(
                Method::PUT,
                "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j/status"
            ),
            v(Verb::Update, "tfjobs/status")
        );
        assert_eq!(
            info(Method::POST, "/api/v1/namespaces"),
            v(Verb::Create, "namespaces")
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/ns"),
            v(Verb::Delete, "namespaces")
        );
        assert_eq!(
            info(Method::PATCH, "/api/v1/namespaces/ns/status"),
            v(Verb::Patch, "namespaces/status")
        );
        assert_eq!(
            info(Method::DELETE, "/api/v1/namespaces/ns/configmaps"),
            v(Verb::Deletecollection, "configmaps")
        );
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/kubeflow.org/v1",
            "/healthz",
            "/version",
            "/openapi/v3",
            "/debug/faults",
        ] {
            assert_eq!(info(Method::GET, path), None, "{path}");
        }
    }

    #[test]
    fn requests_carry_their_namespace_and_name() {
        let at = |method: Method, uri: &str| {
            let i = classify(&method, &uri.parse().unwrap()).unwrap();
            (i.namespace, i.name)
        };
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            at(Method::GET, "/api/v1/namespaces/ns/pods/p/log"),
            (some("ns"), some("p"))
        );
        assert_eq!(
            at(Method::GET, "/apis/kubeflow.org/v1/tfjobs"),
            (None, None)
        );
        // A namespace is in itself.
        assert_eq!(
            at(Method::GET, "/api/v1/namespaces/ns"),
            (some("ns"), some("ns"))
        );
        assert_eq!(
            at(Method::PUT, "/api/v1/namespaces/ns/status"),
            (some("ns"), some("ns"))
        );
        assert_eq!(at(Method::GET, "/api/v1/namespaces"), (None, None));
        assert_eq!(
            at(Method::POST, "/api/v1/namespaces/ns/configmaps"),
            (some("ns"), None)
        );
        // A watch of one object names it in a field selector.
        assert_eq!(
            at(
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dsettings&watch=true"
            ),
            (some("ns"), some("settings"))
        );
        assert_eq!(
            at(
                Method::GET,
                "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%21%3Dsettings"
            ),
            (some("ns"), None)
        );
        assert_eq!(
            at(
                Method::GET,
                "/api/v1/pods?fieldSelector=status.phase%3DRunning"
            ),
            (None, None)
        );
    }

    #[test]
    fn agents_are_product_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(agent(&h), "unknown");
        h.insert(
            header::USER_AGENT,
            "kubectl/v1.32.4 (linux/amd64) kubernetes/abc"
                .parse()
                .unwrap(),
        );
        assert_eq!(agent(&h), "kubectl");
    }

    #[test]
    fn snapshots_sum_by_view() {
        let s = RequestStats::new();
        let create = RequestInfo {
            verb: Verb::Create,
            group: String::new(),
            resource: "pods".into(),
            namespace: Some("ns".into()),
            name: None,
        };
        let status = RequestInfo {
            verb: Verb::Patch,
            group: "kubeflow.org".into(),
            resource: "tfjobs/status".into(),
            namespace: Some("ns".into()),
            name: Some("j".into()),
        };
        s.record(&create, "op", StatusCode::CREATED);
        s.record(&create, "op", StatusCode::INTERNAL_SERVER_ERROR);
        s.record(&status, "op", StatusCode::OK);
        s.record(&create, "test", StatusCode::CREATED);
        let snap = s.snapshot();
        assert_eq!(snap.count(Verb::Create, "pods"), 3);
        assert_eq!(snap.count_class(Verb::Create, "pods", "5xx"), 1);
        assert_eq!(snap.writes_by("op"), 3);
        assert_eq!(snap.by_agent("test", Verb::Create), 1);
        assert_eq!(snap.total(), 4);
        s.reset();
        assert_eq!(s.snapshot().total(), 0);
    }

    #[test]
    fn denials_are_counted_and_the_latest_kept() {
        let s = RequestStats::new();
        let denial = |i: usize| Denial {
            user: "u".into(),
            agent: "a".into(),
            verb: "get".into(),
            group: String::new(),
            resource: "pods".into(),
            namespace: format!("ns{i}"),
            message: "no".into(),
        };
        for i in 0..DENIALS_KEPT + 5 {
            s.record_denial(denial(i));
        }
        assert_eq!(s.denied(), DENIALS_KEPT as u64 + 5);
        let kept = s.denials();
        assert_eq!(kept.len(), DENIALS_KEPT);
        assert_eq!(kept[0], denial(5));
        s.reset();
        assert_eq!((s.denied(), s.denials().len()), (0, 0));
    }
}
