//! Voice out (issue 32): a message that came in as a voice note is answered with a voice
//! note as well as its text, where the operator turned it on (`TROUPE_SPEECH_MODEL`, or the
//! character's `settings.voice`, elizaOS's shape).
//!
//! The speech is made by the persona's own provider, the way transcripts are (`voice`):
//! an OpenAI-compatible `POST {base}/audio/speech` with `{model, input, voice,
//! response_format: "opus"}` and the persona's key; OpenAI, LocalAI, openedai-speech and
//! Kokoro/Piper servers speak it. The answer is Opus in an Ogg container, the format
//! Telegram shows as a voice note and Discord plays as a voice message. It is bounded by
//! `TROUPE_MODEL_TIMEOUT_SECS` and `TROUPE_MEDIA_MAX_BYTES`, and must start with the Ogg
//! magic (`OggS`): anything else is refused, never passed on. The gateway does not decode
//! the audio; it reads only the Ogg pages' headers for the duration the platforms show
//! (`troupe_connectors::ogg`).
//!
//! Speech is best effort: when it fails the text is still sent, as without it.

use std::time::Duration;

use troupe_connectors::Inbound;

use crate::persona::{Env, Persona};
use crate::provider::{Target, Vendor};

/// The longest input `/audio/speech` takes (OpenAI's limit, in characters).
pub const MAX_INPUT_CHARS: usize = 4096;

/// The speech model when only the character's `settings.voice` turns voice out on.
pub const DEFAULT_MODEL: &str = "tts-1";

/// The voice when none is named (`TROUPE_SPEECH_VOICE`, `settings.voice.model`).
pub const DEFAULT_VOICE: &str = "alloy";

/// Where and how a persona speaks.
#[derive(Clone, Debug)]
pub struct Speaking {
    /// The persona's provider, with the speech model as `model`.
    pub target: Target,
    pub voice: String,
}

/// A persona's voice, when voice out is on for it: `TROUPE_SPEECH_MODEL` (the character's
/// settings or the environment) or the character's `settings.voice.model` turns it on; the
/// voice is `TROUPE_SPEECH_VOICE`, else `settings.voice.model`, else [`DEFAULT_VOICE`].
/// Only an OpenAI-compatible provider speaks (Anthropic and Ollama have no such endpoint).
pub fn speaking(persona: &Persona, env: &Env, hearing: Option<&Target>) -> Option<Speaking> {
    let target = hearing.filter(|t| t.vendor == Vendor::OpenAi)?;
    let setting = |k: &str| {
        persona
            .secret(k, env)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    // elizaOS's `settings.voice.model` names a voice (a VITS/Piper voice in elizaOS's own
    // text-to-speech), so it is the voice here, and turns voice out on.
    let character_voice = persona
        .raw
        .pointer("/settings/voice/model")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let model = setting("TROUPE_SPEECH_MODEL");
    if model.is_none() && character_voice.is_none() {
        return None;
    }
    Some(Speaking {
        target: Target {
            model: model.unwrap_or_else(|| DEFAULT_MODEL.into()),
            ..target.clone()
        },
        voice: setting("TROUPE_SPEECH_VOICE")
            .or(character_voice)
            .unwrap_or_else(|| DEFAULT_VOICE.into()),
    })
}

/// Whether `inbound` came in as a voice note (or audio): only such a message is answered by
/// voice.
pub fn came_as_voice(inbound: &Inbound) -> bool {
    inbound.attachments.iter().any(super::voice::is_voice)
}

/// A voice note made: Opus in Ogg, and its length.
#[derive(Debug, Clone)]
pub struct Spoken {
    pub audio: Vec<u8>,
    pub duration: Duration,
}

/// Asks the persona's provider to say `text`. The error is a reason for the log (no URL,
/// no key).
pub async fn speak(
    speaking: &Speaking,
    text: &str,
    timeout: Duration,
    cap: usize,
) -> Result<Spoken, String> {
    let input: String = text.chars().take(MAX_INPUT_CHARS).collect();
    if input.trim().is_empty() {
        return Err("nothing to say".into());
    }
    let body = serde_json::json!({
        "model": speaking.target.model,
        "input": input,
        "voice": speaking.voice,
        "response_format": "opus",
    });
    let request =
        super::voice::provider_request(&speaking.target, "/audio/speech", timeout)?.json(&body);
    let failed = super::voice::failure("the speech");
    let mut response = request.send().await.map_err(failed)?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("the speech request was answered {status}"));
    }
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(format!(
            "the speech is over {cap} bytes (TROUPE_MEDIA_MAX_BYTES)"
        ));
    }
    let mut audio = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if audio.len() + chunk.len() > cap {
            return Err(format!(
                "the speech is over {cap} bytes (TROUPE_MEDIA_MAX_BYTES)"
            ));
        }
        audio.extend_from_slice(&chunk);
    }
    if !audio.starts_with(b"OggS") {
        return Err("the speech is not Ogg audio (response_format \"opus\" was asked for)".into());
    }
    let duration = troupe_connectors::ogg::opus_duration(&audio);
    Ok(Spoken { audio, duration })
}
