//! Knowledge storage, one body per behaviour, each run on SQLite (a fresh file) and on
//! Postgres (a fresh database, when `TROUPE_TEST_DATABASE_URL` is set; required with
//! `CI=true`). The bodies go through [`Knowledge`] where the behaviour is its rule
//! (dedupe, scoping, reconciliation) and through the `Store` methods for the tables.

#![allow(clippy::disallowed_methods)] // tests pick databases from the environment

use super::*;
use crate::knowledge::{Knowledge, KnowledgeError, KnowledgeSettings, Origin};

static AGENT: std::sync::LazyLock<AgentId> = std::sync::LazyLock::new(|| AgentId::new("ada"));

/// A chunk's vector for `AGENT`, scoped to the room key `room` (or agent-wide).
fn embedding(chunk: &str, room: Option<&str>, vector: Vec<u8>) -> NewEmbedding {
    NewEmbedding {
        chunk_id: chunk.to_string(),
        agent_id: AGENT.clone(),
        scope: room.map_or(Scope::AGENT, scope),
        vector,
    }
}

/// One room's scope.
fn scope(room: &str) -> Scope {
    Scope::new(Some(&key_of(room)))
}

/// A room key, as stored.
fn key_of(s: &str) -> RoomKey {
    s.parse().expect("a room key")
}

use super::test_support::{Kind, on_both_backends, run_with_store as run};

on_both_backends!(
    search_sees_the_room_and_the_agent_never_other_rooms,
    identical_content_is_stored_once_per_scope,
    delete_removes_chunks_and_vectors,
    vectors_are_kept_per_model,
    ranking_prefers_the_better_match,
    chunks_are_inserted_in_batches,
    bad_input_is_refused_before_storage,
    text_attachments_become_the_rooms_knowledge,
    vectors_find_what_keywords_miss_and_reembed_rebuilds_them,
    replicas_follow_each_other_through_the_change_sequence,
    a_removed_index_directory_is_rebuilt_with_nothing_lost,
    an_index_without_documents_makes_no_writer,
);

fn knowledge(store: &Store) -> Knowledge {
    Knowledge::new(store.clone(), KnowledgeSettings::default(), None)
}

/// Ingests each `(agent, room key or agent-wide, source, text)`, in order.
async fn ingest_all(k: &Knowledge, documents: &[(&AgentId, Option<&str>, &str, &[u8])]) {
    for (agent, room, source, text) in documents {
        let room = room.map(key_of);
        k.ingest(agent, room.as_ref(), source, None, text)
            .await
            .unwrap_or_else(|e| panic!("ingesting {source}: {e}"));
    }
}

/// Whether an agent-wide search of `query` finds nothing.
async fn finds_nothing(k: &Knowledge, query: &str) -> bool {
    k.search(&AGENT, None, query, 5).await.unwrap().is_empty()
}

fn sources(hits: &[crate::knowledge::Hit]) -> Vec<&str> {
    let mut s: Vec<&str> = hits.iter().map(|h| h.source.as_str()).collect();
    s.sort();
    s
}

