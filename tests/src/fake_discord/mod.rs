//! A fake Discord: the REST routes and the gateway WebSocket a bot uses, following Discord's
//! documented protocol (API v10, JSON in text frames), on 127.0.0.1.
//!
//! REST under `/api/v10`: `GET /gateway` and `/gateway/bot` (pointing at the fake's own
//! `ws://` gateway), `GET /users/@me`, `GET /applications/@me`, `POST /channels/{id}/messages` (records content and
//! `message_reference`; 400 over 2,000 characters; honours `nonce` + `enforce_nonce`),
//! `PATCH` and `DELETE /channels/{id}/messages/{m}` (edits kept in order, issue 32),
//! `GET /channels/{id}/messages?after=&limit=` (newest first, as Discord answers),
//! `POST /channels/{id}/typing`. Messages with files, voice messages among them, are in
//! `voice.rs`. Every answer carries `X-RateLimit-*` headers; scripted 429s
//! carry Discord's JSON body and `Retry-After`; scripted refusals
//! ([`FakeDiscord::refuse_next_send`]) carry its error body.
//!
//! Application commands and interactions: `PUT /applications/{app}/commands` (bulk
//! overwrite of the global commands: names checked as Discord documents, ids kept for names
//! that stay), `GET` the same; an INTERACTION_CREATE dispatch for a slash command
//! ([`FakeDiscord::send_slash_command`]), `POST /interactions/{id}/{token}/callback`
//! (`204`; `404` code 10062 for an unknown interaction, `400` code 40060 when already
//! acknowledged) and `POST /webhooks/{app}/{token}` for the follow-up (`404` code 10015
//! before the interaction was acknowledged), recorded as [`FollowUp`]s.
//!
//! Gateway: HELLO (op 10), heartbeat ACK (op 11), IDENTIFY (op 2) → READY, RESUME (op 6) →
//! the missed dispatches replayed in order, then RESUMED; INVALID_SESSION (op 9) for an
//! unknown session. Dispatches carry an incrementing `s`. A test can drop the connection
//! (the TCP connection just ends, and new connections wait until it allows them), ask for a
//! RECONNECT (op 7), or invalidate the session. A test can edit or delete a message it
//! sent (issue 32): MESSAGE_UPDATE with the whole message and `edited_timestamp`, and
//! MESSAGE_DELETE with `id`, `channel_id` and `guild_id`, as Discord dispatches them.
//!
//! Channel webhooks (issue 46, [`webhooks`]): create and list a channel's webhooks, post,
//! edit and delete as a webhook, `GET /channels/{id}` for threads; an admin deleting them
//! and a bot without Manage Webhooks are scripted.
//!
//! Several bots ([`FakeDiscord::add_bot`]): each has its own token, user and gateway session,
//! as several applications in one guild do. REST calls act as the bot whose token they carry
//! (`users/@me`, the author of a created message); a guild message, a person's or a bot's,
//! is dispatched as MESSAGE_CREATE to every bot's session (they all see every channel of the
//! fake guild), with `author.bot` true for a bot's; a DM goes to the first bot only.
//! A test can hold one bot's dispatches ([`FakeDiscord::hold_bot`]) to fix which bot hears
//! a message first.
//!
//! The fake is split by what Discord does: [`gateway`] (the WebSocket, sessions, bots),
//! [`messages`] (creating, listing and reading messages, typing, the CDN), [`edits`] (edits
//! and deletes, the bot's and a sender's), [`interactions`] (application commands, slash
//! commands and their follow-ups), [`reactions`] and [`voice`] (messages with files). This
//! file holds the fake's state, which each part reads directly, and what every route shares
//! (the caller's token, the request log, rate-limit headers, Discord's error body).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::wait::{self, Diagnose};

mod edits;
mod gateway;
mod interactions;
mod messages;
mod reactions;
mod voice;
mod webhooks;
pub use reactions::OwnReaction;
pub use voice::Upload;
pub use webhooks::{FakeWebhook, WebhookMessage};

/// The bot's token as the tests configure it.
pub const TOKEN: &str = "t0k3n";

/// The bot's user id.
pub const BOT_ID: &str = "900000000000000001";

