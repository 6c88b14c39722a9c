//! Room memory: committing a handled message (memory, reply, outbox, journal state) as one
//! transaction, and reading a room's recent messages and the list of rooms.
//!
//! What to remember and how to summarise it is the memory module's business, not this one's.

use super::writer::{HandledReq, MemoryReq, StartReq};
use super::{
    HandledMessage, HotPath, JournalId, MemoryMessage, NewMemory, OutboxId, RecordedReply,
    ReplyStart, Result, RoomState, RoomSummary, StorageError, Store, parse_json, with_pool,
};
use troupe_connectors::{AgentId, Outbound, RoomKey};

impl Store {
    /// Commits a handled message; returns the outbox id of the reply, if any.
    ///
    /// Idempotent per journal entry: if it is already `Done` (a re-drive after a crash
    /// between commit and acknowledgement), nothing is written and the existing reply's
    /// outbox id is returned. An unknown journal id is `sqlx::Error::RowNotFound`.
    pub async fn record_handled(&self, handled: HandledMessage<'_>) -> Result<Option<OutboxId>> {
        Ok(self
            .handled(owned(handled, &ReplyStart::Pending)?)
            .await?
            .map(|reply| reply.id()))
    }

    /// `record_handled`, with the reply's outbox entry inserted as `start` says: claimed
    /// by the caller for a lease (one attempt counted), so that it can deliver it at once
    /// without `outbox_claim_one` (`RecordedReply::Claimed`); or delivered already
    /// (`RecordedReply::Delivered`). When the entry was already done, its existing reply
    /// comes back unclaimed, as `RecordedReply::Queued`, whatever `start` said.
    pub async fn record_handled_as(
        &self,
        handled: HandledMessage<'_>,
        start: &ReplyStart,
    ) -> Result<Option<RecordedReply>> {
        self.handled(owned(handled, start)?).await
    }

    /// On the SQLite engine's thread when there is one, else batched by the writer task.
    async fn handled(&self, req: HandledReq) -> Result<Option<RecordedReply>> {
        match &self.hot {
            HotPath::Engine(engine) => {
                engine
                    .call(move |conn| super::engine::record_handled(conn, &req))
                    .await
            }
            HotPath::Writer(writer) => writer.record_handled(req).await,
        }
    }

    /// The last `limit` messages of the room, oldest first.
    pub async fn recent_messages(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        limit: i64,
    ) -> Result<Vec<MemoryMessage>> {
        // Ids follow commit order within a room (one transaction writes the inbound, then
        // the reply), which is the order the conversation happened in; platform timestamps
        // may disagree by a few milliseconds.
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| super::engine::recent_messages(conn, &agent, &room, limit))
                .await;
        }
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

    /// What a reply reads of its room before the model, in one call: the room's controls,
    /// then, as `reads` asks, its last messages, oldest first, and its summary's text once
    /// those fill the window. On the SQLite engine that is one round trip instead of three
    /// (issue 18); on Postgres one statement.
    pub async fn room_context(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        reads: RoomReads,
    ) -> Result<RoomContext> {
        let (recent, summary) = match reads {
            RoomReads::Controls => (None, false),
            RoomReads::Window { limit } => (Some(limit), false),
            RoomReads::WindowAndSummary { limit } => (Some(limit), true),
        };
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| {
                    let state = super::rooms::room_state_on(conn, &agent, &room)?;
                    let Some(limit) = recent else {
                        return Ok(RoomContext {
                            state,
                            recent: None,
                            summary: None,
                        });
                    };
                    let messages = super::engine::recent_messages(conn, &agent, &room, limit)?;
                    let summary = (summary && messages.len() as i64 >= limit)
                        .then(|| super::engine::room_summary_text(conn, &agent, &room))
                        .transpose()?;
                    Ok(RoomContext {
                        state,
                        recent: Some(messages),
                        summary,
                    })
                })
                .await;
        }
        let Some(limit) = recent else {
            return Ok(RoomContext {
                state: self.room_state(agent_id, room).await?,
                recent: None,
                summary: None,
            });
        };
        // One statement, so that Postgres answers in one round trip rather than three: the
        // room's controls (none: the defaults), its last `limit` messages (none: one row of
        // NULLs), and its summary, which is read with them and kept only once the window is
        // full. The summary costs one index probe in the same statement; a round trip of its
        // own cost more than that.
        let rows: Vec<ContextRow> = with_pool!(self, pool => {
            sqlx::query_as(if summary { CONTEXT_WITH_SUMMARY } else { CONTEXT })
                .bind(agent_id)
                .bind(room)
                .bind(limit.max(0))
                .fetch_all(pool)
                .await
        })?;
        let state = rows.first().map_or_else(RoomState::default, |r| RoomState {
            muted_until_ms: r.0,
            following: r.1.unwrap_or_default(),
            forgotten_at_ms: r.2,
        });
        let stored_summary = rows.first().and_then(|r| r.3.clone());
        let mut messages = Vec::with_capacity(rows.len());
        for (_, _, _, _, id, room, author_id, author_name, text, from_agent, created_at_ms) in rows
        {
            let Some(id) = id else { continue };
            let missing = || StorageError::Corrupt(format!("messages row {id}: a NULL column"));
            messages.push(MemoryMessage {
                id,
                room: room.ok_or_else(missing)?,
                author_id: author_id.ok_or_else(missing)?,
                author_name: author_name.ok_or_else(missing)?,
                text: text.ok_or_else(missing)?,
                from_agent: from_agent.ok_or_else(missing)?,
                created_at_ms: created_at_ms.ok_or_else(missing)?,
            });
        }
        let summary = (summary && messages.len() as i64 >= limit).then_some(stored_summary);
        Ok(RoomContext {
            state,
            recent: Some(messages),
            summary,
        })
    }

    /// The agent's rooms with their message counts, most recently active first. A room's
    /// activity is the newer of its row's time, which the message path moves only once a
    /// minute (`writer::upsert_room_conflict!`), and its newest message's, one step down
    /// `messages_by_room` from its end.
    pub async fn rooms(&self, agent_id: &AgentId) -> Result<Vec<RoomSummary>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT room, platform, name,
                        CASE WHEN newest > last_active_ms THEN newest ELSE last_active_ms END
                            AS last_active_ms,
                        message_count
                 FROM (SELECT r.room, r.platform, r.name, r.last_active_ms,
                              COALESCE((SELECT m.created_at_ms FROM messages m
                                        WHERE m.agent_id = r.agent_id AND m.room = r.room
                                        ORDER BY m.id DESC LIMIT 1), r.last_active_ms) AS newest,
                              (SELECT COUNT(*) FROM messages m
                               WHERE m.agent_id = r.agent_id AND m.room = r.room) AS message_count
                       FROM rooms r
                       WHERE r.agent_id = $1) AS listed
                 ORDER BY last_active_ms DESC, room",
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

