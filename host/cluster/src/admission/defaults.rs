//! What a real API server fills into the objects it stores, so a client reads back what it would
//! read from one: `status.phase: Pending` and `qosClass` on a new pod, `status.loadBalancer` and
//! the cluster IP fields on a new service, `Active` and the `kubernetes.io/metadata.name` label
//! on a namespace, and the spec defaults of every served built-in kind.
//!
//! The values are those of Kubernetes' own defaulting (`SetDefaults_*` in `pkg/apis/*/v1`), the
//! registry strategies' `PrepareForCreate` and the default admission plugins (`ServiceAccount`,
//! `DefaultTolerationSeconds`, `Priority`), as of Kubernetes 1.33; `docs/python-client.md`
//! lists them and what is left out. Each default fills only a field the object leaves unset, so
//! writing the result back changes nothing, and objects the simulation stores with a status of
//! their own keep it.
//!
//! All of it is pure; the store calls [`on_write`] on every create, update and patch, and
//! [`on_create`] once more on a create. Cluster IPs and node ports are the one default that
//! needs the store's state: it allocates them ([`crate::storage::store`]).

use serde_json::{Map, Value, json};

use tfjob_policy_logic::quantity::Quantity;

/// The API group and plural of an object's type: `("", "pods")`, `("apps", "deployments")`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind<'a> {
    pub group: &'a str,
    pub plural: &'a str,
}

/// Fills the defaults of `obj`, an object of `kind` about to be stored by any write.
pub fn on_write(kind: Kind<'_>, obj: &mut Value) {
    let Some(obj) = obj.as_object_mut() else {
        return;
    };
    match (kind.group, kind.plural) {
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                pod_spec(spec);
            }
        }
        ("", "services") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                service_spec(spec);
            }
        }
        ("", "namespaces") => namespace(obj),
        ("", "secrets") => set(obj, "type", json!("Opaque")),
        ("apps", "deployments") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                deployment_spec(spec);
            }
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            set(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
        _ => {}
    }
}

/// Fills what a real server sets on a new object only: the status it starts with.
pub fn on_create(kind: Kind<'_>, obj: &mut Value) {
    let Some(obj) = obj.as_object_mut() else {
        return;
    };
    match (kind.group, kind.plural) {
        ("", "pods") => {
            let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
            let status = object(obj, "status");
            set(status, "phase", json!("Pending"));
            set(status, "qosClass", json!(qos));
        }
        ("", "services") => {
            let status = object(obj, "status");
            set(status, "loadBalancer", json!({}));
        }
        ("", "namespaces") => {
            let status = object(obj, "status");
            set(status, "phase", json!("Active"));
        }
        ("apps", "deployments") => {
            object(obj, "status");
        }
        ("policy", "poddisruptionbudgets") => {
            let status = object(obj, "status");
            for field in [
                "disruptionsAllowed",
                "currentHealthy",
                "desiredHealthy",
                "expectedPods",
            ] {
                set(status, field, json!(0));
            }
        }
        _ => {}
    }
}

/// Sets `field` unless the object has it already (a `null` counts as unset, as Go decodes it).
fn set(obj: &mut Map<String, Value>, field: &str, value: Value) {
    match obj.get(field) {
        Some(v) if !v.is_null() => {}
        _ => {
            obj.insert(field.to_owned(), value);
        }
    }
}

/// The object under `field`, made one if unset.
fn object<'a>(obj: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    if !obj.get(field).is_some_and(Value::is_object) {
        obj.insert(field.to_owned(), json!({}));
    }
    obj.get_mut(field)
        .and_then(Value::as_object_mut)
        .expect("an object was just put there")
}

/// Every object of the list under `field`.
fn each<'a>(
    obj: &'a mut Map<String, Value>,
    field: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> + 'a {
    obj.get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The tolerations the `DefaultTolerationSeconds` admission plugin adds to every pod.
const DEFAULT_TOLERATED_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

