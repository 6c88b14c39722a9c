//! Memory beyond the recent window: each room's rolling summary, and facts learned about
//! users (tables from `migrations/*/0004_memory.sql`).
//!
//! Both only move forward. A summary is written with the id of the last message it covers,
//! and a write that would not advance that id is refused; fact extraction keeps a per-user
//! position the same way, and commits the position with the facts it produced. So two
//! replicas that race on the same room or user never roll memory back nor store a batch
//! twice, without any lock held across a model call.
//!
//! What to remember, when, and how to ask the model belongs to `crate::memory`.

use serde::Serialize;
use troupe_connectors::{AgentId, Platform, RoomKey, UserId};

use super::memory_sql::{
    self, ADVANCE_FACT_PROGRESS, COUNT_ROOM_MESSAGES_AFTER, COUNT_USER_MESSAGES_AFTER,
    FACT_PROGRESS, INSERT_USER_FACT, PUT_ROOM_SUMMARY, ROOM_MESSAGES_AFTER, ROOM_SUMMARY,
    TRIM_USER_FACTS, USER_FACTS, USER_MESSAGES_AFTER,
};
use super::{MemoryMessage, Result, Store, with_pool};

/// A room's rolling summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ConversationSummary {
    #[serde(rename = "text")]
    pub summary: String,
    /// The newest message (`messages.id`) the summary covers.
    pub through_message_id: i64,
    pub updated_at_ms: i64,
}

/// A fact about one of a room's users, as the memories route lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RoomUserFact {
    pub user_id: String,
    /// The user's latest known name (the user id when none was recorded).
    pub user_name: String,
    pub fact: String,
    /// The room it was learned in (any room of the agent on the same platform).
    pub room: RoomKey,
    pub created_at_ms: i64,
}

/// Whose facts: a platform user, as one agent knows them.
#[derive(Debug, Clone, Copy)]
pub struct FactSubject<'a> {
    pub agent_id: &'a AgentId,
    /// User ids are only unique within a platform.
    pub platform: Platform,
    pub user_id: &'a UserId,
}

impl From<FactSubject<'_>> for memory_sql::Subject {
    fn from(who: FactSubject<'_>) -> memory_sql::Subject {
        memory_sql::Subject {
            agent_id: who.agent_id.clone(),
            platform: who.platform,
            user_id: who.user_id.clone(),
        }
    }
}

/// What one fact extraction produced, committed together with the new position.
#[derive(Debug, Clone)]
pub struct NewFacts<'a> {
    pub facts: &'a [String],
    /// The room of the newest message read (where the facts were learned).
    pub room: &'a RoomKey,
    /// The newest message read: becomes the user's position, and each fact's source.
    pub through_message_id: i64,
    /// Keep at most this many facts for the user, the newest.
    pub keep: i64,
    pub now_ms: i64,
}

