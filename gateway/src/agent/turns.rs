//! The cap on turns in flight: how many messages of one persona are being handled at once.
//!
//! A turn is one message's whole path (decide, recall, prompt, model call, record, reply),
//! and everything that path holds is alive while it runs: on the heap, the boxed future of
//! the handler alone is about 12 KiB, then the recalled room, the composed prompt and the
//! storage calls' results. The bus starts a room's next message as soon as the previous
//! one is done and runs every room at once, so with 10,000 active rooms there were 10,000
//! turns alive, nearly all of them queued on the one SQLite connection (or, with a real
//! model, on `TROUPE_MODEL_CONCURRENCY`): measured with heaptrack on `troupe bench
//! --messages 20000 --rooms 10000`, 123 MiB of the 210 MiB heap peak was those boxed
//! futures, and most of the rest what they had read (docs/benchmarks.md, "10,000 rooms").
//!
//! `Turns` wraps the bus's handler and lets at most `TROUPE_TURNS_IN_FLIGHT` turns of one
//! persona run; the others wait for a permit *before* their turn is made, so a waiting room
//! costs its queued envelope and a permit waiter, not a live turn. Nothing else changes:
//! the bus still hands a room's messages over one at a time (order per room), the journal
//! and outbox are untouched (nothing lost, nothing answered twice), and `publish` still
//! waits on `TROUPE_BUS_CAPACITY` (backpressure). The permits are tokio's fair semaphore,
//! so rooms get their turns in the order they asked for them and none is starved.
//!
//! The cap is per persona, not per process: one persona waiting out its model's outage
//! (a turn waits for the provider to come back) must not take the turns of the others.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use troupe_connectors::AgentId;

use crate::bus::{Envelope, Handler};

/// `TROUPE_TURNS_IN_FLIGHT`'s default: turns of one persona running at once.
///
/// Why 256: enough that the cap never is the bottleneck, small enough that the memory is.
/// A turn spends its time waiting on the database or the model, and both are capped below
/// this already: SQLite has one writer (the engine batches whatever is queued when it
/// wakes, and 256 callers fill a batch), Postgres has 32 connections per process, and a
/// persona makes `TROUPE_MODEL_CONCURRENCY` (16) model calls at once; 256 leaves a deep
/// queue in front of each. Measured at 10,000 rooms it is as fast as no cap or faster (see
/// docs/benchmarks.md). At the other end, 256 turns of the largest prompt
/// (`TROUPE_PROMPT_BUDGET_CHARS`, 24,000 characters, kept in the prompt and the why panel)
/// stay around 25 MiB, however many rooms wait.
pub const DEFAULT_TURNS_IN_FLIGHT: usize = 256;

/// The bus's handler with a cap on the turns each persona runs at once.
pub struct Turns {
    handler: Arc<dyn Handler>,
    per_agent: usize,
    /// One semaphore per persona, made at its first message. Personas are few and an
    /// idle semaphore is a few words, so they are never removed.
    lanes: Mutex<HashMap<AgentId, Arc<Semaphore>>>,
}

impl Turns {
    pub fn new(handler: Arc<dyn Handler>, per_agent: usize) -> Self {
        Self {
            handler,
            per_agent: per_agent.max(1),
            lanes: Mutex::new(HashMap::new()),
        }
    }

    fn lane(&self, agent: &AgentId) -> Arc<Semaphore> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes
            .entry(agent.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_agent)))
            .clone()
    }
}

