//! The in-process bus, the default: one FIFO queue per `(agent, room)` and a task per room
//! that has work, so messages of one room are handled strictly in order while different
//! rooms proceed concurrently. Its capacity is a semaphore: `publish` waits for a free slot,
//! which slows connectors down (backpressure) instead of growing memory.
//!
//! A second semaphore per persona caps its turns in flight (`TROUPE_TURNS_IN_FLIGHT`). A
//! turn is one message's whole path (decide, recall, prompt, model call, record, reply), and
//! all it holds is alive while it runs: the handler's boxed future alone is about 12 KiB.
//! Without the cap every room with work ran a turn at once, and with 10,000 active rooms
//! 10,000 turns queued, alive, on the one SQLite connection (or, with a real model, on
//! `TROUPE_MODEL_CONCURRENCY`): heaptrack on `troupe bench --messages 20000 --rooms 10000`
//! put 123 MiB of a 210 MiB heap peak in those futures, and most of the rest in what they
//! had read (docs/benchmarks.md, "10,000 rooms"). A room's task now takes a turn *before* it
//! takes its next message off the queue, so a waiting room costs its queued envelope and a
//! permit waiter, not a live turn. Order per room, the journal and outbox, and backpressure
//! are untouched; the permits are tokio's fair semaphore, so rooms get turns in the order
//! they asked and none is starved. The cap is per persona, not per process: one persona
//! waiting out its model's outage (its turns wait for the provider) must not take the turns
//! of the others. The NATS bus needs no such cap: its partitions already bound what is in
//! flight (`TROUPE_BUS_PARTITIONS`, one message each).

use async_trait::async_trait;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use troupe_connectors::AgentId;
use troupe_connectors::sync::Locked;

use super::{Bus, BusError, Envelope, Handler, OrderKey};

type Queued = (Envelope, OwnedSemaphorePermit);

/// The default bus: bounded, per-room ordered, in memory.
pub struct InProcessBus {
    inner: Arc<Inner>,
}

struct Inner {
    capacity: usize,
    slots: Arc<Semaphore>,
    /// Turns one persona may run at once.
    turns: usize,
    /// One semaphore of `turns` permits per persona, made at its first message. Personas
    /// are few and an idle semaphore is a few words, so they are never removed.
    lanes: Mutex<HashMap<AgentId, Arc<Semaphore>>>,
    rooms: Mutex<HashMap<OrderKey, VecDeque<Queued>>>,
    handler: Arc<dyn Handler>,
    tracker: TaskTracker,
}

impl InProcessBus {
    /// A bus of `capacity` queued messages, running at most `turns` of each persona's at once.
    pub fn new(capacity: usize, turns: usize, handler: Arc<dyn Handler>) -> Self {
        Self {
            inner: Arc::new(Inner {
                capacity,
                slots: Arc::new(Semaphore::new(capacity)),
                turns: turns.max(1),
                lanes: Mutex::new(HashMap::new()),
                rooms: Mutex::new(HashMap::new()),
                handler,
                tracker: TaskTracker::new(),
            }),
        }
    }
}

impl Inner {
    fn lane(&self, agent: &AgentId) -> Arc<Semaphore> {
        let mut lanes = self.lanes.locked();
        lanes
            .entry(agent.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.turns)))
            .clone()
    }

    /// Handles one room's queue until it is empty. Exactly one such task runs per
    /// non-empty room: `publish` starts it when it creates the room's queue, and the task
    /// removes the queue (under the same lock) when it finds it empty.
    async fn drain_room(self: Arc<Self>, key: OrderKey, agent: AgentId) {
        let lane = self.lane(&agent);
        loop {
            // The turn first, the message second: while the room waits for a turn its
            // message stays queued, and the turn's memory is taken only with its permit.
            // The semaphore is never closed; were it, the room would rather run uncapped
            // than drop its messages.
            let turn = lane.acquire().await.ok();
            let next = {
                let mut rooms = self.rooms.locked();
                let queue = rooms.get_mut(&key);
                match queue.and_then(VecDeque::pop_front) {
                    Some(item) => Some(item),
                    None => {
                        rooms.remove(&key);
                        None
                    }
                }
            };
            let Some((envelope, _slot)) = next else {
                return;
            };
            self.handler.handle(envelope).await;
            drop(turn);
            // `_slot` drops here: the capacity is released once the message is handled.
        }
    }
}

impl InProcessBus {
    /// Waits until every published message has been handled (the tests' synchronization).
    #[cfg(test)]
    async fn drain(&self) {
        let all = u32::try_from(self.inner.capacity).unwrap_or(u32::MAX);
        if let Ok(permits) = self.inner.slots.acquire_many(all).await {
            drop(permits);
        }
    }
}

