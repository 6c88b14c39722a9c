//! Adding and removing documents. A document is read and chunked first, in the sandboxed
//! worker, storing nothing ([`Knowledge::prepare`]); prepared documents are then stored all
//! or nothing ([`Knowledge::store_all`]), and their chunks embedded when an embedding model
//! is set. Also here: deleting, re-embedding for a new model, and chat attachments, fetched
//! and ingested for their room. A character's entries are `character`'s.

use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use troupe_connectors::{AgentId, RoomKey};

use super::embedjob::EmbedJob;
use super::follow::FollowVectors;
use super::{Embedder, Input, Knowledge, KnowledgeError, Role, embed, extract};
use crate::storage::{NewDocument, NewEmbedding, Scope};

/// Chunks embedded per round when filling in vectors.
pub const EMBED_PAGE: usize = 256;

/// What [`Knowledge::ingest`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ingested {
    pub document_id: String,
    pub chunks: usize,
    /// The same content was already stored for this agent and scope; nothing changed.
    pub duplicate: bool,
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
    /// How many of its chunks have a vector of the model in use; `None` without one.
    pub vectors: Option<Vectors>,
    pub created_at_ms: i64,
}

/// A document's vectors: `done` of its `total` chunks have one. Fewer while the background
/// job embeds it (an upload answers before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Vectors {
    pub done: i64,
    pub total: i64,
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

