//! The background pull (`TROUPE_MODELS_AUTO_PULL=true`): when the local model is asked for
//! and its directory is empty, `troupe run` pulls it from the hub while the gateway answers
//! with keywords, then turns vectors on and embeds the chunks stored meanwhile (and before).
//!
//! It lives here, not in `models`, because it switches this store's search; `models` knows
//! nothing of knowledge. A failed pull is one warning and search stays keywords only until
//! the next start (or `troupe models pull`).

use tokio_util::sync::CancellationToken;

use super::{Embedder, EmbeddingApi, Knowledge};

impl Knowledge {
    /// Whether the gateway should pull the local model in the background: it is the model
    /// configured, it is missing, no embedder is on, and the operator allowed the pull.
    pub fn wants_model_pull(&self) -> bool {
        let settings = &self.inner.settings;
        let Some(embedding) = &settings.embedding else {
            return false;
        };
        settings.hub.auto_pull
            && self.embedder().is_none()
            && embedding.api == EmbeddingApi::Local
            && embedding
                .model_dir
                .as_deref()
                .is_some_and(|d| !crate::models::installed(d))
    }

    /// Pulls the local model into its directory, then turns vectors on and backfills.
    /// Ends early at `stop` (what was downloaded stays for the next start to resume).
    pub async fn pull_model_in_background(self, stop: CancellationToken) {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = self.pull_then_enable() => {}
        }
    }

    async fn pull_then_enable(&self) {
        let settings = &self.inner.settings;
        let Some(embedding) = settings.embedding.as_ref() else {
            return;
        };
        let Some(dir) = embedding.model_dir.as_deref() else {
            return;
        };
        let model = crate::models::ModelName::for_dir(dir);
        tracing::info!(model = model.repo(), dir = %dir.display(),
            "no local embedding model: pulling it in the background (TROUPE_MODELS_AUTO_PULL); \
             knowledge search uses keywords until it is there");
        let progress = crate::models::Progress::log();
        if let Err(e) = crate::models::pull(&settings.hub, &model, "main", dir, &progress).await {
            tracing::warn!(error = %format!("{e:#}"),
                "the background pull of the embedding model failed; knowledge search stays \
                 keywords only (run `troupe models pull`, then restart)");
            return;
        }
        let embedder = match Embedder::open(embedding) {
            Ok(e) => e,
            Err(why) => {
                tracing::warn!(error = %why, "the pulled embedding model cannot be opened");
                return;
            }
        };
        let described = embedder.describe();
        if !self.enable_vectors(embedder) {
            return;
        }
        tracing::info!(model = %described, "knowledge search is hybrid (keywords and vectors); embedding the stored chunks");
        match self.backfill().await {
            Ok(n) => tracing::info!(chunks = n, "stored chunks embedded"),
            Err(e) => tracing::warn!(error = %e,
                "could not embed every stored chunk; `troupe ingest --reembed` adds the rest"),
        }
    }
}
