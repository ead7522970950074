//! Policy ConfigMaps that name their module in a registry, end to end: the embedded cluster,
//! the distribution registry on loopback, modules pushed with `policy push`, and the operator
//! binary (`run`) pulling them. A referenced policy decorates new pods; a moved tag swaps the
//! policy to the digest it names now; with the registry stopped, a restarted operator loads
//! its pinned policies from its cache; each refusal leaves the previous version serving with a
//! status saying why; and policies written in Python and JavaScript (components of 12-18 MB,
//! built with componentize-py and componentize-js) ship the same way and decorate pods.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::registry::{self, push};
use common::{Killed, RUNTIME_LOAD, eventually, write};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tfjob_policy_engine::configmap::{PolicyState, PolicyStatus};
use tfjob_policy_engine::defaults;
use tfjob_test_support::registry::{PASSWORD, Registry};

const POLICY_NS: &str = "tfjob-system";

/// The default decorate module, made distinct by a custom section naming `version` (a
/// component may carry custom sections anywhere): same behaviour, another digest.
fn module(version: &str) -> Vec<u8> {
    let mut wasm = defaults::find("default-decorate").unwrap().wasm.to_vec();
    let name = b"tfjob-test-version";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(version.as_bytes());
    wasm.push(0);
    wasm.push(section.len() as u8);
    wasm.extend_from_slice(&section);
    wasm
}

/// A policy ConfigMap naming `reference`, whose policy labels pods `from-<name>: <label>`.
fn referencing(name: &str, reference: &str, label: &str) -> ConfigMap {
    let rest = format!("settings:\n  defaultLabels:\n    from-{name}: {label}\n");
    serde_json::from_value(registry::referencing(POLICY_NS, name, reference, &rest)).unwrap()
}

struct Env {
    cluster: Cluster,
    registry: Registry,
    cache: tempfile::TempDir,
}

impl Env {
    fn start() -> Env {
        let cluster = Cluster::start(|_| {});
        cluster.create_namespaces(&[POLICY_NS, "ml"]);
        let cache = common::private_dir();
        Env {
            cluster,
            registry: Registry::start(),
            cache,
        }
    }

    fn operator(&self, extra: &[&str]) -> Killed {
        let mut args = vec![
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--policy-registry-insecure",
            "127.0.0.1",
            "--policy-registry-refresh",
            "1s",
            "--policy-cache-dir",
            self.cache.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        self.cluster.operator(&args, &[])
    }

    fn apply(&self, cm: &ConfigMap) {
        let api: Api<ConfigMap> = Api::namespaced(self.cluster.client(), POLICY_NS);
        let name = cm.metadata.name.clone().unwrap();
        self.cluster.runtime.block_on(async {
            match api.get_opt(&name).await.unwrap() {
                Some(existing) => {
                    let mut cm = cm.clone();
                    cm.metadata.resource_version = existing.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &cm)
                        .await
                        .unwrap();
                }
                None => {
                    api.create(&PostParams::default(), cm).await.unwrap();
                }
            }
        });
    }

    fn status(&self, name: &str) -> Option<PolicyStatus> {
        let api: Api<ConfigMap> = Api::namespaced(self.cluster.client(), POLICY_NS);
        let cm = self.cluster.runtime.block_on(api.get(name)).ok()?;
        PolicyStatus::of(&cm)?.ok()
    }

