//! The connector against the fake Bot API (`troupe-e2e`'s `fake_telegram`), through the
//! real teloxide client: polling and offsets, webhooks, sending, leaving groups, errors.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_e2e::fake_telegram::{FakeTelegram, tg};

use crate::connector::{
    Accepted, Connector, ConnectorError, InboundSink, MemoryState, SinkError, WebhookRequest,
};
use crate::connector::{Built, ConnectorSettings};
use crate::model::{Inbound, MessageId, Outbound, Platform, RoomId, RoomRef};

const WAIT: Duration = Duration::from_secs(20);

/// A sink that records what it accepts and can be told to refuse.
#[derive(Default)]
struct RecordingSink {
    accepted: std::sync::Mutex<Vec<Inbound>>,
    refuse_next: AtomicUsize,
    refused: AtomicUsize,
    /// Refuses the next messages for good (`SinkError::Rejected`).
    reject_next: AtomicUsize,
    count: watch::Sender<usize>,
}

#[async_trait::async_trait]
impl InboundSink for RecordingSink {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        if self
            .refuse_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(SinkError::Unavailable("journal unavailable".into()));
        }
        if self
            .reject_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(SinkError::Rejected("the database refuses its text".into()));
        }
        let mut accepted = self.accepted.lock().unwrap();
        if accepted.iter().any(|m| m.id == message.id) {
            return Ok(Accepted::Duplicate);
        }
        accepted.push(message);
        self.count.send_replace(accepted.len());
        Ok(Accepted::New)
    }
}

impl RecordingSink {
    async fn wait_for(&self, n: usize) -> Vec<Inbound> {
        let mut rx = self.count.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("the sink did not get {n} message(s)"))
            .unwrap();
        self.accepted.lock().unwrap().clone()
    }
    fn messages(&self) -> Vec<Inbound> {
        self.accepted.lock().unwrap().clone()
    }
}

fn settings(only_join_allowed: bool, allowed: Option<Vec<&str>>) -> ConnectorSettings {
    ConnectorSettings {
        state: Arc::new(MemoryState::default()),
        agent_id: "tess".into(),
        persona_name: "Tess".into(),
        allowed_rooms: allowed.map(|v| v.into_iter().map(String::from).collect()),
        only_join_allowed,
    }
}

fn connector_with(
    vars: &[(&str, String)],
    settings: &ConnectorSettings,
) -> Result<Arc<dyn Connector>, ConnectorError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let lookup = move |k: &str| map.get(k).cloned();
    match super::build(&lookup, settings)? {
        Built::Ready(c) => Ok(c),
        Built::NotConfigured(why) => panic!("not configured: {why}"),
    }
}

fn connector(fake: &FakeTelegram, settings: &ConnectorSettings) -> Arc<dyn Connector> {
    connector_with(
        &[
            ("TELEGRAM_BOT_TOKEN", fake.token().to_string()),
            ("TELEGRAM_API_ROOT", fake.api_root()),
        ],
        settings,
    )
    .unwrap()
}

/// Runs the connector in the background; cancel the token to stop it.
fn spawn(
    connector: &Arc<dyn Connector>,
    sink: &Arc<RecordingSink>,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), ConnectorError>>,
) {
    let token = CancellationToken::new();
    let c = connector.clone();
    let s: Arc<dyn InboundSink> = sink.clone();
    let t = token.clone();
    (token, tokio::spawn(async move { c.run(s, t).await }))
}

