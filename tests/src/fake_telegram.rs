//! A fake Telegram Bot API server: `/bot<token>/<method>` on 127.0.0.1, following the
//! documented protocol closely enough that the real client (teloxide) cannot tell.
//!
//! It owns the fake bot's state: the queue of updates and the `getUpdates` offset rules
//! (an update is confirmed once a call asks for a higher offset; a call with nothing new
//! waits up to its `timeout`), the webhook registration, the chats and messages it has seen,
//! and a record of every call. Method names match case-insensitively (teloxide sends
//! `GetUpdates`); parameters come as JSON, form or multipart bodies, or in the query string.
//! Errors have the Bot API's shape: 401 for a wrong token, 400 for a message over 4096
//! characters, scripted 429s with `parameters.retry_after`, and scripted refusals
//! ([`FakeTelegram::refuse_next_send`]).
//!
//! `editMessageText` and `deleteMessage` act on the bot's own messages (issue 32), and
//! [`FakeTelegram::push_edit`] queues an `edited_message` as a sender's edit.
//!
//! Tests drive it with [`FakeTelegram::push_update`] and the builders in [`tg`], and read
//! what the bot did with [`FakeTelegram::sent_messages`], [`FakeTelegram::left_chats`] and
//! [`FakeTelegram::set_webhook_info`]. Waiting is notification-based, never a sleep (see
//! [`crate::wait`]); a wait that times out shows the calls the fake got.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

// editMessageText, deleteMessage and sendVoice (issue 32): streaming in groups and voice out.
#[path = "fake_telegram_live.rs"]
mod live;
pub use live::{Edit, VoiceSent};
#[path = "fake_telegram_reactions.rs"]
mod reactions;

/// Telegram's limit on a message's text, in characters.
pub const MAX_TEXT_CHARS: usize = 4096;

/// Update kinds Telegram sends when `allowed_updates` was never given.
const DEFAULT_EXCLUDED_UPDATES: [&str; 3] =
    ["chat_member", "message_reaction", "message_reaction_count"];

/// How the fake bot is set up.
#[derive(Debug, Clone)]
pub struct FakeTelegramConfig {
    /// The bot token; its digits before `:` are the bot's user id.
    pub token: String,
    pub username: String,
    pub first_name: String,
}

impl Default for FakeTelegramConfig {
    fn default() -> Self {
        FakeTelegramConfig {
            token: "123:abc".into(),
            username: "tess_bot".into(),
            first_name: "Tess".into(),
        }
    }
}

/// A `sendMessage` the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub message_id: i64,
    pub chat_id: i64,
    pub text: String,
    pub message_thread_id: Option<i64>,
    /// `reply_parameters` as sent (an object).
    pub reply_parameters: Option<Value>,
    pub parse_mode: Option<String>,
}

impl SentMessage {
    /// `reply_parameters.message_id`.
    pub fn reply_to_message_id(&self) -> Option<i64> {
        self.reply_parameters
            .as_ref()
            .and_then(|r| int(r, "message_id"))
    }
}

/// A `sendChatAction` call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatActionRecord {
    pub chat_id: i64,
    pub action: String,
    pub message_thread_id: Option<i64>,
}

/// What `setWebhook` registered.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRegistration {
    pub url: String,
    pub secret_token: Option<String>,
    pub allowed_updates: Option<Vec<String>>,
}

/// One call to the API, with its parameters merged into one object (form and multipart
/// values are strings, or JSON when they hold an object or array).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCall {
    /// The method name as sent (`GetUpdates`).
    pub method: String,
    pub params: Map<String, Value>,
    /// The HTTP status the fake answered.
    pub status: u16,
}

impl ApiCall {
    /// Whether this is a call to `method`, ignoring case.
    pub fn is(&self, method: &str) -> bool {
        self.method.eq_ignore_ascii_case(method)
    }
}

