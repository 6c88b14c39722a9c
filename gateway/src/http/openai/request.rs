//! The request of `POST /v1/chat/completions`, parsed at the edge into the message troupe
//! answers: the persona's new message, the conversation a stateless client keeps itself, a
//! client's system message, the room and the end user (docs/openai.md).
//!
//! Which kind of client it is decides the history: one that names a room (`X-Troupe-Room`,
//! or `metadata.room`) is stateful, sends only its new message, and troupe's memory of that
//! room is the history; any other is stateless, sends the whole conversation each time, and
//! its earlier turns are the history (troupe replays none of its own, so nothing appears
//! twice). Its messages are still recorded, in a room of the end user's own (`openai:USER`),
//! so they count in budgets and facts and show in the console.

use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use troupe_connectors::{
    ClientContext, ClientTurn, Inbound, MessageId, Platform, RoomId, RoomRef, TurnSpeaker, UserId,
    UserRef,
};

use super::super::auth::Caller;
use super::super::error::ApiError;
use super::super::extract::room_param;
use crate::config::{Config, SystemMessages};

/// The header that names a stateful client's room.
const ROOM_HEADER: &str = "x-troupe-room";
/// The header that makes a retried request the same request (one answer, one model call).
const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The longest `user`, `Idempotency-Key` or room name taken.
const MAX_ID_CHARS: usize = 200;

/// What bounds a request: how system messages are taken and how long they and the last
/// message may be.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) system: SystemMessages,
    /// `TROUPE_MAX_MESSAGE_CHARS`: the last message.
    pub(super) max_chars: usize,
    /// The system and developer messages together: a quarter of the prompt's budget
    /// ([`system_cap`]).
    pub(super) system_chars: usize,
}

impl Limits {
    pub(super) fn of(config: &Config) -> Limits {
        Limits {
            system: config.http.openai_system,
            max_chars: config.limits.max_message_chars,
            system_chars: system_cap(config.agent.prompt_budget_chars),
        }
    }
}

/// The most characters a client's system messages may have (issue 43): a quarter of
/// `TROUPE_PROMPT_BUDGET_CHARS` (6,000 of the default 24,000), so the app's instruction
/// never crowds out the character, the history and the knowledge it narrows.
pub(super) fn system_cap(prompt_budget_chars: usize) -> usize {
    prompt_budget_chars / 4
}

/// The body, as OpenAI's API reference gives it. Fields troupe does not use (`temperature`,
/// `max_tokens`, `tools`…) are accepted and ignored: the persona's settings decide them.
#[derive(Debug, Deserialize)]
pub(super) struct ChatRequest {
    pub(super) model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    pub(super) stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    /// OpenAI's free key-value metadata; `room` names a stateful client's room.
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    /// Only one choice is made: a persona answers once.
    #[serde(default)]
    n: Option<u32>,
}

