//! The writer: one task per `Store` that owns the hot writes, `journal_insert`,
//! `record_handled` and `outbox_delivered`, and commits whatever callers have queued as
//! one batch.
//!
//! Why: a statement costs little SQL work but a round trip (to sqlx-sqlite's worker thread,
//! or over the network to Postgres). Many agents writing at once each paid a transaction of
//! their own; here the requests queued while the previous batch was written share one
//! transaction and multi-row statements. A batch is whatever is waiting when the writer
//! is free (never a timer), so a lone caller is a batch of one and waits for nobody.
//!
//! What it owns:
//! - batching: at most `MAX_BATCH` requests, which keeps every statement far below the
//!   bind-parameter limits (32766 for SQLite, 65535 for Postgres);
//! - the guarantees of the single calls, inside a batch too: a duplicate journal insert is
//!   `Duplicate`, even of a row inserted by the same batch; of two `record_handled` for one
//!   journal entry the first writes and the other gets its outbox id, as if run one after
//!   the other; an unknown journal id fails only its own request;
//! - isolation: if a batch fails, its requests are written again one by one, so one bad
//!   request cannot fail the others; unless the database cannot be reached at all, when
//!   they all fail at once (one by one, each would wait out its own pool timeout).
//!
//! On Postgres, up to `PG_BATCHES_IN_FLIGHT` batches are written at once, so that they
//! share the wait for the WAL flush; on SQLite one after the other. A Postgres batch
//! writes its kinds in one transaction, so a message's three writes (its journal entry,
//! its record, its reply's delivered mark) ride on three batches' commits shared with
//! every other message in them, not on commits of their own; if that transaction fails,
//! each kind is written apart, isolated as above.
//!
//! On SQLite, statements that must run together are sent as one multi-statement script
//! (sqlx binds positional `?` parameters in order across the statements of one query), so `record_handled` costs two
//! round trips whatever the batch size: `BEGIN IMMEDIATE; UPDATE journal … RETURNING`, then
//! the inserts and `COMMIT`. Postgres runs the same statements one by one in a transaction.

use super::{
    Backend, JournalId, JournalInsert, JournalState, OutboxEntry, OutboxId, Pool, RecordedReply,
    Result, StorageError,
};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};
use troupe_connectors::{AgentId, Outbound, Platform, RoomKey};

/// Later sightings win; a re-driven old message must not roll a name or a time back.
pub(super) const UPSERT_USER_CONFLICT: &str = " ON CONFLICT (platform, user_id) DO UPDATE SET
         name = CASE WHEN excluded.last_seen_ms >= users.last_seen_ms
                     THEN excluded.name ELSE users.name END,
         last_seen_ms = CASE WHEN excluded.last_seen_ms > users.last_seen_ms
                             THEN excluded.last_seen_ms ELSE users.last_seen_ms END";

/// `CASE` rather than `max()`/`GREATEST()`, which is where the two dialects part.
pub(super) const UPSERT_ROOM_CONFLICT: &str = " ON CONFLICT (agent_id, room) DO UPDATE SET
         name = COALESCE(excluded.name, rooms.name),
         last_active_ms = CASE WHEN excluded.last_active_ms > rooms.last_active_ms
                               THEN excluded.last_active_ms ELSE rooms.last_active_ms END";

/// Requests per batch.
const MAX_BATCH: usize = 256;
/// Postgres batches written at once. A commit waits for its WAL flush (10–20 ms on a
/// loaded disk), and one writer waiting for each flush in turn capped a Postgres store at
/// `MAX_BATCH` requests per two flushes; overlapping batches share the flushes (Postgres
/// writes the WAL of every transaction committing at that moment at once). It is safe
/// because Postgres orders what SQLite needed a single writer for: a journal insert
/// that conflicts waits for the other inserter's commit, and the `UPDATE journal … WHERE
/// state <> 'done'` that opens a `record_handled` batch waits for another one holding the
/// row, then sees it done. Two batches can deadlock only on rows both write (a user in
/// rooms of both, in other orders); Postgres then fails one of them, whose requests are
/// written again one by one like any failed batch.
const PG_BATCHES_IN_FLIGHT: usize = 4;
/// Longer SQL (a batch of more than a few requests) is prepared for one use, not cached.
const MAX_CACHED_SQL: usize = 2048;
/// Requests waiting for the writer before callers wait to queue (backpressure).
const QUEUE: usize = 1024;

/// A journal insert, owned so it can cross to the writer task.
pub(super) struct JournalReq {
    pub agent_id: AgentId,
    pub message_id: String,
    pub room: RoomKey,
    /// See `journal::dedupe_caller`.
    pub caller: String,
    pub inbound_json: String,
    pub now: i64,
}

pub(super) struct MemoryReq {
    pub author_id: String,
    pub author_name: String,
    pub text: String,
    pub from_agent: bool,
    pub created_at_ms: i64,
}

