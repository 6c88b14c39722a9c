//! The outbox: where a reply leaves.
//!
//! The agent records each reply in the outbox in the same transaction that marks its
//! message handled, then asks the outbox to deliver it at once; a reply that leaves with
//! the caller's own answer (the HTTP API) is recorded delivered in that transaction.
//! Delivery claims the entry with a lease, hands it to the connector of that agent and
//! platform, and marks it delivered. A failure that may pass (a 429, a network error, a
//! connector that is not up yet) schedules a retry with backoff; the background loop also
//! picks up whatever a crashed process left claimed or pending. A reply is delivered whole
//! by its connector or not at all, so a retry never sends half of one twice.
//!
//! The outbox only delivers: which connector runs for which persona is the registry's
//! (`registry::Connectors`), which the outbox reads and never fills in.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use troupe_connectors::{AgentId, ConnectorError, Outbound, Platform};

use crate::registry::Connectors;
use crate::storage::{OutboxEntry, OutboxId, ReplyStart, Store};

/// How long a claim lasts before another deliverer may take the entry.
pub const LEASE_MS: i64 = 60_000;
/// Attempts before a reply is given up and logged.
const MAX_ATTEMPTS: i32 = 12;

/// A cheap-to-clone handle on delivery.
#[derive(Clone)]
pub struct Outbox {
    store: Store,
    /// Read only, to find the connector that delivers an entry; the topology fills it in.
    connectors: Connectors,
    wake: Arc<Notify>,
}

/// What one delivery attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    Sent,
    /// Someone else holds the claim, or it was already delivered.
    NotClaimed,
    Retrying,
    GaveUp,
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

impl Outbox {
    pub fn new(store: Store, connectors: Connectors) -> Self {
        Self {
            store,
            connectors,
            wake: Arc::new(Notify::new()),
        }
    }

    /// How a reply to be recorded now starts in the outbox: delivered already when its
    /// connector answers in band (the HTTP API, whose caller gets the reply in its
    /// response), else claimed by the recorder, who delivers it at once.
    pub fn start(&self, agent_id: &AgentId, reply: &Outbound) -> ReplyStart {
        let in_band = self
            .connectors
            .get(agent_id, reply.room.platform)
            .and_then(|c| c.delivered_in_band(reply));
        match in_band {
            Some(delivery) => ReplyStart::Delivered {
                platform_ids: platform_ids(delivery),
            },
            None => ReplyStart::Claimed { lease_ms: LEASE_MS },
        }
    }

    /// Counts a reply recorded delivered (`ReplyStart::Delivered`) as one that left.
    pub fn delivered_in_band(&self, platform: Platform, id: OutboxId) {
        crate::metrics::message_out(platform);
        tracing::debug!(outbox_id = id.0, "reply delivered in band");
    }

    /// Delivers one entry now (the agent calls this right after recording a reply).
    pub async fn deliver(&self, id: OutboxId) -> anyhow::Result<Delivered> {
        match self.store.outbox_claim_one(id, now_ms(), LEASE_MS).await? {
            Some(entry) => self.attempt(entry).await,
            None => Ok(Delivered::NotClaimed),
        }
    }

    /// Delivers an entry the caller already holds the claim of (recorded with
    /// `Store::record_handled_as` and `ReplyStart::Claimed`).
    pub async fn deliver_claimed(&self, entry: OutboxEntry) -> anyhow::Result<Delivered> {
        self.attempt(entry).await
    }

    async fn attempt(&self, entry: OutboxEntry) -> anyhow::Result<Delivered> {
        let platform = entry.outbound.room.platform;
        let Some(connector) = self.connectors.get(&entry.agent_id, platform) else {
            return self
                .failed(
                    &entry,
                    &ConnectorError::Transient(format!(
                        "no {platform} connector is running for agent {}",
                        entry.agent_id
                    )),
                )
                .await;
        };
        match connector.send(&entry.outbound).await {
            Ok(delivery) => {
                let ids = platform_ids(delivery);
                self.store.outbox_delivered(entry.id, &ids).await?;
                crate::metrics::message_out(platform);
                tracing::debug!(outbox_id = entry.id.0, parts = ids.len(), "reply delivered");
                Ok(Delivered::Sent)
            }
            Err(e) => self.failed(&entry, &e).await,
        }
    }

    async fn failed(
        &self,
        entry: &OutboxEntry,
        error: &ConnectorError,
    ) -> anyhow::Result<Delivered> {
        let message = error.to_string();
        if !error.is_retryable() || entry.attempts >= MAX_ATTEMPTS {
            tracing::error!(outbox_id = entry.id.0, attempts = entry.attempts, error = %message,
                "giving up on delivering a reply");
            self.store.outbox_give_up(entry.id, &message).await?;
            crate::metrics::outbox_retry(true);
            return Ok(Delivered::GaveUp);
        }
        let wait = match error {
            ConnectorError::RateLimited { retry_after } => *retry_after,
            _ => backoff(entry.attempts),
        };
        tracing::warn!(outbox_id = entry.id.0, attempts = entry.attempts, retry_in = ?wait,
            error = %message, "delivery failed; will retry");
        self.store
            .outbox_retry(entry.id, now_ms() + wait.as_millis() as i64, &message)
            .await?;
        crate::metrics::outbox_retry(false);
        self.wake.notify_one();
        Ok(Delivered::Retrying)
    }

    /// Delivers whatever is due until `shutdown`: retries, and entries a crashed run left.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            match self.store.outbox_claim(64, now_ms(), LEASE_MS).await {
                Ok(entries) => {
                    for entry in entries {
                        if let Err(e) = self.attempt(entry).await {
                            tracing::error!(error = %e, "outbox delivery failed");
                        }
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot read the outbox"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// The platform's message ids of a delivery, as the outbox keeps them.
fn platform_ids(delivery: troupe_connectors::Delivery) -> Vec<String> {
    delivery
        .message_ids
        .into_iter()
        .map(|m| m.into_string())
        .collect()
}

/// The longest wait between two delivery attempts.
///
/// Five minutes, as documented (docs/architecture.md), not the 256 s the doubling used to
/// stop at (issue 30, finding 13): the exponent was clamped at 8 before the cap was applied,
/// so the cap never bound. Five minutes is the one that fits what a retry waits out: a
/// platform outage or a connector that is restarting lasts minutes, and with
/// [`MAX_ATTEMPTS`] attempts the waits add up to about 19 minutes (1 s doubling to 256 s,
/// then 300 s, 300 s) before a reply is given up, against 17 with 256 s; a longer cap
/// would deliver a reply that much later after the platform is back. A 429's own
/// `retry-after` is honoured instead of this schedule.
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// 1 s, 2 s, 4 s … doubling up to [`BACKOFF_MAX`].
fn backoff(attempts: i32) -> Duration {
    // Clamped only so that the shift cannot overflow; the cap is BACKOFF_MAX.
    let exp = attempts.clamp(1, 32) as u32 - 1;
    Duration::from_secs(1u64 << exp).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(9), Duration::from_secs(256));
        // Issue 30, finding 13: the cap is the documented five minutes, and it binds.
        assert_eq!(backoff(10), BACKOFF_MAX);
        assert_eq!(backoff(MAX_ATTEMPTS), Duration::from_secs(300));
        assert_eq!(backoff(50), Duration::from_secs(300));
        assert_eq!(backoff(i32::MAX), Duration::from_secs(300));
        // What a reply waits in all before it is given up: about 19 minutes.
        let total: Duration = (1..MAX_ATTEMPTS).map(backoff).sum();
        assert_eq!(total, Duration::from_secs(255 + 256 + 2 * 300));
    }
}
