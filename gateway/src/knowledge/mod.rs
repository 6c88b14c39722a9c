//! Knowledge: the documents an agent knows, for all its rooms or for one, and retrieval
//! from them for the prompt.
//!
//! A document goes through extraction (`extract`: format detection, one reader per format,
//! binary refused) and chunking (`chunk`: cl100k tokens with overlap, Markdown-aware), both
//! in a sandboxed worker process (`sandbox`), then storing (the `documents` and `chunks`
//! tables), keyword indexing (`index`: tantivy BM25 on local disk, a cache that follows the
//! database on every backend and replica), and, when an embedding model is configured,
//! embedding (`embed`). A search ranks chunks by BM25 and, with an embedding model, by
//! cosine similarity through the vector index (`vectors`: pgvector's HNSW on Postgres when
//! the extension is there, else an approximate index in this process); the two rankings are
//! fused (`fusion`). Every hit carries its citation: source, document id, chunk
//! position and score.
//!
//! Scoping is the one rule that must hold everywhere: a search for a room sees that room's
//! documents and the agent-wide ones, never another room's. Identical content is stored
//! once per agent and scope: a document's id is derived from the agent, the scope and the
//! SHA-256 of its bytes, and a chunk's id from its document's id and its index, so ids are
//! stable across re-ingestion.
//!
//! Ingesting is two steps, so that a request of several documents is all or nothing:
//! [`Knowledge::prepare`] reads and chunks a document and stores nothing;
//! [`Knowledge::store_all`] stores prepared documents, and removes again the ones it
//! stored when one of them fails. [`Knowledge::ingest_from`] is both for one document.
//! [`Knowledge::ingest_files`] (`pipeline`) ingests many files at the encoder's pace:
//! reading, storing and embedding overlap, and chunks are embedded in pages that cross
//! documents.
//!
//! It owns no HTTP or CLI: `http::knowledge` and `cli` call it, the agent calls
//! [`Knowledge::for_prompt`], and the app ingests each character's `knowledge` entries.
//!
//! Layout: this file holds the handle, its construction and the errors; `ingest` adds and
//! removes documents (uploads, attachments, re-embedding); `character` reconciles a
//! character's `knowledge` entries with the stored documents; `search`
//! ranks chunks for a query and picks a prompt's; `follow` keeps the keyword and vector
//! indexes in step with the database.

mod analyzer;
mod autopull;
mod character;
mod chunk;
mod embed;
mod embedjob;
mod extract;
mod follow;
pub mod fusion;
mod index;
mod ingest;
mod memo;
mod pipeline;
mod sandbox;
mod search;
mod status;
mod vectors;
mod walk;

/// Extraction and chunking, for `crate::fuzzing` (the fuzz targets and their corpus replay)
/// only.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    pub(crate) use super::chunk::chunk;
    pub(crate) use super::extract::{Format, detect, extract};
}

use std::sync::Arc;

use troupe_connectors::AgentId;

use crate::storage::{StorageError, Store};

pub use crate::config::{EmbeddingApi, EmbeddingSettings, ExtractSettings, KnowledgeSettings};
pub use embed::{Embedder, Profile, Role};
use extract::ExtractError;
use index::KeywordIndex;
pub use index::{IndexError, IndexStatus};
pub use ingest::{Document, EMBED_PAGE, Ingested, Origin, Prepared, Vectors};
pub use pipeline::Outcome;
pub use sandbox::Input;
pub use sandbox::worker_main;
use sandbox::{Reader, Worker};
pub use search::{Hit, Ranking};
pub use status::{SearchMode, VectorCoverage, check_lines};
pub use vectors::{VectorError, VectorIndex, VectorMode, VectorStatus, exact_nearest};
pub use walk::files_under;

