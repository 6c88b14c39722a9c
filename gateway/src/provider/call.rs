//! The one model call (issue 45): what is asked ([`Request`]), what comes back ([`Reply`]),
//! and `call`, the only way any part of troupe reaches a model.
//!
//! Every caller builds a `Request`: a reply and each step of a turn with tools, a vision
//! model's description, a voice note's transcription, a reply said aloud, a room's
//! summary, a user's facts, a post's draft. The request says what the call is for (its
//! spend purpose), what is sent (a prompt with its images, audio, text to say), the tools
//! offered, whether the text is shown as it is written (`live`), who hears of an outage it
//! waits out, and who pays (the scheduler's turn, the persona's meter and the ledger's
//! room and user).
//!
//! `call` is where the call is made: in the scheduler's turn, through the provider's one
//! vendor method (`ModelProvider::send`), then metered once (the spend ledger) and counted
//! once (the latency and token metrics). A provider's `send` takes a [`Sealed`] that only
//! this file can make, so nothing else can reach a vendor without being metered.

use std::time::{Duration, Instant};
use tracing::Instrument;

use super::{Completion, Feature, ModelProvider, OutageNotice, ProviderError, ToolCall, ToolRound};
use crate::live::Live;
use crate::persona::Prompt;
use crate::spend::{Meter, ModelRef, Purpose, Tokens, Who};

/// One call to a model.
pub struct Request<'a> {
    /// What the call is for: the spend ledger's purpose. A `Reply` that asks for tools is
    /// recorded as `Tool`.
    pub purpose: Purpose,
    /// What is sent.
    pub parts: Parts<'a>,
    /// The tools offered and the turn's earlier tool steps; `None` for a plain call.
    pub tools: Option<ToolRound<'a>>,
    /// Where the text goes as the model writes it; `None`: it comes whole.
    pub live: Option<&'a Live>,
    /// Who hears that the call waits for its provider to come back (once per outage); `None`:
    /// the call fails as soon as the provider's circuit is open.
    pub notice: Option<&'a dyn OutageNotice>,
    /// Who pays for it.
    pub payer: Payer<'a>,
}

/// What a request sends.
pub enum Parts<'a> {
    /// A chat: the persona's system message, the user message and its images.
    Chat(&'a Prompt),
    /// A voice note to transcribe (`media::voice`), with the transcription model.
    Audio { model: &'a str, file: AudioFile<'a> },
    /// Text to say (`media::speech`) with the speech model and voice; the audio is refused
    /// past `cap` bytes.
    Speech {
        model: &'a str,
        voice: &'a str,
        text: &'a str,
        cap: usize,
    },
}

/// An audio file to transcribe, as it came: the gateway never decodes it.
pub struct AudioFile<'a> {
    pub name: &'a str,
    pub mime: &'a str,
    pub bytes: &'a [u8],
}

/// Who a call is for: its place in the scheduler, and its line in the spend ledger.
#[derive(Clone, Copy)]
pub struct Payer<'a> {
    /// The scheduler's turn: a priority and the room whose turn it is (`spend::scheduler`).
    pub turn: crate::spend::Turn,
    /// The persona's meter; `None`: nothing is recorded.
    pub meter: Option<&'a Meter>,
    /// The room and the user the record is charged to.
    pub who: Who<'a>,
}

/// What a call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The answer (a transcript, for audio), and the tokens the provider counted.
    pub completion: Completion,
    /// The tools the model asked to call; none when it answered.
    pub calls: Vec<ToolCall>,
    /// The speech made for `Parts::Speech`.
    pub audio: Option<Spoken>,
    /// What the call used when the provider measured it other than in tokens (a
    /// transcription's audio seconds); otherwise the ledger reads `completion`.
    pub measured: Option<Tokens>,
}

impl Reply {
    /// An answer in text, with no tool calls.
    pub fn answer(completion: Completion) -> Reply {
        Reply {
            completion,
            calls: Vec::new(),
            audio: None,
            measured: None,
        }
    }
}

/// Speech made: Opus in Ogg, and its length.
#[derive(Debug, Clone, PartialEq)]
pub struct Spoken {
    pub audio: Vec<u8>,
    pub duration: Duration,
}

/// The proof that a provider's `send` is called from `call`: only this file makes one.
pub struct Sealed(());

/// The longest input speech takes (OpenAI's `/audio/speech` limit, in characters): what is
/// said, and what the ledger counts.
pub const MAX_SPEECH_CHARS: usize = 4096;

