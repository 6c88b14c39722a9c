//! Messages on the fake Discord: what someone else writes (MESSAGE_CREATE, or kept in the
//! channel's history while the bot is away), what the bot sends (`POST
//! /channels/{id}/messages`: the 2,000-character limit, `message_reference`, `nonce` with
//! `enforce_nonce`, scripted 429s and refusals), the history (`GET
//! /channels/{id}/messages?after=&limit=`, newest first), typing, and the CDN that serves
//! attachments.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{
    Author, BOT_ID, BOT_NAME, FakeBot, FakeDiscord, GUILD_ID, Inner, MAX_CONTENT, NewMessage,
    RequestRecord, SentMessage, Shared, Which, authorized, caller, record, snowflake, timestamp,
    unauthorized, voice, with_bucket,
};
use crate::wait;

impl NewMessage {
    /// A message in guild channel `channel`.
    pub fn guild(channel: &str, author: Author, content: &str) -> Self {
        Self {
            channel: channel.into(),
            author,
            content: content.into(),
            mention_bot: false,
            mentions: Vec::new(),
            dm: false,
            reply_to: None,
            attachments: Vec::new(),
            embeds: Vec::new(),
            flags: 0,
            webhook_id: None,
            guild: None,
        }
    }
    /// A direct message in DM channel `channel`.
    pub fn dm(channel: &str, author: Author, content: &str) -> Self {
        Self {
            dm: true,
            ..Self::guild(channel, author, content)
        }
    }
    pub fn mentioning_bot(mut self) -> Self {
        self.mention_bot = true;
        self
    }
    /// Mentions `bot` (one added with [`FakeDiscord::add_bot`], or the first).
    pub fn mentioning(mut self, bot: &FakeBot) -> Self {
        self.mentions.push(bot.clone());
        self
    }
    pub fn replying_to(mut self, message_id: &str) -> Self {
        self.reply_to = Some(message_id.into());
        self
    }
    /// Posted through the webhook `id`, as anyone holding its URL can post (an admin may
    /// also move a webhook to another channel): the author is the webhook, named as
    /// `author` says.
    pub fn through_webhook(mut self, id: &str) -> Self {
        self.webhook_id = Some(id.into());
        self
    }
    /// In guild `guild` rather than the fake's own (the bot is a member of both).
    pub fn in_guild(mut self, guild: &str) -> Self {
        self.guild = Some(guild.into());
        self
    }
    pub fn with_attachment(mut self, filename: &str, content_type: &str, size: u64) -> Self {
        self.attachments.push(json!({
            "id": "700000000000000001", "filename": filename, "content_type": content_type,
            "size": size, "url": format!("https://cdn.example/{filename}"),
            "proxy_url": format!("https://media.example/{filename}")
        }));
        self
    }
}

/// Files on messages (issue 32): attachments whose `url` the fake's CDN serves (see
/// [`FakeDiscord::add_cdn_file`]), and embeds.
impl NewMessage {
    /// An attachment at `url` (a CDN URL from [`FakeDiscord::add_cdn_file`], or any link),
    /// with the type and size Discord reports.
    pub fn with_file(mut self, url: &str, filename: &str, content_type: &str, size: u64) -> Self {
        self.attachments.push(json!({
            "id": format!("70000000000000{:04}", self.attachments.len() + 1),
            "filename": filename, "content_type": content_type, "size": size,
            "url": url, "proxy_url": url
        }));
        self
    }

    /// A voice message, as Discord's clients post one: the message flagged
    /// `IS_VOICE_MESSAGE` (1 << 13), its one attachment the Ogg recording at `url` with its
    /// `duration_secs` and `waveform`.
    pub fn as_voice_message(mut self, url: &str, size: u64, duration_secs: f64) -> Self {
        self.flags |= 1 << 13;
        self = self.with_file(url, "voice-message.ogg", "audio/ogg", size);
        if let Some(last) = self.attachments.last_mut() {
            last["duration_secs"] = json!(duration_secs);
            last["waveform"] = json!("AAAAAAAAAAAA");
        }
        self
    }

    /// An `image` embed, as Discord unfurls a picture link: `source` is the link, `proxy` the
    /// copy on Discord's media proxy (`None` when Discord has none).
    pub fn with_image_embed(mut self, source: &str, proxy: Option<&str>) -> Self {
        let mut thumbnail = json!({"url": source, "width": 64, "height": 64});
        if let Some(proxy) = proxy {
            thumbnail["proxy_url"] = json!(proxy);
        }
        self.embeds
            .push(json!({"type": "image", "url": source, "thumbnail": thumbnail}));
        self
    }
}

