//! Images posted to `POST /api/agents/{agent}/messages` (issue 32): each `attachments` entry
//! is a link (`{"url": …}`) or the bytes (`{"data": <base64>, "mime": …}`). They are checked
//! here, before the message is journaled, so a refused image is the caller's clear error and
//! never a message half taken: the limits, the fetch policy and the type read from the bytes
//! are `crate::media`'s. `mime` is the caller's claim and only checked against the bytes.
//! An accepted image is stored by the SHA-256 of its bytes (the `media` table) and the
//! message carries the reference, so neither the journal nor the bus carries the bytes.
//! Audio (Ogg, MP3, WAV, FLAC, WebM, M4A, by its bytes) is taken the same way and stored
//! the same way: the message's voice note, transcribed when it is handled (`media::voice`).

use axum::http::StatusCode;
use serde::Deserialize;
use troupe_connectors::Attachment;

use super::error::ApiError;
use crate::config::{Config, MediaSettings, Vision};
use crate::fetch::Fetcher;
use crate::media::{self, MediaError};
use crate::storage::Store;

/// The body `POST /messages` may have: `TROUPE_MAX_BODY_BYTES`, plus one image of
/// `TROUPE_MEDIA_MAX_BYTES` in base64 (four characters for three bytes). Several inline images
/// share that room; a link has its own cap each.
pub fn body_limit(config: &Config) -> usize {
    let media = config.agent.media.max_bytes.div_ceil(3).saturating_mul(4);
    config.limits.max_body_bytes.saturating_add(media)
}

/// One posted image.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostedImage {
    url: Option<String>,
    data: Option<String>,
    mime: Option<String>,
    /// A multipart file part's bytes (http/media_form.rs); never in JSON.
    #[serde(skip)]
    bytes: Option<Vec<u8>>,
}

impl PostedImage {
    /// A multipart file part, `mime` its part's `Content-Type` (a claim, as in JSON).
    pub fn bytes(bytes: Vec<u8>, mime: Option<String>) -> Self {
        // `application/octet-stream` is what a client says when it does not know.
        let mime = mime.filter(|m| m.trim() != "application/octet-stream");
        PostedImage {
            url: None,
            data: None,
            mime,
            bytes: Some(bytes),
        }
    }
}

/// The posted images as the message's attachments, or the first refusal.
pub async fn accept(
    config: &Config,
    store: &Store,
    posted: Vec<PostedImage>,
) -> Result<Vec<Attachment>, ApiError> {
    let settings = &config.agent.media;
    if posted.len() > media::MAX_IMAGES {
        return Err(refused(&MediaError::TooMany));
    }
    let cap = settings.max_bytes;
    let fetcher = Fetcher::new(&config.knowledge.fetch);
    let mut out = Vec::with_capacity(posted.len());
    for (i, image) in posted.into_iter().enumerate() {
        let n = i + 1;
        // A link is an image: with images off it is refused before anything is fetched.
        if image.url.is_some() && settings.vision == Vision::Off {
            return Err(refused(&MediaError::Off));
        }
        let bytes = match (image.url, image.data, image.bytes) {
            (Some(url), None, None) => media::fetch_image(&fetcher, &url, cap).await,
            (None, Some(data), None) => media::decode_data(&data, cap),
            (None, None, Some(bytes)) => Ok(bytes),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "`attachments[{i}]` must have either `url` or `data`"
                )));
            }
        }
        .map_err(|e| refused(&e))?;
        let (mime, audio) = kind_of(&bytes, i, settings)?;
        if let Some(claimed) = image.mime
            && claimed.trim() != mime
        {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "media_refused",
                format!("`attachments[{i}]` says `{claimed}` but its bytes are {mime}"),
            ));
        }
        let (reference, key) = media::reference(&bytes);
        store.media_put(&key, mime, &bytes).await.map_err(|e| {
            tracing::error!(error = %e, "storing a posted image failed");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the image could not be stored; try again".to_string(),
            )
        })?;
        let mut attachment = media::stored_attachment(n, mime, bytes.len(), reference);
        if audio {
            attachment.name = format!("audio-{n}.{}", media::voice::audio_extension(mime));
        }
        out.push(attachment);
    }
    if !out.is_empty() {
        media::keep::prune_now_and_then(store, settings.keep_days);
    }
    Ok(out)
}

/// The type of posted bytes, read from them, and whether they are audio: an image (unless
/// `TROUPE_VISION=off`), or audio, a voice note to transcribe (issue 32; unless
/// `TROUPE_TRANSCRIBE=off`).
fn kind_of(
    bytes: &[u8],
    i: usize,
    settings: &MediaSettings,
) -> Result<(&'static str, bool), ApiError> {
    let cap = settings.max_bytes;
    let audio = match media::check(bytes, cap) {
        Err(MediaError::NotAnImage) => media::voice::sniff_audio(bytes),
        _ => None,
    };
    match audio {
        Some(mime) if !settings.transcribe => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "media_refused",
            format!(
                "`attachments[{i}]` is {mime}, and audio is not transcribed here (TROUPE_TRANSCRIBE=off)"
            ),
        )),
        Some(mime) => Ok((mime, true)),
        None if settings.vision == Vision::Off => Err(refused(&MediaError::Off)),
        None => Ok((media::check(bytes, cap).map_err(|e| refused(&e))?, false)),
    }
}

/// A refusal: 413 for a size, 422 otherwise, with the reason.
pub(super) fn refused(e: &MediaError) -> ApiError {
    let status = match e {
        MediaError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, "media_refused", e.to_string())
}