fn offset_of(call: &troupe_e2e::fake_telegram::ApiCall) -> Option<i64> {
    match call.params.get("offset")? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn room(id: &str) -> RoomRef {
    RoomRef::new(Platform::Telegram, RoomId::new(id))
}

#[tokio::test]
async fn polling_hands_over_messages_then_confirms_them() {
    let fake = FakeTelegram::start().await;
    let sink = Arc::new(RecordingSink::default());
    let c = connector(&fake, &settings(false, None));
    let id = fake.push_update(tg::message(tg::mentioning(
        tg::text(
            tg::supergroup(-100500, "Club"),
            tg::user(7, "Bo"),
            "hey @tess_bot",
        ),
        "tess_bot",
    )));
    let (stop, task) = spawn(&c, &sink);
    let got = sink.wait_for(1).await;
    assert_eq!(got[0].text, "hey @tess_bot");
    assert!(got[0].mentions_self);
    assert_eq!(got[0].room.id.as_str(), "-100500");
    // The next poll confirms the update.
    let polls = fake.wait_for_calls("getUpdates", 2, WAIT).await;
    assert_eq!(offset_of(&polls[1]), Some(id + 1));
    // deleteWebhook came before the first poll.
    let calls = fake.calls();
    let first_poll = calls.iter().position(|c| c.is("getUpdates")).unwrap();
    assert!(calls[..first_poll].iter().any(|c| c.is("deleteWebhook")));
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_update_is_asked_for_again() {
    let fake = FakeTelegram::start().await;
    let sink = Arc::new(RecordingSink::default());
    sink.refuse_next.store(1, Ordering::SeqCst);
    let c = connector(&fake, &settings(false, None));
    let id = fake.push_update(tg::message(tg::text(
        tg::private_chat(42, "Ann"),
        tg::user(42, "Ann"),
        "hello",
    )));
    let (stop, task) = spawn(&c, &sink);
    let got = sink.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].is_direct);
    assert_eq!(sink.refused.load(Ordering::SeqCst), 1);
    // The poll after the refusal did not move past the update.
    let polls = fake.wait_for_calls("getUpdates", 3, WAIT).await;
    assert!(offset_of(&polls[1]).is_none_or(|o| o <= id));
    assert_eq!(offset_of(&polls[2]), Some(id + 1));
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_long_reply_goes_in_order_threaded_into_the_topic() {
    let fake = FakeTelegram::start().await;
    fake.push_update(tg::message(tg::in_topic(
        tg::text(tg::forum(-100900, "Forum"), tg::user(7, "Bo"), "question"),
        77,
    )));
    let c = connector(&fake, &settings(false, None));
    let mut topic = room("-100900:77");
    topic.send_to = Some("-100900".into());
    let text = format!(
        "{}\n\n{}\n\n{}",
        "a".repeat(4000),
        "b".repeat(4000),
        "c".repeat(1000)
    );
    let reply = Outbound {
        key: "r1".into(),
        room: topic.clone(),
        text,
        reply_to: Some(MessageId::new("-100900:1")),
        replaces: Vec::new(),
    };
    let delivery = c.send(&reply).await.unwrap();
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 3);
    assert_eq!(delivery.message_ids.len(), 3);
    assert!(sent[0].text.starts_with('a') && sent[1].text.starts_with('b'));
    assert!(sent[2].text.starts_with('c'));
    assert!(sent.iter().all(|m| m.message_thread_id == Some(77)));
    assert!(sent.iter().all(|m| m.parse_mode.is_none()));
    assert_eq!(sent[0].reply_to_message_id(), Some(1));
    assert_eq!(
        sent[0].reply_parameters.as_ref().unwrap()["allow_sending_without_reply"],
        json!(true)
    );
    assert!(sent[1].reply_parameters.is_none() && sent[2].reply_parameters.is_none());
    assert_eq!(
        delivery.message_ids[0].as_str(),
        format!("-100900:{}", sent[0].message_id)
    );

    // The same reply again (an outbox retry after a lost answer) sends nothing.
    let again = c.send(&reply).await.unwrap();
    assert_eq!(again, delivery);
    assert_eq!(fake.sent_messages().len(), 3);

    c.typing(&topic).await.unwrap();
    let actions = fake.chat_actions();
    assert_eq!(actions[0].chat_id, -100900);
    assert_eq!(actions[0].action, "typing");
    assert_eq!(actions[0].message_thread_id, Some(77));
}

