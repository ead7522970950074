//! The durable store under `up --state PATH`: every change of the object store written to an
//! SQLite database in WAL mode (as k3s keeps a single machine's state, through kine), one row
//! per object, so a write costs what its object costs, never the whole store.
//!
//! Changes reach the database in resourceVersion order through one writer thread that commits
//! whatever has queued since its last commit in one transaction (group commit), with
//! `synchronous=FULL`: a committed transaction survives a crash of the process or the machine.
//! The API server answers a write only once the database holds it ([`Durable::wait_appended`]),
//! so every acknowledged write is there after a restart; a write the server had not answered
//! may be there or not, never half (a transaction is atomic).
//!
//! Watches see changes before they are durable, and a crash can lose those; so a restarted
//! store resumes its resourceVersions [`RV_GAP`] past the last durable one, beyond any version a
//! client can have seen: versions only grow. At most [`QUEUE_BOUND`] changes wait for the writer
//! (a store write blocks beyond that), which is what bounds the gap.
//!
//! At start the database is checked (`quick_check`), written once (so a full disk shows at
//! once) and every row read back; a database that is damaged, truncated or not a state
//! database, a directory that cannot be written and a full disk are errors naming the path and
//! the cause, never an empty cluster. An old JSON state file at the path is imported once: the
//! database takes its place and the file is kept beside it as `PATH.json`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, params};
use serde_json::Value;
use tokio::sync::watch;

use crate::storage::persist;
use crate::storage::store::{EventType, Journal, Store, WatchEvent};

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8] = b"SQLite format 3\0";
/// Marks a database as this program's state (`PRAGMA application_id`, "TFJS").
const APPLICATION_ID: i64 = 0x5446_4a53;

/// Changes that may wait for the writer before a store write blocks.
pub const QUEUE_BOUND: usize = 65_536;
/// Changes the writer commits in one transaction at most.
const BATCH: usize = 65_536;
/// How far past the last durable resourceVersion a restarted store resumes: more than every
/// change that can have been queued or in a transaction at a crash, so no version a watch
/// showed is given again.
pub const RV_GAP: u64 = (QUEUE_BOUND + BATCH) as u64 + 1;
/// The longest wait between two attempts of a commit that failed.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Why the state database cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error(
        "state {path}: the directory {dir} cannot be written ({source}); the state database creates its journal beside it"
    )]
    ReadOnlyDirectory {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state {path} is not a state database: {message}")]
    NotAState { path: PathBuf, message: String },
    #[error(
        "state {path} is damaged: {message}; move it away to start an empty cluster, or put back a copy"
    )]
    Damaged { path: PathBuf, message: String },
    #[error("state {path}: the disk is full ({message})")]
    DiskFull { path: PathBuf, message: String },
    #[error("state {path}: {message}")]
    Database { path: PathBuf, message: String },
    #[error("state {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the write is not durable: {0}")]
    NotDurable(String),
}

impl DurableError {
    fn sql(path: &Path, e: &rusqlite::Error) -> DurableError {
        let message = e.to_string();
        let path = path.to_owned();
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
                DurableError::Damaged { path, message }
            }
            Some(rusqlite::ErrorCode::DiskFull) => DurableError::DiskFull { path, message },
            _ => DurableError::Database { path, message },
        }
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DurableError {
        let path = path.to_owned();
        move |source| DurableError::Io { path, source }
    }
}

/// What a state database held when opened.
#[derive(Clone, Debug)]
pub struct Restored {
    /// The resourceVersion to resume from: [`RV_GAP`] past the last durable one (1 for a new
    /// database), or that of an imported JSON state.
    pub resource_version: u64,
    /// Every object, as `(group/plural, object)`.
    pub objects: Vec<(String, Value)>,
    /// Set when an old JSON state file was imported: where the file is kept now.
    pub imported_json: Option<PathBuf>,
}

/// How far the writer has come.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Progress {
    /// Every change up to this resourceVersion is committed.
    Committed(u64),
    /// The last commit failed and is tried again; the versions up to `committed` are durable.
    Failing { committed: u64, error: String },
    /// The writer has stopped.
    Stopped,
}

/// The open state database and its writer thread.
pub struct Durable {
    path: PathBuf,
    queue: Mutex<Option<SyncSender<WatchEvent>>>,
    /// The resourceVersion of the last change handed to the writer.
    appended: AtomicU64,
    progress: watch::Receiver<Progress>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").field("path", &self.path).finish()
    }
}

