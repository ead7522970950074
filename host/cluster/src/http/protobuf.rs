//! Kubernetes protobuf bodies for the core types kubectl sends that way: `Namespace`,
//! `ConfigMap`, `Secret`, `ServiceAccount` and `Service`, decoded into the JSON the store holds and
//! encoded back for clients that ask for protobuf first; and the `TokenRequest` of `kubectl
//! create token` and the `SelfSubjectAccessReview` of `kubectl auth can-i`, decoded only.
//!
//! kubectl's typed commands (`kubectl create namespace|configmap|secret|serviceaccount|service`)
//! send
//! built-in objects as `application/vnd.kubernetes.protobuf` and do not fall back to JSON when
//! refused. A protobuf body is the four bytes `k8s\0` followed by a `runtime.Unknown` message
//! whose `typeMeta` names the object's apiVersion and kind and whose `raw` holds the object's
//! own message. The messages are those of the `k8s-pb` crate, which has no serde support; each
//! message's mapping to JSON is one table of its fields ([`message!`]), and each field type
//! converts one way for every message ([`Field`]), following the API's JSON conventions: bytes
//! as base64, times as RFC 3339 seconds, empty strings, lists and maps left out (Go's protobuf
//! encoder writes empty strings, its JSON encoder omits them), and each table says which fields
//! Go's JSON shows when zero ([`Shown`]). Every decoding
//! error is a [`ProtoError`], which the server answers with a `400`; nothing here panics on
//! hostile bytes.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_pb::api::authentication::v1 as authentication;
use k8s_pb::api::authorization::v1 as authorization;
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
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => decoded::<core::Namespace>(&raw, &kind)?,
        ("v1", "ConfigMap") => decoded::<core::ConfigMap>(&raw, &kind)?,
        ("v1", "Secret") => decoded::<core::Secret>(&raw, &kind)?,
        ("v1", "ServiceAccount") => decoded::<core::ServiceAccount>(&raw, &kind)?,
        ("v1", "Service") => decoded::<core::Service>(&raw, &kind)?,
        ("authentication.k8s.io/v1", "TokenRequest") => {
            decoded::<authentication::TokenRequest>(&raw, &kind)?
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            decoded::<authorization::SelfSubjectAccessReview>(&raw, &kind)?
        }
        _ => return Err(ProtoError::Unsupported { api_version, kind }),
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

/// The JSON object of a message of `kind` in `raw`.
fn decoded<M: Message + Default + Object>(
    raw: &[u8],
    kind: &str,
) -> Result<Map<String, Value>, ProtoError> {
    let message = M::decode(raw).map_err(|source| ProtoError::Object {
        kind: kind.to_owned(),
        source,
    })?;
    message.to_object("")
}

/// The protobuf body of a JSON object of a supported type.
pub fn encode(obj: &Value) -> Result<Vec<u8>, ProtoError> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let raw = match (api_version, kind) {
        ("v1", "Namespace") => core::Namespace::from_object(obj, "")?.encode_to_vec(),
        ("v1", "ConfigMap") => core::ConfigMap::from_object(obj, "")?.encode_to_vec(),
        ("v1", "Secret") => core::Secret::from_object(obj, "")?.encode_to_vec(),
        ("v1", "ServiceAccount") => core::ServiceAccount::from_object(obj, "")?.encode_to_vec(),
        ("v1", "Service") => core::Service::from_object(obj, "")?.encode_to_vec(),
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

// ---- the conversions, driven by one table per message ----

/// When the API's JSON shows a field, beyond what the field's type decides (an empty string,
/// list or map is always left out: Go's protobuf encoder writes them, its JSON encoder omits
/// them).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Whenever it is set (a Go pointer field: `*bool`, `*int32`, a struct).
    IfSet,
    /// Unless it is zero, false or an empty object (`omitempty`).
    IfNotEmpty,
    /// Always, as zero or an empty object when unset (a Go value field without `omitempty`).
    Always,
}

/// One field of a message, converted by the API's JSON conventions.
trait Field: Sized {
    /// The field's JSON, or `None` when the JSON leaves it out. `at` names it in errors.
    fn to_json(&self, shown: Shown, at: &str) -> Result<Option<Value>, ProtoError>;
    /// The field from its JSON value (`None`: absent). Values of the wrong JSON type are
    /// read as absent; malformed times and base64 are errors.
    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError>;
}

