//! Speaking as a persona through a channel's webhook (issue 46, docs/discord.md "A troupe
//! on one bot"): the webhook of each channel, found or created on first need and kept in the
//! gateway's database ([`WebhookStore`], migration 0017), a message posted with the
//! persona's name and avatar (`?wait=true`, so its id is kept; `thread_id` in a thread),
//! edited through the webhook's message route, and the names Discord refuses for webhooks.
//!
//! What goes wrong is handled here: an Unknown Webhook (10015, an admin deleted it) drops
//! the stored webhook and posts again through a new one, so the message still goes out once;
//! Missing Permissions (50013, no Manage Webhooks) makes the channel speak as the bot with a
//! `**Name:**` prefix, with one warning per channel. A message posted just before a crash
//! is found again in the channel's history (the reply's marker, [`marker_key`]), so a reply
//! driven again after a restart edits it rather than posting a second copy.
//! Webhook routes are paced per webhook (their own bucket), not per channel.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::DiscordConnector;
use super::rest::{
    Bucket, CallError, Hook, MISSING_PERMISSIONS, UNKNOWN_MESSAGE, UNKNOWN_WEBHOOK, WebhookToken,
};
use super::wire::{self, Snowflake};
use crate::chorus::Voice;
use crate::connector::{ConnectorError, SinkError};
use crate::model::{MessageId, Outbound};
use crate::sync::Locked;

/// What troupe names the webhooks it creates (the persona's name goes on each message).
pub(crate) const WEBHOOK_NAME: &str = "troupe";
/// Where the webhooks of one bot account are kept (the gateway's `discord_webhooks` table),
/// so that a restart and every replica reuse them.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// The webhook kept for `channel`.
    async fn get(&self, channel: u64) -> Result<Option<Hook>, SinkError>;
    async fn put(&self, channel: u64, hook: &Hook) -> Result<(), SinkError>;
    /// Forgets `channel`'s webhook, if it is still `webhook`.
    async fn forget(&self, channel: u64, webhook: u64) -> Result<(), SinkError>;
    /// Every webhook id kept, in any channel: messages from them are never input.
    async fn ours(&self) -> Result<Vec<u64>, SinkError>;
}

/// The connector state key of a reply's marker: written before its first webhook post,
/// cleared once it is delivered. A marker still there names the message the reply answers,
/// after which its posts are looked for.
fn marker_key(key: &str) -> String {
    format!("webhook:{key}")
}

/// Where a voice's message goes: the webhook's channel (a thread's parent) and the thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub parent: u64,
    pub thread: Option<u64>,
}

/// The webhooks this connector knows: by channel, every id of ours, the channels that
/// refused Manage Webhooks (warned once), and which channels are threads.
pub(crate) struct Hooks {
    pub(crate) store: std::sync::Arc<dyn WebhookStore>,
    by_channel: Mutex<HashMap<u64, Hook>>,
    ours: Mutex<HashSet<u64>>,
    /// Webhooks whose messages came and that are not ours: asked about once.
    foreign: Mutex<HashSet<u64>>,
    refused: Mutex<HashSet<u64>>,
    places: Mutex<HashMap<u64, Place>>,
    /// The last message posted as a persona in each channel: a reply's marker looks for
    /// its posts after it (and after the message it answers), never at an earlier reply's.
    last_posted: Mutex<HashMap<u64, u64>>,
    /// One lock per channel while its webhook is found or made, so two replies at once
    /// do not create two webhooks.
    making: tokio::sync::Mutex<()>,
}

impl Hooks {
    pub(crate) fn new(store: std::sync::Arc<dyn WebhookStore>) -> Self {
        Self {
            store,
            by_channel: Mutex::default(),
            ours: Mutex::default(),
            foreign: Mutex::default(),
            refused: Mutex::default(),
            places: Mutex::default(),
            last_posted: Mutex::default(),
            making: tokio::sync::Mutex::new(()),
        }
    }

    /// Loads the ids of every webhook kept, so their messages are refused from the start;
    /// `false` when the database could not say.
    pub(crate) async fn load(&self) -> bool {
        match self.store.ours().await {
            Ok(ids) => {
                self.ours.locked().extend(ids);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Discord webhooks kept");
                false
            }
        }
    }

