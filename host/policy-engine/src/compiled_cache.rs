//! Compiled policies on disk, so that a restart loads its policies without compiling them again
//! (a multi-MB component takes seconds to compile).
//!
//! A file `<dir>/compiled/<module sha256>-<engine>.cwasm` holds what wasmtime's
//! `precompile_component` made of the module, keyed by the module's digest and a fingerprint of
//! everything that shapes compiled code: the engine's compatibility hash (its compilation
//! settings and wasmtime's version) and this crate's version.
//!
//! Compiled code is trusted code: `Component::deserialize` runs it without validation. The
//! guarantee that what is loaded is what this engine compiled rests on two things.
//! - **The directory is the operator's own.** [`private_dir`] creates it with mode 0700 and
//!   refuses to start with one that is owned by another user or that others can write, so
//!   only the operator's own user can place a file there; that user can replace the
//!   operator's binary just as well.
//! - **Every file carries the SHA-256 of its body**, written with it and checked before the
//!   body reaches wasmtime, so a torn write, a truncated file, flipped bits or a body altered
//!   without its header are caught: such a file is removed and the module compiled again.
//!   (wasmtime itself also refuses code compiled with other settings or by another version.)
//!
//! Files are written to a temporary file, synced and renamed into place, so a crash leaves the
//! old file or the new one, never half of one.

use std::fs;
use std::hash::{Hash as _, Hasher};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;

/// The first bytes of a cache file: the format's name and version.
const MAGIC: &[u8; 8] = b"TFJOBCW1";
/// Largest cache file read: compiled code is a few times the module's size.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Why the cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("--policy-cache-dir {path}: {message}")]
pub struct CacheDirError {
    pub path: String,
    pub message: String,
}

/// Creates `dir` (mode 0700) if needed and checks that it is the operator's own: owned by the
/// user running it, and writable by no one else.
pub fn private_dir(dir: &Path) -> Result<(), CacheDirError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let fail = |message: String| CacheDirError {
        path: dir.display().to_string(),
        message,
    };
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(format!("cannot create it: {e}")))?;
    }
    let meta = fs::metadata(dir).map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() {
        return Err(fail("is not a directory".into()));
    }
    // Who we are, without libc: the owner of a file we create.
    let probe =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(format!("is not writable: {e}")))?;
    let me = probe
        .as_file()
        .metadata()
        .map_err(|e| fail(e.to_string()))?
        .uid();
    drop(probe);
    if meta.uid() != me {
        return Err(fail(format!(
            "is owned by uid {}, not by the operator's uid {me}; compiled code is loaded from \
             it, so it must be the operator's own",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(fail(format!(
            "mode {:o} lets others write it; compiled code is loaded from it (chmod 700)",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// What the cache did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Modules loaded from a file instead of compiled.
    pub hits: u64,
    /// Modules compiled (and written).
    pub misses: u64,
    /// Files found damaged or altered, removed and compiled again.
    pub rejected: u64,
}

/// The compiled-code cache under a private directory.
#[derive(Debug)]
pub struct CompiledCache {
    dir: PathBuf,
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
}

impl CompiledCache {
    /// Opens (creating) `<dir>/compiled` after checking `dir` with [`private_dir`].
    pub fn open(dir: &Path) -> Result<CompiledCache, CacheDirError> {
        private_dir(dir)?;
        let compiled = dir.join("compiled");
        fs::create_dir_all(&compiled).map_err(|e| CacheDirError {
            path: dir.display().to_string(),
            message: format!("cannot create {}: {e}", compiled.display()),
        })?;
        Ok(CompiledCache {
            dir: compiled,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// The file of `digest` (hex) as compiled by `engine`.
    pub fn path(&self, digest: &str, engine: &Engine) -> PathBuf {
        let mut hasher = Fingerprint(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
        let fingerprint = hex::encode(&hasher.0.finalize()[..8]);
        self.dir.join(format!("{digest}-{fingerprint}.cwasm"))
    }

    /// The compiled code at `path`, if a sound file is there. A damaged or altered one is
    /// removed (and counted); the caller compiles again.
    pub fn load(&self, path: &Path) -> Option<Vec<u8>> {
        let bytes = match read_capped(path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return None,
            Err(e) => {
                self.reject(path, &e);
                return None;
            }
        };
        match body(&bytes) {
            Ok(body) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(body.to_vec())
            }
            Err(why) => {
                self.reject(path, why);
                None
            }
        }
    }

    /// Records that a loaded file did not deserialize (another wasmtime, other settings) and
    /// removes it.
    pub fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            file = %path.display(),
            why,
            "a compiled policy in the cache is damaged or stale; it is removed and compiled again"
        );
        let _ = fs::remove_file(path);
    }

    /// Writes `code` (compiled for the file `path` names), with its checksum.
    pub fn store(&self, path: &Path, code: &[u8]) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        let write = || -> std::io::Result<()> {
            let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
            file.write_all(MAGIC)?;
            file.write_all(&Sha256::digest(code))?;
            file.write_all(code)?;
            file.as_file().sync_all()?;
            file.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(e) = write() {
            tracing::warn!(file = %path.display(), error = %e, "a compiled policy could not be cached");
        }
    }
}

fn read_capped(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    fs::read(path).map(Some).map_err(|e| e.to_string())
}

/// The body of a cache file, if its header says it is whole.
fn body(bytes: &[u8]) -> Result<&[u8], &'static str> {
    let rest = bytes.strip_prefix(MAGIC).ok_or("not a cache file")?;
    if rest.len() < 32 {
        return Err("truncated");
    }
    let (sum, body) = rest.split_at(32);
    if Sha256::digest(body).as_slice() != sum {
        return Err("its checksum does not match its contents");
    }
    Ok(body)
}

/// Feeds a `Hash` value into SHA-256, a stable function (unlike std's hashers).
struct Fingerprint(Sha256);

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_and_any_damage_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let cache = CompiledCache::open(dir.path()).unwrap();
        let engine = Engine::default();
        let path = cache.path("ab", &engine);
        cache.store(&path, b"compiled code");
        assert_eq!(cache.load(&path).as_deref(), Some(&b"compiled code"[..]));

        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(cache.load(&path), None);
        assert!(!path.exists(), "a damaged file is removed");

        cache.store(&path, b"compiled code");
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..20]).unwrap();
        assert_eq!(cache.load(&path), None);
        assert_eq!(
            cache.stats(),
            CacheStats {
                hits: 1,
                misses: 2,
                rejected: 2
            }
        );
    }

    #[test]
    fn a_directory_others_can_write_is_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let e = CompiledCache::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with("--policy-cache-dir") && e.contains("mode 777"),
            "{e}"
        );
        let fresh = dir.path().join("new/nested");
        fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        CompiledCache::open(&fresh).unwrap();
        assert_eq!(fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
    }
}