async fn search_sees_the_room_and_the_agent_never_other_rooms(store: Store) {
    let k = knowledge(&store);
    let text = |place: &str| format!("The ferry to {place} leaves from pier seven at noon.");
    let (everywhere, skye, mull, iona) =
        (text("everywhere"), text("Skye"), text("Mull"), text("Iona"));
    let bob = AgentId::new("bob");
    ingest_all(
        &k,
        &[
            (&AGENT, None, "all.txt", everywhere.as_bytes()),
            (&AGENT, Some("web:r1"), "r1.txt", skye.as_bytes()),
            (&AGENT, Some("web:r2"), "r2.txt", mull.as_bytes()),
            (&bob, None, "bob.txt", iona.as_bytes()),
        ],
    )
    .await;

    let in_r1 = k
        .search(&AGENT, Some(&key_of("web:r1")), "ferry pier", 10)
        .await
        .unwrap();
    assert_eq!(sources(&in_r1), vec!["all.txt", "r1.txt"]);
    let in_r2 = k
        .search(&AGENT, Some(&key_of("web:r2")), "ferry pier", 10)
        .await
        .unwrap();
    assert_eq!(sources(&in_r2), vec!["all.txt", "r2.txt"]);
    let agent_only = k.search(&AGENT, None, "ferry pier", 10).await.unwrap();
    assert_eq!(sources(&agent_only), vec!["all.txt"]);
    let bob = k
        .search(&AgentId::new("bob"), Some(&key_of("web:r1")), "ferry", 10)
        .await
        .unwrap();
    assert_eq!(sources(&bob), vec!["bob.txt"]);
    // Words that match nothing, and a query of only punctuation, find nothing.
    assert!(finds_nothing(&k, "zeppelin").await);
    assert!(finds_nothing(&k, "?! \" OR (").await);
    // Odd Unicode and query-language look-alikes are words, never syntax errors.
    for odd in [
        "² café ½ ﬁ",
        "-ferry NOT OR AND NEAR",
        "'pier' & | ! <-> :*",
    ] {
        k.search(&AGENT, None, odd, 10)
            .await
            .unwrap_or_else(|e| panic!("{odd:?}: {e}"));
    }

    let listed = k.documents(&AGENT, None).await.unwrap();
    assert_eq!(listed.len(), 3);
    let r1_only = k
        .documents(&AGENT, Some(Some(&key_of("web:r1"))))
        .await
        .unwrap();
    assert_eq!(r1_only.len(), 1);
    assert_eq!(r1_only[0].room_id, Some(key_of("web:r1")));
    let wide = k.documents(&AGENT, Some(None)).await.unwrap();
    assert_eq!(wide.len(), 1);
    assert_eq!(wide[0].room_id, None);
}

async fn identical_content_is_stored_once_per_scope(store: Store) {
    let k = knowledge(&store);
    let body = b"Sea glass is frosted by years of surf.";
    let first = k.ingest(&AGENT, None, "a.txt", None, body).await.unwrap();
    assert!(!first.duplicate);
    assert_eq!(first.chunks, 1);
    let again = k
        .ingest(&AGENT, None, "renamed.txt", None, body)
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.document_id, first.document_id);
    assert_eq!(again.chunks, 1);
    // Another scope is another document.
    let room = k
        .ingest(&AGENT, Some(&key_of("web:r1")), "a.txt", None, body)
        .await
        .unwrap();
    assert!(!room.duplicate);
    assert_ne!(room.document_id, first.document_id);
    assert_eq!(k.documents(&AGENT, None).await.unwrap().len(), 2);
    // Stable chunk ids: document id and index.
    let hits = k.search(&AGENT, None, "sea glass", 5).await.unwrap();
    assert_eq!(hits[0].chunk_id, format!("{}:0", first.document_id));
}

