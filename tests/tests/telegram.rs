//! End-to-end tests of the Telegram connector: the real `troupe run` binary against the
//! fake Bot API and the fake OpenAI model. The tests talk to troupe only as Telegram would
//! (updates, webhook calls) and read what it sent from the fake.
//!
//! Telegram is storage-agnostic, so these run on SQLite only.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_telegram::{FakeTelegram, SentMessage, deliver_webhook, tg};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, eventually};

const AGENT: &str = "Tess";
const BIO: &str = "Tess keeps the night ferry's logbook and knows every buoy in the strait.";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// A user who talks to the bot.
fn ann() -> Value {
    tg::user(501, "Ann")
}

/// The Tess character on Telegram, pointed at `telegram`, with extra secrets and
/// `clientConfig.telegram` when given.
fn character(telegram: &FakeTelegram, secrets: &[(&str, &str)], client_config: Value) -> Value {
    let mut c = telegram.persona(AGENT, BIO);
    for (k, v) in secrets {
        c["settings"]["secrets"][*k] = json!(v);
    }
    if !client_config.is_null() {
        c["clientConfig"] = json!({ "telegram": client_config });
    }
    c
}

async fn spawn(model: &FakeOpenAi, character: Value) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(model),
    )
    .await
}

/// Waits for `n` sent messages; on failure, prints the gateway's output too.
async fn wait_sent(telegram: &FakeTelegram, app: &TestApp, n: usize) -> Vec<SentMessage> {
    match telegram.try_wait_for_sent(n, WAIT).await {
        Ok(sent) => sent,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    }
}

/// A reply long enough to need three Telegram messages: three paragraphs of about 3,000
/// characters each, 9,000 in all.
fn long_reply() -> String {
    ["Alpha", "Bravo", "Charlie"]
        .iter()
        .map(|word| {
            let sentence = format!("{word} buoy blinks twice at dusk. ");
            sentence.repeat(3000 / sentence.len() + 1)[..3000]
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

#[tokio::test]
async fn a_group_mention_gets_a_threaded_reply_and_a_topic_its_own() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.push_reply("The red buoy is off Gull Point.");
    model.push_reply("In this topic: the green one.");
    let app = spawn(&model, character(&telegram, &[], Value::Null)).await;

    let group = tg::supergroup(-100_400, "Ferry crew");
    let asked = telegram.push_message(tg::mentioning(
        tg::text(group, ann(), "@tess_bot where is the red buoy?"),
        "tess_bot",
    ));
    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent[0].chat_id, -100_400);
    assert_eq!(sent[0].text, "The red buoy is off Gull Point.");
    assert_eq!(sent[0].reply_to_message_id(), Some(asked));
    assert_eq!(sent[0].message_thread_id, None);
    let prompt = model.requests()[0].prompt_text();
    assert!(prompt.contains("where is the red buoy?"), "{prompt}");

    let forum = tg::forum(-100_401, "Harbour");
    let asked = telegram.push_message(tg::in_topic(
        tg::mentioning(
            tg::text(forum, ann(), "@tess_bot and the green one?"),
            "tess_bot",
        ),
        12,
    ));
    let sent = wait_sent(&telegram, &app, 2).await;
    assert_eq!(sent[1].chat_id, -100_401);
    assert_eq!(sent[1].message_thread_id, Some(12));
    assert_eq!(sent[1].reply_to_message_id(), Some(asked));
    assert_eq!(sent[1].text, "In this topic: the green one.");
}

#[tokio::test]
async fn a_9000_character_answer_arrives_as_three_messages_in_order() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let reply = long_reply();
    assert!(reply.chars().count() > 8192);
    model.push_reply(reply.clone());
    let app = spawn(&model, character(&telegram, &[], Value::Null)).await;

    let asked = telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        ann(),
        "Tell me about every buoy.",
    ));
    let sent = wait_sent(&telegram, &app, 3).await;
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|m| m.chat_id == 501));
    assert!(sent.iter().all(|m| m.text.chars().count() <= 4096));
    assert!(sent[0].text.starts_with("Alpha"));
    assert!(sent[1].text.starts_with("Bravo"));
    assert!(sent[2].text.starts_with("Charlie"));
    assert_eq!(sent[0].reply_to_message_id(), Some(asked));
    assert!(sent[1].reply_parameters.is_none() && sent[2].reply_parameters.is_none());
    let joined: String = sent
        .iter()
        .map(|m| m.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(words(&joined), words(&reply));
}

