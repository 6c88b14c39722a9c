//! The fake's channel webhooks (issue 46), as Discord's OpenAPI (specs/discord-openapi.json:
//! `create_webhook`, `list_channel_webhooks`, `execute_webhook`, `update_webhook_message`,
//! `delete_webhook_message`, `get_channel`) and its documentation describe them:
//! - `GET /channels/{channel}`: the channel's `type` (11 for a thread added with
//!   [`FakeDiscord::add_thread`], else 0) and `parent_id`;
//! - `GET`/`POST /channels/{channel}/webhooks`: 403 Missing Permissions (50013) while the
//!   bot lacks Manage Webhooks ([`FakeDiscord::deny_manage_webhooks`]); a new webhook's
//!   `name` is 1 to 80 characters without "discord" or "clyde" (400, 50035); answered with
//!   the webhook object (`type` 1, its `token`, `user` the bot that made it);
//! - `POST /webhooks/{id}/{token}?wait=&thread_id=`: a message as the webhook, `username`
//!   (1 to 80, without "discord" or "clyde") and `avatar_url` (a URI of at most 2,048)
//!   taken per message, `content` 1 to 2,000; the message has `webhook_id` and an author
//!   whose id is the webhook's, is dispatched as MESSAGE_CREATE to every bot, and is
//!   answered only with `wait=true` (else 204). An unknown webhook (one an admin deleted,
//!   [`FakeDiscord::delete_webhooks`]) is 404 Unknown Webhook (10015). A `thread_id` must be
//!   a thread of the webhook's channel;
//!   A thread has no webhooks of its own: listing or creating them there is 400 (50024,
//!   "Cannot execute action on this channel type"); its parent's webhook posts in it;
//! - `PATCH`/`DELETE /webhooks/{id}/{token}/messages/{message}?thread_id=`: only a message
//!   of that webhook, and for a message in a thread only with that thread's `thread_id`
//!   (404 Unknown Message, 10008, otherwise), as `update_webhook_message` and
//!   `delete_webhook_message` take it.
//!
//! A post's `thread_id` is kept in the recorded path (`/webhooks/{id}/…?thread_id=`), so a
//! test sees where troupe said each message goes.
//!
//! The interaction follow-up shares the execute route's shape: a path whose id is the
//! application's goes to `interactions::follow_up`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{
    FakeDiscord, GUILD_ID, MAX_CONTENT, Shared, caller, discord_error, record, snowflake,
    timestamp, unauthorized, with_bucket,
};
use crate::wait;

/// A channel webhook of the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeWebhook {
    pub id: String,
    pub token: String,
    pub channel: String,
    /// The user id of the bot that made it.
    pub creator: String,
}

/// A message posted through a channel webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookMessage {
    pub id: String,
    pub webhook_id: String,
    /// Where it went: the thread, for a `thread_id`.
    pub channel: String,
    pub username: String,
    pub avatar_url: Option<String>,
    /// Its text now (after edits).
    pub content: String,
    /// Its texts through edits, in order (`PATCH` on the webhook's message route).
    pub edits: Vec<String>,
}

/// The webhook state of the fake.
#[derive(Default)]
pub(super) struct Hooks {
    pub(super) webhooks: Vec<FakeWebhook>,
    pub(super) made: usize,
    pub(super) messages: Vec<WebhookMessage>,
    pub(super) denied: bool,
    /// Thread → its parent channel.
    pub(super) threads: Vec<(String, String)>,
    /// Answers to webhook posts wait while this is set (the post itself is made).
    pub(super) stall_answers: bool,
}

/// Why Discord refuses a webhook name, if it does.
fn bad_name(name: &str) -> Option<&'static str> {
    let lower = name.to_lowercase();
    let len = name.chars().count();
    if !(1..=80).contains(&len) {
        return Some("BASE_TYPE_BAD_LENGTH");
    }
    if lower.contains("discord") || lower.contains("clyde") {
        return Some("USERNAME_INVALID_CONTAINS");
    }
    None
}

/// A thread has no webhooks of its own (Discord's 50024 for the channel routes).
fn thread_refusal(hooks: &Hooks, channel: &str) -> Option<Response> {
    hooks.threads.iter().any(|(t, _)| t == channel).then(|| {
        discord_error(
            StatusCode::BAD_REQUEST,
            50024,
            "Cannot execute action on this channel type",
        )
    })
}

