//! Feedback on replies (issue 32): which platform messages are a persona's replies
//! (`reply_messages`, filled by a trigger when the outbox records a delivery; see
//! migrations/*/0014_feedback.sql), and each person's latest 👍/👎 on one (`feedback`).
//! What a reaction means, and whether it counts, is `crate::feedback`'s.

use serde::Serialize;
use troupe_connectors::{AgentId, MessageId, Platform, RoomKey, UserId};

use super::{Result, StorageError, Store, with_pool};

/// A persona's reply as a reaction finds it: its room and its outbox entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyMessage {
    pub room: RoomKey,
    pub outbox_id: i64,
}

/// The 👍 and 👎 on a reply, one per person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FeedbackTally {
    pub up: i64,
    pub down: i64,
}

/// One person's feedback on one reply.
#[derive(Debug, Clone)]
pub struct NewFeedback<'a> {
    pub agent_id: &'a AgentId,
    pub reply: &'a ReplyMessage,
    pub message: &'a MessageId,
    pub user: &'a UserId,
    /// 1 for 👍, -1 for 👎.
    pub value: i32,
    pub at_ms: i64,
}

/// `(up, down)` sums over `feedback f`, as both backends return them.
macro_rules! tally {
    () => {
        "COALESCE(SUM(CASE WHEN f.value > 0 THEN 1 ELSE 0 END), 0),
         COALESCE(SUM(CASE WHEN f.value < 0 THEN 1 ELSE 0 END), 0)"
    };
}

