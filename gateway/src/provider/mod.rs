//! Model providers: one model call, whatever the vendor and whatever it is for.
//!
//! Everything troupe asks of a model (a reply, a step of a turn with tools, a vision
//! description, a transcription, speech, a summary, facts, a post) is one [`Request`] given
//! to `call` (`call.rs`), which schedules, meters and counts it in one place. The
//! `ModelProvider` trait is the vendor's side: `send` and a few facts about the provider.
//! `GenaiProvider` implements it over the `genai` crate, which speaks OpenAI-compatible,
//! Anthropic and Ollama natively, so troupe writes no vendor HTTP of its own for chats;
//! audio goes to the OpenAI-compatible `/audio/*` endpoints (`audio.rs`). Which provider a
//! persona uses is resolved here from its `modelProvider`, its `settings.model` and its
//! secrets; when nothing is configured the persona gets an `Unconfigured` provider that
//! fails fast with the variable to set, so the gateway still starts and the API answers 503
//! instead of hanging.
//!
//! Calls in flight are capped per provider by a semaphore, and each call has a deadline.
//!
//! Faults: a failure that may pass (a 5xx, a timeout, a 429, a refused connection) is
//! retried a bounded number of times with exponential backoff and jitter. Every provider
//! account (vendor, base URL, key) has one circuit breaker, shared by the personas that use
//! it: after `TROUPE_PROVIDER_BREAKER_FAILURES` failures in a row, or a call that used up its
//! retries, the circuit opens and calls wait instead of hammering a provider that is down.
//! After a cool-down one call goes through as a probe; its success closes the circuit and
//! lets every waiting call go. A waiting call tells its room once per outage (through an
//! [`OutageNotice`]), and gives up only after `TROUPE_PROVIDER_OUTAGE_WAIT_SECS` or at
//! shutdown ([`Breakers::close`]), so a message that arrives during an outage is answered
//! once the provider is back. Audio calls are not retried: a voice note that cannot be heard
//! becomes a line for the persona, and speech is best effort.
//!
//! Layout: this file holds the surface an agent sees (the trait, its errors, the stand-in
//! providers, `for_persona`); `call` the request, the reply and the one entry point;
//! `target` resolves where a persona's model is called; `client` is the genai client,
//! `chat` its chat attempts (plain or streamed, with tools or without), `stream` the
//! streamed exchange, `tools` the tools' wire form, `media` a prompt's images, `audio` the
//! transcription and speech endpoints; `breaker` the retries and circuit breaker every chat
//! call of an account goes through.

mod audio;
mod breaker;
mod call;
mod chat;
mod client;
mod media;
mod stream;
mod target;
mod tools;

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

use crate::persona::{Env, Persona, Prompt};
use crate::spend::ModelRef;

pub use breaker::Breakers;
pub use call::{AudioFile, MAX_SPEECH_CHARS, Parts, Payer, Reply, Request, Sealed, Spoken};
pub use client::GenaiProvider;
pub use target::{Target, resolve_target};
pub use tools::{Exchange, ToolCall, ToolRound, ToolSpec};

/// What the model said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    /// Prompt tokens the provider served from its cache (included in `prompt_tokens`).
    pub cached_tokens: Option<u32>,
}

impl Completion {
    /// `text`, with no counts from the provider.
    pub fn of(text: String) -> Completion {
        Completion {
            text,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
        }
    }

    /// What this call used, for the spend ledger: the provider's counts, and the sizes of the
    /// prompt and the answer for the counts it did not give. The reply and memory upkeep both
    /// account this way. (It lives here, not in `spend`, because `spend` sits below `provider`.)
    pub(crate) fn tokens(&self, prompt: &Prompt) -> crate::spend::Tokens {
        crate::spend::Tokens {
            prompt: self.prompt_tokens,
            completion: self.completion_tokens,
            cached: self.cached_tokens,
            prompt_chars: prompt.system.len() + prompt.user.len(),
            completion_chars: self.text.len(),
        }
    }
}

/// Errors the agent and the HTTP layer branch on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// No provider is configured for this persona: the message says what to set.
    #[error("{0}")]
    Unconfigured(String),
    #[error("the model did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the model provider is rate limiting us")]
    RateLimited { retry_after: Option<Duration> },
    /// The provider answered with an error, or could not be reached.
    #[error("the model provider failed: {0}")]
    Upstream(String),
    #[error("the model answered with no text")]
    Empty,
}

/// What a provider can do beyond a plain chat call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// It passes tools to its model (issue 33). One that does not is offered none, and
    /// `troupe check` warns.
    Tools,
    /// It shows a request's text in its `live` as the model writes it (issue 32); `call`
    /// shows the answer of one that does not whole, when it has it.
    Streaming,
    /// It transcribes audio and says text (`media::voice`, `media::speech`): an
    /// OpenAI-compatible provider (`/audio/transcriptions`, `/audio/speech`).
    Audio,
}

