//! The normalized message model shared by every connector and by the gateway.
//!
//! Connectors parse platform payloads into these types at the edge; nothing downstream sees a
//! serenity, teloxide or Neynar type. Ids are newtypes so that a room id cannot be passed
//! where a user id is expected, and the platform is a closed enum rather than a free string.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A chat platform troupe talks to. `Web` is the HTTP API and the CLI chat, which behave as
/// a direct connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Discord,
    Telegram,
    Farcaster,
    Web,
}

impl Platform {
    pub const ALL: [Platform; 4] = [
        Platform::Discord,
        Platform::Telegram,
        Platform::Farcaster,
        Platform::Web,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Discord => "discord",
            Platform::Telegram => "telegram",
            Platform::Farcaster => "farcaster",
            Platform::Web => "web",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a platform name that troupe does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown platform `{0}`: expected one of discord, telegram, farcaster, web")]
pub struct UnknownPlatform(pub String);

impl FromStr for Platform {
    type Err = UnknownPlatform;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "discord" => Ok(Platform::Discord),
            "telegram" => Ok(Platform::Telegram),
            "farcaster" => Ok(Platform::Farcaster),
            "web" | "direct" | "http" => Ok(Platform::Web),
            _ => Err(UnknownPlatform(s.to_string())),
        }
    }
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a platform-assigned id. Connectors and HTTP extractors call this at the
            /// edge; the id is opaque everywhere else.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(Self(s.to_string()))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_string())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Hash and Eq are the inner string's (derived), so a map keyed by the id can be
        // asked with a plain `&str` (a name from a URL) without building an id.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        #[cfg(feature = "sqlx")]
        text_column!($name);
    };
}

/// Stores a type as a text column, in its `Display` form, read back through `FromStr` (a
/// row that does not parse is a decode error, never a silently wrong key). Generic over the
/// database, so one impl serves SQLite and Postgres. Exported (hidden) for the gateway's own
/// text-column types, such as a knowledge scope.
#[cfg(feature = "sqlx")]
#[doc(hidden)]
#[macro_export]
macro_rules! text_column {
    ($name:ty) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, DB>>::encode(self.to_string(), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <String as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<$name>()?)
            }
        }
    };
}

id_newtype!(
    /// A persona, by the id troupe gives it (the character file's `id`, else its name made
    /// into a slug). Every per-agent row, limit, metric and route is keyed by it; it is
    /// parsed once, where a persona is loaded or a route names one, and is opaque after.
    AgentId
);
id_newtype!(
    /// A room as the platform names it: a Discord channel or thread id, a Telegram chat id
    /// (with `:topic` for forum topics), a Farcaster thread's root hash, or an API room id.
    RoomId
);
id_newtype!(
    /// A user as the platform names them.
    UserId
);
id_newtype!(
    /// A message as the platform names it. With the platform, it is the journal's
    /// deduplication key.
    MessageId
);

/// A room, unique across platforms: `platform:room`. This is the key of room memory and of
/// per-room ordering on the bus.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoomKey {
    pub platform: Platform,
    pub room: RoomId,
}

impl RoomKey {
    pub fn new(platform: Platform, room: RoomId) -> Self {
        Self { platform, room }
    }
}

impl fmt::Display for RoomKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.platform, self.room)
    }
}

/// Why a string is not a room key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRoomKey {
    #[error("a room must be 1 to {max} characters: `platform:room`, or a room of the HTTP API", max = RoomKey::MAX_LEN)]
    Length,
    #[error(
        "`{0}` is not a room key: expected `platform:room` with platform one of discord, telegram, farcaster, web"
    )]
    Form(String),
}

impl RoomKey {
    /// The longest room key a caller may name (the API's `roomId`, the CLI's `--room`).
    pub const MAX_LEN: usize = 200;

