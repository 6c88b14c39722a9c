//! Agents: where a message is decided and answered.
//!
//! One `Agent` per persona. `handle` takes a journaled message through the whole path:
//! decide whether to answer, apply the rate limits, recall the room, compose the prompt
//! from the character, call the model, record both messages and the reply in one
//! transaction, and hand the reply to the outbox. `process` reads as that recipe, one method
//! per step (`resume`, `command`, `decide`, `standing`, `budget`, `recall`, `compose`,
//! `complete`, `answer`), and
//! `handle` around it waits out a storage failure. An agent holds only the handles it uses;
//! its persona and model provider sit behind a lock so that a hot reload swaps them between
//! two messages without a restart.

pub mod decide;
mod troupe;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tracing::Instrument;
use troupe_connectors::{AgentId, ContextLine, Inbound, Outbound, Platform};

use crate::bus::{Envelope, Handler};
use crate::config::AgentSettings;
use crate::limits::{RateLimiter, Verdict};
use crate::outbox::Outbox;
use crate::outcome::{HandleError, Outcome, Waiters};
use crate::persona::{self, HistoryLine, Persona, Prompt, PromptInput};
use crate::provider::{ModelProvider, OutageNotice, ProviderError};
use crate::registry::Connectors;
use crate::storage::{
    Attempt, HandledMessage, JournalId, JournalState, MemoryMessage, NewMemory, RecordedReply,
    ReplyStart, RoomContext, Store,
};
use decide::{Decision, decide};

/// How long a message whose handling failed on storage waits for the database to come back
/// before it is left pending for the next start.
const STORAGE_WAIT: Duration = Duration::from_secs(120);

/// How long a steering command waits for the platform to say whether its sender may.
const STEER_CHECK_WAIT: Duration = Duration::from_secs(5);

/// How long the prompt waits for the platform's thread context.
const THREAD_CONTEXT_WAIT: Duration = Duration::from_secs(5);

/// The short reply sent once per window to a room that is over its rate limit.
const SLOW_DOWN: &str = "I'm getting a lot of messages right now. Give me a minute and ask again.";

/// The short reply a room gets, at most once per `APOLOGY_QUIET_MS`, when troupe gives up a
/// message that kept stopping the gateway.
const GAVE_UP: &str =
    "Sorry, I couldn't answer that message. Please try again, or send it differently.";

/// A room that got the give-up apology gets no other for this long: a burst of poison
/// messages (or several replicas giving up) says sorry once.
const APOLOGY_QUIET_MS: i64 = 60 * 60 * 1000;
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
        format!("{}\u{1f}{}", self.agent.id, self.inbound.room.key())
    }

    async fn send(&self) {
        let platform = self.inbound.platform();
        let Some(connector) = self.agent.connector(platform) else {
            return;
        };
        let notice = Outbound {
            key: format!("{}:model-down:{}", self.agent.id, self.inbound.id),
            room: self.inbound.room.clone(),
            text: MODEL_DOWN.to_string(),
            reply_to: Some(self.inbound.id.clone()),
        };
        match tokio::time::timeout(NOTICE_WAIT, connector.send(&notice)).await {
            Ok(Ok(_)) => tracing::info!("told the room the model is unreachable"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not tell the room the model is unreachable")
            }
            Err(_) => tracing::warn!("telling the room the model is unreachable took too long"),
        }
    }
}

/// The model's reply, with what `act` needs to judge the action it may propose.
struct Reply {
    text: String,
    standing: Standing,
    quotes_marker: bool,
}

/// What `recall` found for a message, owned, for `compose` to borrow from.
struct Recall {
    /// The room's recent messages, oldest first.
    recent: Vec<MemoryMessage>,
    /// The room's summary and the sender's facts.
    memory: crate::memory::Recalled,
    /// The thread above the message, as its platform knows it.
    thread: Vec<ContextLine>,
    /// Knowledge for the prompt.
    hits: Vec<crate::knowledge::Hit>,
}

/// What the message's sender may do to its room, as far as `standing` knows before the
/// model is called (rooms::actions, issue 30 finding 5).
#[derive(Debug, Clone, Copy)]
struct Standing {
    /// The room was muted when the message was decided: nothing is said in it unless the
    /// reply unmutes it.
    muted: bool,
    /// Whether the sender may steer the room, when it was asked already.
    may_steer: Option<bool>,
}

/// A prompt, and whether anything it quotes (history, thread, documents, summary, facts,
/// names) holds an action marker: then no action the reply proposes is honoured.
struct Composed {
    prompt: Prompt,
    quotes_marker: bool,
}

