//! Discord's JSON, as far as the connector reads it: lenient types where every field may be
//! missing, so that a strange payload is skipped, never a panic. Snowflakes stay strings
//! (Discord sends them as strings); [`Snowflake`] compares them as numbers.

use serde::Deserialize;

/// A message object (MESSAGE_CREATE's `d`, or an element of GET channel messages).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Message {
    pub id: String,
    pub channel_id: String,
    pub guild_id: Option<String>,
    pub author: Option<User>,
    pub content: String,
    pub timestamp: Option<String>,
    /// When the text was last edited (MESSAGE_UPDATE); `None` for a message never edited.
    pub edited_timestamp: Option<String>,
    pub mentions: Vec<User>,
    pub attachments: Vec<Attachment>,
    pub embeds: Vec<Embed>,
    pub message_reference: Option<MessageReference>,
    pub referenced_message: Option<Box<Message>>,
    pub webhook_id: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<u64>,
    pub member: Option<Member>,
    /// Message flags; `IS_VOICE_MESSAGE` (1 << 13) marks a voice message (a message flag,
    /// not an attachment's: Discord's attachment flags are clip, thumbnail, spoiler…).
    pub flags: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct User {
    pub id: String,
    pub username: String,
    pub global_name: Option<String>,
    pub bot: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Member {
    pub nick: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Attachment {
    pub filename: String,
    pub content_type: Option<String>,
    pub size: Option<u64>,
    pub url: Option<String>,
}

/// An embed; the connector reads only image embeds (`type` `image`, a picture link Discord
/// unfurled), whose picture is in `thumbnail` (or `image`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Embed {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub url: Option<String>,
    pub image: Option<EmbedMedia>,
    pub thumbnail: Option<EmbedMedia>,
}

/// An embed's picture: its source `url`, and `proxy_url` on Discord's media proxy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EmbedMedia {
    pub url: Option<String>,
    pub proxy_url: Option<String>,
    pub content_type: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct MessageReference {
    pub message_id: Option<String>,
    pub channel_id: Option<String>,
}

/// A channel (`GET /channels/{id}`): its type (10, 11 and 12 are threads) and parent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Channel {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Option<u64>,
    pub parent_id: Option<String>,
}

impl Channel {
    /// The channel a webhook must live in: the parent of a thread, else the channel.
    pub(crate) fn thread_parent(&self) -> Option<Snowflake> {
        matches!(self.kind, Some(10..=12))
            .then(|| self.parent_id.as_deref().and_then(Snowflake::parse))
            .flatten()
    }
}

/// A webhook (`POST`/`GET /channels/{id}/webhooks`): `token` is there for an incoming
/// webhook the caller may use; `user` is who created it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Webhook {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Option<u64>,
    pub channel_id: Option<String>,
    pub token: Option<String>,
    pub user: Option<User>,
}

/// The body of a 429.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RateLimited {
    pub retry_after: Option<f64>,
    pub global: bool,
}

/// A Discord id. Ordered as the number it is (a later message has a larger id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Snowflake(pub u64);

impl Snowflake {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        s.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .map(Snowflake)
    }

    /// When the id was made, in milliseconds since the Unix epoch.
    pub(crate) fn unix_ms(self) -> i64 {
        const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;
        ((self.0 >> 22) + DISCORD_EPOCH_MS) as i64
    }
}

impl std::fmt::Display for Snowflake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
