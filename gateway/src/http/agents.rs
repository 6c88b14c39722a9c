//! `/api/agents`: the personas, the direct (HTTP) conversation with them, and their rooms.
//!
//! `POST /api/agents/{agent}/messages` is the Web connector's receiving side: it journals the
//! message like any platform message, waits for the agent's outcome, and answers with the
//! replies. The same `messageId` posted again returns the first answer instead of asking the
//! model twice.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use troupe_connectors::{
    AgentId, Inbound, MessageId, Platform, RoomId, RoomKey, RoomRef, SinkError, UserId, UserRef,
};

use super::AppState;
use super::error::{ApiError, ApiJson};
use crate::agent::Agent;
use crate::bus::BusError;
use crate::ingress::{ConverseError, HandleError, Outcome};
use crate::provider::ProviderError;

fn find(state: &AppState, agent: &str) -> Result<Arc<Agent>, ApiError> {
    state.agents.find(agent).ok_or_else(|| {
        let known: Vec<String> = state
            .agents
            .all()
            .iter()
            .map(|a| a.id.to_string())
            .collect();
        ApiError::not_found(format!(
            "no persona with id or name `{agent}`; loaded: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })
}

fn describe(agent: &Agent) -> Value {
    let mind = agent.mind();
    // Changes whenever the character file's content does: a hot reload is visible here.
    let revision = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        mind.persona.raw.to_string().hash(&mut h);
        format!("{:016x}", h.finish())
    };
    json!({
        "id": agent.id,
        "revision": revision,
        "name": mind.persona.name,
        "model": mind.provider.describe(),
        "modelConfigured": mind.provider.unavailable().is_none(),
        "platforms": mind.persona.platforms(),
        "source": mind.persona.source.file_name().map(|f| f.to_string_lossy().to_string()),
    })
}

pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let agents: Vec<Value> = state.agents.all().iter().map(|a| describe(a)).collect();
    Json(json!({ "agents": agents }))
}

pub async fn get(
    State(state): State<AppState>,
    Path(agent): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = find(&state, &agent)?;
    Ok(Json(describe(&agent)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    room_id: Option<String>,
    user_id: Option<String>,
    user_name: Option<String>,
    text: String,
    message_id: Option<String>,
}

fn nonempty(value: Option<String>, field: &str, max: usize) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Err(ApiError::bad_request(format!(
            "`{field}` must not be empty when given"
        ))),
        Some(v) if v.chars().count() > max => Err(ApiError::bad_request(format!(
            "`{field}` is longer than {max} characters"
        ))),
        Some(v) => Ok(Some(v)),
    }
}

pub async fn post_message(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let agent = find(&state, &agent)?;
    let mind = agent.mind();
    // Refuse before journaling: a message that cannot be answered is not accepted.
    if let Some(reason) = mind.provider.unavailable() {
        return Err(provider_error(&ProviderError::Unconfigured(reason)));
    }
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request("`text` must not be empty"));
    }
    let max = state.config.limits.max_message_chars;
    if body.text.chars().count() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("`text` is longer than {max} characters (TROUPE_MAX_MESSAGE_CHARS)"),
        ));
    }
    let room_id = nonempty(body.room_id, "roomId", 200)?.unwrap_or_else(|| "default".into());
    let user_id =
        nonempty(body.user_id, "userId", 200)?.unwrap_or_else(|| crate::web::ANONYMOUS_USER.into());
    let user_name = nonempty(body.user_name, "userName", 100)?.unwrap_or_else(|| "User".into());
    let message_id = nonempty(body.message_id, "messageId", 200)?
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());

    let inbound = Inbound {
        id: MessageId::new(message_id.clone()),
        room: RoomRef::new(Platform::Web, RoomId::new(room_id.clone())),
        author: UserRef {
            id: UserId::new(user_id),
            name: user_name,
            is_bot: false,
        },
        text: body.text,
        attachments: vec![],
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: crate::clock::now_ms(),
    };

    // The model has its own deadline; this one only guards against a lost outcome.
    let deadline = state.config.agent.model_timeout + Duration::from_secs(30);
    let agent_id = AgentId::from(agent.id.as_str());
    let answer = match state.ingress.converse(&agent_id, inbound, deadline).await {
        Ok(answer) => answer,
        Err(e) => return Err(converse_error(e)),
    };
    let duplicate = answer.duplicate;
    match answer.outcome {
        Outcome::Replied { texts } => Ok((
            StatusCode::OK,
            Json(json!({
                "replies": texts.iter().map(|t| json!({ "text": t })).collect::<Vec<_>>(),
                "roomId": room_id,
                "messageId": message_id,
                "duplicate": duplicate,
            })),
        )),
        Outcome::Ignored { reason } => Ok((
            StatusCode::OK,
            Json(
                json!({ "replies": [], "roomId": room_id, "messageId": message_id, "ignored": reason }),
            ),
        )),
        Outcome::RateLimited { scope } => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("too many messages (per-{scope} limit); wait a minute and try again"),
        )),
        Outcome::Failed { error } => Err(handle_error(&error)),
        // Not a model error: the message itself kept stopping the gateway (issue 12, #2).
        Outcome::GaveUp { reason } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "gave_up",
            reason,
        )),
    }
}

