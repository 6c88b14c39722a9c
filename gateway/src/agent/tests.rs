//! A whole turn of `Agent`, in process: a SQLite file in a temporary directory (the path
//! production runs), a scripted model (`Scripted`) and a recording platform connector
//! (`Recorder`) that write one log, so that a test reads the order of a turn's steps from
//! what reached the model and the platform. What the e2e tests prove through the binary, at
//! the level of the steps: a message is answered and remembered with its reply; what ends a
//! turn early (a refusal, a command, a rate limit, an edit of an unknown message) ends it
//! before the steps after it; the exchange is recorded before its reply is delivered; a
//! voice note is heard before recall and the model read its transcript; a failed model call
//! sends nothing.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;
use crate::provider::{Completion, Feature, Parts, ProviderError, Reply, Request, Sealed};
use crate::rooms::tests::msg;
use crate::spend::ModelRef;
use crate::storage::JournalInsert;
use troupe_connectors::{
    Attachment, ConnectorError, ContextLine, Inbound, InboundSink, MessageId, Outbound,
};
use troupe_connectors::{Delivery as Sent, files::FileError};

/// What reached the model and the platform during a turn, in order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    /// Whether a line starts with `what`.
    fn saw(&self, what: &str) -> bool {
        self.lines().iter().any(|l| l.starts_with(what))
    }
}

/// A model that answers from a script (then "Hello, Sam."), and logs each call: its purpose
/// and, for a chat, the message as the model read it (the last conversation line before
/// the template's `# Task`, without its speaker).
struct Scripted {
    log: Log,
    answers: Mutex<VecDeque<Result<Reply, ProviderError>>>,
}

#[async_trait::async_trait]
impl ModelProvider for Scripted {
    fn model(&self) -> ModelRef {
        ModelRef::new("scripted", "m")
    }
    fn offers(&self, feature: Feature) -> bool {
        feature == Feature::Audio
    }
    async fn send(&self, request: &Request<'_>, _: Sealed) -> Result<Reply, ProviderError> {
        let purpose = request.purpose.as_str();
        match &request.parts {
            Parts::Chat(prompt) => {
                let conversation = prompt.user.split("# Task").next().unwrap_or_default();
                let last = conversation.trim_end().lines().last().unwrap_or_default();
                let said = last.split_once(": ").map_or(last, |(_, said)| said);
                self.log.push(format!("model {purpose}: {said}"));
            }
            Parts::Audio { .. } => {
                self.log.push(format!("model {purpose}"));
                return Ok(Reply::answer(Completion::of("meet me at noon".into())));
            }
            Parts::Speech { .. } => self.log.push(format!("model {purpose}")),
        }
        let next = self.answers.lock().unwrap().pop_front();
        next.unwrap_or_else(|| Ok(Reply::answer(Completion::of("Hello, Sam.".into()))))
    }
}

/// A Telegram account that logs what the turn asks of it. `send` logs how many messages
/// the room remembers at that moment, so a test sees whether the exchange was recorded
/// before its reply left.
struct Recorder {
    log: Log,
    store: Store,
    agent: AgentId,
}

#[async_trait::async_trait]
impl troupe_connectors::Connector for Recorder {
    fn platform(&self) -> Platform {
        Platform::Telegram
    }
    async fn run(
        &self,
        _sink: Arc<dyn InboundSink>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), ConnectorError> {
        shutdown.cancelled().await;
        Ok(())
    }
    async fn send(&self, reply: &Outbound) -> Result<Sent, ConnectorError> {
        let room = reply.room.key();
        let kept = self.store.recent_messages(&self.agent, &room, 10).await;
        let kept = kept.map(|m| m.len()).unwrap_or_default();
        self.log
            .push(format!("send ({kept} remembered): {}", reply.text));
        Ok(Sent {
            message_ids: vec![MessageId::new(format!("sent-{}", reply.key))],
        })
    }
    async fn thread_context(&self, _message: &Inbound) -> Vec<ContextLine> {
        self.log.push("recall: thread".into());
        Vec::new()
    }
    async fn fetch_file(
        &self,
        attachment: &Attachment,
        _cap: usize,
    ) -> Result<Option<Vec<u8>>, FileError> {
        self.log.push(format!("fetch {}", attachment.name));
        Ok(Some(b"OggS voice".to_vec()))
    }
    async fn may_steer(&self, _message: &Inbound) -> Result<bool, ConnectorError> {
        self.log.push("may_steer".into());
        Ok(true)
    }
}

