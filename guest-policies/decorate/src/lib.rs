//! The default decoration policy: `default-policies.md` "Decoration" as a Wasm component
//! (world `decorator`).
//!
//! The decisions live in `tfjob_policy_logic::decorate`, shared with the operator's native
//! reference; this crate only crosses the boundary: it decodes the settings and the pod,
//! decorates, and encodes the pod again. The pod is handled as a JSON document of which only
//! the fields decoration works with are decoded into k8s-openapi types ([`view`]), which keeps
//! the component small and fast, and leaves every other field exactly as the operator built it
//! (the same text).
//! Settings are `DecorateSettings` (schema in `guest-policies/README.md`); `{}` or an empty
//! document mean the defaults, which add the `TFJOB_*` execution environment variables and
//! nothing else. With `namespaceLabels` set, the job's Namespace is read from the cluster
//! (the operator grants the read for those settings) and the listed labels copied.

mod view;

use tfjob_policy_sdk::logic::context::JobContext as Context;
use tfjob_policy_sdk::logic::decorate::{
    DecorateSettings, copy_namespace_labels, decorate_pod, namespace_labels_of,
};
use tfjob_policy_sdk::wit::{JobContext, PolicyError};
use tfjob_policy_sdk::{cluster, settings};

/// The component's implementation.
struct DefaultDecorate;

tfjob_policy_sdk::export_policy!(world: "decorator", path: "../../wit", policy: DefaultDecorate);

impl bindings::exports::tfjob::policy::settings::Guest for DefaultDecorate {
    fn validate_settings(settings: String) -> Result<(), String> {
        settings::validate::<DecorateSettings>(&settings)
    }
}

impl bindings::exports::tfjob::policy::decorate::Guest for DefaultDecorate {
    fn decorate_pod(ctx: JobContext, settings: String, pod: String) -> Result<String, PolicyError> {
        let settings = settings::cached::<DecorateSettings>(&settings)?;
        decorate_document(&settings, &ctx.into(), &pod)
    }
}