impl Inner {
    pub(super) fn user(&mut self, author: &Author) -> Value {
        let next = 100 + self.users.len() as u64;
        let id = self
            .users
            .entry(author.name.clone())
            .or_insert_with(|| format!("{}", 600_000_000_000_000_000u64 + next))
            .clone();
        json!({"id": id, "username": author.name, "discriminator": "0",
            "global_name": author.name, "avatar": null, "bot": author.bot})
    }

    pub(super) fn bot_user() -> Value {
        json!({"id": BOT_ID, "username": BOT_NAME, "discriminator": "0",
            "global_name": "Dot", "avatar": null, "bot": true})
    }

    pub(super) fn find(&self, id: &str) -> Option<Value> {
        self.channels
            .values()
            .flatten()
            .find(|m| m["id"] == id)
            .cloned()
    }

    pub(super) fn message(&mut self, new: &NewMessage) -> Value {
        self.next_message += 1;
        let n = self.next_message;
        let author = match &new.webhook_id {
            Some(hook) => json!({"id": hook, "username": new.author.name,
                "discriminator": "0000", "avatar": null, "bot": true}),
            None => self.user(&new.author),
        };
        let mut mentioned: Vec<FakeBot> =
            new.mention_bot.then(FakeBot::primary).into_iter().collect();
        mentioned.extend(new.mentions.iter().cloned());
        let prefix: String = mentioned.iter().map(|b| format!("<@{}> ", b.id)).collect();
        let content = format!("{prefix}{}", new.content);
        let mentions: Vec<Value> = mentioned.iter().map(FakeBot::user).collect();
        let referenced = new.reply_to.as_deref().and_then(|id| self.find(id));
        let mut m = json!({
            "id": snowflake(n), "channel_id": new.channel, "author": author,
            "content": content, "timestamp": timestamp(n), "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": mentions,
            "mention_roles": [], "attachments": new.attachments, "embeds": new.embeds,
            "pinned": false, "type": if new.reply_to.is_some() { 19 } else { 0 },
            "flags": new.flags,
        });
        if let Some(hook) = &new.webhook_id {
            m["webhook_id"] = json!(hook);
        }
        if let Some(id) = &new.reply_to {
            m["message_reference"] =
                json!({"type": 0, "message_id": id, "channel_id": new.channel});
            m["referenced_message"] = referenced.unwrap_or(Value::Null);
        }
        if new.dm && !self.dm_channels.contains(&new.channel) {
            self.dm_channels.push(new.channel.clone());
        }
        self.channels
            .entry(new.channel.clone())
            .or_default()
            .push(m.clone());
        m
    }
}

impl FakeDiscord {
    /// Puts `bytes` on the fake CDN as `filename` and returns its URL (signed-looking, as
    /// Discord's are: `…/attachments/<channel>/<id>/<filename>?ex=…&hm=…`).
    pub fn add_cdn_file(&self, filename: &str, bytes: &[u8]) -> String {
        let mut inner = self.shared.lock();
        let path = format!("1200/{}/{filename}", 1000 + inner.cdn.len());
        inner.cdn.insert(path.clone(), bytes.to_vec());
        format!("{}/attachments/{path}?ex=6a1b2c3d&hm=0f1e2d3c", self.url())
    }

    /// The CDN requests so far: (path, whether an `Authorization` header came).
    pub fn cdn_requests(&self) -> Vec<(String, bool)> {
        self.shared.lock().cdn_requests.clone()
    }

