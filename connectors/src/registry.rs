//! Building connectors from settings: one match arm per platform.
//!
//! The gateway calls [`build`] for each platform a persona runs on, with a `lookup` that
//! resolves setting names (`TELEGRAM_BOT_TOKEN`, `DISCORD_API_TOKEN`, …) through the
//! persona's secrets and then the process environment. A platform whose credentials are
//! missing yields `Ok(None)` and a warning, not a failure: the other platforms still run.
//!
//! [`receiving`] says how the replicas of a gateway may share one account's receiving:
//! everywhere (webhooks), one replica at a time (polling), or by Discord shard. The gateway
//! turns that into leader election; this module only names the account, without secrets.

use std::sync::Arc;

use crate::connector::{Connector, ConnectorError, ConnectorState};
use crate::model::Platform;

/// Resolves a setting by its elizaOS-compatible name.
pub type Lookup<'a> = &'a (dyn Fn(&str) -> Option<String> + Send + Sync);

/// What a connector needs to know about the persona it serves.
#[derive(Clone)]
pub struct ConnectorSettings {
    /// Where the connector keeps its position across restarts.
    pub state: Arc<dyn ConnectorState>,
    pub agent_id: String,
    /// The persona's name (also how it is addressed in text).
    pub persona_name: String,
    /// `allowedChannelIds` / `allowedGroupIds`: rooms the persona may talk in.
    pub allowed_rooms: Option<Vec<String>>,
    /// `shouldOnlyJoinInAllowedGroups`: leave groups that are not allowed.
    pub only_join_allowed: bool,
}

/// The outcome of [`build`].
pub enum Built {
    Ready(Arc<dyn Connector>),
    /// The platform's credentials are not configured; the string says what to set.
    NotConfigured(String),
}

/// Builds the connector for `platform`. An error means the settings are present but wrong
/// (a malformed URL, a bad mode): the operator must fix them.
pub fn build(
    platform: Platform,
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
) -> Result<Built, ConnectorError> {
    let _ = (lookup, settings);
    match platform {
        #[cfg(feature = "discord")]
        Platform::Discord => crate::discord::build(lookup, settings),
        #[cfg(feature = "farcaster")]
        Platform::Farcaster => crate::farcaster::build(lookup, settings),
        #[cfg(feature = "telegram")]
        Platform::Telegram => crate::telegram::build(lookup, settings),
        Platform::Web => Err(ConnectorError::Fatal(
            "the Web connector is built by the gateway".into(),
        )),
        // Reached only when a platform's feature is off.
        #[allow(unreachable_patterns)]
        other => Ok(Built::NotConfigured(format!(
            "the {other} connector is not available in this build yet"
        ))),
    }
}

/// How the replicas of one gateway may share the receiving of one platform account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receiving {
    /// On every replica at once: the platform pushes each event once to whichever replica
    /// the load balancer picks (webhooks), or there is nothing to receive.
    Everywhere,
    /// On one replica at a time: the platform serves one poller per account (Telegram's
    /// `getUpdates` answers a second one with 409 Conflict), and two pollers would each
    /// see every event. `name` identifies the account and holds no secret.
    OneAtATime { name: String },
    /// By gateway shard (Discord): each shard on one replica; `name` as above.
    Sharded { name: String },
}

/// How `platform`'s receiving may be shared, from the same settings [`build`] reads. The
/// name uses a public id where the platform has one (a Telegram bot id, a Farcaster FID,
/// a Discord application id) and otherwise a one-way digest of the token.
pub fn receiving(platform: Platform, lookup: Lookup<'_>) -> Receiving {
    let get = |key: &str| {
        lookup(key)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    match platform {
        Platform::Telegram => {
            if get("TELEGRAM_WEBHOOK_URL").is_some() {
                return Receiving::Everywhere;
            }
            let token = get("TELEGRAM_BOT_TOKEN").unwrap_or_default();
            // A BotFather token is `<bot id>:<secret>`; the id is the bot's public user id.
            let id = match token.split_once(':') {
                Some((id, _)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
                    id.to_string()
                }
                _ => format!("token-{:016x}", digest(&token)),
            };
            Receiving::OneAtATime {
                name: format!("telegram:{id}"),
            }
        }
        Platform::Farcaster => {
            if get("FARCASTER_NEYNAR_WEBHOOK_SECRET").is_some() {
                return Receiving::Everywhere;
            }
            Receiving::OneAtATime {
                name: format!("farcaster:{}", get("FARCASTER_FID").unwrap_or_default()),
            }
        }
        Platform::Discord => {
            let id = match get("DISCORD_APPLICATION_ID") {
                Some(app) if app.bytes().all(|b| b.is_ascii_digit()) => app,
                _ => {
                    let token = get("DISCORD_API_TOKEN").unwrap_or_default();
                    let bare = token.strip_prefix("Bot ").unwrap_or(&token).trim();
                    format!("token-{:016x}", digest(bare))
                }
            };
            Receiving::Sharded {
                name: format!("discord:{id}"),
            }
        }
        Platform::Web => Receiving::Everywhere,
    }
}

/// One Discord gateway shard: `id` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub id: u32,
    pub total: u32,
}

