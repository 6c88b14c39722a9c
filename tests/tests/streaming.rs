//! Live replies (issue 32, docs/media.md "Streaming"), end to end: the real `troupe run`,
//! the fake OpenAI streaming its answer a piece at a time, and the fake Discord and the
//! HTTP API showing it as it comes.
//!
//! - Discord: one created message, edited as the answer grows, no two edits closer than
//!   `TROUPE_STREAM_EDIT_MS`, its last state the whole answer; a 429 on an edit is waited
//!   out; past 2,000 characters the text continues in a new message; killed mid-stream
//!   (SIGKILL) and started again, the reply is finished in its one message.
//! - The API: `"stream": true` answers `text/event-stream` with the pieces as they come;
//!   `TROUPE_STREAM=off` asks the model for whole answers.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{Author, Edit, FakeDiscord, NewMessage, SentMessage};
use troupe_e2e::streams::{self, long_answer};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, WAIT, persona_json};

const AGENT: &str = "Dot";
const CHANNEL: &str = "410000000000000001";
/// The edit pace the Discord tests run with.
const EDIT_MS: u64 = 300;
/// Between two pieces of a streamed answer.
const GAP: Duration = Duration::from_millis(60);

fn dot(discord: &FakeDiscord) -> Value {
    discord.persona(AGENT, "Dot keeps the lighthouse.")
}

async fn on_discord(discord: &FakeDiscord, openai: &FakeOpenAi) -> TestApp {
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(discord))
            .openai(openai)
            .env("TROUPE_STREAM_EDIT_MS", &EDIT_MS.to_string())
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    ready(&app, discord, 1).await;
    app
}

async fn ready(app: &TestApp, discord: &FakeDiscord, n: usize) {
    if let Err(e) = discord.try_wait_for_ready(n, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
}

fn mention(text: &str) -> NewMessage {
    NewMessage::guild(CHANNEL, Author::person("alice"), text).mentioning_bot()
}

/// Waits until the bot's messages, as they are now, read `expected` (joined by spaces).
async fn shown(app: &TestApp, discord: &FakeDiscord, expected: &str) -> Vec<SentMessage> {
    let waited = discord
        .try_wait_for_state("the streamed reply, whole", WAIT, |sent, _| {
            joined(sent) == expected
        })
        .await;
    app.expect(waited)
}

fn joined(sent: &[SentMessage]) -> String {
    streams::joined(sent.iter().map(|m| m.content.as_str()))
}

/// No two edits of one message closer than the pace.
fn assert_paced(edits: &[Edit]) {
    let times: Vec<_> = edits.iter().map(|e| (e.message_id.clone(), e.at)).collect();
    streams::assert_paced(&times, EDIT_MS);
}

#[tokio::test]
async fn a_discord_reply_is_one_message_edited_until_it_is_whole() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(45);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = on_discord(&discord, &openai).await;

    discord.send_message_create(mention("tell me about the coast"));
    let sent = shown(&app, &discord, &answer).await;
    assert_eq!(sent.len(), 1, "one created message: {sent:#?}");
    let creates = discord
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/messages"))
        .count();
    assert_eq!(creates, 1, "{:#?}", discord.requests());
    let edits = discord.edits();
    assert!(
        !edits.is_empty() && edits.iter().all(|e| e.message_id == sent[0].id),
        "the reply grows by edits of its one message: {edits:#?}"
    );
    assert_eq!(
        edits.last().map(|e| e.content.as_str()),
        Some(answer.as_str())
    );
    // The first text was posted before the answer was whole: it is a prefix.
    let first = &edits[0].content;
    assert!(answer.starts_with(first.as_str()), "{first}");
    assert_paced(&edits);
    assert!(!discord.typing_calls().is_empty(), "typing showed first");
    // The model was asked to stream.
    assert!(openai.requests().iter().any(|r| r.stream));
}

