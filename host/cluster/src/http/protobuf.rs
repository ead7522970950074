//! Kubernetes protobuf bodies for the core types kubectl sends that way: `Namespace`,
//! `ConfigMap`, `Secret`, `ServiceAccount` and `Service`, decoded into the JSON the store holds and
//! encoded back for clients that ask for protobuf first; and the `TokenRequest` of `kubectl
//! create token`, decoded only.
//!
//! kubectl's typed commands (`kubectl create namespace|configmap|secret|serviceaccount|service`)
//! send
//! built-in objects as `application/vnd.kubernetes.protobuf` and do not fall back to JSON when
//! refused. A protobuf body is the four bytes `k8s\0` followed by a `runtime.Unknown` message
//! whose `typeMeta` names the object's apiVersion and kind and whose `raw` holds the object's
//! own message. The messages are those of the `k8s-pb` crate; the mapping to JSON is written
//! out per type (the crate has no serde support) and follows the API's JSON conventions:
//! bytes as base64, times as RFC 3339 seconds, empty strings, lists and maps left out (Go's
//! protobuf encoder writes empty strings, its JSON encoder omits them). Every decoding
//! error is a [`ProtoError`], which the server answers with a `400`; nothing here panics on
//! hostile bytes.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes protobuf.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why a protobuf body was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("the protobuf body does not start with the Kubernetes magic number k8s\\0")]
    Magic,
    #[error("the protobuf envelope (runtime.Unknown) is malformed: {0}")]
    Envelope(prost::DecodeError),
    #[error("the protobuf envelope names no apiVersion and kind")]
    NoType,
    #[error("the protobuf envelope's content encoding {0:?} is not supported")]
    ContentEncoding(String),
    #[error("protobuf bodies of {api_version} {kind} are not supported; send JSON")]
    Unsupported { api_version: String, kind: String },
    #[error("the {kind} in the protobuf body is malformed: {source}")]
    Object {
        kind: String,
        source: prost::DecodeError,
    },
    #[error("{field}: {message}")]
    Field { field: String, message: String },
}

fn field_error(field: &str, message: impl Into<String>) -> ProtoError {
    ProtoError::Field {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether a content type (as sent in `Content-Type`) is Kubernetes protobuf.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Whether an `Accept` header puts protobuf first.
pub fn prefers_protobuf(accept: &str) -> bool {
    accept.split(',').next().is_some_and(is_protobuf)
}

/// Whether objects of this apiVersion and kind are decoded and encoded here.
pub fn supports(api_version: &str, kind: &str) -> bool {
    api_version == "v1"
        && matches!(
            kind,
            "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount" | "Service"
        )
}

/// The JSON object of a protobuf body.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtoError::Magic)?;
    let unknown = Unknown::decode(envelope).map_err(ProtoError::Envelope)?;
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtoError::ContentEncoding(encoding));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let (Some(api_version), Some(kind)) = (type_meta.api_version, type_meta.kind) else {
        return Err(ProtoError::NoType);
    };
    if api_version.is_empty() || kind.is_empty() {
        return Err(ProtoError::NoType);
    }
    let raw = unknown.raw.unwrap_or_default();
    let object_error = |source| ProtoError::Object {
        kind: kind.clone(),
        source,
    };
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            namespace_json(&core::Namespace::decode(&*raw).map_err(object_error)?)?
        }
        ("v1", "ConfigMap") => {
            configmap_json(&core::ConfigMap::decode(&*raw).map_err(object_error)?)?
        }
        ("v1", "Secret") => secret_json(&core::Secret::decode(&*raw).map_err(object_error)?)?,
        ("v1", "ServiceAccount") => {
            service_account_json(&core::ServiceAccount::decode(&*raw).map_err(object_error)?)?
        }
        ("v1", "Service") => service_json(&core::Service::decode(&*raw).map_err(object_error)?)?,
        ("authentication.k8s.io/v1", "TokenRequest") => token_request_json(
            &k8s_pb::api::authentication::v1::TokenRequest::decode(&*raw).map_err(object_error)?,
        )?,
        _ => return Err(ProtoError::Unsupported { api_version, kind }),
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

