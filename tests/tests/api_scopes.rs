//! API callers (issue 30, finding 7), through the real binary: the HTTP API cannot spend
//! the chat platforms' share of a persona's budget; a scoped token reaches its persona and
//! its own rooms and nothing else (and with `readOnly` no write); `X-Forwarded-For` is
//! believed only from `TROUPE_TRUSTED_PROXIES`, and a scoped token is counted per token.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, json_contains_text};

const BIO: &str = "Tess keeps the harbour's tide tables and answers every boat.";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);
const OPERATOR: &str = "operator-token-0123456789";
const SHOP: &str = "shop-token-0123456789abcdef";
const BLOG: &str = "blog-token-0123456789abcdef";
const READER: &str = "reader-token-0123456789abcd";

troupe_e2e::on_each_backend!(the_api_cannot_spend_the_chat_platforms_share_of_the_budget);

/// Tess on Telegram, with a daily budget of 400 tokens; every model call uses 100. The
/// API's share (`TROUPE_SPEND_API_SHARE`, 0.5 by default) is two calls, whatever rooms and
/// users the caller picks; then it gets 429, and a Telegram user is still answered by the
/// model, not with "I've reached my limit".
async fn the_api_cannot_spend_the_chat_platforms_share_of_the_budget(backend: Backend) {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.set_usage(80, 20);
    let mut character = telegram.persona("Tess", BIO);
    character["settings"]["spend"] = json!({"personaPerDay": "400 tokens"});
    let app = TestApp::spawn(
        TestAppOptions::new(backend)
            .persona_file("tess.json", character)
            .openai(&model)
            .env("TROUPE_RATE_API_PER_MIN", "0")
            .env("TROUPE_RATE_USER_PER_MIN", "0")
            .env("TROUPE_RATE_ROOM_PER_MIN", "0")
            .env("TROUPE_RATE_AGENT_PER_MIN", "0")
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;

    // A caller rotating rooms and users, as if it were many people.
    let mut statuses = Vec::new();
    for i in 0..5 {
        let (status, body) = app
            .post_message(
                "tess",
                &json!({"roomId": format!("r{i}"), "userId": format!("u{i}"), "text": "tide?"}),
            )
            .await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(body["error"], "budget_exhausted", "{body}");
            let detail = body["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("TROUPE_SPEND_API_SHARE"), "{body}");
        } else {
            assert_eq!(status, StatusCode::OK, "message {i}: {body}");
            let reply = body["replies"][0]["text"].as_str().unwrap_or_default();
            assert!(reply.starts_with("Reply #"), "message {i}: {body}");
        }
        statuses.push(status.as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429],
        "the API's share is two calls"
    );
    assert_eq!(
        model.request_count(),
        2,
        "no model call past the API's share"
    );

    // A Telegram user is answered by the model: the platforms kept their half.
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "Is the ferry running?",
    ));
    let sent = telegram
        .try_wait_for_sent(1, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n----- troupe output -----\n{}", app.logs()));
    assert!(
        sent[0].text.starts_with("Reply #"),
        "the Telegram user got {:?}, not the model's answer",
        sent[0].text
    );
    assert_eq!(model.request_count(), 3);
}

/// A tokens file in its own directory (kept for the app's life).
fn tokens_file(tokens: Value) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    std::fs::write(&path, tokens.to_string()).unwrap();
    (dir, path)
}

/// Two personas, the operator's token and three scoped tokens: `shop` and `blog` (two
/// websites talking to Ada), and `reader` (Ada's reads only).
async fn spawn_with_tokens(
    model: &FakeOpenAi,
    env: &[(&str, &str)],
) -> (TestApp, tempfile::TempDir) {
    let (dir, path) = tokens_file(json!([
        {"name": "shop", "token": SHOP, "personas": ["ada"]},
        {"name": "blog", "token": BLOG, "personas": ["Ada"]},
        {"name": "reader", "token": READER, "personas": ["ada"], "readOnly": true},
    ]));
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona("Ada", BIO)
        .persona("Bob", BIO)
        .openai(model)
        .api_token(OPERATOR)
        .env("TROUPE_API_TOKENS_FILE", &path.display().to_string())
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0");
    for (k, v) in env {
        options = options.env(k, v);
    }
    (TestApp::spawn(options).await, dir)
}

