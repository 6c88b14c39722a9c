//! The Discord connector: one bot account, receiving over the gateway WebSocket (through
//! serenity) and sending over the REST API.
//!
//! It owns everything Discord-shaped: the settings (`DISCORD_API_TOKEN`,
//! `DISCORD_APPLICATION_ID`, `DISCORD_API_URL`) and the invite URL ([`config`]), Discord's
//! JSON ([`wire`]), turning messages into `Inbound` ([`normalize`]), the gateway session and
//! catch-up after downtime ([`gateway`]), edits and deletes of messages ([`edits`]), the REST calls ([`rest`]), splitting replies
//! around code blocks ([`split`]), per-channel pacing ([`pace`]) and delivery ([`send`]),
//! voice messages answering voice notes ([`voice`], their preview in [`waveform`]),
//! and the application (slash) commands ([`interactions`]). Several personas may share one
//! bot ([`build_shared`]): one gateway connection hands each message to all of them
//! ([`crate::chorus`], its Discord side in [`chorus`]), and each answers through the channel's webhook under its own name
//! ([`hooks`], as [`speaker`] says it may appear). serenity's types stay in here. Each DM, guild channel and thread is its own room, named
//! by its channel id. The token never reaches a log line or an error.

mod check;
mod chorus;
mod config;
mod edits;
mod files;
mod gateway;
mod hooks;
mod interactions;
mod normalize;
mod pace;
mod reactions;
mod rest;
mod send;
mod speaker;
mod split;
mod voice;
mod waveform;
mod wire;

/// The normalizer, for `crate::fuzzing` (the fuzz targets and their corpus replay) only.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    pub(crate) use super::normalize::{Place, parse, to_inbound};
    pub(crate) use super::wire::Snowflake;
}

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serenity::all::{ClientBuilder, GatewayError, HttpBuilder};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::chorus::SharedBot;
use crate::connector::{
    Built, Connector, ConnectorError, ConnectorSettings, ConnectorState, Delivery, InboundSink,
    Lookup, Receiving, Recent, Shard, pause,
};
use crate::model::{MessageId, Outbound, Platform, RoomRef, UserId};
use config::Settings;
use gateway::{Handler, Receiver};
use rest::Rest;
use wire::Snowflake;

pub use config::{API_TOKEN, API_URL, APPLICATION_ID};
pub use hooks::WebhookStore;
pub use rest::{Hook, WebhookToken};
pub use speaker::{NameProblem, avatar_ok, webhook_name};

/// The permission integer of the invite URL (see `docs/discord.md`).
pub fn invite_permissions() -> u64 {
    config::permission_integer()
}

pub use check::check_token;

/// The OAuth2 URL that adds the bot of `application_id` to a server: the one invite link,
/// logged at start and shown by the console (`GET /api/agents/{agent}/setup`).
pub fn invite_url(application_id: u64) -> String {
    config::invite_url(application_id)
}

/// Builds the Discord connector from the persona's settings.
pub fn build(lookup: Lookup<'_>, settings: &ConnectorSettings) -> Result<Built, ConnectorError> {
    let Some(parsed) = config::parse(lookup)? else {
        return Ok(Built::NotConfigured(format!(
            "set {API_TOKEN} (the bot token from the Developer Portal; see docs/discord.md)"
        )));
    };
    Ok(Built::Ready(Arc::new(DiscordConnector::new(
        parsed,
        settings.state.clone(),
        None,
    )?)))
}

/// Builds a bot that several personas share, each speaking through channel webhooks
/// (`settings.troupe.discord.speakAs: "webhook"`, docs/discord.md "A troupe on one bot").
/// `state` is the account's own (not one persona's); `hooks` keeps its webhooks. `None`
/// when no token is set.
pub fn build_shared(
    lookup: Lookup<'_>,
    state: Arc<dyn ConnectorState>,
    hooks: Arc<dyn WebhookStore>,
) -> Result<Option<SharedBot>, ConnectorError> {
    let Some(parsed) = config::parse(lookup)? else {
        return Ok(None);
    };
    let chorus = Arc::new(crate::chorus::Chorus::default());
    let account = parsed.account_name();
    let mut bot = DiscordConnector::new(parsed, state, None)?;
    bot.hooks = Some(Arc::new(hooks::Hooks::new(hooks)));
    bot.chorus = Some(chorus.clone());
    Ok(Some(SharedBot::new(account, Arc::new(bot), chorus)))
}

