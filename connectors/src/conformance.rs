//! The connector conformance suite: one test body, [`conforms`], run against every
//! connector and its fake platform (`troupe-e2e`'s fakes), through the real clients.
//!
//! What every connector must do, whatever the platform:
//! 1. a message from a person reaches the `InboundSink` normalized: the right platform,
//!    room, author and message ids, and its text;
//! 2. a reply to it reaches the platform;
//! 3. a send the platform refuses surfaces as a typed `ConnectorError` (an outage as
//!    `Transient`, a refusal as an error the outbox does not retry), never a panic, never
//!    swallowed into an `Ok`, and never with a credential in its text;
//! 4. a message the gateway refuses for good (`SinkError::Rejected`) is skipped: the next
//!    one still arrives, and the refused one is not handed over again;
//! 5. `run` ends soon after its shutdown token is cancelled, with `Ok`.
//!
//! A platform takes part by implementing [`Harness`]: start its fake, build the connector
//! against it, deliver one message the way the platform does (a poll answer, a gateway
//! dispatch, a webhook call), and script the fake to refuse the next send. Nothing here
//! sleeps: every wait wakes on a change and is bounded by [`WAIT`], and a timeout fails
//! with what the fake saw.

use crate::sync::Locked;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use troupe_e2e::Diagnose;
use troupe_e2e::fake_discord::{self, Author, FakeDiscord, NewMessage};
use troupe_e2e::fake_neynar::{self, Failure, FakeNeynar, Route};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};

use crate::connector::{
    Accepted, Built, Connector, ConnectorError, ConnectorSettings, InboundSink, MemoryState,
    SinkError, WebhookRequest,
};
use crate::model::{Inbound, MessageId, Outbound, Platform, RoomId, UserId};

/// The bound on every wait: generous, for a debug build on a busy machine.
const WAIT: Duration = Duration::from_secs(30);

/// What the sink must receive for the message a harness delivered.
#[derive(Debug)]
struct Expected {
    platform: Platform,
    room: RoomId,
    author: UserId,
    message: MessageId,
    text: String,
}

/// How a harness makes its fake refuse the next send.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The platform is down for a moment (a 500): worth retrying.
    Outage,
    /// The platform will not take this reply (a 403: blocked, or no permission).
    Forbidden,
}

/// One connector, wired to its fake platform.
#[async_trait]
trait Harness: Diagnose + Send + Sync + Sized {
    /// Starts the fake and builds the connector against it.
    async fn start() -> Self;
    fn connector(&self) -> Arc<dyn Connector>;
    /// Waits until the running connector can take a message (it has connected, or
    /// registered its webhook), so that delivering one is not a race.
    async fn until_receiving(&self) -> Result<(), String>;
    /// Has the platform deliver one message from a person to the persona.
    async fn deliver(&self, connector: &Arc<dyn Connector>, nth: u32) -> Expected;
    /// Waits until the fake has taken `n` replies.
    async fn until_sent(&self, n: usize) -> Result<(), String>;
    /// Makes the fake refuse the next send.
    fn refuse_next_send(&self, refusal: Refusal);
    /// Credentials that must never appear in an error.
    fn secrets(&self) -> Vec<String>;
}

/// The sink the connector hands messages to; it publishes how many it holds.
#[derive(Default)]
struct RecordingSink {
    accepted: Mutex<Vec<Inbound>>,
    count: watch::Sender<usize>,
    /// Refuses the next messages for good, as a database refusing their content would.
    reject_next: AtomicUsize,
}

#[async_trait]
impl InboundSink for RecordingSink {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        if self
            .reject_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(SinkError::Rejected("the database refuses its text".into()));
        }
        let mut accepted = self.accepted.locked();
        if accepted.iter().any(|m| m.id == message.id) {
            return Ok(Accepted::Duplicate);
        }
        accepted.push(message);
        self.count.send_replace(accepted.len());
        Ok(Accepted::New)
    }
}

impl RecordingSink {
    async fn until(&self, n: usize, fake: &dyn Diagnose) -> Vec<Inbound> {
        let mut count = self.count.subscribe();
        if tokio::time::timeout(WAIT, count.wait_for(|c| *c >= n))
            .await
            .is_err()
        {
            panic!(
                "the sink got {} message(s), expected {n} within {WAIT:?}\n{}",
                *count.borrow(),
                fake.diagnostics()
            );
        }
        self.accepted.locked().clone()
    }
}

/// Fails the test with the fake's diagnostics.
fn fail(context: &str, why: impl std::fmt::Display, fake: &dyn Diagnose) -> ! {
    panic!("{context}: {why}\n{}", fake.diagnostics())
}

