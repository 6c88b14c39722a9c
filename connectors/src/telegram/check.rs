//! Checking a bot token before it is kept (issue 47): `getMe` at the API root the
//! connector would use, answered with the bot's name and whether privacy mode hides group
//! messages from it. The token is in every Bot API URL, so no error here carries one.

use serde::Deserialize;

use super::config::TelegramConfig;
use crate::connector::{
    Account, AccountFacts, CheckError, Lookup, check_client, setting, unreachable,
};

#[derive(Deserialize)]
struct Answer {
    ok: bool,
    result: Option<Me>,
    description: Option<String>,
}

#[derive(Deserialize)]
struct Me {
    id: i64,
    first_name: String,
    username: Option<String>,
    #[serde(default)]
    can_join_groups: bool,
    #[serde(default)]
    can_read_all_group_messages: bool,
}

/// The bot `TELEGRAM_BOT_TOKEN` (through `lookup`) belongs to, asked at `TELEGRAM_API_ROOT`.
/// A value that is not a bot token is refused before anything is sent.
pub async fn check_token(lookup: Lookup<'_>) -> Result<Account, CheckError> {
    let raw = setting(lookup, "TELEGRAM_BOT_TOKEN").unwrap_or_default();
    let config = match TelegramConfig::from_lookup(lookup) {
        Ok(Some(config)) => config,
        Ok(None) | Err(_) => return Err(malformed(&raw)),
    };
    let root = config.api_root.as_str().trim_end_matches('/').to_string();
    let url = format!("{root}/bot{}/getMe", config.token.as_str());
    let response = check_client()?
        .get(url)
        .send()
        .await
        .map_err(|e| unreachable("Telegram", &root, &e))?;
    let status = response.status();
    let answer: Answer = response.json().await.map_err(|_| {
        CheckError::Unreachable(format!(
            "Telegram at {root} answered {status} without the Bot API's JSON"
        ))
    })?;
    match (answer.ok, answer.result) {
        (true, Some(me)) => Ok(Account {
            id: me.id.to_string(),
            name: me.first_name,
            username: me.username,
            facts: AccountFacts::Telegram {
                can_read_all_group_messages: me.can_read_all_group_messages,
                can_join_groups: me.can_join_groups,
            },
        }),
        _ => {
            let reason = answer
                .description
                .map(|d| config.token.scrub(&d))
                .unwrap_or_else(|| status.to_string());
            Err(CheckError::Refused(format!(
                "Telegram refused the token ({reason}): it is wrong or was revoked; \
                 BotFather's /mybots → API Token shows the current one"
            )))
        }
    }
}

/// Why `raw` is not a Telegram bot token, naming the platform it looks like it is for.
fn malformed(raw: &str) -> CheckError {
    let looks_like = if raw.split('.').count() == 3 && !raw.contains(':') {
        " (it looks like a Discord bot token)"
    } else {
        ""
    };
    CheckError::Malformed(format!(
        "this is not a Telegram bot token{looks_like}: BotFather's tokens are \
         `<bot id>:<secret>`, like 123456789:AAH…"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_discord_token_is_named_as_one() {
        let e = super::malformed("MTIz.NDU2.Nzg5").to_string();
        assert!(e.contains("Discord"), "{e}");
        assert!(!e.contains("MTIz"), "{e}");
    }
}
