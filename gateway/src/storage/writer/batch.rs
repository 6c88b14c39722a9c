//! The statements of a Postgres batch (`writer`): each kind's multi-row SQL, built with
//! its arguments, and how its rows answer each request of the batch.

use super::{
    DeliveredReq, HandledReq, HandledResult, JournalReq, UPSERT_ROOM_CONFLICT, UPSERT_USER_CONFLICT,
};
use crate::storage::{
    JournalId, JournalInsert, JournalState, OutboxId, RecordedReply, Result, StorageError,
};
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::{AssertSqlSafe, FromRow};
use std::collections::{HashMap, HashSet};
use troupe_connectors::{AgentId, Platform, RoomKey};

/// Longer SQL (a batch of more than a few requests) is prepared for one use, not cached.
const MAX_CACHED_SQL: usize = 2048;

/// A bind argument of a dynamically built statement.
enum Arg<'a> {
    Int(i64),
    Text(&'a str),
    Agent(&'a AgentId),
    Room(&'a RoomKey),
    Platform(Platform),
    OptText(Option<&'a str>),
    Bool(bool),
}

/// Statements built with their arguments (`$n` placeholders), to run in order: the
/// Postgres protocol takes one statement per query.
struct Script<'a> {
    done: Vec<Statement<'a>>,
    sql: String,
    args: Vec<Arg<'a>>,
}

/// One statement's SQL text and its arguments.
struct Statement<'a> {
    sql: String,
    args: Vec<Arg<'a>>,
}

impl<'a> Script<'a> {
    fn new() -> Self {
        Script {
            done: Vec::new(),
            sql: String::new(),
            args: Vec::new(),
        }
    }

    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    fn arg(&mut self, arg: Arg<'a>) -> &mut Self {
        self.args.push(arg);
        self.sql.push('$');
        self.sql.push_str(&self.args.len().to_string());
        self
    }

    /// Arguments separated by commas.
    fn list(&mut self, args: impl IntoIterator<Item = Arg<'a>>) -> &mut Self {
        for (i, arg) in args.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.arg(arg);
        }
        self
    }

    /// A JSON text argument for a JSONB column.
    fn json(&mut self, json: &'a str) -> &mut Self {
        self.push("CAST(").arg(Arg::Text(json)).push(" AS JSONB)")
    }

    /// Ends a statement.
    fn next(&mut self) {
        let sql = std::mem::take(&mut self.sql);
        let args = std::mem::take(&mut self.args);
        self.done.push(Statement { sql, args });
    }

    fn finish(mut self) -> Vec<Statement<'a>> {
        if !self.sql.trim().is_empty() {
            self.next();
        }
        self.done
    }
}

