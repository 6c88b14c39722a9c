//! The `Connector` trait: one platform account, as a source of `Inbound` and a sink for
//! `Outbound`.
//!
//! A connector runs until its shutdown token is cancelled, hands every message to an
//! `InboundSink`, and only acknowledges a message to its platform (a getUpdates offset, a
//! webhook 200, a notification cursor) after the sink has accepted it: the sink's answer
//! means the message is in the journal and will not be lost.
//!
//! Also what every platform module builds from and answers with: the persona's
//! [`ConnectorSettings`] and setting [`Lookup`], the [`Built`] outcome, and how replicas may
//! share receiving ([`Receiving`], [`Shard`]). They live here, below the platform modules,
//! so that a platform imports only this module and `model`, and `registry` imports the
//! platforms: no module imports one that imports it back.

use crate::model::{AgentId, Inbound, MessageId, Outbound, Platform, Reaction, RoomRef, UserId};
use crate::sync::Locked;
use async_trait::async_trait;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the sink did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Journaled for the first time; it will be handled.
    New,
    /// Already in the journal (a redelivery); nothing more will happen.
    Duplicate,
}

/// The sink did not take the message. Each variant says what the connector does next:
/// [`SinkError::is_retryable`] is the question to ask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The journal cannot be written now (the database or the bus is down). Do not
    /// acknowledge the message: the platform's redelivery, or the next poll from the same
    /// position, brings it back once the gateway can take it.
    #[error("the gateway cannot journal the message now (retry later): {0}")]
    Unavailable(String),
    /// This message will never be taken (the database refuses its content). Acknowledge it
    /// and move on: retrying would block the messages behind it forever.
    #[error("the gateway refused the message: {0}")]
    Rejected(String),
    /// The gateway is stopping. Do not acknowledge: the next run receives the message.
    #[error("the gateway is shutting down: {0}")]
    ShuttingDown(String),
}

impl SinkError {
    /// Whether the same message may be taken later, so the connector must leave it
    /// unacknowledged; false for a message that is refused for good.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, SinkError::Rejected(_))
    }
}

/// Where a connector puts what it receives. The gateway implements it over the journal and
/// the bus.
#[async_trait]
pub trait InboundSink: Send + Sync {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError>;

    /// A reaction on a message (issue 32): the gateway records 👍/👎 on a persona's reply
    /// as feedback and ignores the rest. Not journaled: a lost reaction is lost, so a
    /// connector acknowledges it whatever this answers. The default ignores it.
    async fn react(&self, reaction: Reaction) -> Result<(), SinkError> {
        let _ = reaction;
        Ok(())
    }
}

/// A small persistent key-value store a connector may keep its position in (a Farcaster
/// notification cursor, the last Discord message seen per channel). Keys are scoped to the
/// connector by the gateway. The journal still decides duplicates: this only saves work.
#[async_trait]
pub trait ConnectorState: Send + Sync {
    async fn get(&self, key: &str) -> Result<Option<String>, SinkError>;
    async fn put(&self, key: &str, value: &str) -> Result<(), SinkError>;
}

/// A `ConnectorState` in memory, for tests and for running without persistence.
#[derive(Default)]
pub struct MemoryState(std::sync::Mutex<std::collections::HashMap<String, String>>);

#[async_trait]
impl ConnectorState for MemoryState {
    async fn get(&self, key: &str) -> Result<Option<String>, SinkError> {
        Ok(self.0.locked().get(key).cloned())
    }
    async fn put(&self, key: &str, value: &str) -> Result<(), SinkError> {
        self.0.locked().insert(key.to_string(), value.to_string());
        Ok(())
    }
}

/// What the platform said about a delivered reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivery {
    /// The platform ids of the messages sent (several when a reply was split).
    pub message_ids: Vec<MessageId>,
}

/// A bounded record of recently delivered replies, by outbox key: a connector answers a
/// repeated `send` of the same key (an outbox retry after a lost acknowledgement) with the
/// first delivery instead of posting again. The oldest keys go first.
#[derive(Default)]
pub(crate) struct Recent {
    by_key: HashMap<String, Delivery>,
    order: VecDeque<String>,
}

impl Recent {
    const CAPACITY: usize = 1024;

    pub(crate) fn get(&self, key: &str) -> Option<Delivery> {
        self.by_key.get(key).cloned()
    }

    pub(crate) fn insert(&mut self, key: String, delivery: Delivery) {
        if self.by_key.insert(key.clone(), delivery).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.by_key.remove(&old);
            }
        }
    }
}

/// Errors callers branch on: the outbox retries `RateLimited` and `Transient`, and gives up
/// on `Unauthorized` and `Fatal`.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error("rate limited by the platform; retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    #[error("the platform refused the credentials: {0}")]
    Unauthorized(String),
    #[error("temporary failure: {0}")]
    Transient(String),
    #[error("{0}")]
    Fatal(String),
}

