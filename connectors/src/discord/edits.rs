//! Edits and deletes of messages on Discord (issue 32): MESSAGE_UPDATE and MESSAGE_DELETE,
//! normalized to an `Inbound` that `revises` the earlier message, and handed to the sink
//! like any message (journaled, once). The persona's own messages, partial updates that
//! change no text (an embed unfurled: no `edited_timestamp`, or no `content`) and payloads
//! without usable ids give nothing. Whether an edit is followed (the window, whether the
//! persona answered) is the gateway's decision, not this module's; `gateway` hands them on.

use super::normalize::{self, Place};
use super::wire::{self, Snowflake};
use crate::model::{
    Change, Inbound, MessageId, Platform, Revision, RoomId, RoomRef, UserId, UserRef,
};

/// Milliseconds since the epoch of an RFC 3339 time as Discord writes it
/// (`2026-11-02T00:00:05.123000+00:00`).
fn unix_ms(raw: &str) -> Option<i64> {
    let seconds = serenity::model::Timestamp::parse(raw)
        .ok()?
        .unix_timestamp();
    // serenity keeps whole seconds; the fraction is read from the text.
    let millis = raw
        .split_once('T')
        .and_then(|(_, time)| time.split_once('.'))
        .map(|(_, fraction)| {
            let digits: String = fraction
                .chars()
                .take_while(char::is_ascii_digit)
                .take(3)
                .collect();
            format!("{digits:0<3}").parse::<i64>().unwrap_or(0)
        })
        .unwrap_or(0);
    seconds.checked_mul(1000)?.checked_add(millis)
}

/// A MESSAGE_UPDATE that changed a message's text, as an edit of it for the bot `me`.
pub(crate) fn edit_to_inbound(msg: &wire::Message, me: Snowflake) -> Option<Inbound> {
    let edited_at_ms = unix_ms(msg.edited_timestamp.as_deref()?)?;
    let mut inbound = normalize::to_inbound(msg, me, Place::FromPayload)?;
    // A bot's edits are its reply streaming (another persona's, say): following each one
    // would answer every few words again.
    if inbound.author.is_bot {
        return None;
    }
    let of = inbound.id.clone();
    inbound.revises = Some(Revision {
        of: of.clone(),
        change: Change::Edit {
            original_sent_at_ms: inbound.sent_at_ms,
        },
        reply: Vec::new(),
    });
    inbound.id = Revision::edit_id(&of, edited_at_ms);
    inbound.sent_at_ms = edited_at_ms;
    Some(inbound)
}

/// A MESSAGE_DELETE of `message` in `channel`. Discord says neither who wrote it nor what
/// it said: the author is left empty, and the gateway reads what it needs from the journal.
pub(crate) fn delete_to_inbound(channel: u64, message: u64, direct: bool) -> Inbound {
    let of = MessageId::new(message.to_string());
    Inbound {
        id: Revision::delete_id(&of),
        room: RoomRef::new(Platform::Discord, RoomId::new(channel.to_string())),
        author: UserRef {
            id: UserId::new(""),
            name: String::new(),
            is_bot: false,
            username: None,
        },
        text: String::new(),
        attachments: Vec::new(),
        reply_to: None,
        is_direct: direct,
        mentions_self: false,
        sent_at_ms: Snowflake(message).unix_ms(),
        client: None,
        revises: Some(Revision {
            of,
            change: Change::Delete,
            reply: Vec::new(),
        }),
    }
}

/// Discord's JSON for a MESSAGE_UPDATE (serenity's event, written back out), as a message:
/// the fields serenity had no value for are dropped rather than read as empty, and an
/// update without `content` is not an edit of the text.
pub(crate) fn parse_update(mut value: serde_json::Value) -> Option<wire::Message> {
    let object = value.as_object_mut()?;
    object.retain(|_, v| !v.is_null());
    if !object.get("content").is_some_and(|c| c.is_string()) {
        return None;
    }
    normalize::parse(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ME: Snowflake = Snowflake(900);

    fn update(extra: serde_json::Value) -> Option<wire::Message> {
        let mut base = json!({
            "id": "175928847299117063", "channel_id": "41", "guild_id": "7",
            "author": {"id": "5", "username": "alice", "bot": false},
            "content": "hello again", "timestamp": "2016-04-30T11:18:25.796000+00:00",
            "edited_timestamp": "2016-04-30T11:18:30.250000+00:00",
            "mentions": null, "attachments": [], "type": 0
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        parse_update(base)
    }

    #[test]
    fn an_edit_revises_its_message_at_its_edit_time() {
        let inbound = edit_to_inbound(&update(json!({})).unwrap(), ME).unwrap();
        let revision = inbound.revises.unwrap();
        assert_eq!(revision.of.as_str(), "175928847299117063");
        assert_eq!(inbound.id.as_str(), "175928847299117063:edit:1462015110250");
        assert_eq!(inbound.text, "hello again");
        assert_eq!(
            revision.change,
            Change::Edit {
                original_sent_at_ms: 1_462_015_105_796
            }
        );
        assert_eq!(inbound.sent_at_ms, 1_462_015_110_250);
    }

    #[test]
    fn updates_that_change_no_text_are_not_edits() {
        assert!(update(json!({"content": null})).is_none());
        let unfurled = update(json!({"edited_timestamp": null})).unwrap();
        assert!(edit_to_inbound(&unfurled, ME).is_none());
        let own = update(json!({"author": {"id": "900", "username": "dot", "bot": true}}));
        assert!(edit_to_inbound(&own.unwrap(), ME).is_none());
        let bot = update(json!({"author": {"id": "6", "username": "other", "bot": true}}));
        assert!(edit_to_inbound(&bot.unwrap(), ME).is_none());
        assert!(parse_update(json!("text")).is_none());
    }

    #[test]
    fn a_delete_names_its_message() {
        let inbound = delete_to_inbound(41, 175928847299117063, false);
        assert_eq!(inbound.id.as_str(), "175928847299117063:delete");
        assert_eq!(inbound.revises.unwrap().change, Change::Delete);
    }
}