    /// Whether `webhook` is one of ours (in any channel or guild), as known here.
    pub(crate) fn is_ours(&self, webhook: u64) -> bool {
        self.ours.locked().contains(&webhook)
    }

    /// Whether `webhook`, whose message just came, is one of ours: known here, or kept in
    /// the database since this connection loaded them (another replica made it for a
    /// channel this one has not posted in). A webhook is kept before its first post, so one
    /// the database does not have when its message comes is not ours, and is not asked
    /// about again.
    pub(crate) async fn is_ours_now(&self, webhook: u64) -> bool {
        if self.is_ours(webhook) {
            return true;
        }
        if self.foreign.locked().contains(&webhook) {
            return false;
        }
        if !self.load().await {
            return false;
        }
        if self.is_ours(webhook) {
            return true;
        }
        let mut foreign = self.foreign.locked();
        if foreign.len() > 4096 {
            foreign.clear();
        }
        foreign.insert(webhook);
        false
    }

    fn refused(&self, parent: u64) -> bool {
        self.refused.locked().contains(&parent)
    }

    /// Notes that `parent` refused Manage Webhooks; `true` the first time (warn then).
    fn refuse(&self, parent: u64) -> bool {
        self.refused.locked().insert(parent)
    }

    fn posted(&self, channel: u64, id: &str) {
        if let Some(id) = Snowflake::parse(id) {
            let mut last = self.last_posted.locked();
            if last.len() > 4096 {
                last.clear();
            }
            let at = last.entry(channel).or_default();
            *at = (*at).max(id.0);
        }
    }

    async fn forget(&self, parent: u64, hook: &Hook) {
        self.by_channel.locked().remove(&parent);
        if let Err(e) = self.store.forget(parent, hook.id).await {
            tracing::warn!(channel = parent, error = %e, "cannot forget a deleted webhook");
        }
    }
}

impl DiscordConnector {
    fn hooks(&self) -> Result<&Hooks, CallError> {
        self.hooks
            .as_deref()
            .ok_or_else(|| CallError::Other(ConnectorError::Fatal("no webhooks here".into())))
    }

    /// Where a message to `channel` goes: a thread's webhook is its parent's.
    async fn place(&self, channel: u64) -> Result<Place, CallError> {
        let hooks = self.hooks()?;
        if let Some(place) = hooks.places.locked().get(&channel) {
            return Ok(*place);
        }
        let info = self.rest.channel(channel).await?;
        let place = match info.thread_parent() {
            Some(parent) => Place {
                parent: parent.0,
                thread: Some(channel),
            },
            None => Place {
                parent: channel,
                thread: None,
            },
        };
        let mut places = hooks.places.locked();
        if places.len() > 4096 {
            places.clear();
        }
        places.insert(channel, place);
        Ok(place)
    }

    /// The webhook of `parent`: known, kept in the database, one of the bot's own already
    /// there (another replica's, or one whose record a crash lost), or created now.
    async fn hook(&self, parent: u64) -> Result<Hook, CallError> {
        let hooks = self.hooks()?;
        if let Some(hook) = hooks.by_channel.locked().get(&parent) {
            return Ok(hook.clone());
        }
        let _making = hooks.making.lock().await;
        if let Some(hook) = hooks.by_channel.locked().get(&parent) {
            return Ok(hook.clone());
        }
        let kept = hooks.store.get(parent).await.ok().flatten();
        let hook = match kept {
            Some(hook) => hook,
            None => {
                let hook = self.find_or_create(parent).await?;
                if let Err(e) = hooks.store.put(parent, &hook).await {
                    tracing::warn!(channel = parent, error = %e, "cannot keep the channel's webhook");
                }
                hook
            }
        };
        hooks.ours.locked().insert(hook.id);
        hooks.by_channel.locked().insert(parent, hook.clone());
        Ok(hook)
    }

