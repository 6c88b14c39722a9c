//! A reply shown while it is written, in a private chat (issue 32): `sendMessageDraft`
//! (Bot API 10) streams an ephemeral preview of the message, and the reply's delivery
//! (`sendMessage`) persists it. A draft is never a message: a gateway that stops mid-stream
//! leaves nothing to finish or delete, and the reply driven again at the next start is
//! sent once. Groups get one message edited as it grows (`stream_edit`).
//!
//! teloxide 0.17 predates the method, so its payload is declared here and sent through
//! teloxide's own JSON request, with the bot's token, API root and error handling.

use serde::Serialize;
use teloxide::RequestError;
use teloxide::requests::{JsonRequest, Payload};
use teloxide::types::{MessageEntity, True};

use super::TelegramConnector;
use super::errors;
use super::prefix::Prefix;
use super::send::{MAX_MESSAGE_CHARS, Target};
use crate::connector::ConnectorError;
use crate::model::Outbound;

/// `sendMessageDraft`'s parameters.
#[derive(Debug, Clone, Serialize)]
struct SendMessageDraft {
    chat_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_thread_id: Option<i32>,
    /// Non-zero; changes to one draft id are animated.
    draft_id: i64,
    text: String,
    /// The persona's bold name in front, on a shared bot (`super::chorus`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    entities: Vec<MessageEntity>,
}

impl Payload for SendMessageDraft {
    type Output = True;
    const NAME: &'static str = "SendMessageDraft";
}

/// A stable, non-zero draft id for the reply `key`.
fn draft_id(key: &str) -> i64 {
    // FNV-1a: stable across processes, kept positive and non-zero.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::try_from(hash >> 2).unwrap_or(1).max(1)
}

/// Whether `room` is a private chat (a user's id is positive; groups' are negative).
pub(super) fn is_private(room: &crate::model::RoomRef) -> bool {
    Target::of(room).is_ok_and(|t| t.chat > 0 && t.topic.is_none())
}

impl TelegramConnector {
    /// Shows the reply so far as a draft (its first 4,096 characters, with the persona's
    /// `prefix` on a shared bot: the preview of the first message).
    pub(super) async fn draft(
        &self,
        reply: &Outbound,
        prefix: Option<&Prefix>,
    ) -> Result<(), ConnectorError> {
        let target = Target::of(&reply.room)?;
        if reply.text.trim().is_empty() {
            return Ok(());
        }
        let (text, entities) = match prefix {
            Some(p) => (p.say(&reply.text, MAX_MESSAGE_CHARS), p.entities()),
            None => (
                reply.text.chars().take(MAX_MESSAGE_CHARS).collect(),
                Vec::new(),
            ),
        };
        let payload = SendMessageDraft {
            chat_id: target.chat,
            message_thread_id: target.topic,
            draft_id: draft_id(&reply.key),
            text,
            entities,
        };
        self.pacer.wait_turn(target.chat).await;
        match JsonRequest::new(self.bot.clone(), payload).await {
            Ok(_) => Ok(()),
            Err(RequestError::RetryAfter(seconds)) => Err(ConnectorError::RateLimited {
                retry_after: seconds.duration(),
            }),
            Err(e) => Err(errors::classify(&e, &self.config.token)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Platform, RoomId, RoomRef};

    #[test]
    fn draft_ids_are_stable_positive_and_distinct() {
        assert_eq!(draft_id("ada:1"), draft_id("ada:1"));
        assert_ne!(draft_id("ada:1"), draft_id("ada:2"));
        assert!(draft_id("") > 0);
    }

    #[test]
    fn only_private_chats_get_drafts() {
        assert!(is_private(&RoomRef::new(
            Platform::Telegram,
            RoomId::new("501")
        )));
        assert!(!is_private(&RoomRef::new(
            Platform::Telegram,
            RoomId::new("-1005")
        )));
    }

    #[test]
    fn the_payload_is_the_bot_apis() {
        let p = SendMessageDraft {
            chat_id: 5,
            message_thread_id: None,
            draft_id: 9,
            text: "Hel".into(),
            entities: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"chat_id": 5, "draft_id": 9, "text": "Hel"})
        );
    }
}
