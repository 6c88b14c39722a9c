//! Embedding stored chunks off the request: an upload answers once its document is stored
//! (searchable by keywords at once) and its vectors follow here, in a background job.
//!
//! Uploads' documents wait in one queue per process, and one task embeds it in pages of
//! `EMBED_PAGE` chunks that cross documents and uploads (issue 48): a burst of small files
//! reaches the encoder in full batches, not one tiny batch a file, and the uploads that come
//! while it works fill the next page. The task ends when the queue is empty, and the next
//! upload starts another (so the queue holds no handle on the store when idle).
//!
//! One embedding job runs at a time in a process (a semaphore of one permit): embedding is
//! CPU-bound with the local model, and a burst of uploads must not take every core from
//! the turns. Jobs wait their turn in arrival order (tokio's semaphore is fair). The
//! replica that stored a document embeds it; a job cut short by a restart is finished by
//! [`Knowledge::resume_embedding`] at the next start, which embeds every chunk still
//! without a vector (one query when there is none). Progress is what the database holds:
//! `GET …/documents` counts each document's chunks with a vector.

use std::collections::VecDeque;

use troupe_connectors::AgentId;
use troupe_connectors::sync::Locked;

use super::{EMBED_PAGE, Knowledge};
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

/// Uploaded documents waiting for the background task, and whether it runs.
#[derive(Default)]
pub(super) struct Queued {
    jobs: VecDeque<(AgentId, EmbedJob)>,
    running: bool,
}

/// One page of the queue: up to a page's chunks, `(chunk id, scope, text)`, grouped by
/// persona (each persona's embedding is accounted to it).
type QueuedPage = Vec<(AgentId, Vec<(String, Scope, String)>)>;

impl Queued {
    /// The next `size` chunks at most, taken from the front (a document larger than what
    /// is left of the page is split, its rest first in the next); `None`, and not running
    /// any more, when the queue is empty.
    fn next_page(&mut self, size: usize) -> Option<QueuedPage> {
        let mut page: QueuedPage = Vec::new();
        let mut room = size.max(1);
        while room > 0
            && let Some((agent_id, job)) = self.jobs.front_mut()
        {
            let n = job.chunks.len().min(room);
            let taken = job
                .chunks
                .drain(..n)
                .map(|(id, text)| (id, job.scope.clone(), text));
            match page.iter_mut().find(|(a, _)| a == agent_id) {
                Some((_, chunks)) => chunks.extend(taken),
                None => page.push((agent_id.clone(), taken.collect())),
            }
            room -= n;
            if job.chunks.is_empty() {
                self.jobs.pop_front();
            }
        }
        self.running = !page.is_empty();
        self.running.then_some(page)
    }
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

    /// Queues `jobs` for the background task, after the jobs before them (starting it when
    /// none runs); their vectors join the vector index as each page is done.
    pub(super) fn embed_later(&self, agent_id: &AgentId, jobs: Vec<EmbedJob>) {
        if jobs.is_empty() {
            return;
        }
        let start = {
            let mut queue = self.inner.queued.locked();
            queue
                .jobs
                .extend(jobs.into_iter().map(|j| (agent_id.clone(), j)));
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            let knowledge = self.clone();
            tokio::spawn(async move { knowledge.drain_queue().await });
        }
    }

    /// The background task: pages from the queue embedded in turn until it is empty.
    async fn drain_queue(&self) {
        loop {
            // The lock is let go before anything is awaited.
            let next = self.inner.queued.locked().next_page(EMBED_PAGE);
            let Some(page) = next else { return };
            let Some(embedder) = self.embedder() else {
                continue;
            };
            // Never closed: the semaphore lives as long as the store.
            let Ok(turn) = self.inner.embedding.acquire().await else {
                return;
            };
            let model = embedder.model_key();
            for (agent_id, chunks) in &page {
                let chunks: Vec<_> = chunks
                    .iter()
                    .map(|(id, scope, text)| (id.as_str(), scope, text.as_str()))
                    .collect();
                if let Err(e) = self.embed_page(embedder, &model, agent_id, &chunks).await {
                    let first = chunks.first().map_or("", |c| c.0);
                    tracing::warn!(agent = %agent_id, chunks = chunks.len(), first_chunk = %first, error = %e,
                        "could not embed uploaded chunks; they are searchable by keywords only until the next start or `troupe ingest --reembed`");
                }
            }
            drop(turn);
            self.after_write().await;
        }
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
