//! Delivering a reply: split at 4096 characters, the first part threaded as a reply, every
//! part paced and sent in order, a 429 waited out and the same part sent again.
//!
//! Text goes out plain (no `parse_mode`), so formatting can never make Telegram refuse it;
//! a persona on a shared bot adds its bold name in front through `entities` (`chorus`).
//! Replies to one chat never interleave (a lock per chat). What was sent of a reply is
//! remembered by its outbound key: when the outbox retries after an error, the reply
//! continues after the last part that got through, and a reply already delivered is not
//! sent again.

use crate::sync::Locked;
use std::sync::Arc;
use std::time::Duration;
use teloxide::RequestError;
use teloxide::payloads::{SendChatActionSetters, SendMessageSetters};
use teloxide::prelude::Requester;
use teloxide::types::{ChatAction, ChatId, MessageId as TgMessageId, ReplyParameters, ThreadId};

use super::TelegramConnector;
use super::errors;
use super::normalize::message_id;
use super::prefix::{Prefix, parts};
use crate::connector::{ConnectorError, Delivery};
use crate::model::{MessageId, Outbound, RoomRef};

pub(crate) use super::prefix::MAX_MESSAGE_CHARS;

/// One message's text, and the persona's prefix it starts with on a shared bot (its
/// entities go with it).
pub(super) type Said<'a> = (&'a str, Option<&'a Prefix>);

/// How long one `send` waits out 429s before handing the wait to the outbox (which holds a
/// claim on the reply for a minute).
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(40);

/// Where a room's messages go: the chat, and the forum topic in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub chat: i64,
    pub topic: Option<i32>,
}

impl Target {
    /// Reads a room the connector made: `chat`, or `chat:topic` with `send_to` = `chat`.
    pub(crate) fn of(room: &RoomRef) -> Result<Self, ConnectorError> {
        let id = room.id.as_str();
        let (chat, topic) = match id.split_once(':') {
            Some((chat, topic)) => (chat, Some(topic)),
            None => (id, None),
        };
        let chat = room.send_to.as_deref().unwrap_or(chat);
        let bad = || ConnectorError::Fatal(format!("`{id}` is not a Telegram room"));
        Ok(Self {
            chat: chat.trim().parse().map_err(|_| bad())?,
            topic: topic
                .map(|t| t.trim().parse::<i32>())
                .transpose()
                .map_err(|_| bad())?,
        })
    }
}

/// The Telegram message id in a normalized `chat:message` id.
pub(super) fn message_number(id: &MessageId) -> Option<i32> {
    id.as_str().rsplit(':').next()?.trim().parse().ok()
}

impl TelegramConnector {
    /// Delivers `reply`, as the bot or, with a `prefix`, as a persona on a shared bot
    /// (`super::chorus`).
    pub(super) async fn deliver_as(
        &self,
        reply: &Outbound,
        prefix: Option<&Prefix>,
    ) -> Result<Delivery, ConnectorError> {
        let mut target = Target::of(&reply.room)?;
        let parts = parts(&reply.text, prefix);
        if parts.is_empty() {
            return Ok(Delivery::default());
        }
        let chat_lock = self.chat_lock(target.chat);
        let _turn = chat_lock.lock().await;
        if let Some(done) = self.delivered.locked().get(&reply.key) {
            return Ok(done);
        }
        // A group reply shown live (`stream_edit`) is finished in its messages.
        if let Some(done) = self
            .finish_shown(&mut target, reply, (&parts, prefix), MAX_RATE_LIMIT_WAIT)
            .await
        {
            return done;
        }
        let mut sent = self
            .progress
            .locked()
            .get(&reply.key)
            .cloned()
            .unwrap_or_default();
        let mut waited = Duration::ZERO;
        for (index, part) in parts.iter().enumerate().skip(sent.len()) {
            let reply_to = if index == 0 {
                reply.reply_to.as_ref().and_then(message_number)
            } else {
                None
            };
            // The answer to an edited question goes in the earlier reply's messages.
            let said = (part.as_str(), prefix);
            let put = match reply.replaces.get(index) {
                Some(earlier) => self
                    .edit_part(&target, earlier, said, MAX_RATE_LIMIT_WAIT, &mut waited)
                    .await
                    .map(|()| earlier.clone()),
                None => {
                    self.send_part(
                        &mut target,
                        said,
                        reply_to,
                        &mut waited,
                        MAX_RATE_LIMIT_WAIT,
                    )
                    .await
                }
            };
            let id = match put {
                Ok(id) => id,
                Err(e) => {
                    if !e.is_retryable() {
                        // The outbox gives up on this reply: forget what was sent of it.
                        self.progress.locked().remove(&reply.key);
                    }
                    return Err(e);
                }
            };
            sent.push(id);
            self.progress
                .locked()
                .insert(reply.key.clone(), sent.clone());
        }
        if let Some(unneeded) = reply.replaces.get(parts.len()..) {
            self.delete_parts(target.chat, unneeded).await;
        }
        self.progress.locked().remove(&reply.key);
        let delivery = Delivery { message_ids: sent };
        self.delivered
            .locked()
            .insert(reply.key.clone(), delivery.clone());
        Ok(delivery)
    }