#[derive(Default)]
struct Inner {
    next_update_id: i64,
    /// Updates not yet confirmed, in id order.
    queue: VecDeque<Value>,
    /// Update kinds from the last `allowed_updates` given; `None` for the default.
    allowed_updates: Option<Vec<String>>,
    /// Updates dropped because their kind was not allowed when they were pushed.
    dropped: Vec<Value>,
    webhook: Option<WebhookRegistration>,
    /// Chats seen in updates, by id (the `chat` object).
    chats: HashMap<i64, Value>,
    /// Forum topics seen: (chat, thread id).
    topics: HashSet<(i64, i64)>,
    /// Messages that exist, by (chat, message id): pushed and sent.
    messages: HashMap<(i64, i64), Value>,
    next_message_id: HashMap<i64, i64>,
    sent: Vec<SentMessage>,
    send_attempts: usize,
    actions: Vec<ChatActionRecord>,
    left: Vec<i64>,
    calls: Vec<ApiCall>,
    /// Scripted sendMessage outcomes, one per call: `Some` answers the call with an error,
    /// `None` lets it through.
    scripted_sends: VecDeque<Option<ScriptedSend>>,
    files: HashMap<String, (String, Vec<u8>)>,
    unmatched: Vec<String>,
    /// Live replies and voice out (`live`): edits, deletions, voice notes, scripted edit 429s.
    live: live::LiveState,
    /// The bot's command menu, as the last `setMyCommands` left it: (command, description).
    my_commands: Vec<(String, String)>,
    /// Chat members' statuses (`creator`, `administrator`, …), by (chat, user); a user not
    /// listed is a plain `member`.
    members: HashMap<(i64, i64), String>,
    /// When set, `getUpdates` answers this Bot API error (`error_code`, `description`)
    /// instead of updates: a Bot API that has gone wrong, so polling never succeeds.
    failing_polls: Option<(u16, String)>,
}

/// A scripted sendMessage error.
#[derive(Debug, Clone)]
enum ScriptedSend {
    /// 429 with `parameters.retry_after` in seconds.
    RetryAfter(u64),
    /// The Bot API's error shape, with this `error_code` and `description`.
    Error(u16, String),
}

struct Shared {
    config: FakeTelegramConfig,
    bot_id: i64,
    inner: Mutex<Inner>,
    /// Bumped after every change, once the state lock is released.
    version: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn bot_user(&self) -> Value {
        json!({
            "id": self.bot_id,
            "is_bot": true,
            "first_name": self.config.first_name,
            "username": self.config.username,
        })
    }

    /// Waits until `check` gives a value, up to `timeout` (see [`crate::wait`]).
    async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&Inner) -> Option<T>,
    ) -> Option<T> {
        wait::until(self.version.subscribe(), timeout, || check(&self.lock())).await
    }
}

