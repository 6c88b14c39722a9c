//! The Telegram connector: one bot account on the Bot API, through teloxide's `Bot`.
//!
//! It owns everything Telegram-specific: the settings (`TELEGRAM_BOT_TOKEN`,
//! `TELEGRAM_API_ROOT`, `TELEGRAM_WEBHOOK_URL`, `TELEGRAM_WEBHOOK_SECRET`), receiving updates
//! by long polling or webhook, turning them into `Inbound`, leaving groups the persona may
//! not be in, and sending replies split, threaded and paced. teloxide's types stay in here.
//!
//! Nothing is lost: a `getUpdates` offset moves past an update, and a webhook call is
//! answered 200, only after the sink has journaled it. The token never reaches a log line
//! or an error.
//!
//! Layout: [`config`] parses the settings, [`commands`] registers the command menu and checks
//! admins, [`normalize`] maps updates, [`receive`] polls and
//! answers webhooks, [`send`] delivers replies ([`edits`]: in earlier messages, for an edited
//! question), [`draft`] and [`stream_edit`] show them while they are written, [`voice`] sends
//! voice notes, [`pace`] keeps within the rate limits,
//! [`errors`] maps teloxide's errors. Several personas may share one bot ([`build_shared`]):
//! its one poller hands each update to all of them, and each speaks with its bold name in
//! front ([`chorus`], the name and the split in [`prefix`]).

mod check;
mod chorus;
mod commands;
mod config;
mod decode;
mod draft;
mod edits;
mod errors;
mod files;
mod normalize;
mod pace;
mod prefix;
mod reactions;
mod receive;
mod send;
mod stream_edit;
mod voice;

/// The normalizer, for `crate::fuzzing` (the fuzz targets and their corpus replay) only.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    pub(crate) use super::normalize::{BotIdentity, GroupPolicy, normalize};
}

use crate::sync::{Locked, RwLocked};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use teloxide::Bot;
use teloxide::prelude::Requester;
use tokio_util::sync::CancellationToken;

use crate::chorus::SharedBot;
use crate::connector::{
    Built, Connector, ConnectorError, ConnectorSettings, ConnectorState, Delivery, InboundSink,
    Lookup, Receiving, Recent, WebhookRequest, WebhookResponse,
};
use crate::model::{AgentId, MessageId, Outbound, Platform, RoomRef};
use config::{Mode, TelegramConfig};
use normalize::{BotIdentity, GroupPolicy};

pub use check::check_token;

/// Builds the Telegram connector from the persona's settings.
pub fn build(lookup: Lookup<'_>, settings: &ConnectorSettings) -> Result<Built, ConnectorError> {
    let Some(config) = TelegramConfig::from_lookup(lookup)? else {
        return Ok(Built::NotConfigured(
            "set TELEGRAM_BOT_TOKEN (the token BotFather gives; see docs/telegram.md)".into(),
        ));
    };
    Ok(Built::Ready(Arc::new(TelegramConnector::new(
        config, settings,
    ))))
}

/// Builds a bot that several personas share, each speaking with its name in front
/// (`settings.troupe.telegram.speakAs: "prefix"`, docs/telegram.md "A troupe on one bot").
/// `state` is the account's own (not one persona's). The bot leaves no group: each
/// persona's allowed groups still decide where it answers. `None` when no token is set.
pub fn build_shared(
    lookup: Lookup<'_>,
    state: Arc<dyn ConnectorState>,
) -> Result<Option<SharedBot>, ConnectorError> {
    let Some(config) = TelegramConfig::from_lookup(lookup)? else {
        return Ok(None);
    };
    let account = config.account_name();
    let settings = ConnectorSettings {
        state,
        agent_id: AgentId::new(account.clone()),
        persona_name: String::new(),
        allowed_rooms: None,
        only_join_allowed: false,
    };
    let chorus = Arc::new(crate::chorus::Chorus::default());
    let mut bot = TelegramConnector::new(config, &settings);
    bot.chorus = Some(chorus.clone());
    Ok(Some(SharedBot::new(account, Arc::new(bot), chorus)))
}

