//! Several personas on one bot account (issue 46; docs/discord.md "A troupe on one bot",
//! docs/telegram.md "A troupe on one bot"): the bot's one connection hands each message to
//! every persona sharing it, and each persona answers through its own [`VoiceConnector`],
//! as itself (a Discord webhook under its name, or the bot with its name in front).
//!
//! What a persona is told about a message is its own: a reply to one of its messages is
//! `reply_to.to_self` for it only (the platform says whose a message is), and its name in
//! the text counts as a mention of it. A mention of the bot itself, or a direct message,
//! is for every persona on it; the gateway's arbiter then picks one (docs/rooms.md). The
//! platform modules keep the bot's own messages out, so the personas never answer each
//! other in a loop. This module owns the list of voices, the fan-out and what a persona's
//! connector passes on to the bot; it never decides who answers, and knows no platform.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::connector::{
    Accepted, Connector, ConnectorError, ContextLine, Delivery, InboundSink, SinkError, VoiceNote,
    WebhookRequest, WebhookResponse,
};
use crate::model::{
    AgentId, Attachment, Inbound, MessageId, Outbound, Platform, Reaction, RoomRef, UserId,
};
use crate::sync::RwLocked;

/// A persona as it speaks on a shared bot: its agent, the name on its messages and its
/// avatar URL (Discord's webhooks show it; Telegram cannot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voice {
    pub agent: AgentId,
    pub name: String,
    pub avatar: Option<String>,
}

impl Voice {
    /// A voice for `name` (trimmed) and `avatar`, as the persona's file gives them; each
    /// platform makes them what it takes ([`Voiced::cast`]).
    pub fn new(agent: AgentId, name: &str, avatar: Option<&str>) -> Self {
        Self {
            agent,
            name: name.trim().to_string(),
            avatar: avatar.map(str::to_string),
        }
    }
}

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

    /// Hands `inbound` to every persona, each told what concerns it: a reply is to it when
    /// `said` says the replied-to message is its own, and its name in the text is a
    /// mention of it.
    pub(crate) async fn fan_out(
        &self,
        inbound: Inbound,
        said: impl Fn(&Voice) -> bool,
    ) -> Result<Accepted, SinkError> {
        let mut outcome = Ok(Accepted::Duplicate);
        for member in self.members() {
            let mut own = inbound.clone();
            if let Some(reply) = own.reply_to.as_mut() {
                reply.to_self = said(&member.voice);
            }
            own.mentions_self |= names(&own.text, &member.voice.name);
            outcome = merge(outcome, member.sink.accept(own).await);
        }
        outcome
    }
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

/// The chorus as the sink of the shared bot's other events: a command or an edit goes to
/// every persona, as does a reaction (each finds whether it is on its reply).
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

/// A platform's bot as several personas speak through it: what differs from the bot
/// speaking for itself. Everything else a persona's connector does is the bot's own.
#[async_trait]
pub(crate) trait Voiced: Connector {
    /// The voice as this platform shows it (Discord: a webhook name it takes).
    fn cast(&self, voice: Voice) -> Voice {
        voice
    }

    /// Delivers `reply` as `voice`.
    async fn send_voiced(
        &self,
        reply: &Outbound,
        voice: &Voice,
    ) -> Result<Delivery, ConnectorError>;

    /// Shows `reply` written so far as `voice` (`Connector::show_live`).
    async fn show_voiced(&self, reply: &Outbound, voice: &Voice) -> Result<(), ConnectorError>;

    /// Deletes messages `voice` sent (`Connector::delete_messages`).
    async fn delete_voiced(&self, room: &RoomRef, ids: &[MessageId]) -> Result<(), ConnectorError> {
        self.delete_messages(room, ids).await
    }
}

/// How a persona joining the bot gets its voice and its connector.
type Joiner = dyn Fn(Voice) -> (Voice, Arc<dyn Connector>) + Send + Sync;

/// One bot account shared by several personas (`settings.troupe.discord.speakAs:
/// "webhook"`, `settings.troupe.telegram.speakAs: "prefix"`): its connection runs once
/// ([`SharedBot::receiver`]), and each persona sends through its own [`VoiceConnector`].
#[derive(Clone)]
pub struct SharedBot {
    account: String,
    receiver: Arc<dyn Connector>,
    chorus: Arc<Chorus>,
    joiner: Arc<Joiner>,
}