/// `POST /api/agents/{agent}/messages` in `room` as the user `kim`, with `token`.
async fn say(
    app: &TestApp,
    token: &str,
    agent: &str,
    room: &str,
    text: &str,
) -> (StatusCode, Value) {
    app.post_json(
        &format!("/api/agents/{agent}/messages"),
        &json!({"roomId": room, "userId": "kim", "text": text}),
        Some(token),
    )
    .await
}

fn assert_forbidden(what: &str, (status, body): (StatusCode, Value)) {
    assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {body}");
    assert_eq!(body["error"], "forbidden", "{what}: {body}");
    assert!(body["detail"].is_string(), "{what}: {body}");
}

/// The shop's token reaches Ada, by id or by name, and its own room, which the operator
/// sees as `shop:r1` and no other caller reads.
async fn reaches_its_persona_and_its_own_room(app: &TestApp) {
    let (status, body) = app.get_as("/api/agents/ada", Some(SHOP)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = say(
        app,
        SHOP,
        "Ada",
        "r1",
        "The shop's secret word is marigold.",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["roomId"], "r1",
        "the room as the website named it: {body}"
    );
    // Its room is its own: the operator sees it as `shop:r1`.
    let shop_room = "/api/agents/ada/rooms/shop:r1/memories";
    eventually("the shop's message is in web:shop:r1", WAIT, || async {
        let (status, body) = app.get_as(shop_room, Some(OPERATOR)).await;
        status == StatusCode::OK && json_contains_text(&body, "marigold")
    })
    .await;
    let (status, body) = app
        .get_as("/api/agents/ada/rooms/r1/memories", Some(SHOP))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(json_contains_text(&body, "marigold"), "{body}");
    // Another website with a room of the same name sees nothing of it, nor does the
    // operator's own `r1`.
    for token in [BLOG, OPERATOR] {
        let (status, body) = app
            .get_as("/api/agents/ada/rooms/r1/memories", Some(token))
            .await;
        assert!(
            status != StatusCode::OK || !json_contains_text(&body, "marigold"),
            "another caller read the shop's room: {body}"
        );
    }
    assert_forbidden(
        "a platform's room",
        app.get_as("/api/agents/ada/rooms/telegram:5/memories", Some(SHOP))
            .await,
    );
}

/// Other personas (unknown ones not told apart from them) and the operator's routes are
/// forbidden to the shop's token.
async fn reaches_nothing_else(app: &TestApp) {
    assert_forbidden(
        "another persona",
        app.get_as("/api/agents/bob", Some(SHOP)).await,
    );
    assert_forbidden(
        "an unknown persona",
        app.get_as("/api/agents/nobody", Some(SHOP)).await,
    );
    let (_, body) = app.get_as("/api/agents/nobody", Some(SHOP)).await;
    assert!(
        !json_contains_text(&body, "bob"),
        "personas were listed: {body}"
    );
    assert_forbidden(
        "posting to another persona",
        say(app, SHOP, "bob", "r1", "hello").await,
    );
    for path in [
        "/api/agents",
        "/metrics",
        "/api/characters",
        "/api/agents/ada/rooms",
        "/api/agents/ada/usage",
        "/api/agents/ada/documents",
        "/api/agents/ada/knowledge/search?q=tide",
        "/api/agents/ada/setup",
    ] {
        assert_forbidden(path, app.get_as(path, Some(SHOP)).await);
    }
    let put = app
        .client()
        .put(app.url("/api/characters/ada.json"))
        .bearer_auth(SHOP)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::FORBIDDEN, "the character editor");
    assert_forbidden(
        "a room command",
        app.post_json(
            "/api/agents/ada/rooms/r1/commands",
            &json!({"command": "/forget"}),
            Some(SHOP),
        )
        .await,
    );
}

