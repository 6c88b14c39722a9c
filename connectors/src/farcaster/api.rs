//! The Neynar v2 HTTP client: the few calls the connector makes, paced per endpoint,
//! retried on 429, and with Neynar's answers mapped to `ConnectorError`.
//!
//! It owns the `x-api-key` header and is the only code that sees the key. Error messages
//! carry the endpoint, the status and Neynar's message, never the key.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::config::{Fid, Secret, Settings};
use super::wire::{
    BulkUsers, Cast, CastResponse, ConversationResponse, ErrorBody, NotificationsPage, PublishCast,
    PublishResponse,
};
use crate::connector::ConnectorError;

/// How many times one call waits out a 429 before it gives up with `RateLimited`.
const MAX_RATE_LIMIT_RETRIES: u32 = 4;
/// A `Retry-After` longer than this is handed to the caller instead of slept through.
const MAX_INLINE_WAIT: Duration = Duration::from_secs(60);
/// Neynar's largest notifications page.
pub(crate) const NOTIFICATIONS_PAGE: u32 = 25;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The Neynar endpoints the connector calls; each has its own rate budget, as Neynar
/// counts them separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Notifications,
    CastLookup,
    Publish,
    UserLookup,
    Conversation,
}

impl Endpoint {
    const ALL: [Endpoint; 5] = [
        Endpoint::Notifications,
        Endpoint::CastLookup,
        Endpoint::Publish,
        Endpoint::UserLookup,
        Endpoint::Conversation,
    ];

    fn path(self) -> &'static str {
        match self {
            Endpoint::Notifications => "v2/farcaster/notifications",
            Endpoint::CastLookup | Endpoint::Publish => "v2/farcaster/cast",
            Endpoint::UserLookup => "v2/farcaster/user/bulk",
            Endpoint::Conversation => "v2/farcaster/cast/conversation",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Endpoint::Notifications => "fetching notifications",
            Endpoint::CastLookup => "looking up a cast",
            Endpoint::Publish => "publishing a cast",
            Endpoint::UserLookup => "looking up the bot's user",
            Endpoint::Conversation => "fetching a cast's conversation",
        }
    }

    fn index(self) -> usize {
        match self {
            Endpoint::Notifications => 0,
            Endpoint::CastLookup => 1,
            Endpoint::Publish => 2,
            Endpoint::UserLookup => 3,
            Endpoint::Conversation => 4,
        }
    }
}

/// A Neynar client for one API key.
pub(crate) struct Neynar {
    http: reqwest::Client,
    base: Url,
    key: Secret,
    limiters: Vec<DefaultDirectRateLimiter>,
}

