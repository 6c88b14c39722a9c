//! Turning a Discord message into an `Inbound`: the room is the channel (a DM, a guild
//! channel or a thread), `mentions_self` when the bot is in `mentions`, `reply_to.to_self`
//! when the referenced message is the bot's, attachments recorded. The bot's own messages,
//! system messages and payloads without an id, channel or author give `None`.

use super::wire::{self, Snowflake};
use crate::model::{
    Attachment, Inbound, MessageId, Platform, ReplyTo, RoomId, RoomRef, UserId, UserRef,
};

/// Message types a person writes: DEFAULT (0) and REPLY (19).
const USER_MESSAGE_TYPES: [u64; 2] = [0, 19];

/// A message's flag for a voice message (Discord's `IS_VOICE_MESSAGE`): its one attachment
/// is the recording.
const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// Whether an attachment is a voice message's recording or audio (transcribed by the
/// gateway). `voice` is whether its message is flagged `IS_VOICE_MESSAGE`.
fn is_audio(att: &wire::Attachment, voice: bool) -> bool {
    voice
        || att
            .content_type
            .as_deref()
            .is_some_and(|m| m.to_ascii_lowercase().starts_with("audio/"))
}

/// Attachments worth recording: text, markdown and PDF (what knowledge can read), images
/// (what a persona may see) and audio (what it may hear, transcribed).
fn readable(att: &wire::Attachment, voice: bool) -> bool {
    if is_audio(att, voice)
        || att
            .content_type
            .as_deref()
            .is_some_and(|m| m.to_ascii_lowercase().starts_with("image/"))
    {
        return true;
    }
    let mime = att
        .content_type
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    let name = att.filename.to_ascii_lowercase();
    mime.starts_with("text/")
        || mime.starts_with("application/pdf")
        || [".txt", ".md", ".markdown", ".pdf"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// An image embed (a picture link Discord unfurled) as an attachment: Discord's proxied copy
/// when it has one (fetched by the connector, from Discord), else the source link (fetched
/// by the gateway under its fetch policy).
fn image_embed(embed: &wire::Embed) -> Option<Attachment> {
    if embed.kind.as_deref() != Some("image") {
        return None;
    }
    let media = embed.image.as_ref().or(embed.thumbnail.as_ref())?;
    let url = media
        .proxy_url
        .clone()
        .or_else(|| media.url.clone())
        .or_else(|| embed.url.clone())
        .filter(|u| !u.is_empty())?;
    let source = media
        .url
        .as_deref()
        .or(embed.url.as_deref())
        .unwrap_or(&url);
    let name = source
        .split(['?', '#'])
        .next()
        .and_then(|path| path.rsplit('/').find(|s| !s.is_empty()))
        .unwrap_or("image")
        .to_string();
    Some(Attachment {
        name,
        mime: Some(
            media
                .content_type
                .clone()
                .unwrap_or_else(|| "image/*".into()),
        ),
        size: None,
        url: Some(url),
    })
}

/// Where a message came from, when the payload does not say (REST messages carry no
/// `guild_id`): the connector remembers which channels are DMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Read from the payload: no `guild_id` means a DM (gateway events).
    FromPayload,
    Direct,
    Guild,
}

/// Normalizes one message for the bot `me`.
pub(crate) fn to_inbound(msg: &wire::Message, me: Snowflake, place: Place) -> Option<Inbound> {
    let id = Snowflake::parse(&msg.id)?;
    let channel = Snowflake::parse(&msg.channel_id)?;
    let author = msg.author.as_ref()?;
    let author_id = Snowflake::parse(&author.id)?;
    if author_id == me {
        return None;
    }
    if msg.kind.is_some_and(|k| !USER_MESSAGE_TYPES.contains(&k)) {
        return None;
    }
    let is_direct = match place {
        Place::FromPayload => msg.guild_id.is_none(),
        Place::Direct => true,
        Place::Guild => false,
    };
    let mentions_self = msg
        .mentions
        .iter()
        .any(|u| Snowflake::parse(&u.id) == Some(me));
    let reply_to = msg
        .message_reference
        .as_ref()
        .and_then(|r| r.message_id.as_deref())
        .or_else(|| msg.referenced_message.as_ref().map(|m| m.id.as_str()))
        .and_then(Snowflake::parse)
        .map(|target| ReplyTo {
            message: MessageId::new(target.to_string()),
            to_self: msg
                .referenced_message
                .as_ref()
                .and_then(|m| m.author.as_ref())
                .and_then(|a| Snowflake::parse(&a.id))
                == Some(me),
        });
    let name = msg
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| author.global_name.clone())
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| author.username.clone());
    let voice = msg.flags.is_some_and(|f| f & IS_VOICE_MESSAGE != 0);
    let attachments = msg
        .attachments
        .iter()
        .filter(|a| readable(a, voice))
        .map(|a| Attachment {
            name: a.filename.clone(),
            // A voice message is Ogg Opus; one flagged without a type is still audio.
            mime: match &a.content_type {
                None if is_audio(a, voice) => Some("audio/ogg".into()),
                other => other.clone(),
            },
            size: a.size,
            url: a.url.clone(),
        })
        .chain(msg.embeds.iter().filter_map(image_embed))
        .collect();
    let room = RoomRef::new(Platform::Discord, RoomId::new(channel.to_string()));
    Some(Inbound {
        id: MessageId::new(id.to_string()),
        room,
        author: UserRef {
            id: UserId::new(author_id.to_string()),
            name,
            is_bot: author.bot || msg.webhook_id.is_some(),
            username: None,
        },
        text: msg.content.clone(),
        attachments,
        reply_to,
        is_direct,
        mentions_self,
        sent_at_ms: id.unix_ms(),
        client: None,
        revises: None,
    })
}

