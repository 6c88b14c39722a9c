//! Access records (issue 44): pairing codes, approvals and wrong approvals. Each limit of
//! `crate::pairing` is applied inside the transaction that issues or approves a code, so that
//! replicas, the API and the CLI (another process on the same database) agree; on Postgres
//! an advisory lock orders those transactions, as SQLite's one writer does. What a code
//! means, and who may approve one, is `crate::access`'s.

use serde::Serialize;
use troupe_connectors::{AgentId, Platform};

use super::{Backend, Result, Store, with_pool};
use crate::pairing::{FAILURE_WINDOW_MS, LOCKOUT_MS, MAX_FAILURES, MAX_PENDING, TTL_MS, new_code};

/// The advisory lock key of access writers ("pair" in ASCII).
const ACCESS_LOCK: i64 = 0x7061_6972;

/// A sender to tell something: who, and when.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub agent_id: &'a AgentId,
    pub platform: Platform,
    pub user_id: &'a str,
    pub user_name: &'a str,
    pub now_ms: i64,
}

/// What a sender not let in is told: a pairing code, or a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Telling {
    Code,
    Refusal,
}

/// A code waiting to be approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct PendingCode {
    pub agent_id: AgentId,
    pub platform: String,
    pub user_id: String,
    pub user_name: String,
    pub code: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// Someone let in by a code or by the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Approved {
    pub agent_id: AgentId,
    /// `platform:user_id`.
    pub subject: String,
    pub user_name: String,
    pub approved_by: String,
    pub approved_at_ms: i64,
}

/// How an approval went. A wrong code and an expired one read the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Approved(Approved),
    Refused,
    /// Too many wrong approvals in this scope: none is tried until `until_ms`.
    LockedOut {
        until_ms: i64,
    },
}

const APPROVE_SQL: &str = "INSERT INTO access_approvals
         (agent_id, subject, user_name, approved_by, approved_at_ms)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (agent_id, subject) DO UPDATE
     SET user_name = excluded.user_name, approved_by = excluded.approved_by,
         approved_at_ms = excluded.approved_at_ms";

/// Keeps the newest `MAX_PENDING` codes of a persona and platform waiting.
const DROP_OLDEST_SQL: &str = "UPDATE pairing_codes SET pending = 0
     WHERE agent_id = $1 AND platform = $2 AND pending = 1
       AND user_id NOT IN (
         SELECT user_id FROM pairing_codes
         WHERE agent_id = $1 AND platform = $2 AND pending = 1
         ORDER BY created_at_ms DESC, user_id DESC LIMIT $3)";

/// Takes the access lock inside `$tx` on Postgres.
macro_rules! access_lock {
    ($store:expr, $tx:ident) => {
        if $store.backend() == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(ACCESS_LOCK)
                .execute(&mut *$tx)
                .await?;
        }
    };
}

