//! OpenAI's error shape on the `/v1` routes: `{"error": {"message", "type", "param",
//! "code"}}`, with the status codes its SDKs turn into their exceptions (401
//! `AuthenticationError`, 404 `NotFoundError`, 429 `RateLimitError`…).
//!
//! Every handler and guard of the gateway answers with [`ApiError`] (`{error, detail}`);
//! this layer rewrites what comes back on `/v1`, so the token check, the API's budget per
//! caller and the body limits keep one implementation each and still speak OpenAI here.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::http::error::ApiError;

/// The largest error body read back to be reshaped: errors are one line.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// Reshapes every error answer into OpenAI's, keeping its status and headers.
pub(super) async fn openai_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // The body is written anew below.
    parts.headers.remove(header::CONTENT_LENGTH);
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    let (code, message) = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) if v["error"].is_object() => return (parts, axum::Json(v)).into_response(),
        Ok(v) => (
            v["error"].as_str().map(str::to_string),
            v["detail"].as_str().map(str::to_string),
        ),
        Err(_) => (None, None),
    };
    let message = message
        .or_else(|| {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            (!text.is_empty()).then_some(text)
        })
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    let body = json!({"error": {
        "message": message,
        "type": kind(status),
        "param": null,
        "code": openai_code(status, code.as_deref()),
    }});
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    (parts, axum::Json(body)).into_response()
}

/// An `ApiError` in OpenAI's shape, for an error sent inside a stream that already began.
pub(super) fn openai_error_value(error: &ApiError) -> Value {
    json!({"error": {
        "message": error.detail,
        "type": kind(error.status),
        "param": null,
        "code": openai_code(error.status, Some(error.error)),
    }})
}

/// OpenAI's `type` for a status.
fn kind(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "invalid_request_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        s if s.is_client_error() => "invalid_request_error",
        _ => "server_error",
    }
}

/// OpenAI's `code` where it has one for the case (`invalid_api_key`, `model_not_found`),
/// else troupe's own stable code.
fn openai_code(status: StatusCode, code: Option<&str>) -> Value {
    match (status, code) {
        (StatusCode::UNAUTHORIZED, _) => json!("invalid_api_key"),
        (_, Some(code)) => json!(code),
        (_, None) => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::error::ApiError;
    use axum::Router;
    use axum::routing::get;
    use tower::ServiceExt;

    async fn answer(error: fn() -> ApiError) -> (StatusCode, Value, Option<HeaderValue>) {
        let app = Router::new()
            .route("/", get(move || async move { error() }))
            .layer(axum::middleware::from_fn(openai_errors));
        let response = app
            .oneshot(
                axum::http::Request::builder()
                    .uri("/")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let retry = response.headers().get(header::RETRY_AFTER).cloned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap(), retry)
    }

    #[tokio::test]
    async fn api_errors_become_openais_shape_with_their_status_and_headers() {
        let (status, body, _) =
            answer(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "needs a token"))
                .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["type"], "authentication_error");
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert_eq!(body["error"]["message"], "needs a token");
        let (status, body, retry) = answer(|| {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_exhausted", "later").retry_after(9)
        })
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body["error"]["code"], "budget_exhausted");
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(retry.unwrap(), "9");
    }
}
