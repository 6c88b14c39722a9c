//! Ingress: where a message enters. Journal first, then the bus.
//!
//! Every connector hands its messages to an `InboundSink` built here. Accepting a message
//! means writing it to the journal, which refuses a second message with the same id in the
//! same room (and, on the Web platform, from the same caller), and only then publishing it; a connector acknowledges its platform after `accept` returns, so a
//! crash at any point either loses nothing (the journal has it, and `replay` drives it again
//! at start) or never saw the message (the platform redelivers it).
//!
//! Callers that wait for the answer (the HTTP API, `troupe chat`) register a waiter on the
//! journal id before publishing; the agent completes it with the `Outcome` (both in
//! `outcome`, which the bus shares without depending on this module). With a shared bus
//! another replica may handle the message: `Waiters` then also hands every outcome to an
//! `OutcomeRelay` (the NATS bus publishes it), and outcomes relayed from other replicas come
//! back in through `Waiters::complete_relayed`.
//!
//! A connector learns what a refusal means from the `SinkError` variant: `Unavailable` (the
//! database or the bus is down: leave the message unacknowledged), `ShuttingDown` (the same,
//! for the next run), or `Rejected` (the database refuses the message's content: it never
//! will be taken, so acknowledge it and move on).

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use troupe_connectors::{Accepted, AgentId, Change, Inbound, InboundSink, Revision, SinkError};

use crate::bus::{Bus, BusError, Delivery, Envelope};
use crate::storage::{
    JournalId, JournalInsert, JournalState, StorageError, Store, UnfinishedPage, same_dedupe_key,
};

pub use crate::outcome::{HandleError, Outcome, Waiters};

/// Journal entries the restart drive reads at a time (`Ingress::replay`): enough that a
/// page costs little next to publishing it, few enough that a page of large messages is a
/// few megabytes.
const REPLAY_PAGE: i64 = 500;

/// The attempt a first publication carries: the one its journal insert counted (see
/// `storage::journal`), so that a replay of the same attempt has the same NATS id.
const FIRST_ATTEMPT: u32 = 1;

/// What a storage failure means for whoever handed the message over.
fn refused_by_storage(e: StorageError) -> SinkError {
    match &e {
        // The message cannot be encoded, or a stored row cannot be read: no retry helps.
        StorageError::Corrupt(_) => SinkError::Rejected(e.to_string()),
        // Postgres' data exceptions (SQLSTATE class 22: a NUL byte in a text column, a value
        // out of range) are about the row, not the server.
        StorageError::Database(sqlx::Error::Database(db))
            if db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|pg| pg.code().starts_with("22")) =>
        {
            SinkError::Rejected(e.to_string())
        }
        // The pool is closed only at shutdown (the writer task too: see `storage::writer`).
        StorageError::Database(sqlx::Error::PoolClosed) => SinkError::ShuttingDown(e.to_string()),
        _ => SinkError::Unavailable(e.to_string()),
    }
}

/// What a bus failure means for a connector: the message is journaled, so either way the
/// replay at the next start drives it; the platform's redelivery only makes it sooner.
fn refused_by_bus(e: BusError) -> SinkError {
    match e {
        BusError::Closed => SinkError::ShuttingDown(e.to_string()),
        BusError::Backend(_) => SinkError::Unavailable(e.to_string()),
    }
}

/// The outcome of a direct conversation turn.
#[derive(Debug, Clone)]
pub struct Answer {
    pub outcome: Outcome,
    /// The message id was seen before; the outcome is the first one's.
    pub duplicate: bool,
}

/// Where `Ingress::submit` left a message.
enum Submitted {
    /// Journaled and published (or already under way): its outcome comes on `waiter`.
    Waiting {
        id: JournalId,
        duplicate: bool,
        waiter: tokio::sync::oneshot::Receiver<Outcome>,
    },
    /// Handled before: its recorded answer.
    Answered(Answer),
}

