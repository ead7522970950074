//! Signed policy modules: the operator can be told to load only modules signed by one of a set
//! of trusted keys, so that write access to a policy namespace is not enough to run code in
//! every pod's admission path.
//!
//! Keys are PEM files as the usual tools write them: public keys as SubjectPublicKeyInfo
//! (`-----BEGIN PUBLIC KEY-----`, what `openssl pkey -pubout` and `cosign generate-key-pair`
//! write), private keys as PKCS#8 (`-----BEGIN PRIVATE KEY-----`) or, for P-256, SEC1
//! (`-----BEGIN EC PRIVATE KEY-----`, what `openssl ecparam -genkey` writes). Two algorithms
//! are accepted, each with the signature format its common tools produce, base64-encoded:
//!
//! - **ECDSA P-256 with SHA-256** over the module: DER-encoded (`cosign sign-blob --key`,
//!   `openssl dgst -sha256 -sign`) or the raw 64 bytes `r || s`.
//! - **Ed25519** over the module itself: the 64-byte signature (`openssl pkeyutl -sign -rawin`).
//!
//! Everything here is pure and synchronous: callers read the files and pass their text, with a
//! name (the path) that errors repeat so that a bad key can be found.

use std::fmt;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::pkcs8::der::Decode as _;
use p256::pkcs8::spki::SubjectPublicKeyInfoRef;
use p256::pkcs8::{
    AssociatedOid as _, DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _,
    ObjectIdentifier, PrivateKeyInfo,
};
use sha2::{Digest as _, Sha256};

/// `id-ecPublicKey`: an elliptic-curve key whose parameters name the curve.
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const ED25519: ObjectIdentifier = ed25519_dalek::pkcs8::ALGORITHM_OID;

/// Base64 as cosign and `openssl base64` write it; padding optional, since hand-copied
/// signatures often lose it.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Names a key in messages and statuses: the first 12 hex digits of the sha256 of its DER
/// SubjectPublicKeyInfo (P-256 points uncompressed), i.e. the start of
/// `openssl pkey -pubin -in key.pub -outform DER | sha256sum`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    fn of_spki(der: &[u8]) -> KeyId {
        KeyId(hex::encode(&Sha256::digest(der)[..6]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a key file was not accepted. Every variant names the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{file}: no PEM block -----BEGIN {expected}-----")]
    NoPem {
        file: String,
        expected: &'static str,
    },
    #[error("{file}: PEM block {label}: {message}")]
    BadPem {
        file: String,
        label: String,
        message: String,
    },
    #[error("{file}: {algorithm} keys are not supported; use an ECDSA P-256 or an Ed25519 key")]
    Unsupported { file: String, algorithm: String },
    #[error("{file}: not a valid {algorithm} key: {message}")]
    Invalid {
        file: String,
        algorithm: &'static str,
        message: String,
    },
    /// A password-protected key (PKCS#8 encrypted, or cosign's own format).
    #[error("{file}: the private key is encrypted; {hint}")]
    Encrypted { file: String, hint: &'static str },
}

/// Why a signature was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("is empty")]
    Empty,
    #[error("invalid base64: {message}")]
    Base64 { message: String },
    #[error(
        "signature does not verify against any of {tried} trusted key{}",
        if *tried == 1 { "" } else { "s" }
    )]
    NoMatch { tried: usize },
    #[error("no trusted keys to verify against")]
    NoKeys,
}

/// What is known of the signature of a policy read from a ConfigMap (its module, or its CEL
/// document).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Signed {
    /// No signature.
    #[default]
    No,
    /// A signature, not checked: the reader was given no trusted keys.
    Unverified,
    /// Verified with this trusted key.
    By(KeyId),
}

impl Signed {
    /// The key that verified the signature, if one did.
    pub fn key(&self) -> Option<&KeyId> {
        match self {
            Signed::By(key) => Some(key),
            Signed::No | Signed::Unverified => None,
        }
    }
}

