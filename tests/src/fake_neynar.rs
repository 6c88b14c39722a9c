//! A faithful fake of the Neynar v2 API, on `127.0.0.1:0`, and a Neynar webhook sender.
//!
//! It owns the wire protocol only: the `x-api-key` check, Neynar's error body
//! (`{message, code, property, status}`), `GET /v2/farcaster/notifications` with cursor
//! pages (newest first), `GET /v2/farcaster/cast` (lookup by hash),
//! `GET /v2/farcaster/cast/conversation`, `POST /v2/farcaster/cast` (signer check, the byte
//! limit, `idem`: the same key returns the same cast and records nothing new) and
//! `GET /v2/farcaster/user/bulk`. Tests push casts that mention or reply to the bot, script
//! failures (429 with `Retry-After`, 5xx) per route, and wait on what the bot cast. It can
//! also deliver `cast.created` webhooks signed like Neynar's (hex HMAC-SHA512 of the body in
//! `X-Neynar-Signature`), or unsigned and badly signed ones.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha512;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

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
            .route("/v2/farcaster/notifications", get(notifications))
            .route("/v2/farcaster/notifications/", get(notifications))
            .route("/v2/farcaster/cast", get(lookup_cast).post(publish))
            .route("/v2/farcaster/cast/", get(lookup_cast).post(publish))
            .route("/v2/farcaster/cast/conversation", get(conversation))
            .route("/v2/farcaster/cast/conversation/", get(conversation))
            .route("/v2/farcaster/user/bulk", get(bulk_users))
            .route("/v2/farcaster/user/bulk/", get(bulk_users))
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

    /// A `cast.created` event for a stored cast, as Neynar delivers it.
    pub fn cast_created_event(&self, hash: &str) -> Value {
        let cast = self
            .cast_json(hash)
            .unwrap_or_else(|| panic!("no cast {hash} in the fake"));
        json!({"created_at": EPOCH_SECS, "type": "cast.created", "data": cast})
    }

    /// POSTs `event` to `url`, signed with `secret` as Neynar signs it.
    pub async fn deliver_webhook(url: &str, secret: &str, event: &Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        let signature = sign_webhook(secret, &body);
        post_webhook(url, body, Some(signature)).await
    }

    /// POSTs `event` to `url` without `X-Neynar-Signature`.
    pub async fn deliver_unsigned_webhook(url: &str, event: &Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        post_webhook(url, body, None).await
    }

    /// POSTs `event` to `url` with the given (wrong) signature.
    pub async fn deliver_badly_signed_webhook(
        url: &str,
        signature: &str,
        event: &Value,
    ) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        post_webhook(url, body, Some(signature.to_string())).await
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