/// Ada, on an empty store, with `provider` for her model and, on Telegram, a `Recorder`
/// writing to `log`. The directory holds the database file and must outlive the agent.
async fn agent_with(
    provider: Arc<dyn ModelProvider>,
    log: &Log,
    limits: crate::config::Limits,
) -> (tempfile::TempDir, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ada.json");
    let raw = serde_json::json!({"name": "Ada", "bio": "A test persona."});
    std::fs::write(&path, raw.to_string()).unwrap();
    let persona = crate::persona::load_file(&path).unwrap().persona;
    let config = crate::config::Config::from_env(Default::default()).unwrap();
    let (db, store) = crate::storage::test_support::sqlite_store().await;
    let connectors = Connectors::default();
    connectors.insert(&persona.id, Arc::new(crate::web::WebConnector));
    let recorder = Recorder {
        log: log.clone(),
        store: store.clone(),
        agent: persona.id.clone(),
    };
    connectors.insert(&persona.id, Arc::new(recorder));
    let outbox = Outbox::new(store.clone(), connectors.clone());
    let agent = Agent::new(
        Mind {
            access: crate::access::Rules::default(),
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
        RateLimiter::new(&limits),
        Waiters::default(),
        config.agent.clone(),
    );
    (db, agent)
}

/// Ada with a scripted model answering `answers` first, default limits.
async fn scripted(answers: Vec<Result<Reply, ProviderError>>) -> (tempfile::TempDir, Agent, Log) {
    let log = Log::default();
    let provider = Arc::new(Scripted {
        log: log.clone(),
        answers: Mutex::new(answers.into()),
    });
    let limits = crate::config::Config::from_env(Default::default())
        .unwrap()
        .limits;
    let (db, agent) = agent_with(provider, &log, limits).await;
    (db, agent, log)
}

/// An agent named Ada whose model always says `says`, on an empty store.
async fn ada(says: &str) -> (tempfile::TempDir, Agent) {
    let provider = Arc::new(crate::provider::Instant { text: says.into() });
    let limits = crate::config::Config::from_env(Default::default())
        .unwrap()
        .limits;
    agent_with(provider, &Log::default(), limits).await
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

/// Journals `inbound` and takes it through its first turn.
async fn turn(agent: &Agent, inbound: &Inbound) -> Outcome {
    let id = journal(agent, inbound).await;
    agent.process(id, inbound, Delivery::First).await.unwrap()
}

fn replied(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Replied { texts, .. } => texts.clone(),
        other => panic!("not a reply: {other:?}"),
    }
}

/// A direct message to Ada on Telegram, with its own platform id.
fn dm(id: &str, text: &str) -> Inbound {
    let mut m = msg(Platform::Telegram, text);
    m.id = MessageId::new(id);
    m.is_direct = true;
    m
}

async fn remembered(agent: &Agent, inbound: &Inbound) -> Vec<String> {
    let recent = (agent.store)
        .recent_messages(&agent.id, &inbound.room.key(), 10)
        .await
        .unwrap();
    recent.into_iter().map(|m| m.text).collect()
}

#[tokio::test]
async fn a_message_is_answered_and_remembered_with_its_reply() {
    let (_db, agent) = ada("Hello, Sam.").await;
    let inbound = msg(Platform::Web, "hi Ada");
    let id = journal(&agent, &inbound).await;
    let outcome = agent.process(id, &inbound, Delivery::First).await.unwrap();
    assert_eq!(replied(&outcome), ["Hello, Sam."]);
    assert_eq!(
        remembered(&agent, &inbound).await,
        ["hi Ada", "Hello, Sam."]
    );
    // Its reply's outbox entry carries the one key (agent::outbound).
    let replies = agent.store.replies_for(id).await.unwrap();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].key, format!("{}:{}", agent.id, id.0));

    // Driven again (a redelivery), the message is answered from the journal: the same
    // reply, and nothing more in the room.
    let again = agent.process(id, &inbound, Delivery::Again).await.unwrap();
    assert_eq!(replied(&again), ["Hello, Sam."]);
    assert_eq!(remembered(&agent, &inbound).await.len(), 2);
}

#[tokio::test]
async fn a_turn_recalls_then_calls_the_model_then_records_then_delivers() {
    let (_db, agent, log) = scripted(vec![]).await;
    let outcome = turn(&agent, &dm("1", "hi Ada")).await;
    assert_eq!(replied(&outcome), ["Hello, Sam."]);
    assert_eq!(
        log.lines(),
        [
            "recall: thread",
            "model reply: hi Ada",
            // The message and the reply were in the room's memory before the reply left.
            "send (2 remembered): Hello, Sam.",
        ]
    );
}

