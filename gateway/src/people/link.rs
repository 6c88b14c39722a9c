//! The steps of linking two accounts, each from a direct message with the persona:
//! 1. `/link` on one account gives a code ([`issue`]), good for ten minutes;
//! 2. `/link CODE` on the other account ([`enter`]) names the account the code would join
//!    it with, and links nothing yet;
//! 3. `/link yes` on that same account ([`confirm`]) links them.
//!
//! So a code seen by a third person joins nobody unless the entering side, shown which
//! account it joins, confirms. Wrong entries are counted per entering account: after
//! `codes::MAX_TRIES` in `codes::TRY_WINDOW_MS`, every entry is refused until the window
//! ends, and the answer to a wrong code never says whether it exists or expired.

use troupe_connectors::AgentId;

use super::codes::{self, CODE_TTL_MS};
use crate::storage::{Account, Result, Store};

/// What `/link CODE` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entered {
    /// The code is good: `issuer` (seen as `name`) is the account it joins, once confirmed.
    Joins {
        issuer: Account,
        name: Option<String>,
    },
    /// No such code now (wrong, expired, or not a code at all): one more wrong entry.
    Refused,
    /// Too many wrong entries: refused for about this many minutes more.
    Locked { minutes: i64 },
    /// The sender's own code.
    OwnCode,
    /// The two accounts are one person already.
    AlreadyLinked,
}

/// `/link`: a new code for `by`, replacing the one it had. Returns the code.
pub(crate) async fn issue(
    store: &Store,
    agent: &AgentId,
    by: &Account,
    now_ms: i64,
) -> Result<String> {
    let code = codes::new_code();
    store
        .put_link_code(agent, by, &code, now_ms, now_ms + CODE_TTL_MS)
        .await?;
    Ok(code)
}

/// `/link CODE` from `by`.
pub(crate) async fn enter(
    store: &Store,
    agent: &AgentId,
    by: &Account,
    text: &str,
    now_ms: i64,
) -> Result<Entered> {
    let failures = store.link_failures(agent, by).await?;
    if codes::locked(failures, now_ms) {
        return Ok(Entered::Locked {
            minutes: codes::minutes_left(failures, now_ms),
        });
    }
    let found = match codes::read_code(text) {
        Some(code) => store
            .link_code(agent, &code, now_ms)
            .await?
            .map(|found| (code, found)),
        None => None,
    };
    let Some((code, found)) = found else {
        let (n, start) = codes::after_failure(failures, now_ms);
        store.set_link_failures(agent, by, n, start).await?;
        return Ok(if codes::locked(Some((n, start)), now_ms) {
            Entered::Locked {
                minutes: codes::minutes_left(Some((n, start)), now_ms),
            }
        } else {
            Entered::Refused
        });
    };
    if found.issuer == *by {
        return Ok(Entered::OwnCode);
    }
    let mine = store.person_of(agent, by.platform, &by.user_id).await?;
    if mine.accounts.contains(&found.issuer) {
        return Ok(Entered::AlreadyLinked);
    }
    store.claim_link_code(agent, &code, by).await?;
    let name = store.account_name(&found.issuer).await?;
    Ok(Entered::Joins {
        issuer: found.issuer,
        name,
    })
}

/// `/link yes` from `by`: links `by` with the account whose code it entered last, if that
/// code is still good. Returns that account, or `None` when there is nothing to confirm.
pub(crate) async fn confirm(
    store: &Store,
    agent: &AgentId,
    by: &Account,
    now_ms: i64,
) -> Result<Option<Account>> {
    let Some(issuer) = store.take_claimed_link_code(agent, by, now_ms).await? else {
        return Ok(None);
    };
    store.link_accounts(agent, &issuer, by, now_ms).await?;
    Ok(Some(issuer))
}

/// `/unlink` from `by`: the accounts it was linked with, now apart from it (empty when it
/// was not linked).
pub(crate) async fn unlink(store: &Store, agent: &AgentId, by: &Account) -> Result<Vec<Account>> {
    let person = store.person_of(agent, by.platform, &by.user_id).await?;
    if !person.is_linked() {
        return Ok(Vec::new());
    }
    store.unlink_account(agent, by).await?;
    Ok(person.accounts.into_iter().filter(|a| a != by).collect())
}

#[cfg(test)]
mod tests;
