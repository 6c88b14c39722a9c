//! The model scheduler: a fair queue in front of every provider account.
//!
//! A provider account is a vendor, base URL and key; every persona on the same key shares
//! its [`Account`], and with it the account's limits: calls in flight
//! (`TROUPE_PROVIDER_CONCURRENCY`), requests per minute (`TROUPE_PROVIDER_RPM`, spread
//! evenly: one every 60/rpm seconds) and tokens per minute (`TROUPE_PROVIDER_TPM`, a bucket
//! that each call's actual tokens are taken from afterwards). After a 429 the whole account
//! waits out `retry-after` (one second when the provider gives none): no persona on that key
//! calls before it.
//!
//! A call that cannot go at once waits in a queue with four priorities: replies to direct
//! messages and mentions, other replies, background memory, re-embedding. Within a
//! priority, rooms take turns (round robin by room): a room flooding the bot with 200
//! messages queues behind itself, and a message in another room goes next. The priority
//! and room come from the caller's [`Turn`] (a task-local set by the agent around its
//! call, so the `ModelProvider` trait does not change); a call made without one is an
//! ordinary reply in a room of its own.
//!
//! The rate arithmetic is our own (GCRA with a burst of one, and a token bucket) rather than
//! governor's: the queue needs "when may the next call go" to arm its timer, and tokio's
//! clock, so tests can pause time. The fast path (nobody waiting, a slot and the rate free)
//! takes one uncontended lock; `troupe bench --scheduler` measures it.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use troupe_connectors::sync::Locked;

/// Limits of one provider account. Zero means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountLimits {
    pub concurrency: usize,
    pub requests_per_minute: u32,
    pub tokens_per_minute: u32,
}

/// Which calls go first, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// A reply to a direct message or a mention.
    Direct = 0,
    /// Any other reply.
    #[default]
    Reply = 1,
    /// Room summaries and user facts.
    Background = 2,
    /// Embedding documents again.
    Embedding = 3,
}

const PRIORITIES: [Priority; 4] = [
    Priority::Direct,
    Priority::Reply,
    Priority::Background,
    Priority::Embedding,
];

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Direct => "direct",
            Priority::Reply => "reply",
            Priority::Background => "background",
            Priority::Embedding => "embedding",
        }
    }
}

/// Who is calling: a priority and the room (hashed) whose turn it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Turn {
    pub priority: Priority,
    pub lane: u64,
}

impl Turn {
    /// A turn for a call made in `room` (anything hashable: a room key).
    pub fn new(priority: Priority, room: &impl Hash) -> Turn {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        room.hash(&mut h);
        Turn {
            priority,
            lane: h.finish(),
        }
    }

    /// Runs `work` with this turn as the one its model calls take.
    pub async fn scope<F: std::future::Future>(self, work: F) -> F::Output {
        TURN.scope(self, work).await
    }

    /// The turn of the running task; the default (a reply) outside any.
    pub fn current() -> Turn {
        TURN.try_with(|t| *t).unwrap_or_default()
    }
}

tokio::task_local! {
    static TURN: Turn;
}

/// Every account's queue, by account. A cheap-to-clone handle; the app holds one.
#[derive(Clone, Default)]
pub struct Scheduler {
    limits: AccountLimits,
    accounts: Arc<Mutex<HashMap<u64, Arc<Account>>>>,
}

impl Scheduler {
    pub fn new(limits: AccountLimits) -> Scheduler {
        Scheduler {
            limits,
            accounts: Arc::default(),
        }
    }

    /// The account for `key` (a hash of vendor, base URL and API key: the map holds no
    /// key), made on first use.
    pub fn account(&self, key: u64, label: &str) -> Arc<Account> {
        let mut map = self.accounts.locked();
        map.entry(key)
            .or_insert_with(|| Arc::new(Account::new(label.to_string(), self.limits)))
            .clone()
    }
}

/// One provider account's queue and limits.
pub struct Account {
    label: String,
    limits: AccountLimits,
    state: Mutex<State>,
}

struct Waiter {
    grant: oneshot::Sender<Permit>,
    since: Instant,
}

/// The rooms waiting at one priority, in turn.
#[derive(Default)]
struct Lanes {
    order: VecDeque<u64>,
    waiting: HashMap<u64, VecDeque<Waiter>>,
    len: usize,
}

impl Lanes {
    fn push(&mut self, lane: u64, waiter: Waiter) {
        let queue = self.waiting.entry(lane).or_default();
        if queue.is_empty() {
            self.order.push_back(lane);
        }
        queue.push_back(waiter);
        self.len += 1;
    }

    /// The next waiter: the first of the room whose turn it is; that room goes to the back.
    fn pop(&mut self) -> Option<Waiter> {
        let lane = self.order.pop_front()?;
        let queue = self.waiting.get_mut(&lane)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&lane);
        } else {
            self.order.push_back(lane);
        }
        self.len -= 1;
        waiter
    }
}

struct State {
    in_flight: usize,
    queues: [Lanes; 4],
    /// GCRA: the earliest instant the next request may go.
    next_request: Option<Instant>,
    /// Token bucket: tokens available (may go below zero after a large call).
    tokens: f64,
    tokens_at: Instant,
    /// No call before this (a 429's retry-after).
    blocked_until: Option<Instant>,
    /// When the armed timer will pump the queue again, if one is armed.
    timer_at: Option<Instant>,
}

/// A call's place at the provider; dropping it frees the slot. `charge` takes the call's
/// tokens from the account's per-minute budget.
pub struct Permit {
    account: Arc<Account>,
    /// False for a permit whose grant found nobody waiting (its slot is freed by hand).
    armed: bool,
}

