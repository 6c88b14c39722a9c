//! Agents: where a message is decided and answered.
//!
//! One `Agent` per persona. `handle` takes a journaled message through its turn and waits
//! out a storage failure; `process` makes the turn a value (`turn::Turn`: the journal entry,
//! the message as the steps see it, the persona's mind and meter), and `steps` is the
//! recipe: read it to know the order of a turn. Each step has its own file, named for it,
//! in the order a message meets them:
//!
//! - `access`: whether the sender and the room are let in (`admit`, `crate::access`), and
//!   an owner's `/approve`.
//! - `resume`: a message driven again is answered from the journal, or given up.
//! - `edit`: an edit or a delete of an earlier message (`revise`), before the rest.
//! - `command`: chat commands (`command`, `run_command`), and the sender's right to steer
//!   the room (`may_steer`).
//! - `decide`: the pure rules (`decide::decide`, `decide::steer`), then the agent's step
//!   that reads the room and applies them (`decide`, `bot_turns`, `standing`).
//!   `arbitrate` is the troupe's part of deciding, in a room several personas share: the
//!   reads and the claim around the pure rule of `rooms::arbiter`; `troupe` says who the
//!   troupe is and which bots are its own.
//! - `limits`: the rate limits (`budget`) and the spend budgets (`spend_cap`).
//! - `ack`: the acknowledgement reaction while a reply is made (`TROUPE_ACK_REACTION`).
//! - `media`: voice notes heard (`hear`), and images put in the prompt (`see`).
//! - `recall`: what the prompt draws on (`recall`, `thread_context`), the prompt
//!   (`compose`) and the why panel's record of it (`explain`).
//! - `model`: the model step (`model`, `complete`): typing, the model-down notice, one
//!   `provider::call` per model call (`model_call`), stopped by a delete. `tools` is a turn
//!   with tools (`tool_turn`): the model's calls run, their results fed back, up to
//!   `TROUPE_TOOL_MAX_STEPS`; `streaming` shows the reply while it is written.
//! - `answer`: the reply's room action (`act`), then record and deliver (`answer`, `reply`,
//!   `record`); `speak` answers a voice note by voice too, before the text.
//! - `outbound`: every message the agent says to a room, and its outbox key, built once.
//!
//! An agent holds only the handles it uses: replies leave through the outbox, and what a
//! platform knows beyond the message comes from its connector in the registry
//! (`registry::Connectors`). Its persona and model provider sit behind a lock so that a hot
//! reload swaps them between two messages without a restart.

mod access;
mod ack;
mod answer;
mod arbitrate;
mod command;
pub mod decide;
mod edit;
mod limits;
mod media;
mod model;
mod outbound;
mod recall;
mod resume;
mod speak;
mod streaming;
#[cfg(test)]
mod tests;
mod tools;
mod troupe;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;
use troupe_connectors::sync::RwLocked;
use troupe_connectors::{AgentId, Inbound, Platform};

use crate::bus::{Delivery, Envelope, Handler};
use crate::config::AgentSettings;
use crate::limits::RateLimiter;
use crate::outbox::Outbox;
use crate::outcome::{HandleError, Outcome, Waiters};
use crate::persona::Persona;
use crate::provider::ModelProvider;
use crate::registry::Connectors;
use crate::storage::{JournalId, Store};
use answer::Reply;
use recall::Composed;
use turn::{Step, Stop, Turn};

/// How long a message whose handling failed on storage waits for the database to come back
/// before it is left pending for the next start.
const STORAGE_WAIT: Duration = Duration::from_secs(120);

/// What a persona runs with; swapped whole on reload.
pub struct Mind {
    pub persona: Persona,
    /// The model replies go to (elizaOS's large model).
    pub provider: Arc<dyn ModelProvider>,
    /// The small model, when the persona names one (`OPENAI_SMALL_MODEL`…).
    pub small: Option<Arc<dyn ModelProvider>>,
    /// The vision model describing images for a text-only persona (`TROUPE_VISION_MODEL`).
    pub vision: Option<Arc<dyn ModelProvider>>,
    /// The persona's tools (issue 33); `None` without MCP servers: nothing on the path.
    pub tools: crate::tools::Tools,
    /// The persona's voice for answering voice notes (`media::speech`); `None`: text only.
    pub speaking: Option<crate::media::speech::Speaking>,
    /// Who the persona lets in (issue 44): its DM policies, owners and rooms.
    pub access: crate::access::Rules,
}

