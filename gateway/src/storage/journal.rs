//! The journal: every accepted inbound message, deduplicated by the database's unique key,
//! and the states that let a restart drive unfinished work again.
//!
//! The dedupe key is `(agent, platform, room, caller, platform message id)`. Platforms
//! assign message ids and authenticate authors, so their `caller` is empty; on the Web
//! platform both the room id and the message id are whatever the HTTP caller sent, so the
//! caller's `userId` is part of the key (see `dedupe_caller`). Either way a message id reused
//! in another room is another message, and never gets that room's reply.
//!
//! Attempts (the poison-message rule): `attempts` counts the handlings that started, and is
//! raised *before* a handling starts, so a crash while handling a message (an upload that
//! brings the process down, a model call that never returns before a kill) still counts.
//! The first handling is counted by the insert itself (attempts = 1): the publication that
//! follows an insert starts it, so the hot path pays no extra write. Every later handling (a
//! replay at start, a NATS redelivery, a repost of a failed message) calls `journal_begin`,
//! which raises the count only below `TROUPE_MAX_ATTEMPTS`; at the limit the agent gives the
//! message up (`journal_give_up`) instead of handling it. A message that was queued but not
//! started when the process died is counted once more than it ran: the price of not
//! writing on the hot path, and harmless below the limit.
//!
//! Handling a message (memory, reply, `Done`) is `memory::record_handled`, which must set
//! the state in the same transaction as the rest.

use super::writer::JournalReq;
use super::{
    Attempt, GaveUp, HotPath, JournalEntry, JournalId, JournalInsert, JournalState, OutboxId,
    Result, StorageError, Store, now_ms, parse_json, with_pool,
};
use sqlx::types::Json;
use troupe_connectors::{AgentId, Inbound, Outbound, Platform, RoomKey};

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
    agent_id: AgentId,
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

/// Which entries one read of [`Store::journal_unfinished`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnfinishedPage {
    /// After this entry (the last one of the previous page); `None` from the start.
    pub after: Option<JournalId>,
    /// Up to and including this entry ([`Store::journal_newest`] when the drive began).
    pub through: JournalId,
    /// `TROUPE_MAX_ATTEMPTS`: a failed entry with this many attempts has been given up.
    pub max_attempts: u32,
    /// Entries in the page, at most.
    pub limit: i64,
}

/// The `caller` part of a message's dedupe key: the author on the Web platform, where the
/// HTTP caller picks the room and the message id; nothing on a platform, which assigns the
/// id itself. A `userId` is a claim, not an identity (any caller may send any): it keeps
/// two honest callers who reuse an id apart, while `TROUPE_API_TOKEN` is the access control.
pub fn dedupe_caller(inbound: &Inbound) -> &str {
    match inbound.platform() {
        Platform::Web => inbound.author.id.as_str(),
        _ => "",
    }
}

/// Whether `entry` is the journal entry of `inbound` for `agent_id`: same agent, room and
/// caller. The unique key already makes a duplicate one; the answer of a duplicate is
/// checked against it anyway, so that no change of key can hand a reply to another room.
pub fn same_dedupe_key(entry: &JournalEntry, agent_id: &AgentId, inbound: &Inbound) -> bool {
    entry.agent_id == *agent_id
        && entry.inbound.room.key() == inbound.room.key()
        && dedupe_caller(&entry.inbound) == dedupe_caller(inbound)
        && entry.inbound.id == inbound.id
}

