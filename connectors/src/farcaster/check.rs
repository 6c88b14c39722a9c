//! Checking a Neynar API key before it is kept (issue 47): a user lookup of the bot's fid
//! (`GET /v2/farcaster/user/bulk`) at the API the connector would use (`NEYNAR_API_URL`),
//! and, when a signer is given, its state (`GET /v2/farcaster/signer`): only an approved
//! signer can post as the account.

use serde::Deserialize;

use super::config::{API_KEY, FID, SIGNER_UUID, api_url};
use crate::connector::{
    Account, AccountFacts, CheckError, Lookup, check_client, setting, unreachable,
};

#[derive(Deserialize)]
struct Users {
    #[serde(default)]
    users: Vec<User>,
}

#[derive(Deserialize)]
struct User {
    fid: u64,
    username: Option<String>,
    display_name: Option<String>,
}

#[derive(Deserialize)]
struct Signer {
    status: String,
    fid: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorRes {
    message: Option<String>,
}

/// The account `FARCASTER_FID` names, looked up with `FARCASTER_NEYNAR_API_KEY`, and the
/// state of `FARCASTER_NEYNAR_SIGNER_UUID` when it is set.
pub async fn check_account(lookup: Lookup<'_>) -> Result<Account, CheckError> {
    let key = setting(lookup, API_KEY)
        .ok_or_else(|| CheckError::Malformed("the Neynar API key is empty".into()))?;
    let fid = setting(lookup, FID)
        .and_then(|f| f.parse::<u64>().ok())
        .filter(|f| *f > 0)
        .ok_or_else(|| {
            CheckError::Malformed("the fid is the account's Farcaster id, a positive number".into())
        })?;
    let base = api_url(lookup).map_err(|e| CheckError::Malformed(e.to_string()))?;
    let origin = base.as_str().trim_end_matches('/').to_string();
    let users: Users = get(&key, &origin, &format!("v2/farcaster/user/bulk?fids={fid}")).await?;
    let user = users
        .users
        .into_iter()
        .find(|u| u.fid == fid)
        .ok_or_else(|| {
            CheckError::Refused(format!("Neynar knows no Farcaster account with fid {fid}"))
        })?;
    let signer = match setting(lookup, SIGNER_UUID) {
        None => None,
        Some(uuid) => {
            let path = format!("v2/farcaster/signer?signer_uuid={}", urlencode(&uuid));
            let signer: Signer = get(&key, &origin, &path).await?;
            if signer.fid.is_some_and(|f| f != fid) {
                return Err(CheckError::Refused(format!(
                    "the signer belongs to another account than fid {fid}"
                )));
            }
            Some(signer.status)
        }
    };
    Ok(Account {
        id: fid.to_string(),
        name: user
            .display_name
            .filter(|n| !n.trim().is_empty())
            .or_else(|| user.username.clone())
            .unwrap_or_else(|| format!("fid {fid}")),
        username: user.username,
        facts: AccountFacts::Farcaster { signer },
    })
}

/// Keeps a signer id to the characters a UUID has, so it cannot add query parameters.
fn urlencode(value: &str) -> String {
    value
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect()
}

async fn get<T: serde::de::DeserializeOwned>(
    key: &str,
    origin: &str,
    path: &str,
) -> Result<T, CheckError> {
    let response = check_client()?
        .get(format!("{origin}/{path}"))
        .header("x-api-key", key)
        .send()
        .await
        .map_err(|e| unreachable("Neynar", origin, &e))?;
    let status = response.status();
    if !status.is_success() {
        let message = response
            .json::<ErrorRes>()
            .await
            .ok()
            .and_then(|b| b.message)
            .unwrap_or_else(|| status.to_string());
        return Err(CheckError::Refused(format!("Neynar refused ({message})")));
    }
    response.json().await.map_err(|_| {
        CheckError::Unreachable(format!("Neynar at {origin} answered without its JSON"))
    })
}
