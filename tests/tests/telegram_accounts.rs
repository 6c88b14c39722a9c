//! One persona on two Telegram bots (issue 46: elizaOS 2.x's
//! `settings.telegram.accounts.<id>{botToken, allowedChats}`), end to end through the real
//! binary against two fake Bot API servers and the fake model. Each bot answers its own
//! chats; what one bot is told about a person the persona knows on the other (one memory);
//! each account keeps its own allowed chats. Synchronisation is on what the fakes saw and on
//! the gateway's decision counters, never a sleep.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_openai::FACTS_TASK;
use troupe_e2e::fake_telegram::{FakeTelegram, FakeTelegramConfig, SentMessage, tg};
use troupe_e2e::gauges;
use troupe_e2e::{
    Backend, ChatRequestRecord, FakeOpenAi, FakeOpenAiConfig, TestApp, TestAppOptions, persona_json,
};

/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(120);
const ANN: i64 = 501;

fn is_facts(r: &ChatRequestRecord) -> bool {
    r.system_prompt().is_some_and(|s| s.starts_with(FACTS_TASK))
}

/// Replies "Aye." to everything; the facts extractor learns Ann's boat from her words.
async fn model() -> FakeOpenAi {
    FakeOpenAi::start_with(FakeOpenAiConfig {
        default_reply: Some(Arc::new(|r: &ChatRequestRecord| {
            if !is_facts(r) {
                "Aye.".to_string()
            } else if r.prompt_text().contains("Kestrel") {
                r#"["Ann's boat is called the Kestrel"]"#.to_string()
            } else {
                "[]".to_string()
            }
        })),
        ..FakeOpenAiConfig::default()
    })
    .await
}

/// Tess with two bots: `default` on `main`, `support` on `support`, which answers only in
/// the group -100900 and in Ann's DM: as elizaOS's lists do, an account's `allowedChats`
/// holds DMs too (docs/access.md).
fn character(main: &FakeTelegram, support: &FakeTelegram) -> Value {
    let mut c = persona_json("Tess", "Tess keeps the night ferry's logbook.");
    c["plugins"] = json!(["@elizaos/plugin-telegram"]);
    c["settings"]["telegram"] = json!({
        "accounts": {
            "default": {"botToken": main.token(), "apiRoot": main.api_root()},
            "support": {
                "botToken": support.token(),
                "apiRoot": support.api_root(),
                "allowedChats": ["-100900", ANN.to_string()]
            }
        }
    });
    c
}

fn dm(text: &str) -> Value {
    tg::text(tg::private_chat(ANN, "Ann"), tg::user(ANN, "Ann"), text)
}

async fn wait_sent(telegram: &FakeTelegram, app: &TestApp, n: usize) -> Vec<SentMessage> {
    app.expect(telegram.try_wait_for_sent(n, WAIT).await)
}

#[tokio::test]
async fn one_persona_answers_on_two_bots_with_one_memory_and_each_bots_allowed_chats() {
    let main = FakeTelegram::start().await;
    let support = FakeTelegram::start_with(FakeTelegramConfig {
        token: "456:def".into(),
        username: "tess_help_bot".into(),
        first_name: "Tess".into(),
    })
    .await;
    let model = model().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character(&main, &support))
            .openai(&model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "2"),
    )
    .await;

    // Ann tells the main bot about her boat: two messages, two answers, from that bot.
    main.push_message(dm("My boat is called the Kestrel."));
    wait_sent(&main, &app, 1).await;
    main.push_message(dm("She is moored at Gull Point."));
    let sent = wait_sent(&main, &app, 2).await;
    assert!(sent.iter().all(|m| m.chat_id == ANN && m.text == "Aye."));
    model.wait_for_matching(1, WAIT, is_facts).await;
    troupe_e2e::eventually("Ann's fact is stored", WAIT, || async {
        let (_, body) = app
            .get(&format!("/api/agents/tess/rooms/telegram:{ANN}/memories"))
            .await;
        body.to_string().contains("Kestrel")
    })
    .await;

    // On the other bot, the same persona knows her: one memory.
    support.push_message(dm("Which boat is mine again?"));
    let sent = wait_sent(&support, &app, 1).await;
    assert_eq!((sent[0].chat_id, sent[0].text.as_str()), (ANN, "Aye."));
    let prompt = model
        .requests()
        .into_iter()
        .rev()
        .find(|r| !is_facts(r))
        .map(|r| r.prompt_text())
        .expect("a reply request");
    assert!(prompt.contains("Which boat is mine again?"), "{prompt}");
    assert!(
        prompt.contains("# Facts about Ann\n- Ann's boat is called the Kestrel"),
        "{prompt}"
    );
    // The main bot said nothing more: each bot answers its own chats.
    assert_eq!(main.sent_messages().len(), 2);

    // The support bot's allowed chats are its own: another group gets nothing there...
    let mention = |chat: i64, bot: &FakeTelegram, text: &str| {
        tg::mentioning(
            tg::text(tg::supergroup(chat, "Crew"), tg::user(ANN, "Ann"), text),
            bot.bot_username(),
        )
    };
    support.push_message(mention(-100_901, &support, "@tess_help_bot anyone?"));
    gauges::decided(&app, "telegram", "ignored", 1, WAIT).await;
    // ...its own group is answered, and the main bot (no list) answers in the other group.
    support.push_message(mention(-100_900, &support, "@tess_help_bot here?"));
    let sent = wait_sent(&support, &app, 2).await;
    assert_eq!(sent[1].chat_id, -100_900);
    main.push_message(mention(-100_901, &main, "@tess_bot and you?"));
    let sent = wait_sent(&main, &app, 3).await;
    assert_eq!(sent[2].chat_id, -100_901);
    assert_eq!(
        support.sent_messages().len(),
        2,
        "the refused group got nothing"
    );
}

