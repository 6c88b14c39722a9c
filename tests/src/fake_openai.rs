//! A faithful fake of the OpenAI-compatible HTTP API, on `127.0.0.1:0`.
//!
//! It owns the wire protocol only: `POST /v1/chat/completions` (plain JSON or SSE when the
//! request says `stream: true`), `POST /v1/embeddings`, `GET /v1/models[/{id}]`, the
//! `Authorization: Bearer` check and OpenAI's error shape
//! (`{"error":{"message","type","param","code"}}`). Every request is recorded so a test can
//! assert what prompt reached the model; replies follow a script the test queues, then a
//! fallback. Any other path answers 404 as OpenAI does and is kept in [`FakeOpenAi::unmatched`],
//! which makes a wrong base URL obvious in a failing test.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

/// How the gateway's background memory tasks open their system prompts (docs/memory.md).
pub const SUMMARY_TASK: &str = "You keep the running summary of a conversation";
pub const FACTS_TASK: &str = "You extract lasting facts about one person";

/// A gate a test opens when it is ready for the model to answer ([`Script::Gated`]): the
/// test looks at what the gateway does while a reply is being made, then lets it finish.
#[derive(Debug, Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Gate {
    pub fn new() -> Self {
        Gate(Arc::new(watch::Sender::new(false)))
    }
    /// Lets every request waiting at this gate go on.
    pub fn open(&self) {
        self.0.send_replace(true);
    }
    async fn passed(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|o| *o).await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Gate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What the fake does with one chat completion request. Consumed one per request, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Script {
    /// Answer 200 with this assistant message.
    Reply(String),
    /// Answer with this status and JSON body (see [`openai_error`]).
    Status(u16, Value),
    /// Never answer (until the fake is dropped): for client timeouts.
    Hang,
    /// Wait, then do the inner script.
    Delay(Duration, Box<Script>),
    /// Wait until the test opens the gate, then do the inner script.
    Gated(Gate, Box<Script>),
    /// 429 with OpenAI's rate limit body and `retry-after: <seconds>` (issue 16).
    RetryAfter(u64),
    /// Answer with these tool calls (function name as on the wire, arguments), as OpenAI
    /// does (`message.tool_calls`, `finish_reason: "tool_calls"`), when the request offers
    /// tools; a request without `tools` gets the default reply instead, since a model cannot
    /// call a tool it was not given (issue 33).
    ToolCalls(Vec<(String, Value)>),
    /// Answer with this text; a streamed request gets its pieces (about three words each)
    /// `gap` apart, and with `stall_after: Some(n)` only the first `n` pieces, then nothing
    /// more until the fake is dropped (a model that stops mid-answer, for a crash
    /// mid-stream). A request that does not stream gets the whole text (or, stalled, hangs).
    Paced {
        text: String,
        gap: Duration,
        stall_after: Option<usize>,
    },
}

impl Script {
    pub fn reply(text: impl Into<String>) -> Self {
        Script::Reply(text.into())
    }
    /// `text`, streamed a piece every `gap` (issue 32).
    pub fn paced(text: impl Into<String>, gap: Duration) -> Self {
        Script::Paced {
            text: text.into(),
            gap,
            stall_after: None,
        }
    }
    /// The first `pieces` pieces of `text`, streamed `gap` apart, then a stall.
    pub fn stalled(text: impl Into<String>, gap: Duration, pieces: usize) -> Self {
        Script::Paced {
            text: text.into(),
            gap,
            stall_after: Some(pieces),
        }
    }
    /// 500 with the body OpenAI sends for its own failures.
    pub fn server_error() -> Self {
        Script::Status(
            500,
            openai_error(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
        )
    }
    /// 429 with OpenAI's rate limit body.
    pub fn rate_limited() -> Self {
        Script::Status(429, Script::rate_limited_body())
    }
    fn rate_limited_body() -> Value {
        openai_error(
            "Rate limit reached for requests. Please try again in 1s.",
            "requests",
            Some("rate_limit_exceeded"),
        )
    }
}

/// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
pub fn openai_error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// One message of a chat request, its content flattened to text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    /// A string content as is; an array of parts joined by newlines (text parts only).
    pub content: String,
}

/// What the fake did with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// 200 with this text (after any scripted delay).
    Reply(String),
    /// This status and body.
    Status(u16, Value),
    /// Never answered.
    Hang,
    /// Refused: missing or wrong bearer token (401).
    Unauthorized,
    /// Refused: the request does not follow the protocol (400); the reason.
    BadRequest(String),
    /// 200 with tool calls to these functions.
    ToolCalls(Vec<String>),
}

/// One `POST /v1/chat/completions` as the fake received it.
#[derive(Debug, Clone)]
pub struct ChatRequestRecord {
    /// 1-based, in arrival order, counting every chat request.
    pub index: usize,
    /// The raw `Authorization` header.
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub user_agent: Option<String>,
    /// The parsed body (`Value::Null` when it was not JSON).
    pub body: Value,
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub stream: bool,
    pub outcome: Outcome,
    /// When the request arrived (issue 16: rate limits are checked against these).
    pub received_at: std::time::Instant,
}

