//! End-to-end tests of the Discord connector: the real `troupe run`, a persona with
//! `"clients": ["discord"]`, the fake Discord (REST and gateway) for the platform and the
//! fake OpenAI for the model. The tests talk to the gateway only through the fakes.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{
    APPLICATION_ID, Author, FakeDiscord, NewMessage, SentMessage, TOKEN,
};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const AGENT: &str = "Dot";
const BIO: &str = "Dot is a lighthouse keeper who answers questions about the coast.";
/// Generous: a debug binary on a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(60);
const CHANNEL: &str = "410000000000000001";

/// Dot on Discord, pointed at `discord`.
fn dot(discord: &FakeDiscord, mentions_only: bool) -> Value {
    let mut character = persona_json(AGENT, BIO);
    character["clients"] = json!(["discord"]);
    character["clientConfig"] = json!({"discord": {"shouldRespondOnlyToMentions": mentions_only}});
    character["settings"]["secrets"] = json!({
        "DISCORD_API_TOKEN": TOKEN,
        "DISCORD_API_URL": discord.url(),
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
    });
    character
}

/// The app, serving, with the bot connected to the fake gateway.
async fn spawn(discord: &FakeDiscord, openai: &FakeOpenAi, mentions_only: bool) -> TestApp {
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(discord, mentions_only))
            .openai(openai),
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

async fn sent(app: &TestApp, discord: &FakeDiscord, n: usize) -> Vec<SentMessage> {
    match discord.try_wait_for_sent(n, WAIT).await {
        Ok(s) => s,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    }
}

fn alice() -> Author {
    Author::person("alice")
}

fn mention(text: &str) -> NewMessage {
    NewMessage::guild(CHANNEL, alice(), text).mentioning_bot()
}

#[tokio::test]
async fn a_mention_gets_a_native_reply() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The lamp is lit at dusk.");
    let app = spawn(&discord, &openai, false).await;

    let asked = discord.send_message_create(mention("when is the lamp lit?"));
    let out = sent(&app, &discord, 1).await;
    assert_eq!(out[0].content, "The lamp is lit at dusk.");
    assert_eq!(out[0].channel, CHANNEL);
    assert_eq!(out[0].reply_to.as_deref(), Some(asked.as_str()));
    assert_eq!(out[0].fail_if_not_exists, Some(false));
    let prompt = openai.requests()[0].prompt_text();
    assert!(prompt.contains("when is the lamp lit?"), "{prompt}");
    assert!(
        discord.typing_calls().iter().any(|c| c == CHANNEL),
        "no typing indicator: {:?}",
        discord.typing_calls()
    );
    // Every REST call carried the bot token.
    assert!(
        discord.requests().iter().all(|r| r.authorized),
        "{:#?}",
        discord.requests()
    );
    // The token never reaches the logs.
    assert!(
        !app.logs().contains(TOKEN),
        "the token leaked into the logs"
    );
    assert!(
        app.logs().contains("permissions=70644159056960"),
        "the invite URL was not logged"
    );
}

#[tokio::test]
async fn a_direct_message_gets_a_reply() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Hello, Bob.");
    let app = spawn(&discord, &openai, true).await;

    let dm = "510000000000000001";
    discord.send_message_create(NewMessage::dm(dm, Author::person("bob"), "hello there"));
    let out = sent(&app, &discord, 1).await;
    assert_eq!(out[0].channel, dm);
    assert_eq!(out[0].content, "Hello, Bob.");
}

#[tokio::test]
async fn unmentioned_messages_and_other_bots_get_no_reply_in_mention_only_mode() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Yes, I am here.");
    let app = spawn(&discord, &openai, true).await;

    discord.send_message_create(NewMessage::guild(CHANNEL, alice(), "lovely weather, Dot"));
    discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::bot("gull-bot"), "hey there").mentioning_bot(),
    );
    let asked = discord.send_message_create(mention("are you there?"));
    let out = sent(&app, &discord, 1).await;
    assert_eq!(out[0].reply_to.as_deref(), Some(asked.as_str()), "{out:#?}");
    assert_eq!(out[0].content, "Yes, I am here.");
    // One model call: the unmentioned message and the bot's were not answered.
    assert_eq!(openai.request_count(), 1, "{:#?}", openai.requests());
    assert_eq!(discord.sent_messages().len(), 1);
}

fn long_answer() -> String {
    // About 4,500 characters of sentences.
    let sentence = "The keeper climbs the tower stairs and trims the wick before nightfall. ";
    sentence
        .repeat(4500 / sentence.len() + 1)
        .trim()
        .to_string()
}