async fn delete_removes_chunks_and_vectors(store: Store) {
    let k = knowledge(&store);
    let tides = || {
        k.ingest(
            &AGENT,
            None,
            "tides.md",
            None,
            b"# Tides\n\nHigh tide is at six.",
        )
    };
    let doc = tides().await.unwrap();
    let chunk = format!("{}:0", doc.document_id);
    store
        .put_embeddings("m1", &[embedding(&chunk, None, vec![0, 0, 128, 63])])
        .await
        .unwrap();
    assert_eq!(
        store
            .embeddings(&AGENT, &Scope::AGENT, "m1")
            .await
            .unwrap()
            .len(),
        1
    );

    k.delete(&AGENT, &doc.document_id).await.unwrap();
    assert!(finds_nothing(&k, "tide").await);
    assert!(
        store
            .embeddings(&AGENT, &Scope::AGENT, "m1")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(k.documents(&AGENT, None).await.unwrap().is_empty());
    assert!(matches!(
        k.delete(&AGENT, &doc.document_id).await,
        Err(KnowledgeError::NotFound(_))
    ));
    // Another agent cannot delete it either.
    let again = k
        .ingest(&AGENT, None, "t.md", None, b"Low tide")
        .await
        .unwrap();
    assert!(matches!(
        k.delete(&AgentId::new("bob"), &again.document_id).await,
        Err(KnowledgeError::NotFound(_))
    ));
    // And the same content can come back after a delete.
    let back = tides().await.unwrap();
    assert!(!back.duplicate);
    assert_eq!(
        k.search(&AGENT, None, "tide six", 5).await.unwrap().len(),
        2
    );
}

async fn vectors_are_kept_per_model(store: Store) {
    let k = knowledge(&store);
    let a = k
        .ingest(&AGENT, None, "a.txt", None, b"alpha")
        .await
        .unwrap();
    let b = k
        .ingest(&AGENT, Some(&key_of("web:r9")), "b.txt", None, b"beta")
        .await
        .unwrap();
    let (ca, cb) = (
        format!("{}:0", a.document_id),
        format!("{}:0", b.document_id),
    );

    let missing = store
        .chunks_without_embedding(Some(&*AGENT), "m1", 0, 10)
        .await
        .unwrap();
    assert_eq!(missing.len(), 2);
    assert_eq!(missing[1].scope, scope("web:r9"));
    // Paging: after the first one's seq, only the second.
    let rest = store
        .chunks_without_embedding(Some(&*AGENT), "m1", missing[0].seq, 10)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);

    let v = |x: f32| x.to_le_bytes().to_vec();
    store
        .put_embeddings(
            "m1",
            &[
                embedding(&ca, None, v(1.0)),
                embedding(&cb, Some("web:r9"), v(2.0)),
            ],
        )
        .await
        .unwrap();
    // Replaced, not duplicated.
    store
        .put_embeddings("m1", &[embedding(&ca, None, v(3.0))])
        .await
        .unwrap();
    store
        .put_embeddings("m2", &[embedding(&ca, None, v(4.0))])
        .await
        .unwrap();

    let mut r9 = store
        .embeddings(&AGENT, &scope("web:r9"), "m1")
        .await
        .unwrap();
    r9.sort();
    assert_eq!(r9, vec![(ca.clone(), v(3.0)), (cb.clone(), v(2.0))]);
    assert_eq!(
        store
            .embeddings(&AGENT, &scope("web:other"), "m1")
            .await
            .unwrap(),
        vec![(ca.clone(), v(3.0))]
    );
    assert_eq!(
        store.embeddings(&AGENT, &Scope::AGENT, "m2").await.unwrap(),
        vec![(ca.clone(), v(4.0))]
    );
    assert!(
        store
            .chunks_without_embedding(Some(&*AGENT), "m1", 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.delete_embeddings(&AGENT, "m1").await.unwrap(), 2);
    assert_eq!(
        store
            .embeddings(&AGENT, &Scope::AGENT, "m2")
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn ranking_prefers_the_better_match(store: Store) {
    let k = knowledge(&store);
    ingest_all(
        &k,
        &[
            (
                &AGENT,
                None,
                "lamps.txt",
                b"The lamp room holds the lens. The lens turns once a minute; the lens is brass.",
            ),
            (
                &AGENT,
                None,
                "garden.txt",
                b"The garden has roses, thyme and one old lens grinder's bench.",
            ),
            (&AGENT, None, "boats.txt", b"Boats moor at the pier."),
        ],
    )
    .await;
    let hits = k
        .search(&AGENT, None, "How does the lens turn?", 10)
        .await
        .unwrap();
    assert_eq!(sources(&hits).len(), 2, "{hits:#?}");
    assert_eq!(hits[0].source, "lamps.txt", "{hits:#?}");
    assert!(hits[0].score > hits[1].score, "{hits:#?}");
    assert!(hits[0].text.contains("lens turns"));
    let one = k.search(&AGENT, None, "lens", 1).await.unwrap();
    assert_eq!(one.len(), 1);
}

async fn chunks_are_inserted_in_batches(store: Store) {
    let k = Knowledge::new(
        store.clone(),
        KnowledgeSettings {
            chunk_tokens: 16,
            chunk_overlap_tokens: 0,
            ..KnowledgeSettings::default()
        },
        None,
    );
    // More chunks than one insert statement holds.
    let text: String = (0..1200)
        .map(|i| format!("Entry {i} names the buoy number {i}.\n\n"))
        .collect();
    let doc = k
        .ingest_from(
            Origin::Cli,
            &AGENT,
            None,
            "buoys.txt",
            None,
            text.as_bytes(),
        )
        .await
        .unwrap();
    assert!(doc.chunks > 500, "{}", doc.chunks);
    let listed = k.documents(&AGENT, None).await.unwrap();
    assert_eq!(listed[0].chunks as usize, doc.chunks);
    assert_eq!(listed[0].origin, "cli");
    let hits = k.search(&AGENT, None, "1187", 3).await.unwrap();
    assert!(hits[0].text.contains("buoy number 1187"), "{hits:#?}");
    let last = format!("{}:{}", doc.document_id, doc.chunks - 1);
    assert_eq!(
        store
            .chunks_by_id(std::slice::from_ref(&last))
            .await
            .unwrap()[0]
            .chunk_id,
        last
    );
}

async fn bad_input_is_refused_before_storage(store: Store) {
    let k = Knowledge::new(
        store.clone(),
        KnowledgeSettings {
            max_file_bytes: 64,
            ..KnowledgeSettings::default()
        },
        None,
    );
    let err = k
        .ingest(&AGENT, None, "big.txt", None, &[b'a'; 65])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            KnowledgeError::TooLarge {
                bytes: 65,
                limit: 64,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("big.txt"), "{err}");
    let err = k
        .ingest(
            &AGENT,
            None,
            "x.png",
            Some("image/png"),
            b"\x89PNG\r\n\x1a\n\0\0",
        )
        .await
        .unwrap_err();
    assert!(matches!(err, KnowledgeError::Unsupported(_)), "{err}");
    let err = k
        .ingest(&AGENT, None, "e.txt", None, b"   ")
        .await
        .unwrap_err();
    assert!(matches!(err, KnowledgeError::Unreadable(_)), "{err}");
    assert!(k.documents(&AGENT, None).await.unwrap().is_empty());
}

async fn text_attachments_become_the_rooms_knowledge(store: Store) {
    use axum::routing::get;
    // A stand-in for a platform's file host.
    let files = axum::Router::new()
        .route(
            "/notes.txt",
            get(|| async { "The spare key hangs behind the tide clock." }),
        )
        .route("/huge.txt", get(|| async { "x".repeat(5_000) }))
        .route(
            "/gone.txt",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, "") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, files).await });

    let k = Knowledge::new(
        store.clone(),
        KnowledgeSettings {
            max_attachment_bytes: 1_000,
            // The files are served on loopback, which the fetch policy refuses by default.
            fetch: crate::config::FetchSettings {
                allow: crate::fetch::parse_allow("127.0.0.1").unwrap(),
                ..Default::default()
            },
            ..KnowledgeSettings::default()
        },
        None,
    );
    let attachment =
        |name: &str, mime: Option<&str>, url: Option<String>| troupe_connectors::Attachment {
            name: name.into(),
            mime: mime.map(str::to_string),
            size: None,
            url,
        };
    let attachments = vec![
        attachment(
            "notes.txt",
            Some("text/plain"),
            Some(format!("{base}/notes.txt")),
        ),
        // Over the cap while streaming: refused.
        attachment("huge.txt", None, Some(format!("{base}/huge.txt"))),
        // Not text: never fetched.
        attachment(
            "photo.jpg",
            Some("image/jpeg"),
            Some(format!("{base}/photo.jpg")),
        ),
        attachment("gone.txt", None, Some(format!("{base}/gone.txt"))),
        attachment("local.txt", None, None),
    ];
    let added = k
        .ingest_attachments(&AGENT, &key_of("discord:42"), &attachments)
        .await;
    assert_eq!(added, 1);
    let docs = k.documents(&AGENT, None).await.unwrap();
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!(docs[0].origin, "attachment");
    assert_eq!(docs[0].room_id, Some(key_of("discord:42")));
    let here = k
        .search(&AGENT, Some(&key_of("discord:42")), "spare key", 5)
        .await
        .unwrap();
    assert_eq!(sources(&here), vec!["notes.txt"]);
    let elsewhere = k
        .search(&AGENT, Some(&key_of("discord:7")), "spare key", 5)
        .await
        .unwrap();
    assert!(elsewhere.is_empty());
    // The same attachment again is known already.
    assert_eq!(
        k.ingest_attachments(&AGENT, &key_of("discord:42"), &attachments[..1])
            .await,
        0
    );
}

