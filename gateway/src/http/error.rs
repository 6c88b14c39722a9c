//! The API's one error type: every failure is JSON `{error, detail}` with the right status,
//! never a panic page or an HTML body. Internal errors are logged in full and shown briefly.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// A stable, machine-readable code: `not_found`, `bad_request`, `model_unavailable`…
    pub error: &'static str,
    /// What happened and what to do, for a person.
    pub detail: String,
    /// Seconds after which the same request may succeed, sent as `Retry-After` so clients
    /// back off by the standard header rather than by parsing `detail`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            error,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// Adds `Retry-After: secs` (at least 1: zero would invite a busy loop).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", detail)
    }

    pub fn internal(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "internal error while serving a request");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "an internal error occurred; the gateway's log has the details",
        )
    }
}

/// The body of every error response.
#[derive(Debug, Serialize)]
struct ErrorBody {
    error: &'static str,
    detail: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.error,
            detail: self.detail,
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        response
    }
}

impl From<crate::storage::StorageError> for ApiError {
    fn from(e: crate::storage::StorageError) -> Self {
        ApiError::internal(e)
    }
}

/// `axum::Json`, with its rejections (bad JSON, wrong content type, too large) turned into
/// `ApiError`s that say what was wrong.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => {
                let status = rejection.status();
                let code = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                    _ => "bad_request",
                };
                // 422 (valid JSON, wrong shape) is reported as 400 like any other bad body.
                let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
                    StatusCode::BAD_REQUEST
                } else {
                    status
                };
                Err(ApiError::new(status, code, rejection.body_text()))
            }
        }
    }
}

/// The stable code for a status that a framework rejection (a bad query, path or body, a
/// body over its limit) produced without saying more.
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "error",
    }
}

/// The largest error body turned into a `detail`; framework rejections are one line.
const MAX_ERROR_TEXT: usize = 16 * 1024;

/// Makes every error JSON `{error, detail}`: an error response that is not JSON already (a
/// rejection of axum's extractors: `?limit=abc`, a path that is not UTF-8, a body over its
/// limit on any route) gets its text as `detail`. Headers that tell the client what to do
/// (`retry-after`, `allow`, `www-authenticate`) are kept.
pub async fn json_errors(request: Request, next: axum::middleware::Next) -> Response {
    use axum::http::header;
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let detail = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_string()
    } else {
        text
    };
    let mut out = ApiError::new(status, code_for(status), detail).into_response();
    for name in [header::RETRY_AFTER, header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_becomes_the_standard_header_and_is_never_zero() {
        let response = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", "later")
            .retry_after(0)
            .into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], "1");
        let plain = ApiError::bad_request("no").into_response();
        assert!(
            plain
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .is_none()
        );
    }
}
