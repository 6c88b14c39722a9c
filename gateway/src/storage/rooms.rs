//! Room controls (table `room_state`, migration 0006): muted until, following, forgotten at;
//! and the two forgettings people can ask for from the chat: a room's memory (`/forget`) and
//! a user's facts (`/forgetme`). Also the one write a chat command makes to the journal: the
//! command's answer queued for delivery, with the entry closed, and nothing in room memory
//! (a command never reaches the model, not even as history).
//!
//! What a command means and who may give it belong to `rooms`; this file only stores.

use sqlx::types::Json;
use troupe_connectors::{AgentId, Outbound, RoomKey};

use super::{FactSubject, JournalId, OutboxId, Result, Store, now_ms, with_pool};

/// How a room is steered. The defaults (no row) are: not muted, not following.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct RoomState {
    /// Muted while this is in the future; `i64::MAX` is "until unmuted".
    pub muted_until_ms: Option<i64>,
    pub following: bool,
    pub forgotten_at_ms: Option<i64>,
}

impl RoomState {
    /// Muted at `now_ms`.
    pub fn muted_at(&self, now_ms: i64) -> bool {
        self.muted_until_ms.is_some_and(|until| until > now_ms)
    }
}

/// Which control a write changes; the others keep their value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomControl {
    /// Muted until then (`i64::MAX`: until unmuted); `None` unmutes.
    Mute(Option<i64>),
    Follow(bool),
}

/// Who said a message, for the room's bot streak (`Store::bump_bot_streak`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    /// A bot, or the persona itself: the streak grows.
    Bot,
    /// A person: the streak ends.
    Person,
}

