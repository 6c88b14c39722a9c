//! Usage: the spend ledger's SQL (tables from `migrations/*/0007_usage.sql`).
//!
//! A model call is one raw record plus three rollup increments (persona, room, user), in one
//! transaction, so the rollups every replica checks budgets against never disagree with the
//! records. Increments are `ON CONFLICT … DO UPDATE SET x = x + excluded.x`: concurrent
//! writers add up instead of overwriting each other. What a call may cost and when it is
//! refused belongs to `crate::spend`.

use serde::Serialize;
use troupe_connectors::{AgentId, RoomKey};

use super::writer::{column, rollup_add};
use super::{Result, StorageError, Store, with_pool};

/// One model call to record.
#[derive(Debug, Clone)]
pub struct NewUsage {
    pub agent_id: AgentId,
    /// `None`: the call belongs to no room (memory upkeep, an embedding).
    pub room_key: Option<RoomKey>,
    /// `platform:user`, when the call was made for a user.
    pub user_key: Option<String>,
    pub provider: String,
    pub model: String,
    /// `reply`, `summary`, `facts` or `embedding`.
    pub purpose: &'static str,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub estimated: bool,
    pub cost_micros: i64,
    pub day: i64,
    pub at_ms: i64,
}

/// Tokens (prompt plus completion) and micro-dollars of one rollup scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTally {
    pub tokens: i64,
    pub micros: i64,
}

/// What a persona, one of its rooms and one user used today, and the persona this month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageNow {
    pub persona_day: UsageTally,
    pub persona_month: UsageTally,
    pub room_day: UsageTally,
    pub user_day: UsageTally,
    /// What the persona's rooms of the HTTP API (`web:`) used today and this month
    /// together: the API's share of the budgets is checked against these (issue 30, #7).
    pub api_day: UsageTally,
    pub api_month: UsageTally,
}

/// How `usage_rollup` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBy {
    Room,
    User,
    Day,
    /// `provider:model`, from the raw records (kept `TROUPE_SPEND_RETENTION_DAYS`): the
    /// split between a persona's large and small models (issue 34).
    Model,
    /// What the calls were for (`reply`, `summary`, `facts`, `post`…), from the raw records.
    Purpose,
}

/// One group of `usage_rollup`: a room key, a `platform:user`, or a day number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct UsageRow {
    pub key: String,
    pub day: i64,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cost_micros: i64,
}

/// The most groups one rollup query returns.
pub const USAGE_ROWS_MAX: i64 = 1000;

/// One rollup row's key: agent, day, scope, scope key.
type RollupKey = (AgentId, i64, &'static str, String);

/// The batch's increments per rollup row (calls, prompt, completion, cached, cost), in a
/// stable order.
fn rollups(batch: &[NewUsage]) -> Vec<(RollupKey, [i64; 5])> {
    let mut sums: std::collections::BTreeMap<RollupKey, [i64; 5]> = Default::default();
    for u in batch {
        let add = [
            1,
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.cost_micros,
        ];
        let mut keys = vec![(u.agent_id.clone(), u.day, "agent", String::new())];
        if let Some(room) = &u.room_key {
            keys.push((u.agent_id.clone(), u.day, "room", room.to_string()));
        }
        if let Some(user) = &u.user_key {
            keys.push((u.agent_id.clone(), u.day, "user", user.clone()));
        }
        for key in keys {
            let row = sums.entry(key).or_default();
            for (total, n) in row.iter_mut().zip(add) {
                *total += n;
            }
        }
    }
    sums.into_iter().collect()
}

/// Postgres: the batch's calls as `usage_records` rows. One text whatever the batch's size,
/// its rows one array a column (`writer::batch`, issue 48).
async fn insert_records(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    batch: &[NewUsage],
) -> Result<()> {
    sqlx::query(
        "INSERT INTO usage_records (agent_id, room, user_key, provider, model, purpose,
            prompt_tokens, completion_tokens, cached_tokens, estimated, cost_micros, day,
            created_at_ms)
         SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
            $6::TEXT[], $7::BIGINT[], $8::BIGINT[], $9::BIGINT[], $10::BOOLEAN[],
            $11::BIGINT[], $12::BIGINT[], $13::BIGINT[])",
    )
    .bind(column(batch, |u| u.agent_id.as_str()))
    .bind(column(batch, |u| {
        u.room_key
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }))
    .bind(column(batch, |u| u.user_key.as_deref().unwrap_or_default()))
    .bind(column(batch, |u| u.provider.as_str()))
    .bind(column(batch, |u| u.model.as_str()))
    .bind(column(batch, |u| u.purpose))
    .bind(column(batch, |u| u.prompt_tokens))
    .bind(column(batch, |u| u.completion_tokens))
    .bind(column(batch, |u| u.cached_tokens))
    .bind(column(batch, |u| u.estimated))
    .bind(column(batch, |u| u.cost_micros))
    .bind(column(batch, |u| u.day))
    .bind(column(batch, |u| u.at_ms))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Postgres: the batch's increments added to their rollup rows, one text as above.
