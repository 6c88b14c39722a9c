//! Faults survived (issue 12): the real `troupe` binary, the platform and model fakes, and
//! the services they lean on failing in the middle of a burst.
//!
//! - `a_sigkill_mid_burst_loses_nothing_and_answers_nothing_twice`: one process with the
//!   Discord, Telegram and Farcaster fakes, 500 messages over 81 rooms, SIGKILL after 200
//!   replies, a start on the same database: every message gets exactly one reply.
//! - `a_postgres_restart_mid_burst_holds_inbound_and_loses_nothing`: a private Postgres
//!   (never the shared one) stopped after some replies: readiness says so, the API refuses
//!   cleanly, Telegram's updates wait unconfirmed; once it is back, every message gets
//!   exactly one reply.
//! - `a_nats_restart_mid_burst_with_two_replicas_loses_nothing`: two replicas on a private
//!   NATS server that is restarted mid-burst; callers post again on errors, as clients do;
//!   every message is answered once.
//! - `a_provider_outage_waits_behind_the_breaker_and_answers_everything`: the model answers
//!   500s and stalls; retries are bounded, the circuit opens, each room hears one notice,
//!   and once the model is back every message gets its one reply.
//!
//! The tests share nothing (each has its fakes, its database, its services), so they run
//! in parallel. Every wait is on a condition with a generous deadline, which is a hang guard
//! and never asserted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{APPLICATION_ID, Author, FakeDiscord, NewMessage, TOKEN};
use troupe_e2e::fake_neynar::FakeNeynar;
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{
    Backend, FakeOpenAi, PrivateNats, PrivatePostgres, Script, TestApp, TestAppOptions, eventually,
    persona_json, try_post_message,
};

const AGENT: &str = "Max";
const BIO: &str = "Max keeps the harbour's tide tables and answers every message, briefly.";
/// A hang guard: a debug binary on a busy 2-core machine, plus the outbox's 60 s lease on
/// whatever the killed process held.
const WAIT: Duration = Duration::from_secs(180);
/// What the agent says once per room while its model is unreachable.
const MODEL_DOWN: &str = "I'm having trouble reaching my model; I'll answer as soon as it's back.";

/// The environment every test runs with: no rate limits (a burst would turn into
/// refusals) and no background memory calls (only replies reach the model).
fn quiet(options: TestAppOptions) -> TestAppOptions {
    options
        .env("TROUPE_RATE_USER_PER_MIN", "0")
        .env("TROUPE_RATE_ROOM_PER_MIN", "0")
        .env("TROUPE_RATE_AGENT_PER_MIN", "0")
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0")
}

/// Max on whichever platforms are given.
fn max(
    discord: Option<&FakeDiscord>,
    telegram: Option<&FakeTelegram>,
    neynar: Option<&FakeNeynar>,
) -> Value {
    let mut c = persona_json(AGENT, BIO);
    let mut clients = Vec::new();
    let mut secrets = serde_json::Map::new();
    if let Some(d) = discord {
        clients.push("discord");
        secrets.insert("DISCORD_API_TOKEN".into(), json!(TOKEN));
        secrets.insert("DISCORD_API_URL".into(), json!(d.url()));
        secrets.insert("DISCORD_APPLICATION_ID".into(), json!(APPLICATION_ID));
    }
    if let Some(t) = telegram {
        clients.push("telegram");
        secrets.insert("TELEGRAM_BOT_TOKEN".into(), json!(t.token()));
        secrets.insert("TELEGRAM_API_ROOT".into(), json!(t.api_root()));
    }
    if let Some(n) = neynar {
        clients.push("farcaster");
        secrets.insert("FARCASTER_FID".into(), json!(n.bot_fid().to_string()));
        secrets.insert("FARCASTER_NEYNAR_API_KEY".into(), json!(n.api_key()));
        secrets.insert(
            "FARCASTER_NEYNAR_SIGNER_UUID".into(),
            json!(n.signer_uuid()),
        );
        secrets.insert("NEYNAR_API_URL".into(), json!(n.url()));
        secrets.insert("FARCASTER_POLL_INTERVAL".into(), json!("1"));
        // The burst is the test's, not Neynar's quota.
        secrets.insert("FARCASTER_RATE_LIMIT_PER_MIN".into(), json!("60000"));
    }
    c["clients"] = json!(clients);
    c["settings"]["secrets"] = Value::Object(secrets);
    c
}