/// Why a document or a search failed. The HTTP API maps these to 413, 415, 422, 404, 502
/// and 500.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error(
        "`{file}` is {bytes} bytes, over the limit of {limit} bytes per document \
         (TROUPE_KNOWLEDGE_MAX_FILE_BYTES)"
    )]
    TooLarge {
        file: String,
        bytes: usize,
        limit: usize,
    },
    /// A format troupe does not read (binary, image, archive…).
    #[error("{0}")]
    Unsupported(String),
    /// A supported format that could not be read (a broken PDF, invalid JSON, no text).
    #[error("{0}")]
    Unreadable(String),
    #[error("{0}")]
    NotFound(String),
    /// Every document worker was busy for the whole extraction timeout (503).
    #[error("{0}")]
    Busy(String),
    #[error("embedding failed: {0}")]
    Embedding(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Vectors(#[from] VectorError),
}

impl From<ExtractError> for KnowledgeError {
    fn from(e: ExtractError) -> Self {
        match e {
            ExtractError::Unsupported(why) => KnowledgeError::Unsupported(why),
            ExtractError::Unreadable(why) => KnowledgeError::Unreadable(why),
        }
    }
}

/// The embedder for `settings`, or `None` (keyword search only) when it cannot be opened.
/// The local model picked by default is only used when its files are there; its absence is
/// one line in the log saying how to get them. A model asked for explicitly but missing is
/// a warning: troupe still starts, ranking by keywords.
fn open_embedder(settings: &EmbeddingSettings) -> Option<Embedder> {
    let missing_local = (settings.api == EmbeddingApi::Local)
        .then_some(settings.model_dir.as_deref())
        .flatten()
        .filter(|dir| !crate::models::installed(dir));
    match Embedder::open(settings) {
        Ok(e) => {
            tracing::info!(model = %e.describe(), "knowledge search is hybrid (keywords and vectors)");
            Some(e)
        }
        // One line saying what to run: the model is a download away.
        Err(_) if missing_local.is_some() => {
            let dir = missing_local
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            let line = format!(
                "no local embedding model in {dir}: run `troupe models pull` (or set \
                 TROUPE_MODELS_AUTO_PULL=true) for hybrid search; knowledge search uses keywords only"
            );
            match settings.explicit {
                true => tracing::warn!("{line}"),
                false => tracing::info!("{line}"),
            }
            None
        }
        Err(why) if settings.explicit => {
            tracing::warn!(error = %why, "no embedding model; knowledge search uses keywords only");
            None
        }
        Err(why) => {
            tracing::info!(reason = %why,
                "knowledge search uses keywords only; for hybrid search run `troupe models pull`, \
                 or set TROUPE_EMBEDDING_MODEL for an API (docs/knowledge.md)");
            None
        }
    }
}

/// The knowledge store: a cheap-to-clone handle.
#[derive(Clone)]
pub struct Knowledge {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: KnowledgeSettings,
    /// Set at most once: at start, or when a background pull installs the local model
    /// (`Knowledge::enable_vectors`); empty, search is keywords only.
    embedder: std::sync::OnceLock<Embedder>,
    /// Fetches chat attachments, under the outbound fetch policy.
    fetcher: crate::fetch::Fetcher,
    /// Who parses documents: the sandboxed worker, or this process in tests.
    reader: Reader,
    /// Embedding calls are accounted here (issue 16, docs/spend.md); `None` in tests.
    spend: std::sync::OnceLock<crate::spend::Spend>,
    /// The keyword index, a cache of the database (see `index`).
    index: Arc<KeywordIndex>,
    /// The vector index of the embedder's model (see `vectors`); empty without one. Set
    /// before `embedder`, so a search that sees an embedder finds its index.
    vectors: std::sync::OnceLock<Arc<VectorIndex>>,
    /// One embedding job at a time in this process (see `embedjob`).
    embedding: tokio::sync::Semaphore,
    /// Uploads' chunks waiting for their vectors (see `embedjob`).
    queued: std::sync::Mutex<embedjob::Queued>,
}

impl Knowledge {
    /// A knowledge store that reads documents in this process, without the sandbox: for
    /// unit tests and benchmarks, whose executable is not `troupe`. The gateway and the CLI
    /// use [`Knowledge::from_settings`].
    /// Its keyword index is in memory, built from the database at the first search.
    pub fn new(store: Store, settings: KnowledgeSettings, embedder: Option<Embedder>) -> Self {
        Self::with_reader(store, settings, embedder, Reader::InProcess, memory_index())
    }

    /// [`Knowledge::new`] with its keyword index in `settings.index_dir`, as the gateway
    /// keeps it: for tests and benchmarks of the on-disk index.
    pub fn with_index_dir(
        store: Store,
        settings: KnowledgeSettings,
        embedder: Option<Embedder>,
    ) -> Result<Self, KnowledgeError> {
        let index = KeywordIndex::open(&settings.index_dir)?;
        Ok(Self::with_reader(
            store,
            settings,
            embedder,
            Reader::InProcess,
            index,
        ))
    }

    fn with_reader(
        store: Store,
        settings: KnowledgeSettings,
        embedder: Option<Embedder>,
        reader: Reader,
        index: Arc<KeywordIndex>,
    ) -> Self {
        let vectors = std::sync::OnceLock::new();
        let with_model = std::sync::OnceLock::new();
        if let Some(e) = embedder {
            let _ = vectors.set(VectorIndex::new(e.model_key(), settings.pgvector));
            let _ = with_model.set(e);
        }
        Knowledge {
            inner: Arc::new(Inner {
                vectors,
                fetcher: crate::fetch::Fetcher::new(&settings.fetch),
                store,
                settings,
                embedder: with_model,
                reader,
                spend: std::sync::OnceLock::new(),
                index,
                embedding: tokio::sync::Semaphore::new(1),
                queued: std::sync::Mutex::default(),
            }),
        }
    }

    /// Accounts this store's embedding calls, per persona, as purpose `embedding`.
    pub fn account_with(&self, spend: crate::spend::Spend) {
        let _ = self.inner.spend.set(spend);
    }

    /// One embedding call for `agent_id`'s knowledge, accounted when spend is on.
    async fn embed_for(
        &self,
        embedder: &Embedder,
        agent_id: &AgentId,
        texts: &[&str],
        role: Role,
    ) -> Result<Vec<Vec<f32>>, String> {
        let (vectors, tokens) = embedder.embed_counted(role, texts).await?;
        if let Some(spend) = self.inner.spend.get() {
            let tokens = crate::spend::Tokens {
                prompt: tokens.and_then(|t| u32::try_from(t).ok()),
                completion: Some(0),
                cached: None,
                prompt_chars: texts.iter().map(|t| t.len()).sum(),
                completion_chars: 0,
            };
            let nobody = crate::spend::Who {
                room: None,
                user: None,
            };
            spend
                .meter_for(agent_id)
                .record(
                    nobody,
                    crate::spend::Purpose::Embedding,
                    &embedder.model(),
                    tokens,
                )
                .await;
        }
        Ok(vectors)
    }

    /// Built from the gateway's settings: documents are read by sandboxed `troupe extract`
    /// workers (this executable), with an embedder when an embedding model is set.
    pub fn from_settings(store: Store, settings: &KnowledgeSettings) -> Self {
        let embedder = settings.embedding.as_ref().and_then(open_embedder);
        let worker = Worker::current_exe(settings.extract.clone());
        // The index is only a cache: when its directory cannot be had (another process
        // holds it, e.g. `troupe ingest` beside a running gateway), this process keeps one
        // in memory, built from the database if it ever searches.
        let index = KeywordIndex::open(&settings.index_dir).unwrap_or_else(|e| {
            tracing::info!(error = %e, "using an in-memory keyword index");
            memory_index()
        });
        Self::with_reader(
            store,
            settings.clone(),
            embedder,
            Reader::Worker(Arc::new(worker)),
            index,
        )
    }

    pub fn settings(&self) -> &KnowledgeSettings {
        &self.inner.settings
    }

    pub fn embedder(&self) -> Option<&Embedder> {
        self.inner.embedder.get()
    }

    /// The vector index, once there is an embedder.
    fn vectors(&self) -> Option<&Arc<VectorIndex>> {
        self.inner.vectors.get()
    }

    /// Turns vectors on with `embedder` (the background pull installed the local model):
    /// from now on documents are embedded as they come and searches are hybrid. False when
    /// an embedder was already there. The chunks stored before are embedded by
    /// [`Knowledge::backfill`].
    pub fn enable_vectors(&self, embedder: Embedder) -> bool {
        if self.inner.embedder.get().is_some() {
            return false;
        }
        let index = VectorIndex::new(embedder.model_key(), self.inner.settings.pgvector);
        let _ = self.inner.vectors.set(index);
        self.inner.embedder.set(embedder).is_ok()
    }
}

/// An in-memory keyword index. Creating one allocates a writer of a fixed budget and
/// touches no input, so a failure here is a broken build, not bad input.
fn memory_index() -> Arc<KeywordIndex> {
    KeywordIndex::in_memory().expect("an in-memory keyword index")
}
