//! Authentication of the embedded API server: who a request's bearer token says it is.
//!
//! A request without credentials is the cluster administrator's (`system:masters`), and so is
//! one with the administrator's token that an HTTPS kubeconfig carries ([`Tokens::accept`]):
//! kubectl sends no credentials over plain HTTP whatever its kubeconfig says, and over HTTPS it
//! asks for a user name and password when its user has none. kubectl acts as someone else with
//! `--as` (see [`crate::auth::impersonation`]) or with a token.
//! Service-account tokens come from the TokenRequest subresource
//! (`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`, what `kubectl create token NAME -n
//! NS` calls) or from [`Tokens::service_account`] for tests and `up`: opaque random strings
//! that name `system:serviceaccount:NS:NAME` until they expire, presented by clients that
//! send them over HTTP (kube-rs, the Python client, curl). A token the server did not issue,
//! or one that expired, is answered `401 Unauthorized`. Tokens live in memory, as long as the
//! server: unlike a real cluster's signed JWTs they do not survive a restart, and deleting the
//! service account does not revoke them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::auth::rbac::UserInfo;
use crate::error::ApiError;
use crate::storage::store::Store;

/// The administrator's user name.
pub const ADMIN: &str = "embedded-admin";
/// A TokenRequest's lifetime when it asks for none, as on a real cluster.
pub const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);
/// Kubernetes refuses TokenRequests for less than ten minutes.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// ... and for more than 2^32 seconds.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Live tokens at most, so that a client allowed to mint tokens cannot exhaust memory.
const MAX_TOKENS: usize = 100_000;
/// Random bytes of a token: 256 bits.
const TOKEN_BYTES: usize = 32;

/// Why a request's credentials were refused; answered with `401 Unauthorized`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unauthenticated {
    #[error("the Authorization header is not a bearer token")]
    NotBearer,
    #[error("the bearer token is not one this server issued")]
    UnknownToken,
    #[error("the bearer token expired")]
    Expired,
}

impl Unauthenticated {
    /// The `Status` a Kubernetes API server answers with: it says no more than `Unauthorized`,
    /// so that a guess learns nothing.
    pub fn status() -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    }
}

/// An issued token and its end.
#[derive(Clone, Debug)]
pub struct IssuedToken {
    pub token: String,
    pub expires: Timestamp,
}

struct Issued {
    user: UserInfo,
    expires: Timestamp,
}

/// The tokens a server accepts. Cheap to clone: clones share the tokens.
#[derive(Clone, Default)]
pub struct Tokens {
    issued: Arc<Mutex<HashMap<String, Issued>>>,
}

impl std::fmt::Debug for Tokens {
    // Never print a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("issued", &self.lock().len())
            .finish_non_exhaustive()
    }
}