fn pod_spec(spec: &mut Map<String, Value>) {
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    set(spec, "enableServiceLinks", json!(true));
    // The ServiceAccount admission plugin, and the deprecated field that mirrors it.
    set(spec, "serviceAccountName", json!("default"));
    let account = spec["serviceAccountName"].clone();
    set(spec, "serviceAccount", account);
    // The Priority admission plugin: a pod naming no class gets the default priority. A named
    // class's value is the scheduler's to read; the simulation reads the class itself.
    if spec.get("priorityClassName").is_none_or(Value::is_null) {
        set(spec, "priority", json!(0));
        set(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
    default_tolerations(spec);
    for field in ["containers", "initContainers"] {
        for container in each(spec, field) {
            container_defaults(container);
        }
    }
    for volume in each(spec, "volumes") {
        for (source, mode_field) in [
            ("secret", "defaultMode"),
            ("configMap", "defaultMode"),
            ("downwardAPI", "defaultMode"),
            ("projected", "defaultMode"),
        ] {
            if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
                set(source, mode_field, json!(0o644));
            }
        }
        if let Some(host_path) = volume.get_mut("hostPath").and_then(Value::as_object_mut) {
            set(host_path, "type", json!(""));
        }
    }
}

fn default_tolerations(spec: &mut Map<String, Value>) {
    let tolerates = |tolerations: &[Value], key: &str| {
        tolerations.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let matches_key = match t.get("key").and_then(Value::as_str) {
                Some(k) => k == key,
                // No key with `Exists` tolerates every taint.
                None => t.get("operator").and_then(Value::as_str) == Some("Exists"),
            };
            matches_key && (effect.is_empty() || effect == "NoExecute")
        })
    };
    let mut tolerations = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let before = tolerations.len();
    for key in DEFAULT_TOLERATED_TAINTS {
        if !tolerates(&tolerations, key) {
            tolerations.push(json!({
                "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300
            }));
        }
    }
    if tolerations.len() != before {
        spec.insert("tolerations".into(), Value::Array(tolerations));
    }
}

fn container_defaults(c: &mut Map<String, Value>) {
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    let pull = c
        .get("image")
        .and_then(Value::as_str)
        .map_or("IfNotPresent", image_pull_policy);
    set(c, "imagePullPolicy", json!(pull));
    for port in each(c, "ports") {
        set(port, "protocol", json!("TCP"));
    }
    let resources = object(c, "resources");
    // A limit without a request: the request is the limit.
    if let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned()
        && !limits.is_empty()
    {
        let requests = object(resources, "requests");
        for (name, quantity) in limits {
            set(requests, &name, quantity);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set(probe, "timeoutSeconds", json!(1));
            set(probe, "periodSeconds", json!(10));
            set(probe, "successThreshold", json!(1));
            set(probe, "failureThreshold", json!(3));
            if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
                set(get, "scheme", json!("HTTP"));
            }
        }
    }
    for env in each(c, "env") {
        if let Some(field) = env
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            set(field, "apiVersion", json!("v1"));
        }
    }
}