/// The fake server. Dropping it stops it.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl FakeTelegram {
    /// A fake for the bot `123:abc`, `@tess_bot`.
    pub async fn start() -> Self {
        Self::start_with(FakeTelegramConfig::default()).await
    }

    pub async fn start_with(config: FakeTelegramConfig) -> Self {
        let bot_id = config
            .token
            .split(':')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or(1);
        let shared = Arc::new(Shared {
            config,
            bot_id,
            inner: Mutex::new(Inner {
                next_update_id: 100_000,
                ..Inner::default()
            }),
            version: watch::Sender::new(0),
        });
        let app = Router::new()
            .route("/file/{bot}/{*path}", get(download))
            .route("/{bot}/{method}", any(method))
            .fallback(unmatched)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Telegram server");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeTelegram {
            addr,
            shared,
            server,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://127.0.0.1:PORT`: what `TELEGRAM_API_ROOT` is set to.
    pub fn api_root(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// A character (`persona_json`) on Telegram through this fake: `clients` and the
    /// bot's token and API root in its secrets.
    pub fn persona(&self, name: &str, bio: &str) -> Value {
        let mut character = crate::persona_json(name, bio);
        character["clients"] = json!(["telegram"]);
        character["settings"]["secrets"] = json!({
            "TELEGRAM_BOT_TOKEN": self.token(),
            "TELEGRAM_API_ROOT": self.api_root(),
        });
        character
    }

    pub fn token(&self) -> &str {
        &self.shared.config.token
    }
    pub fn bot_id(&self) -> i64 {
        self.shared.bot_id
    }
    pub fn bot_username(&self) -> &str {
        &self.shared.config.username
    }
    /// The bot as a `User` object.
    pub fn bot_user(&self) -> Value {
        self.shared.bot_user()
    }

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

    /// Chats the bot left with `leaveChat`, in order.
    /// The command menu the bot set with `setMyCommands`: (command, description).
    pub fn my_commands(&self) -> Vec<(String, String)> {
        self.shared.lock().my_commands.clone()
    }

    /// Makes `user` a `creator`, `administrator` or `member` of `chat`, for `getChatMember`.
    pub fn set_member_status(&self, chat: i64, user: i64, status: &str) {
        self.shared
            .lock()
            .members
            .insert((chat, user), status.to_string());
    }

    pub fn left_chats(&self) -> Vec<i64> {
        self.shared.lock().left.clone()
    }

    pub async fn wait_for_left(&self, n: usize, timeout: Duration) -> Vec<i64> {
        self.shared
            .wait_for(timeout, |i| (i.left.len() >= n).then(|| i.left.clone()))
            .await
            .unwrap_or_else(|| {
                let expected = format!(
                    "the bot to leave {n} chat(s) (it left {:?})",
                    self.left_chats()
                );
                panic!("{}", wait::report(self, expected, timeout))
            })
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

    /// Every API call, in order.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.shared.lock().calls.clone()
    }

    /// Calls to `method` (case-insensitive).
    pub fn calls_to(&self, method: &str) -> Vec<ApiCall> {
        self.calls().into_iter().filter(|c| c.is(method)).collect()
    }

    /// Waits until at least `n` calls to `method` were answered; returns them.
    pub async fn wait_for_calls(&self, method: &str, n: usize, timeout: Duration) -> Vec<ApiCall> {
        let found = self
            .shared
            .wait_for(timeout, |i| {
                let calls: Vec<ApiCall> =
                    i.calls.iter().filter(|c| c.is(method)).cloned().collect();
                (calls.len() >= n).then_some(calls)
            })
            .await;
        found.unwrap_or_else(|| {
            let expected = format!("{n} call(s) to {method}");
            panic!("{}", wait::report(self, expected, timeout))
        })
    }

    /// Paths that matched no route.
    pub fn unmatched(&self) -> Vec<String> {
        self.shared.lock().unmatched.clone()
    }

    /// Makes a file available to `getFile` and the download path.
    pub fn add_file(&self, file_id: &str, file_path: &str, bytes: &[u8]) {
        self.shared
            .lock()
            .files
            .insert(file_id.into(), (file_path.into(), bytes.to_vec()));
    }

    /// Delivers `update` to the registered webhook, with its secret token, as Telegram does.
    pub async fn webhook_deliver(&self, update: &Value) -> (u16, String) {
        let hook = self
            .set_webhook_info()
            .expect("no webhook is registered with the fake Telegram API");
        deliver_webhook(&hook.url, hook.secret_token.as_deref(), update).await
    }
}

impl Diagnose for FakeTelegram {
    /// The calls by method, the paths no route matched, and the updates not confirmed.
    fn diagnostics(&self) -> String {
        let inner = self.shared.lock();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for call in &inner.calls {
            let name = call.method.to_ascii_lowercase();
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        }
        format!(
            "calls: {counts:?}; unmatched paths: {:?}; pending updates: {}",
            inner.unmatched,
            inner.queue.len()
        )
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.server.abort();
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
    fn learn(&mut self, body: &mut Value) {
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

    fn take_message_id(&mut self, chat: i64) -> i64 {
        let next = self.next_message_id.entry(chat).or_insert(1);
        let id = *next;
        *next += 1;
        id
    }

    /// Whether the bot's `allowed_updates` admits this update's kind.
    fn admits(&self, update: &Value) -> bool {
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

    fn chat(&self, id: i64) -> Value {
        self.chats.get(&id).cloned().unwrap_or_else(|| {
            if id > 0 {
                json!({"id": id, "type": "private", "first_name": "User"})
            } else {
                json!({"id": id, "type": "supergroup", "title": "Group"})
            }
        })
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An integer parameter, given as a number or as digits.
fn int(params: &Value, key: &str) -> Option<i64> {
    match params.get(key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn string(params: &Value, key: &str) -> Option<String> {
    match params.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn boolean(params: &Value, key: &str) -> bool {
    match params.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true" || s == "True" || s == "1",
        _ => false,
    }
}

/// A parameter that is an object or array: given as JSON, or as a JSON string.
fn structured(params: &Value, key: &str) -> Option<Value> {
    match params.get(key)? {
        Value::String(s) => serde_json::from_str(s).ok(),
        v @ (Value::Object(_) | Value::Array(_)) => Some(v.clone()),
        _ => None,
    }
}

fn ok(result: Value) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({"ok": true, "result": result})),
    )
        .into_response()
}

fn ok_described(result: Value, description: &str) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({"ok": true, "result": result, "description": description})),
    )
        .into_response()
}

fn api_error(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(json!({"ok": false, "error_code": code, "description": description})),
    )
        .into_response()
}

fn too_many_requests(retry_after: u64) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({
            "ok": false,
            "error_code": 429,
            "description": format!("Too Many Requests: retry after {retry_after}"),
            "parameters": {"retry_after": retry_after}
        })),
    )
        .into_response()
}

