//! Access on Telegram (issue 44, docs/access.md), end to end: the real `troupe run` against
//! the fake Bot API and the fake model. A stranger's DM under `pairing` gets a code and no
//! model call; `troupe pairing approve`, run beside the gateway, lets them in, across a
//! restart, until `revoke`; an owner's wrong `/approve`s lock approval out; a group outside
//! `TELEGRAM_ALLOWED_CHATS` gets nothing; a flood of strangers leaves at most three codes.
//! Synchronisation is on the gateway's own counters (`troupe_decisions_total`), never a
//! sleep.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_telegram::{FakeTelegram, SentMessage, tg};
use troupe_e2e::gauges::{self, code_in, pairing};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const AGENT: &str = "Tess";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(120);
const OWNER: i64 = 9;
const STRANGER: i64 = 777;

/// Tess on Telegram with `settings` added to her character's.
fn character(telegram: &FakeTelegram, settings: Value) -> Value {
    let mut c = persona_json(AGENT, "Tess keeps the night ferry's logbook.");
    c["clients"] = json!(["telegram"]);
    c["settings"]["secrets"] = json!({
        "TELEGRAM_BOT_TOKEN": telegram.token(),
        "TELEGRAM_API_ROOT": telegram.api_root(),
    });
    if let Value::Object(extra) = settings {
        for (k, v) in extra {
            c["settings"][k] = v;
        }
    }
    c
}

fn options(model: &FakeOpenAi, character: Value) -> TestAppOptions {
    TestAppOptions::new(Backend::Sqlite)
        .persona_file("tess.json", character)
        .openai(model)
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0")
}

fn dm(user: i64, text: &str) -> Value {
    tg::text(
        tg::private_chat(user, "Someone"),
        tg::user(user, "Someone"),
        text,
    )
}

async fn wait_sent(telegram: &FakeTelegram, app: &TestApp, n: usize) -> Vec<SentMessage> {
    app.expect(telegram.try_wait_for_sent(n, WAIT).await)
}

/// Waits until `n` Telegram messages were decided `decision`.
async fn decided(app: &TestApp, decision: &str, n: u64) {
    gauges::decided(app, "telegram", decision, n, WAIT).await;
}

#[tokio::test]
async fn a_stranger_pairs_by_code_approved_from_the_cli_until_revoked() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({"TELEGRAM_DM_POLICY": "pairing"});
    let mut app = TestApp::spawn(options(&model, character(&telegram, settings))).await;

    // A stranger's DM: one reply holding a code, no model call.
    telegram.push_message(dm(STRANGER, "hello?"));
    let sent = wait_sent(&telegram, &app, 1).await;
    let code = code_in(&sent[0].text);
    assert!(sent[0].text.contains("/approve"), "{}", sent[0].text);
    // A second DM: no new code, nothing said.
    telegram.push_message(dm(STRANGER, "anyone there?"));
    decided(&app, "ignored", 2).await;
    assert_eq!(telegram.sent_messages().len(), 1);
    assert_eq!(model.request_count(), 0);
    // Nothing of theirs is in the room's memory.
    let (_, memories) = app
        .get(&format!(
            "/api/agents/tess/rooms/telegram:{STRANGER}/memories"
        ))
        .await;
    assert!(!memories.to_string().contains("hello?"), "{memories}");

    // Approved from the CLI while the gateway runs, in lower case.
    let (ok, out) = pairing(&app, &["approve", &code.to_ascii_lowercase()], &[]).await;
    assert!(ok, "{out}");
    assert!(out.contains(&format!("telegram:{STRANGER}")), "{out}");
    model.push_reply("Welcome aboard.");
    telegram.push_message(dm(STRANGER, "may I board?"));
    let sent = wait_sent(&telegram, &app, 2).await;
    assert_eq!(sent[1].text, "Welcome aboard.");
    assert_eq!(model.request_count(), 1);

    // After a restart: still let in.
    app.restart().await;
    model.push_reply("Still aboard.");
    telegram.push_message(dm(STRANGER, "still there?"));
    let sent = wait_sent(&telegram, &app, 3).await;
    assert_eq!(sent[2].text, "Still aboard.");

    // Revoked: a stranger again, with a new code.
    let (ok, out) = pairing(&app, &["revoke", &format!("telegram:{STRANGER}")], &[]).await;
    assert!(ok, "{out}");
    telegram.push_message(dm(STRANGER, "and now?"));
    let sent = wait_sent(&telegram, &app, 4).await;
    let again = code_in(&sent[3].text);
    assert_ne!(again, code);
    assert_eq!(model.request_count(), 2);
    let (ok, out) = pairing(&app, &["list"], &[]).await;
    assert!(
        ok && out.contains(&again) && out.contains("approved: 0"),
        "{out}"
    );
}

