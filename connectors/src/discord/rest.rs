//! Discord's REST API, the few routes the connector calls: `GET /users/@me`,
//! `POST /channels/{id}/messages`, `PATCH` and `DELETE /channels/{id}/messages/{m}`,
//! `POST /channels/{id}/typing` and
//! `GET /channels/{id}/messages?after=` (and the multipart message of `super::voice`). Over reqwest rather than serenity's `Http`, so that
//! a 429's `retry_after` (body, or `Retry-After`) and the `X-RateLimit-*` headers reach the
//! sender, and every failure becomes a typed `ConnectorError` with the token scrubbed.

use std::time::Duration;

use reqwest::{Method, Response, StatusCode};
use serde_json::Value;

use super::config::Settings;
use super::wire;
use crate::connector::ConnectorError;

const TIMEOUT: Duration = Duration::from_secs(30);
/// When a 429 names no wait at all.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a call came to.
#[derive(Debug)]
pub(crate) enum CallError {
    RateLimited {
        retry_after: Duration,
        global: bool,
    },
    /// Discord refused the call with one of the JSON error codes a caller branches on
    /// ([`UNKNOWN_WEBHOOK`], [`MISSING_PERMISSIONS`]); `error` is what it means otherwise.
    Coded {
        code: u64,
        error: ConnectorError,
    },
    Other(ConnectorError),
}

/// A webhook's token: it posts as the webhook without any other credential, so its
/// `Debug` shows nothing and it never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookToken(String);

impl WebhookToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for WebhookToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookToken(***)")
    }
}

/// One channel's webhook: its id and token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub id: u64,
    pub token: WebhookToken,
}

/// Discord's JSON error code for a webhook that no longer exists (deleted by an admin).
pub(crate) const UNKNOWN_WEBHOOK: u64 = 10015;
/// Discord's JSON error code for a permission the bot lacks (Manage Webhooks, for one).
pub(crate) const MISSING_PERMISSIONS: u64 = 50013;
/// Discord's JSON error code for a message that no longer exists.
pub(crate) const UNKNOWN_MESSAGE: u64 = 10008;

impl From<CallError> for ConnectorError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::RateLimited { retry_after, .. } => {
                ConnectorError::RateLimited { retry_after }
            }
            CallError::Coded { error, .. } | CallError::Other(error) => error,
        }
    }
}

/// The bucket state a successful answer reported: when `remaining` is 0, the next call to
/// the same route should wait `reset_after`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bucket {
    pub exhausted_for: Option<Duration>,
}

pub(crate) struct Rest {
    http: reqwest::Client,
    settings: Settings,
}

fn seconds(raw: &str) -> Option<Duration> {
    raw.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(3600.0)))
}

fn header<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

impl Rest {
    /// The HTTP client, for the message files the connector fetches (`super::files`).
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn new(settings: Settings) -> Result<Self, ConnectorError> {
        let http = crate::tls::http_client()
            .timeout(TIMEOUT)
            .user_agent(concat!(
                "DiscordBot (https://github.com/troupe, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .map_err(|e| ConnectorError::Fatal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { http, settings })
    }

    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(Response, Bucket), CallError> {
        let mut req = self.request(method.clone(), path);
        if let Some(body) = body {
            req = req.json(body);
        }
        self.answer(req, method, path).await
    }

    /// A request to `path` with the bot's token, for a body [`Self::call`] does not make
    /// (the multipart upload of a voice message, `super::voice`); sent with [`Self::answer`].
    pub(super) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.settings.endpoint(path))
            .header("Authorization", self.settings.token.header())
    }