/// Parses a message from JSON; `None` for anything that is not one.
pub(crate) fn parse(value: serde_json::Value) -> Option<wire::Message> {
    serde_json::from_value(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ME: Snowflake = Snowflake(900);

    fn message(extra: serde_json::Value) -> wire::Message {
        let mut base = json!({
            "id": "175928847299117063", "channel_id": "41", "guild_id": "7",
            "author": {"id": "5", "username": "alice", "global_name": "Alice", "bot": false},
            "content": "hello", "timestamp": "2026-11-02T00:00:00+00:00",
            "mentions": [], "attachments": [], "type": 0
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        parse(base).expect("a message")
    }

    #[test]
    fn a_guild_mention() {
        let m = message(
            json!({"mentions": [{"id": "900", "username": "dot", "bot": true}],
            "content": "<@900> hi"}),
        );
        let inbound = to_inbound(&m, ME, Place::FromPayload).unwrap();
        assert!(inbound.mentions_self && !inbound.is_direct);
        assert_eq!(inbound.room.id.as_str(), "41");
        assert_eq!(inbound.author.name, "Alice");
        assert!(!inbound.author.is_bot);
        assert_eq!(inbound.id.as_str(), "175928847299117063");
        // The snowflake's own clock: 2016-04-30.
        assert_eq!(inbound.sent_at_ms, 1_462_015_105_796);
    }

    #[test]
    fn a_dm_a_reply_to_the_bot_and_attachments() {
        let mut m = message(json!({
            "type": 19,
            "message_reference": {"message_id": "300", "channel_id": "41"},
            "referenced_message": {"id": "300", "channel_id": "41",
                "author": {"id": "900", "username": "dot", "bot": true}, "content": "earlier"},
            "attachments": [
                {"filename": "notes.md", "content_type": "text/markdown; charset=utf-8", "size": 12, "url": "https://cdn/x"},
                {"filename": "paper.pdf", "content_type": "application/pdf", "size": 99, "url": "https://cdn/y"},
                {"filename": "cat.png", "content_type": "image/png", "size": 5, "url": "https://cdn/z"}
            ]
        }));
        m.guild_id = None;
        let inbound = to_inbound(&m, ME, Place::FromPayload).unwrap();
        assert!(inbound.is_direct);
        let reply = inbound.reply_to.unwrap();
        assert_eq!(reply.message.as_str(), "300");
        assert!(reply.to_self);
        let names: Vec<_> = inbound
            .attachments
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(names, ["notes.md", "paper.pdf", "cat.png"]);
        assert_eq!(inbound.attachments[1].size, Some(99));
        // REST messages have no guild_id: the remembered place decides.
        assert!(!to_inbound(&m, ME, Place::Guild).unwrap().is_direct);
    }

    #[test]
    fn voice_messages_and_audio_are_recorded_as_audio() {
        let m = message(json!({
            "content": "",
            "flags": 8192,
            "attachments": [
                {"filename": "voice-message.ogg", "size": 40, "url": "https://cdn/v"}
            ]
        }));
        let voice = to_inbound(&m, ME, Place::FromPayload).unwrap();
        assert_eq!(voice.attachments[0].mime.as_deref(), Some("audio/ogg"));
        // Without the message's flag, an untyped file is not audio; a typed one is.
        let m = message(json!({
            "content": "",
            "attachments": [
                {"filename": "voice-message.ogg", "size": 40, "url": "https://cdn/v"},
                {"filename": "song.mp3", "content_type": "audio/mpeg", "size": 50, "url": "https://cdn/s"},
                {"filename": "clip.bin", "size": 5, "url": "https://cdn/b"}
            ]
        }));
        let inbound = to_inbound(&m, ME, Place::FromPayload).unwrap();
        let got: Vec<_> = inbound
            .attachments
            .iter()
            .map(|a| (a.name.as_str(), a.mime.as_deref()))
            .collect();
        assert_eq!(got, [("song.mp3", Some("audio/mpeg"))]);
    }

    #[test]
    fn image_embeds_are_recorded_by_their_discord_copy() {
        let m = message(json!({
            "content": "https://example.com/pics/cat.jpg?s=1",
            "attachments": [{"filename": "app.exe", "content_type": "application/octet-stream", "url": "https://cdn/a"}],
            "embeds": [
                {"type": "image", "url": "https://example.com/pics/cat.jpg?s=1",
                 "thumbnail": {"url": "https://example.com/pics/cat.jpg?s=1",
                               "proxy_url": "https://media.discordapp.net/external/abc/cat.jpg"}},
                {"type": "rich", "title": "a card", "image": {"url": "https://example.com/card.png"}},
                {"type": "image", "url": "https://example.com/bare.gif"}
            ]
        }));
        let inbound = to_inbound(&m, ME, Place::FromPayload).unwrap();
        let got: Vec<_> = inbound
            .attachments
            .iter()
            .map(|a| (a.name.as_str(), a.url.as_deref().unwrap()))
            .collect();
        assert_eq!(
            got,
            [(
                "cat.jpg",
                "https://media.discordapp.net/external/abc/cat.jpg"
            )],
            "a program is not recorded, a rich card is not an image, an image embed without a \
             picture is skipped"
        );
    }

    #[test]
    fn own_bots_and_system_messages() {
        let own = message(json!({"author": {"id": "900", "username": "dot", "bot": true}}));
        assert!(to_inbound(&own, ME, Place::FromPayload).is_none());
        let bot = message(json!({"author": {"id": "6", "username": "other", "bot": true}}));
        assert!(
            to_inbound(&bot, ME, Place::FromPayload)
                .unwrap()
                .author
                .is_bot
        );
        let join = message(json!({"type": 7}));
        assert!(to_inbound(&join, ME, Place::FromPayload).is_none());
        let reply_to_other =
            message(json!({"referenced_message": {"id": "2", "author": {"id": "6"}}}));
        assert!(
            !to_inbound(&reply_to_other, ME, Place::FromPayload)
                .unwrap()
                .reply_to
                .unwrap()
                .to_self
        );
    }

    #[test]
    fn hostile_payloads_never_panic() {
        for value in [
            json!(null),
            json!([]),
            json!("text"),
            json!({}),
            json!({"id": "x", "channel_id": "1", "author": {"id": "5"}}),
            json!({"id": "1", "channel_id": "-3", "author": {"id": "5"}}),
            json!({"id": "1", "channel_id": "2"}),
            json!({"id": "1", "channel_id": "2", "author": {"id": 5}}),
            json!({"id": "1", "channel_id": "2", "author": {"id": "5"}, "mentions": "all"}),
            json!({"id": "1", "channel_id": "2", "author": {"id": "5"},
                "mentions": [{"id": null}], "attachments": [{}], "referenced_message": {}}),
            json!({"id": "18446744073709551615", "channel_id": "2", "author": {"id": "5"}}),
        ] {
            if let Some(m) = parse(value) {
                let _ = to_inbound(&m, ME, Place::FromPayload);
            }
        }
    }
}
