//! Edits and deletes (issue 32, docs/media.md "Edits and deletes"), end to end: the real
//! `troupe run` against the fake Discord and the fake Telegram, the fake OpenAI answering.
//!
//! - Discord: a question edited (MESSAGE_UPDATE) is answered again in the same message,
//!   edited in place (PATCH), from the edited text, and the room remembers one exchange; a
//!   question deleted (MESSAGE_DELETE) has its reply deleted (DELETE) and leaves memory; an
//!   edit made after the window is ignored, and counted; a question deleted while its
//!   answer is being made stops the model call, and nothing is posted.
//! - Telegram: an `edited_message` is answered again with `editMessageText`.
//!
//! Nothing waits on time: the window is measured between the message's own timestamps
//! (the fake stamps an edit `after_secs` after its message), and "nothing happened" is
//! read after a later message of the same room was answered, which the room's order puts
//! after the edit.

use std::time::Duration;

use serde_json::Value;
use troupe_e2e::fake_discord::{Author, FakeDiscord, NewMessage, SentMessage};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, WAIT};

const AGENT: &str = "Dot";
const CHANNEL: &str = "410000000000000001";

fn dot(discord: &FakeDiscord) -> Value {
    discord.persona(AGENT, "Dot keeps the lighthouse.")
}

async fn on_discord(discord: &FakeDiscord, openai: &FakeOpenAi) -> TestApp {
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(discord))
            .openai(openai)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    app
}

fn mention(text: &str) -> NewMessage {
    NewMessage::guild(CHANNEL, Author::person("alice"), text).mentioning_bot()
}

/// Waits until the bot's messages, as they are now, are exactly `expected`.
async fn showing(app: &TestApp, discord: &FakeDiscord, expected: &[&str]) -> Vec<SentMessage> {
    let waited = discord
        .try_wait_for_state(
            &format!("the bot's messages reading {expected:?}"),
            WAIT,
            |sent, _| {
                sent.iter()
                    .map(|m| m.content.as_str())
                    .eq(expected.iter().copied())
            },
        )
        .await;
    app.expect(waited)
}

/// The texts Dot's room remembers, oldest first.
async fn remembered(app: &TestApp, room: &str) -> Vec<String> {
    remembered_of(app, AGENT, room).await
}

fn creates(discord: &FakeDiscord) -> usize {
    discord
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/messages"))
        .count()
}

#[tokio::test]
async fn a_discord_question_edited_is_answered_again_in_its_reply() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = on_discord(&discord, &openai).await;

    openai.push_reply("The tide turns at six.");
    let question = discord.send_message_create(mention("when does the tide turn?"));
    let first = showing(&app, &discord, &["The tide turns at six."]).await;

    openai.push_reply("The lamp is lit at dusk.");
    assert!(discord.send_message_update(&question, "when is the lamp lit?", 20));
    let now = showing(&app, &discord, &["The lamp is lit at dusk."]).await;

    assert_eq!(now[0].id, first[0].id, "the reply is the same message");
    assert_eq!(
        creates(&discord),
        1,
        "no second message: {:#?}",
        discord.requests()
    );
    let edits = discord.edits();
    assert!(
        edits
            .iter()
            .any(|e| e.message_id == first[0].id && e.content == "The lamp is lit at dusk."),
        "the reply was edited in place: {edits:#?}"
    );
    let asked = openai.last_request().expect("a model call");
    let said = asked.last_user_message().unwrap_or_default().to_string();
    assert!(
        said.contains("when is the lamp lit?"),
        "the model saw the edited text: {said}"
    );
    assert!(!said.contains("tide"), "not the old question: {said}");
    assert_eq!(openai.request_count(), 2);

    let memory = remembered(&app, &format!("discord:{CHANNEL}")).await;
    let joined = memory.join("\n");
    assert!(
        joined.contains("when is the lamp lit?") && joined.contains("The lamp is lit at dusk."),
        "{joined}"
    );
    assert!(
        !joined.contains("tide"),
        "memory keeps the edited exchange, not both: {joined}"
    );
    assert_eq!(memory.len(), 2, "one exchange: {memory:#?}");
}

#[tokio::test]
async fn a_discord_question_deleted_has_its_reply_deleted() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = on_discord(&discord, &openai).await;

    openai.push_reply("The tide turns at six.");
    let question = discord.send_message_create(mention("when does the tide turn?"));
    let sent = showing(&app, &discord, &["The tide turns at six."]).await;

    assert!(discord.send_message_delete(&question));
    showing(&app, &discord, &[]).await;
    assert_eq!(discord.deleted(), vec![sent[0].id.clone()]);

    let memory = remembered(&app, &format!("discord:{CHANNEL}")).await;
    assert!(memory.is_empty(), "the exchange left memory: {memory:#?}");
    assert_eq!(openai.request_count(), 1);
}