/// The protobuf body of a JSON object of a supported type.
pub fn encode(obj: &Value) -> Result<Vec<u8>, ProtoError> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let raw = match (api_version, kind) {
        ("v1", "Namespace") => namespace_pb(obj)?.encode_to_vec(),
        ("v1", "ConfigMap") => configmap_pb(obj)?.encode_to_vec(),
        ("v1", "Secret") => secret_pb(obj)?.encode_to_vec(),
        ("v1", "ServiceAccount") => service_account_pb(obj)?.encode_to_vec(),
        ("v1", "Service") => service_pb(obj)?.encode_to_vec(),
        _ => {
            return Err(ProtoError::Unsupported {
                api_version: api_version.into(),
                kind: kind.into(),
            });
        }
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    Ok(out)
}

// ---- protobuf to JSON ----

/// Sets `key` unless the value is absent or empty, as the API's `omitempty` fields.
fn put(obj: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    let empty = match &value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        _ => false,
    };
    if !empty {
        obj.insert(key.into(), value.unwrap_or(Value::Null));
    }
}

fn string_map(m: &BTreeMap<String, String>) -> Option<Value> {
    Some(json!(m))
}

fn bytes_map(m: &BTreeMap<String, Vec<u8>>) -> Option<Value> {
    Some(Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), json!(BASE64.encode(v))))
            .collect(),
    ))
}

fn time_json(t: &Option<meta::Time>, field: &str) -> Result<Option<Value>, ProtoError> {
    let Some(t) = t else {
        return Ok(None);
    };
    let seconds = t.seconds.unwrap_or(0);
    let at = jiff::Timestamp::from_second(seconds)
        .map_err(|e| field_error(field, format!("time out of range: {e}")))?;
    Ok(Some(json!(at.to_string())))
}

fn meta_json(m: &Option<meta::ObjectMeta>) -> Result<Option<Value>, ProtoError> {
    let Some(m) = m else {
        return Ok(None);
    };
    let mut o = Map::new();
    put(&mut o, "name", m.name.clone().map(Value::from));
    put(
        &mut o,
        "generateName",
        m.generate_name.clone().map(Value::from),
    );
    put(&mut o, "namespace", m.namespace.clone().map(Value::from));
    put(&mut o, "uid", m.uid.clone().map(Value::from));
    put(
        &mut o,
        "resourceVersion",
        m.resource_version.clone().map(Value::from),
    );
    put(
        &mut o,
        "generation",
        m.generation.filter(|g| *g != 0).map(Value::from),
    );
    put(
        &mut o,
        "creationTimestamp",
        time_json(&m.creation_timestamp, "metadata.creationTimestamp")?,
    );
    put(
        &mut o,
        "deletionTimestamp",
        time_json(&m.deletion_timestamp, "metadata.deletionTimestamp")?,
    );
    put(
        &mut o,
        "deletionGracePeriodSeconds",
        m.deletion_grace_period_seconds.map(Value::from),
    );
    put(&mut o, "labels", string_map(&m.labels));
    put(&mut o, "annotations", string_map(&m.annotations));
    let owners: Vec<Value> = m
        .owner_references
        .iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "apiVersion", r.api_version.clone().map(Value::from));
            put(&mut o, "kind", r.kind.clone().map(Value::from));
            put(&mut o, "name", r.name.clone().map(Value::from));
            put(&mut o, "uid", r.uid.clone().map(Value::from));
            put(&mut o, "controller", r.controller.map(Value::from));
            put(
                &mut o,
                "blockOwnerDeletion",
                r.block_owner_deletion.map(Value::from),
            );
            Value::Object(o)
        })
        .collect();
    put(&mut o, "ownerReferences", Some(json!(owners)));
    put(&mut o, "finalizers", Some(json!(m.finalizers)));
    let mut managed = Vec::new();
    for (i, e) in m.managed_fields.iter().enumerate() {
        let mut o = Map::new();
        put(&mut o, "manager", e.manager.clone().map(Value::from));
        put(&mut o, "operation", e.operation.clone().map(Value::from));
        put(&mut o, "apiVersion", e.api_version.clone().map(Value::from));
        put(
            &mut o,
            "time",
            time_json(&e.time, &format!("metadata.managedFields[{i}].time"))?,
        );
        put(&mut o, "fieldsType", e.fields_type.clone().map(Value::from));
        if let Some(raw) = e.fields_v1.as_ref().and_then(|f| f.raw.as_ref()) {
            let fields: Value = serde_json::from_slice(raw).map_err(|err| {
                field_error(
                    &format!("metadata.managedFields[{i}].fieldsV1"),
                    format!("not JSON: {err}"),
                )
            })?;
            o.insert("fieldsV1".into(), fields);
        }
        put(
            &mut o,
            "subresource",
            e.subresource.clone().map(Value::from),
        );
        managed.push(Value::Object(o));
    }
    put(&mut o, "managedFields", Some(json!(managed)));
    Ok(Some(Value::Object(o)))
}