/// Builds the connector for one shard of a sharded platform (see [`Receiving::Sharded`]).
/// Only its `run` is meant to be used: replies go through the connector from [`build`].
pub fn build_shard(
    platform: Platform,
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
    shard: Shard,
) -> Result<Built, ConnectorError> {
    let _ = (lookup, settings, shard);
    match platform {
        #[cfg(feature = "discord")]
        Platform::Discord => crate::discord::build_shard(lookup, settings, shard),
        other => Err(ConnectorError::Fatal(format!(
            "the {other} connector has no shards"
        ))),
    }
}

/// A stable 64-bit FNV-1a digest: names an account by its token without revealing it.
fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn receiving_with(platform: Platform, pairs: &[(&str, &str)]) -> Receiving {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| map.get(k).cloned();
        receiving(platform, &lookup)
    }

    #[test]
    fn polling_is_one_at_a_time_and_webhooks_run_everywhere() {
        let token = "123456:AAbbCCdd";
        assert_eq!(
            receiving_with(Platform::Telegram, &[("TELEGRAM_BOT_TOKEN", token)]),
            Receiving::OneAtATime {
                name: "telegram:123456".into()
            }
        );
        assert_eq!(
            receiving_with(
                Platform::Telegram,
                &[
                    ("TELEGRAM_BOT_TOKEN", token),
                    ("TELEGRAM_WEBHOOK_URL", "https://bot.example.org/hook")
                ]
            ),
            Receiving::Everywhere
        );
        assert_eq!(
            receiving_with(Platform::Farcaster, &[("FARCASTER_FID", "42")]),
            Receiving::OneAtATime {
                name: "farcaster:42".into()
            }
        );
        assert_eq!(
            receiving_with(
                Platform::Farcaster,
                &[
                    ("FARCASTER_FID", "42"),
                    ("FARCASTER_NEYNAR_WEBHOOK_SECRET", "s")
                ]
            ),
            Receiving::Everywhere
        );
        assert_eq!(receiving_with(Platform::Web, &[]), Receiving::Everywhere);
    }

    #[test]
    fn names_never_hold_a_secret() {
        for (platform, pairs) in [
            (
                Platform::Telegram,
                vec![("TELEGRAM_BOT_TOKEN", "not-a-token-s3cret")],
            ),
            (
                Platform::Discord,
                vec![("DISCORD_API_TOKEN", "Bot s3cret.x.y")],
            ),
        ] {
            let name = match receiving_with(platform, &pairs) {
                Receiving::OneAtATime { name } | Receiving::Sharded { name } => name,
                Receiving::Everywhere => panic!("{platform} should not run everywhere"),
            };
            assert!(!name.contains("s3cret"), "{name}");
            assert!(name.starts_with(platform.as_str()), "{name}");
        }
        // With the prefix or without, one bot is one name.
        assert_eq!(
            receiving_with(Platform::Discord, &[("DISCORD_API_TOKEN", "Bot abc")]),
            receiving_with(Platform::Discord, &[("DISCORD_API_TOKEN", "abc")]),
        );
        assert_eq!(
            receiving_with(
                Platform::Discord,
                &[
                    ("DISCORD_API_TOKEN", "abc"),
                    ("DISCORD_APPLICATION_ID", "77")
                ]
            ),
            Receiving::Sharded {
                name: "discord:77".into()
            }
        );
    }
}