impl Mind {
    /// The provider for background work (summaries, facts, post drafts): the small model
    /// when one is set, else the reply's.
    pub fn background(&self) -> Arc<dyn ModelProvider> {
        self.small.clone().unwrap_or_else(|| self.provider.clone())
    }
}

pub struct Agent {
    pub id: AgentId,
    mind: RwLock<Arc<Mind>>,
    store: Store,
    outbox: Outbox,
    /// The running connectors, for what a platform knows beyond the message (the sender's
    /// rights, the thread, typing, the troupe's bots); replies leave through `outbox`.
    connectors: Connectors,
    limiter: RateLimiter,
    waiters: Waiters,
    settings: AgentSettings,
    /// Documents to recall from; `None` answers without knowledge.
    knowledge: Option<crate::knowledge::Knowledge>,
    memory: crate::memory::Memory,
    /// Accounting and budgets (issue 16); `None` counts and limits nothing.
    spend: Option<crate::spend::Spend>,
    /// The persona's meter (its budgets and prices, parsed from its settings): made when
    /// spend is attached and at each reload, not per message.
    meter: RwLock<Option<crate::spend::Meter>>,
    /// The personas sharing rooms with this one (`troupe`); `None` answers alone.
    troupe: Option<troupe::Troupe>,
    /// Fetches the links of images in messages, under the fetch policy (`crate::media`).
    fetcher: crate::fetch::Fetcher,
    /// Who is let in, and the pairing codes (`crate::access`).
    access: crate::access::Access,
}

impl Agent {
    pub fn new(
        mind: Mind,
        store: Store,
        outbox: Outbox,
        connectors: Connectors,
        limiter: RateLimiter,
        waiters: Waiters,
        settings: AgentSettings,
    ) -> Self {
        let memory =
            crate::memory::Memory::new(&mind.persona.id, store.clone(), limiter.clone(), &settings);
        let store_for_access = store.clone();
        Self {
            memory,
            id: mind.persona.id.clone(),
            mind: RwLock::new(Arc::new(mind)),
            store,
            outbox,
            connectors,
            limiter,
            waiters,
            settings,
            knowledge: None,
            spend: None,
            meter: RwLock::new(None),
            troupe: None,
            fetcher: crate::fetch::Fetcher::new(&crate::fetch::FetchSettings::default()),
            access: crate::access::Access::new(
                store_for_access,
                crate::spend::clock::SpendClock::system(0),
            ),
        }
    }

    /// Lets senders in with `access` (its clock, shared with the rest of the gateway).
    pub fn with_access(mut self, access: crate::access::Access) -> Self {
        self.access = access;
        self
    }

    /// Accounts every model call of this agent and applies its budgets (docs/spend.md).
    pub fn with_spend(mut self, spend: crate::spend::Spend) -> Self {
        *self.meter.get_mut().unwrap_or_else(|e| e.into_inner()) =
            Some(spend.meter(&self.mind().persona));
        self.spend = Some(spend);
        self
    }

    /// Fetches message images under the fetch policy `settings` (`TROUPE_FETCH_*`).
    pub fn with_fetch(mut self, settings: &crate::fetch::FetchSettings) -> Self {
        self.fetcher = crate::fetch::Fetcher::new(settings);
        self
    }

    /// Recalls knowledge from `knowledge` for every reply.
    pub fn with_knowledge(mut self, knowledge: crate::knowledge::Knowledge) -> Self {
        self.knowledge = Some(knowledge);
        self
    }

    /// The persona's spend meter (budgets, prices), when spend is on.
    pub fn meter(&self) -> Option<crate::spend::Meter> {
        self.meter.read_locked().clone()
    }

    /// This persona's connector on `platform`, when one is running.
    fn connector(&self, platform: Platform) -> Option<Arc<dyn troupe_connectors::Connector>> {
        self.connectors.get(&self.id, platform)
    }

