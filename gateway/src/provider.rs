//! Model providers: one chat call, whatever the vendor.
//!
//! The `ModelProvider` trait is all an agent sees. `GenaiProvider` implements it over the
//! `genai` crate, which speaks OpenAI-compatible, Anthropic and Ollama natively, so troupe
//! writes no vendor HTTP of its own. Which provider a persona uses is resolved here from its
//! `modelProvider`, its `settings.model` and its secrets; when nothing is configured the
//! persona gets an `Unconfigured` provider that fails fast with the variable to set, so the
//! gateway still starts and the API answers 503 instead of hanging.
//!
//! Calls in flight are capped per provider by a semaphore, and each call has a deadline.

use async_trait::async_trait;
use genai::adapter::AdapterKind;
use genai::chat::{ChatMessage, ChatOptions, ChatRequest};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{ModelIden, ServiceTarget, WebConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::persona::{Env, Persona, Prompt};

/// What the model said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
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

#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// A short description for logs and `/api/agents`: `openai:gpt-4o-mini`.
    fn describe(&self) -> String;
    /// Why no call can succeed (the `Unconfigured` provider's reason), if so.
    fn unavailable(&self) -> Option<String> {
        None
    }
    async fn complete(&self, prompt: &Prompt) -> Result<Completion, ProviderError>;
}

/// The provider for a persona with nothing configured.
pub struct Unconfigured {
    pub reason: String,
}

#[async_trait]
impl ModelProvider for Unconfigured {
    fn describe(&self) -> String {
        "unconfigured".into()
    }
    fn unavailable(&self) -> Option<String> {
        Some(self.reason.clone())
    }
    async fn complete(&self, _prompt: &Prompt) -> Result<Completion, ProviderError> {
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
    fn describe(&self) -> String {
        "instant".into()
    }
    async fn complete(&self, _prompt: &Prompt) -> Result<Completion, ProviderError> {
        Ok(Completion {
            text: self.text.clone(),
            prompt_tokens: None,
            completion_tokens: None,
        })
    }
}

/// Which vendor protocol a persona's model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Anthropic,
    Ollama,
}

impl Vendor {
    fn parse(name: &str) -> Option<Vendor> {
        match name.to_ascii_lowercase().as_str() {
            // elizaOS names several OpenAI-compatible services; they all speak the protocol.
            "openai" | "openrouter" | "groq" | "together" | "deepseek" | "llama_local"
            | "local" | "llamacloud" | "redpill" | "venice" | "nanogpt" => Some(Vendor::OpenAi),
            "anthropic" | "claude" => Some(Vendor::Anthropic),
            "ollama" => Some(Vendor::Ollama),
            _ => None,
        }
    }

    fn adapter(self) -> AdapterKind {
        match self {
            Vendor::OpenAi => AdapterKind::OpenAI,
            Vendor::Anthropic => AdapterKind::Anthropic,
            Vendor::Ollama => AdapterKind::Ollama,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::Anthropic => "anthropic",
            Vendor::Ollama => "ollama",
        }
    }
}

/// Where and how to call a model, resolved for one persona.
#[derive(Clone)]
pub struct Target {
    pub vendor: Vendor,
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("vendor", &self.vendor)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .finish()
    }
}

