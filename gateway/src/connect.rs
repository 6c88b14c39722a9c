//! Connecting a platform from the console (issue 47): where each of a persona's platform
//! credentials comes from (never the value: its last 4 characters), the next steps once a
//! token is checked, the handle the HTTP API asks the app with to (re)start a persona's
//! connectors, so a new token is used without a restart of the gateway, and the rule that
//! one bot account serves one persona, checked at start ([`claims_are_unique`]).
//!
//! The checks themselves are the connectors' (`troupe_connectors::{telegram, discord,
//! farcaster}::check_*`): they own their platform's JSON. The secrets are the secrets
//! file's (`crate::secrets_file`); this module decides nothing about where they are kept.

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use troupe_connectors::{Account, AccountFacts, AgentId, Platform};

use crate::persona::{Env, Loaded, Persona, SecretSource};

/// The keys a platform is connected with, the credential first.
pub fn keys(platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Discord => &["DISCORD_API_TOKEN", "DISCORD_APPLICATION_ID"],
        Platform::Telegram => &["TELEGRAM_BOT_TOKEN"],
        Platform::Farcaster => &[
            "FARCASTER_NEYNAR_API_KEY",
            "FARCASTER_FID",
            "FARCASTER_NEYNAR_SIGNER_UUID",
        ],
        Platform::Web => &[],
    }
}

/// Keys whose value is an id, not a secret: shown whole.
fn is_id(key: &str) -> bool {
    matches!(key, "DISCORD_APPLICATION_ID" | "FARCASTER_FID")
}

/// Where one key's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// `CHARACTER.<ID>.<KEY>` or `<KEY>` in the environment (or troupe.toml): it wins.
    Env,
    /// The secrets file the console writes.
    SecretsFile,
    /// The character file (`secrets`, `settings.secrets`, `settings`).
    CharacterFile,
}

/// One key of a platform, as the console shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyView {
    pub key: &'static str,
    pub origin: Origin,
    /// Where exactly, in words (`environment variable TELEGRAM_BOT_TOKEN`).
    pub from: String,
    /// The last 4 characters of a secret; an id whole.
    pub shown: String,
}

/// The keys of `platform` that are set for `persona`, with where each comes from.
pub fn key_views(persona: &Persona, platform: Platform, env: &Env) -> Vec<KeyView> {
    keys(platform)
        .iter()
        .filter_map(|key| {
            let (value, source) = persona.secret_with_source(key, env)?;
            let origin = match source {
                SecretSource::CharacterEnv(_) | SecretSource::Env => Origin::Env,
                SecretSource::SecretsFile => Origin::SecretsFile,
                _ => Origin::CharacterFile,
            };
            Some(KeyView {
                key,
                origin,
                from: source.describe(key),
                shown: if is_id(key) { value } else { last4(&value) },
            })
        })
        .collect()
}

/// `…abcd`: the last 4 characters, and only when the value is long enough that they
/// give nothing away (at least 12).
pub fn last4(value: &str) -> String {
    let chars: Vec<char> = value.trim().chars().collect();
    if chars.len() < 12 {
        return "…".into();
    }
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("…{tail}")
}

/// Whether the environment sets `key` for `persona`: then it wins, and the console may
/// neither set nor remove it.
pub fn set_in_env(persona: &Persona, key: &str, env: &Env) -> Option<String> {
    match persona.secret_with_source(key, env) {
        Some((_, source @ (SecretSource::CharacterEnv(_) | SecretSource::Env))) => {
            Some(source.describe(key))
        }
        _ => None,
    }
}

/// The account a checked token belongs to, and what to do next, for the console.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountView {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    pub next_steps: NextSteps,
}

/// What the operator does next on the platform's side.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextSteps {
    /// Discord: the invite link, with the permissions the connector needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite_url: Option<String>,
    /// Telegram: `https://t.me/<username>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_url: Option<String>,
    /// Telegram: whether privacy mode hides group messages that do not mention the bot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privacy_mode: Option<bool>,
    /// Farcaster: the signer's state (`approved`, `pending_approval`, …), if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// What to do, in order, in words.
    pub steps: Vec<String>,
}

impl AccountView {
    pub fn of(account: Account) -> AccountView {
        let next_steps = next_steps(&account);
        AccountView {
            id: account.id,
            name: account.name,
            username: account.username,
            next_steps,
        }
    }
}

