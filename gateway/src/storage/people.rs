//! People: platform accounts linked into one person (issue 44 item 6, docs/people.md), and
//! the `/link` codes that link them. Only SQL lives here; when a code may be entered, and
//! what the chat is told, is `people`'s.
//!
//! A link belongs to one persona (`agent_id`), as facts, budgets and approvals do. Only a
//! linked account has a `person_accounts` row; an account without one is a person of its
//! own, whose id is its `platform:user_id`. [`Store::person_of`] is the one mapping from an
//! account to its person: everything per person (facts, budgets, `/usage`, `/forgetme`)
//! asks it. Nothing is copied at link time and nothing moved at unlink: each account keeps
//! its own rows, and a person is the union of its accounts' rows while they are linked.

use serde::Serialize;
use troupe_connectors::{AgentId, Platform, UserId};

use super::memory_sql::{self, ACCOUNTS_OF_PERSON, PERSON_ID_OF};
use super::{Result, Store, with_pool};

/// One platform account.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub platform: Platform,
    pub user_id: UserId,
}

impl Account {
    pub fn new(platform: Platform, user_id: &UserId) -> Account {
        Account {
            platform,
            user_id: user_id.clone(),
        }
    }

    /// `platform:user_id`: an unlinked account's person id, and the spend ledger's user key.
    pub fn key(&self) -> String {
        format!("{}:{}", self.platform, self.user_id)
    }
}

/// A person: their id and their accounts (one when unlinked), in a stable order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    pub id: String,
    pub accounts: Vec<Account>,
}

impl Person {
    pub fn is_linked(&self) -> bool {
        self.accounts.len() > 1
    }

    /// An account linked with no other: a person of its own.
    pub(super) fn alone(account: Account) -> Person {
        Person {
            id: account.key(),
            accounts: vec![account],
        }
    }

    /// Person `id`, as read for `account`: its accounts, or `account` alone when it was
    /// unlinked between the two reads.
    pub(super) fn linked(id: String, mut accounts: Vec<Account>, account: Account) -> Person {
        if !accounts.contains(&account) {
            accounts = vec![account];
        }
        Person { id, accounts }
    }
}

/// A `/link` code's row: who issued it and who entered it, if anyone has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkCode {
    pub issuer: Account,
    pub expires_at_ms: i64,
    pub claimed_by: Option<Account>,
}

type CodeRow = (Platform, UserId, i64, Option<Platform>, Option<UserId>);

fn code_of(row: CodeRow) -> LinkCode {
    let (platform, user_id, expires_at_ms, cp, cu) = row;
    LinkCode {
        issuer: Account { platform, user_id },
        expires_at_ms,
        claimed_by: cp
            .zip(cu)
            .map(|(platform, user_id)| Account { platform, user_id }),
    }
}

/// `Store::person_of` on the SQLite engine's connection, in one call (`memory_sql`).
pub(super) fn person_on(
    conn: &rusqlite::Connection,
    agent_id: &AgentId,
    platform: Platform,
    user: &UserId,
) -> Result<Person> {
    let account = Account::new(platform, user);
    let Some(id) = memory_sql::person_id_of(conn, agent_id, platform, user)? else {
        return Ok(Person::alone(account));
    };
    let accounts = memory_sql::accounts_of_person(conn, agent_id, &id)?
        .into_iter()
        .map(|(platform, user_id)| Account { platform, user_id })
        .collect();
    Ok(Person::linked(id, accounts, account))
}

impl Store {
    /// The person `platform:user` is for `agent_id`: the one mapping from an account to a
    /// person. An unlinked account is its own person, `platform:user`.
    pub async fn person_of(
        &self,
        agent_id: &AgentId,
        platform: Platform,
        user: &UserId,
    ) -> Result<Person> {
        if let Some(engine) = self.engine() {
            let (agent, user) = (agent_id.clone(), user.clone());
            return engine
                .read(move |conn| person_on(conn, &agent, platform, &user))
                .await;
        }
        let id: Option<String> = with_pool!(self, pool => {
            sqlx::query_scalar(PERSON_ID_OF)
            .bind(agent_id)
            .bind(platform)
            .bind(user)
            .fetch_optional(pool)
            .await
        })?;
        let account = Account::new(platform, user);
        let Some(id) = id else {
            return Ok(Person::alone(account));
        };
        let accounts = self.accounts_of_person(agent_id, &id).await?;
        Ok(Person::linked(id, accounts, account))
    }