    async fn find_or_create(&self, parent: u64) -> Result<Hook, CallError> {
        let me = (*self.me.borrow()).map(|m| m.to_string());
        let listed = self.rest.channel_webhooks(parent).await?;
        let mine = listed.into_iter().find(|w| {
            w.kind == Some(1) && w.token.is_some() && w.user.as_ref().map(|u| &u.id) == me.as_ref()
        });
        let found = match mine {
            Some(w) => w,
            None => {
                tracing::info!(channel = parent, "creating the channel's webhook");
                self.rest.create_webhook(parent, WEBHOOK_NAME).await?
            }
        };
        let id = Snowflake::parse(&found.id).ok_or_else(|| {
            CallError::Other(ConnectorError::Transient("a webhook without an id".into()))
        })?;
        let token = found.token.filter(|t| !t.is_empty()).ok_or_else(|| {
            CallError::Other(ConnectorError::Transient(
                "a webhook without a token".into(),
            ))
        })?;
        Ok(Hook {
            id: id.0,
            token: WebhookToken::new(token),
        })
    }

    /// The pacing key of a voice's messages in `channel`: its webhook's (their own
    /// bucket), or the channel's when it speaks as the bot.
    pub(super) fn voice_pace_key(&self, channel: u64) -> u64 {
        let Some(hooks) = self.hooks.as_deref() else {
            return channel;
        };
        let parent = hooks
            .places
            .locked()
            .get(&channel)
            .map_or(channel, |p| p.parent);
        hooks
            .by_channel
            .locked()
            .get(&parent)
            .map_or(channel, |h| h.id)
    }

    /// Puts part `index` of `voice`'s reply in `channel`: posted through the webhook (or
    /// edited there, when `existing`), or as the bot with the voice's prefix where the
    /// channel does not allow webhooks. An Unknown Webhook posts once more through a new
    /// webhook; a message the webhook can no longer edit is posted anew.
    pub(super) async fn put_as(
        &self,
        voice: &Voice,
        channel: u64,
        reply: &Outbound,
        index: usize,
        part: &str,
        existing: Option<&MessageId>,
    ) -> Result<(Option<wire::Message>, Bucket), CallError> {
        let place = self.place(channel).await?;
        let hooks = self.hooks()?;
        for attempt in 0..2 {
            if hooks.refused(place.parent) {
                return self
                    .put_prefixed(voice, channel, reply, index, part, existing)
                    .await;
            }
            let hook = match self.hook(place.parent).await {
                Ok(hook) => hook,
                Err(CallError::Coded {
                    code: MISSING_PERMISSIONS,
                    ..
                }) => {
                    if hooks.refuse(place.parent) {
                        tracing::warn!(channel = place.parent, persona = %voice.name,
                            "the bot lacks Manage Webhooks in this channel: personas speak as the bot with their name in front (see docs/discord.md)");
                    }
                    return self
                        .put_prefixed(voice, channel, reply, index, part, existing)
                        .await;
                }
                Err(e) => return Err(e),
            };
            if existing.is_none() && index == 0 {
                self.mark(reply, channel).await;
            }
            let result = match existing {
                Some(id) => self
                    .rest
                    .edit_webhook_message(&hook, place.thread, id.as_str(), part)
                    .await
                    .map(|bucket| (None, bucket)),
                None => {
                    let body = webhook_body(voice, part);
                    self.rest
                        .execute_webhook(&hook, place.thread, &body)
                        .await
                        .map(|(m, bucket)| (Some(m), bucket))
                }
            };
            match result {
                Err(CallError::Coded {
                    code: UNKNOWN_WEBHOOK,
                    ..
                }) if attempt == 0 => {
                    tracing::warn!(
                        channel = place.parent,
                        "the channel's webhook was deleted; making a new one"
                    );
                    hooks.forget(place.parent, &hook).await;
                }
                Err(CallError::Coded {
                    code: UNKNOWN_WEBHOOK | UNKNOWN_MESSAGE,
                    ..
                }) if existing.is_some() => {
                    // A message of a webhook that is gone: the part is posted anew.
                    return Box::pin(self.put_as(voice, channel, reply, index, part, None)).await;
                }
                other => {
                    if let Ok((Some(posted), _)) = &other {
                        hooks.posted(channel, &posted.id);
                    }
                    return other;
                }
            }
        }
        Err(CallError::Other(ConnectorError::Transient(
            "the channel's webhook was deleted twice in a row".into(),
        )))
    }

