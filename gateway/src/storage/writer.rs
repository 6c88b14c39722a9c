//! The Postgres writer: one task per Postgres `Store` that owns the hot writes,
//! `journal_insert`, `record_handled` and `outbox_delivered`, and commits whatever callers
//! have queued as one batch. SQLite never comes here: its message path runs on `engine`
//! (issue 31: this module used to restate the same writes for SQLite as well).
//!
//! Why: a statement costs little SQL work but a network round trip, and a commit waits for
//! the WAL flush. Many agents writing at once each paid a transaction of their own; here
//! the requests queued while the previous batch was written share one transaction and
//! multi-row statements. A batch is whatever is waiting when the writer is free (never a
//! timer), so a lone caller is a batch of one and waits for nobody.
//!
//! What it owns:
//! - batching: at most `MAX_BATCH` requests, each kind one statement whose rows are
//!   bound as arrays (`batch`), so the statement's text is the same for every batch;
//! - the guarantees of the single calls, inside a batch too: a duplicate journal insert is
//!   `Duplicate`, even of a row inserted by the same batch; of two `record_handled` for one
//!   journal entry the first writes and the other gets its outbox id, as if run one after
//!   the other; an unknown journal id fails only its own request;
//! - isolation: if a batch fails, its requests are written again one by one, so one bad
//!   request cannot fail the others; unless the database cannot be reached at all, when
//!   they all fail at once (one by one, each would wait out its own pool timeout).
//!
//! Up to `PG_BATCHES_IN_FLIGHT` batches are written at once, so that they share the wait
//! for the WAL flush. A batch writes its kinds in one transaction, so a message's three
//! writes (its journal entry, its record, its reply's delivered mark) ride on three
//! batches' commits shared with every other message in them, not on commits of their own;
//! if that transaction fails, each kind is written apart, isolated as above.
//!
//! The owned requests (`JournalReq`, `HandledReq`, `DeliveredReq`) are defined here and
//! shared with `engine`, which runs the same requests one by one on SQLite.

use super::{JournalId, JournalInsert, OutboxEntry, OutboxId, RecordedReply, Result, StorageError};
use sqlx::postgres::PgPool;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};
use troupe_connectors::{AgentId, Outbound, RoomKey};

// The `ON CONFLICT` clauses both backends share are macros rather than constants so that
// each statement is one text at compile time (`concat!`), not formatted for every batch.

/// Later sightings win: a re-driven old message never rolls a name back. A sighting that
/// changes nothing is not written (issue 48: at 1,000 rooms it was a leaf of its own to
/// write for every message): the row is written when the name changed, or when its time is
/// a minute old. So `last_seen_ms` (read by nothing) is the last sighting to within a
/// minute, and a late message could set a name back only if the person changed it away and
/// back within that minute (until their next message corrects it).
macro_rules! upsert_user_conflict {
    () => {
        " ON CONFLICT (platform, user_id) DO UPDATE SET
         name = excluded.name,
         last_seen_ms = excluded.last_seen_ms
     WHERE excluded.last_seen_ms >= users.last_seen_ms
       AND (excluded.name <> users.name
            OR excluded.last_seen_ms >= users.last_seen_ms + 60000)"
    };
}
pub(super) use upsert_user_conflict;

/// A room's row is written when it is new, when its name changed, or when its activity is
/// a minute newer than the row says (issue 48: the time moved with every message, a leaf
/// to write, and on SQLite a WAL frame, for each one). So `last_active_ms` is the room's
/// activity to within a minute; the room listing (`Store::rooms`) takes the newer of it
/// and the room's newest message, and so stays exact. `CASE` rather than
/// `max()`/`GREATEST()`, which is where the two dialects part (the engine runs this text
/// on SQLite too); a name is never cleared by a message without one.
macro_rules! upsert_room_conflict {
    () => {
        " ON CONFLICT (agent_id, room) DO UPDATE SET
         name = COALESCE(excluded.name, rooms.name),
         last_active_ms = CASE WHEN excluded.last_active_ms > rooms.last_active_ms
                               THEN excluded.last_active_ms ELSE rooms.last_active_ms END
     WHERE (excluded.name IS NOT NULL AND (rooms.name IS NULL OR excluded.name <> rooms.name))
        OR excluded.last_active_ms >= rooms.last_active_ms + 60000"
    };
}
pub(super) use upsert_room_conflict;