/// A `record_handled`, owned.
pub(super) struct HandledReq {
    pub journal_id: i64,
    pub agent_id: AgentId,
    pub room_key: RoomKey,
    pub room_name: Option<String>,
    pub last_active: i64,
    pub memories: Vec<MemoryReq>,
    /// The reply, and its JSON for the outbox.
    pub reply: Option<(Outbound, String)>,
    /// How the reply's outbox row starts.
    pub start: StartReq,
    pub now: i64,
}

/// `ReplyStart`, owned.
pub(super) enum StartReq {
    Pending,
    /// Claimed by the caller for this many milliseconds (attempts = 1).
    Claimed(i64),
    /// Delivered already, with these platform ids (a JSON array; attempts = 1).
    Delivered(String),
}

impl HandledReq {
    /// The outbox row's `state`.
    pub(super) fn outbox_state(&self) -> &'static str {
        match self.start {
            StartReq::Delivered(_) => "delivered",
            StartReq::Pending | StartReq::Claimed(_) => "pending",
        }
    }

    /// The outbox row's `attempts`: one for a reply claimed to be sent now, or sent.
    pub(super) fn outbox_attempts(&self) -> i64 {
        i64::from(!matches!(self.start, StartReq::Pending))
    }

    /// The outbox row's `claimed_until_ms`.
    pub(super) fn claimed_until(&self) -> Option<i64> {
        match self.start {
            StartReq::Claimed(lease) => Some(self.now + lease),
            StartReq::Pending | StartReq::Delivered(_) => None,
        }
    }

    /// The outbox row's `platform_ids` (JSON) and `delivered_at_ms`.
    pub(super) fn delivered(&self) -> Option<(&str, i64)> {
        match &self.start {
            StartReq::Delivered(ids) => Some((ids, self.now)),
            StartReq::Pending | StartReq::Claimed(_) => None,
        }
    }

    /// What the caller hears of the reply this request inserted as outbox row `id`.
    pub(super) fn recorded(&self, id: i64, outbound: &Outbound) -> RecordedReply {
        match self.start {
            StartReq::Claimed(_) => RecordedReply::Claimed(OutboxEntry {
                id: OutboxId(id),
                agent_id: self.agent_id.clone(),
                journal_id: Some(JournalId(self.journal_id)),
                outbound: outbound.clone(),
                attempts: 1,
            }),
            StartReq::Delivered(_) => RecordedReply::Delivered(OutboxId(id)),
            StartReq::Pending => RecordedReply::Queued(OutboxId(id)),
        }
    }
}

type HandledResult = Result<Option<RecordedReply>>;

/// A reply marked delivered (`outbox_delivered`), owned.
pub(super) struct DeliveredReq {
    pub outbox_id: i64,
    /// The platform's message ids, as a JSON array.
    pub platform_ids_json: String,
    pub now: i64,
}

enum Request {
    Journal(JournalReq, oneshot::Sender<Result<JournalInsert>>),
    Handled(Box<HandledReq>, oneshot::Sender<HandledResult>),
    Delivered(DeliveredReq, oneshot::Sender<Result<()>>),
}

/// The queue to the writer task; the task ends when the last `Store` clone is dropped.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Request>,
}

impl Writer {
    pub fn spawn(pool: Pool) -> Writer {
        let (queue, requests) = mpsc::channel(QUEUE);
        tokio::spawn(run(pool, requests));
        Writer { queue }
    }

    pub async fn journal_insert(&self, req: JournalReq) -> Result<JournalInsert> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Journal(req, tx)).await?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn record_handled(&self, req: HandledReq) -> HandledResult {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Handled(Box::new(req), tx)).await?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn outbox_delivered(&self, req: DeliveredReq) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Delivered(req, tx)).await?;
        rx.await.map_err(|_| gone())?
    }

    async fn send(&self, request: Request) -> Result<()> {
        self.queue.send(request).await.map_err(|_| gone())
    }
}

/// The writer task is gone (its runtime shut down): the store is as good as closed.
fn gone() -> StorageError {
    StorageError::Database(sqlx::Error::PoolClosed)
}

async fn run(pool: Pool, mut requests: mpsc::Receiver<Request>) {
    // Postgres: batches overlap (see `PG_BATCHES_IN_FLIGHT`); SQLite: one after the other.
    let in_flight = match &pool {
        Pool::Postgres(_) => Some(Arc::new(Semaphore::new(PG_BATCHES_IN_FLIGHT))),
        Pool::Sqlite(_) => None,
    };
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // The slot is taken before the batch: while every slot is busy, requests gather
        // in the queue and the next batch takes them all.
        let slot = match &in_flight {
            Some(slots) => match slots.clone().acquire_owned().await {
                Ok(slot) => Some(slot),
                Err(_) => return,
            },
            None => None,
        };
        if requests.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        match slot {
            None => write(&pool, batch.drain(..)).await,
            Some(slot) => {
                let pool = pool.clone();
                let taken: Vec<Request> = std::mem::take(&mut batch);
                tokio::spawn(async move {
                    write(&pool, taken.into_iter()).await;
                    drop(slot);
                });
            }
        }
    }
}

