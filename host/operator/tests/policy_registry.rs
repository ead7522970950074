//! `policy push` and `policy pull` against a real registry (the CNCF distribution registry on
//! loopback), read back with another client (`skopeo`), and an artefact another tool published
//! pulled by ours.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::registry::{publish_with_skopeo, skopeo};
use common::{expect_failure, expect_success, operator, run, write};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tfjob_policy_engine::defaults;
use tfjob_test_support::registry::Registry;

const TIMEOUT: Duration = Duration::from_secs(120);

fn decorate_wasm() -> &'static [u8] {
    defaults::find("default-decorate").unwrap().wasm
}

fn policy(args: &[&str]) -> std::process::Output {
    let mut cmd = operator();
    cmd.arg("policy").args(args).env("HOME", "/nonexistent");
    run(cmd, None, TIMEOUT)
}

/// A P-256 key pair as PEM files in `dir`: (private, public).
fn key_pair(dir: &Path, name: &str) -> (String, String) {
    use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
    let secret = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
    let private = secret.to_pkcs8_pem(LineEnding::LF).unwrap();
    let public = secret
        .public_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    (
        write(dir, &format!("{name}.pem"), private.as_bytes()),
        write(dir, &format!("{name}.pub"), public.as_bytes()),
    )
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The manifest as the registry serves it, to another client: the bytes and as JSON.
fn inspect_raw(reference: &str) -> (String, Value) {
    let text = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{reference}"),
    ]);
    let value = serde_json::from_str(&text).unwrap();
    (text, value)
}

#[test]
fn push_writes_a_wasm_artifact_other_tools_read_and_pull_verifies_its_signature() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let module = write(dir.path(), "decorate.wasm", decorate_wasm());
    let (private, public) = key_pair(dir.path(), "signing");
    let (_, foreign) = key_pair(dir.path(), "foreign");
    let tag = format!("{}/platform/decorate:v1", registry.host());

    let out = policy(&["push", &module, &tag, "--sign-key", &private, "--insecure"]);
    let printed = expect_success(&out, "push").trim().to_owned();
    let (pushed_tag, digest) = printed.split_once('@').expect("REF@sha256:...");
    assert_eq!(pushed_tag, tag);

    // Another client reads the Wasm OCI artifact layout.
    let (raw, manifest) = inspect_raw(&tag);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], sha256(decorate_wasm()).as_str());
    assert_eq!(layers[0]["size"], decorate_wasm().len() as u64);
    assert_eq!(
        sha256(raw.trim_end().as_bytes()),
        digest,
        "the printed digest is the manifest's"
    );

    // The signature sits where cosign keeps it, in cosign's layout.
    let sig_tag = format!(
        "{}/platform/decorate:{}.sig",
        registry.host(),
        digest.replace(':', "-")
    );
    let (_, signature) = inspect_raw(&sig_tag);
    let layer = &signature["layers"][0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.dev.cosign.simplesigning.v1+json"
    );
    assert!(
        layer["annotations"]["dev.cosignproject.cosign/signature"].is_string(),
        "{signature}"
    );

    // Pulled back by tag and by digest, verified with the public key.
    let out_file = dir.path().join("pulled.wasm");
    let out = policy(&[
        "pull",
        &tag,
        "-o",
        out_file.to_str().unwrap(),
        "--trusted-key",
        &public,
        "--insecure",
    ]);
    let printed = expect_success(&out, "pull");
    assert!(
        printed.contains(digest) && printed.contains("signed by key"),
        "{printed}"
    );
    assert_eq!(std::fs::read(&out_file).unwrap(), decorate_wasm());
    let pinned = format!("{}/platform/decorate@{digest}", registry.host());
    let out = policy(&[
        "pull",
        &pinned,
        "-o",
        out_file.to_str().unwrap(),
        "--insecure",
    ]);
    expect_success(&out, "pull by digest");

    // A foreign key, an unsigned module, a digest the registry does not hold: refused, and no
    // file is written.
    let refused = dir.path().join("refused.wasm");
    let out = policy(&[
        "pull",
        &tag,
        "-o",
        refused.to_str().unwrap(),
        "--trusted-key",
        &foreign,
        "--insecure",
    ]);
    let err = expect_failure(&out, "pull with a foreign key");
    assert!(err.contains("none of the 1 signatures"), "{err}");
    let unsigned = format!("{}/platform/unsigned:v1", registry.host());
    expect_success(
        &policy(&["push", &module, &unsigned, "--insecure"]),
        "push unsigned",
    );
    let out = policy(&[
        "pull",
        &unsigned,
        "-o",
        refused.to_str().unwrap(),
        "--trusted-key",
        &public,
        "--insecure",
    ]);
    let err = expect_failure(&out, "pull unsigned");
    assert!(
        err.contains("is not signed: no signature at tag sha256-"),
        "{err}"
    );
    let missing = format!(
        "{}/platform/decorate@sha256:{}",
        registry.host(),
        "0".repeat(64)
    );
    let err = expect_failure(
        &policy(&[
            "pull",
            &missing,
            "-o",
            refused.to_str().unwrap(),
            "--insecure",
        ]),
        "missing",
    );
    assert!(err.contains("not found in the registry"), "{err}");
    assert!(!refused.exists());
}

#[test]
fn an_artifact_published_by_another_tool_is_pulled() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{}/other-tool/decorate:v1", registry.host());
    let manifest_digest = publish_with_skopeo(dir.path(), decorate_wasm(), &target);

    let out_file = dir.path().join("pulled.wasm");
    let out = policy(&[
        "pull",
        &target,
        "-o",
        out_file.to_str().unwrap(),
        "--insecure",
    ]);
    let printed = expect_success(&out, "pull");
    assert!(printed.contains(&manifest_digest), "{printed}");
    assert_eq!(std::fs::read(&out_file).unwrap(), decorate_wasm());
}

#[test]
fn bad_arguments_are_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let module = write(dir.path(), "decorate.wasm", decorate_wasm());
    let text = write(dir.path(), "notes.txt", b"not wasm");
    let auth = write(
        dir.path(),
        "auth.json",
        b"{\"auths\": {\"r.example.com\": {\"auth\": \"%%\"}}}",
    );
    let cases: [(&[&str], &str); 6] = [
        (&["push", &text, "localhost:5000/p:v1"], "not a Wasm binary"),
        (&["push", &module, "localhost:5000/p"], "no tag is assumed"),
        (&["push", &module, "p:v1"], "no registry is assumed"),
        (
            &[
                "push",
                &module,
                &format!("localhost:5000/p@sha256:{}", "a".repeat(64)),
            ],
            "push to a tag",
        ),
        (
            &["pull", "localhost:5000/P:v1", "-o", "x.wasm"],
            "lowercase",
        ),
        (
            &["push", &module, "localhost:5000/p:v1", "--auth-file", &auth],
            "auth is not base64",
        ),
    ];
    for (args, expected) in cases {
        let err = expect_failure(&policy(args), &format!("{args:?}"));
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
