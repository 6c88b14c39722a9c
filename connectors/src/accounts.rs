//! Several accounts of one platform serving one persona (issue 46: elizaOS 2.x's
//! `settings.telegram.accounts`): [`Accounts`] is one [`Connector`] over several, so the
//! gateway keeps one connector per persona and platform, and the persona one memory and one
//! set of budgets.
//!
//! Each account but the one named `default` *tags* the ids it hands out: its rooms, messages
//! and files are `<account>/<id>` (`support/-100123`, `support/-100123:42`). Tags keep two
//! bots' private chats with one person apart (Telegram gives both the person's id as the
//! chat id, and numbers their messages separately), and tell [`Accounts`] which bot answers:
//! a reply, an edit, a reaction or a download goes through the account its room or message
//! is tagged with. The `default` account's ids are untagged, as with one bot. People are not
//! tagged: a person is the same on every bot of the platform, so what the persona knows of
//! them is one.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::connector::{
    Accepted, Connector, ConnectorError, ConnectorState, ContextLine, Delivery, InboundSink,
    Receiving, SinkError, VoiceNote, WebhookRequest, WebhookResponse,
};
use crate::model::{Attachment, Inbound, MessageId, Outbound, Platform, Reaction, RoomRef, UserId};

/// The account an id is tagged with, and the platform's own id: `("support", "-100123")`
/// for `support/-100123`; `(None, id)` for an untagged id.
pub fn split(id: &str) -> (Option<&str>, &str) {
    match id.split_once('/') {
        Some((tag, rest)) if !tag.is_empty() => (Some(tag), rest),
        _ => (None, id),
    }
}

/// `id` tagged with `tag` (untagged when `tag` is `None`).
pub fn tag(tag: Option<&str>, id: &str) -> String {
    match tag {
        Some(t) => format!("{t}/{id}"),
        None => id.to_string(),
    }
}

/// One account of a persona, as the gateway resolved it from the character file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSpec {
    /// Its id: `default`, whose ids are untagged, or the tag of its ids.
    pub id: String,
    /// Its credential (a bot token). Never logged.
    pub token: String,
    /// Its own API root, when the file gave it one with its own token; `None`: the
    /// persona's (`TELEGRAM_API_ROOT`).
    pub api_root: Option<String>,
    /// The chats it may stay in when groups not allowed are left; `None`: the persona's.
    pub allowed_chats: Option<Vec<String>>,
}

impl AccountSpec {
    /// The tag of the account's ids: none for `default`.
    pub fn tag(&self) -> Option<String> {
        (self.id != "default").then(|| self.id.clone())
    }
}

/// One account: its tag (`None` for `default`) and its connector.
pub struct Member {
    pub tag: Option<String>,
    pub connector: Arc<dyn Connector>,
}

/// Several accounts of one platform as one connector.
pub struct Accounts {
    platform: Platform,
    members: Vec<Member>,
}

impl Accounts {
    /// `members` must not be empty, and their tags must differ.
    pub fn new(platform: Platform, members: Vec<Member>) -> Self {
        Accounts { platform, members }
    }

    /// The member an id tagged `tag` belongs to; an id no member tags goes to the first.
    fn member(&self, tag: Option<&str>) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.tag.as_deref() == tag)
            .or_else(|| self.members.first())
    }

    /// The member `room` belongs to, and the room as that account knows it.
    fn route(&self, room: &RoomRef) -> Option<(&Member, RoomRef)> {
        let (tag, _) = split(room.id.as_str());
        let m = self.member(tag)?;
        Some((m, untag_room(room, m.tag.as_deref())))
    }
}

fn untag_str(s: &str, tag: Option<&str>) -> String {
    match (tag, split(s)) {
        (Some(t), (Some(found), rest)) if found == t => rest.to_string(),
        _ => s.to_string(),
    }
}

fn untag_room(room: &RoomRef, tag: Option<&str>) -> RoomRef {
    let mut r = room.clone();
    r.id = crate::model::RoomId::new(untag_str(room.id.as_str(), tag));
    r.send_to = room.send_to.as_deref().map(|s| untag_str(s, tag));
    r
}

fn untag_message(id: &MessageId, tag: Option<&str>) -> MessageId {
    MessageId::new(untag_str(id.as_str(), tag))
}

fn tag_room(room: &mut RoomRef, t: Option<&str>) {
    room.id = crate::model::RoomId::new(tag(t, room.id.as_str()));
    room.send_to = room.send_to.as_deref().map(|s| tag(t, s));
}

fn tag_message(id: &MessageId, t: Option<&str>) -> MessageId {
    MessageId::new(tag(t, id.as_str()))
}