#[tokio::test]
async fn a_rate_limited_edit_is_waited_out_and_the_whole_answer_still_arrives_once() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(30);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = on_discord(&discord, &openai).await;
    discord.script_edit_429(2);

    discord.send_message_create(mention("and the tides?"));
    let sent = shown(&app, &discord, &answer).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert!(discord.rate_limited() >= 1, "the 429s were met");
    assert_eq!(sent[0].content, answer);
    assert_paced(&discord.edits());
}

#[tokio::test]
async fn past_2000_characters_the_stream_continues_in_a_new_message() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    // About 2,900 characters.
    let answer = long_answer(400);
    openai.push(Script::paced(answer.clone(), Duration::from_millis(5)));
    let app = on_discord(&discord, &openai).await;

    discord.send_message_create(mention("tell me everything"));
    let sent = shown(&app, &discord, &answer).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent.iter().all(|m| m.content.chars().count() <= 2000));
}

#[tokio::test]
async fn killed_mid_stream_and_started_again_the_reply_is_still_one_message() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(30);
    // The first run's model stops after a few pieces; the run is killed there. Driven
    // again at the next start, the turn gets the whole answer.
    openai.push(Script::stalled(answer.clone(), GAP, 4));
    openai.push(Script::paced(answer.clone(), GAP));
    let mut app = on_discord(&discord, &openai).await;

    discord.send_message_create(mention("what happened to the old keeper?"));
    let partial = app.expect(
        discord
            .try_wait_for_state("a first text shown", WAIT, |sent, _| !sent.is_empty())
            .await,
    );
    assert!(answer.starts_with(partial[0].content.as_str()));
    app.kill().await;
    app.start_again().await;
    ready(&app, &discord, 2).await;

    let sent = shown(&app, &discord, &answer).await;
    assert_eq!(sent.len(), 1, "never a second copy: {sent:#?}");
    assert_eq!(sent[0].id, partial[0].id, "the shown message was finished");
    assert!(discord.deleted().is_empty());
}

// ---- the HTTP API ----

async fn on_web(openai: &FakeOpenAi, stream: &str) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona(AGENT, "Dot keeps the lighthouse.")
            .openai(openai)
            .env("TROUPE_STREAM", stream)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await
}

/// Posts `text` with `"stream": true` and reads the events: `(name, data)` in order.
async fn post_streamed(app: &TestApp, text: &str) -> (String, Vec<(String, Value)>) {
    let resp = app
        .client()
        .post(app.url(&format!("/api/agents/{AGENT}/messages")))
        .json(&json!({"text": text, "stream": true, "roomId": "r1"}))
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    let body = resp.text().await.expect("the stream");
    let events = body
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("");
            let data = e
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            (
                name.to_string(),
                serde_json::from_str(data).expect("JSON data"),
            )
        })
        .collect();
    (kind, events)
}

/// The texts of the `delta` events, in order.
fn deltas(events: &[(String, Value)]) -> Vec<&str> {
    events
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, d)| d["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_api_streams_the_reply_as_events_and_ends_with_the_whole_answer() {
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(30);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = on_web(&openai, "on").await;

    let (kind, events) = post_streamed(&app, "tell me a story").await;
    assert_eq!(kind, "text/event-stream");
    let deltas = deltas(&events);
    assert!(deltas.len() > 1, "the answer came in pieces: {events:#?}");
    assert_eq!(deltas.concat(), answer);
    let (last, reply) = events.last().unwrap();
    assert_eq!(last, "reply");
    assert_eq!(reply["replies"][0]["text"], answer.as_str());
    assert!(openai.requests()[0].stream);
}

#[tokio::test]
async fn with_streaming_off_the_model_is_asked_for_a_whole_answer() {
    let openai = FakeOpenAi::start().await;
    openai.push(Script::reply("The lamp is lit at dusk."));
    let app = on_web(&openai, "off").await;

    let (kind, events) = post_streamed(&app, "when is the lamp lit?").await;
    assert_eq!(kind, "text/event-stream");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["delta", "reply"], "{events:#?}");
    assert_eq!(events[0].1["text"], "The lamp is lit at dusk.");
    assert!(!openai.requests()[0].stream);
}