/// A form or multipart value: JSON when it holds an object or array, else the string.
fn form_value(text: String) -> Value {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(v) = serde_json::from_str::<Value>(&text)
    {
        return v;
    }
    Value::String(text)
}

/// The request's parameters: the query string, then the body (JSON, form or multipart).
async fn read_params(request: Request) -> Result<Map<String, Value>, String> {
    let mut params = Map::new();
    if let Some(query) = request.uri().query() {
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            params.insert(k.into_owned(), form_value(v.into_owned()));
        }
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| format!("bad multipart body: {e}"))?;
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| format!("bad multipart field: {e}"))?
        {
            let Some(name) = field.name().map(str::to_string) else {
                continue;
            };
            if field.file_name().is_some() {
                let bytes = field.bytes().await.map_err(|e| e.to_string())?;
                // The bytes too, for a test to compare (a voice note is small).
                let content =
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
                params.insert(
                    name,
                    json!({"uploaded_bytes": bytes.len(), "base64": content}),
                );
            } else {
                let text = field.text().await.map_err(|e| e.to_string())?;
                params.insert(name, form_value(text));
            }
        }
        return Ok(params);
    }
    let body = Bytes::from_request(request, &())
        .await
        .map_err(|e| format!("cannot read the body: {e}"))?;
    if body.is_empty() {
        return Ok(params);
    }
    if content_type.starts_with("application/x-www-form-urlencoded") {
        // `+` is a space and `%XX` a byte. Bytes that are not UTF-8 become U+FFFD (the
        // url crate's choice) instead of failing the request; no client sends them.
        for (k, v) in url::form_urlencoded::parse(&body) {
            params.insert(k.into_owned(), form_value(v.into_owned()));
        }
        return Ok(params);
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(map)) => {
            params.extend(map);
            Ok(params)
        }
        Ok(_) => Err("the JSON body is not an object".into()),
        Err(e) => Err(format!("the body is not JSON: {e}")),
    }
}

async fn unmatched(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    shared
        .lock()
        .unmatched
        .push(request.uri().path().to_string());
    shared.changed();
    api_error(404, "Not Found")
}

