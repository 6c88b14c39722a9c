//! Room memory: committing a handled message (memory, reply, outbox, journal state) as one
//! transaction, and reading a room's recent messages and the list of rooms.
//!
//! What to remember and how to summarise it is the memory module's business, not this one's.

use super::{
    HandledMessage, JournalId, MemoryMessage, NewMemory, OutboxId, Result, RoomSummary, Store,
    parse_json, with_pool,
};
use troupe_connectors::Outbound;

const INSERT_MESSAGE: &str = "INSERT INTO messages
         (agent_id, room, journal_id, author_id, author_name, text, from_agent, created_at_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Later sightings win; a re-driven old message must not roll a name or a time back.
const UPSERT_USER: &str = "INSERT INTO users (platform, user_id, name, last_seen_ms)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (platform, user_id) DO UPDATE SET
         name = CASE WHEN excluded.last_seen_ms >= users.last_seen_ms
                     THEN excluded.name ELSE users.name END,
         last_seen_ms = CASE WHEN excluded.last_seen_ms > users.last_seen_ms
                             THEN excluded.last_seen_ms ELSE users.last_seen_ms END";

/// `CASE` rather than `max()`/`GREATEST()`, which is where the two dialects part.
const UPSERT_ROOM: &str = "INSERT INTO rooms (agent_id, room, platform, name, last_active_ms)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (agent_id, room) DO UPDATE SET
         name = COALESCE(excluded.name, rooms.name),
         last_active_ms = CASE WHEN excluded.last_active_ms > rooms.last_active_ms
                               THEN excluded.last_active_ms ELSE rooms.last_active_ms END";

impl Store {
    /// Commits a handled message; returns the outbox id of the reply, if any.
    ///
    /// Idempotent per journal entry: if it is already `Done` (a re-drive after a crash
    /// between commit and acknowledgement), nothing is written and the existing reply's
    /// outbox id is returned. An unknown journal id is `sqlx::Error::RowNotFound`.
    pub async fn record_handled(&self, handled: HandledMessage<'_>) -> Result<Option<OutboxId>> {
        let HandledMessage {
            journal_id,
            agent_id,
            room,
            room_name,
            inbound,
            reply,
        } = handled;
        let room_key = room.to_string();
        let platform = room.platform.as_str();
        let now = super::now_ms();
        let last_active = reply.as_ref().map_or(inbound.created_at_ms, |(r, _)| {
            r.created_at_ms.max(inbound.created_at_ms)
        });

        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            // The journal update comes first: it takes the write lock (SQLite) or the row
            // lock (Postgres) before anything is read, so two concurrent calls for the same
            // entry serialise here and the second one sees `done`.
            let marked = sqlx::query(
                "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = $2
                 WHERE id = $1 AND state <> 'done'",
            )
            .bind(journal_id.0)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if marked == 0 {
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM journal WHERE id = $1")
                    .bind(journal_id.0)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Err(sqlx::Error::RowNotFound.into());
                }
                let existing: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM outbox WHERE journal_id = $1 ORDER BY id LIMIT 1",
                )
                .bind(journal_id.0)
                .fetch_optional(&mut *tx)
                .await?;
                tx.commit().await?;
                return Ok(existing.map(OutboxId));
            }

            sqlx::query(UPSERT_ROOM)
                .bind(agent_id)
                .bind(&room_key)
                .bind(platform)
                .bind(room_name)
                .bind(last_active)
                .execute(&mut *tx)
                .await?;

            let memories = std::iter::once(&inbound).chain(reply.as_ref().map(|(m, _)| m));
            for memory in memories {
                // The persona is an agent, not a platform user.
                if !memory.from_agent {
                    sqlx::query(UPSERT_USER)
                        .bind(platform)
                        .bind(memory.author_id)
                        .bind(memory.author_name)
                        .bind(memory.created_at_ms)
                        .execute(&mut *tx)
                        .await?;
                }
                let NewMemory { author_id, author_name, text, from_agent, created_at_ms } = memory;
                sqlx::query(INSERT_MESSAGE)
                    .bind(agent_id)
                    .bind(&room_key)
                    .bind(journal_id.0)
                    .bind(*author_id)
                    .bind(*author_name)
                    .bind(*text)
                    .bind(*from_agent)
                    .bind(*created_at_ms)
                    .execute(&mut *tx)
                    .await?;
            }

            let outbox_id = match &reply {
                None => None,
                // Due at once (not_before 0): the agent usually claims it right away with
                // `outbox_claim_one`, and the delivery worker picks it up otherwise.
                Some((_, outbound)) => Some(
                    sqlx::query_scalar::<_, i64>(
                        "INSERT INTO outbox
                             (agent_id, journal_id, outbound, state, attempts, not_before_ms,
                              created_at_ms, updated_at_ms)
                         VALUES ($1, $2, $3, 'pending', 0, 0, $4, $4)
                         RETURNING id",
                    )
                    .bind(agent_id)
                    .bind(journal_id.0)
                    .bind(sqlx::types::Json(outbound))
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?,
                ),
            };
            tx.commit().await?;
            Ok(outbox_id.map(OutboxId))
        })
    }

    /// The last `limit` messages of the room, oldest first.
    pub async fn recent_messages(
        &self,
        agent_id: &str,
        room: &str,
        limit: i64,
    ) -> Result<Vec<MemoryMessage>> {
        // Ids follow commit order within a room (one transaction writes the inbound, then
        // the reply), which is the order the conversation happened in; platform timestamps
        // may disagree by a few milliseconds.
        let rows = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
                 FROM (SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
                       FROM messages
                       WHERE agent_id = $1 AND room = $2
                       ORDER BY id DESC
                       LIMIT $3) AS recent
                 ORDER BY id",
            )
            .bind(agent_id)
            .bind(room)
            .bind(limit.max(0))
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// The agent's rooms with their message counts, most recently active first.
    pub async fn rooms(&self, agent_id: &str) -> Result<Vec<RoomSummary>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT r.room, r.platform, r.name, r.last_active_ms,
                        (SELECT COUNT(*) FROM messages m
                         WHERE m.agent_id = r.agent_id AND m.room = r.room) AS message_count
                 FROM rooms r
                 WHERE r.agent_id = $1
                 ORDER BY r.last_active_ms DESC, r.room",
            )
            .bind(agent_id)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// The replies recorded for a journal entry (to answer a duplicate HTTP post the same).
    pub async fn replies_for(&self, journal_id: JournalId) -> Result<Vec<Outbound>> {
        let rows: Vec<(i64, String)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, CAST(outbound AS TEXT) FROM outbox WHERE journal_id = $1 ORDER BY id",
            )
            .bind(journal_id.0)
            .fetch_all(pool)
            .await
        })?;
        rows.iter()
            .map(|(id, json)| parse_json("outbox", *id, "outbound", json))
            .collect()
    }
}
