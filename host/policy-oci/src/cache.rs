//! Pulled modules on disk, so that a restart loads a digest-pinned policy without its registry.
//!
//! Content-addressed: `<dir>/artifacts/sha256/<manifest hex>/` holds `manifest.json`,
//! `module.wasm` and, for a signed module, `signature.json`. Nothing read back is taken on
//! trust: the manifest must hash to its directory's name, the module to the manifest's layer
//! digest, and a signature is verified against the keys trusted now (which may differ from
//! those trusted when it was stored). An entry that fails a check is reported and removed, and
//! the module is pulled again. Entries are written to a temporary directory and renamed into
//! place, so a crash leaves either the whole entry or none.
//!
//! The directory must be the operator's own ([`private_dir`] creates it with mode 0700 and
//! refuses one that others can write), since compiled code is read from beside it.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use tfjob_policy_engine::compiled_cache::private_dir;
use tfjob_policy_engine::signature::TrustedKeys;

use crate::artifact::{digest_of, module_layer};
use crate::reference::{ModuleRef, check_digest};
use crate::transfer::{Pulled, Signature, verify};

/// Why the cache directory cannot be used, or an entry not read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("--policy-cache-dir {path}: {message}")]
    Directory { path: String, message: String },
    #[error("cached module {digest}: {message}")]
    Entry { digest: String, message: String },
}

/// The pulled-module cache under a private directory.
#[derive(Clone, Debug)]
pub struct ArtifactCache {
    root: PathBuf,
    /// `<dir>/tags`: the digest each tag named when last resolved.
    tags: PathBuf,
}

impl ArtifactCache {
    /// Opens (creating) `<dir>/artifacts/sha256` after checking that `dir` is the operator's own
    /// ([`private_dir`]).
    pub fn open(dir: &Path) -> Result<ArtifactCache, CacheError> {
        private_dir(dir).map_err(|e| CacheError::Directory {
            path: e.path,
            message: e.message,
        })?;
        let root = dir.join("artifacts").join("sha256");
        let tags = dir.join("tags");
        for sub in [&root, &tags] {
            fs::create_dir_all(sub).map_err(|e| CacheError::Directory {
                path: dir.display().to_string(),
                message: format!("cannot create {}: {e}", sub.display()),
            })?;
        }
        Ok(ArtifactCache { root, tags })
    }

    fn tag_file(&self, tagged: &ModuleRef) -> PathBuf {
        let name = format!(
            "{}/{}:{}",
            tagged.registry,
            tagged.repository,
            tagged.tag.as_deref().unwrap_or("")
        );
        self.tags
            .join(&digest_of(name.as_bytes())["sha256:".len()..])
    }

    /// Records that `tagged`'s tag named `digest` when it was last resolved, so a restart
    /// while the registry is away serves what it served before.
    pub fn remember_tag(&self, tagged: &ModuleRef, digest: &str) -> Result<(), CacheError> {
        if tagged.tag.is_none() || check_digest(digest).is_err() {
            return Ok(());
        }
        let path = self.tag_file(tagged);
        let dir = path.parent().expect("a file in the tags directory");
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        write_file(dir, &name, digest.as_bytes()).map_err(|e| CacheError::Entry {
            digest: digest.to_owned(),
            message: format!("cannot remember tag {tagged}: {e}"),
        })
    }

    /// The digest `tagged`'s tag named when last resolved, if remembered.
    pub fn recall_tag(&self, tagged: &ModuleRef) -> Option<String> {
        let text = fs::read_to_string(self.tag_file(tagged)).ok()?;
        check_digest(text.trim()).ok()?;
        Some(text.trim().to_owned())
    }

    fn entry(&self, digest: &str) -> Option<PathBuf> {
        check_digest(digest).ok()?;
        Some(self.root.join(&digest["sha256:".len()..]))
    }

    /// Stores a pulled module; a present entry is left as it is.
    pub fn put(&self, pulled: &Pulled) -> Result<(), CacheError> {
        let fail = |message: String| CacheError::Entry {
            digest: pulled.digest.clone(),
            message,
        };
        let Some(path) = self.entry(&pulled.digest) else {
            return Err(fail("not a sha256 digest".into()));
        };
        if path.exists() {
            // A present entry may lack the signature this pull verified: add it.
            if let Some(signature) = &pulled.signature {
                write_file(&path, "signature.json", &signature_json(signature))
                    .map_err(|e| fail(e.to_string()))?;
            }
            return Ok(());
        }
        let staging = tempfile::Builder::new()
            .prefix(".staging-")
            .tempdir_in(&self.root)
            .map_err(|e| fail(format!("cannot stage: {e}")))?;
        let write = |name: &str, bytes: &[u8]| -> std::io::Result<()> {
            let mut file = fs::File::create(staging.path().join(name))?;
            file.write_all(bytes)?;
            file.sync_all()
        };
        write("manifest.json", &pulled.manifest).map_err(|e| fail(e.to_string()))?;
        write("module.wasm", &pulled.module).map_err(|e| fail(e.to_string()))?;
        if let Some(signature) = &pulled.signature {
            write("signature.json", &signature_json(signature)).map_err(|e| fail(e.to_string()))?;
        }
        let staged = staging.keep();
        if let Err(e) = fs::rename(&staged, &path) {
            let _ = fs::remove_dir_all(&staged);
            // Another writer won the race with the same content.
            if !path.exists() {
                return Err(fail(format!("cannot store: {e}")));
            }
        }
        Ok(())
    }