/// A rollup row's increments are added to what the row holds (both backends).
macro_rules! rollup_add {
    () => {
        " ON CONFLICT (agent_id, day, scope, scope_key) DO UPDATE SET
    calls = usage_daily.calls + excluded.calls,
    prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens,
    cached_tokens = usage_daily.cached_tokens + excluded.cached_tokens,
    cost_micros = usage_daily.cost_micros + excluded.cost_micros"
    };
}
pub(super) use rollup_add;

/// One column of a batch's rows, bound as an array for `UNNEST` (`batch`, `usage`).
pub(super) fn column<'r, R, T>(rows: &'r [R], cell: impl Fn(&'r R) -> T) -> Vec<T> {
    rows.iter().map(cell).collect()
}

/// Requests per batch.
const MAX_BATCH: usize = 256;
/// Batches written at once. A commit waits for its WAL flush (10–20 ms on a loaded disk),
/// and one writer waiting for each flush in turn capped a store at `MAX_BATCH` requests
/// per two flushes; overlapping batches share the flushes (Postgres writes the WAL of
/// every transaction committing at that moment at once). It is safe because Postgres
/// orders what a single writer would: a journal insert that conflicts waits for the other
/// inserter's commit, and the `UPDATE journal … WHERE state <> 'done'` that opens a
/// `record_handled` batch waits for another one holding the row, then sees it done. Two
/// batches can deadlock only on rows both write (a user in rooms of both, in other
/// orders); Postgres then fails one of them, whose requests are written again one by one
/// like any failed batch.
const PG_BATCHES_IN_FLIGHT: usize = 4;
/// Requests waiting for the writer before callers wait to queue (backpressure).
const QUEUE: usize = 1024;

mod batch;
use batch::{delivered_batch, delivered_on, handled_batch, handled_on, journal_batch, journal_on};

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

/// The queue to the writer task of a Postgres store; the task ends when the last `Store`
/// clone is dropped. A SQLite store has none: its message path runs on `engine`.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Request>,
}

impl Writer {
    pub fn spawn(pool: PgPool) -> Writer {
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

/// The writer task is gone (its runtime shut down), or there is none: the store is as good
/// as closed.
fn gone() -> StorageError {
    StorageError::Database(sqlx::Error::PoolClosed)
}

async fn run(pool: PgPool, mut requests: mpsc::Receiver<Request>) {
    let in_flight = Arc::new(Semaphore::new(PG_BATCHES_IN_FLIGHT));
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // The slot is taken before the batch: while every slot is busy, requests gather
        // in the queue and the next batch takes them all.
        let Ok(slot) = in_flight.clone().acquire_owned().await else {
            return;
        };
        if requests.recv_many(&mut batch, MAX_BATCH).await == 0 {
            return;
        }
        let pool = pool.clone();
        let taken: Vec<Request> = std::mem::take(&mut batch);
        tokio::spawn(async move {
            write(&pool, taken.into_iter()).await;
            drop(slot);
        });
    }
}

/// One batch's requests by kind, each with the caller to answer.
#[derive(Default)]
struct Sorted {
    journal: Vec<JournalReq>,
    journal_tx: Vec<oneshot::Sender<Result<JournalInsert>>>,
    handled: Vec<HandledReq>,
    handled_tx: Vec<oneshot::Sender<HandledResult>>,
    delivered: Vec<DeliveredReq>,
    delivered_tx: Vec<oneshot::Sender<Result<()>>>,
}

impl Sorted {
    fn new(batch: impl Iterator<Item = Request>) -> Sorted {
        let mut sorted = Sorted::default();
        for request in batch {
            match request {
                Request::Journal(req, tx) => {
                    sorted.journal.push(req);
                    sorted.journal_tx.push(tx);
                }
                Request::Handled(req, tx) => {
                    sorted.handled.push(*req);
                    sorted.handled_tx.push(tx);
                }
                Request::Delivered(req, tx) => {
                    sorted.delivered.push(req);
                    sorted.delivered_tx.push(tx);
                }
            }
        }
        sorted
    }

