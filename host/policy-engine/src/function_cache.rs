//! Compiled functions shared between compilations, so that the language runtime every Python or
//! JavaScript policy carries is compiled once, not once per policy and again for its
//! pre-initialised copy.
//!
//! Cranelift can skip compiling a function whose intermediate form it has compiled before: it
//! hashes the function (with the target's settings and its own version) and asks a store for
//! the machine code filed under that hash (wasmtime's incremental compilation). Two componentize-py
//! policies differ in a few functions of their own; the tens of thousands of CPython's are the
//! same in both, and a pre-initialised copy has exactly the code of the component it was
//! snapshotted from. This module is that store: an SQLite database, `functions.sqlite` in the
//! compiled-code cache's directory, which the compiler (a child process in `run` and `up`) opens
//! for one compilation.
//!
//! - **Written once per compilation.** Functions compiled during a compilation are kept in
//!   memory and written by [`FunctionCache::flush`] in one transaction, so a compiler killed
//!   halfway leaves the database as it was.
//! - **Checked before use.** Each entry has the SHA-256 of its code beside it; an entry that no
//!   longer matches (a damaged page, an edited file) is not used, and the function compiled
//!   again. What the directory's ownership guarantees for the compiled-code files
//!   (`compiled_cache`) holds here too: only the operator's user can write it.
//! - **Bounded.** The database keeps at most `max_bytes` of code: after each compilation the
//!   entries used longest ago go first, so the runtimes of the policies in use stay.
//!
//! The store never fails a compilation: an entry it cannot read is a miss, one it cannot keep is
//! compiled again next time.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension as _, params};
use sha2::{Digest as _, Sha256};

/// The database's name in the cache directory.
pub const FILE_NAME: &str = "functions.sqlite";
/// The most code the database keeps by default: the runtimes of a few Python and JavaScript
/// versions (CPython's functions are about 60 MiB of entries).
pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;
/// The largest single entry kept: no function's code comes near it.
const MAX_ENTRY_BYTES: usize = 16 << 20;
/// How long a compiler waits for another process holding the database.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why the database cannot be used; the compilation goes on without it.
#[derive(Debug, thiserror::Error)]
#[error("the compiled-function cache {path}: {source}")]
pub struct FunctionCacheError {
    pub path: String,
    #[source]
    pub source: rusqlite::Error,
}

/// What one compilation found and added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionStats {
    /// Functions found in the database and not compiled.
    pub hits: u64,
    /// Functions compiled (and added by [`FunctionCache::flush`]).
    pub misses: u64,
    /// Entries whose checksum no longer matched: compiled again.
    pub rejected: u64,
}

/// Functions compiled during one compilation, not yet written: (key, code) pairs and the
/// bytes of code they hold.
#[derive(Debug, Default)]
struct Added {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: usize,
}

/// The store of compiled functions for one compilation; see the module's documentation.
#[derive(Debug)]
pub struct FunctionCache {
    path: PathBuf,
    max_bytes: u64,
    db: Mutex<Connection>,
    /// Functions compiled during this compilation.
    added: Mutex<Added>,
    /// Keys found during this compilation: marked as just used.
    used: Mutex<Vec<Vec<u8>>>,
    hits: AtomicU64,
    rejected: AtomicU64,
}

