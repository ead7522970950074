//! A real OCI registry on loopback for the tests: the CNCF distribution registry (Debian's
//! `docker-registry` package, which `.ci/run` installs), one process per test with its own
//! storage, stopped when dropped. A test that cannot start it fails; it does not skip.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The registry binary.
const BINARY: &str = "docker-registry";

/// A running registry.
pub struct Registry {
    pub addr: SocketAddr,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free loopback port, waiting until it answers `/v2/`.
    pub fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_port();
        let mut registry = Registry {
            addr,
            child: None,
            dir,
        };
        registry.resume();
        registry
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
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {}\n",
                self.dir.path().join("data").display(),
                self.addr
            ),
        )
        .unwrap();
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
                     (apt-get install docker-registry; .ci/run does)"
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

/// Whether `GET /v2/` answers 200.
fn answers(addr: SocketAddr) -> bool {
    super::http_get(addr, "/v2/").is_some_and(|(code, _)| code == 200)
}

/// `skopeo` with `args`, plain HTTP allowed; its stdout, or a failed test with its stderr.
pub fn skopeo(args: &[&str]) -> String {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run skopeo ({e}): install Debian's skopeo package (.ci/run does)")
        });
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
