//! Drafts waiting for approval (issue 47; migration 0018): a run of a schedule with
//! `approve: true` is held as a `draft` row of `post_runs` instead of being queued, and
//! stays there until an operator approves it (then it is queued in the outbox, once),
//! edits it, rejects it, or it expires. Both backends run the same SQL text.
//!
//! Once, whoever approves: approving is one transaction whose first statement moves the
//! run from `draft` to `queued`, conditional on `state = 'draft'` and the expiry. Of two
//! approvers (two replicas, two clicks), the second's UPDATE matches no row (on Postgres it
//! waits on the first's row lock, then sees `queued`), so it inserts no outbox entry and the
//! caller answers 409.

use super::{ClaimedRun, OutboxId, Result, StorageError, Store, now_ms, with_pool};
use serde::Serialize;
use troupe_connectors::{AgentId, Outbound, RoomKey};

/// A draft, as the API, the console and an owner's `/drafts` read it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Draft {
    pub id: i64,
    pub schedule_id: String,
    pub room: RoomKey,
    pub run_at_ms: i64,
    /// `draft` (waiting), `queued` (approved), `rejected` or `expired`.
    pub state: super::RunState,
    pub text: Option<String>,
    /// The model's text, when an operator edited it.
    pub drafted_text: Option<String>,
    pub expires_at_ms: Option<i64>,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub created_at_ms: i64,
}

type Row = (
    i64,
    String,
    RoomKey,
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
);

const COLUMNS: &str = "id, schedule_id, room, run_at_ms, state, text, drafted_text, expires_at_ms,
     decided_by, decided_at_ms, created_at_ms";

fn draft_of(row: Row) -> Result<Draft> {
    let (id, schedule_id, room, run_at_ms, state, text, drafted_text, expires_at_ms) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7);
    Ok(Draft {
        id,
        schedule_id,
        room,
        run_at_ms,
        state: super::RunState::parse(&state)?,
        text,
        drafted_text,
        expires_at_ms,
        decided_by: row.8,
        decided_at_ms: row.9,
        created_at_ms: row.10,
    })
}

/// How a decision on a draft came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Done; for an approval, the outbox entry to deliver.
    Done(Option<OutboxId>),
    /// No draft of that id for this persona.
    NotFound,
    /// The draft is no longer waiting: approved, rejected, or expired (its state).
    Conflict(super::RunState),
}