/// `room_context`'s statement on the pool, with the room's summary or a NULL in its place.
macro_rules! context_sql {
    ($summary:literal) => {
        concat!(
            "SELECT s.muted_until_ms, s.following, s.forgotten_at_ms, ",
            $summary,
            ", m.id, m.room, m.author_id, m.author_name, m.text, m.from_agent, m.created_at_ms
             FROM (SELECT 1 AS here) AS here
             LEFT JOIN room_state s ON s.agent_id = $1 AND s.room = $2
             LEFT JOIN (SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
                        FROM messages WHERE agent_id = $1 AND room = $2
                        ORDER BY id DESC LIMIT $3) AS m ON 1 = 1
             ORDER BY m.id"
        )
    };
}
const CONTEXT: &str = context_sql!("CAST(NULL AS TEXT)");
const CONTEXT_WITH_SUMMARY: &str =
    context_sql!("(SELECT summary FROM room_summaries WHERE agent_id = $1 AND room = $2)");

/// One row of `room_context`'s statement: the room's controls and summary (the same on
/// every row), then one message or, for a room without any, NULLs.
type ContextRow = (
    Option<i64>,
    Option<bool>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<RoomKey>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<bool>,
    Option<i64>,
);

/// How much of its room a turn reads before the model (`Store::room_context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomReads {
    /// Only the room's controls: the turn is not going to answer.
    Controls,
    /// The controls and the room's last `limit` messages.
    Window { limit: i64 },
    /// The window and, once it is full, the room's summary.
    WindowAndSummary { limit: i64 },
}

/// What `Store::room_context` read.
#[derive(Debug, Clone, Default)]
pub struct RoomContext {
    pub state: super::RoomState,
    /// The room's last messages, oldest first, when asked for.
    pub recent: Option<Vec<MemoryMessage>>,
    /// When asked for and the window is full: the summary's text, if the room has one.
    pub summary: Option<Option<String>>,
}

/// A copy of `handled` for the writer task.
pub(super) fn owned(handled: HandledMessage<'_>, start: &ReplyStart) -> Result<HandledReq> {
    let HandledMessage {
        journal_id,
        agent_id,
        room,
        room_name,
        inbound,
        reply,
    } = handled;
    let last_active = reply.as_ref().map_or(inbound.created_at_ms, |(r, _)| {
        r.created_at_ms.max(inbound.created_at_ms)
    });
    let memory = |m: &NewMemory<'_>| MemoryReq {
        author_id: m.author_id.to_string(),
        author_name: m.author_name.to_string(),
        text: m.text.to_string(),
        from_agent: m.from_agent,
        created_at_ms: m.created_at_ms,
    };
    let mut memories = vec![memory(&inbound)];
    memories.extend(reply.as_ref().map(|(m, _)| memory(m)));
    Ok(HandledReq {
        journal_id: journal_id.0,
        agent_id: agent_id.clone(),
        room_key: room.clone(),
        room_name: room_name.map(str::to_string),
        last_active,
        memories,
        reply: reply
            .map(|(_, outbound)| {
                let json = serde_json::to_string(&outbound)
                    .map_err(|e| StorageError::Corrupt(format!("cannot encode a reply: {e}")))?;
                Ok::<_, StorageError>((outbound, json))
            })
            .transpose()?,
        start: match start {
            ReplyStart::Pending => StartReq::Pending,
            ReplyStart::Claimed { lease_ms } => StartReq::Claimed(*lease_ms),
            ReplyStart::Delivered { platform_ids } => {
                StartReq::Delivered(serde_json::to_string(platform_ids).map_err(|e| {
                    StorageError::Corrupt(format!("cannot encode a reply's platform ids: {e}"))
                })?)
            }
        },
        now: super::now_ms(),
    })
}
