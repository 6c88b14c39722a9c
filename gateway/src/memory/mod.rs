//! Memory: what an agent remembers beyond the room's recent messages, and when to update it.
//!
//! - `summary`: once a room has outgrown its window (`TROUPE_HISTORY_LIMIT`), the messages
//!   that fell out of it are folded by the model into the room's rolling summary;
//! - `facts`: every few messages from a user, the model is asked for durable facts about
//!   them, which are recalled for that user in any room of the agent.
//!
//! Both are upkeep, never on a reply's path: `Memory::after_reply` starts them in the
//! background once the reply is recorded, and `Memory::recall` only reads what is stored.
//! They cost model calls, so they are bounded three ways: one run per room or user at a
//! time, at most `BACKGROUND_CALLS` calls in flight per agent, and a share of the agent's
//! rate limit (`RateLimiter::check_background`). A reply that finds its room's (or user's)
//! run under way does not start another: it asks that run to look once more when it is
//! done, so no trigger is lost and triggers never pile up. Work skipped for the other two
//! reasons stays due and is picked up after a later reply. Failures only log: memory is a
//! help to the prompt, never a reason to fail a message.
//!
//! A reply costs no query for upkeep unless a run could be due (replies are counted in the
//! process first), and a user's facts are cached for a minute for the prompts.
//!
//! Storage (forward-only writes, so replicas may race) is `storage::summaries`; the prompt
//! sections are composed by `persona::compose`. See docs/memory.md.

mod facts;
mod summary;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use troupe_connectors::sync::Locked;
use troupe_connectors::{AgentId, Inbound, Platform, RoomKey, UserId};

use crate::config::{AgentSettings, MemorySettings};
use crate::limits::RateLimiter;
use crate::persona::Prompt;
use crate::provider::ModelProvider;
use crate::storage::{FactSubject, Store};

/// Background model calls in flight per agent. Replies share the provider's concurrency
/// limit (`TROUPE_MODEL_CONCURRENCY`); memory may hold at most this much of it.
const BACKGROUND_CALLS: usize = 2;

/// The most passes one run makes when replies keep asking for another; what is left is
/// due still, and the next reply starts a new run.
const MAX_PASSES: usize = 8;

/// What was recalled for one prompt.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Recalled {
    /// The room's rolling summary, when the room has outgrown its window and has one.
    pub summary: Option<String>,
    /// Facts about the sender, newest first.
    pub facts: Vec<String>,
}

/// The model a background run talks to: the persona's provider, as it is at the reply.
#[derive(Clone)]
pub(crate) struct Model {
    pub provider: Arc<dyn ModelProvider>,
    /// The persona's name, for the instructions.
    pub agent_name: String,
    /// The persona's spend meter: background calls stop before its budgets do (issue 16).
    pub meter: Option<crate::spend::Meter>,
}

/// One agent's memory upkeep. A cheap-to-clone handle.
#[derive(Clone)]
pub(crate) struct Memory {
    agent_id: AgentId,
    store: Store,
    limiter: RateLimiter,
    settings: MemorySettings,
    history_limit: u32,
    /// Rooms and users with a run under way in this process, and whether another pass was
    /// asked for since it started.
    in_flight: Arc<Mutex<HashMap<Upkeep, bool>>>,
    calls: Arc<Semaphore>,
    /// Replies per room and per user since their stored state was last checked.
    seen: moka::sync::Cache<Upkeep, u32>,
    /// The upkeep runs under way, so that shutting down waits for their model calls and
    /// their usage is recorded before the ledger closes (they are not the bus's tasks).
    upkeep: tokio_util::task::TaskTracker,
    /// Facts per user as last read, so that a prompt does not cost a query each time: they
    /// change at most once per `facts_every` messages. A write here drops the entry; one
    /// by another replica is seen within `FACTS_CACHE_TTL`.
    facts: moka::sync::Cache<(Platform, UserId), Arc<Vec<String>>>,
    /// Rooms found to have no summary, so that a prompt costs no read until one has one:
    /// a write here drops the entry, and one by another replica is seen within
    /// `FACTS_CACHE_TTL`, as facts are. A room that has a summary is read each time (a
    /// `/forget` may delete it at any moment).
    no_summary: moka::sync::Cache<RoomKey, ()>,
}

/// What a background run keeps up: a room's summary, or a user's facts (user ids are only
/// unique within a platform).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Upkeep {
    Summary(RoomKey),
    Facts(Platform, UserId),
}

const FACTS_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(60);

fn facts_cache_key(who: FactSubject<'_>) -> (Platform, UserId) {
    (who.platform, who.user_id.clone())
}

