//! The memory tables' statements (issue 48): the rolling summaries' and the facts' reads
//! and writes (`summaries`), and `person_of`'s (`people`), which every facts read asks first.
//! The SQL is written once, here, and run two ways: by sqlx on Postgres, and on SQLite by the
//! engine's connection, through the functions below (rusqlite; parameters are numbered in
//! order of first use, so they bind by position on both).
//!
//! Why on the engine: upkeep runs every few replies (a summary every
//! `TROUPE_MEMORY_SUMMARY_EVERY` messages, facts every `TROUPE_MEMORY_FACTS_EVERY`), and
//! each run made four to ten statements. Through sqlx each is a round trip to its
//! connection's thread: in a quiet room those were three of the seven context switches a
//! message cost. On the engine a lone call runs on its caller's thread, so a run costs none.
//! The functions return rows; `summaries` and `people` make them values.

use rusqlite::{Connection, OptionalExtension, params};
use troupe_connectors::{AgentId, Platform, RoomKey, UserId};

use super::{MemoryMessage, Result, StorageError};

/// Keeps a user's newest `$4` facts ($1 agent, $2 platform, $3 user) and deletes the rest:
/// run after every write of facts, learned (`record_user_facts`) or told
/// (`remember_user_fact`), in the same transaction.
pub(super) const TRIM_USER_FACTS: &str = "DELETE FROM user_facts
     WHERE agent_id = $1 AND platform = $2 AND user_id = $3
       AND id NOT IN (SELECT id FROM user_facts
                      WHERE agent_id = $1 AND platform = $2 AND user_id = $3
                      ORDER BY created_at_ms DESC, id DESC
                      LIMIT $4)";

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
/// `from_agent = FALSE` is written out, not bound: it is the predicate of the partial index
/// `messages_by_author` (migration 0019), which a query uses only by repeating it.
pub(super) const COUNT_USER_MESSAGES_AFTER: &str = "SELECT COUNT(*) FROM messages
     WHERE agent_id = $1 AND author_id = $2 AND from_agent = FALSE AND room LIKE $3
       AND id > $4";
pub(super) const USER_MESSAGES_AFTER: &str =
    "SELECT id, room, author_id, author_name, text, from_agent, created_at_ms
     FROM messages
     WHERE agent_id = $1 AND author_id = $2 AND from_agent = FALSE AND room LIKE $3
       AND id > $4
     ORDER BY id DESC LIMIT $5";
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

/// The person an account is linked into ($1 agent, $2 platform, $3 user), and the accounts
/// of a person ($1 agent, $2 person): `Store::person_of`'s.
pub(super) const PERSON_ID_OF: &str = "SELECT person_id FROM person_accounts
     WHERE agent_id = $1 AND platform = $2 AND user_id = $3";
pub(super) const ACCOUNTS_OF_PERSON: &str = "SELECT platform, user_id FROM person_accounts
     WHERE agent_id = $1 AND person_id = $2 ORDER BY platform, user_id";

/// A user as the facts' statements bind them: owned, so that it can go to the engine.
pub(super) struct Subject {
    pub agent_id: AgentId,
    pub platform: Platform,
    pub user_id: UserId,
}

/// The `LIKE` pattern matching a platform's room keys (`telegram:…`). Platform names are
/// lower-case letters, so they hold no `LIKE` wildcard.
pub(super) fn room_pattern(platform: Platform) -> String {
    format!("{platform}:%")
}

/// A summary's row: its text, the newest message it covers, when it was written.
pub(super) type SummaryRow = (String, i64, i64);

/// What one fact extraction writes (`summaries::NewFacts`, owned for the engine).
pub(super) struct FactsRow {
    pub facts: Vec<String>,
    pub room: RoomKey,
    pub through_message_id: i64,
    pub keep: i64,
    pub now_ms: i64,
}

