//! The Telegram bot's public link (`https://t.me/<username>`) for the console's Personas
//! page. Telegram knows the username, not troupe's settings: it is asked with `getMe`, the
//! same call the connector makes at start, at `TELEGRAM_API_ROOT` when set.
//!
//! The token is part of Bot API URLs, so nothing here logs or returns an error that could
//! carry the URL: a failure is only "no link". Answers are cached for ten minutes per bot,
//! so the page can be reloaded without a call to Telegram each time.

use std::sync::LazyLock;
use std::time::Duration;

use serde::Deserialize;
use troupe_connectors::Platform;

use crate::persona::{Env, Persona};

const DEFAULT_API_ROOT: &str = "https://api.telegram.org";

static CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    troupe_connectors::tls::http_client()
        .timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()
});

/// Usernames by a hash of (API root, token); never the token itself.
static USERNAMES: LazyLock<moka::sync::Cache<u64, String>> = LazyLock::new(|| {
    moka::sync::Cache::builder()
        .max_capacity(256)
        .time_to_live(Duration::from_secs(600))
        .build()
});

#[derive(Deserialize)]
struct GetMe {
    ok: bool,
    result: Option<Me>,
}

#[derive(Deserialize)]
struct Me {
    username: Option<String>,
}

/// A Telegram username: letters, digits and underscores, at most 64 (Telegram allows 32); checked
/// so that the link built from it is only ever `t.me/<that>`.
fn plausible(username: &str) -> bool {
    (1..=64).contains(&username.len())
        && username
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `https://t.me/<username>` for the persona's bot, when its token is set and Telegram
/// answers `getMe`. The token and the root come through the persona's secrets, which never
/// pair the operator's token with a root the file chose (issue 30, finding 1): such a
/// persona has no token here, and so no link.
pub async fn bot_link(persona: &Persona, env: &Env) -> Option<String> {
    let token = persona.platform_token(Platform::Telegram, env)?;
    let root = persona
        .secret("TELEGRAM_API_ROOT", env)
        .unwrap_or_else(|| DEFAULT_API_ROOT.to_string());
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&root, &token).hash(&mut h);
        h.finish()
    };
    if let Some(username) = USERNAMES.get(&key) {
        return Some(format!("https://t.me/{username}"));
    }
    let url = format!("{}/bot{token}/getMe", root.trim_end_matches('/'));
    let answer: GetMe = CLIENT
        .as_ref()?
        .get(url)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let username = answer.result.and_then(|me| me.username)?;
    if !answer.ok || !plausible(&username) {
        return None;
    }
    USERNAMES.insert(key, username.clone());
    Some(format!("https://t.me/{username}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_plain_usernames_make_a_link() {
        assert!(super::plausible("tess_bot"));
        assert!(!super::plausible("tess/../bot"));
        assert!(!super::plausible(""));
        assert!(!super::plausible("a b"));
    }
}