impl FunctionCache {
    /// Opens (creating) the database at `path`, keeping at most `max_bytes` of code. A file
    /// there that is not a sound database (damaged, or something else) is replaced by an empty
    /// one: what it held is only a head start.
    pub fn open(path: &Path, max_bytes: u64) -> Result<FunctionCache, FunctionCacheError> {
        let fail = |source| FunctionCacheError {
            path: path.display().to_string(),
            source,
        };
        let db = match FunctionCache::connect(path) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
                ) =>
            {
                tracing::warn!(file = %path.display(), "the compiled-function cache is damaged; it starts again empty");
                let _ = std::fs::remove_file(path);
                let mut journal = path.as_os_str().to_owned();
                journal.push("-journal");
                let _ = std::fs::remove_file(journal);
                FunctionCache::connect(path)
            }
            other => other,
        }
        .map_err(fail)?;
        Ok(FunctionCache {
            path: path.to_owned(),
            max_bytes,
            db: Mutex::new(db),
            added: Mutex::default(),
            used: Mutex::default(),
            hits: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    fn connect(path: &Path) -> rusqlite::Result<Connection> {
        let db = Connection::open(path)?;
        db.busy_timeout(BUSY_TIMEOUT)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS functions (
                 key BLOB NOT NULL UNIQUE,
                 code BLOB NOT NULL,
                 sha256 BLOB NOT NULL,
                 used INTEGER NOT NULL
             );
             CREATE INDEX IF NOT EXISTS functions_used ON functions (used);",
        )?;
        Ok(db)
    }

    /// What this compilation found and added so far.
    pub fn stats(&self) -> FunctionStats {
        FunctionStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: lock(&self.added).entries.len() as u64,
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// Writes the functions compiled since the last flush, marks the ones found as just used
    /// and trims the database to its size, in one transaction.
    pub fn flush(&self) -> Result<FunctionStats, FunctionCacheError> {
        let stats = self.stats();
        let added = std::mem::take(&mut *lock(&self.added)).entries;
        let used = std::mem::take(&mut *lock(&self.used));
        let fail = |source| FunctionCacheError {
            path: self.path.display().to_string(),
            source,
        };
        let mut db = lock(&self.db);
        let tx = db.transaction().map_err(fail)?;
        {
            let now: i64 = tx
                .query_row(
                    "SELECT COALESCE(MAX(used), 0) + 1 FROM functions",
                    [],
                    |r| r.get(0),
                )
                .map_err(fail)?;
            let mut touch = tx
                .prepare_cached("UPDATE functions SET used = ?2 WHERE key = ?1")
                .map_err(fail)?;
            for key in &used {
                touch.execute(params![key, now]).map_err(fail)?;
            }
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO functions (key, code, sha256, used)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(fail)?;
            for (key, code) in &added {
                let sum = Sha256::digest(code);
                insert
                    .execute(params![key, code, sum.as_slice(), now])
                    .map_err(fail)?;
            }
            // Newest first, the entries past the size go.
            tx.execute(
                "DELETE FROM functions WHERE rowid IN (
                     SELECT rowid FROM (
                         SELECT rowid, SUM(LENGTH(code)) OVER (
                             ORDER BY used DESC, rowid DESC ROWS UNBOUNDED PRECEDING
                         ) AS kept FROM functions
                     ) WHERE kept > ?1
                 )",
                params![i64::try_from(self.max_bytes).unwrap_or(i64::MAX)],
            )
            .map_err(fail)?;
        }
        tx.commit().map_err(fail)?;
        Ok(stats)
    }

    /// The bytes of code the database holds.
    pub fn stored_bytes(&self) -> Result<u64, FunctionCacheError> {
        lock(&self.db)
            .query_row(
                "SELECT COALESCE(SUM(LENGTH(code)), 0) FROM functions",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(|source| FunctionCacheError {
                path: self.path.display().to_string(),
                source,
            })
    }

    fn find(&self, key: &[u8]) -> Option<Vec<u8>> {
        let row: Option<(Vec<u8>, Vec<u8>)> = lock(&self.db)
            .prepare_cached("SELECT code, sha256 FROM functions WHERE key = ?1")
            .and_then(|mut find| {
                find.query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .ok()
            .flatten();
        let (code, sum) = row?;
        if Sha256::digest(&code).as_slice() != sum.as_slice() {
            // Replaced by the compilation that follows this miss.
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(code)
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let code = self.find(key)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        lock(&self.used).push(key.to_owned());
        Some(Cow::Owned(code))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut added = lock(&self.added);
        // What one compilation adds is bounded by what the database keeps at all.
        if value.len() > MAX_ENTRY_BYTES || (added.bytes + value.len()) as u64 > self.max_bytes {
            return false;
        }
        added.bytes += value.len();
        added.entries.push((key.to_owned(), value));
        true
    }
}

/// A lock that a panicking compiler thread does not poison for the others.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore as _;

    fn cache(dir: &Path, max: u64) -> FunctionCache {
        FunctionCache::open(&dir.join(FILE_NAME), max).unwrap()
    }

    #[test]
    fn what_a_compilation_adds_is_found_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let first = cache(dir.path(), 1 << 20);
        assert!(first.get(b"f").is_none());
        assert!(first.insert(b"f", b"code of f".to_vec()));
        // Not written before the compilation ends.
        assert!(cache(dir.path(), 1 << 20).get(b"f").is_none());
        assert_eq!(first.flush().unwrap().misses, 1);
        let next = cache(dir.path(), 1 << 20);
        assert_eq!(next.get(b"f").as_deref(), Some(&b"code of f"[..]));
        assert_eq!(next.stats().hits, 1);
    }

    #[test]
    fn an_entry_that_no_longer_matches_its_checksum_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let first = cache(dir.path(), 1 << 20);
        first.insert(b"f", b"code of f".to_vec());
        first.flush().unwrap();
        Connection::open(dir.path().join(FILE_NAME))
            .unwrap()
            .execute("UPDATE functions SET code = X'00112233'", [])
            .unwrap();
        let next = cache(dir.path(), 1 << 20);
        assert!(next.get(b"f").is_none());
        assert_eq!(next.stats().rejected, 1);
        // Compiled again, it replaces the damaged entry.
        next.insert(b"f", b"code of f".to_vec());
        next.flush().unwrap();
        assert!(cache(dir.path(), 1 << 20).get(b"f").is_some());
    }

    #[test]
    fn the_entries_used_longest_ago_go_first_past_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let kb = |n: u8| vec![n; 1024];
        let one = cache(dir.path(), 3 * 1024);
        for key in [b"a", b"b", b"c"] {
            one.insert(key, kb(key[0]));
        }
        one.flush().unwrap();
        // A later compilation uses `a` and adds `d`: `b` and `c` are older than both.
        let two = cache(dir.path(), 3 * 1024);
        assert!(two.get(b"a").is_some());
        two.insert(b"d", kb(b'd'));
        two.flush().unwrap();
        let three = cache(dir.path(), 3 * 1024);
        assert_eq!(three.stored_bytes().unwrap(), 3 * 1024);
        assert!(three.get(b"a").is_some() && three.get(b"d").is_some());
        // Of two entries used as long ago, the one added first goes first.
        assert!(three.get(b"b").is_none() && three.get(b"c").is_some());
    }

    #[test]
    fn one_compilation_adds_no_more_than_the_database_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let one = cache(dir.path(), 2048);
        assert!(one.insert(b"a", vec![0; 1500]));
        assert!(!one.insert(b"b", vec![0; 1500]));
        assert!(!one.insert(b"huge", vec![0; MAX_ENTRY_BYTES + 1]));
        assert_eq!(one.flush().unwrap().misses, 1);
    }

    #[test]
    fn a_file_that_is_not_a_database_is_replaced_by_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), vec![0xa5; 8192]).unwrap();
        let cache = cache(dir.path(), 1 << 20);
        assert!(cache.get(b"f").is_none());
        cache.insert(b"f", b"code of f".to_vec());
        cache.flush().unwrap();
        assert!(
            super::FunctionCache::open(&dir.path().join(FILE_NAME), 1 << 20)
                .unwrap()
                .get(b"f")
                .is_some()
        );
    }

    #[test]
    fn a_path_that_cannot_hold_a_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let error = FunctionCache::open(&dir.path().join("missing/functions.sqlite"), 1)
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing/functions.sqlite"), "{error}");
    }
}
