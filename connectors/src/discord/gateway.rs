//! Receiving: serenity's gateway connection (identify, heartbeats, reconnect and resume)
//! with the intents GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT and the two
//! message-reaction intents, every MESSAGE_CREATE normalized and handed to the sink
//! (MESSAGE_UPDATE and MESSAGE_DELETE too: `edits`), every MESSAGE_REACTION_ADD/REMOVE
//! handed over as a reaction (`super::reactions`), and catch-up at each READY.
//!
//! Catch-up: the connector remembers, in its `ConnectorState`, the channels it has seen and
//! the last message id in each. At READY (a new session: after a start, or when a session
//! could not be resumed) it asks `GET /channels/{id}/messages?after=<last>` for each and
//! hands over the messages that mention the bot, reply to it or are DMs. The journal
//! refuses duplicates, so a message seen live and again here is answered once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serenity::all::{
    ChannelId, Context, EventHandler, GatewayIntents, GuildId, Message, MessageId,
    MessageUpdateEvent, Ready, ResumedEvent,
};
use tokio::sync::watch;

use super::normalize::{self, Place};
use super::rest::Rest;
use super::wire::{self, Snowflake};
use crate::connector::{Accepted, ConnectorState, InboundSink};

/// The state key of the channel memory.
const CHANNELS_KEY: &str = "discord.channels";

/// Where one shard keeps its channel memory. Without sharding it is the one key; a shard
/// has its own, because shards run in different replicas and each writes its whole map:
/// a shared key would lose the other shards' channels at every write.
pub(crate) fn channels_key(shard: Option<crate::connector::Shard>) -> String {
    match shard {
        Some(s) if s.total > 1 => format!("{CHANNELS_KEY}.shard-{}-of-{}", s.id, s.total),
        _ => CHANNELS_KEY.to_string(),
    }
}
/// Channels remembered for catch-up (the most recently active).
const MAX_CHANNELS: usize = 200;
/// Messages per catch-up page (Discord's maximum), and pages per channel.
const PAGE: u8 = 100;
const MAX_PAGES: usize = 10;
/// How long a message waits for the bot's identity (READY) before it is dropped.
const IDENTITY_WAIT: Duration = Duration::from_secs(30);

pub(crate) fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS
        | GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::GUILD_MESSAGE_REACTIONS
        | GatewayIntents::DIRECT_MESSAGE_REACTIONS
}

/// What the connector remembers of one channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Seen {
    /// The last message id seen in it.
    pub last: u64,
    pub dm: bool,
}

/// Everything the event handler shares with the connector.
pub(crate) struct Receiver {
    pub sink: Arc<dyn InboundSink>,
    pub rest: Arc<Rest>,
    pub state: Arc<dyn ConnectorState>,
    pub me: watch::Sender<Option<Snowflake>>,
    /// The channel memory, loaded from `state` on first use.
    pub channels: tokio::sync::Mutex<Option<BTreeMap<u64, Seen>>>,
    /// The state key of the channel memory (see [`channels_key`]).
    pub channels_key: String,
    /// Slash commands waiting for their answer (see `interactions`).
    pub interactions: Arc<super::interactions::Interactions>,
    /// `DISCORD_STEER_ROLES`: role names that may steer, besides Manage Messages.
    pub steer_roles: Vec<String>,
    /// The personas sharing this bot and its webhooks (`super::chorus`), when they do.
    pub chorus: Option<(Arc<crate::chorus::Chorus>, Arc<super::hooks::Hooks>)>,
}

impl Receiver {
    async fn me(&self) -> Option<Snowflake> {
        let mut rx = self.me.subscribe();
        match tokio::time::timeout(IDENTITY_WAIT, rx.wait_for(Option::is_some)).await {
            Ok(Ok(me)) => *me,
            _ => None,
        }
    }

