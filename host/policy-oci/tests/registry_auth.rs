//! The client answers a registry's authentication challenge as registries expect: `Basic` with
//! the credentials of a Docker config, `Bearer` with a token fetched from the realm the
//! challenge names (with those credentials), then the same token for the next requests; wrong
//! credentials end in a clear refusal.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use support::{Answer, Request, ok, serve};
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_oci::artifact::{Artifact, digest_of};
use tfjob_policy_oci::{Credentials, Limits, ModuleRef, RegistryClient};

const MODULE: &[u8] = b"\0asm\x0d\0\x01\0 a component";

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn docker_config(registry: &str, user: &str, password: &str) -> Credentials {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let json = format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#);
    Credentials::from_docker_config("test", json.as_bytes()).unwrap()
}

/// Serves the module to requests whose `Authorization` is `expected`; challenges the others.
fn guarded(expected: String, challenge: String) -> impl Fn(&Request) -> Answer + Send + Sync {
    let artifact = Artifact::module(MODULE, jiff::Timestamp::UNIX_EPOCH);
    let layer = digest_of(MODULE);
    move |r: &Request| {
        if r.header("authorization") != Some(expected.as_str()) {
            return Answer::Full(
                401,
                vec![("WWW-Authenticate".into(), challenge.clone())],
                Vec::new(),
            );
        }
        if r.path.contains("/manifests/") {
            ok(&artifact.manifest)
        } else if r.path.ends_with(&layer) {
            ok(MODULE)
        } else {
            Answer::Full(404, Vec::new(), Vec::new())
        }
    }
}

async fn pull(
    registry: &str,
    creds: &Credentials,
) -> Result<tfjob_policy_oci::Pulled, tfjob_policy_oci::PullError> {
    let client = RegistryClient::new(Limits::default(), [registry.to_owned()]).unwrap();
    pull_with(&client, registry, creds).await
}

async fn pull_with(
    client: &RegistryClient,
    registry: &str,
    creds: &Credentials,
) -> Result<tfjob_policy_oci::Pulled, tfjob_policy_oci::PullError> {
    let r = ModuleRef::parse(&format!("{registry}/team/p:v1")).unwrap();
    tfjob_policy_oci::pull(client, &r, creds, &TrustedKeys::none()).await
}

#[tokio::test]
async fn basic_credentials_from_a_docker_config_are_sent_when_challenged() {
    let addr = serve(guarded(
        basic("ci", "s3cret"),
        "Basic realm=\"registry\"".into(),
    ))
    .await;
    let registry = addr.to_string();
    let pulled = pull(&registry, &docker_config(&registry, "ci", "s3cret"))
        .await
        .unwrap();
    assert_eq!(pulled.module, MODULE);

    let e = pull(&registry, &docker_config(&registry, "ci", "wrong"))
        .await
        .unwrap_err();
    assert_eq!(e.step(), "auth");
    assert!(
        e.to_string().contains("the credentials given were refused"),
        "{e}"
    );
}

#[tokio::test]
async fn a_bearer_challenge_is_answered_with_a_token_from_its_realm() {
    // The token service, on its own port as it usually is, checks the credentials and scope.
    let issued = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&issued);
    let expected = basic("robot", "pw");
    let tokens = serve(move |r: &Request| {
        let scoped = r.path.contains("scope=repository%3Ateam%2Fp%3Apull")
            && r.path.contains("service=fake-registry");
        if r.header("authorization") == Some(expected.as_str()) && scoped {
            count.fetch_add(1, Ordering::SeqCst);
            ok(br#"{"token": "t0k3n", "expires_in": 300}"#)
        } else {
            Answer::Full(401, Vec::new(), Vec::new())
        }
    })
    .await;
    let challenge = format!("Bearer realm=\"http://{tokens}/token\",service=\"fake-registry\"");
    let addr = serve(guarded("Bearer t0k3n".into(), challenge)).await;
    let registry = addr.to_string();
    let pulled = pull(&registry, &docker_config(&registry, "robot", "pw"))
        .await
        .unwrap();
    assert_eq!(pulled.module, MODULE);
    // One token for the manifest and the blob: it is kept for the repository.
    assert_eq!(issued.load(Ordering::SeqCst), 1);
}

/// The operator has one client for every namespace's pulls: what one namespace's Secret earned
/// (a password accepted, a token) must not open the repository to a pull with other
/// credentials or none.
#[tokio::test]
async fn what_one_callers_credentials_earned_never_serves_another_caller() {
    let tokens = serve(move |r: &Request| {
        if r.header("authorization") == Some(basic("robot", "pw").as_str()) {
            ok(br#"{"token": "t0k3n"}"#)
        } else {
            Answer::Full(401, Vec::new(), Vec::new())
        }
    })
    .await;
    let bearer = format!("Bearer realm=\"http://{tokens}/token\",service=\"fake-registry\"");
    for (expected, challenge, user, password) in [
        (
            basic("ci", "s3cret"),
            "Basic realm=\"registry\"".to_owned(),
            "ci",
            "s3cret",
        ),
        ("Bearer t0k3n".to_owned(), bearer, "robot", "pw"),
    ] {
        let registry = serve(guarded(expected, challenge.clone()))
            .await
            .to_string();
        let client = RegistryClient::new(Limits::default(), [registry.clone()]).unwrap();
        let good = docker_config(&registry, user, password);
        for _ in 0..2 {
            let pulled = pull_with(&client, &registry, &good).await.unwrap();
            assert_eq!(pulled.module, MODULE, "{challenge}");
        }
        let stale = pull_with(&client, &registry, &docker_config(&registry, user, "old"))
            .await
            .unwrap_err();
        assert!(
            stale.to_string().contains("refused") || stale.to_string().contains("token service"),
            "{challenge}: {stale}"
        );
        let anonymous = pull_with(&client, &registry, &Credentials::default())
            .await
            .unwrap_err();
        assert_eq!(anonymous.step(), "auth", "{challenge}: {anonymous}");
        // And the rightful caller is still served.
        pull_with(&client, &registry, &good).await.unwrap();
    }
}
