//! End-to-end tests of per-room memory beyond the recent window (docs/memory.md): the
//! rolling summary a room gets once it outgrows its window, and facts about a user that
//! follow them from room to room. The gateway does this work in the background after a
//! reply, so the tests wait on what it makes observable (the fake model's requests, the
//! memories route, the log), never on time.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_openai::{FACTS_TASK, SUMMARY_TASK, default_reply_text};
use troupe_e2e::{
    Backend, ChatRequestRecord, FakeOpenAi, FakeOpenAiConfig, Outcome, Script, TestApp,
    TestAppOptions, WAIT, eventually,
};

const AGENT: &str = "Rosa";
const BIO: &str = "Rosa runs the ferry between the islands and remembers every passenger.";

troupe_e2e::on_each_backend!(
    a_room_that_outgrows_its_window_gets_a_summary,
    facts_learned_in_one_room_are_recalled_in_another,
    malformed_facts_are_ignored_without_harm,
    a_hanging_summary_delays_no_reply_and_is_not_asked_twice,
    rooms_and_memories_still_carry_their_old_names,
);

fn is_summary(r: &ChatRequestRecord) -> bool {
    r.system_prompt()
        .is_some_and(|s| s.starts_with(SUMMARY_TASK))
}

fn is_facts(r: &ChatRequestRecord) -> bool {
    r.system_prompt().is_some_and(|s| s.starts_with(FACTS_TASK))
}

fn is_reply(r: &ChatRequestRecord) -> bool {
    !is_summary(r) && !is_facts(r)
}

/// A model that answers each kind of request in its own way: summaries and facts with
/// `summary` and `facts` (given the request), replies with the fake's default text.
async fn model(
    summary: impl Fn(&ChatRequestRecord) -> String + Send + Sync + 'static,
    facts: impl Fn(&ChatRequestRecord) -> String + Send + Sync + 'static,
) -> FakeOpenAi {
    FakeOpenAi::start_with(FakeOpenAiConfig {
        default_reply: Some(Arc::new(move |r: &ChatRequestRecord| {
            if is_summary(r) {
                summary(r)
            } else if is_facts(r) {
                facts(r)
            } else {
                default_reply_text(r)
            }
        })),
        ..FakeOpenAiConfig::default()
    })
    .await
}

async fn spawn(backend: Backend, fake: &FakeOpenAi, env: &[(&str, &str)]) -> TestApp {
    let mut options = TestAppOptions::new(backend)
        .persona(AGENT, BIO)
        .openai(fake);
    for (k, v) in env {
        options = options.env(k, v);
    }
    TestApp::spawn(options).await
}