async fn download(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{}", shared.config.token) {
        return api_error(401, "Unauthorized");
    }
    let inner = shared.lock();
    match inner.files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) => (StatusCode::OK, bytes.clone()).into_response(),
        None => api_error(404, "Not Found"),
    }
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    let params = match read_params(request).await {
        Ok(p) => p,
        Err(e) => {
            return record(
                &shared,
                &method,
                Map::new(),
                api_error(400, &format!("Bad Request: {e}")),
            );
        }
    };
    if bot != format!("bot{}", shared.config.token) {
        return record(&shared, &method, params, api_error(401, "Unauthorized"));
    }
    let p = Value::Object(params.clone());
    let response = match method.to_ascii_lowercase().as_str() {
        "getme" => ok(json!({
            "id": shared.bot_id,
            "is_bot": true,
            "first_name": shared.config.first_name,
            "username": shared.config.username,
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
            "can_connect_to_business": false,
            "has_main_web_app": false
        })),
        "getupdates" => {
            let failing = shared.lock().failing_polls.clone();
            if let Some((code, description)) = failing {
                api_error(code, &description)
            } else if shared.lock().webhook.is_some() {
                api_error(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
                )
            } else {
                // Recorded when it arrives, so tests see a poll in progress.
                record(&shared, &method, params, ok(Value::Null));
                return get_updates(&shared, &p).await;
            }
        }
        "deletewebhook" => {
            let mut inner = shared.lock();
            if boolean(&p, "drop_pending_updates") {
                inner.queue.clear();
            }
            let was_set = inner.webhook.take().is_some();
            drop(inner);
            ok_described(
                json!(true),
                if was_set {
                    "Webhook was deleted"
                } else {
                    "Webhook is already deleted"
                },
            )
        }
        "getwebhookinfo" => {
            let inner = shared.lock();
            let mut info = json!({
                "url": inner.webhook.as_ref().map(|w| w.url.clone()).unwrap_or_default(),
                "has_custom_certificate": false,
                "pending_update_count": inner.queue.len(),
            });
            if let Some(list) = &inner.allowed_updates {
                info["allowed_updates"] = json!(list);
            }
            ok(info)
        }
        "setwebhook" => set_webhook(&shared, &p),
        "sendmessage" => send_message(&shared, &p),
        "sendmessagedraft" => send_message_draft(&p),
        "editmessagetext" => live::edit_message_text(&shared, &p),
        "deletemessage" => live::delete_message(&shared, &p),
        "sendvoice" => live::send_voice(&shared, &p),
        "setmessagereaction" => reactions::set_message_reaction(&p),
        "sendchataction" => {
            let Some(chat_id) = int(&p, "chat_id") else {
                return record(
                    &shared,
                    &method,
                    params,
                    api_error(400, "Bad Request: chat_id is empty"),
                );
            };
            let Some(action) = string(&p, "action") else {
                return record(
                    &shared,
                    &method,
                    params,
                    api_error(400, "Bad Request: action is empty"),
                );
            };
            shared.lock().actions.push(ChatActionRecord {
                chat_id,
                action,
                message_thread_id: int(&p, "message_thread_id"),
            });
            ok(json!(true))
        }
        "setmycommands" => set_my_commands(&shared, &p),
        "getmycommands" => {
            let commands: Vec<Value> = shared
                .lock()
                .my_commands
                .iter()
                .map(|(c, d)| json!({"command": c, "description": d}))
                .collect();
            ok(json!(commands))
        }
        "getchatmember" => get_chat_member(&shared, &p),
        "leavechat" => match int(&p, "chat_id") {
            Some(chat_id) => {
                shared.lock().left.push(chat_id);
                ok(json!(true))
            }
            None => api_error(400, "Bad Request: chat_id is empty"),
        },
        "getfile" => {
            let id = string(&p, "file_id").unwrap_or_default();
            let inner = shared.lock();
            match inner.files.get(&id) {
                Some((path, bytes)) => ok(json!({
                    "file_id": id,
                    "file_unique_id": format!("u-{id}"),
                    "file_size": bytes.len(),
                    "file_path": path,
                })),
                None => api_error(400, "Bad Request: invalid file_id"),
            }
        }
        _ => api_error(404, "Not Found"),
    };
    record(&shared, &method, params, response)
}

/// Records the call with the status it got, and wakes waiters.
fn record(
    shared: &Shared,
    method: &str,
    params: Map<String, Value>,
    response: Response,
) -> Response {
    shared.lock().calls.push(ApiCall {
        method: method.to_string(),
        params,
        status: response.status().as_u16(),
    });
    shared.changed();
    response
}

