//! RBAC decisions: whether a user may do what a request asks, by the Roles, ClusterRoles,
//! RoleBindings and ClusterRoleBindings stored in the cluster, with the reason when not.
//!
//! This is the subset of Kubernetes RBAC that kubectl and operators rely on, with Kubernetes'
//! semantics: rules name verbs, API groups, resources (`pods`, `pods/log`, `*/status`, `*`),
//! resource names (which only match requests that name an object, so never a create, a
//! deletecollection or a list without a `metadata.name` field selector) and non-resource URLs
//! (`/healthz`, `/apis/*`); a RoleBinding grants its Role or ClusterRole within its namespace, a
//! ClusterRoleBinding its ClusterRole everywhere; subjects are Users, Groups and
//! ServiceAccounts (`system:serviceaccount:NS:NAME`); a ClusterRole with an `aggregationRule`
//! holds the rules of every ClusterRole its selectors match, as Kubernetes' aggregation
//! controller fills it in. Members of `system:masters` may do anything, and every
//! authenticated user may read the discovery and health paths, as the bootstrap role
//! `system:discovery` allows on a real cluster. Everything here is pure: the server's
//! middleware ([`crate::auth::access`]) gathers the objects and the request's attributes.
//!
//! Denials carry Kubernetes' message word for word (`pods "x" is forbidden: User "u" cannot
//! delete resource "pods" in API group "" in the namespace "ns"`), because clients and people
//! match on it.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

/// The group whose members bypass authorization, as on a real cluster.
pub const MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";

/// Who makes a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The identity of service account `name` in `namespace`, with the groups Kubernetes gives
    /// it.
    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.to_owned(),
            ],
        }
    }

    /// A cluster administrator named `name`.
    pub fn admin(name: &str) -> UserInfo {
        UserInfo {
            name: name.to_owned(),
            groups: vec![MASTERS.to_owned(), AUTHENTICATED.to_owned()],
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a resource request asks to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The API group; empty for the core group.
    pub group: String,
    /// The plural, without the subresource: `pods`.
    pub resource: String,
    /// `status`, `log`, `finalizers`, ...; empty for the resource itself.
    pub subresource: String,
    /// Empty for a request at the cluster scope.
    pub namespace: String,
    /// Empty when the request names no object.
    pub name: String,
}

impl ResourceAttributes {
    /// `pods` or `pods/log`, as rules and messages name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// What a request asks to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attributes {
    Resource(ResourceAttributes),
    /// A path outside the resource API (`/version`, `/apis`, `/debug/faults`); the verb is the
    /// lowercase HTTP method.
    NonResource {
        verb: String,
        path: String,
    },
}

/// One rule of a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

fn any_or(list: &[String], wanted: &str) -> bool {
    list.iter().any(|x| x == "*" || x == wanted)
}

impl PolicyRule {
    /// Whether this rule allows the request (Kubernetes' `RuleAllows`).
    pub fn allows(&self, attributes: &Attributes) -> bool {
        match attributes {
            Attributes::Resource(r) => {
                any_or(&self.verbs, &r.verb)
                    && any_or(&self.api_groups, &r.group)
                    && self.resource_matches(r)
                    && (self.resource_names.is_empty()
                        || (!r.name.is_empty() && self.resource_names.contains(&r.name)))
            }
            Attributes::NonResource { verb, path } => {
                any_or(&self.verbs, verb)
                    && self.non_resource_urls.iter().any(|url| {
                        url == "*"
                            || url == path
                            || url
                                .strip_suffix('*')
                                .is_some_and(|prefix| path.starts_with(prefix))
                    })
            }
        }
    }

    /// `*` matches every resource and subresource; `*/status` the status of every resource.
    fn resource_matches(&self, r: &ResourceAttributes) -> bool {
        let combined = r.combined_resource();
        self.resources.iter().any(|res| {
            res == "*"
                || *res == combined
                || (!r.subresource.is_empty()
                    && res.strip_prefix("*/") == Some(r.subresource.as_str()))
        })
    }
}

/// Who a binding grants its role to.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Subject {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

impl Subject {
    /// Whether the subject is `user`; a ServiceAccount subject without a namespace means the
    /// binding's own (Kubernetes' `appliesToUser`).
    fn applies_to(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }
}

/// The role a binding grants.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    #[serde(default)]
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    /// Empty for a ClusterRoleBinding.
    pub namespace: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

/// A label selector of an aggregation rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<LabelRequirement>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector. An empty selector selects nothing here: an
    /// aggregation rule with one would otherwise take in every ClusterRole, which Kubernetes'
    /// validation refuses anyway.
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    /// Empty for a ClusterRole.
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub rules: Vec<PolicyRule>,
    /// `aggregationRule.clusterRoleSelectors` of a ClusterRole; `None` when it aggregates
    /// nothing.
    pub aggregation: Option<Vec<LabelSelector>>,
}