impl ChatRequest {
    /// Whether a streamed answer ends with a chunk that carries `usage`.
    pub(super) fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: Role,
    /// `null` for an assistant message that only called tools.
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// One content part: only text parts are taken (image parts wait for media support).
#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// The message to journal, and whether its client is stateful.
pub(super) struct Posted {
    pub(super) inbound: Inbound,
    pub(super) stateful: bool,
}

/// What the request asks, checked: the message for the agent, as the Web platform's
/// `Inbound`, in the caller's room, from the caller's user.
pub(super) fn posted(
    request: ChatRequest,
    headers: &HeaderMap,
    caller: &Caller,
    limits: Limits,
) -> Result<Posted, ApiError> {
    if request.n.is_some_and(|n| n != 1) {
        return Err(invalid("`n` must be 1: a persona gives one answer", "n"));
    }
    let named_user = request.user.is_some();
    let user = match request.user {
        Some(u) if u.trim().is_empty() || u.chars().count() > MAX_ID_CHARS => {
            return Err(invalid(
                format!("`user` must be 1 to {MAX_ID_CHARS} characters"),
                "user",
            ));
        }
        Some(u) => u,
        None => crate::web::ANONYMOUS_USER.to_string(),
    };
    let named_room = named_room(headers, request.metadata.as_ref())?;
    let stateful = named_room.is_some();
    // Without `user`, every caller of this token is the one anonymous user in one room:
    // two apps' end users who picked the same key would get each other's reply (issue 43).
    if !named_user && !stateful && headers.contains_key(IDEMPOTENCY_HEADER) {
        return Err(invalid(
            "`Idempotency-Key` needs `user` (or a room, `X-Troupe-Room`): keys are kept per \
             token, room and user, and without a user every caller of this token would share \
             one key space",
            "user",
        ));
    }
    let room = named_room.unwrap_or_else(|| stateless_room(&user));
    let conversation = conversation(request.messages, limits)?;
    let client = ClientContext {
        turns: (!stateful).then_some(conversation.turns),
        instruction: conversation.instruction,
    };
    let inbound = Inbound {
        id: message_id(headers)?,
        room: RoomRef::new(Platform::Web, caller.web_room(room)),
        author: UserRef {
            id: UserId::new(caller.user(user)),
            name: "User".into(),
            is_bot: false,
            username: None,
        },
        text: conversation.text,
        attachments: vec![],
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: crate::clock::now_ms(),
        client: (client != ClientContext::default()).then(|| Box::new(client)),
        revises: None,
    };
    Ok(Posted { inbound, stateful })
}

/// The room a stateful client names: the `X-Troupe-Room` header or `metadata.room` (both:
/// they must agree). A room of the HTTP API only, like `POST …/messages`.
fn named_room(
    headers: &HeaderMap,
    metadata: Option<&serde_json::Map<String, Value>>,
) -> Result<Option<RoomId>, ApiError> {
    let header = match headers.get(ROOM_HEADER) {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| invalid("`X-Troupe-Room` must be text", "X-Troupe-Room"))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let field = match metadata.and_then(|m| m.get("room")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(_) => return Err(invalid("`metadata.room` must be a string", "metadata.room")),
    };
    let raw = match (header, field) {
        (Some(h), Some(f)) if h != f => {
            return Err(invalid(
                "`X-Troupe-Room` and `metadata.room` name different rooms",
                "metadata.room",
            ));
        }
        (Some(r), _) | (None, Some(r)) => r,
        (None, None) => return Ok(None),
    };
    let key = room_param("X-Troupe-Room", &raw).map_err(|e| invalid(e.detail, "X-Troupe-Room"))?;
    super::super::agents::web_room(Some(key))
        .map(Some)
        .map_err(|e| invalid(e.detail, "X-Troupe-Room"))
}

/// A stateless client's messages are recorded in a room of the end user's own: one user's
/// requests are answered in order, different users' at once. A long user id is hashed, so
/// the room's key stays within its limit.
fn stateless_room(user: &str) -> RoomId {
    let namespace = crate::web::STATELESS_NAMESPACE;
    if user.chars().count() <= 64 {
        RoomId::new(format!("{namespace}:{user}"))
    } else {
        let hash = crate::bus::nats::stable_hash(user.as_bytes());
        RoomId::new(format!("{namespace}:{hash:016x}"))
    }
}

/// `Idempotency-Key` as the message's id: the journal's unique key then makes a retry the
/// same message, answered from the journal. Without one, a fresh id.
fn message_id(headers: &HeaderMap) -> Result<MessageId, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(MessageId::new(uuid::Uuid::now_v7().to_string()));
    };
    let key = value
        .to_str()
        .map_err(|_| invalid("`Idempotency-Key` must be text", "Idempotency-Key"))?
        .trim();
    if key.is_empty() || key.chars().count() > MAX_ID_CHARS {
        return Err(invalid(
            format!("`Idempotency-Key` must be 1 to {MAX_ID_CHARS} characters"),
            "Idempotency-Key",
        ));
    }
    Ok(MessageId::new(format!("idem:{key}")))
}

/// The messages, sorted: the last one is the new message (a user's), the user and
/// assistant messages before it the earlier turns, the system and developer messages the
/// client's instruction.
struct Conversation {
    text: String,
    turns: Vec<ClientTurn>,
    instruction: Option<String>,
}

