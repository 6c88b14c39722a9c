//! The in-process bus, the default: one FIFO queue per `(agent, room)` and a task per room
//! that has work, so messages of one room are handled strictly in order while different
//! rooms proceed concurrently. Its capacity is a semaphore: `publish` waits for a free slot,
//! which slows connectors down (backpressure) instead of growing memory.

use async_trait::async_trait;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use super::{Bus, BusError, Envelope, Handler};

type Queued = (Envelope, OwnedSemaphorePermit);

/// The default bus: bounded, per-room ordered, in memory.
pub struct InProcessBus {
    inner: Arc<Inner>,
}

struct Inner {
    capacity: usize,
    slots: Arc<Semaphore>,
    rooms: Mutex<HashMap<String, VecDeque<Queued>>>,
    handler: Arc<dyn Handler>,
    tracker: TaskTracker,
}

impl InProcessBus {
    pub fn new(capacity: usize, handler: Arc<dyn Handler>) -> Self {
        Self {
            inner: Arc::new(Inner {
                capacity,
                slots: Arc::new(Semaphore::new(capacity)),
                rooms: Mutex::new(HashMap::new()),
                handler,
                tracker: TaskTracker::new(),
            }),
        }
    }
}

impl Inner {
    /// Handles one room's queue until it is empty. Exactly one such task runs per
    /// non-empty room: `publish` starts it when it creates the room's queue, and the task
    /// removes the queue (under the same lock) when it finds it empty.
    async fn drain_room(self: Arc<Self>, key: String) {
        loop {
            let next = {
                let mut rooms = self.rooms.lock().unwrap_or_else(|e| e.into_inner());
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
            // `_slot` drops here: the capacity is released once the message is handled.
        }
    }
}

impl InProcessBus {
    /// Waits until every published message has been handled (the tests' synchronization).
    #[cfg(test)]
    pub(crate) async fn drain(&self) {
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
        let start = {
            let mut rooms = self.inner.rooms.lock().unwrap_or_else(|e| e.into_inner());
            match rooms.get_mut(&key) {
                Some(queue) => {
                    queue.push_back((envelope, slot));
                    false
                }
                None => {
                    rooms.insert(key.clone(), VecDeque::from([(envelope, slot)]));
                    true
                }
            }
        };
        if start {
            let inner = self.inner.clone();
            self.inner.tracker.spawn(inner.drain_room(key));
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
    use tokio::sync::Notify;
    use troupe_connectors::{Inbound, MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

    fn envelope(n: i64, room: &str) -> Envelope {
        Envelope {
            journal_id: JournalId(n),
            redelivery: false,
            attempt: 0,
            agent: "a".into(),
            inbound: Inbound {
                id: MessageId::new(n.to_string()),
                room: RoomRef::new(Platform::Web, RoomId::new(room)),
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
        let bus = InProcessBus::new(100, rec.clone());
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
        let bus = Arc::new(InProcessBus::new(2, rec.clone()));
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
}
