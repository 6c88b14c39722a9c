//! Voice in (issue 32): a voice note or audio file a message carries is transcribed, and
//! the transcript becomes the message's text, marked `[voice, transcribed] …` in the
//! prompt and in the room's memory, so the persona answers what was said and remembers that
//! it was heard, not read.
//!
//! The audio is fetched by reference when the message is handled, like an image
//! (`super::load`): a platform's file through its connector, a stored file from the `media`
//! table, a link under the fetch policy; always under `TROUPE_MEDIA_MAX_BYTES`. The gateway
//! never decodes audio: the bytes go to the persona's own provider, an OpenAI-compatible
//! `POST {base}/audio/transcriptions` (multipart: `file`, `model`), with the persona's key
//! and `TROUPE_TRANSCRIBE_MODEL` (default `whisper-1`; faster-whisper servers, LocalAI and
//! Groq speak the same API). Only an OpenAI-compatible provider is asked: Anthropic has no
//! such endpoint. The call is bounded by `TROUPE_MODEL_TIMEOUT_SECS` and its answer by
//! [`MAX_TRANSCRIPT_BYTES`].
//!
//! Each transcription is a model call in spend (purpose `transcribe`): admitted by the
//! persona's budgets first, recorded after in audio seconds, the duration the provider
//! reports (`usage` or `duration`) or one estimated from the transcript (`Tokens::audio`),
//! or the tokens a token-billed model reports.
//!
//! A voice note that could not be heard (too large, the provider failed or has no such
//! endpoint, a spend budget reached, `TROUPE_TRANSCRIBE=off`) becomes a line saying so and
//! why, never a failed message: the persona can ask for text instead.

use std::time::Duration;

use troupe_connectors::multipart::{self, Part};
use troupe_connectors::{Attachment, Inbound};

use super::Sources;
use crate::provider::{Target, Vendor};
use crate::spend::{Admission, Meter, ModelRef, Purpose, Tokens, Who};

/// At most this many voice notes or audio files per message are transcribed.
pub const MAX_VOICE: usize = 2;

/// The largest transcription answer read: a transcript of 25 MB of audio is far smaller.
pub const MAX_TRANSCRIPT_BYTES: usize = 256 << 10;

/// The mark a transcript carries in the prompt and in memory.
pub const HEARD: &str = "[voice, transcribed]";

/// Whether an attachment is audio that may be transcribed: it has a reference and says it
/// is audio (its type, or its name's extension when no type came).
pub fn is_voice(a: &Attachment) -> bool {
    if a.url.is_none() {
        return false;
    }
    match a.mime.as_deref() {
        Some(mime) if !mime.ends_with("/*") => mime.to_ascii_lowercase().starts_with("audio/"),
        _ => {
            let name = a.name.to_ascii_lowercase();
            [
                ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".wav", ".webm", ".flac",
            ]
            .iter()
            .any(|ext| name.ends_with(ext))
        }
    }
}

/// The type of audio bytes posted to the API, read from their magic number (as images'
/// are): Ogg (Opus or Vorbis), MP3, WAV, FLAC, WebM, MP4/M4A. `None`: not audio known here.
pub fn sniff_audio(bytes: &[u8]) -> Option<&'static str> {
    let at = |from: usize, magic: &[u8]| bytes.get(from..from + magic.len()) == Some(magic);
    if at(0, b"OggS") {
        Some("audio/ogg")
    } else if at(0, b"ID3") || (bytes.len() > 2 && bytes[0] == 0xff && bytes[1] & 0xe0 == 0xe0) {
        Some("audio/mpeg")
    } else if at(0, b"RIFF") && at(8, b"WAVE") {
        Some("audio/wav")
    } else if at(0, b"fLaC") {
        Some("audio/flac")
    } else if at(0, &[0x1a, 0x45, 0xdf, 0xa3]) {
        Some("audio/webm")
    } else if at(4, b"ftyp") {
        Some("audio/mp4")
    } else {
        None
    }
}

/// The file name extension for an audio type `sniff_audio` gave.
pub fn audio_extension(mime: &str) -> &'static str {
    match mime {
        "audio/ogg" => "ogg",
        "audio/mpeg" => "mp3",
        "audio/wav" => "wav",
        "audio/flac" => "flac",
        "audio/webm" => "webm",
        _ => "m4a",
    }
}

/// How a message's voice notes are heard.
pub struct Hearing<'a> {
    pub sources: &'a Sources<'a>,
    /// The persona's model target (`None`: no provider is configured).
    pub target: Option<Target>,
    /// `TROUPE_TRANSCRIBE`.
    pub on: bool,
    /// `TROUPE_TRANSCRIBE_MODEL`.
    pub model: &'a str,
    /// `TROUPE_MODEL_TIMEOUT_SECS`.
    pub timeout: Duration,
    /// The persona's spend meter: each transcription is admitted and recorded.
    pub meter: Option<&'a Meter>,
}