/// The bot account a persona's Discord settings name (`discord:<application id>`, else a
/// digest of the token), without building anything; `None` without a token.
pub fn account_of(lookup: Lookup<'_>) -> Option<String> {
    config::parse(lookup)
        .ok()
        .flatten()
        .map(|s| s.account_name())
}

/// Builds a connector that receives on one gateway shard only (several replicas split a
/// bot's guilds this way; see `docs/deploy.md`).
pub(crate) fn build_shard(
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
    shard: Shard,
) -> Result<Built, ConnectorError> {
    if shard.total == 0 || shard.id >= shard.total {
        return Err(ConnectorError::Fatal(format!(
            "Discord shard {} of {} does not exist",
            shard.id, shard.total
        )));
    }
    let Some(parsed) = config::parse(lookup)? else {
        return Ok(Built::NotConfigured(format!(
            "set {API_TOKEN} (the bot token from the Developer Portal; see docs/discord.md)"
        )));
    };
    Ok(Built::Ready(Arc::new(DiscordConnector::new(
        parsed,
        settings.state.clone(),
        Some(shard),
    )?)))
}

/// Waits between gateway start attempts that failed.
const RESTART_BACKOFF: [u64; 6] = [1, 2, 5, 10, 30, 60];

/// The wait before start attempt `attempt + 1`: [`RESTART_BACKOFF`], then its last step.
fn restart_wait(attempt: usize) -> Duration {
    Duration::from_secs(RESTART_BACKOFF[attempt.min(RESTART_BACKOFF.len() - 1)])
}

/// How one gateway session ended, when it was not for good.
enum SessionEnd {
    /// Shutdown: the shards were stopped.
    Stopped,
    /// The connection ended (logged): start another after a wait.
    Dropped,
}

/// One Discord bot, serving one persona.
pub struct DiscordConnector {
    settings: Settings,
    rest: Arc<Rest>,
    state: Arc<dyn ConnectorState>,
    /// The one gateway shard this connector receives on; `None` is serenity's `start()`,
    /// shard 0 of 1.
    shard: Option<Shard>,
    pacer: pace::Pacer,
    /// The bot's user id, once known (from `users/@me` or READY).
    me: watch::Sender<Option<Snowflake>>,
    /// One lock per channel, held while a reply is sent, so replies never interleave.
    channel_locks: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// Messages already sent of a reply, by outbound key, so a retry resumes after them.
    progress: Mutex<HashMap<String, Vec<MessageId>>>,
    /// Replies shown live and not yet delivered, by outbound key (`send::Shown`).
    live: Mutex<HashMap<String, send::Shown>>,
    /// Replies delivered lately, so a second `send` of the same key sends nothing.
    delivered: Mutex<Recent>,
    /// Slash commands received and not yet answered (their follow-up tokens).
    interactions: Arc<interactions::Interactions>,
    /// The channels' webhooks, when personas share this bot ([`build_shared`]).
    hooks: Option<Arc<hooks::Hooks>>,
    /// The personas sharing this bot, when they do.
    chorus: Option<Arc<crate::chorus::Chorus>>,
}

impl DiscordConnector {
    fn new(
        settings: Settings,
        state: Arc<dyn ConnectorState>,
        shard: Option<Shard>,
    ) -> Result<Self, ConnectorError> {
        Ok(Self {
            rest: Arc::new(Rest::new(settings.clone())?),
            settings,
            state,
            shard,
            pacer: pace::Pacer::default(),
            me: watch::Sender::new(None),
            channel_locks: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            delivered: Mutex::new(Recent::default()),
            interactions: Arc::default(),
            hooks: None,
            chorus: None,
        })
    }