#[tokio::test]
async fn a_429_storm_delivers_every_part_once_in_order() {
    let fake = FakeTelegram::start().await;
    let c = connector(&fake, &settings(false, None));
    fake.fail_next_sends(3, 1);
    let text = format!("{}\n{}", "x".repeat(4090), "y".repeat(100));
    let delivery = c
        .send(&Outbound {
            key: "storm".into(),
            room: room("42"),
            text,
            reply_to: None,
            replaces: Vec::new(),
        })
        .await
        .unwrap();
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].text.starts_with('x') && sent[1].text.starts_with('y'));
    assert_eq!(fake.send_attempts(), 5);
    assert_eq!(delivery.message_ids.len(), 2);
}

#[tokio::test]
async fn a_long_429_hands_the_rest_to_the_outbox_which_resumes_after_the_sent_part() {
    let fake = FakeTelegram::start().await;
    let c = connector(&fake, &settings(false, None));
    // The first part goes through, then Telegram asks for a minute's pause.
    fake.fail_sends_after(1, 1, 60);
    let reply = Outbound {
        key: "resume".into(),
        room: room("42"),
        text: format!("{}\n{}", "x".repeat(4090), "y".repeat(100)),
        reply_to: None,
        replaces: Vec::new(),
    };
    let err = c.send(&reply).await.unwrap_err();
    assert!(
        matches!(err, ConnectorError::RateLimited { retry_after } if retry_after == Duration::from_secs(60)),
        "{err}"
    );
    assert_eq!(fake.sent_messages().len(), 1);
    // The outbox's retry sends only what is left.
    let delivery = c.send(&reply).await.unwrap();
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 2);
    assert!(sent[0].text.starts_with('x') && sent[1].text.starts_with('y'));
    assert_eq!(delivery.message_ids.len(), 2);
}

#[tokio::test]
async fn a_group_that_is_not_allowed_is_left_and_its_messages_dropped() {
    let fake = FakeTelegram::start().await;
    let sink = Arc::new(RecordingSink::default());
    let c = connector(&fake, &settings(true, Some(vec!["-100123"])));
    fake.push_update(tg::bot_added(
        tg::group(-77, "Strangers"),
        tg::user(7, "Bo"),
        fake.bot_user(),
    ));
    fake.push_update(tg::message(tg::text(
        tg::supergroup(-100999, "Others"),
        tg::user(7, "Bo"),
        "hi",
    )));
    fake.push_update(tg::message(tg::text(
        tg::supergroup(-100123, "Home"),
        tg::user(7, "Bo"),
        "welcome",
    )));
    let (stop, task) = spawn(&c, &sink);
    let got = sink.wait_for(1).await;
    assert_eq!(fake.wait_for_left(2, WAIT).await, vec![-77, -100999]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].text, "welcome");
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(sink.messages().len(), 1);
}

#[tokio::test]
async fn an_update_refused_for_good_is_skipped_not_asked_for_forever() {
    let fake = FakeTelegram::start().await;
    let sink = Arc::new(RecordingSink::default());
    sink.reject_next.store(1, Ordering::SeqCst);
    let c = connector(&fake, &settings(false, None));
    let chat = || tg::private_chat(42, "Ann");
    fake.push_update(tg::message(tg::text(chat(), tg::user(42, "Ann"), "poison")));
    let second = fake.push_update(tg::message(tg::text(chat(), tg::user(42, "Ann"), "hello")));
    let (stop, task) = spawn(&c, &sink);
    let got = sink.wait_for(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].text, "hello");
    // The next poll confirms both: the refused one is not handed over again.
    let polls = fake.wait_for_calls("getUpdates", 2, WAIT).await;
    assert_eq!(offset_of(&polls[1]), Some(second + 1));
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(sink.messages().len(), 1);
}

