//! `/api/agents`: the personas, the direct (HTTP) conversation with them, and their rooms.
//!
//! `POST /api/agents/{agent}/messages` is the Web connector's receiving side: it journals the
//! message like any platform message, waits for the agent's outcome, and answers with the
//! replies. The same `messageId` posted again returns the first answer instead of asking the
//! model twice.
//!
//! Every answer is a typed view in camelCase. The rooms and memories views also carry the
//! snake_case names they had before (issue 13), marked deprecated, for one release.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use troupe_connectors::{
    AgentId, Inbound, MessageId, Platform, RoomId, RoomKey, RoomRef, SinkError, UserId, UserRef,
};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{AgentPath, RoomPath, lenient_room};
use crate::agent::Agent;
use crate::bus::BusError;
use crate::ingress::{ConverseError, HandleError, Outcome};
use crate::provider::ProviderError;

/// A persona, as `GET /api/agents` lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    id: AgentId,
    /// Changes whenever the character file's content does: a hot reload is visible here.
    revision: String,
    name: String,
    model: String,
    model_configured: bool,
    platforms: Vec<Platform>,
    source: Option<String>,
    /// Its MCP servers and where each is (`starting`, `running` with its tools' count,
    /// `failed`, `refused`): they connect in the background (issue 43). Empty without any.
    mcp_servers: Vec<crate::tools::ServerStatus>,
}