impl Neynar {
    pub(crate) fn new(settings: &Settings) -> Result<Self, ConnectorError> {
        let http = crate::tls::http_client()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConnectorError::Fatal(format!("cannot build the HTTP client: {e}")))?;
        let mut base = settings.api_url.clone();
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        Ok(Self {
            http,
            base,
            key: settings.api_key.clone(),
            limiters: Endpoint::ALL
                .iter()
                .map(|_| RateLimiter::direct(per_minute(settings.rate_limit)))
                .collect(),
        })
    }

    fn url(&self, endpoint: Endpoint) -> Result<Url, ConnectorError> {
        self.base.join(endpoint.path()).map_err(|e| {
            ConnectorError::Fatal(format!("NEYNAR_API_URL cannot be joined with a path: {e}"))
        })
    }

    /// One page of mention and reply notifications for `fid`, newest first.
    pub(crate) async fn notifications(
        &self,
        fid: Fid,
        cursor: Option<&str>,
    ) -> Result<NotificationsPage, ConnectorError> {
        let mut url = self.url(Endpoint::Notifications)?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("fid", &fid.to_string())
                .append_pair("type", "mentions,replies")
                .append_pair("limit", &NOTIFICATIONS_PAGE.to_string());
            if let Some(c) = cursor {
                q.append_pair("cursor", c);
            }
        }
        self.call(Endpoint::Notifications, Method::GET, url, None)
            .await
    }

    /// A cast by its hash.
    pub(crate) async fn cast(&self, hash: &str) -> Result<Cast, ConnectorError> {
        let mut url = self.url(Endpoint::CastLookup)?;
        url.query_pairs_mut()
            .append_pair("identifier", hash)
            .append_pair("type", "hash");
        let found: CastResponse = self
            .call(Endpoint::CastLookup, Method::GET, url, None)
            .await?;
        Ok(found.cast)
    }

    /// The casts above `hash` in its thread, oldest first (Neynar's chronological parent
    /// casts), without the replies below it.
    pub(crate) async fn parent_casts(&self, hash: &str) -> Result<Vec<Cast>, ConnectorError> {
        let mut url = self.url(Endpoint::Conversation)?;
        url.query_pairs_mut()
            .append_pair("identifier", hash)
            .append_pair("type", "hash")
            .append_pair("reply_depth", "0")
            .append_pair("include_chronological_parent_casts", "true");
        let found: ConversationResponse = self
            .call(Endpoint::Conversation, Method::GET, url, None)
            .await?;
        Ok(found.conversation.chronological_parent_casts)
    }

    /// Publishes one cast and returns its hash.
    pub(crate) async fn publish(&self, cast: &PublishCast<'_>) -> Result<String, ConnectorError> {
        let url = self.url(Endpoint::Publish)?;
        let body = serde_json::to_vec(cast)
            .map_err(|e| ConnectorError::Fatal(format!("cannot encode the cast: {e}")))?;
        let answer: PublishResponse = self
            .call(Endpoint::Publish, Method::POST, url, Some(body))
            .await?;
        if answer.success == Some(false) {
            return Err(ConnectorError::Transient(
                "Neynar answered success=false to publishing a cast".into(),
            ));
        }
        Ok(answer.cast.hash)
    }

    /// Looks the bot's own user up: a cheap authenticated call.
    pub(crate) async fn user(&self, fid: Fid) -> Result<(), ConnectorError> {
        let mut url = self.url(Endpoint::UserLookup)?;
        url.query_pairs_mut().append_pair("fids", &fid.to_string());
        let found: BulkUsers = self
            .call(Endpoint::UserLookup, Method::GET, url, None)
            .await?;
        if found.users.iter().any(|u| u.fid == fid.0) {
            Ok(())
        } else {
            Err(ConnectorError::Fatal(format!(
                "Neynar knows no user with FARCASTER_FID={fid}"
            )))
        }
    }

    /// Sends one request within the endpoint's budget, waiting out 429s, and decodes the
    /// JSON answer.
    async fn call<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
    ) -> Result<T, ConnectorError> {
        let what = endpoint.what();
        let mut attempt = 0;
        loop {
            self.limiters[endpoint.index()].until_ready().await;
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .header("x-api-key", self.key.expose())
                .header(reqwest::header::ACCEPT, "application/json");
            if let Some(body) = &body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            let response = request.send().await.map_err(|e| {
                ConnectorError::Transient(format!("{what}: Neynar did not answer: {}", plain(&e)))
            })?;
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let wait = retry_after(response.headers()).unwrap_or_else(|| backoff(attempt));
                attempt += 1;
                if attempt > MAX_RATE_LIMIT_RETRIES || wait > MAX_INLINE_WAIT {
                    return Err(ConnectorError::RateLimited { retry_after: wait });
                }
                tracing::warn!(endpoint = ?endpoint, wait_ms = wait.as_millis() as u64, attempt,
                    "Neynar rate limit hit; waiting before trying again");
                tokio::time::sleep(wait).await;
                continue;
            }
            let bytes = response.bytes().await.map_err(|e| {
                ConnectorError::Transient(format!(
                    "{what}: reading Neynar's answer failed: {}",
                    plain(&e)
                ))
            })?;
            if !status.is_success() {
                return Err(status_error(what, status, &bytes));
            }
            return serde_json::from_slice(&bytes).map_err(|e| {
                ConnectorError::Transient(format!(
                    "{what}: Neynar's answer is not what its API documents: {e}"
                ))
            });
        }
    }
}

fn per_minute(n: NonZeroU32) -> Quota {
    Quota::per_minute(n)
}

/// A reqwest error without anything but its kind and the URL (which holds no secret).
fn plain(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    match e.url() {
        Some(url) => format!("{kind} ({})", url.path()),
        None => kind.to_string(),
    }
}

/// 1 s, 2 s, 4 s, … when Neynar gives no `Retry-After`.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(5))
}

/// `Retry-After` in seconds (Neynar sends a number; an HTTP date is not used by it).
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// Maps a non-success answer to the error the caller branches on.
pub(crate) fn status_error(what: &str, status: StatusCode, body: &[u8]) -> ConnectorError {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let message = match (parsed.message, parsed.code) {
        (Some(m), Some(c)) => format!("{m} ({c})"),
        (Some(m), None) => m,
        (None, Some(c)) => c,
        (None, None) => String::from_utf8_lossy(body).chars().take(200).collect(),
    };
    let detail = format!("{what}: Neynar answered {status}: {message}");
    match status.as_u16() {
        401 | 403 => ConnectorError::Unauthorized(detail),
        408 => ConnectorError::Transient(detail),
        500..=599 => ConnectorError::Transient(detail),
        _ => ConnectorError::Fatal(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

    #[test]
    fn statuses_map_to_what_callers_branch_on() {
        let body = br#"{"message":"Text is too long","code":"InvalidField"}"#;
        match status_error("publishing a cast", StatusCode::BAD_REQUEST, body) {
            ConnectorError::Fatal(m) => {
                assert!(m.contains("Text is too long") && m.contains("400"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            status_error("x", StatusCode::UNAUTHORIZED, b"{}"),
            ConnectorError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("x", StatusCode::FORBIDDEN, b""),
            ConnectorError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("x", StatusCode::BAD_GATEWAY, b"<html>"),
            ConnectorError::Transient(_)
        ));
        assert!(matches!(
            status_error("x", StatusCode::NOT_FOUND, b"{}"),
            ConnectorError::Fatal(_)
        ));
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("0.5"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(40), Duration::from_secs(32));
    }
}
