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

use super::{MemoryMessage, Result, Store, engine_memory, with_pool};

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

/// Keeps a user's newest `$4` facts ($1 agent, $2 platform, $3 user) and deletes the rest:
/// run after every write of facts, learned (`record_user_facts`) or told
/// (`remember_user_fact`), in the same transaction.
pub(super) const TRIM_USER_FACTS: &str = "DELETE FROM user_facts
     WHERE agent_id = $1 AND platform = $2 AND user_id = $3
       AND id NOT IN (SELECT id FROM user_facts
                      WHERE agent_id = $1 AND platform = $2 AND user_id = $3
                      ORDER BY created_at_ms DESC, id DESC
                      LIMIT $4)";

/// The statements both paths run: sqlx on Postgres, the SQLite engine's connection
/// (`engine_memory`) on SQLite. Parameters are numbered in order of first use, so they bind
/// by position on both.
pub(super) const ROOM_SUMMARY: &str =
    "SELECT summary, through_message_id, updated_at_ms FROM room_summaries
     WHERE agent_id = $1 AND room = $2";
pub(super) const PUT_ROOM_SUMMARY: &str =
    "INSERT INTO room_summaries (agent_id, room, summary, through_message_id, updated_at_ms)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (agent_id, room) DO UPDATE SET
         summary = excluded.summary,
         through_message_id = excluded.through_message_id,
         updated_at_ms = excluded.updated_at_ms
     WHERE room_summaries.through_message_id < excluded.through_message_id";
pub(super) const COUNT_ROOM_MESSAGES_AFTER: &str =
    "SELECT COUNT(*) FROM messages WHERE agent_id = $1 AND room = $2 AND id > $3";
pub(super) const ROOM_MESSAGES_AFTER: &str =
    "SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
     FROM messages
     WHERE agent_id = $1 AND room = $2 AND id > $3
     ORDER BY id LIMIT $4";
pub(super) const FACT_PROGRESS: &str = "SELECT through_message_id FROM user_fact_progress
     WHERE agent_id = $1 AND platform = $2 AND user_id = $3";
pub(super) const COUNT_USER_MESSAGES_AFTER: &str = "SELECT COUNT(*) FROM messages
     WHERE agent_id = $1 AND author_id = $2 AND from_agent = $3 AND room LIKE $4
       AND id > $5";
pub(super) const USER_MESSAGES_AFTER: &str =
    "SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
     FROM messages
     WHERE agent_id = $1 AND author_id = $2 AND from_agent = $3 AND room LIKE $4
       AND id > $5
     ORDER BY id DESC LIMIT $6";
pub(super) const USER_FACTS: &str = "SELECT created_at_ms, id, fact FROM user_facts
     WHERE agent_id = $1 AND platform = $2 AND user_id = $3
     ORDER BY created_at_ms DESC, id DESC
     LIMIT $4";
pub(super) const ADVANCE_FACT_PROGRESS: &str = "INSERT INTO user_fact_progress
         (agent_id, platform, user_id, through_message_id, updated_at_ms)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (agent_id, platform, user_id) DO UPDATE SET
         through_message_id = excluded.through_message_id,
         updated_at_ms = excluded.updated_at_ms
     WHERE user_fact_progress.through_message_id < excluded.through_message_id";
pub(super) const INSERT_USER_FACT: &str = "INSERT INTO user_facts
         (agent_id, platform, user_id, fact, room, source_message_id, created_at_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (agent_id, platform, user_id, fact) DO NOTHING";

/// Whose facts: a platform user, as one agent knows them.
#[derive(Debug, Clone, Copy)]
pub struct FactSubject<'a> {
    pub agent_id: &'a AgentId,
    /// User ids are only unique within a platform.
    pub platform: Platform,
    pub user_id: &'a UserId,
}

impl FactSubject<'_> {
    /// The `LIKE` pattern matching this platform's room keys (`telegram:…`). Platform names
    /// are lower-case letters, so they hold no `LIKE` wildcard.
    fn room_pattern(&self) -> String {
        format!("{}:%", self.platform)
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
                .call(move |conn| engine_memory::room_summary(conn, &agent, &room))
                .await;
        }
        let row = with_pool!(self, pool => {
            sqlx::query_as(
                ROOM_SUMMARY,
            )
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
                    engine_memory::put_room_summary(
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
            sqlx::query(
                PUT_ROOM_SUMMARY,
            )
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
                .call(move |conn| {
                    engine_memory::count_room_messages_after(conn, &agent, &room, after_id)
                })
                .await;
        }
        let n = with_pool!(self, pool => {
            sqlx::query_scalar(
                COUNT_ROOM_MESSAGES_AFTER,
            )
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
                .call(move |conn| {
                    engine_memory::room_messages_after(conn, (&agent, &room), after_id, limit)
                })
                .await;
        }
        let rows = with_pool!(self, pool => {
            sqlx::query_as(
                ROOM_MESSAGES_AFTER,
            )
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
            let who = engine_memory::Subject::from(who);
            return engine
                .call(move |conn| engine_memory::fact_progress(conn, &who))
                .await;
        }
        let through: Option<i64> = with_pool!(self, pool => {
            sqlx::query_scalar(
                FACT_PROGRESS,
            )
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
            let who = engine_memory::Subject::from(who);
            return engine
                .call(move |conn| engine_memory::count_user_messages_after(conn, &who, after_id))
                .await;
        }
        let n = with_pool!(self, pool => {
            sqlx::query_scalar(
                COUNT_USER_MESSAGES_AFTER,
            )
            .bind(who.agent_id)
            .bind(who.user_id)
            .bind(false)
            .bind(who.room_pattern())
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
            let who = engine_memory::Subject::from(who);
            engine
                .call(move |conn| engine_memory::user_messages_after(conn, &who, after_id, limit))
                .await?
        } else {
            with_pool!(self, pool => {
                sqlx::query_as(
                    USER_MESSAGES_AFTER,
                )
                    .bind(who.agent_id)
                    .bind(who.user_id)
                    .bind(false)
                    .bind(who.room_pattern())
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
            let who = engine_memory::Subject::from(who);
            return engine
                .call(move |conn| {
                    let person =
                        engine_memory::person_of(conn, &who.agent_id, who.platform, &who.user_id)?;
                    let mut facts = Vec::new();
                    for account in &person.accounts {
                        facts.extend(engine_memory::account_facts(
                            conn,
                            &who.agent_id,
                            account,
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
                sqlx::query_as(
                    USER_FACTS,
                )
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
            let who = engine_memory::Subject::from(who);
            let (facts, room) = (new.facts.to_vec(), new.room.clone());
            let (through_message_id, keep, now_ms) = (new.through_message_id, new.keep, new.now_ms);
            return engine
                .call(move |conn| {
                    let new = NewFacts {
                        facts: &facts,
                        room: &room,
                        through_message_id,
                        keep,
                        now_ms,
                    };
                    engine_memory::record_user_facts(conn, &who, &new)
                })
                .await;
        }
        let written = with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                let advanced = sqlx::query(
                    ADVANCE_FACT_PROGRESS,
                )
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
                    sqlx::query(
                        INSERT_USER_FACT,
                    )
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