#[tokio::test]
async fn a_discord_question_deleted_while_answered_stops_its_model_call() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = on_discord(&discord, &openai).await;

    // The model starts answering and then says nothing more, as a long answer would.
    openai.push(Script::stalled(
        "The tide turns at six.",
        Duration::from_millis(20),
        0,
    ));
    let question = discord.send_message_create(mention("when does the tide turn?"));
    app.expect(openai.try_wait_for_requests(1, WAIT).await);
    assert!(discord.send_message_delete(&question));

    openai.push_reply("Good night.");
    discord.send_message_create(mention("good night"));
    showing(&app, &discord, &["Good night."]).await;

    assert_eq!(
        creates(&discord),
        1,
        "nothing posted for the deleted question: {:#?}",
        discord.requests()
    );
    let memory = remembered(&app, &format!("discord:{CHANNEL}"))
        .await
        .join("\n");
    assert!(!memory.contains("tide"), "{memory}");
    assert_eq!(
        metric(
            &app,
            "troupe_revisions_total",
            &["change=\"delete\"", "outcome=\"cancelled\""]
        )
        .await,
        Some(1.0),
        "the model call was stopped, not timed out"
    );
}

#[tokio::test]
async fn a_discord_edit_after_the_window_is_ignored_and_counted() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = on_discord(&discord, &openai).await;

    openai.push_reply("The tide turns at six.");
    let question = discord.send_message_create(mention("when does the tide turn?"));
    showing(&app, &discord, &["The tide turns at six."]).await;

    // An hour after the question: past TROUPE_EDIT_WINDOW_SECS (600 by default).
    assert!(discord.send_message_update(&question, "when is the lamp lit?", 3600));
    // A later message of the room is handled after the edit: once it is answered, the
    // edit has been decided.
    openai.push_reply("Good night.");
    discord.send_message_create(mention("good night"));
    showing(&app, &discord, &["The tide turns at six.", "Good night."]).await;

    assert_eq!(
        openai.request_count(),
        2,
        "the late edit asked the model nothing"
    );
    assert!(discord.edits().is_empty(), "{:#?}", discord.edits());
    let memory = remembered(&app, &format!("discord:{CHANNEL}"))
        .await
        .join("\n");
    assert!(
        memory.contains("tide") && !memory.contains("lamp"),
        "{memory}"
    );
    assert_eq!(
        metric(
            &app,
            "troupe_revisions_total",
            &["platform=\"discord\"", "outcome=\"too_late\""]
        )
        .await,
        Some(1.0),
        "the late edit is counted"
    );
}

/// The value of the series `name` whose labels include all of `labels`, from `/metrics`.
async fn metric(app: &TestApp, name: &str, labels: &[&str]) -> Option<f64> {
    troupe_e2e::gauges::metrics_text(app)
        .await
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

fn tess(telegram: &FakeTelegram) -> Value {
    telegram.persona("Tess", "Tess keeps the ferry's logbook.")
}

#[tokio::test]
async fn a_telegram_question_edited_is_answered_again_with_edit_message_text() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", tess(&telegram))
            .openai(&openai)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    let ann = tg::user(501, "Ann");
    let chat = tg::private_chat(501, "Ann");

    openai.push_reply("The ferry leaves at nine.");
    let question = telegram.push_message(tg::text(chat, ann, "when does the ferry leave?"));
    let sent = app.expect(telegram.try_wait_for_sent(1, WAIT).await);

    openai.push_reply("The ferry comes back at noon.");
    telegram
        .push_edit(501, question, "when does the ferry come back?", 30)
        .expect("the question is in the fake");
    let edits = app.expect(telegram.try_wait_for_edits(1, WAIT).await);

    assert_eq!(
        edits[0].message_id, sent[0].message_id,
        "the reply is edited: {edits:#?}"
    );
    assert_eq!(edits[0].text, "The ferry comes back at noon.");
    let now = telegram.sent_messages();
    assert_eq!(now.len(), 1, "no second message: {now:#?}");
    assert_eq!(now[0].text, "The ferry comes back at noon.");
    let said = openai
        .last_request()
        .and_then(|r| r.last_user_message().map(str::to_string))
        .unwrap_or_default();
    assert!(said.contains("when does the ferry come back?"), "{said}");
    let memory = remembered_of(&app, "Tess", "telegram:501").await.join("\n");
    assert!(
        memory.contains("come back") && !memory.contains("nine"),
        "{memory}"
    );
}

/// The texts `agent` remembers of `room`, oldest first.
async fn remembered_of(app: &TestApp, agent: &str, room: &str) -> Vec<String> {
    let (status, body) = app
        .get(&format!("/api/agents/{agent}/rooms/{room}/memories"))
        .await;
    assert!(status.is_success(), "{status}: {body}");
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["text"].as_str().map(str::to_string))
        .collect()
}
