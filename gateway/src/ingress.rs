//! Ingress: where a message enters. Journal first, then the bus.
//!
//! Every connector hands its messages to an `InboundSink` built here. Accepting a message
//! means writing it to the journal, which refuses a second message with the same id in the
//! same room (and, on the Web platform, from the same caller), and only then publishing it; a connector acknowledges its platform after `accept` returns, so a
//! crash at any point either loses nothing (the journal has it, and `replay` drives it again
//! at start) or never saw the message (the platform redelivers it).
//!
//! Callers that wait for the answer (the HTTP API, `troupe chat`) register a waiter on the
//! journal id before publishing; the agent completes it with the `Outcome`. With a shared
//! bus another replica may handle the message: `Waiters` then also hands every outcome to an
//! `OutcomeRelay` (the NATS bus publishes it), and outcomes relayed from other replicas come
//! back in through `Waiters::complete_relayed`.

use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;
use troupe_connectors::{Accepted, AgentId, Inbound, InboundSink, SinkError};

use crate::bus::{Bus, Envelope};
use crate::provider::ProviderError;
use crate::storage::{JournalId, JournalInsert, JournalState, Store, same_dedupe_key};

/// The attempt a first publication carries: the one its journal insert counted (see
/// `storage::journal`), so that a replay of the same attempt has the same NATS id.
const FIRST_ATTEMPT: u32 = 1;

/// How the agent dealt with a message.
#[derive(Debug, Clone)]
pub enum Outcome {
    Replied {
        texts: Vec<String>,
    },
    Ignored {
        reason: &'static str,
    },
    RateLimited {
        scope: &'static str,
    },
    Failed {
        error: ProviderError,
    },
    /// The message had `TROUPE_MAX_ATTEMPTS` and is not handled again; why.
    GaveUp {
        reason: String,
    },
}

/// `Outcome` as it crosses between replicas. `Outcome` holds `&'static str` reasons and a
/// `ProviderError`; this mirror owns its strings and maps them back to the known ones.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireOutcome {
    Replied { texts: Vec<String> },
    Ignored { reason: String },
    RateLimited { scope: String },
    Unconfigured { detail: String },
    Timeout { secs: f64 },
    ProviderRateLimited { retry_after_secs: Option<f64> },
    Upstream { detail: String },
    Empty,
    GaveUp { reason: String },
}

/// The reasons and scopes an `Outcome` can carry; anything else reads back as a generic one.
const KNOWN_REASONS: &[&str] = &[
    "message from a bot",
    "room is not in the persona's allowed list",
    "the persona ignores direct messages",
    "not addressed to the persona",
];
const KNOWN_SCOPES: &[&str] = &["user", "room", "agent"];

fn known(value: &str, known: &[&'static str], fallback: &'static str) -> &'static str {
    known
        .iter()
        .copied()
        .find(|k| *k == value)
        .unwrap_or(fallback)
}

