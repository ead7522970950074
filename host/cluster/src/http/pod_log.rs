//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: the logs the simulated kubelet wrote, served
//! as the API server and a kubelet serve them together (`kubectl logs`, client libraries).
//!
//! The answer is plain text. Which container and which run are read the way a kubelet reads
//! them: the only container unless `container` names one, the current run unless `previous`
//! asks for the one before an in-place restart. The refusals carry Kubernetes' own messages
//! (`a container name must be specified ...`, `container X is not valid for pod Y`, `container
//! "X" in pod "Y" is waiting to start: ContainerCreating`, `previous terminated container ...
//! not found`), since scripts and people match on them. With `follow`, the response streams
//! the run's lines as the kubelet writes them and ends when the container does, waking only on
//! new lines.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use jiff::Timestamp;
use serde_json::Value;

use crate::http::query::Query;
use crate::http::respond::error_response;
use crate::kubelet::logs::{LogOptions, RunLog, format_line, render};
use crate::{ApiError, Store};

/// Answers a `pods/log` request.
pub fn serve(store: &Store, ns: &str, name: &str, query: &Query) -> Response {
    match prepare(store, ns, name, query) {
        Ok((run, options)) => respond(run, &options),
        Err(e) => error_response(&e),
    }
}

fn container_names(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The container a request reads, by the API server's rules.
pub fn pick_container(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let containers = container_names(pod, "containers");
    let init = container_names(pod, "initContainers");
    match asked {
        Some(c) if containers.iter().chain(&init).any(|n| n == c) => Ok(c.to_owned()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            many => {
                let mut message = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                );
                if !init.is_empty() {
                    message.push_str(&format!(
                        " or one of the init containers: [{}]",
                        init.join(" ")
                    ));
                }
                Err(ApiError::bad_request(message))
            }
        },
    }
}

/// Why a container has no log yet, from the pod's status, in the kubelet's words.
pub fn not_started(pod: &Value, container: &str) -> Option<ApiError> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let statuses = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|f| {
            pod.pointer(&format!("/status/{f}"))
                .and_then(Value::as_array)
        })
        .flatten();
    let mut found = None;
    for s in statuses {
        if s.get("name").and_then(Value::as_str) == Some(container) {
            found = Some(s);
        }
    }
    let waiting_reason = match found {
        None => Some("ContainerCreating"),
        Some(s) => match s.pointer("/state/waiting") {
            // A container waiting to be restarted has a log: the run before.
            Some(_) if s.pointer("/lastState/terminated").is_some() => None,
            Some(w) => Some(
                w.get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("ContainerCreating"),
            ),
            None => None,
        },
    }?;
    Some(ApiError::bad_request(format!(
        "container \"{container}\" in pod \"{name}\" is waiting to start: {waiting_reason}"
    )))
}

fn prepare(
    store: &Store,
    ns: &str,
    name: &str,
    query: &Query,
) -> Result<(Option<Arc<RunLog>>, LogOptions), ApiError> {
    let pods = store
        .resource("", "pods")
        .ok_or_else(|| ApiError::not_found("resource", "pods"))?;
    let pod = store.get(&pods, Some(ns), name)?;
    let options = LogOptions::from_query(query, name)?;
    let container = pick_container(&pod, options.container.as_deref())?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if options.previous {
        let run = store.logs().previous(uid, &container).ok_or_else(|| {
            ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))
        })?;
        return Ok((Some(run), options));
    }
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let run = store.logs().current(uid, &container);
    if run.is_none()
        && let Some(e) = not_started(&pod, &container)
    {
        return Err(e);
    }
    // Running on a node this kubelet does not simulate (or before it wrote anything): an
    // empty log, as a container that printed nothing.
    Ok((run, options))
}

fn respond(run: Option<Arc<RunLog>>, options: &LogOptions) -> Response {
    let now = Timestamp::now();
    let text = run
        .as_ref()
        .map(|r| render(&r.lines(), options, now))
        .unwrap_or_default();
    let builder = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain");
    let body = match run {
        Some(run) if options.follow && !options.previous => follow(run, text, options),
        _ => Body::from(text),
    };
    builder.body(body).unwrap_or_else(|_| {
        error_response(&ApiError::new(
            500,
            "InternalError",
            "building the log response",
        ))
    })
}

/// The lines already selected, then every line written after them until the run ends.
fn follow(run: Arc<RunLog>, first: String, options: &LogOptions) -> Body {
    struct Follow {
        run: Arc<RunLog>,
        rx: tokio::sync::watch::Receiver<u64>,
        next: u64,
        timestamps: bool,
        /// Bytes still allowed by `limitBytes`.
        budget: usize,
    }
    // Subscribing before reading the position: nothing written in between is missed.
    let rx = run.subscribe();
    let next = run.end();
    let budget = options
        .limit_bytes
        .and_then(|l| usize::try_from(l).ok())
        .map_or(usize::MAX, |l| l.saturating_sub(first.len()));
    let state = Follow {
        run,
        rx,
        next,
        timestamps: options.timestamps,
        budget,
    };
    let rest = futures::stream::unfold(state, |mut s| async move {
        loop {
            if s.budget == 0 {
                return None;
            }
            let (lines, next, closed) = s.run.read_from(s.next);
            s.next = next;
            if !lines.is_empty() {
                let mut chunk: String =
                    lines.iter().map(|l| format_line(l, s.timestamps)).collect();
                tfjob_policy_logic::text::truncate(&mut chunk, s.budget);
                s.budget -= chunk.len();
                return Some((Ok::<Bytes, Infallible>(Bytes::from(chunk)), s));
            }
            if closed {
                return None;
            }
            // The writer side lives as long as the run; an error means it is gone.
            if s.rx.changed().await.is_err() {
                return None;
            }
        }
    });
    let head = futures::stream::iter(
        (!first.is_empty()).then(|| Ok::<Bytes, Infallible>(Bytes::from(first))),
    );
    Body::from_stream(futures::StreamExt::chain(head, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: &[&str], init: &[&str]) -> Value {
        let list = |names: &[&str]| -> Vec<Value> {
            names
                .iter()
                .map(|n| json!({"name": n, "image": "x"}))
                .collect()
        };
        json!({"metadata": {"name": "p"}, "spec": {"containers": list(containers), "initContainers": list(init)}})
    }

    #[test]
    fn the_container_is_picked_as_the_api_server_does() {
        assert_eq!(pick_container(&pod(&["a"], &[]), None).unwrap(), "a");
        assert_eq!(
            pick_container(&pod(&["a", "b"], &[]), Some("b")).unwrap(),
            "b"
        );
        assert_eq!(
            pick_container(&pod(&["a"], &["i"]), Some("i")).unwrap(),
            "i"
        );
        let e = pick_container(&pod(&["a", "b"], &["i"]), None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
            )
        );
        let e = pick_container(&pod(&["a"], &[]), Some("zz")).unwrap_err();
        assert_eq!(e.message, "container zz is not valid for pod p");
    }

    #[test]
    fn waiting_containers_are_reported_with_their_reason() {
        let mut p = pod(&["a"], &[]);
        assert_eq!(
            not_started(&p, "a").unwrap().message,
            "container \"a\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        p["status"] = json!({"containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]});
        assert_eq!(
            not_started(&p, "a").unwrap().message,
            "container \"a\" in pod \"p\" is waiting to start: ImagePullBackOff"
        );
        p["status"] = json!({"containerStatuses": [{"name": "a", "state": {"running": {}}}]});
        assert!(not_started(&p, "a").is_none());
        p["status"] = json!({"containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1}}}]});
        assert!(not_started(&p, "a").is_none());
    }
}