impl Memory {
    pub(crate) fn new(
        agent_id: &AgentId,
        store: Store,
        limiter: RateLimiter,
        settings: &AgentSettings,
    ) -> Self {
        Memory {
            agent_id: agent_id.clone(),
            store,
            limiter,
            settings: settings.memory.clone(),
            history_limit: settings.history_limit,
            in_flight: Arc::default(),
            calls: Arc::new(Semaphore::new(BACKGROUND_CALLS)),
            upkeep: tokio_util::task::TaskTracker::new(),
            seen: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(std::time::Duration::from_secs(24 * 3600))
                .build(),
            facts: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(FACTS_CACHE_TTL)
                .build(),
            no_summary: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(FACTS_CACHE_TTL)
                .build(),
        }
    }

    /// Reads the summary and the sender's facts for a prompt. `recalled_messages` is how
    /// many recent messages the prompt holds: a room that has not filled its window has
    /// nothing outside it to summarise, and its summary is not read.
    /// `summary` is the summary read already with the room's messages, when it was
    /// (`Store::room_context`, asked for when `wants_summary`).
    pub(crate) async fn recall(
        &self,
        room: &RoomKey,
        recalled_messages: usize,
        inbound: &Inbound,
        summary: Option<Option<String>>,
    ) -> crate::storage::Result<Recalled> {
        let mut recalled = Recalled::default();
        if self.wants_summary(room) && recalled_messages >= self.history_limit as usize {
            recalled.summary = match summary {
                Some(read) => read,
                None => self
                    .store
                    .room_summary(&self.agent_id, room)
                    .await?
                    .map(|s| s.summary),
            };
            if recalled.summary.is_none() {
                self.no_summary.insert(room.clone(), ());
            }
        }
        if self.settings.facts_every > 0 {
            let who = self.subject(inbound);
            let key = facts_cache_key(who);
            recalled.facts = match self.facts.get(&key) {
                Some(facts) => facts.as_ref().clone(),
                None => {
                    let facts = self
                        .store
                        .user_facts(who, i64::from(self.settings.facts_per_user))
                        .await?;
                    self.facts.insert(key, Arc::new(facts.clone()));
                    facts
                }
            };
        }
        Ok(recalled)
    }

    /// Whether a prompt in `room` reads its summary (once its window is full): summaries
    /// are on, and the room is not known to have none.
    pub(crate) fn wants_summary(&self, room: &RoomKey) -> bool {
        self.settings.summary_every > 0 && !self.no_summary.contains_key(room)
    }

    /// Starts the upkeep due after a reply in the background: the room's summary, then the
    /// sender's facts. Returns at once.
    pub(crate) fn after_reply(&self, model: Model, inbound: &Inbound, recalled_messages: usize) {
        let room = inbound.room.key();
        let platform = inbound.platform();
        let user_id = inbound.author.id.clone();
        let summary_key = Upkeep::Summary(room.clone());
        let facts_key = Upkeep::Facts(platform, user_id.clone());
        let summarize = self.settings.summary_every > 0
            // The room held fewer messages than its window before this exchange, so at most
            // two fell out of it: not enough to summarise yet.
            && recalled_messages >= self.history_limit as usize
            // Each exchange adds two messages.
            && self.count_up(&summary_key, self.settings.summary_every.div_ceil(2));
        let extract = self.settings.facts_every > 0
            && learns_about(inbound)
            && self.count_up(&facts_key, self.settings.facts_every);
        if !summarize && !extract {
            return;
        }
        let memory = self.clone();
        let user_name = inbound.author.name.clone();
        self.upkeep.spawn(async move {
            if summarize {
                summary::run(&memory, &model, summary_key, &room).await;
            }
            if extract {
                let who = FactSubject {
                    agent_id: &memory.agent_id,
                    platform,
                    user_id: &user_id,
                };
                facts::run(&memory, &model, facts_key, who, &user_name).await;
            }
        });
    }

    /// Waits for the upkeep runs under way (at shutdown, once no reply can start another).
    pub(crate) async fn finish_upkeep(&self) {
        self.upkeep.close();
        self.upkeep.wait().await;
    }

    /// Counts one more reply for `key`; true (and back to zero) when `every` have gone by
    /// since the last time. Only then is the stored state checked, so that a reply costs no
    /// query when no run can be due yet. The counts live in this process: after a restart,
    /// or with replicas sharing the work, a run may come up to `every` replies late.
    fn count_up(&self, key: &Upkeep, every: u32) -> bool {
        let seen = self.seen.get(key).unwrap_or(0) + 1;
        let due = seen >= every;
        self.seen.insert(key.clone(), if due { 0 } else { seen });
        due
    }