impl Outcome {
    /// The outcome as bytes for another replica.
    pub(crate) fn to_wire(&self) -> Vec<u8> {
        let wire = match self {
            Outcome::Replied { texts } => WireOutcome::Replied {
                texts: texts.clone(),
            },
            Outcome::Ignored { reason } => WireOutcome::Ignored {
                reason: reason.to_string(),
            },
            Outcome::RateLimited { scope } => WireOutcome::RateLimited {
                scope: scope.to_string(),
            },
            Outcome::Failed { error } => match error {
                ProviderError::Unconfigured(d) => WireOutcome::Unconfigured { detail: d.clone() },
                ProviderError::Timeout(t) => WireOutcome::Timeout {
                    secs: t.as_secs_f64(),
                },
                ProviderError::RateLimited { retry_after } => WireOutcome::ProviderRateLimited {
                    retry_after_secs: retry_after.map(|d| d.as_secs_f64()),
                },
                ProviderError::Upstream(d) => WireOutcome::Upstream { detail: d.clone() },
                ProviderError::Empty => WireOutcome::Empty,
            },
            Outcome::GaveUp { reason } => WireOutcome::GaveUp {
                reason: reason.clone(),
            },
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads an outcome another replica relayed; `None` for bytes that are not one.
    pub(crate) fn from_wire(bytes: &[u8]) -> Option<Outcome> {
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or_default();
        Some(match serde_json::from_slice(bytes).ok()? {
            WireOutcome::Replied { texts } => Outcome::Replied { texts },
            WireOutcome::Ignored { reason } => Outcome::Ignored {
                reason: known(&reason, KNOWN_REASONS, "not answered"),
            },
            WireOutcome::RateLimited { scope } => Outcome::RateLimited {
                scope: known(&scope, KNOWN_SCOPES, "agent"),
            },
            WireOutcome::Unconfigured { detail } => Outcome::Failed {
                error: ProviderError::Unconfigured(detail),
            },
            WireOutcome::Timeout { secs: s } => Outcome::Failed {
                error: ProviderError::Timeout(secs(s)),
            },
            WireOutcome::ProviderRateLimited { retry_after_secs } => Outcome::Failed {
                error: ProviderError::RateLimited {
                    retry_after: retry_after_secs.map(secs),
                },
            },
            WireOutcome::Upstream { detail } => Outcome::Failed {
                error: ProviderError::Upstream(detail),
            },
            WireOutcome::Empty => Outcome::Failed {
                error: ProviderError::Empty,
            },
            WireOutcome::GaveUp { reason } => Outcome::GaveUp { reason },
        })
    }
}

/// Carries outcomes to the other replicas, where someone may wait for them.
pub(crate) trait OutcomeRelay: Send + Sync {
    fn announce(&self, id: JournalId, outcome: &Outcome);
}

/// The outcome of a direct conversation turn.
#[derive(Debug, Clone)]
pub struct Answer {
    pub outcome: Outcome,
    /// The message id was seen before; the outcome is the first one's.
    pub duplicate: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConverseError {
    #[error(transparent)]
    Journal(#[from] SinkError),
    #[error(
        "the message is journaled, but no answer came in time; it will be answered when the agent gets to it"
    )]
    NoAnswerInTime,
    /// The journal answered a duplicate with an entry of another room or caller. The unique
    /// key rules this out; it is checked anyway, because answering would hand one caller
    /// another room's reply.
    #[error("journal entry {0} does not belong to this room and caller; not answering from it")]
    KeyMismatch(i64),
}

/// Journal ids that someone is waiting on, and the ids on their way through the bus.
///
/// The in-flight set keeps a message from being handled twice at once in this process: a
/// failed message posted again while the restart replay (or an earlier repost) is already
/// driving it is waited for, not published a second time.
#[derive(Clone, Default)]
pub struct Waiters {
    inner: Arc<Mutex<HashMap<JournalId, Vec<oneshot::Sender<Outcome>>>>>,
    in_flight: Arc<Mutex<HashSet<JournalId>>>,
    /// Set once, by a shared bus: where outcomes go for the other replicas.
    relay: Arc<OnceLock<Arc<dyn OutcomeRelay>>>,
}

impl Waiters {
    /// Marks `id` as on its way; false if it already is.
    pub fn begin(&self, id: JournalId) -> bool {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id)
    }

    fn end(&self, id: JournalId) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    pub fn wait(&self, id: JournalId) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.lock().entry(id).or_default().push(tx);
        rx
    }

    /// Sends every outcome to the other replicas too, from now on.
    pub(crate) fn relay_to(&self, relay: Arc<dyn OutcomeRelay>) {
        let _ = self.relay.set(relay);
    }

    /// Hands the outcome to everyone waiting on `id`, here and (through the relay) on the
    /// other replicas; the message is no longer in flight.
    pub fn complete(&self, id: JournalId, outcome: &Outcome) {
        if let Some(relay) = self.relay.get() {
            relay.announce(id, outcome);
        }
        self.complete_relayed(id, outcome);
    }

    /// Hands an outcome to the callers waiting here, without relaying it further.
    pub(crate) fn complete_relayed(&self, id: JournalId, outcome: &Outcome) {
        self.end(id);
        let senders = self.lock().remove(&id);
        for tx in senders.into_iter().flatten() {
            let _ = tx.send(outcome.clone());
        }
    }