/// What an account received, with its ids tagged.
fn tag_inbound(mut m: Inbound, t: Option<&str>) -> Inbound {
    m.id = tag_message(&m.id, t);
    tag_room(&mut m.room, t);
    if let Some(r) = m.reply_to.as_mut() {
        r.message = tag_message(&r.message, t);
    }
    if let Some(rev) = m.revises.as_mut() {
        rev.of = tag_message(&rev.of, t);
    }
    for a in &mut m.attachments {
        a.url = a.url.as_deref().map(|u| tag(t, u));
    }
    m
}

/// A reply, as the account it goes through knows its ids.
fn untag_outbound(reply: &Outbound, t: Option<&str>) -> Outbound {
    let mut r = reply.clone();
    r.room = untag_room(&reply.room, t);
    r.reply_to = reply.reply_to.as_ref().map(|m| untag_message(m, t));
    r.replaces = reply.replaces.iter().map(|m| untag_message(m, t)).collect();
    r
}

fn untag_inbound(m: &Inbound, t: Option<&str>) -> Inbound {
    let mut u = m.clone();
    u.id = untag_message(&m.id, t);
    u.room = untag_room(&m.room, t);
    if let Some(r) = u.reply_to.as_mut() {
        r.message = untag_message(&r.message, t);
    }
    u
}

/// An account's sink: tags what it receives, then hands it on.
struct Tagging {
    tag: Option<String>,
    inner: Arc<dyn InboundSink>,
}

#[async_trait]
impl InboundSink for Tagging {
    async fn accept(&self, message: Inbound) -> Result<Accepted, SinkError> {
        self.inner
            .accept(tag_inbound(message, self.tag.as_deref()))
            .await
    }

    async fn react(&self, mut reaction: Reaction) -> Result<(), SinkError> {
        let t = self.tag.as_deref();
        tag_room(&mut reaction.room, t);
        reaction.message = tag_message(&reaction.message, t);
        self.inner.react(reaction).await
    }
}

/// An account's share of the persona's connector state: its keys under its tag, so two
/// bots keep two `getUpdates` offsets.
pub struct TaggedState {
    pub tag: Option<String>,
    pub inner: Arc<dyn ConnectorState>,
}

#[async_trait]
impl ConnectorState for TaggedState {
    async fn get(&self, key: &str) -> Result<Option<String>, SinkError> {
        self.inner.get(&tag(self.tag.as_deref(), key)).await
    }
    async fn put(&self, key: &str, value: &str) -> Result<(), SinkError> {
        self.inner.put(&tag(self.tag.as_deref(), key), value).await
    }
}

#[async_trait]
impl Connector for Accounts {
    fn platform(&self) -> Platform {
        self.platform
    }

    /// Runs every account until `shutdown`. An account that stops with an error is
    /// logged, and the others go on; the first error is returned when all have stopped.
    async fn run(
        &self,
        sink: Arc<dyn InboundSink>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectorError> {
        let runs = self.members.iter().map(|m| {
            let sink: Arc<dyn InboundSink> = Arc::new(Tagging {
                tag: m.tag.clone(),
                inner: sink.clone(),
            });
            let shutdown = shutdown.clone();
            async move {
                let result = m.connector.run(sink, shutdown).await;
                if let Err(e) = &result {
                    let account = m.tag.as_deref().unwrap_or("default");
                    tracing::error!(account, error = %e, "an account stopped receiving");
                }
                result
            }
        });
        let results = futures::future::join_all(runs).await;
        results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
    }

    async fn send(&self, reply: &Outbound) -> Result<Delivery, ConnectorError> {
        let Some((m, _)) = self.route(&reply.room) else {
            return Err(ConnectorError::Fatal("no account to send through".into()));
        };
        let t = m.tag.as_deref();
        let mut d = m.connector.send(&untag_outbound(reply, t)).await?;
        d.message_ids = d.message_ids.iter().map(|id| tag_message(id, t)).collect();
        Ok(d)
    }

    fn shows_live(&self, room: &RoomRef) -> bool {
        self.route(room)
            .is_some_and(|(m, room)| m.connector.shows_live(&room))
    }

    async fn show_live(&self, reply: &Outbound) -> Result<(), ConnectorError> {
        match self.route(&reply.room) {
            Some((m, _)) => {
                let t = m.tag.as_deref();
                m.connector.show_live(&untag_outbound(reply, t)).await
            }
            None => Ok(()),
        }
    }

    async fn drop_live(&self, key: &str) {
        for m in &self.members {
            m.connector.drop_live(key).await;
        }
    }

    async fn send_voice(&self, note: &VoiceNote) -> Result<Option<MessageId>, ConnectorError> {
        let Some((m, room)) = self.route(&note.room) else {
            return Ok(None);
        };
        let t = m.tag.as_deref();
        let untagged = VoiceNote {
            room,
            reply_to: note.reply_to.as_ref().map(|id| untag_message(id, t)),
            audio: note.audio.clone(),
            duration: note.duration,
        };
        let sent = m.connector.send_voice(&untagged).await?;
        Ok(sent.map(|id| tag_message(&id, t)))
    }

    async fn delete_messages(
        &self,
        room: &RoomRef,
        ids: &[MessageId],
    ) -> Result<(), ConnectorError> {
        let Some((m, room)) = self.route(room) else {
            return Ok(());
        };
        let t = m.tag.as_deref();
        let ids: Vec<MessageId> = ids.iter().map(|id| untag_message(id, t)).collect();
        m.connector.delete_messages(&room, &ids).await
    }

    async fn add_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        let Some((m, room)) = self.route(room) else {
            return Ok(());
        };
        let message = untag_message(message, m.tag.as_deref());
        m.connector.add_reaction(&room, &message, emoji).await
    }