    /// Drops the cached facts of `who`, after they were written.
    pub(crate) fn forget_cached_facts(&self, who: FactSubject<'_>) {
        self.facts.invalidate(&facts_cache_key(who));
    }

    fn subject<'a>(&'a self, inbound: &'a Inbound) -> FactSubject<'a> {
        FactSubject {
            agent_id: &self.agent_id,
            platform: inbound.platform(),
            user_id: &inbound.author.id,
        }
    }

    /// Marks `key` as under way. `None` when a run for it already is: that run is asked
    /// for one more pass instead.
    fn begin(&self, key: Upkeep) -> Option<InFlight> {
        let mut runs = self.in_flight.locked();
        if let Some(again) = runs.get_mut(&key) {
            *again = true;
            return None;
        }
        runs.insert(key.clone(), false);
        Some(InFlight {
            runs: self.in_flight.clone(),
            key: Some(key),
        })
    }

    /// Runs `pass` under the in-flight mark for `key`: once, then again for as long as
    /// replies asked for another pass meanwhile (up to `MAX_PASSES`).
    async fn coalesced<F, Fut>(&self, key: Upkeep, mut pass: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let Some(mut running) = self.begin(key) else {
            return;
        };
        for _ in 0..MAX_PASSES {
            pass().await;
            if !running.again() {
                return;
            }
        }
    }

    /// A permit for one background model call, within the agent's share of calls in flight
    /// and of its rate limit; `None`: not now.
    fn model_slot(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.calls.clone().try_acquire_owned().ok()?;
        self.limiter
            .check_background(&self.agent_id)
            .then_some(permit)
    }

    /// One background model call, on the background turn, admitted by the persona's budgets
    /// first. `None` (logged) when it failed or answered nothing.
    async fn ask(&self, model: &Model, prompt: &Prompt, task: &'static str) -> Option<String> {
        let purpose = if task == "summary" {
            crate::spend::Purpose::Summary
        } else {
            crate::spend::Purpose::Facts
        };
        let nobody = crate::spend::Who {
            room: None,
            user: None,
        };
        if let Some(meter) = &model.meter {
            match meter.admit(nobody, purpose).await {
                Ok(crate::spend::Admission::Go) => {}
                Ok(crate::spend::Admission::Over { scope, .. }) => {
                    tracing::info!(
                        task,
                        budget = scope.as_str(),
                        "memory upkeep paused: the budget is nearly spent"
                    );
                    return None;
                }
                Err(error) => {
                    tracing::warn!(task, %error, "could not read the budget; memory upkeep waits");
                    return None;
                }
            }
        }
        let request = crate::provider::Request {
            purpose,
            parts: crate::provider::Parts::Chat(prompt),
            tools: None,
            live: None,
            notice: None,
            payer: crate::provider::Payer {
                turn: crate::spend::Turn::new(crate::spend::Priority::Background, &self.agent_id),
                meter: model.meter.as_ref(),
                who: nobody,
            },
        };
        let result = model.provider.call(request).await.map(|r| r.completion);
        match result {
            Ok(c) if !c.text.trim().is_empty() => Some(c.text),
            Ok(_) => {
                tracing::info!(task, "the model answered a memory task with nothing");
                None
            }
            Err(error) => {
                tracing::warn!(task, %error, provider = %model.provider.describe(),
                    "memory model call failed; it is tried again after a later reply");
                None
            }
        }
    }
}

/// Whether facts are learned about the author: not about bots, nor about the API's
/// anonymous caller, who stands for everyone who gave no `userId`.
pub(crate) fn learns_about(inbound: &Inbound) -> bool {
    let anonymous = inbound.platform() == troupe_connectors::Platform::Web
        && inbound.author.id.as_str() == crate::web::ANONYMOUS_USER;
    !inbound.author.is_bot && !anonymous
}

/// A run under way. It ends through `again`, or when dropped (whatever the outcome).
struct InFlight {
    runs: Arc<Mutex<HashMap<Upkeep, bool>>>,
    /// `None` once ended.
    key: Option<Upkeep>,
}

impl InFlight {
    /// True when another pass was asked for since the last one started (and clears the
    /// request); otherwise ends the run. One lock for both, so a request made just as the
    /// run ends is either seen here or finds the run gone and starts its own.
    fn again(&mut self) -> bool {
        let mut runs = self.runs.locked();
        let Some(key) = &self.key else {
            return false;
        };
        if let Some(again) = runs.get_mut(key)
            && *again
        {
            *again = false;
            return true;
        }
        runs.remove(key);
        self.key = None;
        false
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.runs.locked().remove(&key);
        }
    }
}

