//! End-to-end tests of spend control (docs/spend.md), through the real binary and the fake
//! model returning usage: budgets stop model calls exactly at the cap with one notice per
//! window and reset the next day; the usage API adds up to what the fake reported; two
//! personas on one key share its requests per minute; after a 429 with `retry-after` no
//! persona on that key calls before it.
//!
//! "The next day" is a restart on the same database with `TROUPE_TEST_CLOCK_OFFSET_SECS`
//! (test-only: it shifts the clock budgets and rollups use), never a wait.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::{
    Backend, FakeOpenAi, Script, TestApp, TestAppOptions, WAIT, eventually, persona_json,
};

const BIO: &str = "Ada keeps the lighthouse and answers every boat.";

troupe_e2e::on_each_backend!(
    budgets_stop_calls_at_the_cap_notice_once_and_reset_the_next_day,
    usage_through_the_api_and_the_cli_adds_up_to_the_fakes_usage,
    two_personas_on_one_key_share_its_requests_per_minute,
    embedding_calls_are_accounted_for_the_persona,
    after_a_429_no_persona_on_the_key_calls_before_retry_after,
    a_graceful_stop_writes_every_usage_record,
);

/// Limits that would get in the way of counting calls are lifted, and memory upkeep is off
/// unless a test turns it on.
fn options(backend: Backend, fake: &FakeOpenAi) -> TestAppOptions {
    TestAppOptions::new(backend)
        .openai(fake)
        .env("TROUPE_RATE_API_PER_MIN", "0")
        .env("TROUPE_RATE_USER_PER_MIN", "0")
        .env("TROUPE_RATE_ROOM_PER_MIN", "0")
        .env("TROUPE_RATE_AGENT_PER_MIN", "0")
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0")
}

fn persona_with_spend(name: &str, spend: Value) -> Value {
    let mut p = persona_json(name, BIO);
    p["settings"]["spend"] = spend;
    p
}