/// Waits for `check`, printing the app's output on a timeout.
async fn until<F, Fut>(app: &TestApp, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let guarded = tokio::time::timeout(WAIT, eventually(what, WAIT, check)).await;
    if guarded.is_err() {
        panic!(
            "still not true after {WAIT:?}: {what}\n----- troupe output -----\n{}",
            app.logs()
        );
    }
}

/// Per inbound message id, how many of `replies` answer it.
fn count_by<'a>(replies: impl Iterator<Item = Option<String>> + 'a) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for to in replies.flatten() {
        *counts.entry(to).or_insert(0) += 1;
    }
    counts
}

/// Ids of `expected` with no reply, and ids with more than one.
fn lost_and_doubled(
    expected: &[String],
    counts: &HashMap<String, usize>,
) -> (Vec<String>, Vec<(String, usize)>) {
    let lost = expected
        .iter()
        .filter(|id| !counts.contains_key(*id))
        .cloned()
        .collect();
    let doubled = expected
        .iter()
        .filter_map(|id| counts.get(id).filter(|n| **n > 1).map(|n| (id.clone(), *n)))
        .collect();
    (lost, doubled)
}

/// Waits until the bus holds nothing more to handle.
async fn drained(app: &TestApp) {
    until(app, "the bus is drained", || async {
        let (_, body) = app.get("/readyz").await;
        body["bus"]["depth"] == json!(0)
    })
    .await;
}

/// Per Telegram message id (`chat:message`), how many replies answer it.
fn telegram_answers(telegram: &FakeTelegram) -> HashMap<String, usize> {
    count_by(
        telegram
            .sent_messages()
            .into_iter()
            .map(|m| m.reply_to_message_id().map(|r| tg_id(m.chat_id, r))),
    )
}

// --- SIGKILL mid-burst --------------------------------------------------------------------

const DISCORD_CHANNELS: u64 = 20;
const DISCORD_PER_CHANNEL: usize = 10;
const TELEGRAM_CHATS: i64 = 40;
const TELEGRAM_PER_CHAT: usize = 5;
const CASTS: usize = 100;
const KILL_AFTER: usize = 200;

fn channel(n: u64) -> String {
    (410_000_000_000_000_100 + n).to_string()
}

/// Telegram's normalized message id: `chat:message`.
fn tg_id(chat: i64, message: i64) -> String {
    format!("{chat}:{message}")
}