impl AgentView {
    fn of(agent: &Agent) -> Self {
        let mind = agent.mind();
        let revision = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            mind.persona.raw.to_string().hash(&mut h);
            format!("{:016x}", h.finish())
        };
        AgentView {
            id: agent.id.clone(),
            revision,
            name: mind.persona.name.clone(),
            model: mind.provider.describe(),
            model_configured: mind.provider.unavailable().is_none(),
            platforms: mind.persona.platforms(),
            source: mind
                .persona
                .source
                .file_name()
                .map(|f| f.to_string_lossy().to_string()),
            mcp_servers: mind.tools.as_ref().map(|t| t.status()).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AgentList {
    agents: Vec<AgentView>,
}

pub async fn list(State(state): State<AppState>) -> Json<AgentList> {
    let agents = state
        .agents
        .all()
        .iter()
        .map(|a| AgentView::of(a))
        .collect();
    Json(AgentList { agents })
}

/// `GET /api/agents/{agent}`: the persona as listed, and how its knowledge is searched
/// (the embedding model, its size, how many chunks have vectors, whether search is hybrid).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDetail {
    #[serde(flatten)]
    agent: AgentView,
    /// `None` when the database could not be asked (logged).
    knowledge: Option<crate::knowledge::VectorCoverage>,
}

pub async fn get(State(state): State<AppState>, AgentPath(agent): AgentPath) -> Json<AgentDetail> {
    let knowledge = match state.knowledge.coverage(&agent.id).await {
        Ok(coverage) => Some(coverage),
        Err(e) => {
            tracing::warn!(agent = %agent.id, error = %e, "could not count the persona's vectors");
            None
        }
    };
    Json(AgentDetail {
        agent: AgentView::of(&agent),
        knowledge,
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    /// A room of the HTTP API: `r1`, or `web:r1`.
    #[serde(default, deserialize_with = "lenient_room")]
    room_id: Option<RoomKey>,
    user_id: Option<String>,
    user_name: Option<String>,
    text: String,
    message_id: Option<String>,
    /// Images: `{"url": …}` (fetched under the fetch policy) or `{"data": <base64>}`
    /// (issue 32, docs/media.md).
    #[serde(default)]
    attachments: Vec<super::media::PostedImage>,
    /// Answer as server-sent events, the reply shown as it is written (issue 32).
    #[serde(default)]
    stream: bool,
}

/// What `POST /messages` answers: the replies, or why there are none.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageAnswer {
    replies: Vec<ReplyView>,
    /// The room as it was posted: the Web room's own id, without `web:`.
    room_id: RoomId,
    message_id: MessageId,
    /// Set when the model answered: whether this is the first answer again.
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate: Option<bool>,
    /// Set when the persona chose not to answer: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    ignored: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ReplyView {
    text: String,
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

/// The Web room a message is posted in. The API talks only in its own rooms: a room of
/// another platform is answered there, by its connector, never from an HTTP caller.
pub(super) fn web_room(posted: Option<RoomKey>) -> Result<RoomId, ApiError> {
    match posted {
        None => Ok(RoomId::new("default")),
        Some(key) if key.platform == Platform::Web && names_a_stateless_room(&key.room) => {
            Err(ApiError::bad_request(format!(
                "`{}` names a room of the OpenAI-compatible API's stateless clients (`openai:USER`, \
                 one per end user): a room a client names is never one of those (docs/openai.md)",
                key.room
            )))
        }
        Some(key) if key.platform == Platform::Web => Ok(key.room),
        Some(key) => Err(ApiError::bad_request(format!(
            "`roomId` names a {} room ({key}): POST /messages talks only in rooms of the HTTP \
             API, `r1` or `web:r1`",
            key.platform
        ))),
    }
}

/// Whether a room a caller names would be a stateless client's room of `/v1` (issue 43,
/// finding 2): `openai:USER`, or `NAME:openai:USER` (a scoped token's). Any `:`-separated
/// part but the last that reads `openai`, in any case, is that namespace: the stateless
/// rooms keep their own, so that no caller, with any token, reads another user's history.
pub(super) fn names_a_stateless_room(room: &RoomId) -> bool {
    let parts: Vec<&str> = room.as_str().split(':').collect();
    parts[..parts.len() - 1].iter().any(|p| {
        p.trim()
            .eq_ignore_ascii_case(crate::web::STATELESS_NAMESPACE)
    })
}

pub async fn post_message(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    caller: Caller,
    posted_body: super::media_form::MessageBody<PostMessage>,
) -> Result<Response, ApiError> {
    let (mut body, parts) = (posted_body.body, posted_body.parts);
    // Refuse before journaling: a message that cannot be answered is not accepted.
    if let Some(reason) = agent.mind().provider.unavailable() {
        return Err(provider_error(&ProviderError::Unconfigured(reason)));
    }
    super::api_share_left(&agent).await?;
    let mut images = std::mem::take(&mut body.attachments);
    images.extend(parts);
    let stream = body.stream;
    let (mut inbound, room_id) = posted(body, &caller, state.config.limits.max_message_chars)?;
    if !images.is_empty() {
        inbound.attachments = super::media::accept(&state.config, &state.store, images).await?;
    }
    let message_id = inbound.id.clone();
    // The model has its own deadline; this one only guards against a lost outcome.
    let deadline = state.config.agent.model_timeout + Duration::from_secs(30);
    if stream {
        return stream_message(&state, &agent.id, inbound, deadline, room_id).await;
    }
    let answer = state
        .ingress
        .converse(&agent.id, inbound, deadline)
        .await
        .map_err(converse_error)?;
    let answer = message_answer(answer, room_id, message_id)?;
    Ok((StatusCode::OK, Json(answer)).into_response())
}

/// `POST /messages` with `"stream": true`: `delta` events of the reply as it is written,
/// then one `reply` event with what the plain call answers (or an `error` event). An
/// outcome known before any text (an error, a silent persona) is answered as without a
/// stream; a reply is always an event stream, whole in one `delta` when it did not stream.
async fn stream_message(
    state: &AppState,
    agent: &AgentId,
    inbound: Inbound,
    deadline: Duration,
    room_id: RoomId,
) -> Result<Response, ApiError> {
    use super::live::{Started, event_stream, start};
    let message_id = inbound.id.clone();
    let (ingress, who) = (state.ingress.clone(), agent.clone());
    let converse = Box::pin(async move { ingress.converse(&who, inbound, deadline).await });
    match start(state.ingress.live(), agent, &message_id, converse).await {
        Started::Live(streaming) => Ok(streaming.respond(stream_delta, move |answer, sent| {
            let answer = answer
                .map_err(converse_error)
                .and_then(|a| message_answer(a, room_id, message_id));
            stream_end(answer, sent)
        })),
        Started::Done(answer) => {
            // Errors keep their status; a reply is still an event stream.
            let answer = message_answer(answer.map_err(converse_error)?, room_id, message_id)?;
            let frames = stream_end(Ok(answer), "").concat();
            Ok(event_stream(axum::body::Body::from(frames)))
        }
    }
}

/// A `delta` event: the next piece of the reply.
fn stream_delta(piece: &str) -> String {
    super::live::event("delta", &serde_json::json!({ "text": piece }))
}

/// The stream's end: what is left of the reply after `sent`, and the `reply` event with
/// what the plain call answers; or an `error` event.
fn stream_end(answer: Result<MessageAnswer, ApiError>, sent: &str) -> Vec<String> {
    use super::live::{event, rest};
    match answer {
        Ok(answer) => {
            let texts: Vec<&str> = answer.replies.iter().map(|r| r.text.as_str()).collect();
            let whole = texts.join("\n\n");
            let mut frames = Vec::new();
            let left = rest(&whole, sent);
            if !left.is_empty() {
                frames.push(stream_delta(left));
            }
            frames.push(event("reply", &serde_json::json!(answer)));
            frames
        }
        Err(e) => vec![event(
            "error",
            &serde_json::json!({"error": e.error, "detail": e.detail}),
        )],
    }
}

/// The posted message, checked, as the Web connector's `Inbound`, with the Web room it was
/// posted in. What is left out gets its default: the room `default`, the anonymous user
/// named `User`, a fresh message id.
fn posted(
    body: PostMessage,
    caller: &Caller,
    max_chars: usize,
) -> Result<(Inbound, RoomId), ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::bad_request("`text` must not be empty"));
    }
    if body.text.chars().count() > max_chars {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("`text` is longer than {max_chars} characters (TROUPE_MAX_MESSAGE_CHARS)"),
        ));
    }
    let room_id = web_room(body.room_id)?;
    let user_id =
        nonempty(body.user_id, "userId", 200)?.unwrap_or_else(|| crate::web::ANONYMOUS_USER.into());
    let user_name = nonempty(body.user_name, "userName", 100)?.unwrap_or_else(|| "User".into());
    let message_id = MessageId::new(
        nonempty(body.message_id, "messageId", 200)?
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
    );
    let inbound = Inbound {
        id: message_id,
        room: RoomRef::new(Platform::Web, caller.web_room(room_id.clone())),
        author: UserRef {
            id: UserId::new(caller.user(user_id)),
            name: user_name,
            is_bot: false,
            username: None,
        },
        text: body.text,
        attachments: vec![],
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: crate::clock::now_ms(),
        client: None,
        revises: None,
    };
    Ok((inbound, room_id))
}

