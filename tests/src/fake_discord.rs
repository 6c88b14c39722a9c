//! A fake Discord: the REST routes and the gateway WebSocket a bot uses, following Discord's
//! documented protocol (API v10, JSON in text frames), on 127.0.0.1.
//!
//! REST under `/api/v10`: `GET /gateway` and `/gateway/bot` (pointing at the fake's own
//! `ws://` gateway), `GET /users/@me`, `POST /channels/{id}/messages` (records content and
//! `message_reference`; 400 over 2,000 characters; honours `nonce` + `enforce_nonce`),
//! `PATCH` and `DELETE /channels/{id}/messages/{m}` (edits kept in order, issue 32),
//! `GET /channels/{id}/messages?after=&limit=` (newest first, as Discord answers),
//! `POST /channels/{id}/typing`. Messages with files, voice messages among them, are in
//! `fake_discord_voice.rs`. Every answer carries `X-RateLimit-*` headers; scripted 429s
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
//! Several bots ([`FakeDiscord::add_bot`]): each has its own token, user and gateway session,
//! as several applications in one guild do. REST calls act as the bot whose token they carry
//! (`users/@me`, the author of a created message); a guild message, a person's or a bot's,
//! is dispatched as MESSAGE_CREATE to every bot's session (they all see every channel of the
//! fake guild), with `author.bot` true for a bot's; a DM goes to the first bot only.
//! A test can hold one bot's dispatches ([`FakeDiscord::hold_bot`]) to fix which bot hears
//! a message first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::wait::{self, Diagnose};

#[path = "fake_discord_reactions.rs"]
mod reactions;
pub use reactions::OwnReaction;
#[path = "fake_discord_voice.rs"]
mod voice;
pub use voice::Upload;

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
}

impl NewMessage {
    /// A message in guild channel `channel`.
    pub fn guild(channel: &str, author: Author, content: &str) -> Self {
        Self {
            channel: channel.into(),
            author,
            content: content.into(),
            mention_bot: false,
            mentions: Vec::new(),
            dm: false,
            reply_to: None,
            attachments: Vec::new(),
            embeds: Vec::new(),
            flags: 0,
        }
    }
    /// A direct message in DM channel `channel`.
    pub fn dm(channel: &str, author: Author, content: &str) -> Self {
        Self {
            dm: true,
            ..Self::guild(channel, author, content)
        }
    }
    pub fn mentioning_bot(mut self) -> Self {
        self.mention_bot = true;
        self
    }
    /// Mentions `bot` (one added with [`FakeDiscord::add_bot`], or the first).
    pub fn mentioning(mut self, bot: &FakeBot) -> Self {
        self.mentions.push(bot.clone());
        self
    }
    pub fn replying_to(mut self, message_id: &str) -> Self {
        self.reply_to = Some(message_id.into());
        self
    }
    pub fn with_attachment(mut self, filename: &str, content_type: &str, size: u64) -> Self {
        self.attachments.push(json!({
            "id": "700000000000000001", "filename": filename, "content_type": content_type,
            "size": size, "url": format!("https://cdn.example/{filename}"),
            "proxy_url": format!("https://media.example/{filename}")
        }));
        self
    }
}

/// Files on messages (issue 32): attachments whose `url` the fake's CDN serves (see
/// [`FakeDiscord::add_cdn_file`]), and embeds.
impl NewMessage {
    /// An attachment at `url` (a CDN URL from [`FakeDiscord::add_cdn_file`], or any link),
    /// with the type and size Discord reports.
    pub fn with_file(mut self, url: &str, filename: &str, content_type: &str, size: u64) -> Self {
        self.attachments.push(json!({
            "id": format!("70000000000000{:04}", self.attachments.len() + 1),
            "filename": filename, "content_type": content_type, "size": size,
            "url": url, "proxy_url": url
        }));
        self
    }

    /// A voice message, as Discord's clients post one: the message flagged
    /// `IS_VOICE_MESSAGE` (1 << 13), its one attachment the Ogg recording at `url` with its
    /// `duration_secs` and `waveform`.
    pub fn as_voice_message(mut self, url: &str, size: u64, duration_secs: f64) -> Self {
        self.flags |= 1 << 13;
        self = self.with_file(url, "voice-message.ogg", "audio/ogg", size);
        if let Some(last) = self.attachments.last_mut() {
            last["duration_secs"] = json!(duration_secs);
            last["waveform"] = json!("AAAAAAAAAAAA");
        }
        self
    }

