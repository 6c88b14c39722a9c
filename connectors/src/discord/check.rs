//! Checking a bot token before it is kept (issue 47): `GET /users/@me` and
//! `GET /applications/@me` at the API the connector would use (`DISCORD_API_URL`). The
//! application gives the invite link's id and whether the Message Content intent is on.

use serde::Deserialize;

use super::config::{self, API_TOKEN};
use crate::connector::{
    Account, AccountFacts, CheckError, Lookup, check_client, setting, unreachable,
};

/// Application flags (Discord's `ApplicationFlags`): the Message Content intent, for
/// verified apps and for apps under 100 servers.
const GATEWAY_MESSAGE_CONTENT: u64 = 1 << 18;
const GATEWAY_MESSAGE_CONTENT_LIMITED: u64 = 1 << 19;

#[derive(Deserialize)]
struct User {
    id: String,
    username: String,
    global_name: Option<String>,
    #[serde(default)]
    bot: bool,
}

#[derive(Deserialize)]
struct Application {
    id: String,
    name: String,
    #[serde(default)]
    flags: u64,
}

#[derive(Deserialize)]
struct ErrorBody {
    message: Option<String>,
}

/// The bot `DISCORD_API_TOKEN` (through `lookup`) belongs to.
pub async fn check_token(lookup: Lookup<'_>) -> Result<Account, CheckError> {
    let raw = setting(lookup, API_TOKEN).unwrap_or_default();
    if raw
        .split_once(':')
        .is_some_and(|(id, _)| id.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(CheckError::Malformed(
            "this is not a Discord bot token (it looks like a Telegram one): the Developer \
             Portal's Bot page → Reset Token gives it"
                .into(),
        ));
    }
    let settings = match config::parse(lookup) {
        Ok(Some(settings)) => settings,
        Ok(None) | Err(_) => {
            return Err(CheckError::Malformed(
                "this is not a Discord bot token: the Developer Portal's Bot page → Reset \
                 Token gives it"
                    .into(),
            ));
        }
    };
    let origin = settings.origin();
    let user: User = get(&settings, &origin, "/users/@me").await?;
    if !user.bot {
        return Err(CheckError::Refused(
            "Discord says this token is a user's, not a bot's: use the Developer Portal's \
             Bot page → Reset Token"
                .into(),
        ));
    }
    let app: Application = get(&settings, &origin, "/applications/@me").await?;
    let application_id = app.id.parse::<u64>().map_err(|_| {
        CheckError::Unreachable(format!(
            "Discord at {origin} answered an application id that is not a number"
        ))
    })?;
    Ok(Account {
        id: user.id,
        name: user.global_name.unwrap_or_else(|| user.username.clone()),
        username: Some(user.username),
        facts: AccountFacts::Discord {
            application_id,
            application_name: app.name,
            message_content: app.flags
                & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
                != 0,
        },
    })
}

/// `GET path` with the bot's token; Discord's own message when it refuses.
async fn get<T: serde::de::DeserializeOwned>(
    settings: &config::Settings,
    origin: &str,
    path: &str,
) -> Result<T, CheckError> {
    let response = check_client()?
        .get(settings.endpoint(path))
        .header("Authorization", format!("Bot {}", settings.token.expose()))
        .send()
        .await
        .map_err(|e| unreachable("Discord", origin, &e))?;
    let status = response.status();
    if !status.is_success() {
        let message = response
            .json::<ErrorBody>()
            .await
            .ok()
            .and_then(|b| b.message)
            .unwrap_or_else(|| status.to_string());
        return Err(CheckError::Refused(format!(
            "Discord refused the token ({message}): it is wrong or was reset; the Developer \
             Portal's Bot page → Reset Token gives the current one"
        )));
    }
    response.json().await.map_err(|_| {
        CheckError::Unreachable(format!(
            "Discord at {origin} answered {path} without its JSON"
        ))
    })
}
