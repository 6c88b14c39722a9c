//! Turning a Neynar cast into an `Inbound`.
//!
//! The room is the cast's thread (its root hash), the message id is the cast hash, the
//! author is the FID with its username for a name. The bot's own casts are dropped here.
//! Nothing Neynar-shaped leaves this file.

use chrono::DateTime;

use super::config::Fid;
use super::wire::{Cast, User};
use crate::model::{
    Attachment, Inbound, MessageId, Platform, ReplyTo, RoomId, RoomRef, UserId, UserRef,
};

/// What the notification feed already says about a cast (a "mention" notification means
/// the bot was mentioned, even if the cast came without its mentioned profiles).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hint {
    pub mentioned: bool,
    pub replied_to: bool,
}

/// A cast troupe cannot take (no hash, an unreadable timestamp).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cast {hash}: {reason}")]
pub(crate) struct Malformed {
    pub hash: String,
    pub reason: String,
}

/// Milliseconds since the epoch of an RFC 3339 timestamp.
pub(crate) fn timestamp_ms(cast: &Cast) -> Result<i64, Malformed> {
    DateTime::parse_from_rfc3339(cast.timestamp.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|e| Malformed {
            hash: cast.hash.clone(),
            reason: format!("timestamp `{}` is not RFC 3339: {e}", cast.timestamp),
        })
}

pub(crate) fn mentions(cast: &Cast, bot: Fid) -> bool {
    cast.mentioned_profiles.iter().any(|u| u.fid == bot.0)
}

pub(crate) fn replies_to(cast: &Cast, bot: Fid) -> bool {
    cast.parent_author.as_ref().and_then(|p| p.fid) == Some(bot.0)
}

/// Whether a cast is addressed to the bot: it mentions the bot or replies to one of its
/// casts. Webhook deliveries are filtered with this.
pub(crate) fn addresses(cast: &Cast, bot: Fid) -> bool {
    mentions(cast, bot) || replies_to(cast, bot)
}

/// The name troupe knows a Farcaster user by: the username, else the display name, else
/// `fid:N`.
pub(crate) fn author_name(user: &User) -> String {
    user.username
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| user.display_name.clone().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| format!("fid:{}", user.fid))
}

/// The room of a cast: its thread's root hash (a root cast is its own thread).
pub(crate) fn thread_of(cast: &Cast) -> &str {
    cast.thread_hash
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(&cast.hash)
}

