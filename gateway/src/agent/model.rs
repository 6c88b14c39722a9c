//! The model step of a turn (`model`): the reply's model calls, shown while they are
//! written (`streaming.rs`), with the persona's tools where its room may use them
//! (`tools.rs`), and stopped if the message is deleted meanwhile (`edit.rs`). Each call is
//! one `provider::call` (`model_call`): the scheduler's turn (DMs and mentions first), the
//! provider waiting out an outage with one notice to the room, spend and metrics.

use std::time::{Duration, Instant};
use troupe_connectors::{Inbound, Platform};

use super::Agent;
use super::outbound::Kind;
use super::tools::{Answer, origin_of};
use super::turn::{Step, Turn, done};
use crate::live::Live;
use crate::outcome::Outcome;
use crate::persona::Prompt;
use crate::provider::{OutageNotice, Parts, Payer, ProviderError, Reply, Request, ToolRound};
use crate::storage::JournalId;

/// The notice a room gets, once per outage, when its message waits for a model provider
/// that is down (issue 12, faults).
const MODEL_DOWN: &str = "I'm having trouble reaching my model; I'll answer as soon as it's back.";

/// How long sending that notice may take before it is given up.
const NOTICE_WAIT: Duration = Duration::from_secs(10);

/// Tells a waiting message's room that the model is unreachable. The notice goes straight
/// to the connector, not through the outbox: it is not the message's reply, it is not
/// remembered in the room, and a lost one is only logged.
struct RoomNotice<'a> {
    agent: &'a Agent,
    inbound: &'a Inbound,
}

#[async_trait::async_trait]
impl OutageNotice for RoomNotice<'_> {
    fn key(&self) -> String {
        // One notice per persona and room: the bus's order key.
        crate::bus::OrderKey::of(&self.agent.id, &self.inbound.room.key()).into_string()
    }

    async fn send(&self) {
        let platform = self.inbound.platform();
        let Some(connector) = self.agent.connector(platform) else {
            return;
        };
        let notice = self
            .agent
            .outbound(self.inbound, Kind::ModelDown, MODEL_DOWN.to_string());
        match tokio::time::timeout(NOTICE_WAIT, connector.send(&notice)).await {
            Ok(Ok(_)) => tracing::info!("told the room the model is unreachable"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not tell the room the model is unreachable")
            }
            Err(_) => tracing::warn!("telling the room the model is unreachable took too long"),
        }
    }
}

impl Agent {
    /// Model: what the model answers the prompt. A message deleted while its reply is
    /// made stops the calls (`deleted_meanwhile`); a failed call ends the turn as
    /// `model_failed` says.
    pub(super) async fn model(&self, turn: &Turn<'_>, prompt: &Prompt) -> Step<Answer> {
        let call = self.complete(turn, prompt);
        let result = match self.waiters.turns().start(&self.id, turn.inbound()) {
            None => call.await,
            Some(watch) => tokio::select! {
                result = call => result,
                () = watch.deleted() => return self.deleted_meanwhile(turn).await,
            },
        };
        match result {
            Ok(answer) => Ok(answer),
            Err(error) => done(self.model_failed(turn.journal, error).await?),
        }
    }

    /// Complete: the model calls, shown live where they can be (`streaming`). Where the
    /// persona has tools this room may use, the turn goes through `tools::tool_turn`
    /// (shown live: the text written after the last tool step); a persona without tools
    /// makes the one call. A message that meets a provider outage waits for the provider
    /// to come back, and its room hears once per outage; not the Web platform, whose caller
    /// sees the wait itself.
    async fn complete(&self, turn: &Turn<'_>, prompt: &Prompt) -> Result<Answer, ProviderError> {
        let streaming = self.streaming(turn);
        let live = streaming.live();
        let result = match (!turn.untrusted)
            .then(|| super::tools::offer(&turn.mind, turn.inbound()))
            .flatten()
        {
            Some(offer) => self.tool_turn(turn, prompt, offer, live).await,
            None => self
                .model_call(turn, prompt, None, live)
                .await
                .map(|reply| Answer {
                    origin: origin_of(&reply.completion, prompt),
                    text: reply.completion.text,
                    tool_marker: false,
                }),
        };
        streaming.end(&result).await;
        result
    }

    /// The model call failed: the message is marked failed in the journal (a repost drives
    /// it again), and the outcome says why.
    async fn model_failed(
        &self,
        journal_id: JournalId,
        error: ProviderError,
    ) -> anyhow::Result<Outcome> {
        self.store
            .journal_fail(journal_id, &error.to_string())
            .await?;
        Ok(Outcome::Failed {
            error: crate::outcome::HandleError::Model(error),
        })
    }

    /// One model call of the reply (`provider::call`: the scheduler's turn, the provider,
    /// spend and metrics), with the turn's tools when `round` is given, and its log line.
    pub(super) async fn model_call(
        &self,
        turn: &Turn<'_>,
        prompt: &Prompt,
        round: Option<ToolRound<'_>>,
        live: Option<&Live>,
    ) -> Result<Reply, ProviderError> {
        let (provider, inbound) = (&turn.mind.provider, turn.inbound());
        let started = Instant::now();
        let notice = RoomNotice {
            agent: self,
            inbound,
        };
        let notice = (inbound.platform() != Platform::Web).then_some(&notice as &dyn OutageNotice);
        // The scheduler's turn: DMs and mentions first, rooms in turn (spend::scheduler).
        let priority = if inbound.is_direct || inbound.mentions_self {
            crate::spend::Priority::Direct
        } else {
            crate::spend::Priority::Reply
        };
        let room = inbound.room.key();
        let request = Request {
            purpose: crate::spend::Purpose::Reply,
            parts: Parts::Chat(prompt),
            tools: round,
            live,
            notice,
            payer: Payer {
                turn: crate::spend::Turn::new(priority, &room),
                meter: turn.meter.as_ref(),
                who: crate::spend::Who::sender(&room, inbound),
            },
        };
        let reply = provider.call(request).await.inspect_err(|error| {
            tracing::warn!(%error, provider = %provider.describe(), "model call failed");
        })?;
        tracing::info!(
            model_ms = started.elapsed().as_millis() as u64,
            prompt_tokens = reply.completion.prompt_tokens,
            completion_tokens = reply.completion.completion_tokens,
            tool_calls = reply.calls.len(),
            "model answered"
        );
        Ok(reply)
    }
}
