//! The SQLite engine: one thread with a connection of its own to the database file, which
//! runs the statements of the message path (the journal insert, the room reads a reply
//! needs, `record_handled`, the delivered mark) as prepared statements, in batches.
//!
//! Why (issue 18): sqlx's SQLite driver also runs a connection on a thread of its own, but
//! every statement is a round trip to it (a pool acquire, a command over a channel, each
//! row back over another, a wake-up at each end), and the message path made five or more.
//! Here one call is one closure sent to the thread, whatever it runs. The thread takes
//! everything queued when it wakes (never waiting for more: a lone call is a batch of one),
//! runs it in one transaction with a savepoint per call (a failing call rolls back alone),
//! commits, and only then answers each caller: nobody hears of a write that could still be
//! rolled back, and the commit's cost (its WAL write; with `synchronous = NORMAL` the fsync
//! comes at checkpoints, as on the sqlx connection) is paid once per batch.
//!
//! Every SQLite store has one, and it is the only writer of the message path there
//! (`writer` serves Postgres alone); an in-memory database, which exists for one connection
//! only, is refused by `Store::connect` rather than written some other way. The sqlx pool
//! keeps the schema (migrations) and the cold paths. Both connections write the same WAL file, so a write here may wait for one there
//! (the spend ledger, a summary): SQLite's own busy handler sleeps 1 ms and more between
//! tries, which would show in every such reply, so this connection's handler retries after
//! a few microseconds, for up to `SQLITE_BUSY_TIMEOUT` in all.
//!
//! **A lone call runs where it is made (issue 48).** Handing a call to the thread and its
//! answer back costs two wake-ups (the thread's, then the waiting worker's): most of a quiet
//! room's context switches. So a call that finds nothing queued and the connection free runs
//! on its caller's thread, as a batch of one (`Engine::run_here`): the same transaction, and
//! the answer only after the commit, without the hand-off. Calls that meet (one is running,
//! some are queued, or more than one other is pending) queue for the thread, which batches
//! them as before, and while anything is queued every new call queues too, so a busy engine
//! keeps its batches and nothing is overtaken. A lone call never waits on a tokio worker: if
//! the other connection holds the write lock it queues instead, and the last step of the
//! WAL's restart (a checkpoint, `wal_upkeep`) is left to the thread, woken for it with an
//! empty call.
//!
//! rusqlite (0.39, the release built on the same libsqlite3-sys as sqlx 0.9, so one SQLite
//! library serves both) is the binding: the prepared-statement cache and typed rows without
//! unsafe code of ours. The one exception is the VFS the connection opens the file through
//! (`wal_vfs`: a commit's WAL frames in one write), which is SQLite's C interface.

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use troupe_connectors::{AgentId, RoomKey};

use super::readers::Readers;
use super::sqlite_tx::{commit, exec};
use super::wal_upkeep::{Checkpoints, Restart, WAL_KEEP_BYTES};
use super::writer::{
    HandledReq, JournalReq, rollup_add, upsert_room_conflict, upsert_user_conflict,
};
use super::{
    JournalId, JournalInsert, JournalState, MemoryMessage, OutboxId, RecordedReply, Result,
    SQLITE_BUSY_TIMEOUT, StorageError,
};

/// Other calls pending, at most, for a read to run beside them on a reader (`Engine::read`):
/// a quiet room's turn meets its memory upkeep and the spend ledger; more is load.
const READ_BESIDE: usize = 2;
/// Calls taken into one transaction, at most.
const MAX_BATCH: usize = 512;
/// Calls waiting for the thread before callers wait to queue (backpressure).
const QUEUE: usize = 4096;
/// Prepared statements kept: the message path uses about fifteen.
const STATEMENTS: usize = 64;

/// What the thread runs: a call's work, given the connection inside the batch's
/// transaction (or why there is none), which returns whether it succeeded (its savepoint is
/// kept or rolled back) and how to answer its caller once the batch is committed (with the
/// commit's error, if it failed).
type Job = Box<dyn FnOnce(std::result::Result<&Connection, &str>) -> (bool, Answer) + Send>;
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

/// The engine's connection, and where its WAL's restart stands (`wal_upkeep`). Behind a
/// lock: the thread and a lone call's caller take turns with it.
struct Writer {
    conn: Connection,
    restart: Restart,
}