/// A fresh token: 256 bits from the operating system's random source. A machine that has none
/// cannot run a server anyone could trust, hence the panic.
pub fn random_token() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system provides random bytes");
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// No tokens issued yet.
    pub fn new() -> Tokens {
        Tokens::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Issued>> {
        // A panic elsewhere leaves a consistent map; keep serving.
        self.issued
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Issues a token naming `user` until `ttl` from now.
    pub fn issue(&self, user: UserInfo, ttl: Duration) -> Result<IssuedToken, ApiError> {
        let now = Timestamp::now();
        let expires = jiff::SignedDuration::try_from(ttl)
            .ok()
            .and_then(|d| now.checked_add(d).ok())
            .ok_or_else(|| ApiError::invalid(format!("a token lifetime of {ttl:?} is too long")))?;
        let mut issued = self.lock();
        issued.retain(|_, t| t.expires > now);
        if issued.len() >= MAX_TOKENS {
            return Err(ApiError::new(
                429,
                "TooManyRequests",
                format!("{MAX_TOKENS} tokens are live; wait for some to expire"),
            ));
        }
        let token = random_token();
        issued.insert(token.clone(), Issued { user, expires });
        Ok(IssuedToken { token, expires })
    }

    /// Accepts `token` as `user`'s for as long as the server runs, as a real API server's
    /// static token file does: the administrator's token of an HTTPS kubeconfig.
    pub fn accept(&self, token: &str, user: UserInfo) {
        self.lock().insert(
            token.to_owned(),
            Issued {
                user,
                expires: Timestamp::MAX,
            },
        );
    }

    /// Issues a token for service account `name` in `namespace`, which must exist in `store`.
    pub fn service_account(
        &self,
        store: &Store,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<IssuedToken, ApiError> {
        let accounts = store
            .resource("", "serviceaccounts")
            .ok_or_else(|| ApiError::not_found("resource", "serviceaccounts"))?;
        store.get(&accounts, Some(namespace), name)?;
        self.issue(UserInfo::service_account(namespace, name), ttl)
    }

    /// Who the request's `Authorization` header says made it.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<UserInfo, Unauthenticated> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(UserInfo::admin(ADMIN));
        };
        let text = value.to_str().map_err(|_| Unauthenticated::NotBearer)?;
        let token = match text.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => return Err(Unauthenticated::NotBearer),
        };
        if token.is_empty() {
            return Err(Unauthenticated::UnknownToken);
        }
        let mut issued = self.lock();
        let Some(found) = issued.get(token) else {
            return Err(Unauthenticated::UnknownToken);
        };
        if found.expires <= Timestamp::now() {
            issued.remove(token);
            return Err(Unauthenticated::Expired);
        }
        Ok(found.user.clone())
    }
}

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: a TokenRequest (`body`, JSON)
/// answered with the token in `status.token`, as `kubectl create token` reads it.
pub fn token_request(
    store: &Store,
    tokens: &Tokens,
    namespace: &str,
    name: &str,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let request: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?
    };
    let kind = request
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("TokenRequest");
    if kind != "TokenRequest" {
        return Err(ApiError::bad_request(format!(
            "the body must be a TokenRequest, not a {kind}"
        )));
    }
    let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION.as_secs() as i64,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::invalid(format!(
                "spec.expirationSeconds: Invalid value: {v}: must be an integer"
            ))
        })?,
    };
    if seconds < MIN_EXPIRATION_SECONDS {
        return Err(ApiError::invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
        )));
    }
    if seconds > MAX_EXPIRATION_SECONDS {
        return Err(ApiError::invalid(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
        )));
    }
    if spec.get("boundObjectRef").is_some_and(|b| !b.is_null()) {
        return Err(ApiError::invalid(
            "spec.boundObjectRef: Forbidden: the embedded cluster does not bind tokens to objects",
        ));
    }
    let audiences = match spec.get("audiences") {
        Some(Value::Array(a)) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!(["https://kubernetes.default.svc"]),
    };
    let ttl = Duration::from_secs(seconds.unsigned_abs());
    let issued = tokens.service_account(store, namespace, name, ttl)?;
    Ok((
        201,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": Timestamp::now().round(jiff::Unit::Second).ok()},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
            "status": {"token": issued.token,
                       "expirationTimestamp": issued.expires.round(jiff::Unit::Second).ok()},
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    fn store_with_account() -> std::sync::Arc<Store> {
        let store = Store::new();
        let t = |plural| store.resource("", plural).unwrap();
        store
            .create(&t("namespaces"), None, json!({"metadata": {"name": "ci"}}))
            .unwrap();
        store
            .create(
                &t("serviceaccounts"),
                Some("ci"),
                json!({"metadata": {"name": "builder"}}),
            )
            .unwrap();
        store
    }

    #[test]
    fn no_credentials_are_the_admin() {
        let admin = Tokens::new().authenticate(&HeaderMap::new()).unwrap();
        assert!(admin.in_group(crate::auth::rbac::MASTERS));
        assert_eq!(admin.name, ADMIN);
    }

    #[test]
    fn tokens_are_long_and_never_repeat() {
        let tokens: std::collections::BTreeSet<String> = (0..100).map(|_| random_token()).collect();
        assert_eq!(tokens.len(), 100);
        assert!(tokens.iter().all(|t| t.len() == 43), "{tokens:?}");
    }

    #[test]
    fn unknown_malformed_and_expired_tokens_are_refused() {
        let tokens = Tokens::new();
        assert_eq!(
            tokens.authenticate(&bearer("guess")),
            Err(Unauthenticated::UnknownToken)
        );
        assert_eq!(
            tokens.authenticate(&bearer("")),
            Err(Unauthenticated::UnknownToken)
        );
        let mut basic = HeaderMap::new();
        basic.insert(
            header::AUTHORIZATION,
            "Basic YWRtaW46YWRtaW4=".parse().unwrap(),
        );
        assert_eq!(tokens.authenticate(&basic), Err(Unauthenticated::NotBearer));
        let issued = tokens
            .issue(UserInfo::service_account("ci", "b"), Duration::ZERO)
            .unwrap();
        assert_eq!(
            tokens.authenticate(&bearer(&issued.token)),
            Err(Unauthenticated::Expired)
        );
        // Gone once seen expired.
        assert_eq!(
            tokens.authenticate(&bearer(&issued.token)),
            Err(Unauthenticated::UnknownToken)
        );
        assert_eq!(Unauthenticated::status()["code"], 401);
    }

    #[test]
    fn a_service_account_token_names_the_account_until_it_expires() {
        let store = store_with_account();
        let tokens = Tokens::new();
        let issued = tokens
            .service_account(&store, "ci", "builder", Duration::from_secs(600))
            .unwrap();
        let user = tokens.authenticate(&bearer(&issued.token)).unwrap();
        assert_eq!(user, UserInfo::service_account("ci", "builder"));
        assert_eq!(
            tokens.authenticate(&bearer(&format!("{}x", issued.token))),
            Err(Unauthenticated::UnknownToken)
        );
        let missing = tokens.service_account(&store, "ci", "nobody", Duration::from_secs(600));
        assert_eq!(missing.unwrap_err().code, 404);
    }

    #[test]
    fn token_requests_answer_as_kubernetes_does() {
        let store = store_with_account();
        let tokens = Tokens::new();
        let body = br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":700}}"#;
        let (code, answer) = token_request(&store, &tokens, "ci", "builder", body).unwrap();
        assert_eq!(code, 201);
        assert_eq!(answer["spec"]["expirationSeconds"], 700);
        let token = answer["status"]["token"].as_str().unwrap();
        assert_eq!(
            tokens.authenticate(&bearer(token)).unwrap().name,
            "system:serviceaccount:ci:builder"
        );
        let expires: Timestamp = answer["status"]["expirationTimestamp"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(expires > Timestamp::now() + jiff::SignedDuration::from_secs(600));
        // An empty body asks for the default hour.
        let (_, answer) = token_request(&store, &tokens, "ci", "builder", b"").unwrap();
        assert_eq!(answer["spec"]["expirationSeconds"], 3600);
    }

    #[test]
    fn token_requests_that_cannot_be_served_say_why() {
        let store = store_with_account();
        let tokens = Tokens::new();
        let ask = |body: &str| {
            token_request(&store, &tokens, "ci", "builder", body.as_bytes()).unwrap_err()
        };
        let short = ask(r#"{"spec":{"expirationSeconds":60}}"#);
        assert_eq!(short.code, 422);
        assert!(
            short.message.contains("spec.expirationSeconds"),
            "{}",
            short.message
        );
        assert_eq!(
            ask(r#"{"spec":{"expirationSeconds":8589934592}}"#).code,
            422
        );
        assert_eq!(ask(r#"{"spec":{"expirationSeconds":"long"}}"#).code, 422);
        assert_eq!(
            ask(r#"{"spec":{"boundObjectRef":{"kind":"Pod","name":"p"}}}"#).code,
            422
        );
        assert_eq!(ask(r#"{"kind":"Pod"}"#).code, 400);
        assert_eq!(ask("not json").code, 400);
        let missing = token_request(&store, &tokens, "ci", "ghost", b"{}").unwrap_err();
        assert_eq!(missing.code, 404);
    }
}