fn invalid_form(field: &str, code: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"code": 50035, "message": "Invalid Form Body",
            "errors": {field: {"_errors": [{"code": code, "message": "Invalid"}]}}})),
    )
        .into_response()
}

impl FakeDiscord {
    /// Makes `thread` a thread of `parent` (`GET /channels/{thread}` says so).
    pub fn add_thread(&self, thread: &str, parent: &str) {
        self.shared
            .lock()
            .hooks
            .threads
            .push((thread.into(), parent.into()));
    }

    /// The bot loses Manage Webhooks: webhook routes on channels answer 403 (50013).
    pub fn deny_manage_webhooks(&self) {
        self.shared.lock().hooks.denied = true;
    }

    /// A server admin deletes every webhook: posting through one is then Unknown Webhook.
    pub fn delete_webhooks(&self) {
        self.shared.lock().hooks.webhooks.clear();
    }

    /// Answers to webhook posts wait (the message is posted and dispatched) until
    /// [`Self::answer_webhook_posts`]: a crash between a post and its record.
    pub fn stall_webhook_answers(&self) {
        self.shared.lock().hooks.stall_answers = true;
    }

    pub fn answer_webhook_posts(&self) {
        self.shared.lock().hooks.stall_answers = false;
        self.shared.sent.send_modify(|_| {});
    }

    /// The webhooks that exist now.
    pub fn webhooks(&self) -> Vec<FakeWebhook> {
        self.shared.lock().hooks.webhooks.clone()
    }

    /// How many webhooks were ever created.
    pub fn webhooks_made(&self) -> usize {
        self.shared.lock().hooks.made
    }

    pub fn webhook_messages(&self) -> Vec<WebhookMessage> {
        self.shared.lock().hooks.messages.clone()
    }

    /// Waits until the webhook messages satisfy `check`.
    pub async fn try_wait_for_webhook_messages(
        &self,
        expected: &str,
        timeout: Duration,
        mut check: impl FnMut(&[WebhookMessage]) -> bool,
    ) -> Result<Vec<WebhookMessage>, String> {
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let inner = self.shared.lock();
                check(&inner.hooks.messages).then(|| inner.hooks.messages.clone())
            },
        )
        .await
    }
}

/// `GET /channels/{channel}`.
pub(super) async fn get_channel(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/channels/{channel}");
    if caller(&shared, &headers).is_none() {
        record(&shared, "GET", path, 401, false);
        return unauthorized();
    }
    let parent = {
        let inner = shared.lock();
        inner
            .hooks
            .threads
            .iter()
            .find(|(t, _)| *t == channel)
            .map(|(_, p)| p.clone())
    };
    record(&shared, "GET", path, 200, true);
    let body = match parent {
        Some(parent) => json!({"id": channel, "type": 11, "guild_id": GUILD_ID,
            "parent_id": parent, "name": "a thread"}),
        None => json!({"id": channel, "type": 0, "guild_id": GUILD_ID,
            "parent_id": null, "name": "general"}),
    };
    with_bucket(StatusCode::OK, body)
}

/// `GET /channels/{channel}/webhooks`.
pub(super) async fn list_webhooks(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/channels/{channel}/webhooks");
    if caller(&shared, &headers).is_none() {
        record(&shared, "GET", path, 401, false);
        return unauthorized();
    }
    let mut inner = shared.lock();
    if inner.hooks.denied {
        drop(inner);
        record(&shared, "GET", path, 403, true);
        return discord_error(StatusCode::FORBIDDEN, 50013, "Missing Permissions");
    }
    if let Some(refusal) = thread_refusal(&inner.hooks, &channel) {
        drop(inner);
        record(&shared, "GET", path, 400, true);
        return refusal;
    }
    let list: Vec<Value> = inner
        .hooks
        .webhooks
        .iter()
        .filter(|w| w.channel == channel)
        .map(webhook_json)
        .collect();
    inner.requests.push(super::RequestRecord {
        method: "GET",
        path,
        status: 200,
        authorized: true,
    });
    with_bucket(StatusCode::OK, Value::Array(list))
}

fn webhook_json(w: &FakeWebhook) -> Value {
    json!({"id": w.id, "type": 1, "channel_id": w.channel, "guild_id": GUILD_ID,
        "name": "troupe", "avatar": null, "token": w.token, "application_id": null,
        "user": {"id": w.creator, "username": "bot", "discriminator": "0",
            "avatar": null, "bot": true}})
}