impl Store {
    /// The room's controls; the defaults when nobody steered it.
    pub async fn room_state(&self, agent_id: &AgentId, room: &RoomKey) -> Result<RoomState> {
        if let Some(engine) = self.engine() {
            let (agent, room) = (agent_id.clone(), room.clone());
            return engine
                .read(move |conn| room_state_on(conn, &agent, &room))
                .await;
        }
        let row: Option<RoomState> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT muted_until_ms, following, forgotten_at_ms FROM room_state
                 WHERE agent_id = $1 AND room = $2",
            )
            .bind(agent_id)
            .bind(room)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row.unwrap_or_default())
    }

    /// The controls of each of `agents` in the room, in their order (the defaults for one
    /// nobody steered there): one read for the whole troupe, where the arbiter asks who
    /// follows the room, instead of one per persona.
    pub async fn room_states_of(
        &self,
        room: &RoomKey,
        agents: &[AgentId],
    ) -> Result<Vec<RoomState>> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        // One placeholder per persona: `IN` with binds reads the same on both dialects,
        // through the table's key (agent_id, room). Only the placeholders are formatted
        // in; every value is bound.
        let ids: Vec<String> = (0..agents.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT agent_id, muted_until_ms, following, forgotten_at_ms FROM room_state
             WHERE room = $1 AND agent_id IN ({})",
            ids.join(", ")
        );
        let rows: Vec<(AgentId, Option<i64>, bool, Option<i64>)> = with_pool!(self, pool => {
            let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str())).bind(room);
            for agent in agents {
                query = query.bind(agent);
            }
            query.fetch_all(pool).await
        })?;
        Ok(agents
            .iter()
            .map(|agent| {
                rows.iter()
                    .find(|(id, ..)| id == agent)
                    .map(
                        |(_, muted_until_ms, following, forgotten_at_ms)| RoomState {
                            muted_until_ms: *muted_until_ms,
                            following: *following,
                            forgotten_at_ms: *forgotten_at_ms,
                        },
                    )
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Every steered room of the agent, for the room listing.
    pub async fn room_states(&self, agent_id: &AgentId) -> Result<Vec<(RoomKey, RoomState)>> {
        let rows: Vec<(RoomKey, Option<i64>, bool, Option<i64>)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT room, muted_until_ms, following, forgotten_at_ms FROM room_state
                 WHERE agent_id = $1 ORDER BY room",
            )
            .bind(agent_id)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(room, muted_until_ms, following, forgotten_at_ms)| {
                (
                    room,
                    RoomState {
                        muted_until_ms,
                        following,
                        forgotten_at_ms,
                    },
                )
            })
            .collect())
    }

    /// Changes one control of the room, by `by` (`platform:user`, for operators).
    pub async fn set_room_control(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        control: RoomControl,
        by: &str,
    ) -> Result<()> {
        // One statement per control: the other columns keep what they hold (or their
        // defaults on a new row), whatever another replica wrote meanwhile.
        let sql = match control {
            RoomControl::Mute(_) => {
                "INSERT INTO room_state (agent_id, room, muted_until_ms, updated_by, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (agent_id, room) DO UPDATE SET
                     muted_until_ms = excluded.muted_until_ms,
                     updated_by = excluded.updated_by, updated_at_ms = excluded.updated_at_ms"
            }
            RoomControl::Follow(_) => {
                "INSERT INTO room_state (agent_id, room, following, updated_by, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (agent_id, room) DO UPDATE SET
                     following = excluded.following,
                     updated_by = excluded.updated_by, updated_at_ms = excluded.updated_at_ms"
            }
        };
        let now = now_ms();
        with_pool!(self, pool => {
            let query = sqlx::query(sql).bind(agent_id).bind(room);
            let query = match control {
                RoomControl::Mute(until) => query.bind(until),
                RoomControl::Follow(on) => query.bind(on),
            };
            query.bind(by).bind(now).execute(pool).await.map(|_| ())
        })?;
        Ok(())
    }

    /// Counts one more message in the room's bot streak (a bot's message, or the persona's
    /// own reply) or ends it (a person's). Returns the streak with it; one statement, so
    /// replicas counting at once both count.
    pub async fn bump_bot_streak(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        by: Speaker,
    ) -> Result<i64> {
        let sql = if by == Speaker::Bot {
            "INSERT INTO room_state (agent_id, room, bot_streak, updated_at_ms)
             VALUES ($1, $2, 1, $3)
             ON CONFLICT (agent_id, room) DO UPDATE SET bot_streak = room_state.bot_streak + 1
             RETURNING bot_streak"
        } else {
            // A human in a room nobody steered costs no row: only a streak is ended.
            "UPDATE room_state SET bot_streak = 0
             WHERE agent_id = $1 AND room = $2 AND bot_streak <> 0 AND $3 >= 0
             RETURNING bot_streak"
        };
        let streak: Option<i64> = with_pool!(self, pool => {
            sqlx::query_scalar(sql)
                .bind(agent_id)
                .bind(room)
                .bind(now_ms())
                .fetch_optional(pool)
                .await
        })?;
        Ok(streak.unwrap_or(0))
    }

    /// Forgets the room's memory: its recent messages and its summary, in one transaction,
    /// and notes when. Returns how many messages were forgotten. Documents uploaded for the
    /// room are knowledge, not memory, and stay (they are removed through the API).
    pub async fn forget_room(&self, agent_id: &AgentId, room: &RoomKey, by: &str) -> Result<u64> {
        let now = now_ms();
        let forgotten = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let gone = sqlx::query("DELETE FROM messages WHERE agent_id = $1 AND room = $2")
                .bind(agent_id)
                .bind(room)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM room_summaries WHERE agent_id = $1 AND room = $2")
                .bind(agent_id)
                .bind(room)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO room_state (agent_id, room, forgotten_at_ms, updated_by, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $3)
                 ON CONFLICT (agent_id, room) DO UPDATE SET
                     forgotten_at_ms = excluded.forgotten_at_ms,
                     updated_by = excluded.updated_by, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(agent_id)
            .bind(room)
            .bind(now)
            .bind(by)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(gone)
        }
        .await)?;
        Ok(forgotten)
    }

    /// Forgets what the agent learned about a user, in every room of the platform, and
    /// about every account linked with theirs (`person_of`). The extraction positions stay:
    /// the messages already read are not read again, so the facts do not come back from
    /// them. Returns how many facts were forgotten.
    pub async fn forget_user_facts(&self, who: FactSubject<'_>) -> Result<u64> {
        let person = self
            .person_of(who.agent_id, who.platform, who.user_id)
            .await?;
        let mut gone = 0;
        for account in &person.accounts {
            gone += with_pool!(self, pool => {
                sqlx::query(
                    "DELETE FROM user_facts WHERE agent_id = $1 AND platform = $2 AND user_id = $3",
                )
                .bind(who.agent_id)
                .bind(account.platform)
                .bind(&account.user_id)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
            })?;
        }
        Ok(gone)
    }

    /// Closes a journal entry that was a command, with its answer queued for delivery
    /// (tied to the entry, so a duplicate of the command gets the same answer) and nothing
    /// in room memory. `None` when the entry was already done (a redelivery): its answer
    /// was queued then.
    pub async fn record_command(
        &self,
        journal_id: JournalId,
        agent_id: &AgentId,
        answer: &Outbound,
    ) -> Result<Option<OutboxId>> {
        let now = now_ms();
        let queued = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
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
                tx.commit().await?;
                return Ok::<_, sqlx::Error>(None);
            }
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts,
                     not_before_ms, created_at_ms, updated_at_ms)
                 VALUES ($1, $2, $3, 'pending', 0, 0, $4, $4)
                 RETURNING id",
            )
            .bind(agent_id)
            .bind(journal_id.0)
            .bind(Json(answer))
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Some(OutboxId(id)))
        }
        .await)?;
        Ok(queued)
    }
}

/// `Store::room_state` on the SQLite engine's connection (`engine`), inside its batch.
pub(super) fn room_state_on(
    conn: &rusqlite::Connection,
    agent_id: &AgentId,
    room: &RoomKey,
) -> Result<RoomState> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(
            "SELECT muted_until_ms, following, forgotten_at_ms FROM room_state
             WHERE agent_id = ?1 AND room = ?2",
        )?
        .query_row(
            rusqlite::params![agent_id.as_str(), room.to_string()],
            |row| {
                Ok(RoomState {
                    muted_until_ms: row.get(0)?,
                    following: row.get(1)?,
                    forgotten_at_ms: row.get(2)?,
                })
            },
        )
        .optional()?
        .unwrap_or_default())
}