impl Durable {
    /// Fills `store` (its types registered) with what [`Durable::open`] restored and has it
    /// journal every later change here; returns where an imported JSON state is kept now.
    /// The journal is set only after the restore: restoring writes nothing back.
    pub fn attach(self: &Arc<Self>, store: &Store, restored: Restored) -> Option<PathBuf> {
        persist::restore(store, restored.resource_version, restored.objects);
        store.set_journal(self.clone());
        restored.imported_json
    }

    /// Opens (or creates) the state database at `path`, checks it, reads every object back and
    /// starts the writer. An old JSON state file at `path` is imported first.
    pub fn open(path: &Path) -> Result<(Arc<Durable>, Restored), DurableError> {
        check_directory(path)?;
        let imported = import_json_if_any(path)?;
        let mut conn = connect(path)?;
        let (last_rv, objects) = read_all(path, &conn)?;
        let resource_version = match (&imported, last_rv) {
            (Some(json), _) => json.resource_version,
            (None, 0) => 1,
            (None, last) => last + RV_GAP,
        };
        // The version resumed from is durable before anything else is written, so a crash
        // before the first write resumes past it again.
        write_rv(&mut conn, resource_version).map_err(|e| DurableError::sql(path, &e))?;
        let restored = Restored {
            resource_version,
            objects,
            imported_json: imported.map(|i| i.backup),
        };
        Ok((Durable::start(path, conn, resource_version), restored))
    }

    fn start(path: &Path, conn: Connection, committed: u64) -> Arc<Durable> {
        let (tx, rx) = sync_channel(QUEUE_BOUND);
        let (progress_tx, progress) = watch::channel(Progress::Committed(committed));
        let writer_path = path.to_owned();
        let writer = std::thread::Builder::new()
            .name("state-writer".into())
            .spawn(move || write_loop(&writer_path, conn, &rx, &progress_tx, committed))
            .map_err(|e| tracing::error!(error = %e, "cannot start the state writer"))
            .ok();
        Arc::new(Durable {
            path: path.to_owned(),
            queue: Mutex::new(Some(tx)),
            appended: AtomicU64::new(committed),
            progress,
            writer: Mutex::new(writer),
        })
    }

    /// Hands a change to the writer, in resourceVersion order (the store calls it under its
    /// lock). Blocks while [`QUEUE_BOUND`] changes wait already.
    pub fn append(&self, event: WatchEvent) {
        let rv = event.rv;
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = queue.as_ref() else {
            return;
        };
        if queue.send(event).is_ok() {
            self.appended.store(rv, Ordering::Release);
        }
    }

    /// Waits until every change appended so far is committed, for at most `timeout`.
    pub async fn wait_appended(&self, timeout: Duration) -> Result<(), DurableError> {
        let rv = self.appended.load(Ordering::Acquire);
        let mut progress = self.progress.clone();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                match &*progress.borrow_and_update() {
                    Progress::Committed(c) | Progress::Failing { committed: c, .. } if *c >= rv => {
                        return Ok(());
                    }
                    Progress::Stopped => {
                        return Err(DurableError::NotDurable("the state writer stopped".into()));
                    }
                    _ => {}
                }
                if progress.changed().await.is_err() {
                    return Err(DurableError::NotDurable("the state writer stopped".into()));
                }
            }
        })
        .await;
        match waited {
            Ok(result) => result,
            Err(_) => Err(DurableError::NotDurable(match &*self.progress.borrow() {
                Progress::Failing { error, .. } => {
                    format!(
                        "{}: writing has failed for {timeout:?}: {error}",
                        self.path.display()
                    )
                }
                _ => format!("{}: not written within {timeout:?}", self.path.display()),
            })),
        }
    }

    /// Commits what is queued, checkpoints the journal into the database file and stops the
    /// writer. Changes appended later are not written.
    pub fn close(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer
            && writer.join().is_err()
        {
            tracing::error!("the state writer panicked");
        }
    }
}

impl Journal for Durable {
    fn append(&self, event: WatchEvent) {
        Durable::append(self, event);
    }

