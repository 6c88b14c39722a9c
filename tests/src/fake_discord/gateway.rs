//! The fake Discord's gateway: the `GET /gateway` routes that point at it, `users/@me`, `applications/@me`,
//! the WebSocket (HELLO, heartbeats, IDENTIFY → READY, RESUME → the missed dispatches then
//! RESUMED, INVALID_SESSION for an unknown session), the dispatch of events to every bot's
//! session, and what a test does to the connection (drop it, hold it, ask for a reconnect,
//! forget the session, hold one bot's dispatches).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    APPLICATION_ID, FakeBot, FakeDiscord, GUILD_ID, Inner, OtherBot, Outgoing, Session, Shared,
    TOKEN, Which, authorized, caller, discord_error, record, snowflake, unauthorized, with_bucket,
};
use crate::wait;

impl Inner {
    /// Sends a dispatch on every bot's session (and its live connection, if any): every bot
    /// sees every channel of the fake guild.
    pub(super) fn dispatch(&mut self, t: &str, d: Value) {
        self.dispatch_to(Which::Primary, t, d.clone());
        for i in 0..self.others.len() {
            self.dispatch_to(Which::Other(i), t, d.clone());
        }
    }

    /// Sends a dispatch on one bot's session (and its live connection, if any).
    pub(super) fn dispatch_to(&mut self, which: Which, t: &str, d: Value) {
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

    pub(super) fn which(&self, bot: &FakeBot) -> Which {
        self.bot_by_token(&bot.token)
            .map_or(Which::Primary, |(w, _)| w)
    }

    /// The bot whose token this is.
    pub(super) fn bot_by_token(&self, token: &str) -> Option<(Which, FakeBot)> {
        if token == TOKEN {
            return Some((Which::Primary, FakeBot::primary()));
        }
        self.others
            .iter()
            .position(|o| o.bot.token == token)
            .map(|i| (Which::Other(i), self.others[i].bot.clone()))
    }

    pub(super) fn session_mut(&mut self, which: Which) -> Option<&mut Option<Session>> {
        match which {
            Which::Primary => Some(&mut self.session),
            Which::Other(i) => self.others.get_mut(i).map(|o| &mut o.session),
        }
    }

    pub(super) fn live_mut(
        &mut self,
        which: Which,
    ) -> Option<&mut Option<(u64, mpsc::UnboundedSender<Outgoing>)>> {
        match which {
            Which::Primary => Some(&mut self.live),
            Which::Other(i) => self.others.get_mut(i).map(|o| &mut o.live),
        }
    }

    /// The bot whose session has this id.
    pub(super) fn bot_by_session(&self, session_id: &str) -> Option<Which> {
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
}

pub(super) async fn gateway_url(State(shared): State<Arc<Shared>>) -> Response {
    record(&shared, "GET", "/gateway".into(), 200, true);
    let url = shared
        .ws_url
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    axum::Json(json!({"url": url})).into_response()
}

pub(super) async fn gateway_bot(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
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

pub(super) async fn users_me(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
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

/// `GET /applications/@me`: the caller's application, as Discord's `Application` object;
/// the Message Content intent is on (`GATEWAY_MESSAGE_CONTENT_LIMITED`, 1 << 19).
pub(super) async fn applications_me(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    let bot = caller(&shared, &headers);
    record(
        &shared,
        "GET",
        "/applications/@me".into(),
        if bot.is_some() { 200 } else { 401 },
        bot.is_some(),
    );
    match bot {
        Some(bot) => with_bucket(
            StatusCode::OK,
            json!({
                "id": application_id(&bot),
                "name": bot.name,
                "icon": null,
                "description": "",
                "summary": "",
                "type": null,
                "bot_public": true,
                "bot_require_code_grant": false,
                "verify_key": "0".repeat(64),
                "flags": 1u64 << 19,
                "team": null,
            }),
        ),
        None => unauthorized(),
    }
}

/// The primary bot's application is [`APPLICATION_ID`]; an added bot's is its id after a 9.
fn application_id(bot: &FakeBot) -> String {
    if *bot == FakeBot::primary() {
        APPLICATION_ID.to_string()
    } else {
        format!("9{}", bot.id)
    }
}

/// `POST /users/@me/channels` (`create_dm` in specs/discord-openapi.json): the DM channel
/// with `recipient_id` (a snowflake), the same one on every call, as Discord answers it (a
/// private channel, `type` 1, with its recipient). A body without a valid recipient is 400
/// Invalid Form Body (50035).
pub(super) async fn create_dm(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = "/users/@me/channels".to_string();
    if caller(&shared, &headers).is_none() {
        record(&shared, "POST", path, 401, false);
        return unauthorized();
    }
    let recipient = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|b| b.get("recipient_id")?.as_str().map(str::to_string))
        .filter(|r| !r.is_empty() && r.len() <= 20 && r.bytes().all(|b| b.is_ascii_digit()));
    let Some(user) = recipient else {
        record(&shared, "POST", path, 400, false);
        return discord_error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
    };
    let channel = {
        let mut inner = shared.lock();
        let known = inner.opened_dms.iter().find(|(u, _)| *u == user);
        match known {
            Some((_, c)) => c.clone(),
            None => {
                inner.next_message += 1;
                let c = snowflake(inner.next_message);
                inner.opened_dms.push((user.clone(), c.clone()));
                inner.dm_channels.push(c.clone());
                c
            }
        }
    };
    record(&shared, "POST", path, 200, true);
    with_bucket(
        StatusCode::OK,
        json!({"id": channel, "type": 1, "last_message_id": null, "flags": 0,
            "recipients": [{"id": user, "username": "owner", "discriminator": "0",
                "global_name": null, "avatar": null}]}),
    )
}

impl FakeDiscord {
    /// The DM channel the bot opened with `user`, if it did.
    pub fn dm_opened_with(&self, user: &str) -> Option<String> {
        let inner = self.shared.lock();
        inner
            .opened_dms
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, c)| c.clone())
    }
}

pub(super) async fn gateway_ws(
    State(shared): State<Arc<Shared>>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |socket| serve_gateway(shared, socket))
}

