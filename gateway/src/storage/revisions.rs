//! The earlier exchange an edit or a delete refers to (issue 32): the journal entries of a
//! platform message and of its earlier edits, the persona's reply to them on the platform,
//! and dropping that exchange from room memory. It decides nothing: the window, the
//! re-run and the platform calls are the agent's (`agent::edit`).
//!
//! An edit is journaled under its own id, `{message}:edit:{ms}` (`Revision::edit_id`), so
//! "the exchange of message M" is the entry of M and those of its edits: the statements
//! below select them by that id, never by searching the text.

use troupe_connectors::{AgentId, MessageId, RoomKey};

use super::{JournalId, Result, Store, now_ms, with_pool};

/// What the persona and the room hold of one platform message and its earlier edits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Journal entries of the message and its edits (the event being handled excluded).
    pub entries: usize,
    /// The persona answered it (a reply was recorded, delivered or not).
    pub answered: bool,
    /// The reply's messages on the platform, in order, each once.
    pub reply: Vec<MessageId>,
}

/// The journal entries of message `$4` and its edits (`$5`, the pattern of their ids) in
/// room `$3`, but entry `$6`: a literal, so each statement is one static text.
macro_rules! entries {
    () => {
        "SELECT id FROM journal
         WHERE agent_id = $1 AND platform = $2 AND room = $3
           AND (platform_message_id = $4 OR platform_message_id LIKE $5) AND id <> $6"
    };
}

impl Store {
    /// The exchange of `message` in `room`, as the event `current` (an edit or a delete of
    /// it, journaled already) finds it.
    pub async fn exchange_of(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        message: &MessageId,
        current: JournalId,
    ) -> Result<Exchange> {
        let edits = format!("{message}:edit:%");
        let (entries, replies) = with_pool!(self, pool => async {
            let (entries,): (i64,) = sqlx::query_as(concat!("SELECT COUNT(*) FROM (", entries!(), ") e"))
                .bind(agent_id)
                .bind(room.platform)
                .bind(room)
                .bind(message.as_str())
                .bind(&edits)
                .bind(current.0)
                .fetch_one(pool)
                .await?;
            let replies: Vec<(Option<String>,)> = sqlx::query_as(concat!(
                "SELECT CAST(platform_ids AS TEXT) FROM outbox WHERE journal_id IN (",
                entries!(),
                ") ORDER BY id"
            ))
                .bind(agent_id)
                .bind(room.platform)
                .bind(room)
                .bind(message.as_str())
                .bind(&edits)
                .bind(current.0)
                .fetch_all(pool)
                .await?;
            Ok::<_, sqlx::Error>((entries, replies))
        }.await)?;
        let mut reply: Vec<MessageId> = Vec::new();
        for (ids,) in &replies {
            let ids: Vec<String> = ids
                .as_deref()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or_default();
            for id in ids {
                let id = MessageId::new(id);
                if !reply.contains(&id) {
                    reply.push(id);
                }
            }
        }
        Ok(Exchange {
            entries: usize::try_from(entries).unwrap_or(0),
            answered: !replies.is_empty(),
            reply,
        })
    }

    /// Drops the exchange of `message` from the room's memory (both what was said and the
    /// persona's reply); returns the rows removed. The journal and the outbox keep their
    /// records: they are what makes a redelivery harmless.
    pub async fn drop_exchange(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        message: &MessageId,
        current: JournalId,
    ) -> Result<u64> {
        let edits = format!("{message}:edit:%");
        let removed = with_pool!(self, pool => {
            sqlx::query(concat!(
                "DELETE FROM messages WHERE agent_id = $1 AND journal_id IN (",
                entries!(),
                ")"
            ))
                .bind(agent_id)
                .bind(room.platform)
                .bind(room)
                .bind(message.as_str())
                .bind(&edits)
                .bind(current.0)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
        })?;
        Ok(removed)
    }

    /// Closes an edit or a delete handled without a reply and without a trace in memory.
    pub async fn journal_done(&self, id: JournalId) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = $2
                 WHERE id = $1",
            )
            .bind(id.0)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }
}