/// What `POST /messages` answers for the agent's outcome: the replies, or none and why the
/// persona stayed silent; an error for an outcome the caller must act on.
fn message_answer(
    answer: crate::ingress::Answer,
    room_id: RoomId,
    message_id: MessageId,
) -> Result<MessageAnswer, ApiError> {
    let answered = |replies, duplicate, ignored| {
        Ok(MessageAnswer {
            replies,
            room_id,
            message_id,
            duplicate,
            ignored,
        })
    };
    match answer.outcome {
        Outcome::Replied { texts, .. } => answered(
            texts.into_iter().map(|text| ReplyView { text }).collect(),
            Some(answer.duplicate),
            None,
        ),
        Outcome::Ignored { reason } => answered(Vec::new(), None, Some(reason.to_string())),
        Outcome::RateLimited { scope } => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("too many messages (per-{scope} limit); wait a minute and try again"),
        )
        // The limits are per minute, so a minute is an upper bound on the wait.
        .retry_after(60)),
        Outcome::Failed { error } => Err(handle_error(&error)),
        // Not a model error: the message itself kept stopping the gateway (issue 12, #2).
        Outcome::GaveUp { reason } => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "gave_up",
            reason,
        )),
    }
}

/// `Retry-After` for a 503 whose cause is usually brief (a database or NATS reconnect).
const RETRY_SOON: u64 = 5;
/// `Retry-After` while this process drains for a restart: long enough for a new one to start.
const RETRY_AFTER_RESTART: u64 = 10;

