//! Delivering a reply: split at 2,000 characters without breaking code blocks, the first
//! message a native reply (`message_reference`, `fail_if_not_exists: false`), the rest
//! following in order, paced per channel, a 429 waited out and the same message sent again.
//!
//! A reply shown while it is written (issue 32, `show`) is posted at its first text and
//! edited as it grows, past 2,000 characters in further messages; its message ids are kept
//! in the connector's state, so that the reply's delivery, in this run or after a restart,
//! edits them to the final text and never posts a second copy.
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
use crate::chorus::Voice;
use crate::connector::{ConnectorError, Delivery, Recent};
use crate::model::{MessageId, Outbound, RoomRef};

/// Discord's limit for one message, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 2000;

/// A part's limit: a persona's text leaves room for its name in front, where a channel
/// refuses webhooks and it speaks as the bot (`**Name:** `, at most 86 characters).
fn max_chars(voice: Option<&Voice>) -> usize {
    match voice {
        Some(_) => MAX_MESSAGE_CHARS - 100,
        None => MAX_MESSAGE_CHARS,
    }
}

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

/// The user a message is for when troupe starts the DM itself: `send_to` is `user:ID`
/// (see `rest::open_dm`); no message of theirs names the channel.
pub(crate) fn dm_recipient(room: &RoomRef) -> Option<Snowflake> {
    Snowflake::parse(room.send_to.as_deref()?.strip_prefix("user:")?)
}

/// A short, stable nonce for part `index` of the reply `key` (Discord allows 25 characters).
pub(super) fn nonce(key: &str, index: usize) -> String {
    // FNV-1a, 64 bits: stable across processes, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}-{index}")
}