/// Posts as `user` in `room` and returns the reply, failing with the body otherwise.
async fn say(app: &TestApp, room: &str, user: (&str, &str), text: &str) -> String {
    let (status, body) = app
        .post_message(
            AGENT,
            &json!({"roomId": room, "userId": user.0, "userName": user.1, "text": text}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["replies"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply in {body}"))
        .to_string()
}

/// The prompt of the latest reply (posts are sequential, so it answered the latest post).
fn last_reply_prompt(fake: &FakeOpenAi) -> String {
    fake.requests()
        .into_iter()
        .rev()
        .find(is_reply)
        .map(|r| r.prompt_text())
        .expect("a reply request")
}

async fn memories(app: &TestApp, room: &str) -> Value {
    let (status, body) = app
        .get(&format!("/api/agents/{AGENT}/rooms/{room}/memories"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn has_facts(memories: &Value) -> bool {
    memories["facts"].as_array().is_some_and(|f| !f.is_empty())
}

const SAM: (&str, &str) = ("u-sam", "Sam");
const ANN: (&str, &str) = ("u-ann", "Ann");

async fn a_room_that_outgrows_its_window_gets_a_summary(backend: Backend) {
    let fake = model(
        |_| "Sam booked the red boat for the regatta.".to_string(),
        |_| "[]".to_string(),
    )
    .await;
    // A window of four messages (two exchanges), summarised two messages past it.
    let app = spawn(
        backend,
        &fake,
        &[
            ("TROUPE_HISTORY_LIMIT", "4"),
            ("TROUPE_MEMORY_SUMMARY_EVERY", "2"),
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
        ],
    )
    .await;

    say(
        &app,
        "harbour",
        SAM,
        "Book the red boat for the regatta, please.",
    )
    .await;
    let body = memories(&app, "harbour").await;
    assert_eq!(body["summary"], Value::Null, "{body}");
    assert_eq!(body["facts"], json!([]), "{body}");
    say(&app, "harbour", SAM, "What time is high tide?").await;
    // The third exchange pushes the first out of the window: it gets summarised.
    say(&app, "harbour", SAM, "And the wind tomorrow?").await;
    let asked = fake.wait_for_matching(1, WAIT, is_summary).await;
    let fold = asked[0].prompt_text();
    assert!(
        fold.contains("Sam: Book the red boat for the regatta, please."),
        "{fold}"
    );
    assert!(
        !fold.contains("And the wind tomorrow?"),
        "the window is not folded: {fold}"
    );

    eventually("the memories route shows the summary", WAIT, || async {
        memories(&app, "harbour").await["summary"].is_object()
    })
    .await;
    let body = memories(&app, "harbour").await;
    let summary = &body["summary"];
    assert_eq!(summary["text"], "Sam booked the red boat for the regatta.");
    assert!(
        summary["updatedAtMs"].as_i64().is_some_and(|t| t > 0),
        "{body}"
    );
    // It covers through the first exchange: the reply to the first message.
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 6, "{body}");
    assert_eq!(summary["throughMessageId"], messages[1]["id"], "{body}");

    // The next reply's prompt carries the summary in place of what fell out of the window.
    say(&app, "harbour", SAM, "Is the boat ready?").await;
    let prompt = last_reply_prompt(&fake);
    assert!(
        prompt.contains(
            "# Summary of earlier conversation\nSam booked the red boat for the regatta."
        ),
        "{prompt}"
    );
    assert!(
        !prompt.contains("Book the red boat for the regatta, please."),
        "{prompt}"
    );
    // Other rooms have no summary.
    say(&app, "quay", SAM, "hello").await;
    assert_eq!(memories(&app, "quay").await["summary"], Value::Null);
}

async fn facts_learned_in_one_room_are_recalled_in_another(backend: Backend) {
    let fake = model(
        |_| "unused".to_string(),
        |r| {
            if r.prompt_text().contains("# What Sam wrote") {
                r#"["Sam keeps bees on a rooftop in Oslo"]"#.to_string()
            } else {
                "[]".to_string()
            }
        },
    )
    .await;
    let app = spawn(
        backend,
        &fake,
        &[
            ("TROUPE_MEMORY_FACTS_EVERY", "2"),
            ("TROUPE_MEMORY_SUMMARY_EVERY", "0"),
        ],
    )
    .await;

    say(&app, "garden", SAM, "I keep bees on my roof.").await;
    say(&app, "garden", SAM, "The hives are in Oslo.").await;
    let asked = fake.wait_for_matching(1, WAIT, is_facts).await;
    let prompt = asked[0].prompt_text();
    assert!(
        prompt.contains("- I keep bees on my roof.\n- The hives are in Oslo."),
        "{prompt}"
    );
    // Only Sam's own words reach the extractor, not the replies.
    assert!(!prompt.contains("Reply #"), "{prompt}");

    let fact = json!({
        "userId": "u-sam",
        "userName": "Sam",
        "fact": "Sam keeps bees on a rooftop in Oslo",
        "room": "web:garden",
    });
    eventually("the garden's memories list Sam's fact", WAIT, || async {
        has_facts(&memories(&app, "garden").await)
    })
    .await;
    let body = memories(&app, "garden").await;
    let listed = &body["facts"][0];
    for key in ["userId", "userName", "fact", "room"] {
        assert_eq!(listed[key], fact[key], "{key}: {body}");
    }
    assert!(listed["createdAtMs"].as_i64().is_some_and(|t| t > 0));

    // Sam, in another room: the prompt knows them.
    say(&app, "market", SAM, "Any honey buyers here?").await;
    let prompt = last_reply_prompt(&fake);
    assert!(
        prompt.contains("# Facts about Sam\n- Sam keeps bees on a rooftop in Oslo"),
        "{prompt}"
    );
    // Ann, in that room: Sam's facts are not hers.
    say(&app, "market", ANN, "Who sells fish?").await;
    let prompt = last_reply_prompt(&fake);
    assert!(!prompt.contains("# Facts about"), "{prompt}");
    assert!(!prompt.contains("rooftop"), "{prompt}");
    // The market's memories list the facts of the people who wrote there: Sam's.
    let body = memories(&app, "market").await;
    let facts = body["facts"].as_array().expect("facts");
    assert_eq!(facts.len(), 1, "{body}");
    assert_eq!(facts[0]["fact"], fact["fact"]);
    assert_eq!(facts[0]["room"], "web:garden", "where it was learned");
}

async fn malformed_facts_are_ignored_without_harm(backend: Backend) {
    let fake = model(
        |_| "unused".to_string(),
        |r| {
            if r.prompt_text().contains("poison") {
                "Sam seems to like tea, but I am not sure. [citation needed".to_string()
            } else {
                "```json\n[\"Sam drinks green tea\", 42]\n```".to_string()
            }
        },
    )
    .await;
    let app = spawn(
        backend,
        &fake,
        &[
            ("TROUPE_MEMORY_FACTS_EVERY", "2"),
            ("TROUPE_MEMORY_SUMMARY_EVERY", "0"),
        ],
    )
    .await;

    say(&app, "tea", SAM, "poison: I like tea, I think.").await;
    say(&app, "tea", SAM, "poison: maybe coffee.").await;
    fake.wait_for_matching(1, WAIT, is_facts).await;
    eventually("the gateway logs the malformed answer", WAIT, || async {
        app.logs().contains("were not a JSON array of strings")
    })
    .await;
    // Nothing was stored, and the gateway answers as before.
    assert_eq!(memories(&app, "tea").await["facts"], json!([]));
    let reply = say(&app, "tea", SAM, "Green tea is my favourite.").await;
    assert!(reply.starts_with("Reply #"), "{reply}");
    say(&app, "tea", SAM, "I drink it every morning.").await;

    // The next batch is read afresh (the malformed one is not asked again) and kept.
    let asked = fake.wait_for_matching(2, WAIT, is_facts).await;
    assert!(
        !asked[1].prompt_text().contains("poison"),
        "{}",
        asked[1].prompt_text()
    );
    eventually("the good fact is stored", WAIT, || async {
        has_facts(&memories(&app, "tea").await)
    })
    .await;
    let body = memories(&app, "tea").await;
    let facts: Vec<&str> = body["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .filter_map(|f| f["fact"].as_str())
        .collect();
    assert_eq!(facts, ["Sam drinks green tea"], "{body}");
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!app.logs().contains("panicked"), "{}", app.logs());
}

async fn a_hanging_summary_delays_no_reply_and_is_not_asked_twice(backend: Backend) {
    let fake = model(|_| "unused".to_string(), |_| "[]".to_string()).await;
    // The summarizer never answers (until the fake is dropped).
    fake.script_matching(is_summary, Script::Hang);
    let app = spawn(
        backend,
        &fake,
        &[
            ("TROUPE_HISTORY_LIMIT", "2"),
            ("TROUPE_MEMORY_SUMMARY_EVERY", "1"),
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
        ],
    )
    .await;
    for n in 0..3 {
        say(&app, "pier", SAM, &format!("message {n}")).await;
    }
    let asked = fake.wait_for_matching(1, WAIT, is_summary).await;
    assert_eq!(asked[0].outcome, Outcome::Hang);
    // With the room's summary hanging, replies keep coming, and each would make a summary
    // due: the run under way is asked for another pass instead of a second call.
    for n in 3..8 {
        let reply = say(&app, "pier", SAM, &format!("message {n}")).await;
        assert!(reply.starts_with("Reply #"), "{reply}");
    }
    assert_eq!(
        fake.requests().iter().filter(|r| is_summary(r)).count(),
        1,
        "{:?}",
        fake.requests()
            .iter()
            .map(|r| r
                .system_prompt()
                .unwrap_or("")
                .chars()
                .take(40)
                .collect::<String>())
            .collect::<Vec<_>>()
    );
    // Another room is not held up by this one's run.
    for n in 0..3 {
        say(&app, "quay", SAM, &format!("quay {n}")).await;
    }
    fake.wait_for_matching(2, WAIT, is_summary).await;
    assert_eq!(memories(&app, "pier").await["summary"], Value::Null);
}

/// Issue 13 made every answer camelCase; for one release the rooms and memories answers
/// also carry their old snake_case names, with the same values (docs/api.md).
async fn rooms_and_memories_still_carry_their_old_names(backend: Backend) {
    let fake = model(|_| "unused".to_string(), |_| "[]".to_string()).await;
    let app = spawn(
        backend,
        &fake,
        &[
            ("TROUPE_MEMORY_SUMMARY_EVERY", "0"),
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
        ],
    )
    .await;
    say(&app, "lagoon", SAM, "Is the ferry on time?").await;

    let (status, body) = app.get(&format!("/api/agents/{AGENT}/rooms")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let room = &body["rooms"][0];
    assert_eq!(room["room"], "web:lagoon", "{body}");
    for (new, old) in [
        ("messageCount", "message_count"),
        ("lastActiveMs", "last_active_ms"),
    ] {
        assert!(!room[new].is_null(), "{new}: {body}");
        assert_eq!(room[new], room[old], "{new} / {old}: {body}");
    }

    let body = memories(&app, "lagoon").await;
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{body}");
    for message in messages {
        for (new, old) in [
            ("authorId", "author_id"),
            ("authorName", "author_name"),
            ("fromAgent", "from_agent"),
            ("createdAtMs", "created_at_ms"),
        ] {
            assert!(!message[new].is_null(), "{new}: {body}");
            assert_eq!(message[new], message[old], "{new} / {old}: {body}");
        }
    }
    assert_eq!(messages[0]["authorId"], "u-sam", "{body}");
    assert_eq!(messages[1]["fromAgent"], true, "{body}");
}
