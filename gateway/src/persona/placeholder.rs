//! Placeholders: which `{{name}}`s troupe knows, where they are in a text, and plain
//! substitution. A leaf of `persona`: the character checks (`character`), the prepared
//! templates (`prepared`) and composing (`prompt`) all read templates through it.

/// Placeholders troupe fills with a value.
pub(crate) const FILLED_PLACEHOLDERS: &[&str] = &[
    "agentName",
    "agentId",
    "senderName",
    "platform",
    "system",
    "bio",
    "lore",
    "topic",
    "topics",
    "adjective",
    "messageDirections",
    "postDirections",
    "directions",
    "characterMessageExamples",
    "characterPostExamples",
    "examples",
    "knowledge",
    "recentMessages",
    "summary",
    "facts",
];

/// elizaOS placeholders for things troupe does not have (actions, goals, evaluators…):
/// accepted in templates and filled with nothing, so elizaOS templates work unchanged.
pub(crate) const EMPTY_PLACEHOLDERS: &[&str] = &[
    "goals",
    "actions",
    "actionNames",
    "actionExamples",
    "providers",
    "attachments",
    "evaluators",
    "evaluatorNames",
    "evaluatorExamples",
    "recentInteractions",
    "recentPostInteractions",
    "recentMessageInteractions",
    "recentPosts",
    "imageDescriptions",
    "ragKnowledge",
    "knowledgeData",
    "formattedConversation",
    "currentPost",
];

/// The `{{placeholder}}` names in a template and their byte offsets (of the opening braces).
/// Only identifier-like names count, so `{{#if x}}` or `{{ a b }}` are left alone.
pub(crate) fn placeholders(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(rel) = text[i..].find("{{") {
        let start = i + rel;
        let inner_start = start + 2 + usize::from(text[start + 2..].starts_with('{'));
        let Some(end_rel) = text[inner_start..].find("}}") else {
            break;
        };
        let name = text[inner_start..inner_start + end_rel].trim();
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ident {
            out.push((start, name));
            i = inner_start + end_rel + 2;
        } else {
            i = start + 2;
        }
    }
    out
}

/// `user3` / `name3`: an example speaker.
pub(crate) fn numbered_speaker(name: &str) -> Option<usize> {
    let digits = name
        .strip_prefix("user")
        .or_else(|| name.strip_prefix("name"))?;
    digits.parse().ok().filter(|n| *n >= 1)
}

pub(crate) fn is_known_placeholder(name: &str) -> bool {
    FILLED_PLACEHOLDERS.contains(&name)
        || EMPTY_PLACEHOLDERS.contains(&name)
        || numbered_speaker(name).is_some()
}

/// Replaces placeholders in `text` with `value(name)`; unknown names stay as written.
pub(crate) fn substitute(text: &str, value: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, name) in placeholders(text) {
        let Some(v) = value(name) else { continue };
        // Find the closing braces again (one or two `}` after the name, spaces allowed).
        let Some(close_rel) = text[start..].find("}}") else {
            continue;
        };
        let mut end = start + close_rel + 2;
        if text[start..].starts_with("{{{") && text[end..].starts_with('}') {
            end += 1;
        }
        out.push_str(&text[last..start]);
        out.push_str(&v);
        last = end;
    }
    out.push_str(&text[last..]);
    out
}