impl Store {
    /// Whether `subject` (`platform:user_id`) was approved for `agent_id`.
    pub async fn access_approved(&self, agent_id: &AgentId, subject: &str) -> Result<bool> {
        let row: Option<(i64,)> = with_pool!(self, pool => {
            sqlx::query_as("SELECT approved_at_ms FROM access_approvals WHERE agent_id = $1 AND subject = $2")
                .bind(agent_id)
                .bind(subject)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row.is_some())
    }

    /// Says something to `asker` at most once per `every_ms`: `Some(code)` when this call
    /// is the one to say it (a new code when `pairing`, else an empty one for a refusal),
    /// `None` when the sender was told already. A new code drops the oldest beyond
    /// `MAX_PENDING` of its persona and platform.
    pub async fn access_tell(
        &self,
        asker: Asker<'_>,
        telling: Telling,
        every_ms: i64,
    ) -> Result<Option<String>> {
        let pairing = telling == Telling::Code;
        let code = if pairing { new_code() } else { String::new() };
        let now = asker.now_ms;
        let told = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            access_lock!(self, tx);
            sqlx::query("DELETE FROM pairing_codes WHERE agent_id = $1 AND platform = $2 AND created_at_ms < $3")
                .bind(asker.agent_id)
                .bind(asker.platform)
                .bind(now - TTL_MS.max(every_ms))
                .execute(&mut *tx)
                .await?;
            let told: Option<(String,)> = sqlx::query_as(
                "INSERT INTO pairing_codes (agent_id, platform, user_id, user_name, code,
                     created_at_ms, expires_at_ms, pending)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (agent_id, platform, user_id) DO UPDATE
                 SET user_name = excluded.user_name, code = excluded.code,
                     created_at_ms = excluded.created_at_ms,
                     expires_at_ms = excluded.expires_at_ms, pending = excluded.pending
                 WHERE pairing_codes.created_at_ms <= $9
                 RETURNING code",
            )
            .bind(asker.agent_id)
            .bind(asker.platform)
            .bind(asker.user_id)
            .bind(asker.user_name)
            .bind(&code)
            .bind(now)
            .bind(now + TTL_MS)
            .bind(i32::from(pairing))
            .bind(now - every_ms)
            .fetch_optional(&mut *tx)
            .await?;
            if told.is_some() && pairing {
                sqlx::query(DROP_OLDEST_SQL)
                .bind(asker.agent_id)
                .bind(asker.platform)
                .bind(MAX_PENDING)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(told.map(|(c,)| c))
        }
        .await)?;
        Ok(told)
    }

    /// Approves the pending code `code` (upper case; `None`: not a code at all, which
    /// counts as wrong) of `agent_id` (any persona when `None`) for `by`, unless approval
    /// in `scope` is locked out. A wrong code counts against `scope`.
    pub async fn access_approve(
        &self,
        code: Option<&str>,
        agent_id: Option<&AgentId>,
        scope: &str,
        by: &str,
        now: i64,
    ) -> Result<Approval> {
        if let Some(until_ms) = self.access_locked_until(scope, now).await? {
            return Ok(Approval::LockedOut { until_ms });
        }
        let taken = match code {
            Some(code) => self.access_take(code, agent_id, by, now).await?,
            None => None,
        };
        match taken {
            Some(approved) => Ok(Approval::Approved(approved)),
            None => {
                self.access_fail(scope, now).await?;
                Ok(Approval::Refused)
            }
        }
    }

    /// Until when approval in `scope` is locked out, if it is.
    async fn access_locked_until(&self, scope: &str, now: i64) -> Result<Option<i64>> {
        let failures: Vec<(i64,)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT at_ms FROM pairing_failures WHERE scope = $1 AND at_ms > $2
                 ORDER BY at_ms LIMIT 200",
            )
            .bind(scope)
            .bind(now - FAILURE_WINDOW_MS - LOCKOUT_MS)
            .fetch_all(pool)
            .await
        })?;
        let failures: Vec<i64> = failures.into_iter().map(|(t,)| t).collect();
        Ok(locked_until(&failures, now))
    }

    /// Counts a wrong approval in `scope`, and forgets those too old to matter.
    async fn access_fail(&self, scope: &str, now: i64) -> Result<()> {
        with_pool!(self, pool => async {
            sqlx::query("INSERT INTO pairing_failures (scope, at_ms) VALUES ($1, $2)")
                .bind(scope)
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query("DELETE FROM pairing_failures WHERE at_ms < $1")
                .bind(now - FAILURE_WINDOW_MS - LOCKOUT_MS)
                .execute(pool)
                .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await)?;
        Ok(())
    }

    /// Takes the pending code `code` and approves its sender, in one transaction; `None`
    /// when no such code waits (wrong, expired, dropped, or another persona's).
    async fn access_take(
        &self,
        code: &str,
        agent_id: Option<&AgentId>,
        by: &str,
        now: i64,
    ) -> Result<Option<Approved>> {
        let agent = agent_id.map(|a| a.as_str().to_string());
        let taken = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            access_lock!(self, tx);
            let found: Option<PendingCode> = sqlx::query_as(
                "SELECT agent_id, platform, user_id, user_name, code, created_at_ms, expires_at_ms
                 FROM pairing_codes
                 WHERE code = $1 AND pending = 1 AND expires_at_ms > $2
                   AND ($3 IS NULL OR agent_id = $3)
                 LIMIT 1",
            )
            .bind(code)
            .bind(now)
            .bind(&agent)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(found) = found else {
                tx.commit().await?;
                return Ok::<_, sqlx::Error>(None);
            };
            let approved = Approved {
                subject: format!("{}:{}", found.platform, found.user_id),
                agent_id: found.agent_id.clone(),
                user_name: found.user_name.clone(),
                approved_by: by.to_string(),
                approved_at_ms: now,
            };
            sqlx::query(APPROVE_SQL)
                .bind(&approved.agent_id)
                .bind(&approved.subject)
                .bind(&approved.user_name)
                .bind(&approved.approved_by)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM pairing_codes WHERE agent_id = $1 AND platform = $2 AND user_id = $3")
                .bind(&found.agent_id)
                .bind(&found.platform)
                .bind(&found.user_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(approved))
        }
        .await)?;
        Ok(taken)
    }

    /// Takes back `subject`'s approval for `agent_id` (every persona's when `None`), and
    /// forgets what it was told, so that its next DM is a stranger's. How many were taken.
    pub async fn access_revoke(&self, agent_id: Option<&AgentId>, subject: &str) -> Result<u64> {
        let agent = agent_id.map(|a| a.as_str().to_string());
        let (platform, user) = subject.split_once(':').unwrap_or((subject, ""));
        let taken = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let taken = sqlx::query(
                "DELETE FROM access_approvals WHERE subject = $1 AND ($2 IS NULL OR agent_id = $2)",
            )
            .bind(subject)
            .bind(&agent)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query(
                "DELETE FROM pairing_codes WHERE platform = $1 AND user_id = $2
                   AND ($3 IS NULL OR agent_id = $3)",
            )
            .bind(platform)
            .bind(user)
            .bind(&agent)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(taken)
        }
        .await)?;
        Ok(taken)
    }

    /// The codes waiting, and the people approved, of `agent_id` (every persona's when
    /// `None`), newest first.
    pub async fn access_list(
        &self,
        agent_id: Option<&AgentId>,
        now: i64,
    ) -> Result<(Vec<PendingCode>, Vec<Approved>)> {
        let agent = agent_id.map(|a| a.as_str().to_string());
        let lists = with_pool!(self, pool => async {
            let pending: Vec<PendingCode> = sqlx::query_as(
                "SELECT agent_id, platform, user_id, user_name, code, created_at_ms, expires_at_ms
                 FROM pairing_codes
                 WHERE pending = 1 AND expires_at_ms > $1 AND ($2 IS NULL OR agent_id = $2)
                 ORDER BY created_at_ms DESC LIMIT 500",
            )
            .bind(now)
            .bind(&agent)
            .fetch_all(pool)
            .await?;
            let approved: Vec<Approved> = sqlx::query_as(
                "SELECT agent_id, subject, user_name, approved_by, approved_at_ms
                 FROM access_approvals WHERE ($1 IS NULL OR agent_id = $1)
                 ORDER BY approved_at_ms DESC LIMIT 500",
            )
            .bind(&agent)
            .fetch_all(pool)
            .await?;
            Ok::<_, sqlx::Error>((pending, approved))
        }
        .await)?;
        Ok(lists)
    }

    /// Closes a journal entry whose sender was not let in: done, with nothing in room
    /// memory and nothing said.
    pub async fn journal_refused(&self, journal_id: super::JournalId) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "UPDATE journal SET state = 'done', last_error = NULL, updated_at_ms = $2
                 WHERE id = $1 AND state <> 'done'",
            )
            .bind(journal_id.0)
            .bind(super::now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }
}

/// When approval is locked out until, given the wrong approvals' times (oldest first): the
/// `MAX_FAILURES`th failure within `FAILURE_WINDOW_MS` locks it for `LOCKOUT_MS`.
pub fn locked_until(failures: &[i64], now: i64) -> Option<i64> {
    let n = MAX_FAILURES as usize;
    failures
        .windows(n)
        .filter(|w| w[n - 1] - w[0] < FAILURE_WINDOW_MS)
        .map(|w| w[n - 1] + LOCKOUT_MS)
        .filter(|until| *until > now)
        .max()
}