/// The outbox rows of `database` (a SQLite file URL): (platform, reply_to, state, claimed
/// until), one per reply.
async fn outbox_rows(database: &str) -> Vec<(String, Option<String>, String, Option<i64>)> {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(database)
        .await
        .expect("open the app's SQLite database");
    let rows: Vec<(String, String, Option<i64>)> =
        sqlx::query_as("SELECT outbound, state, claimed_until_ms FROM outbox")
            .fetch_all(&mut conn)
            .await
            .expect("read the outbox");
    let _ = conn.close().await;
    rows.into_iter()
        .map(|(outbound, state, claimed)| {
            let o: Value = serde_json::from_str(&outbound).expect("outbound JSON");
            (
                o["room"]["platform"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["reply_to"].as_str().map(str::to_string),
                state,
                claimed,
            )
        })
        .collect()
}

/// The three platform fakes the SIGKILL test talks on.
struct Platforms {
    discord: FakeDiscord,
    telegram: FakeTelegram,
    neynar: FakeNeynar,
}

/// The ids of the messages sent, by platform.
#[derive(Default)]
struct Burst {
    discord: Vec<String>,
    telegram: Vec<String>,
    casts: Vec<String>,
}

impl Platforms {
    async fn start() -> Platforms {
        Platforms {
            discord: FakeDiscord::start().await,
            telegram: FakeTelegram::start().await,
            neynar: FakeNeynar::start().await,
        }
    }

    fn sent_count(&self) -> usize {
        self.discord.sent_messages().len()
            + self.telegram.sent_messages().len()
            + self.neynar.published().len()
    }

    /// Per platform, how many replies answer each message id.
    fn answered(&self) -> [HashMap<String, usize>; 3] {
        [
            count_by(self.discord.sent_messages().into_iter().map(|m| m.reply_to)),
            telegram_answers(&self.telegram),
            count_by(self.neynar.published().into_iter().map(|c| c.parent)),
        ]
    }

    /// Whether every message of `burst` has its reply.
    fn all_answered(&self, burst: &Burst) -> bool {
        let [d, t, f] = self.answered();
        lost_and_doubled(&burst.discord, &d).0.is_empty()
            && lost_and_doubled(&burst.telegram, &t).0.is_empty()
            && lost_and_doubled(&burst.casts, &f).0.is_empty()
    }

    /// Warm-up, part of the 500: Discord catches up after a restart in the channels it
    /// has seen, and Farcaster reads only the newest page on its first poll, as the real
    /// connectors are meant to.
    fn warm_up(&self, burst: &mut Burst) {
        for c in 0..DISCORD_CHANNELS {
            let who = Author::person(&format!("sailor{c}"));
            burst.discord.push(
                self.discord.send_message_create(
                    NewMessage::guild(&channel(c), who, &format!("discord c{c} m0: tide?"))
                        .mentioning_bot(),
                ),
            );
        }
        burst
            .casts
            .push(self.neynar.mention(9_000, "skipper0", "@max cast 0: tide?"));
    }

    /// The rest of the 500, round by round across Discord's channels and Telegram's
    /// chats, then the casts.
    fn burst(&self, burst: &mut Burst) {
        for round in 0..DISCORD_PER_CHANNEL.max(TELEGRAM_PER_CHAT) {
            if (1..DISCORD_PER_CHANNEL).contains(&round) {
                for c in 0..DISCORD_CHANNELS {
                    let who = Author::person(&format!("sailor{c}"));
                    let text = format!("discord c{c} m{round}: tide?");
                    burst.discord.push(self.discord.send_message_create(
                        NewMessage::guild(&channel(c), who, &text).mentioning_bot(),
                    ));
                }
            }
            if round < TELEGRAM_PER_CHAT {
                for chat in 0..TELEGRAM_CHATS {
                    let user = 700 + chat;
                    let name = format!("Deckhand{chat}");
                    let message = tg::text(
                        tg::private_chat(user, &name),
                        tg::user(user, &name),
                        &format!("telegram {chat} m{round}: tide?"),
                    );
                    burst
                        .telegram
                        .push(tg_id(user, self.telegram.push_message(message)));
                }
            }
        }
        for n in 1..CASTS {
            let author = 9_000 + (n as u64 % 20);
            burst.casts.push(self.neynar.mention(
                author,
                &format!("skipper{}", n % 20),
                &format!("@max cast {n}: tide?"),
            ));
        }
    }
}

/// What the dead process was sending: a Telegram reply among these may have reached
/// Telegram without the outbox hearing so. Telegram takes no idempotency key, so such a
/// reply is the one kind that can go out twice (Discord's nonce and Neynar's idem key make
/// a repeat a no-op).
async fn telegram_in_flight(app: &TestApp) -> HashSet<String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    outbox_rows(app.database_url())
        .await
        .into_iter()
        .filter(|(platform, _, state, claimed)| {
            platform == "telegram" && state == "pending" && claimed.is_some_and(|c| c > now_ms)
        })
        .filter_map(|(_, to, _, _)| to)
        .collect()
}

/// Every message answered once; on Telegram, twice only if it was in flight at the kill.
fn assert_answered_once(platforms: &Platforms, burst: &Burst, in_flight: &HashSet<String>) {
    let [d, t, f] = platforms.answered();
    let (lost, doubled) = lost_and_doubled(&burst.discord, &d);
    assert!(
        lost.is_empty() && doubled.is_empty(),
        "Discord: lost {lost:?}, twice {doubled:?}"
    );
    let (lost, doubled) = lost_and_doubled(&burst.casts, &f);
    assert!(
        lost.is_empty() && doubled.is_empty(),
        "Farcaster: lost {lost:?}, twice {doubled:?}"
    );
    let (lost, doubled) = lost_and_doubled(&burst.telegram, &t);
    assert!(lost.is_empty(), "Telegram: lost {lost:?}");
    for (id, n) in &doubled {
        assert!(
            *n == 2 && in_flight.contains(id),
            "Telegram: {id} answered {n} times, and was not being sent at the kill"
        );
    }
    assert_eq!(
        platforms.telegram.sent_messages().len(),
        burst.telegram.len() + doubled.len(),
        "no Telegram reply went to nothing"
    );
    eprintln!(
        "after the restart: {} Telegram replies went out twice (in flight at the kill)",
        doubled.len()
    );
}

