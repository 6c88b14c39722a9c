//! Feedback: what a reaction means to troupe (issue 32; docs/media.md "Reactions and
//! feedback"). A 👍 or 👎 that a person puts on a persona's own reply is recorded against
//! that reply (one per person per reply, the latest wins; taking the reaction back takes the
//! feedback back), counted in `/metrics` (`troupe_feedback_total`) and shown in the console.
//!
//! Everything else is ignored, before any read: other emoji, reactions by bots, reactions
//! on messages that are not the persona's replies. A reaction only ever writes a feedback
//! row: it is never a message, a command or a room control, whoever sends it.

use troupe_connectors::{AgentId, Reaction};

use crate::storage::{NewFeedback, Store};

/// What a reaction came to, for the log and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Recorded (or taken back) on a reply.
    Recorded,
    /// The same as what was there: nothing changed.
    Unchanged,
    /// Not feedback: another emoji, a bot, or a message that is not a persona's reply.
    Ignored,
}

/// The feedback value of an emoji: 👍 is 1, 👎 is -1, anything else none. Skin tones count
/// as their base emoji; Discord and Telegram send the same code points.
pub fn value_of(emoji: &str) -> Option<i32> {
    let base: String = emoji
        .chars()
        .filter(|c| !('\u{1F3FB}'..='\u{1F3FF}').contains(c) && *c != '\u{FE0F}')
        .collect();
    match base.as_str() {
        "👍" => Some(1),
        "👎" => Some(-1),
        _ => None,
    }
}

/// Records what `reaction` means for `agent`'s replies.
pub async fn take(
    store: &Store,
    agent: &AgentId,
    reaction: &Reaction,
) -> crate::storage::Result<Taken> {
    let Some(value) = value_of(&reaction.emoji) else {
        return Ok(Taken::Ignored);
    };
    if reaction.user.is_bot {
        return Ok(Taken::Ignored);
    }
    let platform = reaction.room.platform;
    let chat = reaction
        .room
        .send_to
        .as_deref()
        .unwrap_or(reaction.room.id.as_str());
    let Some(reply) = store
        .reply_message(agent, platform, chat, &reaction.message)
        .await?
    else {
        return Ok(Taken::Ignored);
    };
    let changed = if reaction.added {
        store
            .feedback_set(&NewFeedback {
                agent_id: agent,
                reply: &reply,
                message: &reaction.message,
                user: &reaction.user.id,
                value,
                at_ms: reaction.at_ms,
            })
            .await?
    } else {
        store
            .feedback_clear(agent, &reply, &reaction.message, &reaction.user.id, value)
            .await?
    };
    if !changed {
        return Ok(Taken::Unchanged);
    }
    if reaction.added {
        crate::metrics::feedback(agent, if value > 0 { "up" } else { "down" });
    }
    tracing::info!(room = %reply.room, message = %reaction.message, value, added = reaction.added,
        "feedback on a reply");
    Ok(Taken::Recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumbs_are_feedback_and_nothing_else_is() {
        assert_eq!(value_of("👍"), Some(1));
        assert_eq!(value_of("👍🏽"), Some(1));
        assert_eq!(value_of("👎"), Some(-1));
        for other in ["👀", "❤", "", "+1", "👍👍"] {
            assert_eq!(value_of(other), None, "{other:?}");
        }
    }
}