#[tokio::test]
async fn a_long_answer_arrives_as_three_messages_in_order() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = long_answer();
    assert!((4400..4700).contains(&answer.chars().count()));
    openai.push_reply(answer.clone());
    let app = spawn(&discord, &openai, false).await;

    let asked = discord.send_message_create(mention("tell me everything"));
    let out = sent(&app, &discord, 3).await;
    assert_eq!(out.len(), 3, "{out:#?}");
    assert!(out.iter().all(|m| m.content.chars().count() <= 2000));
    assert_eq!(out[0].reply_to.as_deref(), Some(asked.as_str()));
    assert!(out[1].reply_to.is_none() && out[2].reply_to.is_none());
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let rejoined: Vec<String> = out.iter().flat_map(|m| words(&m.content)).collect();
    assert_eq!(rejoined, words(&answer));
}

#[tokio::test]
async fn a_429_is_waited_out_and_the_reply_delivered_once() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Patience, the fog will lift.");
    openai.push_reply("Second answer.");
    let app = spawn(&discord, &openai, false).await;

    discord.script_429(1);
    let first = discord.send_message_create(mention("will the fog lift?"));
    sent(&app, &discord, 1).await;
    assert_eq!(discord.rate_limited(), 1);
    // A later message is answered after it, and the first reply was not sent twice.
    let second = discord.send_message_create(mention("and then?"));
    let out = sent(&app, &discord, 2).await;
    assert_eq!(out.len(), 2, "{out:#?}");
    assert_eq!(out[0].reply_to.as_deref(), Some(first.as_str()));
    assert_eq!(out[0].content, "Patience, the fog will lift.");
    assert_eq!(out[1].reply_to.as_deref(), Some(second.as_str()));
}

#[tokio::test]
async fn a_dropped_gateway_resumes_and_answers_what_was_said_meanwhile() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Still here.");
    openai.push_reply("Back again.");
    let app = spawn(&discord, &openai, false).await;

    discord.drop_connection();
    let during = discord.send_message_create(mention("are you still there?"));
    discord.allow_reconnect();
    if let Err(e) = discord.try_wait_for_resumed(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    let out = sent(&app, &discord, 1).await;
    assert_eq!(out[0].reply_to.as_deref(), Some(during.as_str()));
    assert!(discord.replayed() >= 1, "nothing was replayed");
    assert_eq!(discord.identifies(), 1, "the session was not resumed");

    // RECONNECT (op 7) resumes too.
    discord.request_reconnect();
    if let Err(e) = discord.try_wait_for_resumed(2, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    let after = discord.send_message_create(mention("and now?"));
    let out = sent(&app, &discord, 2).await;
    assert_eq!(out[1].reply_to.as_deref(), Some(after.as_str()));
    assert_eq!(discord.identifies(), 1);
}

#[tokio::test]
async fn a_lost_session_catches_up_over_rest() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("First.");
    openai.push_reply("Caught up.");
    let app = spawn(&discord, &openai, false).await;

    // The channel becomes known.
    discord.send_message_create(mention("hello"));
    sent(&app, &discord, 1).await;
    // The session is lost while the bot is away: what is said meanwhile is not replayed.
    discord.drop_connection();
    discord.invalidate_session();
    let missed = discord.store_channel_message(mention("did you miss this?"));
    discord.allow_reconnect();
    ready(&app, &discord, 2).await;
    let out = sent(&app, &discord, 2).await;
    assert_eq!(
        out[1].reply_to.as_deref(),
        Some(missed.as_str()),
        "{out:#?}"
    );
    assert!(
        discord
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.contains("/messages?after=")),
        "no catch-up request"
    );
}

/// The channels and last message ids live in the gateway's `connector_state` table, so they
/// survive the restart.
#[tokio::test]
async fn a_message_sent_while_troupe_was_stopped_is_answered_once_after_it_starts() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("First.");
    openai.push_reply("Sorry I was away.");
    openai.push_reply("Third.");
    let mut app = spawn(&discord, &openai, false).await;

    discord.send_message_create(mention("hello"));
    sent(&app, &discord, 1).await;
    app.stop().await;
    let missed = discord.store_channel_message(mention("anyone home?"));
    app.start_again().await;
    ready(&app, &discord, 2).await;
    let out = sent(&app, &discord, 2).await;
    assert_eq!(
        out[1].reply_to.as_deref(),
        Some(missed.as_str()),
        "{out:#?}"
    );
    // Answered once: the next reply is to the next message.
    let next = discord.send_message_create(mention("and now?"));
    let out = sent(&app, &discord, 3).await;
    assert_eq!(out.len(), 3, "{out:#?}");
    assert_eq!(out[2].reply_to.as_deref(), Some(next.as_str()));
}
