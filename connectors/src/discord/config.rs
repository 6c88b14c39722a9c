//! The Discord connector's settings: elizaOS's names (`DISCORD_API_TOKEN`,
//! `DISCORD_APPLICATION_ID`) and `DISCORD_API_URL`, read once through the persona's `Lookup`.
//!
//! Also the invite: the OAuth2 URL with the scopes and the permission integer the bot needs.
//! The token is a [`Token`], whose `Debug` shows nothing, and it never reaches a message.

use std::fmt;

use reqwest::Url;

use crate::connector::{ConnectorError, Lookup, http_base_url, setting, setting_or};

pub const API_TOKEN: &str = "DISCORD_API_TOKEN";
pub const APPLICATION_ID: &str = "DISCORD_APPLICATION_ID";
pub const API_URL: &str = "DISCORD_API_URL";
/// Roles (by name, comma-separated) whose members may steer a guild channel with the slash
/// commands, besides those with Manage Messages (docs/rooms.md).
pub const STEER_ROLES: &str = "DISCORD_STEER_ROLES";

/// Where Discord's REST API lives; `/api/v10` is appended.
pub(crate) const DEFAULT_API_URL: &str = "https://discord.com";

/// The permissions the bot asks for in its invite, one bit each (Discord's permission
/// flags), and no more than the connector uses: it reads channels and their history (the
/// catch-up after a restart reads `GET /channels/{id}/messages`), and posts plain-text
/// replies, in threads too, and puts its acknowledgement reaction on a message it is
/// answering (`TROUPE_ACK_REACTION`, docs/media.md). A voice note is answered with a voice
/// message (`super::voice`, issue 32): a file upload flagged `IS_VOICE_MESSAGE`, which
/// Discord allows only with Attach Files and Send Voice Messages. It sends no embeds, so it
/// does not ask for Embed Links; slash commands come with the `applications.commands` scope, and Message Content
/// is an intent set in the developer portal, not a permission. Manage Webhooks lets personas
/// that share one bot speak through a channel webhook under their own name and face (issue
/// 46, `super::hooks`); without it they speak as the bot with their name in front. This list is the one fact:
/// the log line at start, `GET /api/agents/{agent}/setup` (the console) and docs/discord.md
/// all show [`invite_url`].
pub(crate) const PERMISSIONS: &[(&str, u64)] = &[
    ("View Channels", 1 << 10),
    ("Add Reactions", 1 << 6),
    ("Send Messages", 1 << 11),
    ("Read Message History", 1 << 16),
    ("Send Messages in Threads", 1 << 38),
    ("Attach Files", 1 << 15),
    ("Send Voice Messages", 1 << 46),
    ("Manage Webhooks", 1 << 29),
];

/// The integer in the invite URL: every bit of [`PERMISSIONS`].
pub(crate) fn permission_integer() -> u64 {
    PERMISSIONS.iter().fold(0, |acc, (_, bit)| acc | bit)
}

/// The OAuth2 URL that adds the bot to a server with the permissions it needs.
pub(crate) fn invite_url(application_id: u64) -> String {
    format!(
        "https://discord.com/oauth2/authorize?client_id={application_id}&scope=bot%20applications.commands&permissions={}",
        permission_integer()
    )
}

/// A bot token, without its `Bot ` prefix. Its `Debug` shows nothing.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(String);

impl Token {
    fn parse(raw: &str) -> Self {
        let raw = raw.trim();
        let bare = raw.strip_prefix("Bot ").unwrap_or(raw).trim();
        Self(bare.to_string())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
    /// The `Authorization` header value.
    pub(crate) fn header(&self) -> String {
        format!("Bot {}", self.0)
    }
    /// Removes the token from a text (an error from a library, a URL).
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, "***")
        }
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Everything the connector needs, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub token: Token,
    pub application_id: Option<u64>,
    /// The origin REST calls go to (`https://discord.com`, or a proxy or fake).
    pub api_url: Url,
    /// `DISCORD_API_URL` was set: serenity goes through it too.
    pub custom_url: bool,
    /// `DISCORD_STEER_ROLES`: role names (lower-cased) that may steer, at most 20.
    pub steer_roles: Vec<String>,
}

impl Settings {
    /// `https://discord.com/api/v10` + `path` (which starts with `/`).
    pub(crate) fn endpoint(&self, path: &str) -> String {
        let base = self.api_url.as_str().trim_end_matches('/');
        format!("{base}/api/v10{path}")
    }

    /// The origin without a trailing slash, as serenity's proxy setting wants it.
    pub(crate) fn origin(&self) -> String {
        self.api_url.as_str().trim_end_matches('/').to_string()
    }
    /// The bot account, named for leader election without its secret: `discord:<application
    /// id>` when `DISCORD_APPLICATION_ID` is set, else a one-way digest of the token (the
    /// same with the `Bot ` prefix or without, since the token is stored bare).
    pub(crate) fn account_name(&self) -> String {
        match self.application_id {
            Some(app) => format!("discord:{app}"),
            None => format!("discord:token-{:016x}", digest(self.token.expose())),
        }
    }
}