#[tokio::test]
async fn a_429_storm_still_delivers_every_message_once_in_order() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let reply = long_reply();
    model.push_reply(reply.clone());
    model.push_reply("And that is all.");
    telegram.fail_next_sends(5, 1);
    let app = spawn(&model, character(&telegram, &[], Value::Null)).await;

    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        ann(),
        "Tell me about every buoy.",
    ));
    let sent = wait_sent(&telegram, &app, 3).await;
    assert!(sent[0].text.starts_with("Alpha"));
    assert!(sent[1].text.starts_with("Bravo"));
    assert!(sent[2].text.starts_with("Charlie"));
    // A later message is answered after the storm: nothing of the first reply came twice.
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        ann(),
        "Anything else?",
    ));
    let sent = wait_sent(&telegram, &app, 4).await;
    assert_eq!(sent.len(), 4, "{sent:#?}");
    assert_eq!(sent[3].text, "And that is all.");
    let texts: Vec<&str> = sent[..3].iter().map(|m| m.text.as_str()).collect();
    assert_eq!(words(&texts.join(" ")), words(&reply));
    assert_eq!(telegram.send_attempts(), 4 + 5);
}

#[tokio::test]
async fn an_update_taken_before_a_crash_is_answered_once_after_it() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    // The model is thinking when the process dies; after the restart it answers.
    model.push(Script::Hang);
    model.push_reply("Safe harbour.");
    model.push_reply("Still here.");
    let mut app = spawn(&model, character(&telegram, &[], Value::Null)).await;

    let asked = telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        ann(),
        "Is the harbour safe?",
    ));
    model.wait_for_requests(1, WAIT).await;
    app.kill().await;
    assert!(telegram.sent_messages().is_empty());
    app.start_again().await;

    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent[0].text, "Safe harbour.");
    assert_eq!(sent[0].reply_to_message_id(), Some(asked));
    // A later message is answered next: the first was not answered twice.
    telegram.push_message(tg::text(tg::private_chat(501, "Ann"), ann(), "And now?"));
    let sent = wait_sent(&telegram, &app, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[1].text, "Still here.");
    assert_eq!(model.request_count(), 3);
    assert!(!app.logs().contains(telegram.token()));
}

#[tokio::test]
async fn a_webhook_call_with_the_wrong_secret_gets_401_and_is_not_processed() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.push_reply("Webhook heard you.");
    let secrets = [
        (
            "TELEGRAM_WEBHOOK_URL",
            "https://ferry.example.org/webhooks/telegram/tess",
        ),
        ("TELEGRAM_WEBHOOK_SECRET", "right_secret"),
    ];
    let app = spawn(&model, character(&telegram, &secrets, Value::Null)).await;
    let hook = telegram.wait_for_webhook(WAIT).await;
    assert_eq!(hook.url, "https://ferry.example.org/webhooks/telegram/tess");
    assert_eq!(hook.secret_token.as_deref(), Some("right_secret"));

    let update = |update_id: i64, message_id: i64, text: &str| {
        json!({"update_id": update_id, "message": {
            "message_id": message_id, "date": 1_700_000_000, "text": text,
            "chat": {"id": 501, "type": "private", "first_name": "Ann"},
            "from": ann()}})
    };
    let url = app.url(&format!("/webhooks/telegram/{AGENT}"));
    let (status, _) = deliver_webhook(&url, Some("wrong_secret"), &update(1, 1, "forged")).await;
    assert_eq!(status, 401);
    let (status, _) = deliver_webhook(&url, None, &update(2, 2, "forged too")).await;
    assert_eq!(status, 401);

    let (status, body) = deliver_webhook(&url, Some("right_secret"), &update(3, 3, "real")).await;
    assert_eq!(status, 200, "{body}\n{}", app.logs());
    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent[0].text, "Webhook heard you.");
    assert_eq!(sent[0].reply_to_message_id(), Some(3));
    // Only the real update reached the model.
    assert_eq!(model.request_count(), 1);
    assert!(model.requests()[0].prompt_text().contains("real"));
    assert!(!model.requests()[0].prompt_text().contains("forged"));
    assert!(telegram.calls_to("getUpdates").is_empty());
}