/// `inbound` with its voice notes heard: a line per voice note appended to its text (the
/// transcript, or why it could not be heard). `None` when it carries no audio, so a
/// message without audio is not copied.
pub async fn hear(inbound: &Inbound, hearing: &Hearing<'_>) -> Option<Inbound> {
    let voices: Vec<&Attachment> = inbound
        .attachments
        .iter()
        .filter(|a| is_voice(a))
        .take(MAX_VOICE)
        .collect();
    if voices.is_empty() {
        return None;
    }
    let mut heard = inbound.clone();
    for a in voices {
        let line = match one(a, inbound, hearing).await {
            Ok(text) => format!("{HEARD} {text}"),
            Err(why) => {
                tracing::warn!(attachment = %a.name, "voice note not heard: {why}");
                format!("[voice note, could not be heard: {why}]")
            }
        };
        if !heard.text.trim().is_empty() {
            heard.text.push('\n');
        }
        heard.text.push_str(&line);
    }
    Some(heard)
}

/// One voice note's transcript; the error is the reason, for the persona (no URL, no key).
async fn one(a: &Attachment, inbound: &Inbound, hearing: &Hearing<'_>) -> Result<String, String> {
    if !hearing.on {
        return Err("transcription is turned off here (TROUPE_TRANSCRIBE=off)".into());
    }
    let target = match &hearing.target {
        Some(t) if t.vendor == Vendor::OpenAi => t,
        _ => return Err("the persona's model provider does not transcribe audio".into()),
    };
    let room = inbound.room.key();
    let who = Who::sender(&room, inbound);
    admit(hearing.meter, who).await?;
    let bytes = super::load::bytes(a, hearing.sources)
        .await
        .map_err(|e| e.to_string().replace("image", "audio"))?;
    let mime = a
        .mime
        .clone()
        .filter(|m| m.starts_with("audio/"))
        .unwrap_or_else(|| "application/octet-stream".into());
    let request = (a.name.as_str(), mime.as_str(), bytes);
    let (text, used) = transcribe(target, hearing.model, hearing.timeout, request).await?;
    if let Some(meter) = hearing.meter {
        let model = ModelRef::new("openai", hearing.model);
        meter.record(who, Purpose::Transcribe, &model, used).await;
    }
    Ok(text)
}

/// Whether the persona's budgets allow one more transcription; the refusal is the reason.
async fn admit(meter: Option<&Meter>, who: Who<'_>) -> Result<(), String> {
    let Some(meter) = meter else {
        return Ok(());
    };
    match meter.admit(who, Purpose::Transcribe).await {
        Ok(Admission::Go) => Ok(()),
        Ok(Admission::Over { scope, .. }) => Err(format!(
            "the persona's spend budget ({}) is reached, so it was not transcribed",
            scope.as_str()
        )),
        Err(error) => {
            tracing::error!(%error, "could not read the spend budgets");
            Err("the spend budgets could not be checked".into())
        }
    }
}

/// The `multipart/form-data` body of a transcription request: `model`, then `file`.
pub fn form(boundary: &str, model: &str, name: &str, mime: &str, bytes: &[u8]) -> Vec<u8> {
    // The name is the sender's: only a safe subset goes into the header.
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    let name = if name.is_empty() {
        "voice.ogg".into()
    } else {
        name
    };
    let parts = [
        Part {
            name: "model",
            filename: None,
            content_type: None,
            body: model.as_bytes(),
        },
        Part {
            name: "file",
            filename: Some(&name),
            content_type: Some(mime),
            body: bytes,
        },
    ];
    multipart::form(boundary, &parts)
}

/// Asks `target`'s `/audio/transcriptions` for the transcript of the file `(name, type,
/// bytes)`, and what the call used.
async fn transcribe(
    target: &Target,
    model: &str,
    timeout: Duration,
    (name, mime, bytes): (&str, &str, Vec<u8>),
) -> Result<(String, Tokens), String> {
    let boundary = multipart::boundary(&bytes);
    let request = provider_request(target, "/audio/transcriptions", timeout)?
        .header(
            reqwest::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form(&boundary, model, name, mime, &bytes));
    let failed = failure("the transcription");
    let mut response = request.send().await.map_err(failed)?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > MAX_TRANSCRIPT_BYTES {
            return Err("the transcription answer was too large".into());
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(format!("the transcription was answered {status}"));
    }
    read_transcript(&body)
}

