//! The vector index (knowledge/vectors.rs) against real databases: recall against the exact
//! scan, scoping, deletes, following another writer, and a rebuild that loses nothing. Each
//! body runs on SQLite and on Postgres; on Postgres it runs once with the in-process index
//! (pgvector forced off, as `TROUPE_PGVECTOR=false` does) and once through pgvector's HNSW
//! when the server has the extension; `TROUPE_TEST_REQUIRE_PGVECTOR=1` makes a server
//! without it a failure instead of a note.

#![allow(clippy::disallowed_methods)] // tests read the environment

use std::sync::Arc;

use super::*;
use crate::bench::vectors::{Corpus, bytes};
use crate::knowledge::{VectorIndex, VectorMode, exact_nearest};

use super::test_support::{Kind, on_both_backends, run_with_store as run};

const MODEL: &str = "test-model";

on_both_backends!(
    approximate_search_recalls_what_the_exact_scan_finds,
    a_room_sees_its_own_and_agent_wide_vectors_never_another_rooms,
    deleted_documents_and_dropped_vectors_vanish,
    a_second_index_follows_writes_and_a_rebuild_loses_nothing,
);

/// How far each test vector strays from its topic's center.
const NOISE: f32 = 0.12;

fn agent() -> AgentId {
    AgentId::new("ada")
}

fn room(s: &str) -> Scope {
    Scope::new(Some(&s.parse::<RoomKey>().expect("a room key")))
}

/// Stores a document of `vectors.len()` chunks in `scope` with its vectors for [`MODEL`];
/// gives its chunk ids.
async fn store_document(
    store: &Store,
    id: &str,
    scope: &Scope,
    vectors: &[Vec<f32>],
) -> Vec<String> {
    let chunks: Vec<(String, String)> = (0..vectors.len())
        .map(|i| (format!("{id}:{i}"), format!("chunk {i} of {id}")))
        .collect();
    let agent = agent();
    assert!(
        store
            .insert_document(&NewDocument {
                id,
                agent_id: &agent,
                scope,
                source: id,
                content_type: "text/plain",
                content_hash: id,
                origin: "upload",
                bytes: 1,
                chunks: &chunks,
            })
            .await
            .expect("insert a document")
            .is_some()
    );
    let rows: Vec<NewEmbedding> = chunks
        .iter()
        .zip(vectors)
        .map(|((chunk, _), v)| NewEmbedding {
            chunk_id: chunk.clone(),
            agent_id: agent.clone(),
            scope: scope.clone(),
            vector: bytes(v),
        })
        .collect();
    store
        .put_embeddings(MODEL, &rows)
        .await
        .expect("store vectors");
    chunks.into_iter().map(|(id, _)| id).collect()
}

fn require_pgvector() -> bool {
    std::env::var("TROUPE_TEST_REQUIRE_PGVECTOR").is_ok_and(|v| v == "1")
}

/// The paths to check on this store: in-process always; pgvector on Postgres when the
/// server has it (required under `CI=true`).
async fn indexes(store: &Store) -> Vec<Arc<VectorIndex>> {
    let mut out = vec![VectorIndex::new(MODEL.into(), false)];
    if store.backend() == Backend::Postgres {
        let pg = VectorIndex::new(MODEL.into(), true);
        pg.sync(store).await.expect("first sync");
        if pg.mode() == VectorMode::Pgvector {
            out.push(pg);
        } else if require_pgvector() {
            panic!("TROUPE_TEST_REQUIRE_PGVECTOR: the Postgres server has no pgvector");
        } else {
            eprintln!("note: this Postgres server has no pgvector; only the fallback path ran");
        }
    }
    for index in &out {
        index.sync(store).await.expect("sync");
    }
    out
}