/// The queue to the engine's thread, and its connection; the thread ends when the last
/// clone is dropped.
#[derive(Clone)]
pub(super) struct Engine {
    queue: mpsc::Sender<Job>,
    writer: Arc<Mutex<Writer>>,
    closed: Arc<AtomicBool>,
    /// Calls made and not yet answered, wherever they run (see `run_here`).
    pending: Arc<AtomicUsize>,
    /// Whether a lone call may run on its caller's thread: off only in tests of batches.
    inline: bool,
    /// The connections a read takes beside a few other calls (`read`).
    readers: Arc<Readers>,
}

/// Counts a call as pending while it lives (an abandoned call's future is dropped too).
struct Pending<'a>(&'a AtomicUsize);

/// A call started (`Engine::start`): run on its caller's thread already, or given back
/// with its pending count, to run elsewhere.
enum Started<'a, T, F> {
    Ran(Result<T>),
    /// The work, its pending guard, and how many other calls were pending when it started.
    Back(F, Pending<'a>, usize),
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The thread is gone, or the store was closed: as good as a closed pool.
fn gone() -> StorageError {
    StorageError::Database(sqlx::Error::PoolClosed)
}

impl Engine {
    /// Opens the database at `path` (migrated already, by the sqlx pool) and starts the thread.
    pub fn open(path: &Path, checkpoints: Arc<Checkpoints>) -> Result<Engine> {
        // Through `troupe-wal`: a commit's WAL frames are one write, not two a frame.
        super::wal_vfs::register().map_err(StorageError::Sqlite)?;
        let conn = Connection::open_with_flags_and_vfs(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            super::wal_vfs::NAME,
        )?;
        // The same settings as the sqlx connection (storage::connect_sqlite).
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_handler(Some(busy))?;
        // Checkpoints (copying the WAL into the database file, and its fsync) are not this
        // thread's to run: they would stall every batch behind them. `wal_upkeep` runs them on
        // the sqlx connection instead; this thread only copies the few frames those left, now
        // and then, so that the WAL can start over.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // After a burst the WAL is cut back to this size when it restarts (`wal_upkeep`).
        conn.pragma_update(None, "journal_size_limit", WAL_KEEP_BYTES)?;
        conn.wal_hook(Some(note_wal_frames));
        // The query planner's stability guarantee: a statement is planned once, whatever is
        // bound to it later. Without it SQLite (3.51) re-prepares a statement each time a
        // new value is bound to a parameter that could change its plan, and a bound `LIMIT`
        // is one: the room's recent messages were compiled again for every reply (3% of a
        // quiet room's CPU). Our statements are fixed and the database has no statistics
        // (`ANALYZE` never runs), so no plan is lost.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        conn.set_prepared_statement_cache_capacity(STATEMENTS);
        let (queue, jobs) = mpsc::channel(QUEUE);
        let writer = Arc::new(Mutex::new(Writer {
            conn,
            restart: Restart::new(checkpoints),
        }));
        let thread_writer = writer.clone();
        std::thread::Builder::new()
            .name("troupe-sqlite".into())
            .spawn(move || run(&thread_writer, jobs))
            .map_err(|e| StorageError::Sqlite(format!("cannot start the SQLite thread: {e}")))?;
        Ok(Engine {
            queue,
            writer,
            closed: Arc::new(AtomicBool::new(false)),
            pending: Arc::new(AtomicUsize::new(0)),
            inline: true,
            readers: Arc::new(Readers::new(path)),
        })
    }

    /// The same engine, with every call queued for the thread (tests of batches).
    #[cfg(test)]
    pub(super) fn queued(mut self) -> Engine {
        self.inline = false;
        self
    }

    /// Refuses every later call (`Store::close`).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Runs `work` on the engine's thread, in the transaction of its batch; its result comes
    /// back once that transaction is committed (or rolled back, then as an error).
    pub async fn call<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        match self.start(work)? {
            Started::Ran(result) => result,
            Started::Back(work, _pending, _) => self.enqueue(work).await,
        }
    }

    /// How every call starts: refused once the store is closed, counted as pending while
    /// it lives (the guard it comes back with), and run here when `run_here` takes it.
    fn start<T, F>(&self, work: F) -> Result<Started<'_, T, F>>
    where
        F: FnOnce(&Connection) -> Result<T>,
    {
        if self.closed.load(Ordering::Relaxed) {
            return Err(gone());
        }
        let others = self.pending.fetch_add(1, Ordering::Relaxed);
        let pending = Pending(&self.pending);
        Ok(match self.run_here(work, others) {
            Ok(result) => Started::Ran(result),
            Err(work) => Started::Back(work, pending, others),
        })
    }

    /// Queues `work` for the thread, and waits for its batch's commit.
    async fn enqueue<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = match conn {
                Ok(conn) => work(conn),
                Err(why) => Err(StorageError::Sqlite(format!(
                    "cannot begin a transaction: {why}"
                ))),
            };
            let ok = result.is_ok();
            let answer: Answer = Box::new(move |commit_error| {
                let result = match (commit_error, result) {
                    (Some(e), Ok(_)) => Err(StorageError::Sqlite(format!("commit failed: {e}"))),
                    (_, result) => result,
                };
                let _ = tx.send(result);
            });
            (ok, answer)
        });
        self.queue.send(job).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Runs `work`, which only reads, and returns what it read:
    /// - on a quiet engine, as a lone call on the writer's connection, whose cache holds
    ///   what it just wrote;
    /// - when it meets a few other calls (`READ_BESIDE`) and nothing is queued, in a read
    ///   transaction on a connection of its own, on this thread, beside them
    ///   (`storage::readers`): not a hand-off to the thread and back, two wake-ups;
    /// - otherwise in the batch of the calls queued: a busy engine batches cheaply, and a
    ///   reader would read every page again (its cache starts over after each commit), more
    ///   CPU on cores that are all busy (0.86x the throughput at 1,000 rooms when every read
    ///   that met a busy engine went to a reader).
    pub async fn read<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        match self.start(work)? {
            Started::Ran(result) => result,
            Started::Back(work, _pending, others)
                if others <= READ_BESIDE && self.queue.capacity() == QUEUE =>
            {
                self.readers.read(work)
            }
            Started::Back(work, _pending, _) => self.enqueue(work).await,
        }
    }

    /// Runs `work` on this thread as a batch of one (see the module doc), or gives it back
    /// for the queue: when calls are queued, the connection is busy, the other connection
    /// holds the write lock, or more than one other call is pending (`others`: made and not
    /// answered, wherever they run). One is a quiet room's turn beside its own memory upkeep;
    /// more is concurrency, where a worker blocked in SQLite holds up the tasks behind it
    /// and batches on the thread did better (10 rooms at once: 0.78× the throughput of
    /// queuing every call when any call that found the connection free ran here; about the
    /// same with this rule: docs/benchmarks.md, "Issue 48").
    fn run_here<T, F>(&self, work: F, others: usize) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&Connection) -> Result<T>,
    {
        if !self.inline || others > 1 || self.queue.capacity() < QUEUE {
            return Err(work);
        }
        let mut writer = match self.writer.try_lock() {
            Ok(writer) => writer,
            Err(TryLockError::WouldBlock) => return Err(work),
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        ON_CALLERS_THREAD.set(true);
        let began = exec(&writer.conn, "BEGIN IMMEDIATE");
        ON_CALLERS_THREAD.set(false);
        if began.is_err() {
            return Err(work);
        }
        let result = match unwound(|| work(&writer.conn)) {
            Some(Ok(value)) => match commit(&writer.conn) {
                None => Ok(value),
                Some(e) => Err(StorageError::Sqlite(format!("commit failed: {e}"))),
            },
            failed => {
                let _ = exec(&writer.conn, "ROLLBACK");
                failed.unwrap_or_else(|| Err(gone()))
            }
        };
        note_commit(&mut writer);
        if !writer.restart.woken && writer.restart.due() {
            // Step 2 of the WAL's restart is the thread's: it runs it after this empty call's
            // batch. A full queue means it is busy, and it looks after every batch anyway.
            writer.restart.woken = self
                .queue
                .try_send(Box::new(|_| (true, Box::new(|_| {}))))
                .is_ok();
        }
        Ok(result)
    }
}