impl ChatRequestRecord {
    /// The names of the tools the request offered (`tools[].function.name`); empty when
    /// it offered none.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
    /// Every message's content, in order, joined by newlines.
    pub fn prompt_text(&self) -> String {
        self.messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
    /// The last message with role `user`.
    pub fn last_user_message(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.content.as_str())
    }
    /// The content of the first `system` message, if any.
    /// A persona's reply, not one of the gateway's background memory tasks (summaries and
    /// fact extraction, whose system prompts open with fixed words: docs/memory.md).
    pub fn is_reply(&self) -> bool {
        !self
            .system_prompt()
            .is_some_and(|s| s.starts_with(SUMMARY_TASK) || s.starts_with(FACTS_TASK))
    }
    pub fn system_prompt(&self) -> Option<&str> {
        self.messages
            .iter()
            .find(|m| m.role == "system")
            .map(|m| m.content.as_str())
    }
    /// The `image_url` parts of every message, in order: their URLs (a `data:` URL for an
    /// image sent inline), as OpenAI's chat API carries images (issue 32).
    pub fn image_urls(&self) -> Vec<String> {
        let Some(Value::Array(messages)) = self.body.get("messages") else {
            return Vec::new();
        };
        messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
            .filter_map(|p| p.pointer("/image_url/url").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }
    /// The text this request was answered with, if it got a 200.
    pub fn reply(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Reply(t) => Some(t),
            _ => None,
        }
    }
}

/// One `POST /v1/embeddings`.
#[derive(Debug, Clone)]
pub struct EmbeddingRequestRecord {
    pub authorization: Option<String>,
    pub body: Value,
    pub inputs: Vec<String>,
}

/// A request to a path the fake does not serve (answered 404).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmatchedRequest {
    pub method: String,
    pub path: String,
}

/// Computes the default reply from the request about to be answered.
pub type DefaultReply = Arc<dyn Fn(&ChatRequestRecord) -> String + Send + Sync>;

/// How to start a fake.
#[derive(Clone)]
pub struct FakeOpenAiConfig {
    /// The bearer token required; `None` accepts any request.
    pub api_key: Option<String>,
    /// Listed by `GET /v1/models`.
    pub model: String,
    pub embedding_model: String,
    /// Embedding size when the request does not ask for `dimensions`.
    pub embedding_dim: usize,
    /// The reply when the script is empty and no fallback is set. `None`:
    /// `Reply #N to: <first 40 chars of the last user message>`.
    pub default_reply: Option<DefaultReply>,
}

impl Default for FakeOpenAiConfig {
    fn default() -> Self {
        FakeOpenAiConfig {
            api_key: Some(format!("sk-e2e-{}", uuid::Uuid::new_v4().simple())),
            model: "gpt-4o-mini".into(),
            embedding_model: "text-embedding-3-small".into(),
            embedding_dim: 64,
            default_reply: None,
        }
    }
}

impl std::fmt::Debug for FakeOpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeOpenAiConfig")
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("embedding_dim", &self.embedding_dim)
            .finish_non_exhaustive()
    }
}

/// The `Reply #N to: …` text the fake answers with by default.
pub fn default_reply_text(record: &ChatRequestRecord) -> String {
    let last: String = record
        .last_user_message()
        .unwrap_or("")
        .chars()
        .take(40)
        .collect();
    format!("Reply #{} to: {}", record.index, last)
}

/// A model that repeats every room-control marker (`[[action: …]]`) it reads in the
/// conversation (the last user message: history, thread, documents, names), as a careless
/// model does with text it quotes; never those of the system prompt, which teaches them
/// (issue 30, finding 5). Answers `Reply #N.` followed by the markers. Use it as
/// [`FakeOpenAiConfig::default_reply`].
pub fn echoing_markers() -> DefaultReply {
    Arc::new(|record: &ChatRequestRecord| {
        let seen = markers_in(record.last_user_message().unwrap_or(""));
        let mut reply = format!("Reply #{}.", record.index);
        for marker in seen {
            reply.push(' ');
            reply.push_str(&marker);
        }
        reply
    })
}

/// Every `[[action: …]]` marker in `text`, as written, in order.
pub fn markers_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("[[") {
        let Some(len) = rest[start..].find("]]") else {
            break;
        };
        let marker = &rest[start..start + len + 2];
        if marker[2..]
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("action")
        {
            found.push(marker.to_string());
        }
        rest = &rest[start + 2..];
    }
    found
}

struct Shared {
    config: FakeOpenAiConfig,
    inner: Mutex<Inner>,
    /// The number of chat requests recorded so far.
    chat_count: watch::Sender<usize>,
    /// Becomes `true` when the fake is dropped; releases hanging requests.
    shutdown: watch::Sender<bool>,
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Script>,
    fallback: Option<Script>,
    chats: Vec<ChatRequestRecord>,
    embeddings: Vec<EmbeddingRequestRecord>,
    unmatched: Vec<UnmatchedRequest>,
    /// Scripts for the requests a predicate picks, consulted before the queue.
    rules: Vec<(RequestMatcher, Script)>,
    /// `(request index, prompt_tokens, completion_tokens)` of every completion answered.
    usage: Vec<(usize, u64, u64)>,
    /// When set, every completion reports this usage instead of counting words.
    fixed_usage: Option<(u64, u64)>,
}

/// Picks requests for [`FakeOpenAi::script_matching`].
type RequestMatcher = Arc<dyn Fn(&ChatRequestRecord) -> bool + Send + Sync>;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not hide the records from the others.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The usage reported for answering `record` with `text`, recorded.
    fn usage_of(&self, record: &ChatRequestRecord, text: &str) -> (u64, u64) {
        let mut inner = self.lock();
        let usage = inner
            .fixed_usage
            .unwrap_or_else(|| word_usage(record, text));
        inner.usage.push((record.index, usage.0, usage.1));
        usage
    }
}