    /// Forgets a waiter whose caller went away.
    pub fn forget(&self, id: JournalId) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JournalId, Vec<oneshot::Sender<Outcome>>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The journal and the bus, together.
#[derive(Clone)]
pub struct Ingress {
    store: Store,
    bus: Arc<dyn Bus>,
    waiters: Waiters,
}

impl Ingress {
    pub fn new(store: Store, bus: Arc<dyn Bus>, waiters: Waiters) -> Self {
        Self {
            store,
            bus,
            waiters,
        }
    }

    pub fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    pub fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Writes the message to the journal. Does not publish it.
    pub async fn journal(
        &self,
        agent_id: &str,
        inbound: &Inbound,
    ) -> Result<JournalInsert, SinkError> {
        self.store
            .journal_insert(&AgentId::new(agent_id), inbound)
            .await
            .map_err(|e| SinkError(e.to_string()))
    }

    /// Puts a journaled message on the bus.
    pub async fn publish(
        &self,
        journal_id: JournalId,
        agent_id: &str,
        inbound: Inbound,
        redelivery: bool,
        attempt: u32,
    ) -> Result<(), SinkError> {
        self.bus
            .publish(Envelope {
                journal_id,
                agent_id: agent_id.to_string(),
                inbound,
                redelivery,
                attempt,
            })
            .await
            .map_err(|e| SinkError(e.to_string()))
    }

    /// Submits a message and waits for its outcome: the direct conversation of the HTTP API
    /// and `troupe chat`. A message id seen before is not answered twice: a handled one
    /// returns its recorded replies, one in progress is waited for, and a failed one is
    /// driven again.
    pub async fn converse(
        &self,
        agent_id: &str,
        inbound: Inbound,
        deadline: Duration,
    ) -> Result<Answer, ConverseError> {
        let journaled = self.journal(agent_id, &inbound).await?;
        crate::metrics::message_in(
            inbound.platform(),
            matches!(journaled, JournalInsert::Inserted(_)),
        );
        let (id, duplicate, waiter) = match journaled {
            JournalInsert::Inserted(id) => {
                let rx = self.waiters.wait(id);
                self.publish(id, agent_id, inbound, false, FIRST_ATTEMPT)
                    .await?;
                (id, false, rx)
            }
            JournalInsert::Duplicate(id, JournalState::Done) => {
                return self.answered_before(id, agent_id, &inbound).await;
            }
            JournalInsert::Duplicate(id, state) => {
                let rx = self.waiters.wait(id);
                let entry = self
                    .store
                    .journal_get(id)
                    .await
                    .map_err(|e| SinkError(e.to_string()))?;
                if entry
                    .as_ref()
                    .is_some_and(|e| !same_dedupe_key(e, &AgentId::new(agent_id), &inbound))
                {
                    self.waiters.forget(id);
                    return Err(self.mismatch(id));
                }
                let attempt = entry.as_ref().map_or(0, |e| e.attempts.max(0) as u32);
                if entry
                    .as_ref()
                    .is_some_and(|e| e.state == JournalState::Done)
                {
                    // It finished between the insert and the registration of our waiter.
                    self.waiters.forget(id);
                    return self.answered_before(id, agent_id, &inbound).await;
                }
                if state == JournalState::Failed || self.bus.is_shared() {
                    // A failed message is driven again. On a shared bus a pending one is
                    // published again too: the replica that journaled it may have died
                    // before publishing, and NATS drops the copy if it did not.
                    self.publish(id, agent_id, inbound, true, attempt).await?;
                }
                (id, true, rx)
            }
        };
        match tokio::time::timeout(deadline, waiter).await {
            Ok(Ok(outcome)) => Ok(Answer { outcome, duplicate }),
            Ok(Err(_)) | Err(_) => {
                self.waiters.forget(id);
                Err(ConverseError::NoAnswerInTime)
            }
        }
    }

