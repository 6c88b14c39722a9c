//! End-to-end tests of the journal's durability rules (issue 12): a message that stops the
//! gateway at every start is given up (#2), a `messageId` is deduplicated per room and caller
//! (#7), and the NATS dedupe id is unique per database (#11). The real `troupe run` binary,
//! the fake OpenAI model and the fake Telegram Bot API; the NATS test needs
//! `TROUPE_TEST_NATS_URL` (skipped with a note without it, failed under `CI=true`).

#![allow(clippy::disallowed_methods)] // tests read TROUPE_TEST_* from the environment

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_telegram::{FakeTelegram, SentMessage, tg};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, eventually};

const AGENT: &str = "Tess";
const BIO: &str = "Tess keeps the night ferry's logbook and knows every buoy in the strait.";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(90);

troupe_e2e::on_each_backend!(
    one_message_id_in_two_rooms_is_two_messages,
    one_message_id_from_two_web_callers_in_one_room_is_two_messages,
);

// ---- #2: the poison-message rule ----

/// Tess on Telegram, pointed at `telegram`.
fn on_telegram(telegram: &FakeTelegram) -> Value {
    telegram.persona(AGENT, BIO)
}

async fn wait_sent(telegram: &FakeTelegram, app: &TestApp, n: usize) -> Vec<SentMessage> {
    match telegram.try_wait_for_sent(n, WAIT).await {
        Ok(sent) => sent,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    }
}

#[tokio::test]
async fn a_message_that_stops_the_gateway_at_every_start_is_given_up_with_one_apology() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    // The model never answers the poison message; by the time it would, the process is
    // gone (SIGKILL, as a crash in an attachment would). Later messages are answered.
    model.push(Script::Hang);
    model.push(Script::Hang);
    model.set_fallback(Some(Script::reply("Still here.")));
    let mut app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", on_telegram(&telegram))
            .openai(&model)
            .env("TROUPE_MAX_ATTEMPTS", "2")
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    let ann = || tg::user(501, "Ann");
    let chat = || tg::private_chat(501, "Ann");
    let poison = telegram.push_message(tg::text(chat(), ann(), "Read the attached logbook."));

    // Attempt 1 (counted when it was journaled), then a crash.
    model.wait_for_requests(1, WAIT).await;
    app.kill().await;
    // Attempt 2, driven again at start (counted before it began), then a crash again.
    app.start_again().await;
    model.wait_for_requests(2, WAIT).await;
    app.kill().await;
    // Out of attempts: the next start gives it up instead of driving it a third time.
    app.start_again().await;

    let sent = wait_sent(&telegram, &app, 1).await;
    assert!(
        sent[0].text.starts_with("Sorry"),
        "the room's first message should be the apology: {sent:#?}"
    );
    assert_eq!(sent[0].reply_to_message_id(), Some(poison));
    eventually("the give-up is logged with its reason", WAIT, || async {
        app.logs()
            .contains("gave up after 2 attempts: the gateway stopped while handling it")
    })
    .await;
    assert_eq!(
        model.request_count(),
        2,
        "the given-up message was driven again: {:?}",
        model.requests()
    );

    // No crash loop: a restart does not drive it (nor apologise) again, and a later message
    // of the same room is answered. The room's messages are handled in order, so once that
    // answer is sent, anything the restart would have done for the old one is done too.
    app.restart().await;
    telegram.push_message(tg::text(chat(), ann(), "Are you there?"));
    let sent = wait_sent(&telegram, &app, 2).await;
    assert_eq!(sent[1].text, "Still here.", "{sent:#?}");
    assert_eq!(
        sent.iter().filter(|m| m.text.starts_with("Sorry")).count(),
        1,
        "the room must get exactly one apology: {sent:#?}"
    );
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(model.request_count(), 3, "{:?}", model.requests());
    assert!(
        !model
            .last_prompt_text()
            .contains("Read the attached logbook."),
        "the given-up message is not part of the room's history"
    );
}

// ---- #7: a messageId is scoped by room (and by caller on the Web platform) ----

async fn spawn_web(backend: Backend, model: &FakeOpenAi) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(backend)
            .persona(AGENT, BIO)
            .openai(model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await
}

fn post(room: &str, user: &str, text: &str) -> Value {
    json!({"roomId": room, "userId": user, "messageId": "m-1", "text": text})
}

/// The reply texts of a 200 answer, and whether it was a duplicate.
fn replies(status: StatusCode, body: &Value) -> (Vec<String>, bool) {
    assert_eq!(status, StatusCode::OK, "{body}");
    let texts = body["replies"]
        .as_array()
        .unwrap_or_else(|| panic!("no replies in {body}"))
        .iter()
        .map(|r| r["text"].as_str().unwrap_or_default().to_string())
        .collect();
    (texts, body["duplicate"] == json!(true))
}