/// `troupe run` in a fresh directory with `files` in its `personas/` and `env` set: whether
/// it started (it should not), and what it said.
fn run_with(files: &[(&str, &Value)], env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let personas = dir.path().join("personas");
    std::fs::create_dir_all(&personas).unwrap();
    for (name, character) in files {
        std::fs::write(personas.join(name), character.to_string()).unwrap();
    }
    let out = std::process::Command::new(troupe_e2e::troupe_bin())
        .arg("run")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TROUPE_HTTP_ADDR", "127.0.0.1:0")
        .env("OPENAI_API_KEY", "k")
        .envs(env.iter().copied())
        .output()
        .expect("troupe run runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Tess on Telegram with the accounts `accounts`.
fn tess_with(accounts: Value) -> Value {
    let mut c = persona_json("Tess", "Tess keeps the night ferry's logbook.");
    c["plugins"] = json!(["@elizaos/plugin-telegram"]);
    c["settings"]["telegram"] = json!({ "accounts": accounts });
    c
}

fn ben() -> Value {
    let mut c = persona_json("Ben", "Ben mends the nets.");
    c["clients"] = json!(["telegram"]);
    c
}

#[test]
fn a_telegram_account_token_another_persona_uses_refuses_to_start_naming_both() {
    // Tess's support bot is Ben's bot (his settings.secrets): both would answer every
    // message there.
    let tess = tess_with(json!({"support": {"botToken": "123:same"}}));
    let mut bens = ben();
    bens["settings"]["secrets"] = json!({"TELEGRAM_BOT_TOKEN": "123:same"});
    let (started, stderr) = run_with(&[("tess.json", &tess), ("ben.json", &bens)], &[]);
    assert!(!started, "{stderr}");
    assert!(
        stderr.contains("ben.json and ")
            && stderr.contains(
                "tess.json (its telegram account \"support\") use the same telegram token"
            ),
        "{stderr}"
    );

    // Tess's `default` account takes TELEGRAM_BOT_TOKEN from the environment, as Ben does.
    let tess = tess_with(json!({"default": {}, "support": {"botToken": "456:own"}}));
    let (started, stderr) = run_with(
        &[("tess.json", &tess), ("ben.json", &ben())],
        &[("TELEGRAM_BOT_TOKEN", "123:env")],
    );
    assert!(!started, "{stderr}");
    assert!(
        stderr.contains("tess.json (its telegram account \"default\") use the same telegram token"),
        "{stderr}"
    );

    // Two accounts of one persona with one token are one bot, too.
    let tess = tess_with(json!({"main": {"botToken": "789:x"}, "support": {"botToken": "789:x"}}));
    let (started, stderr) = run_with(&[("tess.json", &tess)], &[]);
    assert!(!started, "{stderr}");
    assert!(
        stderr.contains("tess.json (its telegram account \"main\") and ")
            && stderr.contains("(its telegram account \"support\") use the same telegram token"),
        "{stderr}"
    );
}
