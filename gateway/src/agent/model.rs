//! The model call (`complete`): the typing indicator, then the provider's one call
//! (`provider::call`: the scheduler's turn, waiting out an outage with one notice to the
//! room, spend and metrics).

use std::time::{Duration, Instant};
use troupe_connectors::{Inbound, Platform};

use super::outbound::Kind;
use super::tools::{Answer, origin_of};
use super::{Agent, Mind};
use crate::live::Live;
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
    /// Complete: the model call, with the typing indicator on and its metrics. A message
    /// that meets a provider outage waits for the provider to come back, and its room hears
    /// once per outage; not the Web platform, whose caller sees the wait itself. Where the
    /// persona has tools this room may use, the turn goes through `tools::tool_turn`; a
    /// persona without tools takes the one call it always took. Either is shown live where
    /// it can be (an HTTP caller that asked for a stream, a platform that edits messages,
    /// `TROUPE_STREAM` on): with tools, the text written after the last tool step.
    pub(super) async fn complete(
        &self,
        mind: &Mind,
        meter: Option<&crate::spend::Meter>,
        inbound: &Inbound,
        journal_id: JournalId,
        prompt: &Prompt,
    ) -> Result<Answer, ProviderError> {
        let typing = self.keep_typing(inbound);
        let offer = super::tools::offer(mind, inbound);
        // A voice note answered by voice is not shown live: its voice note goes before its
        // text (`speak`), and is made from the whole text anyway. A persona without a
        // voice pays one `Option` check.
        let by_voice = mind.speaking.is_some() && crate::media::speech::came_as_voice(inbound);
        let (showing, typing, caller) = if inbound.platform() == Platform::Web {
            (None, Some(typing), self.live_for(inbound))
        } else if by_voice {
            (None, Some(typing), None)
        } else {
            match self.show_live(inbound, journal_id, typing) {
                Ok(showing) => (Some(showing), None, None),
                Err(typing) => (None, Some(typing), None),
            }
        };
        let live = showing.as_ref().map(|s| s.live()).or(caller.as_ref());
        let result = match offer {
            Some(offer) => {
                self.tool_turn(mind, meter, inbound, prompt, offer, live)
                    .await
            }
            None => self
                .model_call(mind, meter, inbound, prompt, None, live)
                .await
                .map(|reply| Answer {
                    origin: origin_of(&reply.completion, prompt),
                    text: reply.completion.text,
                    tool_marker: false,
                }),
        };
        drop(typing);
        match (showing, &result) {
            (Some(showing), Ok(_)) => showing.finish().await,
            (Some(showing), Err(_)) => showing.abandon().await,
            (None, _) => {}
        }
        result
    }

    /// The model call failed: the message is marked failed in the journal (a repost drives
    /// it again), and the outcome says why.
    pub(super) async fn model_failed(
        &self,
        journal_id: JournalId,
        error: ProviderError,
    ) -> anyhow::Result<crate::outcome::Outcome> {
        self.store
            .journal_fail(journal_id, &error.to_string())
            .await?;
        Ok(crate::outcome::Outcome::Failed {
            error: crate::outcome::HandleError::Model(error),
        })
    }

    /// One model call of the reply (`provider::call`: the scheduler's turn, the provider,
    /// spend and metrics), with the turn's tools when `round` is given, and the log line.
    pub(super) async fn model_call(
        &self,
        mind: &Mind,
        meter: Option<&crate::spend::Meter>,
        inbound: &Inbound,
        prompt: &Prompt,
        round: Option<ToolRound<'_>>,
        live: Option<&Live>,
    ) -> Result<Reply, ProviderError> {
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
                meter,
                who: crate::spend::Who::sender(&room, inbound),
            },
        };
        let reply = mind.provider.call(request).await.inspect_err(|error| {
            tracing::warn!(%error, provider = %mind.provider.describe(), "model call failed");
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

    /// The HTTP caller's `Live` for this message, when it asked for a stream and
    /// `TROUPE_STREAM` is on.
    fn live_for(&self, inbound: &Inbound) -> Option<Live> {
        if !self.settings.stream.on {
            return None;
        }
        self.waiters.live().find(&self.id, &inbound.id)
    }

    /// Keeps the platform's typing indicator on until the returned guard is cancelled.
    pub(super) fn keep_typing(&self, inbound: &Inbound) -> tokio_util::sync::DropGuard {
        let token = tokio_util::sync::CancellationToken::new();
        // The Web platform shows no typing: no task and no timer per message.
        if inbound.platform() == Platform::Web {
            return token.drop_guard();
        }
        if let Some(connector) = self.connector(inbound.platform()) {
            let room = inbound.room.clone();
            let stop = token.clone();
            tokio::spawn(async move {
                loop {
                    let _ = connector.typing(&room).await;
                    // Discord's indicator lasts about 10 s, Telegram's about 5 s.
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_secs(4)) => {}
                    }
                }
            });
        }
        token.drop_guard()
    }
}