/// A TokenRequest, as `kubectl create token` sends it (only asked for, never stored or
/// answered in protobuf).
fn token_request_json(
    request: &k8s_pb::api::authentication::v1::TokenRequest,
) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&request.metadata)?);
    let mut s = Map::new();
    if let Some(spec) = &request.spec {
        put(&mut s, "audiences", Some(json!(spec.audiences)));
        put(
            &mut s,
            "expirationSeconds",
            spec.expiration_seconds.map(Value::from),
        );
        if let Some(bound) = &spec.bound_object_ref {
            let mut b = Map::new();
            put(&mut b, "kind", bound.kind.clone().map(Value::from));
            put(&mut b, "name", bound.name.clone().map(Value::from));
            s.insert("boundObjectRef".into(), Value::Object(b));
        }
    }
    o.insert("spec".into(), Value::Object(s));
    Ok(o)
}

fn namespace_json(ns: &core::Namespace) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&ns.metadata)?);
    if let Some(spec) = &ns.spec {
        let mut s = Map::new();
        put(&mut s, "finalizers", Some(json!(spec.finalizers)));
        o.insert("spec".into(), Value::Object(s));
    }
    if let Some(status) = &ns.status {
        let mut s = Map::new();
        put(&mut s, "phase", status.phase.clone().map(Value::from));
        let mut conditions = Vec::new();
        for (i, c) in status.conditions.iter().enumerate() {
            let mut o = Map::new();
            put(&mut o, "type", c.r#type.clone().map(Value::from));
            put(&mut o, "status", c.status.clone().map(Value::from));
            put(
                &mut o,
                "lastTransitionTime",
                time_json(
                    &c.last_transition_time,
                    &format!("status.conditions[{i}].lastTransitionTime"),
                )?,
            );
            put(&mut o, "reason", c.reason.clone().map(Value::from));
            put(&mut o, "message", c.message.clone().map(Value::from));
            conditions.push(Value::Object(o));
        }
        put(&mut s, "conditions", Some(json!(conditions)));
        o.insert("status".into(), Value::Object(s));
    }
    Ok(o)
}

fn configmap_json(cm: &core::ConfigMap) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&cm.metadata)?);
    put(&mut o, "immutable", cm.immutable.map(Value::from));
    put(&mut o, "data", string_map(&cm.data));
    put(&mut o, "binaryData", bytes_map(&cm.binary_data));
    Ok(o)
}

fn secret_json(secret: &core::Secret) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&secret.metadata)?);
    put(&mut o, "immutable", secret.immutable.map(Value::from));
    put(&mut o, "data", bytes_map(&secret.data));
    put(&mut o, "stringData", string_map(&secret.string_data));
    put(&mut o, "type", secret.r#type.clone().map(Value::from));
    Ok(o)
}

fn service_account_json(sa: &core::ServiceAccount) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&sa.metadata)?);
    let secrets: Vec<Value> = sa
        .secrets
        .iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "kind", r.kind.clone().map(Value::from));
            put(&mut o, "namespace", r.namespace.clone().map(Value::from));
            put(&mut o, "name", r.name.clone().map(Value::from));
            put(&mut o, "uid", r.uid.clone().map(Value::from));
            put(&mut o, "apiVersion", r.api_version.clone().map(Value::from));
            put(
                &mut o,
                "resourceVersion",
                r.resource_version.clone().map(Value::from),
            );
            put(&mut o, "fieldPath", r.field_path.clone().map(Value::from));
            Value::Object(o)
        })
        .collect();
    put(&mut o, "secrets", Some(json!(secrets)));
    let pull: Vec<Value> = sa
        .image_pull_secrets
        .iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "name", r.name.clone().map(Value::from));
            Value::Object(o)
        })
        .collect();
    put(&mut o, "imagePullSecrets", Some(json!(pull)));
    put(
        &mut o,
        "automountServiceAccountToken",
        sa.automount_service_account_token.map(Value::from),
    );
    Ok(o)
}