#[derive(Clone)]
enum PublicKey {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// One public key the operator trusts, with the file it came from.
#[derive(Clone)]
pub struct TrustedKey {
    id: KeyId,
    file: String,
    key: PublicKey,
}

impl TrustedKey {
    pub fn id(&self) -> &KeyId {
        &self.id
    }

    /// The name the key was read under (its file).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// `ECDSA P-256` or `Ed25519`.
    pub fn algorithm(&self) -> &'static str {
        match self.key {
            PublicKey::P256(_) => P256_NAME,
            PublicKey::Ed25519(_) => ED25519_NAME,
        }
    }

    fn from_spki_der(file: &str, der: &[u8]) -> Result<TrustedKey, KeyError> {
        let spki = SubjectPublicKeyInfoRef::from_der(der).map_err(|e| KeyError::BadPem {
            file: file.to_owned(),
            label: PUBLIC_LABEL.to_owned(),
            message: format!("not a SubjectPublicKeyInfo: {e}"),
        })?;
        let curve = spki.algorithm.parameters_oid().ok();
        let invalid = |algorithm: &'static str, e: &dyn fmt::Display| KeyError::Invalid {
            file: file.to_owned(),
            algorithm,
            message: e.to_string(),
        };
        // The id is taken from the crate's own encoding of the key rather than the file's, so a
        // key written with a compressed point gets the same id as the same key uncompressed.
        let (key, canonical) = match (spki.algorithm.oid, curve) {
            (EC_PUBLIC_KEY, Some(p256::NistP256::OID)) => {
                let key = p256::ecdsa::VerifyingKey::from_public_key_der(der)
                    .map_err(|e| invalid(P256_NAME, &e))?;
                let canonical = key
                    .to_public_key_der()
                    .map_err(|e| invalid(P256_NAME, &e))?;
                (PublicKey::P256(key), canonical)
            }
            (ED25519, _) => {
                let key = ed25519_dalek::VerifyingKey::from_public_key_der(der)
                    .map_err(|e| invalid(ED25519_NAME, &e))?;
                // A small-order point verifies forged signatures for some messages.
                if key.is_weak() {
                    return Err(invalid(ED25519_NAME, &"a weak (small-order) key"));
                }
                let canonical = key
                    .to_public_key_der()
                    .map_err(|e| invalid(ED25519_NAME, &e))?;
                (PublicKey::Ed25519(key), canonical)
            }
            (oid, curve) => {
                return Err(KeyError::Unsupported {
                    file: file.to_owned(),
                    algorithm: algorithm_name(oid, curve),
                });
            }
        };
        Ok(TrustedKey {
            id: KeyId::of_spki(canonical.as_bytes()),
            file: file.to_owned(),
            key,
        })
    }

    /// Whether `signature` (decoded) is this key's signature of `module`.
    fn verifies(&self, module: &[u8], signature: &[u8]) -> bool {
        match &self.key {
            PublicKey::P256(key) => {
                // DER is what cosign and openssl write; 64 bytes may also be the raw `r || s`
                // (a DER signature of that length is possible, if unlikely), so both are tried.
                let der = p256::ecdsa::Signature::from_der(signature).ok();
                let raw = (signature.len() == 64)
                    .then(|| p256::ecdsa::Signature::from_slice(signature).ok())
                    .flatten();
                der.into_iter()
                    .chain(raw)
                    .any(|sig| key.verify(module, &sig).is_ok())
            }
            PublicKey::Ed25519(key) => {
                let Ok(bytes) = <[u8; 64]>::try_from(signature) else {
                    return false;
                };
                // Strict: refuses non-canonical signatures, so one module has one valid
                // signature per key and a signature cannot be altered into another valid one.
                key.verify_strict(module, &ed25519_dalek::Signature::from_bytes(&bytes))
                    .is_ok()
            }
        }
    }
}

impl fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.algorithm(), self.id, self.file)
    }
}

/// The keys a module's signature may verify against. Empty by default: signatures are then
/// not required (nor checked).
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<TrustedKey>,
}

impl TrustedKeys {
    /// No keys: signatures are not required.
    pub fn none() -> TrustedKeys {
        TrustedKeys::default()
    }

