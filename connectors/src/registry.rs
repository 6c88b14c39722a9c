//! Building connectors from settings: one match arm per platform.
//!
//! The gateway calls [`build`] for each platform a persona runs on, with a `lookup` that
//! resolves setting names (`TELEGRAM_BOT_TOKEN`, `DISCORD_API_TOKEN`, …) through the
//! persona's secrets and then the process environment. A platform whose credentials are
//! missing yields `Ok(None)` and a warning, not a failure: the other platforms still run.

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
