//! Application commands and interactions on the fake Discord: `PUT` and `GET
//! /applications/{app}/commands` (the bulk overwrite, names checked as Discord documents,
//! ids kept for names that stay), the guild's roles, INTERACTION_CREATE for a slash command,
//! the interaction callback (`204`; `404` code 10062 unknown, `400` code 40060 already
//! acknowledged) and the follow-up through `POST /webhooks/{app}/{token}` (`404` code 10015
//! before the interaction was acknowledged).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{
    APPLICATION_ID, FakeDiscord, FollowUp, GUILD_ID, Inner, InteractionRecord, MAX_CONTENT,
    RequestRecord, Shared, Slash, authorized, discord_error, record, snowflake, timestamp,
    unauthorized, with_bucket,
};
use crate::wait;

impl FakeDiscord {
    /// A slash command, dispatched as INTERACTION_CREATE (type 2, APPLICATION_COMMAND) in
    /// the guild, with the fields Discord documents for it. Returns the interaction id.
    pub fn send_slash_command(&self, slash: Slash) -> String {
        let mut inner = self.shared.lock();
        inner.next_interaction += 1;
        let n = inner.next_interaction;
        let id = (700_000_000_000_000_000u64 + n).to_string();
        let token = format!("interaction-token-{n}");
        let user = inner.user(&slash.author);
        let command_id = inner
            .commands
            .iter()
            .find(|c| c["name"] == slash.name.as_str())
            .map(|c| c["id"].clone())
            .unwrap_or(json!("0"));
        let options: Vec<Value> = slash
            .options
            .iter()
            .map(|(name, value)| json!({"name": name, "type": 3, "value": value}))
            .collect();
        let d = json!({
            "id": id, "application_id": APPLICATION_ID, "type": 2, "token": token,
            "version": 1, "guild_id": GUILD_ID, "channel_id": slash.channel,
            "channel": {"id": slash.channel, "type": 0},
            "locale": "en-US", "guild_locale": "en-US", "entitlements": [],
            "app_permissions": "2048", "attachment_size_limit": 8_388_608,
            "authorizing_integration_owners": {"0": GUILD_ID}, "context": 0,
            "data": {"id": command_id, "name": slash.name, "type": 1, "options": options},
            "member": {"user": user, "roles": slash.roles, "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": false, "mute": false, "flags": 0, "nick": null,
                "permissions": slash.permissions.to_string()},
        });
        inner.interactions.insert(
            id.clone(),
            InteractionRecord {
                token,
                acknowledged: None,
            },
        );
        inner.dispatch("INTERACTION_CREATE", d);
        id
    }

    /// Adds a role to the guild; returns its id (for [`Slash::roles`]).
    pub fn add_role(&self, name: &str) -> String {
        let mut inner = self.shared.lock();
        let id = (300_000_000_000_000_000u64 + inner.roles.len() as u64 + 1).to_string();
        inner.roles.push((id.clone(), name.to_string()));
        id
    }

    /// The application's global commands, as registered.
    pub fn registered_commands(&self) -> Vec<Value> {
        self.shared.lock().commands.clone()
    }

    /// How many bulk overwrites of the commands were made.
    pub fn command_overwrites(&self) -> usize {
        self.shared.lock().command_overwrites
    }

    /// The callback type interaction `id` was acknowledged with (5: deferred).
    pub fn interaction_callback(&self, id: &str) -> Option<u64> {
        self.shared
            .lock()
            .interactions
            .get(id)
            .and_then(|i| i.acknowledged)
    }

    pub fn follow_ups(&self) -> Vec<FollowUp> {
        self.shared.lock().follow_ups.clone()
    }

    /// Waits until the bot has sent at least `n` follow-ups in all.
    pub async fn try_wait_for_follow_ups(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<FollowUp>, String> {
        let expected = format!("the fake Discord to get {n} interaction follow-up(s)");
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let sent = self.follow_ups();
                (sent.len() >= n).then_some(sent)
            },
        )
        .await
    }

    /// Waits until at least one bulk overwrite of the commands was made.
    pub async fn try_wait_for_commands(&self, timeout: Duration) -> Result<Vec<Value>, String> {
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            "the bot to register its application commands".to_string(),
            || {
                let inner = self.shared.lock();
                (inner.command_overwrites > 0).then(|| inner.commands.clone())
            },
        )
        .await
    }
}

/// `PUT /applications/{app}/commands`: replaces the global commands. Each needs a `name`
/// of 1 to 32 lower-case letters, digits, `-` or `_`, and a `description` of 1 to 100
/// characters (CHAT_INPUT); at most 100 commands. A name kept keeps its id.
pub(super) async fn overwrite_commands(
    State(shared): State<Arc<Shared>>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let ok = authorized(&shared, &headers);
    let path = format!("/applications/{app}/commands");
    if !ok {
        record(&shared, "PUT", path, 401, false);
        return unauthorized();
    }
    let list = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(list)) if list.len() <= 100 && app == APPLICATION_ID => list,
        _ => {
            record(&shared, "PUT", path, 400, true);
            return discord_error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
        }
    };
    for c in &list {
        let name = c["name"].as_str().unwrap_or_default();
        let description = c["description"].as_str().unwrap_or_default();
        let valid_name = (1..=32).contains(&name.chars().count())
            && name
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-' || ch == '_');
        if !valid_name || !(1..=100).contains(&description.chars().count()) {
            record(&shared, "PUT", path, 400, true);
            return discord_error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
        }
    }
    let mut inner = shared.lock();
    let mut commands = Vec::new();
    for mut c in list {
        let id = match inner.commands.iter().find(|old| old["name"] == c["name"]) {
            Some(old) => old["id"].clone(),
            None => {
                inner.next_command += 1;
                json!((500_000_000_000_000_000u64 + inner.next_command).to_string())
            }
        };
        c["id"] = id;
        c["application_id"] = json!(APPLICATION_ID);
        c["version"] = json!("1");
        commands.push(c);
    }
    inner.commands = commands.clone();
    inner.command_overwrites += 1;
    inner.requests.push(RequestRecord {
        method: "PUT",
        path,
        status: 200,
        authorized: true,
    });
    drop(inner);
    shared.sent.send_modify(|_| {});
    with_bucket(StatusCode::OK, Value::Array(commands))
}