/// The bot account a persona's Telegram settings name (`telegram:<bot id>`, public unlike
/// the token), without building anything; `None` without a token or with a bad one.
pub fn account_of(lookup: Lookup<'_>) -> Option<String> {
    TelegramConfig::from_lookup(lookup)
        .ok()
        .flatten()
        .map(|c| c.account_name())
}

/// Builds one connector over a persona's several bots (elizaOS 2.x's
/// `settings.telegram.accounts`, issue 46): each account is a Telegram connector with its
/// own token, its own share of the connector state and its own allowed chats, and all of
/// them poll (the webhook route names a persona, not one of its bots). An account whose
/// token does not parse is an error; the persona's other settings are every account's, and
/// so is `TELEGRAM_API_ROOT` unless the account has its own.
pub fn build_accounts(
    specs: &[crate::accounts::AccountSpec],
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
) -> Result<Built, ConnectorError> {
    use crate::accounts::{Accounts, Member, TaggedState};
    let mut members = Vec::new();
    for spec in specs {
        let token = spec.token.clone();
        let api_root = spec.api_root.clone();
        let account_lookup = move |key: &str| match key {
            "TELEGRAM_BOT_TOKEN" => Some(token.clone()),
            "TELEGRAM_API_ROOT" if api_root.is_some() => api_root.clone(),
            "TELEGRAM_WEBHOOK_URL" | "TELEGRAM_WEBHOOK_SECRET" => None,
            other => lookup(other),
        };
        let Some(config) = TelegramConfig::from_lookup(&account_lookup)? else {
            continue;
        };
        let tag = spec.tag();
        let account = ConnectorSettings {
            state: Arc::new(TaggedState {
                tag: tag.clone(),
                inner: settings.state.clone(),
            }),
            allowed_rooms: spec
                .allowed_chats
                .clone()
                .or_else(|| settings.allowed_rooms.clone()),
            ..settings.clone()
        };
        members.push(Member {
            tag,
            connector: Arc::new(TelegramConnector::new(config, &account)),
        });
    }
    if members.is_empty() {
        return Ok(Built::NotConfigured(
            "no account in settings.telegram.accounts has a botToken (see docs/telegram.md)".into(),
        ));
    }
    Ok(Built::Ready(Arc::new(Accounts::new(
        Platform::Telegram,
        members,
    ))))
}

/// What `run` hands to webhook calls while it is running.
#[derive(Clone)]
struct Live {
    sink: Arc<dyn InboundSink>,
    me: BotIdentity,
}

/// One Telegram bot, serving one persona.
pub struct TelegramConnector {
    bot: Bot,
    config: TelegramConfig,
    policy: GroupPolicy,
    state: Arc<dyn ConnectorState>,
    pacer: pace::Pacer,
    /// Set while `run` is receiving; webhook calls need its sink.
    live: RwLock<Option<Live>>,
    /// One lock per chat, held while a reply is sent, so replies never interleave.
    chat_locks: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    /// Parts of a reply already sent, by outbound key, so a retry resumes after them.
    progress: Mutex<HashMap<String, Vec<MessageId>>>,
    /// Group replies shown live and not yet delivered, by outbound key (`stream_edit`).
    shown: Mutex<HashMap<String, stream_edit::Shown>>,
    /// Replies delivered lately, so a second `send` of the same key sends nothing.
    delivered: Mutex<Recent>,
    /// When `getUpdates` last answered, for `/readyz` (see [`Connector::quiet_for`]).
    clock: Mutex<receive::PollClock>,
    /// The update being handled, kept across restarts of `run` to bound panics per update.
    in_hand: Mutex<receive::InHand>,
    /// The personas sharing this bot, when they do ([`build_shared`]).
    chorus: Option<Arc<crate::chorus::Chorus>>,
}

impl TelegramConnector {
    fn new(config: TelegramConfig, settings: &ConnectorSettings) -> Self {
        let bot = Bot::new(config.token.as_str()).set_api_url(config.api_root.clone());
        Self {
            bot,
            policy: GroupPolicy {
                only_join_allowed: settings.only_join_allowed,
                allowed: settings.allowed_rooms.clone(),
            },
            state: settings.state.clone(),
            config,
            pacer: pace::Pacer::default(),
            live: RwLock::new(None),
            chat_locks: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            shown: Mutex::new(HashMap::new()),
            delivered: Mutex::new(Recent::default()),
            clock: Mutex::default(),
            in_hand: Mutex::default(),
            chorus: None,
        }
    }

