//! Several personas on one bot (issue 46, docs/discord.md "A troupe on one bot"): one
//! gateway connection, each message handed to every persona sharing the bot, and each
//! persona answering through the channel's webhook as itself ([`super::hooks`]).
//!
//! What a persona is told about a message is its own: a reply to its webhook message (or
//! to its prefixed message, where webhooks are refused) is `reply_to.to_self` for it only,
//! and its name in the text counts as a mention of it. A mention of the bot itself is a
//! mention of every persona on it; the gateway's arbiter then picks one (docs/rooms.md).
//! Messages from our own webhooks, in any channel or guild, are never handed over, so the
//! personas never answer each other in a loop. This module owns the list of voices and the
//! fan-out; it never decides who answers.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::DiscordConnector;
use super::hooks::{Hooks, said_by};
use super::speaker::Voice;
use super::wire::{self, Snowflake};
use crate::connector::{
    Accepted, Connector, ConnectorError, ContextLine, Delivery, InboundSink, SinkError, VoiceNote,
};
use crate::model::{
    AgentId, Attachment, Inbound, MessageId, Outbound, Platform, Reaction, RoomRef, UserId,
};
use crate::sync::RwLocked;

/// One persona on the shared bot, and where its messages go.
#[derive(Clone)]
struct Member {
    voice: Voice,
    sink: Arc<dyn InboundSink>,
}

/// The personas sharing one bot.
#[derive(Default)]
pub(crate) struct Chorus {
    members: RwLock<Vec<Member>>,
}

impl Chorus {
    fn members(&self) -> Vec<Member> {
        self.members.read_locked().clone()
    }

    /// Hands `inbound` (normalized from `msg`) to every persona, each told what concerns
    /// it. A message from one of our webhooks is dropped here.
    pub(crate) async fn accept_message(
        &self,
        msg: &wire::Message,
        inbound: Inbound,
        hooks: &Hooks,
        me: Snowflake,
    ) -> Result<Accepted, SinkError> {
        if from_our_hook(msg, hooks) {
            return Ok(Accepted::Duplicate);
        }
        let replied = msg.referenced_message.as_deref();
        let mut outcome = Ok(Accepted::Duplicate);
        for member in self.members() {
            let mut own = inbound.clone();
            let to_it =
                replied.is_some_and(|r| said_by(r, &member.voice, hooks, Some(me)).is_some());
            if let Some(reply) = own.reply_to.as_mut() {
                reply.to_self = to_it;
            }
            own.mentions_self |= names(&own.text, &member.voice.name);
            outcome = merge(outcome, member.sink.accept(own).await);
        }
        outcome
    }
}

/// Whether `msg` was posted by one of our webhooks (in this channel or any other).
pub(crate) fn from_our_hook(msg: &wire::Message, hooks: &Hooks) -> bool {
    msg.webhook_id
        .as_deref()
        .and_then(Snowflake::parse)
        .is_some_and(|w| hooks.is_ours(w.0))
}

/// Whether `name` is in `text` as a word, in any case.
fn names(text: &str, name: &str) -> bool {
    let name = name.trim().to_lowercase();
    if name.is_empty() {
        return false;
    }
    let text = text.to_lowercase();
    text.match_indices(&name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// One outcome for the personas' several: an error that may pass wins (the message is
/// fetched again), then any new entry.
fn merge(
    so_far: Result<Accepted, SinkError>,
    next: Result<Accepted, SinkError>,
) -> Result<Accepted, SinkError> {
    match (so_far, next) {
        (Err(e), _) if e.is_retryable() => Err(e),
        (_, Err(e)) if e.is_retryable() => Err(e),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(Accepted::New), _) | (_, Ok(Accepted::New)) => Ok(Accepted::New),
        _ => Ok(Accepted::Duplicate),
    }
}

/// The chorus as the sink of the shared bot's other events: a slash command or an edit
/// goes to every persona, as does a reaction (each finds whether it is on its reply).
#[async_trait]
impl InboundSink for Chorus {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        let mut outcome = Ok(Accepted::Duplicate);
        for member in self.members() {
            outcome = merge(outcome, member.sink.accept(message.clone()).await);
        }
        outcome
    }

    async fn react(&self, reaction: Reaction) -> Result<(), SinkError> {
        for member in self.members() {
            member.sink.react(reaction.clone()).await?;
        }
        Ok(())
    }
}

/// One bot account shared by several personas (`settings.troupe.discord.speakAs:
/// "webhook"`): its connection runs once ([`SharedBot::receiver`]), and each persona sends
/// through its own [`VoiceConnector`].
#[derive(Clone)]
pub struct SharedBot {
    bot: Arc<DiscordConnector>,
    chorus: Arc<Chorus>,
}