    async fn load(&self) -> tokio::sync::MutexGuard<'_, Option<BTreeMap<u64, Seen>>> {
        let mut guard = self.channels.lock().await;
        if guard.is_none() {
            let stored = match self.state.get(&self.channels_key).await {
                Ok(Some(raw)) => {
                    serde_json::from_str::<BTreeMap<u64, Seen>>(&raw).unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "forgetting unreadable Discord channel memory");
                        BTreeMap::new()
                    })
                }
                Ok(None) => BTreeMap::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the Discord channel memory");
                    BTreeMap::new()
                }
            };
            *guard = Some(stored);
        }
        guard
    }

    /// Records `message` as seen in `channel`.
    async fn saw(&self, channel: u64, message: u64, dm: bool) {
        let mut guard = self.load().await;
        let Some(map) = guard.as_mut() else { return };
        let entry = map.entry(channel).or_default();
        if message <= entry.last && entry.dm == dm {
            return;
        }
        entry.last = entry.last.max(message);
        entry.dm = dm;
        if map.len() > MAX_CHANNELS {
            let mut by_last: Vec<(u64, u64)> = map.iter().map(|(c, s)| (s.last, *c)).collect();
            by_last.sort_unstable();
            for (_, c) in by_last.iter().take(map.len() - MAX_CHANNELS) {
                map.remove(c);
            }
        }
        match serde_json::to_string(&*map) {
            Ok(raw) => {
                if let Err(e) = self.state.put(&self.channels_key, &raw).await {
                    tracing::warn!(error = %e, "cannot save the Discord channel memory");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot encode the Discord channel memory"),
        }
    }

    /// Hands one message to the sink. `false` when the sink could not take it for now (the
    /// channel's mark stays, so catch-up fetches it again); a message refused for good counts
    /// as handled, or it would stop catch-up at the same message on every start.
    async fn deliver(&self, msg: &wire::Message, me: Snowflake, place: Place) -> bool {
        let Some(inbound) = normalize::to_inbound(msg, me, place) else {
            return true;
        };
        let (room, id) = (inbound.room.id.clone(), inbound.id.clone());
        let accepted = match &self.chorus {
            Some((chorus, hooks)) => {
                super::chorus::accept_message(chorus, msg, inbound, hooks, me).await
            }
            None => self.sink.accept(inbound).await,
        };
        match accepted {
            Ok(Accepted::New) => {
                tracing::debug!(channel = %room, message = %id, "Discord message journaled");
                true
            }
            Ok(Accepted::Duplicate) => true,
            Err(e) if !e.is_retryable() => {
                tracing::warn!(channel = %room, message = %id, error = %e,
                    "the gateway refused a Discord message; skipping it");
                true
            }
            Err(e) => {
                tracing::error!(channel = %room, message = %id, error = %e,
                    "could not journal a Discord message; catch-up will fetch it again");
                false
            }
        }
    }

    /// A MESSAGE_CREATE from the gateway.
    pub(crate) async fn live(&self, msg: wire::Message) {
        let Some(me) = self.me().await else {
            tracing::warn!("a Discord message arrived before READY; dropped");
            return;
        };
        let (Some(id), Some(channel)) =
            (Snowflake::parse(&msg.id), Snowflake::parse(&msg.channel_id))
        else {
            tracing::debug!("skipping a Discord message without usable ids");
            return;
        };
        if self.deliver(&msg, me, Place::FromPayload).await {
            self.saw(channel.0, id.0, msg.guild_id.is_none()).await;
        }
    }

    /// A MESSAGE_REACTION_ADD (`added`) or REMOVE. Not journaled: a reaction the sink
    /// cannot take now is lost, and logged.
    pub(crate) async fn reacted(&self, event: &serenity::all::Reaction, added: bool) {
        let me = *self.me.borrow();
        let Some(reaction) = super::reactions::to_reaction(event, added, me) else {
            return;
        };
        if let Err(e) = self.sink.react(reaction).await {
            tracing::warn!(error = %e, "could not take a Discord reaction; it is dropped");
        }
    }

    /// Fetches what was said while the connector was away, in every remembered channel.
    pub(crate) async fn catch_up(&self, me: Snowflake) {
        let remembered: Vec<(u64, Seen)> = match self.load().await.as_ref() {
            Some(map) => map.iter().map(|(c, s)| (*c, *s)).collect(),
            None => Vec::new(),
        };
        let (mut handed, mut channels) = (0usize, 0usize);
        for (channel, seen) in remembered {
            let mut after = seen.last;
            for _ in 0..MAX_PAGES {
                let page = match self.rest.messages_after(channel, after, PAGE).await {
                    Ok(page) => page,
                    Err(e) => {
                        let e = crate::connector::ConnectorError::from(e);
                        tracing::warn!(channel, error = %e, "Discord catch-up failed for a channel");
                        break;
                    }
                };
                let full = page.len() >= usize::from(PAGE);
                for value in page {
                    let Some(msg) = normalize::parse(value) else {
                        continue;
                    };
                    let Some(id) = Snowflake::parse(&msg.id) else {
                        continue;
                    };
                    let place = if seen.dm { Place::Direct } else { Place::Guild };
                    let addressed = normalize::to_inbound(&msg, me, place).is_some_and(|i| {
                        i.is_direct
                            || i.mentions_self
                            || i.reply_to.as_ref().is_some_and(|r| r.to_self)
                    });
                    if addressed {
                        if !self.deliver(&msg, me, place).await {
                            return;
                        }
                        handed += 1;
                    }
                    after = after.max(id.0);
                }
                if after > seen.last {
                    self.saw(channel, after, seen.dm).await;
                }
                if !full {
                    break;
                }
            }
            channels += 1;
        }
        if handed > 0 {
            tracing::info!(
                messages = handed,
                channels,
                "caught up on Discord messages sent while away"
            );
        }
    }
}

/// Edits and deletes (issue 32), normalized by `edits`.
impl Receiver {
    /// A MESSAGE_UPDATE from the gateway.
    pub(crate) async fn edited(&self, msg: wire::Message) {
        let Some(me) = self.me().await else {
            return;
        };
        if let Some(inbound) = super::edits::edit_to_inbound(&msg, me) {
            self.hand_revision(inbound).await;
        }
    }

    /// A MESSAGE_DELETE from the gateway.
    pub(crate) async fn deleted(&self, channel: u64, message: u64, direct: bool) {
        self.hand_revision(super::edits::delete_to_inbound(channel, message, direct))
            .await;
    }

    /// Hands an edit or a delete to the sink. One the gateway cannot take now is lost with
    /// a log line: catch-up fetches new messages, not changes.
    async fn hand_revision(&self, inbound: crate::model::Inbound) {
        let (room, id) = (inbound.room.id.clone(), inbound.id.clone());
        match self.sink.accept(inbound).await {
            Ok(Accepted::New) => {
                tracing::debug!(channel = %room, event = %id, "Discord edit or delete journaled");
            }
            Ok(Accepted::Duplicate) => {}
            Err(e) => {
                tracing::warn!(channel = %room, event = %id, error = %e,
                    "could not journal a Discord edit or delete; it is not followed");
            }
        }
    }
}

/// serenity's event handler: a thin shim onto [`Receiver`].
pub(crate) struct Handler(pub Arc<Receiver>);

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        let me = Snowflake(ready.user.id.get());
        tracing::info!(bot_id = %me, username = %ready.user.name, guilds = ready.guilds.len(),
            "connected to the Discord gateway");
        self.0.me.send_replace(Some(me));
        self.0.catch_up(me).await;
    }

    async fn interaction_create(&self, _ctx: Context, interaction: serenity::all::Interaction) {
        if let serenity::all::Interaction::Command(command) = interaction {
            let command = super::interactions::SlashCommand::of(&command);
            let r = &self.0;
            super::interactions::receive(
                &r.rest,
                &r.interactions,
                r.sink.as_ref(),
                &r.steer_roles,
                command,
            )
            .await;
        }
    }

    async fn reaction_add(&self, _ctx: Context, reaction: serenity::all::Reaction) {
        self.0.reacted(&reaction, true).await;
    }

    async fn reaction_remove(&self, _ctx: Context, reaction: serenity::all::Reaction) {
        self.0.reacted(&reaction, false).await;
    }

    async fn resume(&self, _ctx: Context, _: ResumedEvent) {
        tracing::info!("Discord gateway session resumed");
    }

    async fn message(&self, _ctx: Context, message: Message) {
        // serenity's typed message goes back to JSON so that one normalizer serves the
        // gateway and the REST catch-up alike.
        let parsed = serde_json::to_value(&message)
            .ok()
            .and_then(normalize::parse);
        match parsed {
            Some(msg) => self.0.live(msg).await,
            None => tracing::debug!("skipping an unreadable Discord message"),
        }
    }

    async fn message_update(
        &self,
        _ctx: Context,
        _old: Option<Message>,
        _new: Option<Message>,
        event: MessageUpdateEvent,
    ) {
        // Back to JSON, as for MESSAGE_CREATE: one normalizer for every message.
        let parsed = serde_json::to_value(&event)
            .ok()
            .and_then(super::edits::parse_update);
        if let Some(msg) = parsed {
            self.0.edited(msg).await;
        }
    }

    async fn message_delete(
        &self,
        _ctx: Context,
        channel: ChannelId,
        message: MessageId,
        guild: Option<GuildId>,
    ) {
        self.0
            .deleted(channel.get(), message.get(), guild.is_none())
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::Shard;

    #[test]
    fn one_shard_keeps_the_old_key_and_shards_get_their_own() {
        assert_eq!(channels_key(None), "discord.channels");
        assert_eq!(
            channels_key(Some(Shard { id: 0, total: 1 })),
            "discord.channels"
        );
        assert_eq!(
            channels_key(Some(Shard { id: 2, total: 4 })),
            "discord.channels.shard-2-of-4"
        );
    }
}