/// A message: a JSON object whose fields [`message!`] lists.
trait Object: Sized {
    fn to_object(&self, at: &str) -> Result<Map<String, Value>, ProtoError>;
    fn from_object(v: &Value, at: &str) -> Result<Self, ProtoError>;
}

/// The path of `key` below `at`, for errors.
fn below(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// Implements [`Object`] for a message from its JSON field names, its Rust fields and when
/// each is shown ([`Shown::IfSet`] unless given); fields not listed are neither read nor
/// written.
macro_rules! message {
    ($ty:ty { $($json:literal => $field:ident $(($shown:ident))?),* $(,)? }) => {
        impl Object for $ty {
            fn to_object(&self, at: &str) -> Result<Map<String, Value>, ProtoError> {
                let mut o = Map::new();
                $(
                    let shown = message!(@shown $($shown)?);
                    if let Some(v) = self.$field.to_json(shown, &below(at, $json))? {
                        o.insert($json.into(), v);
                    }
                )*
                Ok(o)
            }

            // A table that lists every field of its message leaves nothing to default.
            #[allow(clippy::needless_update)]
            fn from_object(v: &Value, at: &str) -> Result<Self, ProtoError> {
                Ok(Self {
                    $($field: Field::from_json(v.get($json), &below(at, $json))?,)*
                    ..Default::default()
                })
            }
        }
    };
    (@shown) => { Shown::IfSet };
    (@shown $shown:ident) => { Shown::$shown };
}

message!(meta::ObjectMeta {
    "name" => name,
    "generateName" => generate_name,
    "namespace" => namespace,
    "uid" => uid,
    "resourceVersion" => resource_version,
    "generation" => generation(IfNotEmpty),
    "creationTimestamp" => creation_timestamp,
    "deletionTimestamp" => deletion_timestamp,
    "deletionGracePeriodSeconds" => deletion_grace_period_seconds,
    "labels" => labels,
    "annotations" => annotations,
    "ownerReferences" => owner_references,
    "finalizers" => finalizers,
    "managedFields" => managed_fields,
});
message!(meta::OwnerReference {
    "apiVersion" => api_version,
    "kind" => kind,
    "name" => name,
    "uid" => uid,
    "controller" => controller,
    "blockOwnerDeletion" => block_owner_deletion,
});
message!(meta::ManagedFieldsEntry {
    "manager" => manager,
    "operation" => operation,
    "apiVersion" => api_version,
    "time" => time,
    "fieldsType" => fields_type,
    "fieldsV1" => fields_v1,
    "subresource" => subresource,
});
message!(meta::Condition {
    "type" => r#type,
    "status" => status,
    "observedGeneration" => observed_generation(IfNotEmpty),
    "lastTransitionTime" => last_transition_time,
    "reason" => reason,
    "message" => message,
});

message!(core::Namespace {
    "metadata" => metadata(IfNotEmpty),
    "spec" => spec,
    "status" => status,
});
message!(core::NamespaceSpec { "finalizers" => finalizers });
message!(core::NamespaceStatus {
    "phase" => phase,
    "conditions" => conditions,
});
message!(core::NamespaceCondition {
    "type" => r#type,
    "status" => status,
    "lastTransitionTime" => last_transition_time,
    "reason" => reason,
    "message" => message,
});

message!(core::ConfigMap {
    "metadata" => metadata(IfNotEmpty),
    "immutable" => immutable,
    "data" => data,
    "binaryData" => binary_data,
});
message!(core::Secret {
    "metadata" => metadata(IfNotEmpty),
    "immutable" => immutable,
    "data" => data,
    "stringData" => string_data,
    "type" => r#type,
});

message!(core::ServiceAccount {
    "metadata" => metadata(IfNotEmpty),
    "secrets" => secrets,
    "imagePullSecrets" => image_pull_secrets,
    "automountServiceAccountToken" => automount_service_account_token,
});
message!(core::ObjectReference {
    "kind" => kind,
    "namespace" => namespace,
    "name" => name,
    "uid" => uid,
    "apiVersion" => api_version,
    "resourceVersion" => resource_version,
    "fieldPath" => field_path,
});
message!(core::LocalObjectReference { "name" => name });

message!(core::Service {
    "metadata" => metadata(IfNotEmpty),
    "spec" => spec,
    "status" => status,
});
message!(core::ServiceSpec {
    "ports" => ports,
    "selector" => selector,
    "clusterIP" => cluster_ip,
    "clusterIPs" => cluster_ips,
    "type" => r#type,
    "externalIPs" => external_ips,
    "sessionAffinity" => session_affinity,
    "loadBalancerIP" => load_balancer_ip,
    "loadBalancerSourceRanges" => load_balancer_source_ranges,
    "externalName" => external_name,
    "externalTrafficPolicy" => external_traffic_policy,
    "healthCheckNodePort" => health_check_node_port(IfNotEmpty),
    "publishNotReadyAddresses" => publish_not_ready_addresses(IfNotEmpty),
    "sessionAffinityConfig" => session_affinity_config,
    "ipFamilies" => ip_families,
    "ipFamilyPolicy" => ip_family_policy,
    "allocateLoadBalancerNodePorts" => allocate_load_balancer_node_ports,
    "loadBalancerClass" => load_balancer_class,
    "internalTrafficPolicy" => internal_traffic_policy,
    "trafficDistribution" => traffic_distribution,
});
message!(core::ServicePort {
    "name" => name,
    "protocol" => protocol,
    "appProtocol" => app_protocol,
    "port" => port(Always),
    "targetPort" => target_port,
    "nodePort" => node_port(IfNotEmpty),
});
message!(core::SessionAffinityConfig { "clientIP" => client_ip });
message!(core::ClientIpConfig { "timeoutSeconds" => timeout_seconds });
message!(core::ServiceStatus {
    "loadBalancer" => load_balancer,
    "conditions" => conditions,
});
message!(core::LoadBalancerStatus { "ingress" => ingress });
message!(core::LoadBalancerIngress {
    "ip" => ip,
    "hostname" => hostname,
    "ipMode" => ip_mode,
    "ports" => ports,
});
message!(core::PortStatus {
    "port" => port(Always),
    "protocol" => protocol,
    "error" => error,
});

// A TokenRequest, as `kubectl create token` sends it (only asked for, never stored or
// answered in protobuf).
message!(authentication::TokenRequest {
    "metadata" => metadata(IfNotEmpty),
    "spec" => spec(Always),
});
message!(authentication::TokenRequestSpec {
    "audiences" => audiences,
    "expirationSeconds" => expiration_seconds,
    "boundObjectRef" => bound_object_ref,
});
message!(authentication::BoundObjectReference {
    "kind" => kind,
    "name" => name,
});
message!(authorization::SelfSubjectAccessReview {
    "metadata" => metadata(IfNotEmpty),
    "spec" => spec(Always),
});
message!(authorization::SelfSubjectAccessReviewSpec {
    "resourceAttributes" => resource_attributes,
    "nonResourceAttributes" => non_resource_attributes,
});
message!(authorization::ResourceAttributes {
    "namespace" => namespace,
    "verb" => verb,
    "group" => group,
    "version" => version,
    "resource" => resource,
    "subresource" => subresource,
    "name" => name,
});
message!(authorization::NonResourceAttributes {
    "path" => path,
    "verb" => verb,
});

impl<M: Object + Default> Field for Option<M> {
    fn to_json(&self, shown: Shown, at: &str) -> Result<Option<Value>, ProtoError> {
        let object = match (self, shown) {
            (Some(m), _) => m.to_object(at)?,
            (None, Shown::Always) => Map::new(),
            (None, _) => return Ok(None),
        };
        if shown == Shown::IfNotEmpty && object.is_empty() {
            return Ok(None);
        }
        Ok(Some(Value::Object(object)))
    }

    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError> {
        v.filter(|v| v.is_object())
            .map(|v| M::from_object(v, at))
            .transpose()
    }
}

impl<M: Object> Field for Vec<M> {
    fn to_json(&self, _: Shown, at: &str) -> Result<Option<Value>, ProtoError> {
        let items = self
            .iter()
            .enumerate()
            .map(|(i, m)| m.to_object(&format!("{at}[{i}]")).map(Value::Object))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((!items.is_empty()).then_some(Value::Array(items)))
    }

    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, item)| M::from_object(item, &format!("{at}[{i}]")))
            .collect()
    }
}

