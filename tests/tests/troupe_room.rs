//! End-to-end tests of a troupe in one room (issue 15, docs/rooms.md "A troupe in one
//! room"): two personas, Ada and Bea, each with its own bot token, gateway session and user
//! on the fake Discord, in one guild channel, through the real `troupe run` binary.
//!
//! "No further reply" is never waited out with a timer: a persona records a message it
//! decides on in the room's memory in the same step as its reply (or alone, when it stays
//! silent), and the model call comes before that, so once both personas remember a message
//! the replies and model calls it caused are counted. Memory upkeep is off, so every model
//! call counted is a reply.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{Author, FakeBot, FakeDiscord, NewMessage, SentMessage};
use troupe_e2e::fake_openai::Script;
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);
const CHANNEL: &str = "410000000000000077";
const ADA_BIO: &str = "Ada pilots the harbour tug and reads the tides.";
const BEA_BIO: &str = "Bea mends the nets and knows every knot.";

fn room() -> String {
    format!("discord:{CHANNEL}")
}

fn persona(name: &str, bio: &str, topics: &[&str], bot: &FakeBot, discord: &FakeDiscord) -> Value {
    let mut c = persona_json(name, bio);
    c["clients"] = json!(["discord"]);
    c["topics"] = json!(topics);
    c["settings"]["secrets"] = json!({
        "DISCORD_API_TOKEN": bot.token,
        "DISCORD_API_URL": discord.url(),
    });
    c
}

struct Troupe {
    discord: FakeDiscord,
    model: FakeOpenAi,
    app: TestApp,
    ada: FakeBot,
    bea: FakeBot,
}

impl Troupe {
    async fn start() -> Self {
        let discord = FakeDiscord::start().await;
        let ada = FakeBot::primary();
        let bea = discord.add_bot("b3a-t0k3n", "900000000000000055", "bea");
        let model = FakeOpenAi::start().await;
        let app = TestApp::spawn(
            TestAppOptions::new(Backend::Sqlite)
                .persona_file(
                    "ada.json",
                    persona("Ada", ADA_BIO, &["tides"], &ada, &discord),
                )
                .persona_file(
                    "bea.json",
                    persona("Bea", BEA_BIO, &["knots"], &bea, &discord),
                )
                .openai(&model)
                .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
                .env("TROUPE_MEMORY_FACTS_EVERY", "0")
                .env("TROUPE_RATE_API_PER_MIN", "0"),
        )
        .await;
        // Both bots identified: each has its own session.
        app.expect(discord.try_wait_for_ready(2, WAIT).await);
        Troupe {
            discord,
            model,
            app,
            ada,
            bea,
        }
    }

