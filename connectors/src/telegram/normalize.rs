//! Turning one Telegram update into what the connector does with it: hand an `Inbound` to
//! the sink, leave a group the persona may not be in, or skip it. An `edited_message` is an
//! `Inbound` that revises the message it edits (issue 32).
//!
//! Pure: no I/O, so every rule is a unit test. teloxide's types are read here and go no
//! further. Platform input is never trusted: a missing sender, an entity whose offsets do
//! not fit the text, or an update teloxide could not read is skipped, never a panic.

use teloxide::types::{
    Chat, ChatMemberUpdated, Message, MessageEntity, MessageEntityKind, Update, UpdateKind, User,
};

use crate::files::TELEGRAM_FILE;
use crate::model::{
    Attachment, Change, Inbound, MessageId, Platform, ReplyTo, Revision, RoomId, RoomRef, UserRef,
};

/// Who the bot is, from `getMe`: needed to recognise mentions, replies and its own messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub id: u64,
    pub username: Option<String>,
}

/// Which groups the persona may be in (`allowedGroupIds`, `shouldOnlyJoinInAllowedGroups`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupPolicy {
    pub only_join_allowed: bool,
    pub allowed: Option<Vec<String>>,
}

impl GroupPolicy {
    /// Whether the persona may stay in the group `chat`. An allowed entry may name the chat
    /// (`-1001234`) or one of its forum topics (`-1001234:7`).
    pub(crate) fn admits(&self, chat: i64) -> bool {
        if !self.only_join_allowed {
            return true;
        }
        let chat = chat.to_string();
        self.allowed.as_deref().unwrap_or_default().iter().any(|r| {
            let r = r.trim();
            r == chat || r.split_once(':').is_some_and(|(c, _)| c == chat)
        })
    }
}

/// What to do with one update.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// A message for the persona: hand it to the sink.
    Message(Box<Inbound>),
    /// The bot is in a group it may not be in: leave it, hand nothing on.
    Leave { chat: i64 },
    /// Reactions added or taken back (`super::reactions`): hand them to the sink.
    Reactions(Vec<crate::model::Reaction>),
    /// Nothing to do; the reason is for the debug log.
    Skip(&'static str),
}

/// Decides what to do with `update`.
pub(crate) fn normalize(update: &Update, me: &BotIdentity, policy: &GroupPolicy) -> Event {
    match &update.kind {
        UpdateKind::Message(message) => from_message(message, me, policy),
        UpdateKind::MyChatMember(change) => from_membership(change, policy),
        UpdateKind::MessageReaction(r) => Event::Reactions(super::reactions::from_update(r)),
        UpdateKind::EditedMessage(message) => from_edit(message, me, policy),
        UpdateKind::ChannelPost(_) | UpdateKind::EditedChannelPost(_) => {
            Event::Skip("channel post")
        }
        UpdateKind::Error(_) => Event::Skip("an update the Bot API types could not read"),
        _ => Event::Skip("an update kind the connector does not handle"),
    }
}

fn is_group(chat: &Chat) -> bool {
    chat.is_group() || chat.is_supergroup()
}

/// The bot was added to (or promoted in) a chat.
fn from_membership(change: &ChatMemberUpdated, policy: &GroupPolicy) -> Event {
    let chat = &change.chat;
    if !is_group(chat) {
        return Event::Skip("membership change outside a group");
    }
    if !change.new_chat_member.is_present() {
        return Event::Skip("the bot left or was removed");
    }
    if policy.admits(chat.id.0) {
        Event::Skip("the bot joined an allowed group")
    } else {
        Event::Leave { chat: chat.id.0 }
    }
}

