//! Voice out on Discord (issue 32): a voice note is answered with a Discord voice message,
//! as Discord documents one (Messages resource, "Voice Messages"): a message flagged
//! `IS_VOICE_MESSAGE` (1 << 13) with a single audio attachment that carries
//! `duration_secs` and `waveform`, and no content. The reply's text follows as the usual
//! message (`send`), as on Telegram.
//!
//! How it is uploaded: `POST /channels/{id}/messages` as `multipart/form-data`, the file in
//! `files[0]` (`voice-message.ogg`, `audio/ogg`) and the JSON in `payload_json`, with
//! `attachments: [{id: 0, filename, duration_secs, waveform}]`. That is the upload Discord
//! documents ("Uploading Files") and its OpenAPI spec describes (`MessageAttachmentRequest`
//! has `duration_secs` and `waveform`). Discord's clients use another flow (`POST
//! /channels/{id}/attachments` for an upload URL, then `uploaded_filename`), which neither
//! the documentation nor the spec describes, so it is not used. serenity 0.12's
//! `CreateAttachment` has no `duration_secs` or `waveform`, so the request goes through the
//! connector's own client ([`Rest`]), like every other REST call here.
//!
//! - `duration_secs`: from the Ogg pages' headers, read by the gateway (`VoiceNote`).
//! - `waveform`: base64 of at most 256 bytes, drawn from the Ogg pages without decoding
//!   ([`waveform`]).
//! - A native reply to the voice note (`message_reference`, `fail_if_not_exists: false`)
//!   that pings no one (`allowed_mentions` empty, `replied_user: false`): the text that
//!   follows pings the person once, as any reply does.
//! - A nonce from the voice note's id with `enforce_nonce`, so a voice message said again
//!   within Discord's nonce window (a retry, a restart) is not posted twice.
//! - Paced like a message, in the channel's turn (`pace`); a 429 holds the channel back for
//!   its `retry_after` but is not waited out: the voice message is best effort, the text is
//!   what must arrive.

use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};

use super::DiscordConnector;
use super::rest::{CallError, Rest};
use super::send::{channel_of, nonce};
use super::waveform::waveform;
use super::wire::{self, Snowflake};
use crate::connector::{ConnectorError, VoiceNote};
use crate::model::MessageId;
use crate::multipart::{self, Part, boundary};

/// The message flag of a voice message.
pub(crate) const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// The file's name, as Discord's own clients name a voice message.
const FILE_NAME: &str = "voice-message.ogg";

/// The `payload_json` of the voice message answering `note` in `channel`.
fn payload(note: &VoiceNote, channel: u64) -> Value {
    let wave = base64::engine::general_purpose::STANDARD.encode(waveform(&note.audio));
    let mut body = json!({
        "flags": IS_VOICE_MESSAGE,
        "attachments": [{
            "id": 0,
            "filename": FILE_NAME,
            "duration_secs": note.duration.as_secs_f64(),
            "waveform": wave,
        }],
        "allowed_mentions": {"parse": [], "replied_user": false},
    });
    if let Some(to) = note
        .reply_to
        .as_ref()
        .and_then(|m| Snowflake::parse(m.as_str()))
    {
        body["message_reference"] = json!({
            "message_id": to.to_string(),
            "channel_id": channel.to_string(),
            "fail_if_not_exists": false,
        });
        body["nonce"] = json!(nonce(&format!("voice:{channel}:{to}"), 0));
        body["enforce_nonce"] = json!(true);
    }
    body
}

/// The `multipart/form-data` body: `payload_json`, then `files[0]`.
fn form(boundary: &str, payload: &Value, audio: &[u8]) -> Vec<u8> {
    let payload = payload.to_string();
    let parts = [
        Part {
            name: "payload_json",
            filename: None,
            content_type: Some("application/json"),
            body: payload.as_bytes(),
        },
        Part {
            name: "files[0]",
            filename: Some(FILE_NAME),
            content_type: Some("audio/ogg"),
            body: audio,
        },
    ];
    multipart::form(boundary, &parts)
}

impl Rest {
    /// `POST /channels/{id}/messages` with one file, as `multipart/form-data`.
    async fn create_with_file(
        &self,
        channel: u64,
        payload: &Value,
        audio: &[u8],
    ) -> Result<(wire::Message, super::rest::Bucket), CallError> {
        let path = format!("/channels/{channel}/messages");
        let boundary = boundary(audio);
        let request = self
            .request(Method::POST, &path)
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(form(&boundary, payload, audio));
        let (resp, bucket) = self.answer(request, Method::POST, &path).await?;
        Ok((Rest::json(resp, &path).await?, bucket))
    }
}

impl DiscordConnector {
    /// Sends `note` as a voice message, in the channel's turn; its message id.
    pub(super) async fn deliver_voice(
        &self,
        note: &VoiceNote,
    ) -> Result<MessageId, ConnectorError> {
        let channel = channel_of(&note.room)?;
        let payload = payload(note, channel);
        let lock = self.channel_lock(channel);
        let _turn = lock.lock().await;
        self.pacer.wait_turn(channel).await;
        match self
            .rest
            .create_with_file(channel, &payload, &note.audio)
            .await
        {
            Ok((message, bucket)) => {
                if let Some(wait) = bucket.exhausted_for {
                    self.pacer.hold(channel, wait);
                }
                Ok(MessageId::new(message.id))
            }
            Err(CallError::RateLimited { retry_after, .. }) => {
                self.pacer.hold(channel, retry_after);
                Err(ConnectorError::RateLimited { retry_after })
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{Platform, RoomId, RoomRef};

    fn note(audio: Vec<u8>) -> VoiceNote {
        VoiceNote {
            room: RoomRef::new(Platform::Discord, RoomId::new("41")),
            reply_to: Some(MessageId::new("55")),
            audio,
            duration: Duration::from_millis(2_500),
        }
    }

    #[test]
    fn the_payload_is_a_voice_message_replying_without_content() {
        let p = payload(&note(b"OggS".to_vec()), 41);
        assert_eq!(p["flags"], 8192);
        assert!(p.get("content").is_none(), "a voice message has no content");
        let a = &p["attachments"][0];
        assert_eq!(a["id"], 0);
        assert_eq!(a["filename"], "voice-message.ogg");
        assert_eq!(a["duration_secs"], 2.5);
        let wave = base64::engine::general_purpose::STANDARD
            .decode(a["waveform"].as_str().unwrap())
            .unwrap();
        assert!((1..=256).contains(&wave.len()));
        assert_eq!(p["message_reference"]["message_id"], "55");
        assert_eq!(p["message_reference"]["fail_if_not_exists"], false);
        assert_eq!(p["allowed_mentions"]["replied_user"], false);
        assert_eq!(p["enforce_nonce"], true);
        assert!(p["nonce"].as_str().unwrap().len() <= 25);
    }

    #[test]
    fn the_boundary_is_never_in_the_audio() {
        // Audio holding the very boundary its length would give first.
        let mut hostile = b"OggS....".to_vec();
        hostile.extend_from_slice(format!("troupe-voice-{:016x}", 8 + 29).as_bytes());
        assert_eq!(hostile.len(), 37);
        let other = boundary(&hostile);
        assert!(!String::from_utf8_lossy(&hostile).contains(&other));
        let body = form(&other, &json!({"flags": 8192}), &hostile);
        let text = String::from_utf8_lossy(&body);
        assert_eq!(text.matches(&format!("--{other}")).count(), 3);
        assert!(text.contains("name=\"files[0]\"; filename=\"voice-message.ogg\""));
        assert!(text.contains("Content-Type: audio/ogg"));
    }
}