    fn mismatch(&self, id: JournalId) -> ConverseError {
        crate::metrics::error("journal");
        tracing::error!(
            journal_id = id.0,
            "a duplicate matched the journal entry of another room or caller; not answering from it"
        );
        ConverseError::KeyMismatch(id.0)
    }

    /// The recorded replies of `id`, the handled entry of `inbound`; never those of an entry
    /// of another room or caller.
    async fn answered_before(
        &self,
        id: JournalId,
        agent_id: &str,
        inbound: &Inbound,
    ) -> Result<Answer, ConverseError> {
        let entry = self
            .store
            .journal_get(id)
            .await
            .map_err(|e| SinkError(e.to_string()))?;
        if !entry
            .as_ref()
            .is_some_and(|e| same_dedupe_key(e, &AgentId::new(agent_id), inbound))
        {
            return Err(self.mismatch(id));
        }
        let replies = self
            .store
            .replies_for(id)
            .await
            .map_err(|e| SinkError(e.to_string()))?;
        Ok(Answer {
            outcome: Outcome::Replied {
                texts: replies.into_iter().map(|o| o.text).collect(),
            },
            duplicate: true,
        })
    }

    /// Drives again what a previous run left unfinished: pending entries, and failed ones
    /// that have attempts left. Returns how many were published.
    ///
    /// A pending entry is published whatever its attempts: the agent counts the attempt
    /// before handling it (`Store::journal_begin`) and gives up one that had them all, which
    /// is where a message that crashed the process at every start stops (with its reason
    /// logged and one apology to its room). Deciding there rather than here keeps a replica
    /// from giving up an entry another replica is handling right now: on NATS the copy
    /// waits behind it in its room's lane, and then finds it done.
    ///
    /// With several replicas on NATS each one replays at its start, including entries
    /// another replica is handling or has queued. That is safe: a replayed entry carries the
    /// same NATS message id (installation, journal id and attempt) as its publication of
    /// that attempt, so JetStream drops it within the dedupe window; after the window, the
    /// copy is flagged a redelivery and the agent finds the entry done in the journal before
    /// calling a model.
    pub async fn replay(&self, max_attempts: u32) -> anyhow::Result<usize> {
        let mut published = 0;
        let unfinished = self.store.journal_unfinished(100_000).await?;
        for entry in unfinished {
            if entry.state == JournalState::Failed && entry.attempts >= max_attempts as i32 {
                continue;
            }
            let attempt = entry.attempts.max(0) as u32;
            self.publish(
                entry.id,
                entry.agent_id.as_str(),
                entry.inbound,
                true,
                attempt,
            )
            .await?;
            published += 1;
        }
        Ok(published)
    }

    /// The sink a connector of `agent_id` hands its messages to.
    pub fn sink_for(&self, agent_id: &str) -> Arc<dyn InboundSink> {
        Arc::new(AgentSink {
            ingress: self.clone(),
            agent_id: agent_id.to_string(),
        })
    }
}

struct AgentSink {
    ingress: Ingress,
    agent_id: String,
}

#[async_trait]
impl InboundSink for AgentSink {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        let platform = message.platform();
        let journaled = self.ingress.journal(&self.agent_id, &message).await;
        if journaled.is_err() {
            crate::metrics::error("storage");
        }
        crate::metrics::message_in(
            platform,
            matches!(journaled, Ok(JournalInsert::Inserted(_))),
        );
        match journaled? {
            JournalInsert::Inserted(id) => {
                self.ingress
                    .publish(id, &self.agent_id, message, false, FIRST_ATTEMPT)
                    .await?;
                Ok(Accepted::New)
            }
            JournalInsert::Duplicate(id, JournalState::Pending) if self.ingress.bus.is_shared() => {
                // The platform sent it again, maybe to this replica because the one that
                // journaled it died before publishing: publish it (again). NATS drops the
                // copy when the first publication went through.
                self.ingress
                    .publish(id, &self.agent_id, message, true, FIRST_ATTEMPT)
                    .await?;
                Ok(Accepted::Duplicate)
            }
            JournalInsert::Duplicate(..) => Ok(Accepted::Duplicate),
        }
    }
}
