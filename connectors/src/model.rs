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

    /// The longest message the platform accepts, in the unit the platform counts
    /// (characters for Discord and Telegram, bytes for Farcaster casts).
    pub fn max_message_len(self) -> usize {
        match self {
            Platform::Discord => 2000,
            Platform::Telegram => 4096,
            Platform::Farcaster => 320,
            Platform::Web => usize::MAX,
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

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
}

impl Inbound {
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
}
