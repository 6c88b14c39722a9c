//! Edits and deletes on the fake Discord (issue 32): a sender's (MESSAGE_UPDATE with the
//! whole message and `edited_timestamp`, MESSAGE_DELETE with `id`, `channel_id` and
//! `guild_id`, as Discord dispatches them) and the bot's own (`PATCH` and `DELETE
//! /channels/{id}/messages/{m}`, kept in order, with scripted 429s on edits).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{
    BASE_UNIX_MS, DISCORD_EPOCH_MS, Edit, FakeDiscord, GUILD_ID, Inner, MAX_CONTENT, RequestRecord,
    SentMessage, Shared, Which, caller, record, timestamp, unauthorized, with_bucket,
};
use crate::wait;

impl FakeDiscord {
    /// An edit of message `id` by its author (issue 32): its text becomes `content` (the
    /// mentions it had are kept), edited `after_secs` seconds after it was sent. Dispatched
    /// as MESSAGE_UPDATE with the whole message and `edited_timestamp`, as Discord sends an
    /// edit of the text. `false` when the fake has no such message.
    pub fn send_message_update(&self, id: &str, content: &str, after_secs: u64) -> bool {
        let mut inner = self.shared.lock();
        let dm_channels = inner.dm_channels.clone();
        let Some(m) = inner
            .channels
            .values_mut()
            .flatten()
            .find(|m| m["id"] == id)
        else {
            return false;
        };
        let prefix: String = m["mentions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| format!("<@{}> ", u["id"].as_str().unwrap_or_default()))
            .collect();
        let n = id
            .parse::<u64>()
            .map(|s| ((s >> 22) + DISCORD_EPOCH_MS).saturating_sub(BASE_UNIX_MS) / 1000)
            .unwrap_or(0);
        m["content"] = json!(format!("{prefix}{content}"));
        m["edited_timestamp"] = json!(timestamp(n + after_secs));
        let mut m = m.clone();
        let channel = m["channel_id"].as_str().unwrap_or_default().to_string();
        if dm_channels.contains(&channel) {
            inner.dispatch_to(Which::Primary, "MESSAGE_UPDATE", m);
        } else {
            m["guild_id"] = json!(GUILD_ID);
            m["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": false, "mute": false, "nick": null});
            inner.dispatch("MESSAGE_UPDATE", m);
        }
        true
    }

    /// Message `id` deleted by its author (issue 32): removed from its channel and
    /// dispatched as MESSAGE_DELETE (`id`, `channel_id`, and `guild_id` in a guild), as
    /// Discord sends it. `false` when the fake has no such message.
    pub fn send_message_delete(&self, id: &str) -> bool {
        let mut inner = self.shared.lock();
        let Some(channel) = inner
            .channels
            .iter()
            .find(|(_, ms)| ms.iter().any(|m| m["id"] == id))
            .map(|(c, _)| c.clone())
        else {
            return false;
        };
        if let Some(ms) = inner.channels.get_mut(&channel) {
            ms.retain(|m| m["id"] != id);
        }
        if inner.dm_channels.contains(&channel) {
            let d = json!({"id": id, "channel_id": channel});
            inner.dispatch_to(Which::Primary, "MESSAGE_DELETE", d);
        } else {
            let d = json!({"id": id, "channel_id": channel, "guild_id": GUILD_ID});
            inner.dispatch("MESSAGE_DELETE", d);
        }
        true
    }

    /// Every edit of the bot's messages, in order (issue 32).
    pub fn edits(&self) -> Vec<Edit> {
        self.shared.lock().edits.clone()
    }

    /// The ids of the bot's messages it deleted, in order.
    pub fn deleted(&self) -> Vec<String> {
        self.shared.lock().deleted.clone()
    }

    /// The next `n` message edits are answered 429 (retry after 0.5 s).
    pub fn script_edit_429(&self, n: usize) {
        self.shared.lock().scripted_edit_429 += n;
    }

    /// Waits until `check` holds for what the bot sent (messages as they are now, after
    /// edits) and the edits it made; returns the messages. Wakes on every create, edit and
    /// delete.
    pub async fn try_wait_for_state(
        &self,
        expected: &str,
        timeout: Duration,
        mut check: impl FnMut(&[SentMessage], &[Edit]) -> bool,
    ) -> Result<Vec<SentMessage>, String> {
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let inner = self.shared.lock();
                check(&inner.sent, &inner.edits).then(|| inner.sent.clone())
            },
        )
        .await
    }
}