/// Sends `reply` in a task of its own, bounded by [`WAIT`]: a panic inside the connector
/// or a send that never ends fails the test with a diagnostic instead of hiding.
async fn send(
    connector: &Arc<dyn Connector>,
    reply: Outbound,
    fake: &dyn Diagnose,
) -> Result<crate::connector::Delivery, ConnectorError> {
    let c = connector.clone();
    let task = tokio::spawn(async move { c.send(&reply).await });
    match tokio::time::timeout(WAIT, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => fail("send panicked", join, fake),
        Err(_) => fail("send did not end", format!("within {WAIT:?}"), fake),
    }
}

/// The test body every connector runs: the five guarantees of the module's doc, in order,
/// on one running connector.
async fn conforms<H: Harness>() {
    let running = Running::<H>::start().await;
    let message = running.a_message_arrives_normalized().await;
    running.a_reply_reaches_the_platform(&message).await;
    running.refused_sends_are_typed_errors(&message).await;
    running.a_message_refused_for_good_is_skipped().await;
    running.shutdown_is_respected().await;
}

/// A reply to `message`, keyed `key`.
fn reply_to(message: &Inbound, key: &str) -> Outbound {
    Outbound {
        key: key.into(),
        room: message.room.clone(),
        text: format!("reply {key}"),
        reply_to: Some(message.id.clone()),
        replaces: Vec::new(),
    }
}

/// One connector running against its fake, with the sink it hands messages to.
struct Running<H> {
    h: H,
    connector: Arc<dyn Connector>,
    sink: Arc<RecordingSink>,
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<Result<(), ConnectorError>>,
}

impl<H: Harness> Running<H> {
    /// Starts the fake and the connector's `run`, and waits until it receives.
    async fn start() -> Self {
        let h = H::start().await;
        let connector = h.connector();
        let sink = Arc::new(RecordingSink::default());
        let shutdown = CancellationToken::new();
        let run = {
            let (c, s, t) = (connector.clone(), sink.clone(), shutdown.clone());
            let s: Arc<dyn InboundSink> = s;
            tokio::spawn(async move { c.run(s, t).await })
        };
        if let Err(e) = h.until_receiving().await {
            fail("the connector did not start receiving", e, &h);
        }
        Running {
            h,
            connector,
            sink,
            shutdown,
            run,
        }
    }

    /// Guarantee 1: a message reaches the sink, normalized.
    async fn a_message_arrives_normalized(&self) -> Inbound {
        let h = &self.h;
        let expected = h.deliver(&self.connector, 0).await;
        let got = self.sink.until(1, h).await;
        let message = &got[0];
        assert_eq!(message.platform(), expected.platform, "{message:#?}");
        assert_eq!(message.room.platform, expected.platform, "{message:#?}");
        assert_eq!(message.room.id, expected.room, "{message:#?}");
        assert_eq!(message.author.id, expected.author, "{message:#?}");
        assert!(!message.author.is_bot, "{message:#?}");
        assert_eq!(message.id, expected.message, "{message:#?}");
        assert_eq!(message.text, expected.text, "{message:#?}");
        assert!(message.sent_at_ms > 0, "{message:#?}");
        message.clone()
    }

    /// Guarantee 2: a reply to it reaches the platform.
    async fn a_reply_reaches_the_platform(&self, message: &Inbound) {
        let h = &self.h;
        let delivery = send(&self.connector, reply_to(message, "ok"), h)
            .await
            .unwrap_or_else(|e| fail("the reply was not delivered", e, h));
        assert_eq!(delivery.message_ids.len(), 1, "{delivery:?}");
        if let Err(e) = h.until_sent(1).await {
            fail("the platform did not get the reply", e, h);
        }
    }

    /// Guarantee 3: refused sends surface as typed errors, without credentials.
    async fn refused_sends_are_typed_errors(&self, message: &Inbound) {
        let h = &self.h;
        for (key, refusal) in [
            ("outage", Refusal::Outage),
            ("forbidden", Refusal::Forbidden),
        ] {
            h.refuse_next_send(refusal);
            let err = match send(&self.connector, reply_to(message, key), h).await {
                Ok(delivery) => fail(
                    &format!("a send the platform refused ({refusal:?}) was reported as delivered"),
                    format!("{delivery:?}"),
                    h,
                ),
                Err(e) => e,
            };
            match refusal {
                Refusal::Outage => {
                    assert!(matches!(err, ConnectorError::Transient(_)), "{err:?}")
                }
                Refusal::Forbidden => assert!(
                    matches!(
                        err,
                        ConnectorError::Fatal(_) | ConnectorError::Unauthorized(_)
                    ),
                    "{err:?}"
                ),
            }
            for secret in h.secrets() {
                assert!(!err.to_string().contains(&secret), "{err}");
            }
        }
    }