/// The busy handler: wait a little and try again, for up to `SQLITE_BUSY_TIMEOUT`. The
/// first tries come after microseconds (the other connection's transactions are short).
/// A lone call on its caller's thread does not wait: it queues for the engine's instead.
fn busy(count: i32) -> bool {
    const QUICK: i32 = 50;
    let spent = if count < QUICK {
        Duration::from_micros(20) * count as u32
    } else {
        Duration::from_millis(1) + Duration::from_micros(500) * (count - QUICK) as u32
    };
    if spent >= SQLITE_BUSY_TIMEOUT || ON_CALLERS_THREAD.get() {
        return false;
    }
    std::thread::sleep(if count < QUICK {
        Duration::from_micros(20)
    } else {
        Duration::from_micros(500)
    });
    true
}

fn run(writer: &Mutex<Writer>, mut jobs: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = jobs.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut writer = lock(writer);
        run_batch(&writer.conn, &mut batch);
        note_commit(&mut writer);
        let Writer { conn, restart } = &mut *writer;
        restart.between_batches(conn);
    }
}

fn lock(writer: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    writer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

thread_local! {
    /// The frames in the WAL after a commit on this thread (`note_wal_frames`), until
    /// `note_commit` takes them; -1 when none was written since.
    static WAL_FRAMES: std::cell::Cell<i32> = const { std::cell::Cell::new(-1) };
    /// Set while a lone call begins its transaction on its caller's thread (`busy`).
    static ON_CALLERS_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn note_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// Takes the frames the commit just made on this thread wrote (the hook runs on the
/// committing thread, and nothing runs between a commit and this).
fn note_commit(writer: &mut Writer) {
    writer.restart.note_commit(WAL_FRAMES.replace(-1));
}

/// Runs the jobs in one transaction and answers them after it.
fn run_batch(conn: &Connection, batch: &mut Vec<Job>) {
    let started = Instant::now();
    let size = batch.len();
    let mut answers: Vec<Answer> = Vec::with_capacity(size);
    let began = exec(conn, "BEGIN IMMEDIATE").map_err(|e| e.to_string());
    for job in batch.drain(..) {
        let Err(why) = &began else {
            answers.extend(run_job(conn, job));
            continue;
        };
        // No transaction (the database stayed locked, say): every call fails with why.
        answers.push(job(Err(why)).1);
    }
    let error = match began {
        Ok(()) => commit(conn),
        Err(why) => Some(why),
    };
    for answer in answers {
        answer(error.as_deref());
    }
    tracing::trace!(
        size,
        micros = started.elapsed().as_micros() as u64,
        "sqlite batch"
    );
}

/// Runs one job under a savepoint, rolled back when it fails. A job that panics is rolled
/// back too, and its caller hears `gone` (its answer is dropped); the batch goes on.
fn run_job(conn: &Connection, job: Job) -> Option<Answer> {
    if let Err(e) = exec(conn, "SAVEPOINT call") {
        return Some(job(Err(&e.to_string())).1);
    }
    let (ok, answer) = match unwound(|| job(Ok(conn))) {
        Some((ok, answer)) => (ok, Some(answer)),
        None => (false, None),
    };
    if !ok {
        let _ = exec(conn, "ROLLBACK TO call");
    }
    let _ = exec(conn, "RELEASE call");
    answer
}

/// Runs a call's work, `None` if it panicked (logged; its caller rolls it back).
fn unwound<T>(work: impl FnOnce() -> T) -> Option<T> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    if ran.is_err() {
        tracing::error!("a storage call panicked; it is rolled back");
    }
    ran.ok()
}

// The message path's statements. Each is a function of the connection, so that a batch
// runs them in its transaction; the SQL is the Postgres path's (storage::writer, memory,
// rooms, outbox) in SQLite's dialect, row by row: within one transaction a prepared
// single-row statement costs about what a row of a multi-row one does.

/// `journal_insert`: the entry, or the one already there under its key.
pub(super) fn journal_insert(conn: &Connection, r: &JournalReq) -> Result<JournalInsert> {
    let inserted: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO journal
                 (agent_id, platform, platform_message_id, room, caller, inbound, state,
                  attempts, created_at_ms, updated_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 1, ?7, ?7)
             ON CONFLICT (agent_id, platform, room, caller, platform_message_id) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                r.agent_id.as_str(),
                r.room.platform.as_str(),
                r.message_id,
                r.room.to_string(),
                r.caller,
                r.inbound_json,
                r.now
            ],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(id) = inserted {
        return Ok(JournalInsert::Inserted(JournalId(id)));
    }
    let (id, state): (i64, String) = conn
        .prepare_cached(
            "SELECT id, state FROM journal
             WHERE agent_id = ?1 AND platform = ?2 AND room = ?3 AND caller = ?4
               AND platform_message_id = ?5",
        )?
        .query_row(
            params![
                r.agent_id.as_str(),
                r.room.platform.as_str(),
                r.room.to_string(),
                r.caller,
                r.message_id
            ],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?
        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
    Ok(JournalInsert::Duplicate(
        JournalId(id),
        JournalState::parse(id, &state)?,
    ))
}

/// `record_handled`: marks the entry done and writes the room, the user, both messages and
/// the outbox row; or, when the entry was done already, returns its first reply unclaimed.
pub(super) fn record_handled(conn: &Connection, r: &HandledReq) -> Result<Option<RecordedReply>> {
    let marked = conn
        .prepare_cached(
            "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = ?2
             WHERE id = ?1 AND state <> 'done'",
        )?
        .execute(params![r.journal_id, r.now])?;
    if marked == 0 {
        return first_reply(conn, r.journal_id);
    }
    let room = r.room_key.to_string();
    let platform = r.room_key.platform.as_str();
    conn.prepare_cached(concat!(
        "INSERT INTO rooms (agent_id, room, platform, name, last_active_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        upsert_room_conflict!()
    ))?
    .execute(params![
        r.agent_id.as_str(),
        room,
        platform,
        r.room_name,
        r.last_active
    ])?;
    for m in r.memories.iter().filter(|m| !m.from_agent) {
        conn.prepare_cached(concat!(
            "INSERT INTO users (platform, user_id, name, last_seen_ms) VALUES (?1, ?2, ?3, ?4)",
            upsert_user_conflict!()
        ))?
        .execute(params![
            platform,
            m.author_id,
            m.author_name,
            m.created_at_ms
        ])?;
    }
    for m in &r.memories {
        conn.prepare_cached(
            "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name, text,
                 from_agent, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            r.agent_id.as_str(),
            room,
            r.journal_id,
            m.author_id,
            m.author_name,
            m.text,
            m.from_agent,
            m.created_at_ms
        ])?;
    }
    insert_reply(conn, r)
}