pub(super) fn room_summary(
    conn: &Connection,
    agent: &AgentId,
    room: &RoomKey,
) -> Result<Option<SummaryRow>> {
    Ok(conn
        .prepare_cached(ROOM_SUMMARY)?
        .query_row(params![agent.as_str(), room.to_string()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?)
}

pub(super) fn put_room_summary(
    conn: &Connection,
    (agent, room): (&AgentId, &RoomKey),
    summary: &str,
    through_message_id: i64,
    now_ms: i64,
) -> Result<bool> {
    let written = conn.prepare_cached(PUT_ROOM_SUMMARY)?.execute(params![
        agent.as_str(),
        room.to_string(),
        summary,
        through_message_id,
        now_ms
    ])?;
    Ok(written > 0)
}

pub(super) fn count_room_messages_after(
    conn: &Connection,
    agent: &AgentId,
    room: &RoomKey,
    after_id: i64,
) -> Result<i64> {
    Ok(conn
        .prepare_cached(COUNT_ROOM_MESSAGES_AFTER)?
        .query_row(params![agent.as_str(), room.to_string(), after_id], |row| {
            row.get(0)
        })?)
}

pub(super) fn room_messages_after(
    conn: &Connection,
    (agent, room): (&AgentId, &RoomKey),
    after_id: i64,
    limit: i64,
) -> Result<Vec<MemoryMessage>> {
    let mut stmt = conn.prepare_cached(ROOM_MESSAGES_AFTER)?;
    let rows = stmt.query(params![
        agent.as_str(),
        room.to_string(),
        after_id,
        limit.max(0)
    ])?;
    super::engine::memory_messages(rows, Some(room))
}

pub(super) fn fact_progress(conn: &Connection, who: &Subject) -> Result<i64> {
    let through: Option<i64> = conn
        .prepare_cached(FACT_PROGRESS)?
        .query_row(
            params![
                who.agent_id.as_str(),
                who.platform.as_str(),
                who.user_id.as_str()
            ],
            |row| row.get(0),
        )
        .optional()?;
    Ok(through.unwrap_or(0))
}

pub(super) fn count_user_messages_after(
    conn: &Connection,
    who: &Subject,
    after_id: i64,
) -> Result<i64> {
    Ok(conn.prepare_cached(COUNT_USER_MESSAGES_AFTER)?.query_row(
        params![
            who.agent_id.as_str(),
            who.user_id.as_str(),
            room_pattern(who.platform),
            after_id
        ],
        |row| row.get(0),
    )?)
}

/// Newest first, as the statement reads them; the caller puts them oldest first.
pub(super) fn user_messages_after(
    conn: &Connection,
    who: &Subject,
    after_id: i64,
    limit: i64,
) -> Result<Vec<MemoryMessage>> {
    let mut stmt = conn.prepare_cached(USER_MESSAGES_AFTER)?;
    let rows = stmt.query(params![
        who.agent_id.as_str(),
        who.user_id.as_str(),
        room_pattern(who.platform),
        after_id,
        limit.max(0)
    ])?;
    super::engine::memory_messages(rows, None)
}

/// The person an account is linked into, if any.
pub(super) fn person_id_of(
    conn: &Connection,
    agent: &AgentId,
    platform: Platform,
    user: &UserId,
) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(PERSON_ID_OF)?
        .query_row(
            params![agent.as_str(), platform.as_str(), user.as_str()],
            |row| row.get(0),
        )
        .optional()?)
}

/// The accounts linked into person `person_id`.
pub(super) fn accounts_of_person(
    conn: &Connection,
    agent: &AgentId,
    person_id: &str,
) -> Result<Vec<(Platform, UserId)>> {
    let mut stmt = conn.prepare_cached(ACCOUNTS_OF_PERSON)?;
    let mut rows = stmt.query(params![agent.as_str(), person_id])?;
    let mut accounts = Vec::new();
    while let Some(row) = rows.next()? {
        let platform: String = row.get(0)?;
        let platform = platform
            .parse()
            .map_err(|e| StorageError::Corrupt(format!("person_accounts: platform: {e}")))?;
        accounts.push((platform, UserId::new(row.get::<_, String>(1)?)));
    }
    Ok(accounts)
}

/// One account's facts, `(created_at_ms, id, fact)`, newest first.
pub(super) fn account_facts(
    conn: &Connection,
    agent: &AgentId,
    (platform, user): (Platform, &UserId),
    limit: i64,
) -> Result<Vec<(i64, i64, String)>> {
    let mut stmt = conn.prepare_cached(USER_FACTS)?;
    let rows = stmt.query_map(
        params![
            agent.as_str(),
            platform.as_str(),
            user.as_str(),
            limit.max(0)
        ],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `Store::record_user_facts`: the engine's call is its transaction (a savepoint in a
/// batch). Nothing is written when the position does not advance.
pub(super) fn record_user_facts(conn: &Connection, who: &Subject, new: &FactsRow) -> Result<bool> {
    let (agent, platform, user) = (
        who.agent_id.as_str(),
        who.platform.as_str(),
        who.user_id.as_str(),
    );
    let advanced = conn
        .prepare_cached(ADVANCE_FACT_PROGRESS)?
        .execute(params![
            agent,
            platform,
            user,
            new.through_message_id,
            new.now_ms
        ])?;
    if advanced == 0 {
        return Ok(false);
    }
    let mut insert = conn.prepare_cached(INSERT_USER_FACT)?;
    for fact in &new.facts {
        insert.execute(params![
            agent,
            platform,
            user,
            fact,
            new.room.to_string(),
            new.through_message_id,
            new.now_ms
        ])?;
    }
    conn.prepare_cached(TRIM_USER_FACTS)?.execute(params![
        agent,
        platform,
        user,
        new.keep.max(0)
    ])?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::sqlite_plan;
    use super::{COUNT_USER_MESSAGES_AFTER, USER_MESSAGES_AFTER};

    /// Fact extraction reads a person's messages through the partial `messages_by_author`
    /// (migration 0019): a query that stopped repeating its predicate would scan the agent's
    /// messages instead, every time the facts are brought up to date.
    #[tokio::test]
    async fn a_persons_messages_are_read_through_the_author_index() {
        for sql in [COUNT_USER_MESSAGES_AFTER, USER_MESSAGES_AFTER] {
            let steps = sqlite_plan(sql, |q| {
                q.bind("ada")
                    .bind("u1")
                    .bind("telegram:%")
                    .bind(0_i64)
                    .bind(10_i64)
            })
            .await;
            assert!(
                steps.iter().any(|s| s.contains("INDEX messages_by_author")),
                "{sql}: {steps:?}"
            );
        }
    }
}
