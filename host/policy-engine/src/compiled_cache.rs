//! Compiled policies on disk, so that a restart loads its policies without compiling them again
//! (a multi-MB component takes seconds to compile), and so that compiled code is mapped from a
//! file instead of copied into the operator's memory.
//!
//! A file `<dir>/compiled/<key>-<engine>.cwasm` holds exactly what wasmtime's
//! `precompile_component` made of a module (`key` is the module's sha256, or a digest naming a
//! pre-initialised copy), keyed by a fingerprint of everything that shapes compiled code: the
//! engine's compatibility hash (its compilation settings and wasmtime's version), this crate's
//! version and the cache format. Beside it, `<file>.sha256` holds the SHA-256 of its contents.
//!
//! **Mapped, not copied.** The engine loads a file with `Component::deserialize_file`, which maps
//! it: the compiled code and the modules' initial memory images stay file-backed pages, read in
//! when a call first touches them and dropped by the kernel under memory pressure, instead of
//! anonymous memory held for the life of the policy. A Python or JavaScript policy carries a
//! whole language runtime of which one policy's calls touch a small part, so this is most of
//! what a loaded policy costs (see `docs/performance.md`). Without `--policy-cache-dir` the
//! engine keeps its files in a private temporary directory removed when it stops
//! ([`CompiledCache::temporary`]); where no file can be written (a full or read-only disk) the
//! code is kept in memory, and costs accordingly.
//!
//! Compiled code is trusted code: `Component::deserialize_file` runs it without validation. The
//! guarantee that what is loaded is what this engine compiled rests on two things.
//! - **The directory is the operator's own.** [`private_dir`] creates it with mode 0700 and
//!   refuses to start with one that is owned by another user or that others can write, so
//!   only the operator's own user can place a file there; that user can replace the
//!   operator's binary just as well.
//! - **Every file has the SHA-256 of its contents beside it**, written after it and checked
//!   before the file reaches wasmtime, so a torn write, a truncated file, flipped bits or a file
//!   altered without its checksum are caught: such a file is removed and the module compiled
//!   again. (wasmtime itself also refuses code compiled with other settings or by another
//!   version.) Files are only ever replaced by a rename, never written in place, so a file that
//!   is mapped never changes under the operator.
//!
//! Files are written to a temporary file, synced and renamed into place, so a crash leaves the
//! old file or the new one, never half of one; a file whose checksum a crash kept from being
//! written is compiled again.

use std::fs;
use std::hash::{Hash as _, Hasher};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;

/// The layout of the files, part of every file's name: files of an older layout are never read.
const FORMAT: &str = "mapped-1";
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
    /// Compiled modules that could not be written (a full or read-only disk): kept in memory.
    pub unwritten: u64,
}

