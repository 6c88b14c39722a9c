//! Autonomous posts (issue 34; migration 0012): the schedules, the claim of each run, and
//! what came of it. Both backends run the same SQL text.
//!
//! Exactly once across replicas, without a leader:
//! - *claim*: a replica that finds a schedule due moves its `next_run_ms` forward with a
//!   conditional `UPDATE … WHERE next_run_ms = <the value it read>` and, in the same
//!   transaction, inserts the run (unique per schedule and run time). Of two replicas, the
//!   second's update matches no row: it claims nothing;
//! - *take over*: a claimed run carries a lease; a replica that died while composing
//!   leaves it `claimed`, and once the lease has passed another replica takes it with a
//!   conditional update on the lease it read, up to [`RUN_ATTEMPTS`] times;
//! - *queue*: the post and its outbox entry are written in one transaction, which first
//!   moves the run from `claimed` to `queued` with a check on its lease token: a replica
//!   whose lease was taken over writes nothing, so a post is queued once, and the outbox
//!   (claim, lease, Neynar's `idem`) sends it once.

use super::{OutboxId, Result, StorageError, Store, now_ms, with_pool};
use serde::Serialize;
use troupe_connectors::{AgentId, Outbound, RoomKey};

/// How many times a run may be claimed (a first claim and two take-overs) before it is
/// marked failed: a post whose composing crashes the process must not crash it forever.
pub const RUN_ATTEMPTS: i32 = 3;

/// Where a schedule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleSource {
    /// Farcaster's `ENABLE_POST` settings.
    Env,
    /// `settings.troupe.posts` in the character file.
    File,
    /// `POST /api/agents/{agent}/posts` or the console.
    Api,
}

impl ScheduleSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleSource::Env => "env",
            ScheduleSource::File => "file",
            ScheduleSource::Api => "api",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        match s {
            "env" => Ok(ScheduleSource::Env),
            "file" => Ok(ScheduleSource::File),
            "api" => Ok(ScheduleSource::Api),
            other => Err(StorageError::Corrupt(format!(
                "post_schedules: unknown source `{other}`"
            ))),
        }
    }
}

/// A stored schedule.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSchedule {
    pub agent_id: AgentId,
    pub id: String,
    pub source: ScheduleSource,
    pub room: RoomKey,
    /// The schedule's JSON (`posts::schedule::Spec`).
    pub spec: serde_json::Value,
    pub next_run_ms: i64,
    pub last_run_ms: Option<i64>,
}

/// A schedule to store: its id within the persona, where it came from, and its spec.
#[derive(Debug, Clone)]
pub struct NewSchedule<'a> {
    pub id: &'a str,
    pub source: ScheduleSource,
    pub room: &'a RoomKey,
    pub spec: &'a str,
    pub first_run_ms: i64,
}

/// A run this replica holds: compose and queue it before `lease_until_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRun {
    pub id: i64,
    pub agent_id: AgentId,
    pub schedule_id: String,
    pub room: RoomKey,
    pub run_at_ms: i64,
    pub attempts: i32,
    /// The lease this claim holds, and its token: only the holder may settle the run.
    pub lease_until_ms: i64,
}

/// What became of a run, for the persona's recent posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Claimed,
    Queued,
    DryRun,
    Skipped,
    Failed,
    /// Waiting for an operator's approval (issue 47, `storage::drafts`).
    Draft,
    Rejected,
    Expired,
}

impl RunState {
    fn as_str(self) -> &'static str {
        match self {
            RunState::Claimed => "claimed",
            RunState::Queued => "queued",
            RunState::DryRun => "dry_run",
            RunState::Skipped => "skipped",
            RunState::Failed => "failed",
            RunState::Draft => "draft",
            RunState::Rejected => "rejected",
            RunState::Expired => "expired",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "claimed" => RunState::Claimed,
            "queued" => RunState::Queued,
            "dry_run" => RunState::DryRun,
            "skipped" => RunState::Skipped,
            "failed" => RunState::Failed,
            "draft" => RunState::Draft,
            "rejected" => RunState::Rejected,
            "expired" => RunState::Expired,
            other => {
                return Err(StorageError::Corrupt(format!(
                    "post_runs: unknown state `{other}`"
                )));
            }
        })
    }
}

/// One run, as the API, the console and the composer (recent posts) read it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostRun {
    pub id: i64,
    pub schedule_id: String,
    pub room: RoomKey,
    pub run_at_ms: i64,
    pub state: RunState,
    pub text: Option<String>,
    pub reason: Option<String>,
    pub created_at_ms: i64,
}