/// Posts as `user` in `room`; the reply's text (`None` when the message was not answered).
async fn say(app: &TestApp, agent: &str, room: &str, user: &str, text: &str) -> Option<String> {
    let (status, body) = app
        .post_message(
            agent,
            &json!({"roomId": room, "userId": user, "userName": user, "text": text}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["replies"][0]["text"].as_str().map(str::to_string)
}

/// What `troupe usage --agent ada ARGS` prints, run on the app's database (the gateway may
/// be stopped); panics with its stderr when it fails.
async fn troupe_usage(app: &TestApp, args: &[&str]) -> String {
    let out = tokio::process::Command::new(troupe_e2e::troupe_bin())
        .args(["usage", "--agent", "ada"])
        .args(args)
        .env("TROUPE_DATABASE_URL", app.database_url())
        .env("TROUPE_LOG", "warn")
        .output()
        .await
        .expect("run troupe usage");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

const USER_NOTICE: &str = "You have talked with me enough for today.";
const ROOM_NOTICE: &str = "This room has had its fill of me today.";

async fn budgets_stop_calls_at_the_cap_notice_once_and_reset_the_next_day(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    // Every call uses exactly 100 tokens.
    fake.set_usage(80, 20);
    let persona = persona_with_spend(
        "Ada",
        json!({
            "userPerDay": "300 tokens",
            "roomPerDay": "500 tokens",
            "notices": {"userDay": USER_NOTICE, "roomDay": ROOM_NOTICE}
        }),
    );
    let mut app = TestApp::spawn(options(backend, &fake).persona_file("ada.json", persona)).await;

    // Sam: 0, 100 and 200 tokens used are under 300; the fourth message finds 300.
    for i in 1..=3 {
        let reply = say(&app, "Ada", "r1", "sam", &format!("question {i}")).await;
        assert!(reply.is_some_and(|r| r.starts_with("Reply #")), "call {i}");
    }
    assert_eq!(fake.request_count(), 3);
    assert_eq!(
        say(&app, "Ada", "r1", "sam", "one more").await.as_deref(),
        Some(USER_NOTICE),
        "the first message past the cap gets the notice"
    );
    assert_eq!(say(&app, "Ada", "r1", "sam", "and another").await, None);
    // Sam's budget follows Sam into another room, without a second notice.
    assert_eq!(say(&app, "Ada", "r2", "sam", "hello?").await, None);
    assert_eq!(fake.request_count(), 3, "no model call past the user's cap");

    // Kim in the same room: the room has 200 tokens left, two calls.
    for i in 1..=2 {
        let reply = say(&app, "Ada", "r1", "kim", &format!("kim {i}")).await;
        assert!(
            reply.is_some_and(|r| r.starts_with("Reply #")),
            "kim's call {i}"
        );
    }
    assert_eq!(
        say(&app, "Ada", "r1", "kim", "kim 3").await.as_deref(),
        Some(ROOM_NOTICE)
    );
    // Lee has a budget of their own, but the room is spent, and it was told already.
    assert_eq!(say(&app, "Ada", "r1", "lee", "hi").await, None);
    assert_eq!(fake.request_count(), 5, "no model call past the room's cap");
    // Another room is not limited by r1's budget.
    assert!(say(&app, "Ada", "r3", "lee", "hi").await.is_some());
    assert_eq!(fake.request_count(), 6);

    // What /usage and the console show: nothing left for Sam, nor for room r1.
    let (status, body) = app.get("/api/agents/Ada/usage?roomId=r1&userId=sam").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["today"]["user"]["usedTokens"], 300, "{body}");
    assert_eq!(body["today"]["user"]["tokensLeft"], 0, "{body}");
    assert_eq!(body["today"]["room"]["usedTokens"], 500, "{body}");
    assert_eq!(body["today"]["room"]["tokensLeft"], 0, "{body}");
    assert_eq!(
        body["today"]["personaDay"]["tokensLeft"],
        Value::Null,
        "{body}"
    );
    // The persona's own standing (the console's cards): every call of the day, no cap.
    assert_eq!(
        body["persona"]["day"]["usedTokens"], body["today"]["personaDay"]["usedTokens"],
        "{body}"
    );
    assert_eq!(body["persona"]["day"]["tokensLeft"], Value::Null, "{body}");

    // The next day (UTC): the same database, the clock a day on.
    app.stop().await;
    let mut tomorrow = TestApp::spawn(
        app.replica_options()
            .env("TROUPE_TEST_CLOCK_OFFSET_SECS", "86400"),
    )
    .await;
    let reply = say(&tomorrow, "Ada", "r1", "sam", "good morning").await;
    assert!(
        reply.is_some_and(|r| r.starts_with("Reply #")),
        "a new day, a new budget"
    );
    assert_eq!(fake.request_count(), 7);
    tomorrow.stop().await;
}

/// A usage rollup's total of `field`.
fn total(body: &Value, field: &str) -> u64 {
    body["total"][field].as_u64().unwrap_or(0)
}

/// The day's totals are the fake's: its tokens, and their cost at gpt-4o-mini's default
/// price.
async fn the_days_usage_is_the_fakes(app: &TestApp, fake: &FakeOpenAi) {
    let (_, by_day) = app.get("/api/agents/Ada/usage?by=day").await;
    let log = fake.usage_log();
    let prompt: u64 = log.iter().map(|u| u.1).sum();
    let completion: u64 = log.iter().map(|u| u.2).sum();
    assert_eq!(total(&by_day, "promptTokens"), prompt, "{by_day}");
    assert_eq!(total(&by_day, "completionTokens"), completion, "{by_day}");
    // gpt-4o-mini's default price: $0.15 and $0.60 per million tokens, rounded per call to
    // whole micro-dollars.
    let cost: u64 = log
        .iter()
        .map(|(_, p, c)| (*p as f64 * 0.15 + *c as f64 * 0.60).round() as u64)
        .sum();
    assert_eq!(total(&by_day, "costMicros"), cost, "{by_day}");
}

/// Per room and per user: replies belong to both; the facts calls to neither.
/// Returns how many calls were replies.
async fn replies_are_counted_per_room_and_per_user(app: &TestApp, fake: &FakeOpenAi) -> usize {
    let log = fake.usage_log();
    let requests = fake.requests();
    let replies: Vec<&(usize, u64, u64)> = log
        .iter()
        .filter(|(index, _, _)| requests[index - 1].is_reply())
        .collect();
    let reply_tokens: u64 = replies.iter().map(|u| u.1 + u.2).sum();
    let (status, by_room) = app
        .get("/api/agents/Ada/usage?by=room&since=2000-01-01")
        .await;
    assert_eq!(status, StatusCode::OK, "{by_room}");
    assert_eq!(total(&by_room, "tokens"), reply_tokens, "{by_room}");
    let rooms: Vec<&str> = by_room["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect();
    assert_eq!(rooms.len(), 2, "{by_room}");
    assert!(
        rooms.contains(&"web:r1") && rooms.contains(&"web:r2"),
        "{by_room}"
    );
    let (_, by_user) = app.get("/api/agents/Ada/usage?by=user").await;
    assert_eq!(total(&by_user, "tokens"), reply_tokens, "{by_user}");
    assert_eq!(
        by_user["rows"].as_array().map(Vec::len),
        Some(3),
        "{by_user}"
    );
    replies.len()
}

async fn usage_through_the_api_and_the_cli_adds_up_to_the_fakes_usage(backend: Backend) {
    // The fake's default usage counts words, so every call differs.
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        options(backend, &fake)
            .persona("Ada", BIO)
            // Facts every second message of a user: background calls are accounted too.
            .env("TROUPE_MEMORY_FACTS_EVERY", "2"),
    )
    .await;
    let posts = [
        ("r1", "sam", "Is the lighthouse open today?"),
        ("r1", "kim", "What time does the boat leave?"),
        ("r2", "sam", "I like the green boat best of all the boats"),
        ("r1", "sam", "Thanks, see you tomorrow at noon"),
        ("r2", "lee", "Hello there"),
    ];
    for (room, user, text) in posts {
        assert!(say(&app, "Ada", room, user, text).await.is_some());
    }
    // The facts call runs after its reply; wait until everything the fake answered is in.
    eventually("the usage API to account every call", WAIT, || async {
        let (status, body) = app.get("/api/agents/Ada/usage?by=day").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let log = fake.usage_log();
        total(&body, "calls") == log.len() as u64 && log.len() > posts.len()
    })
    .await;
    the_days_usage_is_the_fakes(&app, &fake).await;
    let replies = replies_are_counted_per_room_and_per_user(&app, &fake).await;

    // Bad parameters get the API's error shape.
    let (status, body) = app.get("/api/agents/Ada/usage?by=week").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "bad_request", "{body}");
    let (status, body) = app.get("/api/agents/Ada/usage?since=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["detail"].as_str().unwrap().contains("since"), "{body}");
    let (status, _) = app.get("/api/agents/Nobody/usage").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // /metrics counts per persona, provider and purpose.
    let (status, metrics) = app.get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.starts_with("troupe_usage_tokens_total")
                && l.contains("persona=\"ada\"")
                && l.contains("purpose=\"facts\"")),
        "{text}"
    );

    // `troupe usage` reads the same rollups.
    let table = troupe_usage(&app, &["--by", "room"]).await;
    let total_line = table
        .lines()
        .find(|l| l.starts_with("total"))
        .unwrap_or_else(|| panic!("no total line in\n{table}"));
    assert!(
        total_line
            .split_whitespace()
            .any(|w| w == replies.to_string()),
        "{table}"
    );
    assert!(table.contains("web:r1"), "{table}");
}