/// A stand-in embedding API (OpenAI's shape) on 127.0.0.1, for the knowledge tests here and
/// in `knowledge_batch_tests`: each input's vector is `vector(input)`, and `on_call` hears how
/// many inputs a call carried before it is answered (and may hold the answer back). Returns
/// its base URL.
pub(super) async fn fake_embedding_api<V, C, F>(vector: V, on_call: C) -> String
where
    V: Fn(&str) -> Vec<f32> + Clone + Send + Sync + 'static,
    C: Fn(usize) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send,
{
    use axum::Json;
    use axum::routing::post;
    use serde_json::{Value, json};
    let api = axum::Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let (vector, on_call) = (vector.clone(), on_call.clone());
            async move {
                let inputs: Vec<String> = body["input"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                on_call(inputs.len()).await;
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": vector(text)}))
                    .collect();
                Json(json!({"object": "list", "data": data, "model": body["model"]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api).await });
    url
}

/// The fake embedding API whose vectors know that a boat is a ship: dimension 0 counts
/// boat/ship/ferry, dimension 1 lamp/light, dimension 2 everything else. Also returns how
/// many texts it embedded.
async fn synonym_embeddings() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let vector = |text: &str| {
        let mut v = vec![0f32; 3];
        for w in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
            match w {
                "boat" | "boats" | "ship" | "ships" | "ferry" => v[0] += 1.0,
                "lamp" | "light" => v[1] += 1.0,
                "" => {}
                _ => v[2] += 0.1,
            }
        }
        v
    };
    let on_call = move |n: usize| {
        counter.fetch_add(n, Ordering::SeqCst);
        async {}
    };
    (fake_embedding_api(vector, on_call).await, calls)
}

