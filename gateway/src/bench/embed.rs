//! `troupe bench --embed-texts FILE`: the configured embedding model's throughput on the
//! texts of FILE (one a line), embedded as ingestion embeds stored chunks: pages of
//! `EMBED_PAGE` passages through `Embedder::embed`, one page after the other.
//!
//! It loads the model first (a few texts, not timed), then times `--embed-rounds` passes
//! over every text and prints one JSON line a round (`engine`, `texts`, `tokens`,
//! `seconds`, `chunksPerSec`), for `bench/embeddings.py`, which runs ONNX Runtime on the
//! same texts alternated with it and prints the side-by-side table (docs/benchmarks.md).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use crate::config::Config;
use crate::knowledge::{EMBED_PAGE, Embedder, Role};

pub async fn run(config: &Config, file: &Path, rounds: usize) -> anyhow::Result<ExitCode> {
    let Some(settings) = &config.knowledge.embedding else {
        anyhow::bail!(
            "--embed-texts needs an embedding model: TROUPE_EMBEDDING_PROVIDER=local and \
             TROUPE_EMBEDDING_MODEL_DIR (see docs/knowledge.md)"
        );
    };
    let embedder = Embedder::open(settings).map_err(anyhow::Error::msg)?;
    let raw = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    let texts: Vec<&str> = raw.lines().filter(|l| !l.trim().is_empty()).collect();
    if texts.is_empty() {
        anyhow::bail!("{} holds no text (one a line)", file.display());
    }
    // Loads the weights: not part of what is measured.
    let warm: Vec<&str> = texts.iter().take(8).copied().collect();
    embedder
        .embed(Role::Passage, &warm)
        .await
        .map_err(anyhow::Error::msg)?;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let mut tokens = 0u64;
        for page in texts.chunks(EMBED_PAGE) {
            let (_, used) = embedder
                .embed_counted(Role::Passage, page)
                .await
                .map_err(anyhow::Error::msg)?;
            tokens += used.unwrap_or(0);
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{}",
            serde_json::json!({
                "engine": embedder.describe(),
                "texts": texts.len(),
                "tokens": tokens,
                "seconds": seconds,
                "chunksPerSec": texts.len() as f64 / seconds,
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}