fn from_message(message: &Message, me: &BotIdentity, policy: &GroupPolicy) -> Event {
    let chat = &message.chat;
    let is_direct = chat.is_private();
    if !is_direct && !is_group(chat) {
        return Event::Skip("a chat that is neither private nor a group");
    }
    if is_group(chat) && !policy.admits(chat.id.0) {
        return Event::Leave { chat: chat.id.0 };
    }
    let Some(from) = message.from.as_ref() else {
        return Event::Skip("a message without a sender");
    };
    if from.id.0 == me.id {
        return Event::Skip("the bot's own message");
    }
    let (text, entities) = match (message.text(), message.caption()) {
        (Some(t), _) => (t, message.entities().unwrap_or_default()),
        (None, Some(c)) => (c, message.caption_entities().unwrap_or_default()),
        (None, None) => ("", &[][..]),
    };
    let attachments = attachments(message);
    if text.trim().is_empty() && attachments.is_empty() {
        return Event::Skip("no text and no file");
    }

    let chat_id = chat.id.0;
    let topic = message
        .thread_id
        .filter(|_| message.is_topic_message)
        .map(|t| t.0.0);
    let mut room = match topic {
        Some(topic) => {
            let mut room = RoomRef::new(
                Platform::Telegram,
                RoomId::new(format!("{chat_id}:{topic}")),
            );
            room.send_to = Some(chat_id.to_string());
            room
        }
        None => RoomRef::new(Platform::Telegram, RoomId::new(chat_id.to_string())),
    };
    room.name = if is_direct {
        Some(display_name(from))
    } else {
        chat.title().map(str::to_string)
    };

    // In a forum topic, a message that replies to nothing points at the topic's first
    // message; that is not a reply.
    let reply_to = message
        .reply_to_message()
        .filter(|r| topic != Some(r.id.0))
        .map(|r| ReplyTo {
            message: message_id(chat_id, r.id.0),
            to_self: r.from.as_ref().is_some_and(|u| u.id.0 == me.id),
        });

    let author = UserRef {
        is_bot: from.is_bot,
        username: from.username.clone(),
        ..UserRef::person(from.id.0.to_string(), display_name(from))
    };
    let said = Inbound::said(message_id(chat_id, message.id.0), room, author, text)
        .at(message.date.timestamp_millis());
    Event::Message(Box::new(Inbound {
        attachments,
        reply_to,
        is_direct,
        mentions_self: mentions(text, entities, me),
        ..said
    }))
}

/// An `edited_message` (issue 32): the message as it now reads, as an edit of it made at
/// its `edit_date`. Whether it is followed (the window) is the gateway's decision.
fn from_edit(message: &Message, me: &BotIdentity, policy: &GroupPolicy) -> Event {
    let Some(edited_at) = message.edit_date() else {
        return Event::Skip("an edited message without an edit date");
    };
    match from_message(message, me, policy) {
        // A bot's edits are its reply streaming: following each would answer it again.
        Event::Message(inbound) if inbound.author.is_bot => Event::Skip("a bot's edit"),
        Event::Message(mut inbound) => {
            let of = inbound.id.clone();
            let edited_at_ms = edited_at.timestamp_millis();
            inbound.revises = Some(Revision {
                of: of.clone(),
                change: Change::Edit {
                    original_sent_at_ms: inbound.sent_at_ms,
                },
                reply: Vec::new(),
            });
            inbound.id = Revision::edit_id(&of, edited_at_ms);
            inbound.sent_at_ms = edited_at_ms;
            Event::Message(inbound)
        }
        other => other,
    }
}

/// Telegram message ids are unique per chat only: the normalized id is `chat:message`.
pub(crate) fn message_id(chat: i64, message: i32) -> MessageId {
    MessageId::new(format!("{chat}:{message}"))
}

fn display_name(user: &User) -> String {
    let full = user.full_name();
    if !full.trim().is_empty() {
        return full;
    }
    match &user.username {
        Some(u) => u.clone(),
        None => user.id.0.to_string(),
    }
}

/// Whether the entities address the bot: an `@username` mention, a text mention of its
/// account, or a command aimed at it (`/help@username`).
fn mentions(text: &str, entities: &[MessageEntity], me: &BotIdentity) -> bool {
    let username = me.username.as_deref().unwrap_or_default();
    // One pass over the text maps every UTF-16 offset, however many entities there are: a
    // walk per entity made a long message full of `@mentions` cost text × entities.
    let index = Utf16Index::new(text);
    entities.iter().any(|e| match &e.kind {
        MessageEntityKind::TextMention { user } => user.id.0 == me.id,
        MessageEntityKind::Mention => index
            .entity_text(text, e.offset, e.length)
            .and_then(|t| t.strip_prefix('@'))
            .is_some_and(|name| !username.is_empty() && name.eq_ignore_ascii_case(username)),
        MessageEntityKind::BotCommand => index
            .entity_text(text, e.offset, e.length)
            .and_then(|t| t.split_once('@'))
            .is_some_and(|(_, name)| !username.is_empty() && name.eq_ignore_ascii_case(username)),
        _ => false,
    })
}

