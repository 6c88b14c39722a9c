//! Delivering a reply: split at 2,000 characters without breaking code blocks, the first
//! message a native reply (`message_reference`, `fail_if_not_exists: false`), the rest
//! following in order, paced per channel, a 429 waited out and the same message sent again.
//!
//! Replies to one channel never interleave (a lock per channel). What was sent of a reply is
//! remembered by its outbound key, so that when the outbox retries after an error the reply
//! continues after the last message that got through, and a reply already delivered is not
//! sent again. Each message also carries a nonce derived from the key with
//! `enforce_nonce`, so Discord itself drops a repeat of a create it already took.

use crate::sync::Locked;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::DiscordConnector;
use super::rest::CallError;
use super::split::split_message;
use super::wire::Snowflake;
use crate::connector::{ConnectorError, Delivery, Recent};
use crate::model::{MessageId, Outbound, RoomRef};

/// Discord's limit for one message, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 2000;

/// How long one `send` waits out 429s before handing the wait to the outbox (which holds a
/// claim on the reply for a minute).
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(40);

/// The channel a room sends to.
pub(crate) fn channel_of(room: &RoomRef) -> Result<u64, ConnectorError> {
    let raw = room.send_to.as_deref().unwrap_or(room.id.as_str());
    Snowflake::parse(raw)
        .map(|s| s.0)
        .ok_or_else(|| ConnectorError::Fatal(format!("`{raw}` is not a Discord channel id")))
}

/// A short, stable nonce for part `index` of the reply `key` (Discord allows 25 characters).
fn nonce(key: &str, index: usize) -> String {
    // FNV-1a, 64 bits: stable across processes, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}-{index}")
}

/// The JSON body of one message.
fn body(
    content: &str,
    reply_to: Option<&MessageId>,
    channel: u64,
    nonce: String,
) -> serde_json::Value {
    let mut body = json!({
        "content": content,
        "nonce": nonce,
        "enforce_nonce": true,
        // Text from a model never pings @everyone or roles.
        "allowed_mentions": {"parse": ["users"], "replied_user": true},
    });
    if let Some(target) = reply_to.and_then(|m| Snowflake::parse(m.as_str())) {
        body["message_reference"] = json!({
            "message_id": target.to_string(),
            "channel_id": channel.to_string(),
            "fail_if_not_exists": false,
        });
    }
    body
}

impl DiscordConnector {
    fn channel_lock(&self, channel: u64) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.channel_locks.locked();
        if locks.len() > 4096 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(channel).or_default().clone()
    }

    pub(super) async fn deliver(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        let channel = channel_of(&reply.room)?;
        let parts = split_message(&reply.text, MAX_MESSAGE_CHARS);
        if parts.is_empty() {
            return Ok(Delivery::default());
        }
        let lock = self.channel_lock(channel);
        let _turn = lock.lock().await;
        if let Some(done) = lock_recent(&self.delivered).get(&reply.key) {
            return Ok(done);
        }
        let mut sent: Vec<MessageId> = self
            .progress
            .locked()
            .get(&reply.key)
            .cloned()
            .unwrap_or_default();
        let mut waited = Duration::ZERO;
        while sent.len() < parts.len() {
            let index = sent.len();
            let reply_to = if index == 0 {
                reply.reply_to.as_ref()
            } else {
                None
            };
            let body = body(&parts[index], reply_to, channel, nonce(&reply.key, index));
            self.pacer.wait_turn(channel).await;
            match self.rest.create_message(channel, &body).await {
                Ok((message, bucket)) => {
                    if let Some(wait) = bucket.exhausted_for {
                        self.pacer.hold(channel, wait);
                    }
                    sent.push(MessageId::new(message.id));
                }
                Err(CallError::RateLimited {
                    retry_after,
                    global,
                }) => {
                    tracing::warn!(
                        channel,
                        ?retry_after,
                        global,
                        part = index + 1,
                        parts = parts.len(),
                        "Discord rate limited a message; waiting"
                    );
                    self.pacer.hold(channel, retry_after);
                    waited += retry_after;
                    if waited > MAX_RATE_LIMIT_WAIT {
                        self.remember_progress(&reply.key, sent);
                        return Err(ConnectorError::RateLimited { retry_after });
                    }
                }
                Err(CallError::Other(e)) => {
                    self.remember_progress(&reply.key, sent);
                    return Err(e);
                }
            }
        }
        self.progress.locked().remove(&reply.key);
        let delivery = Delivery { message_ids: sent };
        lock_recent(&self.delivered).insert(reply.key.clone(), delivery.clone());
        Ok(delivery)
    }

    fn remember_progress(&self, key: &str, sent: Vec<MessageId>) {
        if sent.is_empty() {
            return;
        }
        let mut progress = self.progress.locked();
        if progress.len() > 1024 {
            progress.clear();
        }
        progress.insert(key.to_string(), sent);
    }

    pub(super) async fn show_typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        let channel = channel_of(room)?;
        self.rest
            .typing(channel)
            .await
            .map_err(ConnectorError::from)
    }
}

fn lock_recent(m: &Mutex<Recent>) -> std::sync::MutexGuard<'_, Recent> {
    m.locked()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Platform, RoomId};

    #[test]
    fn the_first_part_is_a_native_reply() {
        let b = body("hi", Some(&MessageId::new("55")), 41, nonce("k", 0));
        assert_eq!(b["message_reference"]["message_id"], "55");
        assert_eq!(b["message_reference"]["channel_id"], "41");
        assert_eq!(b["message_reference"]["fail_if_not_exists"], false);
        assert_eq!(b["enforce_nonce"], true);
        let b = body("more", None, 41, nonce("k", 1));
        assert!(b.get("message_reference").is_none());
    }

    #[test]
    fn nonces_are_short_stable_and_distinct() {
        let a = nonce("outbox:agent:123", 0);
        assert!(a.len() <= 25);
        assert_eq!(a, nonce("outbox:agent:123", 0));
        assert_ne!(a, nonce("outbox:agent:123", 1));
        assert_ne!(a, nonce("outbox:agent:124", 0));
    }

    #[test]
    fn rooms_must_be_channel_ids() {
        let room = RoomRef::new(Platform::Discord, RoomId::new("41"));
        assert_eq!(channel_of(&room).unwrap(), 41);
        let bad = RoomRef::new(Platform::Discord, RoomId::new("general"));
        assert!(matches!(channel_of(&bad), Err(ConnectorError::Fatal(_))));
    }
}
