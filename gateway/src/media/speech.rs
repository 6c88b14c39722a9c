//! Voice out (issue 32): a message that came in as a voice note is answered with a voice
//! note as well as its text, where the operator turned it on (`TROUPE_SPEECH_MODEL`, or the
//! character's `settings.voice`, elizaOS's shape).
//!
//! The speech is made by the persona's own provider, the way transcripts are (`voice`), in
//! one model call (`provider::Parts::Speech`; `provider/audio.rs` is the OpenAI-compatible
//! `/audio/speech` it becomes, asked for Opus in Ogg, the format Telegram shows as a voice
//! note and Discord plays as a voice message). This file says whether and how a persona
//! speaks; `agent/speak.rs` makes the call and sends the voice note.
//!
//! Speech is best effort: when it fails the text is still sent, as without it.

use troupe_connectors::Inbound;

use crate::persona::{Env, Persona};
use crate::provider::{Feature, ModelProvider};

/// The speech model when only the character's `settings.voice` turns voice out on.
pub const DEFAULT_MODEL: &str = "tts-1";

/// The voice when none is named (`TROUPE_SPEECH_VOICE`, `settings.voice.model`).
pub const DEFAULT_VOICE: &str = "alloy";

/// How a persona speaks, on its own provider.
#[derive(Clone, Debug)]
pub struct Speaking {
    /// The speech model.
    pub model: String,
    pub voice: String,
}

/// A persona's voice, when voice out is on for it: `TROUPE_SPEECH_MODEL` (the character's
/// settings or the environment) or the character's `settings.voice.model` turns it on; the
/// voice is `TROUPE_SPEECH_VOICE`, else `settings.voice.model`, else [`DEFAULT_VOICE`].
/// Only a provider with the audio endpoints speaks (Anthropic and Ollama have none).
pub fn speaking(persona: &Persona, env: &Env, provider: &dyn ModelProvider) -> Option<Speaking> {
    if !provider.offers(Feature::Audio) {
        return None;
    }
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
        model: model.unwrap_or_else(|| DEFAULT_MODEL.into()),
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