    /// How many kinds the batch holds.
    fn kinds(&self) -> usize {
        [self.journal.len(), self.handled.len(), self.delivered.len()]
            .iter()
            .filter(|n| **n > 0)
            .count()
    }
}

/// Writes one batch and answers its callers.
async fn write(pool: &PgPool, batch: impl Iterator<Item = Request>) {
    let s = Sorted::new(batch);
    // The kinds share one transaction: one commit, so one WAL flush to wait for, where
    // each kind apart cost one.
    if s.kinds() > 1 {
        match together(pool, &s.journal, &s.handled, &s.delivered).await {
            Ok(Together {
                journal,
                handled,
                delivered,
            }) => {
                answer(s.journal_tx, journal);
                answer(s.handled_tx, handled);
                answer(s.delivered_tx, delivered);
                return;
            }
            Err(e) if unreachable(&e) => {
                fail_all(s.journal_tx, &e);
                fail_all(s.handled_tx, &e);
                fail_all(s.delivered_tx, &e);
                return;
            }
            // A deadlock with an overlapping batch, or one bad request: each kind is
            // written on its own, and a failing one request by request (`isolate`).
            Err(e) => tracing::debug!(error = %e, "batch failed; writing each kind apart"),
        }
    }
    if !s.journal.is_empty() {
        let results = isolate(&s.journal, |reqs| journal_batch(pool, reqs)).await;
        answer(s.journal_tx, results);
    }
    if !s.handled.is_empty() {
        let results = isolate(&s.handled, |reqs| handled_batch(pool, reqs)).await;
        answer(s.handled_tx, results);
    }
    if !s.delivered.is_empty() {
        let results = isolate(&s.delivered, |reqs| delivered_batch(pool, reqs)).await;
        answer(s.delivered_tx, results);
    }
}

/// Writes one batch made of these requests, as the writer task would, and returns what
/// each caller would hear.
#[cfg(test)]
pub(super) async fn write_kinds(
    pool: &PgPool,
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
    Together {
        journal: j.into_iter().map(unanswered).collect(),
        handled: h.into_iter().map(unanswered).collect(),
        delivered: d.into_iter().map(unanswered).collect(),
    }
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

/// What the callers of a batch hear, by kind, in the order of their requests.
pub(super) struct Together {
    pub journal: Vec<Result<JournalInsert>>,
    pub handled: Vec<HandledResult>,
    pub delivered: Vec<Result<()>>,
}

/// Every kind of a batch in one transaction. The journal inserts come first, then the
/// handled messages, then the delivered marks, in every batch: overlapping batches then
/// take their locks in one order.
async fn together(
    pool: &PgPool,
    journal: &[JournalReq],
    handled: &[HandledReq],
    delivered: &[DeliveredReq],
) -> Result<Together> {
    let mut tx = pool.begin().await?;
    let journal = match journal {
        [] => Vec::new(),
        reqs => journal_on(&mut tx, reqs).await?,
    };
    let handled = match handled {
        [] => Vec::new(),
        reqs => handled_on(&mut tx, reqs).await?,
    };
    let delivered = match delivered {
        [] => Vec::new(),
        reqs => delivered_on(&mut tx, reqs).await?,
    };
    tx.commit().await?;
    Ok(Together {
        journal,
        handled,
        delivered,
    })
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