/// A stable 64-bit FNV-1a digest: names an account by its token without revealing it.
fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Reads the Discord settings of one persona; `None` when no token is set.
pub(crate) fn parse(lookup: Lookup<'_>) -> Result<Option<Settings>, ConnectorError> {
    let Some(raw_token) = setting(lookup, API_TOKEN) else {
        return Ok(None);
    };
    let token = Token::parse(&raw_token);
    if token.expose().is_empty() || token.expose().chars().any(char::is_whitespace) {
        return Err(ConnectorError::Fatal(format!(
            "{API_TOKEN} is not a bot token (it is empty or has spaces in it)"
        )));
    }
    let application_id = setting_or(
        lookup,
        APPLICATION_ID,
        None,
        "the numeric application id from the Developer Portal",
        |v| v.parse::<u64>().ok().filter(|id| *id > 0).map(Some),
    )?;
    let custom = setting(lookup, API_URL);
    let raw = custom
        .clone()
        .unwrap_or_else(|| DEFAULT_API_URL.to_string());
    let mut api_url = http_base_url(
        API_URL,
        &raw,
        "an http(s) origin such as https://discord.com",
    )?;
    // Tolerate an origin given with the API path.
    let path = api_url.path().trim_end_matches('/').to_string();
    for suffix in ["/api/v10", "/api"] {
        if let Some(stripped) = path.strip_suffix(suffix) {
            let stripped = if stripped.is_empty() { "/" } else { stripped };
            api_url.set_path(stripped);
            break;
        }
    }
    let steer_roles = setting(lookup, STEER_ROLES)
        .map(|v| {
            v.split(',')
                .map(|r| r.trim().to_lowercase())
                .filter(|r| !r.is_empty() && r.len() <= 100)
                .take(20)
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Settings {
        token,
        application_id,
        api_url,
        custom_url: custom.is_some(),
        steer_roles,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::lookup_of;

    fn parse_with(pairs: &[(&str, &str)]) -> Result<Option<Settings>, ConnectorError> {
        parse(&lookup_of(pairs))
    }

    #[test]
    fn no_token_means_not_configured() {
        assert!(matches!(parse_with(&[]), Ok(None)));
        assert!(matches!(parse_with(&[(API_TOKEN, "  ")]), Ok(None)));
    }

    #[test]
    fn defaults_and_overrides() {
        let s = parse_with(&[(API_TOKEN, "Bot abc.def")]).unwrap().unwrap();
        assert_eq!(s.token.expose(), "abc.def");
        assert_eq!(s.token.header(), "Bot abc.def");
        assert_eq!(
            s.endpoint("/users/@me"),
            "https://discord.com/api/v10/users/@me"
        );
        assert!(!s.custom_url);

        for url in [
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/",
            "http://127.0.0.1:9/api/v10",
        ] {
            let s = parse_with(&[(API_TOKEN, "t"), (API_URL, url), (APPLICATION_ID, "42")])
                .unwrap()
                .unwrap();
            assert_eq!(s.endpoint("/gateway"), "http://127.0.0.1:9/api/v10/gateway");
            assert_eq!(s.origin(), "http://127.0.0.1:9");
            assert!(s.custom_url);
            assert_eq!(s.application_id, Some(42));
        }
    }

    #[test]
    fn bad_values_are_fatal_and_never_show_the_token() {
        for (name, value) in [
            (API_URL, "ftp://x"),
            (API_URL, "nope"),
            (APPLICATION_ID, "app"),
        ] {
            match parse_with(&[(API_TOKEN, "s3cr3t"), (name, value)]) {
                Err(ConnectorError::Fatal(m)) => {
                    assert!(m.contains(name), "{m}");
                    assert!(!m.contains("s3cr3t"), "{m}");
                }
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let s = parse_with(&[(API_TOKEN, "s3cr3t")]).unwrap().unwrap();
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert_eq!(s.token.scrub("GET /x?t=s3cr3t"), "GET /x?t=***");
    }

    #[test]
    fn permission_integer_is_the_documented_one() {
        // View Channels, Send Messages, Add Reactions (the acknowledgement), Read Message
        // History, Send Messages in Threads, Attach Files and Send Voice Messages (voice
        // out; see docs/discord.md) and Manage Webhooks (personas sharing one bot, issue 46):
        // what the connector uses, nothing more.
        assert_eq!(permission_integer(), 70_644_159_056_960);
        assert_eq!(
            invite_url(42),
            "https://discord.com/oauth2/authorize?client_id=42&scope=bot%20applications.commands&permissions=70644159056960"
        );
    }

    #[test]
    fn docs_show_the_same_invite() {
        let doc = include_str!("../../../docs/discord.md");
        assert!(
            doc.contains(&format!("permissions={}", permission_integer())),
            "docs/discord.md must show the invite URL with permissions={}",
            permission_integer()
        );
        for (name, _) in PERMISSIONS {
            assert!(
                doc.contains(&format!("| {name} |")),
                "docs/discord.md lacks {name}"
            );
        }
    }
}