/// A `POST {base}{path}` to the persona's provider `target`, with its key, bounded by
/// `timeout` (transcription here, speech in `super::speech`).
pub(super) fn provider_request(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<reqwest::RequestBuilder, String> {
    let client = troupe_connectors::tls::http_client()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .build()
        .map_err(|_| "the HTTP client could not be built".to_string())?;
    let url = format!("{}{path}", target.base_url.trim_end_matches('/'));
    let request = client.post(url);
    Ok(match &target.api_key {
        Some(key) => request.bearer_auth(key),
        None => request,
    })
}

/// How a failed request to the provider is told: reqwest's error text names the URL, so
/// only what kind of failure it was.
pub(super) fn failure(what: &'static str) -> impl Fn(reqwest::Error) -> String + Copy {
    move |e: reqwest::Error| {
        if e.is_timeout() {
            format!("{what} timed out")
        } else {
            format!("{what} request failed (network)")
        }
    }
}

/// How a transcription answer reports its use (OpenAI's `usage`: audio seconds for
/// `whisper-1`, tokens for the gpt-4o transcribe models).
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Usage {
    Duration {
        seconds: f64,
    },
    Tokens {
        input_tokens: u32,
        output_tokens: u32,
    },
}

/// The `text` of a transcription answer (`{"text": "…"}`), and what it used: the tokens or
/// seconds of its `usage`, else its `duration` (`verbose_json`, faster-whisper servers),
/// else seconds estimated from the text (`Tokens::audio`). A `usage` not understood is
/// not an error: the text is what matters.
pub fn read_transcript(body: &[u8]) -> Result<(String, Tokens), String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        text: String,
        #[serde(default)]
        usage: Option<serde_json::Value>,
        #[serde(default)]
        duration: Option<f64>,
    }
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|_| "the transcription answer was not understood".to_string())?;
    let text = answer.text.trim();
    if text.is_empty() {
        return Err("nothing was said (an empty transcript)".into());
    }
    let usage = answer.usage.and_then(|u| serde_json::from_value(u).ok());
    let used = match usage {
        Some(Usage::Tokens {
            input_tokens,
            output_tokens,
        }) => Tokens {
            prompt: Some(input_tokens),
            completion: Some(output_tokens),
            ..Tokens::default()
        },
        Some(Usage::Duration { seconds }) => Tokens::audio(Some(seconds), 0),
        None => Tokens::audio(answer.duration, text.chars().count()),
    };
    Ok((text.to_string(), used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, mime: Option<&str>) -> Attachment {
        Attachment {
            name: name.into(),
            mime: mime.map(Into::into),
            size: Some(10),
            url: Some("telegram-file:v".into()),
        }
    }

    #[test]
    fn audio_is_known_by_type_or_by_name() {
        assert!(is_voice(&file("voice.ogg", Some("audio/ogg"))));
        assert!(is_voice(&file("voice.ogg", None)));
        assert!(is_voice(&file("song.mp3", Some("audio/mpeg"))));
        assert!(!is_voice(&file("cat.png", Some("image/png"))));
        assert!(!is_voice(&file("notes.pdf", None)));
        let mut unfetched = file("voice.ogg", Some("audio/ogg"));
        unfetched.url = None;
        assert!(!is_voice(&unfetched));
    }

    #[test]
    fn the_form_carries_the_model_and_the_file_with_a_safe_name() {
        let body = form(
            "B",
            "whisper-1",
            "my \"voice\"\r\n.ogg",
            "audio/ogg",
            b"OggS",
        );
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with("--B\r\n"), "{text}");
        assert!(
            text.contains("name=\"model\"\r\n\r\nwhisper-1\r\n"),
            "{text}"
        );
        assert!(text.contains("filename=\"myvoice.ogg\""), "{text}");
        assert!(
            text.contains("Content-Type: audio/ogg\r\n\r\nOggS\r\n--B--\r\n"),
            "{text}"
        );
    }

    #[test]
    fn audio_is_known_by_its_bytes() {
        assert_eq!(sniff_audio(b"OggS\0\x02rest"), Some("audio/ogg"));
        assert_eq!(sniff_audio(b"ID3\x04"), Some("audio/mpeg"));
        assert_eq!(sniff_audio(b"RIFF\0\0\0\0WAVEfmt "), Some("audio/wav"));
        assert_eq!(sniff_audio(b"\0\0\0\x20ftypM4A "), Some("audio/mp4"));
        assert_eq!(sniff_audio(b"\x89PNG\r\n"), None);
        assert_eq!(sniff_audio(b""), None);
        assert_eq!(audio_extension("audio/mpeg"), "mp3");
    }

    #[test]
    fn a_transcript_is_read_and_a_bad_answer_is_a_reason() {
        let (text, used) = read_transcript(br#"{"text":" hello there "}"#).unwrap();
        assert_eq!(text, "hello there");
        assert_eq!(used, Tokens::audio(None, 11), "estimated from the text");
        assert!(read_transcript(br#"{"text":""}"#).is_err());
        assert!(read_transcript(b"<html>").is_err());
    }

    #[test]
    fn a_transcription_reports_its_seconds_or_its_tokens() {
        let read = |body: &str| read_transcript(body.as_bytes()).unwrap().1;
        let seconds = read(r#"{"text":"hi","usage":{"type":"duration","seconds":9}}"#);
        assert_eq!(seconds.prompt, Some(90));
        let tokens = read(
            r#"{"text":"hi","usage":{"type":"tokens","input_tokens":14,"output_tokens":45,
                "total_tokens":59,"input_token_details":{"text_tokens":0,"audio_tokens":14}}}"#,
        );
        assert_eq!((tokens.prompt, tokens.completion), (Some(14), Some(45)));
        let verbose = read(r#"{"text":"hi","duration":2.5,"language":"english"}"#);
        assert_eq!(verbose.prompt, Some(30));
        let odd = read(r#"{"text":"hi","usage":{"type":"minutes","n":1}}"#);
        assert_eq!(odd, Tokens::audio(None, 2));
    }
}