async fn vectors_find_what_keywords_miss_and_reembed_rebuilds_them(store: Store) {
    use crate::config::{EmbeddingApi, EmbeddingSettings};
    use crate::knowledge::Embedder;
    use std::sync::atomic::Ordering;
    let (url, calls) = synonym_embeddings().await;
    let embedder = Embedder::open(&EmbeddingSettings {
        api: EmbeddingApi::OpenAi,
        url,
        model: "synonyms".into(),
        ..EmbeddingSettings::default()
    })
    .unwrap();
    let k = Knowledge::new(store.clone(), KnowledgeSettings::default(), Some(embedder));
    ingest_all(
        &k,
        &[
            (&AGENT, None, "boats.txt", b"Our boat sails at dawn."),
            (&AGENT, None, "lamps.txt", b"The lamp burns oil."),
            (&AGENT, Some("web:r2"), "r2.txt", b"A boat for room two."),
        ],
    )
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one vector per chunk");
    assert_eq!(
        store
            .embeddings(&AGENT, &Scope::AGENT, "synonyms")
            .await
            .unwrap()
            .len(),
        2
    );

    // "ship" is in no document: keywords find nothing, the vectors find the boat.
    let hits = k
        .search(&AGENT, Some(&key_of("web:r1")), "ship", 5)
        .await
        .unwrap();
    assert_eq!(
        hits.first().map(|h| h.source.as_str()),
        Some("boats.txt"),
        "{hits:#?}"
    );
    assert!(
        hits.iter().all(|h| h.source != "r2.txt"),
        "another room's vector leaked: {hits:#?}"
    );
    // Found by the vectors alone, it has the vector ranking's weight of the fused score
    // (fusion::DEFAULT: normalised scores, half each).
    assert!((hits[0].score - 0.5).abs() < 1e-9, "{hits:#?}");
    // Found by both rankings, a chunk scores higher than by one.
    let both = k.search(&AGENT, None, "boat", 5).await.unwrap();
    assert_eq!(both[0].source, "boats.txt");
    assert!(both[0].score > 0.5, "{both:#?}");

    let before = calls.load(Ordering::SeqCst);
    let mut seen = Vec::new();
    let done = k.reembed(&AGENT, |n| seen.push(n)).await.unwrap();
    assert_eq!(done, 3);
    assert_eq!(seen.last(), Some(&3));
    assert_eq!(calls.load(Ordering::SeqCst) - before, 3);
    assert_eq!(
        store
            .embeddings(&AGENT, &scope("web:r2"), "synonyms")
            .await
            .unwrap()
            .len(),
        3
    );

    // Without an embedder, reembed says what to configure.
    let plain = knowledge(&store);
    let err = plain.reembed(&AGENT, |_| {}).await.unwrap_err();
    assert!(err.to_string().contains("TROUPE_EMBEDDING_MODEL"), "{err}");
}