/// Issue 30, finding 9: usage records wait in the ledger's queue (without a budget nobody
/// waits for them to be written), and a SIGTERM, what every deploy sends, used to end the
/// process with them still queued. Three replies, a graceful stop at once, then the
/// database read by `troupe usage --json` with the gateway gone: all three are there.
async fn a_graceful_stop_writes_every_usage_record(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let mut app = TestApp::spawn(options(backend, &fake).persona("Ada", BIO)).await;
    for text in [
        "Is the lighthouse open today?",
        "What time does the boat leave?",
        "Thanks, see you tomorrow",
    ] {
        assert!(say(&app, "Ada", "r1", "sam", text).await.is_some());
    }
    let status = app.stop().await;
    assert!(status.success(), "troupe exited with {status} on SIGTERM");

    let text = troupe_usage(&app, &["--by", "day", "--json"]).await;
    let report: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("`troupe usage --json` printed no JSON ({e}): {text}"));
    let log = fake.usage_log();
    assert_eq!(log.len(), 3, "the fake answered three calls");
    let total = |field: &str| report["total"][field].as_u64().unwrap_or(0);
    assert_eq!(
        total("calls"),
        3,
        "records lost at the stop: {report}\n----- troupe output -----\n{}",
        app.logs()
    );
    assert_eq!(
        total("promptTokens"),
        log.iter().map(|u| u.1).sum::<u64>(),
        "{report}"
    );
    assert_eq!(
        total("completionTokens"),
        log.iter().map(|u| u.2).sum::<u64>(),
        "{report}"
    );
}