/// What a persona runs with; swapped whole on reload.
pub struct Mind {
    pub persona: Persona,
    pub provider: Arc<dyn ModelProvider>,
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
        }
    }

    /// Accounts every model call of this agent and applies its budgets (docs/spend.md).
    pub fn with_spend(mut self, spend: crate::spend::Spend) -> Self {
        *self.meter.get_mut().unwrap_or_else(|e| e.into_inner()) =
            Some(spend.meter(&self.mind().persona));
        self.spend = Some(spend);
        self
    }

    /// Recalls knowledge from `knowledge` for every reply.
    pub fn with_knowledge(mut self, knowledge: crate::knowledge::Knowledge) -> Self {
        self.knowledge = Some(knowledge);
        self
    }

    /// The persona's spend meter (budgets, prices), when spend is on.
    pub fn meter(&self) -> Option<crate::spend::Meter> {
        self.meter.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// This persona's connector on `platform`, when one is running.
    fn connector(&self, platform: Platform) -> Option<Arc<dyn troupe_connectors::Connector>> {
        self.connectors.get(&self.id, platform)
    }

    pub fn mind(&self) -> Arc<Mind> {
        self.mind.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the persona and provider; the next message uses them.
    pub fn reload(&self, mind: Mind) {
        let meter = self.spend.as_ref().map(|s| s.meter(&mind.persona));
        *self.mind.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(mind);
        *self.meter.write().unwrap_or_else(|e| e.into_inner()) = meter;
    }

    /// Handles one message and tells whoever waits on it how it went.
    pub async fn handle(&self, envelope: Envelope) {
        let Envelope {
            journal_id,
            inbound,
            redelivery,
            ..
        } = envelope;
        let span = tracing::info_span!("message",
            agent = %self.id,
            platform = %inbound.platform(),
            room = %inbound.room.id,
            message_id = %inbound.id,
            journal_id = journal_id.0,
        );
        let platform = inbound.platform();
        let outcome = async {
            let mut redelivery = redelivery;
            let give_up_at = Instant::now() + STORAGE_WAIT;
            // An error that is not an outage (a bad row) fails again with the database up:
            // a few tries, not two minutes of them.
            let mut tries_left = 5;
            loop {
                match self.process(journal_id, &inbound, redelivery).await {
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
                            redelivery = true;
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
        .await;
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

    /// Takes one message through its steps; each step owns one part of the path, and a
    /// step that ends the message's handling (an ignored or limited message, a failed model
    /// call) returns its outcome. An `Err` is a storage failure, which `handle` waits out.
    async fn process(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
        redelivery: bool,
    ) -> anyhow::Result<Outcome> {
        if redelivery && let Some(outcome) = self.resume(journal_id, inbound).await? {
            return Ok(outcome);
        }
        let mind = self.mind();
        if let Some(outcome) = self.command(&mind, journal_id, inbound).await? {
            return Ok(outcome);
        }
        let room = match self.decide(&mind.persona, journal_id, inbound).await? {
            Ok(room) => room,
            Err(outcome) => return Ok(outcome),
        };
        let standing = match self.standing(journal_id, inbound, &room).await? {
            Ok(standing) => standing,
            Err(outcome) => return Ok(outcome),
        };
        if let Some(outcome) = self.budget(journal_id, inbound).await? {
            return Ok(outcome);
        }
        let meter = self.meter();
        if let Some(outcome) = self.spend_cap(meter.as_ref(), journal_id, inbound).await? {
            return Ok(outcome);
        }
        let recall = self.recall(inbound, room).await?;
        let Composed {
            prompt,
            quotes_marker,
        } = self.compose(&mind.persona, inbound, &recall);
        // The console's "why" panel (crate::why): what this prompt was made of.
        crate::why::record(
            &self.id,
            inbound,
            &recall.recent,
            &recall.memory,
            &recall.hits,
            &prompt,
        );
        let text = match self.complete(&mind, meter.as_ref(), inbound, &prompt).await {
            Ok(text) => text,
            Err(error) => {
                self.store
                    .journal_fail(journal_id, &error.to_string())
                    .await?;
                return Ok(Outcome::Failed {
                    error: HandleError::Model(error),
                });
            }
        };
        let reply = Reply {
            text,
            standing,
            quotes_marker,
        };
        self.answer(
            &mind,
            meter,
            journal_id,
            inbound,
            reply,
            recall.recent.len(),
        )
        .await
    }

    /// Standing: what the sender may do to the room. A muted room lets through only a
    /// message asking to talk again (`decide::steer`); from someone who may not steer the
    /// room it ends here, with no model call and, as in any muted room, nothing said.
    async fn standing(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
        room: &RoomContext,
    ) -> anyhow::Result<Result<Standing, Outcome>> {
        if !room.state.muted_at(crate::clock::now_ms()) {
            return Ok(Ok(Standing {
                muted: false,
                may_steer: None,
            }));
        }
        if self.may_steer(inbound).await {
            return Ok(Ok(Standing {
                muted: true,
                may_steer: Some(true),
            }));
        }
        tracing::info!("asked to talk again by someone who may not steer the room; staying quiet");
        self.record(journal_id, inbound, None).await?;
        Ok(Err(Outcome::Ignored {
            reason: crate::outcome::WhyNot::Muted,
        }))
    }

    /// Spend: the persona's budgets (docs/spend.md). Past one there is no model call; the
    /// message is remembered, and the first refused message of the window in its room (or
    /// from its user, for the user's budget) gets the persona's notice. `None` when within.
    async fn spend_cap(
        &self,
        meter: Option<&crate::spend::Meter>,
        journal_id: JournalId,
        inbound: &Inbound,
    ) -> anyhow::Result<Option<Outcome>> {
        let Some(meter) = meter else {
            return Ok(None);
        };
        let room = inbound.room.key();
        let who = crate::spend::Who {
            room: Some(&room),
            user: Some((inbound.platform(), &inbound.author.id)),
        };
        let crate::spend::Admission::Over { scope, notice } =
            meter.admit(who, crate::spend::Purpose::Reply).await?
        else {
            return Ok(None);
        };
        tracing::info!(
            budget = scope.as_str(),
            notice = notice.is_some(),
            "over budget"
        );
        match notice {
            // The notice is the message's reply (on the Web platform too: its caller reads
            // it), recorded and delivered like any reply.
            Some(text) => {
                self.reply(journal_id, inbound, text.clone()).await?;
                Ok(Some(Outcome::Replied { texts: vec![text] }))
            }
            None => {
                self.record(journal_id, inbound, None).await?;
                Ok(Some(Outcome::Ignored {
                    reason: crate::outcome::WhyNot::OverBudget,
                }))
            }
        }
    }

    /// Journal: a message published before may have been handled since (by another
    /// replica, or by a drive that raced this one): its recorded replies stand. Otherwise
    /// this handling is counted before it starts, so that one that crashes the process
    /// counts too, and a message that had all its attempts is given up instead (see
    /// storage::journal). A first publication was counted by its journal insert, and skips
    /// this step. `None` when the message is to be handled.
    async fn resume(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
    ) -> anyhow::Result<Option<Outcome>> {
        match self
            .store
            .journal_begin(journal_id, self.settings.max_attempts)
            .await?
        {
            Attempt::Started { .. } => Ok(None),
            Attempt::Done => {
                let replies = self.store.replies_for(journal_id).await?;
                Ok(Some(Outcome::Replied {
                    texts: replies.into_iter().map(|o| o.text).collect(),
                }))
            }
            Attempt::Exhausted {
                attempts,
                state,
                last_error,
            } => self
                .give_up(journal_id, inbound, attempts, state, last_error)
                .await
                .map(Some),
        }
    }

    /// Command: a chat command for this persona (`/mute`, `/forget`: see `rooms`) is
    /// answered here, before the rate limits and without the model, and neither it nor its
    /// answer enters the room's memory. `None` when the message is not a command.
    async fn command(
        &self,
        mind: &Mind,
        journal_id: JournalId,
        inbound: &Inbound,
    ) -> anyhow::Result<Option<Outcome>> {
        let names = [mind.persona.name.as_str()];
        let Some(command) = crate::rooms::command_for(inbound, &names) else {
            return Ok(None);
        };
        // Where the persona may not talk (a room outside its allowed list, DMs off), it
        // takes no commands either: `decide` ignores the message as any other.
        let switches = mind.persona.switches(inbound.platform());
        if let Decision::Ignore(
            decide::WhyNot::NotAllowedRoom
            | decide::WhyNot::DirectMessagesOff
            | decide::WhyNot::Bot,
        ) = decide(&names, &switches, inbound)
        {
            return Ok(None);
        }
        tracing::info!(command = command.name(), "chat command");
        let may_steer = !command.steers_room() || self.may_steer(inbound).await;
        let answer = self
            .run_command(&command, inbound.room.key(), &inbound.author.id, may_steer)
            .await?;
        let outbound = Outbound {
            key: format!("{}:{}", self.id, journal_id.0),
            room: inbound.room.clone(),
            text: answer.text.clone(),
            reply_to: Some(inbound.id.clone()),
        };
        if let Some(id) = self
            .store
            .record_command(journal_id, &self.id, &outbound)
            .await?
        {
            self.outbox.deliver(id).await?;
        }
        Ok(Some(Outcome::Replied {
            texts: vec![answer.text],
        }))
    }

    /// Runs `command` in `room` for `user` (of the room's platform), from the chat or from
    /// `POST …/rooms/{room}/commands`, and follows up on its effect in this process
    /// (cached facts dropped after `/forgetme`).
    pub(crate) async fn run_command(
        &self,
        command: &troupe_connectors::command::Command,
        room: troupe_connectors::RoomKey,
        user: &troupe_connectors::UserId,
        may_steer: bool,
    ) -> anyhow::Result<crate::rooms::Answer> {
        let mind = self.mind();
        let platform = room.platform;
        let ctx = crate::rooms::Ctx {
            store: &self.store,
            agent: &self.id,
            persona_name: &mind.persona.name,
            model: mind.provider.describe(),
            by: format!("{platform}:{user}"),
            room,
            platform,
            user,
            may_steer,
            now_ms: crate::clock::now_ms(),
            meter: self.meter(),
        };
        let answer = crate::rooms::run(command, &ctx).await?;
        if answer.effect == crate::rooms::Effect::ForgotFacts {
            self.memory
                .forget_cached_facts(crate::storage::FactSubject {
                    agent_id: &self.id,
                    platform,
                    user_id: user,
                });
        }
        Ok(answer)
    }

    /// Whether the sender may steer the room, as its platform says; a platform that cannot
    /// tell (an error, too slow) refuses, since a mute or a forget cannot be taken back.
    async fn may_steer(&self, inbound: &Inbound) -> bool {
        let Some(connector) = self.connector(inbound.platform()) else {
            return true;
        };
        match tokio::time::timeout(STEER_CHECK_WAIT, connector.may_steer(inbound)).await {
            Ok(Ok(allowed)) => allowed,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not check the sender's rights; refusing the command");
                false
            }
            Err(_) => {
                tracing::warn!("checking the sender's rights took too long; refusing the command");
                false
            }
        }
    }

    /// Decide: whether the persona answers at all (`decide::decide`), then the room's
    /// controls (`decide::steer`: muted, following). An ignored message is still remembered
    /// in its room. `Err` with the outcome when it does not answer; when it does, what was
    /// read of the room. A message the rules answer has its room's messages (and summary)
    /// read with the controls, in one round trip; one they ignore reads the controls alone.
    async fn decide(
        &self,
        persona: &Persona,
        journal_id: JournalId,
        inbound: &Inbound,
    ) -> anyhow::Result<Result<RoomContext, Outcome>> {
        let mut switches = persona.switches(inbound.platform());
        // The troupe's own personas are heard where other people's bots are not.
        let from_troupe = self.written_by_troupe(inbound).await?;
        switches.ignore_bot_messages &= !from_troupe;
        let names: Vec<&str> = [persona.name.as_str()].into_iter().collect();
        let first = decide(&names, &switches, inbound);
        let room_key = inbound.room.key();
        let answers = matches!(first, Decision::Respond(_));
        let room = self
            .store
            .room_context(
                &self.id,
                &room_key,
                answers.then_some(i64::from(self.settings.history_limit)),
                answers && self.memory.wants_summary(&room_key),
            )
            .await?;
        let state = &room.state;
        let decision = decide::steer(
            first,
            state,
            crate::clock::now_ms(),
            crate::rooms::actions::asks_to_talk_again(&inbound.text),
        );
        let decision = self.bot_turns(decision, inbound).await?;
        let decision = self.arbitrate(decision, inbound, from_troupe).await?;
        match decision {
            Decision::Ignore(why) => {
                tracing::debug!(reason = why.as_str(), "not answering");
                self.record(journal_id, inbound, None).await?;
                Ok(Err(Outcome::Ignored { reason: why }))
            }
            Decision::Respond(why) => {
                tracing::debug!(?why, "answering");
                Ok(Ok(room))
            }
        }
    }

    /// Budget: the per-user, per-room and per-agent rate limits. A limited message costs no
    /// model call; it is remembered, and the first one of a window gets the short notice
    /// (not on the Web platform, whose caller sees the 429). `None` when within the limits.
    async fn budget(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
    ) -> anyhow::Result<Option<Outcome>> {
        let room_key = inbound.room.key();
        let Verdict::Limited { scope, notice } =
            self.limiter.check(&self.id, &room_key, &inbound.author.id)
        else {
            return Ok(None);
        };
        tracing::info!(scope = scope.as_str(), notice, "rate limited");
        if notice && inbound.platform() != Platform::Web {
            self.reply(journal_id, inbound, SLOW_DOWN.to_string())
                .await?;
        } else {
            self.record(journal_id, inbound, None).await?;
        }
        Ok(Some(Outcome::RateLimited { scope }))
    }

    /// Recall: what the prompt draws on. The room's recent messages (the stored history
    /// does not hold this message yet: it is recorded with the reply, in one transaction),
    /// its summary and the sender's facts, the thread above the message as the platform
    /// knows it, and knowledge for this room and the whole agent (documents attached to the
    /// message become the room's knowledge first; a failed or slow search answers without
    /// it, see Knowledge::for_prompt).
    async fn recall(&self, inbound: &Inbound, room: RoomContext) -> anyhow::Result<Recall> {
        let room_key = inbound.room.key();
        // Read with the room's controls, unless only the room's controls made it answer
        // (a followed room).
        let recent = match room.recent {
            Some(recent) => recent,
            None => {
                self.store
                    .recent_messages(&self.id, &room_key, i64::from(self.settings.history_limit))
                    .await?
            }
        };
        let memory = self
            .memory
            .recall(&room_key, recent.len(), inbound, room.summary)
            .await?;
        let thread = self.thread_context(inbound).await;
        let hits = match &self.knowledge {
            Some(k) => {
                if !inbound.attachments.is_empty() {
                    k.ingest_attachments(&self.id, &room_key, &inbound.attachments)
                        .await;
                }
                k.for_prompt(&self.id, &room_key, &inbound.text).await
            }
            None => Vec::new(),
        };
        Ok(Recall {
            recent,
            memory,
            thread,
            hits,
        })
    }

    /// Compose: the prompt, from the character and what was recalled. The thread's lines
    /// that troupe already remembers are not repeated; the message itself comes last. It
    /// reports whether anything it quotes holds an action marker (`rooms::actions`).
    fn compose(&self, persona: &Persona, inbound: &Inbound, recall: &Recall) -> Composed {
        let Recall {
            recent,
            memory,
            thread,
            hits,
        } = recall;
        let facts: Vec<&str> = memory.facts.iter().map(String::as_str).collect();
        let mut history: Vec<HistoryLine<'_>> = thread
            .iter()
            .filter(|c| c.text != inbound.text && !recent.iter().any(|m| m.text == c.text))
            .map(|c| HistoryLine {
                author_name: &c.author_name,
                text: &c.text,
            })
            .collect();
        history.extend(recent.iter().map(|m| HistoryLine {
            author_name: &m.author_name,
            text: &m.text,
        }));
        history.push(HistoryLine {
            author_name: &inbound.author.name,
            text: &inbound.text,
        });
        let knowledge: Vec<persona::KnowledgeItem<'_>> = hits
            .iter()
            .map(|h| persona::KnowledgeItem {
                source: &h.source,
                text: &h.text,
            })
            .collect();
        let mut prompt = persona::compose(
            persona,
            &PromptInput {
                platform: inbound.platform(),
                sender_name: &inbound.author.name,
                history: &history,
                knowledge: &knowledge,
                seed: seed_for(inbound),
                budget_chars: self
                    .settings
                    .prompt_budget_chars
                    .saturating_sub(crate::rooms::actions::INSTRUCTION.len()),
                summary: memory.summary.as_deref(),
                facts: &facts,
            },
        );
        // The plain-language room controls ride on the reply itself (rooms::actions).
        prompt.system.push_str(crate::rooms::actions::INSTRUCTION);
        // Everything quoted, whether or not the budget kept it: a marker anywhere in what
        // other people wrote (or named themselves) could be the one the model repeats.
        let marked = crate::rooms::actions::holds_marker;
        let quotes_marker = history
            .iter()
            .any(|l| marked(l.text) || marked(l.author_name))
            || knowledge.iter().any(|k| marked(k.text) || marked(k.source))
            || memory.summary.as_deref().is_some_and(marked)
            || facts.iter().any(|f| marked(f));
        Composed {
            prompt,
            quotes_marker,
        }
    }

    /// Complete: the model call, with the typing indicator on and its metrics. A message
    /// that meets a provider outage waits for the provider to come back, and its room hears
    /// once per outage; not the Web platform, whose caller sees the wait itself.
    async fn complete(
        &self,
        mind: &Mind,
        meter: Option<&crate::spend::Meter>,
        inbound: &Inbound,
        prompt: &Prompt,
    ) -> Result<String, ProviderError> {
        let typing = self.keep_typing(inbound);
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
        let result = crate::spend::Turn::new(priority, &room)
            .scope(mind.provider.complete_or_wait(prompt, notice))
            .await;
        drop(typing);
        if let (Some(meter), Ok(c)) = (meter, &result) {
            let who = crate::spend::Who {
                room: Some(&room),
                user: Some((inbound.platform(), &inbound.author.id)),
            };
            let tokens = crate::spend::Tokens {
                prompt: c.prompt_tokens,
                completion: c.completion_tokens,
                cached: c.cached_tokens,
                prompt_chars: prompt.system.len() + prompt.user.len(),
                completion_chars: c.text.len(),
            };
            meter
                .record(
                    who,
                    crate::spend::Purpose::Reply,
                    &mind.provider.describe(),
                    tokens,
                )
                .await;
        }
        crate::metrics::model_call(
            &mind.provider.describe(),
            started.elapsed(),
            result.is_ok(),
            result.as_ref().ok().and_then(|c| c.prompt_tokens),
            result.as_ref().ok().and_then(|c| c.completion_tokens),
        );
        let completion = result.inspect_err(|error| {
            tracing::warn!(%error, provider = %mind.provider.describe(), "model call failed");
        })?;
        tracing::info!(
            model_ms = started.elapsed().as_millis() as u64,
            prompt_tokens = completion.prompt_tokens,
            completion_tokens = completion.completion_tokens,
            "model answered"
        );
        Ok(completion.text)
    }

    /// Reply: records the exchange and delivers the reply (`reply`), then lets room memory
    /// learn from it in the background.
    async fn answer(
        &self,
        mind: &Mind,
        meter: Option<crate::spend::Meter>,
        journal_id: JournalId,
        inbound: &Inbound,
        reply: Reply,
        recalled_messages: usize,
    ) -> anyhow::Result<Outcome> {
        let Some(text) = self.act(inbound, reply).await? else {
            // A muted room stays quiet unless the reply unmutes it.
            self.record(journal_id, inbound, None).await?;
            return Ok(Outcome::Ignored {
                reason: crate::outcome::WhyNot::Muted,
            });
        };
        self.reply(journal_id, inbound, text.clone()).await?;
        self.share_in_web_room(journal_id, inbound, &text).await?;
        if inbound.platform() != Platform::Web {
            // The persona's own reply is a bot message in the room too.
            self.store
                .bump_bot_streak(&self.id, &inbound.room.key(), true)
                .await?;
        }
        let model = crate::memory::Model {
            provider: mind.provider.clone(),
            agent_name: mind.persona.name.clone(),
            meter,
        };
        self.memory.after_reply(model, inbound, recalled_messages);
        Ok(Outcome::Replied { texts: vec![text] })
    }

    /// The cap on bot conversations (`TROUPE_BOT_TURNS`): a bot's message counts one more in
    /// the room's streak of bot messages, a human's ends it, and past the cap no bot is
    /// answered, whatever addresses the persona (a reply-ping included), until a human
    /// speaks. Bots the persona ignores anyway cost nothing; the API has no other bots.
    async fn bot_turns(&self, decision: Decision, inbound: &Inbound) -> anyhow::Result<Decision> {
        if inbound.platform() == Platform::Web || decision == Decision::Ignore(decide::WhyNot::Bot)
        {
            return Ok(decision);
        }
        let room = inbound.room.key();
        let streak = self
            .store
            .bump_bot_streak(&self.id, &room, inbound.author.is_bot)
            .await?;
        let over = inbound.author.is_bot && streak > i64::from(self.settings.bot_turns);
        Ok(match decision {
            Decision::Respond(_) if over => {
                tracing::info!(streak, "bot turns used up; silent until a human speaks");
                Decision::Ignore(decide::WhyNot::BotTurns)
            }
            d => d,
        })
    }

    /// Honours the action the reply ends with (`rooms::actions`: "please stop talking
    /// here" mutes the room) and returns the reply without it. Only the current speaker's
    /// standing acts: the action must be one their own message asks for, the prompt must
    /// quote no marker (`actions::honoured`), and they must be allowed to steer the room,
    /// else they get the polite refusal instead of the acknowledgement. An action not
    /// honoured is dropped silently, with the rest of the reply sent as written. `None`:
    /// the room is muted and the reply does not unmute it, so nothing is said, not even a
    /// refusal.
    async fn act(&self, inbound: &Inbound, reply: Reply) -> anyhow::Result<Option<String>> {
        use crate::rooms::actions::{self, Action};
        use crate::storage::RoomControl;
        let Reply {
            text: reply,
            standing,
            quotes_marker,
        } = reply;
        let (text, proposed) = actions::take(&reply);
        let action = actions::honoured(proposed, &inbound.text, quotes_marker);
        let Some(action) = action else {
            if let Some(proposed) = proposed {
                tracing::info!(
                    ?proposed,
                    quotes_marker,
                    "the reply proposed a room action the speaker did not ask for; not honoured"
                );
            }
            return Ok((!standing.muted).then(|| actions::strip(&reply)));
        };
        let may_steer = match standing.may_steer {
            Some(known) => known,
            None => self.may_steer(inbound).await,
        };
        if standing.muted && !(may_steer && action == Action::Unmute) {
            return Ok(None);
        }
        if !may_steer {
            return Ok(Some(
                crate::rooms::not_allowed(inbound.platform()).to_string(),
            ));
        }
        let control = match action {
            Action::Mute => RoomControl::Mute(Some(i64::MAX)),
            Action::Unmute => RoomControl::Mute(None),
        };
        tracing::info!(?action, "the reply asked for a room action");
        let by = format!("{}:{}", inbound.platform(), inbound.author.id);
        self.store
            .set_room_control(&self.id, &inbound.room.key(), control, &by)
            .await?;
        Ok(Some(text))
    }

    /// Gives up a message that had all its attempts: it is never handled again. One that
    /// never finished (the process stopped while handling it, `state` pending) is marked
    /// failed with the reason, and its room gets the short apology unless it had one
    /// recently (the Web platform has no room to post to: its caller gets the outcome).
    async fn give_up(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
        attempts: i32,
        state: JournalState,
        last_error: Option<String>,
    ) -> anyhow::Result<Outcome> {
        let reason = match (state, last_error) {
            (JournalState::Failed, Some(error)) => {
                format!("gave up after {attempts} attempts: {error}")
            }
            _ => {
                format!("gave up after {attempts} attempts: the gateway stopped while handling it")
            }
        };
        if state != JournalState::Pending {
            tracing::warn!(attempts, %reason, "not handling the message again");
            return Ok(Outcome::GaveUp { reason });
        }
        let apology = (inbound.platform() != Platform::Web).then(|| Outbound {
            key: format!("{}:{}:gave-up", self.id, journal_id.0),
            room: inbound.room.clone(),
            text: GAVE_UP.to_string(),
            reply_to: Some(inbound.id.clone()),
        });
        let gave_up = self
            .store
            .journal_give_up(journal_id, &reason, apology.as_ref(), APOLOGY_QUIET_MS)
            .await?;
        if gave_up.first {
            crate::metrics::error("gave_up");
            tracing::error!(
                attempts,
                apology = gave_up.apology.is_some(),
                "{reason}; the message is marked failed and will not be driven again"
            );
        }
        if let Some(outbox_id) = gave_up.apology {
            self.outbox.deliver(outbox_id).await?;
        }
        Ok(Outcome::GaveUp { reason })
    }

    /// The messages above `inbound` in its thread that its platform knows, oldest first;
    /// nothing when no connector is registered, on error, or after `THREAD_CONTEXT_WAIT`.
    async fn thread_context(&self, inbound: &Inbound) -> Vec<ContextLine> {
        let Some(connector) = self.connector(inbound.platform()) else {
            return Vec::new();
        };
        match tokio::time::timeout(THREAD_CONTEXT_WAIT, connector.thread_context(inbound)).await {
            Ok(lines) => lines,
            Err(_) => {
                tracing::warn!(
                    wait_secs = THREAD_CONTEXT_WAIT.as_secs(),
                    "the thread's context took too long; answering without it"
                );
                Vec::new()
            }
        }
    }

    /// Records the exchange and the reply, then delivers it.
    async fn reply(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
        text: String,
    ) -> anyhow::Result<()> {
        match self.record(journal_id, inbound, Some(text)).await? {
            Some(RecordedReply::Claimed(entry)) => self.outbox.deliver_claimed(entry).await?,
            Some(RecordedReply::Delivered(outbox_id)) => {
                self.outbox.delivered_in_band(inbound.platform(), outbox_id);
                return Ok(());
            }
            Some(RecordedReply::Queued(outbox_id)) => self.outbox.deliver(outbox_id).await?,
            None => return Ok(()),
        };
        Ok(())
    }

    /// Commits the message to room memory, with the reply and its outbox entry when there
    /// is one, and closes the journal entry: one transaction.
    async fn record(
        &self,
        journal_id: JournalId,
        inbound: &Inbound,
        reply: Option<String>,
    ) -> anyhow::Result<Option<RecordedReply>> {
        let agent_name = self.mind().persona.name.clone();
        let room = inbound.room.key();
        let outbound = reply.map(|text| Outbound {
            key: format!("{}:{}", self.id, journal_id.0),
            room: inbound.room.clone(),
            text,
            reply_to: Some(inbound.id.clone()),
        });
        let handled = HandledMessage {
            journal_id,
            agent_id: &self.id,
            room: &room,
            room_name: inbound.room.name.as_deref(),
            inbound: NewMemory {
                author_id: inbound.author.id.as_str(),
                author_name: &inbound.author.name,
                text: &inbound.text,
                from_agent: false,
                created_at_ms: inbound.sent_at_ms,
            },
            reply: outbound.as_ref().map(|o| {
                (
                    NewMemory {
                        author_id: self.id.as_str(),
                        author_name: &agent_name,
                        text: &o.text,
                        from_agent: true,
                        created_at_ms: crate::clock::now_ms(),
                    },
                    o.clone(),
                )
            }),
        };
        let start = outbound
            .as_ref()
            .map_or(ReplyStart::Pending, |o| self.outbox.start(&self.id, o));
        Ok(self.store.record_handled_as(handled, &start).await?)
    }

    /// Keeps the platform's typing indicator on until the returned guard is cancelled.
    fn keep_typing(&self, inbound: &Inbound) -> tokio_util::sync::DropGuard {
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

/// The sampling seed for a message: stable across a re-drive of the same message, so a
/// retried prompt is the same prompt, even when another build or replica drives it again
/// (issue 13): the bus's stable hash, not std's `DefaultHasher`, which promises neither.
fn seed_for(inbound: &Inbound) -> u64 {
    let key = format!("{}\u{1f}{}", inbound.room.key(), inbound.id);
    crate::bus::nats::stable_hash(key.as_bytes())
}

/// All agents, by id, with lookup by name too. A cheap-to-clone handle.
#[derive(Clone, Default)]
pub struct Agents {
    inner: Arc<RwLock<HashMap<String, Arc<Agent>>>>,
}

impl Agents {
    pub fn insert(&self, agent: Arc<Agent>) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(agent.id.to_string(), agent);
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Agent>> {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    pub fn by_id(&self, id: &str) -> Option<Arc<Agent>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Finds an agent by its id or, ignoring case, its persona's name.
    pub fn find(&self, id_or_name: &str) -> Option<Arc<Agent>> {
        if let Some(a) = self.by_id(id_or_name) {
            return Some(a);
        }
        self.all()
            .into_iter()
            .find(|a| a.mind().persona.name.eq_ignore_ascii_case(id_or_name))
    }

    /// Every agent, sorted by id.
    pub fn all(&self) -> Vec<Arc<Agent>> {
        let mut all: Vec<_> = self
            .inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
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
        match self.agents.by_id(envelope.agent.as_str()) {
            Some(agent) => agent.handle(envelope).await,
            None => {
                let unknown = HandleError::UnknownAgent(envelope.agent.clone());
                let error = unknown.to_string();
                tracing::warn!(journal_id = envelope.journal_id.0, %error, "dropping message");
                // A drive again counts as an attempt, as in `Agent::handle`, so such an entry
                // is not driven at every start forever; the limit is applied at replay.
                if envelope.redelivery
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rooms::tests::msg;

    /// The seed is FNV-1a over the room key and the message id: the same value in every
    /// build and on every replica, so a re-drive after an upgrade samples the same prompt.
    #[test]
    fn the_seed_is_the_same_in_every_build() {
        let inbound = msg(Platform::Telegram, "hi");
        assert_eq!(seed_for(&inbound), 3_991_402_458_121_993_667);
        let mut other = msg(Platform::Telegram, "hi");
        other.id = troupe_connectors::MessageId::new("2");
        assert_ne!(seed_for(&other), seed_for(&inbound));
    }
}
