//! Putting a reply in messages sent before (issue 32): the answer to an edited question
//! replaces the earlier reply, part by part, with `editMessageText`, and a part the new
//! answer no longer needs is deleted (`deleteMessage`). `send` calls it for a reply whose
//! `replaces` names those messages; everything else about delivery stays in `send`.

use std::time::Duration;
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, MessageId as TgMessageId};
use teloxide::{ApiError, RequestError};

use super::TelegramConnector;
use super::errors;
use super::send::message_number;
use crate::connector::ConnectorError;
use crate::model::MessageId;

/// How long one reply waits out 429s on its edits before handing the wait to the outbox.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(40);

impl TelegramConnector {
    /// Puts `text` in the bot's message `earlier` of `chat`, waiting out 429s. Text that is
    /// there already ("message is not modified") is done.
    pub(super) async fn edit_part(
        &self,
        chat: i64,
        earlier: &MessageId,
        text: &str,
        waited: &mut Duration,
    ) -> Result<MessageId, ConnectorError> {
        let Some(number) = message_number(earlier) else {
            return Err(ConnectorError::Fatal(format!(
                "`{earlier}` is not a Telegram message"
            )));
        };
        loop {
            self.pacer.wait_turn(chat).await;
            let error = match self
                .bot
                .edit_message_text(ChatId(chat), TgMessageId(number), text)
                .await
            {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => {
                    return Ok(earlier.clone());
                }
                Err(e) => e,
            };
            match &error {
                RequestError::RetryAfter(seconds) => {
                    let wait = seconds.duration().max(Duration::from_secs(1));
                    if *waited + wait > MAX_RATE_LIMIT_WAIT {
                        return Err(ConnectorError::RateLimited { retry_after: wait });
                    }
                    *waited += wait;
                    tokio::time::sleep(wait).await;
                }
                e => return Err(errors::classify(e, &self.config.token)),
            }
        }
    }

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
