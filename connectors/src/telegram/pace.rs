//! Pacing of outgoing messages within Telegram's limits: at most one message a second in a
//! chat, twenty a minute in a group, thirty a second overall.
//!
//! Sliding windows over the instants messages were sent, so the group limit holds over any
//! minute (a token bucket with a burst would let 20 + 20 through in the first one). It only
//! waits; a 429 that gets through anyway is handled by the sender.

use crate::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

const PER_CHAT_GAP: Duration = Duration::from_secs(1);
const GROUP_WINDOW: Duration = Duration::from_secs(60);
const GROUP_MAX: usize = 20;
const GLOBAL_WINDOW: Duration = Duration::from_secs(1);
const GLOBAL_MAX: usize = 30;
/// Chats with no message for this long are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(120);

#[derive(Default)]
pub(crate) struct Pacer {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    global: VecDeque<Instant>,
    chats: HashMap<i64, VecDeque<Instant>>,
}

impl Pacer {
    /// Waits until a message to `chat` fits every limit, and counts it as sent.
    /// Group and supergroup ids are negative; private chats are users, positive.
    pub(crate) async fn wait_turn(&self, chat: i64) {
        loop {
            let ready_at = {
                let mut state = self.state.locked();
                let now = Instant::now();
                match state.earliest(chat, now) {
                    None => {
                        state.record(chat, now);
                        return;
                    }
                    Some(at) => at,
                }
            };
            tokio::time::sleep_until(ready_at).await;
        }
    }
}

impl State {
    /// `None` when a message may go now, else the instant it may.
    fn earliest(&mut self, chat: i64, now: Instant) -> Option<Instant> {
        while self
            .global
            .front()
            .is_some_and(|t| now.duration_since(*t) >= GLOBAL_WINDOW)
        {
            self.global.pop_front();
        }
        let mut at = now;
        if self.global.len() >= GLOBAL_MAX
            && let Some(oldest) = self.global.front()
        {
            at = at.max(*oldest + GLOBAL_WINDOW);
        }
        if let Some(sent) = self.chats.get_mut(&chat) {
            while sent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= GROUP_WINDOW)
            {
                sent.pop_front();
            }
            if let Some(last) = sent.back() {
                at = at.max(*last + PER_CHAT_GAP);
            }
            if chat < 0
                && sent.len() >= GROUP_MAX
                && let Some(oldest) = sent.get(sent.len() - GROUP_MAX)
            {
                at = at.max(*oldest + GROUP_WINDOW);
            }
        }
        (at > now).then_some(at)
    }

    fn record(&mut self, chat: i64, now: Instant) {
        self.global.push_back(now);
        self.chats.entry(chat).or_default().push_back(now);
        if self.chats.len() > 1024 {
            self.chats.retain(|_, sent| {
                sent.back()
                    .is_some_and(|t| now.duration_since(*t) < FORGET_AFTER)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_a_second_per_chat() {
        let pacer = Pacer::default();
        let start = Instant::now();
        for _ in 0..3 {
            pacer.wait_turn(42).await;
        }
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        // Another chat is not held back.
        let before = Instant::now();
        pacer.wait_turn(43).await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn twenty_a_minute_in_a_group() {
        let pacer = Pacer::default();
        let start = Instant::now();
        let mut sent = Vec::new();
        for _ in 0..21 {
            pacer.wait_turn(-100).await;
            sent.push(start.elapsed());
        }
        // 20 at one a second, then the 21st waits for the first to leave the window.
        assert_eq!(sent[19], Duration::from_secs(19));
        assert_eq!(sent[20], Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn thirty_a_second_overall() {
        let pacer = Pacer::default();
        let start = Instant::now();
        for chat in 1..=31 {
            pacer.wait_turn(chat).await;
        }
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
