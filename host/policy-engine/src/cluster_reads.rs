//! Cluster reads: which Kubernetes objects a policy may read, declared in its manifest
//! (`reads`) and granted only within the ceiling the cluster operator sets.
//!
//! A policy that reads the cluster (a namespace's labels, the nodes that exist, Kueue's queues)
//! says so up front, resource by resource, and for a namespaced resource in which namespace:
//! the job's (`job-namespace`) or the policy's own (`policy-namespace`). The cluster operator
//! sets what may be granted, apart for cluster-wide policies (`--policy-allow-read`, default
//! `namespaces` and `nodes`) and for policies confined to a team's namespace
//! (`--policy-allow-read-in-namespaces`, default none). A confined policy reads objects of its
//! own namespace only, and of the cluster-scoped kinds only its own Namespace object.
//!
//! Everything is decided when a version loads: a declaration outside the ceiling, of a kind
//! policies never read (Secrets, service-account tokens) or of a kind the operator does not
//! know is refused naming the field and the resource, and the serving version stays. What a
//! policy did not declare, it cannot read.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A kind of object policies may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Namespaces,
    Nodes,
    PriorityClasses,
    ResourceQuotas,
    LimitRanges,
    ConfigMaps,
    /// Kueue's `LocalQueue` (namespaced), where Kueue is installed.
    LocalQueues,
    /// Kueue's `ClusterQueue`.
    ClusterQueues,
    /// Kueue's `ResourceFlavor`.
    ResourceFlavors,
    /// TFJobs: the job's own, in its namespace.
    TfJobs,
}

/// Every resource, in the order the documentation lists them.
pub const RESOURCES: [Resource; 10] = [
    Resource::Namespaces,
    Resource::Nodes,
    Resource::PriorityClasses,
    Resource::ResourceQuotas,
    Resource::LimitRanges,
    Resource::ConfigMaps,
    Resource::LocalQueues,
    Resource::ClusterQueues,
    Resource::ResourceFlavors,
    Resource::TfJobs,
];

/// Kinds no policy reads, whatever the ceiling: what they hold is credentials.
const NEVER: [&str; 4] = [
    "secrets",
    "serviceaccounts",
    "serviceaccounts/token",
    "tokenreviews",
];

impl Resource {
    /// The resource's plural name, as in an API path and in `reads[].resource`.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Namespaces => "namespaces",
            Resource::Nodes => "nodes",
            Resource::PriorityClasses => "priorityclasses",
            Resource::ResourceQuotas => "resourcequotas",
            Resource::LimitRanges => "limitranges",
            Resource::ConfigMaps => "configmaps",
            Resource::LocalQueues => "localqueues",
            Resource::ClusterQueues => "clusterqueues",
            Resource::ResourceFlavors => "resourceflavors",
            Resource::TfJobs => "tfjobs",
        }
    }

    /// The resource whose objects have `kind` (`Node`, `Namespace`, ...), as a suite's
    /// fixtures name them.
    pub fn of_kind(kind: &str) -> Option<Resource> {
        RESOURCES.into_iter().find(|r| r.kind() == kind)
    }

    /// The kind of its objects.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::Namespaces => "Namespace",
            Resource::Nodes => "Node",
            Resource::PriorityClasses => "PriorityClass",
            Resource::ResourceQuotas => "ResourceQuota",
            Resource::LimitRanges => "LimitRange",
            Resource::ConfigMaps => "ConfigMap",
            Resource::LocalQueues => "LocalQueue",
            Resource::ClusterQueues => "ClusterQueue",
            Resource::ResourceFlavors => "ResourceFlavor",
            Resource::TfJobs => "TFJob",
        }
    }

    /// Whether its objects live in a namespace (a declaration then names which).
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            Resource::ResourceQuotas
                | Resource::LimitRanges
                | Resource::ConfigMaps
                | Resource::LocalQueues
                | Resource::TfJobs
        )
    }

    /// The resource named `name`; an error says why one is not readable.
    pub fn parse(name: &str) -> Result<Resource, String> {
        if let Some(r) = RESOURCES.iter().find(|r| r.name() == name) {
            return Ok(*r);
        }
        let lower = name.to_ascii_lowercase();
        if NEVER.contains(&lower.as_str()) {
            return Err(format!(
                "{name:?} is never readable by policies (it holds credentials)"
            ));
        }
        Err(format!(
            "{:?} is not a resource policies can read: expected one of {}",
            tfjob_policy_logic::text::elided(name, 64),
            names(RESOURCES.iter().copied())
        ))
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Resource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

fn names(resources: impl Iterator<Item = Resource>) -> String {
    resources.map(Resource::name).collect::<Vec<_>>().join(", ")
}

/// Which namespace a namespaced read is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadScope {
    /// The namespace of the job the call is about.
    JobNamespace,
    /// The namespace the policy's ConfigMap is in.
    PolicyNamespace,
}