/// The first reply of a journal entry done earlier, unclaimed; `RowNotFound` when there is
/// no such entry.
fn first_reply(conn: &Connection, journal_id: i64) -> Result<Option<RecordedReply>> {
    let first: Option<Option<i64>> = conn
        .prepare_cached(
            "SELECT (SELECT MIN(o.id) FROM outbox o WHERE o.journal_id = j.id)
             FROM journal j WHERE j.id = ?1",
        )?
        .query_row(params![journal_id], |row| row.get(0))
        .optional()?;
    let first = first.ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
    Ok(first.map(|id| RecordedReply::Queued(OutboxId(id))))
}

/// `record_handled`'s outbox row, when there is a reply, started as the request says.
fn insert_reply(conn: &Connection, r: &HandledReq) -> Result<Option<RecordedReply>> {
    let Some((outbound, json)) = &r.reply else {
        return Ok(None);
    };
    let delivered = r.delivered();
    let id: i64 = conn
        .prepare_cached(
            "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts, not_before_ms,
                 claimed_until_ms, platform_ids, delivered_at_ms, created_at_ms, updated_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?8, ?9, ?9) RETURNING id",
        )?
        .query_row(
            params![
                r.agent_id.as_str(),
                r.journal_id,
                json,
                r.outbox_state(),
                r.outbox_attempts(),
                r.claimed_until(),
                delivered.map(|(ids, _)| ids),
                delivered.map(|(_, at)| at),
                r.now
            ],
            |row| row.get(0),
        )?;
    Ok(Some(r.recorded(id, outbound)))
}

