//! Updates on the fake Telegram: the queue a test pushes to (ids, message ids and dates
//! assigned, chats and topics learned, kinds the bot did not ask for dropped), `getUpdates`
//! with its offset rules (an update is confirmed once a call asks for a higher offset; a
//! call with nothing new waits up to its `timeout`), and webhooks (`setWebhook`, delivery
//! with the secret token).

use std::time::Duration;

use axum::response::Response;
use serde_json::{Value, json};

use super::{
    DEFAULT_EXCLUDED_UPDATES, FakeTelegram, Inner, Shared, WebhookRegistration, api_error, int,
    now, ok, ok_described, string, structured,
};
use crate::wait;

impl FakeTelegram {
    /// Queues an update. `update_id` is assigned when absent, and so are a message's
    /// `message_id` and `date`. Returns the update id. An update whose kind the bot did not
    /// ask for (`allowed_updates`) is dropped, as Telegram does.
    pub fn push_update(&self, update: Value) -> i64 {
        let update = self.push(update);
        update["update_id"].as_i64().unwrap_or_default()
    }

    /// Queues `{"message": message}` and returns the message's id (assigned when absent).
    pub fn push_message(&self, message: Value) -> i64 {
        let update = self.push(json!({ "message": message }));
        update["message"]["message_id"]
            .as_i64()
            .expect("a message pushed with a chat gets a message_id")
    }

    fn push(&self, update: Value) -> Value {
        let mut update = match update {
            Value::Object(map) => map,
            other => panic!("an update is a JSON object, not {other}"),
        };
        let stored = {
            let mut inner = self.shared.lock();
            match update.get("update_id").and_then(Value::as_i64) {
                Some(id) => inner.next_update_id = inner.next_update_id.max(id + 1),
                None => {
                    let id = inner.next_update_id;
                    inner.next_update_id += 1;
                    update.insert("update_id".into(), json!(id));
                }
            }
            for (kind, body) in update.iter_mut() {
                if kind == "update_id" {
                    continue;
                }
                inner.learn(body);
            }
            let update = Value::Object(update);
            if inner.admits(&update) {
                inner.queue.push_back(update.clone());
            } else {
                inner.dropped.push(update.clone());
            }
            update
        };
        self.shared.changed();
        stored
    }

    /// Queues an update whatever its kind, even one the bot did not ask for: the Bot API
    /// documents that updates created before `allowed_updates` changed may still arrive.
    /// For updates the client cannot read (a `message_reaction` with neither `user` nor
    /// `actor_chat`). `update_id` is assigned when absent; returns it.
    pub fn push_unrequested(&self, update: Value) -> i64 {
        let mut update = match update {
            Value::Object(map) => map,
            other => panic!("an update is a JSON object, not {other}"),
        };
        let id = {
            let mut inner = self.shared.lock();
            let id = match update.get("update_id").and_then(Value::as_i64) {
                Some(id) => id,
                None => inner.next_update_id,
            };
            inner.next_update_id = inner.next_update_id.max(id + 1);
            update.insert("update_id".into(), json!(id));
            inner.queue.push_back(Value::Object(update));
            id
        };
        self.shared.changed();
        id
    }

    /// From now on every `getUpdates` answers the Bot API error `code` with `description`
    /// (e.g. 500, "Internal Server Error"); `None` lets polls through again.
    pub fn fail_polls(&self, error: Option<(u16, &str)>) {
        self.shared.lock().failing_polls = error.map(|(c, d)| (c, d.to_string()));
        self.shared.changed();
    }

    /// The `offset` of each `getUpdates` call so far, in order (`None` when not given).
    pub fn poll_offsets(&self) -> Vec<Option<i64>> {
        self.calls_to("getUpdates")
            .iter()
            .map(|c| int(&Value::Object(c.params.clone()), "offset"))
            .collect()
    }

