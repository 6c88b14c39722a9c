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
//!
//! It owns no HTTP or CLI: `http::knowledge` and `cli` call it, the agent calls
//! [`Knowledge::for_prompt`], and the app ingests each character's `knowledge` entries.

mod analyzer;
mod chunk;
mod embed;
mod extract;
pub mod fusion;
mod index;
mod memo;
mod sandbox;
mod vectors;
mod walk;

/// Extraction and chunking, for `crate::fuzzing` (the fuzz targets and their corpus replay)
/// only.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz {
    pub(crate) use super::chunk::chunk;
    pub(crate) use super::extract::{Format, detect, extract};
}

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use troupe_connectors::{AgentId, RoomKey};

use crate::persona::{KnowledgeEntry, Persona};
use crate::storage::{NewDocument, NewEmbedding, Scope, ScoredChunk, StorageError, Store};

pub use crate::config::{EmbeddingApi, EmbeddingSettings, ExtractSettings, KnowledgeSettings};
pub use embed::{Embedder, Profile, Role};
use extract::ExtractError;
use index::KeywordIndex;
pub use index::{IndexError, IndexStatus};
pub use sandbox::Input;
pub use sandbox::worker_main;
use sandbox::{Reader, Worker};
pub use vectors::{VectorError, VectorIndex, VectorMode, VectorStatus, exact_nearest};
pub use walk::files_under;

/// Candidates taken from each ranking before fusion, at least.
const FUSION_CANDIDATES: usize = 50;
/// Query words kept; a pasted paragraph should not become a 500-term OR.
const MAX_QUERY_TERMS: usize = 32;
/// Chunks embedded per round when filling in vectors.
const EMBED_PAGE: usize = 256;

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

/// What [`Knowledge::ingest`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ingested {
    pub document_id: String,
    pub chunks: usize,
    /// The same content was already stored for this agent and scope; nothing changed.
    pub duplicate: bool,
}

/// One retrieved chunk. `score` is higher for better matches: BM25 (or Postgres' rank)
/// without an embedding model, the fusion score with one (`fusion`), the cosine for vectors alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    pub chunk_id: String,
    pub document_id: String,
    pub source: String,
    /// The chunk's position in its document, from 0 (the citation's "where").
    pub chunk: i64,
    pub text: String,
    pub score: f64,
}

impl From<ScoredChunk> for Hit {
    fn from(c: ScoredChunk) -> Self {
        Hit {
            chunk: chunk_position(&c.chunk_id),
            chunk_id: c.chunk_id,
            document_id: c.document_id,
            source: c.source,
            text: c.text,
            score: c.score,
        }
    }
}

/// Which rankings a search uses ([`Knowledge::search_ranked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// BM25 from the keyword index.
    Keywords,
    /// Cosine similarity to the query's vector.
    Vectors,
    /// Both, fused ([`fusion::DEFAULT`]).
    Hybrid,
}

/// The embedder for `settings`, or `None` (keyword search only) when it cannot be opened.
/// The local model picked by default is only used when its files are there; its absence is
/// one line in the log saying how to get them. A model asked for explicitly but missing is
/// a warning: troupe still starts, ranking by keywords.
fn open_embedder(settings: &EmbeddingSettings) -> Option<Embedder> {
    match Embedder::open(settings) {
        Ok(e) => {
            tracing::info!(model = %e.describe(), "knowledge search is hybrid (keywords and vectors)");
            Some(e)
        }
        Err(why) if settings.explicit => {
            tracing::warn!(error = %why, "no embedding model; knowledge search uses keywords only");
            None
        }
        Err(why) => {
            tracing::info!(reason = %why,
                "knowledge search uses keywords only; for hybrid search put a sentence-transformers \
                 model (e.g. all-MiniLM-L6-v2: config.json, tokenizer.json, model.safetensors) in \
                 data/models/all-MiniLM-L6-v2 or TROUPE_EMBEDDING_MODEL_DIR, or set \
                 TROUPE_EMBEDDING_MODEL for an API (docs/knowledge.md)");
            None
        }
    }
}

/// A chunk id is `document id:index`; the index part, or -1 for an id of another shape.
fn chunk_position(chunk_id: &str) -> i64 {
    chunk_id
        .rsplit_once(':')
        .and_then(|(_, i)| i.parse().ok())
        .unwrap_or(-1)
}

