//! A faithful fake of the Neynar v2 API, on `127.0.0.1:0`, and a Neynar webhook sender.
//!
//! It owns the wire protocol only: the `x-api-key` check, Neynar's error body
//! (`{message, code, property, status}`), `GET /v2/farcaster/notifications` with cursor
//! pages (newest first), `GET /v2/farcaster/cast` (lookup by hash),
//! `GET /v2/farcaster/cast/conversation`, `POST /v2/farcaster/cast` (signer check, the byte
//! limit, `idem`: the same key returns the same cast and records nothing new) and
//! `GET /v2/farcaster/user/bulk` and `GET /v2/farcaster/signer`. Tests push casts that mention or reply to the bot, script
//! failures (429 with `Retry-After`, 5xx) per route, and wait on what the bot cast. It can
//! also deliver `cast.created` webhooks signed like Neynar's (hex HMAC-SHA512 of the body in
//! `X-Neynar-Signature`), or unsigned and badly signed ones.
//!
//! The fake is split by what Neynar does: [`casts`] (the casts it holds and the routes that
//! read them: notifications, lookup, conversation, users), [`publish`] (the bot's casts,
//! with `idem`), and [`webhooks`] (signed `cast.created` deliveries). This file holds the
//! fake's state, which each part reads directly, and the front every route shares (the key
//! check, scripted failures, Neynar's error body, the request log).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

mod casts;
use casts::{insert_cast, render_cast};
mod publish;
mod webhooks;
pub use webhooks::sign_webhook;

/// The routes a failure can be scripted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    Notifications,
    CastLookup,
    Conversation,
    Publish,
    UserLookup,
}

/// A scripted answer that replaces the next normal one on a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 429, with `Retry-After: <secs>` when given.
    RateLimited { retry_after_secs: Option<u64> },
    /// This status with Neynar's error body.
    Status(u16),
}

/// How to start a fake.
#[derive(Debug, Clone)]
pub struct FakeNeynarConfig {
    /// The `x-api-key` required.
    pub api_key: String,
    /// The managed signer that may post, as the bot.
    pub signer_uuid: String,
    pub bot_fid: u64,
    pub bot_username: String,
    /// The longest cast text in bytes (320; 1024 for long casts).
    pub cast_limit: usize,
    /// The largest page the notifications endpoint serves, whatever `limit` asks for
    /// (Neynar's is 25); lower it to make a test page.
    pub max_page_size: usize,
}

impl Default for FakeNeynarConfig {
    fn default() -> Self {
        FakeNeynarConfig {
            api_key: format!("neynar-e2e-{}", uuid::Uuid::new_v4().simple()),
            signer_uuid: uuid::Uuid::new_v4().to_string(),
            bot_fid: 42,
            bot_username: "fern".into(),
            cast_limit: 320,
            max_page_size: 25,
        }
    }
}

/// One cast the bot published (an idempotent repeat is not a new one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedCast {
    pub hash: String,
    pub text: String,
    pub parent: Option<String>,
    pub parent_author_fid: Option<u64>,
    pub idem: Option<String>,
    pub signer_uuid: String,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The `x-api-key` header was the configured key.
    pub authorized: bool,
    pub status: u16,
}

/// What a test pushes: a cast by someone else.
#[derive(Debug, Clone)]
pub struct NewCast {
    pub author_fid: u64,
    pub username: String,
    pub text: String,
    pub parent_hash: Option<String>,
    pub mentioned_fids: Vec<u64>,
    /// URL embeds: `(url, metadata.content_type)`.
    pub embeds: Vec<(String, Option<String>)>,
}

