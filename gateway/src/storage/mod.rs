//! Storage: the only code that speaks SQL.
//!
//! One `Store` handle over SQLite (the embedded default) or Postgres (scale-out), selected by
//! the URL scheme. It owns the schema (migrations under `migrations/{sqlite,postgres}`) and
//! these records:
//! - agents: one row per persona id;
//! - rooms and users: what the platforms told us about them (names, last activity);
//! - messages: room memory, both what people said and what the persona replied;
//! - journal: every accepted `Inbound`, unique on `(agent, platform, room, caller, platform
//!   message id)` (the caller only on the Web platform), with a state and the attempts
//!   started, so a crash loses nothing, nothing is answered twice, and a message that
//!   crashes the process is given up after `TROUPE_MAX_ATTEMPTS`;
//! - installation: one random id per database (the NATS dedupe ids carry it);
//! - outbox: every reply to deliver, with attempts and a claim, so delivery survives a crash;
//! - knowledge: documents, their chunks, the full-text index and embedding vectors.
//! - room summaries and user facts: memory beyond the recent window.
//! - room state: the controls people set from the chat (muted, following, forgotten).
//! - usage: one record per model call, daily rollups, budget notices (`usage`).
//! - posts: autonomous post schedules, each run's claim and what came of it (`posts`),
//!   and the drafts that wait for an operator's approval (`drafts`, issue 47).
//! - people: accounts linked into one person across platforms, `/link` codes (`people`);
//! - media: images posted to the API, by the SHA-256 of their bytes (`media`), so the
//!   journal and the bus carry a reference, never the bytes.
//!
//! - access: pairing codes, approvals and wrong approvals (`access`, issue 44).
//!
//! It does not decide anything: when to retry, what to remember and what to answer belong
//! to the agent and the delivery worker. Layout:
//! - this file: the public records, `Store::connect` and the backend dispatch;
//! - `journal`: inbound deduplication and the restart drive;
//! - `memory`: `record_handled`, room memory and room listings;
//! - `outbox`: claiming, delivering and retrying replies;
//! - `knowledge`: documents, chunks, their change sequence, vectors (keyword ranking is
//!   `knowledge::index`'s, not this module's);
//! - `fact_ids`: facts by id, for the console's "delete this fact";
//! - `told_facts`: a fact a user told the persona to remember or forget (the memory tools);
//! - `people`: accounts linked into one person, and `/link` codes (`Store::person_of`);
//! - `summaries`: room summaries and user facts, which only move forward;
//! - `rooms`: room controls, forgetting, and closing a command's journal entry;
//! - `revisions`: the exchange an edit or a delete refers to, and dropping it from memory;
//! - `engine`: on SQLite, the thread with its own connection that runs the message path;
//! - `writer`: on Postgres, the task that batches `journal_insert`, `record_handled` and
//!   `outbox_delivered` into shared transactions (group commit).
//!
//! One write path per backend (issue 31): the message path (the journal insert, the room
//! reads a reply needs, `record_handled`, the delivered mark, the spend ledger's batches,
//! reading a room's controls) runs on `engine` on every SQLite store and on sqlx, its three hot writes
//! batched by `writer`, on every Postgres store. The engine's SQL text is its own (rusqlite,
//! `?N` placeholders, one request at a time inside its batch's transaction); the writer's is
//! Postgres's (`$n`, `JSONB` casts, multi-row statements, several batches in flight).
//!
//! In-memory SQLite (`sqlite::memory:`) is refused, as an unsupported URL: such a database
//! lives in the one connection that made it, so the engine could not open it beside the
//! sqlx pool, and running it on sqlx instead was a third write path that production never
//! took. Tests use a SQLite file in a temporary directory (`test_support::sqlite_store`,
//! and `on_both_backends!` for the SQLite half), so every storage test runs the path
//! production runs. A file costs a test a few milliseconds more than memory did.
//!
//! Elsewhere, both backends run the same SQL text wherever the dialects agree (sqlx's
//! SQLite driver takes `$1` placeholders, and both have `ON CONFLICT` and `RETURNING`).
//! Where they differ, and why:
//! - the message path, as above: the engine on SQLite, sqlx and the writer on Postgres;
//!   the reads of that path (`recent_messages`, `room_context`, `room_state`) keep an sqlx
//!   version for Postgres, `room_context` as one statement rather than three;
//! - the outbox claim (`outbox`): `FOR UPDATE SKIP LOCKED` on Postgres, whose replicas
//!   claim concurrently; one `UPDATE … IN (SELECT …)` on SQLite, which has one writer;
//! - change sequences (`knowledge`): on Postgres an advisory lock orders the writers of
//!   `knowledge_changes` and `embedding_changes`, so a follower never skips a `seq` that
//!   commits late; SQLite writers are serialized already;
//! - vectors (`pgvector`): the HNSW index exists on Postgres with the extension only;
//! - connections: one pooled sqlx connection (plus the engine's) on SQLite, in WAL mode,
//!   checkpointed off the engine's thread and restarted by the engine between batches
//!   (`wal_upkeep`); a pool of `PG_POOL` on
//!   Postgres, pinged only after `PG_PING_IDLE` idle;
//! - the schema: one migration directory per backend, kept in step.