fn conversation(messages: Vec<ChatMessage>, limits: Limits) -> Result<Conversation, ApiError> {
    let Limits {
        system: policy,
        max_chars,
        system_chars,
    } = limits;
    let mut turns = Vec::new();
    let mut instructions = Vec::new();
    for message in messages {
        let text = text_of(message.content)?;
        let speaker = match message.role {
            Role::System | Role::Developer if policy == SystemMessages::Refuse => {
                return Err(invalid(
                    "this gateway does not take system messages: the persona's character \
                     file is its instruction (TROUPE_OPENAI_SYSTEM_MESSAGES=refuse)",
                    "messages",
                ));
            }
            Role::System | Role::Developer => {
                instructions.extend(text);
                continue;
            }
            Role::Tool | Role::Function => {
                return Err(invalid(
                    "tool and function messages are not taken: a persona calls no client tools",
                    "messages",
                ));
            }
            Role::User => TurnSpeaker::User,
            Role::Assistant => TurnSpeaker::Persona,
        };
        if let Some(text) = text {
            turns.push(ClientTurn { speaker, text });
        }
    }
    let text = match turns.pop() {
        Some(ClientTurn {
            speaker: TurnSpeaker::User,
            text,
        }) if !text.trim().is_empty() => text,
        _ => {
            return Err(invalid(
                "the last message must be the user's, with text",
                "messages",
            ));
        }
    };
    if text.chars().count() > max_chars {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the last message is longer than {max_chars} characters (TROUPE_MAX_MESSAGE_CHARS)"
            ),
        ));
    }
    let instruction = instruction(&instructions, system_chars)?;
    Ok(Conversation {
        text,
        turns,
        instruction,
    })
}

/// The client's system and developer messages as one instruction: at most `cap`
/// characters (400 naming the cap past it), and without room-control markers
/// (`[[action: mute]]`), which the prompt never holds in what others wrote. A marker made
/// of the pieces of another (`[[act[[action: x]]ion: mute]]`) is stripped too.
fn instruction(parts: &[String], cap: usize) -> Result<Option<String>, ApiError> {
    if parts.is_empty() {
        return Ok(None);
    }
    let text = parts.join("\n\n");
    let chars = text.chars().count();
    if chars > cap {
        return Err(invalid(
            format!(
                "the system messages are {chars} characters; at most {cap} are taken (a quarter \
                 of TROUPE_PROMPT_BUDGET_CHARS): the persona's character, history and \
                 knowledge need the rest of the prompt"
            ),
            "messages",
        ));
    }
    let text = crate::rooms::actions::strip_every(&text);
    Ok((!text.trim().is_empty()).then_some(text))
}

/// A message's text: a string, or its text parts joined. Any other part is refused.
fn text_of(content: Option<Content>) -> Result<Option<String>, ApiError> {
    match content {
        None => Ok(None),
        Some(Content::Text(t)) => Ok(Some(t)),
        Some(Content::Parts(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(text)) => texts.push(text),
                    (kind, _) => {
                        return Err(invalid(
                            format!(
                                "content parts of type `{kind}` are not taken: this gateway \
                                 reads text only"
                            ),
                            "messages",
                        ));
                    }
                }
            }
            Ok(Some(texts.join("\n")))
        }
    }
}