#[tokio::test]
async fn a_refused_message_never_reaches_recall_or_the_model() {
    let (_db, agent, log) = scripted(vec![]).await;
    // Group chatter that does not address Ada is left alone, and so is another bot.
    let chatter = msg(Platform::Telegram, "anyone around?");
    let mut bot = msg(Platform::Telegram, "hello Ada");
    bot.id = MessageId::new("2");
    bot.author.is_bot = true;
    for inbound in [&chatter, &bot] {
        match turn(&agent, inbound).await {
            Outcome::Ignored { .. } => {}
            other => panic!("answered: {other:?}"),
        }
    }
    assert!(log.lines().is_empty(), "{:?}", log.lines());
    // Ignored, but remembered: the record is the decide step's own.
    assert_eq!(
        remembered(&agent, &chatter).await,
        ["anyone around?", "hello Ada"]
    );
}

#[tokio::test]
async fn a_command_is_answered_without_recall_or_the_model_and_is_not_remembered() {
    let (_db, agent, log) = scripted(vec![]).await;
    let mute = dm("1", "/mute");
    let answer = replied(&turn(&agent, &mute).await);
    assert_eq!(answer.len(), 1);
    let lines = log.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "may_steer");
    assert!(lines[1].starts_with("send (0 remembered): "), "{lines:?}");
    assert!(!log.saw("recall") && !log.saw("model"));

    // The room is muted now: a message to Ada is remembered, not answered.
    let named = dm("2", "what do you think, Ada?");
    match turn(&agent, &named).await {
        Outcome::Ignored { reason } => assert_eq!(reason, crate::outcome::WhyNot::Muted),
        other => panic!("a muted room was answered: {other:?}"),
    }
    assert!(!log.saw("model"));
    assert_eq!(
        remembered(&agent, &named).await,
        ["what do you think, Ada?"]
    );
}

#[tokio::test]
async fn a_rate_limited_message_never_reaches_the_model() {
    let log = Log::default();
    let provider = Arc::new(Scripted {
        log: log.clone(),
        answers: Mutex::default(),
    });
    let mut limits = crate::config::Config::from_env(Default::default())
        .unwrap()
        .limits;
    limits.user_per_minute = 1;
    let (_db, agent) = agent_with(provider, &log, limits).await;
    replied(&turn(&agent, &dm("1", "hi Ada")).await);
    match turn(&agent, &dm("2", "hi again")).await {
        Outcome::RateLimited { .. } => {}
        other => panic!("not limited: {other:?}"),
    }
    let models = log
        .lines()
        .iter()
        .filter(|l| l.starts_with("model"))
        .count();
    assert_eq!(models, 1, "{:?}", log.lines());
    // The first limited message of the window gets the short notice, recorded first.
    let last = log.lines().last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("send (4 remembered): I'm getting a lot"),
        "{last}"
    );
}

#[tokio::test]
async fn an_edit_of_a_message_never_received_ends_before_everything_else() {
    let (_db, agent, log) = scripted(vec![]).await;
    let mut edit = dm("9", "hi Ada, edited");
    edit.sent_at_ms = 1_000;
    edit.revises = Some(troupe_connectors::Revision {
        of: MessageId::new("8"),
        change: troupe_connectors::Change::Edit {
            original_sent_at_ms: 900,
        },
        reply: Vec::new(),
    });
    match turn(&agent, &edit).await {
        Outcome::Ignored { reason } => {
            assert_eq!(reason, crate::outcome::WhyNot::UnknownMessage)
        }
        other => panic!("{other:?}"),
    }
    assert!(log.lines().is_empty(), "{:?}", log.lines());
    assert!(remembered(&agent, &edit).await.is_empty());
}

#[tokio::test]
async fn a_voice_note_is_heard_before_recall_and_the_model_reads_its_transcript() {
    let (_db, agent, log) = scripted(vec![]).await;
    let mut voice = dm("1", "");
    voice.attachments = vec![Attachment {
        name: "voice.ogg".into(),
        mime: Some("audio/ogg".into()),
        size: Some(10),
        url: Some("telegram-file:v1".into()),
    }];
    replied(&turn(&agent, &voice).await);
    let heard = format!("{} meet me at noon", crate::media::voice::HEARD);
    assert_eq!(
        log.lines(),
        [
            "fetch voice.ogg".to_string(),
            "model transcribe".into(),
            "recall: thread".into(),
            format!("model reply: {heard}"),
            "send (2 remembered): Hello, Sam.".into(),
        ]
    );
    // The room remembers what was said, marked as heard.
    assert_eq!(remembered(&agent, &voice).await[0], heard);
}

#[tokio::test]
async fn a_failed_model_call_sends_nothing_and_fails_the_message() {
    let down = ProviderError::Upstream("500".into());
    let (_db, agent, log) = scripted(vec![Err(down)]).await;
    let inbound = dm("1", "hi Ada");
    match turn(&agent, &inbound).await {
        Outcome::Failed { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(log.lines(), ["recall: thread", "model reply: hi Ada"]);
    // Nothing remembered: a repost drives the message again.
    assert!(remembered(&agent, &inbound).await.is_empty());
}
