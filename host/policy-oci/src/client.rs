//! A registry client whose every request is bounded: the OCI distribution API's few calls a
//! policy needs (manifests and blobs, read and written), each with a time limit covering the
//! whole response, a byte limit enforced while the body streams, and redirects followed only
//! within the registry.
//!
//! Why not a general OCI client: a registry is an input the operator does not control. General
//! clients read a manifest whole, however large, and follow redirects anywhere; here a
//! manifest larger than its limit, a layer larger than the module limit, a body that never
//! ends or trickles, a redirect to another host or to plain HTTP, each end the request with an
//! error naming what happened.
//!
//! Authentication follows the registry's challenge: `Basic` with the credentials given, or
//! `Bearer` with a token from the realm it names (with those credentials, or anonymous).
//! Tokens are kept per repository and access until the registry refuses one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, LOCATION, WWW_AUTHENTICATE,
};
use reqwest::{RequestBuilder, Response, StatusCode, Url};

use crate::artifact::{Descriptor, MANIFEST_ACCEPT, digest_of};
use crate::credentials::{Basic, Credentials};
use crate::reference::ModuleRef;

/// Bounds of every exchange with a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest module (layer) accepted; a Python policy is about 18 MB.
    pub max_module_bytes: u64,
    /// Largest manifest accepted; a policy's is well under 1 KiB.
    pub max_manifest_bytes: u64,
    /// Longest a request may take, its whole body included.
    pub request_timeout: Duration,
    /// Longest a connection may take to open.
    pub connect_timeout: Duration,
}

/// The default of [`Limits::max_module_bytes`].
pub const MAX_MODULE_BYTES: u64 = 64 << 20;
/// Largest signature payload or token response read: both are a few hundred bytes.
const MAX_SMALL_BODY: u64 = 64 << 10;
/// Redirects followed at most within one request.
const MAX_REDIRECTS: usize = 5;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_module_bytes: MAX_MODULE_BYTES,
            max_manifest_bytes: 256 << 10,
            request_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Why an exchange with a registry failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("registry {registry} is not reachable: {message}")]
    Unreachable { registry: String, message: String },
    #[error("{what}: no answer within {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("{what}: the registry answered {status}: {message}")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    #[error("{what}: not found in the registry")]
    NotFound { what: String },
    #[error("{what}: access denied ({hint})")]
    Unauthorized { what: String, hint: String },
    #[error("{what}: more than {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("{what}: {message}; only redirects within the registry are followed")]
    Redirect { what: String, message: String },
    #[error("{what}: expected digest {expected} but the content has {actual}")]
    Digest {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what}: {message}")]
    Protocol { what: String, message: String },
}

impl RegistryError {
    /// The kind, as a metric label and status reason.
    pub fn step(&self) -> &'static str {
        match self {
            RegistryError::Unreachable { .. } | RegistryError::Status { .. } => "registry",
            RegistryError::Timeout { .. } => "timeout",
            RegistryError::NotFound { .. } => "not-found",
            RegistryError::Unauthorized { .. } => "auth",
            RegistryError::TooLarge { .. } => "size",
            RegistryError::Redirect { .. } => "redirect",
            RegistryError::Digest { .. } => "digest",
            RegistryError::Protocol { .. } => "registry",
        }
    }

    /// Whether trying again later may succeed (a registry down or overloaded), as opposed to
    /// an answer that will not change for the same content.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } | RegistryError::Timeout { .. } => true,
            RegistryError::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// Access a request needs, for the token scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Access {
    Pull,
    Push,
}

impl Access {
    fn scope(self) -> &'static str {
        match self {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        }
    }
}

#[derive(Clone, Debug)]
enum Authorization {
    Basic(Basic),
    Bearer(String),
}

/// The bounded registry client; cheap to share.
pub struct RegistryClient {
    http: reqwest::Client,
    insecure: BTreeSet<String>,
    limits: Limits,
    /// What answered a challenge before, per registry, repository, access and the
    /// credentials it was earned with: a token or password one caller's Secret obtained never
    /// serves a caller with other credentials or none (one tenant's pull does not open another
    /// tenant's private repository).
    authorizations: Mutex<HashMap<AuthorizationKey, Authorization>>,
}

