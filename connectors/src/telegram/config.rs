//! The Telegram connector's settings, parsed once from the persona's lookup: the bot token,
//! the API root, and whether updates arrive by long polling or by webhook.
//!
//! Everything here is checked when the connector is built, so a malformed URL or secret is
//! reported at start rather than on the first message. The token never appears in an error.

use rand::Rng;
use url::Url;

use crate::connector::{ConnectorError, Lookup, setting};

/// The public Bot API server.
pub(crate) const DEFAULT_API_ROOT: &str = "https://api.telegram.org";

/// How updates reach the connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The connector asks `getUpdates` in a loop (the default; works behind NAT).
    Polling,
    /// Telegram calls `url`, which an operator points at troupe's
    /// `/webhooks/telegram/{agent}`; every call must carry `secret`.
    Webhook { url: Url, secret: WebhookSecret },
}

/// The `secret_token` Telegram sends back in `X-Telegram-Bot-Api-Secret-Token`.
/// 1 to 256 characters from `A-Z a-z 0-9 _ -`, as the Bot API requires.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct WebhookSecret(String);

impl WebhookSecret {
    pub(crate) fn parse(value: &str) -> Result<Self, ConnectorError> {
        let ok_len = (1..=256).contains(&value.len());
        let ok_chars = value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok_len && ok_chars {
            Ok(Self(value.to_string()))
        } else {
            Err(ConnectorError::Fatal(
                "TELEGRAM_WEBHOOK_SECRET must be 1 to 256 characters from A-Z, a-z, 0-9, _ and -"
                    .into(),
            ))
        }
    }

    /// A fresh random secret, for when the operator sets none.
    pub(crate) fn random() -> Self {
        let secret: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .take(48)
            .map(char::from)
            .collect();
        Self(secret)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Compares in time that does not depend on where the first difference is.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(***)")
    }
}