fn next_steps(account: &Account) -> NextSteps {
    let mut next = NextSteps::default();
    match &account.facts {
        AccountFacts::Telegram {
            can_read_all_group_messages,
            can_join_groups,
        } => {
            let handle = account.username.clone().unwrap_or_default();
            next.bot_url = Some(format!("https://t.me/{handle}"));
            next.privacy_mode = Some(!can_read_all_group_messages);
            next.steps.push(format!(
                "Open https://t.me/{handle} and send it a message: it answers now."
            ));
            if !can_join_groups {
                next.steps.push(
                    "Groups: BotFather → /mybots → Bot Settings → Allow Groups? is off; turn \
                     it on to add the bot to a group."
                        .into(),
                );
            }
            next.steps.push(if *can_read_all_group_messages {
                "Privacy mode is off: in groups the bot sees every message.".into()
            } else {
                "Privacy mode is on: in groups the bot sees only commands, replies to it and \
                 mentions. To let it follow every message, BotFather → /mybots → Bot Settings \
                 → Group Privacy → Turn off, then remove and re-add the bot to each group."
                    .into()
            });
        }
        AccountFacts::Discord {
            application_id,
            message_content,
            ..
        } => {
            next.invite_url = Some(troupe_connectors::discord::invite_url(*application_id));
            next.steps.push(
                "Invite the bot to a server with the invite link (its permissions include \
                 Manage Webhooks, for personas that share a bot)."
                    .into(),
            );
            if !message_content {
                next.steps.push(
                    "Turn on the Message Content intent: Developer Portal → Bot → Privileged \
                     Gateway Intents; without it the bot sees only mentions and DMs."
                        .into(),
                );
            }
        }
        AccountFacts::Farcaster { signer } => {
            next.signer = signer.clone();
            next.steps.push(match signer.as_deref() {
                Some("approved") => "The signer is approved: the persona can cast and reply.".into(),
                Some("pending_approval") => "The signer waits for approval: open its approval URL \
                     (Neynar's dashboard) in Warpcast as the account; until then replies are not sent."
                    .into(),
                Some(other) => format!(
                    "The signer is {other}: create a new managed signer in Neynar's dashboard; \
                     until then replies are not sent."
                ),
                None => "No signer given: the persona reads mentions but cannot cast \
                         (FARCASTER_DRY_RUN), until a managed signer's UUID is added."
                    .into(),
            });
        }
    }
    next
}

/// One bot account serves one persona: two personas with the same platform token (or
/// Telegram account token, or a token the console stored) would both answer every message.
/// Refuses to start, naming both files, unless they opted in to share the bot.
pub fn claims_are_unique(loaded: &[Loaded], env: &Env) -> anyhow::Result<()> {
    let personas: Vec<&Persona> = loaded.iter().map(|l| &l.persona).collect();
    crate::persona::refuse_shared_bots(&personas, env).map_err(anyhow::Error::msg)
}

/// Asks the app to (re)start one persona's platform connectors with the secrets as they
/// are now. A cheap-to-clone handle.
#[derive(Clone)]
pub struct Reconnect {
    tx: mpsc::Sender<(AgentId, oneshot::Sender<()>)>,
}

/// The app's end of [`Reconnect`].
pub type Requests = mpsc::Receiver<(AgentId, oneshot::Sender<()>)>;

impl Reconnect {
    pub fn channel() -> (Reconnect, Requests) {
        let (tx, rx) = mpsc::channel(16);
        (Reconnect { tx }, rx)
    }

    /// Restarts `agent`'s connectors, and waits until they are started (or stopped);
    /// `false` when the app is not running them.
    pub async fn restart(&self, agent: &AgentId) -> bool {
        let (done, started) = oneshot::channel();
        if self.tx.send((agent.clone(), done)).await.is_err() {
            return false;
        }
        started.await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_four_of_a_long_value_show() {
        assert_eq!(last4("123456789:AAH-secret-abcd"), "…abcd");
        assert_eq!(last4("short:abcd"), "…");
    }

    #[test]
    fn telegram_privacy_mode_is_said() {
        let account = Account {
            id: "1".into(),
            name: "Tess".into(),
            username: Some("tess_bot".into()),
            facts: AccountFacts::Telegram {
                can_read_all_group_messages: false,
                can_join_groups: true,
            },
        };
        let view = AccountView::of(account);
        assert_eq!(view.next_steps.privacy_mode, Some(true));
        assert_eq!(
            view.next_steps.bot_url.as_deref(),
            Some("https://t.me/tess_bot")
        );
        assert!(
            view.next_steps
                .steps
                .iter()
                .any(|s| s.contains("Group Privacy"))
        );
    }

    #[test]
    fn discord_gets_the_one_invite_link() {
        let account = Account {
            id: "9".into(),
            name: "Ada".into(),
            username: Some("ada".into()),
            facts: AccountFacts::Discord {
                application_id: 42,
                application_name: "Ada".into(),
                message_content: false,
            },
        };
        let view = AccountView::of(account);
        assert_eq!(
            view.next_steps.invite_url,
            Some(troupe_connectors::discord::invite_url(42))
        );
        assert!(
            view.next_steps
                .steps
                .iter()
                .any(|s| s.contains("Message Content"))
        );
    }
}