    /// Adds every `PUBLIC KEY` block of the PEM text `pem`, read from `file`; returns how many.
    /// A key already present is not added twice. Nothing is added when any block is refused.
    pub fn add_pem(&mut self, file: &str, pem: &str) -> Result<usize, KeyError> {
        let blocks = pem_blocks(file, pem)?;
        let mut added = Vec::new();
        for (label, der) in &blocks {
            if label != PUBLIC_LABEL {
                return Err(KeyError::BadPem {
                    file: file.to_owned(),
                    label: label.clone(),
                    message: format!(
                        "expected a public key (-----BEGIN {PUBLIC_LABEL}-----{})",
                        if label.contains("PRIVATE") {
                            "; openssl pkey -in KEY -pubout writes it"
                        } else {
                            ""
                        }
                    ),
                });
            }
            added.push(TrustedKey::from_spki_der(file, der)?);
        }
        if added.is_empty() {
            return Err(KeyError::NoPem {
                file: file.to_owned(),
                expected: PUBLIC_LABEL,
            });
        }
        let count = added.len();
        for key in added {
            self.insert(key);
        }
        Ok(count)
    }

    /// Parses one PEM text into a set of its keys.
    pub fn from_pem(file: &str, pem: &str) -> Result<TrustedKeys, KeyError> {
        let mut keys = TrustedKeys::none();
        keys.add_pem(file, pem)?;
        Ok(keys)
    }

    /// Adds `key` unless a key with its id is present.
    pub fn insert(&mut self, key: TrustedKey) {
        if !self.keys.iter().any(|k| k.id == key.id) {
            self.keys.push(key);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.iter()
    }

    /// The key whose signature of `module` `signature_b64` is. Whitespace (line breaks of
    /// wrapped base64) is ignored.
    pub fn verify(&self, module: &[u8], signature_b64: &str) -> Result<KeyId, SignatureError> {
        if self.keys.is_empty() {
            return Err(SignatureError::NoKeys);
        }
        let signature = decode(signature_b64)?;
        self.keys
            .iter()
            .find(|k| k.verifies(module, &signature))
            .map(|k| k.id.clone())
            .ok_or(SignatureError::NoMatch {
                tried: self.keys.len(),
            })
    }
}

impl fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.keys).finish()
    }
}

/// The bytes of a base64 signature, whitespace ignored; checks the encoding only.
pub fn decode(text: &str) -> Result<Vec<u8>, SignatureError> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if compact.is_empty() {
        return Err(SignatureError::Empty);
    }
    BASE64
        .decode(compact.as_bytes())
        .map_err(|e| SignatureError::Base64 {
            message: e.to_string(),
        })
}