/// The bot token. Its `Debug` hides it; [`Token::scrub`] removes it from any text.
#[derive(Clone)]
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn parse(value: &str) -> Result<Self, ConnectorError> {
        let value = value.trim();
        // BotFather tokens are `<bot id>:<secret>`; the id is digits.
        let well_formed = value.split_once(':').is_some_and(|(id, secret)| {
            !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
                && !secret.is_empty()
                && secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
        if well_formed {
            Ok(Self(value.to_string()))
        } else {
            Err(ConnectorError::Fatal(
                "TELEGRAM_BOT_TOKEN does not look like a bot token (`<digits>:<letters>`, as BotFather gives it)".into(),
            ))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The bot's public user id: the digits before the `:` ([`Token::parse`] checked them).
    pub(crate) fn bot_id(&self) -> &str {
        self.0.split_once(':').map_or("", |(id, _)| id)
    }

    /// `text` without the token, in plain or percent-encoded form.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let encoded = self.0.replace(':', "%3A");
        text.replace(&self.0, "<TELEGRAM_BOT_TOKEN>")
            .replace(&encoded, "<TELEGRAM_BOT_TOKEN>")
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Everything the connector reads from the persona's settings.
#[derive(Debug, Clone)]
pub(crate) struct TelegramConfig {
    pub token: Token,
    pub api_root: Url,
    pub mode: Mode,
}

impl TelegramConfig {
    /// The bot account, named by the bot id the token begins with (public, unlike the
    /// token): one `getUpdates` poller per account, one shared bot per account.
    pub(crate) fn account_name(&self) -> String {
        format!("telegram:{}", self.token.bot_id())
    }

    /// `Ok(None)` when `TELEGRAM_BOT_TOKEN` is not set.
    pub(crate) fn from_lookup(lookup: Lookup<'_>) -> Result<Option<Self>, ConnectorError> {
        let get = |key: &str| setting(lookup, key);
        let Some(token) = get("TELEGRAM_BOT_TOKEN") else {
            return Ok(None);
        };
        let token = Token::parse(&token)?;
        let api_root = match get("TELEGRAM_API_ROOT") {
            Some(root) => parse_api_root(&root)?,
            None => parse_api_root(DEFAULT_API_ROOT)?,
        };
        let mode = match get("TELEGRAM_WEBHOOK_URL") {
            None => Mode::Polling,
            Some(url) => {
                let url = Url::parse(&url).map_err(|e| {
                    ConnectorError::Fatal(format!("TELEGRAM_WEBHOOK_URL is not a URL: {e}"))
                })?;
                if url.scheme() != "https" {
                    tracing::warn!(
                        "TELEGRAM_WEBHOOK_URL is not https: the public Bot API only calls https webhooks"
                    );
                }
                let secret = match get("TELEGRAM_WEBHOOK_SECRET") {
                    Some(s) => WebhookSecret::parse(&s)?,
                    None => WebhookSecret::random(),
                };
                Mode::Webhook { url, secret }
            }
        };
        Ok(Some(Self {
            token,
            api_root,
            mode,
        }))
    }
}

/// Parses the API root; a trailing slash is dropped so that `/bot<token>/<method>` follows
/// the root's own path.
fn parse_api_root(value: &str) -> Result<Url, ConnectorError> {
    let mut url = Url::parse(value).map_err(|e| {
        ConnectorError::Fatal(format!("TELEGRAM_API_ROOT is not a URL ({value}): {e}"))
    })?;
    if url.cannot_be_a_base() || !matches!(url.scheme(), "http" | "https") {
        return Err(ConnectorError::Fatal(format!(
            "TELEGRAM_API_ROOT must be an http(s) URL such as {DEFAULT_API_ROOT}, not {value}"
        )));
    }
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty();
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::lookup_of;

    fn config(pairs: &[(&str, &str)]) -> Result<Option<TelegramConfig>, ConnectorError> {
        TelegramConfig::from_lookup(&lookup_of(pairs))
    }

    #[test]
    fn no_token_means_not_configured() {
        assert!(config(&[]).unwrap().is_none());
        assert!(config(&[("TELEGRAM_BOT_TOKEN", "  ")]).unwrap().is_none());
    }

    #[test]
    fn polling_by_default_with_the_public_root() {
        let c = config(&[("TELEGRAM_BOT_TOKEN", "123:abc")])
            .unwrap()
            .unwrap();
        assert_eq!(c.mode, Mode::Polling);
        assert_eq!(c.api_root.as_str(), "https://api.telegram.org/");
    }

    #[test]
    fn api_root_keeps_its_path_without_trailing_slash() {
        let c = config(&[
            ("TELEGRAM_BOT_TOKEN", "123:abc"),
            ("TELEGRAM_API_ROOT", "http://127.0.0.1:8081/tg/"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.api_root.as_str(), "http://127.0.0.1:8081/tg");
        assert!(
            config(&[
                ("TELEGRAM_BOT_TOKEN", "123:abc"),
                ("TELEGRAM_API_ROOT", "api.telegram.org"),
            ])
            .is_err()
        );
    }

    #[test]
    fn webhook_mode_with_a_given_or_random_secret() {
        let c = config(&[
            ("TELEGRAM_BOT_TOKEN", "123:abc"),
            (
                "TELEGRAM_WEBHOOK_URL",
                "https://bot.example.org/webhooks/telegram/tess",
            ),
            ("TELEGRAM_WEBHOOK_SECRET", "s3cret_-x"),
        ])
        .unwrap()
        .unwrap();
        match c.mode {
            Mode::Webhook { url, secret } => {
                assert_eq!(url.path(), "/webhooks/telegram/tess");
                assert!(secret.matches("s3cret_-x"));
                assert!(!secret.matches("s3cret_-y"));
                assert!(!secret.matches(""));
            }
            Mode::Polling => panic!("expected webhook mode"),
        }
        let c = config(&[
            ("TELEGRAM_BOT_TOKEN", "123:abc"),
            ("TELEGRAM_WEBHOOK_URL", "https://bot.example.org/hook"),
        ])
        .unwrap()
        .unwrap();
        let Mode::Webhook { secret, .. } = c.mode else {
            panic!("expected webhook mode")
        };
        assert_eq!(secret.as_str().len(), 48);
        assert!(WebhookSecret::parse(secret.as_str()).is_ok());
        assert!(WebhookSecret::parse("has space").is_err());
    }

    #[test]
    fn a_malformed_token_is_refused_without_echoing_it() {
        let err = config(&[("TELEGRAM_BOT_TOKEN", "not-a-token")])
            .err()
            .unwrap();
        assert!(!err.to_string().contains("not-a-token"));
    }

    #[test]
    fn scrub_removes_the_token() {
        let t = Token::parse("123:abc").unwrap();
        let s = t.scrub("error sending request for url (http://x/bot123:abc/GetMe) bot123%3Aabc");
        assert!(!s.contains("123:abc") && !s.contains("123%3Aabc"));
        assert_eq!(format!("{t:?}"), "Token(***)");
    }
}
