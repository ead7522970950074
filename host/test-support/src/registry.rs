//! A real OCI registry on loopback for the tests and benches: the CNCF distribution registry
//! (Debian's `docker-registry` package, which `tests/run` installs), one process per user with
//! its own storage, stopped when dropped. A test that cannot start it fails; it does not skip.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
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
    status_of_get(addr, "/v2/").is_some_and(|code| code == 200 || code == 401)
}

/// The status code a plain HTTP/1.0 `GET path` gets from `addr`, if it answers.
fn status_of_get(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}