impl ConnectorError {
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ConnectorError::RateLimited { .. } | ConnectorError::Transient(_)
        )
    }
}

/// Sleeps for `wait` unless `shutdown` comes first; `false` means stop. Every connector's
/// retry loop waits with it, so that a backoff never delays a shutdown.
#[cfg(any(feature = "discord", feature = "telegram"))]
pub(crate) async fn pause(shutdown: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

/// The message of a caught panic's payload (`panic!` makes a `&str` or a `String`), cut to
/// 300 characters: what a log line or `/readyz` repeats of it is bounded. For the places
/// that catch a panic rather than let it end a task (issue 30, finding 11).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    text.chars().take(300).collect()
}

/// A webhook call, framework-free: header names are lower-case.
#[derive(Debug, Clone, Default)]
pub struct WebhookRequest {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl WebhookRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to a webhook call; the body is JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    pub body: String,
}

/// One message of a thread's context, as `Connector::thread_context` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLine {
    /// The author's name on the platform, as a prompt shows it.
    pub author_name: String,
    pub text: String,
    /// The persona's own platform account wrote it.
    pub from_self: bool,
}

/// The [`ConnectorState`] key under which a connector keeps its account's own user id
/// (see [`Connector::self_id`]).
pub const SELF_ID_KEY: &str = "self_id";

/// A voice note answering a voice note (issue 32, voice out): Opus in an Ogg container,
/// made by the gateway (`media::speech`).
#[derive(Debug, Clone)]
pub struct VoiceNote {
    pub room: RoomRef,
    /// The message it answers (the voice note that came in).
    pub reply_to: Option<MessageId>,
    pub audio: Vec<u8>,
    /// Its length, from the Ogg pages (zero when they did not say).
    pub duration: Duration,
}

/// One platform account. Implementations live in this crate, one module per platform; the
/// gateway's `Web` connector lives in the gateway because it answers HTTP callers.
#[async_trait]
pub trait Connector: Send + Sync {
    fn platform(&self) -> Platform;