    /// Guarantee 4: a message refused for good is skipped, not asked for again: retrying it
    /// would stall every message behind it (a poll offset, a catch-up mark, a webhook
    /// retried by the platform). Were it treated as "try later", the refused one would come
    /// back as the second message accepted.
    async fn a_message_refused_for_good_is_skipped(&self) {
        let h = &self.h;
        self.sink.reject_next.store(1, Ordering::SeqCst);
        let refused = h.deliver(&self.connector, 1).await;
        let next = h.deliver(&self.connector, 2).await;
        let got = self.sink.until(2, h).await;
        assert_eq!(got[1].id, next.message, "refused: {refused:?}\n{got:#?}");
        assert!(
            got.iter().all(|m| m.id != refused.message),
            "the refused message was handed over again\n{got:#?}"
        );
    }

    /// Guarantee 5: shutdown is respected.
    async fn shutdown_is_respected(self) {
        let h = &self.h;
        self.shutdown.cancel();
        match tokio::time::timeout(WAIT, self.run).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => fail("run ended with an error after shutdown", e, h),
            Ok(Err(join)) => fail("run panicked", join, h),
            Err(_) => fail(
                "run did not end after shutdown",
                format!("within {WAIT:?}"),
                h,
            ),
        }
    }
}

fn settings() -> ConnectorSettings {
    ConnectorSettings {
        state: Arc::new(MemoryState::default()),
        agent_id: "tess".into(),
        persona_name: "Tess".into(),
        allowed_rooms: None,
        only_join_allowed: false,
    }
}