    /// A room as a person names it, in the API or the CLI: `platform:room`
    /// (`telegram:-100123`), or a bare id for the Web platform (`r1` is `web:r1`), as
    /// `POST /messages` uses it. Surrounding space is ignored.
    pub fn parse_lenient(s: &str) -> Result<Self, BadRoomKey> {
        let s = s.trim();
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(BadRoomKey::Length);
        }
        Ok(s.parse()
            .unwrap_or_else(|_| RoomKey::new(Platform::Web, RoomId::new(s))))
    }
}

/// The stored form, `platform:room`: the platform is the part before the first `:`, so a
/// room id may hold colons itself (a Telegram forum topic is `telegram:-100123:7`).
impl FromStr for RoomKey {
    type Err = BadRoomKey;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (platform, room) = s
            .split_once(':')
            .ok_or_else(|| BadRoomKey::Form(s.to_string()))?;
        let platform = platform
            .parse::<Platform>()
            .map_err(|_| BadRoomKey::Form(s.to_string()))?;
        if room.is_empty() {
            return Err(BadRoomKey::Form(s.to_string()));
        }
        Ok(RoomKey::new(platform, RoomId::new(room)))
    }
}

#[cfg(feature = "sqlx")]
text_column!(RoomKey);
#[cfg(feature = "sqlx")]
text_column!(Platform);

impl Serialize for RoomKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RoomKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a message was said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomRef {
    pub platform: Platform,
    pub id: RoomId,
    /// A human name, when the platform gives one (a channel or group title).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The room as the platform needs it to send: for a Telegram forum topic the chat id,
    /// for a Discord thread the thread's channel id. Defaults to `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_to: Option<String>,
}

impl RoomRef {
    pub fn new(platform: Platform, id: RoomId) -> Self {
        Self {
            platform,
            id,
            name: None,
            send_to: None,
        }
    }

    pub fn key(&self) -> RoomKey {
        RoomKey::new(self.platform, self.id.clone())
    }
}

/// Who said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRef {
    pub id: UserId,
    /// The display name used in prompts.
    pub name: String,
    /// Another bot (never the persona itself: connectors drop the persona's own messages).
    #[serde(default)]
    pub is_bot: bool,
    /// The sender's handle, when the platform has one besides the id (Telegram's
    /// `@username`, without the `@`): what an allowlist may name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

/// A file attached to a message. Text content is filled in when the connector could fetch
/// it and it is small enough to hand to the knowledge pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The message a message replies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    pub message: MessageId,
    /// The replied-to message was the persona's own, which counts as addressing it.
    #[serde(default)]
    pub to_self: bool,
}

/// What an API client sent along with its message (`POST /v1/chat/completions`, the
/// OpenAI-compatible API): the conversation it keeps itself, and an instruction of its
/// own. Only the HTTP API sets it; it travels with the message through the journal and the
/// bus, so a replica or a restart answers the message from the same context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientContext {
    /// The turns before the message, oldest first, when the client keeps the conversation
    /// (a stateless client): they are the message's history, and the room's own history
    /// is not replayed. `None`: the room's memory is the history (a stateful client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<ClientTurn>>,
    /// The client's `system` message, when the gateway takes it: added to the prompt after
    /// the persona's character, as the instruction of the app's operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// One earlier turn of a client's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTurn {
    /// Who said it: the persona (an `assistant` message) or the client's user.
    pub speaker: TurnSpeaker,
    pub text: String,
}

/// Who said a [`ClientTurn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnSpeaker {
    User,
    Persona,
}