/// Writes one batch and answers its callers.
async fn write(pool: &Pool, batch: impl Iterator<Item = Request>) {
    let (mut journal, mut journal_tx) = (Vec::new(), Vec::new());
    let (mut handled, mut handled_tx) = (Vec::new(), Vec::new());
    let (mut delivered, mut delivered_tx) = (Vec::new(), Vec::new());
    for request in batch {
        match request {
            Request::Journal(req, tx) => {
                journal.push(req);
                journal_tx.push(tx);
            }
            Request::Handled(req, tx) => {
                handled.push(*req);
                handled_tx.push(tx);
            }
            Request::Delivered(req, tx) => {
                delivered.push(req);
                delivered_tx.push(tx);
            }
        }
    }
    // On Postgres the kinds share one transaction: one commit, so one WAL flush to wait
    // for, where each kind apart cost one. On SQLite a commit is cheap and the writer only
    // serves in-memory databases.
    let kinds = [journal.len(), handled.len(), delivered.len()];
    if let Pool::Postgres(pg) = pool
        && kinds.iter().filter(|n| **n > 0).count() > 1
    {
        match together(pg, &journal, &handled, &delivered).await {
            Ok((j, h, d)) => {
                answer(journal_tx, j);
                answer(handled_tx, h);
                answer(delivered_tx, d);
                return;
            }
            Err(e) if unreachable(&e) => {
                fail_all(journal_tx, &e);
                fail_all(handled_tx, &e);
                fail_all(delivered_tx, &e);
                return;
            }
            // A deadlock with an overlapping batch, or one bad request: each kind is
            // written on its own, and a failing one request by request (`isolate`).
            Err(e) => tracing::debug!(error = %e, "batch failed; writing each kind apart"),
        }
    }
    if !journal.is_empty() {
        answer(
            journal_tx,
            isolate(&journal, |reqs| journal_batch(pool, reqs)).await,
        );
    }
    if !handled.is_empty() {
        answer(
            handled_tx,
            isolate(&handled, |reqs| handled_batch(pool, reqs)).await,
        );
    }
    if !delivered.is_empty() {
        answer(
            delivered_tx,
            isolate(&delivered, |reqs| delivered_batch(pool, reqs)).await,
        );
    }
}

/// Writes one batch made of these requests, as the writer task would, and returns what
/// each caller would hear.
#[cfg(test)]
pub(super) async fn write_kinds(
    pool: &Pool,
    journal: Vec<JournalReq>,
    handled: Vec<HandledReq>,
    delivered: Vec<DeliveredReq>,
) -> Together {
    let mut batch = Vec::new();
    let mut heard = (Vec::new(), Vec::new(), Vec::new());
    for req in journal {
        let (tx, rx) = oneshot::channel();
        batch.push(Request::Journal(req, tx));
        heard.0.push(rx);
    }
    for req in handled {
        let (tx, rx) = oneshot::channel();
        batch.push(Request::Handled(Box::new(req), tx));
        heard.1.push(rx);
    }
    for req in delivered {
        let (tx, rx) = oneshot::channel();
        batch.push(Request::Delivered(req, tx));
        heard.2.push(rx);
    }
    write(pool, batch.into_iter()).await;
    let j = futures::future::join_all(heard.0).await;
    let h = futures::future::join_all(heard.1).await;
    let d = futures::future::join_all(heard.2).await;
    fn unanswered<T>(
        heard: std::result::Result<Result<T>, oneshot::error::RecvError>,
    ) -> Result<T> {
        heard.unwrap_or_else(|_| Err(gone()))
    }
    (
        j.into_iter().map(unanswered).collect(),
        h.into_iter().map(unanswered).collect(),
        d.into_iter().map(unanswered).collect(),
    )
}

/// Answers each caller with its own result.
fn answer<T>(callers: Vec<oneshot::Sender<Result<T>>>, results: Vec<Result<T>>) {
    for (tx, result) in callers.into_iter().zip(results) {
        let _ = tx.send(result);
    }
}

/// Tells every caller of the outage `e`.
fn fail_all<T>(callers: Vec<oneshot::Sender<Result<T>>>, e: &StorageError) {
    for tx in callers {
        let _ = tx.send(Err(same_outage(e)));
    }
}

/// Results of a batch, by kind.
pub(super) type Together = (
    Vec<Result<JournalInsert>>,
    Vec<HandledResult>,
    Vec<Result<()>>,
);

/// Every kind of a Postgres batch in one transaction. The journal inserts come first,
/// then the handled messages, then the delivered marks, in every batch: overlapping
/// batches then take their locks in one order.
async fn together(
    pool: &sqlx::PgPool,
    journal: &[JournalReq],
    handled: &[HandledReq],
    delivered: &[DeliveredReq],
) -> Result<Together> {
    let mut tx = pool.begin().await?;
    let mut conn = Conn::Postgres(&mut tx);
    let j = match journal {
        [] => Vec::new(),
        reqs => journal_on(&mut conn, reqs).await?,
    };
    let h = match handled {
        [] => Vec::new(),
        reqs => handled_on(&mut conn, reqs).await?,
    };
    let d = match delivered {
        [] => Vec::new(),
        reqs => delivered_on(&mut conn, reqs).await?,
    };
    tx.commit().await?;
    Ok((j, h, d))
}