impl dyn ModelProvider + '_ {
    /// Makes the call: in its scheduler's turn, through the provider, metered and counted
    /// once. A provider that does not stream shows a live answer whole when it has it.
    pub async fn call(&self, request: Request<'_>) -> Result<Reply, ProviderError> {
        let started = Instant::now();
        let span = self.span_of(&request);
        let sent = self.send(&request, Sealed(()));
        let result = request
            .payer
            .turn
            .scope(sent)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            record(&span, &request, &result);
        }
        if let (Some(live), Ok(reply)) = (request.live, &result)
            && reply.calls.is_empty()
            && !self.offers(Feature::Streaming)
        {
            live.set(&reply.completion.text);
        }
        let model = self.model_of(&request);
        if let (Some(meter), Ok(reply)) = (request.payer.meter, &result) {
            // A step of a turn with tools that asked for tools is `tool`; the answer `reply`.
            let purpose = match request.purpose {
                Purpose::Reply if !reply.calls.is_empty() => Purpose::Tool,
                purpose => purpose,
            };
            let used = request.used(reply);
            meter.record(request.payer.who, purpose, &model, used).await;
        }
        let completion = result.as_ref().ok().map(|r| &r.completion);
        crate::metrics::model_call(
            &model.to_string(),
            started.elapsed(),
            result.is_ok(),
            completion.and_then(|c| c.prompt_tokens),
            completion.and_then(|c| c.completion_tokens),
        );
        result
    }

    /// The call's span (`crate::trace`): disabled, and free, unless traces are exported.
    fn span_of(&self, request: &Request<'_>) -> tracing::Span {
        if !crate::trace::on() {
            return tracing::Span::none();
        }
        let model = self.model_of(request);
        let operation = match request.parts {
            Parts::Chat(_) => "chat",
            Parts::Audio { .. } | Parts::Speech { .. } => "generate_content",
        };
        let span = crate::trace::model_span(
            operation,
            &model.vendor,
            &model.model,
            request.purpose.as_str(),
        );
        if crate::trace::capture_content()
            && let Parts::Chat(prompt) = request.parts
        {
            span.record(
                "gen_ai.input.messages",
                crate::trace::messages("user", &prompt.user),
            );
        }
        span
    }

    /// The model a request goes to: the provider's, or the one an audio request names.
    fn model_of(&self, request: &Request<'_>) -> ModelRef {
        let model = self.model();
        match request.parts {
            Parts::Chat(_) => model,
            Parts::Audio { model: named, .. } | Parts::Speech { model: named, .. } => {
                ModelRef::new(model.vendor, named)
            }
        }
    }
}

/// What came of the call, on its span: the tokens, the error, the answer when content is
/// captured.
fn record(span: &tracing::Span, request: &Request<'_>, result: &Result<Reply, ProviderError>) {
    match result {
        Ok(reply) => {
            // As i64: tracing-opentelemetry turns unsigned fields into strings.
            if let Some(n) = reply.completion.prompt_tokens {
                span.record("gen_ai.usage.input_tokens", i64::from(n));
            }
            if let Some(n) = reply.completion.completion_tokens {
                span.record("gen_ai.usage.output_tokens", i64::from(n));
            }
            if crate::trace::capture_content() && matches!(request.parts, Parts::Chat(_)) {
                let text = crate::trace::messages("assistant", &reply.completion.text);
                span.record("gen_ai.output.messages", text);
            }
        }
        Err(e) => {
            let kind = match e {
                ProviderError::Unconfigured(_) => "unconfigured",
                ProviderError::Timeout(_) => "timeout",
                ProviderError::RateLimited { .. } => "rate_limited",
                ProviderError::Upstream(_) => "upstream",
                ProviderError::Empty => "empty",
            };
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
    }
}

impl Request<'_> {
    /// What `reply` used, for the ledger: what the provider measured, else its token counts
    /// and the sizes of what was sent and answered.
    fn used(&self, reply: &Reply) -> Tokens {
        if let Some(measured) = reply.measured {
            return measured;
        }
        match &self.parts {
            Parts::Chat(prompt) => reply.completion.tokens(prompt),
            Parts::Speech { text, .. } => Tokens {
                prompt_chars: text.chars().take(MAX_SPEECH_CHARS).count(),
                ..Tokens::default()
            },
            Parts::Audio { .. } => Tokens::audio(None, reply.completion.text.chars().count()),
        }
    }
}