fn int_or_string_json(v: &Option<IntOrString>) -> Option<Value> {
    let v = v.as_ref()?;
    match v.r#type {
        Some(1) => v.str_val.clone().map(Value::from),
        _ => Some(json!(v.int_val.unwrap_or(0))),
    }
}

fn condition_json(c: &meta::Condition, field: &str) -> Result<Value, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "type", c.r#type.clone().map(Value::from));
    put(&mut o, "status", c.status.clone().map(Value::from));
    put(
        &mut o,
        "observedGeneration",
        c.observed_generation.filter(|g| *g != 0).map(Value::from),
    );
    put(
        &mut o,
        "lastTransitionTime",
        time_json(
            &c.last_transition_time,
            &format!("{field}.lastTransitionTime"),
        )?,
    );
    put(&mut o, "reason", c.reason.clone().map(Value::from));
    put(&mut o, "message", c.message.clone().map(Value::from));
    Ok(Value::Object(o))
}

fn service_json(svc: &core::Service) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    put(&mut o, "metadata", meta_json(&svc.metadata)?);
    if let Some(spec) = &svc.spec {
        let mut s = Map::new();
        let ports: Vec<Value> = spec
            .ports
            .iter()
            .map(|p| {
                let mut o = Map::new();
                put(&mut o, "name", p.name.clone().map(Value::from));
                put(&mut o, "protocol", p.protocol.clone().map(Value::from));
                put(
                    &mut o,
                    "appProtocol",
                    p.app_protocol.clone().map(Value::from),
                );
                put(&mut o, "port", Some(json!(p.port.unwrap_or(0))));
                put(&mut o, "targetPort", int_or_string_json(&p.target_port));
                put(
                    &mut o,
                    "nodePort",
                    p.node_port.filter(|n| *n != 0).map(Value::from),
                );
                Value::Object(o)
            })
            .collect();
        put(&mut s, "ports", Some(json!(ports)));
        put(&mut s, "selector", string_map(&spec.selector));
        put(
            &mut s,
            "clusterIP",
            spec.cluster_ip.clone().map(Value::from),
        );
        put(&mut s, "clusterIPs", Some(json!(spec.cluster_ips)));
        put(&mut s, "type", spec.r#type.clone().map(Value::from));
        put(&mut s, "externalIPs", Some(json!(spec.external_ips)));
        put(
            &mut s,
            "sessionAffinity",
            spec.session_affinity.clone().map(Value::from),
        );
        put(
            &mut s,
            "loadBalancerIP",
            spec.load_balancer_ip.clone().map(Value::from),
        );
        put(
            &mut s,
            "loadBalancerSourceRanges",
            Some(json!(spec.load_balancer_source_ranges)),
        );
        put(
            &mut s,
            "externalName",
            spec.external_name.clone().map(Value::from),
        );
        put(
            &mut s,
            "externalTrafficPolicy",
            spec.external_traffic_policy.clone().map(Value::from),
        );
        put(
            &mut s,
            "healthCheckNodePort",
            spec.health_check_node_port
                .filter(|n| *n != 0)
                .map(Value::from),
        );
        put(
            &mut s,
            "publishNotReadyAddresses",
            spec.publish_not_ready_addresses
                .filter(|p| *p)
                .map(Value::from),
        );
        if let Some(config) = &spec.session_affinity_config {
            let mut c = Map::new();
            if let Some(client_ip) = &config.client_ip {
                let mut t = Map::new();
                put(
                    &mut t,
                    "timeoutSeconds",
                    client_ip.timeout_seconds.map(Value::from),
                );
                c.insert("clientIP".into(), Value::Object(t));
            }
            s.insert("sessionAffinityConfig".into(), Value::Object(c));
        }
        put(&mut s, "ipFamilies", Some(json!(spec.ip_families)));
        put(
            &mut s,
            "ipFamilyPolicy",
            spec.ip_family_policy.clone().map(Value::from),
        );
        put(
            &mut s,
            "allocateLoadBalancerNodePorts",
            spec.allocate_load_balancer_node_ports.map(Value::from),
        );
        put(
            &mut s,
            "loadBalancerClass",
            spec.load_balancer_class.clone().map(Value::from),
        );
        put(
            &mut s,
            "internalTrafficPolicy",
            spec.internal_traffic_policy.clone().map(Value::from),
        );
        put(
            &mut s,
            "trafficDistribution",
            spec.traffic_distribution.clone().map(Value::from),
        );
        o.insert("spec".into(), Value::Object(s));
    }
    if let Some(status) = &svc.status {
        let mut s = Map::new();
        if let Some(lb) = &status.load_balancer {
            let ingress: Vec<Value> = lb
                .ingress
                .iter()
                .map(|i| {
                    let mut o = Map::new();
                    put(&mut o, "ip", i.ip.clone().map(Value::from));
                    put(&mut o, "hostname", i.hostname.clone().map(Value::from));
                    put(&mut o, "ipMode", i.ip_mode.clone().map(Value::from));
                    let ports: Vec<Value> = i
                        .ports
                        .iter()
                        .map(|p| {
                            let mut o = Map::new();
                            put(&mut o, "port", Some(json!(p.port.unwrap_or(0))));
                            put(&mut o, "protocol", p.protocol.clone().map(Value::from));
                            put(&mut o, "error", p.error.clone().map(Value::from));
                            Value::Object(o)
                        })
                        .collect();
                    put(&mut o, "ports", Some(json!(ports)));
                    Value::Object(o)
                })
                .collect();
            let mut l = Map::new();
            put(&mut l, "ingress", Some(json!(ingress)));
            s.insert("loadBalancer".into(), Value::Object(l));
        }
        let conditions = status
            .conditions
            .iter()
            .enumerate()
            .map(|(i, c)| condition_json(c, &format!("status.conditions[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        put(&mut s, "conditions", Some(json!(conditions)));
        o.insert("status".into(), Value::Object(s));
    }
    Ok(o)
}

// ---- JSON to protobuf ----

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn string_map_pb(v: &Value, key: &str) -> BTreeMap<String, String> {
    v.get(key)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn bytes_map_pb(v: &Value, key: &str) -> Result<BTreeMap<String, Vec<u8>>, ProtoError> {
    let Some(m) = v.get(key).and_then(Value::as_object) else {
        return Ok(BTreeMap::new());
    };
    m.iter()
        .map(|(k, v)| {
            let bytes = BASE64
                .decode(v.as_str().unwrap_or_default())
                .map_err(|e| field_error(&format!("{key}[{k}]"), format!("not base64: {e}")))?;
            Ok((k.clone(), bytes))
        })
        .collect()
}

fn time_pb(v: &Value, key: &str) -> Result<Option<meta::Time>, ProtoError> {
    let Some(s) = v.get(key).and_then(Value::as_str) else {
        return Ok(None);
    };
    let at: jiff::Timestamp = s
        .parse()
        .map_err(|e| field_error(key, format!("not an RFC 3339 time: {e}")))?;
    Ok(Some(meta::Time {
        seconds: Some(at.as_second()),
        nanos: Some(0),
    }))
}

fn meta_pb(obj: &Value) -> Result<Option<meta::ObjectMeta>, ProtoError> {
    let Some(m) = obj.get("metadata").filter(|m| m.is_object()) else {
        return Ok(None);
    };
    let owners = m
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| meta::OwnerReference {
            api_version: text(r, "apiVersion"),
            kind: text(r, "kind"),
            name: text(r, "name"),
            uid: text(r, "uid"),
            controller: r.get("controller").and_then(Value::as_bool),
            block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool),
        })
        .collect();
    let managed = m
        .get("managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            Ok(meta::ManagedFieldsEntry {
                manager: text(e, "manager"),
                operation: text(e, "operation"),
                api_version: text(e, "apiVersion"),
                time: time_pb(e, "time")?,
                fields_type: text(e, "fieldsType"),
                fields_v1: e.get("fieldsV1").map(|f| meta::FieldsV1 {
                    raw: Some(f.to_string().into_bytes()),
                }),
                subresource: text(e, "subresource"),
            })
        })
        .collect::<Result<Vec<_>, ProtoError>>()?;
    Ok(Some(meta::ObjectMeta {
        name: text(m, "name"),
        generate_name: text(m, "generateName"),
        namespace: text(m, "namespace"),
        self_link: None,
        uid: text(m, "uid"),
        resource_version: text(m, "resourceVersion"),
        generation: m.get("generation").and_then(Value::as_i64),
        creation_timestamp: time_pb(m, "creationTimestamp")?,
        deletion_timestamp: time_pb(m, "deletionTimestamp")?,
        deletion_grace_period_seconds: m.get("deletionGracePeriodSeconds").and_then(Value::as_i64),
        labels: string_map_pb(m, "labels"),
        annotations: string_map_pb(m, "annotations"),
        owner_references: owners,
        finalizers: strings(m, "finalizers"),
        managed_fields: managed,
    }))
}

