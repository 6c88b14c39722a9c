//! Embeddings through an HTTP API: an OpenAI-compatible `/embeddings` endpoint or Ollama's
//! `/api/embed`.
//!
//! It owns the HTTP calls and reading their answers. The API key is a `SecretString` and
//! never reaches an error message or a log line.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::Role;
use crate::config::{EmbeddingApi, EmbeddingSettings};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// One API model.
#[derive(Clone)]
pub(super) struct Api {
    api: EmbeddingApi,
    url: String,
    api_key: Option<SecretString>,
    model: String,
    dimensions: Option<usize>,
    /// Send `input_type` (see `EmbeddingSettings::input_type`).
    input_type: bool,
    client: reqwest::Client,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("api", &self.api)
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Api {
    pub(super) fn new(settings: &EmbeddingSettings) -> Api {
        let client = troupe_connectors::tls::http_client()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .unwrap_or_default();
        Api {
            api: settings.api,
            url: settings.url.trim_end_matches('/').to_string(),
            api_key: settings.api_key.clone(),
            model: settings.model.clone(),
            dimensions: settings.dimensions,
            input_type: settings.input_type,
            client,
        }
    }

    pub(super) fn dimensions(&self) -> Option<usize> {
        self.dimensions
    }

    /// `openai` or `ollama`.
    pub(super) fn vendor(&self) -> &'static str {
        match self.api {
            EmbeddingApi::Ollama => "ollama",
            _ => "openai",
        }
    }

    /// One request's vectors (not yet normalised), with the input tokens the API reported.
    pub(super) async fn embed(
        &self,
        role: Role,
        batch: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        match self.api {
            EmbeddingApi::Ollama => self.ollama(batch).await,
            _ => self.openai(role, batch).await,
        }
    }

    async fn openai(
        &self,
        role: Role,
        batch: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let mut body = json!({ "model": self.model, "input": batch });
        if let Some(d) = self.dimensions {
            body["dimensions"] = json!(d);
        }
        if self.input_type {
            body["input_type"] = json!(match role {
                Role::Query => "query",
                Role::Passage => "passage",
            });
        }
        let url = format!("{}/embeddings", self.url);
        let value = self.post(&url, &body).await?;
        let mut data: Vec<(u64, Vec<f32>)> = value["data"]
            .as_array()
            .ok_or("the embedding API's answer has no `data` list")?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let index = item["index"].as_u64().unwrap_or(i as u64);
                floats(&item["embedding"]).map(|v| (index, v))
            })
            .collect::<Result<_, _>>()?;
        data.sort_by_key(|(i, _)| *i);
        let tokens = value["usage"]["prompt_tokens"].as_u64();
        Ok((data.into_iter().map(|(_, v)| v).collect(), tokens))
    }

    async fn ollama(&self, batch: &[&str]) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let body = json!({ "model": self.model, "input": batch });
        let url = format!("{}/api/embed", self.url);
        let value = self.post(&url, &body).await?;
        let vectors = value["embeddings"]
            .as_array()
            .ok_or("Ollama's answer has no `embeddings` list")?
            .iter()
            .map(floats)
            .collect::<Result<_, _>>()?;
        Ok((vectors, value["prompt_eval_count"].as_u64()))
    }

    async fn post(&self, url: &str, body: &Value) -> Result<Value, String> {
        let mut request = self.client.post(url).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request.send().await.map_err(|e| {
            format!(
                "calling the embedding API at {}: {}",
                crate::config::redact_url(url),
                e.without_url()
            )
        })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| format!("reading the embedding API's answer: {}", e.without_url()))?;
        if !status.is_success() {
            let excerpt: String = text.chars().take(300).collect();
            return Err(format!(
                "the embedding API at {} answered {status}: {excerpt}",
                crate::config::redact_url(url)
            ));
        }
        serde_json::from_str(&text)
            .map_err(|e| format!("the embedding API's answer is not JSON: {e}"))
    }
}

fn floats(v: &Value) -> Result<Vec<f32>, String> {
    v.as_array()
        .ok_or_else(|| "an embedding is not a list of numbers".to_string())?
        .iter()
        .map(|x| {
            x.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| "an embedding holds something other than a number".to_string())
        })
        .collect()
}