    /// Waits for a `getUpdates` call whose offset is past `update_id`: the update is
    /// confirmed.
    pub async fn wait_for_confirmed(
        &self,
        update_id: i64,
        timeout: Duration,
    ) -> Result<(), String> {
        wait::until_or_report(
            self,
            self.shared.version.subscribe(),
            timeout,
            format!("a getUpdates call with an offset past update {update_id}"),
            || {
                self.poll_offsets()
                    .iter()
                    .any(|o| o.is_some_and(|o| o > update_id))
                    .then_some(())
            },
        )
        .await
    }

    /// Updates waiting to be confirmed.
    pub fn pending_updates(&self) -> Vec<Value> {
        self.shared.lock().queue.iter().cloned().collect()
    }

    /// An edit of message `message_id` of `chat_id` by its sender (issue 32): the stored
    /// message with `text` and `edit_date` `after_secs` after its `date`, queued as an
    /// `edited_message` update (dropped when the bot did not ask for edits, as Telegram
    /// does). Returns the update id; `None` when the fake has no such message.
    pub fn push_edit(
        &self,
        chat_id: i64,
        message_id: i64,
        text: &str,
        after_secs: i64,
    ) -> Option<i64> {
        let mut edited = self
            .shared
            .lock()
            .messages
            .get(&(chat_id, message_id))
            .cloned()?;
        let date = edited["date"].as_i64().unwrap_or_default();
        edited["text"] = json!(text);
        edited["edit_date"] = json!(date + after_secs);
        Some(self.push_update(json!({ "edited_message": edited })))
    }

    /// What `setWebhook` registered, if a webhook is set.
    pub fn set_webhook_info(&self) -> Option<WebhookRegistration> {
        self.shared.lock().webhook.clone()
    }

    pub async fn wait_for_webhook(&self, timeout: Duration) -> WebhookRegistration {
        self.shared
            .wait_for(timeout, |i| i.webhook.clone())
            .await
            .unwrap_or_else(|| panic!("{}", wait::report(self, "a webhook to be set", timeout)))
    }

    /// Delivers `update` to the registered webhook, with its secret token, as Telegram does.
    pub async fn webhook_deliver(&self, update: &Value) -> (u16, String) {
        let hook = self
            .set_webhook_info()
            .expect("no webhook is registered with the fake Telegram API");
        deliver_webhook(&hook.url, hook.secret_token.as_deref(), update).await
    }
}