impl Store {
    /// Holds `run`'s post as a draft until `expires_at_ms`, while this claimer still holds
    /// the run, and queues `notices` (the draft told to the persona's owners) in the same
    /// transaction: a draft is told once, by whoever held it. The notices' outbox ids, or
    /// `None` when the run was taken over meanwhile (nothing written).
    pub async fn posts_hold(
        &self,
        run: &ClaimedRun,
        text: &str,
        expires_at_ms: i64,
        notices: &[Outbound],
    ) -> Result<Option<Vec<OutboxId>>> {
        let now = now_ms();
        let notices = notices
            .iter()
            .map(serde_json::to_string)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| StorageError::Corrupt(format!("cannot encode a notice: {e}")))?;
        let insert = self.outbox_insert_sql();
        let ids = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let held = sqlx::query(
                "UPDATE post_runs SET state = 'draft', text = $3, expires_at_ms = $4,
                     claimed_until_ms = NULL, updated_at_ms = $5
                 WHERE id = $1 AND state = 'claimed' AND claimed_until_ms = $2",
            )
            .bind(run.id)
            .bind(run.lease_until_ms)
            .bind(text)
            .bind(expires_at_ms)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if held != 1 {
                return Ok::<_, sqlx::Error>(None);
            }
            let mut ids = Vec::with_capacity(notices.len());
            for notice in &notices {
                let id: i64 = sqlx::query_scalar(insert)
                    .bind(&run.agent_id)
                    .bind(notice)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                ids.push(OutboxId(id));
            }
            tx.commit().await?;
            Ok(Some(ids))
        }
        .await)?;
        Ok(ids)
    }

    /// The persona's drafts: the waiting ones (oldest first), then up to `decided` of the
    /// latest decided or expired, newest first.
    pub async fn drafts(&self, agent_id: &AgentId, now: i64, decided: i64) -> Result<Vec<Draft>> {
        let waiting = format!(
            "SELECT {COLUMNS} FROM post_runs WHERE agent_id = $1 AND state = 'draft'
               AND expires_at_ms > $2 ORDER BY id"
        );
        let done = format!(
            "SELECT {COLUMNS} FROM post_runs WHERE agent_id = $1 AND expires_at_ms IS NOT NULL
               AND NOT (state = 'draft' AND expires_at_ms > $2) ORDER BY id DESC LIMIT $3"
        );
        let mut rows: Vec<Row> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(waiting))
                .bind(agent_id)
                .bind(now)
                .fetch_all(pool)
                .await
        })?;
        let older: Vec<Row> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(done))
                .bind(agent_id)
                .bind(now)
                .bind(decided.max(0))
                .fetch_all(pool)
                .await
        })?;
        rows.extend(older);
        let mut drafts = rows.into_iter().map(draft_of).collect::<Result<Vec<_>>>()?;
        // Past its expiry and not yet marked by a scheduler's look: expired already.
        for d in &mut drafts {
            if d.state == super::RunState::Draft && d.expires_at_ms.is_some_and(|e| e <= now) {
                d.state = super::RunState::Expired;
            }
        }
        Ok(drafts)
    }

    /// One draft of the persona, in whatever state.
    pub async fn draft(&self, agent_id: &AgentId, id: i64) -> Result<Option<Draft>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM post_runs WHERE agent_id = $1 AND id = $2
               AND expires_at_ms IS NOT NULL"
        );
        let row: Option<Row> = with_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(id)
                .fetch_optional(pool)
                .await
        })?;
        row.map(draft_of).transpose()
    }

    /// The conflict or absence that made a conditional update match no row.
    async fn undecided(&self, agent_id: &AgentId, id: i64) -> Result<Decided> {
        Ok(match self.draft(agent_id, id).await? {
            None => Decided::NotFound,
            Some(d) if d.state == super::RunState::Draft => {
                Decided::Conflict(super::RunState::Expired)
            }
            Some(d) => Decided::Conflict(d.state),
        })
    }

    /// Replaces a waiting draft's text (the model's is kept as `drafted_text`).
    pub async fn draft_edit(
        &self,
        agent_id: &AgentId,
        id: i64,
        text: &str,
        now: i64,
    ) -> Result<Decided> {
        self.while_waiting(
            "UPDATE post_runs SET drafted_text = COALESCE(drafted_text, text), text = $3,
                 updated_at_ms = $4
             WHERE agent_id = $1 AND id = $2 AND state = 'draft' AND expires_at_ms > $4",
            agent_id,
            id,
            text,
            now,
        )
        .await
    }

    /// Rejects a waiting draft: it is never sent.
    pub async fn draft_reject(
        &self,
        agent_id: &AgentId,
        id: i64,
        by: &str,
        now: i64,
    ) -> Result<Decided> {
        self.while_waiting(
            "UPDATE post_runs SET state = 'rejected', reason = 'rejected', decided_by = $3,
                 decided_at_ms = $4, updated_at_ms = $4
             WHERE agent_id = $1 AND id = $2 AND state = 'draft' AND expires_at_ms > $4",
            agent_id,
            id,
            by,
            now,
        )
        .await
    }

    /// Runs `sql` (binding the agent, the draft's id, `value` and `now` as $1-$4), which
    /// changes the draft only while it waits; otherwise says why it could not.
    async fn while_waiting(
        &self,
        sql: &'static str,
        agent_id: &AgentId,
        id: i64,
        value: &str,
        now: i64,
    ) -> Result<Decided> {
        let changed = with_pool!(self, pool => {
            sqlx::query(sql)
                .bind(agent_id)
                .bind(id)
                .bind(value)
                .bind(now)
                .execute(pool)
                .await
                .map(|d| d.rows_affected())
        })?;
        if changed == 1 {
            return Ok(Decided::Done(None));
        }
        self.undecided(agent_id, id).await
    }

    /// Approves a waiting draft: it becomes `queued` and its post (`post`, made from the
    /// draft as it is now) enters the outbox, in one transaction, once.
    pub async fn draft_approve(
        &self,
        agent_id: &AgentId,
        id: i64,
        by: &str,
        now: i64,
        post: impl Fn(&Draft) -> Outbound,
    ) -> Result<Decided> {
        let sql = format!(
            "UPDATE post_runs SET state = 'queued', decided_by = $3, decided_at_ms = $4,
                 updated_at_ms = $4
             WHERE agent_id = $1 AND id = $2 AND state = 'draft' AND expires_at_ms > $4
             RETURNING {COLUMNS}"
        );
        let insert = self.outbox_insert_sql();
        let queued = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let row: Option<Row> = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(agent_id)
                .bind(id)
                .bind(by)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Ok::<_, StorageError>(None);
            };
            let outbound = serde_json::to_string(&post(&draft_of(row)?))
                .map_err(|e| StorageError::Corrupt(format!("cannot encode a post: {e}")))?;
            let outbox_id: i64 = sqlx::query_scalar(insert)
                .bind(agent_id)
                .bind(&outbound)
                .bind(now)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("UPDATE post_runs SET outbox_id = $2 WHERE id = $1")
                .bind(id)
                .bind(outbox_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(OutboxId(outbox_id)))
        }
        .await)?;
        match queued {
            Some(outbox_id) => Ok(Decided::Done(Some(outbox_id))),
            None => self.undecided(agent_id, id).await,
        }
    }

    /// Marks every draft past its expiry `expired`: never sent. How many.
    pub async fn drafts_expire(&self, now: i64) -> Result<u64> {
        let n = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE post_runs SET state = 'expired', reason = 'not approved in time',
                     updated_at_ms = $1
                 WHERE state = 'draft' AND expires_at_ms <= $1",
            )
            .bind(now)
            .execute(pool)
            .await
            .map(|d| d.rows_affected())
        })?;
        Ok(n)
    }
}