    fn settle(
        &self,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move { self.wait_appended(timeout).await.map_err(|e| e.to_string()) })
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer: commits what has queued, in order, until the queue closes; a failed commit is
/// tried again (a full disk may get room) while the API server's writes wait for it.
fn write_loop(
    path: &Path,
    mut conn: Connection,
    queue: &Receiver<WatchEvent>,
    progress: &watch::Sender<Progress>,
    mut committed: u64,
) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let last = batch.last().map_or(committed, |e| e.rv);
        let mut delay = Duration::from_millis(10);
        loop {
            match commit(&mut conn, &batch) {
                Ok(()) => {
                    committed = last;
                    progress.send_replace(Progress::Committed(committed));
                    break;
                }
                Err(e) => {
                    let error = DurableError::sql(path, &e).to_string();
                    tracing::error!(%error, "cannot write the cluster state; retrying");
                    progress.send_replace(Progress::Failing { committed, error });
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }
    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
        tracing::warn!(error = %e, "checkpointing the state database");
    }
    progress.send_replace(Progress::Stopped);
}

/// One transaction: each change's object stored or removed, and the last version.
fn commit(conn: &mut Connection, batch: &[WatchEvent]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO objects (resource, namespace, name, rv, object) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (resource, namespace, name) DO UPDATE SET rv = excluded.rv, object = excluded.object",
        )?;
        let mut delete = tx.prepare_cached(
            "DELETE FROM objects WHERE resource = ?1 AND namespace = ?2 AND name = ?3",
        )?;
        for event in batch {
            let name = event
                .object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match event.type_ {
                EventType::Added | EventType::Modified => {
                    let bytes = serde_json::to_vec(&*event.object)
                        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                    upsert.execute(params![
                        event.resource,
                        event.namespace,
                        name,
                        rv_sql(event.rv),
                        bytes
                    ])?;
                }
                EventType::Deleted => {
                    delete.execute(params![event.resource, event.namespace, name])?;
                }
            }
        }
    }
    if let Some(last) = batch.last() {
        write_rv_in(&tx, last.rv)?;
    }
    tx.commit()
}

/// Versions are stored as SQLite integers (signed 64 bits); no store reaches 2^63 changes.
fn rv_sql(rv: u64) -> i64 {
    i64::try_from(rv).unwrap_or(i64::MAX)
}

fn write_rv(conn: &mut Connection, rv: u64) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    write_rv_in(&tx, rv)?;
    tx.commit()
}

fn write_rv_in(conn: &Connection, rv: u64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('resourceVersion', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![rv_sql(rv)],
    )
    .map(drop)
}

/// The state database needs to create its journal (`-wal`, `-shm`) beside the file: a
/// directory that cannot be written is refused before anything else is tried.
fn check_directory(path: &Path) -> Result<(), DurableError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    if path.is_dir() {
        return Err(DurableError::NotAState {
            path: path.to_owned(),
            message: "it is a directory".into(),
        });
    }
    let probe = dir.join(format!(".state-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|source| DurableError::ReadOnlyDirectory {
            path: path.to_owned(),
            dir,
            source,
        })
}

/// The first 16 bytes of the file (fewer when it is shorter).
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path)?.take(16).read_to_end(&mut head)?;
    Ok(head)
}

/// Opens the database: WAL journal, full sync, this program's schema; checks it and writes
/// once. A file that exists must be an SQLite database (an empty one is refused: a truncated
/// state must not pass for a new cluster).
fn connect(path: &Path) -> Result<Connection, DurableError> {
    let sql = |e: rusqlite::Error| DurableError::sql(path, &e);
    let existed = match read_head(path) {
        Ok(head) if head.starts_with(SQLITE_HEADER) => true,
        Ok(head) if head.is_empty() => {
            return Err(DurableError::Damaged {
                path: path.to_owned(),
                message: "the file is empty".into(),
            });
        }
        Ok(_) => {
            return Err(DurableError::NotAState {
                path: path.to_owned(),
                message: "neither a state database nor a JSON state file".into(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(DurableError::io(path)(e)),
    };
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DurableError::Database {
            path: path.to_owned(),
            message: format!("the journal mode is {mode}, not WAL"),
        });
    }
    conn.execute_batch("PRAGMA synchronous = FULL;")
        .map_err(sql)?;
    if existed {
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(sql)?;
        if check != "ok" {
            return Err(DurableError::Damaged {
                path: path.to_owned(),
                message: check,
            });
        }
        let id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(sql)?;
        if id != APPLICATION_ID {
            return Err(DurableError::NotAState {
                path: path.to_owned(),
                message: "an SQLite database of another program".into(),
            });
        }
    } else {
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID};
             CREATE TABLE objects (
                 resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
                 rv INTEGER NOT NULL, object BLOB NOT NULL,
                 PRIMARY KEY (resource, namespace, name));
             CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
        ))
        .map_err(sql)?;
    }
    Ok(conn)
}

