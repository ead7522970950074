//! Where a policy ConfigMap may act, decided by the namespace it lives in.
//!
//! Writing a ConfigMap in a policy namespace is the right to shape pods, so the namespace
//! bounds what the policy may shape (as Kubewarden's `AdmissionPolicy` is bounded by its namespace
//! and only a `ClusterAdmissionPolicy` reaches the whole cluster):
//! - A ConfigMap in a **cluster-wide** policy namespace (the operator's own, and any the cluster
//!   operator marks with `--policy-cluster-namespace`) may select jobs anywhere and replace a
//!   built-in policy by taking its name.
//! - A ConfigMap in any other policy namespace applies to jobs of its own namespace only. Its
//!   selector may narrow that but not name another namespace; it cannot take a built-in
//!   policy's name; and its policy is named `<namespace>/<name>`, so it supersedes only
//!   versions from its own namespace and every pod and event says whose policy it was. Its
//!   calls draw on the namespace's share of the engine (`TenantLimits`), not on the
//!   cluster-wide policies' reserve.
//!
//! Pure: the watcher confines each manifest before activating it.

use std::collections::BTreeSet;
use std::fmt;

use tfjob_policy_engine::PolicyManifest;

/// The reach of a policy ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// From a cluster-wide policy namespace.
    Cluster,
    /// From this namespace, for its jobs only.
    Namespace(String),
}

impl Scope {
    /// The scope of a ConfigMap in `namespace`.
    pub fn of(namespace: &str, cluster_wide: &BTreeSet<String>) -> Scope {
        if cluster_wide.contains(namespace) {
            Scope::Cluster
        } else {
            Scope::Namespace(namespace.to_owned())
        }
    }

    /// Confines `manifest` to this scope: for a namespaced source, refuses a built-in's name
    /// (any of `builtin`) and selectors naming other namespaces, limits the selector to the
    /// namespace, and prefixes the name with it. The error reads as a manifest field error.
    pub fn confine<'a>(
        &self,
        manifest: &mut PolicyManifest,
        builtin: impl IntoIterator<Item = &'a str>,
        cluster_wide: &BTreeSet<String>,
    ) -> Result<(), String> {
        let Scope::Namespace(ns) = self else {
            return Ok(());
        };
        let cluster_wide = if cluster_wide.is_empty() {
            "none".to_owned()
        } else {
            cluster_wide.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        if builtin.into_iter().any(|b| b == manifest.name) {
            return Err(format!(
                "manifest field name: {:?} is a built-in policy, which only a ConfigMap in a \
                 cluster-wide policy namespace ({cluster_wide}) may replace",
                manifest.name
            ));
        }
        if let Some(other) = manifest.selector.namespaces.iter().find(|n| *n != ns) {
            return Err(format!(
                "manifest field selector.namespaces: a policy from namespace {ns} applies only \
                 to jobs in {ns}, but it names {other:?} (cluster-wide policy namespaces: \
                 {cluster_wide})"
            ));
        }
        manifest.selector.namespaces = vec![ns.clone()];
        manifest.name = format!("{ns}/{}", manifest.name);
        manifest.tenant = Some(ns.clone());
        Ok(())
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Cluster => f.write_str("cluster"),
            Scope::Namespace(ns) => write!(f, "namespace:{ns}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfjob_policy_engine::{Hook, JobSelector};

    fn manifest(name: &str, namespaces: &[&str]) -> PolicyManifest {
        PolicyManifest {
            name: name.into(),
            hooks: vec![Hook::Decorate],
            selector: JobSelector {
                namespaces: namespaces.iter().map(|s| (*s).to_owned()).collect(),
                ..JobSelector::default()
            },
            ..PolicyManifest::default()
        }
    }

    fn cluster_wide() -> BTreeSet<String> {
        BTreeSet::from(["tfjob-system".to_owned()])
    }

    #[test]
    fn a_cluster_wide_namespace_reaches_everything() {
        let scope = Scope::of("tfjob-system", &cluster_wide());
        assert_eq!(scope, Scope::Cluster);
        let mut m = manifest("default-decorate", &["b"]);
        scope
            .confine(&mut m, ["default-decorate"], &cluster_wide())
            .unwrap();
        assert_eq!(m, manifest("default-decorate", &["b"]));
    }

    #[test]
    fn a_team_namespace_is_confined_to_its_jobs_and_named_after_it() {
        let scope = Scope::of("team-a", &cluster_wide());
        let mut m = manifest("gpu", &[]);
        scope
            .confine(&mut m, ["default-decorate"], &cluster_wide())
            .unwrap();
        assert_eq!(m.name, "team-a/gpu");
        assert_eq!(m.selector.namespaces, ["team-a"]);
        assert_eq!(
            m.tenant.as_deref(),
            Some("team-a"),
            "its calls draw on team-a's share"
        );
        assert!(m.selector.matches("team-a", &Default::default()));
        assert!(!m.selector.matches("team-b", &Default::default()));
        let mut own = manifest("gpu", &["team-a"]);
        scope.confine(&mut own, [], &cluster_wide()).unwrap();
        assert_eq!(own.selector.namespaces, ["team-a"]);
    }

    #[test]
    fn a_team_namespace_cannot_reach_out() {
        let scope = Scope::of("team-a", &cluster_wide());
        let err = scope
            .confine(
                &mut manifest("gpu", &["team-a", "team-b"]),
                [],
                &cluster_wide(),
            )
            .unwrap_err();
        assert!(
            err.starts_with("manifest field selector.namespaces: a policy from namespace team-a"),
            "{err}"
        );
        assert!(err.contains("\"team-b\""), "{err}");
        let err = scope
            .confine(
                &mut manifest("default-decorate", &[]),
                ["default-decorate"],
                &cluster_wide(),
            )
            .unwrap_err();
        assert!(
            err.starts_with("manifest field name: \"default-decorate\" is a built-in policy"),
            "{err}"
        );
        assert!(err.contains("(tfjob-system)"), "{err}");
    }
}