impl NewCast {
    pub fn new(author_fid: u64, username: &str, text: &str) -> Self {
        NewCast {
            author_fid,
            username: username.to_string(),
            text: text.to_string(),
            parent_hash: None,
            mentioned_fids: Vec::new(),
            embeds: Vec::new(),
        }
    }
    /// A URL embed, as Neynar renders it (`{url, metadata: {content_type}}`).
    pub fn embedding(mut self, url: &str, content_type: Option<&str>) -> Self {
        self.embeds
            .push((url.to_string(), content_type.map(str::to_string)));
        self
    }
    pub fn mentioning(mut self, fid: u64) -> Self {
        self.mentioned_fids.push(fid);
        self
    }
    pub fn replying_to(mut self, hash: &str) -> Self {
        self.parent_hash = Some(hash.to_string());
        self
    }
}

/// A failure waiting its turn: `pass` more requests are served normally first.
#[derive(Debug, Clone)]
struct Scripted {
    pass: usize,
    failure: Failure,
}

/// A cast in the fake's world.
#[derive(Debug, Clone)]
struct StoredCast {
    seq: u64,
    hash: String,
    thread_hash: String,
    parent_hash: Option<String>,
    parent_author_fid: Option<u64>,
    author_fid: u64,
    text: String,
    mentioned_fids: Vec<u64>,
    embeds: Vec<Value>,
}

struct Shared {
    config: FakeNeynarConfig,
    inner: Mutex<Inner>,
    published: watch::Sender<usize>,
    polls: watch::Sender<usize>,
}

