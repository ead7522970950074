//! The two layouts a policy takes in a registry, built and checked without IO.
//!
//! - **The module**: the CNCF Wasm OCI artifact. An OCI image manifest whose config has the
//!   media type `application/vnd.wasm.config.v0+json` (architecture `wasm`, os `wasip2`, the
//!   layer digests) and whose one layer is the component, `application/wasm`. Tools that know
//!   the layout (`wkg`, `oras`, `skopeo inspect`) read what `policy push` writes, and the
//!   operator loads what they push.
//! - **Its signature**: cosign's layout. The tag `sha256-<hex>.sig` in the same repository
//!   holds a manifest whose layers are simple-signing payloads
//!   (`application/vnd.dev.cosign.simplesigning.v1+json`) naming the module manifest's digest,
//!   each with its base64 signature in the annotation `dev.cosignproject.cosign/signature`:
//!   what `cosign sign --key` writes and `cosign verify --key` reads.
//!
//! A manifest is checked before anything it points to is fetched: media types, one layer, its
//! size against the operator's limit, well-formed digests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::reference::check_digest;

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_LIST_MEDIA_TYPE: &str =
    "application/vnd.docker.distribution.manifest.list.v2+json";
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const OCI_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `type` cosign writes in a simple-signing payload.
pub const COSIGN_SIGNATURE_TYPE: &str = "cosign container image signature";

/// The `Accept` header of a manifest request: every manifest kind, so that a wrong one gets a
/// clear refusal rather than a 404 from content negotiation.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What a manifest says about one blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_owned(),
            digest: digest_of(bytes),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

/// A blob to upload, with its digest.
#[derive(Clone, Debug)]
pub struct Blob {
    pub media_type: &'static str,
    pub digest: String,
    pub bytes: Vec<u8>,
}

impl Blob {
    fn new(media_type: &'static str, bytes: Vec<u8>) -> Blob {
        Blob {
            media_type,
            digest: digest_of(&bytes),
            bytes,
        }
    }

    fn descriptor(&self) -> Descriptor {
        Descriptor::of(self.media_type, &self.bytes)
    }
}

/// An artifact ready to push: its blobs, then its manifest.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub blobs: Vec<Blob>,
    pub manifest: Vec<u8>,
    /// The manifest's digest: what a pinned reference names.
    pub digest: String,
}

impl Artifact {
    /// A manifest of `config` and the one layer `layer`, whose descriptor carries `annotations`.
    fn new(config: Blob, layer: Blob, annotations: BTreeMap<String, String>) -> Artifact {
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            config: Some(config.descriptor()),
            layers: vec![Descriptor {
                annotations,
                ..layer.descriptor()
            }],
            annotations: BTreeMap::new(),
        };
        let manifest = serde_json::to_vec(&manifest).expect("a manifest serialises");
        Artifact {
            digest: digest_of(&manifest),
            blobs: vec![config, layer],
            manifest,
        }
    }

    /// The Wasm OCI artifact of `module`, created at `created` (RFC 3339 in its config).
    pub fn module(module: &[u8], created: jiff::Timestamp) -> Artifact {
        let layer = Blob::new(WASM_LAYER_MEDIA_TYPE, module.to_vec());
        let config = serde_json::json!({
            "created": created.to_string(),
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer.digest],
        });
        let config = Blob::new(
            WASM_CONFIG_MEDIA_TYPE,
            serde_json::to_vec(&config).expect("a config serialises"),
        );
        Artifact::new(config, layer, BTreeMap::new())
    }

    /// The cosign signature artifact: one simple-signing `payload` with its base64 signature.
    pub fn signature(payload: &[u8], signature_b64: &str) -> Artifact {
        let layer = Blob::new(SIMPLE_SIGNING_MEDIA_TYPE, payload.to_vec());
        // The image config cosign writes: empty platform, the payload as the one layer.
        let config = serde_json::json!({
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
        });
        let config = Blob::new(
            OCI_CONFIG_MEDIA_TYPE,
            serde_json::to_vec(&config).expect("a config serialises"),
        );
        let annotations =
            BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), signature_b64.to_owned())]);
        Artifact::new(config, layer, annotations)
    }
}

