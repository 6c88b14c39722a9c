//! Reactions on Discord (issue 32): the persona's own acknowledgement reaction
//! (`PUT`/`DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me`) and the
//! MESSAGE_REACTION_ADD/REMOVE events people cause, turned into [`Reaction`]s for the sink.
//!
//! Hostile input: custom emoji (`<:name:id>`) are dropped, a Unicode emoji is bounded by
//! [`Reaction::plausible_emoji`], and the bot's own reactions (the acknowledgement coming
//! back through the gateway) never reach the sink. What a reaction means is the gateway's.

use reqwest::Method;
use serenity::all::ReactionType;

use super::rest::{CallError, Rest};
use super::wire::Snowflake;
use crate::model::{MessageId, Platform, Reaction, RoomId, RoomRef, UserId, UserRef};

/// The path segment of a Unicode emoji: every byte percent-encoded, as Discord asks
/// ("the emoji must be URL Encoded or the request will fail with 10014: Unknown Emoji").
fn encoded(emoji: &str) -> String {
    emoji.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// The path of the bot's own `emoji` reaction on `message`; `None` for a message id that is
/// not a snowflake or an emoji that is not one (nothing else may reach a URL path).
fn own_reaction_path(channel: u64, message: &MessageId, emoji: &str) -> Option<String> {
    let message = Snowflake::parse(message.as_str())?;
    Reaction::plausible_emoji(emoji).then(|| {
        format!(
            "/channels/{channel}/messages/{message}/reactions/{}/@me",
            encoded(emoji)
        )
    })
}

impl Rest {
    /// Puts (`add`) or takes back the bot's own `emoji` reaction on `message`.
    pub(crate) async fn own_reaction(
        &self,
        channel: u64,
        message: &MessageId,
        emoji: &str,
        add: bool,
    ) -> Result<(), CallError> {
        let Some(path) = own_reaction_path(channel, message, emoji) else {
            return Err(CallError::Other(crate::connector::ConnectorError::Fatal(
                format!("cannot react with `{emoji}` on Discord message `{message}`"),
            )));
        };
        let method = if add { Method::PUT } else { Method::DELETE };
        self.call(method, &path, None).await.map(|_| ())
    }
}

/// Now, for a reaction's time (Discord's event carries none).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A reaction event as the sink takes it; `None` for one to ignore: by the bot itself, by
/// nobody known, or with a custom emoji.
pub(crate) fn to_reaction(
    event: &serenity::all::Reaction,
    added: bool,
    me: Option<Snowflake>,
) -> Option<Reaction> {
    let user = event.user_id?;
    if me.is_some_and(|me| me.0 == user.get()) {
        return None;
    }
    let ReactionType::Unicode(emoji) = &event.emoji else {
        return None;
    };
    if !Reaction::plausible_emoji(emoji) {
        return None;
    }
    let member = event.member.as_ref();
    let name = member
        .and_then(|m| m.nick.clone().or_else(|| m.user.global_name.clone()))
        .or_else(|| member.map(|m| m.user.name.clone()))
        .unwrap_or_else(|| user.to_string());
    let is_bot = member.is_some_and(|m| m.user.bot);
    Some(Reaction {
        room: RoomRef::new(Platform::Discord, RoomId::new(event.channel_id.to_string())),
        message: MessageId::new(event.message_id.to_string()),
        user: UserRef {
            id: UserId::new(user.to_string()),
            name: name.chars().take(100).collect(),
            is_bot,
            username: None,
        },
        emoji: emoji.clone(),
        added,
        at_ms: now_ms(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(user: u64, emoji: serde_json::Value) -> serenity::all::Reaction {
        serde_json::from_value(serde_json::json!({
            "user_id": user.to_string(), "channel_id": "10", "message_id": "20",
            "emoji": emoji, "burst": false, "type": 0,
        }))
        .unwrap()
    }

    #[test]
    fn a_unicode_reaction_is_handed_over_and_others_are_not() {
        let up = event(5, serde_json::json!({"id": null, "name": "👍"}));
        let r = to_reaction(&up, true, Some(Snowflake(9))).unwrap();
        assert_eq!((r.room.id.as_str(), r.message.as_str()), ("10", "20"));
        assert_eq!(
            (r.user.id.as_str(), r.emoji.as_str(), r.added),
            ("5", "👍", true)
        );
        // The bot's own acknowledgement, coming back through the gateway.
        assert!(to_reaction(&up, true, Some(Snowflake(5))).is_none());
        let custom = event(5, serde_json::json!({"id": "77", "name": "party"}));
        assert!(to_reaction(&custom, true, None).is_none());
    }

    #[test]
    fn only_a_snowflake_and_an_emoji_reach_the_path() {
        let path = own_reaction_path(10, &MessageId::new("20"), "👀").unwrap();
        assert_eq!(path, "/channels/10/messages/20/reactions/%F0%9F%91%80/@me");
        assert!(own_reaction_path(10, &MessageId::new("../x"), "👀").is_none());
        assert!(own_reaction_path(10, &MessageId::new("20"), "a/b").is_none());
        assert!(own_reaction_path(10, &MessageId::new("20"), "").is_none());
    }
}
