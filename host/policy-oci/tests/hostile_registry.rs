//! The registry client against registries that misbehave: a scripted HTTP server on loopback
//! answers slowly, endlessly, hugely, with the wrong bytes, with redirects elsewhere, or not at
//! all. Every pull must end, within its bounds, with an error naming what happened.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{Answer, Request, ok, serve};
use tfjob_policy_engine::signature::TrustedKeys;
use tfjob_policy_oci::artifact::{Artifact, digest_of};
use tfjob_policy_oci::{Credentials, Limits, ModuleRef, PullError, RegistryClient, RegistryError};

fn limits() -> Limits {
    Limits {
        max_module_bytes: 1 << 20,
        max_manifest_bytes: 64 << 10,
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
    }
}

/// Pulls `repo:v1` (or `reference`) from `addr` over plain HTTP; also returns how long it took.
async fn pull_from(addr: SocketAddr, reference: &str) -> (Result<(), PullError>, Duration) {
    let r = ModuleRef::parse(&format!("{addr}/{reference}")).unwrap();
    let client = RegistryClient::new(limits(), [addr.to_string()]).unwrap();
    let started = Instant::now();
    let result = tfjob_policy_oci::pull(&client, &r, &Credentials::none(), &TrustedKeys::none())
        .await
        .map(|_| ());
    (result, started.elapsed())
}

const MODULE: &[u8] = b"\0asm\x0d\0\x01\0 a component";

fn artifact() -> Artifact {
    Artifact::module(MODULE, jiff::Timestamp::UNIX_EPOCH)
}

/// A registry that serves `artifact()` but answers `blob` for the layer.
fn serving(blob: Answer) -> impl Fn(&Request) -> Answer + Send + Sync + 'static {
    let artifact = artifact();
    let layer = digest_of(MODULE);
    move |r: &Request| {
        if r.path.contains("/manifests/") {
            ok(&artifact.manifest)
        } else if r.path.ends_with(&layer) {
            blob.clone()
        } else {
            Answer::Full(404, Vec::new(), Vec::new())
        }
    }
}

#[tokio::test]
async fn a_well_behaved_fake_registry_serves_the_module() {
    let addr = serve(serving(ok(MODULE))).await;
    let (result, _) = pull_from(addr, "p:v1").await;
    result.unwrap();
}

