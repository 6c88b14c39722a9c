//! A reply shown while it is written, in a group (issue 32, docs/media.md "Streaming"): the
//! first text is posted with `sendMessage` (a reply to the question), later text edits that
//! message (`editMessageText`), past 4,096 characters in further messages; the reply's
//! delivery then edits each message to its final text, so the last state of the chat is the
//! whole answer, sent once. On a shared bot every edit keeps the persona's bold name in
//! front (`chorus`). Private chats get drafts instead (`draft`), which need none of
//! this.
//!
//! Edits count against the chat's pace like messages (`pace`: one a second in a chat, twenty
//! a minute in a group), so a stream never costs the group its replies. A 429 on an edit is
//! not waited out while showing (the gateway shows the latest text once it may); the
//! delivery waits out its own 429s, so the final text still arrives, once.
//!
//! The shown messages' ids are kept in the connector's state, so that a gateway killed
//! mid-stream and driven again edits them rather than posting a second copy. Telegram has
//! no nonce: a crash between a `sendMessage` and the state write (one database write) can
//! still leave one stray message.

use crate::sync::Locked;
use std::time::Duration;
use teloxide::payloads::EditMessageTextSetters;
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, MessageId as TgMessageId};
use teloxide::{ApiError, RequestError};

use super::TelegramConnector;
use super::errors;
use super::prefix::{Prefix, parts};
use super::send::{Said, Target, message_number};
use crate::connector::{ConnectorError, Delivery};
use crate::model::{MessageId, Outbound};

/// A reply's parts, and the persona's prefix each starts with on a shared bot.
pub(super) type Parts<'a> = (&'a [String], Option<&'a Prefix>);

/// What of a reply is in the chat: its messages' ids and, as far as this run knows, their
/// texts (empty after a restart: every part is then edited once).
#[derive(Debug, Default, Clone)]
pub(super) struct Shown {
    pub(super) ids: Vec<MessageId>,
    texts: Vec<String>,
}

impl TelegramConnector {
    /// Shows the group reply written so far: its parts posted or edited in place.
    pub(super) async fn show_edits(
        &self,
        reply: &Outbound,
        prefix: Option<&Prefix>,
    ) -> Result<(), ConnectorError> {
        let mut target = Target::of(&reply.room)?;
        let parts = parts(&reply.text, prefix);
        if parts.is_empty() {
            return Ok(());
        }
        let chat_lock = self.chat_lock(target.chat);
        let _turn = chat_lock.lock().await;
        if self.delivered.locked().get(&reply.key).is_some() {
            return Ok(());
        }
        let known = self.shown.locked().remove(&reply.key);
        let mut shown = match known {
            Some(shown) => shown,
            // After a restart: the messages an earlier run showed of this reply.
            None => Shown {
                ids: self.saved_live(&reply.key).await,
                texts: Vec::new(),
            },
        };
        let before = shown.ids.len();
        let result = self
            .put_parts(
                &mut target,
                reply,
                (&parts, prefix),
                &mut shown,
                Duration::ZERO,
            )
            .await;
        if shown.ids.len() != before {
            self.save_live(&reply.key, &shown.ids).await;
        }
        let mut all = self.shown.locked();
        if all.len() >= 1024 {
            all.clear();
        }
        all.insert(reply.key.clone(), shown);
        result
    }

    /// Finishes a reply that was shown live in its messages, edited to the final `parts`
    /// (the chat's lock is held). `None`: nothing of it was shown, deliver it as usual.
    pub(super) async fn finish_shown(
        &self,
        target: &mut Target,
        reply: &Outbound,
        (parts, prefix): Parts<'_>,
        patience: Duration,
    ) -> Option<Result<Delivery, ConnectorError>> {
        let mut shown = self.shown.locked().remove(&reply.key)?;
        if let Err(e) = self
            .put_parts(target, reply, (parts, prefix), &mut shown, patience)
            .await
        {
            self.shown.locked().insert(reply.key.clone(), shown);
            return Some(Err(e));
        }
        // A live text longer than the final one (a model call that started over) left
        // messages the reply no longer has.
        for extra in shown.ids.split_off(parts.len()) {
            self.delete_shown(target.chat, &extra).await;
        }
        self.forget_live(&reply.key).await;
        let delivery = Delivery {
            message_ids: shown.ids,
        };
        self.delivered
            .locked()
            .insert(reply.key.clone(), delivery.clone());
        Some(Ok(delivery))
    }