/// Why a manifest or a signature payload is not what a policy needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    #[error("the manifest is not valid JSON: {0}")]
    Json(String),
    #[error(
        "the manifest is an image index ({0}); push the module as a single Wasm artifact \
         (policy push)"
    )]
    Index(String),
    #[error("the manifest has media type {0:?}; expected {MANIFEST_MEDIA_TYPE}")]
    MediaType(String),
    #[error("the manifest has schemaVersion {0}; expected 2")]
    SchemaVersion(u32),
    #[error(
        "the config has media type {0:?}; a policy module is a Wasm artifact \
         ({WASM_CONFIG_MEDIA_TYPE})"
    )]
    ConfigMediaType(String),
    #[error("the manifest has {0} layers; a policy module is one {WASM_LAYER_MEDIA_TYPE} layer")]
    LayerCount(usize),
    #[error("the layer has media type {0:?}; expected {WASM_LAYER_MEDIA_TYPE}")]
    LayerMediaType(String),
    #[error("the layer is {size} bytes; the largest module accepted is {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("the manifest names digest {digest:?}: {problem}")]
    BadDigest { digest: String, problem: String },
    #[error("the signature manifest has no {SIMPLE_SIGNING_MEDIA_TYPE} layer with a signature")]
    NoSignatureLayer,
    #[error("the signature payload {0}")]
    Payload(String),
}

/// Checks a module manifest and returns its layer, which is then fetched with at most
/// `max_module` bytes.
pub fn module_layer(manifest: &[u8], max_module: u64) -> Result<Descriptor, ArtifactError> {
    let parsed = parse(manifest)?;
    let config = parsed
        .config
        .ok_or_else(|| ArtifactError::ConfigMediaType(String::new()))?;
    if config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(ArtifactError::ConfigMediaType(config.media_type));
    }
    let [layer] = <[Descriptor; 1]>::try_from(parsed.layers)
        .map_err(|layers| ArtifactError::LayerCount(layers.len()))?;
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(ArtifactError::LayerMediaType(layer.media_type));
    }
    if layer.size > max_module {
        return Err(ArtifactError::TooLarge {
            size: layer.size,
            limit: max_module,
        });
    }
    checked_digest(&layer.digest)?;
    Ok(layer)
}

/// A signature layer of a cosign signature manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureLayer {
    /// Where the payload is.
    pub payload: Descriptor,
    /// The base64 signature of the payload.
    pub signature: String,
}

/// The simple-signing layers of a cosign signature manifest, each with its signature.
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, ArtifactError> {
    let parsed = parse(manifest)?;
    let layers: Vec<SignatureLayer> = parsed
        .layers
        .into_iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE && checked_digest(&l.digest).is_ok())
        .filter_map(|l| {
            let signature = l.annotations.get(SIGNATURE_ANNOTATION)?.clone();
            Some(SignatureLayer {
                payload: l,
                signature,
            })
        })
        .collect();
    if layers.is_empty() {
        return Err(ArtifactError::NoSignatureLayer);
    }
    Ok(layers)
}

/// The tag cosign keeps the signatures of `manifest_digest` under: `sha256-<hex>.sig`.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// The simple-signing payload cosign signs for the manifest `digest` of `name`
/// (`HOST[:PORT]/REPO`).
pub fn signing_payload(name: &str, digest: &str) -> Vec<u8> {
    let payload = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": name},
            "image": {"docker-manifest-digest": digest},
            "type": COSIGN_SIGNATURE_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&payload).expect("a payload serialises")
}

/// Checks that a (verified) payload is a cosign signature of the manifest `digest`. As cosign
/// does, the digest binds the signature; the docker reference is not compared, so a module
/// copied to a mirror keeps its signature.
pub fn check_payload(payload: &[u8], digest: &str) -> Result<(), ArtifactError> {
    #[derive(Deserialize)]
    struct Payload {
        critical: Critical,
    }
    #[derive(Deserialize)]
    struct Critical {
        image: Image,
        #[serde(rename = "type")]
        type_: String,
    }
    #[derive(Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let parsed: Payload = serde_json::from_slice(payload)
        .map_err(|e| ArtifactError::Payload(format!("is not a simple-signing payload: {e}")))?;
    if parsed.critical.type_ != COSIGN_SIGNATURE_TYPE {
        return Err(ArtifactError::Payload(format!(
            "has type {:?}; expected {COSIGN_SIGNATURE_TYPE:?}",
            tfjob_policy_logic::text::prefix(&parsed.critical.type_, 80)
        )));
    }
    if parsed.critical.image.digest != digest {
        return Err(ArtifactError::Payload(format!(
            "signs {:?}, not this manifest ({digest})",
            tfjob_policy_logic::text::prefix(&parsed.critical.image.digest, 80)
        )));
    }
    Ok(())
}

