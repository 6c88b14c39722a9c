//! Putting a reply in messages sent before (issue 32): the answer to an edited question
//! replaces the earlier reply, part by part, with `editMessageText`, and a part the new
//! answer no longer needs is deleted (`deleteMessage`). `send` edits with the same
//! `edit_part` that finishes a reply shown live (`stream_edit`), for a reply whose
//! `replaces` names those messages; everything else about delivery stays in `send`.

use teloxide::prelude::Requester;
use teloxide::types::{ChatId, MessageId as TgMessageId};

use super::TelegramConnector;
use super::errors;
use super::send::message_number;
use crate::model::MessageId;

impl TelegramConnector {
    /// Deletes the bot's messages `ids` of `chat` that a shorter answer no longer needs.
    /// Best effort: a failure is logged, the reply is delivered.
    pub(super) async fn delete_parts(&self, chat: i64, ids: &[MessageId]) {
        for id in ids {
            let Some(number) = message_number(id) else {
                continue;
            };
            self.pacer.wait_turn(chat).await;
            if let Err(e) = self
                .bot
                .delete_message(ChatId(chat), TgMessageId(number))
                .await
            {
                let e = errors::classify(&e, &self.config.token);
                tracing::warn!(chat, error = %e, "could not delete a part of an earlier reply");
            }
        }
    }
}