#[tokio::test]
async fn a_sigkill_mid_burst_loses_nothing_and_answers_nothing_twice() {
    let platforms = Platforms::start().await;
    let model = FakeOpenAi::start().await;
    let (discord, telegram, neynar) = (&platforms.discord, &platforms.telegram, &platforms.neynar);
    let mut app = TestApp::spawn(
        quiet(TestAppOptions::new(Backend::Sqlite))
            .persona_file("max.json", max(Some(discord), Some(telegram), Some(neynar)))
            .openai(&model),
    )
    .await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }

    let mut burst = Burst::default();
    platforms.warm_up(&mut burst);
    until(&app, "the warm-up is answered", || async {
        discord.sent_messages().len() >= DISCORD_CHANNELS as usize && !neynar.published().is_empty()
    })
    .await;
    platforms.burst(&mut burst);
    let total = burst.discord.len() + burst.telegram.len() + burst.casts.len();
    assert_eq!(total, 500);

    until(&app, "enough replies to kill mid-burst", || async {
        platforms.sent_count() >= KILL_AFTER
    })
    .await;
    app.kill().await;
    let at_kill = platforms.sent_count();
    assert!(at_kill < total, "the kill came after the burst ({at_kill})");
    let in_flight = telegram_in_flight(&app).await;
    eprintln!(
        "killed after {at_kill} of {total} replies; {} Telegram replies in flight",
        in_flight.len()
    );

    app.start_again().await;
    until(&app, "every message of the burst is answered", || async {
        platforms.all_answered(&burst)
    })
    .await;
    // Nothing is left to send: a duplicate would have gone out by now.
    until(&app, "the outbox is delivered", || async {
        outbox_rows(app.database_url())
            .await
            .iter()
            .all(|(_, _, state, _)| state == "delivered")
    })
    .await;
    assert_answered_once(&platforms, &burst, &in_flight);
}

/// `message` posted while the database is down: a clean server error with an error code,
/// and a 503 says when to try again, by the standard header.
async fn assert_refused_cleanly(app: &TestApp, message: &Value) {
    let refused = app
        .client()
        .post(app.url(&format!("/api/agents/{AGENT}/messages")))
        .json(message)
        .send()
        .await
        .expect("the gateway answers while its database is down");
    let status = refused.status();
    let retry_after = refused.headers().get("retry-after").cloned();
    let body: serde_json::Value = refused.json().await.expect("an error body in JSON");
    assert!(
        status.is_server_error() && body["error"].is_string(),
        "a clean refusal, not {status}: {body}"
    );
    if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
        let secs: u64 = retry_after
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or_else(|| panic!("a 503 without retry-after in seconds: {body}"));
        assert!(secs >= 1, "retry-after {secs}");
    }
}

// --- Postgres restarted mid-burst ----------------------------------------------------------

const PG_CHATS: i64 = 30;
const PG_PER_CHAT: usize = 5;