async fn get_updates(shared: &Shared, p: &Value) -> Response {
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

/// `setMyCommands` as the Bot API documents it: 1 to 100 commands, each a `command` of 1
/// to 32 lower-case letters, digits and underscores and a `description` of 1 to 256
/// characters; `scope` and `language_code` are accepted and not modelled (one menu).
fn set_my_commands(shared: &Shared, p: &Value) -> Response {
    let Some(Value::Array(list)) = structured(p, "commands") else {
        return api_error(400, "Bad Request: parameter \"commands\" is required");
    };
    if list.len() > 100 {
        return api_error(400, "Bad Request: too many commands specified");
    }
    let mut commands = Vec::new();
    for item in &list {
        let command = item.get("command").and_then(Value::as_str).unwrap_or("");
        let description = item
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let valid = (1..=32).contains(&command.len())
            && command
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return api_error(400, "Bad Request: BOT_COMMAND_INVALID");
        }
        if !(1..=256).contains(&description.chars().count()) {
            return api_error(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID");
        }
        commands.push((command.to_string(), description.to_string()));
    }
    shared.lock().my_commands = commands;
    ok(json!(true))
}

/// `getChatMember`: a ChatMember object with the `status` set for the user by
/// `FakeTelegram::set_member_status` (default `member`), with the fields the Bot API
/// documents for that status.
fn get_chat_member(shared: &Shared, p: &Value) -> Response {
    let (Some(chat), Some(user)) = (int(p, "chat_id"), int(p, "user_id")) else {
        return api_error(400, "Bad Request: chat_id and user_id are required");
    };
    let status = shared
        .lock()
        .members
        .get(&(chat, user))
        .cloned()
        .unwrap_or_else(|| "member".into());
    let mut member = json!({
        "status": status,
        "user": {"id": user, "is_bot": false, "first_name": format!("user{user}")},
    });
    match status.as_str() {
        "creator" => member["is_anonymous"] = json!(false),
        "administrator" => {
            for key in [
                "is_anonymous",
                "can_be_edited",
                "can_promote_members",
                "can_post_stories",
                "can_edit_stories",
                "can_delete_stories",
            ] {
                member[key] = json!(false);
            }
            for key in [
                "can_manage_chat",
                "can_change_info",
                "can_delete_messages",
                "can_manage_video_chats",
                "can_invite_users",
                "can_restrict_members",
                "can_pin_messages",
            ] {
                member[key] = json!(true);
            }
        }
        _ => {}
    }
    ok(member)
}

fn set_webhook(shared: &Shared, p: &Value) -> Response {
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

/// `sendMessageDraft` (Bot API 10, issue 32): an ephemeral preview in a private chat;
/// `true`, and the call is kept in [`FakeTelegram::calls`]. A group's chat id, a zero
/// `draft_id` or a text over 4,096 characters is refused as the Bot API does.
fn send_message_draft(p: &Value) -> Response {
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
    ok(json!(true))
}

fn send_message(shared: &Shared, p: &Value) -> Response {
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
    let mut reply_to = None;
    if let Some(rp) = &reply_parameters {
        let target = int(rp, "message_id");
        let reply_chat = int(rp, "chat_id").unwrap_or(chat_id);
        match target.and_then(|m| inner.messages.get(&(reply_chat, m)).cloned()) {
            Some(m) => reply_to = Some(m),
            None if boolean(rp, "allow_sending_without_reply") => {}
            None => return api_error(400, "Bad Request: message to be replied not found"),
        }
    }
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
    });
    ok(message)
}

/// Builders for the updates tests push: users, chats, messages, mentions, membership.
pub mod tg {
    use serde_json::{Value, json};

    pub fn user(id: i64, first_name: &str) -> Value {
        json!({"id": id, "is_bot": false, "first_name": first_name})
    }

    pub fn bot(id: i64, first_name: &str, username: &str) -> Value {
        json!({"id": id, "is_bot": true, "first_name": first_name, "username": username})
    }

    /// The private chat with a user.
    pub fn private_chat(user_id: i64, first_name: &str) -> Value {
        json!({"id": user_id, "type": "private", "first_name": first_name})
    }

    pub fn group(id: i64, title: &str) -> Value {
        json!({"id": id, "type": "group", "title": title})
    }

    pub fn supergroup(id: i64, title: &str) -> Value {
        json!({"id": id, "type": "supergroup", "title": title})
    }

    /// A supergroup with topics.
    pub fn forum(id: i64, title: &str) -> Value {
        json!({"id": id, "type": "supergroup", "title": title, "is_forum": true})
    }

    /// A text message; the fake assigns `message_id` and `date` when it is pushed.
    pub fn text(chat: Value, from: Value, text: &str) -> Value {
        json!({"chat": chat, "from": from, "text": text})
    }

    /// The message sent into a forum topic.
    pub fn in_topic(mut message: Value, thread_id: i64) -> Value {
        message["message_thread_id"] = json!(thread_id);
        message["is_topic_message"] = json!(true);
        message
    }

    /// Adds a `mention` entity for the first `@username` in the text (offsets in UTF-16).
    pub fn mentioning(mut message: Value, username: &str) -> Value {
        let text = message["text"].as_str().unwrap_or_default().to_string();
        let needle = format!("@{username}");
        if let Some(byte) = text.find(&needle) {
            let offset: usize = text[..byte].encode_utf16().count();
            let length = needle.encode_utf16().count();
            let entity = json!({"type": "mention", "offset": offset, "length": length});
            match message["entities"].as_array_mut() {
                Some(list) => list.push(entity),
                None => message["entities"] = json!([entity]),
            }
        }
        message
    }

