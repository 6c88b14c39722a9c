//! Pacing outgoing messages per channel within Discord's published limit of five messages
//! every five seconds in a channel, and holding a channel back after a 429 or when the
//! rate-limit headers say its bucket is empty.
//!
//! A sliding window over the instants messages were sent, so the limit holds over any five
//! seconds. It only waits; a 429 that gets through anyway is handled by the sender.

use crate::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) const WINDOW: Duration = Duration::from_secs(5);
pub(crate) const PER_WINDOW: usize = 5;
/// Channels with no message for this long are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(crate) struct Pacer {
    channels: Mutex<HashMap<u64, Channel>>,
}

#[derive(Default)]
struct Channel {
    sent: VecDeque<Instant>,
    /// Nothing goes before this instant (a 429's retry_after, an empty bucket).
    not_before: Option<Instant>,
}

impl Pacer {
    /// Waits until a message to `channel` fits the limit, and counts it as sent.
    pub(crate) async fn wait_turn(&self, channel: u64) {
        loop {
            let ready_at = {
                let mut all = self.channels.locked();
                let now = Instant::now();
                let ch = all.entry(channel).or_default();
                while ch
                    .sent
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= WINDOW)
                {
                    ch.sent.pop_front();
                }
                let mut at = now;
                if let Some(nb) = ch.not_before {
                    at = at.max(nb);
                }
                if ch.sent.len() >= PER_WINDOW
                    && let Some(oldest) = ch.sent.front()
                {
                    at = at.max(*oldest + WINDOW);
                }
                if at <= now {
                    ch.sent.push_back(now);
                    ch.not_before = None;
                    if all.len() > 1024 {
                        all.retain(|_, c| {
                            c.sent
                                .back()
                                .is_some_and(|t| now.duration_since(*t) < FORGET_AFTER)
                        });
                    }
                    return;
                }
                at
            };
            tokio::time::sleep_until(ready_at).await;
        }
    }

    /// Holds `channel` back for `wait` from now.
    pub(crate) fn hold(&self, channel: u64, wait: Duration) {
        let mut all = self.channels.locked();
        let until = Instant::now() + wait;
        let ch = all.entry(channel).or_default();
        ch.not_before = Some(ch.not_before.map_or(until, |nb| nb.max(until)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn five_every_five_seconds_per_channel() {
        let pacer = Pacer::default();
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..7 {
            pacer.wait_turn(1).await;
            at.push(start.elapsed());
        }
        assert_eq!(at[4], Duration::ZERO);
        assert_eq!(at[5], WINDOW);
        assert_eq!(at[6], WINDOW);
        // Another channel is not held back.
        let before = Instant::now();
        pacer.wait_turn(2).await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_delays_the_next_message() {
        let pacer = Pacer::default();
        pacer.hold(1, Duration::from_millis(500));
        let start = Instant::now();
        pacer.wait_turn(1).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }
}