/// Writes the batch; if that fails as a whole, writes each request alone.
pub(super) async fn isolate<'a, R, T, F, Fut>(reqs: &'a [R], write: F) -> Vec<Result<T>>
where
    F: Fn(&'a [R]) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Result<T>>>>,
{
    match write(reqs).await {
        Ok(results) => results,
        Err(e) if reqs.len() == 1 => vec![Err(e)],
        // The database is not there: writing each request alone would fail the same way,
        // one pool timeout after another, and keep every caller queued behind the writer
        // for that many timeouts (a burst held while Postgres restarts). All fail at once.
        Err(e) if unreachable(&e) => reqs.iter().map(|_| Err(same_outage(&e))).collect(),
        Err(e) => {
            tracing::debug!(error = %e, size = reqs.len(), "batch failed; writing one by one");
            let mut results = Vec::with_capacity(reqs.len());
            for one in reqs.chunks(1) {
                results.push(match write(one).await {
                    Ok(mut r) => r.pop().unwrap_or_else(|| Err(gone())),
                    Err(e) => Err(e),
                });
            }
            results
        }
    }
}

/// Whether `e` says the database cannot be reached, rather than that this batch's
/// statements failed: no connection, a broken one, or a server shutting down.
fn unreachable(e: &StorageError) -> bool {
    let StorageError::Database(e) = e else {
        return false;
    };
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        // SQLSTATE 08: connection exception; 57P01–57P03: the server is shutting down or
        // cannot accept connections yet.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// One copy of an outage error per request (`sqlx::Error` is not `Clone`), keeping what
/// callers tell apart: a closed pool is a shutdown, a timed-out one an outage.
fn same_outage(e: &StorageError) -> StorageError {
    StorageError::Database(match e {
        StorageError::Database(sqlx::Error::PoolClosed) => sqlx::Error::PoolClosed,
        StorageError::Database(sqlx::Error::PoolTimedOut) => sqlx::Error::PoolTimedOut,
        other => sqlx::Error::Io(std::io::Error::other(other.to_string())),
    })
}

/// A bind argument of a dynamically built statement.
enum Arg<'a> {
    Int(i64),
    Text(&'a str),
    Agent(&'a AgentId),
    Room(&'a RoomKey),
    Platform(Platform),
    OptText(Option<&'a str>),
    Bool(bool),
}

/// SQL text with its arguments. On SQLite, `next` continues one script; on Postgres it
/// starts another statement (its protocol takes one statement per query).
struct Script<'a> {
    backend: Backend,
    done: Vec<(String, Vec<Arg<'a>>)>,
    sql: String,
    args: Vec<Arg<'a>>,
}

impl<'a> Script<'a> {
    fn new(backend: Backend) -> Self {
        Script {
            backend,
            done: Vec::new(),
            sql: String::new(),
            args: Vec::new(),
        }
    }

    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    fn arg(&mut self, arg: Arg<'a>) -> &mut Self {
        self.args.push(arg);
        match self.backend {
            // Positional: SQLite looks a named `$N` up among the names seen so far (a linear
            // scan per parameter, quadratic in a batch), and sqlx binds positional
            // parameters in order across the statements of a script.
            Backend::Sqlite => self.sql.push('?'),
            Backend::Postgres => {
                self.sql.push('$');
                self.sql.push_str(&self.args.len().to_string());
            }
        }
        self
    }

    /// A JSON text argument for a JSON column (JSONB in Postgres).
    fn json(&mut self, json: &'a str) -> &mut Self {
        match self.backend {
            Backend::Sqlite => self.arg(Arg::Text(json)),
            Backend::Postgres => self.push("CAST(").arg(Arg::Text(json)).push(" AS JSONB)"),
        }
    }

    /// Ends a statement.
    fn next(&mut self) {
        match self.backend {
            Backend::Sqlite => self.sql.push_str(";\n"),
            Backend::Postgres => {
                let sql = std::mem::take(&mut self.sql);
                let args = std::mem::take(&mut self.args);
                self.done.push((sql, args));
            }
        }
    }

    fn finish(mut self) -> Vec<(String, Vec<Arg<'a>>)> {
        if !self.sql.trim().is_empty() {
            self.done.push((self.sql, self.args));
        }
        self.done
    }
}

/// Runs statements in order on `$conn`, returning every row they return.
macro_rules! run_script {
    ($conn:expr, $stmts:expr) => {{
        let mut rows = Vec::new();
        for (sql, args) in $stmts {
            // Only statements of small batches repeat often enough to keep prepared.
            let persistent = sql.len() <= MAX_CACHED_SQL;
            let mut query = sqlx::query(AssertSqlSafe(sql)).persistent(persistent);
            for arg in args {
                query = match arg {
                    Arg::Int(v) => query.bind(v),
                    Arg::Text(v) => query.bind(v),
                    Arg::Agent(v) => query.bind(v),
                    Arg::Room(v) => query.bind(v),
                    Arg::Platform(v) => query.bind(v),
                    Arg::OptText(v) => query.bind(v),
                    Arg::Bool(v) => query.bind(v),
                };
            }
            rows.extend(query.fetch_all(&mut *$conn).await?);
        }
        rows
    }};
}

/// The journal's unique key: agent, room (its platform is the key's `platform` column),
/// caller, platform message id.
type JournalKey<'a> = (&'a AgentId, &'a RoomKey, &'a str, &'a str);

impl JournalReq {
    fn key(&self) -> JournalKey<'_> {
        (&self.agent_id, &self.room, &self.caller, &self.message_id)
    }
}

/// A row of `RETURNING id` and the unique key.
type JournalKeyRow = (i64, AgentId, Platform, RoomKey, String, String);

/// Inserts a batch of journal entries, each statement its own commit.
pub(super) async fn journal_batch(
    pool: &Pool,
    reqs: &[JournalReq],
) -> Result<Vec<Result<JournalInsert>>> {
    match pool {
        Pool::Sqlite(pool) => {
            journal_on(&mut Conn::Sqlite(&mut *pool.acquire().await?), reqs).await
        }
        Pool::Postgres(pool) => {
            journal_on(&mut Conn::Postgres(&mut *pool.acquire().await?), reqs).await
        }
    }
}

async fn journal_on(
    conn: &mut Conn<'_>,
    reqs: &[JournalReq],
) -> Result<Vec<Result<JournalInsert>>> {
    let backend = conn.backend();
    let mut insert = Script::new(backend);
    insert.push(
        "INSERT INTO journal
             (agent_id, platform, platform_message_id, room, caller, inbound, state, attempts,
              created_at_ms, updated_at_ms)
         VALUES ",
    );
    for (i, r) in reqs.iter().enumerate() {
        insert.push(if i == 0 { "(" } else { ", (" });
        insert.arg(Arg::Agent(&r.agent_id)).push(", ");
        insert.arg(Arg::Platform(r.room.platform)).push(", ");
        insert.arg(Arg::Text(&r.message_id)).push(", ");
        insert.arg(Arg::Room(&r.room)).push(", ");
        insert.arg(Arg::Text(&r.caller)).push(", ");
        // One attempt: the handling the publication after this insert starts (see the
        // poison-message rule in `journal`).
        insert.json(&r.inbound_json).push(", 'pending', 1, ");
        insert.arg(Arg::Int(r.now)).push(", ");
        insert.arg(Arg::Int(r.now)).push(")");
    }
    insert.push(
        " ON CONFLICT (agent_id, platform, room, caller, platform_message_id) DO NOTHING
         RETURNING id, agent_id, platform, room, caller, platform_message_id",
    );
    let inserted: Vec<JournalKeyRow> = conn.rows(insert.finish()).await?;
    // The platform column is the room key's own platform, so the key leaves it out.
    let mut fresh: HashMap<JournalKey<'_>, i64> = inserted
        .iter()
        .map(|(id, a, _, r, c, m)| ((a, r, c.as_str(), m.as_str()), *id))
        .collect();

    // The first request for a key that was inserted gets `Inserted`; every other one is a
    // duplicate, of a row from this batch or from before.
    let mut results: Vec<Option<Result<JournalInsert>>> = Vec::with_capacity(reqs.len());
    let mut lookup: Vec<JournalKey<'_>> = Vec::new();
    for r in reqs {
        let key = r.key();
        match fresh.remove(&key) {
            Some(id) => results.push(Some(Ok(JournalInsert::Inserted(JournalId(id))))),
            None => {
                if !lookup.contains(&key) {
                    lookup.push(key);
                }
                results.push(None);
            }
        }
    }
    if lookup.is_empty() {
        return Ok(results.into_iter().flatten().collect());
    }
    // Conflicting rows are committed (Postgres waits for a concurrent inserter before
    // reporting the conflict) and journal rows are never deleted, so they are there to read.
    let mut select = Script::new(backend);
    select.push(
        "SELECT id, agent_id, platform, room, caller, platform_message_id, state FROM journal WHERE ",
    );
    for (i, (a, room, c, m)) in lookup.iter().enumerate() {
        select.push(if i == 0 { "(" } else { " OR (" });
        select.push("agent_id = ").arg(Arg::Agent(a));
        select
            .push(" AND platform = ")
            .arg(Arg::Platform(room.platform));
        select.push(" AND room = ").arg(Arg::Room(room));
        select.push(" AND caller = ").arg(Arg::Text(c));
        select.push(" AND platform_message_id = ").arg(Arg::Text(m));
        select.push(")");
    }
    let existing: Vec<(i64, AgentId, Platform, RoomKey, String, String, String)> =
        conn.rows(select.finish()).await?;
    let existing: HashMap<JournalKey<'_>, (i64, &str)> = existing
        .iter()
        .map(|(id, a, _, r, c, m, s)| ((a, r, c.as_str(), m.as_str()), (*id, s.as_str())))
        .collect();
    Ok(reqs
        .iter()
        .zip(results)
        .map(|(r, done)| {
            done.unwrap_or_else(|| {
                let (id, state) = existing
                    .get(&r.key())
                    .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
                Ok(JournalInsert::Duplicate(
                    JournalId(*id),
                    JournalState::parse(*id, state)?,
                ))
            })
        })
        .collect())
}

/// Rows decoded the same way from either backend.
trait FromAnyRow:
    for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> FromAnyRow for T where
    T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}

/// A connection of either backend, in a transaction or not, to run a batch on.
enum Conn<'c> {
    Sqlite(&'c mut sqlx::SqliteConnection),
    Postgres(&'c mut sqlx::PgConnection),
}

impl Conn<'_> {
    fn backend(&self) -> Backend {
        match self {
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs the statements in order and decodes every row they return.
    async fn rows<T: FromAnyRow>(&mut self, stmts: Vec<(String, Vec<Arg<'_>>)>) -> Result<Vec<T>> {
        match self {
            Conn::Sqlite(conn) => decode(run_script!(*conn, stmts)),
            Conn::Postgres(conn) => decode(run_script!(*conn, stmts)),
        }
    }
}

/// Records a batch of handled messages in one transaction: on SQLite the scripts open and
/// commit it themselves (two round trips), on Postgres sqlx's transaction does.
pub(super) async fn handled_batch(pool: &Pool, reqs: &[HandledReq]) -> Result<Vec<HandledResult>> {
    match pool {
        Pool::Sqlite(pool) => {
            let mut conn = pool.acquire().await?;
            let result = handled_on(&mut Conn::Sqlite(&mut conn), reqs).await;
            if result.is_err() {
                // The script may have failed after its BEGIN. A failed ROLLBACK other than
                // "no transaction is active" could leave one open: drop the connection then.
                if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await
                    && !e.to_string().contains("no transaction is active")
                {
                    conn.close_on_drop();
                }
            }
            result
        }
        Pool::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            let results = handled_on(&mut Conn::Postgres(&mut tx), reqs).await?;
            tx.commit().await?;
            Ok(results)
        }
    }
}

/// The statements of `handled_batch`; on SQLite they open and commit the transaction, on
/// Postgres the caller's transaction holds them.
async fn handled_on(conn: &mut Conn<'_>, reqs: &[HandledReq]) -> Result<Vec<HandledResult>> {
    let backend = conn.backend();
    let now = reqs.iter().map(|r| r.now).max().unwrap_or(0);
    let mut ids: Vec<i64> = reqs.iter().map(|r| r.journal_id).collect();
    ids.sort_unstable();
    ids.dedup();
    // The journal update comes first: it takes the write lock (SQLite) or the row locks
    // (Postgres, in id order) before anything is read, so a concurrent call for the same
    // entry serialises here and then sees `done`.
    let mut mark = Script::new(backend);
    if backend == Backend::Sqlite {
        mark.push("BEGIN IMMEDIATE");
        mark.next();
    }
    mark.push("UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = ")
        .arg(Arg::Int(now))
        .push(" WHERE state <> 'done' AND id IN (");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            mark.push(", ");
        }
        mark.arg(Arg::Int(*id));
    }
    mark.push(") RETURNING id");
    let marked: Vec<(i64,)> = conn.rows(mark.finish()).await?;
    let plan = Plan::new(reqs, marked.into_iter().map(|(id,)| id).collect());
    let existing: Vec<(i64, Option<i64>)> = if plan.lookup.is_empty() {
        Vec::new()
    } else {
        conn.rows(plan.lookup_script(backend)).await?
    };
    let outboxed: Vec<(i64, i64)> = conn.rows(plan.write_script(backend, reqs)).await?;
    Ok(plan.results(reqs, &existing, &outboxed))
}

/// Marks a batch of replies delivered: one statement, its own commit.
pub(super) async fn delivered_batch(pool: &Pool, reqs: &[DeliveredReq]) -> Result<Vec<Result<()>>> {
    match pool {
        Pool::Sqlite(pool) => {
            delivered_on(&mut Conn::Sqlite(&mut *pool.acquire().await?), reqs).await
        }
        Pool::Postgres(pool) => {
            delivered_on(&mut Conn::Postgres(&mut *pool.acquire().await?), reqs).await
        }
    }
}

/// One `UPDATE` for the batch, whatever its size. Of two marks for one entry (a worker
/// whose lease ran out, and the one that took over) the later one's ids stay, as if the
/// two had run in order. An unknown id is no error, as for a single `UPDATE`.
async fn delivered_on(conn: &mut Conn<'_>, reqs: &[DeliveredReq]) -> Result<Vec<Result<()>>> {
    let now = reqs.iter().map(|r| r.now).max().unwrap_or(0);
    let mut last: HashMap<i64, &DeliveredReq> = HashMap::with_capacity(reqs.len());
    for r in reqs {
        last.insert(r.outbox_id, r);
    }
    // In id order, so overlapping batches lock rows in one order.
    let mut rows: Vec<&DeliveredReq> = last.into_values().collect();
    rows.sort_by_key(|r| r.outbox_id);
    let mut s = Script::new(conn.backend());
    s.push("UPDATE outbox SET state = 'delivered', platform_ids = CASE id");
    for r in &rows {
        s.push(" WHEN ").arg(Arg::Int(r.outbox_id)).push(" THEN ");
        s.json(&r.platform_ids_json);
    }
    s.push(" END, claimed_until_ms = NULL, last_error = NULL, delivered_at_ms = ")
        .arg(Arg::Int(now))
        .push(", updated_at_ms = ")
        .arg(Arg::Int(now))
        .push(" WHERE id IN (");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.arg(Arg::Int(r.outbox_id));
    }
    s.push(") RETURNING id");
    let _: Vec<(i64,)> = conn.rows(s.finish()).await?;
    Ok(reqs.iter().map(|_| Ok(())).collect())
}

fn decode<R: sqlx::Row, T>(rows: Vec<R>) -> Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, R>,
{
    Ok(rows
        .iter()
        .map(T::from_row)
        .collect::<Result<Vec<T>, _>>()?)
}

/// Who writes what in a batch of `record_handled`.
struct Plan {
    /// Per request: it is the first of the batch for a journal entry this batch marked done.
    writer: Vec<bool>,
    /// Journal ids not marked by this batch: already done, or unknown.
    lookup: Vec<i64>,
}

impl Plan {
    fn new(reqs: &[HandledReq], marked: HashSet<i64>) -> Plan {
        let mut taken = HashSet::new();
        let mut lookup = Vec::new();
        let writer = reqs
            .iter()
            .map(|r| {
                if marked.contains(&r.journal_id) {
                    taken.insert(r.journal_id)
                } else {
                    if !lookup.contains(&r.journal_id) {
                        lookup.push(r.journal_id);
                    }
                    false
                }
            })
            .collect();
        Plan { writer, lookup }
    }

    fn lookup_script(&self, backend: Backend) -> Vec<(String, Vec<Arg<'static>>)> {
        let mut s = Script::new(backend);
        s.push(
            "SELECT j.id, (SELECT MIN(o.id) FROM outbox o WHERE o.journal_id = j.id)
             FROM journal j WHERE j.id IN (",
        );
        for (i, id) in self.lookup.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.arg(Arg::Int(*id));
        }
        s.push(")");
        s.finish()
    }

    fn writers<'r>(&self, reqs: &'r [HandledReq]) -> impl Iterator<Item = &'r HandledReq> {
        reqs.iter()
            .zip(self.writer.clone())
            .filter_map(|(r, w)| w.then_some(r))
    }

    /// Rooms, users, messages, outbox rows (returning `id, journal_id`), and on SQLite
    /// the `COMMIT`.
    fn write_script<'r>(
        &self,
        backend: Backend,
        reqs: &'r [HandledReq],
    ) -> Vec<(String, Vec<Arg<'r>>)> {
        let mut s = Script::new(backend);
        // One row per key (Postgres refuses to upsert a row twice in one statement),
        // merged as the single-row upserts would have left it, applied in order.
        let mut rooms: Vec<(&AgentId, &RoomKey, Option<&str>, i64)> = Vec::new();
        let mut users: Vec<(Platform, &str, &str, i64)> = Vec::new();
        for r in self.writers(reqs) {
            match rooms
                .iter_mut()
                .find(|(a, k, ..)| *a == &r.agent_id && *k == &r.room_key)
            {
                Some(room) => {
                    room.2 = r.room_name.as_deref().or(room.2);
                    room.3 = room.3.max(r.last_active);
                }
                None => rooms.push((
                    &r.agent_id,
                    &r.room_key,
                    r.room_name.as_deref(),
                    r.last_active,
                )),
            }
            // The persona is an agent, not a platform user.
            let platform = r.room_key.platform;
            for m in r.memories.iter().filter(|m| !m.from_agent) {
                match users
                    .iter_mut()
                    .find(|(p, u, ..)| *p == platform && *u == m.author_id)
                {
                    Some(user) => {
                        if m.created_at_ms >= user.3 {
                            user.2 = &m.author_name;
                            user.3 = m.created_at_ms;
                        }
                    }
                    None => users.push((platform, &m.author_id, &m.author_name, m.created_at_ms)),
                }
            }
        }
        // In key order: overlapping Postgres batches then lock shared rows in one order.
        rooms.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        users.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        if !rooms.is_empty() {
            s.push("INSERT INTO rooms (agent_id, room, platform, name, last_active_ms) VALUES ");
            for (i, (agent, room, name, active)) in rooms.into_iter().enumerate() {
                s.push(if i == 0 { "(" } else { ", (" });
                s.arg(Arg::Agent(agent)).push(", ");
                s.arg(Arg::Room(room)).push(", ");
                s.arg(Arg::Platform(room.platform)).push(", ");
                s.arg(Arg::OptText(name)).push(", ");
                s.arg(Arg::Int(active)).push(")");
            }
            s.push(UPSERT_ROOM_CONFLICT);
            s.next();
        }
        if !users.is_empty() {
            s.push("INSERT INTO users (platform, user_id, name, last_seen_ms) VALUES ");
            for (i, (platform, user, name, seen)) in users.into_iter().enumerate() {
                s.push(if i == 0 { "(" } else { ", (" });
                s.arg(Arg::Platform(platform)).push(", ");
                s.arg(Arg::Text(user)).push(", ");
                s.arg(Arg::Text(name)).push(", ");
                s.arg(Arg::Int(seen)).push(")");
            }
            s.push(UPSERT_USER_CONFLICT);
            s.next();
        }
        // Ids follow the order of the rows, so each inbound comes before its reply.
        let mut first = true;
        for r in self.writers(reqs) {
            for m in &r.memories {
                if first {
                    s.push(
                        "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name,
                             text, from_agent, created_at_ms) VALUES (",
                    );
                    first = false;
                } else {
                    s.push(", (");
                }
                s.arg(Arg::Agent(&r.agent_id)).push(", ");
                s.arg(Arg::Room(&r.room_key)).push(", ");
                s.arg(Arg::Int(r.journal_id)).push(", ");
                s.arg(Arg::Text(&m.author_id)).push(", ");
                s.arg(Arg::Text(&m.author_name)).push(", ");
                s.arg(Arg::Text(&m.text)).push(", ");
                s.arg(Arg::Bool(m.from_agent)).push(", ");
                s.arg(Arg::Int(m.created_at_ms)).push(")");
            }
        }
        if !first {
            s.next();
        }
        // Due at once (not_before 0). Claimed by the caller when it asked for a lease,
        // which then delivers it without claiming; delivered already when the reply left
        // with the caller's answer; the delivery worker takes it otherwise.
        let mut first = true;
        for r in self.writers(reqs) {
            let Some((_, json)) = &r.reply else { continue };
            if first {
                s.push(
                    "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts,
                         not_before_ms, claimed_until_ms, platform_ids, delivered_at_ms,
                         created_at_ms, updated_at_ms) VALUES (",
                );
                first = false;
            } else {
                s.push(", (");
            }
            s.arg(Arg::Agent(&r.agent_id)).push(", ");
            s.arg(Arg::Int(r.journal_id)).push(", ");
            s.json(json).push(", ");
            s.arg(Arg::Text(r.outbox_state())).push(", ");
            s.arg(Arg::Int(r.outbox_attempts())).push(", 0, ");
            match r.claimed_until() {
                Some(until) => s.arg(Arg::Int(until)),
                None => s.push("NULL"),
            };
            s.push(", ");
            match r.delivered() {
                Some((ids, at)) => s.json(ids).push(", ").arg(Arg::Int(at)),
                None => s.push("NULL, NULL"),
            };
            s.push(", ");
            s.arg(Arg::Int(r.now)).push(", ");
            s.arg(Arg::Int(r.now)).push(")");
        }
        if !first {
            s.push(" RETURNING id, journal_id");
            s.next();
        }
        if backend == Backend::Sqlite {
            s.push("COMMIT");
        }
        s.finish()
    }

    fn results(
        &self,
        reqs: &[HandledReq],
        existing: &[(i64, Option<i64>)],
        outboxed: &[(i64, i64)],
    ) -> Vec<HandledResult> {
        let outbox_of: HashMap<i64, i64> = outboxed.iter().map(|(id, j)| (*j, *id)).collect();
        let existing: HashMap<i64, Option<i64>> = existing.iter().copied().collect();
        reqs.iter()
            .zip(&self.writer)
            .map(|(r, writer)| {
                if *writer {
                    let Some((outbound, _)) = &r.reply else {
                        return Ok(None);
                    };
                    let id = *outbox_of
                        .get(&r.journal_id)
                        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
                    return Ok(Some(r.recorded(id, outbound)));
                }
                // Done before this request: by this batch, or earlier.
                let first = if self.lookup.contains(&r.journal_id) {
                    *existing
                        .get(&r.journal_id)
                        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?
                } else {
                    outbox_of.get(&r.journal_id).copied()
                };
                Ok(first.map(|id| RecordedReply::Queued(OutboxId(id))))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A batch that fails because the database is away is not written again request by
    /// request (each would wait out its own pool timeout); one that fails for its content is.
    #[tokio::test]
    async fn an_outage_fails_the_batch_at_once_and_a_bad_row_is_isolated() {
        let reqs = [1, 2, 3];
        let calls = AtomicUsize::new(0);
        let results: Vec<Result<()>> = isolate(&reqs, |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(StorageError::Database(sqlx::Error::PoolTimedOut)) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(results.len(), 3);
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Err(StorageError::Database(sqlx::Error::PoolTimedOut))))
        );

        let calls = AtomicUsize::new(0);
        let results: Vec<Result<i32>> = isolate(&reqs, |batch: &[i32]| {
            calls.fetch_add(1, Ordering::SeqCst);
            let batch = batch.to_vec();
            async move {
                if batch.len() > 1 {
                    Err(StorageError::Corrupt("row 2".into()))
                } else if batch[0] == 2 {
                    Ok(vec![Err(StorageError::Corrupt("row 2".into()))])
                } else {
                    Ok(vec![Ok(batch[0])])
                }
            }
        })
        .await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "the batch, then each alone"
        );
        assert!(matches!(results[0], Ok(1)) && results[1].is_err() && matches!(results[2], Ok(3)));
    }
}
