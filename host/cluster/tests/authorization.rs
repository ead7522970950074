//! RBAC on the embedded API server, through the real kubectl and kube-rs: with authorization
//! on, the admin's kubeconfig (the administrator's token, over HTTPS) may do anything; kubectl acting as a service
//! account (`--as`) is refused with Kubernetes' own words until a Role and RoleBinding applied
//! by the admin allow it, and only within their namespace; an aggregated ClusterRole grants the
//! rules of the roles it selects; `kubectl create token` mints a token that a kube-rs client
//! presents as that account, an unknown token is `Unauthorized`; an owner reference that
//! blocks deletion needs `update` on the owner's `finalizers`; and every denial is counted.
//! Every kubeconfig is one `up` writes. CI installs kubectl; the test needs it on PATH.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use tfjob_cluster::Store;
use tfjob_cluster::auth::access::Access;
use tfjob_cluster::http::server::ServerOptions;

struct Cluster {
    server: common::Serving,
    dir: tempfile::TempDir,
    store: Arc<Store>,
    runtime: tokio::runtime::Runtime,
}

fn start() -> Cluster {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Store::new();
    let crd = serde_json::to_value(tfjob_api::crd::tfjob_crd()).unwrap();
    tfjob_cluster::storage::crd::install(&store, crd).unwrap();
    let options = ServerOptions {
        access: Access {
            authorize: true,
            ..Access::default()
        },
        ..ServerOptions::default()
    };
    let server = runtime.block_on(common::serve(Arc::clone(&store), options));
    Cluster {
        server,
        dir: tempfile::tempdir().unwrap(),
        store,
        runtime,
    }
}

impl Cluster {
    /// A kubeconfig whose user `user` presents `token`.
    fn kubeconfig(&self, user: &str, token: &str) -> PathBuf {
        self.server
            .write_kubeconfig(self.dir.path(), user, user, Some(token))
    }

    fn admin(&self) -> PathBuf {
        self.server
            .write_admin_kubeconfig(self.dir.path(), "default")
    }