#[derive(Default)]
struct Inner {
    seq: u64,
    casts: Vec<StoredCast>,
    users: HashMap<u64, String>,
    idem: HashMap<String, String>,
    idem_hits: usize,
    published: Vec<PublishedCast>,
    failures: HashMap<Route, VecDeque<Scripted>>,
    requests: Vec<RequestRecord>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeNeynar {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// Midnight UTC on 2026-11-02; cast `n` is stamped `n` seconds later.
const EPOCH_SECS: i64 = 1_793_577_600;

impl FakeNeynar {
    pub async fn start() -> Self {
        Self::start_with(FakeNeynarConfig::default()).await
    }

    pub async fn start_with(config: FakeNeynarConfig) -> Self {
        let mut inner = Inner::default();
        inner
            .users
            .insert(config.bot_fid, config.bot_username.clone());
        let shared = Arc::new(Shared {
            config,
            inner: Mutex::new(inner),
            published: watch::Sender::new(0),
            polls: watch::Sender::new(0),
        });
        let app = Router::new()
            .route("/v2/farcaster/notifications", get(casts::notifications))
            .route("/v2/farcaster/notifications/", get(casts::notifications))
            .route(
                "/v2/farcaster/cast",
                get(casts::lookup_cast).post(publish::publish),
            )
            .route(
                "/v2/farcaster/cast/",
                get(casts::lookup_cast).post(publish::publish),
            )
            .route("/v2/farcaster/cast/conversation", get(casts::conversation))
            .route("/v2/farcaster/cast/conversation/", get(casts::conversation))
            .route("/v2/farcaster/user/bulk", get(casts::bulk_users))
            .route("/v2/farcaster/user/bulk/", get(casts::bulk_users))
            .route("/v2/farcaster/signer", get(casts::lookup_signer))
            .route("/v2/farcaster/signer/", get(casts::lookup_signer))
            .fallback(unmatched)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Neynar server");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeNeynar {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`: what `NEYNAR_API_URL` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn api_key(&self) -> &str {
        &self.shared.config.api_key
    }

    /// The character file of a persona `name` on Farcaster through this fake
    /// ([`crate::persona_json`], the bot's fid, the key, the signer and the API URL set),
    /// polling every second.
    pub fn persona(&self, name: &str, bio: &str) -> Value {
        let mut character = crate::persona_json(name, bio);
        character["clients"] = json!(["farcaster"]);
        character["settings"]["secrets"] = json!({
            "FARCASTER_FID": self.bot_fid().to_string(),
            "FARCASTER_NEYNAR_API_KEY": self.api_key(),
            "FARCASTER_NEYNAR_SIGNER_UUID": self.signer_uuid(),
            "NEYNAR_API_URL": self.url(),
            "FARCASTER_POLL_INTERVAL": "1",
        });
        character
    }

    pub fn signer_uuid(&self) -> &str {
        &self.shared.config.signer_uuid
    }

    pub fn bot_fid(&self) -> u64 {
        self.shared.config.bot_fid
    }

    /// Adds a cast by someone else and returns its hash.
    pub fn push_cast(&self, new: NewCast) -> String {
        let mut inner = self.shared.lock();
        inner.users.insert(new.author_fid, new.username.clone());
        let parent = new
            .parent_hash
            .as_ref()
            .and_then(|p| inner.casts.iter().find(|c| &c.hash == p).cloned());
        let hash = insert_cast(
            &mut inner,
            new.author_fid,
            new.text,
            new.parent_hash,
            parent.as_ref(),
            new.mentioned_fids,
        );
        if let Some(cast) = inner.casts.iter_mut().find(|c| c.hash == hash) {
            cast.embeds = new
                .embeds
                .into_iter()
                .map(|(url, content_type)| {
                    json!({"url": url, "metadata": {"content_type": content_type}})
                })
                .collect();
        }
        hash
    }

    /// A root cast by `author` that @mentions the bot; returns its hash.
    pub fn mention(&self, author_fid: u64, username: &str, text: &str) -> String {
        let bot = self.bot_fid();
        self.push_cast(NewCast::new(author_fid, username, text).mentioning(bot))
    }

    /// A reply to `parent` by `author`; returns its hash.
    pub fn reply(&self, parent: &str, author_fid: u64, username: &str, text: &str) -> String {
        self.push_cast(NewCast::new(author_fid, username, text).replying_to(parent))
    }

    /// A cast as Neynar would return it.
    pub fn cast_json(&self, hash: &str) -> Option<Value> {
        let inner = self.shared.lock();
        let cast = inner.casts.iter().find(|c| c.hash == hash)?;
        Some(render_cast(&inner, cast))
    }

    /// The thread (root hash) a cast is in.
    pub fn thread_of(&self, hash: &str) -> Option<String> {
        let inner = self.shared.lock();
        inner
            .casts
            .iter()
            .find(|c| c.hash == hash)
            .map(|c| c.thread_hash.clone())
    }

    /// Replaces the next normal answer on `route` with `failure` (queued in order).
    pub fn push_failure(&self, route: Route, failure: Failure) {
        self.push_failure_after(route, 0, failure);
    }

    /// Lets `pass` more requests on `route` through (after those queued before), then
    /// answers the next one with `failure`.
    pub fn push_failure_after(&self, route: Route, pass: usize, failure: Failure) {
        self.shared
            .lock()
            .failures
            .entry(route)
            .or_default()
            .push_back(Scripted { pass, failure });
    }

    /// Every cast the bot published, in order.
    pub fn published(&self) -> Vec<PublishedCast> {
        self.shared.lock().published.clone()
    }

    /// Publish requests answered from the `idem` record instead of casting again.
    pub fn idem_hits(&self) -> usize {
        self.shared.lock().idem_hits
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }

    /// Successful notification requests so far.
    pub fn polls(&self) -> usize {
        *self.shared.polls.borrow()
    }

    /// Waits until the bot has published at least `n` casts, then returns them all; on
    /// timeout, says what the fake saw.
    pub async fn try_wait_for_casts(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<PublishedCast>, String> {
        let expected = format!("the fake Neynar to get {n} cast(s)");
        wait::until_or_report(
            self,
            self.shared.published.subscribe(),
            timeout,
            expected,
            || {
                let published = self.published();
                (published.len() >= n).then_some(published)
            },
        )
        .await
    }

    /// Like [`Self::try_wait_for_casts`], panicking on timeout.
    pub async fn wait_for_casts(&self, n: usize, timeout: Duration) -> Vec<PublishedCast> {
        self.try_wait_for_casts(n, timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the notifications endpoint has answered at least `n` polls in all.
    pub async fn try_wait_for_polls(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let expected = format!("the fake Neynar to answer {n} notification poll(s)");
        wait::until_or_report(
            self,
            self.shared.polls.subscribe(),
            timeout,
            expected,
            || (self.polls() >= n).then_some(()),
        )
        .await
    }

    /// Like [`Self::try_wait_for_polls`], panicking on timeout.
    pub async fn wait_for_polls(&self, n: usize, timeout: Duration) {
        self.try_wait_for_polls(n, timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for FakeNeynar {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Diagnose for FakeNeynar {
    /// The casts the bot published and every request with its answer.
    fn diagnostics(&self) -> String {
        let inner = self.shared.lock();
        let requests = inner.requests.iter().map(|r| {
            format!(
                "{} {}{} -> {}{}",
                r.method,
                r.path,
                r.query
                    .as_deref()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default(),
                r.status,
                if r.authorized { "" } else { " (bad key)" }
            )
        });
        format!(
            "published: {:#?}\n{}",
            inner.published,
            wait::lines("requests", requests)
        )
    }
}

fn neynar_error(status: u16, message: &str, code: &str, property: Option<&str>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = json!({"message": message, "code": code, "status": status.as_u16()});
    if let Some(p) = property {
        body["property"] = json!(p);
    }
    (status, axum::Json(body)).into_response()
}

/// A refusal in Neynar's error shape, turned into a response at the end of a handler.
#[derive(Debug)]
struct Refusal {
    status: u16,
    message: String,
    code: &'static str,
    property: Option<&'static str>,
    retry_after_secs: Option<u64>,
}

impl Refusal {
    fn new(status: u16, message: &str, code: &'static str, property: Option<&'static str>) -> Self {
        Refusal {
            status,
            message: message.to_string(),
            code,
            property,
            retry_after_secs: None,
        }
    }

    fn response(self) -> Response {
        let mut response = neynar_error(self.status, &self.message, self.code, self.property);
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = secs.to_string().parse()
        {
            response.headers_mut().insert("retry-after", v);
        }
        response
    }
}

fn record(shared: &Shared, method: &Method, uri: &Uri, authorized: bool, status: u16) {
    shared.lock().requests.push(RequestRecord {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        authorized,
        status,
    });
}

/// The common front of every route: the key check, then any scripted failure.
fn front(shared: &Shared, route: Route, headers: &HeaderMap) -> Result<(), Refusal> {
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    if key != Some(shared.config.api_key.as_str()) {
        let message = if key.is_none() {
            "API key is missing. Pass it in the x-api-key header."
        } else {
            "Unauthorized: the API key is not valid."
        };
        return Err(Refusal::new(401, message, "Unauthorized", None));
    }
    let failure = {
        let mut inner = shared.lock();
        let queue = inner.failures.entry(route).or_default();
        match queue.front_mut() {
            Some(next) if next.pass > 0 => {
                next.pass -= 1;
                None
            }
            Some(_) => queue.pop_front().map(|s| s.failure),
            None => None,
        }
    };
    match failure {
        None => Ok(()),
        Some(Failure::RateLimited { retry_after_secs }) => Err(Refusal {
            retry_after_secs,
            ..Refusal::new(
                429,
                "Rate limit exceeded for this endpoint. Please retry later.",
                "RateLimitExceeded",
                None,
            )
        }),
        Some(Failure::Status(status)) => Err(Refusal::new(
            status,
            "Scripted failure from the fake Neynar.",
            "InternalServerError",
            None,
        )),
    }
}

fn finish(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    r: Response,
) -> Response {
    let authorized = headers.get("x-api-key").and_then(|v| v.to_str().ok())
        == Some(shared.config.api_key.as_str());
    record(shared, method, uri, authorized, r.status().as_u16());
    r
}

async fn unmatched(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let r = neynar_error(404, "Not found", "NotFound", None);
    finish(&shared, &method, &uri, &headers, r)
}
