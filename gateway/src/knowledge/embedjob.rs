//! Embedding stored chunks off the request: an upload answers once its document is stored
//! (searchable by keywords at once) and its vectors follow here, in a background job.
//!
//! One embedding job runs at a time in a process (a semaphore of one permit): embedding is
//! CPU-bound with the local model, and a burst of uploads must not take every core from
//! the turns. Jobs wait their turn in arrival order (tokio's semaphore is fair). The
//! replica that stored a document embeds it; a job cut short by a restart is finished by
//! [`Knowledge::resume_embedding`] at the next start, which embeds every chunk still
//! without a vector (one query when there is none). Progress is what the database holds:
//! `GET …/documents` counts each document's chunks with a vector.

use troupe_connectors::AgentId;

use super::Knowledge;
use crate::storage::Scope;

/// One stored document's chunks, to embed.
#[derive(Debug)]
pub(super) struct EmbedJob {
    pub(super) document_id: String,
    pub(super) source: String,
    pub(super) scope: Scope,
    /// `(chunk id, text)`.
    pub(super) chunks: Vec<(String, String)>,
}

impl Knowledge {
    /// Embeds `job`'s chunks now, in this process's turn. A failure leaves the document
    /// searchable by keywords: it is logged, and the next start (or `troupe ingest
    /// --reembed`) embeds what is missing.
    pub(super) async fn embed_now(&self, agent_id: &AgentId, job: EmbedJob) {
        let Some(embedder) = self.embedder() else {
            return;
        };
        // Never closed: the semaphore lives as long as the store.
        let Ok(_turn) = self.inner.embedding.acquire().await else {
            return;
        };
        if let Err(e) = self
            .embed_chunks(embedder, agent_id, &job.scope, &job.chunks)
            .await
        {
            tracing::warn!(document = %job.document_id, source = %job.source, error = %e,
                "could not embed the document; it is searchable by keywords only until the next start or `troupe ingest --reembed`");
        }
    }

    /// Embeds `jobs` in a background task, after the jobs before them; their vectors
    /// join the vector index as each document is done.
    pub(super) fn embed_later(&self, agent_id: &AgentId, jobs: Vec<EmbedJob>) {
        if jobs.is_empty() {
            return;
        }
        let (knowledge, agent_id) = (self.clone(), agent_id.clone());
        tokio::spawn(async move {
            for job in jobs {
                knowledge.embed_now(&agent_id, job).await;
                knowledge.after_write().await;
            }
        });
    }

    /// At start: embeds, in the background and in turn with uploads, every stored chunk
    /// that has no vector of the model in use (an upload whose vectors a restart cut
    /// short). Nothing without an embedding model.
    pub fn resume_embedding(&self) {
        if self.embedder().is_none() {
            return;
        }
        let knowledge = self.clone();
        tokio::spawn(async move {
            let Ok(_turn) = knowledge.inner.embedding.acquire().await else {
                return;
            };
            match knowledge.backfill().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    chunks = n,
                    "embedded the chunks a previous run left without vectors"
                ),
                Err(e) => tracing::warn!(error = %e,
                    "could not embed every chunk without a vector; `troupe ingest --reembed` adds the rest"),
            }
        });
    }
}