/// Two replicas on one database, each with its own keyword index: what one stores the
/// other finds once it has synced, and what one deletes is gone from the other's results at
/// once (the database is checked) and from its index after the next sync.
async fn replicas_follow_each_other_through_the_change_sequence(store: Store) {
    let (a, b) = (knowledge(&store), knowledge(&store));
    let text = b"The lighthouse keeper rows to the island every Tuesday.";
    // Both build their index (empty) before anything is stored.
    assert!(finds_nothing(&a, "lighthouse").await);
    assert!(finds_nothing(&b, "lighthouse").await);
    let doc = a
        .ingest(&AGENT, None, "keeper.txt", None, text)
        .await
        .unwrap();
    assert_eq!(
        sources(&a.search(&AGENT, None, "lighthouses", 5).await.unwrap()),
        ["keeper.txt"]
    );
    // B has not followed yet: its status says how far behind it is.
    assert!(finds_nothing(&b, "lighthouse").await);
    let head = store.last_knowledge_change().await.unwrap();
    let behind = b.index_status();
    assert!(behind.applied < head, "{behind:?} vs head {head}");
    let caught_up = b.sync_index().await.unwrap();
    assert_eq!((caught_up.applied, caught_up.lag), (head, 0));
    let found = b.search(&AGENT, None, "keepers island", 5).await.unwrap();
    assert_eq!(sources(&found), ["keeper.txt"]);
    assert_eq!(
        (found[0].document_id.as_str(), found[0].chunk),
        (doc.document_id.as_str(), 0)
    );

    b.delete(&AGENT, &doc.document_id).await.unwrap();
    assert!(finds_nothing(&b, "lighthouse").await);
    // A's index still holds the chunk, but the database does not: never shown.
    assert!(finds_nothing(&a, "lighthouse").await);
    let after = a.sync_index().await.unwrap();
    assert_eq!(
        (after.applied, after.lag),
        (store.last_knowledge_change().await.unwrap(), 0)
    );
    assert!(finds_nothing(&a, "lighthouse").await);
}

