//! The indexes following the database. The keyword index (`index`) and the vector index
//! (`vectors`) are caches of the stored chunks: after a write of this process they take
//! the change at once, and [`Knowledge::follow`] polls for the changes other replicas (or
//! `troupe ingest`) made, so every replica's results follow the database.

use troupe_connectors::AgentId;

use super::{IndexStatus, Knowledge, KnowledgeError, VectorStatus};
use crate::storage::Scope;

impl Knowledge {
    /// See `KeywordIndex::staging_done`.
    #[cfg(test)]
    pub(crate) async fn index_staging_done(&self) {
        self.inner.index.staging_done().await
    }

    /// See `KeywordIndex::has_writer`.
    #[cfg(test)]
    pub(crate) fn index_has_writer(&self) -> bool {
        self.inner.index.has_writer()
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
        if let Some(vectors) = self.vectors() {
            vectors.sync(&self.inner.store).await?;
        }
        Ok(status)
    }

    /// How far the vector index has followed the database, and which path it takes
    /// (pgvector or in-process); `None` without an embedding model.
    pub fn vector_status(&self) -> Option<VectorStatus> {
        self.vectors().map(|v| v.status())
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
    pub(super) async fn after_write(&self) {
        if self.inner.index.is_built()
            && let Err(e) = self.sync_index().await
        {
            tracing::warn!(error = %e, "keyword index update failed; it will catch up");
        }
    }

    /// After this process stored document `document_id` as change `seq`: the index stages
    /// its chunks (committed by the next search or sync, `index`), and the vector index
    /// follows unless `follow` leaves that to the caller. Only once the index is built: a
    /// build reads everything anyway.
    pub(super) async fn after_add(
        &self,
        seq: i64,
        agent_id: &AgentId,
        document_id: String,
        scope: &Scope,
        chunks: (Vec<(String, String)>, Vec<String>),
        follow: FollowVectors,
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
        let moved = match follow {
            FollowVectors::EachDocument => self.index_moved().await.map(drop),
            FollowVectors::ByCaller => {
                let status = index.status();
                crate::metrics::knowledge_index(status.lag, status.rebuilding);
                Ok(())
            }
        };
        if let Err(e) = staged.and(moved) {
            tracing::warn!(error = %e, "keyword index update failed; it will catch up");
        }
    }

    /// The vector index takes the vectors stored since it last looked (after a page of the
    /// pipeline); a failure is logged, and the next sync retries.
    pub(super) async fn follow_vectors(&self) {
        if let Some(vectors) = self.vectors()
            && let Err(e) = vectors.sync(&self.inner.store).await
        {
            tracing::warn!(error = %e, "vector index update failed; it will catch up");
        }
    }
}

/// Whether storing a document brings the vector index up to date at once, or leaves that to
/// its caller: the pipeline (`pipeline`) stores many documents a page, and the vector index
/// has nothing to take from a document before its vectors are stored, so it syncs once a
/// page rather than once a document (five queries each, a measurable share of a small file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FollowVectors {
    EachDocument,
    ByCaller,
}