/// The last durable version and every object, each checked to be a JSON object.
fn read_all(path: &Path, conn: &Connection) -> Result<(u64, Vec<(String, Value)>), DurableError> {
    let sql = |e: rusqlite::Error| DurableError::sql(path, &e);
    let rv: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'resourceVersion'",
            [],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(sql)?;
    let mut select = conn
        .prepare("SELECT resource, namespace, name, object FROM objects ORDER BY rv")
        .map_err(sql)?;
    let rows = select
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Vec<u8>>(3)?,
            ))
        })
        .map_err(sql)?;
    let mut objects = Vec::new();
    for row in rows {
        let (resource, namespace, name, bytes) = row.map_err(sql)?;
        let object: Value = serde_json::from_slice(&bytes)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| DurableError::Damaged {
                path: path.to_owned(),
                message: format!("the object {resource} {namespace}/{name} is not JSON"),
            })?;
        objects.push((resource, object));
    }
    Ok((rv.map_or(0, |v| u64::try_from(v).unwrap_or(0)), objects))
}

/// An old JSON state, read and written into a new database at the path.
struct ImportedJson {
    resource_version: u64,
    /// Where the JSON file is kept.
    backup: PathBuf,
}

/// Where an old JSON state is kept once imported.
pub fn json_backup(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

/// Imports an old JSON state file at `path` (or one whose import was cut short, kept at
/// [`json_backup`] with no database at `path`): the objects go into a new database, written
/// beside and put in place of the file by renames, so a crash at any point leaves either the
/// JSON state or the database.
fn import_json_if_any(path: &Path) -> Result<Option<ImportedJson>, DurableError> {
    let backup = json_backup(path);
    let source = match read_head(path) {
        Ok(head) if is_json_state(&head) => path.to_owned(),
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && backup.exists() => backup.clone(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DurableError::io(path)(e)),
    };
    let text = std::fs::read_to_string(&source).map_err(DurableError::io(&source))?;
    let (rv, objects) = persist::parse(&text).map_err(|message| DurableError::NotAState {
        path: source.clone(),
        message: format!("an unreadable JSON state: {message}"),
    })?;
    let mut staging = path.as_os_str().to_owned();
    staging.push(".importing");
    let staging = PathBuf::from(staging);
    for leftover in [
        staging.clone(),
        journal_file(&staging, "-wal"),
        journal_file(&staging, "-shm"),
    ] {
        match std::fs::remove_file(&leftover) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(DurableError::io(&leftover)(e));
            }
            _ => {}
        }
    }
    {
        let mut conn = connect(&staging)?;
        let sql = |e: rusqlite::Error| DurableError::sql(&staging, &e);
        let tx = conn.transaction().map_err(sql)?;
        {
            let mut insert = tx
                .prepare("INSERT OR REPLACE INTO objects (resource, namespace, name, rv, object) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(sql)?;
            for (resource, object) in &objects {
                let meta = |f: &str| {
                    object
                        .pointer(&format!("/metadata/{f}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let object_rv = meta("resourceVersion").parse::<i64>().unwrap_or(0);
                let bytes = serde_json::to_vec(object).unwrap_or_default();
                insert
                    .execute(params![
                        resource,
                        meta("namespace"),
                        meta("name"),
                        object_rv,
                        bytes
                    ])
                    .map_err(sql)?;
            }
        }
        write_rv_in(&tx, rv).map_err(sql)?;
        tx.commit().map_err(sql)?;
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(sql)?;
    }
    if source == path {
        std::fs::rename(path, &backup).map_err(DurableError::io(path))?;
    }
    std::fs::rename(&staging, path).map_err(DurableError::io(path))?;
    Ok(Some(ImportedJson {
        resource_version: rv,
        backup,
    }))
}

/// Whether `bytes` look like the old JSON state (an object, possibly after white space).
fn is_json_state(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

fn journal_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom, Write};

    use serde_json::json;

    use super::*;
    use crate::storage::store::{ResourceType, Store};

    fn configmaps(store: &Store) -> ResourceType {
        store.resource("", "configmaps").unwrap()
    }

    /// A store journaling into the database at `path`, with what it held restored.
    fn open_store(path: &Path) -> (Arc<Store>, Arc<Durable>, Restored) {
        let (durable, restored) = Durable::open(path).expect("the state opens");
        let store = Store::new();
        durable.attach(&store, restored.clone());
        (store, durable, restored)
    }

    fn wait(store: &Store) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(store.durable(Duration::from_secs(30)))
            .expect("durable");
    }

    /// A database holding `n` ConfigMaps of about 1 KiB each, closed (checkpointed).
    fn filled(path: &Path, n: usize) {
        let (store, durable, _) = open_store(path);
        let cm = configmaps(&store);
        for i in 0..n {
            store
                .create(
                    &cm,
                    Some("ns"),
                    json!({"metadata": {"name": format!("c{i}")}, "data": {"k": "x".repeat(1000)}}),
                )
                .unwrap();
        }
        wait(&store);
        durable.close();
    }

    #[test]
    fn writes_come_back_in_a_new_store_and_versions_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let (store, durable, restored) = open_store(&path);
        assert_eq!(restored.resource_version, 1, "a new database");
        assert!(restored.objects.is_empty());
        let cm = configmaps(&store);
        store
            .create(
                &cm,
                Some("ns"),
                json!({"metadata": {"name": "kept"}, "data": {"v": "1"}}),
            )
            .unwrap();
        store
            .create(&cm, Some("ns"), json!({"metadata": {"name": "gone"}}))
            .unwrap();
        let updated = store
            .patch(
                &cm,
                Some("ns"),
                "kept",
                crate::storage::store::Patch::Merge(json!({"data": {"v": "2"}})),
                crate::Part::Whole,
            )
            .unwrap();
        store
            .delete(&cm, Some("ns"), "gone", &Default::default())
            .unwrap();
        wait(&store);
        let last = store.resource_version();
        // Not closed: as after a crash, the journal has not been checkpointed.
        std::mem::forget(durable);
        drop(store);

        let (store, _durable, restored) = open_store(&path);
        assert_eq!(restored.objects.len(), 1, "{:?}", restored.objects);
        assert_eq!(store.get(&cm, Some("ns"), "kept").unwrap(), updated);
        assert!(store.get(&cm, Some("ns"), "gone").is_err());
        assert_eq!(restored.resource_version, last + RV_GAP);
        let next = store
            .create(&cm, Some("ns"), json!({"metadata": {"name": "after"}}))
            .unwrap();
        let rv: u64 = next["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last + RV_GAP, "{rv}");
    }

    #[test]
    fn a_damaged_truncated_empty_or_foreign_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let damaged = dir.path().join("damaged.db");
        filled(&damaged, 200);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&damaged)
            .unwrap();
        f.seek(SeekFrom::Start(4096 * 3)).unwrap();
        f.write_all(&[0xA5; 4096 * 4]).unwrap();
        drop(f);
        let err = Durable::open(&damaged).unwrap_err();
        assert!(matches!(err, DurableError::Damaged { .. }), "{err}");
        assert!(err.to_string().contains("damaged.db is damaged"), "{err}");

        let truncated = dir.path().join("truncated.db");
        filled(&truncated, 200);
        let len = std::fs::metadata(&truncated).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&truncated)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let err = Durable::open(&truncated).unwrap_err();
        assert!(matches!(err, DurableError::Damaged { .. }), "{err}");

        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        let err = Durable::open(&empty).unwrap_err();
        assert!(err.to_string().contains("the file is empty"), "{err}");

        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"not a database").unwrap();
        let err = Durable::open(&text).unwrap_err();
        assert!(matches!(err, DurableError::NotAState { .. }), "{err}");

        let foreign = dir.path().join("foreign.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
        let err = Durable::open(&foreign).unwrap_err();
        assert!(err.to_string().contains("another program"), "{err}");
        // None of them was changed by trying.
        assert_eq!(std::fs::read(&text).unwrap(), b"not a database");
    }

    #[test]
    fn an_old_json_state_is_imported_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let old = Store::new();
        let cm = configmaps(&old);
        let created = old
            .create(
                &cm,
                Some("ns"),
                json!({"metadata": {"name": "a"}, "data": {"k": "é"}}),
            )
            .unwrap();
        let (rv, objects) = old.snapshot();
        let doc = json!({
            "resourceVersion": rv,
            "objects": objects.into_iter().map(|(t, o)| json!({"type": t, "object": o})).collect::<Vec<_>>(),
        });
        std::fs::write(&path, doc.to_string()).unwrap();

        let (store, durable, restored) = open_store(&path);
        assert_eq!(restored.imported_json, Some(json_backup(&path)));
        assert_eq!(restored.resource_version, rv);
        assert_eq!(store.get(&cm, Some("ns"), "a").unwrap(), created);
        assert_eq!(
            std::fs::read_to_string(json_backup(&path)).unwrap(),
            doc.to_string(),
            "the JSON file is kept as it was"
        );
        durable.close();
        drop(store);

        let (store, _durable, restored) = open_store(&path);
        assert_eq!(restored.imported_json, None, "imported once");
        assert_eq!(store.get(&cm, Some("ns"), "a").unwrap(), created);

        // An import cut short after the JSON file was moved: imported from where it is.
        let cut = dir.path().join("cut.db");
        std::fs::write(json_backup(&cut), doc.to_string()).unwrap();
        let (_store, _durable, restored) = open_store(&cut);
        assert_eq!(restored.objects.len(), 1);
        assert_eq!(restored.imported_json, Some(json_backup(&cut)));

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"objects\": 3}").unwrap();
        let err = Durable::open(&bad).unwrap_err();
        assert!(
            err.to_string().contains("an unreadable JSON state"),
            "{err}"
        );
    }

    /// Runs `body` on a tmpfs mounted at a new directory with `options` (`ro`, `size=64k`), or
    /// returns `false` where mounting is not allowed (not root).
    fn on_tmpfs(options: &str, body: impl FnOnce(&Path)) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            return false;
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(dir.path())));
        let _ = std::process::Command::new("umount")
            .arg(dir.path())
            .status();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
        true
    }

    #[test]
    fn a_read_only_directory_is_refused_at_start() {
        let checked = on_tmpfs("ro", |dir| {
            let err = Durable::open(&dir.join("state.db")).unwrap_err();
            assert!(
                matches!(err, DurableError::ReadOnlyDirectory { .. }),
                "{err}"
            );
            assert!(err.to_string().contains("cannot be written"), "{err}");
        });
        if !checked {
            // Not root: the directory's mode is enough.
            use std::os::unix::fs::PermissionsExt as _;
            let dir = tempfile::tempdir().unwrap();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
            let err = Durable::open(&dir.path().join("state.db")).unwrap_err();
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(
                matches!(err, DurableError::ReadOnlyDirectory { .. }),
                "{err}"
            );
        }
    }

    #[test]
    fn a_full_disk_is_refused_at_start_and_a_write_waits_for_room() {
        let checked = on_tmpfs("size=1m", |dir| {
            let path = dir.join("state.db");
            // Fill the disk, leaving too little for the database's first pages.
            let filler = dir.join("filler");
            let mut f = std::fs::File::create(&filler).unwrap();
            let chunk = vec![0u8; 4096];
            while f.write_all(&chunk).is_ok() {}
            drop(f);
            let err = Durable::open(&path).unwrap_err();
            assert!(
                matches!(
                    err,
                    DurableError::DiskFull { .. }
                        | DurableError::ReadOnlyDirectory { .. }
                        | DurableError::Database { .. }
                ),
                "{err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("full") || text.contains("No space left"),
                "a full disk is named: {text}"
            );
            for leftover in ["state.db", "state.db-wal", "state.db-shm"] {
                let _ = std::fs::remove_file(dir.join(leftover));
            }

            // Room to start, then the disk fills while the cluster runs: writes are not
            // answered as done until the writer gets room again.
            std::fs::File::create(&filler).unwrap().set_len(0).unwrap();
            std::fs::remove_file(&filler).unwrap();
            let (store, _durable, _) = open_store(&path);
            let mut f = std::fs::File::create(&filler).unwrap();
            while f.write_all(&chunk).is_ok() {}
            drop(f);
            let cm = configmaps(&store);
            for i in 0..20 {
                store
                    .create(&cm, Some("ns"), json!({"metadata": {"name": format!("c{i}")}, "data": {"k": "x".repeat(4000)}}))
                    .unwrap();
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let err = runtime
                .block_on(store.durable(Duration::from_secs(2)))
                .unwrap_err();
            assert!(err.to_string().contains("full"), "{err}");
            std::fs::remove_file(&filler).unwrap();
            runtime
                .block_on(store.durable(Duration::from_secs(30)))
                .expect("written once there is room");
        });
        if !checked {
            eprintln!("SKIPPED: mounting a small tmpfs needs root");
        }
    }
}
