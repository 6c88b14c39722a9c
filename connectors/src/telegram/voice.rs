//! Voice out on Telegram (issue 32): `sendVoice`, a multipart upload of the Ogg Opus file the
//! gateway made, with its duration, a reply to the voice note that came in. The reply's text
//! follows as the usual message (`send`), not as a caption: a caption stops at 1,024
//! characters and an answer need not.
//!
//! Paced like a message, in the chat's turn; a 429 is not waited out (the voice note is best
//! effort: the text is what must arrive).

use teloxide::payloads::SendVoiceSetters;
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, InputFile, MessageId as TgMessageId, ReplyParameters, ThreadId};

use super::TelegramConnector;
use super::errors;
use super::normalize::message_id;
use super::send::{Target, message_number};
use crate::connector::{ConnectorError, VoiceNote};
use crate::model::MessageId;

impl TelegramConnector {
    pub(super) async fn deliver_voice(
        &self,
        note: &VoiceNote,
    ) -> Result<MessageId, ConnectorError> {
        let target = Target::of(&note.room)?;
        let chat_lock = self.chat_lock(target.chat);
        let _turn = chat_lock.lock().await;
        self.pacer.wait_turn(target.chat).await;
        let file = InputFile::memory(note.audio.clone()).file_name("voice.ogg");
        let mut request = self.bot.send_voice(ChatId(target.chat), file);
        let seconds = note.duration.as_secs_f64().ceil();
        if seconds >= 1.0 {
            request = request.duration(seconds as u32);
        }
        if let Some(topic) = target.topic {
            request = request.message_thread_id(ThreadId(TgMessageId(topic)));
        }
        if let Some(to) = note.reply_to.as_ref().and_then(message_number) {
            request = request.reply_parameters(
                ReplyParameters::new(TgMessageId(to)).allow_sending_without_reply(),
            );
        }
        match request.await {
            Ok(message) => Ok(message_id(message.chat.id.0, message.id.0)),
            Err(e) => Err(errors::classify(&e, &self.config.token)),
        }
    }
}
