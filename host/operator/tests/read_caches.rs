//! The caches policies read the cluster from, in the operator process: a cache whose resource
//! has more objects than its cap holds none, and the operator says so three ways, the
//! `tfjob_policy_read_cache_over_cap` counter, a warning in its log, and a
//! `PolicyReadCacheOverCap` event regarding its own pod (named by `$POD_NAME` and
//! `$POD_NAMESPACE`, as `deploy/` sets them), which `kubectl describe pod` shows.

use crate::common;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use common::cluster::{Cluster, metric};
use common::{eventually, free_addr};

#[test]
fn a_cache_over_its_cap_is_counted_and_told_on_the_operators_pod() {
    // Two simulated nodes, a cap of one, and the default classifier reading nodes.
    let c = Cluster::start(|_| {});
    let config = c.dir.path().join("policy-config.yaml");
    std::fs::write(
        &config,
        "default-classify:\n  settings: {failUnschedulable: {gracePeriod: 1m}}\n",
    )
    .unwrap();
    let metrics = free_addr();
    let _operator = c.operator(
        &[
            "--policy-config",
            config.to_str().unwrap(),
            "--policy-read-cache-objects",
            "1",
            "--metrics-bind-address",
            &metrics.to_string(),
        ],
        &[
            ("POD_NAME", "tfjob-operator-0"),
            ("POD_NAMESPACE", "tfjob-system"),
        ],
    );
    let counted = eventually("the over-cap counter", || {
        metric(
            metrics,
            "tfjob_policy_read_cache_over_cap_total{resource=\"nodes\"}",
        )
        .filter(|n| *n >= 1.0)
    });
    assert!(counted >= 1.0);
    let events: Api<Event> = Api::namespaced(c.client(), "tfjob-system");
    let event = eventually("the over-cap event", || {
        let list = c
            .runtime
            .block_on(events.list(&ListParams::default()))
            .ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("PolicyReadCacheOverCap"))
    });
    let regarding = event.regarding.expect("regarding the operator's pod");
    assert_eq!(
        (
            regarding.kind.as_deref(),
            regarding.namespace.as_deref(),
            regarding.name.as_deref()
        ),
        (Some("Pod"), Some("tfjob-system"), Some("tfjob-operator-0"))
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(
        note.starts_with(
            "the cache of nodes that policies read holds at most 1 objects and more exist \
             (2 seen when it stopped): reads of nodes answer unavailable"
        ),
        "{note}"
    );
    assert!(note.contains("--policy-read-cache-objects"), "{note}");
}