/// A stored document, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    pub id: String,
    pub source: String,
    /// The room key it is scoped to; `None` for the whole agent.
    pub room_id: Option<RoomKey>,
    pub content_type: String,
    /// Who added it: `upload`, `cli`, `character` or `attachment`.
    pub origin: String,
    pub bytes: i64,
    pub chunks: i64,
    pub created_at_ms: i64,
}

/// Who added a document. Character documents are reconciled with the character file at
/// each load; the others stay until deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Upload,
    Cli,
    Character,
    Attachment,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Upload => "upload",
            Origin::Cli => "cli",
            Origin::Character => "character",
            Origin::Attachment => "attachment",
        }
    }
}

/// A document read and chunked for one agent and scope, not yet stored: what
/// [`Knowledge::prepare`] gives and [`Knowledge::store_all`] takes.
#[derive(Debug, Clone)]
pub struct Prepared {
    id: String,
    scope: Scope,
    source: String,
    content_type: &'static str,
    hash: String,
    bytes: u64,
    /// `(chunk id, text)`; empty when `existing` is set.
    chunks: Vec<(String, String)>,
    /// Each chunk's terms for the keyword index, when the reader gave them (else empty).
    terms: Vec<String>,
    /// The same content is stored already, with this many chunks: nothing to do.
    existing: Option<usize>,
}

impl Prepared {
    pub fn source(&self) -> &str {
        &self.source
    }
    /// The room it is scoped to; `None` for the whole agent.
    pub fn room(&self) -> Option<&RoomKey> {
        self.scope.room()
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
    embedder: Option<Embedder>,
    /// Fetches chat attachments, under the outbound fetch policy.
    fetcher: crate::fetch::Fetcher,
    /// Who parses documents: the sandboxed worker, or this process in tests.
    reader: Reader,
    /// Embedding calls are accounted here (issue 16, docs/spend.md); `None` in tests.
    spend: std::sync::OnceLock<crate::spend::Spend>,
    /// The keyword index, a cache of the database (see `index`).
    index: Arc<KeywordIndex>,
    /// The vector index of the embedder's model (see `vectors`); `None` without one.
    vectors: Option<Arc<VectorIndex>>,
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
        let vectors = embedder
            .as_ref()
            .map(|e| VectorIndex::new(e.model_key(), settings.pgvector));
        Knowledge {
            inner: Arc::new(Inner {
                vectors,
                fetcher: crate::fetch::Fetcher::new(&settings.fetch),
                store,
                settings,
                embedder,
                reader,
                spend: std::sync::OnceLock::new(),
                index,
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

    /// See `KeywordIndex::staging_done`.
    #[cfg(test)]
    pub(crate) async fn index_staging_done(&self) {
        self.inner.index.staging_done().await
    }

    /// How far the keyword index has followed the database (for `/readyz` and `/metrics`).
    pub fn index_status(&self) -> IndexStatus {
        self.inner.index.status()
    }

    /// Brings the keyword index up to the database now: builds it when missing, then
    /// replays the changes made since (here or through another replica).
    pub async fn sync_index(&self) -> Result<IndexStatus, KnowledgeError> {
        self.inner.index.sync(&self.inner.store).await?;
        self.index_moved().await
    }

    /// One step of [`Knowledge::follow`]: [`Knowledge::sync_index`], except that this
    /// process's own uploads are committed once they pause (`KeywordIndex::follow`).
    async fn follow_step(&self) -> Result<IndexStatus, KnowledgeError> {
        self.inner.index.follow(&self.inner.store).await?;
        self.index_moved().await
    }

    /// After the keyword index moved: its gauge, then the vector index follows.
    async fn index_moved(&self) -> Result<IndexStatus, KnowledgeError> {
        let status = self.inner.index.status();
        crate::metrics::knowledge_index(status.lag, status.rebuilding);
        if let Some(vectors) = &self.inner.vectors {
            vectors.sync(&self.inner.store).await?;
        }
        Ok(status)
    }

    /// How far the vector index has followed the database, and which path it takes
    /// (pgvector or in-process); `None` without an embedding model.
    pub fn vector_status(&self) -> Option<VectorStatus> {
        self.inner.vectors.as_ref().map(|v| v.status())
    }

    /// Follows the database until `stop`: builds the index at once, then syncs every
    /// `TROUPE_INDEX_POLL_MS`, so changes made through other replicas reach this one's
    /// results.
    pub async fn follow(self, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(self.inner.settings.index_poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Logged once when it starts failing and once when it recovers, not at every poll.
        let mut failing = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    // What is staged is committed, so the next start has nothing to replay
                    // (no sync: a rebuild must not start at shutdown).
                    if let Err(e) = self.inner.index.commit_pending().await {
                        tracing::debug!(error = %e, "keyword index not committed at shutdown; the next start replays it");
                    }
                    return;
                }
                _ = tick.tick() => match self.follow_step().await {
                    Ok(_) if failing => {
                        failing = false;
                        tracing::info!("keyword index follows the database again");
                    }
                    Ok(_) => {}
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "keyword index could not follow the database; retrying");
                    }
                    Err(e) => tracing::debug!(error = %e, "keyword index still cannot follow the database"),
                },
            }
        }
    }