// ---- Telegram ----

#[tokio::test]
async fn a_telegram_private_reply_streams_as_drafts_then_one_message() {
    use troupe_e2e::fake_telegram::{FakeTelegram, tg};
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(30);
    openai.push(Script::paced(answer.clone(), GAP));
    let character = telegram.persona("Tess", "Tess keeps the ferry's logbook.");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(&openai)
            .env("TROUPE_STREAM_EDIT_MS", &EDIT_MS.to_string())
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "tell me about the ferry",
    ));
    let sent = app.expect(telegram.try_wait_for_sent(1, WAIT).await);
    assert_eq!(sent[0].text, answer);
    let drafts = telegram.calls_to("sendMessageDraft");
    assert!(
        !drafts.is_empty(),
        "drafts before the message: {:#?}",
        telegram.calls()
    );
    for draft in &drafts {
        assert_eq!(draft.status, 200, "{draft:?}");
        assert_eq!(draft.params["chat_id"], json!(501));
        let text = draft.params["text"].as_str().unwrap_or_default();
        assert!(answer.starts_with(text), "a draft is a prefix: {text}");
    }
    let ids: Vec<&Value> = drafts.iter().map(|d| &d.params["draft_id"]).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one draft, animated");
    assert_eq!(telegram.calls_to("sendMessage").len(), 1);
}

#[tokio::test]
async fn chat_completions_stream_the_models_pieces_as_chunks() {
    let openai = FakeOpenAi::start().await;
    let answer = long_answer(30);
    openai.push(Script::paced(answer.clone(), GAP));
    let app = on_web(&openai, "on").await;

    let resp = app
        .client()
        .post(app.url("/v1/chat/completions"))
        .json(&json!({
            "model": AGENT.to_lowercase(),
            "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "tell me a story"}],
        }))
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.expect("the stream");
    let datas: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data: "))
        .collect();
    assert_eq!(datas.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("a JSON chunk"))
        .collect();
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|p| !p.is_empty())
        .collect();
    assert!(pieces.len() > 1, "{body}");
    assert_eq!(pieces.concat(), answer);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks.last().unwrap()["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(openai.requests()[0].stream);
}

#[tokio::test]
async fn a_tool_turn_streams_the_text_written_after_its_last_tool_step() {
    let openai = FakeOpenAi::start().await;
    // The first step asks for a tool, streamed as OpenAI streams calls; the answer after it
    // streams in pieces.
    openai.push(Script::ToolCalls(vec![(
        "knowledge__search".into(),
        json!({"query": "lamp oil"}),
    )]));
    let answer = long_answer(30);
    openai.push(Script::paced(answer.clone(), GAP));
    let mut character = persona_json(AGENT, "Dot keeps the lighthouse.");
    character["knowledge"] = json!(["The lighthouse lamp burns colza oil, delivered each March."]);
    character["settings"]["troupe"] = json!({"tools": {"builtin": ["knowledge.search"]}});
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", character)
            .openai(&openai)
            .env("TROUPE_STREAM", "on")
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;

    let (_, events) = post_streamed(&app, "what oil does the lamp burn?").await;
    let deltas = deltas(&events);
    assert!(deltas.len() > 1, "the answer came in pieces: {events:#?}");
    assert_eq!(
        deltas.concat(),
        answer,
        "only the answer after the tool step"
    );
    let (last, reply) = events.last().unwrap();
    assert_eq!(last, "reply");
    assert_eq!(reply["replies"][0]["text"], answer.as_str());
    let requests = openai.requests();
    assert_eq!(requests.len(), 2, "one tool step, one answer");
    assert!(requests.iter().all(|r| r.stream), "both steps streamed");
    assert!(
        requests[0]
            .tool_names()
            .contains(&"knowledge__search".to_string())
    );
    let read_back: Vec<&str> = requests[1]
        .messages
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| m.content.as_str())
        .collect();
    assert!(
        read_back.iter().any(|t| t.contains("colza oil")),
        "the streamed call ran with its arguments: {read_back:?}"
    );
}
