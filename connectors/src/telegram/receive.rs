//! Receiving updates: the long-polling loop, the webhook, and what both do with an update.
//!
//! Polling drives `getUpdates` itself so that it controls the offset: an update is confirmed
//! (the next call's offset passes it) only after the sink accepted it. When the sink fails,
//! the offset stays and the same updates are asked for again. A webhook call is answered
//! 200 only after the sink accepted its update, else 500 so that Telegram delivers it again;
//! a call without the exact secret token gets 401 and nothing is read.

use crate::sync::{Locked, RwLocked};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use teloxide::payloads::SetWebhookSetters;
use teloxide::prelude::Requester;
use teloxide::requests::{JsonRequest, Request};
use teloxide::types::{AllowedUpdate, ChatId, Update};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::config::{Mode, WebhookSecret};
use super::decode::{Decoded, RawGetUpdates, decode};
use super::normalize::{BotIdentity, Event, normalize};
use super::{Live, TelegramConnector, errors};
use crate::connector::{
    Accepted, ConnectorError, InboundSink, SinkError, WebhookRequest, WebhookResponse, pause,
};

/// Seconds a `getUpdates` call waits for news; below the HTTP client's 17 s timeout.
const POLL_TIMEOUT_SECS: u32 = 10;
/// Where the polling position is kept across restarts (the journal still decides
/// duplicates; this only spares Telegram a redelivery).
const OFFSET_KEY: &str = "getUpdates.offset";
/// The header Telegram puts the webhook's secret token in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The update kinds asked for: messages and their edits (an edited question is answered
/// again, issue 32), the bot's own membership (to leave groups), and reactions (feedback on
/// replies, issue 32; Telegram sends them in groups only where the bot is an administrator).
fn allowed_updates() -> [AllowedUpdate; 4] {
    [
        AllowedUpdate::Message,
        AllowedUpdate::EditedMessage,
        AllowedUpdate::MyChatMember,
        AllowedUpdate::MessageReaction,
    ]
}

/// 1 s, 2 s, 4 s … 30 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.clamp(1, 6).saturating_sub(1)).min(Duration::from_secs(30))
}

/// How many times an update may be in hand when its handling panics (the loop is restarted
/// by the gateway each time) before it is confirmed and skipped: a poisoned update must
/// not stop every update behind it, and one panic may be a fluke worth a retry.
const MAX_PANICS_PER_UPDATE: u32 = 3;

/// What `/readyz` learns of the polling loop: when `getUpdates` last answered, and whether
/// one is in flight (a long poll holds a call up to `POLL_TIMEOUT_SECS`, bounded by the
/// HTTP client's timeout, so a call in flight is not silence).
#[derive(Debug, Default)]
pub(super) struct PollClock {
    last_answer: Option<Instant>,
    in_flight: bool,
}

impl PollClock {
    /// How long the loop has gone without an answer; `None` when it is not polling.
    pub(super) fn quiet_for(&self) -> Option<Duration> {
        match (self.in_flight, self.last_answer) {
            (true, _) => Some(Duration::ZERO),
            (false, Some(at)) => Some(at.elapsed()),
            (false, None) => None,
        }
    }
}

/// The update whose handling was started last and not finished, with the number of starts:
/// it survives the loop (the connector outlives a restart), so a panic that ended the loop
/// is counted when the same update comes back.
#[derive(Debug, Default)]
pub(super) struct InHand(Option<(u32, u32)>);

impl InHand {
    /// Records a start of `id`; `false` when it has already been started
    /// `MAX_PANICS_PER_UPDATE` times without finishing, so it must be skipped.
    fn start(&mut self, id: u32) -> bool {
        let tries = match self.0 {
            Some((held, tries)) if held == id => tries + 1,
            _ => 1,
        };
        self.0 = Some((id, tries));
        tries <= MAX_PANICS_PER_UPDATE
    }

    fn finish(&mut self) {
        self.0 = None;
    }
}

/// Where the polling loop stands: the offset the next `getUpdates` asks from (everything
/// before it is confirmed), and the failures in a row, for the backoff.
struct Position {
    offset: Option<i32>,
    failures: u32,
}

