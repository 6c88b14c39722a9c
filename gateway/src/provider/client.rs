//! The genai client: one `GenaiProvider` per persona, pinned to its target, with a cap on
//! calls in flight and a deadline per call. Every chat call goes through its account's breaker
//! (`breaker.rs`, `chat.rs`); this file sends one request and classifies its failure, and
//! hands each kind of request to the file that makes it (`chat.rs`, `audio.rs`).

use async_trait::async_trait;
use genai::chat::{ChatOptions, ChatRequest, ChatResponse};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{ModelIden, ServiceTarget, WebConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

use super::breaker::{Breaker, Breakers, Failure};
use super::target::{Target, Vendor};
use super::{Completion, Feature, ModelProvider, Parts, ProviderError, Reply, Request, Sealed};
use crate::config::ProviderSettings;
use crate::persona::Prompt;

/// The longest answer asked of a model, in tokens.
pub(super) const MAX_TOKENS: u32 = 1024;

/// A genai client pinned to one target.
pub struct GenaiProvider {
    client: genai::Client,
    target: Target,
    timeout: Duration,
    permits: Semaphore,
    /// This account's breaker, and the retry settings.
    breaker: Arc<Breaker>,
    /// This account's place in the model scheduler (issue 16): its limits, shared by every
    /// persona on the key, and its queue. `None` outside the app (tests, `troupe chat`…).
    account: Option<Arc<crate::spend::scheduler::Account>>,
}

impl GenaiProvider {
    pub fn new(target: Target, timeout: Duration, concurrency: usize) -> Result<Self, String> {
        // genai joins paths onto the base URL, so it must end with a slash.
        let mut base = target.base_url.clone();
        if !base.ends_with('/') {
            base.push('/');
        }
        let adapter = target.vendor.adapter();
        let key = target.api_key.clone();
        let resolver = ServiceTargetResolver::from_resolver_fn(
            move |t: ServiceTarget| -> Result<ServiceTarget, genai::resolver::Error> {
                Ok(ServiceTarget {
                    endpoint: Endpoint::from_owned(base.clone()),
                    // An OpenAI-compatible local server may need no key; genai still wants
                    // some auth data, and an empty bearer is what such servers ignore.
                    auth: AuthData::from_single(key.clone().unwrap_or_default()),
                    model: ModelIden::new(adapter, t.model.model_name),
                })
            },
        );
        // genai builds a reqwest client, which needs the process's TLS provider.
        troupe_connectors::tls::install_crypto_provider();
        let client = genai::Client::builder()
            .with_service_target_resolver(resolver)
            .with_web_config(
                WebConfig::default()
                    .with_timeout(timeout)
                    .with_connect_timeout(timeout.min(Duration::from_secs(10))),
            )
            .build()
            .map_err(|e| format!("cannot build the model client: {e}"))?;
        let breaker = Breakers::new(ProviderSettings::default()).for_target(&target);
        Ok(Self {
            client,
            target,
            timeout,
            permits: Semaphore::new(concurrency),
            breaker,
            account: None,
        })
    }

    /// Shares the breaker of this provider's account from `breakers` (and its settings).
    pub fn with_breaker(mut self, breakers: &Breakers) -> Self {
        self.breaker = breakers.for_target(&self.target);
        self.account = breakers.account_for(&self.target);
        self
    }

    /// Sends one request: the scheduler's turn, a permit, the call, its deadline, and the
    /// tokens it used charged to the account (`chat.rs`).
    pub(super) async fn exec(&self, request: ChatRequest) -> Result<ChatResponse, Failure> {
        let (turn, _permit) = self.admit().await?;
        let options = ChatOptions::default().with_max_tokens(MAX_TOKENS);
        let call = self
            .client
            .exec_chat(&self.target.model, request, Some(&options));
        let response = match tokio::time::timeout(self.timeout, call).await {
            Err(_) => return Err(self.timed_out()),
            Ok(Err(e)) => return Err(self.failed(e)),
            Ok(Ok(r)) => r,
        };
        if let Some(turn) = &turn {
            let used = response.usage.prompt_tokens.unwrap_or(0)
                + response.usage.completion_tokens.unwrap_or(0);
            turn.charge(u64::try_from(used).unwrap_or(0));
        }
        Ok(response)
    }

    /// The account's turn first (limits shared across personas, priorities, rooms in
    /// turn), then this persona's own concurrency. Plain calls and streamed ones alike.
    pub(super) async fn admit(
        &self,
    ) -> Result<
        (
            Option<crate::spend::scheduler::Permit>,
            tokio::sync::SemaphorePermit<'_>,
        ),
        Failure,
    > {
        let turn = match &self.account {
            Some(account) => Some(account.acquire().await),
            None => None,
        };
        let permit = self.permits.acquire().await.map_err(|_| Failure {
            error: ProviderError::Upstream("the provider is shutting down".into()),
            transient: false,
        })?;
        Ok((turn, permit))
    }

    /// A call past its deadline.
    pub(super) fn timed_out(&self) -> Failure {
        Failure {
            error: ProviderError::Timeout(self.timeout),
            transient: true,
        }
    }

    /// A failed call, classified; a 429 also backs the whole account off.
    pub(super) fn failed(&self, error: genai::Error) -> Failure {
        let failure = classify(error, self.timeout);
        if let (ProviderError::RateLimited { retry_after }, Some(account)) =
            (&failure.error, &self.account)
        {
            account.back_off(*retry_after);
        }
        failure
    }

    pub(super) fn client(&self) -> &genai::Client {
        &self.client
    }

    pub(super) fn target(&self) -> &Target {
        &self.target
    }

    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) fn breaker(&self) -> &Breaker {
        &self.breaker
    }
}