/// The byte offset of every character boundary of a text, by its UTF-16 offset. Entity
/// offsets count UTF-16 code units.
struct Utf16Index {
    /// `(utf16 offset, byte offset)` of each boundary, ascending in both; the end included.
    boundaries: Vec<(usize, usize)>,
}

impl Utf16Index {
    fn new(text: &str) -> Self {
        let mut boundaries = Vec::with_capacity(text.len() + 1);
        let mut units = 0usize;
        for (byte, c) in text.char_indices() {
            boundaries.push((units, byte));
            units += c.len_utf16();
        }
        boundaries.push((units, text.len()));
        Utf16Index { boundaries }
    }

    /// The byte offset at `position`, or `None` past the end or inside a character.
    fn byte(&self, position: usize) -> Option<usize> {
        self.boundaries
            .binary_search_by_key(&position, |&(units, _)| units)
            .ok()
            .map(|i| self.boundaries[i].1)
    }

    /// The part of `text` an entity covers; `None` for one that does not fit the text, or
    /// cuts a character in two.
    fn entity_text<'t>(&self, text: &'t str, offset: usize, length: usize) -> Option<&'t str> {
        let start = self.byte(offset)?;
        let end = self.byte(offset.checked_add(length)?)?;
        text.get(start..end)
    }
}