#[async_trait]
impl Handler for Turns {
    async fn handle(&self, envelope: Envelope) {
        let lane = self.lane(&envelope.agent);
        // The semaphore is never closed, so this waits and never fails; were it closed,
        // the message would rather run uncapped than be dropped.
        let _turn = lane.acquire().await.ok();
        // The turn is made only now: `handle` boxes its future when it is called, so the
        // memory of a turn is taken with its permit, not while it waits for one.
        self.handler.handle(envelope).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{Bus, InProcessBus};
    use crate::storage::JournalId;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;
    use troupe_connectors::{Inbound, MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

    fn envelope(agent: &str, n: i64, room: usize) -> Envelope {
        Envelope {
            journal_id: JournalId(n),
            redelivery: false,
            attempt: 1,
            agent: agent.into(),
            inbound: Inbound {
                id: MessageId::new(n.to_string()),
                room: RoomRef::new(Platform::Web, RoomId::new(format!("room-{room}"))),
                author: UserRef {
                    id: UserId::new("u"),
                    name: "U".into(),
                    is_bot: false,
                },
                text: String::new(),
                attachments: vec![],
                reply_to: None,
                is_direct: true,
                mentions_self: false,
                sent_at_ms: 0,
            },
        }
    }

    /// Counts the turns of agent "held" running at once; each waits for a permit of
    /// `release`, so the test decides when they end. Other agents' turns end at once.
    struct Gate {
        running: AtomicUsize,
        most: AtomicUsize,
        release: Semaphore,
        seen: Mutex<Vec<(String, String, i64)>>,
    }

    #[async_trait]
    impl Handler for Gate {
        async fn handle(&self, e: Envelope) {
            let held = e.agent.as_str() == "held";
            if held {
                let now = self.running.fetch_add(1, SeqCst) + 1;
                self.most.fetch_max(now, SeqCst);
                self.release.acquire().await.unwrap().forget();
                self.running.fetch_sub(1, SeqCst);
            }
            self.seen.lock().unwrap().push((
                e.agent.to_string(),
                e.inbound.room.id.to_string(),
                e.journal_id.0,
            ));
        }
    }

    /// Yields until `done` holds; the timeout only turns a hang into a failure.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let wait = async {
            while !done() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("never: {what}"));
    }

    #[tokio::test]
    async fn at_most_the_cap_runs_and_every_message_is_handled_once_in_room_order() {
        const CAP: usize = 4;
        const ROOMS: usize = 50;
        const PER_ROOM: usize = 3;
        let gate = Arc::new(Gate {
            running: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            release: Semaphore::new(0),
            seen: Mutex::new(vec![]),
        });
        let bus = InProcessBus::new(10_000, Arc::new(Turns::new(gate.clone(), CAP)));
        let mut n = 0;
        for _ in 0..PER_ROOM {
            for room in 0..ROOMS {
                n += 1;
                bus.publish(envelope("held", n, room)).await.unwrap();
            }
        }
        // Every room has work, but only CAP turns start; the rest wait for a permit.
        until("the cap's turns start", || gate.running.load(SeqCst) == CAP).await;
        // Another persona is not held up by the first one's full cap.
        for room in 0..ROOMS {
            n += 1;
            bus.publish(envelope("free", n, room)).await.unwrap();
        }
        until("the other persona's messages are handled", || {
            gate.seen.lock().unwrap().len() == ROOMS
        })
        .await;
        assert_eq!(gate.running.load(SeqCst), CAP, "a held turn ended early");
        // Let every held turn end, then wait for the bus to empty.
        gate.release.add_permits(ROOMS * PER_ROOM);
        bus.drain().await;

        assert_eq!(gate.most.load(SeqCst), CAP, "more turns ran at once than the cap");
        let seen = gate.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), ROOMS * PER_ROOM + ROOMS, "lost or repeated messages");
        let mut ids: Vec<i64> = seen.iter().map(|(_, _, id)| *id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), seen.len(), "a message was handled twice");
        for room in 0..ROOMS {
            let room = format!("room-{room}");
            let held: Vec<i64> = seen
                .iter()
                .filter(|(a, r, _)| a == "held" && *r == room)
                .map(|(_, _, id)| *id)
                .collect();
            assert_eq!(held.len(), PER_ROOM);
            assert!(held.is_sorted(), "{room} out of order: {held:?}");
        }
    }
}