    /// Waits for the memory upkeep its replies started (summaries, facts): at shutdown.
    pub(crate) async fn finish_upkeep(&self) {
        self.memory.finish_upkeep().await;
    }

    pub fn mind(&self) -> Arc<Mind> {
        self.mind.read_locked().clone()
    }

    /// Replaces the persona and provider; the next message uses them.
    pub fn reload(&self, mind: Mind) {
        let meter = self.spend.as_ref().map(|s| s.meter(&mind.persona));
        *self.mind.write_locked() = Arc::new(mind);
        *self.meter.write_locked() = meter;
    }

    /// Handles one message and tells whoever waits on it how it went.
    pub async fn handle(&self, envelope: Envelope) {
        let Envelope {
            journal_id,
            inbound,
            delivery,
            trace,
            ..
        } = envelope;
        let handle_span = crate::trace::handle_span(&self.id, inbound.platform(), trace.as_deref());
        let span = tracing::info_span!("message",
            agent = %self.id,
            platform = %inbound.platform(),
            room = %inbound.room.id,
            message_id = %inbound.id,
            journal_id = journal_id.0,
        );
        let platform = inbound.platform();
        let outcome = async {
            let mut delivery = delivery;
            let give_up_at = Instant::now() + STORAGE_WAIT;
            // An error that is not an outage (a bad row) fails again with the database up:
            // a few tries, not two minutes of them.
            let mut tries_left = 5;
            loop {
                match self.process(journal_id, &inbound, delivery).await {
                    Ok(outcome) => break outcome,
                    Err(e) => {
                        crate::metrics::error("storage");
                        // A storage failure (the database restarting, say): the message
                        // waits, in its room's turn, until the database answers again, and
                        // is handled anew; as a redelivery, so that one whose reply was
                        // committed after all is not answered twice. Only when that takes
                        // too long does the entry stay pending for the next start.
                        tries_left -= 1;
                        if tries_left > 0 && self.storage_is_back(give_up_at).await {
                            tracing::warn!(error = %e, "could not handle the message; handling it again now that the database answers");
                            delivery = Delivery::Again;
                            continue;
                        }
                        tracing::error!(error = %e, "could not handle the message");
                        break Outcome::Failed {
                            error: HandleError::Storage(e.to_string()),
                        };
                    }
                }
            }
        }
        .instrument(span)
        .instrument(handle_span.clone())
        .await;
        handle_span.record("troupe.decision", outcome.metric_label());
        crate::metrics::decision(platform, outcome.metric_label());
        self.waiters.complete(journal_id, &outcome);
    }

