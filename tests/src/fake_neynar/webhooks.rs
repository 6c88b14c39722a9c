//! Neynar's webhooks, sent by the fake: a `cast.created` event for a stored cast, POSTed
//! signed as Neynar signs it (hex HMAC-SHA512 of the body in `X-Neynar-Signature`), or
//! unsigned, or badly signed.

use std::time::Duration;

use axum::http::StatusCode;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha512;

use super::{EPOCH_SECS, FakeNeynar};

impl FakeNeynar {
    /// A `cast.created` event for a stored cast, as Neynar delivers it.
    pub fn cast_created_event(&self, hash: &str) -> Value {
        let cast = self
            .cast_json(hash)
            .unwrap_or_else(|| panic!("no cast {hash} in the fake"));
        json!({"created_at": EPOCH_SECS, "type": "cast.created", "data": cast})
    }

    /// POSTs `event` to `url`, signed with `secret` as Neynar signs it.
    pub async fn deliver_webhook(url: &str, secret: &str, event: &Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        let signature = sign_webhook(secret, &body);
        post_webhook(url, body, Some(signature)).await
    }

    /// POSTs `event` to `url` without `X-Neynar-Signature`.
    pub async fn deliver_unsigned_webhook(url: &str, event: &Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        post_webhook(url, body, None).await
    }

    /// POSTs `event` to `url` with the given (wrong) signature.
    pub async fn deliver_badly_signed_webhook(
        url: &str,
        signature: &str,
        event: &Value,
    ) -> (StatusCode, Value) {
        let body = serde_json::to_vec(event).expect("event JSON");
        post_webhook(url, body, Some(signature.to_string())).await
    }
}

/// The hex HMAC-SHA512 of `body` keyed with `secret`: Neynar's `X-Neynar-Signature`.
pub fn sign_webhook(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha512>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

pub(super) async fn post_webhook(
    url: &str,
    body: Vec<u8>,
    signature: Option<String>,
) -> (StatusCode, Value) {
    let client = crate::http_client()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client");
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(sig) = signature {
        request = request.header("X-Neynar-Signature", sig);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_openssl() {
        // `printf 'what do ya want for nothing?' | openssl dgst -sha512 -hmac Jefe`
        assert!(
            sign_webhook("Jefe", b"what do ya want for nothing?").starts_with("164b7a7bfcf819e2")
        );
    }
}