/// The JSON body of one message.
pub(super) fn body(
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
    pub(super) fn channel_lock(&self, channel: u64) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.channel_locks.locked();
        if locks.len() > 4096 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(channel).or_default().clone()
    }

    /// A message troupe starts in a user's DM (a draft told to an owner; `send_to` is
    /// `user:ID`): the DM channel is opened first, and the bot speaks, since a webhook
    /// cannot post in a DM. `None` for every other message.
    pub(crate) async fn send_to_user(
        &self,
        reply: &Outbound,
    ) -> Option<Result<Delivery, ConnectorError>> {
        let user = dm_recipient(&reply.room)?;
        let sent = async {
            let channel = self.rest.open_dm(user).await?;
            let mut reply = reply.clone();
            reply.room.send_to = Some(channel.id);
            self.deliver_as(&reply, None).await
        };
        Some(sent.await)
    }

    /// Delivers `reply`, as the bot or, with a `voice`, as that persona through the
    /// channel's webhook (`super::hooks`).
    pub(super) async fn deliver_as(
        &self,
        reply: &Outbound,
        voice: Option<&Voice>,
    ) -> Result<Delivery, ConnectorError> {
        let channel = channel_of(&reply.room)?;
        let parts = split_message(&reply.text, max_chars(voice));
        if parts.is_empty() {
            return Ok(Delivery::default());
        }
        let lock = self.channel_lock(channel);
        let _turn = lock.lock().await;
        if let Some(done) = lock_recent(&self.delivered).get(&reply.key) {
            return Ok(done);
        }
        // A reply shown live (`show_live`) is finished in its messages, edited to the
        // final text; otherwise what an earlier attempt sent is resumed after.
        let live = self.live.locked().remove(&reply.key);
        let mut shown = match live {
            Some(live) => live,
            None => Shown {
                channel,
                // An edited question's answer goes in the earlier reply's messages
                // (issue 32): they are edited, as a retry edits what it had sent.
                ids: self
                    .progress
                    .locked()
                    .get(&reply.key)
                    .cloned()
                    .unwrap_or_else(|| reply.replaces.clone()),
                texts: Vec::new(),
                voice: voice.is_some(),
            },
        };
        let was_live = !shown.texts.is_empty();
        if let Some(voice) = voice
            && shown.ids.is_empty()
        {
            shown.ids = self.recover(voice, reply, &parts).await;
        }
        let put = self
            .put_parts(
                channel,
                reply,
                &parts,
                &mut shown,
                MAX_RATE_LIMIT_WAIT,
                voice,
            )
            .await;
        if let Err(e) = put {
            if was_live {
                self.live.locked().insert(reply.key.clone(), shown);
            } else {
                self.remember_progress(&reply.key, shown.ids);
            }
            return Err(e);
        }
        // A live text longer than the final one (a model call that started over) left
        // messages the reply no longer has.
        for extra in shown.ids.split_off(parts.len()) {
            if let Err(e) = self.delete_one(channel, &extra, voice.is_some()).await {
                tracing::warn!(channel, error = %e, "could not delete a streamed message");
            }
        }
        if was_live {
            self.forget_live(&reply.key).await;
        }
        if voice.is_some() {
            self.unmark(&reply.key).await;
        }
        self.progress.locked().remove(&reply.key);
        let delivery = Delivery {
            message_ids: shown.ids,
        };
        lock_recent(&self.delivered).insert(reply.key.clone(), delivery.clone());
        Ok(delivery)
    }

    /// Shows the reply written so far (issue 32): its parts posted or edited in place.
    /// A 429 is not waited out here: the caller shows the latest text once it may.
    pub(super) async fn show_as(
        &self,
        reply: &Outbound,
        voice: Option<&Voice>,
    ) -> Result<(), ConnectorError> {
        let channel = channel_of(&reply.room)?;
        let parts = split_message(&reply.text, max_chars(voice));
        if parts.is_empty() {
            return Ok(());
        }
        let lock = self.channel_lock(channel);
        let _turn = lock.lock().await;
        if lock_recent(&self.delivered).get(&reply.key).is_some() {
            return Ok(());
        }
        let known = self.live.locked().remove(&reply.key);
        let mut shown = match known {
            Some(shown) => shown,
            // After a restart: the messages an earlier run showed of this reply.
            None => Shown {
                channel,
                ids: self.saved_live(&reply.key).await,
                texts: Vec::new(),
                voice: voice.is_some(),
            },
        };
        if let Some(voice) = voice
            && shown.ids.is_empty()
        {
            shown.ids = self.recover(voice, reply, &parts).await;
        }
        let before = shown.ids.len();
        let result = self
            .put_parts(channel, reply, &parts, &mut shown, Duration::ZERO, voice)
            .await;
        if shown.ids.len() != before {
            self.save_live(&reply.key, &shown.ids).await;
        }
        let mut live = self.live.locked();
        if live.len() >= 1024 {
            live.clear();
        }
        live.insert(reply.key.clone(), shown);
        result
    }

    /// Deletes what was shown of reply `key` (its turn failed; no reply will finish it).
    pub(super) async fn unshow(&self, key: &str) {
        let Some(shown) = self.live.locked().remove(key) else {
            return;
        };
        let channel = shown.channel;
        for id in &shown.ids {
            if let Err(e) = self.delete_one(channel, id, shown.voice).await {
                tracing::warn!(channel, error = %e, "could not delete a streamed message");
            }
        }
        self.forget_live(key).await;
        self.unmark(key).await;
    }

    /// Deletes one message of a reply: the bot's, or, for a persona speaking through a
    /// webhook, through the webhook's message route.
    async fn delete_one(
        &self,
        channel: u64,
        id: &MessageId,
        voice: bool,
    ) -> Result<(), ConnectorError> {
        if voice {
            return self.delete_hooked(channel, id).await;
        }
        self.pacer.wait_turn(channel).await;
        self.rest
            .delete_message(channel, id.as_str())
            .await
            .map_err(ConnectorError::from)
    }

    /// Deletes a persona's messages `ids` in `room` (through the webhook, or as the bot
    /// where it spoke with a prefix).
    pub(super) async fn delete_as(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        let channel = channel_of(room)?;
        for id in ids {
            self.delete_hooked(channel, id).await?;
        }
        Ok(())
    }

    /// Deletes the persona's messages `ids` in `room` (the reply to a deleted question),
    /// paced as any call to the channel. A message gone already (404) is not an error.
    pub(super) async fn delete_sent(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        let channel = channel_of(room)?;
        for id in ids {
            self.pacer.wait_turn(channel).await;
            if let Err(e) = self.rest.delete_message(channel, id.as_str()).await {
                return Err(ConnectorError::from(e));
            }
        }
        Ok(())
    }

    /// Puts each part of a reply in its message: edited where one was shown already (and
    /// differs), posted otherwise. 429s are waited out up to `patience`.
    async fn put_parts(
        &self,
        channel: u64,
        reply: &Outbound,
        parts: &[String],
        shown: &mut Shown,
        patience: Duration,
        voice: Option<&Voice>,
    ) -> Result<(), ConnectorError> {
        let mut waited = Duration::ZERO;
        let mut index = 0;
        while index < parts.len() {
            let part = &parts[index];
            if shown.texts.get(index) == Some(part) {
                index += 1;
                continue;
            }
            // A persona's webhook messages are paced by their webhook's own bucket.
            let pace = match voice {
                Some(_) => self.voice_pace_key(channel),
                None => channel,
            };
            self.pacer.wait_turn(pace).await;
            let existing = shown.ids.get(index).cloned();
            let result = self
                .put_one(channel, reply, index, part, existing.as_ref(), voice)
                .await;
            match result {
                Ok((created, bucket)) => {
                    if let Some(wait) = bucket.exhausted_for {
                        self.pacer.hold(pace, wait);
                    }
                    if let Some(message) = created {
                        let id = MessageId::new(message.id);
                        // A part posted anew in place of one a deleted webhook left.
                        match shown.ids.get_mut(index) {
                            Some(slot) => *slot = id,
                            None => shown.ids.push(id),
                        }
                        // A repeated nonce answers the message an earlier run posted,
                        // with the text it had then: edit it on the next round.
                        if message.content != *part {
                            set_text(&mut shown.texts, index, String::new());
                            continue;
                        }
                    }
                    set_text(&mut shown.texts, index, part.clone());
                    index += 1;
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
                    self.pacer.hold(pace, retry_after);
                    waited += retry_after;
                    if waited > patience {
                        return Err(ConnectorError::RateLimited { retry_after });
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Part `index` of a reply: as the persona through the webhook (`voice`), else as the
    /// bot, edited where `existing` was posted already, posted otherwise.
    async fn put_one(
        &self,
        channel: u64,
        reply: &Outbound,
        index: usize,
        part: &str,
        existing: Option<&MessageId>,
        voice: Option<&Voice>,
    ) -> Result<(Option<super::wire::Message>, super::rest::Bucket), CallError> {
        match (voice, existing) {
            (Some(voice), existing) => {
                self.put_as(voice, channel, reply, index, part, existing)
                    .await
            }
            (None, Some(id)) => self
                .rest
                .edit_message(channel, id.as_str(), part)
                .await
                .map(|bucket| (None, bucket)),
            (None, None) => {
                let reply_to = if index == 0 {
                    reply.reply_to.as_ref()
                } else {
                    None
                };
                let body = body(part, reply_to, channel, nonce(&reply.key, index));
                self.rest
                    .create_message(channel, &body)
                    .await
                    .map(|(message, bucket)| (Some(message), bucket))
            }
        }
    }

    /// The messages shown live of reply `key` by an earlier run, from the connector's state.
    async fn saved_live(&self, key: &str) -> Vec<MessageId> {
        crate::shown::saved(&*self.state, key, |id| Snowflake::parse(id).is_some()).await
    }

    /// Keeps the messages shown live of reply `key` across a restart, so that a reply
    /// driven again edits them rather than posting a second copy.
    async fn save_live(&self, key: &str, ids: &[MessageId]) {
        crate::shown::save(&*self.state, key, ids).await;
    }

    async fn forget_live(&self, key: &str) {
        crate::shown::forget(&*self.state, key).await;
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

/// What of a reply is on Discord: its messages' ids and, as far as this run knows, their
/// texts (empty after a restart: every part is then edited once).
#[derive(Debug, Default)]
pub(super) struct Shown {
    channel: u64,
    ids: Vec<MessageId>,
    texts: Vec<String>,
    /// Posted as a persona through the channel's webhook (`super::hooks`).
    voice: bool,
}

fn set_text(texts: &mut Vec<String>, index: usize, text: String) {
    if texts.len() <= index {
        texts.resize(index + 1, String::new());
    }
    texts[index] = text;
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