impl Permit {
    pub fn charge(&self, tokens: u64) {
        if self.account.limits.tokens_per_minute == 0 {
            return;
        }
        let mut s = self.account.lock();
        let now = Instant::now();
        self.account.refill(&mut s, now);
        s.tokens -= tokens as f64;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.account.lock();
        s.in_flight -= 1;
        Account::pump(&self.account, &mut s);
    }
}

impl Account {
    fn new(label: String, limits: AccountLimits) -> Account {
        Account {
            label,
            limits,
            state: Mutex::new(State {
                in_flight: 0,
                queues: Default::default(),
                next_request: None,
                tokens: f64::from(limits.tokens_per_minute),
                tokens_at: Instant::now(),
                blocked_until: None,
                timer_at: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Waits for this call's turn (see the module doc), in the running task's [`Turn`].
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        let turn = Turn::current();
        let rx = {
            let mut s = self.lock();
            let nobody_waits = s.queues.iter().all(|q| q.len == 0);
            if nobody_waits && self.may_start(&mut s, Instant::now()).is_ok() {
                self.start(&mut s, Instant::now());
                drop(s);
                crate::metrics::scheduler_wait(turn.priority.as_str(), Duration::ZERO);
                return Permit {
                    account: self.clone(),
                    armed: true,
                };
            }
            let (tx, rx) = oneshot::channel();
            s.queues[turn.priority as usize].push(
                turn.lane,
                Waiter {
                    grant: tx,
                    since: Instant::now(),
                },
            );
            crate::metrics::scheduler_depth(
                turn.priority.as_str(),
                s.queues[turn.priority as usize].len,
            );
            Account::pump(self, &mut s);
            rx
        };
        // A granted permit travels in the channel: if this future is dropped after the
        // grant, dropping the channel drops the permit, which frees the slot.
        match rx.await {
            Ok(permit) => permit,
            // The sender is only dropped with the account, which outlives its callers.
            Err(_) => Permit {
                account: self.clone(),
                armed: false,
            },
        }
    }

    /// After a 429: no call on this account before `retry_after` has passed.
    pub fn back_off(&self, retry_after: Option<Duration>) {
        let until = Instant::now() + retry_after.unwrap_or(Duration::from_secs(1));
        let mut s = self.lock();
        if s.blocked_until.is_none_or(|b| b < until) {
            s.blocked_until = Some(until);
        }
        tracing::warn!(account = %self.label, wait_ms = until.saturating_duration_since(Instant::now()).as_millis() as u64,
            "the provider is rate limiting this key; every persona on it waits");
    }

    fn refill(&self, s: &mut State, now: Instant) {
        let tpm = f64::from(self.limits.tokens_per_minute);
        let elapsed = now.saturating_duration_since(s.tokens_at).as_secs_f64();
        s.tokens = (s.tokens + elapsed * tpm / 60.0).min(tpm);
        s.tokens_at = now;
    }

    /// Whether a call may start now; else the instant to look again (`None`: when a call
    /// ends).
    fn may_start(&self, s: &mut State, now: Instant) -> Result<(), Option<Instant>> {
        let l = &self.limits;
        if l.concurrency > 0 && s.in_flight >= l.concurrency {
            return Err(None);
        }
        if let Some(until) = s.blocked_until {
            if now < until {
                return Err(Some(until));
            }
            s.blocked_until = None;
        }
        if l.requests_per_minute > 0
            && let Some(next) = s.next_request
            && now < next
        {
            return Err(Some(next));
        }
        if l.tokens_per_minute > 0 {
            self.refill(s, now);
            if s.tokens < 1.0 {
                let rate = f64::from(l.tokens_per_minute) / 60.0;
                return Err(Some(now + Duration::from_secs_f64((1.0 - s.tokens) / rate)));
            }
        }
        Ok(())
    }

    fn start(&self, s: &mut State, now: Instant) {
        s.in_flight += 1;
        let rpm = self.limits.requests_per_minute;
        if rpm > 0 {
            let period = Duration::from_secs(60) / rpm;
            let base = s.next_request.map_or(now, |n| n.max(now));
            s.next_request = Some(base + period);
        }
    }

    /// Grants waiting calls while the limits allow, highest priority first and rooms in
    /// turn; arms a timer when a rate or a back-off holds the next one.
    fn pump(this: &Arc<Account>, s: &mut State) {
        loop {
            let Some(priority) = PRIORITIES
                .into_iter()
                .find(|p| s.queues[*p as usize].len > 0)
            else {
                return;
            };
            let now = Instant::now();
            match this.may_start(s, now) {
                Ok(()) => {}
                Err(None) => return,
                Err(Some(at)) => {
                    if s.timer_at.is_none_or(|t| t > at) {
                        s.timer_at = Some(at);
                        let account = this.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep_until(at).await;
                            let mut s = account.lock();
                            if s.timer_at == Some(at) {
                                s.timer_at = None;
                            }
                            Account::pump(&account, &mut s);
                        });
                    }
                    return;
                }
            }
            let queue = &mut s.queues[priority as usize];
            let Some(waiter) = queue.pop() else { return };
            let depth = queue.len;
            crate::metrics::scheduler_depth(priority.as_str(), depth);
            this.start(s, now);
            crate::metrics::scheduler_wait(priority.as_str(), now - waiter.since);
            let permit = Permit {
                account: this.clone(),
                armed: true,
            };
            if let Err(mut permit) = waiter.grant.send(permit) {
                // The caller gave up waiting (its message was cancelled): free the slot
                // here, under the lock we hold. The request it took from the rate stays
                // taken: a bound, not a leak.
                permit.armed = false;
                s.in_flight -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