    async fn follow(&self, agent: &str) {
        let (status, answer) = self
            .app
            .post_json(
                &format!("/api/agents/{agent}/rooms/{}/commands", room()),
                &json!({"command": "/follow"}),
                None,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    fn say(&self, text: &str) -> String {
        self.discord
            .send_message_create(NewMessage::guild(CHANNEL, Author::person("sam"), text))
    }

    async fn sent(&self, n: usize) -> Vec<SentMessage> {
        self.app
            .expect(self.discord.try_wait_for_sent(n, WAIT).await)
    }

    /// The messages `agent` remembers of the room.
    async fn memory(&self, agent: &str) -> Vec<Value> {
        let (_, body) = self
            .app
            .get(&format!("/api/agents/{agent}/rooms/{}/memories", room()))
            .await;
        body["messages"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `agent` remembers `text` in the room: it has decided on that message.
    async fn remembered(&self, agent: &str, text: &str) {
        troupe_e2e::eventually(&format!("`{text}` in {agent}'s memory"), WAIT, || async {
            troupe_e2e::json_contains_text(&Value::Array(self.memory(agent).await), text)
        })
        .await;
    }

    /// Waits until both personas remember `text`.
    async fn both_remember(&self, text: &str) {
        self.remembered("ada", text).await;
        self.remembered("bea", text).await;
    }
}

#[tokio::test]
async fn an_addressed_message_is_answered_by_the_addressee_only() {
    let t = Troupe::start().await;
    // Both follow the room: each would answer anything, were it not for the arbiter.
    t.follow("ada").await;
    t.follow("bea").await;
    t.model.push_reply("The bowline, every time.");
    t.discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::person("sam"), "which knot for a mooring?")
            .mentioning(&t.bea),
    );
    let sent = t.sent(1).await;
    assert_eq!(sent[0].author_id, t.bea.id, "Bea answers: {sent:#?}");
    t.both_remember("which knot for a mooring?").await;
    // Ada hears Bea's answer as room history, with Bea's name, and stays silent.
    t.remembered("ada", "The bowline, every time.").await;
    let heard = t.memory("ada").await;
    assert!(
        heard
            .iter()
            .any(|m| m["text"] == "The bowline, every time." && m["authorName"] == "bea"),
        "{heard:#?}"
    );
    assert_eq!(t.discord.sent_messages().len(), 1, "one reply");
    assert_eq!(t.model.request_count(), 1, "one model call");

    // Sam turns to Ada, who becomes the room's last addressed...
    t.model.push_reply("The tide is kind to moorings today.");
    t.discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::person("sam"), "and the tide?").mentioning(&t.ada),
    );
    let sent = t.sent(2).await;
    assert_eq!(sent[1].author_id, t.ada.id, "Ada answers: {sent:#?}");
    t.remembered("bea", "The tide is kind to moorings today.")
        .await;
    // ...then replies to Bea's message, without her name or a mention: it is addressed to
    // Bea (the last addressed would be Ada), and only Bea answers. Ada hears it first (Bea's
    // link is held), so it is Ada's arbiter that must know the reply is to Bea.
    t.model.push_reply("A cleat hitch, then.");
    t.discord.hold_bot(&t.bea);
    t.discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::person("sam"), "and on a cleat?")
            .replying_to(&sent[0].id),
    );
    t.remembered("ada", "and on a cleat?").await;
    assert_eq!(t.model.request_count(), 2, "Ada left it to Bea");
    t.discord.release_bot(&t.bea);
    let sent = t.sent(3).await;
    assert_eq!(sent[2].author_id, t.bea.id, "Bea answers: {sent:#?}");
    t.both_remember("and on a cleat?").await;
    t.remembered("ada", "A cleat hitch, then.").await;
    assert_eq!(t.discord.sent_messages().len(), 3, "one reply each");
    assert_eq!(t.model.request_count(), 3);
}

#[tokio::test]
async fn an_unaddressed_message_in_follow_mode_gets_exactly_one_reply() {
    let t = Troupe::start().await;
    t.follow("ada").await;
    t.follow("bea").await;
    t.model.push_reply("Grey indeed, and the glass is falling.");
    t.say("what a grey morning");
    let sent = t.sent(1).await;
    t.both_remember("what a grey morning").await;
    t.both_remember("Grey indeed, and the glass is falling.")
        .await;
    assert_eq!(
        t.discord.sent_messages().len(),
        1,
        "exactly one reply: {sent:#?}"
    );
    assert_eq!(t.model.request_count(), 1, "exactly one model call");
    // Nobody was addressed, no topic fits: in turn, Ada (first by id) had this one.
    assert_eq!(sent[0].author_id, t.ada.id);

    // A message that names Bea's topic goes to Bea, still only to her.
    t.model.push_reply("A sheet bend joins two lines.");
    t.say("how do I join two lines with a knots trick?");
    let sent = t.sent(2).await;
    t.both_remember("how do I join two lines").await;
    t.both_remember("A sheet bend joins two lines.").await;
    assert_eq!(t.discord.sent_messages().len(), 2, "{sent:#?}");
    assert_eq!(t.model.request_count(), 2);
    assert_eq!(sent[1].author_id, t.bea.id);
}

