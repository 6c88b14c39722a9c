//! Building connectors from settings: one match arm per platform, and nothing else.
//!
//! The gateway calls [`build`] for each platform a persona runs on, with a `lookup` that
//! resolves setting names (`TELEGRAM_BOT_TOKEN`, `DISCORD_API_TOKEN`, …) through the
//! persona's secrets and then the process environment. A platform whose credentials are
//! missing yields `Ok(Built::NotConfigured)` and a warning, not a failure: the other
//! platforms still run.
//!
//! How replicas share an account's receiving is each connector's own answer
//! (`Connector::receiving`, from the settings it parsed), not a second reading of the
//! settings here. This module imports the platform modules; none of them imports it.

use crate::connector::{Built, ConnectorError, ConnectorSettings, Lookup, Shard};
use crate::model::Platform;

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

/// Builds one connector over several accounts of `platform` for one persona (elizaOS 2.x's
/// `settings.telegram.accounts`; see [`crate::accounts`]). Telegram only.
pub fn build_accounts(
    platform: Platform,
    specs: &[crate::accounts::AccountSpec],
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
) -> Result<Built, ConnectorError> {
    let _ = (specs, lookup, settings);
    match platform {
        #[cfg(feature = "telegram")]
        Platform::Telegram => crate::telegram::build_accounts(specs, lookup, settings),
        other => Err(ConnectorError::Fatal(format!(
            "the {other} connector has no accounts"
        ))),
    }
}

/// Builds the connector for one shard of a sharded platform (see
/// `Receiving::Sharded`). Only its `run` is meant to be used: replies go through the
/// connector from [`build`].
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

// The tests build one connector of each platform.
#[cfg(all(feature = "discord", feature = "farcaster", feature = "telegram"))]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::{Connector, Delivery, InboundSink, MemoryState, Receiving};
    use crate::model::Outbound;
    use std::collections::HashMap;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// How a connector built from `pairs` says its receiving may be shared.
    fn receiving_with(platform: Platform, pairs: &[(&str, &str)]) -> Receiving {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| map.get(k).cloned();
        let settings = ConnectorSettings {
            state: Arc::new(MemoryState::default()),
            agent_id: "tess".into(),
            persona_name: "Tess".into(),
            allowed_rooms: None,
            only_join_allowed: false,
        };
        match build(platform, &lookup, &settings) {
            Ok(Built::Ready(connector)) => connector.receiving(),
            Ok(Built::NotConfigured(why)) => panic!("{platform} is not configured: {why}"),
            Err(e) => panic!("{platform} did not build: {e}"),
        }
    }

    /// The gateway's Web connector is built outside this crate; it keeps the default.
    struct NothingToReceive;

    #[async_trait::async_trait]
    impl Connector for NothingToReceive {
        fn platform(&self) -> Platform {
            Platform::Web
        }
        async fn run(
            &self,
            _sink: Arc<dyn InboundSink>,
            _shutdown: CancellationToken,
        ) -> Result<(), ConnectorError> {
            Ok(())
        }
        async fn send(&self, _reply: &Outbound) -> Result<Delivery, ConnectorError> {
            Ok(Delivery::default())
        }
    }

    const FARCASTER: [(&str, &str); 3] = [
        ("FARCASTER_FID", "42"),
        ("FARCASTER_NEYNAR_API_KEY", "k"),
        ("FARCASTER_DRY_RUN", "true"),
    ];

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
            receiving_with(Platform::Farcaster, &FARCASTER),
            Receiving::OneAtATime {
                name: "farcaster:42".into()
            }
        );
        let mut webhook = FARCASTER.to_vec();
        webhook.push(("FARCASTER_NEYNAR_WEBHOOK_SECRET", "s"));
        assert_eq!(
            receiving_with(Platform::Farcaster, &webhook),
            Receiving::Everywhere
        );
        assert_eq!(NothingToReceive.receiving(), Receiving::Everywhere);
    }

    #[test]
    fn names_never_hold_a_secret() {
        // A Telegram token that does not parse builds no connector at all now (see
        // telegram::config), so the secret half of a well-formed one stands in.
        for (platform, pairs) in [
            (
                Platform::Telegram,
                vec![("TELEGRAM_BOT_TOKEN", "123:s3cret")],
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
