//! A real OCI registry on loopback for the tests: the CNCF distribution registry (Debian's
//! `docker-registry` package, which `tests/run` installs), one process per test with its own
//! storage, stopped when dropped. A test that cannot start it fails; it does not skip.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The registry binary.
const BINARY: &str = "docker-registry";

/// The user of [`Registry::start_authenticated`], and its password.
pub const USER: &str = "ci";
pub const PASSWORD: &str = "pull-s3cret";
/// `PASSWORD`'s bcrypt hash (cost 4), as `htpasswd -B` writes it: the registry takes no other.
const PASSWORD_BCRYPT: &str = "$2b$04$yhPXoesOCOTK1drBrPyFkut.Cnc3CdCenEdpJV1ocr7tbArkhpoH.";

/// A running registry.
pub struct Registry {
    pub addr: SocketAddr,
    child: Option<Child>,
    dir: tempfile::TempDir,
    authenticated: bool,
}

impl Registry {
    /// Starts a registry on a free loopback port, waiting until it answers `/v2/`.
    pub fn start() -> Registry {
        Registry::started(false)
    }

    /// A registry that answers only [`USER`] with [`PASSWORD`] (HTTP basic authentication).
    pub fn start_authenticated() -> Registry {
        Registry::started(true)
    }

    fn started(authenticated: bool) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_port();
        let mut registry = Registry {
            addr,
            child: None,
            dir,
            authenticated,
        };
        registry.resume();
        registry
    }

    /// A Docker config with [`USER`]'s credentials for this registry, as JSON.
    pub fn docker_config(&self, password: &str) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
        format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, self.addr)
    }

    /// `127.0.0.1:PORT`, as a reference's registry part.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Stops the registry (its storage stays, for [`Registry::resume`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the registry again on the same port and storage.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "the registry runs already");
        let config = self.dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {}\n",
            self.dir.path().join("data").display(),
            self.addr
        );
        if self.authenticated {
            let htpasswd = self.dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n")).unwrap();
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: registry\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("registry.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {BINARY} ({e}): install Debian's docker-registry package \
                     (apt-get install docker-registry; tests/run does)"
                )
            });
        self.child = Some(child);
        let started = Instant::now();
        while !answers(self.addr) {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > Duration::from_secs(20) {
                panic!(
                    "{BINARY} did not answer on {} ({exited:?}); its log:\n{}",
                    self.addr,
                    std::fs::read_to_string(self.dir.path().join("registry.log"))
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn storage(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Whether `GET /v2/` answers (200, or 401 when it asks for a password).
fn answers(addr: SocketAddr) -> bool {
    super::http_get(addr, "/v2/").is_some_and(|(code, _)| code == 200 || code == 401)
}

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