async fn one_message_id_in_two_rooms_is_two_messages(backend: Backend) {
    let model = FakeOpenAi::start().await;
    let app = spawn_web(backend, &model).await;
    model.push_reply("Alpha: the harbour light is green.");
    model.push_reply("Bravo: buoy nine is missing.");

    let (a, dup) = replies_of(&app, &post("room-a", "ann", "What colour is the light?")).await;
    assert_eq!(
        (a.as_slice(), dup),
        (
            &["Alpha: the harbour light is green.".to_string()][..],
            false
        )
    );
    // Another caller, another room, the same messageId: its own answer, not Ann's.
    let (b, dup) = replies_of(&app, &post("room-b", "bob", "Which buoy is gone?")).await;
    assert_eq!(
        (b.as_slice(), dup),
        (&["Bravo: buoy nine is missing.".to_string()][..], false)
    );
    assert!(model.last_prompt_text().contains("Which buoy is gone?"));
    assert_eq!(model.request_count(), 2);

    // Each caller repeating itself gets its own reply back, flagged a duplicate.
    let (again, dup) = replies_of(&app, &post("room-a", "ann", "What colour is the light?")).await;
    assert_eq!((again, dup), (a.clone(), true));
    let (again, dup) = replies_of(&app, &post("room-b", "bob", "Which buoy is gone?")).await;
    assert_eq!((again, dup), (b.clone(), true));
    assert_eq!(
        model.request_count(),
        2,
        "a duplicate asked the model again"
    );

    // Neither room's memory holds the other's exchange.
    for (room, own, other) in [("room-a", &a[0], &b[0]), ("room-b", &b[0], &a[0])] {
        let (status, body) = app
            .get(&format!("/api/agents/{AGENT}/rooms/{room}/memories"))
            .await;
        assert_eq!(status, StatusCode::OK);
        let text = body.to_string();
        assert!(text.contains(own.as_str()), "{room}: {text}");
        assert!(
            !text.contains(other.as_str()),
            "{room} sees the other room: {text}"
        );
    }
}

async fn one_message_id_from_two_web_callers_in_one_room_is_two_messages(backend: Backend) {
    // Any HTTP caller may pick any room id: the caller's userId is part of the key too.
    let model = FakeOpenAi::start().await;
    let app = spawn_web(backend, &model).await;
    model.push_reply("For Ann: the tide turns at six.");
    model.push_reply("For Bob: the ferry leaves at nine.");
    let (ann, _) = replies_of(&app, &post("shared", "ann", "When does the tide turn?")).await;
    let (bob, dup) = replies_of(&app, &post("shared", "bob", "When does the ferry leave?")).await;
    assert!(!dup, "Bob's message was taken for Ann's");
    assert_eq!(bob, ["For Bob: the ferry leaves at nine."]);
    assert_ne!(ann, bob);
    let (again, dup) = replies_of(&app, &post("shared", "ann", "When does the tide turn?")).await;
    assert_eq!((again, dup), (ann, true));
}

async fn replies_of(app: &TestApp, body: &Value) -> (Vec<String>, bool) {
    let (status, body) = app.post_message(AGENT, body).await;
    replies(status, &body)
}

// ---- #11: the NATS dedupe id is unique per database ----

const PER_RUN: usize = 12;

/// Posts `PER_RUN` messages at once, each to its own room, and returns every answer.
async fn post_all(app: &TestApp, run: &str) -> Vec<(StatusCode, Value)> {
    let posts = (0..PER_RUN).map(|n| {
        let client = app.client().clone();
        let url = app.url(&format!("/api/agents/{AGENT}/messages"));
        let body = json!({"roomId": format!("{run}-room-{n}"), "userId": "ann", "text": format!("{run} question {n}")});
        async move {
            let resp = client.post(url).json(&body).send().await.expect("POST");
            let status = resp.status();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    });
    futures::future::join_all(posts).await
}

#[tokio::test]
async fn two_fresh_databases_in_a_row_on_one_nats_server_answer_every_message() {
    let Some(nats) = troupe_e2e::env::nats_url("two_fresh_databases_in_a_row_on_one_nats_server")
    else {
        return;
    };
    let model = FakeOpenAi::start().await;
    // One prefix per test run (concurrent runs do not collide), the same for both
    // deployments: staging, then production on a reset database.
    let prefix = format!("e2edurable{}", uuid::Uuid::new_v4().simple());
    let options = || {
        TestAppOptions::new(Backend::Sqlite)
            .persona(AGENT, BIO)
            .openai(&model)
            .env("TROUPE_BUS_URL", &nats)
            .env("TROUPE_BUS_PREFIX", &prefix)
            .env("TROUPE_BUS_PARTITIONS", "4")
            // A lost message shows as a timed-out caller: keep that wait short.
            .env("TROUPE_MODEL_TIMEOUT_SECS", "5")
            .env("TROUPE_RATE_USER_PER_MIN", "0")
            .env("TROUPE_RATE_ROOM_PER_MIN", "0")
            .env("TROUPE_RATE_AGENT_PER_MIN", "0")
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0")
    };
    for run in ["staging", "production"] {
        // A fresh SQLite file each time: journal ids start at 1 again.
        let mut app = TestApp::spawn(options()).await;
        let answers = post_all(&app, run).await;
        let unanswered: Vec<_> = answers
            .iter()
            .enumerate()
            .filter(|(_, (status, body))| {
                *status != StatusCode::OK || body["replies"].as_array().is_none_or(Vec::is_empty)
            })
            .collect();
        assert!(
            unanswered.is_empty(),
            "{run}: {} of {PER_RUN} messages were not answered: {unanswered:?}\n----- troupe output -----\n{}",
            unanswered.len(),
            app.logs()
        );
        app.stop().await;
    }
    assert_eq!(model.request_count(), 2 * PER_RUN, "{:?}", model.requests());
}