enum SecretKey {
    P256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

/// A private key that signs modules, for `policy pack --sign-key`.
pub struct SigningKey {
    key: SecretKey,
    public: TrustedKey,
}

impl SigningKey {
    /// Reads the first private key of the PEM text `pem` (read from `file`): PKCS#8 of either
    /// algorithm, or SEC1 for P-256. `EC PARAMETERS` blocks, which `openssl ecparam -genkey`
    /// writes before the key, are skipped.
    pub fn from_pem(file: &str, pem: &str) -> Result<SigningKey, KeyError> {
        let blocks = pem_blocks(file, pem)?;
        let Some((label, der)) = blocks.iter().find(|(label, _)| label != "EC PARAMETERS") else {
            return Err(KeyError::NoPem {
                file: file.to_owned(),
                expected: PRIVATE_LABEL,
            });
        };
        let invalid = |algorithm: &'static str, e: &dyn fmt::Display| KeyError::Invalid {
            file: file.to_owned(),
            algorithm,
            message: e.to_string(),
        };
        let key = match label.as_str() {
            PRIVATE_LABEL => {
                let info = PrivateKeyInfo::from_der(der).map_err(|e| KeyError::BadPem {
                    file: file.to_owned(),
                    label: label.clone(),
                    message: format!("not a PKCS#8 private key: {e}"),
                })?;
                let curve = info.algorithm.parameters_oid().ok();
                match (info.algorithm.oid, curve) {
                    (EC_PUBLIC_KEY, Some(p256::NistP256::OID)) => SecretKey::P256(
                        p256::ecdsa::SigningKey::from_pkcs8_der(der)
                            .map_err(|e| invalid(P256_NAME, &e))?,
                    ),
                    (ED25519, _) => SecretKey::Ed25519(
                        ed25519_dalek::SigningKey::from_pkcs8_der(der)
                            .map_err(|e| invalid(ED25519_NAME, &e))?,
                    ),
                    (oid, curve) => {
                        return Err(KeyError::Unsupported {
                            file: file.to_owned(),
                            algorithm: algorithm_name(oid, curve),
                        });
                    }
                }
            }
            "EC PRIVATE KEY" => {
                // SEC1 names its curve inside; p256 refuses any other curve.
                let secret = p256::SecretKey::from_sec1_der(der)
                    .map_err(|e| invalid(P256_NAME, &format!("{e} (only P-256 is supported)")))?;
                SecretKey::P256(p256::ecdsa::SigningKey::from(secret))
            }
            "ENCRYPTED PRIVATE KEY" => {
                return Err(KeyError::Encrypted {
                    file: file.to_owned(),
                    hint: "decrypt it first (openssl pkey -in KEY -out PLAIN)",
                });
            }
            label if label.contains("SIGSTORE") || label.contains("COSIGN") => {
                return Err(KeyError::Encrypted {
                    file: file.to_owned(),
                    hint: "sign with `cosign sign-blob --key KEY policy.wasm` and put its output \
                           in policy.wasm.sig",
                });
            }
            other => {
                return Err(KeyError::BadPem {
                    file: file.to_owned(),
                    label: other.to_owned(),
                    message: format!(
                        "expected a private key (-----BEGIN {PRIVATE_LABEL}----- or -----BEGIN EC \
                         PRIVATE KEY-----)"
                    ),
                });
            }
        };
        let spki = match &key {
            SecretKey::P256(k) => k.verifying_key().to_public_key_der(),
            SecretKey::Ed25519(k) => k.verifying_key().to_public_key_der(),
        }
        .map_err(|e| KeyError::Invalid {
            file: file.to_owned(),
            algorithm: "public",
            message: e.to_string(),
        })?;
        let public = TrustedKey::from_spki_der(file, spki.as_bytes())?;
        Ok(SigningKey { key, public })
    }

    /// The base64 signature of `module`: DER ECDSA over its SHA-256 for P-256 (as cosign and
    /// openssl write it), the 64-byte signature for Ed25519. Both are deterministic, so signing
    /// the same module twice gives the same text.
    pub fn sign(&self, module: &[u8]) -> String {
        match &self.key {
            SecretKey::P256(k) => {
                let signature: p256::ecdsa::Signature = k.sign(module);
                BASE64.encode(signature.to_der().as_bytes())
            }
            SecretKey::Ed25519(k) => BASE64.encode(k.sign(module).to_bytes()),
        }
    }

    /// The public half, as a trusted key (its id is the id verification reports).
    pub fn public_key(&self) -> &TrustedKey {
        &self.public
    }
}

impl fmt::Debug for SigningKey {
    /// The public half only: a private key has no business in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({:?})", self.public)
    }
}

/// Signs `module` with the private key in `private_key_pem`: see [`SigningKey::sign`].
pub fn sign(private_key_pem: &str, module: &[u8]) -> Result<String, KeyError> {
    Ok(SigningKey::from_pem("the private key", private_key_pem)?.sign(module))
}

const PUBLIC_LABEL: &str = "PUBLIC KEY";
const PRIVATE_LABEL: &str = "PRIVATE KEY";
const P256_NAME: &str = "ECDSA P-256";
const ED25519_NAME: &str = "Ed25519";