/// Resolves the persona's model target from its `modelProvider`, `settings.model` and its
/// secrets (which fall back to the process environment). The error is the sentence an
/// operator needs: which variable to set.
pub fn resolve_target(persona: &Persona, env: &Env) -> Result<Target, String> {
    let secret = |key: &str| persona.secret(key, env).filter(|v| !v.trim().is_empty());
    let first = |keys: &[&str]| keys.iter().find_map(|k| secret(k));

    let vendor = match persona.model_provider() {
        Some(name) => Vendor::parse(&name).ok_or_else(|| {
            format!(
                "persona `{}` asks for modelProvider `{name}`, which troupe does not support; \
                 use openai (or any OpenAI-compatible server via OPENAI_BASE_URL), anthropic or ollama",
                persona.name
            )
        })?,
        // No preference: take the first vendor that has credentials.
        None if secret("OPENAI_API_KEY").is_some() || secret("OPENAI_BASE_URL").is_some() => {
            Vendor::OpenAi
        }
        None if secret("ANTHROPIC_API_KEY").is_some() => Vendor::Anthropic,
        None if secret("OLLAMA_SERVER_URL").is_some() => Vendor::Ollama,
        None => Vendor::OpenAi,
    };
    let model = persona.model_name();
    let target = match vendor {
        Vendor::OpenAi => {
            let api_key = secret("OPENAI_API_KEY");
            let base_url = secret("OPENAI_BASE_URL");
            if api_key.is_none() && base_url.is_none() {
                return Err(format!(
                    "no model provider is configured for persona `{}`: set OPENAI_API_KEY \
                     (or OPENAI_BASE_URL for a local OpenAI-compatible server, or \
                     ANTHROPIC_API_KEY / OLLAMA_SERVER_URL with a matching modelProvider)",
                    persona.name
                ));
            }
            Target {
                vendor,
                base_url: base_url.unwrap_or_else(|| "https://api.openai.com/v1".into()),
                api_key,
                model: model
                    .or_else(|| {
                        first(&["OPENAI_LARGE_MODEL", "LARGE_OPENAI_MODEL", "OPENAI_MODEL"])
                    })
                    .unwrap_or_else(|| "gpt-4o-mini".into()),
            }
        }
        Vendor::Anthropic => {
            let api_key = secret("ANTHROPIC_API_KEY").ok_or_else(|| {
                format!(
                    "persona `{}` uses modelProvider anthropic: set ANTHROPIC_API_KEY",
                    persona.name
                )
            })?;
            Target {
                vendor,
                base_url: secret("ANTHROPIC_BASE_URL")
                    .or_else(|| secret("ANTHROPIC_API_URL"))
                    .unwrap_or_else(|| "https://api.anthropic.com/v1".into()),
                api_key: Some(api_key),
                model: model
                    .or_else(|| first(&["ANTHROPIC_LARGE_MODEL", "LARGE_ANTHROPIC_MODEL"]))
                    .unwrap_or_else(|| "claude-3-5-haiku-latest".into()),
            }
        }
        Vendor::Ollama => Target {
            vendor,
            base_url: secret("OLLAMA_SERVER_URL")
                .or_else(|| secret("OLLAMA_API_ENDPOINT"))
                .unwrap_or_else(|| "http://localhost:11434".into()),
            api_key: None,
            model: model
                .or_else(|| first(&["OLLAMA_LARGE_MODEL", "LARGE_OLLAMA_MODEL", "OLLAMA_MODEL"]))
                .unwrap_or_else(|| "llama3.2".into()),
        },
    };
    Ok(target)
}

/// Builds the provider for a persona: genai when a target resolves, `Unconfigured` otherwise.
pub fn for_persona(
    persona: &Persona,
    env: &Env,
    timeout: Duration,
    concurrency: usize,
) -> Arc<dyn ModelProvider> {
    match resolve_target(persona, env) {
        Ok(target) => match GenaiProvider::new(target, timeout, concurrency) {
            Ok(p) => Arc::new(p),
            Err(reason) => Arc::new(Unconfigured { reason }),
        },
        Err(reason) => Arc::new(Unconfigured { reason }),
    }
}

/// A genai client pinned to one target.
pub struct GenaiProvider {
    client: genai::Client,
    target: Target,
    timeout: Duration,
    permits: Semaphore,
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
        let client = genai::Client::builder()
            .with_service_target_resolver(resolver)
            .with_web_config(
                WebConfig::default()
                    .with_timeout(timeout)
                    .with_connect_timeout(timeout.min(Duration::from_secs(10))),
            )
            .build()
            .map_err(|e| format!("cannot build the model client: {e}"))?;
        Ok(Self {
            client,
            target,
            timeout,
            permits: Semaphore::new(concurrency),
        })
    }
}