/// A model provider. Callers reach a model one way, [`call`](Request) (`call.rs`), which
/// schedules, meters and counts every call; `send` is the vendor's side of it.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The vendor and model calls go to: the price key of their usage records.
    fn model(&self) -> ModelRef;
    /// A short description for logs, metrics and `/api/agents`: `openai:gpt-4o-mini`.
    fn describe(&self) -> String {
        self.model().to_string()
    }
    /// Why no call can succeed (the `Unconfigured` provider's reason), if so.
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// Whether this provider does `feature`.
    fn offers(&self, feature: Feature) -> bool {
        let _ = feature;
        false
    }
    /// Sends `request` as this provider's vendor takes it, and returns what it answered:
    /// with the request's tools and earlier tool steps, shown in its `live` as it is written,
    /// waiting out an outage when it names someone to tell. No scheduling, metering or
    /// metrics here: those are `call`'s, the only code that can make a [`Sealed`].
    async fn send(&self, request: &Request<'_>, sealed: Sealed) -> Result<Reply, ProviderError>;
}

/// Who hears that a call waits for its provider to come back: the room of the message.
#[async_trait]
pub trait OutageNotice: Send + Sync {
    /// One notice per key and outage: an agent and a room.
    fn key(&self) -> String;
    /// Tells them. Best effort: a notice that cannot be sent is logged and dropped.
    async fn send(&self);
}

/// The provider for a persona with nothing configured.
pub struct Unconfigured {
    pub reason: String,
}

#[async_trait]
impl ModelProvider for Unconfigured {
    fn model(&self) -> ModelRef {
        ModelRef::new("unconfigured", "")
    }
    fn unavailable(&self) -> Option<String> {
        Some(self.reason.clone())
    }
    async fn send(&self, _request: &Request<'_>, _: Sealed) -> Result<Reply, ProviderError> {
        Err(ProviderError::Unconfigured(self.reason.clone()))
    }
}

/// A provider that answers at once with a fixed text: for `troupe bench`, which measures
/// the gateway's own work.
pub struct Instant {
    pub text: String,
}

#[async_trait]
impl ModelProvider for Instant {
    fn model(&self) -> ModelRef {
        ModelRef::new("instant", "")
    }
    async fn send(&self, _request: &Request<'_>, _: Sealed) -> Result<Reply, ProviderError> {
        Ok(Reply::answer(Completion::of(self.text.clone())))
    }
}

/// The provider for the persona's background work when it names a small model
/// (`target::small_target`); `None`: background work uses the reply's provider.
pub fn small_for_persona(
    persona: &Persona,
    env: &Env,
    timeout: Duration,
    concurrency: usize,
    breakers: &Breakers,
) -> Option<Arc<dyn ModelProvider>> {
    let pick = target::small_target;
    beside_persona(persona, env, pick, timeout, concurrency, breakers)
}

/// The provider of the persona's vision model (`target::vision_target`), when one is named:
/// a model of its own provider, or one on the provider its `imageVisionModelProvider` names.
/// The error (an unknown or unconfigured provider) is for the operator's log.
pub fn vision_for_persona(
    persona: &Persona,
    env: &Env,
    timeout: Duration,
    concurrency: usize,
    breakers: &Breakers,
) -> Result<Option<Arc<dyn ModelProvider>>, String> {
    let Ok(large) = resolve_target(persona, env) else {
        return Ok(None);
    };
    let Some(vision) = target::vision_target(persona, env, &large)? else {
        return Ok(None);
    };
    let provider = GenaiProvider::new(vision, timeout, concurrency)?;
    Ok(Some(Arc::new(provider.with_breaker(breakers))))
}

/// A second model on the persona's own provider and credentials, named by `pick` from the
/// reply's target (the small model, the vision model); `None` when none is named.
fn beside_persona(
    persona: &Persona,
    env: &Env,
    pick: fn(&Persona, &Env, &Target) -> Option<Target>,
    timeout: Duration,
    concurrency: usize,
    breakers: &Breakers,
) -> Option<Arc<dyn ModelProvider>> {
    let large = resolve_target(persona, env).ok()?;
    let other = pick(persona, env, &large)?;
    let provider = GenaiProvider::new(other, timeout, concurrency).ok()?;
    Some(Arc::new(provider.with_breaker(breakers)))
}

/// Builds the provider for a persona: genai when a target resolves, `Unconfigured` otherwise.
pub fn for_persona(
    persona: &Persona,
    env: &Env,
    timeout: Duration,
    concurrency: usize,
    breakers: &Breakers,
) -> Arc<dyn ModelProvider> {
    match resolve_target(persona, env) {
        Ok(target) => match GenaiProvider::new(target, timeout, concurrency) {
            Ok(p) => Arc::new(p.with_breaker(breakers)),
            Err(reason) => Arc::new(Unconfigured { reason }),
        },
        Err(reason) => Arc::new(Unconfigured { reason }),
    }
}