    /// Deletes a persona's message in `channel`: through the webhook, or as the bot where
    /// the channel refused webhooks. A message or webhook gone already is not an error.
    pub(super) async fn delete_hooked(
        &self,
        channel: u64,
        id: &MessageId,
    ) -> Result<(), ConnectorError> {
        let place = self.place(channel).await?;
        let hooks = self.hooks()?;
        let hook = match hooks.refused(place.parent) {
            true => None,
            false => hooks.by_channel.locked().get(&place.parent).cloned(),
        };
        let result = match hook {
            Some(hook) => {
                self.pacer.wait_turn(hook.id).await;
                self.rest
                    .delete_webhook_message(&hook, place.thread, id.as_str())
                    .await
            }
            None => {
                self.pacer.wait_turn(channel).await;
                self.rest.delete_message(channel, id.as_str()).await
            }
        };
        match result {
            Ok(())
            | Err(CallError::Coded {
                code: UNKNOWN_WEBHOOK | UNKNOWN_MESSAGE,
                ..
            }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Part `index` as the bot, with the voice's name in front.
    async fn put_prefixed(
        &self,
        voice: &Voice,
        channel: u64,
        reply: &Outbound,
        index: usize,
        part: &str,
        existing: Option<&MessageId>,
    ) -> Result<(Option<wire::Message>, Bucket), CallError> {
        let text = format!("{}{part}", voice.prefix());
        match existing {
            Some(id) => self
                .rest
                .edit_message(channel, id.as_str(), &text)
                .await
                .map(|b| (None, b)),
            None => {
                let reply_to = if index == 0 {
                    reply.reply_to.as_ref()
                } else {
                    None
                };
                let body = super::send::body(
                    &text,
                    reply_to,
                    channel,
                    super::send::nonce(&reply.key, index),
                );
                let (mut message, bucket) = self.rest.create_message(channel, &body).await?;
                // The caller compares the text with the part it asked for.
                if let Some(stripped) = message.content.strip_prefix(&voice.prefix()) {
                    message.content = stripped.to_string();
                }
                Ok((Some(message), bucket))
            }
        }
    }

    /// Notes, before a reply's first webhook post, that it is being posted (see
    /// [`Self::recover`]).
    async fn mark(&self, reply: &Outbound, channel: u64) {
        let Some(question) = reply
            .reply_to
            .as_ref()
            .and_then(|m| Snowflake::parse(m.as_str()))
        else {
            return;
        };
        let last = self
            .hooks
            .as_deref()
            .and_then(|h| h.last_posted.locked().get(&channel).copied())
            .unwrap_or_default();
        let after = question.0.max(last).to_string();
        let value = json!({"channel": channel, "after": after}).to_string();
        if let Err(e) = self.state.put(&marker_key(&reply.key), &value).await {
            tracing::warn!(error = %e, "could not note a webhook post");
        }
    }

    /// The reply is delivered (or taken back): nothing to look for after a restart.
    pub(super) async fn unmark(&self, key: &str) {
        if self.hooks.is_some() {
            let _ = self.state.put(&marker_key(key), "").await;
        }
    }

    /// The messages of `voice`'s reply an earlier run posted and did not record (it was
    /// killed between the post and its record): found in the channel's history after the
    /// message it answers, posted by one of our webhooks under the voice's name (or by the
    /// bot with its prefix), at most one per part.
    pub(super) async fn recover(
        &self,
        voice: &Voice,
        reply: &Outbound,
        parts: &[String],
    ) -> Vec<MessageId> {
        let (Some(hooks), Ok(Some(raw))) = (
            self.hooks.as_deref(),
            self.state.get(&marker_key(&reply.key)).await,
        ) else {
            return Vec::new();
        };
        let Ok(marker) = serde_json::from_str::<Value>(&raw) else {
            return Vec::new();
        };
        let (Some(channel), Some(after)) = (
            marker["channel"].as_u64(),
            marker["after"].as_str().and_then(Snowflake::parse),
        ) else {
            return Vec::new();
        };
        // A reply driven again at start may come before the connection loaded them.
        let _ = hooks.load().await;
        let me = *self.me.borrow();
        let history = match self.rest.messages_after(channel, after.0, 100).await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(channel, error = %ConnectorError::from(e), "cannot look for a reply's earlier posts");
                return Vec::new();
            }
        };
        let mut found = Vec::new();
        for value in history {
            if found.len() >= parts.len() {
                break;
            }
            let Ok(msg) = serde_json::from_value::<wire::Message>(value) else {
                continue;
            };
            // The first messages of the voice after the question are this reply's: the
            // room's replies go out one at a time, in order. Their texts are set again.
            if said_by(&msg, voice, hooks, me).is_some() {
                found.push(MessageId::new(msg.id));
            }
        }
        if !found.is_empty() {
            tracing::info!(
                messages = found.len(),
                "found a reply's messages posted before a restart; editing them"
            );
        }
        found
    }
}

/// The text of `msg` when `voice` said it: through one of our webhooks under its name, or
/// as the bot with its prefix.
pub(crate) fn said_by<'a>(
    msg: &'a wire::Message,
    voice: &Voice,
    hooks: &Hooks,
    me: Option<Snowflake>,
) -> Option<&'a str> {
    let author = msg.author.as_ref()?;
    let from_hook = msg
        .webhook_id
        .as_deref()
        .and_then(Snowflake::parse)
        .is_some_and(|w| hooks.is_ours(w.0));
    if from_hook {
        return (author.username == voice.name).then_some(msg.content.as_str());
    }
    if me.is_some() && Snowflake::parse(&author.id) == me {
        return msg.content.strip_prefix(&voice.prefix());
    }
    None
}