/// Runs the statements in order on `conn` and decodes every row they return.
async fn rows<T>(conn: &mut PgConnection, stmts: Vec<Statement<'_>>) -> Result<Vec<T>>
where
    T: for<'r> FromRow<'r, PgRow> + Send + Unpin,
{
    let mut rows = Vec::new();
    for Statement { sql, args } in stmts {
        // Only statements of small batches repeat often enough to keep prepared.
        let persistent = sql.len() <= MAX_CACHED_SQL;
        let mut query = sqlx::query(AssertSqlSafe(sql)).persistent(persistent);
        for arg in args {
            query = match arg {
                Arg::Int(v) => query.bind(v),
                Arg::Text(v) => query.bind(v),
                Arg::Agent(v) => query.bind(v),
                Arg::Room(v) => query.bind(v),
                Arg::Platform(v) => query.bind(v),
                Arg::OptText(v) => query.bind(v),
                Arg::Bool(v) => query.bind(v),
            };
        }
        for row in query.fetch_all(&mut *conn).await? {
            rows.push(T::from_row(&row)?);
        }
    }
    Ok(rows)
}

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
    let mut insert = Script::new();
    insert.push(
        "INSERT INTO journal
             (agent_id, platform, platform_message_id, room, caller, inbound, state, attempts,
              created_at_ms, updated_at_ms)
         VALUES ",
    );
    for (i, r) in reqs.iter().enumerate() {
        insert.push(if i == 0 { "(" } else { ", (" });
        insert.list([
            Arg::Agent(&r.agent_id),
            Arg::Platform(r.room.platform),
            Arg::Text(&r.message_id),
            Arg::Room(&r.room),
            Arg::Text(&r.caller),
        ]);
        // One attempt: the handling the publication after this insert starts (see the
        // poison-message rule in `journal`).
        insert
            .push(", ")
            .json(&r.inbound_json)
            .push(", 'pending', 1, ");
        insert.list([Arg::Int(r.now), Arg::Int(r.now)]).push(")");
    }
    insert.push(
        " ON CONFLICT (agent_id, platform, room, caller, platform_message_id) DO NOTHING
         RETURNING id, agent_id, room, caller, platform_message_id",
    );
    let inserted: Vec<JournalKeyRow> = rows(conn, insert.finish()).await?;
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
    let mut select = Script::new();
    select
        .push("SELECT id, agent_id, room, caller, platform_message_id, state FROM journal WHERE ");
    for (i, (a, room, c, m)) in keys.iter().enumerate() {
        select.push(if i == 0 { "(" } else { " OR (" });
        select.push("agent_id = ").arg(Arg::Agent(a));
        select
            .push(" AND platform = ")
            .arg(Arg::Platform(room.platform));
        select.push(" AND room = ").arg(Arg::Room(room));
        select.push(" AND caller = ").arg(Arg::Text(c));
        select.push(" AND platform_message_id = ").arg(Arg::Text(m));
        select.push(")");
    }
    rows(conn, select.finish()).await
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
    let mut mark = Script::new();
    mark.push("UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = ")
        .arg(Arg::Int(now))
        .push(" WHERE state <> 'done' AND id IN (")
        .list(ids.into_iter().map(Arg::Int))
        .push(") RETURNING id");
    let marked: Vec<Marked> = rows(conn, mark.finish()).await?;
    let plan = Plan::new(reqs, marked.into_iter().map(|m| m.id).collect());
    let existing: Vec<FirstReply> = if plan.lookup.is_empty() {
        Vec::new()
    } else {
        rows(conn, plan.lookup_script()).await?
    };
    let outboxed: Vec<Outboxed> = rows(conn, plan.write_script(reqs)).await?;
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
    let mut s = Script::new();
    s.push("UPDATE outbox SET state = 'delivered', platform_ids = CASE id");
    for r in &marks {
        s.push(" WHEN ").arg(Arg::Int(r.outbox_id)).push(" THEN ");
        s.json(&r.platform_ids_json);
    }
    s.push(" END, claimed_until_ms = NULL, last_error = NULL, delivered_at_ms = ")
        .arg(Arg::Int(now))
        .push(", updated_at_ms = ")
        .arg(Arg::Int(now))
        .push(" WHERE id IN (")
        .list(marks.iter().map(|r| Arg::Int(r.outbox_id)))
        .push(") RETURNING id");
    let _: Vec<Marked> = rows(conn, s.finish()).await?;
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

    fn lookup_script(&self) -> Vec<Statement<'static>> {
        let mut s = Script::new();
        s.push(
            "SELECT j.id AS journal_id,
                    (SELECT MIN(o.id) FROM outbox o WHERE o.journal_id = j.id) AS outbox_id
             FROM journal j WHERE j.id IN (",
        )
        .list(self.lookup.iter().map(|id| Arg::Int(*id)))
        .push(")");
        s.finish()
    }

    fn writers<'r>(&self, reqs: &'r [HandledReq]) -> impl Iterator<Item = &'r HandledReq> {
        reqs.iter()
            .zip(self.writer.clone())
            .filter_map(|(r, w)| w.then_some(r))
    }

    /// Rooms, users, messages, and outbox rows (returning `id, journal_id`).
    fn write_script<'r>(&self, reqs: &'r [HandledReq]) -> Vec<Statement<'r>> {
        let mut s = Script::new();
        let (rooms, users) = self.rooms_and_users(reqs);
        push_rooms(&mut s, rooms);
        push_users(&mut s, users);
        push_messages(&mut s, self.writers(reqs));
        push_outbox(&mut s, self.writers(reqs));
        s.finish()
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

