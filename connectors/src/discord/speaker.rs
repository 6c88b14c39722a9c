//! How a persona appears on a Discord webhook message (issue 46): its [`Voice`] (the name
//! and avatar it posts under) made what Discord takes ([`on_discord`]), by Discord's rules:
//! a webhook's `username` is 1 to 80 characters without "discord" or "clyde"; an
//! `avatar_url` is an http(s) URL of at most 2,048 characters. Pure rules, read by `troupe check` too; nothing here calls Discord.

use crate::chorus::Voice;

/// Discord's limits on a webhook message's `username`.
const MAX_NAME_CHARS: usize = 80;
/// Words Discord refuses inside a webhook's name, in any case.
const FORBIDDEN: [&str; 2] = ["discord", "clyde"];
/// An `avatar_url` longer than this is refused by Discord.
const MAX_AVATAR_URL: usize = 2048;

/// `voice` as Discord shows it on a webhook message: its name made safe
/// ([`webhook_name`]), its avatar kept when it is an http(s) URL Discord takes.
pub(crate) fn on_discord(voice: Voice) -> Voice {
    let name = match webhook_name(&voice.name) {
        Ok(n) => n,
        Err(problem) => problem.fallback,
    };
    let avatar = voice.avatar.filter(|a| avatar_ok(a));
    Voice {
        name,
        avatar,
        ..voice
    }
}

impl Voice {
    /// The prefix of its messages when the channel does not allow webhooks.
    pub(crate) fn prefix(&self) -> String {
        format!("**{}:** ", self.name)
    }
}

/// Whether Discord takes `url` as a webhook message's `avatar_url`.
pub fn avatar_ok(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://")) && url.len() <= MAX_AVATAR_URL
}

/// A name Discord refuses for a webhook message, and the name used instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameProblem {
    pub reason: String,
    pub fallback: String,
}

/// The persona's name as a webhook message's `username`: 1 to 80 characters, without
/// "discord" or "clyde" in any case (Discord refuses those). A refused name gets a safe
/// fallback: the forbidden words taken out, cut to 80 characters, or "Persona".
pub fn webhook_name(name: &str) -> Result<String, NameProblem> {
    let trimmed = name.trim();
    let lower = trimmed.to_ascii_lowercase();
    let words: Vec<&str> = FORBIDDEN
        .iter()
        .copied()
        .filter(|w| lower.contains(w))
        .collect();
    let count = trimmed.chars().count();
    if words.is_empty() && (1..=MAX_NAME_CHARS).contains(&count) {
        return Ok(trimmed.to_string());
    }
    let mut safe = trimmed.to_string();
    for word in FORBIDDEN {
        safe = remove_case_insensitive(&safe, word);
    }
    let safe: String = safe.split_whitespace().collect::<Vec<_>>().join(" ");
    let safe: String = safe.chars().take(MAX_NAME_CHARS).collect();
    let fallback = if safe.trim().is_empty() {
        "Persona".to_string()
    } else {
        safe.trim().to_string()
    };
    let reason = if !words.is_empty() {
        format!(
            "Discord refuses webhook names containing {}",
            words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    } else if count == 0 {
        "Discord refuses an empty webhook name".to_string()
    } else {
        format!("Discord refuses webhook names over {MAX_NAME_CHARS} characters")
    };
    Err(NameProblem { reason, fallback })
}

fn remove_case_insensitive(text: &str, word: &str) -> String {
    // ASCII lower-casing keeps every byte offset, so a match's offsets hold in `text`.
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find(word) {
        out.push_str(&rest[..at]);
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AgentId;

    #[test]
    fn names_discord_refuses_get_a_safe_fallback() {
        assert_eq!(webhook_name("Ada").unwrap(), "Ada");
        let p = webhook_name("Discord Dan").unwrap_err();
        assert_eq!(p.fallback, "Dan");
        assert!(p.reason.contains("\"discord\""), "{}", p.reason);
        let p = webhook_name("CLYDE").unwrap_err();
        assert_eq!(p.fallback, "Persona");
        let long = "x".repeat(81);
        let p = webhook_name(&long).unwrap_err();
        assert_eq!(p.fallback.chars().count(), 80);
        assert!(p.reason.contains("80"), "{}", p.reason);
        assert_eq!(webhook_name("").unwrap_err().fallback, "Persona");
    }

    #[test]
    fn a_voice_keeps_only_an_avatar_discord_takes() {
        let voice = |name: &str, avatar| on_discord(Voice::new(AgentId::new("ada"), name, avatar));
        let v = voice("Ada", Some("https://x.test/a.png"));
        assert_eq!(v.avatar.as_deref(), Some("https://x.test/a.png"));
        let v = voice("Ada", Some("data:image/png;base64,AAAA"));
        assert_eq!(v.avatar, None);
        assert_eq!(v.prefix(), "**Ada:** ");
        assert_eq!(voice("Discord Dan", None).name, "Dan");
    }
}