/// A 400 for a request the client must change; the parameter is named in the detail.
fn invalid(detail: impl Into<String>, param: &str) -> ApiError {
    let detail = detail.into();
    ApiError::bad_request(if detail.contains(param) {
        detail
    } else {
        format!("{param}: {detail}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap()
    }

    const LIMITS: Limits = Limits {
        system: SystemMessages::Instruction,
        max_chars: 4000,
        system_chars: 6000,
    };

    fn post(body: Value, headers: &HeaderMap) -> Result<Posted, ApiError> {
        posted(request(body), headers, &Caller::Operator, LIMITS)
    }

    #[test]
    fn a_stateless_request_carries_its_earlier_turns_and_instruction() {
        let body = serde_json::json!({
            "model": "ada",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": [{"type": "text", "text": "three"}]},
            ],
            "user": "u1",
        });
        let posted = post(body, &HeaderMap::new()).unwrap();
        assert!(!posted.stateful);
        let inbound = posted.inbound;
        assert_eq!(inbound.text, "three");
        assert_eq!(inbound.room.id.as_str(), "openai:u1");
        assert_eq!(inbound.author.id.as_str(), "u1");
        let client = inbound.client.unwrap();
        assert_eq!(client.instruction.as_deref(), Some("Be brief."));
        let turns = client.turns.unwrap();
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[1].speaker, TurnSpeaker::Persona);
        assert_eq!(turns[1].text, "two");
    }

    #[test]
    fn a_named_room_makes_the_client_stateful() {
        let mut headers = HeaderMap::new();
        headers.insert(ROOM_HEADER, "r1".parse().unwrap());
        headers.insert(IDEMPOTENCY_HEADER, "k1".parse().unwrap());
        let body = serde_json::json!({
            "model": "ada",
            "messages": [{"role": "user", "content": "old"}, {"role": "user", "content": "hi"}],
        });
        let posted = post(body, &headers).unwrap();
        assert!(posted.stateful);
        assert_eq!(posted.inbound.room.id.as_str(), "r1");
        assert_eq!(posted.inbound.id.as_str(), "idem:k1");
        // No turns and no instruction: nothing rides along.
        assert!(posted.inbound.client.is_none());
        let body = serde_json::json!({
            "model": "ada", "metadata": {"room": "r2"},
            "messages": [{"role": "user", "content": "hi"}],
        });
        assert!(
            post(body, &headers).is_err(),
            "the header and metadata disagree"
        );
        let mut other = HeaderMap::new();
        other.insert(ROOM_HEADER, "telegram:5".parse().unwrap());
        let body =
            serde_json::json!({"model": "ada", "messages": [{"role": "user", "content": "hi"}]});
        assert!(post(body, &other).is_err(), "another platform's room");
    }

    #[test]
    fn bad_conversations_are_refused_with_400() {
        for messages in [
            serde_json::json!([]),
            serde_json::json!([{"role": "assistant", "content": "hi"}]),
            serde_json::json!([{"role": "user", "content": "  "}]),
            serde_json::json!([{"role": "tool", "content": "x"}, {"role": "user", "content": "hi"}]),
            serde_json::json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]),
        ] {
            let body = serde_json::json!({"model": "ada", "messages": messages});
            let err = post(body, &HeaderMap::new()).err().expect("refused");
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{messages}");
        }
        let body = serde_json::json!({
            "model": "ada",
            "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}],
        });
        let refuse = Limits {
            system: SystemMessages::Refuse,
            ..LIMITS
        };
        let refused = posted(request(body), &HeaderMap::new(), &Caller::Operator, refuse);
        assert!(refused.is_err());
    }

    #[test]
    fn a_system_message_is_bounded_and_loses_its_markers() {
        let body = |system: &str| {
            serde_json::json!({"model": "ada", "user": "u", "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": "hi"},
            ]})
        };
        let err = post(body(&"x".repeat(6001)), &HeaderMap::new())
            .err()
            .expect("over the cap");
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.detail.contains("6000"), "{}", err.detail);
        let posted = post(
            body("Be brief. [[action: mute]] [[act[[action: x]]ion: mute]] [[see]]"),
            &HeaderMap::new(),
        )
        .unwrap();
        let instruction = posted.inbound.client.unwrap().instruction.unwrap();
        assert!(!instruction.contains("[[act"), "{instruction}");
        assert!(instruction.starts_with("Be brief.") && instruction.contains("[[see]]"));
        assert_eq!(system_cap(24_000), 6000);
    }

    #[test]
    fn stateless_rooms_are_never_named_and_keys_need_a_user() {
        for room in [
            "openai:kim",
            "OpenAI:kim",
            "web:openai:kim",
            "shop:openai:kim",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(ROOM_HEADER, room.parse().unwrap());
            let body = serde_json::json!({"model": "ada", "messages": [{"role": "user", "content": "hi"}]});
            let err = post(body, &headers).err().expect(room);
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{room}");
            let body = serde_json::json!({"model": "ada", "metadata": {"room": room},
                "messages": [{"role": "user", "content": "hi"}]});
            assert!(post(body, &HeaderMap::new()).is_err(), "{room}");
        }
        for room in ["kim-openai", "openai", "r1:openai"] {
            let mut headers = HeaderMap::new();
            headers.insert(ROOM_HEADER, room.parse().unwrap());
            let body = serde_json::json!({"model": "ada", "messages": [{"role": "user", "content": "hi"}]});
            assert!(post(body, &headers).is_ok(), "{room}");
        }
        let mut keyed = HeaderMap::new();
        keyed.insert(IDEMPOTENCY_HEADER, "k1".parse().unwrap());
        let anonymous =
            serde_json::json!({"model": "ada", "messages": [{"role": "user", "content": "hi"}]});
        let err = post(anonymous, &keyed).err().expect("a key without a user");
        assert!(err.detail.contains("user"), "{}", err.detail);
        let named = serde_json::json!({"model": "ada", "user": "kim",
            "messages": [{"role": "user", "content": "hi"}]});
        assert!(post(named, &keyed).is_ok());
    }

    #[test]
    fn a_long_user_gets_a_short_room() {
        let room = stateless_room(&"u".repeat(200));
        assert!(room.as_str().len() < 40);
        assert_eq!(room, stateless_room(&"u".repeat(200)));
    }
}
