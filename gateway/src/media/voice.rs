//! Voice in (issue 32): a voice note or audio file a message carries is transcribed, and
//! the transcript becomes the message's text, marked `[voice, transcribed] …` in the
//! prompt and in the room's memory, so the persona answers what was said and remembers that
//! it was heard, not read.
//!
//! The audio is fetched by reference when the message is handled, like an image
//! (`super::load`): a platform's file through its connector, a stored file from the `media`
//! table, a link under the fetch policy; always under `TROUPE_MEDIA_MAX_BYTES`. The gateway
//! never decodes audio: the bytes go to the persona's own provider in one model call
//! (`provider::Parts::Audio`; `provider/audio.rs` is the OpenAI-compatible
//! `/audio/transcriptions` it becomes), with `TROUPE_TRANSCRIBE_MODEL` (default
//! `whisper-1`). Only a provider that has the endpoint is asked (`Feature::Audio`):
//! Anthropic and Ollama have none.
//!
//! Each transcription is a model call in spend (purpose `transcribe`): admitted by the
//! persona's budgets first (here, before its audio is fetched), recorded by the call in
//! audio seconds, the duration the provider reports (`usage` or `duration`) or one
//! estimated from the transcript (`Tokens::audio`), or the tokens a token-billed model
//! reports.
//!
//! A voice note that could not be heard (too large, the provider failed or has no such
//! endpoint, a spend budget reached, `TROUPE_TRANSCRIBE=off`) becomes a line saying so and
//! why, never a failed message: the persona can ask for text instead.

use troupe_connectors::{Attachment, Inbound};

use super::Sources;
use crate::provider::{AudioFile, Feature, ModelProvider, Parts, Payer, ProviderError, Request};
use crate::spend::{Admission, Meter, Priority, Purpose, Turn, Who};

/// At most this many voice notes or audio files per message are transcribed.
pub const MAX_VOICE: usize = 2;

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
    /// The persona's own provider, which transcribes when it has the endpoint.
    pub provider: &'a dyn ModelProvider,
    /// `TROUPE_TRANSCRIBE`.
    pub on: bool,
    /// `TROUPE_TRANSCRIBE_MODEL`.
    pub model: &'a str,
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
    if !hearing.provider.offers(Feature::Audio) {
        return Err("the persona's model provider does not transcribe audio".into());
    }
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
    let file = AudioFile {
        name: &a.name,
        mime: &mime,
        bytes: &bytes,
    };
    let request = Request {
        purpose: Purpose::Transcribe,
        parts: Parts::Audio {
            model: hearing.model,
            file,
        },
        tools: None,
        live: None,
        notice: None,
        payer: Payer {
            turn: Turn::new(Priority::Reply, &room),
            meter: hearing.meter,
            who,
        },
    };
    match hearing.provider.call(request).await {
        Ok(reply) => Ok(reply.completion.text),
        // The provider's reason as it gave it (no URL, no key).
        Err(ProviderError::Upstream(why)) => Err(why),
        Err(other) => Err(other.to_string()),
    }
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
    fn audio_is_known_by_its_bytes() {
        assert_eq!(sniff_audio(b"OggS\0\x02rest"), Some("audio/ogg"));
        assert_eq!(sniff_audio(b"ID3\x04"), Some("audio/mpeg"));
        assert_eq!(sniff_audio(b"RIFF\0\0\0\0WAVEfmt "), Some("audio/wav"));
        assert_eq!(sniff_audio(b"\0\0\0\x20ftypM4A "), Some("audio/mp4"));
        assert_eq!(sniff_audio(b"\x89PNG\r\n"), None);
        assert_eq!(sniff_audio(b""), None);
        assert_eq!(audio_extension("audio/mpeg"), "mp3");
    }
}
