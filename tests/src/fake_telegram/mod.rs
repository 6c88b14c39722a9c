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
//! [`FakeTelegram::push_edit`] queues an `edited_message` as a sender's edit. `entities`
//! given with a text (`sendMessage`, `editMessageText`, `sendMessageDraft`) are checked to
//! be MessageEntity objects, kept on the message as Telegram returns it, and recorded.
//!
//! Tests drive it with [`FakeTelegram::push_update`] and the builders in [`tg`], and read
//! what the bot did with [`FakeTelegram::sent_messages`], [`FakeTelegram::left_chats`] and
//! [`FakeTelegram::set_webhook_info`]. Waiting is notification-based, never a sleep (see
//! [`crate::wait`]); a wait that times out shows the calls the fake got.
//!
//! The fake is split by what the Bot API does: [`updates`] (the update queue, `getUpdates`
//! and its offsets, webhooks), [`messages`] (`sendMessage` with its limits and scripted
//! failures, drafts, chat actions), [`chats`] (members, the command menu, leaving, files),
//! [`params`] (how a call's parameters arrive), [`live`] (edits, deletions, voice notes),
//! [`reactions`], and [`tg`], the builders of updates. This file holds the fake's state,
//! which each part reads directly, the routing of a method name to its part, and the Bot
//! API's answers (`ok`, errors, 429).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

mod chats;
// editMessageText, deleteMessage and sendVoice (issue 32): streaming in groups and voice out.
mod live;
mod messages;
mod params;
mod reactions;
#[cfg(test)]
mod tests;
pub mod tg;
mod updates;
pub use live::{Edit, VoiceSent};
pub use updates::deliver_webhook;

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
    /// `entities` as sent (MessageEntity objects); empty when none were.
    pub entities: Vec<Value>,
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
            .route("/file/{bot}/{*path}", get(chats::download))
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

async fn unmatched(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    shared
        .lock()
        .unmatched
        .push(request.uri().path().to_string());
    shared.changed();
    api_error(404, "Not Found")
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    let params = match params::read_params(request).await {
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
    let name = method.to_ascii_lowercase();
    if name == "getupdates" {
        if let Some(refused) = polling_refused(&shared) {
            return record(&shared, &method, params, refused);
        }
        // Recorded when it arrives, so tests see a poll in progress.
        record(&shared, &method, params, ok(Value::Null));
        return updates::get_updates(&shared, &p).await;
    }
    let response = answer(&shared, &name, &p);
    record(&shared, &method, params, response)
}

/// The answer to every method but `getUpdates`, by its lower-cased name.
fn answer(shared: &Arc<Shared>, method: &str, p: &Value) -> Response {
    match method {
        "getme" => get_me(shared),
        "deletewebhook" => delete_webhook(shared, p),
        "getwebhookinfo" => get_webhook_info(shared),
        "setwebhook" => updates::set_webhook(shared, p),
        "sendmessage" => messages::send_message(shared, p),
        "sendmessagedraft" => messages::send_message_draft(p),
        "editmessagetext" => live::edit_message_text(shared, p),
        "deletemessage" => live::delete_message(shared, p),
        "sendvoice" => live::send_voice(shared, p),
        "setmessagereaction" => reactions::set_message_reaction(p),
        "sendchataction" => send_chat_action(shared, p),
        "setmycommands" => chats::set_my_commands(shared, p),
        "getmycommands" => get_my_commands(shared),
        "getchatmember" => chats::get_chat_member(shared, p),
        "leavechat" => match int(p, "chat_id") {
            Some(chat_id) => {
                shared.lock().left.push(chat_id);
                ok(json!(true))
            }
            None => api_error(400, "Bad Request: chat_id is empty"),
        },
        "getfile" => get_file(shared, p),
        _ => api_error(404, "Not Found"),
    }
}

/// Why a `getUpdates` is refused: a failure the test set, or a webhook in place.
fn polling_refused(shared: &Shared) -> Option<Response> {
    let failing = shared.lock().failing_polls.clone();
    if let Some((code, description)) = failing {
        Some(api_error(code, &description))
    } else if shared.lock().webhook.is_some() {
        Some(api_error(
            409,
            "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
        ))
    } else {
        None
    }
}

fn get_me(shared: &Shared) -> Response {
    ok(json!({
        "id": shared.bot_id,
        "is_bot": true,
        "first_name": shared.config.first_name,
        "username": shared.config.username,
        "can_join_groups": true,
        "can_read_all_group_messages": false,
        "supports_inline_queries": false,
        "can_connect_to_business": false,
        "has_main_web_app": false
    }))
}

fn delete_webhook(shared: &Shared, p: &Value) -> Response {
    let mut inner = shared.lock();
    if boolean(p, "drop_pending_updates") {
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

fn get_webhook_info(shared: &Shared) -> Response {
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

fn send_chat_action(shared: &Shared, p: &Value) -> Response {
    let Some(chat_id) = int(p, "chat_id") else {
        return api_error(400, "Bad Request: chat_id is empty");
    };
    let Some(action) = string(p, "action") else {
        return api_error(400, "Bad Request: action is empty");
    };
    shared.lock().actions.push(ChatActionRecord {
        chat_id,
        action,
        message_thread_id: int(p, "message_thread_id"),
    });
    ok(json!(true))
}

fn get_my_commands(shared: &Shared) -> Response {
    let commands: Vec<Value> = shared
        .lock()
        .my_commands
        .iter()
        .map(|(c, d)| json!({"command": c, "description": d}))
        .collect();
    ok(json!(commands))
}

fn get_file(shared: &Shared, p: &Value) -> Response {
    let id = string(p, "file_id").unwrap_or_default();
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