impl SharedBot {
    pub(crate) fn new(bot: Arc<DiscordConnector>, chorus: Arc<Chorus>) -> Self {
        Self { bot, chorus }
    }

    /// The bot account, named without its secret (as leader election names it).
    pub fn account(&self) -> String {
        self.bot.settings.account_name()
    }

    /// What runs the one gateway connection (under leader election, by [`Self::account`]).
    pub fn receiver(&self) -> Arc<dyn Connector> {
        self.bot.clone()
    }

    /// Adds (or replaces) a persona; its messages go to `sink`. The connector it answers
    /// through is returned.
    pub fn join(&self, voice: Voice, sink: Arc<dyn InboundSink>) -> Arc<dyn Connector> {
        let mut members = self.chorus.members.write_locked();
        members.retain(|m| m.voice.agent != voice.agent);
        members.push(Member {
            voice: voice.clone(),
            sink,
        });
        members.sort_by(|a, b| a.voice.agent.cmp(&b.voice.agent));
        Arc::new(VoiceConnector {
            bot: self.bot.clone(),
            voice,
        })
    }

    /// Removes a persona: how many are left, `None` when it was not on this bot.
    pub fn leave(&self, agent: &AgentId) -> Option<usize> {
        let mut members = self.chorus.members.write_locked();
        let before = members.len();
        members.retain(|m| &m.voice.agent != agent);
        (members.len() < before).then_some(members.len())
    }

    /// The sink the receiver is run with.
    pub fn sink(&self) -> Arc<dyn InboundSink> {
        self.chorus.clone()
    }
}

/// One persona's side of a shared bot: it sends as the persona, through webhooks; it
/// receives nothing itself (the shared bot's one connection does).
pub struct VoiceConnector {
    bot: Arc<DiscordConnector>,
    voice: Voice,
}

#[async_trait]
impl Connector for VoiceConnector {
    fn platform(&self) -> Platform {
        Platform::Discord
    }

    async fn run(
        &self,
        _sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        if let Some(answered) =
            super::interactions::answer(&self.bot.rest, &self.bot.interactions, reply).await
        {
            return answered;
        }
        if let Some(sent) = self.bot.send_to_user(reply).await {
            return sent;
        }
        self.bot.deliver_as(reply, Some(&self.voice)).await
    }

    fn shows_live(&self, room: &RoomRef) -> bool {
        self.bot.shows_live(room)
    }

    async fn show_live(&self, reply: &Outbound) -> Result<(), ConnectorError> {
        if self.bot.interactions.target(reply).is_some() {
            return Ok(());
        }
        self.bot.show_as(reply, Some(&self.voice)).await
    }

    async fn drop_live(&self, key: &str) {
        self.bot.drop_live(key).await;
    }

    async fn send_voice(&self, note: &VoiceNote) -> Result<Option<MessageId>, ConnectorError> {
        // A voice message cannot go through a webhook under a persona's name: the text
        // answer, which can, is sent alone.
        let _ = note;
        Ok(None)
    }

    async fn delete_messages(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        self.bot.delete_as(room, ids).await
    }

    async fn add_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        self.bot.add_reaction(room, message, emoji).await
    }

    async fn remove_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        self.bot.remove_reaction(room, message, emoji).await
    }

    async fn typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        self.bot.typing(room).await
    }

    async fn thread_context(&self, message: &Inbound) -> Vec<ContextLine> {
        self.bot.thread_context(message).await
    }

    async fn fetch_file(
        &self,
        attachment: &Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, crate::files::FileError> {
        self.bot.fetch_file(attachment, cap).await
    }

    async fn may_steer(&self, message: &Inbound) -> Result<bool, ConnectorError> {
        self.bot.may_steer(message).await
    }

    fn self_id(&self) -> Option<UserId> {
        self.bot.self_id()
    }

    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        self.bot.healthcheck().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_counts_as_a_word_in_any_case() {
        assert!(names("what do you think, bob?", "Bob"));
        assert!(names("BOB!", "Bob"));
        assert!(!names("bobbin lace", "Bob"));
        assert!(!names("anything", ""));
    }

    #[test]
    fn a_passing_error_wins_then_a_new_entry() {
        let busy = || Err(SinkError::Unavailable("busy".into()));
        assert!(matches!(
            merge(Ok(Accepted::New), busy()),
            Err(SinkError::Unavailable(_))
        ));
        assert!(matches!(
            merge(Ok(Accepted::Duplicate), Ok(Accepted::New)),
            Ok(Accepted::New)
        ));
        assert!(matches!(
            merge(Ok(Accepted::Duplicate), Ok(Accepted::Duplicate)),
            Ok(Accepted::Duplicate)
        ));
    }
}
