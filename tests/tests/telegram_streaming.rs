//! Live replies on Telegram (issue 32, docs/media.md "Streaming"), end to end: the real
//! `troupe run`, the fake OpenAI streaming its answer a piece at a time, and the fake Bot API.
//!
//! - In a group: one `sendMessage`, then `editMessageText` of that message as the answer
//!   grows, no two edits closer than `TROUPE_STREAM_EDIT_MS`, the last text the whole
//!   answer; a 429 on an edit is waited out and the whole answer still arrives, once; past
//!   4,096 characters the text continues in a new message; killed mid-stream (SIGKILL) and
//!   started again, the reply is finished in its one message.
//! - In a private chat: `sendMessageDraft` previews, then one `sendMessage`, no edit.

use std::time::Duration;

use serde_json::Value;
use troupe_e2e::fake_telegram::{Edit, FakeTelegram, SentMessage, tg};
use troupe_e2e::streams::{self, long_answer};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, WAIT};

const AGENT: &str = "Tess";
const GROUP: i64 = -100_900;
/// The edit pace the tests run with (Telegram's own pace, one message a second in a chat,
/// holds as well).
const EDIT_MS: u64 = 300;
/// Between two pieces of a streamed answer.
const GAP: Duration = Duration::from_millis(60);

fn character(telegram: &FakeTelegram) -> Value {
    telegram.persona(AGENT, "Tess keeps the night ferry's logbook.")
}

async fn spawn(telegram: &FakeTelegram, openai: &FakeOpenAi) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character(telegram))
            .openai(openai)
            .env("TROUPE_STREAM_EDIT_MS", &EDIT_MS.to_string())
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await
}

fn ask_in_group(telegram: &FakeTelegram, text: &str) -> i64 {
    telegram.push_message(tg::mentioning(
        tg::text(
            tg::supergroup(GROUP, "Ferry crew"),
            tg::user(501, "Ann"),
            &format!("@tess_bot {text}"),
        ),
        "tess_bot",
    ))
}

/// Waits until the bot's messages, as they read now, are `expected` (joined by spaces).
async fn shown(app: &TestApp, telegram: &FakeTelegram, expected: &str) -> Vec<SentMessage> {
    let waited = telegram
        .try_wait_for_state("the streamed reply, whole", WAIT, |sent| {
            joined(sent) == expected
        })
        .await;
    app.expect(waited)
}

fn joined(sent: &[SentMessage]) -> String {
    streams::joined(sent.iter().map(|m| m.text.as_str()))
}

/// No two edits of one message closer than the pace.
fn assert_paced(edits: &[Edit]) {
    let times: Vec<_> = edits.iter().map(|e| (e.message_id, e.at)).collect();
    streams::assert_paced(&times, EDIT_MS);
}

#[tokio::test]
async fn a_group_reply_is_one_message_edited_until_it_is_whole() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(120);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = spawn(&telegram, &openai).await;

    let asked = ask_in_group(&telegram, "tell me about the strait");
    let sent = shown(&app, &telegram, &answer).await;
    assert_eq!(sent.len(), 1, "one message: {sent:#?}");
    assert_eq!(telegram.send_attempts(), 1, "{:#?}", telegram.calls());
    assert_eq!(sent[0].reply_to_message_id(), Some(asked));
    let edits = telegram.edits();
    assert!(
        !edits.is_empty() && edits.iter().all(|e| e.message_id == sent[0].message_id),
        "the reply grows by edits of its one message: {edits:#?}"
    );
    assert_eq!(edits.last().map(|e| e.text.as_str()), Some(answer.as_str()));
    // The first text was posted before the answer was whole: a prefix of it.
    let first = &telegram.calls_to("sendMessage")[0].params["text"];
    let first = first.as_str().unwrap_or_default();
    assert!(answer.starts_with(first) && first != answer, "{first}");
    assert_paced(&edits);
    assert!(
        telegram.calls_to("sendMessageDraft").is_empty(),
        "no drafts in a group"
    );
    assert!(!telegram.chat_actions().is_empty(), "typing showed first");
}

#[tokio::test]
async fn a_rate_limited_edit_is_waited_out_and_the_whole_answer_arrives_once() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(120);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = spawn(&telegram, &openai).await;
    telegram.fail_edits_after(0, 1, 1);

    ask_in_group(&telegram, "and the tides?");
    let sent = shown(&app, &telegram, &answer).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(telegram.send_attempts(), 1, "one message, never a copy");
    assert_eq!(telegram.rate_limited_edits(), 1, "the 429 was met");
    assert_eq!(sent[0].text, answer);
    let finals = telegram.edits().iter().filter(|e| e.text == answer).count();
    assert_eq!(finals, 1, "the whole answer arrived once");
    assert_paced(&telegram.edits());
}

#[tokio::test]
async fn past_4096_characters_the_stream_continues_in_a_new_message() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    // About 5,900 characters, quickly.
    let answer = long_answer(800);
    openai.push(Script::paced(answer.clone(), Duration::from_millis(4)));
    let app = spawn(&telegram, &openai).await;

    ask_in_group(&telegram, "tell me everything");
    let sent = shown(&app, &telegram, &answer).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent.iter().all(|m| m.text.chars().count() <= 4096));
    assert!(telegram.deleted().is_empty());
}

#[tokio::test]
async fn killed_mid_stream_and_started_again_the_group_reply_is_still_one_message() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(60);
    // The first run's model stops after some pieces; the run is killed there. Driven again
    // at the next start, the turn gets the whole answer.
    openai.push(Script::stalled(answer.clone(), GAP, 12));
    openai.push(Script::paced(answer.clone(), GAP));
    let mut app = spawn(&telegram, &openai).await;

    ask_in_group(&telegram, "what happened to the old keeper?");
    // Killed once the message has been edited: its id was kept by then. (Telegram has no
    // nonce: a kill between the `sendMessage` and that one database write could leave a
    // stray message; docs/media.md says so.)
    app.expect(telegram.try_wait_for_edits(1, WAIT).await);
    let partial = telegram.sent_messages();
    assert_eq!(partial.len(), 1);
    assert!(answer.starts_with(partial[0].text.as_str()));
    app.kill().await;
    app.start_again().await;

    let sent = shown(&app, &telegram, &answer).await;
    assert_eq!(sent.len(), 1, "never a second copy: {sent:#?}");
    assert_eq!(sent[0].message_id, partial[0].message_id);
    assert!(telegram.deleted().is_empty());
}

#[tokio::test]
async fn a_private_chat_sees_drafts_then_one_message() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(120);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = spawn(&telegram, &openai).await;

    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "tell me about the strait",
    ));
    let sent = shown(&app, &telegram, &answer).await;
    assert_eq!(sent.len(), 1);
    assert!(!telegram.calls_to("sendMessageDraft").is_empty());
    assert!(telegram.edits().is_empty(), "a private chat is not edited");
}