/// `text` cut to at most `max` characters, on a character boundary, marked when cut.
fn clip(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => text.into(),
        Some((end, _)) => format!("{}…", &text[..end]).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_connectors::RoomId;

    /// The summary of the Web room `room`: any key will do where only keys are compared.
    fn summary(room: &str) -> Upkeep {
        Upkeep::Summary(RoomKey::new(Platform::Web, RoomId::new(room)))
    }

    #[test]
    fn clip_respects_characters() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("", 0), "");
    }

    #[tokio::test]
    async fn a_trigger_during_a_run_gets_one_more_pass() {
        let (_db, memory) = test_memory().await;
        let passes = std::sync::atomic::AtomicUsize::new(0);
        let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let signals = Mutex::new(Some((inside_tx, go_rx)));
        let run = memory.coalesced(summary("k"), || async {
            passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let first = signals.lock().unwrap().take();
            if let Some((inside, go)) = first {
                let _ = inside.send(());
                let _ = go.await;
            }
        });
        let trigger = async {
            inside_rx.await.unwrap();
            // Two triggers while the first pass runs: they coalesce into one more pass.
            assert!(memory.begin(summary("k")).is_none());
            assert!(memory.begin(summary("k")).is_none());
            go_tx.send(()).unwrap();
        };
        tokio::join!(run, trigger);
        assert_eq!(passes.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(memory.begin(summary("k")).is_some(), "the run has ended");
    }

    async fn test_memory() -> (tempfile::TempDir, Memory) {
        let (db, store) = crate::storage::test_support::sqlite_store().await;
        let config = crate::config::Config::for_test();
        let memory = Memory::new(
            &AgentId::new("a"),
            store,
            RateLimiter::new(&config.limits),
            &config.agent,
        );
        (db, memory)
    }

    #[test]
    fn no_facts_about_bots_or_the_anonymous_api_caller() {
        use troupe_connectors::{MessageId, RoomRef, UserRef};
        let message = |platform, user: &str, is_bot| Inbound {
            id: MessageId::new("m"),
            room: RoomRef::new(platform, RoomId::new("r")),
            author: UserRef {
                id: UserId::new(user),
                name: "N".into(),
                is_bot,
                username: None,
            },
            text: "hi".into(),
            attachments: vec![],
            reply_to: None,
            is_direct: true,
            mentions_self: false,
            sent_at_ms: 0,
            client: None,
            revises: None,
        };
        assert!(learns_about(&message(Platform::Web, "u-sam", false)));
        assert!(!learns_about(&message(
            Platform::Web,
            crate::web::ANONYMOUS_USER,
            false
        )));
        assert!(learns_about(&message(
            Platform::Telegram,
            crate::web::ANONYMOUS_USER,
            false
        )));
        assert!(!learns_about(&message(Platform::Discord, "42", true)));
    }

    #[tokio::test]
    async fn the_stored_state_is_checked_every_so_many_replies() {
        let (_db, memory) = test_memory().await;
        let due: Vec<bool> = (0..7).map(|_| memory.count_up(&summary("k"), 3)).collect();
        assert_eq!(due, [false, false, true, false, false, true, false]);
        assert!(memory.count_up(&summary("every reply"), 1));
        assert!(memory.count_up(&summary("every reply"), 1));
    }

    #[tokio::test]
    async fn one_run_per_key_at_a_time() {
        let (_db, memory) = test_memory().await;
        let first = memory.begin(summary("r"));
        assert!(first.is_some());
        assert!(memory.begin(summary("other")).is_some());
        let mut first = first.unwrap();
        // Nobody asked meanwhile: the run ends, and a new one may start.
        assert!(!first.again());
        let mut second = memory.begin(summary("r")).unwrap();
        // Asked twice while under way: one more pass, then the end.
        assert!(memory.begin(summary("r")).is_none());
        assert!(memory.begin(summary("r")).is_none());
        assert!(second.again());
        assert!(!second.again());
        // A dropped run (an early return) ends too.
        drop(memory.begin(summary("r")).unwrap());
        assert!(memory.begin(summary("r")).is_some());

        let slots: Vec<_> = (0..BACKGROUND_CALLS).map(|_| memory.model_slot()).collect();
        assert!(slots.iter().all(Option::is_some));
        assert!(memory.model_slot().is_none(), "over the calls in flight");
        drop(slots);
        assert!(memory.model_slot().is_some());
    }
}
