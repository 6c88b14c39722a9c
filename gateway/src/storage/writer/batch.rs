//! The statements of a Postgres batch (`writer`): each kind's multi-row SQL, with its
//! arguments, and how its rows answer each request of the batch.
//!
//! Each statement has one text whatever the batch's size: its rows come in as one array a
//! column, taken apart by `UNNEST` (issue 48). A text that grew with the batch (a `VALUES`
//! list of up to 4,096 parameters) was a statement of its own for every size, so under load
//! nearly every batch was parsed and planned afresh, on an unnamed statement that also cost a
//! round trip to describe; one text a kind is prepared once per connection and then only
//! bound and run.

use super::{DeliveredReq, HandledReq, HandledResult, JournalReq, MemoryReq, column};
use crate::storage::{
    JournalId, JournalInsert, JournalState, OutboxId, RecordedReply, Result, StorageError,
};
use sqlx::FromRow;
use sqlx::postgres::{PgConnection, PgPool};
use std::collections::{HashMap, HashSet};
use troupe_connectors::{AgentId, Platform, RoomKey};

/// The journal's unique key: agent, room (its platform is the key's `platform` column),
/// caller, platform message id.
type JournalKey<'a> = (&'a AgentId, &'a RoomKey, &'a str, &'a str);

impl JournalReq {
    fn key(&self) -> JournalKey<'_> {
        (&self.agent_id, &self.room, &self.caller, &self.message_id)
    }
}

/// A journal row's id, its unique key, and (when selected) its state.
#[derive(FromRow)]
struct JournalKeyRow {
    id: i64,
    agent_id: AgentId,
    room: RoomKey,
    caller: String,
    platform_message_id: String,
    #[sqlx(default)]
    state: String,
}

impl JournalKeyRow {
    fn key(&self) -> JournalKey<'_> {
        (
            &self.agent_id,
            &self.room,
            &self.caller,
            &self.platform_message_id,
        )
    }
}

/// Inserts a batch of journal entries, each statement its own commit.
pub(super) async fn journal_batch(
    pool: &PgPool,
    reqs: &[JournalReq],
) -> Result<Vec<Result<JournalInsert>>> {
    journal_on(&mut *pool.acquire().await?, reqs).await
}

pub(super) async fn journal_on(
    conn: &mut PgConnection,
    reqs: &[JournalReq],
) -> Result<Vec<Result<JournalInsert>>> {
    // One attempt: the handling the publication after this insert starts (see the
    // poison-message rule in `journal`). Of two rows with one key, the first is inserted and
    // the second skipped as a conflict, as with a `VALUES` list.
    let inserted: Vec<JournalKeyRow> = sqlx::query_as(
        "INSERT INTO journal
             (agent_id, platform, platform_message_id, room, caller, inbound, state, attempts,
              created_at_ms, updated_at_ms)
         SELECT a, p, m, r, c, CAST(i AS JSONB), 'pending', 1, n, n
         FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[],
                     $7::BIGINT[]) AS v(a, p, m, r, c, i, n)
         ON CONFLICT (agent_id, platform, room, caller, platform_message_id) DO NOTHING
         RETURNING id, agent_id, room, caller, platform_message_id",
    )
    .bind(column(reqs, |r| r.agent_id.as_str()))
    .bind(column(reqs, |r| r.room.platform.as_str()))
    .bind(column(reqs, |r| r.message_id.as_str()))
    .bind(reqs.iter().map(|r| r.room.to_string()).collect::<Vec<_>>())
    .bind(column(reqs, |r| r.caller.as_str()))
    .bind(column(reqs, |r| r.inbound_json.as_str()))
    .bind(column(reqs, |r| r.now))
    .fetch_all(&mut *conn)
    .await?;
    // The platform column is the room key's own platform, so the key leaves it out.
    let mut fresh: HashMap<JournalKey<'_>, i64> =
        inserted.iter().map(|row| (row.key(), row.id)).collect();

    // The first request for a key that was inserted gets `Inserted`; every other one is a
    // duplicate, of a row from this batch or from before.
    let mut results: Vec<Option<Result<JournalInsert>>> = Vec::with_capacity(reqs.len());
    let mut lookup: Vec<JournalKey<'_>> = Vec::new();
    for r in reqs {
        let key = r.key();
        match fresh.remove(&key) {
            Some(id) => results.push(Some(Ok(JournalInsert::Inserted(JournalId(id))))),
            None => {
                if !lookup.contains(&key) {
                    lookup.push(key);
                }
                results.push(None);
            }
        }
    }
    if lookup.is_empty() {
        return Ok(results.into_iter().flatten().collect());
    }
    let existing = journal_lookup(conn, &lookup).await?;
    let existing: HashMap<JournalKey<'_>, (i64, &str)> = existing
        .iter()
        .map(|row| (row.key(), (row.id, row.state.as_str())))
        .collect();
    Ok(reqs
        .iter()
        .zip(results)
        .map(|(r, done)| {
            done.unwrap_or_else(|| {
                let (id, state) = existing
                    .get(&r.key())
                    .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
                Ok(JournalInsert::Duplicate(
                    JournalId(*id),
                    JournalState::parse(*id, state)?,
                ))
            })
        })
        .collect())
}

