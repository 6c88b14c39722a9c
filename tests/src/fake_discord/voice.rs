//! Messages with files on the fake Discord (issue 32, voice out), as Discord documents them
//! (Messages resource: "Create Message", "Voice Messages"; Reference: "Uploading Files";
//! specs/discord-openapi.json `MessageCreateRequest`, `MessageAttachmentRequest`):
//!
//! - `POST /channels/{id}/messages` as `multipart/form-data`: a `payload_json` part (the JSON
//!   body) and `files[n]` parts, each with a `filename` in its `Content-Disposition`; each
//!   `attachments[]` entry names its file by `id` = `n`.
//! - `flags`: only SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS, IS_VOICE_MESSAGE and
//!   IS_COMPONENTS_V2 may be set (else 400, 50035 Invalid Form Body).
//! - A voice message (IS_VOICE_MESSAGE, 1 << 13): no content, embeds, stickers, components
//!   or poll (400, 50159 "Voice messages do not support additional content"); exactly one
//!   file, typed `audio/*` (400, 50160 "… must have a single audio attachment"); its
//!   attachment entry with `duration_secs` (a number, at least 0) and `waveform` (base64,
//!   at most 400 characters, the spec's limit) (400, 50161 "… must have supporting
//!   metadata"). A voice message cannot be edited (`PATCH`: 400, 50162).
//! - Scripted 429s and refusals (`script_429`, `refuse_next_send`) and `nonce` with
//!   `enforce_nonce` hold as for any message create. The message is answered as Discord
//!   answers it (flags, the attachment with its CDN `url`, `duration_secs`, `waveform`),
//!   kept in the channel and dispatched as MESSAGE_CREATE; the file is served by the fake
//!   CDN. Each accepted upload is recorded as an [`Upload`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Multipart};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::messages::nonce_of;
use super::{FakeBot, FakeDiscord, Inner, RequestRecord, Shared, discord_error, with_bucket};
use crate::wait;

/// The message flag of a voice message.
pub const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// The flags a message create may set: SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS,
/// IS_VOICE_MESSAGE, IS_COMPONENTS_V2.
const SETTABLE_FLAGS: u64 = (1 << 2) | (1 << 12) | IS_VOICE_MESSAGE | (1 << 15);

/// A message with a file that the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub id: String,
    pub channel: String,
    /// The user id of the bot that sent it.
    pub author_id: String,
    pub flags: u64,
    /// `content` of the payload ("" when none).
    pub content: String,
    /// `message_reference.message_id`, when it was a reply.
    pub reply_to: Option<String>,
    /// `allowed_mentions.replied_user` as sent.
    pub replied_user: Option<bool>,
    /// The file's name, as its part's `Content-Disposition` gave it.
    pub filename: String,
    /// The file's part's `Content-Type`.
    pub content_type: Option<String>,
    /// The file's bytes, as received.
    pub bytes: Vec<u8>,
    /// The attachment entry's `duration_secs`.
    pub duration_secs: Option<f64>,
    /// The attachment entry's `waveform`, decoded.
    pub waveform: Option<Vec<u8>>,
}

impl Upload {
    pub fn is_voice_message(&self) -> bool {
        self.flags & IS_VOICE_MESSAGE != 0
    }
}

/// One `files[n]` part.
struct FilePart {
    index: u64,
    filename: String,
    content_type: Option<String>,
    bytes: Vec<u8>,
}

pub(super) fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// The parts of the body: `payload_json` (`{}` when absent) and the files.
async fn parts(
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Result<(Value, Vec<FilePart>), &'static str> {
    let mut request = axum::http::Request::new(axum::body::Body::from(body));
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, ct.clone());
    }
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|_| "bad multipart body")?;
    let mut payload = json!({});
    let mut files = Vec::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|_| "bad multipart field")?
    {
        let name = field.name().unwrap_or_default().to_string();
        if name == "payload_json" {
            let text = field.text().await.map_err(|_| "unreadable payload_json")?;
            payload = serde_json::from_str(&text).map_err(|_| "payload_json is not JSON")?;
            continue;
        }
        let index = name
            .strip_prefix("files[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok());
        let (Some(index), Some(filename)) = (index, field.file_name().map(str::to_string)) else {
            return Err("a file part must be named files[n] and have a filename");
        };
        let content_type = field.content_type().map(str::to_string);
        let bytes = field.bytes().await.map_err(|_| "unreadable file")?.to_vec();
        files.push(FilePart {
            index,
            filename,
            content_type,
            bytes,
        });
    }
    Ok((payload, files))
}

/// What Discord would refuse in a voice message, as its error code and message.
fn voice_refusal(payload: &Value, files: &[FilePart]) -> Option<(u64, &'static str)> {
    let extra = payload["content"].as_str().is_some_and(|c| !c.is_empty())
        || ["embeds", "sticker_ids", "components"]
            .iter()
            .any(|k| payload[*k].as_array().is_some_and(|a| !a.is_empty()))
        || !payload["poll"].is_null();
    if extra {
        return Some((50159, "Voice messages do not support additional content."));
    }
    let audio = files.len() == 1
        && files[0]
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("audio/"));
    if !audio {
        return Some((50160, "Voice messages must have a single audio attachment."));
    }
    let entry = attachment_entry(payload, files[0].index);
    let duration_ok = entry
        .and_then(|e| e["duration_secs"].as_f64())
        .is_some_and(|d| d >= 0.0);
    let waveform_ok = entry
        .and_then(|e| e["waveform"].as_str())
        .is_some_and(|w| w.len() <= 400 && decode(w).is_some());
    if !duration_ok || !waveform_ok {
        return Some((50161, "Voice messages must have supporting metadata."));
    }
    None
}