    /// Deletes what was shown of reply `key` (its turn failed; no reply will finish it).
    pub(super) async fn unshow(&self, key: &str) {
        let Some(shown) = self.shown.locked().remove(key) else {
            return;
        };
        for id in &shown.ids {
            if let Some(chat) = id.as_str().split(':').next().and_then(|c| c.parse().ok()) {
                self.delete_shown(chat, id).await;
            }
        }
        self.forget_live(key).await;
    }

    async fn delete_shown(&self, chat: i64, id: &MessageId) {
        let Some(message) = message_number(id) else {
            return;
        };
        self.pacer.wait_turn(chat).await;
        if let Err(e) = self
            .bot
            .delete_message(ChatId(chat), TgMessageId(message))
            .await
        {
            tracing::warn!(chat, error = %errors::classify(&e, &self.config.token), "could not delete a streamed message");
        }
    }

    /// Puts each part of a reply in its message: edited where one was shown already (and
    /// differs), posted otherwise. 429s are waited out up to `patience`.
    async fn put_parts(
        &self,
        target: &mut Target,
        reply: &Outbound,
        (parts, prefix): Parts<'_>,
        shown: &mut Shown,
        patience: Duration,
    ) -> Result<(), ConnectorError> {
        let mut waited = Duration::ZERO;
        for (index, part) in parts.iter().enumerate() {
            if shown.texts.get(index) == Some(part) {
                continue;
            }
            let said = (part.as_str(), prefix);
            match shown.ids.get(index) {
                Some(id) => {
                    self.edit_part(target, id, said, patience, &mut waited)
                        .await?
                }
                None => {
                    let reply_to = match index {
                        0 => reply.reply_to.as_ref().and_then(message_number),
                        _ => None,
                    };
                    let id = self
                        .send_part(target, said, reply_to, &mut waited, patience)
                        .await?;
                    shown.ids.push(id);
                }
            }
            if shown.texts.len() <= index {
                shown.texts.resize(index + 1, String::new());
            }
            shown.texts[index] = part.clone();
        }
        Ok(())
    }

    /// Edits one of the bot's messages to `text`, waiting out 429s up to `patience`: a
    /// message shown live, or an earlier reply whose question was edited (`send`). An edit
    /// that changes nothing (the text is already there, after a restart) is done.
    pub(super) async fn edit_part(
        &self,
        target: &Target,
        id: &MessageId,
        (text, prefix): Said<'_>,
        patience: Duration,
        waited: &mut Duration,
    ) -> Result<(), ConnectorError> {
        let message = message_number(id)
            .ok_or_else(|| ConnectorError::Fatal(format!("`{id}` is not a Telegram message")))?;
        loop {
            self.pacer.wait_turn(target.chat).await;
            let mut request =
                self.bot
                    .edit_message_text(ChatId(target.chat), TgMessageId(message), text);
            if let Some(prefix) = prefix {
                request = request.entities(prefix.entities());
            }
            let error = match request.await {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => return Ok(()),
                Err(e) => e,
            };
            let RequestError::RetryAfter(seconds) = &error else {
                return Err(errors::classify(&error, &self.config.token));
            };
            let wait = seconds.duration().max(Duration::from_secs(1));
            if *waited + wait > patience {
                return Err(ConnectorError::RateLimited { retry_after: wait });
            }
            tracing::debug!(retry_after = ?wait, chat = target.chat, "429 on an edit; editing again after the wait");
            *waited += wait;
            tokio::time::sleep(wait).await;
        }
    }

    /// The messages shown live of reply `key` by an earlier run, from the connector's state.
    async fn saved_live(&self, key: &str) -> Vec<MessageId> {
        let valid = |id: &str| message_number(&MessageId::from(id)).is_some();
        crate::shown::saved(&*self.state, key, valid).await
    }

    async fn save_live(&self, key: &str, ids: &[MessageId]) {
        crate::shown::save(&*self.state, key, ids).await;
    }

    async fn forget_live(&self, key: &str) {
        crate::shown::forget(&*self.state, key).await;
    }
}