impl Knowledge {
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
        let (bytes, hash) = self.size_and_hash(source, input).await?;
        let scope = Scope::new(room);
        let mut prepared = Prepared {
            id: document_id(agent_id, &scope, &hash),
            scope,
            source: source.to_string(),
            content_type: "",
            hash,
            bytes,
            chunks: Vec::new(),
            terms: Vec::new(),
            existing: None,
        };
        if let Some(existing) = self.inner.store.document(agent_id, &prepared.id).await? {
            prepared.existing = Some(usize::try_from(existing.chunk_count).unwrap_or(0));
            return Ok(prepared);
        }
        self.chunk_into(&mut prepared, content_type, input).await?;
        Ok(prepared)
    }

    /// The document's size, refused over the limit before anything is read, and the
    /// SHA-256 of its content.
    async fn size_and_hash(
        &self,
        source: &str,
        input: Input<'_>,
    ) -> Result<(u64, String), KnowledgeError> {
        let limit = self.inner.settings.max_file_bytes;
        let unreadable =
            |e: std::io::Error| KnowledgeError::Unreadable(format!("cannot read `{source}`: {e}"));
        let size = match input {
            Input::Bytes(b) => b.len() as u64,
            Input::File(path) => tokio::fs::metadata(path).await.map_err(unreadable)?.len(),
        };
        if size > limit as u64 {
            return Err(KnowledgeError::TooLarge {
                file: source.to_string(),
                bytes: usize::try_from(size).unwrap_or(usize::MAX),
                limit,
            });
        }
        let hash = match input {
            Input::Bytes(b) => hex::encode(Sha256::digest(b)),
            Input::File(path) => hash_file(path).await.map_err(unreadable)?,
        };
        Ok((size, hash))
    }

    /// Reads and chunks the document (in the sandboxed worker) into `prepared`, its chunks
    /// numbered after its id. A document without text is refused.
    async fn chunk_into(
        &self,
        prepared: &mut Prepared,
        content_type: Option<&str>,
        input: Input<'_>,
    ) -> Result<(), KnowledgeError> {
        let settings = &self.inner.settings;
        let chunked = self
            .inner
            .reader
            .read(
                &prepared.source,
                content_type,
                input,
                (settings.chunk_tokens, settings.chunk_overlap_tokens),
            )
            .await?;
        if chunked.chunks.is_empty() {
            return Err(KnowledgeError::Unreadable(format!(
                "`{}` holds no text to index",
                prepared.source
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
        Ok(())
    }

    /// Stores prepared documents, in order, and answers once they are stored: they are
    /// searchable by keywords at once, and their chunks are embedded afterwards by a
    /// background job of this process (see `embedjob`), so an upload never waits for its
    /// vectors. All or nothing: when one fails, the ones this call stored are deleted again
    /// before the error is returned (content that was stored before the call stays), and
    /// nothing is embedded.
    pub async fn store_all(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Vec<Prepared>,
    ) -> Result<Vec<Ingested>, KnowledgeError> {
        let mut done: Vec<Ingested> = Vec::with_capacity(prepared.len());
        let mut jobs: Vec<EmbedJob> = Vec::new();
        for p in prepared {
            match self.store_only(origin, agent_id, p).await {
                Ok((ingested, job)) => {
                    done.push(ingested);
                    jobs.extend(job);
                }
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
        self.embed_later(agent_id, jobs);
        Ok(done)
    }

    /// Stores one prepared document, and embeds it before answering when an embedding
    /// model is set (the CLI, a character's documents and chat attachments wait for their
    /// vectors; an upload does not, [`Knowledge::store_all`]).
    async fn store(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Prepared,
    ) -> Result<Ingested, KnowledgeError> {
        let (ingested, job) = self.store_only(origin, agent_id, prepared).await?;
        if let Some(job) = job {
            self.embed_now(agent_id, job).await;
        }
        Ok(ingested)
    }

    /// Stores one prepared document (searchable by keywords from now on) and embeds
    /// nothing: its chunks to embed, when an embedding model is set.
    pub(super) async fn store_only(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Prepared,
    ) -> Result<(Ingested, Option<EmbedJob>), KnowledgeError> {
        self.store_one(origin, agent_id, prepared, FollowVectors::EachDocument)
            .await
    }

    /// [`Knowledge::store_only`], the vector index following as `follow` says.
    pub(super) async fn store_one(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        prepared: Prepared,
        follow: FollowVectors,
    ) -> Result<(Ingested, Option<EmbedJob>), KnowledgeError> {
        if let Some(chunks) = prepared.existing {
            let ingested = Ingested {
                document_id: prepared.id,
                chunks,
                duplicate: true,
            };
            return Ok((ingested, None));
        }
        let Some(seq) = self.insert(origin, agent_id, &prepared).await? else {
            // Stored by a concurrent upload of the same content in the meantime.
            let ingested = Ingested {
                document_id: prepared.id,
                chunks: prepared.chunks.len(),
                duplicate: true,
            };
            return Ok((ingested, None));
        };
        let Prepared {
            id,
            scope,
            source,
            chunks,
            terms,
            ..
        } = prepared;
        // The chunks to embed are kept apart: the index takes its own in hand.
        let job = self.embedder().map(|_| EmbedJob {
            document_id: id.clone(),
            source: source.clone(),
            scope: scope.clone(),
            chunks: chunks.clone(),
        });
        // The index takes the chunks in hand (they are not read back from the database),
        // and lets them go as it indexes them.
        let count = chunks.len();
        self.after_add(seq, agent_id, id.clone(), &scope, (chunks, terms), follow)
            .await;
        let scope = scope
            .room()
            .map_or_else(|| "agent".to_string(), RoomKey::to_string);
        tracing::info!(agent = %agent_id, document = %id, %source, chunks = count,
            %scope, "document ingested");
        let ingested = Ingested {
            document_id: id,
            chunks: count,
            duplicate: false,
        };
        Ok((ingested, job))
    }

    /// Inserts the document and its chunks: the change's sequence number, or `None` when
    /// the same content is stored already.
    async fn insert(
        &self,
        origin: Origin,
        agent_id: &AgentId,
        p: &Prepared,
    ) -> Result<Option<i64>, KnowledgeError> {
        let inserted = self
            .inner
            .store
            .insert_document(&NewDocument {
                id: &p.id,
                agent_id,
                scope: &p.scope,
                source: &p.source,
                content_type: p.content_type,
                content_hash: &p.hash,
                origin: origin.as_str(),
                bytes: i64::try_from(p.bytes).unwrap_or(i64::MAX),
                chunks: &p.chunks,
            })
            .await?;
        Ok(inserted)
    }

    pub(super) async fn embed_chunks(
        &self,
        embedder: &Embedder,
        agent_id: &AgentId,
        scope: &Scope,
        chunks: &[(String, String)],
    ) -> Result<(), KnowledgeError> {
        let model = embedder.model_key();
        for page in chunks.chunks(EMBED_PAGE) {
            let page: Vec<_> = page
                .iter()
                .map(|(id, text)| (id.as_str(), scope, text.as_str()))
                .collect();
            self.embed_page(embedder, &model, agent_id, &page).await?;
        }
        Ok(())
    }

    /// Embeds one page of `agent_id`'s chunks, `(chunk id, scope, text)`, as passages, and
    /// stores their vectors under `model`: how many.
    pub(super) async fn embed_page(
        &self,
        embedder: &Embedder,
        model: &str,
        agent_id: &AgentId,
        page: &[(&str, &Scope, &str)],
    ) -> Result<usize, KnowledgeError> {
        let texts: Vec<&str> = page.iter().map(|(_, _, text)| *text).collect();
        let vectors = self
            .embed_for(embedder, agent_id, &texts, Role::Passage)
            .await
            .map_err(KnowledgeError::Embedding)?;
        let ids = page.iter().map(|(id, scope, _)| (*id, *scope));
        self.put_vectors(model, agent_id, ids, vectors).await
    }

    /// Stores `vectors` under `model`, one per `(chunk id, scope)` of `agent_id`: how many.
    pub(super) async fn put_vectors<'c>(
        &self,
        model: &str,
        agent_id: &AgentId,
        chunks: impl Iterator<Item = (&'c str, &'c Scope)>,
        vectors: Vec<Vec<f32>>,
    ) -> Result<usize, KnowledgeError> {
        let rows: Vec<NewEmbedding> = chunks
            .zip(vectors)
            .map(|((id, scope), v)| NewEmbedding {
                chunk_id: id.to_string(),
                agent_id: agent_id.clone(),
                scope: scope.clone(),
                vector: embed::to_bytes(&v),
            })
            .collect();
        self.inner.store.put_embeddings(model, &rows).await?;
        Ok(rows.len())
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
        // Sorted by document id, for a lookup per listed document.
        let embedded = match self.embedder() {
            Some(e) => {
                let mut counts = self
                    .inner
                    .store
                    .embedded_by_document(agent_id, &e.model_key())
                    .await?;
                counts.sort_unstable();
                Some(counts)
            }
            None => None,
        };
        let vectors_of = |id: &str, total: i64| {
            embedded.as_ref().map(|counts| Vectors {
                done: counts
                    .binary_search_by(|(doc, _)| doc.as_str().cmp(id))
                    .map_or(0, |i| counts[i].1),
                total,
            })
        };
        Ok(rows
            .into_iter()
            .map(|d| Document {
                vectors: vectors_of(&d.id, d.chunk_count),
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
        let Some(embedder) = self.embedder() else {
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
            // Every chunk of the page is `agent_id`'s: the page is read for it alone.
            let page: Vec<_> = page
                .iter()
                .map(|c| (c.id.as_str(), &c.scope, c.text.as_str()))
                .collect();
            done += self.embed_page(embedder, &model, agent_id, &page).await?;
            progress(done);
        }
    }

    /// Embeds every stored chunk (of any persona) that has no vector for the configured
    /// model yet, a page at a time, and lets the vector index take them: after the
    /// background pull turned vectors on. Unlike [`Knowledge::reembed`] nothing is dropped.
    /// Returns how many were embedded (0 without an embedder).
    pub async fn backfill(&self) -> Result<usize, KnowledgeError> {
        let Some(embedder) = self.embedder() else {
            return Ok(0);
        };
        let model = embedder.model_key();
        let (mut done, mut after) = (0, 0);
        loop {
            let page = self
                .inner
                .store
                .chunks_without_embedding(None, &model, after, EMBED_PAGE)
                .await?;
            let Some(last) = page.last() else {
                self.after_write().await;
                return Ok(done);
            };
            after = last.seq;
            // A page may hold several personas' chunks; each is embedded (and accounted)
            // for its own.
            let mut agents: Vec<&AgentId> = Vec::new();
            for c in &page {
                if !agents.contains(&&c.agent_id) {
                    agents.push(&c.agent_id);
                }
            }
            for agent in agents {
                let theirs: Vec<_> = page
                    .iter()
                    .filter(|c| &c.agent_id == agent)
                    .map(|c| (c.id.as_str(), &c.scope, c.text.as_str()))
                    .collect();
                done += self.embed_page(embedder, &model, agent, &theirs).await?;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
