//! The journal: every accepted inbound message, deduplicated by the database's unique key,
//! and the states that let a restart drive unfinished work again.
//!
//! Handling a message (memory, reply, `Done`) is `memory::record_handled`, which must set
//! the state in the same transaction as the rest.

use super::writer::JournalReq;
use super::{
    JournalEntry, JournalId, JournalInsert, JournalState, Result, StorageError, Store, now_ms,
    parse_json, with_pool,
};
use troupe_connectors::{Inbound, Platform};

/// A journal read: the columns `JournalRow` wants, then `$rest`. JSON is read as text in
/// both backends (a no-op cast in SQLite, `jsonb::text` in Postgres) so that decoding and
/// its errors are ours. A macro so the SQL stays a `&'static str`.
macro_rules! select_journal {
    ($rest:literal) => {
        concat!(
            "SELECT id, agent_id, CAST(inbound AS TEXT) AS inbound, state, attempts, last_error
             FROM journal ",
            $rest
        )
    };
}

#[derive(sqlx::FromRow)]
struct JournalRow {
    id: i64,
    agent_id: String,
    inbound: String,
    state: String,
    attempts: i32,
    last_error: Option<String>,
}

impl TryFrom<JournalRow> for JournalEntry {
    type Error = StorageError;
    fn try_from(row: JournalRow) -> Result<Self> {
        Ok(JournalEntry {
            id: JournalId(row.id),
            inbound: parse_json("journal", row.id, "inbound", &row.inbound)?,
            state: JournalState::parse(row.id, &row.state)?,
            agent_id: row.agent_id,
            attempts: row.attempts,
            last_error: row.last_error,
        })
    }
}

impl Store {
    /// Journals an inbound message for an agent, unless that agent already has it. The
    /// unique key decides, so two replicas receiving the same event cannot both insert it.
    pub async fn journal_insert(&self, agent_id: &str, inbound: &Inbound) -> Result<JournalInsert> {
        let inbound_json = serde_json::to_string(inbound)
            .map_err(|e| StorageError::Corrupt(format!("cannot encode an inbound message: {e}")))?;
        self.writer
            .journal_insert(JournalReq {
                agent_id: agent_id.to_string(),
                platform: inbound.platform().as_str(),
                message_id: inbound.id.as_str().to_string(),
                room: inbound.room.key().to_string(),
                inbound_json,
                now: now_ms(),
            })
            .await
    }

    pub async fn journal_get(&self, id: JournalId) -> Result<Option<JournalEntry>> {
        let row: Option<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!("WHERE id = $1")).bind(id.0).fetch_optional(pool).await
        })?;
        row.map(JournalEntry::try_from).transpose()
    }

    /// Pending and failed entries, oldest first, for the restart drive.
    pub async fn journal_unfinished(&self, limit: i64) -> Result<Vec<JournalEntry>> {
        let rows: Vec<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!(
                "WHERE state IN ('pending', 'failed') ORDER BY id LIMIT $1"
            ))
            .bind(limit.max(0)).fetch_all(pool).await
        })?;
        rows.into_iter().map(JournalEntry::try_from).collect()
    }

    /// Marks an entry failed with its error and counts the attempt. A `Done` entry stays
    /// done: its effects are committed, and driving it again would answer twice.
    pub async fn journal_fail(&self, id: JournalId, error: &str) -> Result<()> {
        let now = now_ms();
        with_pool!(self, pool => {
            sqlx::query(
                "UPDATE journal
                 SET state = 'failed', last_error = $2, attempts = attempts + 1, updated_at_ms = $3
                 WHERE id = $1 AND state <> 'done'",
            )
            .bind(id.0)
            .bind(error)
            .bind(now)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(())
    }

    pub async fn journal_lookup(
        &self,
        agent_id: &str,
        platform: Platform,
        message_id: &str,
    ) -> Result<Option<JournalEntry>> {
        let row: Option<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!(
                "WHERE agent_id = $1 AND platform = $2 AND platform_message_id = $3"
            ))
                .bind(agent_id)
                .bind(platform.as_str())
                .bind(message_id)
                .fetch_optional(pool)
                .await
        })?;
        row.map(JournalEntry::try_from).transpose()
    }
}