/// The journal rows under these keys, with their states. Conflicting rows are committed
/// (Postgres waits for a concurrent inserter before reporting the conflict) and journal
/// rows are never deleted, so they are there to read.
async fn journal_lookup(
    conn: &mut PgConnection,
    keys: &[JournalKey<'_>],
) -> Result<Vec<JournalKeyRow>> {
    Ok(sqlx::query_as(
        "SELECT j.id, j.agent_id, j.room, j.caller, j.platform_message_id, j.state
         FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[])
              AS k(a, p, r, c, m)
         JOIN journal j ON j.agent_id = k.a AND j.platform = k.p AND j.room = k.r
              AND j.caller = k.c AND j.platform_message_id = k.m",
    )
    .bind(column(keys, |(a, _, _, _)| a.as_str()))
    .bind(column(keys, |(_, room, _, _)| room.platform.as_str()))
    .bind(column(keys, |(_, room, _, _)| room.to_string()))
    .bind(column(keys, |(_, _, c, _)| *c))
    .bind(column(keys, |(_, _, _, m)| *m))
    .fetch_all(&mut *conn)
    .await?)
}

/// Records a batch of handled messages in one transaction.
pub(super) async fn handled_batch(
    pool: &PgPool,
    reqs: &[HandledReq],
) -> Result<Vec<HandledResult>> {
    let mut tx = pool.begin().await?;
    let results = handled_on(&mut tx, reqs).await?;
    tx.commit().await?;
    Ok(results)
}

/// A journal id, as `RETURNING id` gives it.
#[derive(FromRow)]
struct Marked {
    id: i64,
}

/// A journal entry and its first reply in the outbox, if it has one.
#[derive(FromRow)]
struct FirstReply {
    journal_id: i64,
    outbox_id: Option<i64>,
}

/// An outbox row a batch inserted, and its journal entry.
#[derive(FromRow)]
struct Outboxed {
    id: i64,
    journal_id: i64,
}