/// The `attachments[]` entry whose `id` is `index` (a number or a string).
fn attachment_entry(payload: &Value, index: u64) -> Option<&Value> {
    payload["attachments"].as_array()?.iter().find(|a| {
        a["id"].as_u64() == Some(index) || a["id"].as_str() == Some(index.to_string().as_str())
    })
}

fn decode(waveform: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(waveform)
        .ok()
}

/// `POST /channels/{id}/messages` with files (see the module doc).
pub(super) async fn create_with_files(
    shared: &Arc<Shared>,
    channel: &str,
    sender: &FakeBot,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/channels/{channel}/messages");
    let refuse = |code: u64, message: &str| {
        shared.lock().requests.push(RequestRecord {
            method: "POST",
            path: path.clone(),
            status: 400,
            authorized: true,
        });
        discord_error(StatusCode::BAD_REQUEST, code, message)
    };
    let (payload, files) = match parts(headers, body).await {
        Ok(parts) => parts,
        Err(why) => return refuse(50035, why),
    };
    let flags = payload["flags"].as_u64().unwrap_or(0);
    if flags & !SETTABLE_FLAGS != 0 || files.is_empty() {
        return refuse(50035, "Invalid Form Body");
    }
    if flags & IS_VOICE_MESSAGE != 0
        && let Some((code, message)) = voice_refusal(&payload, &files)
    {
        return refuse(code, message);
    }
    let origin = cdn_origin(shared);
    let mut inner = shared.lock();
    if let Some(refused) = inner.scripted_refusal(&path) {
        return refused;
    }
    if let Some(existing) = inner.repeated_nonce(channel, &payload, &path) {
        return with_bucket(StatusCode::OK, existing);
    }
    let reply_to = payload["message_reference"]["message_id"]
        .as_str()
        .map(str::to_string);
    let mut message = inner.new_message(channel, sender, reply_to.as_deref());
    let file = &files[0];
    let entry = attachment_entry(&payload, file.index)
        .cloned()
        .unwrap_or(Value::Null);
    let id = message["id"].as_str().unwrap_or_default().to_string();
    message["attachments"] = json!([attachment(&mut inner, &origin, channel, &id, file, &entry)]);
    message["flags"] = json!(flags);
    let content = payload["content"].as_str().unwrap_or_default().to_string();
    message["content"] = json!(content);
    let nonce = nonce_of(&payload);
    inner.publish(channel, sender, &mut message, nonce.as_deref());
    inner.uploads.push(Upload {
        id,
        channel: channel.to_string(),
        author_id: sender.id.clone(),
        flags,
        content,
        reply_to,
        replied_user: payload["allowed_mentions"]["replied_user"].as_bool(),
        filename: file.filename.clone(),
        content_type: file.content_type.clone(),
        bytes: file.bytes.clone(),
        duration_secs: entry["duration_secs"].as_f64(),
        waveform: entry["waveform"].as_str().and_then(decode),
    });
    inner.requests.push(RequestRecord {
        method: "POST",
        path,
        status: 200,
        authorized: true,
    });
    drop(inner);
    shared.sent.send_modify(|_| {});
    with_bucket(StatusCode::OK, message)
}

/// Where the fake serves attachments: its own HTTP origin.
fn cdn_origin(shared: &Shared) -> String {
    shared
        .ws_url
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace("ws://", "http://")
        .replace("/gateway-ws", "")
}

/// The attachment of `file` to message `id`, as Discord shows it (with the duration and
/// waveform a voice message was sent with); the fake's CDN serves its bytes from now on.
fn attachment(
    inner: &mut Inner,
    origin: &str,
    channel: &str,
    id: &str,
    file: &FilePart,
    entry: &Value,
) -> Value {
    let cdn_path = format!("{channel}/{id}/{}", file.filename);
    let url = format!("{origin}/attachments/{cdn_path}?ex=6a1b2c3d&hm=0f1e2d3c");
    inner.cdn.insert(cdn_path, file.bytes.clone());
    let mut attachment = json!({
        "id": format!("7{:017}", inner.uploads.len() + 1),
        "filename": file.filename, "size": file.bytes.len(), "url": url, "proxy_url": url,
        "content_type": file.content_type,
    });
    for key in ["duration_secs", "waveform"] {
        if !entry[key].is_null() {
            attachment[key] = entry[key].clone();
        }
    }
    attachment
}

impl FakeDiscord {
    /// Every message with a file the fake accepted, in order.
    pub fn uploads(&self) -> Vec<Upload> {
        self.shared.lock().uploads.clone()
    }

    /// Waits until the bot has sent at least `n` voice messages; returns them all.
    pub async fn try_wait_for_voice_messages(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Upload>, String> {
        wait::until_or_report(
            self,
            self.shared.sent.subscribe(),
            timeout,
            format!("the fake Discord to get {n} voice message(s)"),
            || {
                let voices: Vec<Upload> = self
                    .shared
                    .lock()
                    .uploads
                    .iter()
                    .filter(|u| u.is_voice_message())
                    .cloned()
                    .collect();
                (voices.len() >= n).then_some(voices)
            },
        )
        .await
    }
}