/// `PATCH /channels/{channel}/messages/{message}`: the bot edits one of its messages'
/// `content` (at most 2,000 characters); its record in [`FakeDiscord::sent_messages`] then
/// shows the new text, and the edit is kept in [`FakeDiscord::edits`].
pub(super) async fn edit_message(
    State(shared): State<Arc<Shared>>,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/channels/{channel}/messages/{message}");
    if caller(&shared, &headers).is_none() {
        record(&shared, "PATCH", path, 401, false);
        return unauthorized();
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let response = {
        let mut inner = shared.lock();
        edit_in(&mut inner, &channel, &message, &body, path)
    };
    shared.sent.send_modify(|_| {});
    response
}

pub(super) fn edit_in(
    inner: &mut Inner,
    channel: &str,
    message: &str,
    body: &Value,
    path: String,
) -> Response {
    if inner.scripted_edit_429 > 0 {
        inner.scripted_edit_429 -= 1;
        inner.rate_limited += 1;
        inner.requests.push(RequestRecord {
            method: "PATCH",
            path,
            status: 429,
            authorized: true,
        });
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "1"), ("x-ratelimit-scope", "user")],
            axum::Json(json!({"message": "You are being rate limited.", "retry_after": 0.5, "global": false})),
        )
            .into_response();
    }
    let (status, answer) = match edited(inner, channel, message, body) {
        Ok(updated) => (200, updated),
        Err((status, error)) => (status, error),
    };
    inner.requests.push(RequestRecord {
        method: "PATCH",
        path,
        status,
        authorized: true,
    });
    with_bucket(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        answer,
    )
}

/// Edits the message as Discord would: the message as it now is, or the status and error
/// Discord answers.
fn edited(
    inner: &mut Inner,
    channel: &str,
    message: &str,
    body: &Value,
) -> Result<Value, (u16, Value)> {
    let content = editable(inner, message, body)?;
    let Some(sent) = inner
        .sent
        .iter_mut()
        .find(|m| m.id == message && m.channel == channel)
    else {
        return Err((404, json!({"code": 10008, "message": "Unknown Message"})));
    };
    sent.content = content.clone();
    let mut updated = Value::Null;
    for m in inner.channels.values_mut().flatten() {
        if m["id"] == message {
            m["content"] = json!(content);
            m["edited_timestamp"] = json!("2026-01-01T00:00:00.000000+00:00");
            updated = m.clone();
        }
    }
    for m in inner.nonces.values_mut() {
        if m["id"] == message {
            *m = updated.clone();
        }
    }
    inner.edits.push(Edit {
        message_id: message.to_string(),
        channel: channel.to_string(),
        content,
        at: std::time::Instant::now(),
    });
    Ok(updated)
}

/// The new content, if the edit is one Discord takes: content that is not blank and not
/// too long, of a message that is not a voice message.
fn editable(inner: &Inner, message: &str, body: &Value) -> Result<String, (u16, Value)> {
    let Some(content) = body["content"].as_str().map(str::to_string) else {
        return Err((
            400,
            json!({"code": 50109, "message": "The request body contains invalid JSON."}),
        ));
    };
    if content.trim().is_empty() || content.chars().count() > MAX_CONTENT {
        return Err((400, json!({"code": 50035, "message": "Invalid Form Body"})));
    }
    if inner
        .uploads
        .iter()
        .any(|u| u.id == message && u.is_voice_message())
    {
        return Err((
            400,
            json!({"code": 50162, "message": "Voice messages cannot be edited."}),
        ));
    }
    Ok(content)
}

/// `DELETE /channels/{channel}/messages/{message}`: 204, the message gone from
/// [`FakeDiscord::sent_messages`] and its id in [`FakeDiscord::deleted`].
pub(super) async fn delete_message(
    State(shared): State<Arc<Shared>>,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/channels/{channel}/messages/{message}");
    if caller(&shared, &headers).is_none() {
        record(&shared, "DELETE", path, 401, false);
        return unauthorized();
    }
    let found = {
        let mut inner = shared.lock();
        let before = inner.sent.len();
        inner
            .sent
            .retain(|m| !(m.id == message && m.channel == channel));
        let found = inner.sent.len() != before;
        if found {
            if let Some(list) = inner.channels.get_mut(&channel) {
                list.retain(|m| m["id"] != message.as_str());
            }
            inner.deleted.push(message.clone());
        }
        inner.requests.push(RequestRecord {
            method: "DELETE",
            path,
            status: if found { 204 } else { 404 },
            authorized: true,
        });
        found
    };
    shared.sent.send_modify(|_| {});
    if found {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"code": 10008, "message": "Unknown Message"})),
        )
            .into_response()
    }
}