impl Field for Option<String> {
    fn to_json(&self, _: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        Ok(self.clone().filter(|s| !s.is_empty()).map(Value::from))
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.and_then(Value::as_str).map(str::to_owned))
    }
}

impl Field for Option<bool> {
    fn to_json(&self, shown: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        Ok(match shown {
            Shown::IfSet => self.map(Value::from),
            Shown::IfNotEmpty => self.filter(|b| *b).map(Value::from),
            Shown::Always => Some(Value::from(self.unwrap_or(false))),
        })
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.and_then(Value::as_bool))
    }
}

impl Field for Option<i64> {
    fn to_json(&self, shown: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        Ok(match shown {
            Shown::IfSet => self.map(Value::from),
            Shown::IfNotEmpty => self.filter(|n| *n != 0).map(Value::from),
            Shown::Always => Some(Value::from(self.unwrap_or(0))),
        })
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.and_then(Value::as_i64))
    }
}

impl Field for Option<i32> {
    fn to_json(&self, shown: Shown, at: &str) -> Result<Option<Value>, ProtoError> {
        self.map(i64::from).to_json(shown, at)
    }

    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError> {
        Ok(Option::<i64>::from_json(v, at)?.and_then(|n| i32::try_from(n).ok()))
    }
}

impl Field for Vec<String> {
    fn to_json(&self, _: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        Ok((!self.is_empty()).then(|| json!(self)))
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect())
    }
}