    /// Waits until the database answers a ping (true), or `give_up_at` passes (false).
    async fn storage_is_back(&self, give_up_at: Instant) -> bool {
        let mut pause = Duration::from_millis(100);
        loop {
            if Instant::now() >= give_up_at {
                return false;
            }
            tokio::time::sleep(pause).await;
            if self.store.ping().await.is_ok() {
                return true;
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// Takes one message through its turn (`steps`). An `Err` is a storage failure, which
    /// `handle` waits out; every other ending is the message's outcome.
    async fn process(
        &self,
        journal: JournalId,
        inbound: &Inbound,
        delivery: Delivery,
    ) -> anyhow::Result<Outcome> {
        let mut turn = Turn::new(journal, inbound, self.mind(), self.meter());
        match self.steps(&mut turn, delivery).await {
            Ok(outcome) | Err(Stop::Done(outcome)) => Ok(outcome),
            Err(Stop::Storage(error)) => Err(error),
        }
    }

    /// The order of a turn. Each step has its file, named for it; a step that ends the
    /// message's handling (a redelivery already answered, a delete, a command, an ignored
    /// or limited message, a failed model call) stops the turn with its outcome.
    async fn steps(&self, turn: &mut Turn<'_>, delivery: Delivery) -> Step<Outcome> {
        // resume.rs: a message driven again may be answered already, or given up.
        if delivery.is_again() {
            self.resume(turn).await?;
        }
        // access.rs: a sender or a room not let in ends here, before anything is kept.
        self.admit(turn).await?;
        // edit.rs: an edit is taken as the message it edits; a delete ends here.
        self.revise(turn).await?;
        // command.rs: `/mute`, `/forget`… answered without the model.
        self.command(turn).await?;
        // decide.rs: whether the persona answers, and what the sender may do to the room.
        let room = (self.decide(turn))
            .instrument(tracing::info_span!(target: "troupe_trace", "decide"))
            .await?;
        let standing = self.standing(turn, &room).await?;
        // limits.rs: the rate limits, then the spend budgets.
        self.budget(turn).await?;
        self.spend_cap(turn).await?;
        // ack.rs: the persona answers; its reaction shows until the turn ends.
        let _ack = self.acknowledge(turn.inbound());
        // media.rs: voice notes become text before anything reads the message.
        self.hear(turn).await;
        // recall.rs: what the prompt draws on, and the prompt; media.rs adds the images.
        let recall = (self.recall(turn, room))
            .instrument(tracing::info_span!(target: "troupe_trace", "recall"))
            .await?;
        let Composed { mut prompt, quoted } = self.compose(turn, &recall);
        self.see(turn, &mut prompt).await;
        self.explain(turn, &recall, &prompt);
        // model.rs: the model call (tools.rs, streaming.rs), stopped by a delete.
        let answer = self.model(turn, &prompt).await?;
        // answer.rs: the reply's room action, its voice note (speak.rs), record, deliver.
        let reply = Reply::new(answer, standing, quoted);
        (self.answer(turn, reply, recall.recent.len()))
            .instrument(tracing::info_span!(target: "troupe_trace", "send"))
            .await
    }
}

/// All agents, by id, with lookup by name too. A cheap-to-clone handle.
#[derive(Clone, Default)]
pub struct Agents {
    inner: Arc<RwLock<HashMap<AgentId, Arc<Agent>>>>,
}

impl Agents {
    pub fn insert(&self, agent: Arc<Agent>) {
        self.inner.write_locked().insert(agent.id.clone(), agent);
    }

    pub fn remove(&self, id: &AgentId) -> Option<Arc<Agent>> {
        self.inner.write_locked().remove(id)
    }

    pub fn by_id(&self, id: &AgentId) -> Option<Arc<Agent>> {
        self.inner.read_locked().get(id).cloned()
    }

    /// Finds an agent by its id or, ignoring case, its persona's name: what a caller typed,
    /// so a plain string (the map answers it without building an id).
    pub fn find(&self, id_or_name: &str) -> Option<Arc<Agent>> {
        if let Some(a) = self.inner.read_locked().get(id_or_name).cloned() {
            return Some(a);
        }
        self.all()
            .into_iter()
            .find(|a| a.mind().persona.name.eq_ignore_ascii_case(id_or_name))
    }

    /// Every agent, sorted by id.
    pub fn all(&self) -> Vec<Arc<Agent>> {
        let mut all: Vec<_> = self.inner.read_locked().values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

/// Hands bus messages to their agent.
pub struct Dispatcher {
    pub agents: Agents,
    pub store: Store,
    pub waiters: Waiters,
}

#[async_trait::async_trait]
impl Handler for Dispatcher {
    async fn handle(&self, envelope: Envelope) {
        match self.agents.by_id(&envelope.agent) {
            Some(agent) => agent.handle(envelope).await,
            None => {
                let unknown = HandleError::UnknownAgent(envelope.agent.clone());
                let error = unknown.to_string();
                tracing::warn!(journal_id = envelope.journal_id.0, %error, "dropping message");
                // A drive again counts as an attempt, as in `Agent::handle`, so such an entry
                // is not driven at every start forever; the limit is applied at replay.
                if envelope.delivery.is_again()
                    && let Err(e) = self
                        .store
                        .journal_begin(envelope.journal_id, u32::MAX)
                        .await
                {
                    tracing::error!(error = %e, "could not count the attempt");
                }
                if let Err(e) = self.store.journal_fail(envelope.journal_id, &error).await {
                    tracing::error!(error = %e, "could not record the failure");
                }
                self.waiters
                    .complete(envelope.journal_id, &Outcome::Failed { error: unknown });
            }
        }
    }
}