#[tokio::test]
async fn a_scoped_token_reaches_its_persona_and_its_own_rooms_only() {
    let model = FakeOpenAi::start().await;
    let (app, _tokens) = spawn_with_tokens(&model, &[]).await;
    reaches_its_persona_and_its_own_room(&app).await;
    reaches_nothing_else(&app).await;

    // Read-only: reads, but no message.
    let (status, body) = app.get_as("/api/agents/ada", Some(READER)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_forbidden(
        "a read-only token posting",
        say(&app, READER, "ada", "r1", "hi").await,
    );
    assert_eq!(
        model.request_count(),
        1,
        "only the shop's message reached the model"
    );

    // A token that is no one's is still 401; the operator still reaches everything.
    let (status, _) = app.get_as("/api/agents/ada", Some("not-a-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = app.get_as("/metrics", Some(OPERATOR)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // No token reached the log.
    let logs = app.logs();
    for secret in [OPERATOR, SHOP, BLOG, READER] {
        assert!(!logs.contains(secret), "a token is in the log");
    }
}

/// `POST /messages` from `forwarded_for` (as `X-Forwarded-For`), with `token`; the status.
async fn post_from(app: &TestApp, forwarded_for: &str, token: &str) -> (StatusCode, Value) {
    let response = app
        .client()
        .post(app.url("/api/agents/ada/messages"))
        .bearer_auth(token)
        .header("x-forwarded-for", forwarded_for)
        .json(&json!({"roomId": "r1", "text": "hello"}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn forwarded_for_is_ignored_from_an_untrusted_peer() {
    let model = FakeOpenAi::start().await;
    let (app, _tokens) = spawn_with_tokens(&model, &[("TROUPE_RATE_API_PER_MIN", "2")]).await;
    // The test connects from 127.0.0.1, which is no trusted proxy here: whatever address it
    // writes, all its requests are 127.0.0.1's.
    assert_eq!(
        post_from(&app, "198.51.100.1", OPERATOR).await.0,
        StatusCode::OK
    );
    assert_eq!(
        post_from(&app, "198.51.100.2", OPERATOR).await.0,
        StatusCode::OK
    );
    let (status, body) = post_from(&app, "198.51.100.3", OPERATOR).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(json_contains_text(&body, "this address"), "{body}");
}

#[tokio::test]
async fn behind_a_trusted_proxy_callers_and_tokens_get_their_own_buckets() {
    let model = FakeOpenAi::start().await;
    let (app, _tokens) = spawn_with_tokens(
        &model,
        &[
            ("TROUPE_RATE_API_PER_MIN", "2"),
            ("TROUPE_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8"),
        ],
    )
    .await;
    // Two callers behind the proxy (127.0.0.1), each with its own budget of two.
    for caller in ["198.51.100.1", "198.51.100.2"] {
        for i in 0..2 {
            let (status, body) = post_from(&app, caller, OPERATOR).await;
            assert_eq!(status, StatusCode::OK, "{caller}, request {i}: {body}");
        }
    }
    let (status, body) = post_from(&app, "198.51.100.1", OPERATOR).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    // A caller cannot choose another bucket by writing addresses to the left of its own,
    // and a chain through another trusted proxy still names it.
    let (status, body) = post_from(&app, "203.0.113.50, 198.51.100.1", OPERATOR).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (status, body) = post_from(&app, "198.51.100.2, 10.1.1.1", OPERATOR).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");

    // A scoped token is counted per token, from whatever address.
    assert_eq!(post_from(&app, "192.0.2.1", SHOP).await.0, StatusCode::OK);
    assert_eq!(post_from(&app, "192.0.2.2", SHOP).await.0, StatusCode::OK);
    let (status, body) = post_from(&app, "192.0.2.3", SHOP).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(json_contains_text(&body, "this token"), "{body}");
    // …and another website's token has its own.
    assert_eq!(post_from(&app, "192.0.2.3", BLOG).await.0, StatusCode::OK);
}
