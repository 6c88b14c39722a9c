//! Ingesting many files through the pipeline (`knowledge::pipeline`, issue 48), on SQLite
//! and on Postgres: it stores exactly what one file at a time stores, embeds across
//! documents, and skips a bad file while the rest go on.

#![allow(clippy::disallowed_methods)] // tests pick databases and the model from the environment

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::*;
use crate::config::{EmbeddingApi, EmbeddingSettings};
use crate::knowledge::{Embedder, Knowledge, KnowledgeError, KnowledgeSettings, Origin, Outcome};
use troupe_connectors::sync::Locked;

use super::test_support::{Kind, on_both_backends, run_with_store as run};

static AGENT: std::sync::LazyLock<AgentId> = std::sync::LazyLock::new(|| AgentId::new("ada"));

on_both_backends!(
    many_files_store_what_one_at_a_time_stores,
    a_bad_file_is_skipped_and_the_rest_stored,
);

/// Small distinct documents, one a file, and one file repeating the first (a duplicate).
fn small_files(dir: &std::path::Path, n: usize) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (0..n)
        .map(|i| {
            let path = dir.join(format!("abstract-{i:03}.txt"));
            let text = format!(
                "Abstract {i}. The ferry number {i} crosses the bay at dawn; its crew of {} \
                 checks the lamps, the ropes and the engine before {} passengers board.",
                i % 7 + 2,
                i * 13 % 101
            );
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect();
    let again = dir.join("zz-again.txt");
    std::fs::copy(&files[0], &again).unwrap();
    files.push(again);
    files
}

/// A stand-in embedding API (`knowledge_tests::fake_embedding_api`): a text's vector is a
/// function of its characters, so the same text always has the same vector. It records how
/// many inputs each call had; while `gate` is set, the first call is answered only once a
/// second one has come (or after a generous wait, so a broken pipeline fails rather than
/// hangs).
struct FakeApi {
    url: String,
    calls: Arc<Mutex<Vec<usize>>>,
    gate: Arc<std::sync::atomic::AtomicBool>,
}

async fn fake_api() -> FakeApi {
    let calls: Arc<Mutex<Vec<usize>>> = Arc::default();
    let gate: Arc<std::sync::atomic::AtomicBool> = Arc::default();
    let second = Arc::new(tokio::sync::Notify::new());
    let (seen, gated) = (calls.clone(), gate.clone());
    let vector = |text: &str| {
        let mut v = vec![0f32; 4];
        for (j, b) in text.bytes().enumerate() {
            v[j % 4] += f32::from(b) * (1.0 + (j % 7) as f32);
        }
        v
    };
    let on_call = move |inputs: usize| {
        let (seen, gated, second) = (seen.clone(), gated.clone(), second.clone());
        async move {
            let nth = {
                let mut seen = seen.locked();
                seen.push(inputs);
                seen.len()
            };
            if !gated.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if nth == 1 {
                let waited = std::time::Duration::from_secs(60);
                let _ = tokio::time::timeout(waited, second.notified()).await;
            } else {
                second.notify_one();
            }
        }
    };
    let url = super::knowledge_tests::fake_embedding_api(vector, on_call).await;
    FakeApi { url, calls, gate }
}

fn api_embedder(url: &str) -> Embedder {
    Embedder::open(&EmbeddingSettings {
        api: EmbeddingApi::OpenAi,
        url: url.to_string(),
        model: "fake".into(),
        ..EmbeddingSettings::default()
    })
    .unwrap()
}

/// Every file through the pipeline: the outcomes, in the order reported.
async fn ingest_batched(
    k: &Knowledge,
    agent: &AgentId,
    files: &[PathBuf],
) -> Vec<(PathBuf, Outcome)> {
    let mut outcomes = Vec::new();
    k.ingest_files(Origin::Cli, agent, None, files, |path, outcome| {
        outcomes.push((path.to_path_buf(), outcome))
    })
    .await
    .expect("no database failure");
    outcomes
}

/// Every file one at a time, as `troupe ingest` did before the pipeline.
async fn ingest_one_by_one(k: &Knowledge, agent: &AgentId, files: &[PathBuf]) {
    for path in files {
        let bytes = std::fs::read(path).unwrap();
        let name = path.display().to_string();
        k.ingest_from(Origin::Cli, agent, None, &name, None, &bytes)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// What `agent` has stored: per document (by source) its type, size, origin and chunks,
/// each chunk with its position, text and vector bytes under `model`.
async fn stored(
    store: &Store,
    agent: &AgentId,
    model: &str,
) -> Vec<(String, String, i64, String, Vec<(String, String, Vec<u8>)>)> {
    let mut docs = store.documents(agent, None).await.unwrap();
    docs.sort_by(|a, b| a.source.cmp(&b.source));
    let vectors: std::collections::HashMap<String, Vec<u8>> = store
        .embeddings(agent, &Scope::AGENT, model)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for d in docs {
        let chunks = store
            .chunks_of_documents(std::slice::from_ref(&d.id))
            .await
            .unwrap();
        assert_eq!(chunks.len() as i64, d.chunk_count, "{}", d.source);
        let chunks = chunks
            .into_iter()
            .map(|c| {
                let position = c.id.rsplit(':').next().unwrap_or_default().to_string();
                let vector = vectors.get(&c.id).cloned().unwrap_or_default();
                (position, c.text, vector)
            })
            .collect();
        out.push((d.source, d.content_type, d.bytes, d.origin, chunks));
    }
    out
}

async fn many_files_store_what_one_at_a_time_stores(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 30);
    let fake = fake_api().await;
    let k = Knowledge::new(
        store.clone(),
        KnowledgeSettings::default(),
        Some(api_embedder(&fake.url)),
    );
    let (one, many) = (AgentId::new("one"), AgentId::new("many"));
    store.upsert_agent(&one, "one").await.unwrap();
    store.upsert_agent(&many, "many").await.unwrap();

    ingest_one_by_one(&k, &one, &files).await;
    assert_eq!(
        fake.calls.locked().len(),
        30,
        "one call a document, file by file"
    );
    fake.calls.locked().clear();
    // The first call waits for the second: the pipeline stores on while the encoder works,
    // and gives it the rest of the files as one batch.
    fake.gate.store(true, std::sync::atomic::Ordering::SeqCst);
    let outcomes = ingest_batched(&k, &many, &files).await;

    let calls = fake.calls.locked().clone();
    assert_eq!(
        calls,
        [1, 29],
        "the first document alone (the encoder was idle), then every other one in one batch"
    );
    let reported: Vec<&PathBuf> = outcomes.iter().map(|(p, _)| p).collect();
    assert_eq!(
        reported,
        files.iter().collect::<Vec<_>>(),
        "reported in order"
    );
    let duplicates: Vec<bool> = outcomes
        .iter()
        .map(|(p, o)| {
            o.as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                .duplicate
        })
        .collect();
    assert_eq!(
        duplicates.iter().filter(|d| **d).count(),
        1,
        "{duplicates:?}"
    );
    assert!(duplicates[30], "the repeated file is the duplicate");

    let (by_one, by_many) = (
        stored(&store, &one, "fake").await,
        stored(&store, &many, "fake").await,
    );
    assert_eq!(by_one.len(), 30);
    assert!(
        by_many
            .iter()
            .all(|(_, _, _, _, chunks)| chunks.iter().all(|c| !c.2.is_empty())),
        "every chunk has its vector"
    );
    assert_eq!(by_one, by_many);
    // The keyword index has every document.
    let hits = k.search(&many, None, "ferry number 17", 3).await.unwrap();
    assert!(
        hits.iter().any(|h| h.source.ends_with("abstract-017.txt")),
        "{hits:#?}"
    );
}

async fn a_bad_file_is_skipped_and_the_rest_stored(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = small_files(dir.path(), 4);
    files.pop();
    let binary = dir.path().join("picture.png");
    std::fs::write(&binary, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let blank = dir.path().join("blank.txt");
    std::fs::write(&blank, "   \n").unwrap();
    let missing = dir.path().join("gone.txt");
    files.insert(1, binary);
    files.insert(3, blank);
    files.push(missing);
    let fake = fake_api().await;
    let k = Knowledge::new(
        store.clone(),
        KnowledgeSettings::default(),
        Some(api_embedder(&fake.url)),
    );
    let outcomes = ingest_batched(&k, &AGENT, &files).await;

    let kinds: Vec<&str> = outcomes
        .iter()
        .map(|(_, o)| match o {
            Ok(_) => "stored",
            Err(KnowledgeError::Unsupported(_)) => "unsupported",
            Err(KnowledgeError::Unreadable(_)) => "unreadable",
            Err(e) => panic!("{e}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "stored",
            "unsupported",
            "stored",
            "unreadable",
            "stored",
            "stored",
            "unreadable"
        ]
    );
    let docs = k.documents(&AGENT, None).await.unwrap();
    assert_eq!(docs.len(), 4);
    assert!(
        docs.iter()
            .all(|d| d.vectors.is_some_and(|v| v.done == v.total && v.total == 1)),
        "{docs:#?}"
    );
}

/// With the real MiniLM (`TROUPE_TEST_EMBEDDING_MODEL_DIR`): the vectors of files embedded
/// together are those of each file embedded alone (the encoder's batches are packed, so
/// only rounding may differ).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_model_gives_the_same_vectors_batched() {
    let Some(model_dir) = std::env::var("TROUPE_TEST_EMBEDDING_MODEL_DIR")
        .ok()
        .map(PathBuf::from)
        .filter(|d| d.join("model.safetensors").is_file())
    else {
        assert!(
            !troupe_e2e::env::in_ci(),
            "TROUPE_TEST_EMBEDDING_MODEL_DIR must name the MiniLM model under CI=true"
        );
        eprintln!("skipped: TROUPE_TEST_EMBEDDING_MODEL_DIR is not set");
        return;
    };
    let (_db, store) = super::test_support::sqlite_store().await;
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(dir.path(), 12);
    let embedder = Embedder::open(&EmbeddingSettings {
        api: EmbeddingApi::Local,
        model: "all-MiniLM-L6-v2".into(),
        model_dir: Some(model_dir),
        ..EmbeddingSettings::default()
    })
    .unwrap();
    let model = embedder.model_key();
    let k = Knowledge::new(store.clone(), KnowledgeSettings::default(), Some(embedder));
    let (one, many) = (AgentId::new("one"), AgentId::new("many"));
    ingest_one_by_one(&k, &one, &files).await;
    ingest_batched(&k, &many, &files).await;
    let (by_one, by_many) = (
        stored(&store, &one, &model).await,
        stored(&store, &many, &model).await,
    );
    assert_eq!(by_one.len(), 12);
    for (a, b) in by_one.iter().zip(&by_many) {
        assert_eq!(
            (&a.0, &a.1, a.2, &a.3, a.4.len()),
            (&b.0, &b.1, b.2, &b.3, b.4.len())
        );
        for (x, y) in a.4.iter().zip(&b.4) {
            assert_eq!((&x.0, &x.1), (&y.0, &y.1));
            let (x, y) = (floats(&x.2), floats(&y.2));
            assert_eq!(x.len(), 384, "{}", a.0);
            let cosine: f32 = x.iter().zip(&y).map(|(p, q)| p * q).sum();
            assert!(cosine >= 0.99999, "{}: cosine {cosine}", a.0);
        }
    }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
