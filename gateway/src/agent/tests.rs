//! A whole turn of `Agent`, in process: a SQLite file in a temporary directory (the path
//! production runs), a model that answers at once
//! (`provider::Instant`), and the API's connector, which delivers in band. What the e2e
//! tests prove through the binary, at the level of the steps: a message is answered and
//! remembered with its reply, a redelivery is answered from the journal without a second
//! turn, and a room-mute from the chat takes effect before the model.

use super::*;
use crate::rooms::tests::msg;
use crate::storage::JournalInsert;
use troupe_connectors::Inbound;

/// An agent named Ada whose model always says `says`, on an empty store; the directory
/// holds its database file and must outlive it.
async fn ada(says: &str) -> (tempfile::TempDir, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ada.json");
    let raw = serde_json::json!({"name": "Ada", "bio": "A test persona."});
    std::fs::write(&path, raw.to_string()).unwrap();
    let persona = crate::persona::load_file(&path).unwrap().persona;
    let config = crate::config::Config::from_env(Default::default()).unwrap();
    let (db, store) = crate::storage::test_support::sqlite_store().await;
    let connectors = Connectors::default();
    connectors.insert(&persona.id, Arc::new(crate::web::WebConnector));
    let outbox = Outbox::new(store.clone(), connectors.clone());
    let provider = Arc::new(crate::provider::Instant { text: says.into() });
    let agent = Agent::new(
        Mind {
            persona,
            provider,
            small: None,
            vision: None,
            tools: None,
            speaking: None,
        },
        store,
        outbox,
        connectors,
        RateLimiter::new(&config.limits),
        Waiters::default(),
        config.agent.clone(),
    );
    (db, agent)
}

async fn journal(agent: &Agent, inbound: &Inbound) -> JournalId {
    match agent
        .store
        .journal_insert(&agent.id, inbound)
        .await
        .unwrap()
    {
        JournalInsert::Inserted(id) => id,
        other => panic!("not inserted: {other:?}"),
    }
}

fn replied(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Replied { texts, .. } => texts.clone(),
        other => panic!("not a reply: {other:?}"),
    }
}

#[tokio::test]
async fn a_message_is_answered_and_remembered_with_its_reply() {
    let (_db, agent) = ada("Hello, Sam.").await;
    let inbound = msg(Platform::Web, "hi Ada");
    let id = journal(&agent, &inbound).await;
    let outcome = agent.process(id, &inbound, Delivery::First).await.unwrap();
    assert_eq!(replied(&outcome), ["Hello, Sam."]);
    let room = inbound.room.key();
    let recent = agent
        .store
        .recent_messages(&agent.id, &room, 10)
        .await
        .unwrap();
    let lines: Vec<_> = recent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(lines, ["hi Ada", "Hello, Sam."]);
    // Its reply's outbox entry carries the one key (agent::outbound).
    let replies = agent.store.replies_for(id).await.unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].key, format!("{}:{}", agent.id, id.0));

    // Driven again (a redelivery), the message is answered from the journal: the same
    // reply, and nothing more in the room.
    let again = agent.process(id, &inbound, Delivery::Again).await.unwrap();
    assert_eq!(replied(&again), ["Hello, Sam."]);
    let recent = agent
        .store
        .recent_messages(&agent.id, &room, 10)
        .await
        .unwrap();
    assert_eq!(recent.len(), 2);
}

#[tokio::test]
async fn a_chat_mute_is_answered_without_the_model_and_silences_the_room() {
    let (_db, agent) = ada("Hello, Sam.").await;
    let mute = msg(Platform::Telegram, "/mute");
    let id = journal(&agent, &mute).await;
    let answer = replied(&agent.process(id, &mute, Delivery::First).await.unwrap());
    assert_eq!(answer.len(), 1);
    assert_ne!(
        answer[0], "Hello, Sam.",
        "a command is answered without the model"
    );

    let mut named = msg(Platform::Telegram, "what do you think, Ada?");
    named.id = troupe_connectors::MessageId::new("2");
    let id = journal(&agent, &named).await;
    match agent.process(id, &named, Delivery::First).await.unwrap() {
        Outcome::Ignored { reason } => assert_eq!(reason, crate::outcome::WhyNot::Muted),
        other => panic!("a muted room was answered: {other:?}"),
    }
    // Ignored, but remembered in its room; the command was not.
    let recent = (agent.store)
        .recent_messages(&agent.id, &named.room.key(), 10)
        .await
        .unwrap();
    let lines: Vec<_> = recent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(lines, ["what do you think, Ada?"]);
}
