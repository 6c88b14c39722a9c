//! What a persona's messages start with on a shared Telegram bot (issue 46, docs/telegram.md
//! "A troupe on one bot"), and the messages a reply goes out in: `Name: `, the `Name:` bold
//! through a `bold` entity (offsets in UTF-16 code units, as the Bot API counts them), never
//! through `parse_mode`, so the reply's own text stays plain. Pure: `send`, `stream_edit`
//! and `draft` put it on the wire, `chorus` reads it back.
//!
//! Decisions: every part of a split reply starts with the prefix, so a reply to any part is
//! the persona's, and each part stays within 4,096 characters with it; a live reply's edits
//! and drafts carry it too. The name is cut to 64 characters (Telegram's own limit on a
//! bot's name), so a long name cannot eat a message.

use teloxide::types::MessageEntity;

use crate::chorus::Voice;
use crate::split::{chars, split_text};

/// Telegram's limit for one message, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 4096;

/// The most characters of a persona's name its prefix shows.
const MAX_NAME_CHARS: usize = 64;

/// What a persona's messages start with on a shared bot: `Name: `, `Name:` in bold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Prefix {
    text: String,
    /// The bold entity's length in UTF-16 code units (`Name:`), from offset 0.
    bold: usize,
}

impl Prefix {
    pub(super) fn of(voice: &Voice) -> Self {
        let name: String = voice.name.trim().chars().take(MAX_NAME_CHARS).collect();
        let label = format!("{}:", name.trim_end());
        Self {
            bold: label.encode_utf16().count(),
            text: format!("{label} "),
        }
    }

    /// The entities of a message that starts with this prefix.
    pub(super) fn entities(&self) -> Vec<MessageEntity> {
        vec![MessageEntity::bold(0, self.bold)]
    }

    /// Whether the bot's message `text` is this persona's.
    pub(super) fn starts(&self, text: &str) -> bool {
        text.starts_with(&self.text)
    }

    /// `text` as this persona says it, at most `limit` characters in all.
    pub(super) fn say(&self, text: &str, limit: usize) -> String {
        let room = limit.saturating_sub(chars(&self.text));
        let mut said = self.text.clone();
        said.extend(text.chars().take(room));
        said
    }
}

/// The messages `text` goes out in, each within Telegram's 4,096 characters: with a
/// `prefix`, each starts with it and the text is split to leave it room.
pub(super) fn parts(text: &str, prefix: Option<&Prefix>) -> Vec<String> {
    let Some(prefix) = prefix else {
        return split_text(text, MAX_MESSAGE_CHARS, chars);
    };
    let room = MAX_MESSAGE_CHARS - chars(&prefix.text);
    split_text(text, room, chars)
        .into_iter()
        .map(|part| format!("{}{part}", prefix.text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentId;

    fn prefix(name: &str) -> Prefix {
        Prefix::of(&Voice::new(AgentId::new("p"), name, None))
    }

    fn entity(p: &Prefix) -> serde_json::Value {
        serde_json::to_value(&p.entities()[0]).unwrap()
    }

    #[test]
    fn the_name_is_bold_in_utf16_code_units() {
        let ada = prefix("Ada");
        assert_eq!(ada.text, "Ada: ");
        assert_eq!(
            entity(&ada),
            serde_json::json!({"type": "bold", "offset": 0, "length": 4})
        );
        // U+1F980 is one character, two UTF-16 code units; "é" is one of each.
        let crab = prefix("🦀 Zoé");
        assert_eq!(crab.text, "🦀 Zoé: ");
        assert_eq!(entity(&crab)["length"], 7, "🦀(2) space(1) Zoé(3) :(1)");
        let label: Vec<u16> = crab.text.encode_utf16().take(7).collect();
        assert_eq!(String::from_utf16(&label).unwrap(), "🦀 Zoé:");
    }

    #[test]
    fn a_long_name_is_cut_to_64_characters() {
        let long = prefix(&"n".repeat(300));
        assert_eq!(chars(&long.text), 64 + 2);
        assert_eq!(entity(&long)["length"], 65);
    }

    #[test]
    fn every_part_carries_the_prefix_within_the_limit() {
        let text = "Ça va. ".repeat(1300); // 9,100 characters
        let crab = prefix("🦀 Zoé");
        let said = parts(&text, Some(&crab));
        assert_eq!(said.len(), 3);
        for part in &said {
            assert!(part.starts_with("🦀 Zoé: "), "{part:.20}");
            assert!(chars(part) <= MAX_MESSAGE_CHARS);
        }
        let words: usize = said
            .iter()
            .map(|p| {
                p.strip_prefix(&crab.text)
                    .unwrap()
                    .split_whitespace()
                    .count()
            })
            .sum();
        assert_eq!(words, text.split_whitespace().count(), "nothing lost");
        // Exactly at the limit with the prefix: one part.
        let full = "x".repeat(MAX_MESSAGE_CHARS - chars(&crab.text));
        assert_eq!(parts(&full, Some(&crab)).len(), 1);
        assert_eq!(parts(&format!("{full}y"), Some(&crab)).len(), 2);
        assert_eq!(parts("plain", None), vec!["plain".to_string()]);
    }

    #[test]
    fn a_message_is_the_persona_whose_prefix_starts_it() {
        assert!(prefix("Ada").starts("Ada: The tide turns at six."));
        assert!(!prefix("Ada").starts("Adam: hello"));
        assert!(!prefix("Bob").starts("Ada: Bob, come here."));
        assert_eq!(prefix("Ada").say("abcdef", 8), "Ada: abc");
    }
}