    /// Waits for `name`'s status to satisfy `done`; returns it.
    fn status_until(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&PolicyStatus) -> bool,
    ) -> PolicyStatus {
        self.status_within(Duration::from_secs(90), name, what, done)
    }

    /// Waits up to `limit` for `name`'s status to satisfy `done`; a failure shows the last
    /// status seen.
    fn status_within(
        &self,
        limit: Duration,
        name: &str,
        what: &str,
        done: impl Fn(&PolicyStatus) -> bool,
    ) -> PolicyStatus {
        let started = Instant::now();
        loop {
            let status = self.status(name);
            if let Some(reached) = status.as_ref().filter(|s| done(s)) {
                return reached.clone();
            }
            assert!(
                started.elapsed() < limit,
                "{name}: never {what} within {limit:?}; last: {status:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The labels of the pods of job `job` once it has one.
    fn pod_labels(&self, job: &str) -> BTreeMap<String, String> {
        let pods: Api<Pod> = Api::namespaced(self.cluster.client(), "ml");
        eventually(&format!("a pod of {job}"), || {
            let list = self
                .cluster
                .runtime
                .block_on(pods.list(
                    &ListParams::default().labels(&format!("training.kubeflow.org/job-name={job}")),
                ))
                .ok()?;
            list.items.into_iter().next()?.metadata.labels
        })
    }
}

fn digest_of(pinned: &str) -> &str {
    pinned.split_once('@').expect("REF@sha256:...").1
}

#[test]
fn a_referenced_policy_decorates_follows_its_tag_and_restarts_from_the_cache() {
    let mut env = Env::start();
    let dir = tempfile::tempdir().unwrap();
    let host = env.registry.host();
    let v1 = push(
        dir.path(),
        &module("v1"),
        &format!("{host}/team/labeler:stable"),
        &[],
    );
    let pinned_v1 = push(
        dir.path(),
        &module("v1"),
        &format!("{host}/team/pinned:v1"),
        &[],
    );

    let running = env.operator(&[]);
    env.apply(&referencing(
        "labeler",
        &format!("{host}/team/labeler:stable"),
        "registry",
    ));
    // Pinned by digest (the tag dropped): what a restart without the registry must still load.
    let pinned_ref = format!("{host}/team/pinned@{}", digest_of(&pinned_v1));
    env.apply(&referencing("pinned", &pinned_ref, "pinned"));
    let status = env.status_until("tfjob-policy-labeler", "Active", |s| {
        s.state == PolicyState::Active
    });
    assert_eq!(
        status.module.as_deref(),
        Some(format!("{host}/team/labeler@{}", digest_of(&v1)).as_str()),
        "{status:?}"
    );
    env.status_until("tfjob-policy-pinned", "Active", |s| {
        s.state == PolicyState::Active
    });

    // Published by another tool (skopeo, from an OCI layout), loaded all the same.
    let foreign_target = format!("{host}/other-tool/labeler:v1");
    let foreign_digest =
        common::registry::publish_with_skopeo(dir.path(), &module("foreign"), &foreign_target);
    env.apply(&referencing("foreign", &foreign_target, "skopeo"));
    let foreign = env.status_until("tfjob-policy-foreign", "Active", |s| {
        s.state == PolicyState::Active
    });
    assert!(
        foreign
            .module
            .as_deref()
            .unwrap()
            .ends_with(&foreign_digest),
        "{foreign:?}"
    );

    env.cluster.submit("ml", "first");
    let labels = env.pod_labels("first");
    assert_eq!(
        labels.get("from-foreign").map(String::as_str),
        Some("skopeo"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("from-labeler").map(String::as_str),
        Some("registry"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("from-pinned").map(String::as_str),
        Some("pinned"),
        "{labels:?}"
    );

    // The tag moves: within the refresh the policy serves the new digest.
    let v2 = push(
        dir.path(),
        &module("v2"),
        &format!("{host}/team/labeler:stable"),
        &[],
    );
    assert_ne!(digest_of(&v1), digest_of(&v2));
    let status = env.status_until("tfjob-policy-labeler", "the moved tag's digest", |s| {
        s.state == PolicyState::Active
            && s.module
                .as_deref()
                .is_some_and(|m| m.ends_with(digest_of(&v2)))
    });
    assert_eq!(status.digest.as_deref().map(|d| d.len()), Some(64));

    // A restart with the registry gone: the pinned policy loads from the cache, and so does the
    // digest the tag named last; a tag never resolved waits, Pending, saying why.
    push(
        dir.path(),
        &module("late"),
        &format!("{host}/team/late:v1"),
        &[],
    );
    drop(running);
    env.registry.stop();
    let _restarted = env.operator(&[]);
    let mut late = referencing("late", &format!("{host}/team/late:v1"), "late");
    // Ignore: a policy that never loaded holds no job.
    let manifest = late.data.as_mut().unwrap().get_mut("policy.yaml").unwrap();
    manifest.push_str("failurePolicy: Ignore\n");
    env.apply(&late);
    let pending = env.status_until("tfjob-policy-late", "Pending on the registry", |s| {
        s.state == PolicyState::Pending
            && s.error
                .as_deref()
                .is_some_and(|e| e.contains("is not reachable"))
    });
    assert!(pending.digest.is_none(), "{pending:?}");
    env.cluster.submit("ml", "after-restart");
    let labels = env.pod_labels("after-restart");
    assert_eq!(
        labels.get("from-pinned").map(String::as_str),
        Some("pinned"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("from-labeler").map(String::as_str),
        Some("registry"),
        "{labels:?}"
    );
    assert!(!labels.contains_key("from-late"), "{labels:?}");
    let tagged = env.status("tfjob-policy-labeler").unwrap();
    assert!(
        tagged.module.as_deref().unwrap().ends_with(digest_of(&v2)),
        "the digest served before the restart: {tagged:?}"
    );

    // The registry back: the waiting policy is pulled on its next retry.
    env.registry.resume();
    env.status_until(
        "tfjob-policy-late",
        "Active once the registry is back",
        |s| s.state == PolicyState::Active,
    );

    // What the restart read: pulled modules and compiled code, each a file of the cache.
    let count = |sub: &str| std::fs::read_dir(env.cache.path().join(sub)).map_or(0, |d| d.count());
    assert!(
        count("artifacts/sha256") >= 4,
        "v1, v2, pinned and late are cached"
    );
    assert!(count("compiled") >= 4, "their compiled code is cached");
}

#[test]
fn refused_modules_leave_the_previous_version_serving_and_say_why() {
    let env = Env::start();
    let dir = tempfile::tempdir().unwrap();
    let host = env.registry.host();
    let (private, public) = {
        use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
        let secret = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
        (
            write(
                dir.path(),
                "signing.pem",
                secret.to_pkcs8_pem(LineEnding::LF).unwrap().as_bytes(),
            ),
            write(
                dir.path(),
                "signing.pub",
                secret
                    .public_key()
                    .to_public_key_pem(LineEnding::LF)
                    .unwrap()
                    .as_bytes(),
            ),
        )
    };
    let tag = format!("{host}/team/signed:stable");
    let signed = push(
        dir.path(),
        &module("signed"),
        &tag,
        &["--sign-key", &private],
    );
    let _running = env.operator(&["--policy-trusted-key", &public]);
    env.apply(&referencing("signed", &tag, "signed"));
    let status = env.status_until("tfjob-policy-signed", "Active", |s| {
        s.state == PolicyState::Active
    });
    assert!(status.signed_by.is_some(), "{status:?}");
    assert!(
        status
            .module
            .as_deref()
            .unwrap()
            .ends_with(digest_of(&signed))
    );

    // The tag moves to an unsigned module: refused, the signed one keeps serving.
    push(dir.path(), &module("unsigned"), &tag, &[]);
    let status = env.status_until("tfjob-policy-signed", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    let error = status.error.clone().unwrap();
    assert!(
        error.contains("is not signed") && error.contains("still serves"),
        "{error}"
    );
    assert!(
        status
            .module
            .as_deref()
            .unwrap()
            .ends_with(digest_of(&signed)),
        "{status:?}"
    );

    // A digest the registry does not hold, a missing pull Secret, a reference and bytes at once.
    let missing = format!("{host}/team/signed@sha256:{}", "0".repeat(64));
    env.apply(&referencing("missing", &missing, "x"));
    let status = env.status_until("tfjob-policy-missing", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    assert!(status.error.unwrap().contains("not found in the registry"));
    let mut secretive = referencing("secretive", &tag, "x");
    secretive
        .data
        .as_mut()
        .unwrap()
        .insert("pullSecret".into(), "nowhere".into());
    env.apply(&secretive);
    let status = env.status_until("tfjob-policy-secretive", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    assert!(
        status
            .error
            .unwrap()
            .contains("Secret tfjob-system/nowhere (data key pullSecret) does not exist")
    );
    let mut both = referencing("both", &tag, "x");
    both.binary_data = Some(BTreeMap::from([(
        "policy.wasm".into(),
        k8s_openapi::ByteString(module("b")),
    )]));
    env.apply(&both);
    let status = env.status_until("tfjob-policy-both", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    assert!(
        status
            .error
            .unwrap()
            .contains("a module reference and binaryData policy.wasm are both set")
    );
}

#[test]
fn credentials_come_from_the_pull_secret_in_the_configmaps_namespace() {
    let mut env = Env::start();
    env.registry.stop();
    env.registry = Registry::start_authenticated();
    let dir = tempfile::tempdir().unwrap();
    let host = env.registry.host();
    let auth = write(
        dir.path(),
        "config.json",
        env.registry.docker_config(PASSWORD).as_bytes(),
    );
    let tag = format!("{host}/team/private:v1");
    push(
        dir.path(),
        &module("private"),
        &tag,
        &["--auth-file", &auth],
    );

    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.cluster.client(), POLICY_NS);
    let secret = |name: &str, password: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, env.registry.docker_config(password))},
        }))
        .unwrap()
    };
    env.cluster.runtime.block_on(async {
        secrets
            .create(&PostParams::default(), &secret("good", PASSWORD))
            .await
            .unwrap();
        secrets
            .create(&PostParams::default(), &secret("stale", "an-old-password"))
            .await
            .unwrap();
    });
    let _running = env.operator(&[]);
    let with_secret = |name: &str, secret: Option<&str>| {
        let mut cm = referencing(name, &tag, name);
        if let Some(secret) = secret {
            cm.data
                .as_mut()
                .unwrap()
                .insert("pullSecret".into(), secret.into());
        }
        cm
    };
    env.apply(&with_secret("good", Some("good")));
    env.apply(&with_secret("stale", Some("stale")));
    env.apply(&with_secret("anonymous", None));
    env.status_until("tfjob-policy-good", "Active", |s| {
        s.state == PolicyState::Active
    });
    let refused = env.status_until("tfjob-policy-stale", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    assert!(
        refused
            .error
            .unwrap()
            .contains("the credentials given were refused")
    );
    let anonymous = env.status_until("tfjob-policy-anonymous", "Rejected", |s| {
        s.state == PolicyState::Rejected
    });
    assert!(
        anonymous
            .error
            .unwrap()
            .contains("asks for a password and none is given")
    );
}

/// A policy ConfigMap naming `reference` for jobs labelled `lang: <lang>`, with the
/// team-labels example's settings.
fn team_labels(lang: &str, reference: &str) -> ConfigMap {
    let rest =
        format!("selector:\n  matchLabels: {{lang: {lang}}}\nsettings: {{team: {lang}-team}}\n");
    let name = format!("team-labels-{lang}");
    serde_json::from_value(registry::referencing(POLICY_NS, &name, reference, &rest)).unwrap()
}

#[test]
fn policies_written_in_python_and_javascript_ship_from_the_registry() {
    let env = Env::start();
    let dir = tempfile::tempdir().unwrap();
    let host = env.registry.host();
    let example = |path: &str| common::repo(&format!("guest-policies/examples/team-labels/{path}"));
    let python = dir.path().join("python.wasm");
    tfjob_test_support::build_python(&example("python"), "decorator", &python);
    let js = dir.path().join("js.wasm");
    tfjob_test_support::build_js(&example("js/policy.js"), "decorator", &js);

    let _running = env.operator(&[]);
    for (lang, component) in [("python", &python), ("js", &js)] {
        let module = std::fs::read(component).unwrap();
        assert!(
            module.len() > 10 << 20,
            "{lang}: a runtime inside, over 10 MiB"
        );
        let pinned = push(
            dir.path(),
            &module,
            &format!("{host}/team/labels-{lang}:v1"),
            &[],
        );
        env.apply(&team_labels(lang, &format!("{host}/team/labels-{lang}:v1")));
        let status = env.status_within(
            RUNTIME_LOAD,
            &format!("tfjob-policy-team-labels-{lang}"),
            "Active",
            |s| s.state == PolicyState::Active,
        );
        assert_eq!(
            status.module.as_deref(),
            Some(format!("{host}/team/labels-{lang}@{}", digest_of(&pinned)).as_str()),
            "{status:?}"
        );
        let job = format!("{lang}-job");
        env.cluster.submit_manifest(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": job, "namespace": "ml", "labels": {"lang": lang}},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "tf:2"}]}}}}}
        }));
        let labels = env.pod_labels(&job);
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some(format!("{lang}-team").as_str()),
            "{lang}: {labels:?}"
        );
    }
}