/// One message from a platform, normalized. Everything the agent needs to decide whether
/// and how to answer, and nothing it does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    /// The platform's own id for this message; `(room.platform, id)` is unique.
    pub id: MessageId,
    pub room: RoomRef,
    pub author: UserRef,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<ReplyTo>,
    /// A direct message: always answered, unless the persona ignores DMs.
    #[serde(default)]
    pub is_direct: bool,
    /// The message mentions the persona's platform account.
    #[serde(default)]
    pub mentions_self: bool,
    /// When the platform says it was sent, in milliseconds since the epoch.
    pub sent_at_ms: i64,
    /// What an API client sent along with the message; `None` on every platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Box<ClientContext>>,
    /// Set when this event changes an earlier message rather than saying a new one (issue
    /// 32: an edit or a delete); `None` for every new message. Its `id` is then the event's
    /// own (`{message}:edit:{ms}`, `{message}:delete`), so the journal takes each once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revises: Option<Revision>,
}

/// What an edit or a delete does to an earlier message of the same room (issue 32).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// The platform's id of the message edited or deleted.
    pub of: MessageId,
    pub change: Change,
    /// The persona's reply to `of` on the platform, which a re-run's reply is put in (edited
    /// in place). Filled by the gateway when it handles the edit, never by a connector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reply: Vec<MessageId>,
}

/// The kind of a [`Revision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Change {
    /// The message now reads as the event's text (and attachments); the event's
    /// `sent_at_ms` is when it was edited, `original_sent_at_ms` when it was first sent: the
    /// edit window is measured between the two, the platform's own clock.
    Edit { original_sent_at_ms: i64 },
    /// The message was deleted.
    Delete,
}

impl Revision {
    /// The journal id of an edit of `of` made at `edited_at_ms`: each edit is its own event.
    pub fn edit_id(of: &MessageId, edited_at_ms: i64) -> MessageId {
        MessageId::new(format!("{of}:edit:{edited_at_ms}"))
    }

    /// The journal id of the delete of `of`.
    pub fn delete_id(of: &MessageId) -> MessageId {
        MessageId::new(format!("{of}:delete"))
    }
}

impl UserRef {
    /// A person (not a bot) with the platform id `id`, shown in prompts as `name`.
    pub fn person(id: impl Into<UserId>, name: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            is_bot: false,
            username: None,
        }
    }

    /// Another bot with the platform id `id`, shown in prompts as `name`.
    pub fn bot(id: impl Into<UserId>, name: impl Into<String>) -> Self {
        Self {
            is_bot: true,
            ..Self::person(id, name)
        }
    }
}

/// Building a message: [`Inbound::said`] gives a new message with everything optional left
/// out (no attachments, no reply, not direct, mentioning nobody, sent at 0, no client, no
/// revision), and each method below sets one thing, so a message reads as what sets it
/// apart: `Inbound::said("7", room, UserRef::person("5", "Ann"), "hi").direct().at(1_000)`.
impl Inbound {
    pub fn said(
        id: impl Into<MessageId>,
        room: RoomRef,
        author: UserRef,
        text: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            room,
            author,
            text: text.into(),
            attachments: Vec::new(),
            reply_to: None,
            is_direct: false,
            mentions_self: false,
            sent_at_ms: 0,
            client: None,
            revises: None,
        }
    }

    /// A direct message.
    #[must_use]
    pub fn direct(self) -> Self {
        Self {
            is_direct: true,
            ..self
        }
    }

    /// It mentions the persona's platform account.
    #[must_use]
    pub fn mentioning_self(self) -> Self {
        Self {
            mentions_self: true,
            ..self
        }
    }

    /// Sent at `ms` since the epoch, by the platform's clock.
    #[must_use]
    pub fn at(self, ms: i64) -> Self {
        Self {
            sent_at_ms: ms,
            ..self
        }
    }

    /// With these attachments.
    #[must_use]
    pub fn with_attachments(self, attachments: Vec<Attachment>) -> Self {
        Self {
            attachments,
            ..self
        }
    }

    /// A reply to another message.
    #[must_use]
    pub fn replying_to(self, reply_to: ReplyTo) -> Self {
        Self {
            reply_to: Some(reply_to),
            ..self
        }
    }

    /// An edit or a delete of an earlier message rather than a new one.
    #[must_use]
    pub fn revising(self, revision: Revision) -> Self {
        Self {
            revises: Some(revision),
            ..self
        }
    }

    /// Sent by an API client, with what it sent along.
    #[must_use]
    pub fn from_client(self, client: ClientContext) -> Self {
        Self {
            client: Some(Box::new(client)),
            ..self
        }
    }

    pub fn platform(&self) -> Platform {
        self.room.platform
    }
}

