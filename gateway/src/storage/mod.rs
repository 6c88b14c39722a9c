//! Storage: the only code that speaks SQL. (INTERFACE STUB — the storage helper fills it in.)
//!
//! One `Store` handle over SQLite (the embedded default) or Postgres (scale-out), selected by
//! the URL scheme. It owns the schema (migrations under `migrations/{sqlite,postgres}`) and
//! these records:
//! - agents: one row per persona id;
//! - rooms and users: what the platforms told us about them (names, last activity);
//! - messages: room memory, both what people said and what the persona replied;
//! - journal: every accepted `Inbound`, unique on `(platform, platform message id)`, with a
//!   state, so a crash loses nothing and nothing is answered twice;
//! - outbox: every reply to deliver, with attempts and a claim, so delivery survives a crash.

use serde::{Deserialize, Serialize};
use troupe_connectors::{Inbound, Outbound, Platform, RoomKey};

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("unsupported database URL `{0}`: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
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

/// The outcome of `journal_insert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalInsert {
    Inserted(JournalId),
    Duplicate(JournalId, JournalState),
}

#[derive(Debug, Clone)]
pub struct JournalEntry {
    pub id: JournalId,
    pub agent_id: String,
    pub inbound: Inbound,
    pub state: JournalState,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// One message of room memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryMessage {
    pub id: i64,
    pub room: String,
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

#[derive(Debug, Clone, Serialize)]
pub struct RoomSummary {
    pub room: String,
    pub platform: String,
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
    pub agent_id: String,
    pub journal_id: Option<JournalId>,
    pub outbound: Outbound,
    pub attempts: i32,
}

/// Everything the agent writes when it has handled a message, in one transaction: the
/// inbound and the reply in room memory, the reply in the outbox, the journal entry done.
#[derive(Debug, Clone)]
pub struct HandledMessage<'a> {
    pub journal_id: JournalId,
    pub agent_id: &'a str,
    pub room: &'a RoomKey,
    pub room_name: Option<&'a str>,
    pub inbound: NewMemory<'a>,
    /// `None` when the persona decided not to answer (the inbound is still remembered).
    pub reply: Option<(NewMemory<'a>, Outbound)>,
}

#[derive(Clone)]
pub struct Store {
    _private: (),
}

#[allow(unused_variables)]
impl Store {
    /// Connects, creating the SQLite file and its directory when missing (WAL mode), and
    /// applies the migrations.
    pub async fn connect(url: &str) -> Result<Store> {
        unimplemented!()
    }
    pub fn backend(&self) -> Backend {
        unimplemented!()
    }
    pub async fn ping(&self) -> Result<()> {
        unimplemented!()
    }
    pub async fn upsert_agent(&self, id: &str, name: &str) -> Result<()> {
        unimplemented!()
    }
    pub async fn journal_insert(&self, agent_id: &str, inbound: &Inbound) -> Result<JournalInsert> {
        unimplemented!()
    }
    pub async fn journal_get(&self, id: JournalId) -> Result<Option<JournalEntry>> {
        unimplemented!()
    }
    /// Pending and failed entries, oldest first, for the restart drive.
    pub async fn journal_unfinished(&self, limit: i64) -> Result<Vec<JournalEntry>> {
        unimplemented!()
    }
    pub async fn journal_fail(&self, id: JournalId, error: &str) -> Result<()> {
        unimplemented!()
    }
    pub async fn journal_lookup(
        &self,
        agent_id: &str,
        platform: Platform,
        message_id: &str,
    ) -> Result<Option<JournalEntry>> {
        unimplemented!()
    }
    /// Commits a handled message; returns the outbox id of the reply, if any.
    pub async fn record_handled(&self, handled: HandledMessage<'_>) -> Result<Option<OutboxId>> {
        unimplemented!()
    }
    /// The last `limit` messages of the room, oldest first.
    pub async fn recent_messages(
        &self,
        agent_id: &str,
        room: &str,
        limit: i64,
    ) -> Result<Vec<MemoryMessage>> {
        unimplemented!()
    }
    pub async fn rooms(&self, agent_id: &str) -> Result<Vec<RoomSummary>> {
        unimplemented!()
    }
    /// The replies recorded for a journal entry (to answer a duplicate HTTP post the same).
    pub async fn replies_for(&self, journal_id: JournalId) -> Result<Vec<Outbound>> {
        unimplemented!()
    }
    /// Claims up to `limit` undelivered outbox entries whose retry time has come. A claim
    /// expires after `lease_ms`, so a crashed claimer's entries are taken again.
    pub async fn outbox_claim(
        &self,
        limit: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Vec<OutboxEntry>> {
        unimplemented!()
    }
    pub async fn outbox_claim_one(
        &self,
        id: OutboxId,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<OutboxEntry>> {
        unimplemented!()
    }
    pub async fn outbox_delivered(&self, id: OutboxId, platform_ids: &[String]) -> Result<()> {
        unimplemented!()
    }
    pub async fn outbox_retry(&self, id: OutboxId, not_before_ms: i64, error: &str) -> Result<()> {
        unimplemented!()
    }
    pub async fn outbox_give_up(&self, id: OutboxId, error: &str) -> Result<()> {
        unimplemented!()
    }
}