#[tokio::test]
async fn a_persona_to_persona_exchange_stops_after_the_cap() {
    let t = Troupe::start().await;
    // Each persona's reply hands over to the other: Ada names Bea, and Bea's reply is a
    // reply to Ada's message (a reply-ping). Uncapped, they would talk forever.
    t.model.script_matching(
        |r| {
            r.system_prompt()
                .is_some_and(|s| s.contains("You are Ada."))
        },
        Script::reply("Bea, what do you make of it?"),
    );
    t.model.script_matching(
        |r| {
            r.system_prompt()
                .is_some_and(|s| s.contains("You are Bea."))
        },
        Script::reply("Ask the harbour master, Ada."),
    );
    t.discord.send_message_create(
        NewMessage::guild(CHANNEL, Author::person("sam"), "what is that buoy doing?")
            .mentioning(&t.ada),
    );
    // TROUPE_BOT_TURNS is 3: Ada (1), Bea (2), Ada (3), Bea answers Ada's third bot
    // message in a row as she counts it, and Ada, at her fourth, is silent.
    let sent = t.sent(4).await;
    let authors: Vec<&str> = sent.iter().map(|s| s.author_id.as_str()).collect();
    assert_eq!(
        authors,
        [&t.ada.id, &t.bea.id, &t.ada.id, &t.bea.id].map(String::as_str),
        "{sent:#?}"
    );
    // Ada has decided on Bea's last message: the human's, her two replies, Bea's two.
    troupe_e2e::eventually("Ada decided on Bea's second reply", WAIT, || async {
        t.memory("ada").await.len() >= 5
    })
    .await;
    assert_eq!(t.model.request_count(), 4, "0 further model calls");
    assert_eq!(t.discord.sent_messages().len(), 4, "silent after the cap");
}

/// Two personas in one room of the API: each message is posted to one of them, and the
/// other, present in the room, hears the exchange as room history with the names.
#[tokio::test]
async fn personas_in_one_web_room_hear_each_other_with_names() {
    let model = FakeOpenAi::start().await;
    model.push_reply("Morning, Sam.");
    model.push_reply("The tide turns at noon.");
    model.push_reply("Ada said noon.");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("ada.json", persona_json("Ada", ADA_BIO))
            .persona_file("bea.json", persona_json("Bea", BEA_BIO))
            .openai(&model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0")
            .env("TROUPE_RATE_API_PER_MIN", "0"),
    )
    .await;
    let say =
        |text: &str| json!({"roomId": "deck", "userId": "sam", "userName": "Sam", "text": text});
    let (status, body) = app.post_message("bea", &say("morning, Bea")).await;
    assert!(status.is_success(), "{body}");
    let (status, body) = app
        .post_message("ada", &say("Ada, when is the tide?"))
        .await;
    assert!(status.is_success(), "{body}");
    let (_, heard) = app.get("/api/agents/bea/rooms/deck/memories").await;
    let lines = heard["messages"].as_array().cloned().unwrap_or_default();
    assert!(
        lines
            .iter()
            .any(|m| m["text"] == "The tide turns at noon." && m["authorName"] == "Ada"),
        "{heard:#}"
    );
    assert!(
        lines.iter().any(|m| m["text"] == "Ada, when is the tide?"),
        "{heard:#}"
    );
    // And it is in Bea's next prompt.
    app.post_message("bea", &say("what did Ada say?")).await;
    let prompt = model.last_prompt_text();
    assert!(prompt.contains("The tide turns at noon."), "{prompt}");
    // A persona that never talked in the room hears nothing of it: Ada was not in "hold".
    let hold = |text: &str| json!({"roomId": "hold", "userId": "sam", "text": text});
    model.push_reply("Nets are dry.");
    app.post_message("bea", &hold("are the nets dry?")).await;
    let (_, ada_hold) = app.get("/api/agents/ada/rooms/hold/memories").await;
    assert!(
        !troupe_e2e::json_contains_text(&ada_hold, "Nets are dry."),
        "{ada_hold:#}"
    );
}