impl Store {
    /// The room's summary, if one was written.
    pub async fn room_summary(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
    ) -> Result<Option<ConversationSummary>> {
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| memory_sql::room_summary(conn, &agent, &room))
                .await
                .map(|row| {
                    row.map(
                        |(summary, through_message_id, updated_at_ms)| ConversationSummary {
                            summary,
                            through_message_id,
                            updated_at_ms,
                        },
                    )
                });
        }
        let row = with_pool!(self, pool => {
            sqlx::query_as(ROOM_SUMMARY)
            .bind(agent_id)
            .bind(room)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row)
    }

    /// Writes the room's summary if it covers more than the stored one. Returns whether it
    /// was written (false: another writer got further first).
    pub async fn put_room_summary(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        summary: &str,
        through_message_id: i64,
        now_ms: i64,
    ) -> Result<bool> {
        if let Some(engine) = self.engine() {
            let (agent, room, summary) = (agent_id.clone(), room.clone(), summary.to_string());
            return engine
                .call(move |conn| {
                    memory_sql::put_room_summary(
                        conn,
                        (&agent, &room),
                        &summary,
                        through_message_id,
                        now_ms,
                    )
                })
                .await;
        }
        let written = with_pool!(self, pool => {
            sqlx::query(PUT_ROOM_SUMMARY)
            .bind(agent_id)
            .bind(room)
            .bind(summary)
            .bind(through_message_id)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(written > 0)
    }

    /// How many messages of the room come after message `after_id`.
    pub async fn count_room_messages_after(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        after_id: i64,
    ) -> Result<i64> {
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| {
                    memory_sql::count_room_messages_after(conn, &agent, &room, after_id)
                })
                .await;
        }
        let n = with_pool!(self, pool => {
            sqlx::query_scalar(COUNT_ROOM_MESSAGES_AFTER)
            .bind(agent_id)
            .bind(room)
            .bind(after_id)
            .fetch_one(pool)
            .await
        })?;
        Ok(n)
    }

    /// The room's first `limit` messages after message `after_id`, oldest first.
    pub async fn room_messages_after(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<MemoryMessage>> {
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| {
                    memory_sql::room_messages_after(conn, (&agent, &room), after_id, limit)
                })
                .await;
        }
        let rows = with_pool!(self, pool => {
            sqlx::query_as(ROOM_MESSAGES_AFTER)
                .bind(agent_id)
                .bind(room)
                .bind(after_id)
                .bind(limit.max(0))
                .fetch_all(pool)
                .await
        })?;
        Ok(rows)
    }

    /// Up to where fact extraction has read the user's messages (0: nothing yet).
    pub async fn fact_progress(&self, who: FactSubject<'_>) -> Result<i64> {
        if let Some(engine) = self.engine() {
            let who = memory_sql::Subject::from(who);
            return engine
                .read(move |conn| memory_sql::fact_progress(conn, &who))
                .await;
        }
        let through: Option<i64> = with_pool!(self, pool => {
            sqlx::query_scalar(FACT_PROGRESS)
            .bind(who.agent_id)
            .bind(who.platform)
            .bind(who.user_id)
            .fetch_optional(pool)
            .await
        })?;
        Ok(through.unwrap_or(0))
    }

    /// How many messages the user wrote to the agent, in any room of the platform, after
    /// message `after_id`.
    pub async fn count_user_messages_after(
        &self,
        who: FactSubject<'_>,
        after_id: i64,
    ) -> Result<i64> {
        if let Some(engine) = self.engine() {
            let who = memory_sql::Subject::from(who);
            return engine
                .read(move |conn| memory_sql::count_user_messages_after(conn, &who, after_id))
                .await;
        }
        let n = with_pool!(self, pool => {
            sqlx::query_scalar(COUNT_USER_MESSAGES_AFTER)
            .bind(who.agent_id)
            .bind(who.user_id)
            .bind(memory_sql::room_pattern(who.platform))
            .bind(after_id)
            .fetch_one(pool)
            .await
        })?;
        Ok(n)
    }

    /// The user's newest `limit` messages after message `after_id`, oldest first.
    pub async fn user_messages_after(
        &self,
        who: FactSubject<'_>,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<MemoryMessage>> {
        let mut rows: Vec<MemoryMessage> = if let Some(engine) = self.engine() {
            let who = memory_sql::Subject::from(who);
            engine
                .read(move |conn| memory_sql::user_messages_after(conn, &who, after_id, limit))
                .await?
        } else {
            with_pool!(self, pool => {
                sqlx::query_as(USER_MESSAGES_AFTER)
                    .bind(who.agent_id)
                    .bind(who.user_id)
                    .bind(memory_sql::room_pattern(who.platform))
                    .bind(after_id)
                    .bind(limit.max(0))
                    .fetch_all(pool)
                    .await
            })?
        };
        rows.reverse();
        Ok(rows)
    }

    /// The user's facts, newest first: with the facts of every account linked with theirs
    /// (`person_of`), merged by time, a fact read alike on two accounts once.
    pub async fn user_facts(&self, who: FactSubject<'_>, limit: i64) -> Result<Vec<String>> {
        if let Some(engine) = self.engine() {
            let who = memory_sql::Subject::from(who);
            return engine
                .read(move |conn| {
                    let person =
                        super::people::person_on(conn, &who.agent_id, who.platform, &who.user_id)?;
                    let mut facts = Vec::new();
                    for account in &person.accounts {
                        facts.extend(memory_sql::account_facts(
                            conn,
                            &who.agent_id,
                            (account.platform, &account.user_id),
                            limit,
                        )?);
                    }
                    Ok(newest_facts(&person, facts, limit))
                })
                .await;
        }
        let person = self
            .person_of(who.agent_id, who.platform, who.user_id)
            .await?;
        let mut facts: Vec<(i64, i64, String)> = Vec::new();
        for account in &person.accounts {
            let rows: Vec<(i64, i64, String)> = with_pool!(self, pool => {
                sqlx::query_as(USER_FACTS)
                .bind(who.agent_id)
                .bind(account.platform)
                .bind(&account.user_id)
                .bind(limit.max(0))
                .fetch_all(pool)
                .await
            })?;
            facts.extend(rows);
        }
        Ok(newest_facts(&person, facts, limit))
    }

    /// Commits one extraction in a transaction: moves the user's position to
    /// `through_message_id`, adds the facts not already known (exact text), and keeps the
    /// newest `keep`. Returns false, writing nothing, when the position was already there
    /// or beyond (another replica handled these messages).
    pub async fn record_user_facts(&self, who: FactSubject<'_>, new: NewFacts<'_>) -> Result<bool> {
        if let Some(engine) = self.engine() {
            let who = memory_sql::Subject::from(who);
            let new = memory_sql::FactsRow {
                facts: new.facts.to_vec(),
                room: new.room.clone(),
                through_message_id: new.through_message_id,
                keep: new.keep,
                now_ms: new.now_ms,
            };
            return engine
                .call(move |conn| memory_sql::record_user_facts(conn, &who, &new))
                .await;
        }
        let written = with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                let advanced = sqlx::query(ADVANCE_FACT_PROGRESS)
                .bind(who.agent_id)
                .bind(who.platform)
                .bind(who.user_id)
                .bind(new.through_message_id)
                .bind(new.now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if advanced == 0 {
                    tx.rollback().await?;
                    return Ok::<bool, sqlx::Error>(false);
                }
                for fact in new.facts {
                    sqlx::query(INSERT_USER_FACT)
                    .bind(who.agent_id)
                    .bind(who.platform)
                    .bind(who.user_id)
                    .bind(fact)
                    .bind(new.room)
                    .bind(new.through_message_id)
                    .bind(new.now_ms)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query(TRIM_USER_FACTS)
                .bind(who.agent_id)
                .bind(who.platform)
                .bind(who.user_id)
                .bind(new.keep.max(0))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(true)
            }
            .await
        })?;
        Ok(written)
    }

    /// Facts about the people who wrote in the room (any room of the agent on its platform
    /// taught them), grouped by user, newest first within a user.
    pub async fn room_user_facts(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
    ) -> Result<Vec<RoomUserFact>> {
        // One query for both answers: the console's (with ids) and this one.
        let facts = self.room_facts_with_ids(agent_id, room).await?;
        Ok(facts
            .into_iter()
            .map(|f| RoomUserFact {
                user_id: f.user_id,
                user_name: f.user_name,
                fact: f.fact,
                room: f.room,
                created_at_ms: f.created_at_ms,
            })
            .collect())
    }
}

/// The facts of a person's accounts (`(created_at_ms, id, fact)`, each account's newest
/// first): merged by time when linked, a fact read alike on two accounts once, the newest
/// `limit`.
fn newest_facts(
    person: &super::Person,
    mut facts: Vec<(i64, i64, String)>,
    limit: i64,
) -> Vec<String> {
    if person.is_linked() {
        facts.sort_by_key(|b| std::cmp::Reverse((b.0, b.1)));
        let mut seen = std::collections::HashSet::new();
        facts.retain(|(_, _, fact)| seen.insert(fact.to_lowercase()));
    }
    facts.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
    facts.into_iter().map(|(_, _, fact)| fact).collect()
}
