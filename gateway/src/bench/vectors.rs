//! `troupe bench --vectors N`: dense candidates through the vector index against the exact
//! scan it replaced, in one run on one database.
//!
//! It stores N generated unit vectors (`--vector-dims`, clustered like embeddings of texts
//! on a few hundred topics) as chunks of one persona, builds the index, then times the same
//! queries both ways: the exact scan (read every vector of the persona from the database and
//! score each, as searches did before the index) and the index (`VectorIndex::nearest`:
//! in process, or pgvector's HNSW on a Postgres `--database-url` that has the extension).
//! It reports p50/p99 of each, their ratio, and the index's recall@10 against the scan.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use troupe_connectors::AgentId;

use super::stats::{pct, rss_kib};
use crate::knowledge::{VectorIndex, exact_nearest};
use crate::storage::{NewDocument, NewEmbedding, Scope, Store};

pub(super) struct VectorBench {
    pub vectors: usize,
    pub dims: usize,
    pub queries: usize,
    pub database_url: Option<String>,
    pub pgvector: bool,
}

const MODEL: &str = "bench-vectors";
const PER_DOCUMENT: usize = 500;

/// splitmix64: the same seed gives the same numbers, so every run stores the same corpus
/// and a failing test can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit().max(1e-12), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// Clustered unit vectors, like embeddings of texts on a few topics: each vector is a
/// random topic's center plus noise. The vector index's tests (`storage/vector_tests.rs`)
/// draw theirs from it too.
pub(crate) struct Corpus {
    rng: Rng,
    centers: Vec<Vec<f32>>,
    noise: f32,
}

impl Corpus {
    /// `topics` random centers of `dims` dimensions, drawn from `seed`; `noise` is the
    /// spread of each coordinate around its center.
    pub(crate) fn new(seed: u64, dims: usize, topics: usize, noise: f32) -> Self {
        let mut rng = Rng(seed);
        let centers = (0..topics)
            .map(|_| normalized((0..dims).map(|_| rng.normal()).collect()))
            .collect();
        Corpus {
            rng,
            centers,
            noise,
        }
    }

    pub(crate) fn sample(&mut self) -> Vec<f32> {
        let topic = (self.rng.next() % self.centers.len() as u64) as usize;
        let v = self.centers[topic]
            .iter()
            .map(|c| c + self.noise * self.rng.normal())
            .collect();
        normalized(v)
    }
}

