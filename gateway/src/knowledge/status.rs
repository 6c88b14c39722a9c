//! How retrieval runs, as `troupe check` and the console say it: the embedding model, the
//! size of its vectors, and whether search is hybrid or keywords only (and why). Nothing is
//! loaded to tell: a local model's size is its `config.json`'s `hidden_size`.

use std::path::Path;

use serde::Serialize;

use super::{Embedder, EmbeddingApi, KnowledgeSettings};

/// How retrieval runs with these settings.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchMode {
    /// Keywords and vectors fused; false: keywords only.
    pub hybrid: bool,
    /// `local:all-MiniLM-L6-v2`, `openai:text-embedding-3-small`.
    pub model: Option<String>,
    /// The name stored with each vector (what chunk counts are kept under).
    pub model_key: Option<String>,
    /// The vectors' size, when known without a call (a local model, or one asked for).
    pub dimensions: Option<usize>,
    /// Why search is keywords only, and what to do.
    pub why_not: Option<String>,
}

impl SearchMode {
    pub fn of(settings: &KnowledgeSettings) -> SearchMode {
        let Some(embedding) = &settings.embedding else {
            return SearchMode::keywords("no embedding model (TROUPE_EMBEDDING_PROVIDER=none)");
        };
        match Embedder::open(embedding) {
            Ok(embedder) => SearchMode {
                hybrid: true,
                model: Some(embedder.describe()),
                model_key: Some(embedder.model_key()),
                dimensions: match embedding.api {
                    EmbeddingApi::Local => embedding.model_dir.as_deref().and_then(hidden_size),
                    _ => embedding.dimensions,
                },
                why_not: None,
            },
            Err(_)
                if embedding.api == EmbeddingApi::Local
                    && embedding
                        .model_dir
                        .as_deref()
                        .is_some_and(|d| !crate::models::installed(d)) =>
            {
                let dir = embedding.model_dir.as_deref().unwrap_or(Path::new(""));
                SearchMode::keywords(&format!(
                    "no local embedding model in {}: run `troupe models pull`",
                    dir.display()
                ))
            }
            Err(why) => SearchMode::keywords(&why),
        }
    }

    fn keywords(why: &str) -> SearchMode {
        SearchMode {
            hybrid: false,
            model: None,
            model_key: None,
            dimensions: None,
            why_not: Some(why.to_string()),
        }
    }
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.model, self.dimensions) {
            (Some(model), Some(d)) if self.hybrid => {
                write!(
                    f,
                    "hybrid (keywords and vectors of {model}, {d} dimensions)"
                )
            }
            (Some(model), None) if self.hybrid => {
                write!(f, "hybrid (keywords and vectors of {model})")
            }
            _ => write!(
                f,
                "keywords only ({})",
                self.why_not.as_deref().unwrap_or("no embedding model")
            ),
        }
    }
}

/// `hidden_size` of a model directory's `config.json`.
fn hidden_size(dir: &Path) -> Option<usize> {
    let raw = std::fs::read(dir.join("config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    config["hidden_size"].as_u64().map(|n| n as usize)
}