/// Why a stored RBAC object could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name:?}: {message}")]
pub struct ObjectError {
    pub kind: &'static str,
    pub name: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleDoc {
    #[serde(default)]
    rules: Vec<PolicyRule>,
    aggregation_rule: Option<AggregationDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AggregationDoc {
    #[serde(default)]
    cluster_role_selectors: Vec<LabelSelector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingDoc {
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Vec<Subject>,
}

fn meta_text(obj: &Value, key: &str) -> String {
    obj.pointer(&format!("/metadata/{key}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn parse<T: serde::de::DeserializeOwned>(
    kind: &'static str,
    obj: &Value,
) -> Result<T, ObjectError> {
    serde_path_to_error::deserialize(obj).map_err(|e| ObjectError {
        kind,
        name: meta_text(obj, "name"),
        message: match e.path().to_string().as_str() {
            "." => e.inner().to_string(),
            path => format!("{path}: {}", e.inner()),
        },
    })
}

impl Role {
    /// A Role or ClusterRole object, as stored.
    pub fn from_object(kind: &'static str, obj: &Value) -> Result<Role, ObjectError> {
        let doc: RoleDoc = parse(kind, obj)?;
        Ok(Role {
            name: meta_text(obj, "name"),
            namespace: meta_text(obj, "namespace"),
            labels: crate::storage::selector::labels(obj),
            rules: doc.rules,
            aggregation: doc.aggregation_rule.map(|a| a.cluster_role_selectors),
        })
    }
}

impl Binding {
    /// A RoleBinding or ClusterRoleBinding object, as stored.
    pub fn from_object(kind: &'static str, obj: &Value) -> Result<Binding, ObjectError> {
        let doc: BindingDoc = parse(kind, obj)?;
        Ok(Binding {
            name: meta_text(obj, "name"),
            namespace: meta_text(obj, "namespace"),
            role_ref: doc.role_ref,
            subjects: doc.subjects,
        })
    }
}

/// The subject kinds a binding may name.
const SUBJECT_KINDS: &[&str] = &["User", "Group", "ServiceAccount"];

fn unsupported(field: &str, value: &str, supported: &[&str]) -> String {
    let supported: Vec<String> = supported.iter().map(|k| format!("{k:?}")).collect();
    format!(
        "{field}: Unsupported value: {value:?}: supported values: {}",
        supported.join(", ")
    )
}

/// The admission check of the four RBAC kinds: the shape the authorizer reads, with the field
/// that is wrong named. `kind` is `Role`, `ClusterRole`, `RoleBinding` or `ClusterRoleBinding`.
pub fn validate(kind: &'static str, obj: &Value) -> Result<(), String> {
    if !kind.ends_with("Binding") {
        return Role::from_object(kind, obj)
            .map(drop)
            .map_err(|e| e.message);
    }
    let binding = Binding::from_object(kind, obj).map_err(|e| e.message)?;
    let namespaced = kind == "RoleBinding";
    let role_kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !role_kinds.contains(&binding.role_ref.kind.as_str()) {
        return Err(unsupported(
            "roleRef.kind",
            &binding.role_ref.kind,
            role_kinds,
        ));
    }
    if binding.role_ref.name.is_empty() {
        return Err("roleRef.name: Required value".to_owned());
    }
    for (i, s) in binding.subjects.iter().enumerate() {
        if !SUBJECT_KINDS.contains(&s.kind.as_str()) {
            return Err(unsupported(
                &format!("subjects[{i}].kind"),
                &s.kind,
                SUBJECT_KINDS,
            ));
        }
        if s.name.is_empty() {
            return Err(format!("subjects[{i}].name: Required value"));
        }
        // A ClusterRoleBinding has no namespace to default a service account's to.
        if s.kind == "ServiceAccount" && s.namespace.is_empty() && !namespaced {
            return Err(format!("subjects[{i}].namespace: Required value"));
        }
    }
    Ok(())
}

/// The RBAC objects that bear on one request: every ClusterRole and ClusterRoleBinding, and
/// the Roles and RoleBindings of the request's namespace (others cannot grant anything there).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    cluster_roles: BTreeMap<String, Role>,
    cluster_role_bindings: Vec<Binding>,
    roles: BTreeMap<(String, String), Role>,
    role_bindings: Vec<Binding>,
}

/// The outcome of an authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; `by` names what allowed it (`ClusterRoleBinding "x" of ClusterRole "y"`).
    Allow { by: String },
    /// Denied; `reason` is empty, or says which roles the user's bindings name but do not
    /// exist (`RBAC: role.rbac.authorization.k8s.io "x" not found`), as Kubernetes says.
    Deny { reason: String },
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// The bootstrap rule every authenticated user has: `system:discovery`'s.
fn discovery_rule() -> PolicyRule {
    let urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/readyz",
        "/openapi",
        "/openapi/*",
        "/version",
        "/version/",
    ];
    PolicyRule {
        verbs: vec!["get".to_owned()],
        non_resource_urls: urls.iter().map(|u| (*u).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

impl Policy {
    /// The policy of the stored objects (each list holds the objects of one kind). Objects
    /// that cannot be read grant nothing and are returned with why.
    pub fn from_objects<O: Borrow<Value>>(
        cluster_roles: &[O],
        cluster_role_bindings: &[O],
        roles: &[O],
        role_bindings: &[O],
    ) -> (Policy, Vec<ObjectError>) {
        let mut errors = Vec::new();
        let mut policy = Policy::default();
        for obj in cluster_roles {
            match Role::from_object("ClusterRole", obj.borrow()) {
                Ok(r) => policy.add_cluster_role(r),
                Err(e) => errors.push(e),
            }
        }
        for obj in roles {
            match Role::from_object("Role", obj.borrow()) {
                Ok(r) => policy.add_role(r),
                Err(e) => errors.push(e),
            }
        }
        for (kind, objs) in [
            ("ClusterRoleBinding", cluster_role_bindings),
            ("RoleBinding", role_bindings),
        ] {
            for obj in objs {
                match Binding::from_object(kind, obj.borrow()) {
                    Ok(b) => policy.add_binding(b),
                    Err(e) => errors.push(e),
                }
            }
        }
        (policy, errors)
    }

    pub fn add_cluster_role(&mut self, role: Role) {
        self.cluster_roles.insert(role.name.clone(), role);
    }

    pub fn add_role(&mut self, role: Role) {
        self.roles
            .insert((role.namespace.clone(), role.name.clone()), role);
    }

    /// Adds a RoleBinding (with a namespace) or a ClusterRoleBinding (without).
    pub fn add_binding(&mut self, binding: Binding) {
        if binding.namespace.is_empty() {
            self.cluster_role_bindings.push(binding);
        } else {
            self.role_bindings.push(binding);
        }
    }

    /// The rules of ClusterRole `name`, aggregated ones included; `None` if it does not exist.
    pub fn cluster_role_rules(&self, name: &str) -> Option<Vec<PolicyRule>> {
        let mut seen = BTreeSet::new();
        self.cluster_roles
            .contains_key(name)
            .then(|| self.aggregate(name, &mut seen))
    }

    /// A ClusterRole's own rules, or those of every ClusterRole its aggregation rule selects
    /// (which may aggregate in turn; `seen` stops cycles).
    fn aggregate(&self, name: &str, seen: &mut BTreeSet<String>) -> Vec<PolicyRule> {
        if !seen.insert(name.to_owned()) {
            return Vec::new();
        }
        let Some(role) = self.cluster_roles.get(name) else {
            return Vec::new();
        };
        let Some(selectors) = &role.aggregation else {
            return role.rules.clone();
        };
        let mut rules: Vec<PolicyRule> = Vec::new();
        for other in self.cluster_roles.values() {
            if other.name != role.name && selectors.iter().any(|s| s.matches(&other.labels)) {
                for rule in self.aggregate(&other.name.clone(), seen) {
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
            }
        }
        rules
    }

    /// The rules a binding grants, or the error Kubernetes reports when its role is missing.
    fn granted(&self, binding: &Binding) -> Result<(String, Vec<PolicyRule>), String> {
        let r = &binding.role_ref;
        match r.kind.as_str() {
            "ClusterRole" => self
                .cluster_role_rules(&r.name)
                .map(|rules| (format!("ClusterRole {:?}", r.name), rules))
                .ok_or_else(|| {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io {:?} not found",
                        r.name
                    )
                }),
            "Role" if !binding.namespace.is_empty() => self
                .roles
                .get(&(binding.namespace.clone(), r.name.clone()))
                .map(|role| (format!("Role {:?}", r.name), role.rules.clone()))
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {:?} not found", r.name)),
            kind => Err(format!("unsupported role reference kind: {kind:?}")),
        }
    }

    /// Whether `user` may do what `attributes` ask.
    pub fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        if user.in_group(MASTERS) {
            return Decision::Allow {
                by: format!("group {MASTERS}"),
            };
        }
        if user.in_group(AUTHENTICATED) && discovery_rule().allows(attributes) {
            return Decision::Allow {
                by: "ClusterRole \"system:discovery\"".to_owned(),
            };
        }
        let namespace = match attributes {
            Attributes::Resource(r) => r.namespace.as_str(),
            Attributes::NonResource { .. } => "",
        };
        // ClusterRoleBindings grant everywhere; RoleBindings only within their namespace, and
        // never at the cluster scope or for non-resource URLs.
        let bindings = self.cluster_role_bindings.iter().chain(
            self.role_bindings
                .iter()
                .filter(|b| !namespace.is_empty() && b.namespace == namespace),
        );
        let mut errors = Vec::new();
        for binding in bindings {
            if !binding
                .subjects
                .iter()
                .any(|s| s.applies_to(user, &binding.namespace))
            {
                continue;
            }
            let (role, rules) = match self.granted(binding) {
                Ok(granted) => granted,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            // A RoleBinding grants nothing at the cluster scope, so non-resource rules of a
            // ClusterRole count only through a ClusterRoleBinding.
            let reaches = !binding.namespace.is_empty()
                && matches!(attributes, Attributes::NonResource { .. });
            if !reaches && rules.iter().any(|rule| rule.allows(attributes)) {
                let kind = if binding.namespace.is_empty() {
                    "ClusterRoleBinding"
                } else {
                    "RoleBinding"
                };
                return Decision::Allow {
                    by: format!("{kind} {:?} of {role}", binding.name),
                };
            }
        }
        let reason = match errors.as_slice() {
            [] => String::new(),
            [one] => format!("RBAC: {one}"),
            many => format!("RBAC: [{}]", many.join(", ")),
        };
        Decision::Deny { reason }
    }
}

/// Kubernetes' words for a denied request: `User "u" cannot delete resource "pods" in API
/// group "" in the namespace "ns"`, `... at the cluster scope`, `User "u" cannot get path
/// "/debug/faults"`.
pub fn forbidden_message(user: &UserInfo, attributes: &Attributes) -> String {
    match attributes {
        Attributes::NonResource { verb, path } => {
            format!("User {:?} cannot {verb} path {path:?}", user.name)
        }
        Attributes::Resource(r) => {
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            format!(
                "User {:?} cannot {} resource {:?} in API group {:?} {scope}",
                user.name,
                r.verb,
                r.combined_resource(),
                r.group
            )
        }
    }
}

/// The `Status` of a `403 Forbidden`, as Kubernetes words it: `pods "x" is forbidden: <why>`,
/// `tfjobs.kubeflow.org is forbidden: <why>` when no object is named, `forbidden: <why>` for a
/// non-resource path.
pub fn forbidden_status(attributes: &Attributes, why: &str) -> Value {
    let (group, resource, name) = match attributes {
        Attributes::Resource(r) => (r.group.as_str(), r.resource.as_str(), r.name.as_str()),
        Attributes::NonResource { .. } => ("", "", ""),
    };
    let qualified = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    let message = match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {why}"),
        (false, true) => format!("{qualified} is forbidden: {why}"),
        (false, false) => format!("{qualified} {name:?} is forbidden: {why}"),
    };
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Forbidden",
        "details": {"name": name, "group": group, "kind": resource},
        "code": 403,
    })
}

/// The message of a request the authorizer denied: [`forbidden_message`] and the reason.
pub fn denial(user: &UserInfo, attributes: &Attributes, reason: &str) -> String {
    let message = forbidden_message(user, attributes);
    if reason.is_empty() {
        message
    } else {
        format!("{message}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATOR: &str = "system:serviceaccount:tfjob-system:tfjob-operator";

    fn operator() -> UserInfo {
        UserInfo::service_account("tfjob-system", "tfjob-operator")
    }

    fn res(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes::Resource(ResourceAttributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: ns.into(),
            name: name.into(),
        })
    }

    fn path(verb: &str, p: &str) -> Attributes {
        Attributes::NonResource {
            verb: verb.into(),
            path: p.into(),
        }
    }

    fn policy(cluster_roles: Value, crbs: Value, roles: Value, rbs: Value) -> Policy {
        let list = |v: Value| v.as_array().cloned().unwrap_or_default();
        let (policy, errors) =
            Policy::from_objects(&list(cluster_roles), &list(crbs), &list(roles), &list(rbs));
        assert_eq!(errors, vec![]);
        policy
    }

    fn cluster_role(name: &str, rules: Value) -> Value {
        json!({"metadata": {"name": name}, "rules": rules})
    }

    fn bind(name: &str, ns: Option<&str>, kind: &str, role: &str, subjects: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": subjects})
    }

    fn sa_subject() -> Value {
        json!([{"kind": "ServiceAccount", "name": "tfjob-operator", "namespace": "tfjob-system"}])
    }

    /// The operator's ClusterRole bound cluster-wide and its policy Role bound in
    /// `tfjob-system`, as in deploy/.
    fn deployed() -> Policy {
        policy(
            json!([cluster_role(
                "tfjob-operator",
                json!([
                    {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs"], "verbs": ["get", "list", "watch", "delete"]},
                    {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs/status"], "verbs": ["update", "patch"]},
                    {"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list", "watch", "create", "delete"]},
                ])
            )]),
            json!([bind(
                "tfjob-operator",
                None,
                "ClusterRole",
                "tfjob-operator",
                sa_subject()
            )]),
            json!([{"metadata": {"name": "policies", "namespace": "tfjob-system"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]}]}]),
            json!([bind(
                "policies",
                Some("tfjob-system"),
                "Role",
                "policies",
                sa_subject()
            )]),
        )
    }

    #[test]
    fn a_cluster_role_binding_grants_its_rules_in_every_namespace_and_at_the_cluster_scope() {
        let p = deployed();
        let op = operator();
        assert!(
            p.authorize(&op, &res("create", "", "pods", "ml", ""))
                .is_allowed()
        );
        assert!(
            p.authorize(&op, &res("watch", "kubeflow.org", "tfjobs", "", ""))
                .is_allowed()
        );
        assert!(
            p.authorize(&op, &res("delete", "kubeflow.org", "tfjobs", "a", "j"))
                .is_allowed()
        );
        assert_eq!(
            p.authorize(&op, &res("update", "", "pods", "ml", "p")),
            Decision::Deny {
                reason: String::new()
            }
        );
        assert!(
            !p.authorize(&op, &res("create", "", "secrets", "ml", ""))
                .is_allowed()
        );
    }

    #[test]
    fn a_subresource_needs_a_rule_of_its_own() {
        let p = deployed();
        let op = operator();
        assert!(
            p.authorize(
                &op,
                &res("patch", "kubeflow.org", "tfjobs/status", "ml", "j")
            )
            .is_allowed()
        );
        // tfjobs does not cover tfjobs/status, nor the other way round.
        assert!(
            !p.authorize(&op, &res("update", "kubeflow.org", "tfjobs", "ml", "j"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&op, &res("get", "kubeflow.org", "tfjobs/status", "ml", "j"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&op, &res("get", "", "pods/log", "ml", "p"))
                .is_allowed()
        );
        assert!(
            !p.authorize(
                &op,
                &res("update", "kubeflow.org", "tfjobs/finalizers", "ml", "j")
            )
            .is_allowed()
        );
    }

    #[test]
    fn the_group_must_match() {
        let p = deployed();
        assert!(
            !p.authorize(&operator(), &res("list", "example.com", "pods", "ml", ""))
                .is_allowed()
        );
        assert!(
            !p.authorize(&operator(), &res("list", "", "tfjobs", "ml", ""))
                .is_allowed()
        );
    }

    #[test]
    fn a_role_binding_grants_only_within_its_namespace() {
        let p = deployed();
        let op = operator();
        assert!(
            p.authorize(&op, &res("patch", "", "configmaps", "tfjob-system", "c"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&op, &res("patch", "", "configmaps", "ml", "c"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&op, &res("list", "", "configmaps", "", ""))
                .is_allowed()
        );
    }

    #[test]
    fn a_role_binding_to_a_cluster_role_grants_it_in_the_binding_namespace() {
        let p = policy(
            json!([cluster_role(
                "edit",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
            )]),
            json!([]),
            json!([]),
            json!([bind(
                "edit",
                Some("team"),
                "ClusterRole",
                "edit",
                json!([{"kind": "User", "name": "alice"}])
            )]),
        );
        let alice = UserInfo {
            name: "alice".into(),
            groups: vec![AUTHENTICATED.into()],
        };
        assert!(
            p.authorize(
                &alice,
                &res("delete", "kubeflow.org", "tfjobs", "team", "j")
            )
            .is_allowed()
        );
        // `*` covers subresources too.
        assert!(
            p.authorize(&alice, &res("get", "", "pods/log", "team", "p"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&alice, &res("get", "", "pods", "other", "p"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&alice, &res("list", "", "namespaces", "", ""))
                .is_allowed()
        );
    }

    #[test]
    fn wildcards_and_star_subresources() {
        let p = policy(
            json!([cluster_role(
                "status-reader",
                json!([
                    {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]},
                    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]},
                ])
            )]),
            json!([bind(
                "s",
                None,
                "ClusterRole",
                "status-reader",
                json!([{"kind": "Group", "name": "readers"}])
            )]),
            json!([]),
            json!([]),
        );
        let u = UserInfo {
            name: "bob".into(),
            groups: vec!["readers".into()],
        };
        assert!(
            p.authorize(&u, &res("get", "kubeflow.org", "tfjobs/status", "ns", "j"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&u, &res("get", "kubeflow.org", "tfjobs", "ns", "j"))
                .is_allowed()
        );
        assert!(
            !p.authorize(
                &u,
                &res("update", "kubeflow.org", "tfjobs/status", "ns", "j")
            )
            .is_allowed()
        );
        assert!(
            p.authorize(
                &u,
                &res("deletecollection", "apps", "deployments", "ns", "")
            )
            .is_allowed()
        );
        let other = UserInfo {
            name: "bob".into(),
            groups: vec!["writers".into()],
        };
        assert!(
            !p.authorize(&other, &res("get", "apps", "deployments", "ns", "d"))
                .is_allowed()
        );
    }

    #[test]
    fn resource_names_match_only_requests_that_name_an_object() {
        let p = policy(
            json!([cluster_role(
                "one-map",
                json!([
                    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"], "verbs": ["get", "list", "watch", "create", "update", "delete", "deletecollection"]},
                ])
            )]),
            json!([bind(
                "b",
                None,
                "ClusterRole",
                "one-map",
                json!([{"kind": "User", "name": "u"}])
            )]),
            json!([]),
            json!([]),
        );
        let u = UserInfo {
            name: "u".into(),
            groups: vec![],
        };
        for verb in ["get", "update", "delete"] {
            assert!(
                p.authorize(&u, &res(verb, "", "configmaps", "ns", "settings"))
                    .is_allowed(),
                "{verb}"
            );
            assert!(
                !p.authorize(&u, &res(verb, "", "configmaps", "ns", "other"))
                    .is_allowed(),
                "{verb}"
            );
        }
        // A list or watch names the object only through a metadata.name field selector, which
        // the request's attributes then carry; without one, and for creates and
        // deletecollections, a rule with resourceNames never matches.
        assert!(
            p.authorize(&u, &res("list", "", "configmaps", "ns", "settings"))
                .is_allowed()
        );
        assert!(
            p.authorize(&u, &res("watch", "", "configmaps", "ns", "settings"))
                .is_allowed()
        );
        for verb in ["list", "watch", "create", "deletecollection"] {
            assert!(
                !p.authorize(&u, &res(verb, "", "configmaps", "ns", ""))
                    .is_allowed(),
                "{verb}"
            );
        }
    }

    #[test]
    fn subjects_are_users_groups_and_service_accounts() {
        let subjects = json!([
            {"kind": "User", "name": "carol"},
            {"kind": "Group", "name": "system:serviceaccounts:ci"},
            {"kind": "ServiceAccount", "name": "builder"},
        ]);
        let p = policy(
            json!([cluster_role(
                "view",
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
            )]),
            json!([]),
            json!([]),
            json!([bind("view", Some("team"), "ClusterRole", "view", subjects)]),
        );
        let get = res("get", "", "pods", "team", "p");
        let carol = UserInfo {
            name: "carol".into(),
            groups: vec![],
        };
        assert!(p.authorize(&carol, &get).is_allowed());
        // Any service account of namespace ci, through its group.
        assert!(
            p.authorize(&UserInfo::service_account("ci", "anyone"), &get)
                .is_allowed()
        );
        // A ServiceAccount subject without a namespace is the binding's namespace's.
        assert!(
            p.authorize(&UserInfo::service_account("team", "builder"), &get)
                .is_allowed()
        );
        assert!(
            !p.authorize(&UserInfo::service_account("other", "builder"), &get)
                .is_allowed()
        );
        // A user named like a service account is not one by kind of subject, but by name.
        let dave = UserInfo {
            name: "dave".into(),
            groups: vec!["carol".into()],
        };
        assert!(!p.authorize(&dave, &get).is_allowed());
    }

    #[test]
    fn service_accounts_carry_the_groups_kubernetes_gives_them() {
        let sa = operator();
        assert_eq!(sa.name, OPERATOR);
        assert_eq!(
            sa.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:tfjob-system",
                AUTHENTICATED
            ]
        );
    }

    #[test]
    fn masters_may_do_anything() {
        let p = Policy::default();
        let admin = UserInfo::admin("admin");
        assert!(
            p.authorize(&admin, &res("delete", "", "namespaces", "", "kube-system"))
                .is_allowed()
        );
        assert!(
            p.authorize(&admin, &path("put", "/debug/faults"))
                .is_allowed()
        );
    }

    #[test]
    fn discovery_and_health_are_open_to_authenticated_users() {
        let p = Policy::default();
        let sa = operator();
        for p_ in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/kubeflow.org/v1",
            "/openapi/v3",
            "/openapi/v3/apis/kubeflow.org/v1",
            "/version",
            "/healthz",
            "/readyz",
            "/livez",
        ] {
            assert!(p.authorize(&sa, &path("get", p_)).is_allowed(), "{p_}");
        }
        let unauthenticated = UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        };
        assert!(
            !p.authorize(&unauthenticated, &path("get", "/apis"))
                .is_allowed()
        );
        assert!(!p.authorize(&sa, &path("get", "/debug/faults")).is_allowed());
        assert!(!p.authorize(&sa, &path("put", "/debug/faults")).is_allowed());
        assert!(!p.authorize(&sa, &path("post", "/api")).is_allowed());
        // The resources under the discovery paths are not open.
        assert!(
            !p.authorize(&sa, &res("list", "", "pods", "", ""))
                .is_allowed()
        );
    }

    #[test]
    fn non_resource_urls_are_granted_only_through_cluster_role_bindings() {
        let role = cluster_role(
            "debug",
            json!([{"nonResourceURLs": ["/debug/*"], "verbs": ["get"]}]),
        );
        let user = json!([{"kind": "User", "name": "u"}]);
        let u = UserInfo {
            name: "u".into(),
            groups: vec![],
        };
        let cluster_wide = policy(
            json!([role.clone()]),
            json!([bind("d", None, "ClusterRole", "debug", user.clone())]),
            json!([]),
            json!([]),
        );
        assert!(
            cluster_wide
                .authorize(&u, &path("get", "/debug/requests"))
                .is_allowed()
        );
        assert!(
            !cluster_wide
                .authorize(&u, &path("put", "/debug/faults"))
                .is_allowed()
        );
        assert!(
            !cluster_wide
                .authorize(&u, &path("get", "/debugger"))
                .is_allowed()
        );
        let in_namespace = policy(
            json!([role]),
            json!([]),
            json!([]),
            json!([bind("d", Some("ns"), "ClusterRole", "debug", user)]),
        );
        assert!(
            !in_namespace
                .authorize(&u, &path("get", "/debug/requests"))
                .is_allowed()
        );
    }

    #[test]
    fn a_binding_to_a_missing_role_says_so_in_the_reason() {
        let p = policy(
            json!([]),
            json!([bind(
                "gone",
                None,
                "ClusterRole",
                "tfjob-operator",
                sa_subject()
            )]),
            json!([]),
            json!([bind(
                "gone",
                Some("tfjob-system"),
                "Role",
                "policies",
                sa_subject()
            )]),
        );
        assert_eq!(
            p.authorize(&operator(), &res("get", "", "configmaps", "tfjob-system", "c")),
            Decision::Deny {
                reason: "RBAC: [clusterrole.rbac.authorization.k8s.io \"tfjob-operator\" not found, role.rbac.authorization.k8s.io \"policies\" not found]".into()
            }
        );
        // Bindings of other users do not count.
        let other = UserInfo::service_account("ml", "x");
        assert_eq!(
            p.authorize(&other, &res("get", "", "configmaps", "tfjob-system", "c")),
            Decision::Deny {
                reason: String::new()
            }
        );
    }

    #[test]
    fn a_role_in_another_namespace_is_not_the_bindings_role() {
        let p = policy(
            json!([]),
            json!([]),
            json!([{"metadata": {"name": "r", "namespace": "a"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}]),
            json!([bind(
                "r",
                Some("b"),
                "Role",
                "r",
                json!([{"kind": "User", "name": "u"}])
            )]),
        );
        let u = UserInfo {
            name: "u".into(),
            groups: vec![],
        };
        assert!(
            !p.authorize(&u, &res("get", "", "pods", "b", "p"))
                .is_allowed()
        );
        assert!(
            !p.authorize(&u, &res("get", "", "pods", "a", "p"))
                .is_allowed()
        );
    }

    #[test]
    fn aggregated_cluster_roles_hold_the_rules_of_the_roles_they_select() {
        let agg = |name: &str, selector: Value| json!({"metadata": {"name": name}, "aggregationRule": {"clusterRoleSelectors": [selector]}, "rules": []});
        let labelled = |name: &str, labels: Value, resource: &str| {
            json!({"metadata": {"name": name, "labels": labels},
                   "rules": [{"apiGroups": ["kubeflow.org"], "resources": [resource], "verbs": ["get"]}]})
        };
        let p = policy(
            json!([
                agg("kubeflow-edit", json!({"matchLabels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}})),
                // Admin takes in edit (an aggregated role itself) and whatever else is labelled.
                agg("kubeflow-admin", json!({"matchExpressions": [{"key": "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin", "operator": "In", "values": ["true"]}]})),
                {"metadata": {"name": "kubeflow-edit-labelled", "labels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}},
                 "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}}]}},
                labelled("tfjobs-edit", json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}), "tfjobs"),
                labelled("pytorchjobs-edit", json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "false"}), "pytorchjobs"),
                labelled("admin-only", json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}), "profiles"),
                // A cycle ends.
                agg("loop-a", json!({"matchLabels": {"loop": "b"}})),
                {"metadata": {"name": "loop-b", "labels": {"loop": "b"}}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"loop": "a"}}]}},
            ]),
            json!([]),
            json!([]),
            json!([
                bind(
                    "edit",
                    Some("team"),
                    "ClusterRole",
                    "kubeflow-edit",
                    json!([{"kind": "User", "name": "editor"}])
                ),
                bind(
                    "admin",
                    Some("team"),
                    "ClusterRole",
                    "kubeflow-admin",
                    json!([{"kind": "User", "name": "owner"}])
                ),
            ]),
        );
        let user = |n: &str| UserInfo {
            name: n.into(),
            groups: vec![],
        };
        let get = |r: &str| res("get", "kubeflow.org", r, "team", "x");
        assert!(p.authorize(&user("editor"), &get("tfjobs")).is_allowed());
        assert!(
            !p.authorize(&user("editor"), &get("pytorchjobs"))
                .is_allowed()
        );
        assert!(!p.authorize(&user("editor"), &get("profiles")).is_allowed());
        assert!(p.authorize(&user("owner"), &get("tfjobs")).is_allowed());
        assert!(p.authorize(&user("owner"), &get("profiles")).is_allowed());
        assert_eq!(p.cluster_role_rules("loop-a"), Some(vec![]));
        assert_eq!(p.cluster_role_rules("missing"), None);
    }