/// A message the journal or the bus did not take, or that got no answer in time. Storage
/// and the bus being down are 503s (the caller may post again); a message the database
/// refuses for good is the caller's to change (422).
fn converse_error(e: ConverseError) -> ApiError {
    match e {
        ConverseError::Journal(SinkError::Unavailable(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            format!("{e}; post it again in a few seconds"),
        ),
        ConverseError::Journal(SinkError::ShuttingDown(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            format!("{e}; post it again once the gateway is back"),
        ),
        ConverseError::Journal(SinkError::Rejected(_)) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "rejected", e.to_string())
        }
        ConverseError::Bus(BusError::Closed) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            format!("{e}; it will be answered at the next start, or post it again"),
        ),
        ConverseError::Bus(BusError::Backend(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "bus_unavailable",
            format!("{e}; post it again in a few seconds"),
        ),
        ConverseError::NoAnswerInTime => {
            ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", e.to_string())
        }
        ConverseError::KeyMismatch(_) => ApiError::internal(e),
    }
}

/// What handling the message failed with: the model's errors as they always were, the
/// database down as a 503 (the message stays journaled), a persona removed since the
/// message was journaled as a 404.
fn handle_error(error: &HandleError) -> ApiError {
    match error {
        HandleError::Model(e) => provider_error(e),
        HandleError::Storage(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            format!(
                "{error}; the message is journaled and will be answered when it is posted again or at the next start"
            ),
        ),
        HandleError::UnknownAgent(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_agent", error.to_string())
        }
    }
}

fn provider_error(error: &ProviderError) -> ApiError {
    let (status, code) = match error {
        ProviderError::Unconfigured(_) => (StatusCode::SERVICE_UNAVAILABLE, "model_unconfigured"),
        ProviderError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "model_timeout"),
        ProviderError::RateLimited { .. } => (StatusCode::BAD_GATEWAY, "model_rate_limited"),
        ProviderError::Upstream(_) | ProviderError::Empty => {
            (StatusCode::BAD_GATEWAY, "model_error")
        }
    };
    let mut detail = error.to_string();
    if !matches!(error, ProviderError::Unconfigured(_)) {
        detail.push_str("; the message is journaled and will be answered when it is posted again or at the next start");
    }
    ApiError::new(status, code, detail)
}

/// Parses a room path segment: `platform:room`, or a bare id for the Web platform.
fn room_key(room: &str) -> RoomKey {
    if let Some((platform, id)) = room.split_once(':')
        && let Ok(platform) = platform.parse::<Platform>()
    {
        return RoomKey::new(platform, RoomId::new(id));
    }
    RoomKey::new(Platform::Web, RoomId::new(room))
}

pub async fn rooms(
    State(state): State<AppState>,
    Path(agent): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = find(&state, &agent)?;
    let rooms = state.store.rooms(&agent.id).await?;
    Ok(Json(json!({ "rooms": rooms })))
}

#[derive(Debug, Deserialize)]
pub struct MemoryQuery {
    limit: Option<i64>,
}

pub async fn memories(
    State(state): State<AppState>,
    Path((agent, room)): Path<(String, String)>,
    Query(q): Query<MemoryQuery>,
) -> Result<Json<Value>, ApiError> {
    let agent = find(&state, &agent)?;
    let room = room_key(&room);
    let key = room.to_string();
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let messages = state.store.recent_messages(&agent.id, &room, limit).await?;
    // What the agent remembers beyond the recent messages (docs/memory.md).
    let summary = state.store.room_summary(&agent.id, &room).await?;
    let facts = state.store.room_user_facts(&agent.id, &room).await?;
    Ok(Json(json!({
        "room": key,
        "messages": messages,
        "summary": summary,
        "facts": facts,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_segments_parse_with_or_without_platform() {
        assert_eq!(room_key("telegram:-100:7").to_string(), "telegram:-100:7");
        assert_eq!(room_key("r1").to_string(), "web:r1");
        assert_eq!(room_key("weird:thing").to_string(), "web:weird:thing");
    }
}