#[tokio::test]
async fn a_group_that_is_not_allowed_is_left() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.push_reply("Hello Ann.");
    let config = json!({"shouldOnlyJoinInAllowedGroups": true, "allowedGroupIds": [-100_123]});
    let app = spawn(&model, character(&telegram, &[], config)).await;

    telegram.push_update(tg::bot_added(
        tg::supergroup(-100_777, "Strangers"),
        ann(),
        telegram.bot_user(),
    ));
    let left = telegram.wait_for_left(1, WAIT).await;
    assert_eq!(left, vec![-100_777]);
    // A mention from that group is not handed on either.
    telegram.push_message(tg::mentioning(
        tg::text(
            tg::supergroup(-100_777, "Strangers"),
            ann(),
            "@tess_bot hello?",
        ),
        "tess_bot",
    ));
    telegram.push_message(tg::text(tg::private_chat(501, "Ann"), ann(), "Hi Tess"));
    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].chat_id, 501);
    assert_eq!(model.request_count(), 1);
    assert!(!model.requests()[0].prompt_text().contains("hello?"));
    assert!(telegram.left_chats().iter().all(|c| *c == -100_777));
}

#[tokio::test]
async fn a_refused_token_is_reported_without_showing_it() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let mut c = character(&telegram, &[], Value::Null);
    c["settings"]["secrets"]["TELEGRAM_BOT_TOKEN"] = json!("123:wrongsecret");
    let app = spawn(&model, c).await;
    let calls = telegram.wait_for_calls("getMe", 1, WAIT).await;
    assert_eq!(calls[0].status, 401);
    eventually("the log says the token was refused", WAIT, || async {
        app.logs().contains("TELEGRAM_BOT_TOKEN")
    })
    .await;
    let logs = app.logs();
    assert!(!logs.contains("wrongsecret"), "{logs}");
    // The rest of the gateway still serves.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
}

/// Issue 30, finding 11: an update teloxide panics on (a `message_reaction` with neither
/// `user` nor `actor_chat`, a kind the bot did not ask for but Telegram may still send)
/// used to end the polling task for good. It is logged, confirmed, and the message after it
/// is answered.
#[tokio::test]
async fn a_poisoned_update_is_logged_skipped_and_the_next_message_answered() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    model.push_reply("Fair winds.");
    let app = spawn(&model, character(&telegram, &[], Value::Null)).await;
    telegram.wait_for_calls("getUpdates", 1, WAIT).await;

    let poisoned = telegram.push_unrequested(json!({"message_reaction": {
        "chat": tg::supergroup(-100_900, "Ferry crew"),
        "message_id": 4,
        "date": 1_700_000_000,
        "old_reaction": [],
        "new_reaction": [{"type": "emoji", "emoji": "👍"}],
    }}));
    let asked = telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        ann(),
        "Any wind tonight?",
    ));
    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent[0].text, "Fair winds.");
    assert_eq!(sent[0].reply_to_message_id(), Some(asked));
    // Confirmed: a later getUpdates asks from past it, so a restart does not fetch it again.
    let confirmed = telegram.wait_for_confirmed(poisoned, WAIT).await;
    app.expect(confirmed);
    let skipped = format!("update_id={poisoned}");
    eventually("the log names the skipped update", WAIT, || async {
        let logs = app.logs();
        logs.contains("skipping an update that cannot be read") && logs.contains(&skipped)
    })
    .await;
    assert!(!app.logs().contains(telegram.token()));
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
}

/// Issue 30, finding 11: a polling loop that gets no answer from the Bot API makes
/// `/readyz` answer 503 and name the connector, and ready again once polls pass.
#[tokio::test]
async fn readyz_names_a_polling_loop_that_has_not_heard_from_telegram() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character(&telegram, &[], Value::Null))
            .openai(&model)
            .env("TROUPE_RECEIVE_STALE_SECS", "1"),
    )
    .await;
    telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    telegram.fail_polls(Some((500, "Internal Server Error")));

    let telegram_check = |ready: &Value| {
        ready["connectors"]
            .as_object()
            .and_then(|all| all.iter().find(|(name, _)| name.ends_with("/telegram")))
            .map(|(_, check)| check.clone())
            .unwrap_or(Value::Null)
    };
    eventually("/readyz reports the silent polling loop", WAIT, || async {
        let (status, ready) = app.get("/readyz").await;
        let check = telegram_check(&ready);
        status == 503
            && check["status"] == "error"
            && check["detail"]
                .as_str()
                .is_some_and(|d| d.contains("no answer from telegram"))
    })
    .await;
    let (_, ready) = app.get("/readyz").await;
    assert_eq!(ready["status"], "not_ready", "{ready}");

    telegram.fail_polls(None);
    eventually("/readyz is ready once polls pass again", WAIT, || async {
        let (status, ready) = app.get("/readyz").await;
        status == 200 && telegram_check(&ready)["status"] == "ok"
    })
    .await;
}