/// How a streamed answer is paced ([`Script::Paced`]).
struct Pace {
    gap: Duration,
    stall_after: Option<usize>,
    shutdown: watch::Receiver<bool>,
}

/// The running fake. Dropping it stops the server and releases hanging requests.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
    audio: crate::fake_openai_audio::FakeAudio,
}

impl FakeOpenAi {
    /// A fake with a fresh random API key and the default reply.
    pub async fn start() -> Self {
        Self::start_with(FakeOpenAiConfig::default()).await
    }

    pub async fn start_with(config: FakeOpenAiConfig) -> Self {
        let shared = Arc::new(Shared {
            config,
            inner: Mutex::new(Inner::default()),
            chat_count: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
        });
        let audio = crate::fake_openai_audio::FakeAudio::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(list_models))
            .route("/v1/models/{id}", get(get_model))
            .fallback(unmatched)
            .with_state(shared.clone())
            .merge(crate::fake_openai_audio::router(audio.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake OpenAI server");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeOpenAi {
            addr,
            shared,
            server,
            audio,
        }
    }

    /// The audio route (`/v1/audio/transcriptions`): its script and what it saw.
    pub fn audio(&self) -> &crate::fake_openai_audio::FakeAudio {
        &self.audio
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://127.0.0.1:PORT/v1`: what `OPENAI_BASE_URL` is set to.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn api_key(&self) -> Option<&str> {
        self.shared.config.api_key.as_deref()
    }
    pub fn model(&self) -> &str {
        &self.shared.config.model
    }