/// One reply to deliver. `key` is stable for the same reply, so a connector whose platform
/// supports idempotency keys (Neynar's `idem`) can make a retry harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    pub key: String,
    pub room: RoomRef,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<MessageId>,
    /// The messages this reply is put in, edited in place rather than posted: the earlier
    /// answer to a question that was edited (issue 32). Empty for every other reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<MessageId>,
}

/// A reaction someone added to a message or took back (issue 32, docs/media.md "Reactions
/// and feedback"). Hostile input like any message: the connector bounds the emoji and
/// drops custom emoji; the gateway decides what it means (only 👍 and 👎 on a persona's own
/// reply count, as feedback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reaction {
    /// The chat or channel the message is in, as the platform names it.
    pub room: RoomRef,
    /// The message reacted to.
    pub message: MessageId,
    /// Who reacted.
    pub user: UserRef,
    /// The emoji, a Unicode one only (at most [`Reaction::MAX_EMOJI_BYTES`]).
    pub emoji: String,
    /// Added (true) or taken back (false).
    pub added: bool,
    pub at_ms: i64,
}

impl Reaction {
    /// The longest emoji a connector hands over: a Unicode emoji with its modifiers and
    /// joiners fits many times over; anything longer is not an emoji.
    pub const MAX_EMOJI_BYTES: usize = 64;

    /// Whether `emoji` may be handed over: 1 to `MAX_EMOJI_BYTES` bytes, no letters, digits,
    /// spaces or control characters (a Unicode emoji has none of them).
    pub fn plausible_emoji(emoji: &str) -> bool {
        !emoji.is_empty()
            && emoji.len() <= Self::MAX_EMOJI_BYTES
            && !emoji
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || c.is_ascii_alphanumeric())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_round_trips_through_its_name() {
        for p in Platform::ALL {
            assert_eq!(p.as_str().parse::<Platform>().unwrap(), p);
        }
        assert!("myspace".parse::<Platform>().is_err());
    }

    #[test]
    fn room_key_displays_platform_and_room() {
        let key = RoomKey::new(Platform::Telegram, RoomId::new("-100:7"));
        assert_eq!(key.to_string(), "telegram:-100:7");
    }

    #[test]
    fn room_key_parses_back_from_its_stored_form() {
        let key = RoomKey::new(Platform::Telegram, RoomId::new("-100:7"));
        assert_eq!(key.to_string().parse::<RoomKey>().unwrap(), key);
        assert_eq!(
            serde_json::from_value::<RoomKey>(serde_json::to_value(&key).unwrap()).unwrap(),
            key
        );
        assert_eq!(serde_json::to_value(&key).unwrap(), "telegram:-100:7");
        for bad in ["", "r1", "myspace:r1", "discord:"] {
            assert!(bad.parse::<RoomKey>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_bare_room_is_a_web_room_where_people_name_rooms() {
        assert_eq!(
            RoomKey::parse_lenient(" r1 ").unwrap(),
            RoomKey::new(Platform::Web, RoomId::new("r1"))
        );
        assert_eq!(
            RoomKey::parse_lenient("discord:42").unwrap(),
            RoomKey::new(Platform::Discord, RoomId::new("42"))
        );
        assert_eq!(RoomKey::parse_lenient("  "), Err(BadRoomKey::Length));
        let long = "x".repeat(RoomKey::MAX_LEN + 1);
        assert_eq!(RoomKey::parse_lenient(&long), Err(BadRoomKey::Length));
    }
}
