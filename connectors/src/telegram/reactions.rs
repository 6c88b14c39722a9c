//! Reactions on Telegram (issue 32): the persona's acknowledgement through
//! `setMessageReaction` (an empty list takes it back), and `message_reaction` updates turned
//! into [`Reaction`]s, one per emoji added or taken back (Telegram sends the user's old and
//! new lists; the difference is what changed).
//!
//! Hostile input: anonymous reactions (on behalf of a chat), custom and paid reactions are
//! skipped; an emoji is bounded by [`Reaction::plausible_emoji`], and at most
//! [`MAX_PER_UPDATE`] reactions come out of one update.

use teloxide::payloads::SetMessageReactionSetters;
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, MessageReactionUpdated, ReactionType};

use super::TelegramConnector;
use super::errors;
use crate::connector::ConnectorError;
use crate::model::{MessageId, Platform, Reaction, RoomId, RoomRef, UserId, UserRef};

/// Telegram lets a user put at most a few reactions on a message (one, or three with
/// Premium); more in one update is not Telegram.
const MAX_PER_UPDATE: usize = 8;

fn emojis(list: &[ReactionType]) -> Vec<&str> {
    list.iter()
        .filter_map(|r| r.emoji().map(String::as_str))
        .filter(|e| Reaction::plausible_emoji(e))
        .take(MAX_PER_UPDATE)
        .collect()
}

/// The reactions one `message_reaction` update stands for: those taken back first, then
/// those added. Empty for an anonymous one or one without emoji.
pub(crate) fn from_update(update: &MessageReactionUpdated) -> Vec<Reaction> {
    let Some(user) = update.user() else {
        return Vec::new();
    };
    let (old, new) = (emojis(&update.old_reaction), emojis(&update.new_reaction));
    let chat = update.chat.id.0;
    let make = |emoji: &str, added: bool| Reaction {
        room: RoomRef::new(Platform::Telegram, RoomId::new(chat.to_string())),
        // The normalized `chat:message` id (`normalize::message_id`, which imports this
        // module: spelt here so that the two do not import each other).
        message: MessageId::new(format!("{chat}:{}", update.message_id.0)),
        user: UserRef {
            id: UserId::new(user.id.0.to_string()),
            name: user.full_name().chars().take(100).collect(),
            is_bot: user.is_bot,
            username: None,
        },
        emoji: emoji.to_string(),
        added,
        at_ms: update.date.timestamp_millis(),
    };
    let removed = old
        .iter()
        .filter(|e| !new.contains(e))
        .map(|e| make(e, false));
    let added = new
        .iter()
        .filter(|e| !old.contains(e))
        .map(|e| make(e, true));
    removed.chain(added).collect()
}

/// The Telegram message id of a normalized `chat:message` id.
fn tg_message(message: &MessageId) -> Result<(i64, i32), ConnectorError> {
    let bad = || ConnectorError::Fatal(format!("`{message}` is not a Telegram message id"));
    let (chat, id) = message.as_str().rsplit_once(':').ok_or_else(bad)?;
    Ok((
        chat.trim().parse().map_err(|_| bad())?,
        id.trim().parse().map_err(|_| bad())?,
    ))
}

impl TelegramConnector {
    /// Sets the bot's reaction on `message` to `emoji`, or to none.
    pub(super) async fn own_reaction(
        &self,
        message: &MessageId,
        emoji: Option<&str>,
    ) -> Result<(), ConnectorError> {
        let (chat, id) = tg_message(message)?;
        let reaction: Vec<ReactionType> = emoji
            .filter(|e| Reaction::plausible_emoji(e))
            .map(|e| ReactionType::Emoji {
                emoji: e.to_string(),
            })
            .into_iter()
            .collect();
        self.bot
            .set_message_reaction(ChatId(chat), teloxide::types::MessageId(id))
            .reaction(reaction)
            .await
            .map(|_| ())
            .map_err(|e| errors::classify(&e, &self.config.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(old: serde_json::Value, new: serde_json::Value) -> MessageReactionUpdated {
        serde_json::from_value(json!({
            "chat": {"id": -5, "type": "group", "title": "g"},
            "message_id": 9,
            "user": {"id": 7, "is_bot": false, "first_name": "Ann"},
            "date": 1_700_000_000,
            "old_reaction": old, "new_reaction": new,
        }))
        .unwrap()
    }

    #[test]
    fn a_change_of_reaction_is_one_taken_back_and_one_added() {
        let up = json!([{"type": "emoji", "emoji": "👍"}]);
        let down = json!([{"type": "emoji", "emoji": "👎"}]);
        let r = from_update(&update(up, down));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].emoji.as_str(), r[0].added), ("👍", false));
        assert_eq!((r[1].emoji.as_str(), r[1].added), ("👎", true));
        assert_eq!(r[1].message.as_str(), "-5:9");
        assert_eq!((r[1].room.id.as_str(), r[1].user.id.as_str()), ("-5", "7"));
    }

    #[test]
    fn custom_and_paid_reactions_are_skipped() {
        let odd = json!([{"type": "custom_emoji", "custom_emoji_id": "1"}, {"type": "paid"}]);
        assert!(from_update(&update(json!([]), odd)).is_empty());
    }

    #[test]
    fn only_a_normalized_id_names_a_message() {
        assert_eq!(tg_message(&MessageId::new("-5:9")).unwrap(), (-5, 9));
        assert!(tg_message(&MessageId::new("9")).is_err());
        assert!(tg_message(&MessageId::new("a:b")).is_err());
    }
}
