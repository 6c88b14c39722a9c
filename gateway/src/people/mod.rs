//! One person across platforms (issue 44 item 6, docs/people.md): a person's Telegram and
//! Discord accounts, linked with `/link`, are one person to a persona. They share the facts
//! about them, one per-user budget, `/usage` and `/forgetme`.
//!
//! [`person_of`] is the one mapping from a platform sender to a person; every per-person
//! read goes through it (`Store::person_of`, which the storage calls for facts and the
//! spend meter for budgets). [`linked_accounts`] is what an access check asks to treat an
//! approval of one account as an approval of all (approved once, approved everywhere).
//! Layout:
//! - this file: the mapping and the accounts of a person;
//! - `codes`: making and reading `/link` codes, expiry and the lockout on wrong entries;
//! - `link`: the steps of linking (give a code, enter it, confirm) and unlinking.

pub(crate) mod codes;
pub(crate) mod link;

use troupe_connectors::{AgentId, Platform, UserId};

use crate::storage::Store;
pub use crate::storage::{Account, Person};

/// The person `platform:user` is for `agent`: an unlinked account is its own person.
pub async fn person_of(
    store: &Store,
    agent: &AgentId,
    platform: Platform,
    user: &UserId,
) -> crate::storage::Result<Person> {
    store.person_of(agent, platform, user).await
}

/// The accounts of the person with id `person` (the person's `id`), as `(platform, user)`:
/// the one account itself for an unlinked account's id (`platform:user`).
pub async fn linked_accounts(
    store: &Store,
    agent: &AgentId,
    person: &str,
) -> crate::storage::Result<Vec<(Platform, UserId)>> {
    let accounts = store.accounts_of_person(agent, person).await?;
    if !accounts.is_empty() {
        return Ok(accounts
            .into_iter()
            .map(|a| (a.platform, a.user_id))
            .collect());
    }
    // An unlinked account's person id is its key.
    Ok(person
        .split_once(':')
        .and_then(|(p, u)| Some((p.parse().ok()?, UserId::new(u))))
        .into_iter()
        .collect())
}
