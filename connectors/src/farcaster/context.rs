//! A thread's context for the prompt: the casts above the one being answered, from
//! Neynar's conversation endpoint (`chronological_parent_casts`), oldest first.
//!
//! The room is the thread, but troupe only remembers the casts it received (mentions and
//! replies to the bot); the casts before the bot was mentioned come from here.

use super::config::Fid;
use super::normalize::author_name;
use super::wire::Cast;
use crate::connector::ContextLine;

/// At most this many parent casts, the nearest to the cast being answered.
pub(crate) const MAX_PARENTS: usize = 10;

/// The parent casts as context lines: the last `MAX_PARENTS`, oldest first, without empty
/// casts, marked `from_self` when the bot wrote them.
pub(crate) fn lines(parents: Vec<Cast>, bot: Fid) -> Vec<ContextLine> {
    let mut lines: Vec<ContextLine> = parents
        .into_iter()
        .filter(|c| !c.text.trim().is_empty())
        .map(|c| ContextLine {
            author_name: author_name(&c.author),
            from_self: c.author.fid == bot.0,
            text: c.text,
        })
        .collect();
    let extra = lines.len().saturating_sub(MAX_PARENTS);
    lines.drain(..extra);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::farcaster::wire::ConversationResponse;
    use serde_json::json;

    fn cast(hash: &str, fid: u64, username: Option<&str>, text: &str) -> serde_json::Value {
        json!({
            "object": "cast",
            "hash": hash,
            "thread_hash": "0xroot",
            "parent_hash": null,
            "author": {"object": "user", "fid": fid, "username": username, "display_name": "Someone"},
            "text": text,
            "timestamp": "2026-11-02T00:00:01.000Z",
            "embeds": [],
            "direct_replies": []
        })
    }

    #[test]
    fn the_conversation_answer_gives_the_parents_oldest_first() {
        let body = json!({
            "conversation": {
                "cast": cast("0xc", 7, Some("alice"), "@fern what do you think?"),
                "chronological_parent_casts": [
                    cast("0xroot", 9, Some("bob"), "Sea otters hold hands when they sleep."),
                    {"not": "a cast"},
                    cast("0xb", 42, Some("fern"), "They do, so they don't drift apart."),
                    cast("0xempty", 9, Some("bob"), "  "),
                    cast("0xa", 11, None, "Is that true?"),
                ]
            },
            "next": {"cursor": null}
        });
        let answer: ConversationResponse = serde_json::from_value(body).unwrap();
        let lines = lines(answer.conversation.chronological_parent_casts, Fid(42));
        assert_eq!(
            lines,
            vec![
                ContextLine {
                    author_name: "bob".into(),
                    text: "Sea otters hold hands when they sleep.".into(),
                    from_self: false,
                },
                ContextLine {
                    author_name: "fern".into(),
                    text: "They do, so they don't drift apart.".into(),
                    from_self: true,
                },
                ContextLine {
                    author_name: "Someone".into(),
                    text: "Is that true?".into(),
                    from_self: false,
                },
            ]
        );
    }

    #[test]
    fn no_parents_and_long_threads() {
        let answer: ConversationResponse = serde_json::from_value(
            json!({"conversation": {"cast": cast("0xc", 7, Some("a"), "hi")}}),
        )
        .unwrap();
        assert!(answer.conversation.chronological_parent_casts.is_empty());
        let answer: ConversationResponse =
            serde_json::from_value(json!({"conversation": {"chronological_parent_casts": null}}))
                .unwrap();
        assert!(answer.conversation.chronological_parent_casts.is_empty());

        let many: Vec<Cast> = (0..15)
            .map(|i| {
                serde_json::from_value(cast(&format!("0x{i}"), 7, Some("a"), &format!("cast {i}")))
                    .unwrap()
            })
            .collect();
        let lines = lines(many, Fid(42));
        assert_eq!(lines.len(), MAX_PARENTS);
        assert_eq!(lines[0].text, "cast 5");
        assert_eq!(lines[MAX_PARENTS - 1].text, "cast 14");
    }
}