    pub(super) fn chat_lock(&self, chat: i64) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.chat_locks.locked();
        if locks.len() > 1024 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(chat).or_default().clone()
    }

    /// Sends one part until Telegram takes it, waiting out 429s up to `patience` in all.
    pub(super) async fn send_part(
        &self,
        target: &mut Target,
        (text, prefix): Said<'_>,
        reply_to: Option<i32>,
        waited: &mut Duration,
        patience: Duration,
    ) -> Result<MessageId, ConnectorError> {
        loop {
            self.pacer.wait_turn(target.chat).await;
            let mut request = self.bot.send_message(ChatId(target.chat), text);
            if let Some(prefix) = prefix {
                request = request.entities(prefix.entities());
            }
            if let Some(topic) = target.topic {
                request = request.message_thread_id(ThreadId(TgMessageId(topic)));
            }
            if let Some(to) = reply_to {
                request = request.reply_parameters(
                    ReplyParameters::new(TgMessageId(to)).allow_sending_without_reply(),
                );
            }
            let error = match request.await {
                Ok(message) => return Ok(message_id(message.chat.id.0, message.id.0)),
                Err(e) => e,
            };
            match &error {
                RequestError::RetryAfter(seconds) => {
                    let wait = seconds.duration().max(Duration::from_secs(1));
                    if *waited + wait > patience {
                        tracing::warn!(retry_after = ?wait, "Telegram keeps rate limiting; the outbox will retry the rest of the reply");
                        return Err(ConnectorError::RateLimited { retry_after: wait });
                    }
                    tracing::debug!(retry_after = ?wait, chat = target.chat, "429 from Telegram; sending the same part again after the wait");
                    *waited += wait;
                    tokio::time::sleep(wait).await;
                }
                RequestError::MigrateToChatId(to) => {
                    tracing::info!(
                        from = target.chat,
                        to = to.0,
                        "the group became a supergroup; sending there"
                    );
                    target.chat = to.0;
                }
                e if target.topic.is_some() && errors::is_thread_not_found(e) => {
                    tracing::info!(
                        chat = target.chat,
                        "the forum topic is gone; sending to the chat"
                    );
                    target.topic = None;
                }
                e => return Err(errors::classify(e, &self.config.token)),
            }
        }
    }

    pub(super) async fn show_typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        let target = Target::of(room)?;
        let mut request = self
            .bot
            .send_chat_action(ChatId(target.chat), ChatAction::Typing);
        if let Some(topic) = target.topic {
            request = request.message_thread_id(ThreadId(TgMessageId(topic)));
        }
        request
            .await
            .map(|_| ())
            .map_err(|e| errors::classify(&e, &self.config.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Platform, RoomId};
    use crate::split::{chars, split_text};

    #[test]
    fn targets_of_rooms() {
        let plain = RoomRef::new(Platform::Telegram, RoomId::new("-1005"));
        assert_eq!(
            Target::of(&plain).unwrap(),
            Target {
                chat: -1005,
                topic: None
            }
        );
        let mut topic = RoomRef::new(Platform::Telegram, RoomId::new("-1005:77"));
        topic.send_to = Some("-1005".into());
        assert_eq!(
            Target::of(&topic).unwrap(),
            Target {
                chat: -1005,
                topic: Some(77)
            }
        );
        let bad = RoomRef::new(Platform::Telegram, RoomId::new("general"));
        assert!(matches!(Target::of(&bad), Err(ConnectorError::Fatal(_))));
    }

    #[test]
    fn reply_targets() {
        assert_eq!(message_number(&MessageId::new("-1005:42")), Some(42));
        assert_eq!(message_number(&MessageId::new("42")), Some(42));
        assert_eq!(message_number(&MessageId::new("x")), None);
    }

    #[test]
    fn a_long_reply_splits_at_4096_characters() {
        let text = "Ça va. ".repeat(1300); // 9100 characters, 2-byte ones among them
        let parts = split_text(&text, MAX_MESSAGE_CHARS, chars);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| chars(p) <= MAX_MESSAGE_CHARS));
        assert_eq!(
            parts.join(" ").split_whitespace().count(),
            text.split_whitespace().count()
        );
    }
}
