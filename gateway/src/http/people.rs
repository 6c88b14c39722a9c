//! `GET /api/agents/{agent}/people`: the persona's linked people and their accounts
//! (issue 44 item 6, docs/people.md), for the console's "Linked accounts" card. An account
//! that is not linked is its own person and is not listed. Read-only: a person unlinks
//! with `/unlink`.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use troupe_connectors::{Platform, UserId};

use super::AppState;
use super::error::ApiError;
use super::extract::AgentPath;

/// One linked account, with the latest name it was seen under.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkedAccount {
    platform: Platform,
    user_id: UserId,
    name: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkedPerson {
    id: String,
    accounts: Vec<LinkedAccount>,
}

#[derive(Debug, Serialize)]
pub struct PeopleList {
    people: Vec<LinkedPerson>,
}

pub async fn list(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
) -> Result<Json<PeopleList>, ApiError> {
    let mut people = Vec::new();
    for person in state.store.linked_people(&agent.id).await? {
        let mut accounts = Vec::new();
        for account in person.accounts {
            let name = state.store.account_name(&account).await?;
            accounts.push(LinkedAccount {
                platform: account.platform,
                user_id: account.user_id,
                name,
            });
        }
        people.push(LinkedPerson {
            id: person.id,
            accounts,
        });
    }
    Ok(Json(PeopleList { people }))
}