/// The name of a key algorithm for messages, so that "RSA keys are not supported" reads better
/// than an object identifier.
fn algorithm_name(oid: ObjectIdentifier, curve: Option<ObjectIdentifier>) -> String {
    let known = |oid: &ObjectIdentifier| match oid.to_string().as_str() {
        "1.2.840.113549.1.1.1" => Some("RSA"),
        "1.2.840.113549.1.1.10" => Some("RSA-PSS"),
        "1.2.840.10040.4.1" => Some("DSA"),
        "1.3.101.113" => Some("Ed448"),
        "1.3.101.110" => Some("X25519"),
        "1.3.101.111" => Some("X448"),
        "1.3.132.0.34" => Some("ECDSA P-384"),
        "1.3.132.0.35" => Some("ECDSA P-521"),
        "1.3.132.0.10" => Some("ECDSA secp256k1"),
        _ => None,
    };
    match (oid, curve) {
        (EC_PUBLIC_KEY, Some(curve)) => known(&curve)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("elliptic-curve (curve {curve})")),
        (oid, _) => known(&oid)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("algorithm {oid}")),
    }
}

/// The PEM blocks of `text` as (label, DER). Lenient where tools differ (CRLF line ends, line
/// lengths, text before and between blocks); a block with headers (legacy OpenSSL encryption)
/// or bad base64 is an error.
fn pem_blocks(file: &str, text: &str) -> Result<Vec<(String, Vec<u8>)>, KeyError> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines().map(str::trim) {
        match &mut open {
            None => {
                if let Some(label) = boundary(line, "-----BEGIN ") {
                    open = Some((label.to_owned(), String::new()));
                }
            }
            Some((label, body)) => {
                if let Some(end) = boundary(line, "-----END ") {
                    if end != label {
                        return Err(KeyError::BadPem {
                            file: file.to_owned(),
                            label: label.clone(),
                            message: format!("ends with -----END {end}-----"),
                        });
                    }
                    let der = BASE64
                        .decode(body.as_bytes())
                        .map_err(|e| KeyError::BadPem {
                            file: file.to_owned(),
                            label: label.clone(),
                            message: format!("invalid base64: {e}"),
                        })?;
                    blocks.push((std::mem::take(label), der));
                    open = None;
                } else if line.contains(':') {
                    return Err(KeyError::Encrypted {
                        file: file.to_owned(),
                        hint: "decrypt it first (openssl pkey -in KEY -out PLAIN)",
                    });
                } else {
                    body.push_str(line);
                }
            }
        }
    }
    if let Some((label, _)) = open {
        return Err(KeyError::BadPem {
            file: file.to_owned(),
            label,
            message: "no -----END line".to_owned(),
        });
    }
    Ok(blocks)
}

/// The label of a `-----BEGIN LABEL-----` (or END) line.
fn boundary<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.strip_prefix(prefix)?.strip_suffix("-----")
}

