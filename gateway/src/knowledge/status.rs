//! How retrieval runs, as `troupe check` and the console say it: the embedding model, the
//! size of its vectors, and whether search is hybrid or keywords only (and why). Nothing is
//! loaded to tell: a local model's size is its `config.json`'s `hidden_size`. Per persona,
//! how many of its chunks have vectors of that model (`troupe check`, `GET /api/agents/{id}`).

use std::path::Path;

use serde::Serialize;
use troupe_connectors::AgentId;

use super::{Embedder, EmbeddingApi, Knowledge, KnowledgeSettings};
use crate::storage::Store;

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
            Err(why) => SearchMode::keywords(&why_keywords(settings).unwrap_or(why)),
        }
    }

    /// How the running store searches: its embedder (set at start or by the background
    /// pull), the size of the vectors stored for it (else the local model's config).
    pub async fn of_running(knowledge: &Knowledge) -> SearchMode {
        let settings = knowledge.settings();
        let Some(embedder) = knowledge.embedder() else {
            let why = why_keywords(settings)
                .unwrap_or_else(|| "no embedding model could be opened (see the log)".into());
            return SearchMode::keywords(&why);
        };
        let stored = knowledge
            .inner
            .store
            .embedding_dims(&embedder.model_key())
            .await
            .ok()
            .and_then(|dims| dims.first().copied());
        let local_dir = settings
            .embedding
            .as_ref()
            .filter(|e| e.api == EmbeddingApi::Local)
            .and_then(|e| e.model_dir.as_deref());
        SearchMode {
            hybrid: true,
            model: Some(embedder.describe()),
            model_key: Some(embedder.model_key()),
            dimensions: stored.or_else(|| local_dir.and_then(hidden_size)),
            why_not: None,
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

/// Why search is keywords only, when the settings tell: no model configured, or the local
/// model's directory is empty (with what to run, or that it is being pulled).
fn why_keywords(settings: &KnowledgeSettings) -> Option<String> {
    let Some(embedding) = &settings.embedding else {
        return Some("no embedding model (TROUPE_EMBEDDING_PROVIDER=none)".into());
    };
    let dir = embedding
        .model_dir
        .as_deref()
        .filter(|d| embedding.api == EmbeddingApi::Local && !crate::models::installed(d))?;
    Some(match settings.hub.auto_pull {
        true => format!(
            "no local embedding model in {} yet: it is being pulled (TROUPE_MODELS_AUTO_PULL)",
            dir.display()
        ),
        false => format!(
            "no local embedding model in {}: run `troupe models pull`",
            dir.display()
        ),
    })
}

/// A persona's share of vectors: its chunks, and how many have a vector of the model in use.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VectorCoverage {
    #[serde(flatten)]
    pub mode: SearchMode,
    pub chunks: i64,
    pub chunks_with_vectors: i64,
}

impl Knowledge {
    /// How `agent_id`'s knowledge is searched, and how many of its chunks have vectors.
    pub async fn coverage(
        &self,
        agent_id: &AgentId,
    ) -> Result<VectorCoverage, super::KnowledgeError> {
        let mode = SearchMode::of_running(self).await;
        let (chunks, chunks_with_vectors) = match &mode.model_key {
            Some(model) => self.inner.store.embedding_coverage(agent_id, model).await?,
            None => (self.chunk_count(agent_id).await? as i64, 0),
        };
        Ok(VectorCoverage {
            mode,
            chunks,
            chunks_with_vectors,
        })
    }
}

/// `hidden_size` of a model directory's `config.json`.
fn hidden_size(dir: &Path) -> Option<usize> {
    let raw = std::fs::read(dir.join("config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&raw).ok()?;
    config["hidden_size"].as_u64().map(|n| n as usize)
}

impl std::fmt::Display for VectorCoverage {
    /// `hybrid (keywords and vectors of local:all-MiniLM-L6-v2, 384 dimensions); 2 of 2
    /// chunks have vectors`, or `keywords only (why); 3 chunks`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mode.hybrid {
            true => write!(
                f,
                "{}; {} of {} chunks have vectors",
                self.mode, self.chunks_with_vectors, self.chunks
            ),
            false => write!(f, "{}; {} chunks", self.mode, self.chunks),
        }
    }
}

/// How long `troupe check` waits for the database before it says the chunks were not
/// counted: a check must not hang on an unreachable Postgres.
const CHECK_DB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `troupe check`'s view of each persona's knowledge, one line per persona: the embedding
/// model and its size, whether search is hybrid, and how many of the persona's chunks
/// have vectors of that model in `database_url`. The counts are left out, with the reason,
/// when the database cannot be read; a SQLite file that does not exist yet is not created
/// (a check changes nothing), its personas simply have no chunks.
pub async fn check_lines(
    database_url: &str,
    settings: &KnowledgeSettings,
    agents: &[AgentId],
) -> Vec<String> {
    let mode = SearchMode::of(settings);
    let store = match open_existing(database_url).await {
        Ok(store) => store,
        Err(why) => {
            return agents
                .iter()
                .map(|a| format!("{a}: knowledge: {mode}; chunks not counted: {why}"))
                .collect();
        }
    };
    let mut lines = Vec::with_capacity(agents.len());
    for agent in agents {
        let line = match &store {
            None => format!("{agent}: knowledge: {mode}; 0 chunks (no database yet)"),
            Some(store) => match coverage_in(store, &mode, agent).await {
                Ok(coverage) => format!("{agent}: knowledge: {coverage}"),
                Err(e) => format!("{agent}: knowledge: {mode}; chunks not counted: {e}"),
            },
        };
        lines.push(line);
    }
    if let Some(store) = store {
        store.close().await;
    }
    lines
}

/// `agent`'s chunks and vectors in `store` for the model of `mode`; the vectors' size from
/// the stored ones when the settings did not tell (an API model without `dimensions`).
async fn coverage_in(
    store: &Store,
    mode: &SearchMode,
    agent: &AgentId,
) -> Result<VectorCoverage, crate::storage::StorageError> {
    let mut mode = mode.clone();
    let (chunks, chunks_with_vectors) = match &mode.model_key {
        Some(key) => {
            if mode.dimensions.is_none() {
                mode.dimensions = store.embedding_dims(key).await?.first().copied();
            }
            store.embedding_coverage(agent, key).await?
        }
        None => (store.embedding_coverage(agent, "").await?.0, 0),
    };
    Ok(VectorCoverage {
        mode,
        chunks,
        chunks_with_vectors,
    })
}

/// The database at `url`, `None` for a SQLite file that does not exist, or why it could
/// not be opened (without the URL's password).
async fn open_existing(url: &str) -> Result<Option<Store>, String> {
    use std::str::FromStr;
    if url.starts_with("sqlite:") {
        let file = sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map(|o| o.get_filename().to_path_buf())
            .map_err(|e| format!("{}: {e}", crate::config::redact_url(url)))?;
        if !file.exists() {
            return Ok(None);
        }
    }
    let redacted = crate::config::redact_url(url);
    match tokio::time::timeout(CHECK_DB_TIMEOUT, Store::connect(url)).await {
        Ok(Ok(store)) => Ok(Some(store)),
        Ok(Err(e)) => Err(format!("cannot open the database {redacted}: {e}")),
        Err(_) => Err(format!(
            "the database {redacted} did not answer within {}s",
            CHECK_DB_TIMEOUT.as_secs()
        )),
    }
}