/// A message the journal or the bus did not take, or that got no answer in time. Storage
/// and the bus being down are 503s (the caller may post again); a message the database
/// refuses for good is the caller's to change (422).
pub(super) fn converse_error(e: ConverseError) -> ApiError {
    match e {
        ConverseError::Journal(SinkError::Unavailable(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            format!("{e}; post it again in a few seconds"),
        )
        .retry_after(RETRY_SOON),
        ConverseError::Journal(SinkError::ShuttingDown(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            format!("{e}; post it again once the gateway is back"),
        )
        .retry_after(RETRY_AFTER_RESTART),
        ConverseError::Journal(SinkError::Rejected(_)) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "rejected", e.to_string())
        }
        ConverseError::Bus(BusError::Closed) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            format!("{e}; it will be answered at the next start, or post it again"),
        )
        .retry_after(RETRY_AFTER_RESTART),
        ConverseError::Bus(BusError::Backend(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "bus_unavailable",
            format!("{e}; post it again in a few seconds"),
        )
        .retry_after(RETRY_SOON),
        ConverseError::NoAnswerInTime => {
            ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", e.to_string())
        }
        ConverseError::KeyMismatch(_) => ApiError::internal(e),
    }
}

/// What handling the message failed with: the model's errors as they always were, the
/// database down as a 503 (the message stays journaled), a persona removed since the
/// message was journaled as a 404.
pub(super) fn handle_error(error: &HandleError) -> ApiError {
    match error {
        HandleError::Model(e) => provider_error(e),
        HandleError::Storage(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            format!(
                "{error}; the message is journaled and will be answered when it is posted again or at the next start"
            ),
        )
        .retry_after(RETRY_SOON),
        HandleError::UnknownAgent(_) => {
            // The same code as a persona unknown at request time: to a client both mean
            // "no such persona now".
            ApiError::not_found(error.to_string())
        }
    }
}

pub(super) fn provider_error(error: &ProviderError) -> ApiError {
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

/// One room of a persona, as `GET /rooms` lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomView {
    room: RoomKey,
    platform: String,
    name: Option<String>,
    message_count: i64,
    last_active_ms: i64,
    /// The room's controls (docs/rooms.md): muted until (ms; absent when not muted,
    /// 9223372036854775807 for "until /unmute"), following, memory forgotten at (ms).
    muted_until_ms: Option<i64>,
    following: bool,
    forgotten_at_ms: Option<i64>,
    #[serde(flatten)]
    deprecated: LegacyRoom,
}

/// Deprecated: the snake_case names `GET /rooms` had before issue 13; they go in the next
/// release (docs/api.md, "Renamed fields").
#[derive(Debug, Serialize)]
struct LegacyRoom {
    message_count: i64,
    last_active_ms: i64,
}

#[derive(Debug, Serialize)]
pub struct RoomList {
    rooms: Vec<RoomView>,
}