    /// After a write of this process: the index follows at once when it is built (so an
    /// upload is found by the next search); a failure is logged, and the next sync retries.
    async fn after_write(&self) {
        if self.inner.index.is_built()
            && let Err(e) = self.sync_index().await
        {
            tracing::warn!(error = %e, "keyword index update failed; it will catch up");
        }
    }

    /// After this process stored document `document_id` as change `seq`: the index stages
    /// its chunks (committed by the next search or sync, `index`), and the vector index
    /// follows. Only once the index is built: a build reads everything anyway.
    async fn after_add(
        &self,
        seq: i64,
        agent_id: &AgentId,
        document_id: String,
        scope: &Scope,
        chunks: (Vec<(String, String)>, Vec<String>),
    ) {
        let index = &self.inner.index;
        if !index.is_built() {
            return;
        }
        let staged = index
            .stage_own(
                &self.inner.store,
                seq,
                document_id,
                (agent_id, scope),
                chunks,
            )
            .await
            .map_err(KnowledgeError::from);
        if let Err(e) = staged.and(self.index_moved().await) {
            tracing::warn!(error = %e, "keyword index update failed; it will catch up");
        }
    }

    pub fn settings(&self) -> &KnowledgeSettings {
        &self.inner.settings
    }

    pub fn embedder(&self) -> Option<&Embedder> {
        self.inner.embedder.as_ref()
    }

    /// Extract, chunk, index one document; dedupes by hash.
    pub async fn ingest(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        source: &str,
        content_type: Option<&str>,
        bytes: &[u8],
    ) -> Result<Ingested, KnowledgeError> {
        self.ingest_from(Origin::Upload, agent_id, room, source, content_type, bytes)
            .await
    }

    /// [`Knowledge::ingest`], recording who added the document.
    pub async fn ingest_from(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        source: &str,
        content_type: Option<&str>,
        bytes: &[u8],
    ) -> Result<Ingested, KnowledgeError> {
        let prepared = self
            .prepare(agent_id, room, source, content_type, Input::Bytes(bytes))
            .await?;
        self.store(origin, agent_id, prepared).await
    }

    /// Reads and chunks one document for `agent_id` and `room` (in the sandboxed worker)
    /// and stores nothing. Content already stored there is not read again.
    pub async fn prepare(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        source: &str,
        content_type: Option<&str>,
        input: Input<'_>,
    ) -> Result<Prepared, KnowledgeError> {
        let settings = &self.inner.settings;
        let unreadable =
            |e: std::io::Error| KnowledgeError::Unreadable(format!("cannot read `{source}`: {e}"));
        let size = match input {
            Input::Bytes(b) => b.len() as u64,
            Input::File(path) => tokio::fs::metadata(path).await.map_err(unreadable)?.len(),
        };
        if size > settings.max_file_bytes as u64 {
            return Err(KnowledgeError::TooLarge {
                file: source.to_string(),
                bytes: usize::try_from(size).unwrap_or(usize::MAX),
                limit: settings.max_file_bytes,
            });
        }
        let hash = match input {
            Input::Bytes(b) => hex::encode(Sha256::digest(b)),
            Input::File(path) => hash_file(path).await.map_err(unreadable)?,
        };
        let scope = Scope::new(room);
        let id = document_id(agent_id, &scope, &hash);
        let mut prepared = Prepared {
            id,
            scope,
            source: source.to_string(),
            content_type: "",
            hash,
            bytes: size,
            chunks: Vec::new(),
            terms: Vec::new(),
            existing: None,
        };
        if let Some(existing) = self.inner.store.document(agent_id, &prepared.id).await? {
            prepared.existing = Some(usize::try_from(existing.chunk_count).unwrap_or(0));
            return Ok(prepared);
        }
        let chunked = self
            .inner
            .reader
            .read(
                source,
                content_type,
                input,
                (settings.chunk_tokens, settings.chunk_overlap_tokens),
            )
            .await?;
        if chunked.chunks.is_empty() {
            return Err(KnowledgeError::Unreadable(format!(
                "`{source}` holds no text to index"
            )));
        }
        prepared.content_type = chunked.format.content_type();
        prepared.terms = chunked.terms;
        prepared.chunks = chunked
            .chunks
            .into_iter()
            .enumerate()
            .map(|(i, text)| (format!("{}:{i}", prepared.id), text))
            .collect();
        Ok(prepared)
    }