/// The body of a webhook message: the text, the voice's name and avatar; user mentions
/// only (a model's text never pings @everyone or roles).
fn webhook_body(voice: &Voice, content: &str) -> Value {
    let mut body = json!({
        "content": content,
        "username": voice.name,
        "allowed_mentions": {"parse": ["users"]},
    });
    if let Some(avatar) = &voice.avatar {
        body["avatar_url"] = json!(avatar);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::AgentId;

    /// Webhooks kept by "the database", and how often it was asked for every id.
    #[derive(Default)]
    struct Kept {
        ids: Mutex<Vec<u64>>,
        asked: Mutex<usize>,
    }

    #[async_trait]
    impl WebhookStore for Kept {
        async fn get(&self, _: u64) -> Result<Option<Hook>, SinkError> {
            Ok(None)
        }
        async fn put(&self, _: u64, hook: &Hook) -> Result<(), SinkError> {
            self.ids.locked().push(hook.id);
            Ok(())
        }
        async fn forget(&self, _: u64, _: u64) -> Result<(), SinkError> {
            Ok(())
        }
        async fn ours(&self) -> Result<Vec<u64>, SinkError> {
            *self.asked.locked() += 1;
            Ok(self.ids.locked().clone())
        }
    }

    #[tokio::test]
    async fn a_webhook_another_replica_made_is_ours_and_a_strangers_is_asked_about_once() {
        let kept = std::sync::Arc::new(Kept::default());
        let hooks = Hooks::new(kept.clone());
        assert!(hooks.load().await);
        // Another replica makes a webhook after this connection loaded them.
        kept.ids.locked().push(46);
        assert!(!hooks.is_ours(46));
        assert!(hooks.is_ours_now(46).await);
        assert!(!hooks.is_ours_now(47).await);
        let asked = *kept.asked.locked();
        assert!(!hooks.is_ours_now(47).await);
        assert!(hooks.is_ours_now(46).await);
        assert_eq!(*kept.asked.locked(), asked, "each answer is kept");
    }

    #[test]
    fn the_body_names_the_persona() {
        let v = Voice::new(AgentId::new("ada"), "Ada", Some("https://x.test/a.png"));
        let b = webhook_body(&v, "hi");
        assert_eq!(b["username"], "Ada");
        assert_eq!(b["avatar_url"], "https://x.test/a.png");
        assert_eq!(b["allowed_mentions"]["parse"], json!(["users"]));
    }
}
