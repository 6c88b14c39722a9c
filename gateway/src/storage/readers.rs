//! Read connections beside the SQLite engine's writer (issue 48).
//!
//! A read that met another engine call (a quiet room's turn beside its memory upkeep, or
//! the spend ledger) was handed to the engine's thread and its answer back: two wake-ups,
//! for a read that needs no write lock. SQLite in WAL mode lets readers run beside a writer,
//! each on a snapshot of what was committed when its read began, so such a read runs here
//! instead: on its caller's thread, on a connection of its own, in a read transaction
//! (`BEGIN`, never a write lock). What a caller wrote, it reads: the engine answers a write
//! only after its commit, and a read begun after that sees it.
//!
//! The rest stays with the engine (`Engine::read`): a lone read runs on the writer's
//! connection, whose page cache holds the pages it just wrote, and a read that finds calls
//! queued joins their batch. A reader's cache starts over whenever the WAL changed since its
//! last read, which under writes is every time: on a saturated engine every page read again
//! cost more CPU than the batch did.
//!
//! Connections are opened when a read finds none idle (as many as reads run at once: the
//! tokio workers) and kept, at most `IDLE`. Each is read-only (`query_only`), so a read that
//! tried to write would fail rather than race the engine.

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::sqlite_tx::{commit, exec};
use super::{Result, StorageError};

/// Idle connections kept for the next reads.
const IDLE: usize = 4;
/// A connection's page cache, in KiB: a turn's reads touch a few dozen pages.
const CACHE_KIB: i64 = 256;
/// Prepared statements kept per connection: the reads of the message path are a handful.
const STATEMENTS: usize = 16;

/// The database's read connections.
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub(super) fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `work` in a read transaction on an idle connection (opened if none is), on this
    /// thread. The snapshot is the one committed when its first statement runs.
    pub(super) fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let taken = self.lock().pop();
        let conn = match taken {
            Some(conn) => conn,
            None => self.open()?,
        };
        let result = in_read_transaction(&conn, work);
        // One left inside a transaction (its end failed) would fail every later read.
        let mut idle = self.lock();
        if idle.len() < IDLE && conn.is_autocommit() {
            idle.push(conn);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn open(&self) -> Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "query_only", true)?;
        // A small page cache: under writes a reader's starts over at each read anyway (the
        // WAL changed since the last), so the default 2 MB a connection would only hold
        // pages that are never read again.
        conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
        // As on the writer (`Engine::open`): statements planned once, and a busy database
        // (a WAL being recovered or restarted, both brief) waited for, not failed at once.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        conn.set_prepared_statement_cache_capacity(STATEMENTS);
        conn.busy_timeout(super::SQLITE_BUSY_TIMEOUT)?;
        Ok(conn)
    }
}

/// `work` between `BEGIN` and `COMMIT`, so that its statements share one snapshot; rolled
/// back when it fails, as when its commit does (the engine's `commit`).
fn in_read_transaction<T>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    exec(conn, "BEGIN")?;
    let result = work(conn);
    if result.is_err() {
        let _ = exec(conn, "ROLLBACK");
        return result;
    }
    match commit(conn) {
        None => result,
        Some(why) => Err(StorageError::Sqlite(format!("commit failed: {why}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::sqlite_store;
    use super::*;

    fn rooms(conn: &Connection) -> Result<i64> {
        Ok(conn.query_row("SELECT COUNT(*) FROM rooms", [], |row| row.get(0))?)
    }

    fn add_room(conn: &Connection, room: &str) -> Result<()> {
        conn.execute(
            "INSERT INTO rooms (agent_id, room, platform, name, last_active_ms)
             VALUES ('a', ?1, 'web', NULL, 1)",
            [room],
        )?;
        Ok(())
    }

    #[tokio::test]
    async fn a_read_sees_what_the_engine_committed_and_may_not_write() {
        let (dir, store) = sqlite_store().await;
        let engine = store.engine().expect("a SQLite store has an engine");
        let readers = Readers::new(&dir.path().join("troupe.db"));
        assert_eq!(readers.read(rooms).unwrap(), 0);
        engine.call(|conn| add_room(conn, "web:1")).await.unwrap();
        // The idle connection kept from the first read, on a newer snapshot.
        assert_eq!(readers.read(rooms).unwrap(), 1);
        let refused = readers.read(|conn| add_room(conn, "web:2"));
        assert!(refused.is_err(), "a reader wrote: {refused:?}");
        // The failed read was rolled back, and its connection reads on.
        assert_eq!(readers.read(rooms).unwrap(), 1);
        assert_eq!(engine.read(rooms).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_read_that_meets_an_open_write_runs_beside_it_on_the_last_commit() {
        let (_dir, store) = sqlite_store().await;
        let engine = store
            .engine()
            .expect("a SQLite store has an engine")
            .clone();
        let inner = engine.clone();
        // Inside a call the engine's connection is taken and its transaction open, with a
        // row written and not committed: the read must neither wait for it nor see it.
        let (during, written) = engine
            .call(move |conn| {
                add_room(conn, "web:1")?;
                let during = futures::executor::block_on(inner.read(rooms))?;
                Ok((during, rooms(conn)?))
            })
            .await
            .unwrap();
        assert_eq!((during, written), (0, 1));
        assert_eq!(engine.read(rooms).await.unwrap(), 1);
    }
}