/// Runs these requests as the engine runs concurrent calls (queued together, so sharing
/// batches, each under its savepoint, in order), and returns what each caller hears: the
/// SQLite counterpart of `writer::write_kinds`, for the tests that check a batch's
/// guarantees on both backends.
#[cfg(test)]
pub(super) async fn write_kinds(
    engine: &Engine,
    journal: Vec<JournalReq>,
    handled: Vec<HandledReq>,
    delivered: Vec<super::writer::DeliveredReq>,
) -> super::writer::Together {
    use futures::future::join_all;
    let journal = journal
        .into_iter()
        .map(|r| engine.call(move |conn| journal_insert(conn, &r)));
    let handled = handled
        .into_iter()
        .map(|r| engine.call(move |conn| record_handled(conn, &r)));
    let delivered = delivered.into_iter().map(|r| {
        engine.call(move |conn| outbox_delivered(conn, r.outbox_id, &r.platform_ids_json, r.now))
    });
    // Joined together, so that every call is queued before the first answer is awaited.
    let (journal, handled, delivered) =
        futures::join!(join_all(journal), join_all(handled), join_all(delivered));
    super::writer::Together {
        journal,
        handled,
        delivered,
    }
}

/// Newest first, reversed by the caller (cheaper than SQLite's sorter a subquery needed).
const RECENT_MESSAGES: &str =
    "SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
     FROM messages WHERE agent_id = ?1 AND room = ?2
     ORDER BY id DESC LIMIT ?3";