    /// A photo with a caption, as Telegram sends it: the sizes smallest first, the largest
    /// being `file_id` (add its bytes with `FakeTelegram::add_file`) of `size` bytes.
    pub fn photo(chat: Value, from: Value, caption: &str, file_id: &str, size: u64) -> Value {
        json!({"chat": chat, "from": from, "caption": caption, "photo": [
            {"file_id": format!("{file_id}-thumb"), "file_unique_id": format!("t-{file_id}"),
             "width": 90, "height": 90, "file_size": 1200},
            {"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
             "width": 1280, "height": 960, "file_size": size}
        ]})
    }

    /// A file sent as a document (uncompressed), with a caption.
    pub fn document(
        chat: Value,
        from: Value,
        caption: &str,
        file_id: &str,
        (file_name, mime_type, size): (&str, &str, u64),
    ) -> Value {
        json!({"chat": chat, "from": from, "caption": caption, "document": {
            "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
            "file_name": file_name, "mime_type": mime_type, "file_size": size
        }})
    }

    /// A command message (`/mute 10m`, `/mute@tess_bot`): the text with the
    /// `bot_command` entity Telegram adds over the `/word` it starts with.
    pub fn command(chat: Value, from: Value, text: &str) -> Value {
        let word = text.split_whitespace().next().unwrap_or_default();
        let mut message = self::text(chat, from, text);
        message["entities"] =
            json!([{"type": "bot_command", "offset": 0, "length": word.encode_utf16().count()}]);
        message
    }

    /// Makes `message` a reply to `to` (a message object as sent or pushed).
    pub fn replying_to(mut message: Value, to: Value) -> Value {
        message["reply_to_message"] = to;
        message
    }

    /// `{"message": message}`: the fake adds the update id.
    pub fn message(message: Value) -> Value {
        json!({"message": message})
    }

