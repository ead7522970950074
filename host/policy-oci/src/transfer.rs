//! Pushing a module (and its signature) and pulling one back, verified: the steps of each,
//! over the bounded [`RegistryClient`].
//!
//! A pull checks, in order: the manifest's digest against a pinned reference, the manifest's
//! layout and layer size (before the layer is fetched), then, when the operator trusts keys,
//! the cosign signature of that manifest digest (before the layer is fetched), and last the
//! layer's size and digest as it arrives. Each refusal names the reference and the step.

use tfjob_policy_engine::signature::{KeyId, SigningKey, TrustedKeys};

use crate::artifact::{
    self, Artifact, ArtifactError, MANIFEST_MEDIA_TYPE, check_payload, signature_layers,
    signature_tag, signing_payload,
};
use crate::client::{RegistryClient, RegistryError};
use crate::credentials::Credentials;
use crate::reference::ModuleRef;

/// Signature manifests list at most this many signatures tried in turn; more are ignored.
pub const MAX_SIGNATURES_TRIED: usize = 16;

/// A cosign signature: the simple-signing payload and its base64 signature.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Signature {
    #[serde(with = "base64_bytes")]
    pub payload: Vec<u8>,
    pub signature: String,
}

/// A module as pulled and verified.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference pinned to the manifest digest.
    pub pinned: ModuleRef,
    /// The manifest's digest.
    pub digest: String,
    pub manifest: Vec<u8>,
    pub module: Vec<u8>,
    /// The signature that verified, when keys were trusted.
    pub signature: Option<Signature>,
    pub signed_by: Option<KeyId>,
}

/// Why a pull was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{reference}: {error}")]
    Artifact {
        reference: String,
        error: ArtifactError,
    },
    #[error(
        "{reference} is not signed: no signature at tag {tag} (sign it with policy push \
         --sign-key or cosign sign --key); the operator loads signed modules only"
    )]
    Unsigned { reference: String, tag: String },
    #[error("{reference}: {message}")]
    Signature { reference: String, message: String },
}

impl PullError {
    /// The refusal's kind, as a metric label and status reason.
    pub fn step(&self) -> &'static str {
        match self {
            PullError::Registry(e) => e.step(),
            PullError::Artifact { error, .. } => match error {
                ArtifactError::TooLarge { .. } => "size",
                _ => "artifact",
            },
            PullError::Unsigned { .. } | PullError::Signature { .. } => "signature",
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, PullError::Registry(e) if e.is_transient())
    }
}

/// Pulls the module `r` names, verified as the module docs describe; with `keys` not empty
/// only a module with a cosign signature by one of them is returned.
pub async fn pull(
    client: &RegistryClient,
    r: &ModuleRef,
    creds: &Credentials,
    keys: &TrustedKeys,
) -> Result<Pulled, PullError> {
    let (manifest, digest) = client.manifest(r, creds, r.reference()).await?;
    if let Some(pinned) = &r.digest
        && *pinned != digest
    {
        return Err(RegistryError::Digest {
            what: format!("manifest {r}"),
            expected: pinned.clone(),
            actual: digest,
        }
        .into());
    }
    let pinned = r.at_digest(&digest);
    let layer =
        artifact::module_layer(&manifest, client.limits().max_module_bytes).map_err(|error| {
            PullError::Artifact {
                reference: pinned.to_string(),
                error,
            }
        })?;
    let (signature, signed_by) = if keys.is_empty() {
        (None, None)
    } else {
        let (signature, key) = find_signature(client, &pinned, creds, keys).await?;
        (Some(signature), Some(key))
    };
    let module = client
        .blob(r, creds, &layer, client.limits().max_module_bytes)
        .await?;
    Ok(Pulled {
        pinned,
        digest,
        manifest,
        module,
        signature,
        signed_by,
    })
}

/// The first signature of `pinned`'s manifest that one of `keys` verifies.
async fn find_signature(
    client: &RegistryClient,
    pinned: &ModuleRef,
    creds: &Credentials,
    keys: &TrustedKeys,
) -> Result<(Signature, KeyId), PullError> {
    let digest = pinned.digest.as_deref().expect("a pinned reference");
    let tag = signature_tag(digest);
    let manifest = match client.manifest(pinned, creds, &tag).await {
        Ok((manifest, _)) => manifest,
        Err(RegistryError::NotFound { .. }) => {
            return Err(PullError::Unsigned {
                reference: pinned.to_string(),
                tag,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let layers = signature_layers(&manifest).map_err(|error| PullError::Artifact {
        reference: format!("{}:{tag}", pinned.name()),
        error,
    })?;
    let mut problems = Vec::new();
    for layer in layers.iter().take(MAX_SIGNATURES_TRIED) {
        let payload = client.small_blob(pinned, creds, &layer.payload).await?;
        let signature = Signature {
            payload,
            signature: layer.signature.clone(),
        };
        match verify(&signature, digest, keys) {
            Ok(key) => return Ok((signature, key)),
            Err(problem) => problems.push(problem),
        }
    }
    Err(PullError::Signature {
        reference: pinned.to_string(),
        message: format!(
            "none of the {} signatures at tag {tag} verifies with the trusted keys ({})",
            layers.len().min(MAX_SIGNATURES_TRIED),
            problems.join("; ")
        ),
    })
}

/// The trusted key that signed `signature`, a cosign signature of the manifest `digest`.
pub fn verify(signature: &Signature, digest: &str, keys: &TrustedKeys) -> Result<KeyId, String> {
    let key = keys
        .verify(&signature.payload, &signature.signature)
        .map_err(|e| e.to_string())?;
    check_payload(&signature.payload, digest).map_err(|e| e.to_string())?;
    Ok(key)
}

/// What a push stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The reference pinned to the manifest digest (`HOST/REPO:TAG@sha256:...`).
    pub reference: ModuleRef,
    /// The signature's tag, when signed.
    pub signature_tag: Option<String>,
}

/// Pushes `module` as a Wasm artifact under `r`'s tag and, with `sign`, its cosign signature.
pub async fn push(
    client: &RegistryClient,
    r: &ModuleRef,
    creds: &Credentials,
    module: &[u8],
    sign: Option<&SigningKey>,
) -> Result<Pushed, RegistryError> {
    let tag = r.tag.as_deref().expect("push needs a tag");
    let artifact = Artifact::module(module, jiff::Timestamp::now());
    upload(client, r, creds, &artifact, tag).await?;
    let signature_tag = match sign {
        None => None,
        Some(key) => {
            let payload = signing_payload(&r.name(), &artifact.digest);
            let signature = Artifact::signature(&payload, &key.sign(&payload));
            let tag = signature_tag(&artifact.digest);
            upload(client, r, creds, &signature, &tag).await?;
            Some(tag)
        }
    };
    Ok(Pushed {
        reference: ModuleRef {
            digest: Some(artifact.digest),
            ..r.clone()
        },
        signature_tag,
    })
}

async fn upload(
    client: &RegistryClient,
    r: &ModuleRef,
    creds: &Credentials,
    artifact: &Artifact,
    tag: &str,
) -> Result<(), RegistryError> {
    for blob in &artifact.blobs {
        client
            .upload_blob(r, creds, &blob.digest, &blob.bytes)
            .await?;
    }
    client
        .put_manifest(r, creds, tag, MANIFEST_MEDIA_TYPE, &artifact.manifest)
        .await?;
    Ok(())
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}