    /// A message by someone else, dispatched as MESSAGE_CREATE. Without a session (the bot
    /// is not connected) it is only stored, as Discord stores what a bot misses.
    pub fn send_message_create(&self, new: NewMessage) -> String {
        let mut inner = self.shared.lock();
        let mut m = inner.message(&new);
        let id = m["id"].as_str().unwrap_or_default().to_string();
        if !new.dm {
            m["guild_id"] = json!(new.guild.as_deref().unwrap_or(GUILD_ID));
        }
        if !new.dm && new.webhook_id.is_none() {
            // A webhook is no member: Discord sends no `member` with its messages.
            m["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": false, "mute": false, "nick": null});
        }
        if new.dm {
            inner.dispatch_to(Which::Primary, "MESSAGE_CREATE", m);
        } else {
            inner.dispatch("MESSAGE_CREATE", m);
        }
        id
    }

    /// A message stored in the channel's history only (said while the bot was away).
    pub fn store_channel_message(&self, new: NewMessage) -> String {
        let m = self.shared.lock().message(&new);
        m["id"].as_str().unwrap_or_default().to_string()
    }

    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The user id the fake gave the author named `name`, once they wrote something.
    pub fn user_id(&self, name: &str) -> Option<String> {
        self.shared.lock().users.get(name).cloned()
    }

    pub fn typing_calls(&self) -> Vec<String> {
        self.shared.lock().typing.clone()
    }

    /// The next `n` message creates are answered 429.
    pub fn script_429(&self, n: usize) {
        self.shared.lock().scripted_429 += n;
    }

    /// The next message create (after any scripted 429s) is refused with `status` and
    /// Discord's JSON error body: e.g. 403, code 50013, "Missing Permissions", or 500.
    pub fn refuse_next_send(&self, status: u16, code: u64, message: &str) {
        self.shared
            .lock()
            .scripted_errors
            .push_back((status, code, message.to_string()));
    }

    /// How many 429s were answered.
    pub fn rate_limited(&self) -> usize {
        self.shared.lock().rate_limited
    }

    /// Waits until the bot has sent at least `n` messages, then returns them all.
    pub async fn try_wait_for_sent(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<SentMessage>, String> {
        let expected = format!("the fake Discord to get {n} message(s)");
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let sent = self.sent_messages();
                (sent.len() >= n).then_some(sent)
            },
        )
        .await
    }

    pub async fn wait_for_sent(&self, n: usize, timeout: Duration) -> Vec<SentMessage> {
        self.try_wait_for_sent(n, timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the bot has shown typing in `channel` at least once.
    pub async fn wait_for_typing(&self, channel: &str, timeout: Duration) -> Result<(), String> {
        let expected = format!("typing in {channel}");
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                self.typing_calls()
                    .iter()
                    .any(|c| c == channel)
                    .then_some(())
            },
        )
        .await
    }
}