    /// `my_chat_member`: the bot (`bot_user`) was added to `chat` by `by`.
    pub fn bot_added(chat: Value, by: Value, bot_user: Value) -> Value {
        json!({"my_chat_member": {
            "chat": chat,
            "from": by,
            "date": super::now(),
            "old_chat_member": {"user": bot_user.clone(), "status": "left"},
            "new_chat_member": {"user": bot_user, "status": "member"}
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        crate::http_client().no_proxy().build().unwrap()
    }

    async fn call(fake: &FakeTelegram, method: &str, body: Value) -> (u16, Value) {
        let url = format!("{}/bot{}/{method}", fake.api_root(), fake.token());
        let resp = client().post(url).json(&body).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    #[tokio::test]
    async fn get_me_any_case_and_wrong_token() {
        let fake = FakeTelegram::start().await;
        let (status, body) = call(&fake, "GetMe", json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["username"], "tess_bot");
        assert_eq!(body["result"]["id"], 123);
        for key in [
            "can_join_groups",
            "can_read_all_group_messages",
            "supports_inline_queries",
            "has_main_web_app",
        ] {
            assert!(body["result"][key].is_boolean(), "{key}");
        }
        let resp = client()
            .post(format!("{}/bot123:wrong/getMe", fake.api_root()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body,
            json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
        );
        let (status, _) = call(&fake, "noSuchMethod", json!({})).await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn offsets_confirm_and_long_polls_wake_on_push() {
        let fake = FakeTelegram::start().await;
        let a = fake.push_update(tg::message(tg::text(
            tg::private_chat(5, "Ann"),
            tg::user(5, "Ann"),
            "one",
        )));
        let (_, body) = call(&fake, "getUpdates", json!({})).await;
        assert_eq!(body["result"][0]["update_id"], a);
        assert_eq!(body["result"][0]["message"]["message_id"], 1);
        // Not confirmed yet: asked again, it comes again.
        let (_, body) = call(&fake, "getUpdates", json!({"offset": a})).await;
        assert_eq!(body["result"].as_array().unwrap().len(), 1);
        // A long poll with nothing new waits for the next push.
        let poll = tokio::spawn({
            let url = format!("{}/bot{}/getUpdates", fake.api_root(), fake.token());
            async move {
                client()
                    .post(url)
                    .json(&json!({"offset": a + 1, "timeout": 30}))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            }
        });
        fake.wait_for_calls("getUpdates", 3, Duration::from_secs(10))
            .await;
        assert!(fake.pending_updates().is_empty());
        let b = fake.push_update(tg::message(tg::text(
            tg::private_chat(5, "Ann"),
            tg::user(5, "Ann"),
            "two",
        )));
        let body = poll.await.unwrap();
        assert_eq!(body["result"][0]["update_id"], b);
        assert_eq!(body["result"][0]["message"]["message_id"], 2);
        // A short poll with nothing new answers at once.
        let (_, body) = call(&fake, "getUpdates", json!({"offset": b + 1})).await;
        assert_eq!(body["result"], json!([]));
    }

    #[tokio::test]
    async fn send_message_records_and_enforces_limits() {
        let fake = FakeTelegram::start().await;
        fake.push_update(tg::message(tg::text(
            tg::forum(-1009, "Club"),
            tg::user(5, "Ann"),
            "x",
        )));
        let (status, body) = call(
            &fake,
            "sendMessage",
            json!({"chat_id": -1009, "text": "a".repeat(4097)}),
        )
        .await;
        assert_eq!(
            (status, body["description"].as_str()),
            (400, Some("Bad Request: message is too long"))
        );
        let (status, body) = call(
            &fake,
            "sendMessage",
            json!({"chat_id": -1009, "text": "hi", "reply_parameters": {"message_id": 99}}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        fake.fail_next_sends(1, 3);
        let (status, body) = call(
            &fake,
            "sendMessage",
            json!({"chat_id": -1009, "text": "hi"}),
        )
        .await;
        assert_eq!(status, 429);
        assert_eq!(body["parameters"]["retry_after"], 3);
        assert_eq!(body["description"], "Too Many Requests: retry after 3");
        let (status, body) = call(
            &fake,
            "SendMessage",
            json!({"chat_id": "-1009", "text": "hi", "reply_parameters": {"message_id": 1}}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["message_id"], 2);
        assert_eq!(body["result"]["reply_to_message"]["text"], "x");
        assert_eq!(body["result"]["chat"]["title"], "Club");
        let sent = fake.wait_for_sent(1, Duration::from_secs(5)).await;
        assert_eq!(sent[0].reply_to_message_id(), Some(1));
        assert_eq!(fake.send_attempts(), 4);
    }

    #[tokio::test]
    async fn form_and_multipart_bodies() {
        let fake = FakeTelegram::start().await;
        let url = format!("{}/bot{}/sendMessage", fake.api_root(), fake.token());
        let resp = client()
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("chat_id=5&text=hello+there%21&reply_parameters=%7B%22message_id%22%3A9%2C%22allow_sending_without_reply%22%3Atrue%7D")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let sent = fake.sent_messages();
        assert_eq!(sent[0].text, "hello there!");
        assert_eq!(sent[0].reply_to_message_id(), Some(9));

        let boundary = "XyZ";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"url\"\r\n\r\nhttps://example.org/hook\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"secret_token\"\r\n\r\nsecret_1\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"allowed_updates\"\r\n\r\n[\"message\"]\r\n--{boundary}--\r\n"
        );
        let resp = client()
            .post(format!(
                "{}/bot{}/SetWebhook",
                fake.api_root(),
                fake.token()
            ))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            fake.set_webhook_info(),
            Some(WebhookRegistration {
                url: "https://example.org/hook".into(),
                secret_token: Some("secret_1".into()),
                allowed_updates: Some(vec!["message".into()])
            })
        );
        let (status, _) = call(&fake, "getUpdates", json!({})).await;
        assert_eq!(status, 409);
    }

    #[tokio::test]
    async fn files_and_leaving() {
        let fake = FakeTelegram::start().await;
        fake.add_file("F1", "documents/file_1.txt", b"hello");
        let (_, body) = call(&fake, "getFile", json!({"file_id": "F1"})).await;
        let path = body["result"]["file_path"].as_str().unwrap().to_string();
        let bytes = client()
            .get(format!(
                "{}/file/bot{}/{path}",
                fake.api_root(),
                fake.token()
            ))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"hello");
        let (status, _) = call(&fake, "leaveChat", json!({"chat_id": -77})).await;
        assert_eq!(status, 200);
        assert_eq!(
            fake.wait_for_left(1, Duration::from_secs(5)).await,
            vec![-77]
        );
    }

    #[test]
    fn mention_builder_counts_utf16() {
        let m = tg::mentioning(
            tg::text(tg::group(-1, "g"), tg::user(1, "a"), "😀 hi @tess_bot"),
            "tess_bot",
        );
        assert_eq!(
            m["entities"][0],
            json!({"type": "mention", "offset": 6, "length": 9})
        );
    }
}