mod access;
#[cfg(test)]
mod access_tests;
mod arbiter;
#[cfg(test)]
mod arbiter_tests;
mod drafts;
mod engine;
mod fact_ids;
mod feedback;
mod history;
mod journal;
mod knowledge;
#[cfg(test)]
mod knowledge_batch_tests;
#[cfg(test)]
mod knowledge_tests;
mod media;
mod memory;
mod memory_sql;
mod outbox;
mod people;
mod pgvector;
mod posts;
#[cfg(test)]
mod posts_tests;
mod readers;
mod revisions;
#[cfg(test)]
mod revisions_tests;
mod rooms;
#[cfg(test)]
mod rooms_tests;
mod sqlite_tx;
mod state;
mod summaries;
#[cfg(test)]
mod summaries_tests;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
mod told_facts;
mod usage;
#[cfg(test)]
mod usage_tests;
#[cfg(test)]
mod vector_tests;
mod wal_upkeep;
mod wal_vfs;
mod webhooks;
mod writer;

use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use troupe_connectors::{AgentId, Inbound, Outbound, Platform, RoomKey};

pub use access::{Approval, Approved, Asker, PendingCode, Telling};
pub use arbiter::Floor;
pub use drafts::{Decided, Draft};
pub use fact_ids::IdentifiedFact;
pub use feedback::{FeedbackTally, NewFeedback, ReplyMessage};
pub use history::StoredImage;
pub use journal::{UnfinishedPage, dedupe_caller, same_dedupe_key};
pub use knowledge::{
    DocumentRow, EmbeddingChange, IndexChunk, NewDocument, NewEmbedding, Scope, ScoredChunk,
    StoredVector, UnembeddedChunk,
};
pub use memory::{RoomContext, RoomReads};
pub use people::{Account, LinkCode, Person};
pub use pgvector::{HNSW_MAX_DIMENSIONS, PgVector};
pub use posts::{
    ClaimedRun, NewSchedule, PostRun, RUN_ATTEMPTS, RecentRuns, RunEnd, RunState, ScheduleSource,
    StoredSchedule,
};
pub use revisions::Exchange;
pub use rooms::{RoomControl, RoomState, Speaker};
pub use state::StoredState;
pub use summaries::{ConversationSummary, FactSubject, NewFacts, RoomUserFact};
pub use usage::{NewUsage, USAGE_ROWS_MAX, UsageBy, UsageNow, UsageRow, UsageTally};
pub use webhooks::StoredWebhook;

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Also an in-memory SQLite URL (`sqlite::memory:`): see the module doc.
    #[error("unsupported database URL `{0}`: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// Also carries `sqlx::Error::RowNotFound` when a call names a journal entry that does
    /// not exist.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// An error of the SQLite engine's connection (`engine`), as its text.
    #[error("database error: {0}")]
    Sqlite(String),
}

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> Self {
        StorageError::Sqlite(e.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The journal's primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(transparent)]
pub struct JournalId(pub i64);

/// Where a journaled message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalState {
    /// Accepted, not yet handled (or handling was interrupted by a crash).
    Pending,
    /// Handled: answered, or deliberately not answered.
    Done,
    /// Handling failed (model error); kept with its error and retried at the next start.
    Failed,
}

impl JournalState {
    /// Parses the `state` column of journal row `id`.
    fn parse(id: i64, s: &str) -> Result<Self> {
        match s {
            "pending" => Ok(JournalState::Pending),
            "done" => Ok(JournalState::Done),
            "failed" => Ok(JournalState::Failed),
            other => Err(StorageError::Corrupt(format!(
                "journal row {id}: unknown state `{other}`"
            ))),
        }
    }
}

/// The outcome of `Store::journal_begin`: whether a message may be handled again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Counted: handle it. `attempts` includes this one.
    Started { attempts: i32 },
    /// Handled meanwhile: its recorded replies stand.
    Done,
    /// It had `TROUPE_MAX_ATTEMPTS` already: give it up, do not handle it. `state` says
    /// whether the last attempt failed (`Failed`, with its error) or never finished
    /// (`Pending`: the process stopped while handling it).
    Exhausted {
        attempts: i32,
        state: JournalState,
        last_error: Option<String>,
    },
}