fn namespace_pb(obj: &Value) -> Result<core::Namespace, ProtoError> {
    let status = match obj.get("status") {
        Some(s) => Some(core::NamespaceStatus {
            phase: text(s, "phase"),
            conditions: s
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    Ok(core::NamespaceCondition {
                        r#type: text(c, "type"),
                        status: text(c, "status"),
                        last_transition_time: time_pb(c, "lastTransitionTime")?,
                        reason: text(c, "reason"),
                        message: text(c, "message"),
                    })
                })
                .collect::<Result<_, ProtoError>>()?,
        }),
        None => None,
    };
    Ok(core::Namespace {
        metadata: meta_pb(obj)?,
        spec: obj.get("spec").map(|s| core::NamespaceSpec {
            finalizers: strings(s, "finalizers"),
        }),
        status,
    })
}

fn configmap_pb(obj: &Value) -> Result<core::ConfigMap, ProtoError> {
    Ok(core::ConfigMap {
        metadata: meta_pb(obj)?,
        immutable: obj.get("immutable").and_then(Value::as_bool),
        data: string_map_pb(obj, "data"),
        binary_data: bytes_map_pb(obj, "binaryData")?,
    })
}

fn secret_pb(obj: &Value) -> Result<core::Secret, ProtoError> {
    Ok(core::Secret {
        metadata: meta_pb(obj)?,
        immutable: obj.get("immutable").and_then(Value::as_bool),
        data: bytes_map_pb(obj, "data")?,
        string_data: string_map_pb(obj, "stringData"),
        r#type: text(obj, "type"),
    })
}

