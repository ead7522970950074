//! The OCI registry helpers of the tests, beside the registry itself
//! (`tfjob_test_support::registry`): skopeo, publishing a module as another tool would, pushing
//! with the CLI, and policy ConfigMaps that name a module in a registry.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `skopeo` with `args`, plain HTTP allowed; its stdout, or a failed test with its stderr.
pub fn skopeo(args: &[&str]) -> String {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run skopeo ({e}): install Debian's skopeo package (tests/run does)")
        });
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Publishes `module` as `target` (`HOST:PORT/REPO:TAG`) the way another tool would: an OCI image
/// layout of a Wasm artifact written by hand in `dir`, copied to the registry by skopeo.
/// Returns the manifest's digest.
pub fn publish_with_skopeo(dir: &Path, module: &[u8], target: &str) -> String {
    use sha2::Digest as _;
    let sha256 = |bytes: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)));
    let layout = dir.join("oci-layout-dir");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let digest = sha256(bytes);
        std::fs::write(blobs.join(&digest[7..]), bytes).unwrap();
        digest
    };
    let config = br#"{"architecture":"wasm","os":"wasip2","layerDigests":[]}"#;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": put(config), "size": config.len()},
        "layers": [{"mediaType": "application/wasm", "digest": put(module), "size": module.len()}],
    }))
    .unwrap();
    let manifest_digest = put(&manifest);
    std::fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
        "size": manifest.len(), "annotations": {"org.opencontainers.image.ref.name": "v1"}}]});
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        &format!("oci:{}:v1", layout.display()),
        &format!("docker://{target}"),
    ]);
    manifest_digest
}

/// Pushes `module` to `reference` with the CLI over plain HTTP, with `extra` arguments and no
/// Docker config of the user's; returns the pinned reference it prints.
pub fn push(dir: &Path, module: &[u8], reference: &str, extra: &[&str]) -> String {
    let file = super::write(dir, "push.wasm", module);
    let mut cmd = super::operator();
    cmd.args(["policy", "push", &file, reference, "--insecure"])
        .args(extra)
        .env("HOME", "/nonexistent");
    let out = super::run(cmd, None, Duration::from_secs(120));
    super::expect_success(&out, "policy push").trim().to_owned()
}

/// The policy ConfigMap `tfjob-policy-<name>` in `namespace` whose module is pulled from
/// `reference` and whose manifest is `name: <name>`, the decorate hook and `rest` (YAML lines).
pub fn referencing(namespace: &str, name: &str, reference: &str, rest: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("tfjob-policy-{name}"), "namespace": namespace,
                     "labels": {"policy.tfjob.dev/policy": "true"}},
        "data": {"module": format!("oci://{reference}"),
                 "policy.yaml": format!("name: {name}\nhooks: [decorate]\n{rest}")},
    })
}