/// The statements of `handled_batch`, in the caller's transaction.
pub(super) async fn handled_on(
    conn: &mut PgConnection,
    reqs: &[HandledReq],
) -> Result<Vec<HandledResult>> {
    let now = reqs.iter().map(|r| r.now).max().unwrap_or(0);
    let mut ids: Vec<i64> = reqs.iter().map(|r| r.journal_id).collect();
    ids.sort_unstable();
    ids.dedup();
    // The journal update comes first: it takes the row locks, in id order, before anything
    // is read, so a concurrent call for the same entry serialises here and then sees `done`.
    // A lone id is bound as itself: `id = ANY($2)` keeps a custom plan (Postgres cannot cost
    // an array of unknown length below one element), planned afresh on every run, 0.1 ms
    // of a quiet room's reply; a join on `UNNEST` keeps a generic plan but scans the table.
    let sql = if ids.len() == 1 {
        "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = $1
         WHERE state <> 'done' AND id = $2 RETURNING id"
    } else {
        "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = $1
         WHERE state <> 'done' AND id = ANY($2) RETURNING id"
    };
    let query = sqlx::query_as(sql).bind(now);
    let query = match ids.as_slice() {
        [id] => query.bind(*id),
        _ => query.bind(ids),
    };
    let marked: Vec<Marked> = query.fetch_all(&mut *conn).await?;
    let plan = Plan::new(reqs, marked.into_iter().map(|m| m.id).collect());
    let existing: Vec<FirstReply> = if plan.lookup.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT j.id AS journal_id,
                    (SELECT MIN(o.id) FROM outbox o WHERE o.journal_id = j.id) AS outbox_id
             FROM journal j WHERE j.id = ANY($1)",
        )
        .bind(&plan.lookup)
        .fetch_all(&mut *conn)
        .await?
    };
    let (rooms, users) = plan.rooms_and_users(reqs);
    upsert_rooms(conn, rooms).await?;
    upsert_users(conn, users).await?;
    insert_messages(conn, plan.writers(reqs)).await?;
    let outboxed = insert_outbox(conn, plan.writers(reqs)).await?;
    Ok(plan.results(reqs, &existing, &outboxed))
}

/// Marks a batch of replies delivered: one statement, its own commit.
pub(super) async fn delivered_batch(
    pool: &PgPool,
    reqs: &[DeliveredReq],
) -> Result<Vec<Result<()>>> {
    delivered_on(&mut *pool.acquire().await?, reqs).await
}

/// One `UPDATE` for the batch, whatever its size. Of two marks for one entry (a worker
/// whose lease ran out, and the one that took over) the later one's ids stay, as if the
/// two had run in order. An unknown id is no error, as for a single `UPDATE`.
pub(super) async fn delivered_on(
    conn: &mut PgConnection,
    reqs: &[DeliveredReq],
) -> Result<Vec<Result<()>>> {
    let now = reqs.iter().map(|r| r.now).max().unwrap_or(0);
    let mut last: HashMap<i64, &DeliveredReq> = HashMap::with_capacity(reqs.len());
    for r in reqs {
        last.insert(r.outbox_id, r);
    }
    // In id order, so overlapping batches lock rows in one order.
    let mut marks: Vec<&DeliveredReq> = last.into_values().collect();
    marks.sort_by_key(|r| r.outbox_id);
    sqlx::query(
        "UPDATE outbox SET state = 'delivered', platform_ids = CAST(v.ids AS JSONB),
             claimed_until_ms = NULL, last_error = NULL, delivered_at_ms = $1,
             updated_at_ms = $1
         FROM UNNEST($2::BIGINT[], $3::TEXT[]) AS v(id, ids) WHERE outbox.id = v.id",
    )
    .bind(now)
    .bind(column(&marks, |r| r.outbox_id))
    .bind(column(&marks, |r| r.platform_ids_json.as_str()))
    .execute(&mut *conn)
    .await?;
    Ok(reqs.iter().map(|_| Ok(())).collect())
}

/// Who writes what in a batch of `record_handled`.
struct Plan {
    /// Per request: it is the first of the batch for a journal entry this batch marked done.
    writer: Vec<bool>,
    /// Journal ids not marked by this batch: already done, or unknown.
    lookup: Vec<i64>,
}

/// A room's row as a batch upserts it: one per key, merged as the single-row upserts
/// would have left it.
struct RoomRow<'r> {
    agent_id: &'r AgentId,
    room: &'r RoomKey,
    name: Option<&'r str>,
    last_active_ms: i64,
}

/// A user's row as a batch upserts it: one per key, the latest sighting's name.
struct UserRow<'r> {
    platform: Platform,
    user_id: &'r str,
    name: &'r str,
    last_seen_ms: i64,
}

