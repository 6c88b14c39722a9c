//! `POST /api/agents/{agent}/messages` as `multipart/form-data` (issue 32): what a browser
//! form or `curl -F` sends. Text fields are the JSON body's fields by the same names
//! (`text`, `roomId`, `userId`, `userName`, `messageId`, `stream`), so they go through the
//! very same parsing and checks; each file part (`image`, `audio`, or any part with a file name) is
//! one image or audio file, read here up to `TROUPE_MEDIA_MAX_BYTES` and at most `media::MAX_IMAGES`, then
//! checked and stored exactly as a JSON `{data}` image is (http/media.rs). Any other
//! `Content-Type` is read as JSON, as before.

use axum::extract::multipart::{Field, MultipartError};
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::AppState;
use super::error::{ApiError, ApiJson};
use super::media::{PostedImage, refused};
use crate::media::{MAX_IMAGES, MediaError};

/// A message body, JSON or multipart, and the images posted as multipart file parts.
pub struct MessageBody<T> {
    pub body: T,
    pub parts: Vec<PostedImage>,
}

impl<T: DeserializeOwned> FromRequest<AppState> for MessageBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("multipart/form-data")
            });
        if !is_form {
            let ApiJson(body) = ApiJson::<T>::from_request(req, state).await?;
            return Ok(MessageBody {
                body,
                parts: Vec::new(),
            });
        }
        let cap = state.config.agent.media.max_bytes;
        let multipart = Multipart::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        read_form(multipart, cap).await
    }
}

/// Every field of the form: text fields into the JSON object `T` is read from, file parts
/// into images. Stops at the first part over the cap or past the image count.
async fn read_form<T: DeserializeOwned>(
    mut multipart: Multipart,
    cap: usize,
) -> Result<MessageBody<T>, ApiError> {
    let mut fields = Map::new();
    let mut parts = Vec::new();
    while let Some(mut field) = multipart.next_field().await.map_err(form_error)? {
        let name = field.name().unwrap_or("").to_string();
        if name == "image" || name == "audio" || field.file_name().is_some() {
            if parts.len() == MAX_IMAGES {
                return Err(refused(&MediaError::TooMany));
            }
            let mime = field.content_type().map(str::to_string);
            let bytes = read_part(&mut field, cap).await?;
            parts.push(PostedImage::bytes(bytes, mime));
            continue;
        }
        if name == "attachments" {
            return Err(ApiError::bad_request(
                "send images in a multipart body as `image` file parts, not `attachments`",
            ));
        }
        let text = field.text().await.map_err(form_error)?;
        let value = match name.as_str() {
            "stream" => Value::Bool(matches!(text.trim(), "true" | "1" | "on")),
            _ => Value::String(text),
        };
        if fields.insert(name.clone(), value).is_some() {
            return Err(ApiError::bad_request(format!(
                "the multipart field `{name}` is given twice"
            )));
        }
    }
    let body = serde_json::from_value(Value::Object(fields))
        .map_err(|e| ApiError::bad_request(format!("the multipart body: {e}")))?;
    Ok(MessageBody { body, parts })
}

/// One file part's bytes, refused as soon as they pass `cap`.
async fn read_part(field: &mut Field<'_>, cap: usize) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    while let Some(piece) = field.chunk().await.map_err(form_error)? {
        if bytes.len() + piece.len() > cap {
            return Err(refused(&MediaError::TooLarge { cap }));
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

/// A multipart failure as the client should see it: over the body limit is 413.
fn form_error(e: MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the body is larger than this gateway accepts for a message with images \
             (TROUPE_MAX_BODY_BYTES plus TROUPE_MEDIA_MAX_BYTES)",
        )
    } else {
        ApiError::bad_request(format!(
            "the multipart body could not be read: {}",
            e.body_text()
        ))
    }
}