/// The index on disk resumes where it stopped, and a removed index directory is rebuilt
/// from the database with every document found again.
async fn a_removed_index_directory_is_rebuilt_with_nothing_lost(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let settings = KnowledgeSettings {
        index_dir: dir.path().join("index"),
        ..KnowledgeSettings::default()
    };
    let open = || Knowledge::with_index_dir(store.clone(), settings.clone(), None).unwrap();
    let k = open();
    k.sync_index().await.unwrap();
    for (name, text) in [
        ("a.txt", "Otters sleep holding hands."),
        ("b.txt", "Puffins nest in burrows on the cliffs."),
    ] {
        k.ingest(&AGENT, Some(&key_of("web:r1")), name, None, text.as_bytes())
            .await
            .unwrap();
        if name == "a.txt" {
            // A search commits the first upload: the index has a commit to resume from (an
            // index that never had one, as on a first start, is rebuilt instead).
            let room = key_of("web:r1");
            let hits = k.search(&AGENT, Some(&room), "otter", 5).await.unwrap();
            assert_eq!(sources(&hits), ["a.txt"]);
        }
    }
    let head = store.last_knowledge_change().await.unwrap();
    // Dropped with the second upload staged but not committed (commits are lazy): as a crash.
    // The second upload is still being staged in the background, holding the index's
    // writer (and its directory lock) until it is done; a crash would let go of both.
    k.index_staging_done().await;
    drop(k);
    // Reopened: the commit says how far it had got; the rest is replayed, nothing rebuilt.
    let k = open();
    let committed = k.index_status().applied;
    assert!((0..head).contains(&committed), "{committed} vs head {head}");
    let resumed = k.sync_index().await.unwrap();
    assert_eq!((resumed.applied, resumed.rebuilt_chunks), (head, 0));
    let room = key_of("web:r1");
    assert_eq!(
        k.search(&AGENT, Some(&room), "otter puffin", 5)
            .await
            .unwrap()
            .len(),
        2
    );
    drop(k);
    // Committed this time: reopened, nothing to replay.
    let k = open();
    assert_eq!(k.index_status().applied, head);
    drop(k);

    std::fs::remove_dir_all(&settings.index_dir).unwrap();
    let k = open();
    assert!(
        k.index_status().applied < 0,
        "an empty directory means: rebuild"
    );
    let status = k.sync_index().await.unwrap();
    assert_eq!((status.applied, status.rebuilt_chunks), (head, 2));
    let hits = k
        .search(&AGENT, Some(&room), "otter puffin", 5)
        .await
        .unwrap();
    assert_eq!(sources(&hits), ["a.txt", "b.txt"]);
    assert!(finds_nothing(&k, "otter puffin").await);
}

/// A first start (no documents) follows the database without writing the index or making
/// its writer, whose queue and threads cost 1.3 MiB (issue 48); the first upload makes it.
/// The directory is still claimed at open: a second process there is refused at once.
async fn an_index_without_documents_makes_no_writer(store: Store) {
    let dir = tempfile::tempdir().unwrap();
    let settings = KnowledgeSettings {
        index_dir: dir.path().join("index"),
        ..KnowledgeSettings::default()
    };
    let open = || Knowledge::with_index_dir(store.clone(), settings.clone(), None);
    let k = open().unwrap();
    let status = k.sync_index().await.unwrap();
    assert_eq!(
        (status.applied, status.lag, status.rebuilt_chunks),
        (store.last_knowledge_change().await.unwrap(), 0, 0)
    );
    assert!(!k.index_has_writer());
    let refused = open().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        refused.contains("in use by another troupe process"),
        "{refused}"
    );

    k.ingest(&AGENT, None, "a.txt", None, b"Otters sleep holding hands.")
        .await
        .unwrap();
    k.index_staging_done().await;
    assert!(k.index_has_writer());
    let hits = k.search(&AGENT, None, "otter", 5).await.unwrap();
    assert_eq!(sources(&hits), ["a.txt"]);
}