/// `POST /channels/{channel}/webhooks`.
pub(super) async fn create_webhook(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/channels/{channel}/webhooks");
    let Some(bot) = caller(&shared, &headers) else {
        record(&shared, "POST", path, 401, false);
        return unauthorized();
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut inner = shared.lock();
    if inner.hooks.denied {
        drop(inner);
        record(&shared, "POST", path, 403, true);
        return discord_error(StatusCode::FORBIDDEN, 50013, "Missing Permissions");
    }
    if let Some(refusal) = thread_refusal(&inner.hooks, &channel) {
        drop(inner);
        record(&shared, "POST", path, 400, true);
        return refusal;
    }
    let name = body["name"].as_str().unwrap_or_default();
    if let Some(code) = bad_name(name) {
        drop(inner);
        record(&shared, "POST", path, 400, true);
        return invalid_form("name", code);
    }
    inner.next_message += 1;
    let n = inner.next_message;
    inner.hooks.made += 1;
    let hook = FakeWebhook {
        id: snowflake(n),
        token: format!("wh00k-t0k3n-{n}"),
        channel: channel.clone(),
        creator: bot.id.clone(),
    };
    inner.hooks.webhooks.push(hook.clone());
    inner.requests.push(super::RequestRecord {
        method: "POST",
        path,
        status: 200,
        authorized: true,
    });
    with_bucket(StatusCode::OK, webhook_json(&hook))
}

/// The query of a webhook route.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct HookQuery {
    wait: Option<bool>,
    thread_id: Option<String>,
}

/// `POST /webhooks/{id}/{token}`: a channel webhook's message, else an interaction's
/// follow-up.
pub(super) async fn execute(
    State(shared): State<Arc<Shared>>,
    Path((id, token)): Path<(String, String)>,
    Query(query): Query<HookQuery>,
    body: axum::body::Bytes,
) -> Response {
    if id == super::APPLICATION_ID {
        return super::interactions::follow_up(State(shared), Path((id, token)), body).await;
    }
    let path = with_thread(format!("/webhooks/{id}/…"), &query);
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let outcome = post(&shared, &id, &token, &query, &body);
    let (status, answer) = match outcome {
        Ok(message) if query.wait == Some(true) => (200, with_bucket(StatusCode::OK, message)),
        Ok(_) => (204, StatusCode::NO_CONTENT.into_response()),
        Err((status, answer)) => (status, *answer),
    };
    record(&shared, "POST", path, status, true);
    if status == 200 {
        // A crash between the post and its record: the answer never comes.
        let mut stalled = shared.sent.subscribe();
        let _ = stalled
            .wait_for(|_| !shared.lock().hooks.stall_answers)
            .await;
    }
    answer
}

/// `path` with the request's `thread_id`, when it has one.
fn with_thread(path: String, query: &HookQuery) -> String {
    match &query.thread_id {
        Some(thread) => format!("{path}?thread_id={thread}"),
        None => path,
    }
}

/// The `content`, `username` and `avatar_url` of a webhook post, as Discord checks them.
fn valid_post(body: &Value) -> Result<(String, String, Option<String>), Box<Response>> {
    let content = body["content"].as_str().unwrap_or_default().to_string();
    if content.is_empty() || content.chars().count() > MAX_CONTENT {
        return Err(Box::new(invalid_form("content", "BASE_TYPE_BAD_LENGTH")));
    }
    let username = body["username"].as_str().unwrap_or("troupe").to_string();
    if let Some(code) = bad_name(&username) {
        return Err(Box::new(invalid_form("username", code)));
    }
    let avatar = body["avatar_url"].as_str().map(str::to_string);
    if avatar.as_ref().is_some_and(|a| a.len() > 2048) {
        return Err(Box::new(invalid_form("avatar_url", "BASE_TYPE_MAX_LENGTH")));
    }
    Ok((content, username, avatar))
}