/// `Always` for an image without a tag or tagged `latest`, `IfNotPresent` otherwise.
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last `:` after the last `/` (a registry may have a port).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The pod's quality-of-service class, from its containers' cpu and memory, as the kubelet and
/// the API server compute it (`GetPodQOS`).
pub fn qos_class(spec: &Value) -> &'static str {
    const COMPUTE: [&str; 2] = ["cpu", "memory"];
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec.get(*f).and_then(Value::as_array))
        .flatten();
    let mut requests = std::collections::BTreeMap::<&str, i128>::new();
    let mut limits = std::collections::BTreeMap::<&str, i128>::new();
    let mut guaranteed = true;
    for c in containers {
        let amounts = |kind: &str| -> Vec<(&'static str, i128)> {
            COMPUTE
                .iter()
                .filter_map(|name| {
                    let q = c.pointer(&format!("/resources/{kind}/{name}"))?;
                    let amount = match q {
                        Value::String(s) => Quantity::parse(s).ok()?.nanos(),
                        Value::Number(n) => i128::from(n.as_i64()?) * 1_000_000_000,
                        _ => return None,
                    };
                    (amount > 0).then_some((*name, amount))
                })
                .collect()
        };
        // Requests default to limits, as the API server stored them.
        let mut asked = amounts("requests");
        let capped = amounts("limits");
        for (name, amount) in &capped {
            if !asked.iter().any(|(n, _)| n == name) {
                asked.push((name, *amount));
            }
        }
        for (name, amount) in &asked {
            *requests.entry(name).or_default() += amount;
        }
        for (name, amount) in &capped {
            *limits.entry(name).or_default() += amount;
        }
        if capped.len() < COMPUTE.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn service_spec(spec: &mut Map<String, Value>) {
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_owned();
    for port in each(spec, "ports") {
        set(port, "protocol", json!("TCP"));
        let number = port.get("port").cloned().unwrap_or(Value::Null);
        set(port, "targetPort", number);
    }
    if kind == "ExternalName" {
        return;
    }
    set(spec, "internalTrafficPolicy", json!("Cluster"));
    if kind == "NodePort" || kind == "LoadBalancer" {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        set(
            spec,
            "sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
    // The cluster IP itself is the store's to allocate; these follow from it.
    if let Some(ip) = spec.get("clusterIP").filter(|ip| !ip.is_null()).cloned() {
        set(spec, "clusterIPs", json!([ip]));
        set(spec, "ipFamilies", json!(["IPv4"]));
        set(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
}

/// An update of a service that leaves out its cluster IP or node ports keeps those it holds
/// (they cannot change), as a real server's service strategy does.
pub fn keep_allocations(kind: Kind<'_>, current: &Value, next: &mut Value) {
    if kind
        != (Kind {
            group: "",
            plural: "services",
        })
    {
        return;
    }
    let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let held = current.get("spec").unwrap_or(&Value::Null);
    if spec
        .get("clusterIP")
        .is_none_or(|ip| ip.is_null() || ip == "")
    {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let Some(v) = held.get(field) {
                spec.insert(field.into(), v.clone());
            }
        }
    }
    let held_ports = held.get("ports").and_then(Value::as_array);
    for (i, port) in each(spec, "ports").enumerate() {
        if port.get("nodePort").is_none_or(|n| n.is_null() || n == 0)
            && let Some(n) = held_ports
                .and_then(|p| p.get(i))
                .and_then(|p| p.get("nodePort"))
        {
            port.insert("nodePort".into(), n.clone());
        }
    }
}

/// Whether a service of this spec needs a cluster IP allocated.
pub fn wants_cluster_ip(spec: &Value) -> bool {
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    kind != "ExternalName" && ip.is_empty()
}

/// The ports of a service of this spec that need a node port allocated.
pub fn wanting_node_ports(spec: &Value) -> Vec<usize> {
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if kind != "NodePort" && kind != "LoadBalancer" {
        return Vec::new();
    }
    spec.get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, p)| p.get("nodePort").is_none_or(|n| n.is_null() || n == 0))
        .map(|(i, _)| i)
        .collect()
}

fn namespace(obj: &mut Map<String, Value>) {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .cloned()
        .unwrap_or(Value::Null);
    // The label is the server's: it always names the namespace, whatever a client wrote.
    let labels = object(object(obj, "metadata"), "labels");
    labels.insert("kubernetes.io/metadata.name".into(), name);
    let spec = object(obj, "spec");
    set(spec, "finalizers", json!(["kubernetes"]));
}

fn deployment_spec(spec: &mut Map<String, Value>) {
    set(spec, "replicas", json!(1));
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    let strategy = object(spec, "strategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let rolling = object(strategy, "rollingUpdate");
        set(rolling, "maxUnavailable", json!("25%"));
        set(rolling, "maxSurge", json!("25%"));
    }
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_template_spec(pod);
    }
}

/// The defaults of a pod template: a pod's spec defaults without the admission plugins', which
/// apply to pods only.
fn pod_template_spec(spec: &mut Map<String, Value>) {
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    for field in ["containers", "initContainers"] {
        for container in each(spec, field) {
            container_defaults(container);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn of(plural: &str) -> Kind<'_> {
        let group = if plural == "deployments" { "apps" } else { "" };
        Kind { group, plural }
    }

    fn created(plural: &str, mut obj: Value) -> Value {
        let t = of(plural);
        on_write(t, &mut obj);
        on_create(t, &mut obj);
        obj
    }

    #[test]
    fn a_new_pod_reads_back_as_from_a_real_server() {
        let pod = created(
            "pods",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "busybox", "image": "busybox", "ports": [{"containerPort": 80}]},
                {"name": "tf", "image": "tensorflow/tensorflow:2.15.0",
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                 "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}
            ]}}),
        );
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Burstable"})
        );
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        assert_eq!(spec["priority"], 0);
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
        let busybox = &spec["containers"][0];
        assert_eq!(busybox["imagePullPolicy"], "Always");
        assert_eq!(busybox["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(busybox["terminationMessagePolicy"], "File");
        assert_eq!(busybox["ports"][0]["protocol"], "TCP");
        assert_eq!(busybox["resources"], json!({}));
        let tf = &spec["containers"][1];
        assert_eq!(tf["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            tf["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(tf["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(tf["readinessProbe"]["periodSeconds"], 10);
        assert_eq!(tf["readinessProbe"]["httpGet"]["scheme"], "HTTP");
    }

    #[test]
    fn defaults_fill_only_what_is_unset_and_are_stable() {
        let pod = created(
            "pods",
            json!({"metadata": {"name": "p"}, "spec": {
                "restartPolicy": "Never", "serviceAccountName": "trainer",
                "priorityClassName": "high",
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "c:1", "imagePullPolicy": "Never"}]
            }, "status": {"phase": "Running"}}),
        );
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["serviceAccount"], "trainer");
        assert!(pod["spec"].get("priority").is_none());
        assert_eq!(pod["spec"]["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Never");
        // A status the store was given (the simulation writes pods with one) is kept.
        assert_eq!(pod["status"]["phase"], "Running");
        let again = created("pods", pod.clone());
        assert_eq!(again, pod, "defaulting twice changes nothing");
    }

    #[test]
    fn quality_of_service_classes() {
        let spec =
            |resources: Value| json!({"containers": [{"name": "c", "resources": resources}]});
        assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&spec(json!({"limits": {"cpu": "500m", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "0.5", "memory": "1Gi"},
                                   "limits": {"cpu": "500m", "memory": "1Gi"}}))),
            "Guaranteed",
            "quantities compare by value"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&spec(json!({"limits": {"cpu": "1"}}))),
            "Burstable",
            "no memory limit"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"nvidia.com/gpu": "1"}}))),
            "BestEffort",
            "only cpu and memory count"
        );
    }

    #[test]
    fn image_pull_policies() {
        for (image, policy) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1.36", "IfNotPresent"),
            ("registry:5000/team/busybox", "Always"),
            ("registry:5000/team/busybox:1", "IfNotPresent"),
            ("busybox@sha256:abcd", "IfNotPresent"),
        ] {
            assert_eq!(image_pull_policy(image), policy, "{image}");
        }
    }

    #[test]
    fn services_namespaces_and_the_rest() {
        let svc = created(
            "services",
            json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.10",
                   "ports": [{"port": 80}]}}),
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(svc["spec"]["clusterIPs"], json!(["10.96.0.10"]));
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(svc["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
        let headless = created(
            "services",
            json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}),
        );
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        assert!(!wants_cluster_ip(&headless["spec"]));
        assert!(wants_cluster_ip(&json!({"ports": []})));
        assert_eq!(
            wanting_node_ports(
                &json!({"type": "NodePort", "ports": [{"port": 1}, {"port": 2, "nodePort": 30001}]})
            ),
            [0]
        );

        let ns = created(
            "namespaces",
            json!({"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "forged"}}}),
        );
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team-a"
        );
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        assert_eq!(ns["spec"], json!({"finalizers": ["kubernetes"]}));

        let secret = created("secrets", json!({"metadata": {"name": "s"}}));
        assert_eq!(secret["type"], "Opaque");

        let deploy = created(
            "deployments",
            json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.15.4"}]}}}}),
        );
        assert_eq!(deploy["spec"]["replicas"], 1);
        assert_eq!(
            deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            "25%"
        );
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert!(
            deploy["spec"]["template"]["spec"]
                .get("serviceAccountName")
                .is_none()
        );
        assert_eq!(deploy["status"], json!({}));
    }
}
