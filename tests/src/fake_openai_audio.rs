//! The fake OpenAI's audio route (issue 32, voice in): `POST /v1/audio/transcriptions` as
//! OpenAI documents it (multipart `file` and `model`, answered
//! `{"text": "…"}`). It answers a scripted transcript, or a scripted error status, and
//! records each request (the model, the file's name, size, bytes and content type, the
//! bearer key) so a test can check what the gateway sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

/// What the fake saw of one transcription request.
#[derive(Debug, Clone, Default)]
pub struct TranscriptionRecord {
    pub model: Option<String>,
    pub file_name: Option<String>,
    pub content_type: Option<String>,
    pub file: Vec<u8>,
    /// The `Authorization` header's bearer key.
    pub api_key: Option<String>,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Heard {
    Text(String),
    Status(u16),
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Heard>,
    seen: Vec<TranscriptionRecord>,
}

/// The audio route's state: shared by the fake and its router.
#[derive(Clone, Default)]
pub struct FakeAudio {
    inner: Arc<Mutex<Inner>>,
}

/// What is answered when nothing is scripted.
pub const DEFAULT_TRANSCRIPT: &str = "this is what the voice note said";

impl FakeAudio {
    /// Queues the answer to the next transcription request.
    pub fn push(&self, heard: Heard) {
        self.lock().script.push_back(heard);
    }

    /// Every transcription request so far, in order.
    pub fn requests(&self) -> Vec<TranscriptionRecord> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The route, for `FakeOpenAi`'s router.
pub fn router(audio: FakeAudio) -> Router {
    Router::new()
        .route("/v1/audio/transcriptions", post(transcriptions))
        .with_state(audio)
}

async fn transcriptions(
    State(audio): State<FakeAudio>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    let mut record = TranscriptionRecord {
        api_key: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string),
        ..TranscriptionRecord::default()
    };
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return error(400, &format!("bad multipart body: {e}")),
        };
        match field.name() {
            Some("model") => record.model = field.text().await.ok(),
            Some("file") => {
                record.file_name = field.file_name().map(str::to_string);
                record.content_type = field.content_type().map(str::to_string);
                record.file = field.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            }
            _ => {}
        }
    }
    if record.model.is_none() || record.file.is_empty() {
        return error(400, "you must provide a model and a file");
    }
    let answer = {
        let mut inner = audio.lock();
        inner.seen.push(record);
        inner.script.pop_front()
    };
    match answer.unwrap_or_else(|| Heard::Text(DEFAULT_TRANSCRIPT.into())) {
        Heard::Text(text) => Json(json!({ "text": text })).into_response(),
        Heard::Status(status) => error(status, "scripted failure"),
    }
}

fn error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    (status, Json(body)).into_response()
}