impl Field for BTreeMap<String, String> {
    fn to_json(&self, _: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        Ok((!self.is_empty()).then(|| json!(self)))
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect())
    }
}

/// Bytes, as base64 strings.
impl Field for BTreeMap<String, Vec<u8>> {
    fn to_json(&self, _: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        let encoded: Map<String, Value> = self
            .iter()
            .map(|(k, v)| (k.clone(), json!(BASE64.encode(v))))
            .collect();
        Ok((!encoded.is_empty()).then_some(Value::Object(encoded)))
    }

    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError> {
        v.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let bytes = BASE64
                    .decode(v.as_str().unwrap_or_default())
                    .map_err(|e| field_error(&format!("{at}[{k}]"), format!("not base64: {e}")))?;
                Ok((k.clone(), bytes))
            })
            .collect()
    }
}

/// A time, as RFC 3339 seconds.
impl Field for Option<meta::Time> {
    fn to_json(&self, _: Shown, at: &str) -> Result<Option<Value>, ProtoError> {
        let Some(t) = self else {
            return Ok(None);
        };
        let at_time = jiff::Timestamp::from_second(t.seconds.unwrap_or(0))
            .map_err(|e| field_error(at, format!("time out of range: {e}")))?;
        Ok(Some(json!(at_time.to_string())))
    }

    fn from_json(v: Option<&Value>, at: &str) -> Result<Self, ProtoError> {
        let Some(text) = v.and_then(Value::as_str) else {
            return Ok(None);
        };
        let time: jiff::Timestamp = text
            .parse()
            .map_err(|e| field_error(at, format!("not an RFC 3339 time: {e}")))?;
        Ok(Some(meta::Time {
            seconds: Some(time.as_second()),
            nanos: Some(0),
        }))
    }
}

/// A port by number or by name.
impl Field for Option<IntOrString> {
    fn to_json(&self, _: Shown, _: &str) -> Result<Option<Value>, ProtoError> {
        let Some(v) = self else {
            return Ok(None);
        };
        Ok(match v.r#type {
            Some(1) => v.str_val.clone().filter(|s| !s.is_empty()).map(Value::from),
            _ => Some(json!(v.int_val.unwrap_or(0))),
        })
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.map(|v| match v {
            Value::String(s) => IntOrString {
                r#type: Some(1),
                int_val: None,
                str_val: Some(s.clone()),
            },
            n => IntOrString {
                r#type: Some(0),
                int_val: n.as_i64().and_then(|n| i32::try_from(n).ok()),
                str_val: None,
            },
        }))
    }
}

/// Managed fields, as the JSON document they hold.
impl Field for Option<meta::FieldsV1> {
    fn to_json(&self, _: Shown, at: &str) -> Result<Option<Value>, ProtoError> {
        let Some(raw) = self.as_ref().and_then(|f| f.raw.as_ref()) else {
            return Ok(None);
        };
        serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| field_error(at, format!("not JSON: {e}")))
    }

    fn from_json(v: Option<&Value>, _: &str) -> Result<Self, ProtoError> {
        Ok(v.map(|f| meta::FieldsV1 {
            raw: Some(f.to_string().into_bytes()),
        }))
    }
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