impl fmt::Display for ReadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadScope::JobNamespace => "job-namespace",
            ReadScope::PolicyNamespace => "policy-namespace",
        })
    }
}

/// One entry of a manifest's `reads`, as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadDeclaration {
    /// The resource's plural name (`namespaces`, `nodes`, `configmaps`, ...).
    pub resource: String,
    /// For a namespaced resource: `job-namespace` or `policy-namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ReadScope>,
}

/// A read a policy was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadGrant {
    pub resource: Resource,
    /// The namespace of a namespaced resource; `None` for a cluster-scoped one.
    pub scope: Option<ReadScope>,
    /// Only the policy's own Namespace object (a confined policy's `namespaces`).
    pub own_namespace_only: bool,
}

impl fmt::Display for ReadGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.scope, self.own_namespace_only) {
            (Some(scope), _) => write!(f, "{}({scope})", self.resource),
            (None, true) => write!(f, "{}(own)", self.resource),
            (None, false) => write!(f, "{}", self.resource),
        }
    }
}

/// The most the cluster operator lets policies read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadCeiling {
    /// What cluster-wide policies may be granted (`--policy-allow-read`).
    pub cluster_wide: BTreeSet<Resource>,
    /// What policies confined to a team's namespace may be granted
    /// (`--policy-allow-read-in-namespaces`).
    pub namespaced: BTreeSet<Resource>,
}

impl Default for ReadCeiling {
    /// Namespaces and nodes, for cluster-wide policies only.
    fn default() -> ReadCeiling {
        ReadCeiling {
            cluster_wide: [Resource::Namespaces, Resource::Nodes].into(),
            namespaced: BTreeSet::new(),
        }
    }
}

impl ReadCeiling {
    /// Every resource for every policy: for checking a manifest's shape where the operator's
    /// ceiling does not apply yet (activation checks it against the real one).
    pub fn everything() -> ReadCeiling {
        ReadCeiling {
            cluster_wide: RESOURCES.into(),
            namespaced: RESOURCES.into(),
        }
    }

    /// The ceiling from the resources named on the command line: `none` alone grants nothing.
    pub fn from_names(
        cluster_wide: &[String],
        namespaced: &[String],
    ) -> Result<ReadCeiling, String> {
        let parse = |flag: &str, list: &[String]| -> Result<BTreeSet<Resource>, String> {
            if list.iter().any(|n| n == "none") {
                return if list.len() == 1 {
                    Ok(BTreeSet::new())
                } else {
                    Err(format!("{flag}: none cannot be given with resources"))
                };
            }
            list.iter()
                .map(|n| Resource::parse(n).map_err(|e| format!("{flag}: {e}")))
                .collect()
        };
        Ok(ReadCeiling {
            cluster_wide: parse("--policy-allow-read", cluster_wide)?,
            namespaced: parse("--policy-allow-read-in-namespaces", namespaced)?,
        })
    }

