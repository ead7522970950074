//! The API server's HTTPS, as the local clusters users know serve it (kind, k3s, minikube): a CA
//! and a serving certificate made at first start, the CA handed to clients in the kubeconfig's
//! `certificate-authority-data` and published in every namespace's `kube-root-ca.crt`.
//!
//! - **What is made.** ECDSA P-256 keys (rcgen, over the same ring the clients use). The CA,
//!   `tfjob-embedded-ca`, signs the serving certificate, which names `localhost`, `127.0.0.1`,
//!   `::1` and the names pods use in a cluster (`kubernetes`, `kubernetes.default`,
//!   `kubernetes.default.svc`, `kubernetes.default.svc.cluster.local`). Both last ten years: a
//!   development cluster's state outlives any one session, and nothing here rotates them.
//! - **Where it is kept.** With `up --state`, in a directory beside the state (`ca.crt`,
//!   `ca.key`, `tls.crt`, `tls.key`, and `admin.token`, the administrator's bearer token), made with mode 0700 and keys written 0600, each file
//!   written whole and renamed into place. A later start loads them, so kubeconfigs written
//!   before keep working. A directory holding some of the files but not all, or one that does
//!   not parse, is an error naming the file: it is never replaced in silence, since clients
//!   hold its CA.
//! - **How it is served.** [`serve`] accepts TCP connections, completes each TLS handshake in a
//!   task of its own (bounded at ten seconds, so a client that never finishes one holds no more
//!   than its own task), and serves HTTP/1.1 (ALPN `http/1.1`; no protocol upgrades, which only
//!   `exec`, `attach` and `port-forward` use, and the simulated kubelet runs none of them).
//!   Stopping stops accepting and lets the connections in flight end.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the certificates could not be made, kept or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the cluster's certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "{}: holds some of the cluster's certificate files but not {missing}; remove the directory to have new ones made (clients must then be given the new CA)",
        dir.display()
    )]
    Incomplete { dir: PathBuf, missing: &'static str },
    #[error("the serving certificate: {0}")]
    Config(#[from] rustls::Error),
}

/// The names the serving certificate is valid for.
const SERVING_NAMES: [&str; 7] = [
    "localhost",
    "127.0.0.1",
    "::1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// How long the certificates are valid.
const VALIDITY_YEARS: i64 = 10;

/// How long a client may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The files of a kept set, in the order they are written.
const FILES: [&str; 5] = ["ca.key", "ca.crt", "tls.key", "tls.crt", "admin.token"];

/// The cluster's CA and serving certificate, in PEM, and the administrator's bearer token an
/// HTTPS kubeconfig carries (kubectl asks for a user name and password over HTTPS when its
/// kubeconfig user has no credentials).
#[derive(Clone)]
pub struct ServingCertificates {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    ca_key_pem: String,
    admin_token: String,
}

impl std::fmt::Debug for ServingCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("ServingCertificates")
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

impl ServingCertificates {
    /// A new CA and serving certificate.
    pub fn generate() -> Result<ServingCertificates, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "tfjob-embedded-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut ca);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, &ca_key);

        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(
            SERVING_NAMES
                .iter()
                .map(|n| (*n).to_owned())
                .collect::<Vec<_>>(),
        )?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "tfjob-embedded-apiserver");
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.use_authority_key_identifier_extension = true;
        set_validity(&mut serving);
        let cert = serving.signed_by(&key, &issuer)?;
        Ok(ServingCertificates {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_key_pem: ca_key.serialize_pem(),
            admin_token: crate::auth::tokens::random_token(),
        })
    }

    /// The set kept in `dir`, or a new one written there when `dir` holds none.
    pub fn load_or_generate(dir: &Path) -> Result<ServingCertificates, TlsError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| TlsError::Io { path, source }
        };
        let present: Vec<bool> = FILES.iter().map(|f| dir.join(f).exists()).collect();
        if present.iter().all(|p| *p) {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read_to_string(&path).map_err(io(&path))
            };
            let kept = ServingCertificates {
                ca_key_pem: read("ca.key")?,
                ca_pem: read("ca.crt")?,
                key_pem: read("tls.key")?,
                cert_pem: read("tls.crt")?,
                admin_token: read("admin.token")?.trim().to_owned(),
            };
            kept.check(dir)?;
            return Ok(kept);
        }
        if let Some(missing) = FILES.iter().zip(&present).find(|(_, p)| !**p)
            && present.iter().any(|p| *p)
        {
            return Err(TlsError::Incomplete {
                dir: dir.to_owned(),
                missing: missing.0,
            });
        }
        let made = ServingCertificates::generate()?;
        private_dir(dir).map_err(io(dir))?;
        for (name, text) in FILES.iter().zip([
            &made.ca_key_pem,
            &made.ca_pem,
            &made.key_pem,
            &made.cert_pem,
            &made.admin_token,
        ]) {
            let path = dir.join(name);
            write_whole(&path, text).map_err(io(&path))?;
        }
        Ok(made)
    }

    /// Whether every kept file parses as what it should be, naming the first that does not.
    fn check(&self, dir: &Path) -> Result<(), TlsError> {
        let invalid = |name: &str, reason: String| TlsError::Invalid {
            path: dir.join(name),
            reason,
        };
        for (name, pem) in [("ca.crt", &self.ca_pem), ("tls.crt", &self.cert_pem)] {
            CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|e| invalid(name, format!("not a PEM certificate: {e}")))?;
        }
        for (name, pem) in [("ca.key", &self.ca_key_pem), ("tls.key", &self.key_pem)] {
            KeyPair::from_pem(pem).map_err(|e| invalid(name, format!("not a PEM key: {e}")))?;
        }
        if self.admin_token.len() < 32 || !self.admin_token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(
                "admin.token",
                "not a token: at least 32 printable characters".into(),
            ));
        }
        self.server_config()
            .map(drop)
            .map_err(|e| invalid("tls.crt", e.to_string()))
    }

    /// The administrator's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA certificate in PEM, as kubeconfigs and `kube-root-ca.crt` carry it.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate in DER, as a client's root store takes it.
    pub fn ca_der(&self) -> Vec<u8> {
        CertificateDer::from_pem_slice(self.ca_pem.as_bytes())
            .map(|c| c.to_vec())
            .unwrap_or_default()
    }

    /// The rustls configuration serving the certificate, offering HTTP/1.1.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let invalid = |what: &str, e: rustls::pki_types::pem::Error| TlsError::Invalid {
            path: PathBuf::from(what),
            reason: e.to_string(),
        };
        let cert = CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map_err(|e| invalid("tls.crt", e))?;
        let ca = CertificateDer::from_pem_slice(self.ca_pem.as_bytes())
            .map_err(|e| invalid("ca.crt", e))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| invalid("tls.key", e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert, ca], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`, then lets open connections end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    config: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait
                    // a little rather than spin, as axum's own loop does.
                    tracing::debug!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await else {
                return;
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(error = %e, "an HTTPS connection ended");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// Creates `dir` (and its parents) readable by its owner only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `text` to `path` whole, readable by its owner only: to a temporary file, synced,
/// then renamed into place.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Sets a certificate's validity: from yesterday (a client whose clock is a little behind still
/// accepts it) for [`VALIDITY_YEARS`], in whole days as rcgen takes dates.
fn set_validity(params: &mut CertificateParams) {
    let today = jiff::Zoned::now().date();
    let day = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(
            i32::from(d.year()),
            u8::try_from(d.month()).unwrap_or(1),
            u8::try_from(d.day()).unwrap_or(1),
        )
    };
    params.not_before = day(today.yesterday().unwrap_or(today));
    params.not_after = day(today
        .checked_add(jiff::Span::new().years(VALIDITY_YEARS))
        .unwrap_or(today));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_kept_set_is_made_once_private_and_loaded_again() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("state.pki");
        let made = ServingCertificates::load_or_generate(&pki).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&pki), 0o700);
        for name in FILES {
            assert_eq!(mode(&pki.join(name)), 0o600, "{name}");
        }
        let loaded = ServingCertificates::load_or_generate(&pki).unwrap();
        assert_eq!(loaded.ca_pem(), made.ca_pem());
        assert!(made.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!made.ca_der().is_empty());
        assert!(!format!("{made:?}").contains("PRIVATE KEY"));
        assert!(!format!("{made:?}").contains(made.admin_token()));
        assert_eq!(loaded.admin_token(), made.admin_token());
        // Another start without a kept set makes another CA.
        assert_ne!(
            ServingCertificates::generate().unwrap().ca_pem(),
            made.ca_pem()
        );
    }

    #[test]
    fn a_partial_or_damaged_set_is_an_error_naming_the_file_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        ServingCertificates::load_or_generate(&pki).unwrap();
        std::fs::remove_file(pki.join("tls.key")).unwrap();
        let e = ServingCertificates::load_or_generate(&pki).unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::Incomplete {
                    missing: "tls.key",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!pki.join("tls.key").exists(), "nothing was replaced");

        let pki = dir.path().join("damaged");
        ServingCertificates::load_or_generate(&pki).unwrap();
        std::fs::write(
            pki.join("tls.crt"),
            "-----BEGIN CERTIFICATE-----\nnot base64 ü\n",
        )
        .unwrap();
        let e = ServingCertificates::load_or_generate(&pki)
            .unwrap_err()
            .to_string();
        assert!(e.contains("damaged/tls.crt"), "{e}");
        std::fs::write(pki.join("tls.crt"), "").unwrap();
        let e = ServingCertificates::load_or_generate(&pki)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.crt"), "{e}");

        // A key that is not the certificate's.
        let pki = dir.path().join("mismatched");
        ServingCertificates::load_or_generate(&pki).unwrap();
        std::fs::copy(pki.join("ca.key"), pki.join("tls.key")).unwrap();
        let e = ServingCertificates::load_or_generate(&pki)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.crt"), "{e}");
    }
}
