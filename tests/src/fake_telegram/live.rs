//! The fake Telegram's methods for live replies and voice out (issue 32), as the Bot API
//! documents them (`/work/shared/specs/`, Bot API 10.1):
//!
//! - `editMessageText` (`chat_id`, `message_id`, `text`, `entities`): the bot's own message
//!   gets the new text (and entities) and the edited `Message` is answered; the same text
//!   and entities again are refused with "message is not modified", an unknown message
//!   with "message to edit not found", a text over 4,096 characters with "message is too
//!   long"; scripted 429s with `retry_after`.
//! - `deleteMessage` (`chat_id`, `message_id`): `true`, or "message to delete not found".
//! - `sendVoice` (`chat_id`, `voice` as an upload, `caption` up to 1,024 characters,
//!   `duration`, `reply_parameters`, `message_thread_id`): a `Message` with a `voice`.
//!
//! An edit changes the text of the matching [`super::SentMessage`] too, so
//! `sent_messages` reads as the chat does now.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::{
    FakeTelegram, MAX_TEXT_CHARS, Shared, api_error, int, now, ok, string, structured,
    too_many_requests,
};

/// Telegram's limit on a caption, in characters.
pub const MAX_CAPTION_CHARS: usize = 1024;

/// An `editMessageText` the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: String,
    /// `entities` as sent with the new text; empty when none were.
    pub entities: Vec<Value>,
    /// When the fake took it (edit pacing is checked on these).
    pub at: Instant,
}

/// A `sendVoice` the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceSent {
    pub message_id: i64,
    pub chat_id: i64,
    /// The uploaded file's bytes.
    pub voice: Vec<u8>,
    pub caption: Option<String>,
    pub duration: Option<i64>,
    pub reply_to_message_id: Option<i64>,
}

#[derive(Default)]
pub(super) struct LiveState {
    edits: Vec<Edit>,
    /// Scripted `editMessageText` outcomes, one per call: `Some(retry_after)` answers 429.
    scripted_edits: VecDeque<Option<u64>>,
    rate_limited_edits: usize,
    deleted: Vec<(i64, i64)>,
    voices: Vec<VoiceSent>,
}

impl FakeTelegram {
    /// Every edit the fake accepted, in order.
    pub fn edits(&self) -> Vec<Edit> {
        self.shared.lock().live.edits.clone()
    }

    /// After `ok` more `editMessageText` calls go through, the `count` following ones get
    /// 429 with `retry_after` seconds.
    pub fn fail_edits_after(&self, ok: usize, count: usize, retry_after: u64) {
        let mut inner = self.shared.lock();
        let script = &mut inner.live.scripted_edits;
        script.extend(std::iter::repeat_n(None, ok));
        script.extend(std::iter::repeat_n(Some(retry_after), count));
    }

    /// How many edits were answered 429.
    pub fn rate_limited_edits(&self) -> usize {
        self.shared.lock().live.rate_limited_edits
    }

    /// `(chat, message)` of each message the bot deleted.
    pub fn deleted(&self) -> Vec<(i64, i64)> {
        self.shared.lock().live.deleted.clone()
    }

    /// Every voice note the bot sent, in order.
    pub fn voices(&self) -> Vec<VoiceSent> {
        self.shared.lock().live.voices.clone()
    }