fn service_account_pb(obj: &Value) -> Result<core::ServiceAccount, ProtoError> {
    Ok(core::ServiceAccount {
        metadata: meta_pb(obj)?,
        secrets: obj
            .get("secrets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| core::ObjectReference {
                kind: text(r, "kind"),
                namespace: text(r, "namespace"),
                name: text(r, "name"),
                uid: text(r, "uid"),
                api_version: text(r, "apiVersion"),
                resource_version: text(r, "resourceVersion"),
                field_path: text(r, "fieldPath"),
            })
            .collect(),
        image_pull_secrets: obj
            .get("imagePullSecrets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| core::LocalObjectReference {
                name: text(r, "name"),
            })
            .collect(),
        automount_service_account_token: obj
            .get("automountServiceAccountToken")
            .and_then(Value::as_bool),
    })
}

fn int_or_string_pb(v: &Value, key: &str) -> Option<IntOrString> {
    match v.get(key)? {
        Value::String(s) => Some(IntOrString {
            r#type: Some(1),
            int_val: None,
            str_val: Some(s.clone()),
        }),
        n => Some(IntOrString {
            r#type: Some(0),
            int_val: n.as_i64().and_then(|n| i32::try_from(n).ok()),
            str_val: None,
        }),
    }
}

fn int32(v: &Value, key: &str) -> Option<i32> {
    v.get(key)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
}

