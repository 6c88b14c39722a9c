//! Turning teloxide's `RequestError` into the connector's typed `ConnectorError`, with the
//! bot token scrubbed from every message (reqwest errors carry the request URL, and the URL
//! carries the token).

use std::error::Error as _;
use std::time::Duration;
use teloxide::{ApiError, RequestError};

use super::config::Token;
use crate::connector::ConnectorError;

/// What the caller should do about a failed Bot API call.
pub(crate) fn classify(error: &RequestError, token: &Token) -> ConnectorError {
    match error {
        RequestError::Api(ApiError::InvalidToken) => ConnectorError::Unauthorized(
            "Telegram refused the bot token: check TELEGRAM_BOT_TOKEN (BotFather's /token)".into(),
        ),
        RequestError::RetryAfter(seconds) => ConnectorError::RateLimited {
            retry_after: seconds.duration().max(Duration::from_secs(1)),
        },
        RequestError::Api(ApiError::Unknown(text)) if looks_temporary(text) => {
            ConnectorError::Transient(format!("Telegram answered: {}", token.scrub(text)))
        }
        RequestError::Api(api) => ConnectorError::Fatal(format!(
            "Telegram answered: {}",
            token.scrub(&api.to_string())
        )),
        RequestError::MigrateToChatId(to) => ConnectorError::Fatal(format!(
            "the group became the supergroup {to}; send there instead"
        )),
        RequestError::Network(_) | RequestError::Io(_) => {
            ConnectorError::Transient(describe(error, token))
        }
        RequestError::InvalidJson { source, raw } => {
            let head: String = raw.chars().take(200).collect();
            ConnectorError::Transient(token.scrub(&format!(
                "the Bot API answered something that is not its JSON ({source}): {head}"
            )))
        }
    }
}

/// The error and its sources on one line, without the token.
pub(crate) fn describe(error: &RequestError, token: &Token) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    token.scrub(&text)
}

/// Server-side trouble that a retry may cure (Telegram, or a proxy in front of it).
fn looks_temporary(description: &str) -> bool {
    let d = description.to_ascii_lowercase();
    [
        "internal server error",
        "bad gateway",
        "gateway timeout",
        "service unavailable",
        "too many requests",
    ]
    .iter()
    .any(|p| d.contains(p))
}

/// A 400 that means the topic named in `message_thread_id` is gone (deleted or closed).
pub(crate) fn is_thread_not_found(error: &RequestError) -> bool {
    matches!(error, RequestError::Api(ApiError::Unknown(text))
        if text.to_ascii_lowercase().contains("thread not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        let token = Token::parse("123:abc").unwrap();
        assert!(matches!(
            classify(&RequestError::Api(ApiError::InvalidToken), &token),
            ConnectorError::Unauthorized(_)
        ));
        assert!(matches!(
            classify(&RequestError::Api(ApiError::BotBlocked), &token),
            ConnectorError::Fatal(_)
        ));
        assert!(matches!(
            classify(
                &RequestError::Api(ApiError::Unknown("Internal Server Error".into())),
                &token
            ),
            ConnectorError::Transient(_)
        ));
        let e = classify(
            &RequestError::Api(ApiError::Unknown("bad bot123:abc".into())),
            &token,
        );
        assert!(!e.to_string().contains("123:abc"));
        assert!(is_thread_not_found(&RequestError::Api(ApiError::Unknown(
            "Bad Request: message thread not found".into()
        ))));
    }
}