#[tokio::test]
async fn a_postgres_restart_mid_burst_holds_inbound_and_loses_nothing() {
    let test = "a_postgres_restart_mid_burst_holds_inbound_and_loses_nothing";
    let Some(pg) = PrivatePostgres::start_or_skip(test).await else {
        return;
    };
    let database = pg.create_database("troupe_faults").await;
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        quiet(TestAppOptions::new(Backend::Postgres))
            .database_url(&database)
            .persona_file("max.json", max(None, Some(&telegram), None))
            .openai(&model),
    )
    .await;

    let push = |round: usize, ids: &mut Vec<String>| {
        for chat in 0..PG_CHATS {
            let user = 800 + chat;
            let name = format!("Pilot{chat}");
            let message = tg::text(
                tg::private_chat(user, &name),
                tg::user(user, &name),
                &format!("pg {chat} m{round}: tide?"),
            );
            ids.push(tg_id(user, telegram.push_message(message)));
        }
    };
    let mut ids = Vec::new();
    for round in 0..PG_PER_CHAT - 1 {
        push(round, &mut ids);
    }
    until(&app, "a third of the burst is answered", || async {
        telegram.sent_messages().len() >= ids.len() / 3
    })
    .await;

    pg.stop().await;
    // Held or refused cleanly: readiness names the database, and the API answers a clear
    // error instead of hanging or crashing.
    until(&app, "/readyz reports the database down", || async {
        let (status, body) = app.get("/readyz").await;
        status == reqwest::StatusCode::SERVICE_UNAVAILABLE && body["database"]["status"] == "error"
    })
    .await;
    let during = json!({"roomId": "pg-api", "userId": "u1", "messageId": "pg-api-1",
        "text": "posted while the database is down"});
    assert_refused_cleanly(&app, &during).await;
    // Telegram keeps what it could not hand over: these wait, unconfirmed.
    push(PG_PER_CHAT - 1, &mut ids);
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, reqwest::StatusCode::OK, "the process is alive");

    pg.start().await;
    until(&app, "every Telegram message is answered", || async {
        let t = telegram_answers(&telegram);
        lost_and_doubled(&ids, &t).0.is_empty()
    })
    .await;
    // The refused caller posts again, as a client does, and is answered once.
    let (status, body) = app.post_message(AGENT, &during).await;
    assert!(status.is_success(), "{status}: {body}");
    let (status, again) = app.post_message(AGENT, &during).await;
    assert!(status.is_success(), "{status}: {again}");
    assert_eq!(body["replies"], again["replies"], "answered once");

    drained(&app).await;
    let t = telegram_answers(&telegram);
    let (lost, doubled) = lost_and_doubled(&ids, &t);
    assert!(
        lost.is_empty() && doubled.is_empty(),
        "lost {lost:?}, twice {doubled:?}\n----- postgres log -----\n{}",
        pg.log()
    );
    assert_eq!(telegram.sent_messages().len(), ids.len());
}

// --- NATS restarted mid-burst, two replicas -------------------------------------------------

const NATS_ROOMS: usize = 20;
const NATS_PER_ROOM: usize = 10;

/// Posts `body` to the replicas until one answers 2xx: on a connection error or a 5xx the
/// same message id goes again, to the other replica, as a client would. Returns the
/// reply texts.
async fn post_until_answered(
    client: &reqwest::Client,
    urls: &[String; 2],
    first: usize,
    body: &Value,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut target = first;
    loop {
        if let Some(replies) = try_post_message(client, &urls[target], body).await {
            return replies;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no replica answered {body}"
        );
        target = 1 - target;
        // A client's pause before it tries again; the deadline above bounds the loop.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Exactly one reply per message of the NATS burst, read where replies land.
async fn assert_one_reply_per_message(app: &TestApp) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(app.database_url())
        .await
        .expect("connect to the test database");
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT j.platform_message_id, j.state, COUNT(o.id)
         FROM journal j LEFT JOIN outbox o ON o.journal_id = j.id
         WHERE j.platform_message_id LIKE 'nats-%'
         GROUP BY j.id, j.platform_message_id, j.state",
    )
    .fetch_all(&mut conn)
    .await
    .expect("read the journal and the outbox");
    let _ = conn.close().await;
    assert_eq!(rows.len(), NATS_ROOMS * NATS_PER_ROOM, "journaled messages");
    for (id, state, replies) in &rows {
        assert_eq!(state, "done", "{id}");
        assert_eq!(*replies, 1, "{id} has {replies} replies");
    }
}