#[async_trait]
impl ModelProvider for GenaiProvider {
    fn describe(&self) -> String {
        format!("{}:{}", self.target.vendor.name(), self.target.model)
    }

    async fn complete(&self, prompt: &Prompt) -> Result<Completion, ProviderError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ProviderError::Upstream("the provider is shutting down".into()))?;
        let mut request = ChatRequest::default();
        if !prompt.system.trim().is_empty() {
            request = request.with_system(prompt.system.clone());
        }
        request = request.append_message(ChatMessage::user(prompt.user.clone()));
        let options = ChatOptions::default().with_max_tokens(1024);
        let call = self
            .client
            .exec_chat(&self.target.model, request, Some(&options));
        let response = match tokio::time::timeout(self.timeout, call).await {
            Err(_) => return Err(ProviderError::Timeout(self.timeout)),
            Ok(Err(e)) => return Err(classify(e, self.timeout)),
            Ok(Ok(r)) => r,
        };
        let text = response
            .first_text()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(ProviderError::Empty)?
            .to_string();
        Ok(Completion {
            text,
            prompt_tokens: response
                .usage
                .prompt_tokens
                .and_then(|t| u32::try_from(t).ok()),
            completion_tokens: response
                .usage
                .completion_tokens
                .and_then(|t| u32::try_from(t).ok()),
        })
    }
}

/// Turns a genai error into the cases callers branch on. The provider's message is kept,
/// but never the request (which holds the key in its headers).
fn classify(error: genai::Error, timeout: Duration) -> ProviderError {
    if error.status().map(|s| s.as_u16()) == Some(429) {
        let retry_after = error
            .headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return ProviderError::RateLimited { retry_after };
    }
    let text = error.to_string();
    if text.to_ascii_lowercase().contains("timed out") || text.contains("timeout") {
        return ProviderError::Timeout(timeout);
    }
    // genai's messages can be long and multi-line; keep the first useful part.
    let mut short: String = text.lines().take(3).collect::<Vec<_>>().join(" ");
    if short.len() > 500 {
        let mut cut = 500;
        while !short.is_char_boundary(cut) {
            cut -= 1;
        }
        short.truncate(cut);
    }
    ProviderError::Upstream(short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn persona(raw: serde_json::Value) -> Persona {
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("p.json");
        std::fs::write(&path, raw.to_string()).unwrap();
        crate::persona::load_file(&path).unwrap().persona
    }

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nothing_configured_names_the_variable() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai"}));
        let err = resolve_target(&p, &env(&[])).unwrap_err();
        assert!(err.contains("OPENAI_API_KEY"), "{err}");
    }

    #[test]
    fn a_local_base_url_needs_no_key() {
        let p = persona(
            serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "openai",
            "settings": {"model": "smol"}}),
        );
        let t = resolve_target(&p, &env(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")])).unwrap();
        assert_eq!(t.vendor, Vendor::OpenAi);
        assert_eq!(t.model, "smol");
        assert_eq!(t.api_key, None);
    }

    #[test]
    fn anthropic_needs_its_key_and_keys_never_print() {
        let p =
            persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "anthropic"}));
        assert!(
            resolve_target(&p, &env(&[]))
                .unwrap_err()
                .contains("ANTHROPIC_API_KEY")
        );
        let t = resolve_target(&p, &env(&[("ANTHROPIC_API_KEY", "sk-ant-123")])).unwrap();
        assert!(!format!("{t:?}").contains("sk-ant-123"));
    }

    #[test]
    fn an_unknown_provider_is_a_clear_error() {
        let p = persona(serde_json::json!({"name": "Ada", "bio": "x", "modelProvider": "myspace"}));
        let err = resolve_target(&p, &env(&[("OPENAI_API_KEY", "k")])).unwrap_err();
        assert!(err.contains("myspace"), "{err}");
    }
}