    /// Queue a script entry for a future chat request.
    pub fn push(&self, script: Script) {
        self.shared.lock().script.push_back(script);
    }
    pub fn push_reply(&self, text: impl Into<String>) {
        self.push(Script::Reply(text.into()));
    }
    /// What to do once the queue is empty: `Some(script)` repeats it for every request (a
    /// model that is down or hangs), `None` goes back to the default reply.
    pub fn set_fallback(&self, script: Option<Script>) {
        self.shared.lock().fallback = script;
    }
    /// Answers every request that `matches` picks with `script`, before the queue and the
    /// fallback are consulted and without consuming them: to script one kind of request
    /// (told apart by its system prompt, say) while others keep their order.
    pub fn script_matching(
        &self,
        matches: impl Fn(&ChatRequestRecord) -> bool + Send + Sync + 'static,
        script: Script,
    ) {
        self.shared.lock().rules.push((Arc::new(matches), script));
    }
    /// Script entries not consumed yet.
    pub fn pending_scripts(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Every chat completion request so far, in arrival order.
    /// Makes every later completion report `prompt` and `completion` tokens as its usage.
    pub fn set_usage(&self, prompt: u64, completion: u64) {
        self.shared.lock().fixed_usage = Some((prompt, completion));
    }
    /// `(request index, prompt tokens, completion tokens)` reported with every completion
    /// answered so far, in the order the answers went out.
    pub fn usage_log(&self) -> Vec<(usize, u64, u64)> {
        self.shared.lock().usage.clone()
    }
    pub fn requests(&self) -> Vec<ChatRequestRecord> {
        self.shared.lock().chats.clone()
    }
    pub fn request_count(&self) -> usize {
        self.shared.lock().chats.len()
    }
    pub fn last_request(&self) -> Option<ChatRequestRecord> {
        self.shared.lock().chats.last().cloned()
    }
    /// All message contents of the last chat request, joined by newlines ("" if none).
    pub fn last_prompt_text(&self) -> String {
        self.last_request()
            .map(|r| r.prompt_text())
            .unwrap_or_default()
    }
    pub fn embedding_requests(&self) -> Vec<EmbeddingRequestRecord> {
        self.shared.lock().embeddings.clone()
    }
    /// Requests to paths the fake does not serve.
    pub fn unmatched(&self) -> Vec<UnmatchedRequest> {
        self.shared.lock().unmatched.clone()
    }

    /// Waits until at least `n` chat requests have arrived, then returns them all.
    pub async fn try_wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<ChatRequestRecord>, String> {
        let expected = format!("the fake OpenAI server to get {n} chat request(s)");
        wait::until_or_report(
            self,
            self.shared.chat_count.subscribe(),
            timeout,
            expected,
            || {
                let requests = self.requests();
                (requests.len() >= n).then_some(requests)
            },
        )
        .await
    }

    /// Waits until at least `n` chat requests satisfy `matches` (e.g. the gateway's
    /// background memory calls, told apart by their system prompt), then returns those.
    /// Panics with what did arrive after `timeout`.
    pub async fn wait_for_matching(
        &self,
        n: usize,
        timeout: Duration,
        matches: impl Fn(&ChatRequestRecord) -> bool,
    ) -> Vec<ChatRequestRecord> {
        let expected = format!("{n} matching chat request(s)");
        wait::until_or_report(
            self,
            self.shared.chat_count.subscribe(),
            timeout,
            expected,
            || {
                let found: Vec<_> = self.requests().into_iter().filter(|r| matches(r)).collect();
                (found.len() >= n).then_some(found)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Self::try_wait_for_requests`], panicking with a diagnostic on timeout.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<ChatRequestRecord> {
        match self.try_wait_for_requests(n, timeout).await {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }
}

impl Diagnose for FakeOpenAi {
    /// How many chat requests arrived, the start of each one's system prompt (which tells
    /// the gateway's calls apart), and requests to paths the fake does not serve.
    fn diagnostics(&self) -> String {
        let prompts = self
            .requests()
            .iter()
            .map(|r| {
                format!(
                    "{:?}",
                    r.system_prompt()
                        .unwrap_or("")
                        .chars()
                        .take(60)
                        .collect::<String>()
                )
            })
            .collect::<Vec<_>>();
        format!(
            "{}\nrequests to unknown paths: {:?}",
            wait::lines("chat requests, by system prompt", prompts),
            self.unmatched()
        )
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        self.server.abort();
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `None` when authorized, else the 401 response OpenAI sends.
fn check_auth(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let expected = shared.config.api_key.as_deref()?;
    let got = header_str(headers, header::AUTHORIZATION);
    let message = match got.as_deref().and_then(|h| h.strip_prefix("Bearer ")) {
        Some(key) if key == expected => return None,
        Some(key) => format!(
            "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
            redact(key)
        ),
        None => "You didn't provide an API key. You need to provide your API key in an Authorization header \
                 using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            .to_string(),
    };
    let code = if got.is_some() {
        Some("invalid_api_key")
    } else {
        None
    };
    Some(error_response(
        401,
        openai_error(&message, "invalid_request_error", code),
    ))
}

fn redact(key: &str) -> String {
    let head: String = key.chars().take(3).collect();
    let tail: String = key
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{head}*****{tail}")
}

fn error_response(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

fn bad_request(message: &str) -> Value {
    openai_error(message, "invalid_request_error", None)
}

/// The message content as text: a string, or the text parts of an array.
fn content_text(content: &Value) -> Result<String, String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text").and_then(Value::as_str) {
                        Some(t) => texts.push(t.to_string()),
                        None => return Err("a text content part needs a string 'text'".into()),
                    },
                    // As OpenAI checks it: an image part carries `image_url.url`.
                    Some("image_url") => {
                        if part
                            .pointer("/image_url/url")
                            .and_then(Value::as_str)
                            .is_none()
                        {
                            return Err("an image_url content part needs 'image_url.url'".into());
                        }
                    }
                    Some(_) => {}
                    None => return Err("each content part needs a 'type'".into()),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err("'content' must be a string or an array of content parts".into()),
    }
}

/// Checks the request against the protocol: `model` and a non-empty `messages` with known
/// roles. Returns `(model, messages, stream)` or the 400 message.
fn parse_chat_request(body: &Value) -> Result<(String, Vec<ChatMessage>, bool), String> {
    let Some(obj) = body.as_object() else {
        return Err("We could not parse the JSON body of your request. (HINT: This likely means you aren't \
                    using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was \
                    sent was not valid JSON.)"
            .into());
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err("you must provide a model parameter".into()),
    };
    let Some(Value::Array(raw)) = obj.get("messages") else {
        return Err("Missing required parameter: 'messages'.".into());
    };
    if raw.is_empty() {
        return Err("[] is too short - 'messages'".into());
    }
    let mut messages = Vec::with_capacity(raw.len());
    for (i, m) in raw.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if !matches!(role, "system" | "developer" | "user" | "assistant" | "tool") {
            return Err(format!(
                "Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool', 'developer'. (messages[{i}].role)"
            ));
        }
        let content = match m.get("content") {
            Some(c) => content_text(c).map_err(|e| format!("messages[{i}]: {e}"))?,
            None if role == "assistant" => String::new(),
            None => {
                return Err(format!(
                    "Missing required parameter: 'messages[{i}].content'."
                ));
            }
        };
        if role == "tool" && m.get("tool_call_id").and_then(Value::as_str).is_none() {
            return Err(format!(
                "Missing required parameter: 'messages[{i}].tool_call_id'."
            ));
        }
        messages.push(ChatMessage {
            role: role.to_string(),
            content,
        });
    }
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("'stream' must be a boolean".into()),
    };
    Ok((model, messages, stream))
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let unauthorized = check_auth(&shared, &headers);
    let parsed = parse_chat_request(&json);

    // Record first (and decide the script under the same lock), then act.
    let (record, script) = {
        let mut inner = shared.lock();
        let index = inner.chats.len() + 1;
        let (model, messages, stream) = match &parsed {
            Ok((m, msgs, s)) => (m.clone(), msgs.clone(), *s),
            Err(_) => (String::new(), Vec::new(), false),
        };
        let mut record = ChatRequestRecord {
            index,
            authorization: header_str(&headers, header::AUTHORIZATION),
            content_type: header_str(&headers, header::CONTENT_TYPE),
            user_agent: header_str(&headers, header::USER_AGENT),
            body: json.clone(),
            model,
            messages,
            stream,
            outcome: Outcome::Hang,
            received_at: std::time::Instant::now(),
        };
        let script = if unauthorized.is_some() {
            record.outcome = Outcome::Unauthorized;
            None
        } else if let Err(e) = &parsed {
            record.outcome = Outcome::BadRequest(e.clone());
            None
        } else {
            let ruled = inner
                .rules
                .iter()
                .find(|(matches, _)| matches(&record))
                .map(|(_, script)| script.clone());
            let script = ruled
                .or_else(|| inner.script.pop_front())
                .or_else(|| inner.fallback.clone())
                .unwrap_or_else(|| {
                    let text = match &shared.config.default_reply {
                        Some(f) => f(&record),
                        None => default_reply_text(&record),
                    };
                    Script::Reply(text)
                });
            // A model calls only tools it was given.
            let script = match script {
                Script::ToolCalls(_) if record.body.get("tools").is_none() => {
                    Script::Reply(match &shared.config.default_reply {
                        Some(f) => f(&record),
                        None => default_reply_text(&record),
                    })
                }
                script => script,
            };
            record.outcome = outcome_of(&script);
            Some(script)
        };
        inner.chats.push(record.clone());
        (record, script)
    };
    shared.chat_count.send_replace(record.index);

    if let Some(resp) = unauthorized {
        return resp;
    }
    if let Outcome::BadRequest(msg) = &record.outcome {
        return error_response(400, bad_request(msg));
    }
    let mut script = script.expect("a script for an accepted request");
    loop {
        match script {
            Script::Delay(d, inner) => {
                let mut shutdown = shared.shutdown.subscribe();
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = shutdown.wait_for(|s| *s) => return shutting_down(),
                }
                script = *inner;
            }
            Script::Gated(gate, inner) => {
                let mut shutdown = shared.shutdown.subscribe();
                tokio::select! {
                    _ = gate.passed() => {}
                    _ = shutdown.wait_for(|s| *s) => return shutting_down(),
                }
                script = *inner;
            }
            Script::Hang => {
                let mut shutdown = shared.shutdown.subscribe();
                let _ = shutdown.wait_for(|s| *s).await;
                return shutting_down();
            }
            Script::Status(code, body) => return error_response(code, body),
            Script::RetryAfter(secs) => {
                let mut response = error_response(429, Script::rate_limited_body());
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
                return response;
            }
            Script::ToolCalls(calls) => {
                return tool_calls_response(&record, &calls, &json);
            }
            Script::Reply(text) => {
                let usage = shared.usage_of(&record, &text);
                return completion_response(&record, &text, &json, usage, None);
            }
            Script::Paced {
                text,
                gap,
                stall_after,
            } => {
                if stall_after.is_some() && !record.stream {
                    let _ = shared.shutdown.subscribe().wait_for(|s| *s).await;
                    return shutting_down();
                }
                let usage = shared.usage_of(&record, &text);
                let pace = Pace {
                    gap,
                    stall_after,
                    shutdown: shared.shutdown.subscribe(),
                };
                return completion_response(&record, &text, &json, usage, Some(pace));
            }
        }
    }
}

fn outcome_of(script: &Script) -> Outcome {
    match script {
        Script::Reply(t) => Outcome::Reply(t.clone()),
        Script::Status(c, b) => Outcome::Status(*c, b.clone()),
        Script::Hang => Outcome::Hang,
        Script::Delay(_, inner) | Script::Gated(_, inner) => outcome_of(inner),
        Script::RetryAfter(_) => Outcome::Status(429, Script::rate_limited_body()),
        Script::ToolCalls(calls) => Outcome::ToolCalls(calls.iter().map(|c| c.0.clone()).collect()),
        Script::Paced { text, .. } => Outcome::Reply(text.clone()),
    }
}

fn shutting_down() -> Response {
    error_response(
        503,
        openai_error(
            "The fake OpenAI server is shutting down.",
            "server_error",
            None,
        ),
    )
}

/// The usage the fake reports by default: words of the prompt and of the reply.
fn word_usage(record: &ChatRequestRecord, text: &str) -> (u64, u64) {
    (
        words(&record.prompt_text()).max(1) as u64,
        words(text) as u64,
    )
}

fn usage_json((prompt, completion): (u64, u64)) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn completion_response(
    record: &ChatRequestRecord,
    text: &str,
    request: &Value,
    usage: (u64, u64),
    pace: Option<Pace>,
) -> Response {
    let id = format!("chatcmpl-fake{:06}", record.index);
    let created = now_secs();
    if !record.stream {
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": record.model,
            "system_fingerprint": "fp_fake",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": usage_json(usage),
        });
        return (StatusCode::OK, axum::Json(body)).into_response();
    }

    let frame = ChunkFrame::new(record, request);
    let include_usage = frame.include_usage;
    let chunk = |delta: Value, finish: Value| {
        frame.chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
            Value::Null,
        )
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    for piece in split_keep_spaces(text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(frame.chunk(json!([]), usage_json(usage)));
    }
    let mut sse: Vec<Result<Event, Infallible>> = events
        .into_iter()
        .map(|v| Ok(Event::default().data(v.to_string())))
        .collect();
    sse.push(Ok(Event::default().data("[DONE]")));
    match pace {
        None => Sse::new(futures::stream::iter(sse)).into_response(),
        Some(pace) => Sse::new(paced(sse, pace)).into_response(),
    }
}

/// The events of a streamed answer, `pace.gap` apart; with `stall_after`, the role and
/// that many pieces, then nothing until the fake stops (the stream then ends unfinished).
fn paced(
    events: Vec<Result<Event, Infallible>>,
    pace: Pace,
) -> impl futures::Stream<Item = Result<Event, Infallible>> {
    let limit = pace.stall_after.map(|n| n + 1);
    futures::stream::unfold(
        (events.into_iter().enumerate(), pace, limit),
        |(mut events, mut pace, limit)| async move {
            let (i, event) = events.next()?;
            if limit.is_some_and(|l| i >= l) {
                let _ = pace.shutdown.wait_for(|s| *s).await;
                return None;
            }
            if i > 0 {
                tokio::time::sleep(pace.gap).await;
            }
            Some((event, (events, pace, limit)))
        },
    )
}

/// OpenAI's answer with tool calls (non-streaming): `message.content` null, one
/// `tool_calls` entry per call with `function.arguments` as a JSON string.
fn tool_calls_response(
    record: &ChatRequestRecord,
    calls: &[(String, Value)],
    request: &Value,
) -> Response {
    let id = |i: usize| format!("call_fake{:04}_{i}", record.index);
    let usage = (words(&record.prompt_text()).max(1) as u64, 10);
    if record.stream {
        return streamed_tool_calls(record, calls, request, usage);
    }
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": id(i),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()},
            })
        })
        .collect();
    let body = json!({
        "id": format!("chatcmpl-fake{:06}", record.index),
        "object": "chat.completion",
        "created": now_secs(),
        "model": record.model,
        "system_fingerprint": "fp_fake",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": tool_calls},
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": usage_json(usage),
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// What every chunk of one streamed answer shares; `usage` is on each chunk (null until
/// the last) only when the request asked for `stream_options.include_usage`.
struct ChunkFrame<'a> {
    id: String,
    created: u64,
    model: &'a str,
    include_usage: bool,
}

impl<'a> ChunkFrame<'a> {
    fn new(record: &'a ChatRequestRecord, request: &Value) -> Self {
        ChunkFrame {
            id: format!("chatcmpl-fake{:06}", record.index),
            created: now_secs(),
            model: &record.model,
            include_usage: request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    fn chunk(&self, choices: Value, usage: Value) -> Value {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        });
        if self.include_usage {
            c["usage"] = usage;
        }
        c
    }
}

/// OpenAI's streamed tool calls: a role chunk, then per call a chunk with its `index`,
/// `id`, `type` and name and an empty `arguments`, then the arguments in pieces (chunks
/// carrying only `index` and `function.arguments`), then `finish_reason: "tool_calls"`,
/// the usage chunk when asked for, and `[DONE]`.
fn streamed_tool_calls(
    record: &ChatRequestRecord,
    calls: &[(String, Value)],
    request: &Value,
    usage: (u64, u64),
) -> Response {
    let frame = ChunkFrame::new(record, request);
    let include_usage = frame.include_usage;
    let chunk = |choices: Value, usage: Value| frame.chunk(choices, usage);
    let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    let mut events = vec![chunk(
        choice(
            json!({"role": "assistant", "content": null, "refusal": null}),
            Value::Null,
        ),
        Value::Null,
    )];
    for (i, (name, args)) in calls.iter().enumerate() {
        let head = json!({"tool_calls": [{"index": i, "id": format!("call_fake{:04}_{i}", record.index),
            "type": "function", "function": {"name": name, "arguments": ""}}]});
        events.push(chunk(choice(head, Value::Null), Value::Null));
        let args = args.to_string();
        let cut = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(0, |(at, _)| at);
        for piece in [&args[..cut], &args[cut..]] {
            let delta = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
            events.push(chunk(choice(delta, Value::Null), Value::Null));
        }
    }
    events.push(chunk(choice(json!({}), json!("tool_calls")), Value::Null));
    if include_usage {
        events.push(chunk(json!([]), usage_json(usage)));
    }
    let mut sse: Vec<Result<Event, Infallible>> = events
        .into_iter()
        .map(|v| Ok(Event::default().data(v.to_string())))
        .collect();
    sse.push(Ok(Event::default().data("[DONE]")));
    Sse::new(futures::stream::iter(sse)).into_response()
}

/// Splits into pieces of at most three words, keeping the separators, so the pieces
/// concatenate back to the text exactly.
fn split_keep_spaces(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut words_in = 0;
    for part in text.split_inclusive(' ') {
        current.push_str(part);
        words_in += 1;
        if words_in == 3 {
            pieces.push(std::mem::take(&mut current));
            words_in = 0;
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// A deterministic, L2-normalized hashed bag of words: the same text always gives the same
/// vector, and texts sharing words are closer. Tests can compute expected vectors with it.
pub fn embedding_for(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = fnv1a(word.to_lowercase().as_bytes());
        let i = (h % v.len() as u64) as usize;
        let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
        v[i] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let inputs: Result<Vec<String>, &str> = match json.get("input") {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                // Token arrays are allowed by the protocol; hash the numbers as words.
                Value::Array(tokens) => Ok(tokens
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err("'input' items must be strings or token arrays"),
            })
            .collect(),
        _ => Err("'input' is a required property and must be a string or a non-empty array"),
    };
    shared.lock().embeddings.push(EmbeddingRequestRecord {
        authorization: header_str(&headers, header::AUTHORIZATION),
        body: json.clone(),
        inputs: inputs.clone().unwrap_or_default(),
    });
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    let inputs = match inputs {
        Ok(i) => i,
        Err(e) => return error_response(400, bad_request(e)),
    };
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return error_response(400, bad_request("you must provide a model parameter"));
    };
    let dim = match json.get("dimensions") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(d) if d >= 1 => d as usize,
            _ => {
                return error_response(400, bad_request("'dimensions' must be a positive integer"));
            }
        },
        _ => shared.config.embedding_dim,
    };
    let as_base64 = match json.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return error_response(
                400,
                bad_request(&format!(
                    "Invalid value: '{other}'. Supported values are: 'float' and 'base64'."
                )),
            );
        }
    };
    let mut tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            tokens += words(text);
            let v = embedding_for(text, dim);
            let embedding = if as_base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 1_686_935_002, "owned_by": "troupe-e2e"})
}

async fn list_models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    let body = json!({
        "object": "list",
        "data": [model_object(&shared.config.model), model_object(&shared.config.embedding_model)],
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn get_model(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    if id == shared.config.model || id == shared.config.embedding_model {
        return (StatusCode::OK, axum::Json(model_object(&id))).into_response();
    }
    error_response(
        404,
        openai_error(
            &format!("The model '{id}' does not exist"),
            "invalid_request_error",
            Some("model_not_found"),
        ),
    )
}

async fn unmatched(State(shared): State<Arc<Shared>>, method: Method, uri: Uri) -> Response {
    shared.lock().unmatched.push(UnmatchedRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
    });
    error_response(
        404,
        bad_request(&format!("Invalid URL ({} {})", method, uri.path())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn split_keeps_the_text() {
        let text = "one two three four five six seven";
        assert_eq!(split_keep_spaces(text).concat(), text);
        assert!(split_keep_spaces(text).len() > 1);
        assert_eq!(split_keep_spaces("").concat(), "");
    }

    #[test]
    fn embeddings_are_deterministic_and_normalized() {
        let a = embedding_for("the lighthouse keeper", 64);
        assert_eq!(a, embedding_for("The lighthouse keeper!", 64));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert_ne!(a, embedding_for("a completely different sentence", 64));
    }

    #[test]
    fn content_parts_are_flattened() {
        let parts = json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(&parts).unwrap(), "a\nb");
        assert!(content_text(&json!(3)).is_err());
    }

    fn client() -> reqwest::Client {
        crate::http_client().no_proxy().build().unwrap()
    }

    fn chat_body(user: &str) -> Value {
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are Ada."},
                {"role": "user", "content": user}
            ],
            "temperature": 0.7,
            "max_tokens": 200
        })
    }

    async fn post(fake: &FakeOpenAi, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
        let mut req = client().post(format!("{}{path}", fake.url())).json(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }

    #[tokio::test]
    async fn scripted_then_default_replies_with_the_documented_shape() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        fake.push_reply("Hello from the script");

        let (status, body) = post(
            &fake,
            "/v1/chat/completions",
            &chat_body("hi there"),
            Some(&key),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "gpt-4o-mini");
        assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(body["created"].is_u64());
        assert_eq!(body["choices"][0]["index"], 0);
        assert_eq!(body["choices"][0]["message"]["role"], "assistant");
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "Hello from the script"
        );
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        let usage = &body["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64().unwrap(),
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        );

        let (status, body) = post(
            &fake,
            "/v1/chat/completions",
            &chat_body("second question"),
            Some(&key),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "Reply #2 to: second question"
        );

        let reqs = fake.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            reqs[0].authorization.as_deref(),
            Some(format!("Bearer {key}").as_str())
        );
        assert_eq!(
            reqs[0].messages[0],
            ChatMessage {
                role: "system".into(),
                content: "You are Ada.".into()
            }
        );
        assert_eq!(reqs[0].body["temperature"], 0.7);
        assert_eq!(reqs[0].reply(), Some("Hello from the script"));
        assert!(!reqs[0].stream);
        assert_eq!(fake.last_prompt_text(), "You are Ada.\nsecond question");
        assert_eq!(fake.pending_scripts(), 0);
    }

    #[tokio::test]
    async fn status_script_and_fallback() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        fake.push(Script::server_error());
        let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), Some(&key)).await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["type"], "server_error");
        assert!(body["error"]["message"].is_string());
        assert!(body["error"].get("code").is_some());

        fake.set_fallback(Some(Script::rate_limited()));
        for _ in 0..2 {
            let (status, body) =
                post(&fake, "/v1/chat/completions", &chat_body("b"), Some(&key)).await;
            assert_eq!(status, 429);
            assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        }
        fake.set_fallback(None);
        let (status, _) = post(&fake, "/v1/chat/completions", &chat_body("c"), Some(&key)).await;
        assert_eq!(status, 200);
        let outcomes: Vec<_> = fake.requests().into_iter().map(|r| r.outcome).collect();
        assert!(matches!(outcomes[0], Outcome::Status(500, _)));
        assert!(matches!(outcomes[3], Outcome::Reply(_)));
    }

    #[tokio::test]
    async fn auth_is_checked_and_refusals_are_recorded() {
        let fake = FakeOpenAi::start().await;
        fake.push_reply("kept for the authorized request");
        let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), None).await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("didn't provide an API key")
        );
        let (status, body) = post(
            &fake,
            "/v1/chat/completions",
            &chat_body("a"),
            Some("sk-wrong-key"),
        )
        .await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert!(
            !body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("sk-wrong-key")
        );
        let reqs = fake.requests();
        assert_eq!(reqs.len(), 2);
        assert!(reqs.iter().all(|r| r.outcome == Outcome::Unauthorized));
        // A refusal does not consume the script.
        assert_eq!(fake.pending_scripts(), 1);
        let key = fake.api_key().unwrap().to_string();
        let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), Some(&key)).await;
        assert_eq!(status, 200);
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "kept for the authorized request"
        );

        let open = FakeOpenAi::start_with(FakeOpenAiConfig {
            api_key: None,
            ..Default::default()
        })
        .await;
        let (status, _) = post(&open, "/v1/chat/completions", &chat_body("a"), None).await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn malformed_requests_get_400_and_unknown_paths_404() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        let (status, body) = post(
            &fake,
            "/v1/chat/completions",
            &json!({"model": "gpt-4o-mini"}),
            Some(&key),
        )
        .await;
        assert_eq!(status, 400);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("messages")
        );
        let resp = client()
            .post(format!("{}/v1/chat/completions", fake.url()))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        assert!(matches!(
            fake.last_request().unwrap().outcome,
            Outcome::BadRequest(_)
        ));

        let (status, body) = post(&fake, "/chat/completions", &chat_body("a"), Some(&key)).await;
        assert_eq!(status, 404);
        assert_eq!(
            body["error"]["message"],
            "Invalid URL (POST /chat/completions)"
        );
        assert_eq!(
            fake.unmatched(),
            vec![UnmatchedRequest {
                method: "POST".into(),
                path: "/chat/completions".into()
            }]
        );
        assert_eq!(fake.request_count(), 2);
    }

    #[tokio::test]
    async fn content_parts_are_recorded_as_text() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        let body = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]});
        let (status, _) = post(&fake, "/v1/chat/completions", &body, Some(&key)).await;
        assert_eq!(status, 200);
        assert_eq!(fake.last_prompt_text(), "part one\npart two");
    }

    #[tokio::test]
    async fn streaming_sends_chunks_then_done() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        fake.push_reply("one two three four five six seven");
        let mut body = chat_body("stream please");
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let resp = client()
            .post(format!("{}/v1/chat/completions", fake.url()))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let text = resp.text().await.unwrap();
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(data.last(), Some(&"[DONE]"));
        let chunks: Vec<Value> = data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );
        let content: String = chunks
            .iter()
            .filter_map(|c| {
                c["choices"]
                    .get(0)
                    .and_then(|ch| ch["delta"]["content"].as_str())
            })
            .collect();
        assert_eq!(content, "one two three four five six seven");
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let finish: Vec<&Value> = chunks
            .iter()
            .filter(|c| {
                c["choices"]
                    .get(0)
                    .is_some_and(|ch| ch["finish_reason"] == "stop")
            })
            .collect();
        assert_eq!(finish.len(), 1);
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert!(last["usage"]["total_tokens"].as_u64().unwrap() > 0);
        assert!(fake.last_request().unwrap().stream);
    }

    #[tokio::test]
    async fn hang_never_answers_and_wait_for_requests_sees_it() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        fake.push(Script::Hang);
        let url = format!("{}/v1/chat/completions", fake.url());
        let req = client()
            .post(url)
            .bearer_auth(&key)
            .json(&chat_body("are you there?"))
            .send();
        let pending = tokio::spawn(req);
        let reqs = fake.wait_for_requests(1, Duration::from_secs(10)).await;
        assert_eq!(reqs[0].outcome, Outcome::Hang);
        assert!(!pending.is_finished());
        // Dropping the fake releases the hanging request with a 503.
        drop(fake);
        let resp = pending.await.unwrap().unwrap();
        assert_eq!(resp.status(), 503);
    }

    #[tokio::test]
    async fn a_client_timeout_fires_on_hang() {
        let fake = FakeOpenAi::start().await;
        fake.set_fallback(Some(Script::Hang));
        let err = crate::http_client()
            .no_proxy()
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap()
            .post(format!("{}/v1/chat/completions", fake.url()))
            .bearer_auth(fake.api_key().unwrap())
            .json(&chat_body("x"))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout());
        assert!(
            fake.try_wait_for_requests(2, Duration::from_millis(50))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn delay_then_reply() {
        let fake = FakeOpenAi::start().await;
        fake.push(Script::Delay(
            Duration::from_millis(10),
            Box::new(Script::reply("late")),
        ));
        let key = fake.api_key().unwrap().to_string();
        let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("x"), Some(&key)).await;
        assert_eq!(status, 200);
        assert_eq!(body["choices"][0]["message"]["content"], "late");
    }

    #[tokio::test]
    async fn embeddings_and_models() {
        let fake = FakeOpenAi::start().await;
        let key = fake.api_key().unwrap().to_string();
        let body = json!({"model": "text-embedding-3-small", "input": ["sea glass", "lighthouse"]});
        let (status, resp) = post(&fake, "/v1/embeddings", &body, Some(&key)).await;
        assert_eq!(status, 200);
        assert_eq!(resp["object"], "list");
        assert_eq!(resp["data"].as_array().unwrap().len(), 2);
        assert_eq!(resp["data"][1]["index"], 1);
        let v: Vec<f32> = serde_json::from_value(resp["data"][0]["embedding"].clone()).unwrap();
        assert_eq!(v, embedding_for("sea glass", 64));
        assert!(resp["usage"]["prompt_tokens"].is_u64());

        let body = json!({"model": "text-embedding-3-small", "input": "sea glass", "dimensions": 8, "encoding_format": "base64"});
        let (status, resp) = post(&fake, "/v1/embeddings", &body, Some(&key)).await;
        assert_eq!(status, 200);
        let expected: Vec<u8> = embedding_for("sea glass", 8)
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(resp["data"][0]["embedding"], base64(&expected));
        assert_eq!(fake.embedding_requests().len(), 2);
        assert_eq!(fake.request_count(), 0);

        let (status, _) = post(
            &fake,
            "/v1/embeddings",
            &json!({"model": "m", "input": "x"}),
            None,
        )
        .await;
        assert_eq!(status, 401);

        let resp = client()
            .get(format!("{}/v1/models", fake.url()))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let models: Value = resp.json().await.unwrap();
        assert_eq!(models["object"], "list");
        assert_eq!(models["data"][0]["id"], "gpt-4o-mini");
        assert_eq!(models["data"][0]["object"], "model");
        let resp = client()
            .get(format!("{}/v1/models/nope", fake.url()))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
    }
}