/// `recent_messages`: the last `limit` messages of the room, oldest first (every turn's).
pub(super) fn recent_messages(
    conn: &Connection,
    agent_id: &AgentId,
    room: &RoomKey,
    limit: i64,
) -> Result<Vec<MemoryMessage>> {
    let mut stmt = conn.prepare_cached(RECENT_MESSAGES)?;
    let rows = stmt.query(params![agent_id.as_str(), room.to_string(), limit.max(0)])?;
    let mut out = memory_messages(rows, Some(room))?;
    out.reverse();
    Ok(out)
}

/// The rows of a `messages` read (`id, room, author_id, author_name, text, from_agent,
/// created_at_ms`), in the order read. A read of one room names it (`room`), and each row
/// takes it instead of parsing the key back from its text.
pub(super) fn memory_messages(
    mut rows: rusqlite::Rows<'_>,
    room: Option<&RoomKey>,
) -> Result<Vec<MemoryMessage>> {
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        let room = match room {
            Some(room) => room.clone(),
            None => row
                .get::<_, String>(1)?
                .parse()
                .map_err(|e| StorageError::Corrupt(format!("messages row {id}: room: {e}")))?,
        };
        out.push(MemoryMessage {
            id,
            room,
            author_id: row.get(2)?,
            author_name: row.get(3)?,
            text: row.get(4)?,
            from_agent: row.get(5)?,
            created_at_ms: row.get(6)?,
        });
    }
    Ok(out)
}

/// `outbox_delivered`.
pub(super) fn outbox_delivered(
    conn: &Connection,
    id: i64,
    platform_ids_json: &str,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE outbox
         SET state = 'delivered', platform_ids = ?2, claimed_until_ms = NULL,
             last_error = NULL, delivered_at_ms = ?3, updated_at_ms = ?3
         WHERE id = ?1",
    )?
    .execute(params![id, platform_ids_json, now])?;
    Ok(())
}

/// One rollup row's key (agent, day, scope, scope key) and its increments (calls, prompt,
/// completion, cached, cost).
type Rollup = (
    (troupe_connectors::AgentId, i64, &'static str, String),
    [i64; 5],
);

/// `usage_record_batch`: the raw records and the rollup increments (summed per row already).
pub(super) fn usage_record_batch(
    conn: &Connection,
    batch: &[super::NewUsage],
    rollups: &[Rollup],
) -> Result<()> {
    let mut record = conn.prepare_cached(
        "INSERT INTO usage_records (agent_id, room, user_key, provider, model, purpose,
            prompt_tokens, completion_tokens, cached_tokens, estimated, cost_micros, day,
            created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for u in batch {
        record.execute(params![
            u.agent_id.as_str(),
            u.room_key
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            u.user_key.as_deref().unwrap_or_default(),
            u.provider,
            u.model,
            u.purpose,
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.estimated,
            u.cost_micros,
            u.day,
            u.at_ms
        ])?;
    }
    let mut rollup = conn.prepare_cached(concat!(
        "INSERT INTO usage_daily (agent_id, day, scope, scope_key, calls, prompt_tokens,
            completion_tokens, cached_tokens, cost_micros) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        rollup_add!()
    ))?;
    for ((agent, day, scope, key), [calls, prompt, completion, cached, cost]) in rollups {
        rollup.execute(params![
            agent.as_str(),
            day,
            scope,
            key,
            calls,
            prompt,
            completion,
            cached,
            cost
        ])?;
    }
    Ok(())
}

/// `room_summary`'s text alone (the prompt's part of it).
pub(super) fn room_summary_text(
    conn: &Connection,
    agent_id: &AgentId,
    room: &RoomKey,
) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT summary FROM room_summaries WHERE agent_id = ?1 AND room = ?2")?
        .query_row(params![agent_id.as_str(), room.to_string()], |row| {
            row.get(0)
        })
        .optional()?)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
