//! Impersonation: a request with `Impersonate-User` (and `Impersonate-Group`) headers is made
//! as that user, what `kubectl --as=system:serviceaccount:NS:NAME` sends. kubectl sends no
//! bearer token over plain HTTP, which the embedded server speaks, so this is how kubectl acts
//! as a service account there; the requester needs the `impersonate` verb on the user (or the
//! service account, in its namespace) and on each group, as on a real cluster, which the
//! administrator has. The groups of an impersonated service account default to its own, and
//! every impersonated user is `system:authenticated`. Pure: [`crate::auth::access`] runs the checks.

use axum::http::HeaderMap;

use crate::auth::rbac::{AUTHENTICATED, Attributes, ResourceAttributes, UserInfo};

/// The header naming the user to act as.
pub const USER_HEADER: &str = "impersonate-user";
/// The header naming a group to act in; repeated for several.
pub const GROUP_HEADER: &str = "impersonate-group";

/// Who a request acts as, and what its sender must be allowed for that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    pub user: UserInfo,
    /// One `impersonate` check per user or service account and group.
    pub checks: Vec<Attributes>,
}

/// Why impersonation headers were refused; answered with `400 Bad Request`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImpersonationError {
    #[error("requested impersonation of groups without impersonating a user")]
    GroupsWithoutUser,
    #[error("the {0} header is not valid text")]
    NotText(&'static str),
    #[error("the Impersonate-User header is empty")]
    EmptyUser,
}

fn impersonate(resource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes::Resource(ResourceAttributes {
        verb: "impersonate".into(),
        group: String::new(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// The impersonation a request asks for, if any.
pub fn requested(headers: &HeaderMap) -> Result<Option<Impersonation>, ImpersonationError> {
    let groups = headers
        .get_all(GROUP_HEADER)
        .iter()
        .map(|v| v.to_str().map(str::to_owned))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|_| ImpersonationError::NotText("Impersonate-Group"))?;
    let Some(user) = headers.get(USER_HEADER) else {
        return if groups.is_empty() {
            Ok(None)
        } else {
            Err(ImpersonationError::GroupsWithoutUser)
        };
    };
    let name = user
        .to_str()
        .map_err(|_| ImpersonationError::NotText("Impersonate-User"))?;
    if name.is_empty() {
        return Err(ImpersonationError::EmptyUser);
    }
    let account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains(':'));
    let mut checks = vec![match account {
        Some((ns, n)) => impersonate("serviceaccounts", ns, n),
        None => impersonate("users", "", name),
    }];
    checks.extend(groups.iter().map(|g| impersonate("groups", "", g)));
    let mut all_groups = match account {
        Some((ns, n)) if groups.is_empty() => UserInfo::service_account(ns, n).groups,
        _ => groups,
    };
    if !all_groups
        .iter()
        .any(|g| g == AUTHENTICATED || g == "system:unauthenticated")
    {
        all_groups.push(AUTHENTICATED.to_owned());
    }
    Ok(Some(Impersonation {
        user: UserInfo {
            name: name.to_owned(),
            groups: all_groups,
        },
        checks,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn no_headers_no_impersonation() {
        assert_eq!(requested(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn a_service_account_gets_its_groups_and_is_checked_in_its_namespace() {
        let imp = requested(&headers(&[(
            USER_HEADER,
            "system:serviceaccount:tfjob-system:tfjob-operator",
        )]))
        .unwrap()
        .unwrap();
        assert_eq!(
            imp.user,
            UserInfo::service_account("tfjob-system", "tfjob-operator")
        );
        assert_eq!(
            imp.checks,
            vec![impersonate(
                "serviceaccounts",
                "tfjob-system",
                "tfjob-operator"
            )]
        );
    }

    #[test]
    fn a_user_with_groups_is_checked_for_each() {
        let imp = requested(&headers(&[
            (USER_HEADER, "alice"),
            (GROUP_HEADER, "ml"),
            (GROUP_HEADER, "ops"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(imp.user.name, "alice");
        assert_eq!(imp.user.groups, vec!["ml", "ops", AUTHENTICATED]);
        assert_eq!(
            imp.checks,
            vec![
                impersonate("users", "", "alice"),
                impersonate("groups", "", "ml"),
                impersonate("groups", "", "ops"),
            ]
        );
        // A malformed service-account name is a plain user name.
        let imp = requested(&headers(&[(USER_HEADER, "system:serviceaccount:x")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            imp.checks,
            vec![impersonate("users", "", "system:serviceaccount:x")]
        );
    }

    #[test]
    fn groups_need_a_user() {
        assert_eq!(
            requested(&headers(&[(GROUP_HEADER, "ml")])),
            Err(ImpersonationError::GroupsWithoutUser)
        );
        assert_eq!(
            requested(&headers(&[(USER_HEADER, "")])),
            Err(ImpersonationError::EmptyUser)
        );
    }
}