impl Plan {
    fn new(reqs: &[HandledReq], marked: HashSet<i64>) -> Plan {
        let mut taken = HashSet::new();
        let mut lookup = Vec::new();
        let writer = reqs
            .iter()
            .map(|r| {
                if marked.contains(&r.journal_id) {
                    taken.insert(r.journal_id)
                } else {
                    if !lookup.contains(&r.journal_id) {
                        lookup.push(r.journal_id);
                    }
                    false
                }
            })
            .collect();
        Plan { writer, lookup }
    }

    fn writers<'r>(&self, reqs: &'r [HandledReq]) -> impl Iterator<Item = &'r HandledReq> {
        reqs.iter()
            .zip(self.writer.clone())
            .filter_map(|(r, w)| w.then_some(r))
    }

    /// The rooms and users the writing requests touch, one row per key (Postgres refuses
    /// to upsert a row twice in one statement), merged as the single-row upserts would
    /// have left them, applied in order; each list in key order, so that overlapping
    /// batches lock shared rows in one order.
    fn rooms_and_users<'r>(&self, reqs: &'r [HandledReq]) -> (Vec<RoomRow<'r>>, Vec<UserRow<'r>>) {
        let mut rooms: Vec<RoomRow<'r>> = Vec::new();
        let mut users: Vec<UserRow<'r>> = Vec::new();
        for r in self.writers(reqs) {
            let same_room =
                |row: &&mut RoomRow<'r>| row.agent_id == &r.agent_id && row.room == &r.room_key;
            match rooms.iter_mut().find(same_room) {
                Some(room) => {
                    room.name = r.room_name.as_deref().or(room.name);
                    room.last_active_ms = room.last_active_ms.max(r.last_active);
                }
                None => rooms.push(RoomRow {
                    agent_id: &r.agent_id,
                    room: &r.room_key,
                    name: r.room_name.as_deref(),
                    last_active_ms: r.last_active,
                }),
            }
            // The persona is an agent, not a platform user.
            let platform = r.room_key.platform;
            for m in r.memories.iter().filter(|m| !m.from_agent) {
                let same_user =
                    |u: &&mut UserRow<'r>| u.platform == platform && u.user_id == m.author_id;
                match users.iter_mut().find(same_user) {
                    Some(user) => {
                        if m.created_at_ms >= user.last_seen_ms {
                            user.name = &m.author_name;
                            user.last_seen_ms = m.created_at_ms;
                        }
                    }
                    None => users.push(UserRow {
                        platform,
                        user_id: &m.author_id,
                        name: &m.author_name,
                        last_seen_ms: m.created_at_ms,
                    }),
                }
            }
        }
        rooms.sort_by(|a, b| (a.agent_id, a.room).cmp(&(b.agent_id, b.room)));
        users.sort_by(|a, b| (a.platform, a.user_id).cmp(&(b.platform, b.user_id)));
        (rooms, users)
    }

    fn results(
        &self,
        reqs: &[HandledReq],
        existing: &[FirstReply],
        outboxed: &[Outboxed],
    ) -> Vec<HandledResult> {
        let outbox_of: HashMap<i64, i64> = outboxed.iter().map(|o| (o.journal_id, o.id)).collect();
        let existing: HashMap<i64, Option<i64>> = existing
            .iter()
            .map(|f| (f.journal_id, f.outbox_id))
            .collect();
        reqs.iter()
            .zip(&self.writer)
            .map(|(r, writer)| {
                if *writer {
                    let Some((outbound, _)) = &r.reply else {
                        return Ok(None);
                    };
                    let id = *outbox_of
                        .get(&r.journal_id)
                        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?;
                    return Ok(Some(r.recorded(id, outbound)));
                }
                // Done before this request: by this batch, or earlier.
                let first = if self.lookup.contains(&r.journal_id) {
                    *existing
                        .get(&r.journal_id)
                        .ok_or(StorageError::Database(sqlx::Error::RowNotFound))?
                } else {
                    outbox_of.get(&r.journal_id).copied()
                };
                Ok(first.map(|id| RecordedReply::Queued(OutboxId(id))))
            })
            .collect()
    }
}