    /// An `image` embed, as Discord unfurls a picture link: `source` is the link, `proxy` the
    /// copy on Discord's media proxy (`None` when Discord has none).
    pub fn with_image_embed(mut self, source: &str, proxy: Option<&str>) -> Self {
        let mut thumbnail = json!({"url": source, "width": 64, "height": 64});
        if let Some(proxy) = proxy {
            thumbnail["proxy_url"] = json!(proxy);
        }
        self.embeds
            .push(json!({"type": "image", "url": source, "thumbnail": thumbnail}));
        self
    }
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

impl Inner {
    fn user(&mut self, author: &Author) -> Value {
        let next = 100 + self.users.len() as u64;
        let id = self
            .users
            .entry(author.name.clone())
            .or_insert_with(|| format!("{}", 600_000_000_000_000_000u64 + next))
            .clone();
        json!({"id": id, "username": author.name, "discriminator": "0",
            "global_name": author.name, "avatar": null, "bot": author.bot})
    }

    fn bot_user() -> Value {
        json!({"id": BOT_ID, "username": BOT_NAME, "discriminator": "0",
            "global_name": "Dot", "avatar": null, "bot": true})
    }

    fn find(&self, id: &str) -> Option<Value> {
        self.channels
            .values()
            .flatten()
            .find(|m| m["id"] == id)
            .cloned()
    }

    fn message(&mut self, new: &NewMessage) -> Value {
        self.next_message += 1;
        let n = self.next_message;
        let author = self.user(&new.author);
        let mut mentioned: Vec<FakeBot> =
            new.mention_bot.then(FakeBot::primary).into_iter().collect();
        mentioned.extend(new.mentions.iter().cloned());
        let prefix: String = mentioned.iter().map(|b| format!("<@{}> ", b.id)).collect();
        let content = format!("{prefix}{}", new.content);
        let mentions: Vec<Value> = mentioned.iter().map(FakeBot::user).collect();
        let referenced = new.reply_to.as_deref().and_then(|id| self.find(id));
        let mut m = json!({
            "id": snowflake(n), "channel_id": new.channel, "author": author,
            "content": content, "timestamp": timestamp(n), "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": mentions,
            "mention_roles": [], "attachments": new.attachments, "embeds": new.embeds,
            "pinned": false, "type": if new.reply_to.is_some() { 19 } else { 0 },
            "flags": new.flags,
        });
        if let Some(id) = &new.reply_to {
            m["message_reference"] =
                json!({"type": 0, "message_id": id, "channel_id": new.channel});
            m["referenced_message"] = referenced.unwrap_or(Value::Null);
        }
        if new.dm && !self.dm_channels.contains(&new.channel) {
            self.dm_channels.push(new.channel.clone());
        }
        self.channels
            .entry(new.channel.clone())
            .or_default()
            .push(m.clone());
        m
    }

    /// Sends a dispatch on every bot's session (and its live connection, if any): every bot
    /// sees every channel of the fake guild.
    fn dispatch(&mut self, t: &str, d: Value) {
        self.dispatch_to(Which::Primary, t, d.clone());
        for i in 0..self.others.len() {
            self.dispatch_to(Which::Other(i), t, d.clone());
        }
    }

    /// Sends a dispatch on one bot's session (and its live connection, if any).
    fn dispatch_to(&mut self, which: Which, t: &str, d: Value) {
        let (session, live) = match which {
            Which::Primary => (&mut self.session, &mut self.live),
            Which::Other(i) => match self.others.get_mut(i) {
                Some(o) => (&mut o.session, &mut o.live),
                None => return,
            },
        };
        let Some(session) = session.as_mut() else {
            return;
        };
        session.seq += 1;
        let frame = json!({"op": 0, "s": session.seq, "t": t, "d": d}).to_string();
        session.log.push((session.seq, frame.clone()));
        if self.held_bots.contains(&which) {
            self.parked.push((which, frame));
            return;
        }
        if let Some((_, tx)) = live.as_ref()
            && tx.send(Outgoing::Frame(frame)).is_err()
        {
            *live = None;
        }
    }