    /// Waits until the chat's messages from the bot, as they read now, satisfy `check`.
    pub async fn try_wait_for_state(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&[super::SentMessage]) -> bool,
    ) -> Result<Vec<super::SentMessage>, String> {
        self.shared
            .wait_for(timeout, |i| check(&i.sent).then(|| i.sent.clone()))
            .await
            .ok_or_else(|| {
                let seen: Vec<String> = self.sent_messages().into_iter().map(|m| m.text).collect();
                crate::wait::report(self, format!("{what} (the chat reads {seen:?})"), timeout)
            })
    }

    /// Waits until at least `n` edits were accepted; returns them all.
    pub async fn try_wait_for_edits(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Edit>, String> {
        self.shared
            .wait_for(timeout, |i| {
                (i.live.edits.len() >= n).then(|| i.live.edits.clone())
            })
            .await
            .ok_or_else(|| crate::wait::report(self, format!("{n} edit(s)"), timeout))
    }

    /// Waits until at least `n` voice notes were sent.
    pub async fn try_wait_for_voices(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<VoiceSent>, String> {
        self.shared
            .wait_for(timeout, |i| {
                (i.live.voices.len() >= n).then(|| i.live.voices.clone())
            })
            .await
            .ok_or_else(|| crate::wait::report(self, format!("{n} voice note(s)"), timeout))
    }
}

pub(super) fn edit_message_text(shared: &Shared, p: &Value) -> Response {
    let mut inner = shared.lock();
    if let Some(Some(retry_after)) = inner.live.scripted_edits.pop_front() {
        inner.live.rate_limited_edits += 1;
        return too_many_requests(retry_after);
    }
    let (Some(chat_id), Some(message_id)) = (int(p, "chat_id"), int(p, "message_id")) else {
        return api_error(400, "Bad Request: message identifier is not specified");
    };
    let text = string(p, "text").unwrap_or_default();
    if text.trim().is_empty() {
        return api_error(400, "Bad Request: message text is empty");
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return api_error(400, "Bad Request: message is too long");
    }
    let entities = match super::messages::entities(p) {
        Ok(list) => list,
        Err(refused) => return api_error(400, &refused),
    };
    let bot_id = shared.bot_id;
    let Some(message) = inner.messages.get_mut(&(chat_id, message_id)) else {
        return api_error(400, "Bad Request: message to edit not found");
    };
    if message["from"]["id"].as_i64() != Some(bot_id) {
        return api_error(400, "Bad Request: message can't be edited");
    }
    let kept = message
        .get("entities")
        .cloned()
        .unwrap_or_else(|| json!([]));
    if message["text"].as_str() == Some(text.as_str()) && kept == json!(entities) {
        return api_error(
            400,
            "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        );
    }
    message["text"] = json!(text);
    if let Some(fields) = message.as_object_mut() {
        fields.remove("entities");
        if !entities.is_empty() {
            fields.insert("entities".into(), json!(entities));
        }
    }
    message["edit_date"] = json!(now());
    let answer = message.clone();
    if let Some(sent) = inner
        .sent
        .iter_mut()
        .find(|m| m.chat_id == chat_id && m.message_id == message_id)
    {
        sent.text = text.clone();
        sent.entities = entities.clone();
    }
    inner.live.edits.push(Edit {
        chat_id,
        message_id,
        text,
        entities,
        at: Instant::now(),
    });
    ok(answer)
}

pub(super) fn delete_message(shared: &Shared, p: &Value) -> Response {
    let mut inner = shared.lock();
    let (Some(chat_id), Some(message_id)) = (int(p, "chat_id"), int(p, "message_id")) else {
        return api_error(400, "Bad Request: message identifier is not specified");
    };
    if inner.messages.remove(&(chat_id, message_id)).is_none() {
        return api_error(400, "Bad Request: message to delete not found");
    }
    inner
        .sent
        .retain(|m| !(m.chat_id == chat_id && m.message_id == message_id));
    inner.live.deleted.push((chat_id, message_id));
    ok(json!(true))
}

pub(super) fn send_voice(shared: &Shared, p: &Value) -> Response {
    let Some(chat_id) = int(p, "chat_id") else {
        return api_error(400, "Bad Request: chat_id is empty");
    };
    // The file is the `voice` part, or (as teloxide sends it) the part `voice` names with
    // `attach://<name>`, which the Bot API accepts for any upload.
    let part = match p.get("voice") {
        Some(Value::String(s)) => s.strip_prefix("attach://").and_then(|name| p.get(name)),
        other => other,
    };
    let voice = match part.and_then(|v| v.get("base64")?.as_str()) {
        Some(data) => match base64::engine::general_purpose::STANDARD.decode(data) {
            Ok(bytes) if !bytes.is_empty() => bytes,
            _ => return api_error(400, "Bad Request: file must be non-empty"),
        },
        None => return api_error(400, "Bad Request: there is no voice in the request"),
    };
    let caption = string(p, "caption");
    if caption
        .as_deref()
        .is_some_and(|c| c.chars().count() > MAX_CAPTION_CHARS)
    {
        return api_error(400, "Bad Request: message caption is too long");
    }
    let reply_to = structured(p, "reply_parameters").and_then(|r| int(&r, "message_id"));
    let duration = int(p, "duration");
    let mut inner = shared.lock();
    let message_id = inner.take_message_id(chat_id);
    let mut message = json!({
        "message_id": message_id,
        "from": shared.bot_user(),
        "chat": inner.chat(chat_id),
        "date": now(),
        "voice": {
            "file_id": format!("voice-{chat_id}-{message_id}"),
            "file_unique_id": format!("v{message_id}"),
            "duration": duration.unwrap_or(0),
            "mime_type": "audio/ogg",
            "file_size": voice.len(),
        },
    });
    if let Some(c) = &caption {
        message["caption"] = json!(c);
    }
    inner
        .messages
        .insert((chat_id, message_id), message.clone());
    inner.live.voices.push(VoiceSent {
        message_id,
        chat_id,
        voice,
        caption,
        duration,
        reply_to_message_id: reply_to,
    });
    ok(message)
}