/// POSTs `update` to a webhook `url` as Telegram does, with the secret header when given.
/// Returns the status and body.
pub async fn deliver_webhook(url: &str, secret: Option<&str>, update: &Value) -> (u16, String) {
    let client = crate::http_client()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client");
    let mut request = client.post(url).json(update);
    if let Some(secret) = secret {
        request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
    }
    let response = request.send().await.expect("the webhook call");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

impl Inner {
    /// Remembers the chats, topics and messages an update shows.
    pub(super) fn learn(&mut self, body: &mut Value) {
        let Some(chat) = body.get("chat").cloned() else {
            return;
        };
        let Some(chat_id) = chat.get("id").and_then(Value::as_i64) else {
            return;
        };
        self.chats.insert(chat_id, chat);
        let Some(obj) = body.as_object_mut() else {
            return;
        };
        // Only messages carry a date and an id (my_chat_member has a date, no id).
        let is_message = obj.contains_key("text")
            || obj.contains_key("caption")
            || obj.contains_key("message_id")
            || obj.contains_key("document")
            || obj.contains_key("photo")
            || obj.contains_key("sticker")
            || obj.contains_key("new_chat_members");
        if !is_message {
            return;
        }
        if !obj.contains_key("date") {
            obj.insert("date".into(), json!(now()));
        }
        let message_id = match obj.get("message_id").and_then(Value::as_i64) {
            Some(id) => {
                let next = self.next_message_id.entry(chat_id).or_insert(1);
                *next = (*next).max(id + 1);
                id
            }
            None => {
                let id = self.take_message_id(chat_id);
                obj.insert("message_id".into(), json!(id));
                id
            }
        };
        if obj.get("is_topic_message").and_then(Value::as_bool) == Some(true)
            && let Some(thread) = obj.get("message_thread_id").and_then(Value::as_i64)
        {
            self.topics.insert((chat_id, thread));
        }
        if obj.contains_key("forum_topic_created") {
            self.topics.insert((chat_id, message_id));
        }
        if let Some(reply) = obj.get_mut("reply_to_message") {
            self.learn(reply);
        }
        let mut stored = Value::Object(obj.clone());
        if let Some(o) = stored.as_object_mut() {
            o.remove("reply_to_message");
        }
        self.messages.insert((chat_id, message_id), stored);
    }

    /// Whether the bot's `allowed_updates` admits this update's kind.
    pub(super) fn admits(&self, update: &Value) -> bool {
        let Some(kind) = update
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "update_id"))
        else {
            return true;
        };
        match &self.allowed_updates {
            Some(list) if !list.is_empty() => list.iter().any(|k| k == kind),
            _ => !DEFAULT_EXCLUDED_UPDATES.contains(&kind.as_str()),
        }
    }

    pub(super) fn chat(&self, id: i64) -> Value {
        self.chats.get(&id).cloned().unwrap_or_else(|| {
            if id > 0 {
                json!({"id": id, "type": "private", "first_name": "User"})
            } else {
                json!({"id": id, "type": "supergroup", "title": "Group"})
            }
        })
    }
}

pub(super) async fn get_updates(shared: &Shared, p: &Value) -> Response {
    let timeout = int(p, "timeout").unwrap_or(0).clamp(0, 50) as u64;
    let limit = int(p, "limit").unwrap_or(100).clamp(1, 100) as usize;
    {
        let mut inner = shared.lock();
        if let Some(list) = structured(p, "allowed_updates").and_then(|v| {
            v.as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
        }) {
            inner.allowed_updates = Some(list);
        }
        match int(p, "offset") {
            Some(offset) if offset < 0 => {
                let keep = offset.unsigned_abs() as usize;
                while inner.queue.len() > keep {
                    inner.queue.pop_front();
                }
            }
            Some(offset) => {
                while inner
                    .queue
                    .front()
                    .and_then(|u| u.get("update_id").and_then(Value::as_i64))
                    .is_some_and(|id| id < offset)
                {
                    inner.queue.pop_front();
                }
            }
            None => {}
        }
    }
    shared.changed();
    let updates = shared
        .wait_for(Duration::from_secs(timeout), |inner| {
            (!inner.queue.is_empty())
                .then(|| inner.queue.iter().take(limit).cloned().collect::<Vec<_>>())
        })
        .await
        .unwrap_or_default();
    ok(Value::Array(updates))
}

pub(super) fn set_webhook(shared: &Shared, p: &Value) -> Response {
    let url = string(p, "url").unwrap_or_default();
    if url.is_empty() {
        shared.lock().webhook = None;
        return ok_described(json!(true), "Webhook was deleted");
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return api_error(
            400,
            "Bad Request: bad webhook: An HTTPS URL must be provided for webhook",
        );
    }
    let secret = string(p, "secret_token");
    if let Some(s) = &secret
        && (s.is_empty()
            || s.len() > 256
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
    {
        return api_error(
            400,
            "Bad Request: secret token contains unallowed characters",
        );
    }
    let allowed = structured(p, "allowed_updates").and_then(|v| {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
    });
    let mut inner = shared.lock();
    if let Some(list) = &allowed {
        inner.allowed_updates = Some(list.clone());
    }
    inner.webhook = Some(WebhookRegistration {
        url,
        secret_token: secret,
        allowed_updates: allowed,
    });
    ok_described(json!(true), "Webhook was set")
}
