//! The journal: every accepted inbound message, deduplicated by the database's unique key,
//! and the states that let a restart drive unfinished work again.
//!
//! Handling a message (memory, reply, `Done`) is `memory::record_handled`, which must set
//! the state in the same transaction as the rest.

use super::{
    JournalEntry, JournalId, JournalInsert, JournalState, Result, StorageError, Store, now_ms,
    parse_json, with_pool,
};
use sqlx::types::Json;
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

#[derive(sqlx::FromRow)]
struct IdState {
    id: i64,
    state: String,
}

impl Store {
    /// Journals an inbound message for an agent, unless that agent already has it. The
    /// unique key decides, so two replicas receiving the same event cannot both insert it.
    pub async fn journal_insert(&self, agent_id: &str, inbound: &Inbound) -> Result<JournalInsert> {
        let now = now_ms();
        let platform = inbound.platform().as_str();
        let message_id = inbound.id.as_str();
        let room = inbound.room.key().to_string();
        let inserted: Option<i64> = with_pool!(self, pool => {
            sqlx::query_scalar(
                "INSERT INTO journal
                     (agent_id, platform, platform_message_id, room, inbound, state, attempts,
                      created_at_ms, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6)
                 ON CONFLICT (agent_id, platform, platform_message_id) DO NOTHING
                 RETURNING id",
            )
            .bind(agent_id)
            .bind(platform)
            .bind(message_id)
            .bind(&room)
            .bind(Json(inbound))
            .bind(now)
            .fetch_optional(pool)
            .await
        })?;
        if let Some(id) = inserted {
            return Ok(JournalInsert::Inserted(JournalId(id)));
        }
        // The conflicting row is committed (Postgres waits for a concurrent inserter before
        // reporting the conflict) and journal rows are never deleted, so it is there to read.
        let existing: IdState = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, state FROM journal
                 WHERE agent_id = $1 AND platform = $2 AND platform_message_id = $3",
            )
            .bind(agent_id)
            .bind(platform)
            .bind(message_id)
            .fetch_one(pool)
            .await
        })?;
        let state = JournalState::parse(existing.id, &existing.state)?;
        Ok(JournalInsert::Duplicate(JournalId(existing.id), state))
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