/// The CDN: a file added with [`FakeDiscord::add_cdn_file`], to anyone (its URL is the
/// secret, as Discord's signed CDN URLs are).
pub(super) async fn cdn_file(
    State(shared): State<Arc<Shared>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut inner = shared.lock();
    inner
        .cdn_requests
        .push((path.clone(), headers.contains_key("authorization")));
    match inner.cdn.get(&path) {
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

pub(super) async fn typing(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Response {
    let ok = authorized(&shared, &headers);
    let path = format!("/channels/{channel}/typing");
    record(&shared, "POST", path, if ok { 204 } else { 401 }, ok);
    if !ok {
        return unauthorized();
    }
    shared.lock().typing.push(channel);
    shared.sent.send_modify(|_| {});
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn create_message(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/channels/{channel}/messages");
    let Some(sender) = caller(&shared, &headers) else {
        record(&shared, "POST", path, 401, false);
        return unauthorized();
    };
    if voice::is_multipart(&headers) {
        return voice::create_with_files(&shared, &channel, &sender, &headers, body).await;
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            record(&shared, "POST", path, 400, true);
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"code": 50109, "message": "The request body contains invalid JSON."}),
                ),
            )
                .into_response();
        }
    };
    let mut inner = shared.lock();
    if let Some(refused) = inner.scripted_refusal(&path) {
        return refused;
    }
    let content = body["content"].as_str().unwrap_or_default().to_string();
    let len = content.chars().count();
    if content.trim().is_empty() || len > MAX_CONTENT {
        inner.requests.push(RequestRecord {
            method: "POST",
            path,
            status: 400,
            authorized: true,
        });
        let answer = if len > MAX_CONTENT {
            json!({"code": 50035, "message": "Invalid Form Body", "errors": {"content": {"_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}})
        } else {
            json!({"code": 50006, "message": "Cannot send an empty message"})
        };
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    }
    if let Some(existing) = inner.repeated_nonce(&channel, &body, &path) {
        return with_bucket(StatusCode::OK, existing);
    }
    let reference = &body["message_reference"];
    let reply_to = reference["message_id"].as_str().map(str::to_string);
    let mut message = inner.new_message(&channel, &sender, reply_to.as_deref());
    message["content"] = json!(content);
    let nonce = nonce_of(&body);
    inner.publish(&channel, &sender, &mut message, nonce.as_deref());
    let id = message["id"].as_str().unwrap_or_default().to_string();
    inner.sent.push(SentMessage {
        id,
        author_id: sender.id.clone(),
        channel: channel.clone(),
        content,
        reply_to,
        fail_if_not_exists: reference["fail_if_not_exists"].as_bool(),
        nonce,
    });
    inner.requests.push(RequestRecord {
        method: "POST",
        path,
        status: 200,
        authorized: true,
    });
    let count = inner.sent.len();
    drop(inner);
    shared.sent.send_replace(count);
    with_bucket(StatusCode::OK, message)
}

/// A message create's `nonce`, as a string.
pub(super) fn nonce_of(body: &Value) -> Option<String> {
    match &body["nonce"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Inner {
    /// A scripted 429 or refusal for the next message create, recorded.
    pub(super) fn scripted_refusal(&mut self, path: &str) -> Option<Response> {
        if self.scripted_429 > 0 {
            self.scripted_429 -= 1;
            self.rate_limited += 1;
            self.requests.push(RequestRecord {
                method: "POST",
                path: path.to_string(),
                status: 429,
                authorized: true,
            });
            return Some(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        ("retry-after", "1"),
                        ("x-ratelimit-limit", "5"),
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset-after", "0.500"),
                        ("x-ratelimit-bucket", "f4k3b0ck37"),
                        ("x-ratelimit-scope", "user"),
                    ],
                    axum::Json(json!({"message": "You are being rate limited.", "retry_after": 0.5, "global": false})),
                )
                    .into_response(),
            );
        }
        let (status, code, message) = self.scripted_errors.pop_front()?;
        self.requests.push(RequestRecord {
            method: "POST",
            path: path.to_string(),
            status,
            authorized: true,
        });
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        Some(
            (
                status,
                axum::Json(json!({"code": code, "message": message})),
            )
                .into_response(),
        )
    }

    /// The message an earlier create with the same `nonce` made, when `enforce_nonce` is
    /// set: Discord answers it and creates nothing (the request is recorded as a 200).
    pub(super) fn repeated_nonce(
        &mut self,
        channel: &str,
        body: &Value,
        path: &str,
    ) -> Option<Value> {
        if body["enforce_nonce"] != true {
            return None;
        }
        let nonce = nonce_of(body)?;
        let existing = self.nonces.get(&(channel.to_string(), nonce)).cloned()?;
        self.requests.push(RequestRecord {
            method: "POST",
            path: path.to_string(),
            status: 200,
            authorized: true,
        });
        Some(existing)
    }

    /// A new message object by `sender` in `channel`, without content yet; a reply to
    /// `reply_to` when given.
    pub(super) fn new_message(
        &mut self,
        channel: &str,
        sender: &FakeBot,
        reply_to: Option<&str>,
    ) -> Value {
        self.next_message += 1;
        let n = self.next_message;
        let referenced = reply_to.and_then(|id| self.find(id));
        let mut message = json!({
            "id": snowflake(n), "channel_id": channel, "author": sender.user(),
            "content": "", "timestamp": timestamp(n), "edited_timestamp": null, "tts": false,
            "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
            "embeds": [], "pinned": false, "type": if reply_to.is_some() { 19 } else { 0 }, "flags": 0,
        });
        if let Some(id) = reply_to {
            message["message_reference"] =
                json!({"type": 0, "message_id": id, "channel_id": channel});
            message["referenced_message"] = referenced.unwrap_or(Value::Null);
        }
        message
    }

    /// Puts `message` in `channel` (under its `nonce`, if any) and dispatches it, as Discord
    /// does: to its sender too; in a guild channel to every other bot as well (a DM is the
    /// sender's only).
    pub(super) fn publish(
        &mut self,
        channel: &str,
        sender: &FakeBot,
        message: &mut Value,
        nonce: Option<&str>,
    ) {
        if let Some(nonce) = nonce {
            message["nonce"] = json!(nonce);
            self.nonces
                .insert((channel.to_string(), nonce.to_string()), message.clone());
        }
        self.channels
            .entry(channel.to_string())
            .or_default()
            .push(message.clone());
        let mut message = message.clone();
        let dm = self.dm_channels.iter().any(|c| c == channel);
        if dm {
            let which = self
                .bot_by_token(&sender.token)
                .map_or(Which::Primary, |(w, _)| w);
            self.dispatch_to(which, "MESSAGE_CREATE", message);
        } else {
            message["guild_id"] = json!(GUILD_ID);
            self.dispatch("MESSAGE_CREATE", message);
        }
    }
}

pub(super) async fn list_messages(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let path = format!(
        "/channels/{channel}/messages?after={}",
        query.get("after").map(String::as_str).unwrap_or("")
    );
    if !authorized(&shared, &headers) {
        record(&shared, "GET", path, 401, false);
        return unauthorized();
    }
    let after: u64 = query.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(50)
        .clamp(1, 100);
    let mut inner = shared.lock();
    let mut found: Vec<Value> = inner
        .channels
        .get(&channel)
        .map(|ms| {
            ms.iter()
                .filter(|m| {
                    m["id"]
                        .as_str()
                        .and_then(|id| id.parse::<u64>().ok())
                        .is_some_and(|id| id > after)
                })
                .take(limit)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    found.reverse();
    inner.requests.push(RequestRecord {
        method: "GET",
        path,
        status: 200,
        authorized: true,
    });
    drop(inner);
    with_bucket(StatusCode::OK, Value::Array(found))
}
