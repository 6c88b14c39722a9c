//! Embeddings: text to vectors through an OpenAI-compatible `/embeddings` endpoint or
//! Ollama's `/api/embed`.
//!
//! It owns the HTTP calls, batching, and turning every vector into unit length (so cosine
//! similarity is a dot product). The API key is a `SecretString` and never reaches an error
//! message or a log line.

use std::sync::Arc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::config::{EmbeddingApi, EmbeddingSettings};

/// Texts sent per request: large enough to amortise the round trip, small enough to stay
/// under the providers' per-request input limits with 400-token chunks.
const BATCH: usize = 64;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A cheap-to-clone handle on one embedding model.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

struct Inner {
    api: EmbeddingApi,
    url: String,
    api_key: Option<SecretString>,
    model: String,
    dimensions: Option<usize>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("api", &self.inner.api)
            .field("url", &self.inner.url)
            .field("model", &self.inner.model)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    pub fn new(settings: &EmbeddingSettings) -> Embedder {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .unwrap_or_default();
        Embedder {
            inner: Arc::new(Inner {
                api: settings.api,
                url: settings.url.trim_end_matches('/').to_string(),
                api_key: settings.api_key.clone(),
                model: settings.model.clone(),
                dimensions: settings.dimensions,
                client,
            }),
        }
    }

    /// The name stored with each vector: the model, and the size when one was asked for
    /// (the same model cut to another size gives vectors that do not compare).
    pub fn model_key(&self) -> String {
        match self.inner.dimensions {
            Some(d) => format!("{}@{d}", self.inner.model),
            None => self.inner.model.clone(),
        }
    }

    /// `openai:text-embedding-3-small`: the vendor and model, for usage accounting.
    pub fn describe(&self) -> String {
        let api = match self.inner.api {
            EmbeddingApi::OpenAi => "openai",
            EmbeddingApi::Ollama => "ollama",
        };
        format!("{api}:{}", self.inner.model)
    }

    /// One unit-length vector per text, in order.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.embed_counted(texts).await.map(|(vectors, _)| vectors)
    }

    /// `embed`, with the input tokens the API reported (`None` when any batch's answer had
    /// no usage): for spend accounting (docs/spend.md).
    pub async fn embed_counted(
        &self,
        texts: &[&str],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let mut out = Vec::with_capacity(texts.len());
        let mut tokens = Some(0u64);
        for batch in texts.chunks(BATCH) {
            let (vectors, used) = match self.inner.api {
                EmbeddingApi::OpenAi => self.openai(batch).await?,
                EmbeddingApi::Ollama => self.ollama(batch).await?,
            };
            tokens = tokens.zip(used).map(|(a, b)| a + b);
            if vectors.len() != batch.len() {
                return Err(format!(
                    "the embedding API returned {} vectors for {} inputs",
                    vectors.len(),
                    batch.len()
                ));
            }
            out.extend(vectors.into_iter().map(normalized));
        }
        Ok((out, tokens))
    }

    async fn openai(&self, batch: &[&str]) -> Result<(Vec<Vec<f32>>, Option<u64>), String> {
        let mut body = json!({ "model": self.inner.model, "input": batch });
        if let Some(d) = self.inner.dimensions {
            body["dimensions"] = json!(d);
        }
        let url = format!("{}/embeddings", self.inner.url);
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
        let body = json!({ "model": self.inner.model, "input": batch });
        let url = format!("{}/api/embed", self.inner.url);
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
        let mut request = self.inner.client.post(url).json(body);
        if let Some(key) = &self.inner.api_key {
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

/// `v` scaled to unit length (a zero vector stays zero).
pub(crate) fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

/// Little-endian f32 bytes, as stored.
pub(crate) fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[cfg(test)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = normalized(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(from_bytes(&to_bytes(&v)), v);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
        assert_eq!(normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}