/// The compiled-code cache under a private directory.
#[derive(Debug)]
pub struct CompiledCache {
    dir: PathBuf,
    /// The directory of a [`CompiledCache::temporary`] cache, removed with it.
    temporary: Option<tempfile::TempDir>,
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    unwritten: AtomicU64,
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
        Ok(CompiledCache::at(compiled, None))
    }

    /// The cache whose files are in `dir` itself (what [`CompiledCache::dir`] of another
    /// cache returns), after checking it with [`private_dir`]: a compiler child's view of the
    /// operator's cache.
    pub fn in_dir(dir: &Path) -> Result<CompiledCache, CacheDirError> {
        private_dir(dir)?;
        Ok(CompiledCache::at(dir.to_owned(), None))
    }

    /// A cache in a new private directory under the system's temporary directory, removed when
    /// the cache is dropped: compiled code is mapped from files even when no cache directory is
    /// configured.
    pub fn temporary() -> Result<CompiledCache, CacheDirError> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new()
            .prefix("tfjob-policies-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| CacheDirError {
                path: std::env::temp_dir().display().to_string(),
                message: format!("cannot create a directory for compiled policies: {e}"),
            })?;
        // Made by us with mode 0700: what `private_dir` checks of a configured directory.
        Ok(CompiledCache::at(dir.path().to_owned(), Some(dir)))
    }

    fn at(dir: PathBuf, temporary: Option<tempfile::TempDir>) -> CompiledCache {
        CompiledCache {
            dir,
            temporary,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            unwritten: AtomicU64::new(0),
        }
    }

    /// Whether the files go when the operator stops (no `--policy-cache-dir`).
    pub fn is_temporary(&self) -> bool {
        self.temporary.is_some()
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            unwritten: self.unwritten.load(Ordering::Relaxed),
        }
    }

    /// The [`crate::function_cache::FunctionCache`] database of this directory.
    pub fn functions_path(&self) -> PathBuf {
        self.dir.join(crate::function_cache::FILE_NAME)
    }

    /// The file of `key` (hex: a module's digest, or a pre-initialised copy's) as compiled by
    /// `engine`.
    pub fn path(&self, key: &str, engine: &Engine) -> PathBuf {
        let mut hasher = Fingerprint(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
        hasher.0.update(FORMAT.as_bytes());
        let fingerprint = hex::encode(&hasher.0.finalize()[..8]);
        self.dir.join(format!("{key}-{fingerprint}.cwasm"))
    }

    /// Whether a sound file is at `path`: there, not larger than the cap, and its checksum file
    /// matches its contents. A damaged or altered one is removed (and counted); the caller
    /// compiles again. Reading goes through the page cache, not the operator's memory.
    pub fn verify(&self, path: &Path) -> bool {
        match check(path) {
            Ok(true) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(false) => false,
            Err(why) => {
                self.reject(path, &why);
                false
            }
        }
    }

    /// Records that a file is damaged or stale (it failed its checksum, or wasmtime refused
    /// it) and removes it with its checksum.
    pub fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            file = %path.display(),
            why,
            "a compiled policy in the cache is damaged or stale; it is removed and compiled again"
        );
        let _ = fs::remove_file(path);
        let _ = fs::remove_file(checksum_path(path));
    }

    /// Writes `code` (compiled for the file `path` names), then its checksum. An error (a full
    /// or read-only disk) is logged, counted and returned: the caller keeps the code in memory.
    pub fn store(&self, path: &Path, code: &[u8]) -> std::io::Result<()> {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.write_checked(path, code)
    }

    /// Keeps the module `bytes` of `digest` (its bytes are read again to pre-initialise it),
    /// with a checksum, and returns where.
    pub fn store_module(&self, digest: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.module_path(digest);
        // Kept already (by this process before a restart, or by the one that compiled it).
        if check(&path) != Ok(true) {
            self.write_checked(&path, bytes)?;
        }
        Ok(path)
    }

    /// Where the module of `digest` is kept.
    pub fn module_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.wasm"))
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The module kept at `path`, if it is there and sound.
    pub fn read_module(&self, path: &Path) -> Option<Vec<u8>> {
        check(path).ok().filter(|&sound| sound)?;
        fs::read(path).ok()
    }

    /// Removes the files filed under `key` (compiled code, a kept module, their checksums):
    /// their policy is no longer loaded. A mapped file stays readable until it is unmapped.
    pub fn forget(&self, key: &str, engine: &Engine) {
        for path in [self.path(key, engine), self.module_path(key)] {
            let _ = fs::remove_file(checksum_path(&path));
            let _ = fs::remove_file(&path);
        }
    }

    /// Writes `bytes` to `path`, then their checksum beside it; on failure, neither is left.
    fn write_checked(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let write = |to: &Path, bytes: &[u8]| -> std::io::Result<()> {
            let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
            file.write_all(bytes)?;
            file.as_file().sync_all()?;
            file.persist(to).map_err(|e| e.error)?;
            Ok(())
        };
        let sum = format!("{}\n", hex::encode(Sha256::digest(bytes)));
        let written = write(path, bytes).and_then(|()| write(&checksum_path(path), sum.as_bytes()));
        if let Err(e) = &written {
            self.unwritten.fetch_add(1, Ordering::Relaxed);
            let _ = fs::remove_file(path);
            tracing::warn!(file = %path.display(), error = %e, "a compiled policy could not be written; it is kept in memory");
        }
        written
    }
}

/// Where the checksum of the file at `path` is.
fn checksum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// `Ok(false)`: no file; `Ok(true)`: a sound one; `Err`: a damaged one, with why.
fn check(path: &Path) -> Result<bool, String> {
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    let expected = fs::read_to_string(checksum_path(path))
        .map_err(|e| format!("its checksum cannot be read: {e}"))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    if hex::encode(hasher.finalize()) != expected.trim() {
        return Err("its checksum does not match its contents".into());
    }
    Ok(true)
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
        assert!(!cache.verify(&path), "nothing there yet");
        cache.store(&path, b"compiled code").unwrap();
        assert!(cache.verify(&path));
        assert_eq!(
            fs::read(&path).unwrap(),
            b"compiled code",
            "stored as it is, to be mapped"
        );

        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(!cache.verify(&path));
        assert!(!path.exists(), "a damaged file is removed");
        assert!(!checksum_path(&path).exists(), "with its checksum");

        cache.store(&path, b"compiled code").unwrap();
        fs::write(&path, b"compiled").unwrap();
        assert!(!cache.verify(&path), "truncated");

        // A crash between the file and its checksum leaves a file without one.
        cache.store(&path, b"compiled code").unwrap();
        fs::remove_file(checksum_path(&path)).unwrap();
        assert!(!cache.verify(&path), "no checksum");
        assert!(!path.exists());
        assert_eq!(
            cache.stats(),
            CacheStats {
                hits: 1,
                misses: 3,
                rejected: 3,
                unwritten: 0,
            }
        );
    }

    #[test]
    fn a_file_that_cannot_be_written_is_reported_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompiledCache::open(dir.path()).unwrap();
        let path = cache.path("cd", &Engine::default());
        fs::remove_dir_all(dir.path().join("compiled")).unwrap();
        assert!(cache.store(&path, b"code").is_err());
        assert_eq!(cache.stats().unwritten, 1);
        assert!(!cache.verify(&path));
    }

    #[test]
    fn a_temporary_cache_is_private_and_removed_with_it() {
        let cache = CompiledCache::temporary().unwrap();
        assert!(cache.is_temporary());
        let dir = cache.dir.clone();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let path = cache.path("ef", &Engine::default());
        cache.store(&path, b"code").unwrap();
        assert!(cache.verify(&path));
        drop(cache);
        assert!(!dir.exists());
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