async fn ids(
    index: &VectorIndex,
    store: &Store,
    scope: &Scope,
    q: &[f32],
    k: usize,
) -> Vec<String> {
    index
        .nearest(store, &agent(), scope, q, k)
        .await
        .expect("nearest")
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

async fn approximate_search_recalls_what_the_exact_scan_finds(store: Store) {
    let mut corpus = Corpus::new(7, 64, 30, NOISE);
    let (docs, per_doc) = (30, 100);
    for d in 0..docs {
        let scope = if d % 5 == 0 {
            room("web:r1")
        } else {
            Scope::AGENT
        };
        let vectors: Vec<Vec<f32>> = (0..per_doc).map(|_| corpus.sample()).collect();
        store_document(&store, &format!("doc{d}"), &scope, &vectors).await;
    }
    for index in indexes(&store).await {
        assert_eq!(index.status().lag, 0);
        for scope in [Scope::AGENT, room("web:r1")] {
            let stored = store.embeddings(&agent(), &scope, MODEL).await.unwrap();
            let (mut found, mut wanted) = (0usize, 0usize);
            for _ in 0..40 {
                let q = corpus.sample();
                let exact: Vec<String> = exact_nearest(&q, &stored, 10)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect();
                let got = ids(&index, &store, &scope, &q, 10).await;
                assert!(got.len() <= 10);
                wanted += exact.len();
                found += exact.iter().filter(|id| got.contains(id)).count();
            }
            let recall = found as f64 / wanted as f64;
            assert!(
                recall >= 0.95,
                "{:?} recall@10 in {scope:?} is {recall:.3}",
                index.mode()
            );
        }
    }
}

async fn a_room_sees_its_own_and_agent_wide_vectors_never_another_rooms(store: Store) {
    let mut corpus = Corpus::new(11, 32, 4, NOISE);
    let shared: Vec<Vec<f32>> = (0..50).map(|_| corpus.sample()).collect();
    let mine: Vec<Vec<f32>> = (0..50).map(|_| corpus.sample()).collect();
    let theirs: Vec<Vec<f32>> = (0..50).map(|_| corpus.sample()).collect();
    let shared_ids = store_document(&store, "shared", &Scope::AGENT, &shared).await;
    let mine_ids = store_document(&store, "mine", &room("web:a"), &mine).await;
    let theirs_ids = store_document(&store, "theirs", &room("web:b"), &theirs).await;
    // Another agent's vector, identical to a query below, in the agent scope.
    let bob = AgentId::new("bob");
    store
        .insert_document(&NewDocument {
            id: "bobs",
            agent_id: &bob,
            scope: &Scope::AGENT,
            source: "bobs",
            content_type: "text/plain",
            content_hash: "bobs",
            origin: "upload",
            bytes: 1,
            chunks: &[("bobs:0".into(), "x".into())],
        })
        .await
        .unwrap();
    store
        .put_embeddings(
            MODEL,
            &[NewEmbedding {
                chunk_id: "bobs:0".into(),
                agent_id: bob,
                scope: Scope::AGENT,
                vector: bytes(&theirs[0]),
            }],
        )
        .await
        .unwrap();
    for index in indexes(&store).await {
        let mode = index.mode();
        // Asked with a vector of room b, from room a: room b's chunks are never candidates.
        for q in theirs.iter().take(10) {
            let got = ids(&index, &store, &room("web:a"), q, 60).await;
            assert!(!got.is_empty());
            assert!(
                got.iter()
                    .all(|id| shared_ids.contains(id) || mine_ids.contains(id)),
                "{mode:?}: room a saw {got:?}"
            );
            let agent_wide = ids(&index, &store, &Scope::AGENT, q, 60).await;
            assert!(
                agent_wide.iter().all(|id| shared_ids.contains(id)),
                "{mode:?}"
            );
        }
        // From room b, its own vector comes first.
        let got = ids(&index, &store, &room("web:b"), &theirs[0], 5).await;
        assert_eq!(got.first(), Some(&theirs_ids[0]), "{mode:?}");
        // Room a gets both its own and the agent's.
        let got = ids(&index, &store, &room("web:a"), &mine[3], 100).await;
        assert_eq!(got.first(), Some(&mine_ids[3]), "{mode:?}");
        assert!(got.iter().any(|id| shared_ids.contains(id)), "{mode:?}");
    }
}

async fn deleted_documents_and_dropped_vectors_vanish(store: Store) {
    let mut corpus = Corpus::new(13, 32, 3, NOISE);
    let gone: Vec<Vec<f32>> = (0..20).map(|_| corpus.sample()).collect();
    let kept: Vec<Vec<f32>> = (0..20).map(|_| corpus.sample()).collect();
    let gone_ids = store_document(&store, "gone", &Scope::AGENT, &gone).await;
    let kept_ids = store_document(&store, "kept", &Scope::AGENT, &kept).await;
    let indexes = indexes(&store).await;
    for index in &indexes {
        let got = ids(index, &store, &Scope::AGENT, &gone[0], 5).await;
        assert_eq!(got.first(), Some(&gone_ids[0]), "{:?}", index.mode());
    }
    assert!(store.delete_document(&agent(), "gone").await.unwrap());
    for index in &indexes {
        index.sync(&store).await.unwrap();
        let got = ids(index, &store, &Scope::AGENT, &gone[0], 40).await;
        assert_eq!(
            got.len(),
            20,
            "{:?}: only the kept document is left",
            index.mode()
        );
        assert!(
            got.iter().all(|id| kept_ids.contains(id)),
            "{:?}",
            index.mode()
        );
        assert_eq!(index.status().lag, 0);
    }
    // Dropping the agent's vectors (as re-embedding does first) empties every path.
    store.delete_embeddings(&agent(), MODEL).await.unwrap();
    for index in &indexes {
        index.sync(&store).await.unwrap();
        assert!(
            ids(index, &store, &Scope::AGENT, &kept[0], 10)
                .await
                .is_empty()
        );
    }
    // Stored again (re-embedded), with other vectors: found by the new ones.
    let fresh: Vec<Vec<f32>> = (0..20).map(|_| corpus.sample()).collect();
    let rows: Vec<NewEmbedding> = kept_ids
        .iter()
        .zip(&fresh)
        .map(|(id, v)| NewEmbedding {
            chunk_id: id.clone(),
            agent_id: agent(),
            scope: Scope::AGENT,
            vector: bytes(v),
        })
        .collect();
    store.put_embeddings(MODEL, &rows).await.unwrap();
    for index in &indexes {
        index.sync(&store).await.unwrap();
        let got = ids(index, &store, &Scope::AGENT, &fresh[7], 1).await;
        assert_eq!(got, vec![kept_ids[7].clone()], "{:?}", index.mode());
    }
}

async fn a_second_index_follows_writes_and_a_rebuild_loses_nothing(store: Store) {
    let mut corpus = Corpus::new(17, 32, 5, NOISE);
    let first: Vec<Vec<f32>> = (0..300).map(|_| corpus.sample()).collect();
    store_document(&store, "first", &Scope::AGENT, &first).await;
    let replicas = indexes(&store).await;
    // Written after the indexes were built (as through another replica): found once
    // they sync.
    let later: Vec<Vec<f32>> = (0..30).map(|_| corpus.sample()).collect();
    let later_ids = store_document(&store, "later", &room("web:r"), &later).await;
    for index in &replicas {
        if index.mode() == VectorMode::InProcess {
            // Not seen before it follows the database.
            let before = ids(index, &store, &room("web:r"), &later[4], 1).await;
            assert_ne!(before, vec![later_ids[4].clone()]);
        }
        index.sync(&store).await.unwrap();
        assert_eq!(index.status().lag, 0);
        let got = ids(index, &store, &room("web:r"), &later[4], 1).await;
        assert_eq!(got, vec![later_ids[4].clone()], "{:?}", index.mode());
    }
    // A new index (a restart, or a removed cache) rebuilds from the database alone and
    // answers as the one that followed.
    for index in &replicas {
        let fresh = VectorIndex::new(MODEL.into(), index.mode() == VectorMode::Pgvector);
        fresh.sync(&store).await.unwrap();
        assert_eq!(fresh.mode(), index.mode());
        if fresh.mode() == VectorMode::InProcess {
            assert_eq!(fresh.status().vectors, 330);
        }
        for q in later.iter().chain(first.iter().take(20)) {
            assert_eq!(
                ids(&fresh, &store, &room("web:r"), q, 10).await,
                ids(index, &store, &room("web:r"), q, 10).await,
                "{:?}",
                index.mode()
            );
        }
    }
}

/// Postgres with pgvector: the query plan goes through the HNSW index of the model's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvector_queries_use_the_hnsw_index() {
    run(Kind::Postgres, |store: Store| async move {
        let mut corpus = Corpus::new(19, 16, 2, NOISE);
        let v: Vec<Vec<f32>> = (0..10).map(|_| corpus.sample()).collect();
        store_document(&store, "d", &Scope::AGENT, &v).await;
        let index = VectorIndex::new(MODEL.into(), true);
        index.sync(&store).await.unwrap();
        if index.mode() != VectorMode::Pgvector {
            assert!(
                !require_pgvector(),
                "TROUPE_TEST_REQUIRE_PGVECTOR: the Postgres server has no pgvector"
            );
            eprintln!("note: no pgvector on this server; skipped");
            return;
        }
        let plan = store.pgvector_plan(MODEL, 16).await.unwrap();
        assert!(plan.contains("chunk_embeddings_hnsw_"), "{plan}");
        // Forced off, the same database is searched in process.
        let off = VectorIndex::new(MODEL.into(), false);
        off.sync(&store).await.unwrap();
        assert_eq!(off.mode(), VectorMode::InProcess);
        assert_eq!(off.status().vectors, 10);
    })
    .await
}