pub(super) async fn list_commands(
    State(shared): State<Arc<Shared>>,
    Path(app): Path<String>,
    headers: HeaderMap,
) -> Response {
    let ok = authorized(&shared, &headers);
    record(
        &shared,
        "GET",
        format!("/applications/{app}/commands"),
        200,
        ok,
    );
    if !ok {
        return unauthorized();
    }
    with_bucket(StatusCode::OK, Value::Array(shared.lock().commands.clone()))
}

/// `GET /guilds/{guild}/roles`: the role objects of the guild (the @everyone role, whose
/// id is the guild's, first).
pub(super) async fn guild_roles(
    State(shared): State<Arc<Shared>>,
    Path(guild): Path<String>,
    headers: HeaderMap,
) -> Response {
    let ok = authorized(&shared, &headers);
    let path = format!("/guilds/{guild}/roles");
    if !ok {
        record(&shared, "GET", path, 401, false);
        return unauthorized();
    }
    if guild != GUILD_ID {
        record(&shared, "GET", path, 404, true);
        return discord_error(StatusCode::NOT_FOUND, 10004, "Unknown Guild");
    }
    record(&shared, "GET", path, 200, true);
    let role = |id: &str, name: &str, position: usize| {
        json!({"id": id, "name": name, "color": 0, "hoist": false, "position": position,
            "permissions": "0", "managed": false, "mentionable": false, "flags": 0})
    };
    let mut list = vec![role(GUILD_ID, "@everyone", 0)];
    for (i, (id, name)) in shared.lock().roles.iter().enumerate() {
        list.push(role(id, name, i + 1));
    }
    with_bucket(StatusCode::OK, Value::Array(list))
}

/// `POST /interactions/{id}/{token}/callback`: the interaction's initial response. No
/// bot token needed (the interaction token authenticates it).
pub(super) async fn interaction_callback(
    State(shared): State<Arc<Shared>>,
    Path((id, token)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let kind = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["type"].as_u64());
    let path = format!("/interactions/{id}/…/callback");
    let mut inner = shared.lock();
    let status = match inner.interactions.get_mut(&id) {
        Some(i) if i.token == token => match (i.acknowledged, kind) {
            (Some(_), _) => 400,
            (None, Some(k @ (1 | 4 | 5 | 6 | 7 | 9))) => {
                i.acknowledged = Some(k);
                204
            }
            (None, _) => 422,
        },
        _ => 404,
    };
    inner.requests.push(RequestRecord {
        method: "POST",
        path,
        status,
        authorized: true,
    });
    drop(inner);
    shared.sent.send_modify(|_| {});
    match status {
        204 => StatusCode::NO_CONTENT.into_response(),
        400 => discord_error(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        ),
        404 => discord_error(StatusCode::NOT_FOUND, 10062, "Unknown interaction"),
        _ => discord_error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body"),
    }
}

/// `POST /webhooks/{app}/{token}`: a follow-up message on an acknowledged interaction;
/// answers with the message.
pub(super) async fn follow_up(
    State(shared): State<Arc<Shared>>,
    Path((app, token)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let content = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["content"].as_str().map(str::to_string));
    let mut inner = shared.lock();
    let found = inner
        .interactions
        .iter()
        .find(|(_, i)| i.token == token && i.acknowledged.is_some())
        .map(|(id, _)| id.clone());
    let path = format!("/webhooks/{app}/…");
    let (status, response) = match (found, content) {
        (Some(_), Some(c)) if c.chars().count() > MAX_CONTENT || c.is_empty() => (
            400,
            discord_error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body"),
        ),
        (Some(interaction), Some(content)) if app == APPLICATION_ID => {
            inner.next_message += 1;
            let n = inner.next_message;
            let id = snowflake(n);
            inner.follow_ups.push(FollowUp {
                interaction,
                content: content.clone(),
            });
            let message = json!({"id": id, "content": content, "type": 0,
                "author": Inner::bot_user(), "timestamp": timestamp(n), "flags": 0});
            (200, with_bucket(StatusCode::OK, message))
        }
        _ => (
            404,
            discord_error(StatusCode::NOT_FOUND, 10015, "Unknown Webhook"),
        ),
    };
    inner.requests.push(RequestRecord {
        method: "POST",
        path,
        status,
        authorized: true,
    });
    drop(inner);
    shared.sent.send_modify(|_| {});
    response
}