    /// Stores prepared documents, in order. All or nothing: when one fails, the ones this
    /// call stored are deleted again before the error is returned (content that was stored
    /// before the call stays).
    pub async fn store_all(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Vec<Prepared>,
    ) -> Result<Vec<Ingested>, KnowledgeError> {
        let mut done: Vec<Ingested> = Vec::with_capacity(prepared.len());
        for p in prepared {
            match self.store(origin, agent_id, p).await {
                Ok(ingested) => done.push(ingested),
                Err(e) => {
                    for d in done.iter().filter(|d| !d.duplicate) {
                        if let Err(undo) = self
                            .inner
                            .store
                            .delete_document(agent_id, &d.document_id)
                            .await
                        {
                            tracing::error!(agent = %agent_id, document = %d.document_id, error = %undo,
                                "could not remove a document of a failed upload");
                        }
                    }
                    self.after_write().await;
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Stores one prepared document, and embeds it when an embedding model is set.
    async fn store(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Prepared,
    ) -> Result<Ingested, KnowledgeError> {
        let Prepared {
            id,
            scope,
            source,
            content_type,
            hash,
            bytes,
            chunks,
            terms,
            existing,
        } = prepared;
        if let Some(chunks) = existing {
            return Ok(Ingested {
                document_id: id,
                chunks,
                duplicate: true,
            });
        }
        let store = &self.inner.store;
        let inserted = store
            .insert_document(&NewDocument {
                id: &id,
                agent_id,
                scope: &scope,
                source: &source,
                content_type,
                content_hash: &hash,
                origin: origin.as_str(),
                bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
                chunks: &chunks,
            })
            .await?;
        let Some(seq) = inserted else {
            // Stored by a concurrent upload of the same content in the meantime.
            return Ok(Ingested {
                document_id: id,
                chunks: chunks.len(),
                duplicate: true,
            });
        };
        if let Some(embedder) = &self.inner.embedder {
            // The document is searchable by BM25 already; without vectors it is only
            // missing from the vector ranking until `troupe ingest --reembed`.
            if let Err(e) = self.embed_chunks(embedder, agent_id, &scope, &chunks).await {
                tracing::warn!(document = %id, %source, error = %e,
                    "could not embed the document; it is searchable by keywords only until `troupe ingest --reembed`");
            }
        }
        // The index takes the chunks in hand (they are not read back from the database),
        // and lets them go as it indexes them.
        let count = chunks.len();
        self.after_add(seq, agent_id, id.clone(), &scope, (chunks, terms))
            .await;
        let scope = scope
            .room()
            .map_or_else(|| "agent".to_string(), RoomKey::to_string);
        tracing::info!(agent = %agent_id, document = %id, %source, chunks = count,
            %scope, "document ingested");
        Ok(Ingested {
            document_id: id,
            chunks: count,
            duplicate: false,
        })
    }

    async fn embed_chunks(
        &self,
        embedder: &Embedder,
        agent_id: &AgentId,
        scope: &Scope,
        chunks: &[(String, String)],
    ) -> Result<(), KnowledgeError> {
        let model = embedder.model_key();
        for page in chunks.chunks(EMBED_PAGE) {
            let texts: Vec<&str> = page.iter().map(|(_, t)| t.as_str()).collect();
            let vectors = self
                .embed_for(embedder, agent_id, &texts, Role::Passage)
                .await
                .map_err(KnowledgeError::Embedding)?;
            let rows: Vec<NewEmbedding> = page
                .iter()
                .zip(vectors)
                .map(|((id, _), v)| NewEmbedding {
                    chunk_id: id.clone(),
                    agent_id: agent_id.clone(),
                    scope: scope.clone(),
                    vector: embed::to_bytes(&v),
                })
                .collect();
            self.inner.store.put_embeddings(&model, &rows).await?;
        }
        Ok(())
    }

    /// The chunks that best match `query` among the agent's documents and, when `room` is
    /// given, that room's; best first. Hybrid when an embedding model is configured, else
    /// keywords alone.
    pub async fn search(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        self.search_ranked(agent_id, room, query, limit, Ranking::Hybrid)
            .await
    }

    /// [`Knowledge::search`] by one ranking: keywords alone, vectors alone (empty without
    /// an embedding model), or both fused (keywords alone without an embedding model). The
    /// single rankings are for evaluation (gateway/tests/retrieval_quality.rs) and for
    /// seeing why a passage was found.
    pub async fn search_ranked(
        &self,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        query: &str,
        limit: usize,
        ranking: Ranking,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let scope = &Scope::new(room);
        let terms = query_terms(query);
        let store = &self.inner.store;
        let embedder = match (&self.inner.embedder, ranking) {
            (_, Ranking::Keywords) | (None, Ranking::Hybrid) => {
                return self.keyword_search(agent_id, scope, &terms, limit).await;
            }
            (None, Ranking::Vectors) => return Ok(Vec::new()),
            (Some(embedder), _) => embedder,
        };
        let candidates = match ranking {
            Ranking::Vectors => limit,
            _ => (limit * 4).max(FUSION_CANDIDATES),
        };
        let by_text = match ranking {
            Ranking::Vectors => Vec::new(),
            _ => {
                self.keyword_search(agent_id, scope, &terms, candidates)
                    .await?
            }
        };
        let by_vector = match self
            .embed_for(embedder, agent_id, &[query], Role::Query)
            .await
        {
            Ok(mut v) if !query.trim().is_empty() => {
                let q = v.pop().unwrap_or_default();
                self.dense_candidates(agent_id, scope, &q, candidates).await
            }
            Ok(_) => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "could not embed the query; ranking by keywords only");
                Vec::new()
            }
        };
        let fused = match ranking {
            Ranking::Vectors => by_vector
                .iter()
                .map(|(id, score)| (id.clone(), f64::from(*score)))
                .collect(),
            _ => fusion::fuse(
                &by_text
                    .iter()
                    .map(|c| (c.chunk_id.as_str(), c.score))
                    .collect::<Vec<_>>(),
                &by_vector
                    .iter()
                    .map(|(id, score)| (id.as_str(), f64::from(*score)))
                    .collect::<Vec<_>>(),
                fusion::DEFAULT,
                limit,
            ),
        };
        let mut rows: HashMap<String, Hit> = by_text
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        let missing: Vec<String> = fused
            .iter()
            .filter(|(id, _)| !rows.contains_key(id))
            .map(|(id, _)| id.clone())
            .collect();
        if !missing.is_empty() {
            for c in store.chunks_by_id(&missing).await? {
                rows.insert(c.chunk_id.clone(), Hit::from(c));
            }
        }
        Ok(fused
            .into_iter()
            .filter_map(|(id, score)| rows.remove(&id).map(|c| Hit { score, ..c }))
            .collect())
    }

    /// The `k` chunks nearest to the query vector `q` through the vector index (built first
    /// when it is not yet): `(chunk id, cosine)`, best first. A failure is logged and gives
    /// none: the keyword ranking still answers.
    async fn dense_candidates(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        q: &[f32],
        k: usize,
    ) -> Vec<(String, f32)> {
        let Some(vectors) = &self.inner.vectors else {
            return Vec::new();
        };
        let store = &self.inner.store;
        let found = async {
            if !vectors.is_built() {
                vectors.sync(store).await?;
            }
            vectors.nearest(store, agent_id, scope, q, k).await
        };
        match found.await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "vector search failed; ranking by keywords only");
                Vec::new()
            }
        }
    }

    /// The BM25 ranking from the keyword index (built first when it is not yet), with the
    /// text and source read from the database. A chunk the index still has but the
    /// database no longer does (deleted through another replica, not yet synced) is left
    /// out, so a delete never shows in results.
    async fn keyword_search(
        &self,
        agent_id: &AgentId,
        scope: &Scope,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let index = &self.inner.index;
        if !index.is_built() {
            self.sync_index().await?;
        } else if index.has_pending() {
            // Uploads that returned before this search are in it.
            index.commit_pending().await?;
        }
        let ranked = index.search(agent_id, scope, terms, limit)?;
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
        let mut rows: HashMap<String, ScoredChunk> = self
            .inner
            .store
            .chunks_by_id(&ids)
            .await?
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        Ok(ranked
            .into_iter()
            .filter_map(|(id, score)| {
                rows.remove(&id).map(|c| Hit {
                    score,
                    ..Hit::from(c)
                })
            })
            .collect())
    }

    /// The knowledge for a reply: the top chunks for `text` within the prompt's knowledge
    /// budget. Retrieval must never cost the reply: an error or a slow search is logged and
    /// answered with nothing.
    pub async fn for_prompt(&self, agent_id: &AgentId, room: &RoomKey, text: &str) -> Vec<Hit> {
        let settings = &self.inner.settings;
        if settings.top_k == 0 || settings.prompt_budget_chars == 0 {
            return Vec::new();
        }
        // Nothing was ever uploaded (the index is synced and no change was ever made): no
        // search, and no query embedding (issue 18: no cost for a feature with nothing to do).
        let index = self.inner.index.status();
        if self.inner.index.is_built() && index.applied <= 0 && index.head <= 0 {
            return Vec::new();
        }
        let search = self.search(agent_id, Some(room), text, settings.top_k);
        match tokio::time::timeout(settings.search_timeout, search).await {
            Ok(Ok(hits)) => within_budget(hits, settings.prompt_budget_chars),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "knowledge search failed; answering without knowledge");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = settings.search_timeout.as_millis() as u64,
                    "knowledge search took too long; answering without knowledge"
                );
                Vec::new()
            }
        }
    }

    /// Ingests the text-like attachments of a chat message for its room: fetched (at most
    /// `max_attachment_bytes` each, streamed, refused past the cap), then ingested like an
    /// upload. Returns how many were added. Failures are logged by file name only: a
    /// platform's file URL may carry a token.
    pub async fn ingest_attachments(
        &self,
        agent_id: &AgentId,
        room: &RoomKey,
        attachments: &[troupe_connectors::Attachment],
    ) -> usize {
        let cap = self.inner.settings.max_attachment_bytes;
        let mut added = 0;
        for a in attachments {
            let Some(url) = a.url.as_deref() else {
                continue;
            };
            if !extract::likely_text(&a.name, a.mime.as_deref())
                || a.size.is_some_and(|s| s > cap as u64)
            {
                tracing::debug!(attachment = %a.name, "attachment not ingested: not text, or too large");
                continue;
            }
            let bytes = match self.fetch_capped(url, cap).await {
                Ok(bytes) => bytes,
                Err(why) => {
                    tracing::warn!(attachment = %a.name, "attachment not ingested: {why}");
                    continue;
                }
            };
            match self
                .ingest_from(
                    Origin::Attachment,
                    agent_id,
                    Some(room),
                    &a.name,
                    a.mime.as_deref(),
                    &bytes,
                )
                .await
            {
                Ok(done) if !done.duplicate => added += 1,
                Ok(_) => {}
                Err(e) => tracing::warn!(attachment = %a.name, "attachment not ingested: {e}"),
            }
        }
        added
    }

    async fn fetch_capped(
        &self,
        url: &str,
        cap: usize,
    ) -> Result<Vec<u8>, crate::fetch::FetchError> {
        self.inner.fetcher.fetch_capped(url, cap).await
    }

    /// The agent's documents, newest first; only one scope's when `room` is given
    /// (`Some(None)`: the agent-wide ones).
    pub async fn documents(
        &self,
        agent_id: &AgentId,
        room: Option<Option<&RoomKey>>,
    ) -> Result<Vec<Document>, KnowledgeError> {
        let scope = room.map(Scope::new);
        let rows = self.inner.store.documents(agent_id, scope.as_ref()).await?;
        Ok(rows
            .into_iter()
            .map(|d| Document {
                room_id: d.scope.into_room(),
                id: d.id,
                source: d.source,
                content_type: d.content_type,
                origin: d.origin,
                bytes: d.bytes,
                chunks: d.chunk_count,
                created_at_ms: d.created_at_ms,
            })
            .collect())
    }

    /// Deletes a document, its chunks and its vectors.
    pub async fn delete(
        &self,
        agent_id: &AgentId,
        document_id: &str,
    ) -> Result<(), KnowledgeError> {
        if self
            .inner
            .store
            .delete_document(agent_id, document_id)
            .await?
        {
            tracing::info!(agent = %agent_id, document = %document_id, "document deleted");
            self.after_write().await;
            Ok(())
        } else {
            Err(KnowledgeError::NotFound(format!(
                "agent `{agent_id}` has no document `{document_id}`"
            )))
        }
    }

    /// Rebuilds the agent's vectors for the configured model: drops them, then embeds every
    /// chunk again, calling `progress` with the number done so far. Vectors of other models
    /// are kept (switching back needs no re-embedding).
    pub async fn reembed(
        &self,
        agent_id: &AgentId,
        mut progress: impl FnMut(usize),
    ) -> Result<usize, KnowledgeError> {
        let Some(embedder) = &self.inner.embedder else {
            return Err(KnowledgeError::Embedding(
                "no embedding model is configured: set TROUPE_EMBEDDING_MODEL (see docs/knowledge.md)"
                    .into(),
            ));
        };
        let model = embedder.model_key();
        let store = &self.inner.store;
        store.delete_embeddings(agent_id, &model).await?;
        let mut done = 0;
        let mut after = 0;
        loop {
            let page = store
                .chunks_without_embedding(Some(agent_id), &model, after, EMBED_PAGE)
                .await?;
            let Some(last) = page.last() else {
                // The vector index drops the old vectors and takes the new ones now.
                self.after_write().await;
                return Ok(done);
            };
            after = last.seq;
            let texts: Vec<&str> = page.iter().map(|c| c.text.as_str()).collect();
            let vectors = self
                .embed_for(embedder, agent_id, &texts, Role::Passage)
                .await
                .map_err(KnowledgeError::Embedding)?;
            let rows: Vec<_> = page
                .iter()
                .zip(vectors)
                .map(|(c, v)| NewEmbedding {
                    chunk_id: c.id.clone(),
                    agent_id: c.agent_id.clone(),
                    scope: c.scope.clone(),
                    vector: embed::to_bytes(&v),
                })
                .collect();
            store.put_embeddings(&model, &rows).await?;
            done += rows.len();
            progress(done);
        }
    }

    /// Chunks of the agent, for a progress bar's length.
    pub async fn chunk_count(&self, agent_id: &AgentId) -> Result<usize, KnowledgeError> {
        let docs = self.inner.store.documents(agent_id, None).await?;
        Ok(docs
            .iter()
            .map(|d| usize::try_from(d.chunk_count).unwrap_or(0))
            .sum())
    }

    /// Ingests a file from disk (the size limit is checked before reading; the worker
    /// reads the file from a pipe, so the gateway never holds it whole).
    pub async fn ingest_file(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        room: Option<&RoomKey>,
        path: &Path,
    ) -> Result<Ingested, KnowledgeError> {
        let name = path.display().to_string();
        let prepared = self
            .prepare(agent_id, room, &name, None, Input::File(path))
            .await?;
        self.store(origin, agent_id, prepared).await
    }

    /// Ingests a character's `knowledge` entries (strings, files, directories) for the
    /// whole agent, and removes the documents a previous version of the file had and this
    /// one no longer has. Idempotent: unchanged content is found by its hash. Problems are
    /// logged; the persona runs without the entries that failed.
    pub async fn load_character(&self, persona: &Persona) {
        let agent = &persona.id;
        let file = persona
            .source
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| persona.source.display().to_string());
        let mut keep: HashSet<String> = HashSet::new();
        let mut storage_failed = false;
        let mut note = |result: Result<Ingested, KnowledgeError>, what: &str| match result {
            Ok(done) => {
                keep.insert(done.document_id);
            }
            Err(KnowledgeError::Storage(e)) => {
                storage_failed = true;
                tracing::error!(persona = %agent, %what, error = %e, "could not store a knowledge entry");
            }
            Err(e) => {
                tracing::warn!(persona = %agent, %what, "knowledge entry skipped: {e}")
            }
        };
        for (i, entry) in persona.knowledge().iter().enumerate() {
            match entry {
                KnowledgeEntry::Text(text) => {
                    let source = format!("{file} knowledge[{i}]");
                    let result = self
                        .ingest_from(
                            Origin::Character,
                            agent,
                            None,
                            &source,
                            Some("text/plain"),
                            text.as_bytes(),
                        )
                        .await;
                    note(result, &source);
                }
                KnowledgeEntry::File { path, .. } => {
                    let result = self.ingest_file(Origin::Character, agent, None, path).await;
                    note(result, &path.display().to_string());
                }
                KnowledgeEntry::Directory { path, .. } => {
                    for file in files_under(path) {
                        let result = self
                            .ingest_file(Origin::Character, agent, None, &file)
                            .await;
                        note(result, &file.display().to_string());
                    }
                }
            }
        }
        if storage_failed {
            return;
        }
        let store = &self.inner.store;
        match store
            .document_ids_by_origin(agent, Origin::Character.as_str())
            .await
        {
            Ok(ids) => {
                for id in ids.into_iter().filter(|id| !keep.contains(id)) {
                    match store.delete_document(agent, &id).await {
                        Ok(_) => tracing::info!(persona = %agent, document = %id,
                            "knowledge entry no longer in the character file; document removed"),
                        Err(e) => tracing::error!(persona = %agent, document = %id, error = %e,
                            "could not remove a stale knowledge document"),
                    }
                }
            }
            Err(e) => {
                tracing::error!(persona = %agent, error = %e, "could not list knowledge documents")
            }
        }
        self.after_write().await;
    }
}