#[async_trait]
impl Bus for InProcessBus {
    async fn publish(&self, envelope: Envelope) -> Result<(), BusError> {
        if self.inner.tracker.is_closed() {
            return Err(BusError::Closed);
        }
        let slot = self
            .inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| BusError::Closed)?;
        let key = envelope.order_key();
        // The persona of a room that had no queue: its task is started below.
        let start = {
            let mut rooms = self.inner.rooms.locked();
            match rooms.get_mut(&key) {
                Some(queue) => {
                    queue.push_back((envelope, slot));
                    None
                }
                None => {
                    let agent = envelope.agent.clone();
                    rooms.insert(key.clone(), VecDeque::from([(envelope, slot)]));
                    Some(agent)
                }
            }
        };
        if let Some(agent) = start {
            let inner = self.inner.clone();
            self.inner.tracker.spawn(inner.drain_room(key, agent));
        }
        Ok(())
    }

    fn depth(&self) -> usize {
        self.inner.capacity - self.inner.slots.available_permits()
    }

    async fn close(&self) {
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    fn describe(&self) -> &'static str {
        "in-process"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::JournalId;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;
    use tokio::sync::Notify;
    use troupe_connectors::{Inbound, Platform, RoomId, RoomRef, UserRef};

    fn envelope(n: i64, room: &str) -> Envelope {
        envelope_of("a", n, room)
    }

    fn envelope_of(agent: &str, n: i64, room: &str) -> Envelope {
        Envelope {
            journal_id: JournalId(n),
            delivery: crate::bus::Delivery::First,
            attempt: 1,
            trace: None,
            agent: agent.into(),
            inbound: Inbound::said(
                n.to_string(),
                RoomRef::new(Platform::Web, RoomId::new(room)),
                UserRef::person("u", "U"),
                "",
            )
            .direct(),
        }
    }

    /// Records the order of handling; room "slow" blocks until released.
    struct Recorder {
        seen: Mutex<Vec<(String, i64)>>,
        release: Notify,
    }

    #[async_trait]
    impl Handler for Recorder {
        async fn handle(&self, e: Envelope) {
            if e.inbound.room.id.as_str() == "slow" {
                self.release.notified().await;
            }
            self.seen
                .lock()
                .unwrap()
                .push((e.inbound.room.id.to_string(), e.journal_id.0));
        }
    }

    #[tokio::test]
    async fn one_room_is_ordered_and_rooms_do_not_block_each_other() {
        let rec = Arc::new(Recorder {
            seen: Mutex::new(vec![]),
            release: Notify::new(),
        });
        let bus = InProcessBus::new(100, 100, rec.clone());
        bus.publish(envelope(0, "slow")).await.unwrap();
        for n in 1..=20 {
            bus.publish(envelope(n, if n % 2 == 0 { "a" } else { "b" }))
                .await
                .unwrap();
        }
        // Rooms a and b finish while the slow room is still blocked.
        let done = async {
            loop {
                if rec.seen.lock().unwrap().len() == 20 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), done)
            .await
            .expect("rooms a and b were blocked by the slow room");
        rec.release.notify_one();
        bus.drain().await;
        let seen = rec.seen.lock().unwrap().clone();
        for room in ["a", "b"] {
            let ids: Vec<i64> = seen
                .iter()
                .filter(|(r, _)| r == room)
                .map(|(_, n)| *n)
                .collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(ids, sorted, "room {room} out of order");
            assert_eq!(ids.len(), 10);
        }
        assert_eq!(seen.last().unwrap().0, "slow");
        assert_eq!(bus.depth(), 0);
    }

    #[tokio::test]
    async fn a_full_bus_makes_publishers_wait() {
        let rec = Arc::new(Recorder {
            seen: Mutex::new(vec![]),
            release: Notify::new(),
        });
        let bus = Arc::new(InProcessBus::new(2, 2, rec.clone()));
        bus.publish(envelope(1, "slow")).await.unwrap();
        bus.publish(envelope(2, "slow")).await.unwrap();
        assert_eq!(bus.depth(), 2);
        let third = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(envelope(3, "x")).await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "publish did not wait for capacity");
        rec.release.notify_one();
        third.await.unwrap().unwrap();
        rec.release.notify_one();
        bus.drain().await;
        assert_eq!(rec.seen.lock().unwrap().len(), 3);
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
        let bus = InProcessBus::new(10_000, CAP, gate.clone());
        let mut n = 0;
        for _ in 0..PER_ROOM {
            for room in 0..ROOMS {
                n += 1;
                bus.publish(envelope_of("held", n, &format!("room-{room}")))
                    .await
                    .unwrap();
            }
        }
        // Every room has work, but only CAP turns start; the rest wait for a permit.
        until("the cap's turns start", || gate.running.load(SeqCst) == CAP).await;
        // Another persona is not held up by the first one's full cap.
        for room in 0..ROOMS {
            n += 1;
            bus.publish(envelope_of("free", n, &format!("room-{room}")))
                .await
                .unwrap();
        }
        until("the other persona's messages are handled", || {
            gate.seen.lock().unwrap().len() == ROOMS
        })
        .await;
        assert_eq!(gate.running.load(SeqCst), CAP, "a held turn ended early");
        // The held persona's other messages wait in their rooms' queues, counted by the bus.
        assert_eq!(bus.depth(), ROOMS * PER_ROOM);
        // Let every held turn end, then wait for the bus to empty.
        gate.release.add_permits(ROOMS * PER_ROOM);
        bus.drain().await;

        assert_eq!(
            gate.most.load(SeqCst),
            CAP,
            "more turns ran at once than the cap"
        );
        let seen = gate.seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            ROOMS * PER_ROOM + ROOMS,
            "lost or repeated messages"
        );
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