    /// The accounts linked into person `person_id` (empty for an id that is no linked
    /// person: an unlinked account's `platform:user`, or one unlinked since).
    pub async fn accounts_of_person(
        &self,
        agent_id: &AgentId,
        person_id: &str,
    ) -> Result<Vec<Account>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as(ACCOUNTS_OF_PERSON)
            .bind(agent_id)
            .bind(person_id)
            .fetch_all(pool)
            .await
        })?;
        Ok(rows)
    }

    /// Every linked person of the agent, for the console.
    pub async fn linked_people(&self, agent_id: &AgentId) -> Result<Vec<Person>> {
        let rows: Vec<(String, Platform, UserId)> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT person_id, platform, user_id FROM person_accounts
                 WHERE agent_id = $1 ORDER BY person_id, platform, user_id LIMIT 10000",
            )
            .bind(agent_id)
            .fetch_all(pool)
            .await
        })?;
        let mut people: Vec<Person> = Vec::new();
        for (id, platform, user_id) in rows {
            let account = Account { platform, user_id };
            match people.last_mut() {
                Some(p) if p.id == id => p.accounts.push(account),
                _ => people.push(Person {
                    id,
                    accounts: vec![account],
                }),
            }
        }
        Ok(people)
    }

    /// Links `joining` into `issuer`'s person (and every account already linked to
    /// `joining` with it), in one transaction. Returns the person's id.
    pub async fn link_accounts(
        &self,
        agent_id: &AgentId,
        issuer: &Account,
        joining: &Account,
        now_ms: i64,
    ) -> Result<String> {
        let fresh = format!("person:{}", uuid::Uuid::new_v4().simple());
        let id = with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                let find = "SELECT person_id FROM person_accounts
                            WHERE agent_id = $1 AND platform = $2 AND user_id = $3";
                let theirs: Option<String> = sqlx::query_scalar(find)
                    .bind(agent_id).bind(issuer.platform).bind(&issuer.user_id)
                    .fetch_optional(&mut *tx).await?;
                let mine: Option<String> = sqlx::query_scalar(find)
                    .bind(agent_id).bind(joining.platform).bind(&joining.user_id)
                    .fetch_optional(&mut *tx).await?;
                let id = theirs.unwrap_or(fresh);
                if let Some(mine) = mine {
                    sqlx::query("UPDATE person_accounts SET person_id = $3
                                 WHERE agent_id = $1 AND person_id = $2")
                        .bind(agent_id).bind(&mine).bind(&id)
                        .execute(&mut *tx).await?;
                }
                for account in [issuer, joining] {
                    sqlx::query(
                        "INSERT INTO person_accounts
                             (agent_id, platform, user_id, person_id, linked_at_ms)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (agent_id, platform, user_id)
                         DO UPDATE SET person_id = excluded.person_id",
                    )
                    .bind(agent_id).bind(account.platform).bind(&account.user_id)
                    .bind(&id).bind(now_ms)
                    .execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok::<String, sqlx::Error>(id)
            }
            .await
        })?;
        Ok(id)
    }

    /// Takes `account` out of its person. A person left with one account is no longer
    /// linked, and that account is its own person again. False when it was not linked.
    pub async fn unlink_account(&self, agent_id: &AgentId, account: &Account) -> Result<bool> {
        let gone = with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                let id: Option<String> = sqlx::query_scalar(
                    "DELETE FROM person_accounts
                     WHERE agent_id = $1 AND platform = $2 AND user_id = $3
                     RETURNING person_id",
                )
                .bind(agent_id).bind(account.platform).bind(&account.user_id)
                .fetch_optional(&mut *tx).await?;
                if let Some(id) = &id {
                    sqlx::query(
                        "DELETE FROM person_accounts WHERE agent_id = $1 AND person_id = $2
                           AND (SELECT COUNT(*) FROM person_accounts
                                WHERE agent_id = $1 AND person_id = $2) = 1",
                    )
                    .bind(agent_id).bind(id)
                    .execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok::<bool, sqlx::Error>(id.is_some())
            }
            .await
        })?;
        Ok(gone)
    }

    /// The latest name `account` was seen under, if any.
    pub async fn account_name(&self, account: &Account) -> Result<Option<String>> {
        let name = with_pool!(self, pool => {
            sqlx::query_scalar("SELECT name FROM users WHERE platform = $1 AND user_id = $2")
                .bind(account.platform)
                .bind(&account.user_id)
                .fetch_optional(pool)
                .await
        })?;
        Ok(name)
    }

    /// Stores `code` as `issuer`'s `/link` code until `expires_at_ms`, replacing the code
    /// it had; expired codes of anyone are dropped on the way.
    pub async fn put_link_code(
        &self,
        agent_id: &AgentId,
        issuer: &Account,
        code: &str,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Result<()> {
        with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "DELETE FROM link_codes WHERE agent_id = $1
                       AND ((platform = $2 AND user_id = $3) OR expires_at_ms <= $4)",
                )
                .bind(agent_id).bind(issuer.platform).bind(&issuer.user_id).bind(now_ms)
                .execute(&mut *tx).await?;
                sqlx::query(
                    "INSERT INTO link_codes (agent_id, code, platform, user_id, expires_at_ms)
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(agent_id).bind(code).bind(issuer.platform).bind(&issuer.user_id)
                .bind(expires_at_ms)
                .execute(&mut *tx).await?;
                tx.commit().await
            }
            .await
        })?;
        Ok(())
    }

    /// The unexpired code `code`, if there is one.
    pub async fn link_code(
        &self,
        agent_id: &AgentId,
        code: &str,
        now_ms: i64,
    ) -> Result<Option<LinkCode>> {
        let row: Option<CodeRow> = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT platform, user_id, expires_at_ms, claimed_platform, claimed_user_id
                 FROM link_codes WHERE agent_id = $1 AND code = $2 AND expires_at_ms > $3",
            )
            .bind(agent_id)
            .bind(code)
            .bind(now_ms)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row.map(code_of))
    }

    /// Records that `by` entered `code`: the last to enter a code is the one who may
    /// confirm it, and `by` may confirm only the code it entered last.
    pub async fn claim_link_code(
        &self,
        agent_id: &AgentId,
        code: &str,
        by: &Account,
    ) -> Result<()> {
        with_pool!(self, pool => {
            async {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "UPDATE link_codes SET claimed_platform = NULL, claimed_user_id = NULL
                     WHERE agent_id = $1 AND claimed_platform = $2 AND claimed_user_id = $3",
                )
                .bind(agent_id).bind(by.platform).bind(&by.user_id)
                .execute(&mut *tx).await?;
                sqlx::query(
                    "UPDATE link_codes SET claimed_platform = $3, claimed_user_id = $4
                     WHERE agent_id = $1 AND code = $2",
                )
                .bind(agent_id).bind(code).bind(by.platform).bind(&by.user_id)
                .execute(&mut *tx).await?;
                tx.commit().await
            }
            .await
        })?;
        Ok(())
    }

    /// Takes the unexpired code `by` entered last, deleting it: its issuer, or `None` when
    /// `by` has no code to confirm.
    pub async fn take_claimed_link_code(
        &self,
        agent_id: &AgentId,
        by: &Account,
        now_ms: i64,
    ) -> Result<Option<Account>> {
        let issuer: Option<(Platform, UserId)> = with_pool!(self, pool => {
            sqlx::query_as(
                "DELETE FROM link_codes
                 WHERE agent_id = $1 AND claimed_platform = $2 AND claimed_user_id = $3
                   AND expires_at_ms > $4
                 RETURNING platform, user_id",
            )
            .bind(agent_id)
            .bind(by.platform)
            .bind(&by.user_id)
            .bind(now_ms)
            .fetch_optional(pool)
            .await
        })?;
        Ok(issuer.map(|(platform, user_id)| Account { platform, user_id }))
    }

    /// `by`'s wrong `/link CODE` entries: how many, and when the first of the window was.
    pub async fn link_failures(
        &self,
        agent_id: &AgentId,
        by: &Account,
    ) -> Result<Option<(i64, i64)>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT failures, window_start_ms FROM link_failures
                 WHERE agent_id = $1 AND platform = $2 AND user_id = $3",
            )
            .bind(agent_id)
            .bind(by.platform)
            .bind(&by.user_id)
            .fetch_optional(pool)
            .await
        })?;
        Ok(row)
    }

    /// Sets `by`'s wrong entries to `failures` in the window starting at `window_start_ms`
    /// (zero failures deletes the row).
    pub async fn set_link_failures(
        &self,
        agent_id: &AgentId,
        by: &Account,
        failures: i64,
        window_start_ms: i64,
    ) -> Result<()> {
        with_pool!(self, pool => {
            if failures == 0 {
                sqlx::query(
                    "DELETE FROM link_failures
                     WHERE agent_id = $1 AND platform = $2 AND user_id = $3",
                )
                .bind(agent_id).bind(by.platform).bind(&by.user_id)
                .execute(pool).await.map(|_| ())
            } else {
                sqlx::query(
                    "INSERT INTO link_failures
                         (agent_id, platform, user_id, failures, window_start_ms)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (agent_id, platform, user_id) DO UPDATE SET
                         failures = excluded.failures,
                         window_start_ms = excluded.window_start_ms",
                )
                .bind(agent_id).bind(by.platform).bind(&by.user_id)
                .bind(failures).bind(window_start_ms)
                .execute(pool).await.map(|_| ())
            }
        })?;
        Ok(())
    }
}
