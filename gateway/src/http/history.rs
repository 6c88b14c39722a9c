//! What the console shows of a room's history beyond each message's text (issue 32;
//! docs/console.md): a transcript marked as one, the images a message carried (served by
//! `image` below from the `media` table, never a link the browser would fetch elsewhere),
//! and the 👍/👎 on the persona's replies.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use troupe_connectors::{AgentId, RoomKey};

use super::AppState;
use super::error::ApiError;
use super::extract::{AgentPath, RoomPath};
use crate::storage::{FeedbackTally, MemoryMessage, Store};

/// One image of a message: its place (for `…/history/{id}/images/{n}`) and type.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageView {
    pub n: usize,
    pub mime: Option<String>,
}

/// The extras of one message in `GET …/memories`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Extras {
    /// A voice note's transcript (its text starts with `[voice, transcribed]`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub transcribed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageView>,
    /// On a persona's reply that has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<FeedbackTally>,
}

/// The extras of a page of a room's messages, looked up once for the page.
pub struct PageExtras {
    images: HashMap<i64, Vec<ImageView>>,
    feedback: HashMap<i64, FeedbackTally>,
}

impl PageExtras {
    pub async fn of(
        store: &Store,
        agent: &AgentId,
        room: &RoomKey,
        messages: &[MemoryMessage],
    ) -> Result<Self, ApiError> {
        let Some(first) = messages.first() else {
            return Ok(Self {
                images: HashMap::new(),
                feedback: HashMap::new(),
            });
        };
        let images = store
            .room_images(agent, room, first.id)
            .await?
            .into_iter()
            .map(|(id, list)| {
                let views = list
                    .into_iter()
                    .enumerate()
                    .map(|(n, i)| ImageView { n, mime: i.mime })
                    .collect();
                (id, views)
            })
            .collect();
        let feedback = store
            .room_feedback(agent, room)
            .await?
            .into_iter()
            .collect();
        Ok(Self { images, feedback })
    }

    /// The extras of message `id` with `text`.
    pub fn take(&mut self, id: i64, text: &str) -> Extras {
        Extras {
            transcribed: text.starts_with(crate::media::voice::HEARD),
            images: self.images.remove(&id).unwrap_or_default(),
            feedback: self.feedback.remove(&id),
        }
    }
}

/// `GET /api/agents/{agent}/rooms/{room}/history/{id}/images/{n}`: the `n`th image of
/// message `id` of the room, as it was stored when posted or fetched from its platform
/// (`media::keep`). The type is the one read from the bytes when stored (PNG, JPEG, GIF or
/// WebP); the response may not be sniffed into anything
/// else, runs no script and loads nothing (`Content-Security-Policy: default-src 'none';
/// sandbox`), and is private to the caller.
pub async fn image(
    State(state): State<AppState>,
    AgentPath(agent): AgentPath,
    RoomPath(room): RoomPath,
    Path(params): Path<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let number = |name: &str| params.get(name).and_then(|s| s.parse::<i64>().ok());
    let (Some(id), Some(n)) = (number("id"), number("n")) else {
        return Err(ApiError::bad_request(
            "the message id and the image number are numbers, as `GET …/memories` lists them",
        ));
    };
    let n = usize::try_from(n).map_err(|_| ApiError::bad_request("no image has that number"))?;
    let Some((mime, bytes)) = state.store.history_image(&agent.id, &room, id, n).await? else {
        return Err(ApiError::not_found(
            "no stored image there: the message has no such image, or its copy is not kept (a \
             platform image the persona never fetched, or one pruned after \
             TROUPE_MEDIA_KEEP_DAYS)",
        ));
    };
    if !matches!(
        mime.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return Err(ApiError::not_found("that stored file is not an image"));
    }
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    let fixed = [
        (header::CONTENT_TYPE, mime.as_str()),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; sandbox",
        ),
        (header::CACHE_CONTROL, "private, max-age=3600"),
        (header::CONTENT_DISPOSITION, "inline"),
    ];
    for (name, value) in fixed {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}
