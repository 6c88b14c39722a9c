//! Neynar's JSON, as far as troupe reads it: casts, users, notification pages, webhook
//! events, the publish request and answer, and the error body.
//!
//! These types never leave the Farcaster module. Fields troupe does not use are ignored,
//! and everything not needed to identify a cast is optional, so a new or missing field in
//! Neynar's answer does not lose a message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A Farcaster user as Neynar embeds it in a cast.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct User {
    pub fid: u64,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ParentAuthor {
    #[serde(default)]
    pub fid: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct EmbedMetadata {
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub content_length: Option<u64>,
}

/// An embed: a URL (image, page) or a quoted cast. Only URL embeds become attachments.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Embed {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub metadata: Option<EmbedMetadata>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Channel {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A cast (Neynar's `Cast`, also the `data` of a `cast.created` webhook).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Cast {
    pub hash: String,
    /// The root of the thread; absent or null for a root cast.
    #[serde(default)]
    pub thread_hash: Option<String>,
    #[serde(default)]
    pub parent_hash: Option<String>,
    #[serde(default)]
    pub parent_author: Option<ParentAuthor>,
    pub author: User,
    #[serde(default)]
    pub text: String,
    /// RFC 3339.
    pub timestamp: String,
    #[serde(default)]
    pub mentioned_profiles: Vec<User>,
    #[serde(default)]
    pub embeds: Vec<Embed>,
    #[serde(default)]
    pub channel: Option<Channel>,
}

/// `GET /v2/farcaster/cast` answers `{ "cast": … }`.
#[derive(Debug, Deserialize)]
pub(crate) struct CastResponse {
    pub cast: Cast,
}

/// `GET /v2/farcaster/cast/conversation` answers `{ "conversation": { "cast": …,
/// "chronological_parent_casts": [...] }, "next": … }`. Only the parents are read; an
/// unreadable parent is skipped rather than failing the whole answer.
#[derive(Debug, Deserialize)]
pub(crate) struct ConversationResponse {
    pub conversation: Conversation,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Conversation {
    #[serde(default, deserialize_with = "lenient_casts")]
    pub chronological_parent_casts: Vec<Cast>,
}

/// A list of casts, dropping the items that are not casts; `null` is an empty list.
fn lenient_casts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Cast>, D::Error> {
    let items: Option<Vec<Value>> = Option::deserialize(d)?;
    Ok(items
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct NextCursor {
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One page of `GET /v2/farcaster/notifications`. Items stay raw JSON so one odd item is
/// skipped rather than failing the page.
#[derive(Debug, Deserialize)]
pub(crate) struct NotificationsPage {
    #[serde(default)]
    pub notifications: Vec<Value>,
    #[serde(default)]
    pub next: Option<NextCursor>,
}

impl NotificationsPage {
    pub(crate) fn next_cursor(&self) -> Option<&str> {
        self.next
            .as_ref()
            .and_then(|n| n.cursor.as_deref())
            .filter(|c| !c.is_empty())
    }
}

/// One notification. Mentions and replies carry the cast.
#[derive(Debug, Deserialize)]
pub(crate) struct Notification {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub cast: Option<Cast>,
}

/// A webhook delivery: `{ "created_at": …, "type": "cast.created", "data": { …cast… } }`.
#[derive(Debug, Deserialize)]
pub(crate) struct WebhookEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub data: Value,
}

/// `POST /v2/farcaster/cast`.
#[derive(Debug, Serialize)]
pub(crate) struct PublishCast<'a> {
    pub signer_uuid: &'a str,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_author_fid: Option<u64>,
    /// A top-level cast in a channel (Neynar's `channel_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<&'a str>,
    pub idem: &'a str,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PublishedCast {
    pub hash: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PublishResponse {
    #[serde(default)]
    pub success: Option<bool>,
    pub cast: PublishedCast,
}

/// Neynar's error body.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
}

/// `GET /v2/farcaster/user/bulk` answers `{ "users": [...] }`.
#[derive(Debug, Deserialize)]
pub(crate) struct BulkUsers {
    #[serde(default)]
    pub users: Vec<User>,
}