fn push_rooms<'r>(s: &mut Script<'r>, rooms: Vec<RoomRow<'r>>) {
    if rooms.is_empty() {
        return;
    }
    s.push("INSERT INTO rooms (agent_id, room, platform, name, last_active_ms) VALUES ");
    for (i, row) in rooms.into_iter().enumerate() {
        s.push(if i == 0 { "(" } else { ", (" });
        s.list([
            Arg::Agent(row.agent_id),
            Arg::Room(row.room),
            Arg::Platform(row.room.platform),
            Arg::OptText(row.name),
            Arg::Int(row.last_active_ms),
        ])
        .push(")");
    }
    s.push(UPSERT_ROOM_CONFLICT);
    s.next();
}

fn push_users<'r>(s: &mut Script<'r>, users: Vec<UserRow<'r>>) {
    if users.is_empty() {
        return;
    }
    s.push("INSERT INTO users (platform, user_id, name, last_seen_ms) VALUES ");
    for (i, row) in users.into_iter().enumerate() {
        s.push(if i == 0 { "(" } else { ", (" });
        s.list([
            Arg::Platform(row.platform),
            Arg::Text(row.user_id),
            Arg::Text(row.name),
            Arg::Int(row.last_seen_ms),
        ])
        .push(")");
    }
    s.push(UPSERT_USER_CONFLICT);
    s.next();
}

/// Ids follow the order of the rows, so each inbound comes before its reply.
fn push_messages<'r>(s: &mut Script<'r>, writers: impl Iterator<Item = &'r HandledReq>) {
    let mut first = true;
    for r in writers {
        for m in &r.memories {
            if first {
                s.push(
                    "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name,
                         text, from_agent, created_at_ms) VALUES (",
                );
                first = false;
            } else {
                s.push(", (");
            }
            s.list([
                Arg::Agent(&r.agent_id),
                Arg::Room(&r.room_key),
                Arg::Int(r.journal_id),
                Arg::Text(&m.author_id),
                Arg::Text(&m.author_name),
                Arg::Text(&m.text),
                Arg::Bool(m.from_agent),
                Arg::Int(m.created_at_ms),
            ])
            .push(")");
        }
    }
    if !first {
        s.next();
    }
}

/// Due at once (not_before 0). Claimed by the caller when it asked for a lease, which then
/// delivers it without claiming; delivered already when the reply left with the caller's
/// answer; the delivery worker takes it otherwise.
fn push_outbox<'r>(s: &mut Script<'r>, writers: impl Iterator<Item = &'r HandledReq>) {
    let mut first = true;
    for r in writers {
        let Some((_, json)) = &r.reply else { continue };
        if first {
            s.push(
                "INSERT INTO outbox (agent_id, journal_id, outbound, state, attempts,
                     not_before_ms, claimed_until_ms, platform_ids, delivered_at_ms,
                     created_at_ms, updated_at_ms) VALUES (",
            );
            first = false;
        } else {
            s.push(", (");
        }
        s.list([Arg::Agent(&r.agent_id), Arg::Int(r.journal_id)]);
        s.push(", ").json(json).push(", ");
        s.list([Arg::Text(r.outbox_state()), Arg::Int(r.outbox_attempts())]);
        s.push(", 0, ");
        match r.claimed_until() {
            Some(until) => s.arg(Arg::Int(until)),
            None => s.push("NULL"),
        };
        s.push(", ");
        match r.delivered() {
            Some((ids, at)) => s.json(ids).push(", ").arg(Arg::Int(at)),
            None => s.push("NULL, NULL"),
        };
        s.push(", ")
            .list([Arg::Int(r.now), Arg::Int(r.now)])
            .push(")");
    }
    if !first {
        s.push(" RETURNING id, journal_id");
        s.next();
    }
}