    /// Sends `req` and reads what Discord answered: the bucket of a success, or the typed
    /// error (a 429's wait, a refusal), the token scrubbed.
    pub(super) async fn answer(
        &self,
        req: reqwest::RequestBuilder,
        method: Method,
        path: &str,
    ) -> Result<(Response, Bucket), CallError> {
        let resp = req.send().await.map_err(|e| {
            let text = self.settings.token.scrub(&e.without_url().to_string());
            CallError::Other(ConnectorError::Transient(format!(
                "{method} {}: {text}",
                scrub_webhook_path(path)
            )))
        })?;
        let status = resp.status();
        if status.is_success() {
            let exhausted_for = (header(&resp, "x-ratelimit-remaining") == Some("0"))
                .then(|| header(&resp, "x-ratelimit-reset-after").and_then(seconds))
                .flatten();
            return Ok((resp, Bucket { exhausted_for }));
        }
        let header_wait = header(&resp, "retry-after").and_then(seconds);
        let text = resp.text().await.unwrap_or_default();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let body: wire::RateLimited = serde_json::from_str(&text).unwrap_or_default();
            let retry_after = body
                .retry_after
                .and_then(|s| seconds(&s.to_string()))
                .or(header_wait)
                .unwrap_or(DEFAULT_RETRY_AFTER);
            return Err(CallError::RateLimited {
                retry_after,
                global: body.global,
            });
        }
        let parsed = serde_json::from_str::<Value>(&text).ok();
        let code = parsed
            .as_ref()
            .and_then(|v| v.get("code"))
            .and_then(Value::as_u64);
        let detail: String = parsed
            .as_ref()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| text.chars().take(200).collect());
        // A webhook's token is in its path: it never reaches a message either.
        let shown_path = scrub_webhook_path(path);
        let detail = self.settings.token.scrub(&detail);
        let what = format!("{method} {shown_path}: {status}: {detail}");
        let error = match status.as_u16() {
            401 => ConnectorError::Unauthorized(format!("{what} (check DISCORD_API_TOKEN)")),
            403 => ConnectorError::Fatal(format!(
                "{what} (the bot lacks a permission in this channel; see docs/discord.md)"
            )),
            408 | 500..=599 => ConnectorError::Transient(what),
            _ => ConnectorError::Fatal(what),
        };
        Err(match code {
            Some(code @ (UNKNOWN_WEBHOOK | MISSING_PERMISSIONS | UNKNOWN_MESSAGE)) => {
                CallError::Coded { code, error }
            }
            _ => CallError::Other(error),
        })
    }

    pub(super) async fn json<T: serde::de::DeserializeOwned>(
        resp: Response,
        path: &str,
    ) -> Result<T, CallError> {
        resp.json::<T>().await.map_err(|e| {
            CallError::Other(ConnectorError::Transient(format!(
                "{path}: unreadable answer: {}",
                e.without_url()
            )))
        })
    }

    /// `GET /users/@me`: the bot's own user.
    pub(crate) async fn me(&self) -> Result<wire::User, CallError> {
        let (resp, _) = self.call(Method::GET, "/users/@me", None).await?;
        Self::json(resp, "/users/@me").await
    }

    /// `POST /channels/{id}/messages`.
    pub(crate) async fn create_message(
        &self,
        channel: u64,
        body: &Value,
    ) -> Result<(wire::Message, Bucket), CallError> {
        let path = format!("/channels/{channel}/messages");
        let (resp, bucket) = self.call(Method::POST, &path, Some(body)).await?;
        Ok((Self::json(resp, &path).await?, bucket))
    }

    /// `PATCH /channels/{id}/messages/{message}`: the message's text replaced (a reply
    /// shown while it is written, issue 32). Mentions stay as the message was created.
    pub(crate) async fn edit_message(
        &self,
        channel: u64,
        message: &str,
        content: &str,
    ) -> Result<Bucket, CallError> {
        let path = format!("/channels/{channel}/messages/{message}");
        let body = serde_json::json!({
            "content": content,
            "allowed_mentions": {"parse": ["users"], "replied_user": true},
        });
        let (_, bucket) = self.call(Method::PATCH, &path, Some(&body)).await?;
        Ok(bucket)
    }

    /// `DELETE /channels/{id}/messages/{message}`: a message of the bot's own.
    pub(crate) async fn delete_message(
        &self,
        channel: u64,
        message: &str,
    ) -> Result<(), CallError> {
        let path = format!("/channels/{channel}/messages/{message}");
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    /// `POST /channels/{id}/typing`.
    pub(crate) async fn typing(&self, channel: u64) -> Result<(), CallError> {
        let path = format!("/channels/{channel}/typing");
        self.call(Method::POST, &path, None).await.map(|_| ())
    }

    /// `POST /users/@me/channels`: the DM channel with a user (Discord returns the one that
    /// exists, or opens it). For messages troupe starts itself, such as a draft told to an
    /// owner, where no message of theirs names the channel.
    pub(crate) async fn open_dm(&self, user: wire::Snowflake) -> Result<wire::Channel, CallError> {
        let path = "/users/@me/channels";
        let body = serde_json::json!({ "recipient_id": user.0.to_string() });
        let (resp, _) = self.call(Method::POST, path, Some(&body)).await?;
        Self::json(resp, path).await
    }

    /// `GET /channels/{id}`: whether a channel is a thread, and its parent (a webhook
    /// lives in the parent and posts in the thread with `thread_id`).
    pub(crate) async fn channel(&self, channel: u64) -> Result<wire::Channel, CallError> {
        let path = format!("/channels/{channel}");
        let (resp, _) = self.call(Method::GET, &path, None).await?;
        Self::json(resp, &path).await
    }

    /// `GET /channels/{id}/webhooks` (needs Manage Webhooks).
    pub(crate) async fn channel_webhooks(
        &self,
        channel: u64,
    ) -> Result<Vec<wire::Webhook>, CallError> {
        let path = format!("/channels/{channel}/webhooks");
        let (resp, _) = self.call(Method::GET, &path, None).await?;
        Self::json(resp, &path).await
    }

    /// `POST /channels/{id}/webhooks` (needs Manage Webhooks).
    pub(crate) async fn create_webhook(
        &self,
        channel: u64,
        name: &str,
    ) -> Result<wire::Webhook, CallError> {
        let path = format!("/channels/{channel}/webhooks");
        let body = serde_json::json!({ "name": name });
        let (resp, _) = self.call(Method::POST, &path, Some(&body)).await?;
        Self::json(resp, &path).await
    }

    /// `POST /webhooks/{id}/{token}?wait=true[&thread_id=]`: a message as the webhook, its
    /// id kept (`wait`), with the bucket of the webhook's own route.
    pub(crate) async fn execute_webhook(
        &self,
        hook: &Hook,
        thread: Option<u64>,
        body: &Value,
    ) -> Result<(wire::Message, Bucket), CallError> {
        let mut path = format!("/webhooks/{}/{}?wait=true", hook.id, hook.token.expose());
        if let Some(thread) = thread {
            path.push_str(&format!("&thread_id={thread}"));
        }
        let (resp, bucket) = self.call(Method::POST, &path, Some(body)).await?;
        Ok((Self::json(resp, &path).await?, bucket))
    }

    /// `PATCH /webhooks/{id}/{token}/messages/{message}[?thread_id=]`.
    pub(crate) async fn edit_webhook_message(
        &self,
        hook: &Hook,
        thread: Option<u64>,
        message: &str,
        content: &str,
    ) -> Result<Bucket, CallError> {
        let path = webhook_message_path(hook, thread, message);
        let body = serde_json::json!({
            "content": content,
            "allowed_mentions": {"parse": ["users"]},
        });
        let (_, bucket) = self.call(Method::PATCH, &path, Some(&body)).await?;
        Ok(bucket)
    }

    /// `DELETE /webhooks/{id}/{token}/messages/{message}[?thread_id=]`.
    pub(crate) async fn delete_webhook_message(
        &self,
        hook: &Hook,
        thread: Option<u64>,
        message: &str,
    ) -> Result<(), CallError> {
        let path = webhook_message_path(hook, thread, message);
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    /// `GET /channels/{id}/messages?after=&limit=`: up to `limit` messages after `after`,
    /// oldest first (Discord answers newest first; this sorts them).
    pub(crate) async fn messages_after(
        &self,
        channel: u64,
        after: u64,
        limit: u8,
    ) -> Result<Vec<Value>, CallError> {
        let path = format!("/channels/{channel}/messages?after={after}&limit={limit}");
        let (resp, _) = self.call(Method::GET, &path, None).await?;
        let list: Vec<Value> = Self::json(resp, &path).await?;
        let mut keyed: Vec<(u64, Value)> = list
            .into_iter()
            .filter_map(|v| {
                let id = v
                    .get("id")
                    .and_then(Value::as_str)
                    .and_then(wire::Snowflake::parse)?;
                Some((id.0, v))
            })
            .collect();
        keyed.sort_by_key(|(id, _)| *id);
        Ok(keyed.into_iter().map(|(_, v)| v).collect())
    }
}

fn webhook_message_path(hook: &Hook, thread: Option<u64>, message: &str) -> String {
    let mut path = format!(
        "/webhooks/{}/{}/messages/{message}",
        hook.id,
        hook.token.expose()
    );
    if let Some(thread) = thread {
        path.push_str(&format!("?thread_id={thread}"));
    }
    path
}

/// `path` with a webhook's token (`/webhooks/{id}/{token}…`) replaced by `***`.
pub(crate) fn scrub_webhook_path(path: &str) -> String {
    let Some(rest) = path.strip_prefix("/webhooks/") else {
        return path.to_string();
    };
    let mut parts = rest.splitn(3, '/');
    let (Some(id), Some(_token)) = (parts.next(), parts.next()) else {
        return path.to_string();
    };
    match parts.next() {
        Some(tail) => format!("/webhooks/{id}/***/{tail}"),
        None => format!("/webhooks/{id}/***"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_token_never_shows() {
        assert!(format!("{:?}", WebhookToken::new("s3cret")).contains("***"));
        assert_eq!(
            scrub_webhook_path("/webhooks/12/s3cret?wait=true"),
            "/webhooks/12/***"
        );
        assert_eq!(
            scrub_webhook_path("/webhooks/12/s3cret/messages/9"),
            "/webhooks/12/***/messages/9"
        );
        assert_eq!(
            scrub_webhook_path("/channels/1/messages"),
            "/channels/1/messages"
        );
    }

    #[test]
    fn seconds_accepts_fractions_and_refuses_nonsense() {
        assert_eq!(seconds("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(seconds(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(seconds("-1"), None);
        assert_eq!(seconds("NaN"), None);
        assert_eq!(seconds("soon"), None);
        assert_eq!(seconds("1e9"), Some(Duration::from_secs(3600)));
    }
}