impl SharedBot {
    /// The shared `bot` of `account`, whose receiving hands messages to `chorus`.
    pub(crate) fn new<B: Voiced + 'static>(
        account: String,
        bot: Arc<B>,
        chorus: Arc<Chorus>,
    ) -> Self {
        let receiver: Arc<dyn Connector> = bot.clone();
        let joiner = move |voice: Voice| {
            let voice = bot.cast(voice);
            let speaker: Arc<dyn Connector> = Arc::new(VoiceConnector {
                bot: bot.clone(),
                voice: voice.clone(),
            });
            (voice, speaker)
        };
        Self {
            account,
            receiver,
            chorus,
            joiner: Arc::new(joiner),
        }
    }

    /// The bot account, named without its secret (as leader election names it).
    pub fn account(&self) -> String {
        self.account.clone()
    }

    /// What runs the one connection (under leader election, as the bot's `receiving` says).
    pub fn receiver(&self) -> Arc<dyn Connector> {
        self.receiver.clone()
    }

    /// Adds (or replaces) a persona; its messages go to `sink`. The connector it answers
    /// through is returned.
    pub fn join(&self, voice: Voice, sink: Arc<dyn InboundSink>) -> Arc<dyn Connector> {
        let (voice, speaker) = (self.joiner)(voice);
        let mut members = self.chorus.members.write_locked();
        members.retain(|m| m.voice.agent != voice.agent);
        members.push(Member { voice, sink });
        members.sort_by(|a, b| a.voice.agent.cmp(&b.voice.agent));
        speaker
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

/// One persona's side of a shared bot: it sends as the persona; it receives nothing itself
/// (the shared bot's one connection does), and a webhook call for it is the bot's.
pub struct VoiceConnector<B> {
    bot: Arc<B>,
    voice: Voice,
}

#[async_trait]
impl<B: Voiced + 'static> Connector for VoiceConnector<B> {
    fn platform(&self) -> Platform {
        self.bot.platform()
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
        self.bot.send_voiced(reply, &self.voice).await
    }

    fn shows_live(&self, room: &RoomRef) -> bool {
        self.bot.shows_live(room)
    }

    async fn show_live(&self, reply: &Outbound) -> Result<(), ConnectorError> {
        self.bot.show_voiced(reply, &self.voice).await
    }

    async fn drop_live(&self, key: &str) {
        self.bot.drop_live(key).await;
    }

    async fn send_voice(&self, note: &VoiceNote) -> Result<Option<MessageId>, ConnectorError> {
        // A voice note cannot carry a persona's name: the text answer, which does, is sent
        // alone.
        let _ = note;
        Ok(None)
    }

    async fn delete_messages(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        self.bot.delete_voiced(room, ids).await
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

    async fn webhook(&self, request: WebhookRequest) -> WebhookResponse {
        self.bot.webhook(request).await
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
    use crate::model::{ReplyTo, RoomId, UserRef};
    use std::sync::Mutex;

    #[test]
    fn a_name_counts_as_a_word_in_any_case() {
        assert!(names("what do you think, bob?", "Bob"));
        assert!(names("BOB!", "Bob"));
        assert!(!names("bobbin lace", "Bob"));
        assert!(!names("anything", ""));
        assert!(names("ahoy 🦀Crab 🦀!", "🦀Crab 🦀"));
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

    /// Keeps what it is handed.
    #[derive(Default)]
    struct Kept(Mutex<Vec<Inbound>>);

    #[async_trait]
    impl InboundSink for Kept {
        async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
            self.0.lock().unwrap().push(message);
            Ok(Accepted::New)
        }
    }

    #[tokio::test]
    async fn each_persona_is_told_what_concerns_it() {
        let chorus = Chorus::default();
        let (ada, bob) = (Arc::new(Kept::default()), Arc::new(Kept::default()));
        for (name, sink) in [("Ada", ada.clone()), ("Bob", bob.clone())] {
            chorus.members.write_locked().push(Member {
                voice: Voice::new(AgentId::new(name.to_lowercase()), name, None),
                sink,
            });
        }
        let room = RoomRef::new(Platform::Telegram, RoomId::new("-5"));
        let mut asked = Inbound::said(
            MessageId::new("-5:9"),
            room,
            UserRef::person("7", "Sam"),
            "and you, Bob?",
        );
        asked.reply_to = Some(ReplyTo {
            message: MessageId::new("-5:8"),
            to_self: true,
        });
        let accepted = chorus.fan_out(asked, |v| v.name == "Ada").await;
        assert!(matches!(accepted, Ok(Accepted::New)));
        let (ada, bob) = (ada.0.lock().unwrap(), bob.0.lock().unwrap());
        assert!(ada[0].reply_to.as_ref().unwrap().to_self && !ada[0].mentions_self);
        assert!(!bob[0].reply_to.as_ref().unwrap().to_self && bob[0].mentions_self);
    }
}