impl Store {
    /// Journals an inbound message for an agent, unless that agent already has it. The
    /// unique key decides, so two replicas receiving the same event cannot both insert it.
    /// A new entry starts with one attempt: the handling its publication starts.
    pub async fn journal_insert(
        &self,
        agent_id: &AgentId,
        inbound: &Inbound,
    ) -> Result<JournalInsert> {
        let inbound_json = serde_json::to_string(inbound)
            .map_err(|e| StorageError::Corrupt(format!("cannot encode an inbound message: {e}")))?;
        let req = JournalReq {
            agent_id: agent_id.clone(),
            message_id: inbound.id.as_str().to_string(),
            room: inbound.room.key(),
            caller: dedupe_caller(inbound).to_string(),
            inbound_json,
            now: now_ms(),
        };
        match &self.hot {
            HotPath::Engine(engine) => {
                engine
                    .call(move |conn| super::engine::journal_insert(conn, &req))
                    .await
            }
            HotPath::Writer(writer) => writer.journal_insert(req).await,
        }
    }

    pub async fn journal_get(&self, id: JournalId) -> Result<Option<JournalEntry>> {
        let row: Option<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!("WHERE id = $1")).bind(id.0).fetch_optional(pool).await
        })?;
        row.map(JournalEntry::try_from).transpose()
    }

    /// One page of what the restart drive publishes again, oldest first: the entries of
    /// `page.range` that are pending, or failed with fewer than `page.max_attempts`
    /// attempts; at most `page.limit` of them. Given-up entries (failed with every attempt
    /// used) are skipped here, in SQL, so however many of them the journal keeps they fill
    /// no page (issue 30, finding 10). The predicate `state IN ('pending', 'failed')` is
    /// the partial index `journal_unfinished`'s, repeated so that both planners use it
    /// (migrations/*/0011_journal_unfinished.sql).
    pub async fn journal_unfinished(&self, page: &UnfinishedPage) -> Result<Vec<JournalEntry>> {
        let rows: Vec<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!(
                "WHERE state IN ('pending', 'failed') AND id > $1 AND id <= $2
                   AND (state = 'pending' OR attempts < $3)
                 ORDER BY id LIMIT $4"
            ))
            .bind(page.after.map_or(0, |id| id.0))
            .bind(page.through.0)
            .bind(i64::from(page.max_attempts))
            .bind(page.limit.max(0))
            .fetch_all(pool)
            .await
        })?;
        rows.into_iter().map(JournalEntry::try_from).collect()
    }

    /// The newest journal id, `None` when the journal is empty: where a restart drive
    /// stops, so that it reads what was there when it started and not what replicas
    /// journal meanwhile (they publish that themselves).
    pub async fn journal_newest(&self) -> Result<Option<JournalId>> {
        let (newest,): (Option<i64>,) = with_pool!(self, pool => {
            sqlx::query_as("SELECT MAX(id) FROM journal").fetch_one(pool).await
        })?;
        Ok(newest.map(JournalId))
    }

    /// Marks an entry failed with its error. The attempt was counted when it started (see
    /// the module doc). A `Done` entry stays done: its effects are committed, and driving
    /// it again would answer twice.
    pub async fn journal_fail(&self, id: JournalId, error: &str) -> Result<()> {
        self.mark_failed(
            "UPDATE journal
             SET state = 'failed', last_error = $2, updated_at_ms = $3
             WHERE id = $1 AND state <> 'done'",
            id.0,
            error,
        )
        .await
    }

    /// Counts one more attempt before a message is handled again, unless it is done or has
    /// had `max_attempts` already. One statement: two replicas beginning at once both
    /// count, and neither passes the limit.
    pub async fn journal_begin(&self, id: JournalId, max_attempts: u32) -> Result<Attempt> {
        let max = i64::from(max_attempts);
        let counted: Option<(i32,)> = with_pool!(self, pool => {
            sqlx::query_as(
                "UPDATE journal SET attempts = attempts + 1, updated_at_ms = $3
                 WHERE id = $1 AND state <> 'done' AND attempts < $2
                 RETURNING attempts",
            )
            .bind(id.0)
            .bind(max)
            .bind(now_ms())
            .fetch_optional(pool)
            .await
        })?;
        if let Some((attempts,)) = counted {
            return Ok(Attempt::Started { attempts });
        }
        let entry = self
            .journal_get(id)
            .await?
            .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
        Ok(match entry.state {
            JournalState::Done => Attempt::Done,
            state => Attempt::Exhausted {
                attempts: entry.attempts,
                state,
                last_error: entry.last_error,
            },
        })
    }

    /// Gives a pending message up: marks it failed with `reason` and, when `apology` is
    /// given and its room had no apology in the last `quiet_ms`, queues the apology in the
    /// outbox. One transaction, so of several replicas (or restarts) giving the same room up
    /// one apologises. An entry that is not pending (done, or given up already) is left as
    /// it is: `GaveUp::first` is false then.
    pub async fn journal_give_up(
        &self,
        id: JournalId,
        reason: &str,
        apology: Option<&Outbound>,
        quiet_ms: i64,
    ) -> Result<GaveUp> {
        let now = now_ms();
        let result: Result<GaveUp, sqlx::Error> = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let marked: Option<(AgentId, RoomKey)> = sqlx::query_as(
                "UPDATE journal SET state = 'failed', last_error = $2, updated_at_ms = $3
                 WHERE id = $1 AND state = 'pending'
                 RETURNING agent_id, room",
            )
            .bind(id.0)
            .bind(reason)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((agent_id, room)) = marked else {
                tx.commit().await?;
                return Ok(GaveUp { first: false, apology: None });
            };
            let mut queued = None;
            if let Some(apology) = apology {
                let claimed: Option<(i64,)> = sqlx::query_as(
                    "INSERT INTO room_apologies (agent_id, room, journal_id, apologized_at_ms)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (agent_id, room) DO UPDATE
                     SET journal_id = excluded.journal_id, apologized_at_ms = excluded.apologized_at_ms
                     WHERE room_apologies.apologized_at_ms <= $5
                     RETURNING journal_id",
                )
                .bind(&agent_id)
                .bind(&room)
                .bind(id.0)
                .bind(now)
                .bind(now.saturating_sub(quiet_ms))
                .fetch_optional(&mut *tx)
                .await?;
                if claimed.is_some() {
                    // Not tied to the journal entry (journal_id NULL): it is not the
                    // message's reply, and a duplicate of the message must not return it.
                    let (outbox_id,): (i64,) = sqlx::query_as(
                        "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts,
                             not_before_ms, created_at_ms, updated_at_ms)
                         VALUES ($1, NULL, $2, 'pending', 0, 0, $3, $3)
                         RETURNING id",
                    )
                    .bind(&agent_id)
                    .bind(Json(apology))
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                    queued = Some(OutboxId(outbox_id));
                }
            }
            tx.commit().await?;
            Ok(GaveUp { first: true, apology: queued })
        }.await);
        Ok(result?)
    }

    /// The entry of `inbound` for `agent_id`, by its dedupe key.
    pub async fn journal_lookup(
        &self,
        agent_id: &AgentId,
        inbound: &Inbound,
    ) -> Result<Option<JournalEntry>> {
        let row: Option<JournalRow> = with_pool!(self, pool => {
            sqlx::query_as(select_journal!(
                "WHERE agent_id = $1 AND platform = $2 AND room = $3 AND caller = $4
                   AND platform_message_id = $5"
            ))
                .bind(agent_id)
                .bind(inbound.platform())
                .bind(inbound.room.key())
                .bind(dedupe_caller(inbound))
                .bind(inbound.id.as_str())
                .fetch_optional(pool)
                .await
        })?;
        row.map(JournalEntry::try_from).transpose()
    }

    /// This database's installation id: random, made once by the migration, so that ids
    /// derived from journal ids (the NATS dedupe id) differ between two databases.
    pub async fn installation_id(&self) -> Result<String> {
        let (id,): (String,) = with_pool!(self, pool => {
            sqlx::query_as("SELECT id FROM installation WHERE one = 1").fetch_one(pool).await
        })?;
        Ok(id)
    }
}