    fn which(&self, bot: &FakeBot) -> Which {
        self.bot_by_token(&bot.token)
            .map_or(Which::Primary, |(w, _)| w)
    }

    /// The bot whose token this is.
    fn bot_by_token(&self, token: &str) -> Option<(Which, FakeBot)> {
        if token == TOKEN {
            return Some((Which::Primary, FakeBot::primary()));
        }
        self.others
            .iter()
            .position(|o| o.bot.token == token)
            .map(|i| (Which::Other(i), self.others[i].bot.clone()))
    }

    fn session_mut(&mut self, which: Which) -> Option<&mut Option<Session>> {
        match which {
            Which::Primary => Some(&mut self.session),
            Which::Other(i) => self.others.get_mut(i).map(|o| &mut o.session),
        }
    }

    fn live_mut(
        &mut self,
        which: Which,
    ) -> Option<&mut Option<(u64, mpsc::UnboundedSender<Outgoing>)>> {
        match which {
            Which::Primary => Some(&mut self.live),
            Which::Other(i) => self.others.get_mut(i).map(|o| &mut o.live),
        }
    }

    /// The bot whose session has this id.
    fn bot_by_session(&self, session_id: &str) -> Option<Which> {
        if self.session.as_ref().is_some_and(|s| s.id == session_id) {
            return Some(Which::Primary);
        }
        self.others
            .iter()
            .position(|o| o.session.as_ref().is_some_and(|s| s.id == session_id))
            .map(Which::Other)
    }
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
            .route("/api/v10/gateway", get(gateway_url))
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/users/@me", get(users_me))
            .route(
                "/api/v10/channels/{channel}/messages",
                post(create_message).get(list_messages),
            )
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                axum::routing::patch(edit_message).delete(delete_message),
            )
            .route(
                "/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me",
                axum::routing::put(reactions::own_reaction).delete(reactions::own_reaction),
            )
            .route("/api/v10/channels/{channel}/typing", post(typing))
            .route(
                "/api/v10/applications/{app}/commands",
                axum::routing::put(overwrite_commands).get(list_commands),
            )
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interaction_callback),
            )
            .route("/api/v10/webhooks/{app}/{token}", post(follow_up))
            .route("/api/v10/guilds/{guild}/roles", get(guild_roles))
            .route("/gateway-ws", get(gateway_ws))
            .route("/attachments/{*path}", get(cdn_file))
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

    /// `http://127.0.0.1:PORT`: what `DISCORD_API_URL` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Puts `bytes` on the fake CDN as `filename` and returns its URL (signed-looking, as
    /// Discord's are: `…/attachments/<channel>/<id>/<filename>?ex=…&hm=…`).
    pub fn add_cdn_file(&self, filename: &str, bytes: &[u8]) -> String {
        let mut inner = self.shared.lock();
        let path = format!("1200/{}/{filename}", 1000 + inner.cdn.len());
        inner.cdn.insert(path.clone(), bytes.to_vec());
        format!("{}/attachments/{path}?ex=6a1b2c3d&hm=0f1e2d3c", self.url())
    }

    /// The CDN requests so far: (path, whether an `Authorization` header came).
    pub fn cdn_requests(&self) -> Vec<(String, bool)> {
        self.shared.lock().cdn_requests.clone()
    }

    /// A message by someone else, dispatched as MESSAGE_CREATE. Without a session (the bot
    /// is not connected) it is only stored, as Discord stores what a bot misses.
    pub fn send_message_create(&self, new: NewMessage) -> String {
        let mut inner = self.shared.lock();
        let mut m = inner.message(&new);
        let id = m["id"].as_str().unwrap_or_default().to_string();
        if !new.dm {
            m["guild_id"] = json!(GUILD_ID);
            m["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": false, "mute": false, "nick": null});
        }
        if new.dm {
            inner.dispatch_to(Which::Primary, "MESSAGE_CREATE", m);
        } else {
            inner.dispatch("MESSAGE_CREATE", m);
        }
        id
    }

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

    /// Holds `bot`'s dispatches from now on: they wait, in order, until
    /// [`Self::release_bot`], as over a slow link to that bot only.
    pub fn hold_bot(&self, bot: &FakeBot) {
        let mut inner = self.shared.lock();
        let which = inner.which(bot);
        inner.held_bots.push(which);
    }

    /// Sends `bot` the dispatches held for it, in order, and stops holding them.
    pub fn release_bot(&self, bot: &FakeBot) {
        let mut inner = self.shared.lock();
        let which = inner.which(bot);
        inner.held_bots.retain(|w| *w != which);
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.parked)
            .into_iter()
            .partition(|(w, _)| *w == which);
        inner.parked = rest;
        if let Some(Some((_, tx))) = inner.live_mut(which) {
            for (_, frame) in mine {
                let _ = tx.send(Outgoing::Frame(frame));
            }
        }
    }

    /// Adds a bot with its own token, user id and name: another persona's account in the
    /// same guild. It sees every guild channel, as the first bot does.
    pub fn add_bot(&self, token: &str, id: &str, name: &str) -> FakeBot {
        let bot = FakeBot {
            token: token.into(),
            id: id.into(),
            name: name.into(),
        };
        self.shared.lock().others.push(OtherBot {
            bot: bot.clone(),
            session: None,
            live: None,
        });
        bot
    }

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

    /// A message stored in the channel's history only (said while the bot was away).
    pub fn store_channel_message(&self, new: NewMessage) -> String {
        let m = self.shared.lock().message(&new);
        m["id"].as_str().unwrap_or_default().to_string()
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

    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The user id the fake gave the author named `name`, once they wrote something.
    pub fn user_id(&self, name: &str) -> Option<String> {
        self.shared.lock().users.get(name).cloned()
    }

    pub fn typing_calls(&self) -> Vec<String> {
        self.shared.lock().typing.clone()
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.clone()
    }

    /// The next `n` message creates are answered 429.
    pub fn script_429(&self, n: usize) {
        self.shared.lock().scripted_429 += n;
    }

    /// The next message create (after any scripted 429s) is refused with `status` and
    /// Discord's JSON error body: e.g. 403, code 50013, "Missing Permissions", or 500.
    pub fn refuse_next_send(&self, status: u16, code: u64, message: &str) {
        self.shared
            .lock()
            .scripted_errors
            .push_back((status, code, message.to_string()));
    }

    /// How many 429s were answered.
    pub fn rate_limited(&self) -> usize {
        self.shared.lock().rate_limited
    }

    pub fn identifies(&self) -> usize {
        self.shared.lock().identifies
    }

    pub fn resumes(&self) -> usize {
        self.shared.lock().resumes
    }

    /// Dispatches replayed after RESUMEs.
    pub fn replayed(&self) -> usize {
        self.shared.lock().replayed
    }

    /// Ends the gateway connection without a close frame, as a network failure does. New
    /// connections wait until [`Self::allow_reconnect`], so whatever the test dispatches
    /// meanwhile is missed by the bot, and replayed if it resumes.
    pub fn drop_connection(&self) {
        self.shared.held.send_replace(true);
        let mut inner = self.shared.lock();
        if let Some((_, tx)) = inner.live.take() {
            let _ = tx.send(Outgoing::Drop);
        }
    }

    pub fn allow_reconnect(&self) {
        self.shared.held.send_replace(false);
    }

    /// Sends RECONNECT (op 7): the bot should reconnect and resume.
    pub fn request_reconnect(&self) {
        let inner = self.shared.lock();
        if let Some((_, tx)) = &inner.live {
            let _ = tx.send(Outgoing::Frame(json!({"op": 7, "d": null}).to_string()));
        }
    }

    /// Forgets the session: the next RESUME gets INVALID_SESSION and the bot identifies anew.
    pub fn invalidate_session(&self) {
        self.shared.lock().session = None;
    }

    /// Waits until the bot has sent at least `n` messages, then returns them all.
    pub async fn try_wait_for_sent(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<SentMessage>, String> {
        let expected = format!("the fake Discord to get {n} message(s)");
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                let sent = self.sent_messages();
                (sent.len() >= n).then_some(sent)
            },
        )
        .await
    }

    pub async fn wait_for_sent(&self, n: usize, timeout: Duration) -> Vec<SentMessage> {
        self.try_wait_for_sent(n, timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until the bot has received `n` READYs (new sessions) in all.
    pub async fn try_wait_for_ready(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let sessions = self.shared.sessions.subscribe();
        let probe = sessions.clone();
        let expected = format!("the bot to identify {n} time(s)");
        wait::until_or_report(self, sessions, timeout, expected, || {
            (probe.borrow().0 >= n).then_some(())
        })
        .await
    }

    /// Waits until the bot has resumed `n` times in all.
    pub async fn try_wait_for_resumed(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let sessions = self.shared.sessions.subscribe();
        let probe = sessions.clone();
        let expected = format!("the bot to resume {n} time(s)");
        wait::until_or_report(self, sessions, timeout, expected, || {
            (probe.borrow().1 >= n).then_some(())
        })
        .await
    }

    /// Waits until the bot has shown typing in `channel` at least once.
    pub async fn wait_for_typing(&self, channel: &str, timeout: Duration) -> Result<(), String> {
        let expected = format!("typing in {channel}");
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            expected,
            || {
                self.typing_calls()
                    .iter()
                    .any(|c| c == channel)
                    .then_some(())
            },
        )
        .await
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

async fn gateway_url(State(shared): State<Arc<Shared>>) -> Response {
    record(&shared, "GET", "/gateway".into(), 200, true);
    let url = shared
        .ws_url
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    axum::Json(json!({"url": url})).into_response()
}

async fn gateway_bot(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let ok = authorized(&shared, &headers);
    record(
        &shared,
        "GET",
        "/gateway/bot".into(),
        if ok { 200 } else { 401 },
        ok,
    );
    if !ok {
        return unauthorized();
    }
    let url = shared
        .ws_url
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    axum::Json(json!({"url": url, "shards": 1, "session_start_limit":
        {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}}))
    .into_response()
}

async fn users_me(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let ok = authorized(&shared, &headers);
    record(
        &shared,
        "GET",
        "/users/@me".into(),
        if ok { 200 } else { 401 },
        ok,
    );
    match caller(&shared, &headers) {
        Some(bot) => with_bucket(StatusCode::OK, bot.user()),
        None => unauthorized(),
    }
}

/// The CDN: a file added with [`FakeDiscord::add_cdn_file`], to anyone (its URL is the
/// secret, as Discord's signed CDN URLs are).
async fn cdn_file(
    State(shared): State<Arc<Shared>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut inner = shared.lock();
    inner
        .cdn_requests
        .push((path.clone(), headers.contains_key("authorization")));
    match inner.cdn.get(&path) {
        Some(bytes) => (StatusCode::OK, bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn typing(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Response {
    let ok = authorized(&shared, &headers);
    let path = format!("/channels/{channel}/typing");
    record(&shared, "POST", path, if ok { 204 } else { 401 }, ok);
    if !ok {
        return unauthorized();
    }
    shared.lock().typing.push(channel);
    shared.sent.send_modify(|_| {});
    StatusCode::NO_CONTENT.into_response()
}

fn discord_error(status: StatusCode, code: u64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

/// `PUT /applications/{app}/commands`: replaces the global commands. Each needs a `name`
/// of 1 to 32 lower-case letters, digits, `-` or `_`, and a `description` of 1 to 100
/// characters (CHAT_INPUT); at most 100 commands. A name kept keeps its id.
async fn overwrite_commands(
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

async fn list_commands(
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
async fn guild_roles(
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
async fn interaction_callback(
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
async fn follow_up(
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

async fn create_message(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/channels/{channel}/messages");
    let Some(sender) = caller(&shared, &headers) else {
        record(&shared, "POST", path, 401, false);
        return unauthorized();
    };
    if voice::is_multipart(&headers) {
        return voice::create_with_files(&shared, &channel, &sender, &headers, body).await;
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            record(&shared, "POST", path, 400, true);
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(
                    json!({"code": 50109, "message": "The request body contains invalid JSON."}),
                ),
            )
                .into_response();
        }
    };
    let mut inner = shared.lock();
    if let Some(refused) = inner.scripted_refusal(&path) {
        return refused;
    }
    let content = body["content"].as_str().unwrap_or_default().to_string();
    let len = content.chars().count();
    if content.trim().is_empty() || len > MAX_CONTENT {
        inner.requests.push(RequestRecord {
            method: "POST",
            path,
            status: 400,
            authorized: true,
        });
        let answer = if len > MAX_CONTENT {
            json!({"code": 50035, "message": "Invalid Form Body", "errors": {"content": {"_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}})
        } else {
            json!({"code": 50006, "message": "Cannot send an empty message"})
        };
        return (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response();
    }
    if let Some(existing) = inner.repeated_nonce(&channel, &body, &path) {
        return with_bucket(StatusCode::OK, existing);
    }
    let reference = &body["message_reference"];
    let reply_to = reference["message_id"].as_str().map(str::to_string);
    let mut message = inner.new_message(&channel, &sender, reply_to.as_deref());
    message["content"] = json!(content);
    let nonce = nonce_of(&body);
    inner.publish(&channel, &sender, &mut message, nonce.as_deref());
    let id = message["id"].as_str().unwrap_or_default().to_string();
    inner.sent.push(SentMessage {
        id,
        author_id: sender.id.clone(),
        channel: channel.clone(),
        content,
        reply_to,
        fail_if_not_exists: reference["fail_if_not_exists"].as_bool(),
        nonce,
    });
    inner.requests.push(RequestRecord {
        method: "POST",
        path,
        status: 200,
        authorized: true,
    });
    let count = inner.sent.len();
    drop(inner);
    shared.sent.send_replace(count);
    with_bucket(StatusCode::OK, message)
}

/// A message create's `nonce`, as a string.
fn nonce_of(body: &Value) -> Option<String> {
    match &body["nonce"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// What every message create shares: scripted 429s and refusals, nonces, the message
/// object, and its place in the channel with its MESSAGE_CREATE echo.
impl Inner {
    /// A scripted 429 or refusal for the next message create, recorded.
    fn scripted_refusal(&mut self, path: &str) -> Option<Response> {
        if self.scripted_429 > 0 {
            self.scripted_429 -= 1;
            self.rate_limited += 1;
            self.requests.push(RequestRecord {
                method: "POST",
                path: path.to_string(),
                status: 429,
                authorized: true,
            });
            return Some(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        ("retry-after", "1"),
                        ("x-ratelimit-limit", "5"),
                        ("x-ratelimit-remaining", "0"),
                        ("x-ratelimit-reset-after", "0.500"),
                        ("x-ratelimit-bucket", "f4k3b0ck37"),
                        ("x-ratelimit-scope", "user"),
                    ],
                    axum::Json(json!({"message": "You are being rate limited.", "retry_after": 0.5, "global": false})),
                )
                    .into_response(),
            );
        }
        let (status, code, message) = self.scripted_errors.pop_front()?;
        self.requests.push(RequestRecord {
            method: "POST",
            path: path.to_string(),
            status,
            authorized: true,
        });
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        Some(
            (
                status,
                axum::Json(json!({"code": code, "message": message})),
            )
                .into_response(),
        )
    }

    /// The message an earlier create with the same `nonce` made, when `enforce_nonce` is
    /// set: Discord answers it and creates nothing (the request is recorded as a 200).
    fn repeated_nonce(&mut self, channel: &str, body: &Value, path: &str) -> Option<Value> {
        if body["enforce_nonce"] != true {
            return None;
        }
        let nonce = nonce_of(body)?;
        let existing = self.nonces.get(&(channel.to_string(), nonce)).cloned()?;
        self.requests.push(RequestRecord {
            method: "POST",
            path: path.to_string(),
            status: 200,
            authorized: true,
        });
        Some(existing)
    }

    /// A new message object by `sender` in `channel`, without content yet; a reply to
    /// `reply_to` when given.
    fn new_message(&mut self, channel: &str, sender: &FakeBot, reply_to: Option<&str>) -> Value {
        self.next_message += 1;
        let n = self.next_message;
        let referenced = reply_to.and_then(|id| self.find(id));
        let mut message = json!({
            "id": snowflake(n), "channel_id": channel, "author": sender.user(),
            "content": "", "timestamp": timestamp(n), "edited_timestamp": null, "tts": false,
            "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
            "embeds": [], "pinned": false, "type": if reply_to.is_some() { 19 } else { 0 }, "flags": 0,
        });
        if let Some(id) = reply_to {
            message["message_reference"] =
                json!({"type": 0, "message_id": id, "channel_id": channel});
            message["referenced_message"] = referenced.unwrap_or(Value::Null);
        }
        message
    }

    /// Puts `message` in `channel` (under its `nonce`, if any) and dispatches it, as Discord
    /// does: to its sender too; in a guild channel to every other bot as well (a DM is the
    /// sender's only).
    fn publish(
        &mut self,
        channel: &str,
        sender: &FakeBot,
        message: &mut Value,
        nonce: Option<&str>,
    ) {
        if let Some(nonce) = nonce {
            message["nonce"] = json!(nonce);
            self.nonces
                .insert((channel.to_string(), nonce.to_string()), message.clone());
        }
        self.channels
            .entry(channel.to_string())
            .or_default()
            .push(message.clone());
        let mut message = message.clone();
        let dm = self.dm_channels.iter().any(|c| c == channel);
        if dm {
            let which = self
                .bot_by_token(&sender.token)
                .map_or(Which::Primary, |(w, _)| w);
            self.dispatch_to(which, "MESSAGE_CREATE", message);
        } else {
            message["guild_id"] = json!(GUILD_ID);
            self.dispatch("MESSAGE_CREATE", message);
        }
    }
}

async fn list_messages(
    State(shared): State<Arc<Shared>>,
    Path(channel): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let path = format!(
        "/channels/{channel}/messages?after={}",
        query.get("after").map(String::as_str).unwrap_or("")
    );
    if !authorized(&shared, &headers) {
        record(&shared, "GET", path, 401, false);
        return unauthorized();
    }
    let after: u64 = query.get("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(50)
        .clamp(1, 100);
    let mut inner = shared.lock();
    let mut found: Vec<Value> = inner
        .channels
        .get(&channel)
        .map(|ms| {
            ms.iter()
                .filter(|m| {
                    m["id"]
                        .as_str()
                        .and_then(|id| id.parse::<u64>().ok())
                        .is_some_and(|id| id > after)
                })
                .take(limit)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    found.reverse();
    inner.requests.push(RequestRecord {
        method: "GET",
        path,
        status: 200,
        authorized: true,
    });
    drop(inner);
    with_bucket(StatusCode::OK, Value::Array(found))
}

async fn unmatched(State(shared): State<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    record(&shared, "?", uri.to_string(), 404, true);
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"message": "404: Not Found", "code": 0})),
    )
        .into_response()
}

async fn gateway_ws(State(shared): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve_gateway(shared, socket))
}

async fn send_text(socket: &mut WebSocket, frame: String) -> bool {
    socket.send(WsMessage::Text(frame.into())).await.is_ok()
}

async fn serve_gateway(shared: Arc<Shared>, mut socket: WebSocket) {
    // A held gateway: the connection is accepted but nothing is read or sent until the test
    // allows it.
    let mut held = shared.held.subscribe();
    if held.wait_for(|h| !*h).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let conn = {
        let mut inner = shared.lock();
        inner.connections += 1;
        inner.connections
    };
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41_250}}).to_string();
    if !send_text(&mut socket, hello).await {
        return;
    }
    // The bot this connection identified or resumed as.
    let mut which = Which::Primary;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(Outgoing::Frame(frame)) => {
                    if !send_text(&mut socket, frame).await {
                        return;
                    }
                }
                Some(Outgoing::Drop) | None => return,
            },
            incoming = socket.recv() => {
                let text = match incoming {
                    Some(Ok(WsMessage::Text(t))) => t.to_string(),
                    Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                        let mut inner = shared.lock();
                        if let Some(live) = inner.live_mut(which)
                            && live.as_ref().is_some_and(|(c, _)| *c == conn)
                        {
                            *live = None;
                        }
                        return;
                    }
                    Some(Ok(_)) => continue,
                };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else {
                    let _ = socket.send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
                        code: 4002, reason: "Error while decoding payload.".into(),
                    }))).await;
                    return;
                };
                match payload["op"].as_u64() {
                    Some(1) if !send_text(&mut socket, json!({"op": 11}).to_string()).await => {
                        return;
                    }
                    Some(1) => {}
                    Some(2) => {
                        let token = payload["d"]["token"].as_str().unwrap_or_default();
                        let token = token.strip_prefix("Bot ").unwrap_or(token);
                        let Some((bot, user)) = shared.lock().bot_by_token(token) else {
                            let _ = socket.send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
                                code: 4004, reason: "Authentication failed.".into(),
                            }))).await;
                            return;
                        };
                        which = bot;
                        let url = shared.ws_url.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let mut inner = shared.lock();
                        inner.identifies += 1;
                        let session_id = format!("fake-session-{}", inner.identifies);
                        if let Some(session) = inner.session_mut(which) {
                            *session = Some(Session { id: session_id.clone(), seq: 0, log: Vec::new() });
                        }
                        if let Some(live) = inner.live_mut(which) {
                            *live = Some((conn, tx.clone()));
                        }
                        let ready = json!({
                            "v": 10, "user": user.user(),
                            "guilds": [{"id": GUILD_ID, "unavailable": true}],
                            "session_id": session_id, "resume_gateway_url": url,
                            "shard": [0, 1],
                            "application": {"id": APPLICATION_ID, "flags": 0},
                        });
                        inner.dispatch_to(which, "READY", ready);
                        let n = inner.identifies;
                        drop(inner);
                        shared.sessions.send_modify(|s| s.0 = n);
                    }
                    Some(6) => {
                        let session_id = payload["d"]["session_id"].as_str().unwrap_or_default();
                        let seq = payload["d"]["seq"].as_u64().unwrap_or(0);
                        let known = shared.lock().bot_by_session(session_id);
                        let Some(bot) = known else {
                            if !send_text(&mut socket, json!({"op": 9, "d": false}).to_string()).await {
                                return;
                            }
                            continue;
                        };
                        which = bot;
                        let mut inner = shared.lock();
                        inner.resumes += 1;
                        if let Some(live) = inner.live_mut(which) {
                            *live = Some((conn, tx.clone()));
                        }
                        let missed: Vec<String> = inner
                            .session_mut(which)
                            .and_then(|s| s.as_ref())
                            .map(|s| s.log.iter().filter(|(n, _)| *n > seq).map(|(_, f)| f.clone()).collect())
                            .unwrap_or_default();
                        inner.replayed += missed.len();
                        for frame in missed {
                            let _ = tx.send(Outgoing::Frame(frame));
                        }
                        inner.dispatch_to(which, "RESUMED", json!({}));
                        let n = inner.resumes;
                        drop(inner);
                        shared.sessions.send_modify(|s| s.1 = n);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// `PATCH /channels/{channel}/messages/{message}`: the bot edits one of its messages'
/// `content` (at most 2,000 characters); its record in [`FakeDiscord::sent_messages`] then
/// shows the new text, and the edit is kept in [`FakeDiscord::edits`].
async fn edit_message(
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

fn edit_in(
    inner: &mut Inner,
    channel: &str,
    message: &str,
    body: &Value,
    path: String,
) -> Response {
    let answer = |inner: &mut Inner, status: u16, body: Value| {
        inner.requests.push(RequestRecord {
            method: "PATCH",
            path: path.clone(),
            status,
            authorized: true,
        });
        with_bucket(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
    };
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
    let Some(content) = body["content"].as_str().map(str::to_string) else {
        return answer(
            inner,
            400,
            json!({"code": 50109, "message": "The request body contains invalid JSON."}),
        );
    };
    if content.trim().is_empty() || content.chars().count() > MAX_CONTENT {
        return answer(
            inner,
            400,
            json!({"code": 50035, "message": "Invalid Form Body"}),
        );
    }
    if inner
        .uploads
        .iter()
        .any(|u| u.id == message && u.is_voice_message())
    {
        return answer(
            inner,
            400,
            json!({"code": 50162, "message": "Voice messages cannot be edited."}),
        );
    }
    let Some(sent) = inner
        .sent
        .iter_mut()
        .find(|m| m.id == message && m.channel == channel)
    else {
        return answer(
            inner,
            404,
            json!({"code": 10008, "message": "Unknown Message"}),
        );
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
    answer(inner, 200, updated)
}

/// `DELETE /channels/{channel}/messages/{message}`: 204, the message gone from
/// [`FakeDiscord::sent_messages`] and its id in [`FakeDiscord::deleted`].
async fn delete_message(
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
