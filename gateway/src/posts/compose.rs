//! What a post is made of: the persona's post template (elizaOS's
//! `templates.farcasterPostTemplate` for Farcaster, then `postCreationTemplate`, else
//! troupe's default), filled with its `postExamples`, `style.all` + `style.post`, bio,
//! lore and topics, the schedule's prompt, the room's recent messages and summary when the
//! post goes to a room, and the persona's own recent posts so it does not repeat itself.
//!
//! And the cheap check a draft passes before it is posted: [`too_close`], word-set
//! similarity against the recent posts. The runner asks for one rewrite, then skips.

use std::collections::HashSet;

use rand::seq::IndexedRandom;
use troupe_connectors::Platform;

use crate::persona::quote::{content, meta};
use crate::persona::{Persona, Prompt, render_template};

/// troupe's post template, used when the character has none of elizaOS's.
pub const DEFAULT_POST_TEMPLATE: &str = "# About {{agentName}}
{{bio}}
{{lore}}
{{topics}}

# Example posts by {{agentName}}
{{characterPostExamples}}

# Post directions for {{agentName}}
{{postDirections}}

# What {{agentName}} posted recently (do not repeat these)
{{recentPosts}}

# The room's conversation so far
{{summary}}
{{recentMessages}}

# Task
Write one new post in the voice of {{agentName}}, about {{topic}}. {{prompt}}
At most {{maxLength}} characters. Write only the post: no hashtags unless the examples use them, no quotes around it, no preamble.";

/// Word sets this similar (Jaccard) or more are "the same post again".
pub const SIMILARITY_LIMIT: f64 = 0.6;
/// Recent posts the prompt shows and the similarity check compares against.
pub const RECENT_POSTS: i64 = 10;
/// The room's messages a post into a room reads.
pub const ROOM_WINDOW: i64 = 10;

/// What one post is composed from, beyond the persona.
pub struct PostInput<'a> {
    pub platform: Platform,
    /// The schedule's own prompt.
    pub prompt: Option<&'a str>,
    pub max_length: usize,
    /// The persona's recent posts, newest first.
    pub recent_posts: &'a [String],
    /// The room's recent messages (`author: text`), oldest first; empty for a feed.
    pub room_messages: &'a [(String, String)],
    pub summary: Option<&'a str>,
    /// A note for the rewrite: the draft that came too close.
    pub rewrite_of: Option<&'a str>,
}

/// The template for a post on `platform`.
pub fn post_template(persona: &Persona, platform: Platform) -> &str {
    let t = &persona.character.templates;
    let specific = match platform {
        Platform::Farcaster => t.get("farcasterPostTemplate"),
        Platform::Discord => t.get("discordPostTemplate"),
        Platform::Telegram => t.get("telegramPostTemplate"),
        Platform::Web => None,
    };
    specific
        .or_else(|| t.get("postCreationTemplate"))
        .map(String::as_str)
        .unwrap_or(DEFAULT_POST_TEMPLATE)
}

fn lines(items: &[String], max: usize) -> String {
    items
        .iter()
        .take(max)
        .map(|s| format!("- {}", content(s)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The prompt for one post.
pub fn compose(persona: &Persona, input: &PostInput<'_>) -> Prompt {
    let c = &persona.character;
    let mut rng = rand::rng();
    let topic = c
        .topics
        .choose(&mut rng)
        .cloned()
        .unwrap_or_else(|| "whatever is on their mind".into());
    let directions: Vec<String> = c.style.all.iter().chain(&c.style.post).cloned().collect();
    let recent_messages = input
        .room_messages
        .iter()
        .map(|(who, text)| format!("{}: {}", meta(who), content(text)))
        .collect::<Vec<_>>()
        .join("\n");
    let mut prompt_line = input.prompt.map(content).unwrap_or_default();
    if let Some(draft) = input.rewrite_of {
        prompt_line.push_str(&format!(
            "\nYour first draft was too close to a recent post; say something new this time. The draft was:\n{}",
            content(draft)
        ));
    }
    let value = |name: &str| -> Option<String> {
        Some(match name {
            "agentName" => persona.name.clone(),
            "bio" => c.bio.join(" "),
            "lore" => c
                .lore
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            "topics" if !c.topics.is_empty() => {
                format!("{} is interested in {}", persona.name, c.topics.join(", "))
            }
            "topics" => String::new(),
            "topic" => topic.clone(),
            "adjective" => c
                .adjectives
                .choose(&mut rand::rng())
                .cloned()
                .unwrap_or_default(),
            "characterPostExamples" => lines(&c.post_examples, 50),
            "postDirections" => directions.join("\n"),
            "recentPosts" => lines(input.recent_posts, RECENT_POSTS as usize),
            "recentMessages" => recent_messages.clone(),
            "summary" => input.summary.map(content).unwrap_or_default(),
            "prompt" => prompt_line.clone(),
            "maxLength" => input.max_length.to_string(),
            "platform" => input.platform.to_string(),
            // elizaOS's other placeholders (timeline, actions, providers…): nothing here.
            _ => String::new(),
        })
    };
    Prompt {
        system: crate::persona::system_prompt(persona),
        user: render_template(post_template(persona, input.platform), &value),
        images: Vec::new(),
    }
}

fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `draft` says what a recent post said: word-set Jaccard at or over the limit.
pub fn too_close(draft: &str, recent: &[String]) -> bool {
    let d = words(draft);
    if d.is_empty() {
        return false;
    }
    recent.iter().any(|post| {
        let p = words(post);
        let inter = d.intersection(&p).count() as f64;
        let union = d.union(&p).count() as f64;
        union > 0.0 && inter / union >= SIMILARITY_LIMIT
    })
}

/// The draft as it will be posted: without room-control markers, trimmed, unquoted, cut to `max` characters at a word
/// boundary when it can be.
pub fn finish(draft: &str, max: usize) -> String {
    // A post is never read for room-control markers; none is posted either.
    let stripped = crate::rooms::actions::strip_every(draft);
    let text = stripped.trim().trim_matches('"').trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    match cut.rfind(char::is_whitespace) {
        Some(i) if i > max / 2 => cut[..i].trim_end().to_string(),
        _ => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_posts_are_caught_and_different_ones_pass() {
        let recent = vec!["The sea is calm tonight and the stars are out".to_string()];
        assert!(too_close(
            "the sea is calm tonight, and the stars are out!",
            &recent
        ));
        assert!(!too_close(
            "Markets opened higher on strong earnings",
            &recent
        ));
        assert!(!too_close("", &recent));
    }

    #[test]
    fn finish_cuts_at_a_word_and_unquotes() {
        assert_eq!(finish("  \"hello world\" ", 100), "hello world");
        assert_eq!(finish("one two three four", 12), "one two");
        assert_eq!(finish("ééééé", 3), "ééé");
    }
}
