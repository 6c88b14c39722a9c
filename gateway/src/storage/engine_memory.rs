//! Memory upkeep's statements on the SQLite engine (issue 48): the rolling summaries' and
//! the facts' reads and writes (`summaries`), and `person_of` (`people`), which every facts
//! read asks first.
//!
//! Why here: upkeep runs every few replies (a summary every `TROUPE_MEMORY_SUMMARY_EVERY`
//! messages, facts every `TROUPE_MEMORY_FACTS_EVERY`), and each run made four to ten
//! statements. Through sqlx each statement is a round trip to its connection's thread, and
//! in a quiet room those round trips were three of the seven context switches a message
//! cost. On the engine a lone call runs on its caller's thread, so a run costs none. The
//! SQL is the Postgres path's, shared as constants: both bind by position.

use rusqlite::{Connection, OptionalExtension, params};
use troupe_connectors::{AgentId, Platform, RoomKey, UserId};

use super::people::{ACCOUNTS_OF_PERSON, Account, PERSON_ID_OF, Person};
use super::summaries::{
    ADVANCE_FACT_PROGRESS, COUNT_ROOM_MESSAGES_AFTER, COUNT_USER_MESSAGES_AFTER,
    ConversationSummary, FACT_PROGRESS, INSERT_USER_FACT, NewFacts, PUT_ROOM_SUMMARY,
    ROOM_MESSAGES_AFTER, ROOM_SUMMARY, TRIM_USER_FACTS, USER_FACTS, USER_MESSAGES_AFTER,
};
use super::{MemoryMessage, Result, StorageError};

/// A user as the facts' statements bind them: owned, so that it can go to the engine.
pub(super) struct Subject {
    pub agent_id: AgentId,
    pub platform: Platform,
    pub user_id: UserId,
}

impl Subject {
    /// The `LIKE` pattern of the platform's room keys (`FactSubject::room_pattern`).
    fn room_pattern(&self) -> String {
        format!("{}:%", self.platform)
    }
}

impl From<super::FactSubject<'_>> for Subject {
    fn from(who: super::FactSubject<'_>) -> Subject {
        Subject {
            agent_id: who.agent_id.clone(),
            platform: who.platform,
            user_id: who.user_id.clone(),
        }
    }
}

pub(super) fn room_summary(
    conn: &Connection,
    agent: &AgentId,
    room: &RoomKey,
) -> Result<Option<ConversationSummary>> {
    Ok(conn
        .prepare_cached(ROOM_SUMMARY)?
        .query_row(params![agent.as_str(), room.to_string()], |row| {
            Ok(ConversationSummary {
                summary: row.get(0)?,
                through_message_id: row.get(1)?,
                updated_at_ms: row.get(2)?,
            })
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
    super::engine::memory_messages(rows)
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
            false,
            who.room_pattern(),
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
        false,
        who.room_pattern(),
        after_id,
        limit.max(0)
    ])?;
    super::engine::memory_messages(rows)
}

/// `Store::person_of`, in one engine call.
pub(super) fn person_of(
    conn: &Connection,
    agent: &AgentId,
    platform: Platform,
    user: &UserId,
) -> Result<Person> {
    let account = Account::new(platform, user);
    let id: Option<String> = conn
        .prepare_cached(PERSON_ID_OF)?
        .query_row(
            params![agent.as_str(), platform.as_str(), user.as_str()],
            |row| row.get(0),
        )
        .optional()?;
    let Some(id) = id else {
        return Ok(Person::alone(account));
    };
    let mut stmt = conn.prepare_cached(ACCOUNTS_OF_PERSON)?;
    let rows = stmt.query_map(params![agent.as_str(), id], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut accounts = Vec::new();
    for row in rows {
        let (platform, user_id) = row?;
        let platform = platform
            .parse()
            .map_err(|e| StorageError::Corrupt(format!("person_accounts: platform: {e}")))?;
        accounts.push(Account {
            platform,
            user_id: UserId::new(user_id),
        });
    }
    Ok(Person::linked(id, accounts, account))
}

/// `Store::user_facts`'s rows for one account: `(created_at_ms, id, fact)`, newest first.
pub(super) fn account_facts(
    conn: &Connection,
    agent: &AgentId,
    account: &Account,
    limit: i64,
) -> Result<Vec<(i64, i64, String)>> {
    let mut stmt = conn.prepare_cached(USER_FACTS)?;
    let rows = stmt.query_map(
        params![
            agent.as_str(),
            account.platform.as_str(),
            account.user_id.as_str(),
            limit.max(0)
        ],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `Store::record_user_facts`: the engine's call is its transaction (a savepoint in a
/// batch). Nothing is written when the position does not advance.
pub(super) fn record_user_facts(
    conn: &Connection,
    who: &Subject,
    new: &NewFacts<'_>,
) -> Result<bool> {
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
    for fact in new.facts {
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