pub const BOT_NAME: &str = "dot";

pub const APPLICATION_ID: &str = "900000000000000002";

/// The guild every guild channel belongs to.
pub const GUILD_ID: &str = "800000000000000001";

/// Discord's per-message limit.
pub const MAX_CONTENT: usize = 2000;

/// Unix milliseconds of the first message; message `n` is stamped `n` seconds later.
const BASE_UNIX_MS: u64 = 1_793_577_600_000;

const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A bot account of the fake: its token, user id and username.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeBot {
    pub token: String,
    pub id: String,
    pub name: String,
}

impl FakeBot {
    /// The first bot: [`TOKEN`], [`BOT_ID`], [`BOT_NAME`].
    pub fn primary() -> Self {
        Self {
            token: TOKEN.into(),
            id: BOT_ID.into(),
            name: BOT_NAME.into(),
        }
    }

    fn user(&self) -> Value {
        json!({"id": self.id, "username": self.name, "discriminator": "0",
            "global_name": self.name, "avatar": null, "bot": true})
    }
}

/// Which bot a gateway connection or a REST call is: the first, or an added one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Primary,
    Other(usize),
}

/// An added bot and its gateway session.
struct OtherBot {
    bot: FakeBot,
    session: Option<Session>,
    live: Option<(u64, mpsc::UnboundedSender<Outgoing>)>,
}

/// Who writes a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub bot: bool,
}

impl Author {
    pub fn person(name: &str) -> Self {
        Self {
            name: name.into(),
            bot: false,
        }
    }
    pub fn bot(name: &str) -> Self {
        Self {
            name: name.into(),
            bot: true,
        }
    }
}

/// A message someone else writes, for [`FakeDiscord::send_message_create`] and
/// [`FakeDiscord::store_channel_message`].
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub channel: String,
    pub author: Author,
    pub content: String,
    /// Mention the bot (`<@id>` in the text and the bot in `mentions`).
    pub mention_bot: bool,
    /// Further bots mentioned (`<@id>` in the text and the bot in `mentions`).
    pub mentions: Vec<FakeBot>,
    pub dm: bool,
    pub reply_to: Option<String>,
    pub attachments: Vec<Value>,
    /// Embeds as Discord sends them (e.g. an `image` embed Discord unfurled from a link).
    pub embeds: Vec<Value>,
    /// Message flags (`IS_VOICE_MESSAGE`, 1 << 13, for a voice message).
    pub flags: u64,
    /// Posted through this webhook (any webhook id, the bot's own among them): the message
    /// has `webhook_id`, and its author is the webhook under `author`'s name.
    pub webhook_id: Option<String>,
    /// The guild of a guild message; `None`: the fake's guild, [`GUILD_ID`].
    pub guild: Option<String>,
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub id: String,
    /// The user id of the bot that sent it (the token's bot).
    pub author_id: String,
    pub channel: String,
    pub content: String,
    /// `message_reference.message_id`, when the message was a reply.
    pub reply_to: Option<String>,
    pub fail_if_not_exists: Option<bool>,
    pub nonce: Option<String>,
}

/// An edit of a message (`PATCH /channels/{c}/messages/{m}`), as the fake took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub message_id: String,
    pub channel: String,
    pub content: String,
    /// When it arrived: the edit pace is checked against these.
    pub at: std::time::Instant,
}

/// What a REST request was answered.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub method: &'static str,
    pub path: String,
    pub status: u16,
    pub authorized: bool,
}

enum Outgoing {
    Frame(String),
    /// End the TCP connection without a close frame.
    Drop,
}

struct Session {
    id: String,
    seq: u64,
    /// Every dispatch of the session, for replay after RESUME.
    log: Vec<(u64, String)>,
}

/// An answer to a slash command through its interaction webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUp {
    pub interaction: String,
    pub content: String,
}

/// A slash command a test dispatches.
#[derive(Debug, Clone)]
pub struct Slash {
    pub channel: String,
    pub author: Author,
    pub name: String,
    /// (option name, string value).
    pub options: Vec<(String, String)>,
    /// The member's permissions in the channel (`member.permissions`).
    pub permissions: u64,
    /// The member's role ids (`member.roles`), from [`FakeDiscord::add_role`].
    pub roles: Vec<String>,
}