#[tokio::test]
async fn a_manifest_that_never_ends_is_cut_at_its_limit() {
    let addr = serve(|_: &Request| Answer::Endless).await;
    let (result, took) = pull_from(addr, "p:v1").await;
    let e = result.unwrap_err();
    assert!(
        matches!(
            e,
            PullError::Registry(RegistryError::TooLarge { limit: 65536, .. })
        ),
        "{e}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn a_huge_declared_manifest_is_refused_before_its_body() {
    let addr = serve(|_: &Request| Answer::Full(200, Vec::new(), vec![b' '; 10 << 20])).await;
    let (result, _) = pull_from(addr, "p:v1").await;
    let e = result.unwrap_err().to_string();
    assert!(e.contains("more than 65536 bytes"), "{e}");
}

#[tokio::test]
async fn a_registry_that_trickles_or_stays_silent_times_out() {
    for answer in [Answer::Trickle, Answer::Silent] {
        let addr = serve(move |_: &Request| answer.clone()).await;
        let (result, took) = pull_from(addr, "p:v1").await;
        let e = result.unwrap_err();
        assert!(
            matches!(e, PullError::Registry(RegistryError::Timeout { .. })),
            "{e}"
        );
        assert!(e.is_transient());
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
}

#[tokio::test]
async fn a_registry_that_is_not_there_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (result, _) = pull_from(addr, "p:v1").await;
    let e = result.unwrap_err();
    assert!(
        matches!(e, PullError::Registry(RegistryError::Unreachable { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("is not reachable"), "{e}");
}

#[tokio::test]
async fn a_layer_larger_than_declared_or_with_other_bytes_is_refused() {
    let mut longer = MODULE.to_vec();
    longer.extend_from_slice(&[0; 1000]);
    let addr = serve(serving(ok(&longer))).await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert!(
        matches!(e, PullError::Registry(RegistryError::TooLarge { .. })),
        "{e}"
    );

    let mut altered = MODULE.to_vec();
    altered[10] ^= 1;
    let addr = serve(serving(ok(&altered))).await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert!(
        matches!(e, PullError::Registry(RegistryError::Digest { .. })),
        "{e}"
    );
    assert_eq!(e.step(), "digest");
    assert!(!e.is_transient());
}

#[tokio::test]
async fn a_manifest_other_than_the_pinned_digest_is_refused() {
    let addr = serve(serving(ok(MODULE))).await;
    let pinned = format!("p@sha256:{}", "1".repeat(64));
    let e = pull_from(addr, &pinned).await.0.unwrap_err();
    assert!(e.to_string().contains("expected digest sha256:111"), "{e}");
    // A registry whose own digest header disagrees with the bytes it sent.
    let manifest = artifact().manifest;
    let addr = serve(move |_: &Request| {
        let header = (
            "Docker-Content-Digest".into(),
            format!("sha256:{}", "2".repeat(64)),
        );
        Answer::Full(200, vec![header], manifest.clone())
    })
    .await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert!(
        matches!(e, PullError::Registry(RegistryError::Digest { .. })),
        "{e}"
    );
}

#[tokio::test]
async fn a_layer_over_the_module_limit_is_refused_before_it_is_fetched() {
    let mut manifest: serde_json::Value = serde_json::from_slice(&artifact().manifest).unwrap();
    manifest["layers"][0]["size"] = (100u64 << 30).into();
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let fetched = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::clone(&fetched);
    let addr = serve(move |r: &Request| {
        if r.path.contains("/blobs/") {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        ok(&bytes)
    })
    .await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert_eq!(e.step(), "size", "{e}");
    assert!(
        e.to_string().contains("largest module accepted is 1048576"),
        "{e}"
    );
    assert!(!fetched.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn a_redirect_to_another_host_is_not_followed() {
    let elsewhere = serve(serving(ok(MODULE))).await;
    let layer = digest_of(MODULE);
    let manifest = artifact().manifest;
    let addr = serve(move |r: &Request| {
        if r.path.contains("/manifests/") {
            ok(&manifest)
        } else {
            let to = format!("http://localhost:{}/v2/p/blobs/{layer}", elsewhere.port());
            Answer::Full(307, vec![("Location".into(), to)], Vec::new())
        }
    })
    .await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert!(
        matches!(e, PullError::Registry(RegistryError::Redirect { .. })),
        "{e}"
    );
    assert!(
        e.to_string().contains("redirected to http://localhost"),
        "{e}"
    );
}

#[tokio::test]
async fn a_manifest_of_the_wrong_kind_is_refused_by_name() {
    let mut manifest: serde_json::Value = serde_json::from_slice(&artifact().manifest).unwrap();
    manifest["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip".into();
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let addr = serve(move |_: &Request| ok(&bytes)).await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert_eq!(e.step(), "artifact");
    assert!(e.to_string().contains("expected application/wasm"), "{e}");
    let addr = serve(|_: &Request| ok(b"<html>not json</html>")).await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
}

#[tokio::test]
async fn a_registry_that_demands_credentials_none_were_given_for_says_so() {
    let addr = serve(|_: &Request| {
        let challenge = ("WWW-Authenticate".into(), "Basic realm=\"r\"".into());
        Answer::Full(401, vec![challenge], Vec::new())
    })
    .await;
    let e = pull_from(addr, "p:v1").await.0.unwrap_err();
    assert_eq!(e.step(), "auth");
    assert!(
        e.to_string()
            .contains("asks for a password and none is given"),
        "{e}"
    );
}