    /// Grants `declared` to a policy, cluster-wide (`confined_to` is `None`) or confined to a
    /// team's namespace. The error names the entry (`reads[i]...`) and why.
    pub fn grant(
        &self,
        declared: &[ReadDeclaration],
        confined_to: Option<&str>,
    ) -> Result<Vec<ReadGrant>, (String, String)> {
        let mut grants: Vec<ReadGrant> = Vec::with_capacity(declared.len());
        for (i, declaration) in declared.iter().enumerate() {
            let at = |field: &str| format!("reads[{i}].{field}");
            let resource =
                Resource::parse(&declaration.resource).map_err(|e| (at("resource"), e))?;
            let scope = match (resource.is_namespaced(), declaration.scope) {
                (true, None) => {
                    return Err((
                        at("scope"),
                        format!("{resource} is namespaced: say job-namespace or policy-namespace"),
                    ));
                }
                (false, Some(scope)) => {
                    return Err((
                        at("scope"),
                        format!("{resource} is not namespaced: {scope} does not apply"),
                    ));
                }
                (_, scope) => scope,
            };
            let allowed = match confined_to {
                None => &self.cluster_wide,
                Some(_) => &self.namespaced,
            };
            if !allowed.contains(&resource) {
                let (whose, flag) = match confined_to {
                    None => ("cluster-wide policies", "--policy-allow-read"),
                    Some(ns) => (ns, "--policy-allow-read-in-namespaces"),
                };
                let whose = match confined_to {
                    None => whose.to_owned(),
                    Some(_) => format!("policies of namespace {whose}"),
                };
                return Err((
                    at("resource"),
                    format!(
                        "{resource} is not readable by {whose}: the operator allows {} ({flag})",
                        if allowed.is_empty() {
                            "none".to_owned()
                        } else {
                            names(allowed.iter().copied())
                        }
                    ),
                ));
            }
            let own_namespace_only = confined_to.is_some() && resource == Resource::Namespaces;
            if let Some(ns) = confined_to
                && !resource.is_namespaced()
                && !own_namespace_only
            {
                return Err((
                    at("resource"),
                    format!(
                        "{resource} is cluster-scoped: a policy confined to namespace {ns} reads \
                         objects of {ns} and its own Namespace only"
                    ),
                ));
            }
            let grant = ReadGrant {
                resource,
                scope,
                own_namespace_only,
            };
            if grants.contains(&grant) {
                return Err((at("resource"), format!("{grant} is declared twice")));
            }
            grants.push(grant);
        }
        Ok(grants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(resource: &str, scope: Option<ReadScope>) -> ReadDeclaration {
        ReadDeclaration {
            resource: resource.into(),
            scope,
        }
    }

    #[test]
    fn the_default_ceiling_grants_namespaces_and_nodes_to_cluster_wide_policies() {
        let grants = ReadCeiling::default()
            .grant(&[read("namespaces", None), read("nodes", None)], None)
            .unwrap();
        let shown: Vec<String> = grants.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["namespaces", "nodes"]);
        let (field, why) = ReadCeiling::default()
            .grant(&[read("nodes", None)], Some("team-a"))
            .unwrap_err();
        assert_eq!(field, "reads[0].resource");
        assert_eq!(
            why,
            "nodes is not readable by policies of namespace team-a: the operator allows none \
             (--policy-allow-read-in-namespaces)"
        );
    }

    #[test]
    fn credentials_and_unknown_kinds_are_refused_naming_them() {
        let ceiling = ReadCeiling::everything();
        for name in ["secrets", "Secrets", "serviceaccounts/token"] {
            let (field, why) = ceiling.grant(&[read(name, None)], None).unwrap_err();
            assert_eq!(field, "reads[0].resource");
            assert!(why.contains("never readable"), "{why}");
        }
        let huge = "é".repeat(10_000);
        let (_, why) = ceiling.grant(&[read(&huge, None)], None).unwrap_err();
        assert!(why.contains("is not a resource policies can read"), "{why}");
        assert!(why.len() < 500, "a huge name is cut: {} bytes", why.len());
    }

    #[test]
    fn a_confined_policy_reads_its_own_namespace_and_its_namespace_object_only() {
        let ceiling = ReadCeiling::everything();
        let grants = ceiling
            .grant(
                &[
                    read("namespaces", None),
                    read("configmaps", Some(ReadScope::PolicyNamespace)),
                ],
                Some("team-a"),
            )
            .unwrap();
        assert!(grants[0].own_namespace_only);
        assert_eq!(grants[0].to_string(), "namespaces(own)");
        assert_eq!(grants[1].to_string(), "configmaps(policy-namespace)");
        let (field, why) = ceiling
            .grant(
                &[read("namespaces", None), read("nodes", None)],
                Some("team-a"),
            )
            .unwrap_err();
        assert_eq!(field, "reads[1].resource");
        assert!(why.contains("cluster-scoped"), "{why}");
    }

    #[test]
    fn scopes_must_fit_the_resource_and_entries_are_not_repeated() {
        let ceiling = ReadCeiling::everything();
        let (field, why) = ceiling
            .grant(&[read("configmaps", None)], None)
            .unwrap_err();
        assert_eq!(field, "reads[0].scope");
        assert!(why.contains("namespaced"), "{why}");
        let (field, _) = ceiling
            .grant(&[read("nodes", Some(ReadScope::JobNamespace))], None)
            .unwrap_err();
        assert_eq!(field, "reads[0].scope");
        let (field, why) = ceiling
            .grant(&[read("nodes", None), read("nodes", None)], None)
            .unwrap_err();
        assert_eq!(field, "reads[1].resource");
        assert!(why.contains("declared twice"), "{why}");
    }

    #[test]
    fn the_ceiling_from_flags_names_the_flag_of_a_bad_value() {
        let ceiling = ReadCeiling::from_names(&["nodes".into()], &["none".into()]).unwrap();
        assert_eq!(ceiling.cluster_wide, [Resource::Nodes].into());
        assert!(ceiling.namespaced.is_empty());
        let error = ReadCeiling::from_names(&["secrets".into()], &[]).unwrap_err();
        assert!(error.starts_with("--policy-allow-read: "), "{error}");
        let error = ReadCeiling::from_names(&[], &["none".into(), "nodes".into()]).unwrap_err();
        assert!(
            error.starts_with("--policy-allow-read-in-namespaces: "),
            "{error}"
        );
    }
}