/// One interaction the fake sent: its token, and the callback type it got.
struct InteractionRecord {
    token: String,
    acknowledged: Option<u64>,
}

#[derive(Default)]
struct Inner {
    /// The guild's roles: (id, name).
    roles: Vec<(String, String)>,
    /// The application's global commands, as the last bulk overwrite left them.
    commands: Vec<Value>,
    command_overwrites: usize,
    next_command: u64,
    interactions: HashMap<String, InteractionRecord>,
    next_interaction: u64,
    follow_ups: Vec<FollowUp>,
    next_message: u64,
    users: HashMap<String, String>,
    /// Channel → messages in order (JSON message objects).
    channels: HashMap<String, Vec<Value>>,
    dm_channels: Vec<String>,
    /// DMs the bot opened itself (`POST /users/@me/channels`): (user, channel).
    opened_dms: Vec<(String, String)>,
    sent: Vec<SentMessage>,
    nonces: HashMap<(String, String), Value>,
    typing: Vec<String>,
    requests: Vec<RequestRecord>,
    /// The CDN's files by path (`/attachments/...`), and each CDN request: (path, whether it
    /// carried an `Authorization` header, which the CDN never needs).
    cdn: HashMap<String, Vec<u8>>,
    cdn_requests: Vec<(String, bool)>,
    scripted_429: usize,
    /// Edits of the bot's messages, in order (issue 32).
    edits: Vec<Edit>,
    /// Ids of the bot's messages it deleted, in order.
    deleted: Vec<String>,
    /// The next `n` message edits are answered 429.
    scripted_edit_429: usize,
    /// The bot's own reactions, put and taken back, in order (`reactions`).
    own_reactions: Vec<reactions::OwnReaction>,
    /// Messages with files (voice messages), in order (`voice`).
    uploads: Vec<voice::Upload>,
    /// Channel webhooks and their messages (`webhooks`).
    hooks: webhooks::Hooks,
    /// Refusals for the next message creates: status, Discord's error code, message.
    scripted_errors: std::collections::VecDeque<(u16, u64, String)>,
    rate_limited: usize,
    session: Option<Session>,
    live: Option<(u64, mpsc::UnboundedSender<Outgoing>)>,
    /// Bots besides the first, each with its own session.
    others: Vec<OtherBot>,
    /// Bots whose dispatches wait (in their session, in order) until released: a slow
    /// network to one bot, so a test can fix which bot hears a message first.
    held_bots: Vec<Which>,
    parked: Vec<(Which, String)>,
    connections: u64,
    identifies: usize,
    resumes: usize,
    replayed: usize,
}