pub(super) async fn send_text(socket: &mut WebSocket, frame: String) -> bool {
    socket.send(WsMessage::Text(frame.into())).await.is_ok()
}

pub(super) async fn serve_gateway(shared: Arc<Shared>, mut socket: WebSocket) {
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
                        forget_live(&shared, which, conn);
                        return;
                    }
                    Some(Ok(_)) => continue,
                };
                let Ok(payload) = serde_json::from_str::<Value>(&text) else {
                    close(&mut socket, 4002, "Error while decoding payload.").await;
                    return;
                };
                let answer = match payload["op"].as_u64() {
                    Some(1) => Some(json!({"op": 11})),
                    Some(2) => match identify(&shared, &payload, conn, &tx) {
                        Some(bot) => {
                            which = bot;
                            None
                        }
                        None => {
                            close(&mut socket, 4004, "Authentication failed.").await;
                            return;
                        }
                    },
                    Some(6) => match resume(&shared, &payload, conn, &tx) {
                        Some(bot) => {
                            which = bot;
                            None
                        }
                        None => Some(json!({"op": 9, "d": false})),
                    },
                    _ => None,
                };
                if let Some(answer) = answer
                    && !send_text(&mut socket, answer.to_string()).await
                {
                    return;
                }
            }
        }
    }
}

/// Closes the WebSocket with `code`, as Discord does on a bad payload or token.
async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let frame = axum::extract::ws::CloseFrame {
        code,
        reason: reason.to_string().into(),
    };
    let _ = socket.send(WsMessage::Close(Some(frame))).await;
}

/// The connection `conn` of bot `which` closed: it is no longer the bot's live one.
fn forget_live(shared: &Shared, which: Which, conn: u64) {
    let mut inner = shared.lock();
    if let Some(live) = inner.live_mut(which)
        && live.as_ref().is_some_and(|(c, _)| *c == conn)
    {
        *live = None;
    }
}

/// IDENTIFY: a new session for the bot whose token it carries, READY on it; `None` for a
/// token the fake does not know.
fn identify(
    shared: &Shared,
    payload: &Value,
    conn: u64,
    tx: &mpsc::UnboundedSender<Outgoing>,
) -> Option<Which> {
    let token = payload["d"]["token"].as_str().unwrap_or_default();
    let token = token.strip_prefix("Bot ").unwrap_or(token);
    let (which, user) = shared.lock().bot_by_token(token)?;
    let url = shared
        .ws_url
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut inner = shared.lock();
    inner.identifies += 1;
    let session_id = format!("fake-session-{}", inner.identifies);
    if let Some(session) = inner.session_mut(which) {
        *session = Some(Session {
            id: session_id.clone(),
            seq: 0,
            log: Vec::new(),
        });
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
    Some(which)
}

/// RESUME: the dispatches the session missed after `seq`, then RESUMED; `None` for a
/// session the fake does not know (it answers INVALID_SESSION).
fn resume(
    shared: &Shared,
    payload: &Value,
    conn: u64,
    tx: &mpsc::UnboundedSender<Outgoing>,
) -> Option<Which> {
    let session_id = payload["d"]["session_id"].as_str().unwrap_or_default();
    let seq = payload["d"]["seq"].as_u64().unwrap_or(0);
    let which = shared.lock().bot_by_session(session_id)?;
    let mut inner = shared.lock();
    inner.resumes += 1;
    if let Some(live) = inner.live_mut(which) {
        *live = Some((conn, tx.clone()));
    }
    let missed: Vec<String> = inner
        .session_mut(which)
        .and_then(|s| s.as_ref())
        .map(|s| {
            s.log
                .iter()
                .filter(|(n, _)| *n > seq)
                .map(|(_, f)| f.clone())
                .collect()
        })
        .unwrap_or_default();
    inner.replayed += missed.len();
    for frame in missed {
        let _ = tx.send(Outgoing::Frame(frame));
    }
    inner.dispatch_to(which, "RESUMED", json!({}));
    let n = inner.resumes;
    drop(inner);
    shared.sessions.send_modify(|s| s.1 = n);
    Some(which)
}