/// Keys for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod test_keys {
    use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
    use sha2::{Digest as _, Sha256};

    use super::{SigningKey, TrustedKeys};

    /// A signing key from a fixed seed, and the trusted set of its public half.
    pub(crate) fn signer(seed: &str) -> (SigningKey, TrustedKeys) {
        let secret = p256::ecdsa::SigningKey::from_slice(&Sha256::digest(seed.as_bytes())).unwrap();
        let pem = secret.to_pkcs8_pem(LineEnding::LF).unwrap();
        let key = SigningKey::from_pem(seed, &pem).unwrap();
        let mut keys = TrustedKeys::none();
        keys.insert(key.public_key().clone());
        (key, keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::pkcs8::{EncodePrivateKey as _, LineEnding};

    const MODULE: &[u8] = b"\0asm a policy module's bytes";

    /// A P-256 key made from a fixed seed: reproducible, and no random source needed.
    fn p256_key(seed: &str) -> p256::ecdsa::SigningKey {
        p256::ecdsa::SigningKey::from_slice(&Sha256::digest(seed.as_bytes())).unwrap()
    }

    fn ed25519_key(seed: &str) -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&Sha256::digest(seed.as_bytes()).into())
    }

    fn p256_public_pem(key: &p256::ecdsa::SigningKey) -> String {
        key.verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    }

    fn ed25519_public_pem(key: &ed25519_dalek::SigningKey) -> String {
        key.verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    }

    fn trusted(pems: &[&str]) -> TrustedKeys {
        let mut keys = TrustedKeys::none();
        for (i, pem) in pems.iter().enumerate() {
            keys.add_pem(&format!("key{i}.pub"), pem).unwrap();
        }
        keys
    }

    #[test]
    fn a_p256_der_signature_verifies_and_names_the_key() {
        let key = p256_key("ops");
        let keys = trusted(&[
            &ed25519_public_pem(&ed25519_key("other")),
            &p256_public_pem(&key),
        ]);
        let signature: p256::ecdsa::Signature = key.sign(MODULE);
        let b64 = BASE64.encode(signature.to_der().as_bytes());
        let id = keys.verify(MODULE, &b64).unwrap();
        assert_eq!(&id, keys.iter().nth(1).unwrap().id());
        assert_eq!(id.as_str().len(), 12);
        assert_eq!(
            id.as_str(),
            &hex::encode(Sha256::digest(
                key.verifying_key().to_public_key_der().unwrap().as_bytes()
            ))[..12]
        );
    }

    #[test]
    fn a_raw_p256_signature_verifies() {
        let key = p256_key("ops");
        let keys = trusted(&[&p256_public_pem(&key)]);
        let signature: p256::ecdsa::Signature = key.sign(MODULE);
        let raw = signature.to_bytes();
        assert_eq!(raw.len(), 64);
        assert!(keys.verify(MODULE, &BASE64.encode(raw)).is_ok());
    }

    #[test]
    fn an_ed25519_signature_verifies_wrapped_and_unpadded() {
        let key = ed25519_key("ops");
        let keys = trusted(&[&ed25519_public_pem(&key)]);
        let b64 = BASE64.encode(key.sign(MODULE).to_bytes());
        let id = keys.verify(MODULE, &b64).unwrap();
        assert_eq!(keys.iter().next().unwrap().algorithm(), "Ed25519");
        // Line breaks, surrounding blanks and missing padding are tolerated.
        let wrapped = format!("  {}\n{}\r\n", &b64[..40], b64[40..].trim_end_matches('='));
        assert_eq!(keys.verify(MODULE, &wrapped).unwrap(), id);
    }

    #[test]
    fn sign_produces_what_verify_accepts_for_every_key_format() {
        let p256 = p256_key("pack");
        let ed = ed25519_key("pack");
        let sec1 = p256::SecretKey::from_slice(&Sha256::digest(b"pack"))
            .unwrap()
            .to_sec1_pem(LineEnding::LF)
            .unwrap();
        // What `openssl ecparam -genkey` writes: the curve's parameters, then the key.
        let sec1_with_params = format!(
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{}",
            *sec1
        );
        for (private, public) in [
            (
                p256.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
                p256_public_pem(&p256),
            ),
            (sec1.to_string(), p256_public_pem(&p256)),
            (sec1_with_params, p256_public_pem(&p256)),
            (
                ed.to_pkcs8_pem(LineEnding::CRLF).unwrap().to_string(),
                ed25519_public_pem(&ed),
            ),
        ] {
            let signer = SigningKey::from_pem("key.pem", &private).unwrap();
            let keys = trusted(&[&public]);
            let signature = sign(&private, MODULE).unwrap();
            assert_eq!(signature, signer.sign(MODULE), "deterministic");
            assert_eq!(
                &keys.verify(MODULE, &signature).unwrap(),
                signer.public_key().id()
            );
        }
    }

    #[test]
    fn a_tampered_module_or_an_unknown_key_does_not_verify() {
        let key = p256_key("ops");
        let ed = ed25519_key("ops");
        let keys = trusted(&[&p256_public_pem(&key), &ed25519_public_pem(&ed)]);
        let p256_sig: p256::ecdsa::Signature = key.sign(MODULE);
        let p256_sig = BASE64.encode(p256_sig.to_der().as_bytes());
        let ed_sig = BASE64.encode(ed.sign(MODULE).to_bytes());
        let mut tampered = MODULE.to_vec();
        tampered[5] ^= 1;
        for sig in [&p256_sig, &ed_sig] {
            let err = keys.verify(&tampered, sig).unwrap_err();
            assert_eq!(err, SignatureError::NoMatch { tried: 2 });
            assert_eq!(
                err.to_string(),
                "signature does not verify against any of 2 trusted keys"
            );
        }
        let stranger: p256::ecdsa::Signature = p256_key("stranger").sign(MODULE);
        let stranger = BASE64.encode(stranger.to_der().as_bytes());
        assert_eq!(
            keys.verify(MODULE, &stranger),
            Err(SignatureError::NoMatch { tried: 2 })
        );
        let only_one = trusted(&[&p256_public_pem(&key)]);
        assert_eq!(
            only_one.verify(MODULE, &ed_sig).unwrap_err().to_string(),
            "signature does not verify against any of 1 trusted key"
        );
        // A signature of some other length than the formats above verifies nothing.
        assert!(keys.verify(MODULE, &BASE64.encode([7u8; 40])).is_err());
    }

    #[test]
    fn bad_base64_an_empty_signature_and_no_keys_are_errors() {
        let keys = trusted(&[&p256_public_pem(&p256_key("ops"))]);
        let err = keys.verify(MODULE, "not*base64!").unwrap_err();
        assert!(matches!(err, SignatureError::Base64 { .. }), "{err}");
        assert!(err.to_string().starts_with("invalid base64: "), "{err}");
        assert_eq!(keys.verify(MODULE, " \n"), Err(SignatureError::Empty));
        assert_eq!(
            TrustedKeys::none().verify(MODULE, "AAAA"),
            Err(SignatureError::NoKeys)
        );
    }

    #[test]
    fn unsupported_or_broken_keys_are_refused_naming_the_file() {
        // An RSA public key as far as its algorithm goes (rsaEncryption, NULL parameters),
        // with a stand-in key: refusing it must not depend on parsing RSA.
        let mut spki = vec![0x30, 0x16, 0x30, 0x0d, 0x06, 0x09];
        spki.extend([
            0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
        ]);
        spki.extend([0x03, 0x05, 0x00, 0x01, 0x02, 0x03, 0x04]);
        let rsa = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            BASE64.encode(&spki)
        );
        let err = TrustedKeys::from_pem("rsa.pub", &rsa).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rsa.pub: RSA keys are not supported; use an ECDSA P-256 or an Ed25519 key"
        );

        let garbage = "-----BEGIN PUBLIC KEY-----\nAAECAwQF\n-----END PUBLIC KEY-----\n";
        let err = TrustedKeys::from_pem("garbage.pub", garbage).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("garbage.pub: PEM block PUBLIC KEY: not a SubjectPublicKeyInfo"),
            "{err}"
        );

        let err = TrustedKeys::from_pem("notes.txt", "just some text\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "notes.txt: no PEM block -----BEGIN PUBLIC KEY-----"
        );

        let private = p256_key("ops").to_pkcs8_pem(LineEnding::LF).unwrap();
        let err = TrustedKeys::from_pem("ops.pem", &private).unwrap_err();
        assert!(
            err.to_string().contains("openssl pkey -in KEY -pubout"),
            "{err}"
        );

        let err = TrustedKeys::from_pem(
            "cut.pub",
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("no -----END line"), "{err}");

        let err = SigningKey::from_pem("rsa.pub", &rsa).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("rsa.pub: PEM block PUBLIC KEY: expected a private key"),
            "{err}"
        );
        let err = SigningKey::from_pem(
            "cosign.key",
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("cosign sign-blob"), "{err}");
    }

    #[test]
    fn a_key_file_may_hold_several_keys_and_duplicates_count_once() {
        let a = p256_public_pem(&p256_key("a"));
        let b = ed25519_public_pem(&ed25519_key("b"));
        let mut keys = TrustedKeys::none();
        assert_eq!(
            keys.add_pem("ring.pub", &format!("# ops keys\n{a}\n{b}"))
                .unwrap(),
            2
        );
        keys.add_pem("a.pub", &a).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(
            format!("{keys:?}").matches("ring.pub").count(),
            2,
            "{keys:?}"
        );
    }

    /// The same key pair through the `openssl` command line: openssl's keys and signatures
    /// verify here, and this module's signatures verify with openssl.
    #[test]
    fn openssl_keys_and_signatures_interoperate() {
        use std::process::Command;
        let available = Command::new("openssl")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !available {
            println!("skipped: no openssl on PATH");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        let openssl = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("openssl").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let os = |s: &str| std::ffi::OsString::from(s);
        std::fs::write(path("policy.wasm"), MODULE).unwrap();

        // P-256, as `openssl ecparam` writes it (EC PARAMETERS + SEC1), signed with dgst.
        openssl(&[
            &os("ecparam"),
            &os("-name"),
            &os("prime256v1"),
            &os("-genkey"),
            &os("-out"),
            path("p256.pem").as_os_str(),
        ]);
        // Ed25519, PKCS#8, signed with pkeyutl -rawin.
        openssl(&[
            &os("genpkey"),
            &os("-algorithm"),
            &os("ed25519"),
            &os("-out"),
            path("ed.pem").as_os_str(),
        ]);
        let mut keys = TrustedKeys::none();
        for name in ["p256", "ed"] {
            let public = openssl(&[
                &os("pkey"),
                &os("-in"),
                path(&format!("{name}.pem")).as_os_str(),
                &os("-pubout"),
            ]);
            keys.add_pem(name, &String::from_utf8(public).unwrap())
                .unwrap();
        }
        let p256_id = keys.iter().next().unwrap().id().clone();
        let ed_id = keys.iter().nth(1).unwrap().id().clone();
        // ECDSA signatures are randomised by openssl: a few, so that both halves of the S
        // range are likely covered.
        for _ in 0..8 {
            let der = openssl(&[
                &os("dgst"),
                &os("-sha256"),
                &os("-sign"),
                path("p256.pem").as_os_str(),
                path("policy.wasm").as_os_str(),
            ]);
            assert_eq!(keys.verify(MODULE, &BASE64.encode(&der)).unwrap(), p256_id);
        }
        let raw = openssl(&[
            &os("pkeyutl"),
            &os("-sign"),
            &os("-rawin"),
            &os("-inkey"),
            path("ed.pem").as_os_str(),
            &os("-in"),
            path("policy.wasm").as_os_str(),
        ]);
        assert_eq!(keys.verify(MODULE, &BASE64.encode(&raw)).unwrap(), ed_id);

        // The key id is the start of the sha256 of the DER public key.
        let der = openssl(&[
            &os("pkey"),
            &os("-in"),
            path("p256.pem").as_os_str(),
            &os("-pubout"),
            &os("-outform"),
            &os("DER"),
        ]);
        assert_eq!(p256_id.as_str(), &hex::encode(Sha256::digest(&der))[..12]);

        // The other way: our P-256 signature of the module, checked by openssl.
        let signer = SigningKey::from_pem(
            "p256.pem",
            &std::fs::read_to_string(path("p256.pem")).unwrap(),
        )
        .unwrap();
        assert_eq!(signer.public_key().id(), &p256_id);
        let ours = BASE64.decode(signer.sign(MODULE)).unwrap();
        std::fs::write(path("ours.sig"), ours).unwrap();
        std::fs::write(
            path("p256.pub"),
            openssl(&[
                &os("pkey"),
                &os("-in"),
                path("p256.pem").as_os_str(),
                &os("-pubout"),
            ]),
        )
        .unwrap();
        let verdict = openssl(&[
            &os("dgst"),
            &os("-sha256"),
            &os("-verify"),
            path("p256.pub").as_os_str(),
            &os("-signature"),
            path("ours.sig").as_os_str(),
            path("policy.wasm").as_os_str(),
        ]);
        assert_eq!(String::from_utf8_lossy(&verdict).trim(), "Verified OK");
    }
}