/// The outcome of `Store::journal_give_up`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaveUp {
    /// This call marked the entry failed (it was pending).
    pub first: bool,
    /// The apology this call queued for the room, if the room had none recently.
    pub apology: Option<OutboxId>,
}

/// The outcome of `journal_insert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalInsert {
    Inserted(JournalId),
    Duplicate(JournalId, JournalState),
}

#[derive(Debug, Clone)]
pub struct JournalEntry {
    pub id: JournalId,
    pub agent_id: AgentId,
    pub inbound: Inbound,
    pub state: JournalState,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// One message of room memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct MemoryMessage {
    pub id: i64,
    pub room: RoomKey,
    pub author_id: String,
    pub author_name: String,
    pub text: String,
    /// Said by the persona.
    pub from_agent: bool,
    pub created_at_ms: i64,
}

/// A message to add to room memory.
#[derive(Debug, Clone)]
pub struct NewMemory<'a> {
    pub author_id: &'a str,
    pub author_name: &'a str,
    pub text: &'a str,
    pub from_agent: bool,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct RoomSummary {
    pub room: RoomKey,
    pub platform: Platform,
    pub name: Option<String>,
    pub message_count: i64,
    pub last_active_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(transparent)]
pub struct OutboxId(pub i64);

#[derive(Debug, Clone)]
pub struct OutboxEntry {
    pub id: OutboxId,
    pub agent_id: AgentId,
    pub journal_id: Option<JournalId>,
    pub outbound: Outbound,
    pub attempts: i32,
}

/// Everything the agent writes when it has handled a message, in one transaction: the
/// inbound and the reply in room memory, the reply in the outbox, the journal entry done.
#[derive(Debug, Clone)]
pub struct HandledMessage<'a> {
    pub journal_id: JournalId,
    pub agent_id: &'a AgentId,
    pub room: &'a RoomKey,
    pub room_name: Option<&'a str>,
    pub inbound: NewMemory<'a>,
    /// `None` when the persona decided not to answer (the inbound is still remembered).
    pub reply: Option<(NewMemory<'a>, Outbound)>,
}

/// How a reply's outbox entry starts (`Store::record_handled_as`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyStart {
    /// Due at once, for the delivery worker to claim.
    Pending,
    /// Claimed by the caller for this many milliseconds (one attempt counted), so that it
    /// can deliver the reply at once without claiming it.
    Claimed { lease_ms: i64 },
    /// Delivered already, with these platform message ids: the reply left with the
    /// caller's own answer (the HTTP API), so nothing is left to send. One commit fewer
    /// on every such message than a claimed entry marked delivered after.
    Delivered { platform_ids: Vec<String> },
}

/// The reply that `Store::record_handled_as` recorded.
// One per reply, returned once and taken apart at once: boxing the entry would cost every
// reply an allocation to save a move of a few hundred bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum RecordedReply {
    /// Inserted by this call, claimed for the caller's lease (attempts = 1): deliver it
    /// without claiming it again.
    Claimed(OutboxEntry),
    /// Inserted by this call already delivered (`ReplyStart::Delivered`).
    Delivered(OutboxId),
    /// Recorded earlier (the entry was already done): claim it before delivering.
    Queued(OutboxId),
}

impl RecordedReply {
    pub fn id(&self) -> OutboxId {
        match self {
            RecordedReply::Claimed(entry) => entry.id,
            RecordedReply::Delivered(id) | RecordedReply::Queued(id) => *id,
        }
    }
}

/// A cheap-to-clone handle on the database (the pools are reference-counted).
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// How the message path reaches the database: one write path per backend.
    hot: HotPath,
}

#[derive(Clone)]
enum HotPath {
    /// SQLite: the thread that runs the message path's statements (see `engine`).
    Engine(engine::Engine),
    /// Postgres: the task that batches the three hot writes (see `writer`).
    Writer(writer::Writer),
}

#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool of `$store`. The body is written
/// once and compiled once per backend, so both run the same SQL text and decode rows the
/// same way; code that needs per-backend SQL matches on `Store::backend` inside the body.
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pool {
            $crate::storage::Pool::Sqlite($pool) => $body,
            $crate::storage::Pool::Postgres($pool) => $body,
        }
    };
}
use with_pool;