/// The persona's prompt as a chat request: its system message, then the user message.
pub(super) fn request_of(prompt: &Prompt) -> ChatRequest {
    let mut request = ChatRequest::default();
    if !prompt.system.trim().is_empty() {
        request = request.with_system(prompt.system.clone());
    }
    request.append_message(super::media::user_message(prompt))
}

/// What a response used, with `text` as its answer.
pub(super) fn completion_of(response: &ChatResponse, text: String) -> Completion {
    completion_with(&response.usage, text)
}

/// What a call used, from the usage the provider reported, with `text` as its answer.
pub(super) fn completion_with(usage: &genai::chat::Usage, text: String) -> Completion {
    Completion {
        text,
        prompt_tokens: usage.prompt_tokens.and_then(|t| u32::try_from(t).ok()),
        completion_tokens: usage.completion_tokens.and_then(|t| u32::try_from(t).ok()),
        cached_tokens: usage
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .and_then(|t| u32::try_from(t).ok()),
    }
}

#[async_trait]
impl ModelProvider for GenaiProvider {
    fn model(&self) -> crate::spend::ModelRef {
        crate::spend::ModelRef::new(self.target.vendor.name(), self.target.model.clone())
    }

    fn offers(&self, feature: Feature) -> bool {
        match feature {
            Feature::Tools | Feature::Streaming => true,
            // Only an OpenAI-compatible server has `/audio/*`; Anthropic and Ollama do not.
            Feature::Audio => self.target.vendor == Vendor::OpenAi,
        }
    }

    async fn send(&self, request: &Request<'_>, _: Sealed) -> Result<Reply, ProviderError> {
        match &request.parts {
            Parts::Chat(prompt) => {
                self.chat(prompt, request.tools, request.notice, request.live)
                    .await
            }
            Parts::Audio { model, file } => self.transcribe(model, file).await,
            Parts::Speech {
                model,
                voice,
                text,
                cap,
            } => self.speak(model, voice, text, *cap).await,
        }
    }
}

/// Turns a genai error into the cases callers branch on, and says whether asking again may
/// help. The provider's message is kept, but never the request (which holds the key in its
/// headers).
fn classify(error: genai::Error, timeout: Duration) -> Failure {
    let status = error.status().map(|s| s.as_u16());
    if status == Some(429) {
        let retry_after = error
            .headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Failure {
            error: ProviderError::RateLimited { retry_after },
            transient: true,
        };
    }
    let text = error.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("timed out") || lower.contains("timeout") {
        return Failure {
            error: ProviderError::Timeout(timeout),
            transient: true,
        };
    }
    let transient = match status {
        // 408 and the 5xx are the server's trouble; other 4xx are the request's or the
        // account's, and asking again would get the same answer.
        Some(s) => s == 408 || s >= 500,
        // No status: the request never got an answer (refused, reset, cut off).
        None => [
            "connect",
            "connection",
            "reset",
            "broken pipe",
            "error sending request",
            "eof",
        ]
        .iter()
        .any(|w| lower.contains(w)),
    };
    // genai's messages can be long and multi-line; keep the first useful part.
    let mut short: String = text.lines().take(3).collect::<Vec<_>>().join(" ");
    if short.len() > 500 {
        let mut cut = 500;
        while !short.is_char_boundary(cut) {
            cut -= 1;
        }
        short.truncate(cut);
    }
    Failure {
        error: ProviderError::Upstream(short),
        transient,
    }
}
