//! Audio calls (issue 32) on an OpenAI-compatible provider: a voice note transcribed
//! (`POST {base}/audio/transcriptions`, multipart: `file`, `model`) and a reply said aloud
//! (`POST {base}/audio/speech` with `{model, input, voice, response_format: "opus"}`), with
//! the persona's own key, under `TROUPE_MODEL_TIMEOUT_SECS`. faster-whisper servers,
//! LocalAI, Groq, openedai-speech and Kokoro/Piper servers speak the same API; Anthropic and
//! Ollama have no such endpoints (`Feature::Audio`).
//!
//! The gateway never decodes audio: a voice note's bytes go out as they came, a transcript
//! is read up to [`MAX_TRANSCRIPT_BYTES`], and speech must start with the Ogg magic
//! (`OggS`) and stay under the request's cap, else it is refused, never passed on; only its
//! Ogg pages' headers are read, for the duration the platforms show
//! (`troupe_connectors::ogg`). These calls are not retried: a failure is
//! `ProviderError::Upstream` with a reason (no URL, no key), which the caller turns into a
//! line for the persona or a log line.

use std::time::Duration;

use troupe_connectors::multipart::{self, Part};

use super::client::GenaiProvider;
use super::target::{Target, Vendor};
use super::{AudioFile, Completion, MAX_SPEECH_CHARS, ProviderError, Reply, Spoken};
use crate::spend::Tokens;

/// The largest transcription answer read: a transcript of 25 MB of audio is far smaller.
pub const MAX_TRANSCRIPT_BYTES: usize = 256 << 10;

impl GenaiProvider {
    /// The transcript of `file`, with what the provider measured of it.
    pub(super) async fn transcribe(
        &self,
        model: &str,
        file: &AudioFile<'_>,
    ) -> Result<Reply, ProviderError> {
        let target = self.audio_target()?;
        let (text, used) = transcription(target, model, self.timeout(), file)
            .await
            .map_err(ProviderError::Upstream)?;
        Ok(Reply {
            measured: Some(used),
            ..Reply::answer(Completion::of(text))
        })
    }

    /// `text` said with `model` and `voice`.
    pub(super) async fn speak(
        &self,
        model: &str,
        voice: &str,
        text: &str,
        cap: usize,
    ) -> Result<Reply, ProviderError> {
        let target = self.audio_target()?;
        let spoken = speech(target, (model, voice), text, self.timeout(), cap)
            .await
            .map_err(ProviderError::Upstream)?;
        Ok(Reply {
            audio: Some(spoken),
            ..Reply::answer(Completion::of(String::new()))
        })
    }

    /// This provider's target, when it has the audio endpoints.
    fn audio_target(&self) -> Result<&Target, ProviderError> {
        match self.target() {
            t if t.vendor == Vendor::OpenAi => Ok(t),
            _ => Err(ProviderError::Upstream(
                "the persona's model provider does not transcribe audio".into(),
            )),
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

/// Asks `target`'s `/audio/transcriptions` for the transcript of `file` with `model`, and
/// what the call used.
async fn transcription(
    target: &Target,
    model: &str,
    timeout: Duration,
    file: &AudioFile<'_>,
) -> Result<(String, Tokens), String> {
    let boundary = multipart::boundary(file.bytes);
    let request = provider_request(target, "/audio/transcriptions", timeout)?
        .header(
            reqwest::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form(&boundary, model, file.name, file.mime, file.bytes));
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
/// `timeout`.
fn provider_request(
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
fn failure(what: &'static str) -> impl Fn(reqwest::Error) -> String + Copy {
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

/// Asks `target` to say `text` with `model` and `voice`, as Opus in Ogg of at most `cap`
/// bytes. The error is a reason for the log (no URL, no key).
async fn speech(
    target: &Target,
    (model, voice): (&str, &str),
    text: &str,
    timeout: Duration,
    cap: usize,
) -> Result<Spoken, String> {
    let input: String = text.chars().take(MAX_SPEECH_CHARS).collect();
    if input.trim().is_empty() {
        return Err("nothing to say".into());
    }
    let body = serde_json::json!({
        "model": model,
        "input": input,
        "voice": voice,
        "response_format": "opus",
    });
    let request = provider_request(target, "/audio/speech", timeout)?.json(&body);
    let failed = failure("the speech");
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

#[cfg(test)]
mod tests {
    use super::*;

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