/// Two replicas of the gateway on Postgres and the private NATS server.
async fn two_replicas_on(nats: &PrivateNats, model: &FakeOpenAi) -> (TestApp, TestApp) {
    let options = quiet(TestAppOptions::new(Backend::Postgres))
        .persona(AGENT, BIO)
        .openai(model)
        .env("TROUPE_BUS_URL", &nats.url())
        .env("TROUPE_BUS_PARTITIONS", "8")
        .env("TROUPE_BUS_ACK_WAIT_SECS", "2")
        // A lost outcome costs a caller this plus 30 s before it posts again.
        .env("TROUPE_MODEL_TIMEOUT_SECS", "5");
    let a = TestApp::spawn(options).await;
    let b = TestApp::spawn(a.replica_options()).await;
    (a, b)
}

#[tokio::test]
async fn a_nats_restart_mid_burst_with_two_replicas_loses_nothing() {
    let test = "a_nats_restart_mid_burst_with_two_replicas_loses_nothing";
    if Backend::Postgres.or_skip(test).is_none() {
        return;
    }
    let Some(mut nats) = PrivateNats::start_or_skip(test).await else {
        return;
    };
    let model = FakeOpenAi::start().await;
    let (a, b) = two_replicas_on(&nats, &model).await;
    let urls = [
        a.url(&format!("/api/agents/{AGENT}/messages")),
        b.url(&format!("/api/agents/{AGENT}/messages")),
    ];

    let answered = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for room in 0..NATS_ROOMS {
        let (urls, client, answered) = (urls.clone(), a.client().clone(), answered.clone());
        tasks.spawn(async move {
            for n in 0..NATS_PER_ROOM {
                let body = json!({
                    "roomId": format!("room-{room}"),
                    "userId": format!("user-{room}"),
                    "messageId": format!("nats-r{room}-m{n:02}"),
                    "text": format!("nats room {room} message {n}"),
                });
                let replies = post_until_answered(&client, &urls, (room + n) % 2, &body).await;
                assert_eq!(replies.len(), 1, "{body}: {replies:?}");
                answered.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    until(&a, "a quarter of the burst is answered", || async {
        answered.load(Ordering::SeqCst) >= NATS_ROOMS * NATS_PER_ROOM / 4
    })
    .await;
    nats.stop().await;
    until(&a, "/readyz reports the bus down", || async {
        let (_, body) = a.get("/readyz").await;
        body["bus"]["status"] == "error"
    })
    .await;
    let at_restart = answered.load(Ordering::SeqCst);
    nats.start().await;
    let all = tokio::time::timeout(WAIT, async {
        while let Some(done) = tasks.join_next().await {
            done.expect("a conversation failed");
        }
    })
    .await;
    assert!(
        all.is_ok(),
        "the burst did not finish after NATS came back ({} answered)\n----- a -----\n{}\n----- b -----\n{}\n----- nats -----\n{}",
        answered.load(Ordering::SeqCst),
        a.logs(),
        b.logs(),
        nats.log()
    );
    assert!(
        at_restart < NATS_ROOMS * NATS_PER_ROOM,
        "NATS restarted after the burst"
    );

    assert_one_reply_per_message(&a).await;
    let calls = model.requests().iter().filter(|r| r.is_reply()).count();
    assert!(
        calls >= NATS_ROOMS * NATS_PER_ROOM,
        "every message reached the model ({calls})"
    );
    eprintln!(
        "NATS restarted after {at_restart} answers; {calls} model calls for {} messages",
        NATS_ROOMS * NATS_PER_ROOM
    );
}

// --- the provider fails, then comes back -----------------------------------------------------

const OUTAGE_CHATS: i64 = 10;
const OUTAGE_PER_CHAT: usize = 3;
const RETRIES: usize = 2;

/// Every message of `ids` answered once, and every room told once that the model was
/// unreachable.
fn assert_one_reply_and_one_notice_each(telegram: &FakeTelegram, ids: &[String]) {
    let sent = telegram.sent_messages();
    let replies = count_by(
        sent.iter()
            .filter(|m| m.text != MODEL_DOWN)
            .map(|m| m.reply_to_message_id().map(|r| tg_id(m.chat_id, r))),
    );
    let (lost, doubled) = lost_and_doubled(ids, &replies);
    assert!(
        lost.is_empty() && doubled.is_empty(),
        "lost {lost:?}, twice {doubled:?}"
    );
    let mut per_room: HashMap<i64, usize> = HashMap::new();
    for n in sent.iter().filter(|m| m.text == MODEL_DOWN) {
        *per_room.entry(n.chat_id).or_default() += 1;
    }
    assert_eq!(per_room.len(), OUTAGE_CHATS as usize, "{per_room:?}");
    assert!(
        per_room.values().all(|n| *n == 1),
        "at most one notice per room: {per_room:?}"
    );
}

/// Max on Telegram, with a short model deadline, two retries and a breaker that opens
/// after three failures.
async fn spawn_behind_a_breaker(telegram: &FakeTelegram, model: &FakeOpenAi) -> TestApp {
    TestApp::spawn(
        quiet(TestAppOptions::new(Backend::Sqlite))
            .persona_file("max.json", max(None, Some(telegram), None))
            .openai(model)
            .env("TROUPE_MODEL_TIMEOUT_SECS", "1")
            .env("TROUPE_PROVIDER_RETRIES", &RETRIES.to_string())
            .env("TROUPE_PROVIDER_BACKOFF_MS", "50")
            .env("TROUPE_PROVIDER_BACKOFF_MAX_MS", "200")
            .env("TROUPE_PROVIDER_BREAKER_FAILURES", "3")
            .env("TROUPE_PROVIDER_BREAKER_COOLDOWN_MS", "400"),
    )
    .await
}

#[tokio::test]
async fn a_provider_outage_waits_behind_the_breaker_and_answers_everything() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let app = spawn_behind_a_breaker(&telegram, &model).await;
    let say = |chat: i64, n: usize| {
        let user = 900 + chat;
        let name = format!("Bosun{chat}");
        let message = tg::text(
            tg::private_chat(user, &name),
            tg::user(user, &name),
            &format!("outage {chat} m{n}: tide?"),
        );
        tg_id(user, telegram.push_message(message))
    };
    // The model works.
    let mut ids = vec![say(0, 0)];
    until(&app, "the first message is answered", || async {
        telegram.sent_messages().len() == 1
    })
    .await;

    // The model goes down: two calls stall past the deadline, then every call gets a 500.
    model.push(Script::Hang);
    model.push(Script::Hang);
    model.set_fallback(Some(Script::server_error()));
    let before = model.request_count();
    // Every room asks; the first room's last message was its first.
    for n in 1..=OUTAGE_PER_CHAT {
        let chats = (0..OUTAGE_CHATS).filter(|chat| *chat != 0 || n != OUTAGE_PER_CHAT);
        ids.extend(chats.map(|chat| say(chat, n)));
    }
    let notices = || {
        telegram
            .sent_messages()
            .into_iter()
            .filter(|m| m.text == MODEL_DOWN)
            .collect::<Vec<_>>()
    };
    until(
        &app,
        "every room is told the model is unreachable",
        || async { notices().len() >= OUTAGE_CHATS as usize },
    )
    .await;
    // The circuit is open: the model is probed, not hammered. Two more probes fail.
    let wave = model.request_count() - before;
    let probes_from = model.request_count();
    until(&app, "two probes after the cool-down", || async {
        model.request_count() >= probes_from + 2
    })
    .await;
    let failed = model.request_count() - before;
    model.set_fallback(None);

    until(
        &app,
        "every message is answered once the model is back",
        || async {
            telegram
                .sent_messages()
                .iter()
                .filter(|m| m.text != MODEL_DOWN)
                .count()
                >= ids.len()
        },
    )
    .await;
    drained(&app).await;
    assert_one_reply_and_one_notice_each(&telegram, &ids);
    // Bounded retries: before the circuit opened, no room's call tried more than its
    // retries allow, and once open the calls waited instead of asking (without the breaker,
    // each of the messages would have made its own attempts).
    let rooms = OUTAGE_CHATS as usize;
    assert!(
        wave <= rooms * (RETRIES + 1),
        "{wave} calls before every room was told"
    );
    let total = model.request_count() - before;
    // The answers, the failures counted at the recovery, and a probe that may have been in
    // flight then.
    assert!(
        total <= ids.len() - 1 + failed + 1,
        "{total} model calls for {} messages ({failed} failed)",
        ids.len() - 1
    );
    eprintln!(
        "outage: {wave} calls before the notices, {failed} failed calls in all, {total} calls"
    );
}
