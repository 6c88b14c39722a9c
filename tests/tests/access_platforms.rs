//! Access on Discord, and tools that follow trust (issue 44, docs/access.md), end to end
//! through the real `troupe run`: under `allowlist` a listed user is answered and anyone
//! else is refused once, with no model call; under `disabled` no DM is answered and guild
//! channels are; a listen-only channel is remembered and never answered; with DMs `open`
//! and an MCP tool configured, a stranger's turn is offered no tools and a paired sender's
//! is.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{APPLICATION_ID, Author, FakeDiscord, NewMessage, TOKEN};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::gauges::{code_in, decided, pairing};
use troupe_e2e::mcp::{allowed_line, python, server_script, servers_settled};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(120);
const CHANNEL: &str = "410000000000000001";
const LISTEN: &str = "410000000000000002";
/// The id the fake Discord gives the first author who writes.
const FIRST_AUTHOR_ID: &str = "600000000000000100";

fn dot(discord: &FakeDiscord, settings: Value) -> Value {
    let mut c = persona_json("Dot", "Dot keeps the lighthouse.");
    c["clients"] = json!(["discord"]);
    c["settings"]["secrets"] = json!({
        "DISCORD_API_TOKEN": TOKEN,
        "DISCORD_API_URL": discord.url(),
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
    });
    if let Value::Object(extra) = settings {
        for (k, v) in extra {
            c["settings"][k] = v;
        }
    }
    c
}

async fn spawn_dot(discord: &FakeDiscord, model: &FakeOpenAi, settings: Value) -> TestApp {
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(discord, settings))
            .openai(model),
    )
    .await;
    app.expect(discord.try_wait_for_ready(1, WAIT).await);
    app
}

#[tokio::test]
async fn discord_allowlist_answers_the_listed_and_refuses_the_rest_without_the_model() {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({
        "DISCORD_DM_POLICY": "allowlist",
        "DISCORD_ALLOW_FROM": FIRST_AUTHOR_ID,
    });
    let app = spawn_dot(&discord, &model, settings).await;

    model.push_reply("Hello, Alice.");
    discord.send_message_create(NewMessage::dm(
        "510000000000000001",
        Author::person("alice"),
        "hi",
    ));
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    assert_eq!(discord.user_id("alice").as_deref(), Some(FIRST_AUTHOR_ID));
    assert_eq!(sent[0].content, "Hello, Alice.");

    let bob_dm = "510000000000000002";
    discord.send_message_create(NewMessage::dm(bob_dm, Author::person("bob"), "hi"));
    let sent = app.expect(discord.try_wait_for_sent(2, WAIT).await);
    assert_eq!(sent[1].channel, bob_dm);
    assert!(sent[1].content.contains("only talk"), "{}", sent[1].content);
    // Bob again within the hour: nothing at all.
    discord.send_message_create(NewMessage::dm(bob_dm, Author::person("bob"), "please?"));
    decided(&app, "discord", "ignored", 2, WAIT).await;
    assert_eq!(discord.sent_messages().len(), 2);
    assert_eq!(model.request_count(), 1);
    assert!(!model.requests()[0].prompt_text().contains("please?"));
}

#[tokio::test]
async fn discord_disabled_dms_are_refused_guilds_answered_and_listen_only_kept_silent() {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let settings = json!({
        "DISCORD_DM_POLICY": "disabled",
        "DISCORD_LISTEN_CHANNEL_IDS": [LISTEN],
    });
    let app = spawn_dot(&discord, &model, settings).await;

    discord.send_message_create(NewMessage::dm(
        "510000000000000003",
        Author::person("carol"),
        "hi",
    ));
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    assert!(
        sent[0].content.contains("direct messages"),
        "{}",
        sent[0].content
    );

    // A listen-only channel: remembered, not answered, even when mentioned.
    let heard = "the fog bell rang twice";
    discord.send_message_create(
        NewMessage::guild(LISTEN, Author::person("carol"), heard).mentioning_bot(),
    );
    decided(&app, "discord", "ignored", 2, WAIT).await;
    let (_, memories) = app
        .get(&format!("/api/agents/dot/rooms/discord:{LISTEN}/memories"))
        .await;
    assert!(memories.to_string().contains(heard), "{memories}");

    model.push_reply("The lamp is lit.");
    discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::person("carol"), "lamp?").mentioning_bot(),
    );
    let sent = app.expect(discord.try_wait_for_sent(2, WAIT).await);
    assert_eq!(sent[1].content, "The lamp is lit.");
    assert_eq!(sent[1].channel, CHANNEL);
    assert_eq!(model.request_count(), 1);
    assert_eq!(discord.sent_messages().len(), 2);
}

/// Tess on Telegram with the MCP test server, and `settings` added.
fn tess_with_tools(telegram: &FakeTelegram, python: &str) -> Value {
    let mut c = persona_json("Tess", "Tess keeps the launch codes.");
    c["clients"] = json!(["telegram"]);
    c["settings"]["secrets"] = json!({
        "TELEGRAM_BOT_TOKEN": telegram.token(),
        "TELEGRAM_API_ROOT": telegram.api_root(),
    });
    c["settings"]["mcp"] = json!({"servers": {"station": {"type": "stdio", "command": python,
        "args": [server_script()], "env": {"TEST_MARK": "given"}, "timeout": 30}}});
    c
}

#[tokio::test]
async fn tools_are_offered_in_dms_to_the_paired_and_not_to_strangers() {
    let Some(python) = python() else { return };
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("tess.json", tess_with_tools(&telegram, &python))
        .openai(&model)
        .env("TROUPE_MCP_COMMANDS", &allowed_line(&python))
        .env("TROUPE_MCP_ENV", "TEST_MARK")
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0");
    // Ann pairs while DMs are under `pairing`.
    let mut app = TestApp::spawn(options.clone().env("TELEGRAM_DM_POLICY", "pairing")).await;
    let dm =
        |user: i64, text: &str| tg::text(tg::private_chat(user, "P"), tg::user(user, "P"), text);
    telegram.push_message(dm(601, "hello"));
    let code = code_in(&app.expect(telegram.try_wait_for_sent(1, WAIT).await)[0].text);
    let (ok, out) = pairing(&app, &["approve", &code], &[]).await;
    assert!(ok, "{out}");
    app.stop().await;

    // DMs open: a stranger is answered without tools, Ann with them.
    let app = TestApp::spawn(app.replica_options().env("TELEGRAM_DM_POLICY", "open")).await;
    servers_settled(&app, "tess").await;
    model.push_reply("Hello, stranger.");
    telegram.push_message(dm(602, "what can you do?"));
    app.expect(telegram.try_wait_for_sent(2, WAIT).await);
    model.push_reply("Hello, Ann.");
    telegram.push_message(dm(601, "what can you do?"));
    app.expect(telegram.try_wait_for_sent(3, WAIT).await);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[0].tool_names().is_empty(),
        "{:?}",
        requests[0].body["tools"]
    );
    assert!(
        requests[1]
            .tool_names()
            .contains(&"station__lookup".to_string()),
        "{:?}",
        requests[1].body["tools"]
    );
}
