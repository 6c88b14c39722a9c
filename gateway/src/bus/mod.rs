//! The bus: delivers journaled messages to the agent workers.
//!
//! Two implementations sit behind one `Bus` trait: the in-process bus (`in_process`), the
//! default for one process, and the NATS JetStream bus (`nats`), which lets several replicas
//! share the work so that each message is handled by exactly one of them. Both keep the
//! messages of one room in order.
//!
//! The bus is not the source of truth: every message on it is already in the journal, so a
//! message that is queued when the process dies is driven again at the next start (and, on
//! NATS, by another replica once its ack wait runs out).

mod in_process;
pub(crate) mod nats;

pub use in_process::InProcessBus;

use async_trait::async_trait;
use troupe_connectors::{AgentId, Inbound};

use crate::storage::JournalId;

/// One journaled message on its way to an agent.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub journal_id: JournalId,
    pub agent: AgentId,
    pub inbound: Inbound,
    /// Whether it may have been handled already.
    pub delivery: Delivery,
    /// The journal entry's attempts when it was published (1 for a first publication): a
    /// retry is a new publication, a replay of the same attempt is not (NATS dedupes it).
    pub attempt: u32,
    /// The W3C `traceparent` of the span that published it, when traces are exported
    /// (`crate::trace`): the handling replica's spans join the same trace.
    pub trace: Option<String>,
}

impl Envelope {
    /// Messages with the same order key are handled one after the other, in order.
    pub fn order_key(&self) -> OrderKey {
        OrderKey::of(&self.agent, &self.inbound.room.key())
    }
}

/// Whether a publication may have been handled before. A first delivery goes straight to
/// its turn; any other is checked against the journal first, so no reply is sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Journaled just now and published for the first time.
    First,
    /// Published before (a restart's replay, a repost of a failed message, a NATS
    /// redelivery, a retry after a storage outage): it may have been handled since.
    Again,
}

impl Delivery {
    pub fn is_again(self) -> bool {
        self == Delivery::Again
    }
}

/// One persona's one room: the unit the bus keeps in order, and the key a model outage's
/// notice is told once per. Built in one place so that both agree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderKey(String);

impl OrderKey {
    pub fn of(agent: &AgentId, room: &troupe_connectors::RoomKey) -> OrderKey {
        OrderKey(format!("{agent}\u{1f}{room}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// What consumes the bus: the agent dispatcher.
#[async_trait]
pub trait Handler: Send + Sync {
    async fn handle(&self, envelope: Envelope);
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("the bus is shutting down")]
    Closed,
    #[error("bus error: {0}")]
    Backend(String),
}

#[async_trait]
pub trait Bus: Send + Sync {
    /// Queues a message; waits while the bus is full.
    async fn publish(&self, envelope: Envelope) -> Result<(), BusError>;
    /// Messages queued or being handled.
    fn depth(&self) -> usize;
    /// Stops taking messages and waits for those being handled.
    async fn close(&self);
    fn describe(&self) -> &'static str;
    /// Starts consuming (a shared bus waits until the agents are loaded).
    async fn start(&self) -> Result<(), BusError> {
        Ok(())
    }
    /// Whether other processes publish to and consume from this bus too. A journal entry
    /// that is pending when a duplicate arrives may then have been journaled by a replica
    /// that died before publishing it, so it is published again (NATS drops the copy when
    /// the first publication went through).
    fn is_shared(&self) -> bool {
        false
    }
    /// Whether the bus can take messages now (for `/readyz`).
    async fn health(&self) -> Result<(), BusError> {
        Ok(())
    }
}