    async fn remove_reaction(
        &self,
        room: &RoomRef,
        message: &MessageId,
        emoji: &str,
    ) -> Result<(), ConnectorError> {
        let Some((m, room)) = self.route(room) else {
            return Ok(());
        };
        let message = untag_message(message, m.tag.as_deref());
        m.connector.remove_reaction(&room, &message, emoji).await
    }

    async fn typing(&self, room: &RoomRef) -> Result<(), ConnectorError> {
        match self.route(room) {
            Some((m, room)) => m.connector.typing(&room).await,
            None => Ok(()),
        }
    }

    /// Accounts receive by polling (the gateway's webhook route names a persona, not one of
    /// its bots): a webhook call goes to the first account, which refuses what is not its.
    async fn webhook(&self, request: WebhookRequest) -> WebhookResponse {
        match self.members.first() {
            Some(m) => m.connector.webhook(request).await,
            None => WebhookResponse {
                status: 404,
                body: r#"{"error":"not_found"}"#.into(),
            },
        }
    }

    async fn thread_context(&self, message: &Inbound) -> Vec<ContextLine> {
        match self.route(&message.room) {
            Some((m, _)) => {
                let t = m.tag.as_deref();
                m.connector.thread_context(&untag_inbound(message, t)).await
            }
            None => Vec::new(),
        }
    }

    async fn fetch_file(
        &self,
        attachment: &Attachment,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, crate::files::FileError> {
        let (t, _) = split(attachment.url.as_deref().unwrap_or_default());
        let Some(m) = self.member(t) else {
            return Ok(None);
        };
        let mut a = attachment.clone();
        a.url = a.url.as_deref().map(|u| untag_str(u, m.tag.as_deref()));
        m.connector.fetch_file(&a, cap).await
    }

    async fn may_steer(&self, message: &Inbound) -> Result<bool, ConnectorError> {
        match self.route(&message.room) {
            Some((m, _)) => {
                let t = m.tag.as_deref();
                m.connector.may_steer(&untag_inbound(message, t)).await
            }
            None => Ok(false),
        }
    }

    fn self_id(&self) -> Option<UserId> {
        self.members.iter().find_map(|m| m.connector.self_id())
    }

    async fn healthcheck(&self) -> Result<(), ConnectorError> {
        for m in &self.members {
            m.connector.healthcheck().await?;
        }
        Ok(())
    }

    /// The quietest account's silence.
    fn quiet_for(&self) -> Option<std::time::Duration> {
        self.members
            .iter()
            .filter_map(|m| m.connector.quiet_for())
            .max()
    }

    /// One receiver for all the accounts, elected once across replicas when any of them
    /// polls: its name joins theirs.
    fn receiving(&self) -> Receiving {
        let names: Vec<String> = self
            .members
            .iter()
            .filter_map(|m| match m.connector.receiving() {
                Receiving::OneAtATime { name } | Receiving::Sharded { name } => Some(name),
                Receiving::Everywhere => None,
            })
            .collect();
        if names.is_empty() {
            Receiving::Everywhere
        } else {
            Receiving::OneAtATime {
                name: names.join("+"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_tagged_and_untagged_by_their_account() {
        assert_eq!(split("support/-100123:4"), (Some("support"), "-100123:4"));
        assert_eq!(split("-100123:4"), (None, "-100123:4"));
        assert_eq!(tag(Some("a"), "7"), "a/7");
        assert_eq!(tag(None, "7"), "7");
        assert_eq!(untag_str("a/7", Some("a")), "7");
        // Another account's tag is left as written.
        assert_eq!(untag_str("b/7", Some("a")), "b/7");
        assert_eq!(untag_str("7", None), "7");
    }
}