/// Decorates the pod JSON document `pod` through its [`view`].
fn decorate_document(
    settings: &DecorateSettings,
    ctx: &Context,
    pod: &str,
) -> Result<String, PolicyError> {
    let document = view::Document::parse(pod)?;
    let mut after = document.extract()?;
    let before = view::copy(&after);
    if !settings.namespace_labels.is_empty() {
        let got = cluster::get("namespaces", "", &ctx.namespace).map_err(|e| {
            PolicyError::Failed(format!("reading namespaces: {}", cluster::message(&e)))
        })?;
        // A Namespace that is gone has no labels to give.
        let labels = match got.object {
            Some(json) => namespace_labels_of(&json).map_err(PolicyError::InvalidInput)?,
            None => Default::default(),
        };
        copy_namespace_labels(&settings.namespace_labels, &labels, &mut after);
    }
    let after = decorate_pod(settings, ctx, after);
    document.write_back(before, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::exports::tfjob::policy::decorate::Guest as _;
    use bindings::exports::tfjob::policy::settings::Guest as _;
    use serde_json::{Value, json};
    use tfjob_policy_sdk::convert;
    use tfjob_policy_sdk::logic::context::INTERRUPTIBLE_ANNOTATION;
    use tfjob_policy_sdk::logic::settings::settings_from_json;

    fn ctx() -> JobContext {
        JobContext {
            job_name: "mnist".into(),
            namespace: "ml".into(),
            job_uid: "u-1".into(),
            job_labels: vec![],
            job_annotations: vec![],
            replica_type: "Worker".into(),
            replica_index: 0,
            replica_count: 2,
            attempt: 0,
        }
    }

    const POD: &str = r#"{"metadata": {"name": "mnist-worker-0"},
        "spec": {"containers": [{"name": "tensorflow", "image": "tf:2"}]}}"#;

    /// A pod using most of what a pod can hold, in k8s-openapi's own encoding (so decoding it
    /// whole and encoding it again gives the same document).
    fn rich_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "mnist-worker-0", "namespace": "ml",
                "labels": {"training.kubeflow.org/job-name": "mnist", "team": "ml"},
                "annotations": {"note": "x"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "mnist",
                    "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]
            },
            "spec": {
                "restartPolicy": "Never",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
                "initContainers": [{"name": "fetch", "image": "busybox", "command": ["sh", "-c", "true"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "containers": [
                    {"name": "tensorflow", "image": "tf:2", "ports": [{"containerPort": 2222, "name": "tfjob-port"}],
                     "env": [{"name": "TF_CONFIG", "value": "{}"}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                     "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2"}},
                     "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}],
                     "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 5},
                     "securityContext": {"runAsNonRoot": true}},
                    {"name": "sidecar", "image": "log:1", "resources": {"requests": {"cpu": "100m"}}}
                ],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}]}},
                    {"name": "nvidia-lib", "emptyDir": {}}
                ],
                "tolerations": [{"key": "team", "value": "ml"}],
                "nodeSelector": {"zone": "b"},
                "schedulerName": "volcano"
            },
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        })
    }

    fn rich_settings() -> DecorateSettings {
        settings_from_json(
            r#"{
                "defaultEnvVars": {"Z": "1", "A": "$(Z)"},
                "accelerators": {"nvidia.com/gpu": {
                    "volumes": [
                        {"name": "nvidia-lib", "hostPath": "/usr/lib/nvidia", "mountPath": "/usr/local/nvidia/lib64"},
                        {"name": "nvidia-bin", "hostPath": "/usr/bin/nvidia", "mountPath": "/usr/local/nvidia/bin"}
                    ],
                    "envVars": {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}
                }},
                "resourceTolerations": {"nvidia.com/gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
                "interruptibleTolerations": [{"key": "spot", "operator": "Exists"}],
                "defaultTolerations": [{"key": "team", "operator": "Equal", "value": "ml"}],
                "defaultLabels": {"team": "platform", "tier": "batch"},
                "defaultAnnotations": {"cost-center": "42"},
                "nodeSelector": {"zone": "a", "pool": "gpu"},
                "interruptibleNodeSelector": {"pool": "spot"},
                "schedulerName": "default-scheduler"
            }"#,
        )
        .unwrap()
    }

    /// Decoding the whole pod into k8s-openapi types, the straightforward way.
    fn decorate_whole(settings: &DecorateSettings, ctx: &Context, pod: &Value) -> Value {
        let pod = convert::pod_from_json(&pod.to_string()).unwrap();
        serde_json::to_value(decorate_pod(settings, ctx, pod)).unwrap()
    }

    fn decorate_view(settings: &DecorateSettings, ctx: &Context, pod: &Value) -> Value {
        serde_json::from_str(&decorate_document(settings, ctx, &pod.to_string()).unwrap()).unwrap()
    }

    #[test]
    fn the_view_decorates_exactly_like_the_whole_pod() {
        let mut interruptible: Context = ctx().into();
        interruptible
            .job_annotations
            .insert(INTERRUPTIBLE_ANNOTATION.into(), "true".into());
        let minimal = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}});
        let no_spec = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        for settings in [DecorateSettings::default(), rich_settings()] {
            for ctx in [ctx().into(), interruptible.clone()] {
                for pod in [rich_pod(), minimal.clone(), no_spec.clone()] {
                    assert_eq!(
                        decorate_view(&settings, &ctx, &pod),
                        decorate_whole(&settings, &ctx, &pod),
                        "settings {settings:?}, pod {pod}"
                    );
                }
            }
        }
    }

    #[test]
    fn fields_outside_the_view_pass_through_unchanged() {
        // Unknown to k8s-openapi, so decoding the whole pod would drop them.
        let mut pod = rich_pod();
        pod["spec"]["futureField"] = json!({"x": 1});
        pod["spec"]["containers"][0]["futureField"] = json!(true);
        let out = decorate_view(&rich_settings(), &ctx().into(), &pod);
        assert_eq!(out["spec"]["futureField"], json!({"x": 1}));
        assert_eq!(out["spec"]["containers"][0]["futureField"], json!(true));
        assert_eq!(out["spec"]["affinity"], pod["spec"]["affinity"]);
        assert_eq!(out["status"], pod["status"]);
    }

    #[test]
    fn the_document_reads_any_spelling_of_the_pod_as_json_readers_do() {
        // Whitespace, escaped keys and values, a key written twice (the last one counts, as
        // for `serde_json::Value`), `null` where an object or list may be: the output is the
        // same document as decorating the parsed pod (a `null` the pod had stays, as before,
        // where k8s-openapi drops it; Kubernetes reads both alike).
        let texts = [
            "{\n  \"apiVersion\": \"v1\", \"kind\": \"Pod\",\n  \"metadata\": {\"name\": \"p\", \"labels\": {\"a\": \"1\"}},\n  \"spec\": {\n    \"containers\": [ {\"name\": \"tensorflow\", \"resources\": {\"limits\": {\"nvidia.com/gpu\": \"1\"}}} ],\n    \"volumes\": [ {\"name\": \"data\", \"emptyDir\": {}} ]\n  }\n}\n",
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "first"}, "spec": {"containers": [{"name": "a"}]}, "metadata": {"name": "second", "labels": {"x": "y"}}}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": null, "spec": {"initContainers": null, "volumes": null, "tolerations": null, "containers": [{"name": "a", "env": null}]}}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "t\u00e9\"st", "fut\u00fcre\n": {"k\\ey": [1, 2.5e3, "\ud83d\ude00"]}}], "ex\"tra": true}, "st\u0061tus": {}}"#,
        ];
        for text in texts {
            let parsed: Value = serde_json::from_str(text).unwrap();
            let out = decorate_document(&rich_settings(), &ctx().into(), text).unwrap();
            let out: Value = serde_json::from_str(&out).unwrap();
            let mut whole = decorate_whole(&rich_settings(), &ctx().into(), &parsed);
            // Fields k8s-openapi does not know are dropped by decoding the whole pod, and kept
            // by the document.
            if let Some(extra) = parsed.pointer("/spec/ex\"tra") {
                whole["spec"]["ex\"tra"] = extra.clone();
                whole["spec"]["containers"][0]["fut\u{fc}re\n"] =
                    parsed["spec"]["containers"][0]["fut\u{fc}re\n"].clone();
            }
            assert_eq!(without_nulls(out), whole, "{text}");
        }
    }

    #[test]
    fn variables_and_mounts_are_appended_to_the_text_the_pod_had() {
        let env = r#"[ {"name": "TF_CONFIG", "value": "{\"task\": {\"index\": 0}}", "later": 1} ]"#;
        let mounts = r#"[{"name":"data","mountPath":"/data"}]"#;
        let pod = format!(
            r#"{{"spec": {{"containers": [{{"name": "tensorflow", "env": {env}, "volumeMounts": {mounts},
                "resources": {{"limits": {{"nvidia.com/gpu": "1"}}}}}}]}}}}"#
        );
        let out = decorate_document(&rich_settings(), &ctx().into(), &pod).unwrap();
        // The items the pod had are its text, a field k8s-openapi does not know included.
        assert!(out.contains(&env[..env.len() - 1]), "{out}");
        assert!(out.contains(&mounts[..mounts.len() - 1]), "{out}");
        let out: Value = serde_json::from_str(&out).unwrap();
        let container = &out["spec"]["containers"][0];
        let names: Vec<&str> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "TF_CONFIG");
        assert!(names.contains(&"TFJOB_REPLICA_TYPE"), "{names:?}");
        assert!(names.contains(&"LD_LIBRARY_PATH"), "{names:?}");
        assert_eq!(container["env"][0]["later"], 1);
        assert_eq!(container["volumeMounts"][0]["name"], "data");
        assert_eq!(container["volumeMounts"][1]["name"], "nvidia-lib");
    }

    fn without_nulls(value: Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k, without_nulls(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
            other => other,
        }
    }

    #[test]
    fn empty_settings_add_the_execution_environment() {
        for settings in ["", "{}"] {
            let out = DefaultDecorate::decorate_pod(ctx(), settings.into(), POD.into()).unwrap();
            let out: Value = serde_json::from_str(&out).unwrap();
            let env = &out["spec"]["containers"][0]["env"];
            assert_eq!(env[0], json!({"name": "TFJOB_NAME", "value": "mnist"}));
            assert_eq!(env[5], json!({"name": "TFJOB_ATTEMPT", "value": "0"}));
            assert_eq!(out["spec"]["containers"][0]["image"], "tf:2");
        }
    }

    #[test]
    fn settings_are_applied() {
        let settings = json!({"defaultLabels": {"team": "ml"}, "schedulerName": "volcano"});
        let out = DefaultDecorate::decorate_pod(ctx(), settings.to_string(), POD.into()).unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["metadata"]["labels"]["team"], "ml");
        assert_eq!(out["spec"]["schedulerName"], "volcano");
    }

    #[test]
    fn bad_input_and_settings_name_the_field() {
        let run =
            |pod: &str| DefaultDecorate::decorate_pod(ctx(), "{}".into(), pod.into()).unwrap_err();
        for (pod, start) in [
            (
                r#"{"spec": {"containers": [{"name": 1}]}}"#,
                "pod.spec.containers[0].name: invalid type",
            ),
            (
                r#"{"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": 1}]}]}}"#,
                "pod.spec.containers[0].env[0].value: invalid type",
            ),
            (
                r#"{"spec": {"initContainers": {}}}"#,
                "pod.spec.initContainers: expected a list, found an object",
            ),
            (
                r#"{"spec": {"volumes": [3]}}"#,
                "pod.spec.volumes[0]: expected an object, found a number",
            ),
            (
                r#"{"metadata": {"labels": {"a": 1}}}"#,
                "pod.metadata.labels.a: invalid type",
            ),
            (
                r#"{"spec": {"tolerations": [{"tolerationSeconds": "x"}]}}"#,
                "pod.spec.tolerations[0].tolerationSeconds: invalid type",
            ),
            ("[]", "pod: expected a JSON object"),
            ("{", "pod: EOF while parsing"),
            // The document is read once: a misshapen value is read through, so a syntax error
            // after it is still what is reported, as by any JSON reader.
            (
                r#"{"spec": {"containers": "x"}, "status": }"#,
                "pod: expected value at line 1 column 41",
            ),
            (
                r#"{"spec": {"containers": [{"name": "a"}, null]}}"#,
                "pod.spec.containers[1]: expected an object, found null",
            ),
            (
                r#"{"spec": {"containers": [[{"name": "a"}]]}}"#,
                "pod.spec.containers[0]: expected an object, found a list",
            ),
            (
                r#"{"metadata": [], "spec": {"volumes": true}}"#,
                "pod.metadata: expected an object, found a list",
            ),
            // Misshapen fields are named in a fixed order, not the document's.
            (
                r#"{"spec": {"volumes": 1, "initContainers": "x"}}"#,
                "pod.spec.initContainers: expected a list, found a string",
            ),
        ] {
            let err = run(pod);
            assert!(
                matches!(&err, PolicyError::InvalidInput(m) if m.starts_with(start)),
                "{pod}: {err:?}"
            );
        }
        // A misshapen value replaced by a later one under the same key counts no more.
        let twice = r#"{"spec": {"containers": 7, "containers": [{"name": "a"}]}}"#;
        assert!(DefaultDecorate::decorate_pod(ctx(), "{}".into(), twice.into()).is_ok());
        let bad = r#"{"schedulerName": ""}"#;
        let err = DefaultDecorate::decorate_pod(ctx(), bad.into(), POD.into()).unwrap_err();
        assert_eq!(
            err,
            PolicyError::InvalidSettings("schedulerName: must not be empty".into())
        );
        assert_eq!(
            DefaultDecorate::validate_settings(bad.into()),
            Err("schedulerName: must not be empty".into())
        );
        assert_eq!(DefaultDecorate::validate_settings("{}".into()), Ok(()));
        assert_eq!(DefaultDecorate::validate_settings("".into()), Ok(()));
    }
}