async fn upsert_rooms(conn: &mut PgConnection, rooms: Vec<RoomRow<'_>>) -> Result<()> {
    if rooms.is_empty() {
        return Ok(());
    }
    // In the arrays' order, which is the key order `rooms_and_users` sorted them in.
    sqlx::query(concat!(
        "INSERT INTO rooms (agent_id, room, platform, name, last_active_ms)
         SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[])",
        upsert_room_conflict!()
    ))
    .bind(column(&rooms, |r| r.agent_id.as_str()))
    .bind(column(&rooms, |r| r.room.to_string()))
    .bind(column(&rooms, |r| r.room.platform.as_str()))
    .bind(column(&rooms, |r| r.name))
    .bind(column(&rooms, |r| r.last_active_ms))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn upsert_users(conn: &mut PgConnection, users: Vec<UserRow<'_>>) -> Result<()> {
    if users.is_empty() {
        return Ok(());
    }
    sqlx::query(concat!(
        "INSERT INTO users (platform, user_id, name, last_seen_ms)
         SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[])",
        upsert_user_conflict!()
    ))
    .bind(column(&users, |u| u.platform.as_str()))
    .bind(column(&users, |u| u.user_id))
    .bind(column(&users, |u| u.name))
    .bind(column(&users, |u| u.last_seen_ms))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Ids follow the order of the rows (the arrays'), so each inbound comes before its reply.
async fn insert_messages<'r>(
    conn: &mut PgConnection,
    writers: impl Iterator<Item = &'r HandledReq>,
) -> Result<()> {
    let rows: Vec<(&HandledReq, &MemoryReq)> = writers
        .flat_map(|r| r.memories.iter().map(move |m| (r, m)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name, text,
             from_agent, created_at_ms)
         SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::BOOLEAN[], $8::BIGINT[])",
    )
    .bind(column(&rows, |(r, _)| r.agent_id.as_str()))
    .bind(column(&rows, |(r, _)| r.room_key.to_string()))
    .bind(column(&rows, |(r, _)| r.journal_id))
    .bind(column(&rows, |(_, m)| m.author_id.as_str()))
    .bind(column(&rows, |(_, m)| m.author_name.as_str()))
    .bind(column(&rows, |(_, m)| m.text.as_str()))
    .bind(column(&rows, |(_, m)| m.from_agent))
    .bind(column(&rows, |(_, m)| m.created_at_ms))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Due at once (not_before 0). Claimed by the caller when it asked for a lease, which then
/// delivers it without claiming; delivered already when the reply left with the caller's
/// answer; the delivery worker takes it otherwise.
async fn insert_outbox<'r>(
    conn: &mut PgConnection,
    writers: impl Iterator<Item = &'r HandledReq>,
) -> Result<Vec<Outboxed>> {
    let rows: Vec<(&HandledReq, &str)> = writers
        .filter_map(|r| r.reply.as_ref().map(|(_, json)| (r, json.as_str())))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(
        "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts, not_before_ms,
             claimed_until_ms, platform_ids, delivered_at_ms, created_at_ms, updated_at_ms)
         SELECT a, j, CAST(o AS JSONB), s, t, 0, c, CAST(p AS JSONB), d, n, n
         FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[],
                     $6::BIGINT[], $7::TEXT[], $8::BIGINT[], $9::BIGINT[])
              AS v(a, j, o, s, t, c, p, d, n)
         RETURNING id, journal_id",
    )
    .bind(column(&rows, |(r, _)| r.agent_id.as_str()))
    .bind(column(&rows, |(r, _)| r.journal_id))
    .bind(column(&rows, |(_, json)| *json))
    .bind(column(&rows, |(r, _)| r.outbox_state()))
    .bind(column(&rows, |(r, _)| r.outbox_attempts()))
    .bind(column(&rows, |(r, _)| r.claimed_until()))
    .bind(column(&rows, |(r, _)| r.delivered().map(|(ids, _)| ids)))
    .bind(column(&rows, |(r, _)| r.delivered().map(|(_, at)| at)))
    .bind(column(&rows, |(r, _)| r.now))
    .fetch_all(&mut *conn)
    .await?)
}