    /// Receives until `shutdown` is cancelled. Returns an error only when the connector
    /// cannot go on (bad token); transient failures are retried inside.
    async fn run(
        &self,
        sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError>;

    /// Delivers one reply whole: split to the platform's limit, threaded, paced.
    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError>;

    /// The delivery of `reply` when it leaves with the caller's own answer rather than
    /// through the platform (the HTTP API: the reply is the response to the request that
    /// asked). The gateway then records the reply delivered in the transaction that records
    /// it, instead of a pending entry that `send` would only acknowledge. `None`, the
    /// default, for every platform where `send` has work to do.
    fn delivered_in_band(&self, _reply: &Outbound) -> Option<Delivery> {
        None
    }

    /// Whether a reply in `room` can be shown while it is written (issue 32): the platform
    /// edits messages. The gateway then calls `show_live` as the text grows, before `send`.
    fn shows_live(&self, _room: &RoomRef) -> bool {
        false
    }

    /// Shows `reply.text`, the reply written so far: the first call posts it, later calls
    /// edit what was posted (and post what outgrew a message). A `send` of the same key
    /// then finishes those messages rather than posting others, also after a restart.
    /// A `RateLimited` error says how long to wait before showing more.
    async fn show_live(&self, _reply: &Outbound) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Takes back what `show_live` showed of the reply `key`: its turn failed, and no
    /// reply will finish it. Best effort.
    async fn drop_live(&self, _key: &str) {}

    /// Sends a voice note (before the reply's text, which the outbox delivers as usual).
    /// `Ok(None)`: this platform sends no voice notes, the default.
    async fn send_voice(&self, _note: &VoiceNote) -> Result<Option<MessageId>, ConnectorError> {
        Ok(None)
    }

    /// Deletes the persona's own messages `ids` in `room`: the reply to a question that was
    /// deleted (issue 32). A message gone already is not an error. The default deletes
    /// nothing, for a platform whose messages cannot be taken back (a cast, the API).
    async fn delete_messages(
        &self,
        _room: &RoomRef,
        _ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Puts the persona's own `emoji` reaction on `message` in `room` (the acknowledgement
    /// while a reply is made, `TROUPE_ACK_REACTION`). Best effort: the caller logs a failure
    /// and goes on. The default, for a platform without reactions, does nothing.
    async fn add_reaction(
        &self,
        _room: &RoomRef,
        _message: &MessageId,
        _emoji: &str,
    ) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Takes back the persona's own `emoji` reaction on `message`. Best effort.
    async fn remove_reaction(
        &self,
        _room: &RoomRef,
        _message: &MessageId,
        _emoji: &str,
    ) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Shows that the persona is composing a reply. Best effort.
    async fn typing(&self, _room: &RoomRef) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Handles a webhook call the gateway received for this connector at
    /// `POST /webhooks/{platform}/{agent}`. The connector verifies it (secret token,
    /// signature) and hands its messages to the sink it got in `run`.
    async fn webhook(&self, _request: WebhookRequest) -> WebhookResponse {
        WebhookResponse {
            status: 404,
            body: r#"{"error":"not_found","detail":"this connector takes no webhooks"}"#.into(),
        }
    }

    /// The messages above `message` in its thread, oldest first, that the platform knows
    /// and troupe may not (e.g. the casts of a Farcaster thread before the persona was
    /// mentioned in it). The gateway puts them in the prompt before the room's memory.
    /// Best effort: an error gives an empty list, and so does a platform without threads.
    async fn thread_context(&self, _message: &Inbound) -> Vec<ContextLine> {
        Vec::new()
    }

    /// Fetches a file `message` carried on this platform (see [`crate::files`]), with the
    /// connector's own client, at most `cap` bytes. `Ok(None)` when the attachment is not
    /// this platform's file (a link someone typed): the gateway fetches that under its
    /// fetch policy. The default knows no files.
    async fn fetch_file(
        &self,
        _attachment: &crate::model::Attachment,
        _cap: usize,
    ) -> Result<Option<Vec<u8>>, crate::files::FileError> {
        Ok(None)
    }

    /// Whether `message`'s author may steer its room (mute, follow, forget: see
    /// `command::Command::steers_room`). In a direct message everyone may; in a group the
    /// platform says (Telegram: an administrator, by `getChatMember`). The default is yes,
    /// for a platform without roles (the API); Farcaster has its own rule (the thread's root
    /// author steers it).
    async fn may_steer(&self, _message: &Inbound) -> Result<bool, ConnectorError> {
        Ok(true)
    }

    /// The platform's user id of this account (the bot's own user), once it is known (a
    /// Discord connector learns it from `users/@me` and READY, and also keeps it in its
    /// state under [`SELF_ID_KEY`] for replicas that do not run it). The gateway tells its
    /// own personas' bots apart from other people's with it (docs/rooms.md). `None` where
    /// it is not known.
    fn self_id(&self) -> Option<UserId> {
        None
    }

    /// Whether the platform answers with these credentials.
    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// For a receiver that polls its platform: how long its loop has gone without an
    /// answer (a poll in flight is not silence; the HTTP client's timeout bounds it).
    /// `None` when the connector does not poll or its loop is not running. `/readyz`
    /// reports a loop quiet for longer than `TROUPE_RECEIVE_STALE_SECS` (issue 30,
    /// finding 11): a loop that is stuck or fails every poll is not ready.
    fn quiet_for(&self) -> Option<Duration> {
        None
    }

    /// How the replicas of a gateway may share this account's receiving. Each platform
    /// answers from the settings it parsed when it was built; the default (nothing to
    /// receive, or webhooks) runs everywhere.
    fn receiving(&self) -> Receiving {
        Receiving::Everywhere
    }
}

/// Resolves a setting by its elizaOS-compatible name.
pub type Lookup<'a> = &'a (dyn Fn(&str) -> Option<String> + Send + Sync);

/// A setting's value through `lookup`, trimmed; `None` when it is unset or blank, so that
/// an empty value reads as a missing one. Every platform's settings are read through it.
#[cfg(any(feature = "discord", feature = "farcaster", feature = "telegram"))]
pub(crate) fn setting(lookup: Lookup<'_>, name: &str) -> Option<String> {
    lookup(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Setting `name` as `read` makes it, or `default` when it is unset or blank; a value that
/// `read` refuses is [`invalid_setting`] with `expected`.
#[cfg(any(feature = "discord", feature = "farcaster"))]
pub(crate) fn setting_or<T>(
    lookup: Lookup<'_>,
    name: &str,
    default: T,
    expected: &str,
    read: impl FnOnce(&str) -> Option<T>,
) -> Result<T, ConnectorError> {
    match setting(lookup, name) {
        None => Ok(default),
        Some(value) => read(&value).ok_or_else(|| invalid_setting(name, &value, expected)),
    }
}

/// The error for a setting that is present but wrong: it names the setting, shows the
/// value, and says what was expected. Only for settings that hold no secret.
#[cfg(any(feature = "discord", feature = "farcaster"))]
pub(crate) fn invalid_setting(name: &str, value: &str, expected: &str) -> ConnectorError {
    ConnectorError::Fatal(format!(
        "{name}=`{value}` is not valid: expected {expected}"
    ))
}

/// The URL of an API's base (a platform's own, a proxy's or a fake's) from setting `name`:
/// http or https, with a host and no query; else [`invalid_setting`] with `expected`.
#[cfg(any(feature = "discord", feature = "farcaster"))]
pub(crate) fn http_base_url(
    name: &str,
    raw: &str,
    expected: &str,
) -> Result<reqwest::Url, ConnectorError> {
    match reqwest::Url::parse(raw) {
        Ok(url)
            if matches!(url.scheme(), "http" | "https")
                && url.host().is_some()
                && url.query().is_none() =>
        {
            Ok(url)
        }
        _ => Err(invalid_setting(name, raw, expected)),
    }
}

/// A [`Lookup`] over fixed pairs, for the tests of each platform's settings.
#[cfg(test)]
pub(crate) fn lookup_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Send + Sync {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

/// What a connector needs to know about the persona it serves.
#[derive(Clone)]
pub struct ConnectorSettings {
    /// Where the connector keeps its position across restarts.
    pub state: Arc<dyn ConnectorState>,
    pub agent_id: AgentId,
    /// The persona's name (also how it is addressed in text).
    pub persona_name: String,
    /// `allowedChannelIds` / `allowedGroupIds`: rooms the persona may talk in.
    pub allowed_rooms: Option<Vec<String>>,
    /// `shouldOnlyJoinInAllowedGroups`: leave groups that are not allowed.
    pub only_join_allowed: bool,
}

/// What building a platform's connector gave.
pub enum Built {
    Ready(Arc<dyn Connector>),
    /// The platform's credentials are not configured; the string says what to set.
    NotConfigured(String),
}

/// How the replicas of one gateway may share the receiving of one platform account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receiving {
    /// On every replica at once: the platform pushes each event once to whichever replica
    /// the load balancer picks (webhooks), or there is nothing to receive.
    Everywhere,
    /// On one replica at a time: the platform serves one poller per account (Telegram's
    /// `getUpdates` answers a second one with 409 Conflict), and two pollers would each
    /// see every event. `name` identifies the account and holds no secret: it uses a
    /// public id where the platform has one (a Telegram bot id, a Farcaster FID).
    OneAtATime { name: String },
    /// By gateway shard (Discord): each shard on one replica; `name` as above (a Discord
    /// application id, else a one-way digest of the token).
    Sharded { name: String },
}

impl Receiving {
    /// The name to elect one receiver under, for an account received as a whole on one
    /// replica at a time (a shared bot's one connection); `None` to run it everywhere.
    pub fn leader(self) -> Option<String> {
        match self {
            Receiving::Everywhere => None,
            Receiving::OneAtATime { name } | Receiving::Sharded { name } => Some(name),
        }
    }
}

/// One Discord gateway shard: `id` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub id: u32,
    pub total: u32,
}

/// The account a token belongs to, as its platform names it: the console shows it before
/// the token is kept (issue 47, "paste and check"). Never carries the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The platform's id of the account (the bot's user id, the fid).
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Its handle (`tess_bot`), when the platform has one.
    pub username: Option<String>,
    /// What the next steps depend on.
    pub facts: AccountFacts,
}

/// Per platform, what the console's next steps depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountFacts {
    /// From `getMe`: privacy mode is on when the bot cannot read all group messages.
    Telegram {
        can_read_all_group_messages: bool,
        can_join_groups: bool,
    },
    /// From `GET /applications/@me`: the application (for the invite link) and whether
    /// the Message Content intent is on.
    Discord {
        application_id: u64,
        application_name: String,
        message_content: bool,
    },
    /// The signer's state (`approved`, `pending_approval`, `revoked`…), when one was given.
    Farcaster { signer: Option<String> },
}

/// Why a token was not taken. The sentences never hold the token, nor a URL that does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The value is not one this platform issues (checked before anything is sent).
    #[error("{0}")]
    Malformed(String),
    /// The platform refused it: its reason, in one sentence.
    #[error("{0}")]
    Refused(String),
    /// The platform could not be asked.
    #[error("{0}")]
    Unreachable(String),
}

/// The one client the checks use: a deadline, no redirects (a token never follows one).
#[cfg(any(feature = "discord", feature = "farcaster", feature = "telegram"))]
pub(crate) fn check_client() -> Result<reqwest::Client, CheckError> {
    crate::tls::http_client()
        .timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|_| CheckError::Unreachable("cannot build an HTTP client".into()))
}

/// A failed request, in words that hold no URL (a Telegram URL holds the token).
#[cfg(any(feature = "discord", feature = "farcaster", feature = "telegram"))]
pub(crate) fn unreachable(platform: &str, base: &str, e: &reqwest::Error) -> CheckError {
    let why = if e.is_timeout() {
        "it did not answer within 10 s"
    } else if e.is_connect() {
        "the connection failed"
    } else {
        "the request failed"
    };
    CheckError::Unreachable(format!("cannot reach {platform} at {base}: {why}"))
}