async fn add_rollups(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    rollups: &[(RollupKey, [i64; 5])],
) -> Result<()> {
    sqlx::query(concat!(
        "INSERT INTO usage_daily (agent_id, day, scope, scope_key, calls, prompt_tokens,
            completion_tokens, cached_tokens, cost_micros)
         SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[],
            $6::BIGINT[], $7::BIGINT[], $8::BIGINT[], $9::BIGINT[])",
        rollup_add!()
    ))
    .bind(column(rollups, |((a, ..), _)| a.as_str()))
    .bind(column(rollups, |((_, day, ..), _)| *day))
    .bind(column(rollups, |((_, _, scope, _), _)| *scope))
    .bind(column(rollups, |((.., key), _)| key.as_str()))
    .bind(column(rollups, |(_, n)| n[0]))
    .bind(column(rollups, |(_, n)| n[1]))
    .bind(column(rollups, |(_, n)| n[2]))
    .bind(column(rollups, |(_, n)| n[3]))
    .bind(column(rollups, |(_, n)| n[4]))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    /// Records one call and adds it to today's rollups, in one transaction.
    pub async fn usage_record(&self, usage: &NewUsage) -> Result<()> {
        self.usage_record_batch(std::slice::from_ref(usage)).await
    }

    /// Records calls and adds them to the rollups, in one transaction of two statements:
    /// the increments are summed per rollup row first (Postgres refuses to update one row
    /// twice in one statement).
    pub async fn usage_record_batch(&self, batch: &[NewUsage]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rollups = rollups(batch);
        // On a SQLite file, on the engine's connection: the one that writes the message path,
        // so that the two never wait for each other's write lock.
        if let Some(engine) = self.engine() {
            let batch = batch.to_vec();
            return engine
                .call(move |conn| super::engine::usage_record_batch(conn, &batch, &rollups))
                .await;
        }
        let super::Pool::Postgres(pool) = &self.pool else {
            // Every SQLite store has its engine (`Store::connect`).
            return Err(StorageError::Database(sqlx::Error::PoolClosed));
        };
        let mut tx = pool.begin().await?;
        insert_records(&mut tx, batch).await?;
        add_rollups(&mut tx, &rollups).await?;
        tx.commit().await?;
        Ok(())
    }

    /// What the persona used today and since `month_start` (a day number), what `room`
    /// and `user_key` used today, and what its rooms of the HTTP API used today and since
    /// `month_start`. One query over the rollups.
    pub async fn usage_now(
        &self,
        agent_id: &AgentId,
        today: i64,
        month_start: i64,
        room_key: Option<&RoomKey>,
        user_key: Option<&str>,
    ) -> Result<UsageNow> {
        let room_key = room_key.map(ToString::to_string);
        let rows: Vec<(String, i64, i64, i64)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT scope, day, prompt_tokens + completion_tokens, cost_micros FROM usage_daily
                 WHERE agent_id = $1 AND day >= $2 AND day <= $3 AND (
                    (scope = 'agent' AND scope_key = '')
                    OR (scope = 'room' AND scope_key = $4 AND day = $3)
                    OR (scope = 'user' AND scope_key = $5 AND day = $3))
                 UNION ALL
                 SELECT 'web', day, CAST(SUM(prompt_tokens + completion_tokens) AS BIGINT),
                    CAST(SUM(cost_micros) AS BIGINT) FROM usage_daily
                 WHERE agent_id = $1 AND day >= $2 AND day <= $3 AND scope = 'room'
                    AND scope_key >= 'web:' AND scope_key < 'web;'
                 GROUP BY day",
            )
            .bind(agent_id)
            .bind(month_start.min(today))
            .bind(today)
            // '' is the persona's own key, never a room's or a user's: it matches nothing.
            .bind(room_key.as_deref().unwrap_or(""))
            .bind(user_key.unwrap_or(""))
            .fetch_all(pool)
            .await
        })?;
        let mut now = UsageNow::default();
        for (scope, day, tokens, micros) in rows {
            let add = |t: &mut UsageTally| {
                t.tokens += tokens;
                t.micros += micros;
            };
            match scope.as_str() {
                "agent" => {
                    add(&mut now.persona_month);
                    if day == today {
                        add(&mut now.persona_day);
                    }
                }
                "room" => add(&mut now.room_day),
                // Every room of the HTTP API, summed per day (`web;` is the first key after
                // every `web:…`, so the range reads only the index).
                "web" => {
                    add(&mut now.api_month);
                    if day == today {
                        add(&mut now.api_day);
                    }
                }
                "user" => add(&mut now.user_day),
                _ => {}
            }
        }
        Ok(now)
    }

    /// What the user `user_key` (`platform:user`) used on day `day`: the other accounts of
    /// a linked person, added to `usage_now`'s (one per-user budget per person, `people`).
    pub async fn usage_user_day(
        &self,
        agent_id: &AgentId,
        day: i64,
        user_key: &str,
    ) -> Result<UsageTally> {
        let row: Option<(i64, i64)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT prompt_tokens + completion_tokens, cost_micros FROM usage_daily
                 WHERE agent_id = $1 AND day = $2 AND scope = 'user' AND scope_key = $3",
            )
            .bind(agent_id)
            .bind(day)
            .bind(user_key)
            .fetch_optional(pool)
            .await
        })?;
        let (tokens, micros) = row.unwrap_or_default();
        Ok(UsageTally { tokens, micros })
    }

    /// Marks the notice of budget `budget` for `scope_key` in the window starting on day
    /// `window_start` as sent. True for the first caller in the window, in any replica.
    pub async fn usage_notice_first(
        &self,
        agent_id: &AgentId,
        budget: &str,
        scope_key: &str,
        window_start: i64,
        at_ms: i64,
    ) -> Result<bool> {
        let inserted = with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO budget_notices (agent_id, budget, scope_key, window_start, sent_at_ms)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(agent_id)
            .bind(budget)
            .bind(scope_key)
            .bind(window_start)
            .bind(at_ms)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
        })?;
        Ok(inserted == 1)
    }

    /// The persona's usage since day `since`, summed per room, per user or per day (largest
    /// cost first; days newest first), at most `USAGE_ROWS_MAX` groups.
    pub async fn usage_rollup(
        &self,
        agent_id: &AgentId,
        by: UsageBy,
        since: i64,
    ) -> Result<Vec<UsageRow>> {
        let (scope, key, day, order) = match by {
            UsageBy::Model => {
                return self
                    .usage_records_by(agent_id, "provider || ':' || model", since)
                    .await;
            }
            UsageBy::Purpose => return self.usage_records_by(agent_id, "purpose", since).await,
            UsageBy::Room => ("room", "scope_key", "MIN(day)", "cost_micros DESC, key"),
            UsageBy::User => ("user", "scope_key", "MIN(day)", "cost_micros DESC, key"),
            UsageBy::Day => ("agent", "''", "day", "day DESC"),
        };
        let group = if by == UsageBy::Day {
            "day"
        } else {
            "scope_key"
        };
        let sql = format!(
            "SELECT {key} AS key, {day} AS day,
                CAST(SUM(calls) AS BIGINT) AS calls,
                CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens,
                CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens,
                CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens,
                CAST(SUM(cost_micros) AS BIGINT) AS cost_micros
             FROM usage_daily WHERE agent_id = $1 AND scope = $2 AND day >= $3
             GROUP BY {group} ORDER BY {order} LIMIT {USAGE_ROWS_MAX}"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, UsageRow>(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(scope)
                .bind(since)
                .fetch_all(pool)
                .await
        })?;
        Ok(rows)
    }

    /// The raw records since day `since`, summed per `key` (an expression of the
    /// record's columns), largest cost first.
    async fn usage_records_by(
        &self,
        agent_id: &AgentId,
        key: &'static str,
        since: i64,
    ) -> Result<Vec<UsageRow>> {
        let sql = format!(
            "SELECT {key} AS key, MIN(day) AS day,
                CAST(COUNT(*) AS BIGINT) AS calls,
                CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens,
                CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens,
                CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens,
                CAST(SUM(cost_micros) AS BIGINT) AS cost_micros
             FROM usage_records WHERE agent_id = $1 AND day >= $2
             GROUP BY {key} ORDER BY cost_micros DESC, key LIMIT {USAGE_ROWS_MAX}"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, UsageRow>(sqlx::AssertSqlSafe(sql))
                .bind(agent_id)
                .bind(since)
                .fetch_all(pool)
                .await
        })?;
        Ok(rows)
    }

    /// Deletes raw records older than `before_ms` (the rollups stay); how many.
    pub async fn usage_prune(&self, before_ms: i64) -> Result<u64> {
        let deleted = with_pool!(self, pool => {
            sqlx::query("DELETE FROM usage_records WHERE created_at_ms < $1")
                .bind(before_ms)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(deleted)
    }

    /// How many raw records a persona has (tests, retention).
    pub async fn usage_records_count(&self, agent_id: &AgentId) -> Result<i64> {
        let n = with_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM usage_records WHERE agent_id = $1")
                .bind(agent_id)
                .fetch_one(pool)
                .await
        })?;
        Ok(n)
    }
}