/// Authorizations kept at most.
const MAX_AUTHORIZATIONS: usize = 1024;

/// Registry, repository, access, and the credentials given (none: anonymous).
type AuthorizationKey = (String, String, Access, Option<Basic>);

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the registry client could not be built: {0}")]
pub struct ClientSetupError(String);

impl RegistryClient {
    /// A client speaking plain HTTP to the registries in `insecure` (a host, or `HOST:PORT`)
    /// and HTTPS with the system's roots to every other.
    pub fn new(
        limits: Limits,
        insecure: impl IntoIterator<Item = String>,
    ) -> Result<RegistryClient, ClientSetupError> {
        // The Kubernetes client uses rustls with ring; the registry client shares that provider.
        // Installing fails only when one is installed already, which is then used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            let first = &attempt.previous()[0];
            let next = attempt.url();
            let same_origin = next.host_str() == first.host_str()
                && next.port_or_known_default() == first.port_or_known_default();
            let downgrade = first.scheme() == "https" && next.scheme() != "https";
            if attempt.previous().len() > MAX_REDIRECTS {
                let message = format!("more than {MAX_REDIRECTS} redirects");
                attempt.error(message)
            } else if !same_origin || downgrade {
                let message = format!(
                    "redirected to {}://{}",
                    next.scheme(),
                    next.host_str().unwrap_or("?")
                );
                attempt.error(message)
            } else {
                attempt.follow()
            }
        });
        let http = reqwest::Client::builder()
            .redirect(policy)
            .connect_timeout(limits.connect_timeout)
            .user_agent(concat!("tfjob-operator/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientSetupError(e.to_string()))?;
        Ok(RegistryClient {
            http,
            insecure: insecure.into_iter().collect(),
            limits,
            authorizations: Mutex::new(HashMap::new()),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.contains(registry)
            || self.insecure.contains(crate::reference::host_of(registry))
    }

    fn base(&self, r: &ModuleRef) -> String {
        let scheme = if self.is_insecure(&r.registry) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", r.registry, r.repository)
    }

    /// The manifest `reference` (a tag or a digest) of `r`'s repository, at most
    /// [`Limits::max_manifest_bytes`], with its digest as computed here. A registry's own
    /// `Docker-Content-Digest`, when it sends one, must agree.
    pub async fn manifest(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        reference: &str,
    ) -> Result<(Vec<u8>, String), RegistryError> {
        let what = format!("manifest {}", r.with_reference(reference));
        let url = format!("{}/manifests/{reference}", self.base(r));
        let response = self
            .send(r, creds, Access::Pull, &what, |http| {
                http.get(&url).header(ACCEPT, MANIFEST_ACCEPT)
            })
            .await?;
        let claimed = header(response.headers(), "docker-content-digest");
        let body = self
            .read(response, self.limits.max_manifest_bytes, &what)
            .await?;
        let digest = digest_of(&body);
        if let Some(claimed) = claimed
            && claimed != digest
        {
            return Err(RegistryError::Digest {
                what,
                expected: cut(&claimed),
                actual: digest,
            });
        }
        Ok((body, digest))
    }

    /// The blob `descriptor` names, at most `limit` bytes, checked against its size and digest.
    pub async fn blob(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        descriptor: &Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("blob {} of {}", descriptor.digest, r.name());
        let url = format!("{}/blobs/{}", self.base(r), descriptor.digest);
        let response = self
            .send(r, creds, Access::Pull, &what, |http| http.get(&url))
            .await?;
        let body = self
            .read(response, limit.min(descriptor.size), &what)
            .await?;
        if body.len() as u64 != descriptor.size {
            return Err(RegistryError::Protocol {
                what,
                message: format!(
                    "{} bytes where the manifest says {}",
                    body.len(),
                    descriptor.size
                ),
            });
        }
        let actual = digest_of(&body);
        if actual != descriptor.digest {
            return Err(RegistryError::Digest {
                what,
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(body)
    }

    /// A small blob (a signature payload), at most 64 KiB.
    pub async fn small_blob(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        descriptor: &Descriptor,
    ) -> Result<Vec<u8>, RegistryError> {
        if descriptor.size > MAX_SMALL_BODY {
            return Err(RegistryError::TooLarge {
                what: format!("blob {} of {}", descriptor.digest, r.name()),
                limit: MAX_SMALL_BODY,
            });
        }
        self.blob(r, creds, descriptor, MAX_SMALL_BODY).await
    }

    /// Uploads `bytes` as the blob `digest` unless the repository has it already: a monolithic
    /// upload (one POST for the session, one PUT with the content).
    pub async fn upload_blob(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(), RegistryError> {
        let what = format!("blob {digest} of {}", r.name());
        let url = format!("{}/blobs/{digest}", self.base(r));
        let head = self
            .send_raw(r, creds, Access::Push, &what, |http| http.head(&url))
            .await?;
        if head.status().is_success() {
            return Ok(());
        }
        let start = format!("{}/blobs/uploads/", self.base(r));
        let session = self
            .send(r, creds, Access::Push, &what, |http| {
                http.post(&start).header(CONTENT_LENGTH, 0)
            })
            .await?;
        let location = header(session.headers(), LOCATION.as_str()).ok_or_else(|| {
            RegistryError::Protocol {
                what: what.clone(),
                message: "the upload session has no Location".into(),
            }
        })?;
        let mut target = Url::parse(&start)
            .and_then(|base| base.join(&location))
            .map_err(|e| RegistryError::Protocol {
                what: what.clone(),
                message: format!("upload Location {}: {e}", cut(&location)),
            })?;
        target.query_pairs_mut().append_pair("digest", digest);
        let body = bytes.to_vec();
        self.send(r, creds, Access::Push, &what, |http| {
            http.put(target.clone())
                .header(CONTENT_TYPE, "application/octet-stream")
                .body(body.clone())
        })
        .await?;
        Ok(())
    }

    /// Stores `manifest` under `reference` (a tag or its digest); returns the digest.
    pub async fn put_manifest(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        reference: &str,
        media_type: &str,
        manifest: &[u8],
    ) -> Result<String, RegistryError> {
        let what = format!("manifest {}", r.with_reference(reference));
        let url = format!("{}/manifests/{reference}", self.base(r));
        let body = manifest.to_vec();
        self.send(r, creds, Access::Push, &what, |http| {
            http.put(&url)
                .header(CONTENT_TYPE, media_type)
                .body(body.clone())
        })
        .await?;
        Ok(digest_of(manifest))
    }

    /// Sends a request, answering an authentication challenge once; a status other than
    /// success is an error.
    async fn send(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        access: Access,
        what: &str,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response, RegistryError> {
        let response = self.send_raw(r, creds, access, what, build).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        Err(self.refusal(response, what).await)
    }

    /// Sends a request, answering an authentication challenge once; any status is returned.
    async fn send_raw(
        &self,
        r: &ModuleRef,
        creds: &Credentials,
        access: Access,
        what: &str,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response, RegistryError> {
        let basic = creds.get(&r.registry).cloned();
        let key = (
            r.registry.clone(),
            r.repository.clone(),
            access,
            basic.clone(),
        );
        let known = self.authorization(&key);
        let response = self
            .execute(r, what, authorize(build(&self.http), known.as_ref()))
            .await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let challenge = header(response.headers(), WWW_AUTHENTICATE.as_str()).unwrap_or_default();
        let fresh = match Challenge::parse(&challenge) {
            Some(Challenge::Basic) => match basic {
                Some(basic) => Authorization::Basic(basic),
                None => {
                    return Err(RegistryError::Unauthorized {
                        what: what.to_owned(),
                        hint: format!(
                            "the registry asks for a password and none is given for {}",
                            r.registry
                        ),
                    });
                }
            },
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = scope
                    .unwrap_or_else(|| format!("repository:{}:{}", r.repository, access.scope()));
                let token = self
                    .token(r, what, &realm, service.as_deref(), &scope, basic.as_ref())
                    .await?;
                Authorization::Bearer(token)
            }
            None => {
                return Err(RegistryError::Unauthorized {
                    what: what.to_owned(),
                    hint: format!(
                        "the registry's challenge {:?} is not understood",
                        cut(&challenge)
                    ),
                });
            }
        };
        let response = self
            .execute(r, what, authorize(build(&self.http), Some(&fresh)))
            .await?;
        if response.status() == StatusCode::UNAUTHORIZED
            || response.status() == StatusCode::FORBIDDEN
        {
            self.authorizations
                .lock()
                .expect("authorizations")
                .remove(&key);
            return Err(RegistryError::Unauthorized {
                what: what.to_owned(),
                hint: if key.3.is_some() {
                    "the credentials given were refused".into()
                } else {
                    format!("no credentials are given for {}", r.registry)
                },
            });
        }
        let mut known = self.authorizations.lock().expect("authorizations");
        // Kept per set of credentials, so bounded: past the bound, start again (each pull then
        // answers one challenge more).
        if known.len() >= MAX_AUTHORIZATIONS {
            known.clear();
        }
        known.insert(key, fresh);
        Ok(response)
    }

    fn authorization(&self, key: &AuthorizationKey) -> Option<Authorization> {
        self.authorizations
            .lock()
            .expect("authorizations")
            .get(key)
            .cloned()
    }

    /// A token from the realm a `Bearer` challenge names.
    async fn token(
        &self,
        r: &ModuleRef,
        what: &str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        basic: Option<&Basic>,
    ) -> Result<String, RegistryError> {
        let mut url = Url::parse(realm).map_err(|e| RegistryError::Protocol {
            what: what.to_owned(),
            message: format!("token realm {}: {e}", cut(realm)),
        })?;
        if url.scheme() != "https" && !(url.scheme() == "http" && self.is_insecure(&r.registry)) {
            return Err(RegistryError::Protocol {
                what: what.to_owned(),
                message: format!("token realm {} is not HTTPS", cut(realm)),
            });
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let mut request = self.http.get(url);
        if let Some(basic) = basic {
            request = request.basic_auth(&basic.username, Some(&basic.password));
        }
        let token_what = format!("{what}: token");
        let response = self.execute(r, &token_what, request).await?;
        if !response.status().is_success() {
            return Err(RegistryError::Unauthorized {
                what: what.to_owned(),
                hint: format!("the token service answered {}", response.status().as_u16()),
            });
        }
        let body = self.read(response, MAX_SMALL_BODY, &token_what).await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let parsed: Token = serde_json::from_slice(&body).map_err(|e| RegistryError::Protocol {
            what: token_what.clone(),
            message: format!("not a token response: {e}"),
        })?;
        parsed
            .token
            .or(parsed.access_token)
            .filter(|t| !t.is_empty())
            .ok_or(RegistryError::Protocol {
                what: token_what,
                message: "the token response has no token".into(),
            })
    }

    async fn execute(
        &self,
        r: &ModuleRef,
        what: &str,
        request: RequestBuilder,
    ) -> Result<Response, RegistryError> {
        request
            .timeout(self.limits.request_timeout)
            .send()
            .await
            .map_err(|e| self.transport(r, what, &e))
    }

    /// Reads a body of at most `limit` bytes: a declared length above it ends the request
    /// before any byte is read, a streamed one as soon as it passes it.
    async fn read(
        &self,
        mut response: Response,
        limit: u64,
        what: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let too_large = || RegistryError::TooLarge {
            what: what.to_owned(),
            limit,
        };
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                if e.is_timeout() {
                    RegistryError::Timeout {
                        what: what.to_owned(),
                        after: self.limits.request_timeout,
                    }
                } else {
                    RegistryError::Protocol {
                        what: what.to_owned(),
                        message: format!("the body broke off: {}", chain(&e)),
                    }
                }
            })?;
            let Some(chunk) = chunk else { break };
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The error of a non-success answer, with the registry's message when it sent one.
    async fn refusal(&self, response: Response, what: &str) -> RegistryError {
        let status = response.status();
        let body = self.read(response, 4096, what).await.unwrap_or_default();
        let message = registry_message(&body);
        match status {
            StatusCode::NOT_FOUND => RegistryError::NotFound {
                what: what.to_owned(),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => RegistryError::Unauthorized {
                what: what.to_owned(),
                hint: message,
            },
            _ => RegistryError::Status {
                what: what.to_owned(),
                status: status.as_u16(),
                message,
            },
        }
    }

    fn transport(&self, r: &ModuleRef, what: &str, e: &reqwest::Error) -> RegistryError {
        if e.is_timeout() {
            RegistryError::Timeout {
                what: what.to_owned(),
                after: self.limits.request_timeout,
            }
        } else if e.is_redirect() {
            RegistryError::Redirect {
                what: what.to_owned(),
                message: chain(e),
            }
        } else if e.is_connect() {
            RegistryError::Unreachable {
                registry: r.registry.clone(),
                message: chain(e),
            }
        } else {
            RegistryError::Protocol {
                what: what.to_owned(),
                message: chain(e),
            }
        }
    }
}

fn authorize(request: RequestBuilder, auth: Option<&Authorization>) -> RequestBuilder {
    match auth {
        None => request,
        Some(Authorization::Basic(b)) => request.basic_auth(&b.username, Some(&b.password)),
        Some(Authorization::Bearer(token)) => {
            request.header(AUTHORIZATION, format!("Bearer {token}"))
        }
    }
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// `Basic realm="..."` or `Bearer realm="...",service="...",scope="..."`.
    fn parse(text: &str) -> Option<Challenge> {
        let (scheme, params) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        let mut fields = HashMap::new();
        let mut rest = params.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let after = after.trim_start();
            let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            fields.insert(key.trim().to_ascii_lowercase(), value.to_owned());
            rest = remaining.trim_start().trim_start_matches(',').trim_start();
        }
        if scheme.eq_ignore_ascii_case("basic") {
            Some(Challenge::Basic)
        } else if scheme.eq_ignore_ascii_case("bearer") {
            Some(Challenge::Bearer {
                realm: fields.remove("realm")?,
                service: fields.remove("service"),
                scope: fields.remove("scope"),
            })
        } else {
            None
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The first message of a distribution error body (`{"errors":[{"message":...}]}`), or the
/// start of the body.
fn registry_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    if let Ok(parsed) = serde_json::from_slice::<Errors>(body)
        && let Some(first) = parsed.errors.first()
    {
        return cut(&format!("{} {}", first.code, first.message));
    }
    cut(&String::from_utf8_lossy(body))
}

/// `text` cut to a length fit for a status line.
fn cut(text: &str) -> String {
    tfjob_policy_logic::text::prefix(text.trim(), 200).to_owned()
}

/// An error with its causes, which reqwest keeps apart.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    cut(&text)
}

impl ModuleRef {
    /// `HOST/REPO:TAG` or `HOST/REPO@DIGEST` for `reference`, in messages.
    pub fn with_reference(&self, reference: &str) -> String {
        if reference.starts_with("sha256:") {
            format!("{}@{reference}", self.name())
        } else {
            format!("{}:{reference}", self.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_with_quoted_commas_and_odd_spacing() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.example.com/token",service="reg",scope="repository:a/b:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example.com/token".into(),
                service: Some("reg".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(Challenge::parse("Bearer service=x"), None, "no realm");
        assert_eq!(Challenge::parse("Negotiate abc"), None);
        assert_eq!(Challenge::parse(r#"Bearer realm="unterminated"#), None);
    }

    #[test]
    fn registry_errors_are_cut_and_read_from_the_distribution_format() {
        let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#;
        assert_eq!(registry_message(body), "MANIFEST_UNKNOWN manifest unknown");
        assert_eq!(registry_message(&vec![b'x'; 10_000]).len(), 200);
        assert_eq!(registry_message("é".repeat(300).as_bytes()).len(), 200);
    }
}