    /// serenity's HTTP client: through `DISCORD_API_URL` when set. serenity's own rate
    /// limiter would bypass that origin, so it is off then; the connector paces itself.
    fn serenity_http(&self) -> serenity::http::Http {
        let builder = HttpBuilder::new(self.settings.token.expose());
        if self.settings.custom_url {
            builder
                .proxy(self.settings.origin())
                .ratelimiter_disabled(true)
                .build()
        } else {
            builder.build()
        }
    }

    /// Asks `users/@me` until it answers: the bot's id, and a clear error for a bad token.
    async fn identify(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Snowflake>, ConnectorError> {
        let mut attempt = 0usize;
        loop {
            match self.rest.me().await.map_err(ConnectorError::from) {
                Ok(user) => {
                    let id = Snowflake::parse(&user.id).ok_or_else(|| {
                        ConnectorError::Fatal("users/@me answered without a user id".into())
                    })?;
                    tracing::info!(bot_id = %id, username = %user.username, "Discord token accepted");
                    return Ok(Some(id));
                }
                Err(e @ (ConnectorError::Unauthorized(_) | ConnectorError::Fatal(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    let wait = match &e {
                        ConnectorError::RateLimited { retry_after } => *retry_after,
                        _ => restart_wait(attempt),
                    };
                    attempt += 1;
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot reach Discord yet");
                    if !pause(shutdown, wait).await {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

impl DiscordConnector {
    /// Keeps the bot's user id: for `self_id`, and in the state for the replicas that do
    /// not run this account's gateway (docs/rooms.md).
    async fn remember_me(&self, me: Snowflake) {
        self.me.send_replace(Some(me));
        if let Err(e) = self
            .state
            .put(crate::connector::SELF_ID_KEY, &me.to_string())
            .await
        {
            tracing::warn!(error = %e, "could not keep the bot's user id");
        }
    }

    /// With an application id: logs the invite URL and registers the slash commands.
    async fn announce(&self) {
        let Some(app) = self.settings.application_id else {
            return;
        };
        tracing::info!(
            invite = %config::invite_url(app),
            permissions = config::permission_integer(),
            "invite the Discord bot to a server with this URL"
        );
        // Best effort: without the slash commands, typed commands still work in DMs.
        match self.rest.register_commands(app).await {
            Ok(()) => tracing::info!("registered the Discord application commands"),
            Err(e) => {
                tracing::warn!(error = %e, "could not register the Discord application commands")
            }
        }
    }

    /// What handles the gateway's events, shared by every session of this run.
    fn receiver(&self, sink: Arc<dyn InboundSink>) -> Receiver {
        Receiver {
            sink,
            rest: self.rest.clone(),
            state: self.state.clone(),
            me: self.me.clone(),
            channels: tokio::sync::Mutex::new(None::<BTreeMap<u64, gateway::Seen>>),
            channels_key: gateway::channels_key(self.shard),
            interactions: self.interactions.clone(),
            steer_roles: self.settings.steer_roles.clone(),
            chorus: self.chorus.clone().zip(self.hooks.clone()),
        }
    }

    /// One gateway session on this connector's shard, until it ends or shutdown comes.
    /// An error when Discord refuses the token or the intents: starting again would not help.
    async fn session(
        &self,
        receiver: &Arc<Receiver>,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd, ConnectorError> {
        let client = ClientBuilder::new_with_http(self.serenity_http(), gateway::intents())
            .event_handler(Handler(receiver.clone()))
            .await;
        let mut client = client.map_err(|e| {
            ConnectorError::Fatal(
                self.settings
                    .token
                    .scrub(&format!("cannot set up the Discord client: {e}")),
            )
        })?;
        let shards = client.shard_manager.clone();
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => {
                shards.shutdown_all().await;
                return Ok(SessionEnd::Stopped);
            }
            r = async {
                match self.shard {
                    None => client.start().await,
                    Some(shard) => client.start_shard(shard.id, shard.total).await,
                }
            } => r,
        };
        self.session_ended(outcome)?;
        Ok(SessionEnd::Dropped)
    }

    /// What the end of a session says: an error for a refused token or refused intents;
    /// anything else is logged (without the token), and a new session will start.
    fn session_ended(&self, outcome: Result<(), serenity::Error>) -> Result<(), ConnectorError> {
        match outcome {
            Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication)) => {
                Err(ConnectorError::Unauthorized(
                    "the Discord gateway refused the token (check DISCORD_API_TOKEN)".into(),
                ))
            }
            Err(serenity::Error::Gateway(
                GatewayError::DisallowedGatewayIntents | GatewayError::InvalidGatewayIntents,
            )) => Err(ConnectorError::Fatal(
                "Discord refused the gateway intents: enable the Message Content intent \
                 for the bot in the Developer Portal (see docs/discord.md)"
                    .into(),
            )),
            Err(e) => {
                let text = self.settings.token.scrub(&e.to_string());
                tracing::warn!(error = %text, "the Discord gateway connection ended; starting again");
                Ok(())
            }
            Ok(()) => {
                tracing::warn!("the Discord gateway connection ended; starting again");
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Connector for DiscordConnector {
    fn platform(&self) -> Platform {
        Platform::Discord
    }

    async fn fetch_file(
        &self,
        attachment: &crate::model::Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, crate::files::FileError> {
        self.download(attachment, cap).await
    }

    fn self_id(&self) -> Option<UserId> {
        (*self.me.borrow()).map(|me| UserId::new(me.to_string()))
    }

    /// Learns the bot's id, announces the bot, then runs gateway sessions until shutdown,
    /// starting a new one after a wait whenever one ends.
    async fn run(
        &self,
        sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        let Some(me) = self.identify(&shutdown).await? else {
            return Ok(());
        };
        self.remember_me(me).await;
        if let Some(hooks) = &self.hooks {
            let _ = hooks.load().await;
        }
        self.announce().await;
        let receiver = Arc::new(self.receiver(sink));
        let mut attempt = 0usize;
        loop {
            if let SessionEnd::Stopped = self.session(&receiver, &shutdown).await? {
                return Ok(());
            }
            let wait = restart_wait(attempt);
            attempt += 1;
            if !pause(&shutdown, wait).await {
                return Ok(());
            }
        }
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        if let Some(answered) = interactions::answer(&self.rest, &self.interactions, reply).await {
            return answered;
        }
        if let Some(sent) = self.send_to_user(reply).await {
            return sent;
        }
        self.deliver_as(reply, None).await
    }

    /// A slash command carries the member's permissions (see [`interactions`]); in a DM
    /// everyone may. A typed command in a guild carries none: it is refused, and the slash
    /// command is the way to steer a guild channel.
    async fn may_steer(&self, message: &crate::model::Inbound) -> Result<bool, ConnectorError> {
        if interactions::is_interaction(message) {
            return Ok(self.interactions.may_steer(message).unwrap_or(false));
        }
        Ok(message.is_direct)
    }

    async fn typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        self.show_typing(room).await
    }

    /// A Discord voice message (see [`voice`]), before the reply's text.
    async fn send_voice(
        &self,
        note: &crate::connector::VoiceNote,
    ) -> Result<Option<MessageId>, ConnectorError> {
        self.deliver_voice(note).await.map(Some)
    }

    async fn delete_messages(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        self.delete_sent(room, ids).await
    }

    async fn add_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        let channel = send::channel_of(room)?;
        self.rest
            .own_reaction(channel, message, emoji, true)
            .await
            .map_err(ConnectorError::from)
    }

    async fn remove_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        let channel = send::channel_of(room)?;
        self.rest
            .own_reaction(channel, message, emoji, false)
            .await
            .map_err(ConnectorError::from)
    }

    fn shows_live(&self, _room: &RoomRef) -> bool {
        true
    }

    async fn show_live(&self, reply: &Outbound) -> Result<(), ConnectorError> {
        // A slash command's answer is a follow-up, sent whole.
        if self.interactions.target(reply).is_some() {
            return Ok(());
        }
        self.show_as(reply, None).await
    }

    async fn drop_live(&self, key: &str) {
        self.unshow(key).await;
    }

    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        self.rest
            .me()
            .await
            .map(|_| ())
            .map_err(ConnectorError::from)
    }
    /// One gateway session per shard per bot: replicas split the shards between them.
    fn receiving(&self) -> Receiving {
        Receiving::Sharded {
            name: self.settings.account_name(),
        }
    }
}