    #[test]
    fn denials_are_worded_as_kubernetes_words_them() {
        let sa = operator();
        let delete = res("delete", "", "pods", "ns", "x");
        let why = denial(&sa, &delete, "");
        assert_eq!(
            forbidden_status(&delete, &why)["message"],
            format!(
                "pods \"x\" is forbidden: User \"{OPERATOR}\" cannot delete resource \"pods\" in API group \"\" in the namespace \"ns\""
            )
        );
        let status = res("get", "kubeflow.org", "tfjobs/status", "", "");
        assert_eq!(
            forbidden_status(&status, &denial(&sa, &status, ""))["message"],
            format!(
                "tfjobs.kubeflow.org is forbidden: User \"{OPERATOR}\" cannot get resource \"tfjobs/status\" in API group \"kubeflow.org\" at the cluster scope"
            )
        );
        let debug = path("get", "/debug/faults");
        let s = forbidden_status(&debug, &denial(&sa, &debug, "RBAC: x"));
        assert_eq!(
            s["message"],
            format!("forbidden: User \"{OPERATOR}\" cannot get path \"/debug/faults\": RBAC: x")
        );
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        let s = forbidden_status(&delete, "");
        assert_eq!(
            s["details"],
            json!({"name": "x", "group": "", "kind": "pods"})
        );
    }

