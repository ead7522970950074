//! The control plane's certificates and keys, made fresh for each one (ECDSA P-256, rcgen): a
//! CA; the API server's serving certificate for loopback and the in-cluster names; a client
//! certificate per user (the administrator in `system:masters`, the controller-manager and the
//! scheduler as the users Kubernetes' bootstrap RBAC names, kwok as a node agent); and the
//! service-account signing key pair. Files are written readable by their owner only.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::Error;

/// Names the serving certificate is valid for.
const SERVING_NAMES: [&str; 6] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "127.0.0.1",
];

/// A client identity: its certificate and key files.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file the components are started with.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
    pub admin: ClientCert,
    pub controller_manager: ClientCert,
    pub scheduler: ClientCert,
    pub kwok: ClientCert,
}

impl Pki {
    /// Makes every certificate and key in `dir`.
    pub fn make(dir: &Path) -> Result<Self, Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tfjob-test-control-plane-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut ca_params);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_pem = ca_cert.pem();
        let issuer = Issuer::new(ca_params, ca_key);

        let write = |name: &str, text: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            write_private(&path, text)?;
            Ok(path)
        };

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::default();
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        for name in SERVING_NAMES {
            serving.subject_alt_names.push(match name.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(name.try_into()?),
            });
        }
        // The first address of the service range: in-cluster clients reach `kubernetes` there.
        serving
            .subject_alt_names
            .push(SanType::IpAddress([10, 0, 0, 1].into()));
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        set_validity(&mut serving);
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;

        let client = |name: &str, common: &str, group: Option<&str>| -> Result<ClientCert, Error> {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::default();
            params.distinguished_name.push(DnType::CommonName, common);
            if let Some(group) = group {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, group);
            }
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            set_validity(&mut params);
            let cert = params.signed_by(&key, &issuer)?;
            Ok(ClientCert {
                cert: write(&format!("{name}.crt"), &cert.pem())?,
                key: write(&format!("{name}.key"), &key.serialize_pem())?,
            })
        };

        let service_account = KeyPair::generate()?;
        Ok(Pki {
            ca_cert: write("ca.crt", &ca_pem)?,
            serving_cert: write("apiserver.crt", &serving_cert.pem())?,
            serving_key: write("apiserver.key", &serving_key.serialize_pem())?,
            service_account_key: write("service-account.key", &service_account.serialize_pem())?,
            service_account_pub: write("service-account.pub", &service_account.public_key_pem())?,
            admin: client("admin", "tfjob-test-admin", Some("system:masters"))?,
            controller_manager: client(
                "controller-manager",
                "system:kube-controller-manager",
                None,
            )?,
            scheduler: client("scheduler", "system:kube-scheduler", None)?,
            // kwok writes the status of every node and pod it simulates, as a node agent of
            // many nodes would; the Node authorizer knows it as none of them.
            kwok: client("kwok", "tfjob-test-kwok", Some("system:masters"))?,
        })
    }
}

/// Writes `text` to `path`, readable by its owner only.
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

/// Valid from yesterday (a clock a little behind still accepts it) for a year.
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
        .checked_add(jiff::Span::new().years(1))
        .unwrap_or(today));
}
