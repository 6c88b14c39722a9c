//! Room memory: committing a handled message (memory, reply, outbox, journal state) as one
//! transaction, and reading a room's recent messages and the list of rooms.
//!
//! What to remember and how to summarise it is the memory module's business, not this one's.

use super::writer::{HandledReq, MemoryReq};
use super::{
    HandledMessage, JournalId, MemoryMessage, NewMemory, OutboxId, RecordedReply, Result,
    RoomSummary, StorageError, Store, parse_json, with_pool,
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
            .handled(owned(handled, None)?)
            .await?
            .map(|reply| reply.id()))
    }

    /// `record_handled`, with the reply's outbox entry inserted already claimed by the
    /// caller for `lease_ms` (one attempt counted), so that it can deliver it at once
    /// without `outbox_claim_one`: that is `RecordedReply::Claimed`. When the entry was
    /// already done, its existing reply comes back unclaimed, as `RecordedReply::Queued`.
    pub async fn record_handled_claimed(
        &self,
        handled: HandledMessage<'_>,
        lease_ms: i64,
    ) -> Result<Option<RecordedReply>> {
        self.handled(owned(handled, Some(lease_ms))?).await
    }

    /// On the SQLite engine's thread when there is one, else batched by the writer task.
    async fn handled(&self, req: HandledReq) -> Result<Option<RecordedReply>> {
        match &self.engine {
            Some(engine) => {
                engine
                    .call(move |conn| super::engine::record_handled(conn, &req))
                    .await
            }
            None => self.writer.record_handled(req).await,
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
        if let Some(engine) = &self.engine {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .call(move |conn| super::engine::recent_messages(conn, &agent, &room, limit))
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
    /// then (`recent`: up to that many) its last messages, oldest first, and (`summary`)
    /// its summary's text once those fill the window. On the SQLite engine that is one
    /// round trip instead of three (issue 18); elsewhere the same reads one after another.
    pub async fn room_context(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        recent: Option<i64>,
        summary: bool,
    ) -> Result<RoomContext> {
        if let Some(engine) = &self.engine {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .call(move |conn| {
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
        let state = self.room_state(agent_id, room).await?;
        let Some(limit) = recent else {
            return Ok(RoomContext {
                state,
                recent: None,
                summary: None,
            });
        };
        let messages = self.recent_messages(agent_id, room, limit).await?;
        let summary = if summary && messages.len() as i64 >= limit {
            Some(self.room_summary(agent_id, room).await?.map(|s| s.summary))
        } else {
            None
        };
        Ok(RoomContext {
            state,
            recent: Some(messages),
            summary,
        })
    }

    /// The agent's rooms with their message counts, most recently active first.
    pub async fn rooms(&self, agent_id: &AgentId) -> Result<Vec<RoomSummary>> {
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
pub(super) fn owned(handled: HandledMessage<'_>, lease_ms: Option<i64>) -> Result<HandledReq> {
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
        lease_ms,
        now: super::now_ms(),
    })
}