fn service_pb(obj: &Value) -> Result<core::Service, ProtoError> {
    let spec = obj.get("spec").map(|s| core::ServiceSpec {
        ports: s
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| core::ServicePort {
                name: text(p, "name"),
                protocol: text(p, "protocol"),
                app_protocol: text(p, "appProtocol"),
                port: int32(p, "port"),
                target_port: int_or_string_pb(p, "targetPort"),
                node_port: int32(p, "nodePort"),
            })
            .collect(),
        selector: string_map_pb(s, "selector"),
        cluster_ip: text(s, "clusterIP"),
        cluster_ips: strings(s, "clusterIPs"),
        r#type: text(s, "type"),
        external_ips: strings(s, "externalIPs"),
        session_affinity: text(s, "sessionAffinity"),
        load_balancer_ip: text(s, "loadBalancerIP"),
        load_balancer_source_ranges: strings(s, "loadBalancerSourceRanges"),
        external_name: text(s, "externalName"),
        external_traffic_policy: text(s, "externalTrafficPolicy"),
        health_check_node_port: int32(s, "healthCheckNodePort"),
        publish_not_ready_addresses: s.get("publishNotReadyAddresses").and_then(Value::as_bool),
        session_affinity_config: s.get("sessionAffinityConfig").map(|c| {
            core::SessionAffinityConfig {
                client_ip: c.get("clientIP").map(|t| core::ClientIpConfig {
                    timeout_seconds: int32(t, "timeoutSeconds"),
                }),
            }
        }),
        ip_families: strings(s, "ipFamilies"),
        ip_family_policy: text(s, "ipFamilyPolicy"),
        allocate_load_balancer_node_ports: s
            .get("allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool),
        load_balancer_class: text(s, "loadBalancerClass"),
        internal_traffic_policy: text(s, "internalTrafficPolicy"),
        traffic_distribution: text(s, "trafficDistribution"),
    });
    let status = match obj.get("status") {
        Some(s) => Some(core::ServiceStatus {
            load_balancer: s.get("loadBalancer").map(|l| core::LoadBalancerStatus {
                ingress: l
                    .get("ingress")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|i| core::LoadBalancerIngress {
                        ip: text(i, "ip"),
                        hostname: text(i, "hostname"),
                        ip_mode: text(i, "ipMode"),
                        ports: i
                            .get("ports")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .map(|p| core::PortStatus {
                                port: int32(p, "port"),
                                protocol: text(p, "protocol"),
                                error: text(p, "error"),
                            })
                            .collect(),
                    })
                    .collect(),
            }),
            conditions: s
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    Ok(meta::Condition {
                        r#type: text(c, "type"),
                        status: text(c, "status"),
                        observed_generation: c.get("observedGeneration").and_then(Value::as_i64),
                        last_transition_time: time_pb(c, "lastTransitionTime")?,
                        reason: text(c, "reason"),
                        message: text(c, "message"),
                    })
                })
                .collect::<Result<_, ProtoError>>()?,
        }),
        None => None,
    };
    Ok(core::Service {
        metadata: meta_pb(obj)?,
        spec,
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: None,
            content_type: None,
        };
        [MAGIC.as_slice(), &unknown.encode_to_vec()].concat()
    }

    fn objects() -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team-a", "labels": {"team": "a"}, "uid": "u-1", "resourceVersion": "7",
                    "creationTimestamp": "2026-01-02T03:04:05Z",
                    "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                        "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "policy", "namespace": "tfjob-system", "annotations": {"a": "b"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u", "controller": true}]},
                "data": {"policy.yaml": "name: x\n"},
                "binaryData": {"policy.wasm": BASE64.encode([0u8, 97, 115, 109, 1, 0, 0, 0, 0xff, 0x80])},
                "immutable": true}),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "creds", "namespace": "default", "finalizers": ["x/y"]},
                "data": {"token": BASE64.encode(b"s3cr3t\xff")}, "type": "Opaque"}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "runner", "namespace": "default"},
                "secrets": [{"name": "t"}], "imagePullSecrets": [{"name": "registry"}],
                "automountServiceAccountToken": false}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "generation": 2},
                "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                        {"name": "grpc", "port": 9000, "targetPort": "grpc", "nodePort": 30900, "appProtocol": "h2c"}],
                    "selector": {"app": "web"}, "type": "NodePort", "clusterIP": "10.96.0.10",
                    "clusterIPs": ["10.96.0.10"], "sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                    "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                    "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster"},
                "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ports": [{"port": 80, "protocol": "TCP"}]}]},
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z",
                        "reason": "Ok"}]}}),
        ]
    }

    #[test]
    fn supported_objects_round_trip() {
        for obj in objects() {
            let body = encode(&obj).unwrap();
            assert!(body.starts_with(MAGIC));
            assert_eq!(decode(&body).unwrap(), obj);
        }
    }

    #[test]
    fn empty_strings_and_zero_generations_are_left_out() {
        // Go's protobuf encoder writes every string, set or not.
        let ns = core::Namespace {
            metadata: Some(meta::ObjectMeta {
                name: Some("team-a".into()),
                generate_name: Some(String::new()),
                namespace: Some(String::new()),
                generation: Some(0),
                ..Default::default()
            }),
            spec: Some(core::NamespaceSpec::default()),
            status: Some(core::NamespaceStatus {
                phase: Some(String::new()),
                conditions: vec![],
            }),
        };
        assert_eq!(
            decode(&envelope("v1", "Namespace", ns.encode_to_vec())).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"},
                "spec": {}, "status": {}})
        );
    }

    #[test]
    fn media_types_are_recognised() {
        assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
        assert!(is_protobuf(
            "application/vnd.kubernetes.protobuf; charset=x"
        ));
        assert!(!is_protobuf("application/json"));
        assert!(prefers_protobuf(
            "application/vnd.kubernetes.protobuf,application/json"
        ));
        assert!(!prefers_protobuf(
            "application/json,application/vnd.kubernetes.protobuf"
        ));
        assert!(!prefers_protobuf(
            "application/json;as=Table;v=v1;g=meta.k8s.io"
        ));
        assert!(
            supports("v1", "ConfigMap") && !supports("v1", "Pod") && !supports("apps/v1", "Secret")
        );
    }

    #[test]
    fn hostile_bodies_are_refused_with_a_reason() {
        let cm = encode(&objects()[1]).unwrap();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("json", br#"{"kind":"ConfigMap"}"#.to_vec()),
            ("magic only", MAGIC.to_vec()),
            ("truncated", cm[..cm.len() / 2].to_vec()),
            (
                "varint overflow",
                [
                    MAGIC.as_slice(),
                    &[
                        0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                    ],
                ]
                .concat(),
            ),
            (
                "length past the end",
                [
                    MAGIC.as_slice(),
                    &[0x12, 0xf0, 0xff, 0xff, 0xff, 0x0f, 1, 2],
                ]
                .concat(),
            ),
            ("unsupported kind", envelope("v1", "Pod", vec![])),
            ("other group", envelope("apps/v1", "Deployment", vec![])),
            ("no kind", envelope("", "", vec![])),
            (
                "object not a message",
                envelope("v1", "ConfigMap", vec![0xff; 16]),
            ),
            (
                "invalid utf-8 name",
                envelope("v1", "Namespace", vec![0x0a, 0x04, 0x0a, 0x02, 0xc3, 0x28]),
            ),
            (
                "bad fieldsV1",
                envelope(
                    "v1",
                    "Namespace",
                    core::Namespace {
                        metadata: Some(meta::ObjectMeta {
                            managed_fields: vec![meta::ManagedFieldsEntry {
                                fields_v1: Some(meta::FieldsV1 {
                                    raw: Some(b"{nope".to_vec()),
                                }),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                ),
            ),
            (
                "time out of range",
                envelope(
                    "v1",
                    "Namespace",
                    core::Namespace {
                        metadata: Some(meta::ObjectMeta {
                            creation_timestamp: Some(meta::Time {
                                seconds: Some(i64::MAX),
                                nanos: None,
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                ),
            ),
        ];
        for (what, body) in cases {
            let err = decode(&body).expect_err(what);
            assert!(!err.to_string().is_empty(), "{what}");
        }
        let gzip = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
            }),
            raw: Some(vec![]),
            content_encoding: Some("gzip".into()),
            content_type: None,
        };
        let body = [MAGIC.as_slice(), &gzip.encode_to_vec()].concat();
        assert!(matches!(decode(&body), Err(ProtoError::ContentEncoding(_))));
        assert!(matches!(
            decode(&envelope("v1", "Pod", vec![])),
            Err(ProtoError::Unsupported { .. })
        ));
    }

    #[test]
    fn random_mutations_never_panic() {
        let bodies: Vec<Vec<u8>> = objects().iter().map(|o| encode(o).unwrap()).collect();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let mut body = bodies[rng.usize(..bodies.len())].clone();
            for _ in 0..rng.usize(1..8) {
                match rng.u8(..3) {
                    0 if !body.is_empty() => {
                        let i = rng.usize(..body.len());
                        body[i] = rng.u8(..);
                    }
                    1 if !body.is_empty() => {
                        body.truncate(rng.usize(..body.len()));
                    }
                    _ => {
                        let i = rng.usize(..=body.len());
                        body.insert(i, rng.u8(..));
                    }
                }
            }
            if let Ok(obj) = decode(&body) {
                // Whatever decodes encodes again.
                encode(&obj).unwrap();
            }
        }
    }
}