#[tokio::test]
async fn webhook_checks_the_secret_and_answers_after_the_journal() {
    let fake = FakeTelegram::start().await;
    let sink = Arc::new(RecordingSink::default());
    let c = connector_with(
        &[
            ("TELEGRAM_BOT_TOKEN", fake.token().to_string()),
            ("TELEGRAM_API_ROOT", fake.api_root()),
            (
                "TELEGRAM_WEBHOOK_URL",
                "https://bot.example.org/webhooks/telegram/tess".into(),
            ),
            ("TELEGRAM_WEBHOOK_SECRET", "s3cret".into()),
        ],
        &settings(false, None),
    )
    .unwrap();
    let (stop, task) = spawn(&c, &sink);
    let hook = fake.wait_for_webhook(WAIT).await;
    assert_eq!(hook.url, "https://bot.example.org/webhooks/telegram/tess");
    assert_eq!(hook.secret_token.as_deref(), Some("s3cret"));

    let update = json!({"update_id": 5, "message": {
        "message_id": 3, "date": 1_700_000_000, "text": "hi",
        "chat": {"id": 42, "type": "private", "first_name": "Ann"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ann"}}});
    let request = |secret: Option<&str>| WebhookRequest {
        headers: secret
            .map(|s| vec![("x-telegram-bot-api-secret-token".to_string(), s.to_string())])
            .unwrap_or_default(),
        body: update.to_string().into_bytes(),
    };
    assert_eq!(c.webhook(request(Some("wrong"))).await.status, 401);
    assert_eq!(c.webhook(request(None)).await.status, 401);
    assert!(sink.messages().is_empty());

    sink.refuse_next.store(1, Ordering::SeqCst);
    assert_eq!(c.webhook(request(Some("s3cret"))).await.status, 500);
    assert!(sink.messages().is_empty());
    // Refused for good: 200, or Telegram would send it again and again.
    sink.reject_next.store(1, Ordering::SeqCst);
    assert_eq!(c.webhook(request(Some("s3cret"))).await.status, 200);
    assert!(sink.messages().is_empty());
    assert_eq!(c.webhook(request(Some("s3cret"))).await.status, 200);
    assert_eq!(sink.messages().len(), 1);
    let junk = WebhookRequest {
        headers: vec![("x-telegram-bot-api-secret-token".into(), "s3cret".into())],
        body: b"not json".to_vec(),
    };
    assert_eq!(c.webhook(junk).await.status, 400);
    // Webhook mode never polls.
    assert!(fake.calls_to("getUpdates").is_empty());
    stop.cancel();
    task.await.unwrap().unwrap();
    // The webhook stays registered, so Telegram keeps updates until troupe is back.
    assert!(fake.set_webhook_info().is_some());
}

#[tokio::test]
async fn errors_are_typed_and_never_show_the_token() {
    let fake = FakeTelegram::start().await;
    let wrong = connector_with(
        &[
            ("TELEGRAM_BOT_TOKEN", "123:wrongsecret".into()),
            ("TELEGRAM_API_ROOT", fake.api_root()),
        ],
        &settings(false, None),
    )
    .unwrap();
    let err = wrong.healthcheck().await.unwrap_err();
    assert!(matches!(err, ConnectorError::Unauthorized(_)), "{err}");
    assert!(!err.to_string().contains("wrongsecret"));
    let sink: Arc<dyn InboundSink> = Arc::new(RecordingSink::default());
    let err = wrong.run(sink, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ConnectorError::Unauthorized(_)));

    // Nothing listens on the fake's port once it is gone: a network error.
    let root = fake.api_root();
    drop(fake);
    let closed = connector_with(
        &[
            ("TELEGRAM_BOT_TOKEN", "123:topsecret".into()),
            ("TELEGRAM_API_ROOT", root),
        ],
        &settings(false, None),
    )
    .unwrap();
    let err = closed
        .send(&Outbound {
            key: "k".into(),
            room: room("42"),
            text: "hi".into(),
            reply_to: None,
            replaces: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectorError::Transient(_)), "{err}");
    assert!(!err.to_string().contains("topsecret"), "{err}");
}

#[test]
fn missing_token_is_not_configured() {
    let lookup = |_: &str| None;
    match super::build(&lookup, &settings(false, None)) {
        Ok(Built::NotConfigured(why)) => assert!(why.contains("TELEGRAM_BOT_TOKEN")),
        _ => panic!("expected NotConfigured"),
    }
}
