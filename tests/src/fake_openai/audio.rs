//! The fake OpenAI's audio routes (issue 32), as OpenAI documents them:
//!
//! - voice in, `POST /v1/audio/transcriptions` (multipart `file` and `model`, answered
//!   `{"text": "…"}`, with `"usage": {"type": "duration", "seconds": …}` as `whisper-1`
//!   reports it when the script gives the seconds): a scripted transcript, or a scripted
//!   error status; each request is recorded (the model, the file's name, size, bytes and
//!   content type, the bearer key).
//! - voice out, `POST /v1/audio/speech` (JSON `model`, `input`, `voice`, `response_format`,
//!   answered with the audio bytes): [`speech_ogg`] (a small Ogg Opus file, two seconds by
//!   its pages) or a scripted error status; each request is recorded.

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
    /// A transcript and the audio's duration in seconds, reported in `usage`.
    Timed(String, f64),
    Status(u16),
}

/// What the fake saw of one speech request.
#[derive(Debug, Clone, Default)]
pub struct SpeechRecord {
    pub model: Option<String>,
    pub input: Option<String>,
    pub voice: Option<String>,
    pub response_format: Option<String>,
    pub api_key: Option<String>,
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Heard>,
    seen: Vec<TranscriptionRecord>,
    /// Scripted speech error statuses, one per request.
    speech_failures: VecDeque<u16>,
    spoken: Vec<SpeechRecord>,
}

/// The audio `/v1/audio/speech` answers: a minimal Ogg Opus stream (an `OpusHead` page, an
/// `OpusTags` page, one audio page) whose last granule position says two seconds.
pub fn speech_ogg() -> Vec<u8> {
    fn page(granule: u64, sequence: u32, body: &[u8]) -> Vec<u8> {
        let mut p = b"OggS\0".to_vec();
        p.push(if sequence == 0 { 2 } else { 0 });
        p.extend_from_slice(&granule.to_le_bytes());
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(&sequence.to_le_bytes());
        p.extend_from_slice(&[0; 4]);
        p.push(1);
        p.push(u8::try_from(body.len()).unwrap_or(u8::MAX));
        p.extend_from_slice(body);
        p
    }
    let mut head = b"OpusHead\x01\x01".to_vec();
    head.extend_from_slice(&312u16.to_le_bytes());
    head.extend_from_slice(&48_000u32.to_le_bytes());
    head.extend_from_slice(&[0, 0, 0]);
    let mut ogg = page(0, 0, &head);
    ogg.extend(page(0, 1, b"OpusTags\x05\0\0\0fake0\0\0\0\0"));
    ogg.extend(page(2 * 48_000 + 312, 2, &[0xfc, 0xff, 0xfe]));
    ogg
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

    /// Every speech request so far, in order.
    pub fn speech_requests(&self) -> Vec<SpeechRecord> {
        self.lock().spoken.clone()
    }

    /// The next speech request is answered `status`.
    pub fn fail_next_speech(&self, status: u16) {
        self.lock().speech_failures.push_back(status);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The route, for `FakeOpenAi`'s router.
pub fn router(audio: FakeAudio) -> Router {
    Router::new()
        .route("/v1/audio/transcriptions", post(transcriptions))
        .route("/v1/audio/speech", post(speech))
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
        Heard::Timed(text, seconds) => Json(json!({
            "text": text,
            "usage": {"type": "duration", "seconds": seconds}
        }))
        .into_response(),
        Heard::Status(status) => error(status, "scripted failure"),
    }
}

async fn speech(
    State(audio): State<FakeAudio>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return error(400, "We could not parse the JSON body of your request.");
    };
    let field = |k: &str| request.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let record = SpeechRecord {
        model: field("model"),
        input: field("input"),
        voice: field("voice"),
        response_format: field("response_format"),
        api_key: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string),
    };
    if record.model.is_none() || record.voice.is_none() {
        return error(400, "you must provide a model and a voice");
    }
    if record
        .input
        .as_deref()
        .is_none_or(|i| i.chars().count() > 4096)
    {
        return error(400, "input must be a string of at most 4096 characters");
    }
    let failure = {
        let mut inner = audio.lock();
        inner.spoken.push(record);
        inner.speech_failures.pop_front()
    };
    if let Some(status) = failure {
        return error(status, "scripted failure");
    }
    (
        [(axum::http::header::CONTENT_TYPE, "audio/ogg")],
        speech_ogg(),
    )
        .into_response()
}

fn error(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    (status, Json(body)).into_response()
}