/// The `Inbound` for a cast, or `None` for the bot's own cast.
pub(crate) fn to_inbound(cast: &Cast, bot: Fid, hint: Hint) -> Result<Option<Inbound>, Malformed> {
    if cast.hash.trim().is_empty() {
        return Err(Malformed {
            hash: String::new(),
            reason: "the cast has no hash".into(),
        });
    }
    if cast.author.fid == bot.0 {
        return Ok(None);
    }
    let sent_at_ms = timestamp_ms(cast)?;
    let mut room = RoomRef::new(Platform::Farcaster, RoomId::new(thread_of(cast)));
    room.name = cast
        .channel
        .as_ref()
        .and_then(|c| c.name.clone().or_else(|| c.id.clone()));
    let name = author_name(&cast.author);
    let reply_to = cast
        .parent_hash
        .as_deref()
        .filter(|h| !h.is_empty())
        .map(|parent| ReplyTo {
            message: MessageId::new(parent),
            to_self: replies_to(cast, bot)
                || (hint.replied_to && cast.parent_author.as_ref().and_then(|p| p.fid).is_none()),
        });
    let attachments = cast
        .embeds
        .iter()
        .filter_map(|e| {
            let url = e.url.clone().filter(|u| !u.is_empty())?;
            let name = url
                .rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or(&url)
                .to_string();
            let meta = e.metadata.clone().unwrap_or_default();
            Some(Attachment {
                name,
                mime: meta.content_type,
                size: meta.content_length,
                url: Some(url),
            })
        })
        .collect();
    Ok(Some(Inbound {
        id: MessageId::new(cast.hash.clone()),
        room,
        author: UserRef {
            id: UserId::new(cast.author.fid.to_string()),
            name,
            is_bot: false,
            username: None,
        },
        text: cast.text.clone(),
        attachments,
        reply_to,
        is_direct: false,
        mentions_self: mentions(cast, bot) || hint.mentioned,
        sent_at_ms,
        client: None,
        revises: None,
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub(crate) fn cast_json(hash: &str, author: u64, text: &str) -> Value {
        json!({
            "object": "cast",
            "hash": hash,
            "thread_hash": "0xroot",
            "parent_hash": null,
            "parent_url": null,
            "root_parent_url": null,
            "parent_author": {"fid": null},
            "author": {"object": "user", "fid": author, "username": "alice", "display_name": "Alice"},
            "text": text,
            "timestamp": "2026-11-02T10:00:00.000Z",
            "embeds": [],
            "reactions": {"likes_count": 0, "recasts_count": 0, "likes": [], "recasts": []},
            "replies": {"count": 0},
            "mentioned_profiles": [],
            "mentioned_profiles_ranges": [],
            "mentioned_channels": [],
            "mentioned_channels_ranges": [],
            "channel": null
        })
    }

    fn cast(v: Value) -> Cast {
        serde_json::from_value(v).expect("a cast")
    }

    const BOT: Fid = Fid(42);

    #[test]
    fn a_mention_becomes_an_inbound_in_its_thread() {
        let mut v = cast_json("0xabc", 7, "@fern what is the tide?");
        v["mentioned_profiles"] = json!([{"object": "user", "fid": 42, "username": "fern"}]);
        v["embeds"] = json!([{"url": "https://example.com/pic.png", "metadata": {"content_type": "image/png"}}]);
        let inbound = to_inbound(&cast(v), BOT, Hint::default())
            .expect("well formed")
            .expect("not the bot's own");
        assert_eq!(inbound.id.as_str(), "0xabc");
        assert_eq!(inbound.room.platform, Platform::Farcaster);
        assert_eq!(inbound.room.id.as_str(), "0xroot");
        assert_eq!(inbound.author.id.as_str(), "7");
        assert_eq!(inbound.author.name, "alice");
        assert!(!inbound.author.is_bot);
        assert!(inbound.mentions_self);
        assert!(inbound.reply_to.is_none());
        assert!(!inbound.is_direct);
        assert_eq!(inbound.sent_at_ms, 1_793_613_600_000);
        assert_eq!(inbound.attachments.len(), 1);
        assert_eq!(inbound.attachments[0].name, "pic.png");
        assert_eq!(inbound.attachments[0].mime.as_deref(), Some("image/png"));
    }

    #[test]
    fn a_reply_to_the_bot_says_so() {
        let mut v = cast_json("0xdef", 7, "thanks!");
        v["parent_hash"] = json!("0xbotcast");
        v["parent_author"] = json!({"fid": 42});
        let c = cast(v);
        assert!(addresses(&c, BOT));
        let inbound = to_inbound(&c, BOT, Hint::default()).unwrap().unwrap();
        let reply = inbound.reply_to.expect("a reply");
        assert_eq!(reply.message.as_str(), "0xbotcast");
        assert!(reply.to_self);
        assert!(!inbound.mentions_self);
    }

    #[test]
    fn a_reply_to_someone_else_is_not_to_self() {
        let mut v = cast_json("0xdef", 7, "hm");
        v["parent_hash"] = json!("0xother");
        v["parent_author"] = json!({"fid": 9});
        let c = cast(v);
        assert!(!addresses(&c, BOT));
        let inbound = to_inbound(&c, BOT, Hint::default()).unwrap().unwrap();
        assert!(!inbound.reply_to.unwrap().to_self);
    }

    #[test]
    fn the_bots_own_casts_are_dropped() {
        let c = cast(cast_json("0xmine", 42, "I said this"));
        assert_eq!(to_inbound(&c, BOT, Hint::default()), Ok(None));
    }

    #[test]
    fn a_root_cast_is_its_own_thread() {
        let mut v = cast_json("0xroot2", 7, "hi");
        v["thread_hash"] = Value::Null;
        let c = cast(v);
        assert_eq!(thread_of(&c), "0xroot2");
    }

    #[test]
    fn a_bad_timestamp_is_malformed_not_a_panic() {
        let mut v = cast_json("0xbad", 7, "hi");
        v["timestamp"] = json!("yesterday");
        assert!(to_inbound(&cast(v), BOT, Hint::default()).is_err());
    }

    #[test]
    fn notification_hints_fill_what_the_cast_lacks() {
        let c = cast(cast_json("0x1", 7, "hey fern"));
        let hint = Hint {
            mentioned: true,
            replied_to: false,
        };
        assert!(to_inbound(&c, BOT, hint).unwrap().unwrap().mentions_self);
    }

    #[test]
    fn a_user_without_names_is_named_by_fid() {
        let mut v = cast_json("0x2", 7, "hey");
        v["author"] = json!({"fid": 7});
        assert_eq!(
            to_inbound(&cast(v), BOT, Hint::default())
                .unwrap()
                .unwrap()
                .author
                .name,
            "fid:7"
        );
    }
}