/// An in-memory keyword index. Creating one allocates a writer of a fixed budget and
/// touches no input, so a failure here is a broken build, not bad input.
fn memory_index() -> Arc<KeywordIndex> {
    KeywordIndex::in_memory().expect("an in-memory keyword index")
}

/// The SHA-256 of a file, read in pieces.
async fn hash_file(path: &Path) -> std::io::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::File::open(path).await?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// The document id: derived from the agent, the scope (as stored: `""` or the room key)
/// and the content's SHA-256, so the same content in the same place always has the same id.
fn document_id(agent_id: &AgentId, scope: &Scope, content_hash: &str) -> String {
    let mut h = Sha256::new();
    h.update(agent_id.as_str().as_bytes());
    h.update([0]);
    h.update(scope.to_string().as_bytes());
    h.update([0]);
    h.update(content_hash.as_bytes());
    hex::encode(&h.finalize()[..12])
}

/// Words too common to help a keyword search. The index keeps them (its tokenizer has no
/// stop list); a query term matching nearly every chunk only costs time.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do",
    "does", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its",
    "me", "my", "of", "on", "or", "our", "she", "he", "so", "that", "the", "their", "them",
    "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "would", "you", "your",
];

/// The query cut into lower-case words of letters and digits, stop words dropped, each once.
fn query_terms(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .filter(|w| seen.insert(w.clone()))
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// The hits, best first, whose text fits in `budget` characters together. A hit that does
/// not fit is skipped, so a shorter one after it may still go in.
fn within_budget(hits: Vec<Hit>, budget: usize) -> Vec<Hit> {
    let mut used = 0;
    hits.into_iter()
        .filter(|h| {
            let size = h.text.chars().count() + h.source.chars().count();
            if used + size <= budget {
                used += size;
                true
            } else {
                false
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_terms_are_plain_distinct_words() {
        assert_eq!(
            query_terms("What time does the Office open? office \"hours\" OR NEAR(x)"),
            vec!["time", "office", "open", "hours", "near", "x"]
        );
        assert!(query_terms("the of and ?!").is_empty());
    }

    #[test]
    fn document_ids_depend_on_agent_scope_and_content() {
        let (ada, bob) = (AgentId::new("ada"), AgentId::new("bob"));
        let r1: RoomKey = "web:r1".parse().unwrap();
        let a = document_id(&ada, &Scope::AGENT, "h1");
        assert_eq!(a, document_id(&ada, &Scope::AGENT, "h1"));
        assert_ne!(a, document_id(&ada, &Scope::new(Some(&r1)), "h1"));
        assert_ne!(a, document_id(&bob, &Scope::AGENT, "h1"));
        assert_ne!(a, document_id(&ada, &Scope::AGENT, "h2"));
        assert_eq!(a.len(), 24);
    }

    #[test]
    fn the_budget_skips_what_does_not_fit() {
        let hit = |text: &str| Hit {
            chunk_id: text.into(),
            document_id: "d".into(),
            source: "s".into(),
            chunk: 0,
            text: text.into(),
            score: 1.0,
        };
        let kept = within_budget(vec![hit("aaaa"), hit("bbbbbbbbbb"), hit("cc")], 9);
        let texts: Vec<&str> = kept.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(texts, vec!["aaaa", "cc"]);
    }
}
