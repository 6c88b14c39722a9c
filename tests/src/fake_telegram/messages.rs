//! What the bot sends through the fake Telegram: `sendMessage` (the 4,096-character limit,
//! replies, topics, scripted 429s and refusals), `sendMessageDraft`, and chat actions.

use std::time::Duration;

use axum::response::Response;
use serde_json::{Value, json};

use super::{
    ChatActionRecord, FakeTelegram, Inner, MAX_TEXT_CHARS, ScriptedSend, SentMessage, Shared,
    api_error, boolean, int, now, ok, string, structured, too_many_requests,
};
use crate::wait;

impl FakeTelegram {
    /// Every message the fake accepted from `sendMessage`, in order.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// `sendMessage` calls, accepted or refused.
    pub fn send_attempts(&self) -> usize {
        self.shared.lock().send_attempts
    }

    /// Waits until at least `n` messages were sent; returns them all.
    pub async fn try_wait_for_sent(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<SentMessage>, String> {
        self.shared
            .wait_for(timeout, |i| (i.sent.len() >= n).then(|| i.sent.clone()))
            .await
            .ok_or_else(|| {
                let expected = format!(
                    "the fake Telegram API to get {n} message(s) (it got {})",
                    self.sent_messages().len()
                );
                wait::report(self, expected, timeout)
            })
    }

    /// Like [`Self::try_wait_for_sent`], panicking with a diagnostic on timeout.
    pub async fn wait_for_sent(&self, n: usize, timeout: Duration) -> Vec<SentMessage> {
        self.try_wait_for_sent(n, timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The next `count` sendMessage calls get 429 with `retry_after` seconds.
    pub fn fail_next_sends(&self, count: usize, retry_after: u64) {
        self.fail_sends_after(0, count, retry_after);
    }

    /// After `ok` more sendMessage calls go through, the `count` following ones get 429
    /// with `retry_after` seconds.
    pub fn fail_sends_after(&self, ok: usize, count: usize, retry_after: u64) {
        let mut inner = self.shared.lock();
        inner.scripted_sends.extend(std::iter::repeat_n(None, ok));
        inner.scripted_sends.extend(std::iter::repeat_n(
            Some(ScriptedSend::RetryAfter(retry_after)),
            count,
        ));
    }

    /// The next sendMessage call is refused with the Bot API's error `code` and
    /// `description` (e.g. 403 "Forbidden: bot was blocked by the user", or 500 "Internal
    /// Server Error"), after any failures already scripted.
    pub fn refuse_next_send(&self, code: u16, description: &str) {
        self.shared
            .lock()
            .scripted_sends
            .push_back(Some(ScriptedSend::Error(code, description.to_string())));
    }

    pub fn chat_actions(&self) -> Vec<ChatActionRecord> {
        self.shared.lock().actions.clone()
    }

    /// Message `message_id` of `chat` as the chat holds it now (pushed, or sent by the bot
    /// with its entities and edits): what a reply's `reply_to_message` carries.
    pub fn message(&self, chat: i64, message_id: i64) -> Option<Value> {
        self.shared
            .lock()
            .messages
            .get(&(chat, message_id))
            .cloned()
    }
}

impl Inner {
    pub(super) fn take_message_id(&mut self, chat: i64) -> i64 {
        let next = self.next_message_id.entry(chat).or_insert(1);
        let id = *next;
        *next += 1;
        id
    }
}

/// `sendMessageDraft` (Bot API 10, issue 32): an ephemeral preview in a private chat;
/// `true`, and the call is kept in [`FakeTelegram::calls`]. A group's chat id, a zero
/// `draft_id` or a text over 4,096 characters is refused as the Bot API does.
pub(super) fn send_message_draft(p: &Value) -> Response {
    let Some(chat_id) = int(p, "chat_id") else {
        return api_error(400, "Bad Request: chat_id is empty");
    };
    if chat_id <= 0 {
        return api_error(400, "Bad Request: drafts can be sent only to private chats");
    }
    if int(p, "draft_id").unwrap_or(0) == 0 {
        return api_error(400, "Bad Request: draft_id must be non-zero");
    }
    if string(p, "text").unwrap_or_default().chars().count() > MAX_TEXT_CHARS {
        return api_error(400, "Bad Request: message is too long");
    }
    if let Err(refused) = entities(p) {
        return api_error(400, &refused);
    }
    ok(json!(true))
}

/// A call's `entities`, as the Bot API takes them: an array of MessageEntity objects, each
/// with a string `type` and integer `offset` and `length` (UTF-16 code units). Anything
/// else is refused as Telegram refuses it (the error's description).
pub(super) fn entities(p: &Value) -> Result<Vec<Value>, String> {
    if p.get("entities").is_none() {
        return Ok(Vec::new());
    }
    let refuse = |why: &str| format!("Bad Request: can't parse entities: {why}");
    let Some(Value::Array(list)) = structured(p, "entities") else {
        return Err(refuse("entities must be an array"));
    };
    for entity in &list {
        let typed = entity.get("type").and_then(Value::as_str).is_some();
        let placed = ["offset", "length"]
            .iter()
            .all(|k| entity.get(*k).and_then(Value::as_u64).is_some());
        if !typed || !placed {
            return Err(refuse("an entity needs a type, an offset and a length"));
        }
    }
    Ok(list)
}

/// The message `reply_parameters` (`rp`) names in `chat_id`'s chat or its own `chat_id`'s:
/// one that does not exist is refused (the error's description), unless
/// `allow_sending_without_reply`.
fn replied(inner: &Inner, rp: Option<&Value>, chat_id: i64) -> Result<Option<Value>, String> {
    let Some(rp) = rp else {
        return Ok(None);
    };
    let target = int(rp, "message_id");
    let reply_chat = int(rp, "chat_id").unwrap_or(chat_id);
    match target.and_then(|m| inner.messages.get(&(reply_chat, m)).cloned()) {
        Some(m) => Ok(Some(m)),
        None if boolean(rp, "allow_sending_without_reply") => Ok(None),
        None => Err("Bad Request: message to be replied not found".into()),
    }
}

pub(super) fn send_message(shared: &Shared, p: &Value) -> Response {
    let mut inner = shared.lock();
    inner.send_attempts += 1;
    match inner.scripted_sends.pop_front() {
        Some(Some(ScriptedSend::RetryAfter(retry_after))) => {
            return too_many_requests(retry_after);
        }
        Some(Some(ScriptedSend::Error(code, description))) => {
            return api_error(code, &description);
        }
        Some(None) | None => {}
    }
    let Some(chat_id) = int(p, "chat_id") else {
        return match string(p, "chat_id") {
            Some(_) => api_error(400, "Bad Request: chat not found"),
            None => api_error(400, "Bad Request: chat_id is empty"),
        };
    };
    let text = string(p, "text").unwrap_or_default();
    if text.trim().is_empty() {
        return api_error(400, "Bad Request: message text is empty");
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return api_error(400, "Bad Request: message is too long");
    }
    if chat_id < 0 && inner.left.contains(&chat_id) {
        return api_error(403, "Forbidden: bot is not a member of the supergroup chat");
    }
    let thread = int(p, "message_thread_id");
    let chat = inner.chat(chat_id);
    let is_forum = chat.get("is_forum").and_then(Value::as_bool) == Some(true);
    if let Some(t) = thread
        && is_forum
        && !inner.topics.contains(&(chat_id, t))
    {
        return api_error(400, "Bad Request: message thread not found");
    }
    let reply_parameters = structured(p, "reply_parameters");
    let replied = replied(&inner, reply_parameters.as_ref(), chat_id);
    let (entities, reply_to) = match (entities(p), replied) {
        (Ok(entities), Ok(reply_to)) => (entities, reply_to),
        (Err(refused), _) | (_, Err(refused)) => return api_error(400, &refused),
    };
    let message_id = inner.take_message_id(chat_id);
    let mut message = json!({
        "message_id": message_id,
        "from": shared.bot_user(),
        "chat": chat,
        "date": now(),
        "text": text,
    });
    if let Some(t) = thread {
        message["message_thread_id"] = json!(t);
        if is_forum {
            message["is_topic_message"] = json!(true);
        }
    }
    if !entities.is_empty() {
        message["entities"] = json!(entities);
    }
    inner
        .messages
        .insert((chat_id, message_id), message.clone());
    if let Some(r) = reply_to {
        message["reply_to_message"] = r;
    }
    inner.sent.push(SentMessage {
        message_id,
        chat_id,
        text,
        message_thread_id: thread,
        reply_parameters,
        parse_mode: string(p, "parse_mode"),
        entities,
    });
    ok(message)
}
