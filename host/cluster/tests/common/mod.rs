//! The API server as its clients meet it in these tests: over HTTPS, with a CA made for the
//! test, reached through the kubeconfig `up` writes ([`ClientAccess`]) and nothing else. kubectl,
//! the Python client and kube-rs read that kubeconfig as it is written; the raw requests that
//! test what no client sends go over TLS too, verifying the same CA.
//!
//! Every test file compiles this module on its own and uses a different subset of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tfjob_cluster::Store;
use tfjob_cluster::http::kubeconfig::ClientAccess;
use tfjob_cluster::http::server::{RunningServer, ServerOptions};
use tfjob_cluster::http::tls::ServingCertificates;

/// A server serving HTTPS in the background, and how its clients reach it.
pub struct Serving {
    pub running: RunningServer,
    pub access: ClientAccess,
    certificates: ServingCertificates,
}

/// Serves `store` over HTTPS on a free loopback port with `options` (faults, authorization),
/// with a CA and serving certificate made for this server.
pub async fn serve(store: Arc<Store>, options: ServerOptions) -> Serving {
    let certificates = ServingCertificates::generate().unwrap();
    let options = options.with_https(&certificates).unwrap();
    let running = tfjob_cluster::http::server::start_with(store, 0, options)
        .await
        .unwrap();
    Serving {
        access: ClientAccess::https(running.addr, &certificates),
        running,
        certificates,
    }
}

impl Serving {
    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    /// Writes the administrator's kubeconfig, with `namespace` as its namespace, into `dir`.
    pub fn write_admin_kubeconfig(&self, dir: &Path, namespace: &str) -> PathBuf {
        write(
            dir.join("kubeconfig"),
            &self.access.admin_kubeconfig(namespace),
        )
    }

    /// Writes `file` in `dir`: a kubeconfig whose user `user` presents `token`.
    pub fn write_kubeconfig(
        &self,
        dir: &Path,
        file: &str,
        user: &str,
        token: Option<&str>,
    ) -> PathBuf {
        write(
            dir.join(file),
            &self.access.kubeconfig(user, token, "default"),
        )
    }

    /// A kube-rs client of the administrator's kubeconfig.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).unwrap()
    }

    /// The kube-rs configuration of the administrator's kubeconfig, for a client the test
    /// adjusts (retries, user agent).
    pub async fn config(&self) -> kube::Config {
        config_of(&self.access.admin_kubeconfig("default")).await
    }

    /// One HTTP/1.1 request over TLS as the administrator: the answer's head (status line and
    /// headers) and body. `head` is the request line and any headers of the test's own.
    pub fn raw_exchange(&self, head: &str, body: &[u8]) -> (String, String) {
        let token = self.certificates.admin_token();
        raw_tls_exchange(
            self.addr(),
            &self.certificates,
            &format!("{head}\r\nAuthorization: Bearer {token}"),
            body,
        )
    }

    /// The status line and body of [`raw_exchange`](Self::raw_exchange).
    pub fn raw_request(&self, head: &str, body: &[u8]) -> (String, String) {
        let (head, body) = self.raw_exchange(head, body);
        (head.lines().next().unwrap_or_default().to_owned(), body)
    }
}

/// The kube-rs configuration of `kubeconfig`, as the operator reads one.
pub async fn config_of(kubeconfig: &str) -> kube::Config {
    kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap()
}

fn write(path: PathBuf, contents: &str) -> PathBuf {
    std::fs::write(&path, contents).unwrap();
    path
}

/// One request over a TLS connection that trusts only `certificates`' CA, read to its end.
fn raw_tls_exchange(
    addr: SocketAddr,
    certificates: &ServingCertificates,
    head: &str,
    body: &[u8],
) -> (String, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(
            certificates.ca_der(),
        ))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = Vec::new();
    // The server may close without a TLS close_notify once it has answered: what was read
    // until then is the answer.
    if let Err(e) = stream.read_to_end(&mut response) {
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.to_owned(), body.to_owned())
}