    /// The module pinned by `r` (which must carry a digest), verified as the module docs say;
    /// `Ok(None)` when absent. An entry that fails a check is removed and reported.
    pub fn get(
        &self,
        r: &ModuleRef,
        max_module: u64,
        keys: &TrustedKeys,
    ) -> Result<Option<Pulled>, CacheError> {
        let Some(digest) = r.digest.as_deref() else {
            return Ok(None);
        };
        let Some(path) = self.entry(digest) else {
            return Ok(None);
        };
        if !path.exists() {
            return Ok(None);
        }
        match read_entry(&path, r, digest, max_module, keys) {
            Ok(pulled) => Ok(Some(pulled)),
            Err(Unusable::Removed(message)) => {
                let _ = fs::remove_dir_all(&path);
                Err(CacheError::Entry {
                    digest: digest.to_owned(),
                    message: format!("{message}; the entry was removed and is pulled again"),
                })
            }
            Err(Unusable::Unsigned) => Ok(None),
        }
    }
}

enum Unusable {
    /// The entry is damaged or altered.
    Removed(String),
    /// Sound, but holds no signature the trusted keys verify: pull to find one.
    Unsigned,
}

fn read_entry(
    path: &Path,
    r: &ModuleRef,
    digest: &str,
    max_module: u64,
    keys: &TrustedKeys,
) -> Result<Pulled, Unusable> {
    let read = |name: &str, limit: u64| -> Result<Vec<u8>, Unusable> {
        let file = path.join(name);
        let len = fs::metadata(&file)
            .map_err(|e| Unusable::Removed(format!("{name}: {e}")))?
            .len();
        if len > limit {
            return Err(Unusable::Removed(format!(
                "{name} is larger than {limit} bytes"
            )));
        }
        fs::read(&file).map_err(|e| Unusable::Removed(format!("{name}: {e}")))
    };
    let manifest = read("manifest.json", 1 << 20)?;
    if digest_of(&manifest) != digest {
        return Err(Unusable::Removed(
            "manifest.json does not hash to its digest".into(),
        ));
    }
    let layer = module_layer(&manifest, max_module)
        .map_err(|e| Unusable::Removed(format!("manifest.json: {e}")))?;
    let module = read("module.wasm", max_module)?;
    if digest_of(&module) != layer.digest {
        return Err(Unusable::Removed(
            "module.wasm does not hash to the manifest's layer digest".into(),
        ));
    }
    let (signature, signed_by) = if keys.is_empty() {
        (None, None)
    } else {
        let Ok(text) = read("signature.json", 1 << 20) else {
            return Err(Unusable::Unsigned);
        };
        let signature: Signature = serde_json::from_slice(&text)
            .map_err(|e| Unusable::Removed(format!("signature.json: {e}")))?;
        match verify(&signature, digest, keys) {
            Ok(key) => (Some(signature), Some(key)),
            Err(_) => return Err(Unusable::Unsigned),
        }
    };
    Ok(Pulled {
        pinned: r.at_digest(digest),
        digest: digest.to_owned(),
        manifest,
        module,
        signature,
        signed_by,
    })
}

fn signature_json(signature: &Signature) -> Vec<u8> {
    serde_json::to_vec(signature).expect("a signature serialises")
}

/// Writes `dir/name` through a temporary file renamed into place.
fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

/// Sets `dir`'s mode to 0700 (tests make directories with the umask's mode).
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::Artifact;

    fn pulled(module: &[u8]) -> Pulled {
        let artifact = Artifact::module(module, jiff::Timestamp::UNIX_EPOCH);
        let r = ModuleRef::parse("localhost:5000/p:v1").unwrap();
        Pulled {
            pinned: r.at_digest(&artifact.digest),
            digest: artifact.digest.clone(),
            manifest: artifact.manifest,
            module: module.to_vec(),
            signature: None,
            signed_by: None,
        }
    }

    fn private_tempdir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        make_private(dir.path()).unwrap();
        dir
    }

    #[test]
    fn an_entry_reads_back_and_an_altered_one_is_removed() {
        let dir = private_tempdir();
        let cache = ArtifactCache::open(dir.path()).unwrap();
        let p = pulled(b"module bytes");
        cache.put(&p).unwrap();
        let back = cache
            .get(&p.pinned, 1 << 20, &TrustedKeys::none())
            .unwrap()
            .unwrap();
        assert_eq!(back.module, p.module);
        assert_eq!(back.digest, p.digest);

        let entry = cache.entry(&p.digest).unwrap();
        fs::write(entry.join("module.wasm"), b"module bytez").unwrap();
        let e = cache
            .get(&p.pinned, 1 << 20, &TrustedKeys::none())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("does not hash to the manifest's layer digest"),
            "{e}"
        );
        assert!(!entry.exists());
        assert!(
            cache
                .get(&p.pinned, 1 << 20, &TrustedKeys::none())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_module_over_the_limit_or_a_tag_reference_is_not_served() {
        let dir = private_tempdir();
        let cache = ArtifactCache::open(dir.path()).unwrap();
        let p = pulled(&[7u8; 4096]);
        cache.put(&p).unwrap();
        assert!(cache.get(&p.pinned, 100, &TrustedKeys::none()).is_err());
        let tag = ModuleRef::parse("localhost:5000/p:v1").unwrap();
        assert!(
            cache
                .get(&tag, 1 << 20, &TrustedKeys::none())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let e = ArtifactCache::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("--policy-cache-dir") && e.contains("mode 777"),
            "{e}"
        );
        let file = dir.path().join("file");
        fs::write(&file, b"").unwrap();
        make_private(dir.path()).unwrap();
        let e = ArtifactCache::open(&file).unwrap_err().to_string();
        assert!(
            e.contains("cannot create it") || e.contains("not a directory"),
            "{e}"
        );
    }
}