    /// Shows the reply written so far, with the persona's `prefix` on a shared bot.
    async fn show_as(
        &self,
        reply: &Outbound,
        prefix: Option<&prefix::Prefix>,
    ) -> Result<(), ConnectorError> {
        if draft::is_private(&reply.room) {
            self.draft(reply, prefix).await
        } else {
            self.show_edits(reply, prefix).await
        }
    }

    fn mode_name(&self) -> &'static str {
        match self.config.mode {
            Mode::Polling => "long polling",
            Mode::Webhook { .. } => "webhook",
        }
    }

    /// `getMe`, as a typed error.
    async fn get_me(&self) -> Result<BotIdentity, ConnectorError> {
        let me = self
            .bot
            .get_me()
            .await
            .map_err(|e| errors::classify(&e, &self.config.token))?;
        Ok(BotIdentity {
            id: me.user.id.0,
            username: me.user.username.clone(),
        })
    }
}

#[async_trait]
impl Connector for TelegramConnector {
    fn platform(&self) -> Platform {
        Platform::Telegram
    }

    async fn fetch_file(
        &self,
        attachment: &crate::model::Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, crate::files::FileError> {
        self.download(attachment, cap).await
    }

    async fn run(
        &self,
        sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        let Some(me) = self.identify(&shutdown).await? else {
            return Ok(());
        };
        tracing::info!(
            bot_id = me.id,
            username = me.username.as_deref().unwrap_or("?"),
            mode = self.mode_name(),
            "connected to Telegram"
        );
        self.register_commands().await;
        let result = match &self.config.mode {
            Mode::Polling => self.poll(sink, me, &shutdown).await,
            Mode::Webhook { url, secret } => {
                self.serve_webhook(sink, me, url, secret, &shutdown).await
            }
        };
        *self.live.write_locked() = None;
        // Not polling any more: the gateway's supervisor reports the loop's end itself.
        *self.clock.locked() = receive::PollClock::default();
        result
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        self.deliver_as(reply, None).await
    }

    async fn typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        self.show_typing(room).await
    }

    async fn send_voice(
        &self,
        note: &crate::connector::VoiceNote,
    ) -> Result<Option<MessageId>, ConnectorError> {
        self.deliver_voice(note).await.map(Some)
    }

    async fn add_reaction(
        &self,
        _room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        self.own_reaction(message, Some(emoji)).await
    }

    /// Telegram has no "take back this one": the bot's list is set to none.
    async fn remove_reaction(
        &self,
        _room: &RoomRef,
        message: &MessageId,
        _emoji: &str,
    ) -> Result<(), ConnectorError> {
        self.own_reaction(message, None).await
    }

    /// Private chats see a draft (`draft`), groups one message edited (`stream_edit`).
    fn shows_live(&self, room: &RoomRef) -> bool {
        send::Target::of(room).is_ok()
    }

    async fn show_live(&self, reply: &Outbound) -> Result<(), ConnectorError> {
        self.show_as(reply, None).await
    }

    async fn drop_live(&self, key: &str) {
        self.unshow(key).await;
    }

    async fn webhook(&self, request: WebhookRequest) -> WebhookResponse {
        self.receive_webhook(request).await
    }

    async fn may_steer(&self, message: &crate::model::Inbound) -> Result<bool, ConnectorError> {
        self.is_admin(message).await
    }

    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        self.get_me().await.map(|_| ())
    }

    /// The bot's user id: the digits its token begins with, known before `getMe` (the
    /// gateway tells personas sharing this bot apart from those on bots of their own).
    fn self_id(&self) -> Option<crate::model::UserId> {
        Some(crate::model::UserId::new(self.config.token.bot_id()))
    }

    fn quiet_for(&self) -> Option<std::time::Duration> {
        self.clock.locked().quiet_for()
    }

    /// A webhook is pushed to one replica per update; `getUpdates` serves one poller per
    /// bot, named by the bot id the parsed token begins with (public, unlike the token).
    fn receiving(&self) -> Receiving {
        match self.config.mode {
            Mode::Webhook { .. } => Receiving::Everywhere,
            Mode::Polling => Receiving::OneAtATime {
                name: self.config.account_name(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