impl Position {
    /// Confirms update `id`: the next call asks from the one after it (never back).
    fn confirm(&mut self, id: u32) {
        let next = i32::try_from(i64::from(id) + 1).ok();
        if next > self.offset {
            self.offset = next;
        }
    }
}

fn respond(status: u16, body: Value) -> WebhookResponse {
    WebhookResponse {
        status,
        body: body.to_string(),
    }
}

impl TelegramConnector {
    /// `getMe` until it answers. `Ok(None)` when shutdown came first; an error when the
    /// token is refused.
    pub(super) async fn identify(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<BotIdentity>, ConnectorError> {
        let mut failures = 0;
        loop {
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                r = self.get_me() => r,
            };
            match attempt {
                Ok(me) => return Ok(Some(me)),
                Err(e @ ConnectorError::Unauthorized(_)) => return Err(e),
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "cannot reach the Telegram Bot API (getMe); retrying");
                    let wait = match e {
                        ConnectorError::RateLimited { retry_after } => retry_after,
                        _ => backoff(failures),
                    };
                    if !pause(shutdown, wait).await {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Long polling until shutdown: ask `getUpdates` from the saved offset, hand each batch
    /// to the sink, confirm what it took, and wait out failures.
    pub(super) async fn poll(
        &self,
        sink: Arc<dyn InboundSink>,
        me: BotIdentity,
        shutdown: &CancellationToken,
    ) -> Result<(), ConnectorError> {
        // A webhook left by an earlier run would make getUpdates fail with a conflict.
        if !self.delete_webhook(shutdown).await? {
            return Ok(());
        }
        let mut position = Position {
            offset: self.saved_offset().await,
            failures: 0,
        };
        self.clock().last_answer = Some(Instant::now());
        loop {
            let Some(answer) = self.get_updates(position.offset, shutdown).await else {
                return Ok(());
            };
            let batch = match answer {
                Ok(batch) => batch,
                Err(e) => {
                    if self.after_failed_poll(e, &mut position, shutdown).await? {
                        continue;
                    }
                    return Ok(());
                }
            };
            self.clock().last_answer = Some(Instant::now());
            position.failures = 0;
            if !self
                .take_batch(&batch, &me, sink.as_ref(), &mut position, shutdown)
                .await
            {
                return Ok(());
            }
        }
    }

    /// The offset a previous run saved; `None` (Telegram's own) when there is none or it
    /// cannot be read.
    async fn saved_offset(&self) -> Option<i32> {
        match self.state.get(OFFSET_KEY).await {
            Ok(v) => v.and_then(|v| v.parse().ok()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the saved getUpdates offset; starting from Telegram's");
                None
            }
        }
    }

    /// One `getUpdates` call from `offset`, marked in flight for `/readyz` while it waits.
    /// `None` when shutdown came first.
    async fn get_updates(
        &self,
        offset: Option<i32>,
        shutdown: &CancellationToken,
    ) -> Option<Result<Vec<Value>, RequestError>> {
        let request = JsonRequest::new(
            self.bot.clone(),
            RawGetUpdates {
                offset,
                timeout: POLL_TIMEOUT_SECS,
                allowed_updates: allowed_updates().to_vec(),
            },
        );
        self.clock().in_flight = true;
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return None,
            r = request.send() => r,
        };
        self.clock().in_flight = false;
        Some(answer)
    }

    /// After a failed `getUpdates`: removes a webhook that is in the way, or logs the
    /// failure and waits (Telegram's `retry_after`, else the backoff). `Ok(false)` on
    /// shutdown; an error when the token is refused.
    async fn after_failed_poll(
        &self,
        e: RequestError,
        position: &mut Position,
        shutdown: &CancellationToken,
    ) -> Result<bool, ConnectorError> {
        if matches!(e, RequestError::Api(ApiError::CantGetUpdates)) {
            tracing::warn!("a webhook is set for this bot; removing it to poll");
            return self.delete_webhook(shutdown).await;
        }
        let error = errors::classify(&e, &self.config.token);
        let wait = match &error {
            ConnectorError::Unauthorized(_) => return Err(error),
            ConnectorError::RateLimited { retry_after } => *retry_after,
            _ => {
                position.failures += 1;
                backoff(position.failures)
            }
        };
        if matches!(e, RequestError::Api(ApiError::TerminatedByOtherGetUpdates)) {
            tracing::warn!(
                "another process polls this bot's updates (409 Conflict): run one troupe per bot token, or use a webhook"
            );
        } else {
            tracing::warn!(error = %error, retry_in = ?wait, "getUpdates failed");
        }
        Ok(pause(shutdown, wait).await)
    }

    /// Hands a batch to the sink in order, confirming each update it took or refused for
    /// good (the offset moves past it, and is saved). At the first update the sink could
    /// not take, the offset stays before it, so that the next `getUpdates`, after a
    /// backoff, hands it over again. `false` on shutdown.
    async fn take_batch(
        &self,
        batch: &[Value],
        me: &BotIdentity,
        sink: &dyn InboundSink,
        position: &mut Position,
        shutdown: &CancellationToken,
    ) -> bool {
        let before = position.offset;
        for item in batch {
            let Some((id, handled)) = self.take_item(item, me, sink).await else {
                continue;
            };
            match handled {
                Ok(()) => {}
                Err(e) if !e.is_retryable() => {
                    // Refused for good: asking for it again would stall every update
                    // behind it.
                    tracing::warn!(update_id = id, error = %e,
                        "the gateway refused an update; skipping it");
                }
                Err(e) => {
                    // Not journaled: keep the offset so Telegram hands it over again.
                    position.failures += 1;
                    let wait = backoff(position.failures);
                    tracing::warn!(update_id = id, error = %e, retry_in = ?wait,
                        "the gateway could not take an update; asking Telegram for it again");
                    self.save_offset(before, position.offset).await;
                    return pause(shutdown, wait).await;
                }
            }
            position.confirm(id);
        }
        self.save_offset(before, position.offset).await;
        true
    }

    /// Reads one item of a batch and dispatches it: its id and what the sink said. An
    /// unreadable update (teloxide failed or panicked on it) is logged and counts as taken:
    /// the same bytes fail the same way every time. `None` for an item without an id.
    async fn take_item(
        &self,
        item: &Value,
        me: &BotIdentity,
        sink: &dyn InboundSink,
    ) -> Option<(u32, Result<(), SinkError>)> {
        match decode(item) {
            Decoded::NoId => None,
            Decoded::Unreadable { id, why } => {
                tracing::warn!(
                    update_id = id,
                    why = %self.config.token.scrub(&why),
                    "skipping an update that cannot be read"
                );
                Some((id, Ok(())))
            }
            Decoded::Update(update) => {
                Some((update.id.0, self.dispatch_in_hand(&update, me, sink).await))
            }
        }
    }

    /// Dispatches an update, keeping it in hand meanwhile: one whose handling has panicked
    /// `MAX_PANICS_PER_UPDATE` times (each panic restarts the loop) is logged and counts as
    /// taken instead.
    async fn dispatch_in_hand(
        &self,
        update: &Update,
        me: &BotIdentity,
        sink: &dyn InboundSink,
    ) -> Result<(), SinkError> {
        let id = update.id.0;
        if !self.in_hand().start(id) {
            tracing::error!(
                update_id = id,
                tries = MAX_PANICS_PER_UPDATE,
                "handling this update panicked every time; skipping it"
            );
            return Ok(());
        }
        let handled = self.dispatch(update, me, sink).await;
        self.in_hand().finish();
        handled
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, PollClock> {
        self.clock.locked()
    }

    fn in_hand(&self) -> std::sync::MutexGuard<'_, InHand> {
        self.in_hand.locked()
    }

    async fn save_offset(&self, before: Option<i32>, now: Option<i32>) {
        if let Some(o) = now.filter(|_| now != before)
            && let Err(e) = self.state.put(OFFSET_KEY, &o.to_string()).await
        {
            tracing::debug!(error = %e, "cannot save the getUpdates offset");
        }
    }

    /// `deleteWebhook` (pending updates kept) until it answers. `Ok(false)` on shutdown.
    async fn delete_webhook(&self, shutdown: &CancellationToken) -> Result<bool, ConnectorError> {
        let mut failures = 0;
        loop {
            let answer = tokio::select! {
                _ = shutdown.cancelled() => return Ok(false),
                r = self.bot.delete_webhook().send() => r,
            };
            match answer {
                Ok(_) => return Ok(true),
                Err(e) => {
                    let error = errors::classify(&e, &self.config.token);
                    if matches!(error, ConnectorError::Unauthorized(_)) {
                        return Err(error);
                    }
                    failures += 1;
                    tracing::warn!(error = %error, "deleteWebhook failed; retrying");
                    if !pause(shutdown, backoff(failures)).await {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// Registers the webhook, then serves webhook calls until shutdown. The webhook stays
    /// set after shutdown, so Telegram keeps updates until troupe is back.
    pub(super) async fn serve_webhook(
        &self,
        sink: Arc<dyn InboundSink>,
        me: BotIdentity,
        url: &Url,
        secret: &WebhookSecret,
        shutdown: &CancellationToken,
    ) -> Result<(), ConnectorError> {
        *self.live.write_locked() = Some(Live { sink, me });
        let mut failures = 0;
        loop {
            let request = self
                .bot
                .set_webhook(url.clone())
                .secret_token(secret.as_str())
                .allowed_updates(allowed_updates());
            let answer = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                r = request.send() => r,
            };
            match answer {
                Ok(_) => break,
                Err(e) => match errors::classify(&e, &self.config.token) {
                    ConnectorError::Fatal(why) => {
                        return Err(ConnectorError::Fatal(format!(
                            "Telegram refused the webhook {url} (TELEGRAM_WEBHOOK_URL): {why}"
                        )));
                    }
                    e @ ConnectorError::Unauthorized(_) => return Err(e),
                    e => {
                        failures += 1;
                        tracing::warn!(error = %e, "setWebhook failed; retrying");
                        if !pause(shutdown, backoff(failures)).await {
                            return Ok(());
                        }
                    }
                },
            }
        }
        tracing::info!(%url, "webhook registered with Telegram");
        shutdown.cancelled().await;
        Ok(())
    }

    /// One webhook call.
    pub(super) async fn receive_webhook(&self, request: WebhookRequest) -> WebhookResponse {
        let Mode::Webhook { secret, .. } = &self.config.mode else {
            return respond(
                404,
                serde_json::json!({"error": "not_found",
                    "detail": "this persona's Telegram connector uses long polling; set TELEGRAM_WEBHOOK_URL to use a webhook"}),
            );
        };
        if !request
            .header(SECRET_HEADER)
            .is_some_and(|s| secret.matches(s))
        {
            tracing::warn!("a Telegram webhook call without the right secret token was refused");
            return respond(
                401,
                serde_json::json!({"error": "unauthorized",
                    "detail": "missing or wrong X-Telegram-Bot-Api-Secret-Token"}),
            );
        }
        let live = self.live.read_locked().clone();
        let Some(live) = live else {
            return respond(
                503,
                serde_json::json!({"error": "unavailable", "detail": "the Telegram connector is not running"}),
            );
        };
        let item = match serde_json::from_slice::<Value>(&request.body) {
            Ok(item) => item,
            Err(e) => {
                return respond(
                    400,
                    serde_json::json!({"error": "bad_request", "detail": format!("the body is not JSON: {e}")}),
                );
            }
        };
        // Read like a polled update, so one that teloxide panics on is skipped, not fatal.
        let update = match decode(&item) {
            Decoded::Update(u) => u,
            Decoded::Unreadable { id, why } => {
                // Telegram would send it again and again; it will never be readable.
                tracing::warn!(update_id = id, why = %self.config.token.scrub(&why),
                    "skipping a webhook update that cannot be read");
                return respond(200, serde_json::json!({"ok": true, "skipped": true}));
            }
            Decoded::NoId => {
                tracing::warn!("skipping a webhook update without an update_id");
                return respond(200, serde_json::json!({"ok": true, "skipped": true}));
            }
        };
        match self.dispatch(&update, &live.me, live.sink.as_ref()).await {
            Ok(()) => respond(200, serde_json::json!({"ok": true})),
            Err(e) if !e.is_retryable() => {
                // A 500 would have Telegram send it again and again; it will never be taken.
                tracing::warn!(update_id = update.id.0, error = %e, "the gateway refused a webhook update; skipping it");
                respond(200, serde_json::json!({"ok": true, "skipped": true}))
            }
            Err(e) => {
                tracing::warn!(update_id = update.id.0, error = %e, "the gateway could not take a webhook update; Telegram will send it again");
                respond(
                    500,
                    serde_json::json!({"error": "unavailable", "detail": "could not journal the update"}),
                )
            }
        }
    }

    /// Does what one update calls for. An error means the sink did not take a message.
    async fn dispatch(
        &self,
        update: &Update,
        me: &BotIdentity,
        sink: &dyn InboundSink,
    ) -> Result<(), SinkError> {
        match normalize(update, me, &self.policy) {
            Event::Message(message) => {
                let id = message.id.clone();
                let accepted = match &self.chorus {
                    Some(chorus) => super::chorus::hand_over(chorus, update, me, *message).await,
                    None => sink.accept(*message).await,
                };
                match accepted? {
                    Accepted::New => {
                        tracing::debug!(update_id = update.id.0, message = %id, "message journaled")
                    }
                    Accepted::Duplicate => {
                        tracing::debug!(update_id = update.id.0, message = %id, "message already journaled")
                    }
                }
            }
            Event::Leave { chat } => self.leave(chat).await,
            Event::Reactions(reactions) => {
                // Not journaled: a reaction the sink cannot take now is dropped, never
                // asked for again (it would hold up the messages behind it).
                for reaction in reactions {
                    if let Err(e) = sink.react(reaction).await {
                        tracing::warn!(update_id = update.id.0, error = %e,
                            "could not take a Telegram reaction; it is dropped");
                    }
                }
            }
            Event::Skip(why) => tracing::debug!(update_id = update.id.0, why, "update skipped"),
        }
        Ok(())
    }

    /// Leaves a group the persona may not be in. A failure is logged: the next message
    /// from the group tries again.
    async fn leave(&self, chat: i64) {
        match self.bot.leave_chat(ChatId(chat)).await {
            Ok(_) => tracing::info!(
                chat,
                "left a group that is not in allowedGroupIds (shouldOnlyJoinInAllowedGroups)"
            ),
            Err(e) => {
                tracing::warn!(chat, error = %errors::describe(&e, &self.config.token), "could not leave a group that is not allowed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_that_keeps_panicking_is_given_up_after_a_bound() {
        let mut hand = InHand::default();
        for _ in 0..MAX_PANICS_PER_UPDATE {
            assert!(hand.start(5));
        }
        assert!(
            !hand.start(5),
            "a fourth start of the same update must skip it"
        );
        assert!(hand.start(6), "another update starts afresh");
        hand.finish();
        assert!(hand.start(6));
    }

    #[test]
    fn confirming_moves_the_offset_forward_only() {
        let mut position = Position {
            offset: None,
            failures: 0,
        };
        position.confirm(7);
        assert_eq!(position.offset, Some(8));
        position.confirm(3);
        assert_eq!(
            position.offset,
            Some(8),
            "an older update does not move it back"
        );
        position.confirm(u32::MAX);
        assert_eq!(
            position.offset,
            Some(8),
            "an id past i32 cannot be asked from"
        );
    }

    #[test]
    fn a_poll_in_flight_is_not_silence() {
        let mut clock = PollClock::default();
        assert_eq!(clock.quiet_for(), None);
        clock.in_flight = true;
        assert_eq!(clock.quiet_for(), Some(Duration::ZERO));
        clock.in_flight = false;
        clock.last_answer = Some(Instant::now() - Duration::from_secs(90));
        assert!(
            clock
                .quiet_for()
                .is_some_and(|q| q >= Duration::from_secs(90))
        );
    }

    #[test]
    fn backoff_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), Duration::from_secs(30));
    }
}