/// The hex HMAC-SHA512 of `body` keyed with `secret`: Neynar's `X-Neynar-Signature`.
pub fn sign_webhook(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha512>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

async fn post_webhook(url: &str, body: Vec<u8>, signature: Option<String>) -> (StatusCode, Value) {
    let client = crate::http_client()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client");
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(sig) = signature {
        request = request.header("X-Neynar-Signature", sig);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn hash_for(seq: u64) -> String {
    format!("0x{:040x}", 0xfa00_0000_0000u64 + seq)
}

fn insert_cast(
    inner: &mut Inner,
    author_fid: u64,
    text: String,
    parent_hash: Option<String>,
    parent: Option<&StoredCast>,
    mentioned_fids: Vec<u64>,
) -> String {
    inner.seq += 1;
    let seq = inner.seq;
    let hash = hash_for(seq);
    let thread_hash = parent
        .map(|p| p.thread_hash.clone())
        .unwrap_or_else(|| hash.clone());
    inner.casts.push(StoredCast {
        seq,
        hash: hash.clone(),
        thread_hash,
        parent_hash,
        parent_author_fid: parent.map(|p| p.author_fid),
        author_fid,
        text,
        mentioned_fids,
        embeds: Vec::new(),
    });
    hash
}

/// RFC 3339 (UTC, milliseconds) for seconds since the epoch.
fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (proleptic Gregorian), after H. Hinnant.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn user_json(inner: &Inner, fid: u64) -> Value {
    let username = inner
        .users
        .get(&fid)
        .cloned()
        .unwrap_or_else(|| format!("user{fid}"));
    json!({
        "object": "user",
        "fid": fid,
        "username": username,
        "display_name": username,
        "custody_address": "0x0000000000000000000000000000000000000000",
        "pfp_url": null,
        "follower_count": 0,
        "following_count": 0,
        "verifications": [],
        "verified_addresses": {"eth_addresses": [], "sol_addresses": []},
        "power_badge": false
    })
}

fn render_cast(inner: &Inner, cast: &StoredCast) -> Value {
    let replies = inner
        .casts
        .iter()
        .filter(|c| c.parent_hash.as_deref() == Some(&cast.hash))
        .count();
    json!({
        "object": "cast",
        "hash": cast.hash,
        "thread_hash": cast.thread_hash,
        "parent_hash": cast.parent_hash,
        "parent_url": null,
        "root_parent_url": null,
        "parent_author": {"fid": cast.parent_author_fid},
        "author": user_json(inner, cast.author_fid),
        "app": null,
        "text": cast.text,
        "timestamp": rfc3339(EPOCH_SECS + cast.seq as i64),
        "embeds": cast.embeds,
        "channel": null,
        "reactions": {"likes_count": 0, "recasts_count": 0, "likes": [], "recasts": []},
        "replies": {"count": replies},
        "mentioned_profiles": cast.mentioned_fids.iter().map(|f| user_json(inner, *f)).collect::<Vec<_>>(),
        "mentioned_profiles_ranges": cast.mentioned_fids.iter().map(|_| json!({"start": 0, "end": 1})).collect::<Vec<_>>(),
        "mentioned_channels": [],
        "mentioned_channels_ranges": []
    })
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

/// Neynar's cursors are opaque strings; this one holds an offset.
fn encode_cursor(offset: usize) -> String {
    format!("fake-{}", hex::encode(offset.to_string()))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let raw = hex::decode(cursor.strip_prefix("fake-")?).ok()?;
    String::from_utf8(raw).ok()?.parse().ok()
}

async fn notifications(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = notifications_inner(&shared, &headers, &q);
    if r.status() == StatusCode::OK {
        shared.polls.send_modify(|n| *n += 1);
    }
    finish(&shared, &method, &uri, &headers, r)
}

fn notifications_inner(
    shared: &Shared,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
) -> Response {
    if let Err(r) = front(shared, Route::Notifications, headers) {
        return r.response();
    }
    let Some(fid) = q
        .get("fid")
        .and_then(|f| f.parse::<u64>().ok())
        .filter(|f| *f > 0)
    else {
        return neynar_error(
            400,
            "fid must be a positive integer",
            "InvalidField",
            Some("fid"),
        );
    };
    let mut want_mentions = true;
    let mut want_replies = true;
    if let Some(types) = q.get("type") {
        let types: Vec<&str> = types.split(',').map(str::trim).collect();
        for t in &types {
            if !matches!(
                *t,
                "follows" | "recasts" | "likes" | "mentions" | "replies" | "quotes"
            ) {
                return neynar_error(
                    400,
                    &format!("Invalid notification type: {t}"),
                    "InvalidField",
                    Some("type"),
                );
            }
        }
        want_mentions = types.contains(&"mentions");
        want_replies = types.contains(&"replies");
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 15,
        Some(Ok(l)) if (1..=25).contains(&l) => l,
        Some(_) => {
            return neynar_error(
                400,
                "limit must be between 1 and 25",
                "InvalidField",
                Some("limit"),
            );
        }
    };
    let page_size = limit.min(shared.config.max_page_size.max(1));
    let offset = match q.get("cursor") {
        None => 0,
        Some(c) => match decode_cursor(c) {
            Some(o) => o,
            None => return neynar_error(400, "Invalid cursor", "InvalidField", Some("cursor")),
        },
    };
    let inner = shared.lock();
    let mut items: Vec<(&StoredCast, &str)> = inner
        .casts
        .iter()
        .filter(|c| c.author_fid != fid)
        .filter_map(|c| {
            if c.mentioned_fids.contains(&fid) {
                want_mentions.then_some((c, "mention"))
            } else if c.parent_author_fid == Some(fid) {
                want_replies.then_some((c, "reply"))
            } else {
                None
            }
        })
        .collect();
    items.sort_by_key(|item| std::cmp::Reverse(item.0.seq));
    let page: Vec<Value> = items
        .iter()
        .skip(offset)
        .take(page_size)
        .map(|(c, kind)| {
            json!({
                "object": "notification",
                "most_recent_timestamp": rfc3339(EPOCH_SECS + c.seq as i64),
                "type": kind,
                "seen": false,
                "cast": render_cast(&inner, c)
            })
        })
        .collect();
    let next = (offset + page_size < items.len()).then(|| encode_cursor(offset + page_size));
    axum::Json(json!({
        "notifications": page,
        "unseen_notifications_count": items.len(),
        "next": {"cursor": next}
    }))
    .into_response()
}

fn identified<'a>(
    inner: &'a Inner,
    q: &HashMap<String, String>,
) -> Result<&'a StoredCast, Refusal> {
    let Some(identifier) = q.get("identifier") else {
        return Err(Refusal::new(
            400,
            "identifier is required",
            "InvalidField",
            Some("identifier"),
        ));
    };
    match q.get("type").map(String::as_str) {
        Some("hash") => {}
        Some("url") => return Err(Refusal::new(404, "Cast not found", "NotFound", None)),
        _ => {
            return Err(Refusal::new(
                400,
                "type must be url or hash",
                "InvalidField",
                Some("type"),
            ));
        }
    }
    inner
        .casts
        .iter()
        .find(|c| &c.hash == identifier)
        .ok_or_else(|| Refusal::new(404, "Cast not found", "NotFound", None))
}

async fn lookup_cast(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::CastLookup, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let inner = shared.lock();
            match identified(&inner, &q) {
                Ok(cast) => axum::Json(json!({"cast": render_cast(&inner, cast)})).into_response(),
                Err(r) => r.response(),
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

fn with_replies(inner: &Inner, cast: &StoredCast, depth: u64) -> Value {
    let mut v = render_cast(inner, cast);
    let replies: Vec<Value> = if depth == 0 {
        Vec::new()
    } else {
        inner
            .casts
            .iter()
            .filter(|c| c.parent_hash.as_deref() == Some(&cast.hash))
            .map(|c| with_replies(inner, c, depth - 1))
            .collect()
    };
    v["direct_replies"] = json!(replies);
    v
}

async fn conversation(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::Conversation, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let depth = match q.get("reply_depth").map(|d| d.parse::<u64>()) {
                None => Ok(2),
                Some(Ok(d)) if d <= 5 => Ok(d),
                Some(_) => Err(Refusal::new(
                    400,
                    "reply_depth must be between 0 and 5",
                    "InvalidField",
                    Some("reply_depth"),
                )),
            };
            let inner = shared.lock();
            match (depth, identified(&inner, &q)) {
                (Err(r), _) | (_, Err(r)) => r.response(),
                (Ok(depth), Ok(cast)) => {
                    let mut parents = Vec::new();
                    let mut at = cast.parent_hash.clone();
                    while let Some(p) = at {
                        match inner.casts.iter().find(|c| c.hash == p) {
                            Some(parent) => {
                                parents.push(render_cast(&inner, parent));
                                at = parent.parent_hash.clone();
                            }
                            None => break,
                        }
                    }
                    parents.reverse();
                    let include_parents = q
                        .get("include_chronological_parent_casts")
                        .is_some_and(|v| v == "true");
                    let mut conversation = json!({"cast": with_replies(&inner, cast, depth)});
                    if include_parents {
                        conversation["chronological_parent_casts"] = json!(parents);
                    }
                    axum::Json(json!({"conversation": conversation, "next": {"cursor": null}}))
                        .into_response()
                }
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

async fn bulk_users(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let r = match front(&shared, Route::UserLookup, &headers) {
        Err(r) => r.response(),
        Ok(()) => {
            let fids: Result<Vec<u64>, _> = q
                .get("fids")
                .map(String::as_str)
                .unwrap_or("")
                .split(',')
                .map(|f| f.trim().parse::<u64>())
                .collect();
            match fids {
                Ok(fids) if !fids.is_empty() => {
                    let inner = shared.lock();
                    let users: Vec<Value> = fids
                        .iter()
                        .filter(|f| inner.users.contains_key(f))
                        .map(|f| user_json(&inner, *f))
                        .collect();
                    axum::Json(json!({"users": users})).into_response()
                }
                _ => neynar_error(
                    400,
                    "fids must be a comma separated list of integers",
                    "InvalidField",
                    Some("fids"),
                ),
            }
        }
    };
    finish(&shared, &method, &uri, &headers, r)
}

async fn publish(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = publish_inner(&shared, &headers, &body);
    finish(&shared, &method, &uri, &headers, r)
}

fn publish_inner(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Response {
    if let Err(r) = front(shared, Route::Publish, headers) {
        return r.response();
    }
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return neynar_error(
            400,
            "The request body is not valid JSON",
            "InvalidField",
            None,
        );
    };
    let Some(signer) = req.get("signer_uuid").and_then(Value::as_str) else {
        return neynar_error(
            400,
            "signer_uuid is required",
            "InvalidField",
            Some("signer_uuid"),
        );
    };
    if signer != shared.config.signer_uuid {
        return neynar_error(
            403,
            "Signer not approved or not paired with this API key",
            "SignerNotApproved",
            Some("signer_uuid"),
        );
    }
    let text = req
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let parent = req
        .get("parent")
        .and_then(Value::as_str)
        .map(str::to_string);
    let parent_author_fid = req.get("parent_author_fid").and_then(Value::as_u64);
    let idem = req.get("idem").and_then(Value::as_str).map(str::to_string);
    let bot = shared.config.bot_fid;

    let mut inner = shared.lock();
    if let Some(key) = &idem
        && let Some(hash) = inner.idem.get(key).cloned()
    {
        inner.idem_hits += 1;
        let text = inner
            .casts
            .iter()
            .find(|c| c.hash == hash)
            .map(|c| c.text.clone())
            .unwrap_or_default();
        return axum::Json(
            json!({"success": true, "cast": {"hash": hash, "author": {"fid": bot}, "text": text}}),
        )
        .into_response();
    }
    if text.is_empty() {
        return neynar_error(
            400,
            "A cast needs text or embeds",
            "InvalidField",
            Some("text"),
        );
    }
    if text.len() > shared.config.cast_limit {
        return neynar_error(
            400,
            &format!(
                "Text is too long: {} bytes, the limit is {} bytes",
                text.len(),
                shared.config.cast_limit
            ),
            "InvalidField",
            Some("text"),
        );
    }
    let parent_cast = match &parent {
        Some(p) if p.starts_with("0x") => match inner.casts.iter().find(|c| &c.hash == p) {
            Some(c) => Some(c.clone()),
            None => return neynar_error(404, "Parent cast not found", "NotFound", Some("parent")),
        },
        _ => None,
    };
    let hash = insert_cast(
        &mut inner,
        bot,
        text.clone(),
        parent.clone(),
        parent_cast.as_ref(),
        Vec::new(),
    );
    if let Some(key) = &idem {
        inner.idem.insert(key.clone(), hash.clone());
    }
    inner.published.push(PublishedCast {
        hash: hash.clone(),
        text: text.clone(),
        parent,
        parent_author_fid,
        idem,
        signer_uuid: signer.to_string(),
    });
    let count = inner.published.len();
    drop(inner);
    shared.published.send_replace(count);
    axum::Json(
        json!({"success": true, "cast": {"hash": hash, "author": {"fid": bot}, "text": text}}),
    )
    .into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(EPOCH_SECS), "2026-11-02T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400 + 86_399), "2000-02-29T23:59:59.000Z");
    }

    #[test]
    fn cursors_round_trip() {
        assert_eq!(decode_cursor(&encode_cursor(50)), Some(50));
        assert_eq!(decode_cursor("nope"), None);
    }

    #[test]
    fn signatures_match_openssl() {
        // `printf 'what do ya want for nothing?' | openssl dgst -sha512 -hmac Jefe`
        assert!(
            sign_webhook("Jefe", b"what do ya want for nothing?").starts_with("164b7a7bfcf819e2")
        );
    }
}