fn parse(manifest: &[u8]) -> Result<Manifest, ArtifactError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kind {
        #[serde(default)]
        media_type: Option<String>,
    }
    let kind: Kind =
        serde_json::from_slice(manifest).map_err(|e| ArtifactError::Json(e.to_string()))?;
    match kind.media_type.as_deref() {
        Some(t @ (INDEX_MEDIA_TYPE | DOCKER_LIST_MEDIA_TYPE)) => {
            return Err(ArtifactError::Index(t.to_owned()));
        }
        None | Some(MANIFEST_MEDIA_TYPE | DOCKER_MANIFEST_MEDIA_TYPE) => {}
        Some(other) => {
            return Err(ArtifactError::MediaType(
                tfjob_policy_logic::text::prefix(other, 120).to_owned(),
            ));
        }
    }
    let parsed: Manifest =
        serde_json::from_slice(manifest).map_err(|e| ArtifactError::Json(e.to_string()))?;
    if parsed.schema_version != 2 {
        return Err(ArtifactError::SchemaVersion(parsed.schema_version));
    }
    Ok(parsed)
}

fn checked_digest(digest: &str) -> Result<(), ArtifactError> {
    check_digest(digest).map_err(|problem| ArtifactError::BadDigest {
        digest: tfjob_policy_logic::text::prefix(digest, 80).to_owned(),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_artifact_reads_back_as_its_one_layer() {
        let artifact = Artifact::module(b"\0asm-component", jiff::Timestamp::UNIX_EPOCH);
        let layer = module_layer(&artifact.manifest, 1 << 20).unwrap();
        assert_eq!(layer.digest, digest_of(b"\0asm-component"));
        assert_eq!(layer.size, 14);
        assert_eq!(artifact.digest, digest_of(&artifact.manifest));
        assert_eq!(artifact.blobs.len(), 2);
        let config: serde_json::Value = serde_json::from_slice(&artifact.blobs[0].bytes).unwrap();
        assert_eq!(config["architecture"], "wasm");
        assert_eq!(config["layerDigests"][0], layer.digest.as_str());
    }

    #[test]
    fn manifests_that_are_not_one_wasm_layer_are_refused_by_name() {
        use serde_json::json;
        let good = Artifact::module(b"m", jiff::Timestamp::UNIX_EPOCH);
        let mut value: serde_json::Value = serde_json::from_slice(&good.manifest).unwrap();
        // (field, new value, what the refusal says)
        let cases = [
            (
                "/layers/0/mediaType",
                json!("application/vnd.oci.image.layer.v1.tar+gzip"),
                "the layer has media type",
            ),
            (
                "/config/mediaType",
                json!(OCI_CONFIG_MEDIA_TYPE),
                "the config has media type",
            ),
            ("/layers", json!([]), "0 layers"),
            ("/layers/0/size", json!(u64::MAX), "largest module accepted"),
            (
                "/layers/0/digest",
                json!("sha256:../../etc"),
                "names digest",
            ),
            ("/mediaType", json!(INDEX_MEDIA_TYPE), "image index"),
            ("/schemaVersion", json!(1), "schemaVersion 1"),
        ];
        for (field, new, expected) in cases {
            let mut bad = value.clone();
            *bad.pointer_mut(field).unwrap() = new;
            let e = module_layer(&serde_json::to_vec(&bad).unwrap(), 1 << 20).unwrap_err();
            assert!(e.to_string().contains(expected), "{expected}: {e}");
        }
        value["layers"][0]["size"] = 2_000_000.into();
        let e = module_layer(&serde_json::to_vec(&value).unwrap(), 1 << 20).unwrap_err();
        assert_eq!(
            e,
            ArtifactError::TooLarge {
                size: 2_000_000,
                limit: 1 << 20
            }
        );
        assert!(matches!(
            module_layer(b"\xff\xfe", 10),
            Err(ArtifactError::Json(_))
        ));
    }

    #[test]
    fn a_signature_artifact_follows_cosigns_layout() {
        let digest = digest_of(b"manifest");
        assert_eq!(
            signature_tag(&digest),
            format!("sha256-{}.sig", &digest[7..])
        );
        let payload = signing_payload("localhost:5000/team/p", &digest);
        check_payload(&payload, &digest).unwrap();
        let other = digest_of(b"other");
        assert!(
            check_payload(&payload, &other)
                .unwrap_err()
                .to_string()
                .contains("not this manifest")
        );
        let artifact = Artifact::signature(&payload, "c2ln");
        let layers = signature_layers(&artifact.manifest).unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].signature, "c2ln");
        assert_eq!(layers[0].payload.digest, digest_of(&payload));
        let module = Artifact::module(b"m", jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(
            signature_layers(&module.manifest),
            Err(ArtifactError::NoSignatureLayer)
        );
        let wrong_type = br#"{"critical":{"identity":{},"image":{"docker-manifest-digest":"x"},"type":"other"}}"#;
        assert!(
            check_payload(wrong_type, "x")
                .unwrap_err()
                .to_string()
                .contains("has type")
        );
    }
}