/// Files on the message, recorded by name, type and size (not downloaded). Images (a
/// photo, a document whose type is an image) and audio (a voice note, an audio file) also carry their file reference
/// (`telegram-file:<file_id>`, see `crate::files`), which the connector downloads when the
/// gateway handles the message.
fn attachments(message: &Message) -> Vec<Attachment> {
    let mut out = Vec::new();
    if let Some(d) = message.document() {
        let mime = d.mime_type.as_ref().map(ToString::to_string);
        let image = mime.as_deref().is_some_and(|m| m.starts_with("image/"));
        out.push(Attachment {
            name: d.file_name.clone().unwrap_or_else(|| "document".into()),
            mime,
            size: Some(u64::from(d.file.size)),
            url: image.then(|| format!("{TELEGRAM_FILE}{}", d.file.id)),
        });
    }
    // Telegram sends a photo in several sizes, smallest first: the largest is the one a
    // person saw.
    if let Some(largest) = message.photo().and_then(|sizes| sizes.last()) {
        out.push(Attachment {
            name: "photo.jpg".into(),
            mime: Some("image/jpeg".into()),
            size: Some(u64::from(largest.file.size)),
            url: Some(format!("{TELEGRAM_FILE}{}", largest.file.id)),
        });
    }
    if let Some(a) = message.audio() {
        out.push(Attachment {
            name: a.file_name.clone().unwrap_or_else(|| "audio".into()),
            mime: a.mime_type.as_ref().map(ToString::to_string),
            size: Some(u64::from(a.file.size)),
            // Audio and voice notes are fetched too, to be transcribed (gateway media::voice).
            url: Some(format!("{TELEGRAM_FILE}{}", a.file.id)),
        });
    }
    if let Some(v) = message.video() {
        out.push(Attachment {
            name: v.file_name.clone().unwrap_or_else(|| "video".into()),
            mime: v.mime_type.as_ref().map(ToString::to_string),
            size: Some(u64::from(v.file.size)),
            url: None,
        });
    }
    if let Some(v) = message.voice() {
        out.push(Attachment {
            name: "voice.ogg".into(),
            mime: v.mime_type.as_ref().map(ToString::to_string),
            size: Some(u64::from(v.file.size)),
            url: Some(format!("{TELEGRAM_FILE}{}", v.file.id)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const BOT: u64 = 123;

    fn me() -> BotIdentity {
        BotIdentity {
            id: BOT,
            username: Some("tess_bot".into()),
        }
    }

    fn update(v: Value) -> Update {
        // From text, as on the wire: teloxide's flattened types do not all read from a `Value`.
        serde_json::from_str(&v.to_string()).expect("a valid update")
    }

    fn user(id: u64, name: &str) -> Value {
        json!({"id": id, "is_bot": false, "first_name": name})
    }

    fn bot_user() -> Value {
        json!({"id": BOT, "is_bot": true, "first_name": "Tess", "username": "tess_bot"})
    }

    fn private(id: i64) -> Value {
        json!({"id": id, "type": "private", "first_name": "Ann"})
    }

    fn group(id: i64) -> Value {
        json!({"id": id, "type": "group", "title": "Friends"})
    }

    fn supergroup(id: i64, forum: bool) -> Value {
        json!({"id": id, "type": "supergroup", "title": "Club", "is_forum": forum})
    }

    fn message(chat: Value, from: Value, text: &str) -> Value {
        json!({"message_id": 10, "date": 1_700_000_000, "chat": chat, "from": from, "text": text})
    }

    fn msg_update(message: Value) -> Update {
        update(json!({"update_id": 1, "message": message}))
    }

    fn inbound(event: Event) -> Inbound {
        match event {
            Event::Message(m) => *m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    fn open() -> GroupPolicy {
        GroupPolicy::default()
    }

    #[test]
    fn private_chat_is_direct() {
        let m = inbound(normalize(
            &msg_update(message(private(42), user(42, "Ann"), "hello")),
            &me(),
            &open(),
        ));
        assert!(m.is_direct);
        assert_eq!(m.id.as_str(), "42:10");
        assert_eq!(m.room.id.as_str(), "42");
        assert_eq!(m.room.platform, Platform::Telegram);
        assert_eq!(m.room.send_to, None);
        assert_eq!(m.room.name.as_deref(), Some("Ann"));
        assert_eq!(m.author.id.as_str(), "42");
        assert_eq!(m.author.name, "Ann");
        assert!(!m.author.is_bot);
        assert_eq!(m.text, "hello");
        assert_eq!(m.sent_at_ms, 1_700_000_000_000);
        assert!(!m.mentions_self);
    }

    #[test]
    fn an_edited_message_revises_its_message_at_its_edit_date() {
        let mut edited = message(private(42), user(42, "Ann"), "hello again");
        edited["edit_date"] = json!(1_700_000_030);
        let m = inbound(normalize(
            &update(json!({"update_id": 2, "edited_message": edited})),
            &me(),
            &open(),
        ));
        let revision = m.revises.expect("an edit");
        assert_eq!(revision.of.as_str(), "42:10");
        assert_eq!(
            revision.change,
            Change::Edit {
                original_sent_at_ms: 1_700_000_000_000
            }
        );
        assert_eq!(m.id.as_str(), "42:10:edit:1700000030000");
        assert_eq!(m.sent_at_ms, 1_700_000_030_000);
        assert_eq!(m.text, "hello again");
    }

    #[test]
    fn group_and_supergroup_are_rooms_named_by_title() {
        for chat in [group(-5), supergroup(-1005, false)] {
            let id = chat["id"].as_i64().unwrap();
            let m = inbound(normalize(
                &msg_update(message(chat, user(7, "Bo"), "hi all")),
                &me(),
                &open(),
            ));
            assert!(!m.is_direct);
            assert_eq!(m.room.id.as_str(), id.to_string());
            assert!(m.room.name.is_some());
        }
    }

    #[test]
    fn forum_topic_is_its_own_room_sent_to_the_chat() {
        let mut msg = message(supergroup(-1009, true), user(7, "Bo"), "in a topic");
        msg["message_thread_id"] = json!(77);
        msg["is_topic_message"] = json!(true);
        // Telegram points a plain topic message at the topic's first message.
        msg["reply_to_message"] = json!({
            "message_id": 77, "date": 1_699_999_000, "chat": supergroup(-1009, true),
            "from": user(7, "Bo"),
            "forum_topic_created": {"name": "Plans", "icon_color": 7322096}
        });
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(m.room.id.as_str(), "-1009:77");
        assert_eq!(m.room.send_to.as_deref(), Some("-1009"));
        assert_eq!(m.reply_to, None);

        // A reply thread in a plain supergroup is not a topic.
        let mut msg = message(supergroup(-1009, false), user(7, "Bo"), "reply thread");
        msg["message_thread_id"] = json!(5);
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(m.room.id.as_str(), "-1009");
    }

    #[test]
    fn mention_entities_address_the_bot() {
        // "é" is one UTF-16 unit, "😀" two: offsets count UTF-16 units.
        let text = "é😀 @Tess_Bot look";
        let mut msg = message(group(-5), user(7, "Bo"), text);
        msg["entities"] = json!([{"type": "mention", "offset": 4, "length": 9}]);
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert!(m.mentions_self);

        let mut msg = message(group(-5), user(7, "Bo"), "@someone_else hi");
        msg["entities"] = json!([{"type": "mention", "offset": 0, "length": 13}]);
        assert!(!inbound(normalize(&msg_update(msg), &me(), &open())).mentions_self);

        let mut msg = message(group(-5), user(7, "Bo"), "Tess, hi");
        msg["entities"] =
            json!([{"type": "text_mention", "offset": 0, "length": 4, "user": bot_user()}]);
        assert!(inbound(normalize(&msg_update(msg), &me(), &open())).mentions_self);

        let mut msg = message(group(-5), user(7, "Bo"), "/help@tess_bot");
        msg["entities"] = json!([{"type": "bot_command", "offset": 0, "length": 14}]);
        assert!(inbound(normalize(&msg_update(msg), &me(), &open())).mentions_self);
    }

    #[test]
    fn hostile_entity_offsets_do_not_panic() {
        for (offset, length) in [(0, 400), (2, 1), (usize::MAX, 2), (1, usize::MAX)] {
            let mut msg = message(group(-5), user(7, "Bo"), "😀 @tess_bot");
            msg["entities"] = json!([{"type": "mention", "offset": offset, "length": length}]);
            let m = inbound(normalize(&msg_update(msg), &me(), &open()));
            assert!(!m.mentions_self);
        }
    }

    #[test]
    fn reply_to_the_bot_is_marked() {
        let mut msg = message(group(-5), user(7, "Bo"), "and you?");
        msg["reply_to_message"] = json!({
            "message_id": 9, "date": 1_699_999_000, "chat": group(-5),
            "from": bot_user(), "text": "I said this"
        });
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(
            m.reply_to,
            Some(ReplyTo {
                message: MessageId::new("-5:9"),
                to_self: true
            })
        );
    }

    #[test]
    fn photos_and_image_documents_carry_their_file_reference() {
        let mut msg = message(private(42), user(42, "Ann"), "");
        msg.as_object_mut().unwrap().remove("text");
        msg["caption"] = json!("what is in this picture?");
        msg["photo"] = json!([
            {"file_id": "small", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 900},
            {"file_id": "large", "file_unique_id": "u2", "width": 800, "height": 800, "file_size": 90000}
        ]);
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(m.text, "what is in this picture?");
        assert_eq!(m.attachments.len(), 1);
        assert_eq!(m.attachments[0].url.as_deref(), Some("telegram-file:large"));
        assert_eq!(m.attachments[0].size, Some(90000));

        let mut msg = message(private(42), user(42, "Ann"), "");
        msg.as_object_mut().unwrap().remove("text");
        msg["document"] = json!({
            "file_id": "D1", "file_unique_id": "U1", "file_name": "cat.png",
            "mime_type": "image/png", "file_size": 2048
        });
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(m.attachments[0].url.as_deref(), Some("telegram-file:D1"));
    }

    #[test]
    fn documents_are_recorded_and_caption_is_the_text() {
        let mut msg = message(private(42), user(42, "Ann"), "");
        msg.as_object_mut().unwrap().remove("text");
        msg["caption"] = json!("see attached");
        msg["document"] = json!({
            "file_id": "F1", "file_unique_id": "U1", "file_name": "notes.pdf",
            "mime_type": "application/pdf", "file_size": 2048
        });
        let m = inbound(normalize(&msg_update(msg), &me(), &open()));
        assert_eq!(m.text, "see attached");
        assert_eq!(
            m.attachments,
            vec![Attachment {
                name: "notes.pdf".into(),
                mime: Some("application/pdf".into()),
                size: Some(2048),
                url: None
            }]
        );
    }

    #[test]
    fn odd_updates_are_skipped() {
        // The bot's own message.
        let own = msg_update(message(group(-5), bot_user(), "mine"));
        assert!(matches!(normalize(&own, &me(), &open()), Event::Skip(_)));
        // No sender.
        let mut m = message(group(-5), user(7, "Bo"), "x");
        m.as_object_mut().unwrap().remove("from");
        assert!(matches!(
            normalize(&msg_update(m), &me(), &open()),
            Event::Skip(_)
        ));
        // No text and no file (a sticker).
        let mut m = message(group(-5), user(7, "Bo"), "");
        m.as_object_mut().unwrap().remove("text");
        m["sticker"] = json!({"file_id": "S", "file_unique_id": "S", "type": "regular",
            "width": 1, "height": 1, "is_animated": false, "is_video": false});
        assert!(matches!(
            normalize(&msg_update(m), &me(), &open()),
            Event::Skip(_)
        ));
        // Edited message, channel post.
        let edited = update(json!({"update_id": 2,
            "edited_message": message(group(-5), user(7, "Bo"), "edit")}));
        assert!(matches!(normalize(&edited, &me(), &open()), Event::Skip(_)));
        let post = update(json!({"update_id": 3, "channel_post": {
            "message_id": 1, "date": 1, "text": "news",
            "chat": {"id": -100777, "type": "channel", "title": "News"}}}));
        assert!(matches!(normalize(&post, &me(), &open()), Event::Skip(_)));
        // Something teloxide cannot read at all still has an id and is skipped.
        let junk = update(json!({"update_id": 4, "message": {"what": "ever"}}));
        assert!(matches!(normalize(&junk, &me(), &open()), Event::Skip(_)));
        let unknown = update(json!({"update_id": 5, "brand_new_kind": {"x": 1}}));
        assert!(matches!(
            normalize(&unknown, &me(), &open()),
            Event::Skip(_)
        ));
    }

    #[test]
    fn groups_not_allowed_are_left() {
        let policy = GroupPolicy {
            only_join_allowed: true,
            allowed: Some(vec!["-100123".into(), "-100200:5".into()]),
        };
        let m = msg_update(message(supergroup(-100999, false), user(7, "Bo"), "hi"));
        assert_eq!(
            normalize(&m, &me(), &policy),
            Event::Leave { chat: -100999 }
        );
        for allowed in [-100123, -100200] {
            let m = msg_update(message(supergroup(allowed, false), user(7, "Bo"), "hi"));
            assert!(matches!(normalize(&m, &me(), &policy), Event::Message(_)));
        }
        // Private chats are never left.
        let m = msg_update(message(private(42), user(42, "Ann"), "hi"));
        assert!(matches!(normalize(&m, &me(), &policy), Event::Message(_)));

        let added = |chat: Value| {
            update(json!({"update_id": 9, "my_chat_member": {
                "chat": chat, "from": user(7, "Bo"), "date": 1,
                "old_chat_member": {"user": bot_user(), "status": "left"},
                "new_chat_member": {"user": bot_user(), "status": "member"}
            }}))
        };
        assert_eq!(
            normalize(&added(group(-77)), &me(), &policy),
            Event::Leave { chat: -77 }
        );
        assert!(matches!(
            normalize(&added(supergroup(-100123, false)), &me(), &policy),
            Event::Skip(_)
        ));
        // Without the switch, every group is fine.
        assert!(matches!(
            normalize(&added(group(-77)), &me(), &open()),
            Event::Skip(_)
        ));
    }
}

#[cfg(test)]
mod utf16_tests {
    use super::Utf16Index;

    #[test]
    fn offsets_count_utf16_units_and_never_cut_a_character() {
        // "é" is one UTF-16 unit and two bytes, "😀" two units and four bytes.
        let text = "é😀 @bot";
        let index = Utf16Index::new(text);
        assert_eq!(index.entity_text(text, 4, 4), Some("@bot"));
        assert_eq!(index.entity_text(text, 0, 1), Some("é"));
        assert_eq!(index.entity_text(text, 1, 2), Some("😀"));
        // Inside the emoji's surrogate pair, past the end, and an overflowing length.
        assert_eq!(index.entity_text(text, 2, 1), None);
        assert_eq!(index.entity_text(text, 4, 5), None);
        assert_eq!(index.entity_text(text, 1, usize::MAX), None);
        assert_eq!(index.entity_text("", 0, 0), Some(""));
    }

    #[test]
    fn many_entities_are_read_from_one_index() {
        // The fuzzing finding: 1,000 mentions at the end of a long text. Each must still be
        // read right; the index is built once for all of them.
        let text = format!("{}{}", "é".repeat(4096), "@x".repeat(1000));
        let index = Utf16Index::new(&text);
        for i in 0..1000 {
            assert_eq!(index.entity_text(&text, 4096 + 2 * i, 2), Some("@x"));
        }
    }
}