    #[test]
    fn malformed_objects_grant_nothing_and_say_which_field() {
        let (p, errors) = Policy::from_objects(
            &[json!({"metadata": {"name": "bad"}, "rules": [{"verbs": "get"}]})],
            &[json!({"metadata": {"name": "nobody"}, "subjects": []})],
            &[],
            &[],
        );
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].name, "bad");
        assert!(
            errors[0].message.starts_with("rules[0].verbs: "),
            "{}",
            errors[0].message
        );
        assert!(
            errors[1].message.contains("roleRef"),
            "{}",
            errors[1].message
        );
        assert_eq!(p.cluster_role_rules("bad"), None);
    }

    #[test]
    fn validation_names_the_field() {
        let ok = bind("b", Some("ns"), "Role", "r", sa_subject());
        assert_eq!(validate("RoleBinding", &ok), Ok(()));
        assert_eq!(
            validate(
                "ClusterRoleBinding",
                &bind("b", None, "Role", "r", sa_subject())
            ),
            Err(
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""
                    .into()
            )
        );
        assert_eq!(
            validate(
                "RoleBinding",
                &bind("b", Some("ns"), "Role", "", sa_subject())
            ),
            Err("roleRef.name: Required value".into())
        );
        assert_eq!(
            validate("RoleBinding", &bind("b", Some("ns"), "Role", "r", json!([{"kind": "Robot", "name": "x"}]))),
            Err("subjects[0].kind: Unsupported value: \"Robot\": supported values: \"User\", \"Group\", \"ServiceAccount\"".into())
        );
        assert_eq!(
            validate(
                "ClusterRoleBinding",
                &bind(
                    "b",
                    None,
                    "ClusterRole",
                    "r",
                    json!([{"kind": "ServiceAccount", "name": "x"}])
                )
            ),
            Err("subjects[0].namespace: Required value".into())
        );
        assert_eq!(
            validate(
                "ClusterRole",
                &json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "resources": 3}]})
            ),
            Err("rules[0].resources: invalid type: integer `3`, expected a sequence".into())
        );
        assert_eq!(
            validate("Role", &json!({"metadata": {"name": "r"}})),
            Ok(())
        );
    }
}