/// How a run ends without an outbox entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    DryRun,
    Skipped,
    Failed,
}

type ScheduleRow = (AgentId, String, String, RoomKey, String, i64, Option<i64>);

fn schedule_of(row: ScheduleRow) -> Result<StoredSchedule> {
    let (agent_id, id, source, room, spec, next_run_ms, last_run_ms) = row;
    let spec = serde_json::from_str(&spec)
        .map_err(|e| StorageError::Corrupt(format!("post_schedules {agent_id}/{id}: {e}")))?;
    Ok(StoredSchedule {
        agent_id,
        id,
        source: ScheduleSource::parse(&source)?,
        room,
        spec,
        next_run_ms,
        last_run_ms,
    })
}

const SCHEDULE_COLUMNS: &str =
    "agent_id, id, source, room, spec, next_run_ms, last_run_ms FROM post_schedules";

/// Inserts the outbox entry of a post, pending and due at once (both backends: the
/// outbound is JSON text on SQLite, JSONB on Postgres).
const OUTBOX_SQLITE: &str = "INSERT INTO outbox (agent_id, outbound, created_at_ms, updated_at_ms)
     VALUES ($1, $2, $3, $3) RETURNING id";
const OUTBOX_POSTGRES: &str =
    "INSERT INTO outbox (agent_id, outbound, created_at_ms, updated_at_ms)
     VALUES ($1, CAST($2 AS JSONB), $3, $3) RETURNING id";