fn post(
    shared: &Shared,
    id: &str,
    token: &str,
    query: &HookQuery,
    body: &Value,
) -> Result<Value, (u16, Box<Response>)> {
    let mut inner = shared.lock();
    let Some(hook) = inner
        .hooks
        .webhooks
        .iter()
        .find(|w| w.id == id && w.token == token)
        .cloned()
    else {
        return Err((
            404,
            Box::new(discord_error(
                StatusCode::NOT_FOUND,
                10015,
                "Unknown Webhook",
            )),
        ));
    };
    let (content, username, avatar) = valid_post(body).map_err(|e| (400, e))?;
    let channel = match &query.thread_id {
        Some(thread)
            if inner
                .hooks
                .threads
                .iter()
                .any(|(t, p)| t == thread && *p == hook.channel) =>
        {
            thread.clone()
        }
        Some(_) => {
            return Err((
                400,
                Box::new(discord_error(
                    StatusCode::BAD_REQUEST,
                    10003,
                    "Unknown Channel",
                )),
            ));
        }
        None => hook.channel.clone(),
    };
    inner.next_message += 1;
    let n = inner.next_message;
    let message = json!({
        "id": snowflake(n), "channel_id": channel, "guild_id": GUILD_ID,
        "author": {"id": hook.id, "username": username, "discriminator": "0000",
            "avatar": null, "bot": true},
        "webhook_id": hook.id, "content": content, "timestamp": timestamp(n),
        "edited_timestamp": null, "tts": false, "mention_everyone": false, "mentions": [],
        "mention_roles": [], "attachments": [], "embeds": [], "pinned": false,
        "type": 0, "flags": 0,
    });
    inner.hooks.messages.push(WebhookMessage {
        id: snowflake(n),
        webhook_id: hook.id.clone(),
        channel: channel.clone(),
        username,
        avatar_url: avatar,
        content,
        edits: Vec::new(),
    });
    inner
        .channels
        .entry(channel)
        .or_default()
        .push(message.clone());
    inner.dispatch("MESSAGE_CREATE", message.clone());
    drop(inner);
    shared.sent.send_modify(|_| {});
    Ok(message)
}

/// The channel of webhook `id` (its messages outside it are in its threads).
fn hook_channel<'a>(hooks: &'a Hooks, id: &str) -> &'a str {
    hooks
        .webhooks
        .iter()
        .find(|w| w.id == id)
        .map_or("", |w| w.channel.as_str())
}

/// `PATCH`/`DELETE /webhooks/{id}/{token}/messages/{message}`.
pub(super) async fn webhook_message(
    State(shared): State<Arc<Shared>>,
    method: axum::http::Method,
    Path((id, token, message)): Path<(String, String, String)>,
    Query(query): Query<HookQuery>,
    body: axum::body::Bytes,
) -> Response {
    let path = with_thread(format!("/webhooks/{id}/…/messages/{message}"), &query);
    let verb = if method == axum::http::Method::PATCH {
        "PATCH"
    } else {
        "DELETE"
    };
    let mut inner = shared.lock();
    let hook_ok = inner
        .hooks
        .webhooks
        .iter()
        .any(|w| w.id == id && w.token == token);
    // A message in a thread is found only with its thread's `thread_id`; one in the
    // webhook's channel only without one.
    let found = inner.hooks.messages.iter().position(|m| {
        let in_thread = m.channel != hook_channel(&inner.hooks, &m.webhook_id);
        let thread_ok = match &query.thread_id {
            Some(thread) => in_thread && *thread == m.channel,
            None => !in_thread,
        };
        m.id == message && m.webhook_id == id && thread_ok
    });
    let (status, answer) = match (hook_ok, found) {
        (false, _) => (
            404,
            discord_error(StatusCode::NOT_FOUND, 10015, "Unknown Webhook"),
        ),
        (true, None) => (
            404,
            discord_error(StatusCode::NOT_FOUND, 10008, "Unknown Message"),
        ),
        (true, Some(i)) if verb == "PATCH" => {
            let body: Value = serde_json::from_slice(&body).unwrap_or_default();
            let content = body["content"].as_str().unwrap_or_default().to_string();
            if content.is_empty() || content.chars().count() > MAX_CONTENT {
                (400, invalid_form("content", "BASE_TYPE_BAD_LENGTH"))
            } else {
                let m = &mut inner.hooks.messages[i];
                m.content = content.clone();
                m.edits.push(content);
                (200, with_bucket(StatusCode::OK, json!({"id": message})))
            }
        }
        (true, Some(i)) => {
            inner.hooks.messages.remove(i);
            (204, StatusCode::NO_CONTENT.into_response())
        }
    };
    drop(inner);
    record(&shared, verb, path, status, true);
    shared.sent.send_modify(|_| {});
    answer
}