async fn two_personas_on_one_key_share_its_requests_per_minute(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    // 120 a minute: one call every 500 ms, whichever persona makes it.
    let app = TestApp::spawn(
        options(backend, &fake)
            .persona("Ada", BIO)
            .persona("Bo", "Bo fishes off the pier.")
            .env("TROUPE_PROVIDER_RPM", "120"),
    )
    .await;
    let mut posts = Vec::new();
    for i in 0..3 {
        for agent in ["Ada", "Bo"] {
            let app = &app;
            posts.push(
                async move { say(app, agent, &format!("room-{agent}-{i}"), "sam", "hi").await },
            );
        }
    }
    let replies = futures::future::join_all(posts).await;
    assert!(replies.iter().all(Option::is_some));
    let mut arrived: Vec<_> = fake.requests().iter().map(|r| r.received_at).collect();
    assert_eq!(arrived.len(), 6);
    arrived.sort();
    // Any k calls in a row span at least (k - 1) periods, less the network's jitter: the
    // two personas together never go faster than the key's limit.
    let period = Duration::from_millis(500);
    let jitter = Duration::from_millis(100);
    for i in 0..arrived.len() {
        for j in i + 1..arrived.len() {
            let span = arrived[j] - arrived[i];
            assert!(
                span + jitter >= period * (j - i) as u32,
                "calls {i} and {j} came {span:?} apart"
            );
        }
    }
}

async fn after_a_429_no_persona_on_the_key_calls_before_retry_after(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    fake.push(Script::RetryAfter(2));
    let app = TestApp::spawn(
        options(backend, &fake)
            .persona("Ada", BIO)
            .persona("Bo", "Bo fishes off the pier."),
    )
    .await;
    // Ada's caller waits on the line, so Ada's message fails with the 429 (the HTTP API does
    // not wait out a provider: docs/api.md); it stays journaled.
    let (status, body) = app
        .post_message(
            "Ada",
            &json!({"roomId": "r1", "userId": "sam", "text": "hello"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["error"], "model_rate_limited", "{body}");
    // Bo's message comes once Ada's answer says the 429 was met, so the key's back-off is
    // in force (sent when the fake had only *received* Ada's call, Bo's could reach the
    // scheduler before Ada's side had read the 429, and on a loaded machine it did).
    let bo = say(&app, "Bo", "r2", "kim", "hello").await;
    assert!(bo.is_some(), "Bo is answered once the key may call again");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the 429, then Bo's call");
    let limited_at = requests[0].received_at;
    for r in &requests[1..] {
        assert!(
            r.received_at - limited_at >= Duration::from_secs(2),
            "request {} came {:?} after the 429",
            r.index,
            r.received_at - limited_at
        );
    }
}

async fn embedding_calls_are_accounted_for_the_persona(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    // With an embedding model, the character's knowledge is embedded at start, and each reply
    // embeds its query once there is knowledge to search (a persona with none embeds nothing).
    let mut character = persona_json("Ada", BIO);
    character["knowledge"] = json!(["The lighthouse opens to visitors on Saturdays at noon."]);
    let app = TestApp::spawn(
        options(backend, &fake)
            .persona_file("ada.json", character)
            .env("TROUPE_EMBEDDING_MODEL", "text-embedding-3-small"),
    )
    .await;
    eventually("the character's knowledge to be stored", WAIT, || async {
        let (_, docs) = app.get("/api/agents/Ada/documents").await;
        docs["documents"].as_array().is_some_and(|d| !d.is_empty())
    })
    .await;
    for text in ["Is the lighthouse open?", "When is the next boat?"] {
        assert!(say(&app, "Ada", "r1", "sam", text).await.is_some());
    }
    let total = |body: &Value, field: &str| body["total"][field].as_u64().unwrap_or(0);
    eventually("the usage API to account the embeddings", WAIT, || async {
        let (_, body) = app.get("/api/agents/Ada/usage?by=day").await;
        total(&body, "calls") == (fake.usage_log().len() + fake.embedding_requests().len()) as u64
    })
    .await;
    let embeddings = fake.embedding_requests();
    assert!(!embeddings.is_empty());
    // The fake counts an input's words as its tokens.
    let embedded: u64 = embeddings
        .iter()
        .flat_map(|r| &r.inputs)
        .map(|t| t.split_whitespace().count() as u64)
        .sum();
    let chat: u64 = fake.usage_log().iter().map(|u| u.1).sum();
    let (_, by_day) = app.get("/api/agents/Ada/usage?by=day").await;
    assert_eq!(total(&by_day, "promptTokens"), chat + embedded, "{by_day}");
    let (_, metrics) = app.get("/metrics").await;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.starts_with("troupe_usage_tokens_total")
                && l.contains("purpose=\"embedding\"")
                && l.contains("kind=\"prompt\"")),
        "{text}"
    );
}