/// Builds `platform`'s connector from these settings, as the gateway does.
fn build(platform: Platform, vars: &[(&str, String)]) -> Arc<dyn Connector> {
    let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let lookup = crate::connector::lookup_of(&pairs);
    match crate::registry::build(platform, &lookup, &settings()) {
        Ok(Built::Ready(c)) => c,
        Ok(Built::NotConfigured(why)) => panic!("{platform} is not configured: {why}"),
        Err(e) => panic!("{platform} did not build: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Telegram

/// Ann's private chat with the bot.
const TG_CHAT: i64 = 42;

struct Telegram {
    fake: FakeTelegram,
    connector: Arc<dyn Connector>,
    /// `Some(secret)` in webhook mode.
    webhook: Option<&'static str>,
}

impl Telegram {
    async fn start_in(webhook: Option<&'static str>) -> Self {
        let fake = FakeTelegram::start().await;
        let mut vars = vec![
            ("TELEGRAM_BOT_TOKEN", fake.token().to_string()),
            ("TELEGRAM_API_ROOT", fake.api_root()),
        ];
        if let Some(secret) = webhook {
            vars.push((
                "TELEGRAM_WEBHOOK_URL",
                "https://bot.example.org/webhooks/telegram/tess".into(),
            ));
            vars.push(("TELEGRAM_WEBHOOK_SECRET", secret.into()));
        }
        let connector = build(Platform::Telegram, &vars);
        Self {
            fake,
            connector,
            webhook,
        }
    }
}

impl Diagnose for Telegram {
    fn diagnostics(&self) -> String {
        self.fake.diagnostics()
    }
}

#[async_trait]
impl Harness for Telegram {
    async fn start() -> Self {
        Self::start_in(None).await
    }
    fn connector(&self) -> Arc<dyn Connector> {
        self.connector.clone()
    }
    async fn until_receiving(&self) -> Result<(), String> {
        match self.webhook {
            // The webhook is registered once the connector can take its calls.
            Some(_) => {
                self.fake.wait_for_webhook(WAIT).await;
            }
            None => {
                self.fake.wait_for_calls("getUpdates", 1, WAIT).await;
            }
        }
        Ok(())
    }
    async fn deliver(&self, connector: &Arc<dyn Connector>, nth: u32) -> Expected {
        let text = "hello from Ann";
        let message = tg::text(
            tg::private_chat(TG_CHAT, "Ann"),
            tg::user(TG_CHAT, "Ann"),
            text,
        );
        let id = match self.webhook {
            None => self.fake.push_message(message),
            Some(secret) => {
                let mut message = message;
                let id = 3 + i64::from(nth);
                message["message_id"] = json!(id);
                message["date"] = json!(1_700_000_000);
                let update = json!({"update_id": 5 + i64::from(nth), "message": message});
                let response = connector
                    .webhook(WebhookRequest {
                        headers: vec![("x-telegram-bot-api-secret-token".into(), secret.into())],
                        body: update.to_string().into_bytes(),
                    })
                    .await;
                assert_eq!(response.status, 200, "{}", response.body);
                id
            }
        };
        Expected {
            platform: Platform::Telegram,
            room: RoomId::new(TG_CHAT.to_string()),
            author: UserId::new(TG_CHAT.to_string()),
            message: MessageId::new(format!("{TG_CHAT}:{id}")),
            text: text.into(),
        }
    }
    async fn until_sent(&self, n: usize) -> Result<(), String> {
        self.fake.try_wait_for_sent(n, WAIT).await.map(|_| ())
    }
    fn refuse_next_send(&self, refusal: Refusal) {
        match refusal {
            Refusal::Outage => self.fake.refuse_next_send(500, "Internal Server Error"),
            Refusal::Forbidden => self
                .fake
                .refuse_next_send(403, "Forbidden: bot was blocked by the user"),
        }
    }
    fn secrets(&self) -> Vec<String> {
        let token = self.fake.token().to_string();
        let secret = token.split_once(':').map(|(_, s)| s.to_string());
        [Some(token), secret, self.webhook.map(String::from)]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// A connector's webhook mode: the same harness as its receiver's, started with a webhook
/// secret, so that both modes run the one suite.
macro_rules! webhook_harness {
    ($(#[$doc:meta])* $name:ident, $inner:ident, $secret:literal) => {
        $(#[$doc])*
        struct $name($inner);

        impl Diagnose for $name {
            fn diagnostics(&self) -> String {
                self.0.diagnostics()
            }
        }

        #[async_trait]
        impl Harness for $name {
            async fn start() -> Self {
                Self($inner::start_in(Some($secret)).await)
            }
            fn connector(&self) -> Arc<dyn Connector> {
                self.0.connector()
            }
            async fn until_receiving(&self) -> Result<(), String> {
                self.0.until_receiving().await
            }
            async fn deliver(&self, connector: &Arc<dyn Connector>, nth: u32) -> Expected {
                self.0.deliver(connector, nth).await
            }
            async fn until_sent(&self, n: usize) -> Result<(), String> {
                self.0.until_sent(n).await
            }
            fn refuse_next_send(&self, refusal: Refusal) {
                self.0.refuse_next_send(refusal)
            }
            fn secrets(&self) -> Vec<String> {
                self.0.secrets()
            }
        }
    };
}

webhook_harness!(
    /// Telegram, taking updates by webhook instead of long polling.
    TelegramWebhook,
    Telegram,
    "s3cret_hook"
);

// ---------------------------------------------------------------------------------------
// Discord

const DISCORD_CHANNEL: &str = "410000000000000001";

struct Discord {
    fake: FakeDiscord,
    connector: Arc<dyn Connector>,
}

impl Diagnose for Discord {
    fn diagnostics(&self) -> String {
        self.fake.diagnostics()
    }
}

#[async_trait]
impl Harness for Discord {
    async fn start() -> Self {
        let fake = FakeDiscord::start().await;
        let connector = build(
            Platform::Discord,
            &[
                ("DISCORD_API_TOKEN", fake_discord::TOKEN.into()),
                ("DISCORD_API_URL", fake.url()),
                (
                    "DISCORD_APPLICATION_ID",
                    fake_discord::APPLICATION_ID.into(),
                ),
            ],
        );
        Self { fake, connector }
    }
    fn connector(&self) -> Arc<dyn Connector> {
        self.connector.clone()
    }
    async fn until_receiving(&self) -> Result<(), String> {
        self.fake.try_wait_for_ready(1, WAIT).await
    }
    async fn deliver(&self, _connector: &Arc<dyn Connector>, _nth: u32) -> Expected {
        let text = "when is the lamp lit?";
        let id = self.fake.send_message_create(
            NewMessage::guild(DISCORD_CHANNEL, Author::person("alice"), text).mentioning_bot(),
        );
        let author = self
            .fake
            .user_id("alice")
            .expect("the fake names the author of a message it dispatched");
        Expected {
            platform: Platform::Discord,
            room: RoomId::new(DISCORD_CHANNEL),
            author: UserId::new(author),
            message: MessageId::new(id),
            // The fake writes a mention as Discord does, `<@bot id>` before the text.
            text: format!("<@{}> {text}", fake_discord::BOT_ID),
        }
    }
    async fn until_sent(&self, n: usize) -> Result<(), String> {
        self.fake.try_wait_for_sent(n, WAIT).await.map(|_| ())
    }
    fn refuse_next_send(&self, refusal: Refusal) {
        match refusal {
            Refusal::Outage => self
                .fake
                .refuse_next_send(500, 0, "500: Internal Server Error"),
            Refusal::Forbidden => self
                .fake
                .refuse_next_send(403, 50013, "Missing Permissions"),
        }
    }
    fn secrets(&self) -> Vec<String> {
        vec![fake_discord::TOKEN.into()]
    }
}

// ---------------------------------------------------------------------------------------
// Farcaster

/// The person who mentions the bot.
const FC_AUTHOR: u64 = 7;

struct Farcaster {
    fake: FakeNeynar,
    connector: Arc<dyn Connector>,
    /// `Some(secret)` when casts arrive by webhook.
    webhook: Option<&'static str>,
}

impl Farcaster {
    async fn start_in(webhook: Option<&'static str>) -> Self {
        let fake = FakeNeynar::start().await;
        let mut vars = vec![
            ("FARCASTER_FID", fake.bot_fid().to_string()),
            ("FARCASTER_NEYNAR_API_KEY", fake.api_key().to_string()),
            (
                "FARCASTER_NEYNAR_SIGNER_UUID",
                fake.signer_uuid().to_string(),
            ),
            ("NEYNAR_API_URL", fake.url()),
            ("FARCASTER_POLL_INTERVAL", "1".into()),
        ];
        if let Some(secret) = webhook {
            vars.push(("FARCASTER_NEYNAR_WEBHOOK_SECRET", secret.into()));
        }
        let connector = build(Platform::Farcaster, &vars);
        Self {
            fake,
            connector,
            webhook,
        }
    }
}

impl Diagnose for Farcaster {
    fn diagnostics(&self) -> String {
        self.fake.diagnostics()
    }
}

#[async_trait]
impl Harness for Farcaster {
    async fn start() -> Self {
        Self::start_in(None).await
    }
    fn connector(&self) -> Arc<dyn Connector> {
        self.connector.clone()
    }
    async fn until_receiving(&self) -> Result<(), String> {
        match self.webhook {
            // A webhook call waits for `run` to hand over its sink; nothing to wait for.
            Some(_) => Ok(()),
            None => self.fake.try_wait_for_polls(1, WAIT).await,
        }
    }
    async fn deliver(&self, connector: &Arc<dyn Connector>, _nth: u32) -> Expected {
        let text = "@fern when does the tide turn?";
        let hash = self.fake.mention(FC_AUTHOR, "alice", text);
        if let Some(secret) = self.webhook {
            let body = serde_json::to_vec(&self.fake.cast_created_event(&hash))
                .expect("the event is JSON");
            let signature = fake_neynar::sign_webhook(secret, &body);
            let response = connector
                .webhook(WebhookRequest {
                    headers: vec![("x-neynar-signature".into(), signature)],
                    body,
                })
                .await;
            assert_eq!(response.status, 200, "{}", response.body);
        }
        Expected {
            platform: Platform::Farcaster,
            // A root cast is its own thread.
            room: RoomId::new(hash.clone()),
            author: UserId::new(FC_AUTHOR.to_string()),
            message: MessageId::new(hash),
            text: text.into(),
        }
    }
    async fn until_sent(&self, n: usize) -> Result<(), String> {
        self.fake.try_wait_for_casts(n, WAIT).await.map(|_| ())
    }
    fn refuse_next_send(&self, refusal: Refusal) {
        let status = match refusal {
            Refusal::Outage => 500,
            Refusal::Forbidden => 403,
        };
        self.fake
            .push_failure(Route::Publish, Failure::Status(status));
    }
    fn secrets(&self) -> Vec<String> {
        [
            Some(self.fake.api_key().to_string()),
            Some(self.fake.signer_uuid().to_string()),
            self.webhook.map(String::from),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

webhook_harness!(
    /// Farcaster, taking casts from Neynar webhooks instead of polling.
    FarcasterWebhook,
    Farcaster,
    "whsec-conformance"
);

/// One test per connector, all with the body of [`conforms`].
macro_rules! conformance {
    ($($name:ident: $harness:ty),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            conforms::<$harness>().await;
        }
    )*};
}

conformance! {
    discord: Discord,
    telegram_polling: Telegram,
    telegram_webhook: TelegramWebhook,
    farcaster_polling: Farcaster,
    farcaster_webhook: FarcasterWebhook,
}