struct Shared {
    inner: Mutex<Inner>,
    sent: watch::Sender<usize>,
    /// READYs and RESUMEDs sent: a test waits on it to know the bot is connected.
    sessions: watch::Sender<(usize, usize)>,
    /// New gateway connections wait while this is true.
    held: watch::Sender<bool>,
    ws_url: Mutex<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fake. Dropping it stops the server.
pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn snowflake(n: u64) -> String {
    let ms = BASE_UNIX_MS + n * 1000;
    (((ms - DISCORD_EPOCH_MS) << 22) | (n & 0xfff)).to_string()
}

fn timestamp(n: u64) -> String {
    // 2026-11-02T00:00:00Z plus n seconds (tests stay well within a day).
    let s = n % 86_400;
    format!(
        "2026-11-02T{:02}:{:02}:{:02}.000000+00:00",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

impl FakeDiscord {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            sent: watch::Sender::new(0),
            sessions: watch::Sender::new((0, 0)),
            held: watch::Sender::new(false),
            ws_url: Mutex::new(String::new()),
        });
        let app = Router::new()
            .route("/api/v10/gateway", get(gateway::gateway_url))
            .route("/api/v10/gateway/bot", get(gateway::gateway_bot))
            .route("/api/v10/users/@me", get(gateway::users_me))
            .route("/api/v10/applications/@me", get(gateway::applications_me))
            .route("/api/v10/users/@me/channels", post(gateway::create_dm))
            .route(
                "/api/v10/channels/{channel}/messages",
                post(messages::create_message).get(messages::list_messages),
            )
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                axum::routing::patch(edits::edit_message).delete(edits::delete_message),
            )
            .route(
                "/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me",
                axum::routing::put(reactions::own_reaction).delete(reactions::own_reaction),
            )
            .route("/api/v10/channels/{channel}/typing", post(messages::typing))
            .route(
                "/api/v10/applications/{app}/commands",
                axum::routing::put(interactions::overwrite_commands)
                    .get(interactions::list_commands),
            )
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interactions::interaction_callback),
            )
            .route("/api/v10/webhooks/{app}/{token}", post(webhooks::execute))
            .route(
                "/api/v10/webhooks/{id}/{token}/messages/{message}",
                axum::routing::patch(webhooks::webhook_message).delete(webhooks::webhook_message),
            )
            .route("/api/v10/channels/{channel}", get(webhooks::get_channel))
            .route(
                "/api/v10/channels/{channel}/webhooks",
                get(webhooks::list_webhooks).post(webhooks::create_webhook),
            )
            .route(
                "/api/v10/guilds/{guild}/roles",
                get(interactions::guild_roles),
            )
            .route("/gateway-ws", get(gateway::gateway_ws))
            .route("/attachments/{*path}", get(messages::cdn_file))
            .fallback(unmatched)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Discord server");
        let addr = listener.local_addr().expect("local addr");
        *shared.ws_url.lock().unwrap_or_else(|e| e.into_inner()) =
            format!("ws://{addr}/gateway-ws");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscord {
            addr,
            shared,
            server,
        }
    }

    /// The character file of a persona `name` on Discord through this fake
    /// ([`crate::persona_json`], the bot's token, the API URL and the application id set).
    pub fn persona(&self, name: &str, bio: &str) -> Value {
        let mut character = crate::persona_json(name, bio);
        character["clients"] = json!(["discord"]);
        character["settings"]["secrets"] = json!({
            "DISCORD_API_TOKEN": TOKEN,
            "DISCORD_API_URL": self.url(),
            "DISCORD_APPLICATION_ID": APPLICATION_ID,
        });
        character
    }

    /// `http://127.0.0.1:PORT`: what `DISCORD_API_URL` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }
}

impl Diagnose for FakeDiscord {
    /// What the bot sent, its gateway sessions, and every REST request with its answer.
    fn diagnostics(&self) -> String {
        let inner = self.shared.lock();
        let requests = inner.requests.iter().map(|r| {
            format!(
                "{} {} -> {}{}",
                r.method,
                r.path,
                r.status,
                if r.authorized { "" } else { " (bad token)" }
            )
        });
        format!(
            "sent: {:#?}\nidentifies: {}, resumes: {}, replayed: {}\n{}",
            inner.sent,
            inner.identifies,
            inner.resumes,
            inner.replayed,
            wait::lines("requests", requests)
        )
    }
}

/// The bot whose `Bot TOKEN` the request carries, if it is one of the fake's.
fn caller(shared: &Shared, headers: &HeaderMap) -> Option<FakeBot> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())?
        .strip_prefix("Bot ")?;
    shared.lock().bot_by_token(token).map(|(_, bot)| bot)
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    caller(shared, headers).is_some()
}

fn record(shared: &Shared, method: &'static str, path: String, status: u16, authorized: bool) {
    shared.lock().requests.push(RequestRecord {
        method,
        path,
        status,
        authorized,
    });
}

fn with_bucket(status: StatusCode, body: Value) -> Response {
    (
        status,
        [
            ("x-ratelimit-limit", "5"),
            ("x-ratelimit-remaining", "4"),
            ("x-ratelimit-reset-after", "5.000"),
            ("x-ratelimit-bucket", "f4k3b0ck37"),
        ],
        axum::Json(body),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"message": "401: Unauthorized", "code": 0})),
    )
        .into_response()
}

fn discord_error(status: StatusCode, code: u64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

async fn unmatched(State(shared): State<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    record(&shared, "?", uri.to_string(), 404, true);
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"message": "404: Not Found", "code": 0})),
    )
        .into_response()
}