impl Store {
    /// The persona's reply that is message `message` in `chat` on `platform`, if it is one.
    pub async fn reply_message(
        &self,
        agent_id: &AgentId,
        platform: Platform,
        chat: &str,
        message: &MessageId,
    ) -> Result<Option<ReplyMessage>> {
        let row: Option<(String, i64)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT room, outbox_id FROM reply_messages
                 WHERE agent_id = $1 AND platform = $2 AND chat = $3 AND message_id = $4",
            )
            .bind(agent_id)
            .bind(platform)
            .bind(chat)
            .bind(message.as_str())
            .fetch_optional(pool)
            .await
        })?;
        row.map(|(room, outbox_id)| {
            let room = room
                .parse()
                .map_err(|e| StorageError::Corrupt(format!("reply_messages.room: {e}")))?;
            Ok(ReplyMessage { room, outbox_id })
        })
        .transpose()
    }

    /// Records `feedback`, replacing that person's earlier feedback on the reply. `true`
    /// when it changed something (a repeat of the same value changes nothing).
    pub async fn feedback_set(&self, feedback: &NewFeedback<'_>) -> Result<bool> {
        let done = with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO feedback (agent_id, room, message_id, user_id, value, outbox_id, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (agent_id, room, message_id, user_id) DO UPDATE
                 SET value = excluded.value, created_at_ms = excluded.created_at_ms
                 WHERE feedback.value <> excluded.value",
            )
            .bind(feedback.agent_id)
            .bind(&feedback.reply.room)
            .bind(feedback.message.as_str())
            .bind(feedback.user.as_str())
            .bind(feedback.value)
            .bind(feedback.reply.outbox_id)
            .bind(feedback.at_ms)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(done > 0)
    }

    /// Takes back a person's feedback `value` on a reply (they removed that reaction); a
    /// different value they gave since stays.
    pub async fn feedback_clear(
        &self,
        agent_id: &AgentId,
        reply: &ReplyMessage,
        message: &MessageId,
        user: &UserId,
        value: i32,
    ) -> Result<bool> {
        let done = with_pool!(self, pool => {
            sqlx::query(
                "DELETE FROM feedback
                 WHERE agent_id = $1 AND room = $2 AND message_id = $3 AND user_id = $4 AND value = $5",
            )
            .bind(agent_id)
            .bind(&reply.room)
            .bind(message.as_str())
            .bind(user.as_str())
            .bind(value)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(done > 0)
    }

    /// The feedback on the persona's reply to message `answered` (the platform id of the
    /// message it answered, as the "why" panel names a reply).
    pub async fn feedback_on_reply_to(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        answered: &MessageId,
    ) -> Result<FeedbackTally> {
        const SQL: &str = concat!(
            "SELECT ",
            tally!(),
            " FROM feedback f
             JOIN outbox o ON o.id = f.outbox_id
             JOIN journal j ON j.id = o.journal_id
             WHERE f.agent_id = $1 AND f.room = $2 AND j.platform_message_id = $3"
        );
        let (up, down): (i64, i64) = with_pool!(self, pool => {
            sqlx::query_as(SQL)
                .bind(agent_id)
                .bind(room)
                .bind(answered.as_str())
                .fetch_one(pool)
                .await
        })?;
        Ok(FeedbackTally { up, down })
    }

    /// The feedback on the persona's replies in `room`, by the id of the reply in room
    /// memory (`messages.id`, as `GET …/memories` shows it). Replies without feedback are
    /// not listed.
    pub async fn room_feedback(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
    ) -> Result<Vec<(i64, FeedbackTally)>> {
        const SQL: &str = concat!(
            "SELECT m.id, ",
            tally!(),
            " FROM feedback f
             JOIN outbox o ON o.id = f.outbox_id
             JOIN messages m ON m.journal_id = o.journal_id AND m.agent_id = f.agent_id
                            AND m.room = f.room AND m.from_agent
             WHERE f.agent_id = $1 AND f.room = $2
             GROUP BY m.id"
        );
        let rows: Vec<(i64, i64, i64)> = with_pool!(self, pool => {
            sqlx::query_as(SQL)
                .bind(agent_id)
                .bind(room)
                .fetch_all(pool)
                .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(id, up, down)| (id, FeedbackTally { up, down }))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Kind, on_both_backends, run_with_store as run};
    use super::super::tests::{exchange, inbound};
    use super::*;

    on_both_backends!(feedback_is_one_per_person_per_reply_and_found_from_the_question);

    async fn feedback_is_one_per_person_per_reply_and_found_from_the_question(store: Store) {
        let agent = AgentId::new("fb");
        let question = inbound(Platform::Discord, "c1", "q1", "ann", "ping", 1_000);
        let (_, outbox) = exchange(&store, &agent, &question, Some("pong")).await;
        store
            .outbox_delivered(outbox.unwrap(), &["r1".to_string()])
            .await
            .unwrap();
        let find = |id: &'static str| {
            let (store, agent) = (store.clone(), agent.clone());
            async move {
                store
                    .reply_message(&agent, Platform::Discord, "c1", &MessageId::new(id))
                    .await
                    .unwrap()
            }
        };
        let reply = find("r1").await.expect("the delivered reply is known");
        assert_eq!(reply.room.to_string(), "discord:c1");
        assert_eq!(find("q1").await, None, "the question is no reply");
        let message = MessageId::new("r1");
        let give = |user: &'static str, value: i32| {
            let (store, agent, reply, message) =
                (store.clone(), agent.clone(), reply.clone(), message.clone());
            async move {
                store
                    .feedback_set(&NewFeedback {
                        agent_id: &agent,
                        reply: &reply,
                        message: &message,
                        user: &UserId::new(user),
                        value,
                        at_ms: 2_000,
                    })
                    .await
                    .unwrap()
            }
        };
        assert!(give("ann", 1).await);
        assert!(!give("ann", 1).await, "the same again changes nothing");
        assert!(give("ann", -1).await, "the latest wins");
        assert!(give("bob", 1).await);
        let room = reply.room.clone();
        let tally = store
            .feedback_on_reply_to(&agent, &room, &MessageId::new("q1"))
            .await
            .unwrap();
        assert_eq!(tally, FeedbackTally { up: 1, down: 1 });
        let replies: Vec<i64> = store
            .recent_messages(&agent, &room, 10)
            .await
            .unwrap()
            .into_iter()
            .filter(|m| m.from_agent)
            .map(|m| m.id)
            .collect();
        let by_message = store.room_feedback(&agent, &room).await.unwrap();
        assert_eq!(
            by_message,
            vec![(replies[0], FeedbackTally { up: 1, down: 1 })]
        );
        let ann = UserId::new("ann");
        assert!(
            !store
                .feedback_clear(&agent, &reply, &message, &ann, 1)
                .await
                .unwrap()
        );
        assert!(
            store
                .feedback_clear(&agent, &reply, &message, &ann, -1)
                .await
                .unwrap()
        );
        let tally = store
            .feedback_on_reply_to(&agent, &room, &MessageId::new("q1"))
            .await
            .unwrap();
        assert_eq!(tally, FeedbackTally { up: 1, down: 0 });
    }
}