/// SQLite waits this long for the write lock before reporting "database is locked". Writes
/// are short transactions, so a few seconds means something is wrong, not merely busy.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl Store {
    /// Connects, creating the SQLite file and its directory when missing (WAL mode), and
    /// applies the migrations.
    pub async fn connect(url: &str) -> Result<Store> {
        if url.starts_with("sqlite:") {
            let (pool, file) = connect_sqlite(url).await?;
            let checkpoints = std::sync::Arc::default();
            let engine = engine::Engine::open(&file, std::sync::Arc::clone(&checkpoints))?;
            tokio::spawn(wal_upkeep::checkpoints(pool.clone(), checkpoints));
            Ok(Store {
                pool: Pool::Sqlite(pool),
                hot: HotPath::Engine(engine),
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = connect_postgres(url).await?;
            Ok(Store {
                hot: HotPath::Writer(writer::Writer::spawn(pool.clone())),
                pool: Pool::Postgres(pool),
            })
        } else {
            Err(StorageError::UnsupportedUrl(url.to_string()))
        }
    }

    /// The SQLite engine, on a SQLite store: what a read of the message path runs on.
    fn engine(&self) -> Option<&engine::Engine> {
        match &self.hot {
            HotPath::Engine(engine) => Some(engine),
            HotPath::Writer(_) => None,
        }
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    pub async fn ping(&self) -> Result<()> {
        with_pool!(self, pool => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()))?;
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be returned. Other clones of
    /// this handle fail from then on.
    pub async fn close(&self) {
        if let Some(engine) = self.engine() {
            engine.close();
        }
        with_pool!(self, pool => pool.close().await)
    }

    /// Marks row `id` failed with `error`, by `sql`, which binds `$1` the id, `$2` the error
    /// and `$3` now: the journal's and the outbox's failures, each with its own rule of
    /// which states may fail.
    async fn mark_failed(&self, sql: &'static str, id: i64, error: &str) -> Result<()> {
        let now = now_ms();
        with_pool!(self, pool => {
            sqlx::query(sql)
                .bind(id)
                .bind(error)
                .bind(now)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(())
    }

    pub async fn upsert_agent(&self, id: &AgentId, name: &str) -> Result<()> {
        let now = now_ms();
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO agents (id, name, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $3)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(id)
            .bind(name)
            .bind(now)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(())
    }
}

/// The pool, and the database file (the engine opens it too). An in-memory database is
/// refused: it lives in one connection, which the engine could not share, and production
/// never runs on one (see the module doc).
async fn connect_sqlite(url: &str) -> Result<(SqlitePool, std::path::PathBuf)> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT);
    // `sqlite::memory:` names a shared-cache file (`file:sqlx-in-memory-N`).
    let in_memory = options.get_filename().as_os_str() == ":memory:"
        || url.contains("mode=memory")
        || url.contains(":memory:");
    if in_memory {
        return Err(StorageError::UnsupportedUrl(url.to_string()));
    }
    let file = options.get_filename().to_path_buf();
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            sqlx::Error::Configuration(
                format!("creating the SQLite directory {}: {e}", dir.display()).into(),
            )
        })?;
    }
    // One connection: SQLite has a single writer, and several pooled writers only meet in
    // its busy handler, which sleeps. Queued on the pool instead, each statement runs as
    // soon as the previous one is done; reads take microseconds.
    // `test_before_acquire(false)`: the default pings the connection at every acquire,
    // which on SQLite is one more round trip to the worker thread for every statement; a
    // SQLite connection does not go stale the way a network one does.
    let pool = SqlitePoolOptions::new()
        .test_before_acquire(false)
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await?;
    sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
    Ok((pool, file))
}

/// Postgres connections per process. Every statement outside a transaction is its own
/// commit, which holds its connection until the WAL is flushed (10–50 ms on a loaded disk):
/// with 10 connections, commits (a reply marked delivered, a journal batch) queued for the
/// pool instead of sharing the flush, and a busy process made about 10 commits per flush.
/// Two replicas at 32 stay well inside Postgres's default `max_connections` of 100.
const PG_POOL: u32 = 32;

/// A pooled Postgres connection idle for longer than this is pinged before it is handed
/// out; one used more recently is not (see `connect_postgres`).
const PG_PING_IDLE: Duration = Duration::from_secs(1);

async fn connect_postgres(url: &str) -> Result<PgPool> {
    // sqlx pings a connection when it goes back to the pool, and by default once more when
    // it is taken out: two round trips beside each statement's one, on the hot path where
    // every statement takes its own connection. The second ping is kept only for a
    // connection that sat idle (the server may have dropped it since); one released a
    // moment ago passed its release ping then.
    let pool = PgPoolOptions::new()
        .max_connections(PG_POOL)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PG_PING_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await?;
    // sqlx takes an advisory lock while migrating, so replicas starting together are safe.
    sqlx::migrate!("../migrations/postgres").run(&pool).await?;
    Ok(pool)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Parses a JSON column, naming the row in the error so an operator can find it.
fn parse_json<T: serde::de::DeserializeOwned>(
    table: &str,
    id: i64,
    column: &str,
    json: &str,
) -> Result<T> {
    serde_json::from_str(json)
        .map_err(|e| StorageError::Corrupt(format!("{table} row {id}: column {column}: {e}")))
}
