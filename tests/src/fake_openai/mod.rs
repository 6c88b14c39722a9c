//! A faithful fake of the OpenAI-compatible HTTP API, on `127.0.0.1:0`.
//!
//! It owns the wire protocol only: `POST /v1/chat/completions` (plain JSON or SSE when the
//! request says `stream: true`), `POST /v1/embeddings`, `GET /v1/models[/{id}]`, the
//! `Authorization: Bearer` check and OpenAI's error shape
//! (`{"error":{"message","type","param","code"}}`). Every request is recorded so a test can
//! assert what prompt reached the model; replies follow a script the test queues, then a
//! fallback. Any other path answers 404 as OpenAI does and is kept in [`FakeOpenAi::unmatched`],
//! which makes a wrong base URL obvious in a failing test.
//!
//! The fake is split by route: [`chat`] (chat completions: the request's checks, the script,
//! whole replies and tool calls), [`stream`] (the same as SSE chunks, paced or stalled),
//! [`embeddings`] (deterministic vectors, and the model list), and [`audio`] (transcription
//! and speech). This file holds the scripts and records a test reads, the fake's state, and
//! what every route shares (the key check, OpenAI's error body).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

pub mod audio;
mod chat;
use chat::word_usage;
mod embeddings;
mod stream;
#[cfg(test)]
mod tests;
pub use embeddings::embedding_for;

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
    audio: audio::FakeAudio,
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
        let audio = audio::FakeAudio::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat::chat_completions))
            .route("/v1/embeddings", post(embeddings::embeddings))
            .route("/v1/models", get(embeddings::list_models))
            .route("/v1/models/{id}", get(embeddings::get_model))
            .fallback(unmatched)
            .with_state(shared.clone())
            .merge(audio::router(audio.clone()));
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
    pub fn audio(&self) -> &audio::FakeAudio {
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

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
