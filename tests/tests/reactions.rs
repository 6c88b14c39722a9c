//! Reactions, end to end (issue 32, item 5): the real `troupe run` against the fake Discord
//! and Telegram (extended as the platforms document reactions) and the fake OpenAI.
//!
//! - `TROUPE_ACK_REACTION`: while the model is held (a gate the test opens), the persona's
//!   👀 is on the message it is answering and nothing is sent yet; once the reply is sent,
//!   the 👀 is taken back (Discord `PUT`/`DELETE …/reactions/{emoji}/@me`, Telegram
//!   `setMessageReaction` with the emoji, then with none).
//! - 👍 on a persona's reply is recorded as feedback: counted in `/metrics`
//!   (`troupe_feedback_total`), shown on the reply in the room's history
//!   (`GET …/memories`) and in the reply's "why" panel; a reaction on a message that is not
//!   a persona's reply is ignored.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{Author, FakeDiscord, NewMessage};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, Gate, Script, TestApp, TestAppOptions, eventually};

/// A hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// `/metrics`, as text.
async fn metrics(app: &TestApp) -> String {
    let response = app.client().get(app.url("/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

/// The room's history through the console's API.
async fn history(app: &TestApp, agent: &str, room: &str) -> Vec<Value> {
    let (status, body) = app
        .get(&format!(
            "/api/agents/{agent}/rooms/{room}/memories?limit=50"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// The feedback the history shows on the persona's replies, in order.
async fn feedback_in_history(app: &TestApp, agent: &str, room: &str) -> Vec<Value> {
    history(app, agent, room)
        .await
        .into_iter()
        .filter(|m| m["fromAgent"] == true)
        .map(|m| m["feedback"].clone())
        .collect()
}

/// Dot on the fake Discord, acknowledging with 👀 while it answers; ready.
async fn dot_acknowledging(discord: &FakeDiscord, openai: &FakeOpenAi) -> TestApp {
    let character = discord.persona("Dot", "Dot answers briefly.");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", character)
            .openai(openai)
            .env("TROUPE_ACK_REACTION", "👀"),
    )
    .await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    app
}

/// The 👀 was put on the question before the reply was posted, and taken back after.
fn assert_acknowledged_around_the_reply(discord: &FakeDiscord) {
    let order: Vec<String> = discord
        .requests()
        .iter()
        .filter(|r| r.path.contains("/reactions/") || r.method == "POST")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let put = order.iter().position(|r| r.starts_with("PUT")).unwrap();
    let post = order
        .iter()
        .position(|r| r.starts_with("POST /channels/"))
        .unwrap();
    let delete = order.iter().position(|r| r.starts_with("DELETE")).unwrap();
    assert!(put < post && post < delete, "{order:?}");
    assert!(
        order[put].ends_with("/reactions/%F0%9F%91%80/@me"),
        "{order:?}"
    );
}

/// 👍 on the question (not a reply) is ignored; 👍 on the reply is feedback: in the
/// history, the metrics and the why panel, and on no message of the user's.
async fn a_thumbs_up_on_the_reply_is_feedback(
    app: &TestApp,
    discord: &FakeDiscord,
    channel: &str,
    question: &str,
    reply: &str,
) {
    discord.send_reaction(channel, question, Author::person("bob"), "👍", true);
    discord.send_reaction(channel, reply, Author::person("alice"), "👍", true);
    let room = format!("discord:{channel}");
    eventually("the 👍 on the reply in the history", WAIT, || async {
        feedback_in_history(app, "Dot", &room).await == vec![json!({"up": 1, "down": 0})]
    })
    .await;
    let lines = metrics(app).await;
    assert!(
        lines
            .lines()
            .any(|l| l.starts_with("troupe_feedback_total{")
                && l.contains("value=\"up\"")
                && l.ends_with(" 1")),
        "{lines}"
    );
    let (status, why) = app
        .get(&format!(
            "/api/agents/Dot/rooms/{room}/messages/{question}/why"
        ))
        .await;
    assert_eq!(status, 200, "{why}");
    assert_eq!(why["feedback"], json!({"up": 1, "down": 0}));
    let asked = history(app, "Dot", &room).await;
    assert!(
        asked
            .iter()
            .all(|m| m["fromAgent"] == true || m.get("feedback").is_none()),
        "{asked:?}"
    );
}

#[tokio::test]
async fn discord_acknowledges_while_answering_and_records_a_thumbs_up_on_the_reply() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = dot_acknowledging(&discord, &openai).await;
    let channel = "410000000000000007";
    let gate = Gate::new();
    openai.push(Script::Gated(
        gate.clone(),
        Box::new(Script::reply("Forty-two.")),
    ));
    let question = discord.send_message_create(
        NewMessage::guild(channel, Author::person("alice"), "what is the answer?").mentioning_bot(),
    );

    // While the model is held: the 👀 is on the question, and nothing is sent.
    if let Err(e) = discord
        .try_wait_for_own_reactions("the 👀 on the question", WAIT, |r| {
            r.iter().any(|r| r.added && r.message == question)
        })
        .await
    {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    assert_eq!(discord.reactions_on(&question), vec!["👀".to_string()]);
    assert!(
        discord.sent_messages().is_empty(),
        "{:?}",
        discord.sent_messages()
    );

    // The reply is sent, then the 👀 is taken back.
    gate.open();
    let sent = discord.wait_for_sent(1, WAIT).await;
    if let Err(e) = discord
        .try_wait_for_own_reactions("the 👀 taken back", WAIT, |r| r.iter().any(|r| !r.added))
        .await
    {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    assert!(discord.reactions_on(&question).is_empty());
    assert_acknowledged_around_the_reply(&discord);
    a_thumbs_up_on_the_reply_is_feedback(&app, &discord, channel, &question, &sent[0].id).await;
    let room = format!("discord:{channel}");

    // Taking the 👍 back takes the feedback back.
    discord.send_reaction(channel, &sent[0].id, Author::person("alice"), "👍", false);
    eventually("the 👍 taken back", WAIT, || async {
        feedback_in_history(&app, "Dot", &room).await == vec![Value::Null]
    })
    .await;
}

#[tokio::test]
async fn telegram_acknowledges_while_answering_and_a_reaction_on_a_non_reply_is_ignored() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let character = telegram.persona("Tess", "Tess answers briefly.");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(&openai)
            .env("TROUPE_ACK_REACTION", "👀"),
    )
    .await;
    let (chat, ann) = (|| tg::private_chat(501, "Ann"), || tg::user(501, "Ann"));
    let gate = Gate::new();
    openai.push(Script::Gated(
        gate.clone(),
        Box::new(Script::reply("Forty-two.")),
    ));
    let question = telegram.push_message(tg::text(chat(), ann(), "what is the answer?"));

    // While the model is held: the 👀 is on the question, and nothing is sent.
    telegram.wait_for_calls("setMessageReaction", 1, WAIT).await;
    assert_eq!(telegram.bot_reaction(501, question).as_deref(), Some("👀"));
    assert!(telegram.sent_messages().is_empty());

    // The reply is sent, then the 👀 is taken back (an empty list).
    gate.open();
    let sent = telegram.wait_for_sent(1, WAIT).await;
    telegram.wait_for_calls("setMessageReaction", 2, WAIT).await;
    assert_eq!(telegram.bot_reaction(501, question), None);
    let order: Vec<String> = telegram
        .calls()
        .iter()
        .map(|c| c.method.to_ascii_lowercase())
        .filter(|m| m == "sendmessage" || m == "setmessagereaction")
        .collect();
    assert_eq!(
        order,
        ["setmessagereaction", "sendmessage", "setmessagereaction"]
    );
    // The bot asked for reactions.
    let polls = telegram.calls_to("getUpdates");
    let asked = &polls.last().unwrap().params["allowed_updates"];
    assert!(asked.to_string().contains("message_reaction"), "{asked}");

    // 👍 on Ann's own question: not a reply, ignored. Updates are taken in order, so once
    // the next one (👎 on the reply) is recorded, the first was handled too.
    telegram.push_reaction(chat(), question, ann(), &[], &["👍"]);
    telegram.push_reaction(chat(), sent[0].message_id, ann(), &[], &["👎"]);
    let room = "telegram:501";
    eventually("the 👎 on the reply in the history", WAIT, || async {
        feedback_in_history(&app, "Tess", room).await == vec![json!({"up": 0, "down": 1})]
    })
    .await;
    // A change of mind: the latest wins, one per person.
    telegram.push_reaction(chat(), sent[0].message_id, ann(), &["👎"], &["👍"]);
    eventually("the 👍 replacing the 👎", WAIT, || async {
        feedback_in_history(&app, "Tess", room).await == vec![json!({"up": 1, "down": 0})]
    })
    .await;
    let lines = metrics(&app).await;
    for value in ["up", "down"] {
        assert!(
            lines
                .lines()
                .any(|l| l.starts_with("troupe_feedback_total{")
                    && l.contains(&format!("value=\"{value}\""))
                    && l.ends_with(" 1")),
            "{lines}"
        );
    }
    let messages = history(&app, "Tess", room).await;
    assert!(
        messages
            .iter()
            .filter(|m| m["fromAgent"] == false)
            .all(|m| m.get("feedback").is_none()),
        "{messages:?}"
    );
}