    fn kubectl(&self, kubeconfig: &PathBuf, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs (CI installs it)");
        {
            use std::io::Write as _;
            let mut input = child.stdin.take().unwrap();
            input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, kubeconfig: &PathBuf, args: &[&str]) -> String {
        self.ok_with(kubeconfig, args, None)
    }

    fn ok_with(&self, kubeconfig: &PathBuf, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(kubeconfig, args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl apply` of `yaml` as the admin.
    fn apply(&self, yaml: &str) {
        self.ok_with(&self.admin(), &["apply", "-f", "-"], Some(yaml));
    }

    fn fails(&self, kubeconfig: &PathBuf, args: &[&str]) -> String {
        let out = self.kubectl(kubeconfig, args, None);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

const BUILDER: &str = "system:serviceaccount:ci:builder";

/// kubectl as the builder account: the admin's kubeconfig with `--as`.
struct Builder<'a>(&'a Cluster, &'a PathBuf, &'a str);

impl Builder<'_> {
    fn args<'b>(&'b self, args: &[&'b str]) -> Vec<&'b str> {
        let mut all = vec![self.2];
        all.extend_from_slice(args);
        all
    }

    fn ok(&self, args: &[&str]) -> String {
        self.0.ok(self.1, &self.args(args))
    }

    fn fails(&self, args: &[&str]) -> String {
        self.0.fails(self.1, &self.args(args))
    }
}

/// The ConfigMaps of `namespace` through a kube-rs client of `kubeconfig`.
async fn configmaps(kubeconfig: &str, namespace: &str) -> Api<ConfigMap> {
    configmaps_as(kubeconfig, None, namespace).await
}

/// The same, the client impersonating `someone` when given.
async fn configmaps_as(kubeconfig: &str, someone: Option<&str>, namespace: &str) -> Api<ConfigMap> {
    let mut config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.impersonate = someone.map(str::to_owned);
    Api::namespaced(kube::Client::try_from(config).unwrap(), namespace)
}

#[test]
fn kubectl_is_authorized_by_the_roles_the_admin_applies() {
    let c = start();
    let admin = c.admin();
    c.ok(&admin, &["create", "namespace", "ci"]);
    c.ok(&admin, &["create", "serviceaccount", "builder", "-n", "ci"]);
    c.ok(
        &admin,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "ci",
            "--from-literal=a=1",
        ],
    );
    let token = c.ok(&admin, &["create", "token", "builder", "-n", "ci"]);
    let token = token.trim().to_owned();
    assert!(token.len() >= 43, "{token:?}");
    // kubectl sends no token over plain HTTP: it acts as the account by impersonation.
    let as_builder = format!("--as={BUILDER}");
    let builder = Builder(&c, &admin, &as_builder);

    let refused = builder.fails(&["get", "configmaps", "-n", "ci"]);
    assert!(
        refused.contains(&format!("Error from server (Forbidden): configmaps is forbidden: User \"{BUILDER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"ci\"")),
        "{refused}"
    );

    c.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: config-reader, namespace: ci}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: builder-reads-config, namespace: ci}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: config-reader}
subjects:
- {kind: ServiceAccount, name: builder, namespace: ci}
"#,
    );
    let listed = builder.ok(&["get", "configmaps", "-n", "ci", "-o", "name"]);
    assert!(listed.contains("configmap/settings"), "{listed}");
    builder.ok(&["get", "configmap", "settings", "-n", "ci"]);
    let refused = builder.fails(&["delete", "configmap", "settings", "-n", "ci"]);
    assert!(
        refused.contains(&format!("configmaps \"settings\" is forbidden: User \"{BUILDER}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"ci\"")),
        "{refused}"
    );
    let refused = builder.fails(&["get", "configmaps", "-n", "default"]);
    assert!(
        refused.contains("in the namespace \"default\""),
        "{refused}"
    );
    let refused = builder.fails(&["get", "tfjobs", "-A"]);
    assert!(
        refused.contains(&format!("tfjobs.kubeflow.org is forbidden: User \"{BUILDER}\" cannot list resource \"tfjobs\" in API group \"kubeflow.org\" at the cluster scope")),
        "{refused}"
    );
    // The debug endpoints are the admin's.
    let refused = builder.fails(&["get", "--raw", "/debug/faults"]);
    assert!(
        refused.contains(&format!(
            "User \"{BUILDER}\" cannot get path \"/debug/faults\""
        )),
        "{refused}"
    );

    // An aggregated ClusterRole bound in the namespace grants what the roles it selects allow.
    c.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kubeflow-edit}
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit: "true"}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kubeflow-tfjobs-edit
  labels: {rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit: "true"}
rules:
- apiGroups: [kubeflow.org]
  resources: [tfjobs, tfjobs/status]
  verbs: [get, list, watch, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: builder-edits, namespace: ci}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubeflow-edit}
subjects:
- {kind: ServiceAccount, name: builder, namespace: ci}
"#,
    );
    builder.ok(&["get", "tfjobs", "-n", "ci"]);
    builder.fails(&["get", "tfjobs", "-A"]);

    // The token minted by kubectl is the account's for a client that sends it.
    let kubeconfig = std::fs::read_to_string(c.kubeconfig("builder", &token)).unwrap();
    c.runtime.block_on(async {
        let own = configmaps(&kubeconfig, "ci").await;
        own.get("settings").await.unwrap();
        let err = own
            .delete("settings", &Default::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains(BUILDER)),
            "{err}"
        );
        let stranger = std::fs::read_to_string(c.kubeconfig("stranger", "not-a-token")).unwrap();
        let err = configmaps(&stranger, "ci")
            .await
            .get("settings")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 401 && s.reason == "Unauthorized"),
            "{err}"
        );
    });
    // Impersonating needs the right to: the account may not act as someone else.
    c.runtime.block_on(async {
        let err = configmaps_as(&kubeconfig, Some("someone-else"), "ci")
            .await
            .get("settings")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message == format!("users \"someone-else\" is forbidden: User \"{BUILDER}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope")),
            "{err}"
        );
    });

    // A token for an account that does not exist is refused.
    let refused = c.fails(&admin, &["create", "token", "ghost", "-n", "ci"]);
    assert!(
        refused.contains("NotFound") || refused.contains("not found"),
        "{refused}"
    );

    let denials = c.server.running.requests().denials();
    assert_eq!(c.server.running.requests().denied(), denials.len() as u64);
    assert!(
        denials
            .iter()
            .any(|d| d.user == BUILDER && d.verb == "delete" && d.resource == "configmaps"),
        "{denials:?}"
    );
    assert!(denials.iter().all(|d| !d.user.is_empty()));
}

#[test]
fn blocking_an_owners_deletion_needs_update_on_its_finalizers() {
    let c = start();
    let admin = c.admin();
    c.ok(&admin, &["create", "namespace", "ml"]);
    c.ok(&admin, &["create", "serviceaccount", "op", "-n", "ml"]);
    let grant = |extra: &str| {
        c.apply(&format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: op, namespace: ml}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
{extra}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: op, namespace: ml}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: op}}
subjects:
- {{kind: ServiceAccount, name: op}}
"#
        ));
    };
    grant("");
    let token = c
        .server
        .running
        .access()
        .tokens
        .service_account(&c.store, "ml", "op", std::time::Duration::from_secs(600))
        .unwrap()
        .token;
    let kubeconfig = std::fs::read_to_string(c.kubeconfig("op", &token)).unwrap();
    let configmap = |name: &str, block: bool| {
        serde_json::from_value::<ConfigMap>(json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j",
                "uid": "8b7e0a4c-0000-0000-0000-000000000001", "controller": true,
                "blockOwnerDeletion": block}]},
        }))
        .unwrap()
    };
    c.runtime.block_on(async {
        let configmaps = configmaps(&kubeconfig, "ml").await;
        // Not blocking: creating is enough.
        configmaps
            .create(&PostParams::default(), &configmap("free", false))
            .await
            .unwrap();
        let err = configmaps
            .create(&PostParams::default(), &configmap("blocking", true))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = err else {
            panic!("{err}")
        };
        assert_eq!(status.code, 403);
        assert_eq!(
            status.message,
            "configmaps \"blocking\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: User \"system:serviceaccount:ml:op\" cannot update resource \"tfjobs/finalizers\" in API group \"kubeflow.org\" in the namespace \"ml\", <nil>"
        );
        let denials = c.server.running.requests().denials();
        assert_eq!(denials.len(), 1, "{denials:?}");
        assert_eq!(
            (denials[0].verb.as_str(), denials[0].resource.as_str()),
            ("update", "tfjobs/finalizers")
        );
    });
    grant("- apiGroups: [kubeflow.org]\n  resources: [tfjobs/finalizers]\n  verbs: [update]");
    c.runtime.block_on(async {
        configmaps(&kubeconfig, "ml")
            .await
            .create(&PostParams::default(), &configmap("blocking", true))
            .await
            .unwrap();
    });
}

/// What users type to check their access: `kubectl auth can-i` (a SelfSubjectAccessReview)
/// answers by the roles the admin applied, for `--as` too, and `--list` is refused as a real
/// server without the rules review would; `kubectl auth whoami` (a SelfSubjectReview) names the
/// user and groups the server authenticated.
#[test]
fn kubectl_auth_can_i_and_whoami_answer_by_the_applied_roles() {
    let c = start();
    let admin = c.admin();
    c.ok(&admin, &["create", "namespace", "ci"]);
    let as_builder = format!("--as={BUILDER}");
    let can_i = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let out = c.kubectl(&admin, &all, None);
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            matches!(answer.as_str(), "yes" | "no"),
            "kubectl {all:?}: {answer}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        answer
    };
    assert_eq!(can_i(&["create", "tfjobs.kubeflow.org", "-n", "ci"]), "yes");
    assert_eq!(can_i(&["get", "configmaps", "-n", "ci", &as_builder]), "no");
    c.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: config-reader, namespace: ci}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: builder-reads-config, namespace: ci}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: config-reader}
subjects:
- {kind: ServiceAccount, name: builder, namespace: ci}
"#,
    );
    assert_eq!(
        can_i(&["get", "configmaps", "-n", "ci", &as_builder]),
        "yes"
    );
    assert_eq!(
        can_i(&["delete", "configmaps", "-n", "ci", &as_builder]),
        "no"
    );
    assert_eq!(
        can_i(&["get", "configmaps", "-n", "default", &as_builder]),
        "no"
    );

    let me = c.ok(&admin, &["auth", "whoami", "-o", "json"]);
    let me: serde_json::Value = serde_json::from_str(&me).unwrap();
    assert!(
        me["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("system:masters")),
        "{me}"
    );
    let builder = c.ok(&admin, &["auth", "whoami", "-o", "json", &as_builder]);
    let builder: serde_json::Value = serde_json::from_str(&builder).unwrap();
    assert_eq!(builder["status"]["userInfo"]["username"], BUILDER);
}