pub async fn rooms(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
) -> Result<Json<RoomList>, ApiError> {
    let mut controls: std::collections::HashMap<RoomKey, crate::storage::RoomState> = state
        .store
        .room_states(&agent.id)
        .await?
        .into_iter()
        .collect();
    let now = crate::clock::now_ms();
    let rooms = state
        .store
        .rooms(&agent.id)
        .await?
        .into_iter()
        .map(|r| {
            let control = controls.remove(&r.room).unwrap_or_default();
            Ok(RoomView {
                muted_until_ms: control.muted_until_ms.filter(|until| *until > now),
                following: control.following,
                forgotten_at_ms: control.forgotten_at_ms,
                room: r.room.clone(),
                platform: r.platform.to_string(),
                name: r.name,
                message_count: r.message_count,
                last_active_ms: r.last_active_ms,
                deprecated: LegacyRoom {
                    message_count: r.message_count,
                    last_active_ms: r.last_active_ms,
                },
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(RoomList { rooms }))
}

#[derive(Debug, Deserialize)]
pub struct MemoryQuery {
    limit: Option<i64>,
}

/// `GET /rooms/{room}/memories`: what the persona remembers of a room (docs/memory.md).
#[derive(Debug, Serialize)]
pub struct Memories {
    room: RoomKey,
    messages: Vec<MessageView>,
    summary: Option<SummaryView>,
    facts: Vec<FactView>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    id: i64,
    room: RoomKey,
    author_id: String,
    author_name: String,
    text: String,
    /// Said by the persona.
    from_agent: bool,
    created_at_ms: i64,
    #[serde(flatten)]
    deprecated: LegacyMessage,
    /// Transcript, images and feedback (issue 32; `super::history`).
    #[serde(flatten)]
    extras: super::history::Extras,
}

/// Deprecated snake_case copies, until the next release.
#[derive(Debug, Serialize)]
struct LegacyMessage {
    author_id: String,
    author_name: String,
    from_agent: bool,
    created_at_ms: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryView {
    text: String,
    /// The newest message the summary covers.
    through_message_id: i64,
    updated_at_ms: i64,
    #[serde(flatten)]
    deprecated: LegacySummary,
}

/// Deprecated snake_case copies, until the next release.
#[derive(Debug, Serialize)]
struct LegacySummary {
    through_message_id: i64,
    updated_at_ms: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FactView {
    user_id: String,
    user_name: String,
    fact: String,
    /// Where it was learned.
    room: RoomKey,
    created_at_ms: i64,
    #[serde(flatten)]
    deprecated: LegacyFact,
}

/// Deprecated snake_case copies, until the next release.
#[derive(Debug, Serialize)]
struct LegacyFact {
    user_id: String,
    user_name: String,
    created_at_ms: i64,
}

pub async fn memories(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    RoomPath(room): RoomPath,
    Query(q): Query<MemoryQuery>,
) -> Result<Json<Memories>, ApiError> {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let messages = state.store.recent_messages(&agent.id, &room, limit).await?;
    // What the agent remembers beyond the recent messages (docs/memory.md).
    let summary = state.store.room_summary(&agent.id, &room).await?;
    let facts = state.store.room_user_facts(&agent.id, &room).await?;
    let mut extras =
        super::history::PageExtras::of(&state.store, &agent.id, &room, &messages).await?;
    let messages = messages
        .into_iter()
        .map(|m| {
            Ok(MessageView {
                extras: extras.take(m.id, &m.text),
                id: m.id,
                room: m.room.clone(),
                deprecated: LegacyMessage {
                    author_id: m.author_id.to_string(),
                    author_name: m.author_name.clone(),
                    from_agent: m.from_agent,
                    created_at_ms: m.created_at_ms,
                },
                author_id: m.author_id.to_string(),
                author_name: m.author_name,
                text: m.text,
                from_agent: m.from_agent,
                created_at_ms: m.created_at_ms,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    let summary = summary.map(|s| SummaryView {
        text: s.summary,
        through_message_id: s.through_message_id,
        updated_at_ms: s.updated_at_ms,
        deprecated: LegacySummary {
            through_message_id: s.through_message_id,
            updated_at_ms: s.updated_at_ms,
        },
    });
    let facts = facts
        .into_iter()
        .map(|f| {
            Ok(FactView {
                room: f.room.clone(),
                deprecated: LegacyFact {
                    user_id: f.user_id.to_string(),
                    user_name: f.user_name.clone(),
                    created_at_ms: f.created_at_ms,
                },
                user_id: f.user_id.to_string(),
                user_name: f.user_name,
                fact: f.fact,
                created_at_ms: f.created_at_ms,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(Memories {
        room,
        messages,
        summary,
        facts,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_posts_only_in_its_own_rooms() {
        let posted = |s: &str| web_room(Some(RoomKey::parse_lenient(s).unwrap()));
        assert_eq!(web_room(None).unwrap().as_str(), "default");
        assert_eq!(posted("r1").unwrap().as_str(), "r1");
        assert_eq!(posted("web:r1").unwrap().as_str(), "r1");
        assert_eq!(posted("weird:thing").unwrap().as_str(), "weird:thing");
        assert!(posted("telegram:-100").is_err());
    }

    #[test]
    fn renamed_fields_are_camel_case_with_their_old_names_kept() {
        let fact = FactView {
            user_id: "u1".into(),
            user_name: "Sam".into(),
            fact: "keeps bees".into(),
            room: RoomKey::parse_lenient("r1").unwrap(),
            created_at_ms: 7,
            deprecated: LegacyFact {
                user_id: "u1".into(),
                user_name: "Sam".into(),
                created_at_ms: 7,
            },
        };
        let json = serde_json::to_value(&fact).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "userId": "u1", "userName": "Sam", "fact": "keeps bees", "room": "web:r1",
                "createdAtMs": 7, "user_id": "u1", "user_name": "Sam", "created_at_ms": 7,
            })
        );
    }
}