/// A vector as the store keeps it: each value's little-endian bytes.
pub(crate) fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) async fn run(bench: VectorBench) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let url = bench
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("vectors.db").display()));
    let store = Store::connect(&url).await?;
    let agent = AgentId::new(format!("vectors-{}", uuid::Uuid::new_v4().simple()));
    let dims = bench.dims.max(2);
    let mut corpus = Corpus::new(42, dims, 300, 0.08);

    let started = Instant::now();
    let docs = store_corpus(&store, &agent, &mut corpus, bench.vectors).await?;
    let stored = bench.vectors;
    println!(
        "stored {stored} vectors of {dims} dimensions in {:.1} s ({:?})",
        started.elapsed().as_secs_f64(),
        store.backend()
    );

    let index = VectorIndex::new(MODEL.into(), bench.pgvector);
    let started = Instant::now();
    index.sync(&store).await?;
    println!(
        "index built in {:.1} s: {:?}, {} vectors held in process, RSS {} MiB",
        started.elapsed().as_secs_f64(),
        index.mode(),
        index.status().vectors,
        rss_kib("VmRSS:") / 1024
    );

    let queries: Vec<Vec<f32>> = (0..bench.queries.max(1)).map(|_| corpus.sample()).collect();
    let timed = compare(&store, &index, &agent, &queries).await?;
    timed.print(stored, queries.len());
    println!("peak RSS {} MiB", rss_kib("VmHWM:") / 1024);
    if bench.database_url.is_some() {
        for d in 0..docs {
            store
                .delete_document(&agent, &format!("{agent}-{d}"))
                .await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Stores `count` vectors from `corpus` as chunks of `agent`, [`PER_DOCUMENT`] to a
/// document; gives the number of documents (`{agent}-0`, `{agent}-1`…).
async fn store_corpus(
    store: &Store,
    agent: &AgentId,
    corpus: &mut Corpus,
    count: usize,
) -> anyhow::Result<usize> {
    let mut stored = 0;
    let mut doc = 0;
    while stored < count {
        let n = PER_DOCUMENT.min(count - stored);
        let id = format!("{agent}-{doc}");
        let chunks: Vec<(String, String)> = (0..n)
            .map(|i| (format!("{id}:{i}"), format!("chunk {i}")))
            .collect();
        store
            .insert_document(&NewDocument {
                id: &id,
                agent_id: agent,
                scope: &Scope::AGENT,
                source: &id,
                content_type: "text/plain",
                content_hash: &id,
                origin: "cli",
                bytes: 0,
                chunks: &chunks,
            })
            .await?;
        let rows: Vec<NewEmbedding> = chunks
            .iter()
            .map(|(chunk, _)| NewEmbedding {
                chunk_id: chunk.clone(),
                agent_id: agent.clone(),
                scope: Scope::AGENT,
                vector: bytes(&corpus.sample()),
            })
            .collect();
        store.put_embeddings(MODEL, &rows).await?;
        stored += n;
        doc += 1;
    }
    Ok(doc)
}

/// The same queries timed both ways, and how many of the exact top 10 the index found.
struct Comparison {
    exact: Vec<Duration>,
    index: Vec<Duration>,
    found: usize,
    wanted: usize,
}

/// Times each query by the exact scan and through the index (the top 50 both ways),
/// alternating, so drift on a shared machine hits both alike.
async fn compare(
    store: &Store,
    index: &VectorIndex,
    agent: &AgentId,
    queries: &[Vec<f32>],
) -> anyhow::Result<Comparison> {
    let mut c = Comparison {
        exact: Vec::new(),
        index: Vec::new(),
        found: 0,
        wanted: 0,
    };
    // Warm both paths once.
    let _ = store.embeddings(agent, &Scope::AGENT, MODEL).await?;
    let _ = index
        .nearest(store, agent, &Scope::AGENT, &queries[0], 10)
        .await?;
    for q in queries {
        let t = Instant::now();
        let all = store.embeddings(agent, &Scope::AGENT, MODEL).await?;
        let exact = exact_nearest(q, &all, 50);
        c.exact.push(t.elapsed());
        drop(all);
        let t = Instant::now();
        let got = index.nearest(store, agent, &Scope::AGENT, q, 50).await?;
        c.index.push(t.elapsed());
        let top: Vec<&str> = got.iter().take(10).map(|(id, _)| id.as_str()).collect();
        c.wanted += exact.len().min(10);
        c.found += exact
            .iter()
            .take(10)
            .filter(|(id, _)| top.contains(&id.as_str()))
            .count();
    }
    c.exact.sort();
    c.index.sort();
    Ok(c)
}

impl Comparison {
    fn print(&self, stored: usize, queries: usize) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (e50, e99) = (pct(&self.exact, 0.5), pct(&self.exact, 0.99));
        let (i50, i99) = (pct(&self.index, 0.5), pct(&self.index, 0.99));
        println!(
            "dense query, top 50 of {stored} ({queries} queries):\n  exact scan  p50 {:.2} ms  p99 {:.2} ms\n  index       p50 {:.3} ms  p99 {:.3} ms\n  ratio (exact / index): p50 {:.0}x  p99 {:.0}x\n  recall@10 of the index against the exact scan: {:.3}",
            ms(e50),
            ms(e99),
            ms(i50),
            ms(i99),
            ms(e50) / ms(i50).max(1e-6),
            ms(e99) / ms(i99).max(1e-6),
            self.found as f64 / self.wanted.max(1) as f64,
        );
    }
}