impl Store {
    /// The statement inserting a post's (or a draft notice's) outbox entry on this backend.
    pub(super) fn outbox_insert_sql(&self) -> &'static str {
        match self.backend() {
            super::Backend::Sqlite => OUTBOX_SQLITE,
            super::Backend::Postgres => OUTBOX_POSTGRES,
        }
    }

    /// Stores a schedule, or updates one of the same id: a changed spec starts over from
    /// `first_run_ms`, an unchanged one keeps its next run (a restart is not a new
    /// schedule).
    pub async fn posts_put_schedule(&self, agent_id: &AgentId, s: &NewSchedule<'_>) -> Result<()> {
        let now = now_ms();
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO post_schedules
                     (agent_id, id, source, room, spec, next_run_ms, created_at_ms, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
                 ON CONFLICT (agent_id, id) DO UPDATE SET
                     next_run_ms = CASE WHEN post_schedules.spec = excluded.spec
                                        THEN post_schedules.next_run_ms
                                        ELSE excluded.next_run_ms END,
                     source = excluded.source, room = excluded.room, spec = excluded.spec,
                     updated_at_ms = excluded.updated_at_ms",
            )
            .bind(agent_id)
            .bind(s.id)
            .bind(s.source.as_str())
            .bind(s.room)
            .bind(s.spec)
            .bind(s.first_run_ms)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Brings a schedule's next run forward to `now_ms` when its last run is at least
    /// `min_gap_ms` old (or it never ran): `POST_IMMEDIATELY` at a start. Returns whether
    /// it did.
    pub async fn posts_run_now(
        &self,
        agent_id: &AgentId,
        id: &str,
        now_ms: i64,
        min_gap_ms: i64,
    ) -> Result<bool> {
        let moved = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE post_schedules SET next_run_ms = $3
                 WHERE agent_id = $1 AND id = $2 AND next_run_ms > $3
                   AND (last_run_ms IS NULL OR last_run_ms <= $3 - $4)",
            )
            .bind(agent_id)
            .bind(id)
            .bind(now_ms)
            .bind(min_gap_ms)
            .execute(pool)
            .await
            .map(|d| d.rows_affected())
        })?;
        Ok(moved == 1)
    }

    /// Deletes the persona's schedules of `source` whose ids are not in `keep` (a file or
    /// the environment no longer names them). Their past runs stay, as recent posts.
    pub async fn posts_retain(
        &self,
        agent_id: &AgentId,
        source: ScheduleSource,
        keep: &[String],
    ) -> Result<u64> {
        let ids = self.posts_schedules(agent_id).await?;
        let mut gone = 0;
        for s in ids {
            if s.source == source && !keep.contains(&s.id) {
                gone += u64::from(self.posts_delete_schedule(agent_id, &s.id).await?);
            }
        }
        Ok(gone)
    }

    /// Deletes one schedule; whether it existed.
    pub async fn posts_delete_schedule(&self, agent_id: &AgentId, id: &str) -> Result<bool> {
        let gone = with_pool!(self, pool => {
            sqlx::query("DELETE FROM post_schedules WHERE agent_id = $1 AND id = $2")
                .bind(agent_id)
                .bind(id)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
        })?;
        Ok(gone > 0)
    }

    /// The persona's schedules, by id.
    pub async fn posts_schedules(&self, agent_id: &AgentId) -> Result<Vec<StoredSchedule>> {
        let sql = format!("SELECT {SCHEDULE_COLUMNS} WHERE agent_id = $1 ORDER BY id");
        let rows: Vec<ScheduleRow> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .fetch_all(pool)
                .await
        })?;
        rows.into_iter().map(schedule_of).collect()
    }

    /// Schedules due at `now_ms`, most overdue first, at most `limit`.
    pub async fn posts_due(&self, now_ms: i64, limit: i64) -> Result<Vec<StoredSchedule>> {
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} WHERE next_run_ms <= $1 ORDER BY next_run_ms LIMIT $2"
        );
        let rows: Vec<ScheduleRow> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(now_ms)
                .bind(limit.max(0))
                .fetch_all(pool)
                .await
        })?;
        rows.into_iter().map(schedule_of).collect()
    }

    /// The earliest next run of any schedule, to know how long to wait.
    pub async fn posts_next_due(&self) -> Result<Option<i64>> {
        let next: Option<i64> = with_pool!(self, pool => {
            sqlx::query_scalar("SELECT MIN(next_run_ms) FROM post_schedules")
                .fetch_one(pool)
                .await
        })?;
        Ok(next)
    }

    /// Claims the run of `schedule` due at its `next_run_ms` (as read), moving the
    /// schedule on to `next_run_ms`: one transaction, and only when no one else moved it
    /// first. `None`: another replica claimed it (or the schedule changed or went).
    pub async fn posts_claim(
        &self,
        schedule: &StoredSchedule,
        next_run_ms: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<ClaimedRun>> {
        let due = schedule.next_run_ms;
        let lease_until_ms = now_ms + lease_ms;
        let id = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let moved = sqlx::query(
                "UPDATE post_schedules SET next_run_ms = $3, last_run_ms = $4, updated_at_ms = $5
                 WHERE agent_id = $1 AND id = $2 AND next_run_ms = $4",
            )
            .bind(&schedule.agent_id)
            .bind(&schedule.id)
            .bind(next_run_ms)
            .bind(due)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if moved != 1 {
                return Ok::<_, sqlx::Error>(None);
            }
            let id: Option<i64> = sqlx::query_scalar(
                "INSERT INTO post_runs (agent_id, schedule_id, room, run_at_ms, state,
                     claimed_until_ms, created_at_ms, updated_at_ms)
                 VALUES ($1, $2, $3, $4, 'claimed', $5, $6, $6)
                 ON CONFLICT (agent_id, schedule_id, run_at_ms) DO NOTHING
                 RETURNING id",
            )
            .bind(&schedule.agent_id)
            .bind(&schedule.id)
            .bind(&schedule.room)
            .bind(due)
            .bind(lease_until_ms)
            .bind(now_ms)
            .fetch_optional(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(id)
        }
        .await)?;
        Ok(id.map(|id| ClaimedRun {
            id,
            agent_id: schedule.agent_id.clone(),
            schedule_id: schedule.id.clone(),
            room: schedule.room.clone(),
            run_at_ms: due,
            attempts: 1,
            lease_until_ms,
        }))
    }

    /// Runs whose claimer's lease passed while they were still `claimed` (the replica died
    /// or stopped while composing): each taken over by this replica with a conditional
    /// update on the lease it read, and counted. Runs out of attempts are marked failed.
    pub async fn posts_take_over(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedRun>> {
        with_pool!(self, pool => {
            sqlx::query(
                "UPDATE post_runs SET state = 'failed', claimed_until_ms = NULL, updated_at_ms = $2,
                     reason = 'the gateway stopped while composing it, every attempt'
                 WHERE state = 'claimed' AND claimed_until_ms <= $2 AND attempts >= $1",
            )
            .bind(RUN_ATTEMPTS)
            .bind(now_ms)
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        type Row = (i64, AgentId, String, RoomKey, i64, i32, i64);
        let stale: Vec<Row> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, agent_id, schedule_id, room, run_at_ms, attempts, claimed_until_ms
                 FROM post_runs WHERE state = 'claimed' AND claimed_until_ms <= $1
                 ORDER BY id LIMIT $2",
            )
            .bind(now_ms)
            .bind(limit.max(0))
            .fetch_all(pool)
            .await
        })?;
        let mut taken = Vec::new();
        for (id, agent_id, schedule_id, room, run_at_ms, attempts, until) in stale {
            let lease_until_ms = now_ms + lease_ms;
            let won = with_pool!(self, pool => {
                sqlx::query(
                    "UPDATE post_runs SET claimed_until_ms = $3, attempts = attempts + 1,
                         updated_at_ms = $4
                     WHERE id = $1 AND state = 'claimed' AND claimed_until_ms = $2",
                )
                .bind(id)
                .bind(until)
                .bind(lease_until_ms)
                .bind(now_ms)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
            })?;
            if won == 1 {
                taken.push(ClaimedRun {
                    id,
                    agent_id,
                    schedule_id,
                    room,
                    run_at_ms,
                    attempts: attempts + 1,
                    lease_until_ms,
                });
            }
        }
        Ok(taken)
    }

    /// Queues the post of `run`: the run becomes `queued` with its text, and its outbox
    /// entry is inserted, in one transaction, only while this claimer still holds the run.
    /// `None`: the lease was taken over (or the run settled) meanwhile; nothing written.
    pub async fn posts_queue(&self, run: &ClaimedRun, post: &Outbound) -> Result<Option<OutboxId>> {
        let now = now_ms();
        let outbound = serde_json::to_string(post)
            .map_err(|e| StorageError::Corrupt(format!("cannot encode a post: {e}")))?;
        let insert = self.outbox_insert_sql();
        let id = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let held = sqlx::query(
                "UPDATE post_runs SET state = 'queued', text = $3, claimed_until_ms = NULL,
                     updated_at_ms = $4
                 WHERE id = $1 AND state = 'claimed' AND claimed_until_ms = $2",
            )
            .bind(run.id)
            .bind(run.lease_until_ms)
            .bind(&post.text)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if held != 1 {
                return Ok::<_, sqlx::Error>(None);
            }
            let outbox_id: i64 = sqlx::query_scalar(insert)
                .bind(&run.agent_id)
                .bind(&outbound)
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("UPDATE post_runs SET outbox_id = $2 WHERE id = $1")
                .bind(run.id)
                .bind(outbox_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(OutboxId(outbox_id)))
        }
        .await)?;
        Ok(id)
    }

    /// Ends `run` without sending: kept in dry run, skipped, or failed, with the text
    /// (dry run) and the reason. Only while this claimer holds it; whether it did.
    pub async fn posts_end(
        &self,
        run: &ClaimedRun,
        end: RunEnd,
        text: Option<&str>,
        reason: &str,
    ) -> Result<bool> {
        let state = match end {
            RunEnd::DryRun => RunState::DryRun,
            RunEnd::Skipped => RunState::Skipped,
            RunEnd::Failed => RunState::Failed,
        };
        let done = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE post_runs SET state = $3, text = $4, reason = $5, claimed_until_ms = NULL,
                     updated_at_ms = $6
                 WHERE id = $1 AND state = 'claimed' AND claimed_until_ms = $2",
            )
            .bind(run.id)
            .bind(run.lease_until_ms)
            .bind(state.as_str())
            .bind(text)
            .bind(reason)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|d| d.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// The persona's latest runs, newest first, at most `limit`; `RecentRuns::Posted` keeps
    /// the ones with a text (queued and dry run), for the composer's "do not repeat yourself".
    pub async fn posts_recent(
        &self,
        agent_id: &AgentId,
        limit: i64,
        which: RecentRuns,
    ) -> Result<Vec<PostRun>> {
        let filter = match which {
            RecentRuns::All => "",
            RecentRuns::Posted => "AND state IN ('queued', 'dry_run', 'draft')",
        };
        let sql = format!(
            "SELECT id, schedule_id, room, run_at_ms, state, text, reason, created_at_ms
             FROM post_runs WHERE agent_id = $1 {filter} ORDER BY id DESC LIMIT $2"
        );
        type Row = (
            i64,
            String,
            RoomKey,
            i64,
            String,
            Option<String>,
            Option<String>,
            i64,
        );
        let rows: Vec<Row> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(limit.max(0))
                .fetch_all(pool)
                .await
        })?;
        rows.into_iter()
            .map(
                |(id, schedule_id, room, run_at_ms, state, text, reason, created_at_ms)| {
                    Ok(PostRun {
                        id,
                        schedule_id,
                        room,
                        run_at_ms,
                        state: RunState::parse(&state)?,
                        text,
                        reason,
                        created_at_ms,
                    })
                },
            )
            .collect()
    }
}

/// Which runs `posts_recent` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecentRuns {
    All,
    /// Runs that made a post (sent or kept in dry run).
    Posted,
}
