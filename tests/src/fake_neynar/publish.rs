//! `POST /v2/farcaster/cast` on the fake Neynar: the bot's casts, checked as Neynar checks
//! them (the signer, the byte limit, the parent, embeds), and `idem`: the same key returns
//! the same cast and records nothing new.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::casts::insert_cast;
use super::{PublishedCast, Refusal, Route, Shared, finish, front, neynar_error};

pub(super) async fn publish(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = publish_inner(&shared, &headers, &body);
    finish(&shared, &method, &uri, &headers, r)
}

pub(super) fn publish_inner(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Response {
    if let Err(r) = front(shared, Route::Publish, headers) {
        return r.response();
    }
    let req = match signed_request(shared, body) {
        Ok(req) => req,
        Err(refused) => return refused.response(),
    };
    let signer = shared.config.signer_uuid.clone();
    let text = req
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let parent = req
        .get("parent")
        .and_then(Value::as_str)
        .map(str::to_string);
    let parent_author_fid = req.get("parent_author_fid").and_then(Value::as_u64);
    let idem = req.get("idem").and_then(Value::as_str).map(str::to_string);
    let bot = shared.config.bot_fid;

    let mut inner = shared.lock();
    if let Some(key) = &idem
        && let Some(hash) = inner.idem.get(key).cloned()
    {
        inner.idem_hits += 1;
        let text = inner
            .casts
            .iter()
            .find(|c| c.hash == hash)
            .map(|c| c.text.clone())
            .unwrap_or_default();
        return cast_answer(&hash, bot, &text);
    }
    if let Err(refused) = check_text(shared, &text) {
        return refused.response();
    }
    let parent_cast = match &parent {
        Some(p) if p.starts_with("0x") => match inner.casts.iter().find(|c| &c.hash == p) {
            Some(c) => Some(c.clone()),
            None => return neynar_error(404, "Parent cast not found", "NotFound", Some("parent")),
        },
        _ => None,
    };
    let hash = insert_cast(
        &mut inner,
        bot,
        text.clone(),
        parent.clone(),
        parent_cast.as_ref(),
        Vec::new(),
    );
    if let Some(key) = &idem {
        inner.idem.insert(key.clone(), hash.clone());
    }
    inner.published.push(PublishedCast {
        hash: hash.clone(),
        text: text.clone(),
        parent,
        parent_author_fid,
        idem,
        signer_uuid: signer,
    });
    let count = inner.published.len();
    drop(inner);
    shared.published.send_replace(count);
    cast_answer(&hash, bot, &text)
}

/// The request's JSON, if it is JSON and signed by the fake's approved signer.
fn signed_request(shared: &Shared, body: &[u8]) -> Result<Value, Refusal> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Err(Refusal::new(
            400,
            "The request body is not valid JSON",
            "InvalidField",
            None,
        ));
    };
    let Some(signer) = req.get("signer_uuid").and_then(Value::as_str) else {
        return Err(Refusal::new(
            400,
            "signer_uuid is required",
            "InvalidField",
            Some("signer_uuid"),
        ));
    };
    if signer != shared.config.signer_uuid {
        return Err(Refusal::new(
            403,
            "Signer not approved or not paired with this API key",
            "SignerNotApproved",
            Some("signer_uuid"),
        ));
    }
    Ok(req)
}

/// A cast's text: not empty, and within the byte limit.
fn check_text(shared: &Shared, text: &str) -> Result<(), Refusal> {
    if text.is_empty() {
        return Err(Refusal::new(
            400,
            "A cast needs text or embeds",
            "InvalidField",
            Some("text"),
        ));
    }
    if text.len() > shared.config.cast_limit {
        return Err(Refusal::new(
            400,
            &format!(
                "Text is too long: {} bytes, the limit is {} bytes",
                text.len(),
                shared.config.cast_limit
            ),
            "InvalidField",
            Some("text"),
        ));
    }
    Ok(())
}

/// Neynar's answer to a published cast.
fn cast_answer(hash: &str, bot: u64, text: &str) -> Response {
    axum::Json(
        json!({"success": true, "cast": {"hash": hash, "author": {"fid": bot}, "text": text}}),
    )
    .into_response()
}