#[tokio::test]
async fn six_wrong_approvals_lock_approval_out_until_the_lockout_ends() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({
        "TELEGRAM_DM_POLICY": "pairing",
        "troupe": {"owners": [format!("telegram:{OWNER}")]},
    });
    let app = TestApp::spawn(options(&model, character(&telegram, settings))).await;
    telegram.push_message(dm(STRANGER, "let me in"));
    let code = code_in(&wait_sent(&telegram, &app, 1).await[0].text);

    // Six wrong codes from the owner (one a look-alike of the right one in Cyrillic): the
    // answers never say whether a code exists; the sixth is locked out.
    // The right code with its first character in its fullwidth form: a look-alike.
    let first = code.chars().next().unwrap();
    let fullwidth = char::from_u32(first as u32 + 0xFEE0).unwrap();
    let lookalike = format!("{fullwidth}{}", &code[1..]);
    let wrong = [
        "ZZZZZZZZ", "ABCDEFGH", "22222222", "XXXXXXXX", "ABCDEFG", &lookalike,
    ];
    for (i, guess) in wrong.iter().enumerate() {
        let guess = if *guess == code { "YYYYYYYY" } else { guess };
        telegram.push_message(dm(OWNER, &format!("/approve {guess}")));
        let sent = wait_sent(&telegram, &app, 2 + i).await;
        let answer = &sent[1 + i].text;
        if i < 5 {
            assert_eq!(answer, "That code is not valid.", "{i}: {answer}");
        } else {
            assert!(answer.contains("locked"), "{answer}");
        }
    }
    // The right code is refused while locked out.
    telegram.push_message(dm(OWNER, &format!("/approve {code}")));
    let sent = wait_sent(&telegram, &app, 8).await;
    assert!(sent[7].text.contains("locked"), "{}", sent[7].text);
    let (_, listed) = app.get("/api/pairing").await;
    assert_eq!(
        listed["approved"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    // A non-owner's /approve is no approval, and says nothing about codes.
    telegram.push_message(dm(STRANGER, &format!("/approve {code}")));
    decided(&app, "ignored", 2).await;
    assert_eq!(telegram.sent_messages().len(), 8);
    assert_eq!(model.request_count(), 0);

    // Eleven minutes on (the same database, the clock moved): the lockout has ended.
    let mut app = app;
    app.stop().await;
    let later = TestApp::spawn(
        app.replica_options()
            .env("TROUPE_TEST_CLOCK_OFFSET_SECS", "660"),
    )
    .await;
    telegram.push_message(dm(OWNER, &format!("/approve {code}")));
    let sent = wait_sent(&telegram, &later, 9).await;
    assert!(
        sent[8]
            .text
            .starts_with(&format!("Approved telegram:{STRANGER}")),
        "{}",
        sent[8].text
    );
}

#[tokio::test]
async fn a_group_not_allowed_gets_nothing_and_is_listed_as_asking() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({"TELEGRAM_ALLOWED_CHATS": "[\"-100123\", \"501\"]"});
    let app = TestApp::spawn(options(&model, character(&telegram, settings))).await;
    let mention = |chat: i64, text: &str| {
        tg::mentioning(
            tg::text(tg::supergroup(chat, "Crew"), tg::user(501, "Ann"), text),
            telegram.bot_username(),
        )
    };
    telegram.push_message(mention(-100_777, "@tess_bot are you there?"));
    decided(&app, "ignored", 1).await;
    model.push_reply("Aye.");
    telegram.push_message(mention(-100_123, "@tess_bot and here?"));
    let sent = wait_sent(&telegram, &app, 1).await;
    assert_eq!(sent[0].text, "Aye.");
    assert_eq!(model.request_count(), 1);
    assert!(!model.requests()[0].prompt_text().contains("are you there"));
    let (_, memories) = app
        .get("/api/agents/tess/rooms/telegram:-100777/memories")
        .await;
    assert!(
        !memories.to_string().contains("are you there"),
        "{memories}"
    );
    let (_, listed) = app.get("/api/pairing").await;
    assert_eq!(listed["asking"][0]["room"], "telegram:-100777", "{listed}");

    // elizaOS's list holds DMs too (a DM's chat id is its sender's): with no DM policy set,
    // Ann's listed chat is answered and Bob's unlisted one gets one refusal, no model call.
    telegram.push_message(dm(502, "hello?"));
    decided(&app, "ignored", 2).await;
    model.push_reply("Evening, Ann.");
    telegram.push_message(dm(501, "hello!"));
    let sent = wait_sent(&telegram, &app, 3).await;
    assert_eq!(model.request_count(), 2);
    assert!(!model.requests()[1].prompt_text().contains("hello?"));
    let to = |chat: i64| sent.iter().filter(|m| m.chat_id == chat).count();
    assert_eq!((to(502), to(501)), (1, 1), "{sent:?}");
    assert_eq!(
        sent.iter().find(|m| m.chat_id == 501).unwrap().text,
        "Evening, Ann."
    );
}

#[tokio::test]
async fn a_thousand_strangers_leave_three_codes_no_model_call_and_flat_memory() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({"TELEGRAM_DM_POLICY": "pairing"});
    let app = TestApp::spawn(options(&model, character(&telegram, settings))).await;
    let pid = app.pid().expect("running");
    for user in 0..100 {
        telegram.push_message(dm(10_000 + user, "hi"));
    }
    decided(&app, "ignored", 100).await;
    let after_100 = gauges::peak_rss_kib(pid);
    for user in 100..1000 {
        telegram.push_message(dm(10_000 + user, "hi"));
    }
    decided(&app, "ignored", 1000).await;
    let after_1000 = gauges::peak_rss_kib(pid);
    assert_eq!(model.request_count(), 0);
    let (_, listed) = app.get("/api/pairing").await;
    assert_eq!(
        listed["pending"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    // The newest three codes are the ones waiting.
    let users: Vec<&str> = listed["pending"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["userId"].as_str())
        .collect();
    assert!(
        users
            .iter()
            .all(|u| u.parse::<i64>().unwrap() >= 10_000 + 997 - 50),
        "{users:?}"
    );
    // Memory flat: the last 900 strangers cost less than 16 MB of peak over the first 100.
    assert!(
        after_1000 < after_100 + 16 * 1024,
        "peak RSS {after_100} kB after 100, {after_1000} kB after 1000"
    );
    eprintln!("flood: peak RSS {after_100} kB after 100 strangers, {after_1000} kB after 1000");
}
