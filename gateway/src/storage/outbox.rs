//! The outbox: replies waiting for delivery, claimed under a lease so that a crashed
//! delivery worker's claims expire and another worker (or replica) takes them over.
//!
//! Retry policy (backoff, when to give up) belongs to the delivery worker; this module only
//! records its decisions. A claim is not a fence: a worker whose lease expired mid-send may
//! still report, which at worst sends a reply twice, so leases should outlast a send.

use super::{
    Backend, HotPath, JournalId, OutboxEntry, OutboxId, Result, StorageError, Store, now_ms,
    parse_json, with_pool,
};
use troupe_connectors::AgentId;

/// Claims due entries. SQLite has a single writer, so one `UPDATE … RETURNING` is atomic.
const CLAIM_SQLITE: &str = "UPDATE outbox
     SET claimed_until_ms = $2 + $3, attempts = attempts + 1, updated_at_ms = $2
     WHERE id IN (SELECT id FROM outbox
                  WHERE state = 'pending' AND not_before_ms <= $2
                    AND (claimed_until_ms IS NULL OR claimed_until_ms <= $2)
                  ORDER BY id
                  LIMIT $1)
     RETURNING id, agent_id, journal_id, CAST(outbound AS TEXT) AS outbound, attempts";

/// Claims due entries. Replicas claim concurrently: the CTE locks the rows it picks and
/// skips rows another transaction has locked, so two claimers never take the same row and
/// never wait on each other. A CTE (not `IN (subquery)`) so the locking select runs once.
const CLAIM_POSTGRES: &str = "WITH due AS (
         SELECT id FROM outbox
         WHERE state = 'pending' AND not_before_ms <= $2
           AND (claimed_until_ms IS NULL OR claimed_until_ms <= $2)
         ORDER BY id
         LIMIT $1
         FOR UPDATE SKIP LOCKED)
     UPDATE outbox o
     SET claimed_until_ms = $2 + $3, attempts = o.attempts + 1, updated_at_ms = $2
     FROM due
     WHERE o.id = due.id
     RETURNING o.id, o.agent_id, o.journal_id, CAST(o.outbound AS TEXT) AS outbound, o.attempts";

/// Claims one entry if it is due. Safe on both backends without explicit locking: a
/// concurrent Postgres update blocks on the row, then re-checks the `WHERE` and misses.
const CLAIM_ONE: &str = "UPDATE outbox
     SET claimed_until_ms = $2 + $3, attempts = attempts + 1, updated_at_ms = $2
     WHERE id = $1 AND state = 'pending' AND not_before_ms <= $2
       AND (claimed_until_ms IS NULL OR claimed_until_ms <= $2)
     RETURNING id, agent_id, journal_id, CAST(outbound AS TEXT) AS outbound, attempts";

#[derive(sqlx::FromRow)]
struct OutboxRow {
    id: i64,
    agent_id: AgentId,
    journal_id: Option<i64>,
    outbound: String,
    attempts: i32,
}

impl TryFrom<OutboxRow> for OutboxEntry {
    type Error = StorageError;
    fn try_from(row: OutboxRow) -> Result<Self> {
        Ok(OutboxEntry {
            id: OutboxId(row.id),
            outbound: parse_json("outbox", row.id, "outbound", &row.outbound)?,
            agent_id: row.agent_id,
            journal_id: row.journal_id.map(JournalId),
            attempts: row.attempts,
        })
    }
}

impl Store {
    /// Claims up to `limit` undelivered outbox entries whose retry time has come. A claim
    /// expires after `lease_ms`, so a crashed claimer's entries are taken again. Each claim
    /// counts as an attempt. Entries come back oldest first.
    pub async fn outbox_claim(
        &self,
        limit: i64,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Vec<OutboxEntry>> {
        let sql = match self.backend() {
            Backend::Sqlite => CLAIM_SQLITE,
            Backend::Postgres => CLAIM_POSTGRES,
        };
        let rows: Vec<OutboxRow> = with_pool!(self, pool => {
            sqlx::query_as(sql)
                .bind(limit.max(0))
                .bind(now_ms)
                .bind(lease_ms)
                .fetch_all(pool)
                .await
        })?;
        // RETURNING does not promise an order.
        let mut entries = rows
            .into_iter()
            .map(OutboxEntry::try_from)
            .collect::<Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.id);
        Ok(entries)
    }

    /// Claims one entry, if it is pending, due and not claimed by someone else: the agent
    /// uses it to deliver right after recording, without waiting for the worker.
    pub async fn outbox_claim_one(
        &self,
        id: OutboxId,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<OutboxEntry>> {
        let row: Option<OutboxRow> = with_pool!(self, pool => {
            sqlx::query_as(CLAIM_ONE)
                .bind(id.0)
                .bind(now_ms)
                .bind(lease_ms)
                .fetch_optional(pool)
                .await
        })?;
        row.map(OutboxEntry::try_from).transpose()
    }

    /// Records a delivery, with the ids the platform gave the sent message(s). On Postgres
    /// the mark joins the writer's batch, and so its commit (see `writer`).
    pub async fn outbox_delivered(&self, id: OutboxId, platform_ids: &[String]) -> Result<()> {
        let now = now_ms();
        let json = serde_json::to_string(platform_ids)
            .map_err(|e| StorageError::Corrupt(format!("cannot encode platform ids: {e}")))?;
        match &self.hot {
            HotPath::Engine(engine) => {
                engine
                    .call(move |conn| super::engine::outbox_delivered(conn, id.0, &json, now))
                    .await
            }
            HotPath::Writer(writer) => {
                writer
                    .outbox_delivered(super::writer::DeliveredReq {
                        outbox_id: id.0,
                        platform_ids_json: json,
                        now,
                    })
                    .await
            }
        }
    }

    /// Releases the claim and schedules another attempt. Only a pending entry is touched:
    /// if another worker delivered it meanwhile, that outcome stands.
    pub async fn outbox_retry(&self, id: OutboxId, not_before_ms: i64, error: &str) -> Result<()> {
        let now = now_ms();
        with_pool!(self, pool => {
            sqlx::query(
                "UPDATE outbox
                 SET claimed_until_ms = NULL, not_before_ms = $2, last_error = $3, updated_at_ms = $4
                 WHERE id = $1 AND state = 'pending'",
            )
            .bind(id.0)
            .bind(not_before_ms)
            .bind(error)
            .bind(now)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(())
    }

    /// Marks the entry failed for good; it is kept with its error for operators.
    pub async fn outbox_give_up(&self, id: OutboxId, error: &str) -> Result<()> {
        self.mark_failed(
            "UPDATE outbox
             SET state = 'failed', claimed_until_ms = NULL, last_error = $2, updated_at_ms = $3
             WHERE id = $1 AND state = 'pending'",
            id.0,
            error,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::sqlite_plan;
    use super::CLAIM_SQLITE;

    /// The claim reads the pending rows through the partial `outbox_due` (migration 0019),
    /// oldest first, without a sort: a claim that fell back to scanning the outbox would
    /// read every reply ever sent, each time the delivery worker looks for work.
    #[tokio::test]
    async fn the_claim_walks_the_pending_rows_in_order() {
        let steps = sqlite_plan(CLAIM_SQLITE, |q| {
            q.bind(10_i64).bind(1_000_i64).bind(100_i64)
        })
        .await;
        assert!(
            steps.iter().any(|s| s.contains("USING INDEX outbox_due")),
            "{steps:?}"
        );
        assert!(
            !steps.iter().any(|s| s.contains("TEMP B-TREE")),
            "{steps:?}"
        );
    }
}