#[derive(Debug, thiserror::Error)]
pub enum ConverseError {
    /// The journal did not take the message, or could not be read for its earlier answer.
    #[error(transparent)]
    Journal(#[from] SinkError),
    /// The message is journaled but could not be put on the bus. Posting it again, or the
    /// next start, drives it.
    #[error("the message is journaled, but the bus did not take it: {0}")]
    Bus(#[source] BusError),
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

    pub fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// The replies callers watch as they are written (`"stream": true` on the API).
    pub fn live(&self) -> &crate::live::LiveReplies {
        self.waiters.live()
    }

    /// Writes the message to the journal. Does not publish it.
    pub async fn journal(
        &self,
        agent: &AgentId,
        inbound: &Inbound,
    ) -> Result<JournalInsert, SinkError> {
        self.store
            .journal_insert(agent, inbound)
            .instrument(tracing::info_span!(target: "troupe_trace", "journal"))
            .await
            .map_err(refused_by_storage)
    }

    /// Puts a journaled message on the bus.
    pub async fn publish(
        &self,
        journal_id: JournalId,
        agent: &AgentId,
        inbound: Inbound,
        delivery: Delivery,
        attempt: u32,
    ) -> Result<(), BusError> {
        self.bus
            .publish(Envelope {
                journal_id,
                agent: agent.clone(),
                inbound,
                delivery,
                attempt,
                trace: crate::trace::traceparent(),
            })
            .await
    }

    /// Submits a message and waits for its outcome: the direct conversation of the HTTP API
    /// and `troupe chat`. A message id seen before is not answered twice: a handled one
    /// returns its recorded replies, one in progress is waited for, and a failed one is
    /// driven again.
    pub async fn converse(
        &self,
        agent: &AgentId,
        inbound: Inbound,
        deadline: Duration,
    ) -> Result<Answer, ConverseError> {
        // The journal insert and the publication run boxed, and are freed before the wait:
        // a caller waiting for its answer (an HTTP request, for as long as the turn takes)
        // then holds its receiver and a timer, not the space of those steps as well (issue
        // 18: 10,000 callers waiting at once is what `troupe bench --rooms 10000` does).
        let receive = crate::trace::receive_span(agent, inbound.platform());
        let submitted = Box::pin(self.submit(agent, inbound).instrument(receive)).await?;
        let (id, duplicate, waiter) = match submitted {
            Submitted::Waiting {
                id,
                duplicate,
                waiter,
            } => (id, duplicate, waiter),
            Submitted::Answered(answer) => return Ok(answer),
        };
        match tokio::time::timeout(deadline, waiter).await {
            Ok(Ok(outcome)) => Ok(Answer { outcome, duplicate }),
            Ok(Err(_)) | Err(_) => {
                self.waiters.forget(id);
                Err(ConverseError::NoAnswerInTime)
            }
        }
    }

    /// `converse`'s first half: journals the message and publishes it (or finds it
    /// answered, or under way), and says what to wait on.
    async fn submit(&self, agent: &AgentId, inbound: Inbound) -> Result<Submitted, ConverseError> {
        let journaled = self.journal(agent, &inbound).await?;
        crate::metrics::message_in(
            inbound.platform(),
            matches!(journaled, JournalInsert::Inserted(_)),
        );
        let (id, duplicate, waiter) = match journaled {
            JournalInsert::Inserted(id) => {
                let rx = self.waiters.wait(id);
                self.publish_waited(id, agent, inbound, Delivery::First, FIRST_ATTEMPT)
                    .await?;
                (id, false, rx)
            }
            JournalInsert::Duplicate(id, JournalState::Done) => {
                return self
                    .answered_before(id, agent, &inbound)
                    .await
                    .map(Submitted::Answered);
            }
            JournalInsert::Duplicate(id, state) => {
                let rx = self.waiters.wait(id);
                let entry = match self.store.journal_get(id).await {
                    Ok(entry) => entry,
                    Err(e) => {
                        self.waiters.forget(id);
                        return Err(refused_by_storage(e).into());
                    }
                };
                if entry
                    .as_ref()
                    .is_some_and(|e| !same_dedupe_key(e, agent, &inbound))
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
                    return self
                        .answered_before(id, agent, &inbound)
                        .await
                        .map(Submitted::Answered);
                }
                if state == JournalState::Failed || self.bus.is_shared() {
                    // A failed message is driven again. On a shared bus a pending one is
                    // published again too: the replica that journaled it may have died
                    // before publishing, and NATS drops the copy if it did not. A drive
                    // already under way (the restart replay) is not disturbed: this copy
                    // waits behind it in the room's lane and then finds the entry done.
                    self.publish_waited(id, agent, inbound, Delivery::Again, attempt)
                        .await?;
                }
                (id, true, rx)
            }
        };
        Ok(Submitted::Waiting {
            id,
            duplicate,
            waiter,
        })
    }

    /// `publish` for a caller waiting on `id`: a failure forgets its waiter.
    async fn publish_waited(
        &self,
        id: JournalId,
        agent: &AgentId,
        inbound: Inbound,
        delivery: Delivery,
        attempt: u32,
    ) -> Result<(), ConverseError> {
        self.publish(id, agent, inbound, delivery, attempt)
            .await
            .map_err(|e| {
                self.waiters.forget(id);
                ConverseError::Bus(e)
            })
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
        agent: &AgentId,
        inbound: &Inbound,
    ) -> Result<Answer, ConverseError> {
        let entry = self
            .store
            .journal_get(id)
            .await
            .map_err(refused_by_storage)?;
        if !entry
            .as_ref()
            .is_some_and(|e| same_dedupe_key(e, agent, inbound))
        {
            return Err(self.mismatch(id));
        }
        let replies = self
            .store
            .replies_for(id)
            .await
            .map_err(refused_by_storage)?;
        Ok(Answer {
            outcome: Outcome::Replied {
                texts: replies.into_iter().map(|o| o.text).collect(),
                origin: crate::outcome::Origin::Other,
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
    ///
    /// The journal is read a page of [`REPLAY_PAGE`] entries at a time, each page published
    /// before the next is read, so memory stays bounded however much is unfinished; the
    /// database skips the entries given up already (failed with every attempt used), which
    /// are kept for the record and would otherwise fill the pages (issue 30, finding 10:
    /// one read of 100,000 entries, filtered here, never reached a pending entry behind
    /// 100,000 given-up ones). The drive stops at the newest entry there was when it began:
    /// what replicas journal meanwhile, they publish themselves.
    pub async fn replay(&self, max_attempts: u32) -> anyhow::Result<usize> {
        let mut published = 0;
        let Some(through) = self.store.journal_newest().await? else {
            return Ok(0);
        };
        let mut page = UnfinishedPage {
            after: None,
            through,
            max_attempts,
            limit: REPLAY_PAGE,
        };
        loop {
            let entries = self.store.journal_unfinished(&page).await?;
            let full = entries.len() as i64 >= page.limit;
            page.after = entries.last().map(|e| e.id).or(page.after);
            for entry in entries {
                let attempt = entry.attempts.max(0) as u32;
                let agent = entry.agent_id;
                self.publish(entry.id, &agent, entry.inbound, Delivery::Again, attempt)
                    .await?;
                published += 1;
            }
            if !full {
                return Ok(published);
            }
        }
    }

    /// The sink a connector of `agent` hands its messages to.
    pub fn sink_for(&self, agent: &AgentId) -> Arc<dyn InboundSink> {
        Arc::new(AgentSink {
            ingress: self.clone(),
            agent: agent.clone(),
        })
    }
}

struct AgentSink {
    ingress: Ingress,
    agent: AgentId,
}

impl AgentSink {
    /// A platform's message: journaled, then published (or found under way), inside its
    /// `receive` span.
    async fn accept_in(&self, message: Inbound) -> Result<Accepted, SinkError> {
        let platform = message.platform();
        let journaled = self.ingress.journal(&self.agent, &message).await;
        if journaled.is_err() {
            crate::metrics::error("storage");
        }
        crate::metrics::message_in(
            platform,
            matches!(journaled, Ok(JournalInsert::Inserted(_))),
        );
        match journaled? {
            JournalInsert::Inserted(id) => {
                // A delete stops the reply to its message if it is being made (issue 32):
                // the room's order would hand the delete to the agent only after it.
                if let Some(Revision {
                    of,
                    change: Change::Delete,
                    ..
                }) = &message.revises
                {
                    self.ingress
                        .waiters
                        .turns()
                        .cancel(&self.agent, &message.room.key(), of);
                }
                self.ingress
                    .publish(id, &self.agent, message, Delivery::First, FIRST_ATTEMPT)
                    .await
                    .map_err(refused_by_bus)?;
                Ok(Accepted::New)
            }
            JournalInsert::Duplicate(id, JournalState::Pending) if self.ingress.bus.is_shared() => {
                // The platform sent it again, maybe to this replica because the one that
                // journaled it died before publishing: publish it (again). NATS drops the
                // copy when the first publication went through.
                self.ingress
                    .publish(id, &self.agent, message, Delivery::Again, FIRST_ATTEMPT)
                    .await
                    .map_err(refused_by_bus)?;
                Ok(Accepted::Duplicate)
            }
            JournalInsert::Duplicate(..) => Ok(Accepted::Duplicate),
        }
    }
}

#[async_trait]
impl InboundSink for AgentSink {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        let receive = crate::trace::receive_span(&self.agent, message.platform());
        self.accept_in(message).instrument(receive).await
    }

    /// A reaction: feedback when it is 👍/👎 on this persona's reply (`crate::feedback`).
    async fn react(&self, reaction: troupe_connectors::Reaction) -> Result<(), SinkError> {
        match crate::feedback::take(&self.ingress.store, &self.agent, &reaction).await {
            Ok(taken) => {
                tracing::debug!(?taken, message = %reaction.message, "reaction taken");
                Ok(())
            }
            Err(e) => {
                crate::metrics::error("storage");
                Err(refused_by_storage(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_support::{
        Kind, journal_copies, on_both_backends, run_with_store as run,
    };
    use troupe_connectors::sync::Locked;
    use troupe_connectors::{Platform, RoomId, RoomRef, UserRef};

    /// A bus that only records what was published to it.
    #[derive(Default)]
    struct Recorded(std::sync::Mutex<Vec<JournalId>>);

    #[async_trait]
    impl Bus for Recorded {
        async fn publish(&self, envelope: Envelope) -> Result<(), BusError> {
            self.0.locked().push(envelope.journal_id);
            Ok(())
        }
        fn depth(&self) -> usize {
            0
        }
        async fn close(&self) {}
        fn describe(&self) -> &'static str {
            "recorded"
        }
    }

    fn message(id: &str) -> Inbound {
        Inbound::said(
            id,
            RoomRef::new(Platform::Discord, RoomId::new("c1")),
            UserRef::person("ann", "Ann"),
            "Is the harbour open?",
        )
        .mentioning_self()
        .at(1)
    }

    on_both_backends!(replay_reaches_a_pending_entry_behind_given_up_ones);

    /// Issue 30, finding 10: given-up entries are never removed, and the replay used to
    /// read 100,000 unfinished entries and filter them here, so behind more given-up ones
    /// than that a pending entry was never driven again. Now the database skips them and
    /// the replay pages: more given-up entries than the old read and than a page, then a
    /// pending one, which is published, alone.
    async fn replay_reaches_a_pending_entry_behind_given_up_ones(store: Store) {
        let agent = AgentId::new("ada");
        let max_attempts = 1;
        let JournalInsert::Inserted(first) =
            store.journal_insert(&agent, &message("m0")).await.unwrap()
        else {
            panic!("a new entry");
        };
        // Given up: failed, with its one attempt used.
        let gave_up = store
            .journal_give_up(first, "it crashed the process", None, 0)
            .await
            .unwrap();
        assert!(gave_up.first);
        journal_copies(&store, first, 100_000).await;
        let JournalInsert::Inserted(pending) =
            store.journal_insert(&agent, &message("m1")).await.unwrap()
        else {
            panic!("a new entry");
        };
        assert!(pending.0 > 100_001, "{pending:?}");

        let bus = Arc::new(Recorded::default());
        let ingress = Ingress::new(store.clone(), bus.clone(), Waiters::default());
        let published = ingress.replay(max_attempts).await.unwrap();
        assert_eq!(published, 1);
        assert_eq!(*bus.0.lock().unwrap(), [pending]);
    }

    #[test]
    fn a_refusal_says_whether_to_retry() {
        let corrupt = refused_by_storage(StorageError::Corrupt("cannot encode".into()));
        assert!(matches!(corrupt, SinkError::Rejected(_)), "{corrupt:?}");
        assert!(!corrupt.is_retryable());
        let down = refused_by_storage(StorageError::Database(sqlx::Error::PoolTimedOut));
        assert!(matches!(down, SinkError::Unavailable(_)), "{down:?}");
        assert!(down.is_retryable());
        let closing = refused_by_storage(StorageError::Database(sqlx::Error::PoolClosed));
        assert!(matches!(closing, SinkError::ShuttingDown(_)), "{closing:?}");
        assert!(closing.is_retryable());
        assert!(matches!(
            refused_by_bus(BusError::Closed),
            SinkError::ShuttingDown(_)
        ));
        assert!(matches!(
            refused_by_bus(BusError::Backend("NATS publish: timed out".into())),
            SinkError::Unavailable(_)
        ));
    }

    /// Postgres' own errors: a data exception (class 22) is the row's fault, anything else
    /// the server's. Skipped without `TROUPE_TEST_DATABASE_URL`.
    #[tokio::test]
    async fn postgres_data_exceptions_are_rejections() {
        use sqlx::Connection;
        let Some(url) = troupe_e2e::env::postgres_url("postgres_data_exceptions_are_rejections")
        else {
            return;
        };
        let mut pg = sqlx::PgConnection::connect(&url)
            .await
            .expect("connect to TROUPE_TEST_DATABASE_URL");
        let fails = |sql: &'static str| sqlx::query(sql);
        // 22021 is what a NUL byte in a text column raises; 22012 is as good and simpler.
        let data = fails("SELECT 1 / 0").execute(&mut pg).await.unwrap_err();
        let refused = refused_by_storage(StorageError::Database(data));
        assert!(matches!(refused, SinkError::Rejected(_)), "{refused:?}");
        let nul = fails("SELECT convert_from('\\x6100'::bytea, 'UTF8')")
            .execute(&mut pg)
            .await
            .unwrap_err();
        let refused = refused_by_storage(StorageError::Database(nul));
        assert!(matches!(refused, SinkError::Rejected(_)), "{refused:?}");
        let other = fails("SELECT * FROM no_such_table_anywhere")
            .execute(&mut pg)
            .await
            .unwrap_err();
        let refused = refused_by_storage(StorageError::Database(other));
        assert!(matches!(refused, SinkError::Unavailable(_)), "{refused:?}");
    }
}
